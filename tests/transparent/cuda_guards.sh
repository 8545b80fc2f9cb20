#!/bin/bash
# The guards' CUDA work on a machine without a GPU (gpu-check's gpu_kill and
# gpu_restore_kill do the same with one). The job loads a stand-in
# libcuda.so.1 (fake_libcuda.c's stateful build: the driver's checkpoint
# API as a state machine per pid, kept in files), so crest takes it for a
# CUDA job and drives its "GPU state" through the same calls as a real
# one's. Each round kills crest inside one driver call (FAKE_CUDA_DIE), at
# a step drawn from the seed:
#  - crest checkpoint, dying as it locks or checkpoints the job: the job is
#    left locked or checkpointed, and the checkpoint's guard
#    (capture/guard.h) must bring it back to running;
#  - crest restore, dying after CRIU brought the job back, as it restores
#    or unlocks its GPU state: the restore's guard (restore/guard.h) must
#    bring it back to running, and say so;
#  - and once, crest restore dying so with the guard's own bringing back
#    failing too (CREST_FAULT_SITE=guard.gpu): the guard must end the job,
#    which could never run, and put its files back as they were; a second
#    restore of the snapshot must then run it to its end.
# After each round the fake driver must show the job running, and the
# job's log must end equal to an uninterrupted run's. A job left locked or
# checkpointed would, on a real GPU, hang at its next CUDA call for good.
# The seed is printed; CREST_TEST_SEED replays the steps, and
# CUDA_GUARD_ROUNDS=all runs every step once.
source "$(dirname "$0")/lib.sh"
need_root
cd "$T"
seed=${CREST_TEST_SEED:-$$}
RANDOM=$seed
echo "seed $seed (CREST_TEST_SEED=$seed replays the steps)"
mkdir cuda state
cp "$FAKE_CUDA" cuda/libcuda.so.1
export CREST_LIBCUDA=$T/cuda/libcuda.so.1 FAKE_CUDA_STATE=$T/state
STEPS=150
# The job: loads the driver, then appends "step N" to its log every 20 ms.
# It first closes what it inherited beyond 0-2 (ctest's LastTest.log among
# them): a file the job holds open for writing is one of its files, put
# back to its size at the snapshot by a restore.
cat >job.py <<'PY'
import ctypes, os, sys, time
os.closerange(3, 1 << 16)
ctypes.CDLL(sys.argv[1])
out = open(sys.argv[2], "a", buffering=1)
for i in range(int(sys.argv[3])):
    out.write("step %d\n" % i)
    time.sleep(0.02)
PY
seq 0 $((STEPS - 1)) | sed 's/^/step /' >ref.log
me="job.py $T/cuda/libcuda.so.1 $T/job.log"
cuda_job() {
	rm -f job.log
	setsid python3 "$T/job.py" "$T/cuda/libcuda.so.1" "$T/job.log" "$STEPS" </dev/null >/dev/null 2>&1 &
	JOB=$!
	PIDS+=("$JOB")
	wait_lines job.log 10
}
# The fake driver's state of pid: 0 running, 1 locked, 2 checkpointed.
state() { cat "state/$1" 2>/dev/null || echo 0; }
names=(running locked checkpointed)
# settled WHAT PID GUARD: the fake driver shows pid running and the guard
# (GUARD, a pattern of its command line) is gone, within 60 s; then the
# job runs to its end with the uninterrupted run's log.
settled() {
	local what=$1 pid=$2 guard=$3 deadline=$((SECONDS + 60))
	[ -e state/died ] || fail "$what: crest did not reach the driver call it was to die in ($(tail -3 state/log))"
	until [ "$(state "$pid")" = 0 ] && ! pgrep -f -- "$guard" >/dev/null; do
		[ $SECONDS -lt $deadline ] || [ "$(state "$pid")" = 0 ] ||
			fail "$what: the job was left ${names[$(state "$pid")]} 60 s after crest died (driver calls: $(tail -4 state/log | tr '\n' ';'))"
		[ $SECONDS -lt $deadline ] ||
			fail "$what: the job runs again, but its guard still runs 60 s after crest died"
		sleep 0.1
	done
	deadline=$((SECONDS + 60))
	while kill -0 "$pid" 2>/dev/null; do
		[ $SECONDS -lt $deadline ] || fail "$what: the job did not end"
		sleep 0.1
	done
	cmp -s job.log ref.log || fail "$what: the job's log differs from an uninterrupted run's ($(lines job.log) of $STEPS lines)"
	echo "ok: $what: the guard brought the job back to running; its log equals an uninterrupted run's"
	rm -f state/died
}

