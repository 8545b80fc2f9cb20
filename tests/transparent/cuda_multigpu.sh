#!/bin/bash
# Issue 33: a process with CUDA state on two GPUs, which the driver
# checkpoints and then cannot restore (peer access: shared notes), is
# refused before anything is locked or frozen; with --multi-gpu-process it
# is taken, and when the driver's restore after the dump then fails, crest
# stores the snapshot, ends the job and says so: never a job left
# checkpointed in silence. Against the stand-in driver (fake_libcuda.c's
# stateful build) and a stand-in nvidia-smi, which lists the job under the
# GPUs written in apps.csv (gpu/gpumap.h's gpumap_held reads it).
#  one:     the job on GPU 0 alone: checkpointed as usual;
#  two:     the job on GPU 0 and another: refused with one line naming the
#           pid, both GPUs and the way around it; no driver call made, no
#           images, the job runs on;
#  flag:    the same with --multi-gpu-process and every driver restore
#           failing (FAKE_CUDA_FAIL=restore): crest fails with one line
#           naming the pid, the driver's error and the stored snapshot, and
#           the job is ended; that snapshot then restores (the stand-in's
#           restore working again) and runs to the end of an uninterrupted
#           run's log;
#  killfull: --kill into a store too small, every driver restore failing:
#           the job ended, its images kept on tmpfs where the line says;
#  guard:   crest dying right after such a failed restore, and its guard's
#           bringing back failing too: the guard ends the job, and says so.
source "$(dirname "$0")/lib.sh"
need_root
cd "$T"
mkdir cuda state bin
cp "$FAKE_CUDA" cuda/libcuda.so.1
export CREST_LIBCUDA=$T/cuda/libcuda.so.1 FAKE_CUDA_STATE=$T/state PATH=$T/bin:$PATH
cat >bin/nvidia-smi <<SH
#!/bin/sh
case "\$*" in *--query-compute-apps*) cat "$T/apps.csv" 2>/dev/null ;; esac
exit 0
SH
chmod +x bin/nvidia-smi
GPU0=GPU-c0c1c2c3-c4c5-c6c7-c8c9-cacbcccdcecf   # the stand-in driver's one GPU
GPU1=GPU-11111111-2222-3333-4444-555555555555
STEPS=300
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
state() { cat "state/$1" 2>/dev/null || echo 0; }
setsid python3 "$T/job.py" "$T/cuda/libcuda.so.1" "$T/job.log" "$STEPS" </dev/null >/dev/null 2>&1 &
JOB=$!
PIDS+=("$JOB")
wait_lines job.log 10

# one
echo "$JOB, $GPU0, 100" >apps.csv
"$CREST" --store "$S" --quiet checkpoint --pid "$JOB" 2>ck.err || fail "one: a job on one GPU was not checkpointed: $(cat ck.err)"
grep -q "^checkpoint $JOB: 1 -> 2" state/log || fail "one: the job was not checkpointed by the driver: $(cat state/log)"
[ "$(state "$JOB")" = 0 ] || fail "one: the job was left in driver state $(state "$JOB")"
echo "ok: one: a job on one GPU checkpointed"

# two
: >state/log
printf '%s, %s, 100\n%s, %s, 100\n' "$JOB" "$GPU0" "$JOB" "$GPU1" >apps.csv
expect_error "pid $JOB holds CUDA state on 2 GPUs (GPU 0 ($GPU0), $GPU1)" \
	"$CREST" --store "$S" --quiet checkpoint --pid "$JOB"
grep -q -- "--multi-gpu-process" err.txt && grep -q "nothing was frozen and the job runs on" err.txt ||
	fail "two: the refusal does not say the job runs on and the way around it: $(cat err.txt)"
[ -s state/log ] && fail "two: the driver was called although the job was refused: $(cat state/log)"
ls /dev/shm | grep -q "^crest-ckpt-$JOB-" && fail "two: images were made for a refused job"
n=$(lines job.log)
sleep 0.3
[ "$(lines job.log)" -gt "$n" ] || fail "two: the refused job makes no progress"
echo "ok: two: refused before any driver call"

# flag
: >state/log
FAKE_CUDA_FAIL=restore "$CREST" --store "$S" --quiet checkpoint --pid "$JOB" --multi-gpu-process --tag mg \
	>/dev/null 2>ck.err && fail "flag: a checkpoint whose driver restore failed reported success"
[ "$(wc -l <ck.err)" = 1 ] || fail "flag: not one line: $(cat ck.err)"
for want in "of CUDA process $JOB" "cuCheckpointProcessRestore: CUDA_ERROR_UNKNOWN" "crest ended the job (pid $JOB)" \
	"was stored, which keeps its images (crest restore"; do
	grep -qF "$want" ck.err || fail "flag: the error does not say '$want': $(cat ck.err)"
