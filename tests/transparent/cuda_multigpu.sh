#!/bin/bash
# Issue 33: a process with CUDA state on two GPUs, which the driver
# checkpoints and then cannot restore (peer access: shared notes), is
# refused before anything is locked or frozen, unless --multi-gpu-process
# says to take it. Against the stand-in driver (fake_libcuda.c's
# stateful build) and a stand-in nvidia-smi, which lists the job under the
# GPUs written in apps.csv (gpu/gpumap.h's gpumap_held reads it).
#  one:     the job on GPU 0 alone: checkpointed as usual;
#  two:     the job on GPU 0 and another: refused with one line naming the
#           pid, both GPUs and the way around it; no driver call made, no
#           images, the job runs on.
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

echo PASS
