#!/bin/bash
# Issue 33: a process that maps libcuda is not always a CUDA process. A
# launcher (torch.multiprocessing.spawn's, a data-loader worker) loads the
# driver and never makes a context; the driver then refuses every
# checkpoint call on it (CUDA_ERROR_NOT_INITIALIZED, seen on the H100).
# Here a launcher (stand-in driver loaded with FAKE_CUDA_NO_CONTEXT: it has
# no context) starts a worker that is a CUDA process (the stand-in's
# stateful driver, fake_libcuda.c). crest checkpoint --kill must take the
# tree, locking and checkpointing the worker only, never trying the
# launcher; restore must bring the worker's state back, and the job's log
# must equal an uninterrupted run's.
source "$(dirname "$0")/lib.sh"
need_root
cd "$T"
# The store is made on purpose (lib.sh's CREST_INIT=1 would make it too).
"$CREST" init "$S" >/dev/null || fail "crest init $S"
mkdir cuda state
cp "$FAKE_CUDA" cuda/libcuda.so.1
export CREST_LIBCUDA=$T/cuda/libcuda.so.1 FAKE_CUDA_STATE=$T/state
STEPS=200
cat >launcher.py <<'PY'
import ctypes, os, subprocess, sys
os.closerange(3, 1 << 16)
ctypes.CDLL(sys.argv[1])   # with FAKE_CUDA_NO_CONTEXT: mapped, no context
env = dict(os.environ)
del env["FAKE_CUDA_NO_CONTEXT"]
sys.exit(subprocess.call([sys.executable, os.path.join(os.path.dirname(sys.argv[0]), "worker.py")] + sys.argv[1:],
                         env=env, close_fds=True))
PY
cat >worker.py <<'PY'
import ctypes, sys, time
ctypes.CDLL(sys.argv[1])
out = open(sys.argv[2], "a", buffering=1)
for i in range(int(sys.argv[3])):
    out.write("step %d\n" % i)
    time.sleep(0.02)
PY
seq 0 $((STEPS - 1)) | sed 's/^/step /' >ref.log
FAKE_CUDA_NO_CONTEXT=1 setsid python3 "$T/launcher.py" "$T/cuda/libcuda.so.1" "$T/job.log" "$STEPS" \
	</dev/null >/dev/null 2>job.err &
LAUNCHER=$!
PIDS+=("$LAUNCHER")
wait_lines job.log 10
WORKER=$(pgrep -P "$LAUNCHER")
[ -n "$WORKER" ] || fail "the launcher has no worker"
PIDS+=("$WORKER")
for p in "$LAUNCHER" "$WORKER"; do
	grep -q "$T/cuda/libcuda.so.1" /proc/"$p"/maps || fail "pid $p does not map the stand-in libcuda"
done
[ -e "state/$LAUNCHER.noctx" ] && [ ! -e "state/$WORKER.noctx" ] || fail "the stand-in does not know who has a context"
"$CREST" --store "$S" --quiet checkpoint --pid "$LAUNCHER" --kill --tag n 2>ck.err ||
	fail "checkpoint of a launcher without a context and its CUDA worker: $(cat ck.err)"
grep -q "^lock $WORKER: 0 -> 1" state/log || fail "the worker was not locked: $(cat state/log)"
grep -q "^checkpoint $WORKER: 1 -> 2" state/log || fail "the worker was not checkpointed: $(cat state/log)"
grep -q "^[a-z]* $LAUNCHER:" state/log && fail "crest made driver calls on the launcher, which has no context: $(grep "$LAUNCHER" state/log)"
kill_gone "$WORKER"
kill_gone "$LAUNCHER"
"$CREST" --store "$S" --quiet restore n >/dev/null 2>rs.err || fail "restore: $(cat rs.err)"
[ "$(cat "state/$WORKER")" = 0 ] || fail "the restored worker's driver state is $(cat "state/$WORKER"), not running"
grep -q "^unlock $WORKER: 1 -> 0" state/log || fail "the restored worker was not unlocked: $(cat state/log)"
grep -q "^[a-z]* $LAUNCHER:" state/log && fail "the restore made driver calls on the launcher: $(grep "$LAUNCHER" state/log)"
deadline=$((SECONDS + 60))
while kill -0 "$LAUNCHER" 2>/dev/null && [ "$(awk '{print $3}' /proc/"$LAUNCHER"/stat 2>/dev/null)" != Z ]; do
	[ $SECONDS -lt $deadline ] || fail "the restored job did not end"
	sleep 0.1
done
cmp job.log ref.log || fail "the restored job's log differs from an uninterrupted run's ($(lines job.log) of $STEPS lines)"
echo "PASS: only the worker ($WORKER) was locked and checkpointed, the launcher ($LAUNCHER, no context) was dumped as a CPU process; $STEPS lines as uninterrupted"