done
wait "$JOB" 2>/dev/null || true
kill -0 "$JOB" 2>/dev/null && fail "flag: the job whose GPU state could not come back still runs"
grep -q "^checkpoint $JOB: 1 -> 2" state/log || fail "flag: the job was not checkpointed by the driver: $(cat state/log)"
kill_gone "$JOB"
: >apps.csv
"$CREST" --store "$S" --quiet restore mg >/dev/null 2>rs.err || fail "flag: the stored snapshot did not restore: $(cat rs.err)"
[ "$(state "$JOB")" = 0 ] || fail "flag: the restored job is in driver state $(state "$JOB")"
deadline=$((SECONDS + 60))
while kill -0 "$JOB" 2>/dev/null && [ "$(awk '{print $3}' /proc/"$JOB"/stat 2>/dev/null)" != Z ]; do
	[ $SECONDS -lt $deadline ] || fail "flag: the restored job did not end"
	sleep 0.1
done
cmp -s job.log ref.log || fail "flag: the restored job's log differs from an uninterrupted run's ($(lines job.log) of $STEPS lines)"
echo "ok: flag: $(cat ck.err)"

# killfull: --kill into a store too small for the job, and the driver's
# restore failing as crest gives the job back: the job is ended, its
# images kept on tmpfs, and the line says where. (Staged images only: a
# streamed dump has none on tmpfs, and the line says they are lost.)
small_store
: >apps.csv
setsid python3 -c 'import ctypes, os, sys, time
os.closerange(3, 1 << 16)
ctypes.CDLL(sys.argv[1])
keep = os.urandom(32 << 20)
while True:
    time.sleep(0.05)' "$T/cuda/libcuda.so.1" </dev/null >/dev/null 2>&1 &
BIG=$!
PIDS+=("$BIG")
for i in $(seq 1 100); do grep -q libcuda /proc/"$BIG"/maps 2>/dev/null && [ "$(awk '/VmRSS/ {print $2}' /proc/"$BIG"/status)" -gt 32768 ] && break; sleep 0.05; done
CREST_CHECKPOINT_IMAGES=files FAKE_CUDA_FAIL=restore "$CREST" --store small/st --quiet checkpoint --pid "$BIG" --kill \
	>/dev/null 2>ck.err &&
	fail "killfull: a --kill into a full store reported success"
[ "$(wc -l <ck.err)" = 1 ] || fail "killfull: not one line: $(cat ck.err)"
grep -q "No space left on device" ck.err && grep -qF "crest ended it (pid $BIG); its images are kept in /dev/shm/crest-kept-$BIG-" ck.err ||
	fail "killfull: the error does not say the store was full, the job ended and where its images are: $(cat ck.err)"
kept=$(sed -n 's/.*its images are kept in \(.*\)$/\1/p' ck.err)
[ -s "$kept/pstree.img" ] || fail "killfull: no images in $kept"
rm -rf "$kept" "$kept.files"
wait "$BIG" 2>/dev/null || true
kill -0 "$BIG" 2>/dev/null && fail "killfull: the job whose GPU state could not come back still runs"
echo "ok: killfull: $(cat ck.err)"

# guard: crest dies just after the driver's restore failed (before it
# stores anything), and the guard's own bringing back fails too: the guard
# must end the job (of 100 s) and say so, not leave it checkpointed.
setsid python3 "$T/job.py" "$T/cuda/libcuda.so.1" "$T/job2.log" 5000 </dev/null >/dev/null 2>&1 &
JOB2=$!
PIDS+=("$JOB2")
wait_lines job2.log 10
FAKE_CUDA_FAIL=restore CREST_FAULT_DIE=capture.stranded CREST_FAULT_SITE=capture.guard.gpu:1:EIO \
	"$CREST" --store "$S" --quiet checkpoint --pid "$JOB2" >/dev/null 2>guard.err &&
	fail "guard: a crest that died reported success"
deadline=$((SECONDS + 30))
while kill -0 "$JOB2" 2>/dev/null && [ "$(awk '{print $3}' /proc/"$JOB2"/stat 2>/dev/null)" != Z ]; do
	[ $SECONDS -lt $deadline ] || fail "guard: the job still runs 30 s after crest died, its GPU state not brought back: $(cat guard.err)"
	sleep 0.1
done
while pgrep -f -- "__capture-guard $JOB2 " >/dev/null; do
	[ $SECONDS -lt $deadline ] || fail "guard: the guard still runs"
	sleep 0.1
done
grep -q "the checkpoint of pid $JOB2 ended without crest.*so the guard ended the job, which could never run again" guard.err ||
	fail "guard: the guard did not say it ended the job: $(cat guard.err)"
[ "$(lines job2.log)" -lt 5000 ] || fail "guard: the job ran to its end: it was never ended"
echo "ok: guard: $(grep 'ended without crest' guard.err)"
echo PASS
