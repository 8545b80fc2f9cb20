# Issue 12: `casctl gc` beside a libcrest job. gc_session checkpoints two
# host regions every 200 ms while casctl gc --keep-last 2 runs on the same
# store again and again (every other run rewriting packs). Both must
# succeed, gc must have run at least twice and expired snapshots while the
# job was still running (a session that held the store throughout would
# let it in only after crest_close), the store must verify, and every kept
# snapshot must restore bit-exact (gc_session check). The session steps
# aside between checkpoints because gc waits for the lock (STORE/lock.wants),
# with no setting. Once in the run, a writer that holds the lock for HOLD s
# (flock, announced the way crest's writers announce themselves): the
# checkpoints meanwhile are held in memory and ingested after, so no stall
# may come near it. The stall of crest_checkpoint is printed with and
# without gc beside it; the run without gc lets the store go after every
# checkpoint (CREST_STORE_IDLE_MS=0), so each is held and ingested by the
# keeper, and its snapshots must restore too.
#   gc_session.sh GC_SESSION CASCTL SCRATCH [SEED]
set -euo pipefail
# Stores here are made on first use (crest init and its refusals: tests/store/init.sh).
export CREST_INIT=1
PROG=$1 CASCTL=$2 T=$3 SEED=${4:-${SEED:-$(date +%s%N | cut -c10-18)}}
fail() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$T" && mkdir -p "$T"
ROUNDS=16 PERIOD=200 HOLD=3 DEADLINE=120

CREST_STORE_IDLE_MS=0 "$PROG" run "$T/alone" 8 "$PERIOD" "$T/alone.log" "$SEED" | sed 's/^/without gc: /'
"$PROG" check "$T/alone" "$T/alone.log" | sed 's/^/without gc: /'
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "the snapshots held and ingested by the keeper do not restore (seed $SEED)"

# The session runs ROUNDS checkpoints and then on until the loop below has
# seen what it waits for (UNTIL file) or DEADLINE s have gone by: how many
# gc runs fit beside it is then the machine's business, not the verdict's
# (a slow machine under ASan fit only one into 16 rounds).
"$PROG" run "$T/store" "$ROUNDS" "$PERIOD" "$T/run.log" "$SEED" "$T/enough" >"$T/run.out" 2>&1 &
JOB=$!
trap 'kill -9 $JOB 2>/dev/null || true' EXIT
runs=0 during=0 expired=0 i=0 held=0 start=$SECONDS
while kill -0 "$JOB" 2>/dev/null; do
	if { [ "$held" = 1 ] && [ "$during" -ge 2 ] && [ "$expired" -ge 1 ]; } ||
		[ $((SECONDS - start)) -ge "$DEADLINE" ]; then
		touch "$T/enough"
	fi
	if [ "$held" = 0 ] && [ -f "$T/run.log" ] && [ "$(wc -l <"$T/run.log")" -ge 4 ]; then
		# Announced (lock.wants shared while it waits), then HOLD s with the lock.
		flock -s "$T/store/lock.wants" flock "$T/store/lock" sleep "$HOLD" ||
			fail "could not take the lock from the session (seed $SEED)"
		held=1
		echo "a writer held the store for $HOLD s while the session ran"
	fi
	if [ -f "$T/run.log" ] && [ "$(wc -l <"$T/run.log")" -ge 2 ]; then
		extra=()
		[ $((i % 2)) -eq 1 ] && extra=(--rewrite-below 1.0)
		i=$((i + 1))
		out=$(CREST_LOCK_TIMEOUT=20 "$CASCTL" --store "$T/store" --json gc --keep-last 2 "${extra[@]}") ||
			fail "casctl gc failed beside the session (seed $SEED)"
		runs=$((runs + 1))
		if kill -0 "$JOB" 2>/dev/null; then
			during=$((during + 1))
			expired=$((expired + $(echo "$out" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["expired"]))')))
		fi
	fi
	sleep 0.1
done
rc=0
wait "$JOB" || rc=$?
trap - EXIT
sed 's/^/with gc: /' "$T/run.out"
[ "$rc" -eq 0 ] || fail "the session exited $rc beside gc (seed $SEED)"
echo "gc: $runs runs, $during of them while the session ran, expiring $expired snapshots"
[ "$during" -ge 2 ] && [ "$expired" -ge 1 ] ||
	fail "gc completed $during times during the session (expired $expired) in $((SECONDS - start)) s: it never got the store while the session ran (seed $SEED)"
[ "$held" = 1 ] || fail "the session ended before the lock could be held"
max=$(sed -n 's/.*stall median .* ms, max \([0-9.]*\) ms.*/\1/p' "$T/run.out")
[ -n "$max" ] || fail "no stall figure from the session"
python3 -c "import sys; sys.exit(0 if float('$max') < $HOLD * 1000 / 2 else 1)" ||
	fail "a checkpoint stalled $max ms while another writer held the store for $HOLD s: it waited for the store instead of being held (seed $SEED)"
"$CASCTL" --store "$T/store" verify >/dev/null || fail "casctl verify after gc (seed $SEED)"
"$PROG" check "$T/store" "$T/run.log" || fail "the kept snapshots do not restore (seed $SEED)"

# A session that stepped aside and then cannot open its store again (here
# its lock file became a directory) retries a poll later, not at once: it
# burned 92% of a core doing that before.
S2=$T/gone
"$PROG" run "$S2" 2 6000 "$T/gone.log" "$SEED" >"$T/gone.out" 2>&1 &
JOB=$!
trap 'kill -9 $JOB 2>/dev/null || true' EXIT
until [ -s "$T/gone.log" ]; do sleep 0.05; done
flock -s "$S2/lock.wants" flock "$S2/lock" sh -c "rm '$S2/lock' && mkdir '$S2/lock'"
sleep 0.3
t0=$(awk '{ print $14 + $15 }' /proc/$JOB/stat)
sleep 2
t1=$(awk '{ print $14 + $15 }' /proc/$JOB/stat)
kill -9 "$JOB" 2>/dev/null; wait "$JOB" 2>/dev/null || true
trap - EXIT
echo "store gone after stepping aside: $((t1 - t0)) CPU ticks in 2 s"
[ $((t1 - t0)) -lt 20 ] || fail "the session spun ($((t1 - t0)) ticks in 2 s) while its store could not be opened again"
rm -rf "$T"
echo PASS