capture_round() {  # capture_round STEP
	cuda_job
	FAKE_CUDA_DIE=$1 "$CREST" --store "$S" --quiet checkpoint --pid "$JOB" >/dev/null 2>&1 &&
		fail "crest checkpoint dying in the driver's $1 reported success"
	settled "crest checkpoint killed in the driver's $1" "$JOB" "__capture-guard $JOB "
}
n=0
# killed_job: a new job, checkpointed with --kill as snapshot r$n (n counted
# up) and gone: what a restore round brings back.
killed_job() {
	n=$((n + 1))
	cuda_job
	"$CREST" --store "$S" --quiet checkpoint --pid "$JOB" --kill --tag "r$n" >/dev/null ||
		fail "the checkpoint before restore round $n failed"
	kill_gone "$JOB"
}
restore_round() {  # restore_round STEP
	killed_job
	[ "$(state "$JOB")" = 2 ] || fail "a checkpoint with --kill left the job ${names[$(state "$JOB")]}, not checkpointed"
	FAKE_CUDA_DIE=$1 "$CREST" --store "$S" --quiet restore "r$n" >/dev/null 2>restore.err &
	local cpid=$! pid
	wait "$cpid" && fail "crest restore dying in the driver's $1 reported success"
	pid=$(pgrep -f -- "$me" | head -1)
	[ -n "$pid" ] || fail "crest restore killed in the driver's $1: the job did not come back ($(cat restore.err))"
	PIDS+=("$pid")
	settled "crest restore killed in the driver's $1" "$pid" "__restore-guard .*/crest-restore-$cpid-"
	grep -q "their GPU state was brought back" restore.err ||
		fail "the restore guard did not say it brought the GPU state back: $(cat restore.err)"
}

restore_fail_round() {
	killed_job
	cp job.log job.log.before
	FAKE_CUDA_DIE=restore CREST_FAULT_SITE=guard.gpu:1:EIO "$CREST" --store "$S" --quiet restore "r$n" \
		>/dev/null 2>restore.err &
	local cpid=$! deadline=$((SECONDS + 60))
	wait "$cpid" && fail "crest restore dying in the driver's restore reported success"
	while pgrep -f -- "__restore-guard .*/crest-restore-$cpid-" >/dev/null; do
		[ $SECONDS -lt $deadline ] || fail "the restore guard still runs 60 s after crest died"
		sleep 0.1
	done
	local what="crest restore killed in the driver's restore, the guard's failing too"
	grep -q "so the guard ended them; the job's files were put back as they were" restore.err ||
		fail "$what: the guard did not say it ended the job and put its files back: $(cat restore.err)"
	! pgrep -f -- "$me" >/dev/null || fail "$what: the job still runs"
	cmp -s job.log job.log.before || fail "$what: the job's log is not what it was before the restore"
	[ -z "$(ls -A | grep -e '\.crest-')" ] || fail "$what: temporaries of crest left: $(ls -A | grep -e '\.crest-')"
	echo "ok: $what: the guard ended the job and put its files back"
	rm -f state/died
	"$CREST" --store "$S" --quiet restore "r$n" >/dev/null || fail "the second restore of r$n failed"
	local pid
	pid=$(pgrep -f -- "$me" | head -1)
	[ -n "$pid" ] || fail "the second restore of r$n brought no job back"
	PIDS+=("$pid")
	touch state/died   # settled wants it: the first restore's crest died
	settled "a second restore after the guard ended the first" "$pid" "__restore-guard .*/crest-restore-$cpid-"
}

capture_steps=(lock:after checkpoint checkpoint:after)
restore_steps=(restore restore:after unlock)
if [ "${CUDA_GUARD_ROUNDS:-}" = all ]; then
	for s in "${capture_steps[@]}"; do capture_round "$s"; done
	for s in "${restore_steps[@]}"; do restore_round "$s"; done
	restore_fail_round
else
	capture_round "${capture_steps[RANDOM % 3]}"
	restore_round "${restore_steps[RANDOM % 3]}"
	restore_fail_round
fi
echo PASS
