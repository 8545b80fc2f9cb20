#!/bin/bash
# Issue 33: every CUDA process of a tree locked, checkpointed, restored and
# unlocked at once (gpu/gpuckpt.h), against the stand-in driver
# (fake_libcuda.c's stateful build), whose calls take the time each
# process's environment asks (FAKE_CUDA_*_MS) and whose ranks of a
# collective job (FAKE_CUDA_NCCL) cannot be locked one after the other.
# A launcher (no CUDA) starts two ranks, each appending "step N" to its own
# log. Three cases:
#  time:   ranks whose checkpoints take 0.6 s and 1.0 s (locks 0.2 s,
#          restores 0.4 s and 0.8 s): crest's lock + checkpoint must take
#          about the slowest rank's 1.2 s, not the sum's 2.0 s, and its
#          resume about 0.8 s, not 1.2 s;
#  ranks:  two NCCL ranks (a lock fails when a peer was locked before it
#          began): checkpointed with --kill, then restored; each log must
#          equal an uninterrupted run's;
#  always: two NCCL ranks that are never quiet together (a lock fails when
#          a peer is locked as it ends): crest must give up after
#          --lock-within 2s, having tried more than once, with one line
#          that says why, every rank unlocked and running, nothing frozen,
#          each log equal to an uninterrupted run's;
#  p2p:    two ranks that map libnccl (a stand-in library of that name)
#          and show a communicator, as NCCL ranks do (picked at random,
#          seed printed: a deleted /dev/shm/nccl-* file, as with P2P and
#          SHM off, or a thread named pt_nccl_watchdg, PyTorch's NCCL
#          watchdog, as with NCCL's defaults), one of them started without
#          NCCL_P2P_DISABLE=1, without NCCL_SHM_DISABLE=1, or without
#          both (at random): refused before anything is locked, naming
#          that rank and what it lacks, and the job runs on; with both
#          variables in both ranks' environment, or with libnccl mapped
#          but no communicator (a gloo rank: PyTorch loads libnccl
#          always), checkpointed (leave running), logs as uninterrupted;
#  gpus:   on a driver with 2 GPUs, two ranks checkpointed with --kill and
#          restored with the GPUs swapped (--gpu-map, and --gpu 1, which
#          crest completes): the driver's restore of every rank gets the
#          whole map, both GPUs (it wants every GPU a process saw mapped),
#          and the logs are as uninterrupted; a map onto a GPU that is not
#          here is refused before anything is restored.
source "$(dirname "$0")/lib.sh"
need_root
cd "$T"
mkdir cuda state
cp "$FAKE_CUDA" cuda/libcuda.so.1
export CREST_LIBCUDA=$T/cuda/libcuda.so.1 FAKE_CUDA_STATE=$T/state
cat >launcher.py <<'PY'
# launcher.py LIB DIR STEPS ENV0 ENV1: rank R runs with the variables of
# ENVR ("A=1,B=2") and appends to DIR/rR.log.
import os, subprocess, sys
os.closerange(3, 1 << 16)
lib, d, steps = sys.argv[1:4]
ranks = []
for r, spec in enumerate(sys.argv[4:]):
    env = dict(os.environ)
    env.update(kv.split("=", 1) for kv in spec.split(",") if kv)
    ranks.append(subprocess.Popen([sys.executable, os.path.join(os.path.dirname(sys.argv[0]), "rank.py"), lib,
                                   "%s/r%d.log" % (d, r), steps], env=env, close_fds=True))
sys.exit(max(p.wait() for p in ranks))
PY
cat >rank.py <<'PY'
import ctypes, os, sys, time
ctypes.CDLL(sys.argv[1])
for extra in filter(None, os.environ.get("RANK_LIBS", "").split(":")):
    ctypes.CDLL(extra)
if os.environ.get("RANK_NCCL_SHM"):    # NCCL's proxy state: mapped, unlinked
    import mmap
    path = "/dev/shm/nccl-crest-test-%d" % os.getpid()
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.ftruncate(fd, 1 << 16)
    shm = mmap.mmap(fd, 1 << 16)
    os.unlink(path)
    os.close(fd)
