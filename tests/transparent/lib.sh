# Shared by the transparent tests: a private store and scratch directory,
# cleanup of every process a test started, and small assertions.
set -euo pipefail
# Stores here are made on first use (crest init and its refusals: tests/store/init.sh).
export CREST_INIT=1
T=$(mktemp -d /tmp/crest-tp-XXXXXX)
S=$T/store
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
need_root() { [ "$(id -u)" = 0 ] || fail "these tests need root (CRIU)"; }
# Lines in a file.
lines() { [ -f "$1" ] && wc -l <"$1" || echo 0; }
# Waits until file $1 has at least $2 lines (up to $3 seconds, default 60).
wait_lines() {
	local deadline=$((SECONDS + ${3:-60}))
	while [ "$(lines "$1")" -lt "$2" ]; do
		[ $SECONDS -lt $deadline ] || fail "$1 did not reach $2 lines"
		sleep 0.05
	done
}
# Starts the sample job as its own session, output to $1, more args after.
start_job() {
	local out=$1; shift
	setsid "$WORKLOAD" "$@" </dev/null >"$out" 2>&1 &
	JOB=$!
	PIDS+=("$JOB")
}
# Kills a pid and waits until it is gone from /proc (reaped by whoever).
kill_gone() {
	kill -9 "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
	local deadline=$((SECONDS + 10))
	while [ -e /proc/"$1" ]; do
		[ $SECONDS -lt $deadline ] || fail "pid $1 did not go away"
		sleep 0.05
	done
}
# same_as_uninterrupted LOG OUT BEFORE MIB INTERVAL_MS: the restored
# sample job (crest-workload --mib MIB --interval-ms INTERVAL_MS --log LOG,
# stdout OUT, LOG BEFORE lines long when the restore began) writes 2 more
# lines and is killed; LOG must then be an uninterrupted run's, line for
# line, and OUT its first lines. Sets N to the lines compared.
same_as_uninterrupted() {
	local log=$1 out=$2 before=$3 mib=$4 ms=$5 new
	new=$(pgrep -f "crest-workload --mib $mib --interval-ms $ms --log $log" | head -n1 || true)
	[ -n "$new" ] && PIDS+=("$new")
	wait_lines "$log" $((before + 2))
	kill -9 "$new" 2>/dev/null || true
	N=$(lines "$log")
	"$WORKLOAD" --mib "$mib" --interval-ms 0 --steps "$N" >"$T/ref.txt"
	cmp "$log" "$T/ref.txt" || fail "the restored job's log is not the uninterrupted run's"
	head -n "$N" "$T/ref.txt" | cmp - <(head -n "$N" "$out") || fail "stdout differs"
}
# small_store: ./small, a tmpfs of 8 MiB, too small for a job's snapshot
# (unmounted on exit); the test is skipped where none can be mounted.
small_store() {
	mkdir small
	mount -t tmpfs -o size=8m tmpfs small 2>/dev/null || { echo "SKIP: cannot mount a small tmpfs here"; exit 77; }
	trap 'umount "$T/small" 2>/dev/null; cleanup' EXIT
}
# wait_run ERR [N]: waits up to 30 s until the crest run whose stderr is
# ERR has taken N snapshots (1 unless told); sets INIT, the job's pid
# (added to PIDS), and SNAP, its first snapshot's id.
wait_run() {
	local err=$1 n=${2:-1} deadline=$((SECONDS + 30)) got
	# (ERR not there yet counts as no snapshot: the wait goes on.)
	while got=$(grep -c '^crest: snapshot' "$err" 2>/dev/null) || true; [ "${got:-0}" -lt "$n" ]; do
		[ $SECONDS -lt $deadline ] || { cat "$err" >&2; fail "crest run took no $([ "$n" = 1 ] && echo snapshot || echo "$n snapshots") in 30 s"; }
		sleep 0.1
	done
	INIT=$(sed -n 's/.* runs as pid \([0-9]*\) .*/\1/p' "$err")
	PIDS+=("$INIT")
	SNAP=$(grep '^crest: snapshot' "$err" | sed -n '1s/^crest: snapshot \([0-9a-f]*\) .*/\1/p')
}
# A command must fail with exactly one line on stderr containing $1.
expect_error() {
	local want=$1; shift
	local err=$T/err.txt
	if "$@" >/dev/null 2>"$err"; then fail "'$*' succeeded; expected an error with '$want'"; fi
	[ "$(wc -l <"$err")" -eq 1 ] || { cat "$err" >&2; fail "'$*' printed more than one error line"; }
	grep -q -- "$want" "$err" || { cat "$err" >&2; fail "'$*': error does not mention '$want'"; }
	echo "ok: $(cat "$err")"
}
# For the tests that kill a crest at random moments: the seed (printed;
# CREST_LEAK_SEED replays it), how many kills (CREST_LEAK_KILLS, 8) and the
# job's size in MiB (MIB, at most 128).
leak_setup() {
	seed=${CREST_LEAK_SEED:-$$}
	RANDOM=$seed
	echo "random seed $seed (CREST_LEAK_SEED=$seed reproduces the delays)"
	kills=${CREST_LEAK_KILLS:-8}
	mib=$(( ${MIB:-64} < 128 ? ${MIB:-64} : 128 ))
}
# kill_at_random MAX_MS CMD...: runs CMD in the background and kills it with
# -9 after a random delay from 0 to MAX_MS ms (left in $delay).
kill_at_random() {
	local max=$1 pid
	shift
	delay=$(( (RANDOM * 32768 + RANDOM) % (max + 1) ))
	"$@" >/dev/null 2>&1 &
	pid=$!
	sleep "$(awk "BEGIN { print $delay / 1000 }")"
	kill -9 "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}

# run_init RUNPID ERRFILE: waits (60 s) until `crest run` (RUNPID, its
# stderr in ERRFILE) has said its init's pid; sets INIT, added to PIDS.
run_init() {
	local run=$1 err=$2 deadline=$((SECONDS + 60))
	until grep -q ' runs as pid ' "$err"; do
		[ $SECONDS -lt $deadline ] || { cat "$err" >&2; fail "crest run did not start the job in 60 s"; }
		kill -0 "$run" 2>/dev/null || { cat "$err" >&2; fail "crest run ended before the job started"; }
		sleep 0.05
	done
	INIT=$(sed -n 's/.* runs as pid \([0-9]*\) .*/\1/p' "$err")
	[ -n "$INIT" ] || { cat "$err" >&2; fail "crest run did not say the init's pid"; }
	PIDS+=("$INIT")
}
