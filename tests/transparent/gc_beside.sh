# Issue 12, item 4: casctl gc runs while `crest run --every` checkpoints a
# job: every checkpoint and every gc succeeds, the job finishes with exit 0
# and its output equals an uninterrupted run's, gc expired snapshots along
# the way, and afterwards the store verifies and every snapshot left reads
# back whole (crest get re-checks each chunk).
source "$(dirname "$0")/lib.sh"
need_root
cd "$T"
"$WORKLOAD" --mib 16 --interval-ms 0 --steps 60 >ref.out 2>&1 || fail "the reference run failed"
# gc_while PID PATTERN LOG STORE GC_ARGS...: casctl gc, again and again
# while PID runs, once LOG has two lines matching PATTERN (two snapshots);
# sets runs and expired. Fails at the first gc that fails.
gc_while() {
	local pid=$1 pat=$2 log=$3 store=$4 out
	shift 4
	runs=0 expired=0
	while kill -0 "$pid" 2>/dev/null; do
		if [ "$(grep -c "$pat" "$log" || true)" -ge 2 ]; then
			out=$("$CASCTL" --store "$store" --json gc "$@") || return 1
			expired=$((expired + $(echo "$out" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["expired"]))')))
			runs=$((runs + 1))
		fi
		sleep 0.7
	done
}

: >run.err
"$CREST" --store "$S" run --every 1s -- "$WORKLOAD" --mib 16 --interval-ms 150 --steps 60 \
	</dev/null >job.out 2>run.err &
RUN=$!
PIDS+=("$RUN")
gc_while "$RUN" '^crest: snapshot' run.err "$S" --keep-last 2 --rewrite-below 1.0 || fail "gc beside crest run failed"
rc=0
wait "$RUN" || rc=$?
[ "$rc" -eq 0 ] || { cat run.err >&2; fail "crest run exited $rc"; }
grep -qi "fail" run.err && { cat run.err >&2; fail "a checkpoint failed beside gc"; }
cmp -s job.out ref.out || fail "the job's output differs from an uninterrupted run's"
taken=$(grep -c '^crest: snapshot' run.err || true)
[ "$runs" -ge 3 ] && [ "$expired" -ge 1 ] || fail "gc ran $runs times and expired $expired snapshots: the test proves nothing"
echo "ok: $taken checkpoints, $runs gc runs beside them, $expired snapshots expired"
"$CASCTL" --store "$S" verify >/dev/null || fail "verify after gc"
for id in $("$CREST" --store "$S" ls --json | python3 -c 'import json,sys; [print(s["snapshot"]) for s in json.load(sys.stdin)]'); do
	rm -rf "$T/get"
	"$CREST" --store "$S" --quiet get "$id" "$T/get" || fail "snapshot ${id:0:12} does not read back"
done

# The same beside `crest checkpoint --every` of a job started any other way:
# it lets the store go between checkpoints, so gc gets its turn.
S2=$T/store2
start_job job2.out --mib 16 --interval-ms 150 --steps 60
"$CREST" --store "$S2" checkpoint --pid "$JOB" --every 1s >ck.out 2>ck.err &
CK=$!
PIDS+=("$CK")
CREST_LOCK_TIMEOUT=30 gc_while "$CK" '^snapshot' ck.out "$S2" --keep-last 2 || fail "gc beside checkpoint --every failed"
rc=0
wait "$CK" || rc=$?
[ "$rc" -eq 0 ] || { cat ck.err ck.out >&2; fail "checkpoint --every exited $rc beside gc"; }
[ "$runs" -ge 3 ] && [ "$expired" -ge 1 ] || fail "gc ran $runs times beside checkpoint --every and expired $expired"
cmp -s job2.out ref.out || fail "the second job's output differs from an uninterrupted run's"
"$CASCTL" --store "$S2" verify >/dev/null || fail "verify after gc beside checkpoint --every"
echo "ok: checkpoint --every took $(grep -c '^snapshot' ck.out) snapshots beside $runs gc runs ($expired expired)"
echo PASS