if os.environ.get("RANK_NCCL_THREAD"):    # PyTorch's NCCL watchdog
    import ctypes.util, threading
    def watchdog():
        ctypes.CDLL(ctypes.util.find_library("c")).prctl(15, b"pt_nccl_watchdg", 0, 0, 0)
        threading.Event().wait()
    threading.Thread(target=watchdog, daemon=True).start()
out = open(sys.argv[2], "a", buffering=1)
for i in range(int(sys.argv[3])):
    out.write("step %d\n" % i)
    time.sleep(0.02)
PY
state() { cat "state/$1" 2>/dev/null || echo 0; }
# job STEPS ENV0 ENV1: the launcher in the background (pid in JOB), its
# ranks' pids in R0 and R1, each rank past 10 steps.
job() {
	local steps=$1 i
	rm -f r0.log r1.log
	seq 0 $((steps - 1)) | sed 's/^/step /' >ref.log
	setsid python3 "$T/launcher.py" "$T/cuda/libcuda.so.1" "$T" "$steps" "$2" "$3" </dev/null >/dev/null 2>job.err &
	JOB=$!
	PIDS+=("$JOB")
	wait_lines r0.log 10
	wait_lines r1.log 10
	R0="" R1=""
	for i in $(seq 1 100); do
		for p in $(pgrep -P "$JOB"); do
			grep -q "r0.log" /proc/"$p"/cmdline 2>/dev/null && R0=$p
			grep -q "r1.log" /proc/"$p"/cmdline 2>/dev/null && R1=$p
		done
		[ -n "$R0" ] && [ -n "$R1" ] && break
		sleep 0.05
	done
	[ -n "$R0" ] && [ -n "$R1" ] || fail "the launcher has not two ranks"
	PIDS+=("$R0" "$R1")
}
# ended WHAT: the job's processes end, and each rank's log equals an
# uninterrupted run's.
ended() {
	local deadline=$((SECONDS + 60)) p
	for p in "$JOB" "$R0" "$R1"; do
		while kill -0 "$p" 2>/dev/null && [ "$(awk '{print $3}' /proc/"$p"/stat 2>/dev/null)" != Z ]; do
			[ $SECONDS -lt $deadline ] || fail "$1: the job did not end"
			sleep 0.1
		done
	done
	for r in 0 1; do
		cmp -s "r$r.log" ref.log || fail "$1: rank $r's log differs from an uninterrupted run's ($(lines "r$r.log") of $(lines ref.log) lines)"
	done
}
secs() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(" ".join("%.3f" % d[k] for k in sys.argv[2:]))' "$@"; }
between() { awk -v v="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(v >= lo && v < hi) }'; }

# time: about the slowest rank, not the sum.
job 400 FAKE_CUDA_LOCK_MS=200,FAKE_CUDA_CKPT_MS=600,FAKE_CUDA_RESTORE_MS=400 \
	FAKE_CUDA_LOCK_MS=200,FAKE_CUDA_CKPT_MS=1000,FAKE_CUDA_RESTORE_MS=800
"$CREST" --store "$S" --json checkpoint --pid "$JOB" >ck.json 2>ck.err || fail "time: checkpoint: $(cat ck.err)"
read -r lock ckpt resume < <(secs ck.json gpu_lock_seconds gpu_checkpoint_seconds gpu_resume_seconds)
frozen=$(awk -v a="$lock" -v b="$ckpt" 'BEGIN { printf "%.3f", a + b }')
between "$frozen" 1.2 1.7 ||
	fail "time: lock + checkpoint of two ranks took $frozen s (lock $lock s, checkpoint $ckpt s); the slowest takes 1.2 s, both one after the other 2.0 s"
between "$resume" 0.8 1.1 ||
	fail "time: the resume of two ranks took $resume s; the slowest takes 0.8 s, both one after the other 1.2 s"
for p in "$R0" "$R1"; do [ "$(state "$p")" = 0 ] || fail "time: rank $p was left in driver state $(state "$p")"; done
ended time
echo "ok: time: two ranks locked and checkpointed in $frozen s (slowest 1.2 s, sum 2.0 s), resumed in $resume s (slowest 0.8 s, sum 1.2 s)"

# ranks: locked at once, none waits on a locked peer.
: >state/log
job 400 FAKE_CUDA_NCCL=ranks,FAKE_CUDA_LOCK_MS=200 FAKE_CUDA_NCCL=ranks,FAKE_CUDA_LOCK_MS=200
"$CREST" --store "$S" --quiet checkpoint --pid "$JOB" --kill --tag nccl --lock-timeout 1000 --lock-within 5s 2>ck.err ||
	fail "ranks: checkpoint of two NCCL ranks: $(cat ck.err)"
for p in "$R0" "$R1"; do
	grep -q "^checkpoint $p: 1 -> 2" state/log || fail "ranks: rank $p was not checkpointed: $(cat state/log)"
done
busy=$(grep -c "not ready" state/log || true)
kill_gone "$R0"
kill_gone "$R1"
kill_gone "$JOB"
"$CREST" --store "$S" --quiet restore nccl >/dev/null 2>rs.err || fail "ranks: restore: $(cat rs.err)"
for p in "$R0" "$R1"; do
	[ "$(state "$p")" = 0 ] || fail "ranks: restored rank $p is in driver state $(state "$p"), not running"
done
ended ranks
echo "ok: ranks: two NCCL ranks locked at once ($busy lock(s) that gave up first), checkpointed, restored; logs as uninterrupted"

# always: crest gives up within the bound, the job runs on.
: >state/log
job 300 FAKE_CUDA_NCCL=always,FAKE_CUDA_LOCK_MS=50 FAKE_CUDA_NCCL=always,FAKE_CUDA_LOCK_MS=50
t0=$(date +%s.%N)
"$CREST" --store "$S" checkpoint --pid "$JOB" --lock-timeout 300 --lock-within 2s >/dev/null 2>ck.err &&
	fail "always: a checkpoint of ranks that are never quiet together succeeded"
took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
[ "$(wc -l <ck.err)" = 1 ] || fail "always: not one line: $(cat ck.err)"
grep -q "could not lock all 2 CUDA processes at once within 2000 ms" ck.err &&
	grep -q "every process was unlocked and the job runs on" ck.err ||
	fail "always: the error does not say why crest gave up and that the job runs on: $(cat ck.err)"
tries=$(grep -c "not ready" state/log || true)
[ "$tries" -ge 2 ] || fail "always: crest did not try again ($tries lock(s) gave up): $(cat state/log)"
between "$took" 2 5 || fail "always: crest gave up after $took s, not about 2 s (--lock-within 2s)"
for p in "$R0" "$R1"; do [ "$(state "$p")" = 0 ] || fail "always: rank $p was left in driver state $(state "$p")"; done
grep -q "^checkpoint" state/log && fail "always: a rank was checkpointed although not all were locked: $(cat state/log)"
ls /dev/shm | grep -q "^crest-ckpt-$JOB-" && fail "always: images left in /dev/shm"
n0=$(lines r0.log)
sleep 0.5
[ "$(lines r0.log)" -gt "$n0" ] || fail "always: rank 0 makes no progress after crest gave up"
ended always
echo "ok: always: gave up after $took s and $tries lock(s) that gave up: $(cat ck.err)"

# p2p: NCCL with its P2P or SHM transport on is refused before anything
# is locked.
cp "$FAKE_CUDA" cuda/libnccl.so.2
seed=${CREST_SEED:-$(( $(date +%s%N) % 100000 ))}
RANDOM=$seed
bad=$((RANDOM % 2))
signs=(RANK_NCCL_SHM=1 RANK_NCCL_THREAD=1)
sign=${signs[RANDOM % 2]}
off=NCCL_P2P_DISABLE=1,NCCL_SHM_DISABLE=1
lacks=("NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1" NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1)
k=$((RANDOM % 3))
lack=${lacks[k]}
has=(, NCCL_SHM_DISABLE=1 NCCL_P2P_DISABLE=1)
echo "p2p: seed $seed: ranks show a communicator by $sign; rank $bad starts without $lack"
comm=RANK_LIBS=$T/cuda/libnccl.so.2,$sign
e0=$comm,$off e1=$e0
[ $bad = 0 ] && e0=$comm,${has[k]} || e1=$comm,${has[k]}
: >state/log
job 300 "$e0" "$e1"
want=$R0; [ $bad = 1 ] && want=$R1
"$CREST" --store "$S" checkpoint --pid "$JOB" >/dev/null 2>ck.err &&
	fail "p2p: a job whose rank $bad runs NCCL without $lack was checkpointed"
[ "$(wc -l <ck.err)" = 1 ] || fail "p2p: not one line: $(cat ck.err)"
for s in "pid $want has a NCCL communicator" "(no $lack in the environment" "nothing was frozen and the job runs on"; do
	grep -qF "$s" ck.err || fail "p2p: the refusal does not say \"$s\": $(cat ck.err)"
done
[ -s state/log ] && fail "p2p: the driver was asked to lock or checkpoint before the refusal: $(cat state/log)"
n0=$(lines r0.log)
sleep 0.5
[ "$(lines r0.log)" -gt "$n0" ] || fail "p2p: rank 0 makes no progress after the refusal"
ended p2p-refused
echo "ok: p2p: refused before any lock: $(cat ck.err)"
: >state/log
for how in "$comm,$off" RANK_LIBS=$T/cuda/libnccl.so.2; do
	: >state/log
	job 300 "$how" "$how"
	"$CREST" --store "$S" --quiet checkpoint --pid "$JOB" 2>ck.err || fail "p2p: ranks with $how: $(cat ck.err)"
	for p in "$R0" "$R1"; do
		grep -q "^checkpoint $p: 1 -> 2" state/log || fail "p2p: rank $p ($how) was not checkpointed: $(cat state/log)"
		[ "$(state "$p")" = 0 ] || fail "p2p: rank $p ($how) was left in driver state $(state "$p")"
	done
	ended "p2p $how"
	echo "ok: p2p: ranks with ${how//$T\//}: checkpointed and running on"
done

# gpus: every rank restored with the whole map.
u0=GPU-c0c1c2c3-c4c5-c6c7-c8c9-cacbcccdcecf u1=GPU-c0c1c2c3-c4c5-c6c7-c8c9-cacbcccdced0
k=0
for how in "--gpu-map $u0=$u1,$u1=$u0" "--gpu 1"; do
	k=$((k + 1))
	: >state/log
	export FAKE_CUDA_GPUS=2
	job 300 "" ""
	"$CREST" --store "$S" --quiet checkpoint --pid "$JOB" --kill --tag gm$k 2>ck.err || fail "gpus: checkpoint: $(cat ck.err)"
	kill_gone "$R0"
	kill_gone "$R1"
	kill_gone "$JOB"
	if [ "$how" = "--gpu 1" ]; then
		expect_error "GPU-c0c1c2c3-c4c5-c6c7-c8c9-cacbcccdced7" "$CREST" --store "$S" restore gm$k \
			--gpu-map "$u0=GPU-c0c1c2c3-c4c5-c6c7-c8c9-cacbcccdced7"
		grep -q "^restore" state/log && fail "gpus: a refused map restored a rank: $(cat state/log)"
	fi
	# shellcheck disable=SC2086
	"$CREST" --store "$S" --quiet restore gm$k $how >/dev/null 2>rs.err || fail "gpus: restore $how: $(cat rs.err)"
	for p in "$R0" "$R1"; do
		grep -q "^restore $p: gpus 0>1 1>0 " state/log || grep -q "^restore $p: gpus 1>0 0>1 " state/log ||
			fail "gpus: rank $p's driver restore ($how) did not get both GPUs swapped: $(grep "^restore $p" state/log)"
		[ "$(state "$p")" = 0 ] || fail "gpus: restored rank $p is in driver state $(state "$p"), not running"
	done
	ended "gpus $how"
	unset FAKE_CUDA_GPUS
	echo "ok: gpus: both ranks restored with GPUs 0 and 1 swapped ($how): $(grep -c '^restore .*gpus' state/log) driver restores got the whole map"
done
echo PASS
