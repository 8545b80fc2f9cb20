#!/bin/bash
# The shim's peer access handling (gpu/shim_lib.c, "peer access") end to
# end without a GPU. A job that knows nothing of crest (peer_job.c) enables
# peer access between two GPUs (0 -> 1 and 1 -> 0, through undefined
# symbols of the CUDA runtime that a preloaded shim interposes) and copies
# between them every step, with a stand-in runtime (fake_cudart.c, whose
# copies need the pair's access on) and the stand-in driver
# (fake_libcuda.c's stateful build) that, like the real one, cannot restore
# a process while it has peer access on; a stand-in nvidia-smi lists the
# job under both GPUs (apps.csv). Both stand-ins keep the job's state in a
# page of the job's own (fake_cudart.h), which the test reads from outside.
#  plain: the job without the shim is refused (two GPUs); with
#         --multi-gpu-process the driver checkpoints it and cannot give it
#         back: crest stores the snapshot and ends the job, and the restore
#         of that snapshot fails the same way and ends the copy;
#  shim:  under crest run --cuda-shim, a live checkpoint at a random step:
#         crest says "CUDA shim: 2 peer access pair(s) ... disabled", the
#         driver sees no pair on while it holds the job (its log, and the
#         page read while its checkpoint is held for FAKE_CUDA_CKPT_MS), the
#         job runs on with both pairs on again and its copies working; then
#         with --kill at another step, and restored: the driver restores
#         the copy (no pair on), the shim turns both on again, and the
#         job's log is an uninterrupted run's, line for line; and no
#         kernel of the job ran while the shim had its peer access off.
# Random (seed printed; SEED=N replays the choices, not the job's sleeps).
source "$(dirname "$0")/lib.sh"
need_root
[ -x "${PEER_JOB:-}" ] || fail "PEER_JOB ('${PEER_JOB:-}') is not the built peer_job"
[ -f "${FAKE_CUDART:-}" ] || fail "FAKE_CUDART ('${FAKE_CUDART:-}') is not the built fake libcudart.so.13"
[ -f "${FAKE_CUDA:-}" ] || fail "FAKE_CUDA ('${FAKE_CUDA:-}') is not the built stateful fake libcuda"
"$CREST" help run 2>&1 | grep -q -- --cuda-shim || fail "crest run has no --cuda-shim ($CREST help run does not list it)"
# An ASan build's shim, preloaded into a job built without (see
# CMakeLists.txt and nccl_shim.sh), brings ASan's runtime in behind the
# job's libraries: ASan must not check that order.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
cd "$T"
mkdir cuda state bin
cp "$FAKE_CUDA" cuda/libcuda.so.1
export CREST_LIBCUDA=$T/cuda/libcuda.so.1 FAKE_CUDA_STATE=$T/state FAKE_CUDA_GPUS=2 PATH=$T/bin:$PATH
cat >bin/nvidia-smi <<SH
#!/bin/sh
case "\$*" in *--query-compute-apps*) cat "$T/apps.csv" 2>/dev/null ;; esac
exit 0
SH
chmod +x bin/nvidia-smi
: >apps.csv
GPU0=GPU-c0c1c2c3-c4c5-c6c7-c8c9-cacbcccdcecf   # the stand-in driver's two GPUs
GPU1=GPU-c0c1c2c3-c4c5-c6c7-c8c9-cacbcccdced0
seed=${SEED:-$(( $(date +%s%N) % 100000 ))}
RANDOM=$seed
STEPS=220
at1=$((5 + RANDOM % 40))
at2=$((at1 + 20 + RANDOM % 40))
ms1=$((RANDOM % 20))
ms2=$((RANDOM % 20))
echo "seed $seed (SEED=$seed replays): $STEPS steps; a live checkpoint at step $at1 (+$ms1 ms), one with --kill at step $at2 (+$ms2 ms)"
msleep() { sleep "$(printf '0.%03d' "$1")"; }
gone() { [ ! -e /proc/"$1" ] || [ "$(awk '{print $3}' /proc/"$1"/stat 2>/dev/null)" = Z ]; }
wait_gone() {
	local deadline=$((SECONDS + $2))
	while ! gone "$1"; do
		[ $SECONDS -lt $deadline ] || fail "$3"
		sleep 0.05
	done
}
# The job's page (fake_cudart.h) through /proc/PID/fd: "MAGIC STATE
# NPAIRS CHANGES PAIRS_LO PAIRS_HI".
page() {
	local f
	for f in /proc/"$1"/fd/*; do
		if [ "$(readlink "$f" 2>/dev/null)" = "/memfd:fake-cudart (deleted)" ]; then
			od -An -tu4 -w24 -N24 "$f"
			return 0
		fi
	done
	return 1
}
# peers PID: the pairs PID has on ("0>1 1>0") into PAIRS, its driver
# state and count of changes into ST and CH.
peers() {
	local magic np lo hi f t pg
	pg=$(page "$1") || fail "pid $1 has no page of the stand-in runtime (/memfd:fake-cudart)"
	read -r magic ST np CH lo hi <<<"$pg"
	PAIRS=
	for f in 0 1 2 3; do
		for t in 0 1 2 3; do
			if (((lo >> (f * 8 + t)) & 1)); then PAIRS="$PAIRS $f>$t"; fi
		done
	done
	PAIRS=${PAIRS# }
	[ "$(echo $PAIRS | wc -w)" = "$np" ] || fail "pid $1's page says $np pair(s), its bits '$PAIRS'"
}
# watch_page PID CPID OUT: samples PID's page into OUT while CPID runs.
watch_page() {
	: >"$3"
	while kill -0 "$2" 2>/dev/null; do
		page "$1" >>"$3" 2>/dev/null || true
		sleep 0.01
	done
}
# held WHEN OUT: what watch_page saw while the driver held the job (into
# HELD): at least one sample locked or checkpointed, none with a pair on.
held() {
	HELD=$(awk '$2 != 0 { print $2 ":" $3 }' "$2" | sort -u | paste -sd' ')
	[ -n "$HELD" ] || fail "$1: the job's page was never seen locked or checkpointed ($(wc -l <"$2") samples)"
	if echo "$HELD" | grep -q ':[1-9]'; then
		fail "$1: the job had peer access on while the driver held it (state:pairs $HELD)"
	fi
}

# bare CMD...: CMD with none of the test runner's descriptors (a job that
# holds one of ctest's files open for writing is refused a restore).
bare() {
	local fd
	for fd in /proc/self/fd/*; do
		fd=${fd##*/}
		if [ "$fd" -gt 2 ]; then eval "exec $fd>&-"; fi
	done
	exec "$@"
}

"$PEER_JOB" "$T/cuda/libcuda.so.1" "$T/ref.log" "$STEPS" </dev/null >ref.out 2>&1 &
REF=$!
PIDS+=("$REF")

# plain: no shim.
(bare setsid "$PEER_JOB" "$T/cuda/libcuda.so.1" "$T/plain.log" 100000) </dev/null >/dev/null 2>plain.err &
PLAIN=$!
disown "$PLAIN"   # ended by crest: no word of it from bash
PIDS+=("$PLAIN")
wait_lines plain.log 3
peers "$PLAIN"
[ "$PAIRS" = "0>1 1>0" ] || fail "plain: the job has not peer access 0>1 and 1>0 on: '$PAIRS'"
printf '%s, %s, 100\n%s, %s, 100\n' "$PLAIN" "$GPU0" "$PLAIN" "$GPU1" >apps.csv
expect_error "pid $PLAIN holds CUDA state on 2 GPUs" "$CREST" --store "$S" --quiet checkpoint --pid "$PLAIN"
[ -s state/log ] && fail "plain: the driver was called for a refused job: $(cat state/log)"
"$CREST" --store "$S" --quiet checkpoint --pid "$PLAIN" --multi-gpu-process --tag plain >/dev/null 2>plain-ck.err &&
	fail "plain: the checkpoint of a job with peer access on, no shim, reported success"
for want in "of CUDA process $PLAIN" "cuCheckpointProcessRestore: CUDA_ERROR_INVALID_VALUE" "crest ended the job (pid $PLAIN)" \
	"was stored, which keeps its images (crest restore"; do
	grep -qF "$want" plain-ck.err || fail "plain: the error does not say '$want': $(cat plain-ck.err)"
done
grep -q "^peers $PLAIN: 2 pair(s) at the checkpoint" state/log && grep -q "^restore $PLAIN: peer access on (2 pair(s)): refused" state/log ||
	fail "plain: the driver did not checkpoint the job with 2 pairs on and refuse its restore: $(cat state/log)"
wait_gone "$PLAIN" 10 "plain: the job that could not be given back still runs"
kill_gone "$PLAIN"
echo "ok: plain: refused without --multi-gpu-process; with it, the driver could not give the job back and crest ended it: $(cat plain-ck.err)"
: >state/log
: >apps.csv
"$CREST" --store "$S" --quiet restore plain >plain-rs.out 2>plain-rs.err &&
	fail "plain: the restore of a job checkpointed with peer access on reported success"
grep -q "GPU state did not" plain-rs.err && grep -q "cuCheckpointProcessRestore: CUDA_ERROR_INVALID_VALUE" plain-rs.err ||
	fail "plain: the failed restore does not say the driver could not restore its GPU state: $(cat plain-rs.err)"
grep -q "^restore $PLAIN: peer access on (2 pair(s)): refused" state/log ||
	fail "plain: the driver's restore was not refused for the peer access: $(cat state/log)"
wait_gone "$PLAIN" 10 "plain: the copy whose GPU state did not come back runs"
echo "ok: plain: its restore failed as the driver's does: $(tail -1 plain-rs.err)"
: >state/log

# shim
(bare env FAKE_CUDA_CKPT_MS=300 "$CREST" --store "$S" run --cuda-shim -- "$PEER_JOB" "$T/cuda/libcuda.so.1" "$T/job.log" "$STEPS") \
	</dev/null >job.out 2>run.err &
RUN=$!
PIDS+=("$RUN")
run_init "$RUN" run.err
wait_lines job.log 2
JOB=$(pgrep -P "$INIT" || true)
[ "$(echo "$JOB" | wc -w)" = 1 ] || fail "the init $INIT has not one child (the job): '$JOB'"
PIDS+=("$JOB")
peers "$JOB"
[ "$PAIRS" = "0>1 1>0" ] || fail "shim: the job has not peer access 0>1 and 1>0 on: '$PAIRS'"
ch0=$CH
grep -qx crest-shim /proc/"$JOB"/task/*/comm || fail "shim: the job has no thread named crest-shim: its peer access did not go through the shim"
printf '%s, %s, 100\n%s, %s, 100\n' "$JOB" "$GPU0" "$JOB" "$GPU1" >apps.csv

# checkpoint NAME ARGS...: crest checkpoint --pid INIT ARGS, the job's page
# watched meanwhile; it must say the shim disabled 2 pairs, and the driver
# must have seen none on at the lock and checkpoint.
checkpoint() {
	local name=$1 ck w
	shift
	gone "$JOB" && fail "the job ended before the $name checkpoint: STEPS too few for this machine"
	"$CREST" --store "$S" checkpoint --pid "$INIT" "$@" >"$name.out" 2>"$name.err" &
	ck=$!
	watch_page "$JOB" "$ck" "$name.page" &
	w=$!
	wait "$ck" || { cat "$name.out" "$name.err" >&2; fail "the $name checkpoint failed (driver: $(paste -sd'|' state/log))"; }
	wait "$w"
	grep -q "CUDA shim: 2 peer access pair(s) of 1 process(es) disabled in .* before the freeze" "$name.err" ||
		{ cat "$name.out" "$name.err" >&2; fail "the $name checkpoint did not say the shim disabled 2 peer access pairs"; }
	grep -q "^peers $JOB: 0 pair(s) at the lock" state/log && grep -q "^peers $JOB: 0 pair(s) at the checkpoint" state/log ||
		fail "$name: the driver did not lock and checkpoint the job with no pair on: $(cat state/log)"
	held "$name" "$name.page"
	echo "ok: $name checkpoint at line $(lines job.log); the driver held the job (state:pairs) $HELD; $(grep "CUDA shim:" "$name.err")"
}

wait_lines job.log "$at1"
msleep "$ms1"
t_live=$(date +%s%3N)
checkpoint live
grep -q "^restore $JOB: 2 -> 1" state/log && grep -q "^unlock $JOB: 1 -> 0" state/log ||
	fail "live: the driver did not give the job back: $(cat state/log)"
grep -q "made again in" live.err || fail "live: crest does not say the peer access was made again: $(cat live.err)"
peers "$JOB"
[ "$PAIRS" = "0>1 1>0" ] && [ "$ST" = 0 ] ||
	fail "live: after the checkpoint the job has pairs '$PAIRS' on in driver state $ST, not 0>1 1>0 running"
[ "$CH" = $((ch0 + 4)) ] || fail "live: the job's pairs changed $((CH - ch0)) times across the checkpoint, not 4 (2 off, 2 on)"
n=$(lines job.log)
wait_lines job.log $((n + 3)) 30
echo "ok: live: the job runs on, 0>1 and 1>0 on again (4 changes), its copies working (line $(lines job.log))"

: >state/log
n=$(lines job.log)
wait_lines job.log $((at2 > n + 3 ? at2 : n + 3))
msleep "$ms2"
t_kill=$(date +%s%3N)
checkpoint kill --kill --tag k
wait_gone "$JOB" 30 "kill: the job is still there 30 s after checkpoint --kill"
wait_gone "$INIT" 30 "kill: the job's init is still there 30 s after checkpoint --kill"
wait "$RUN" 2>/dev/null || true
killed_at=$(lines job.log)
[ "$killed_at" -lt "$STEPS" ] || fail "kill: the job had ended by the --kill checkpoint"

: >state/log
: >apps.csv
t_restore=$(date +%s%3N)
"$CREST" --store "$S" restore k >restore.out 2>restore.err ||
	{ cat restore.out restore.err >&2; fail "crest restore k failed (driver: $(paste -sd'|' state/log))"; }
RPID=$(sed -n 's/^restored .*: pid \([0-9]*\) running again.*/\1/p' restore.out)
[ -n "$RPID" ] || { cat restore.out restore.err >&2; fail "crest restore printed no pid"; }
PIDS+=("$RPID")
RJOB=$(pgrep -P "$RPID" || true)
[ "$(echo "$RJOB" | wc -w)" = 1 ] || fail "the restored init $RPID has not one child (the job): '$RJOB'"
PIDS+=("$RJOB")
grep -q "^peers $RJOB: 0 pair(s) at the restore" state/log && grep -q "^restore $RJOB: 2 -> 1" state/log &&
	grep -q "^unlock $RJOB: 1 -> 0" state/log ||
	fail "restore: the driver did not restore the copy (pid $RJOB) with no pair on: $(cat state/log)"
n=$(lines job.log)
[ "$n" -ge "$STEPS" ] || wait_lines job.log $((n + 2)) 30
if ! gone "$RJOB"; then
	peers "$RJOB"
	[ "$PAIRS" = "0>1 1>0" ] && [ "$ST" = 0 ] || fail "restore: the copy has pairs '$PAIRS' on in driver state $ST, not 0>1 1>0 running"
fi
echo "ok: restore: the driver restored the copy (pid $RJOB, no pair on), the shim turned 0>1 and 1>0 on again, its copies working"
wait_gone "$RJOB" 60 "the restored job did not end in 60 s (log at $(lines job.log) of $STEPS lines)"

rc=0
wait "$REF" || rc=$?
[ "$rc" = 0 ] || fail "the uninterrupted run failed (exit $rc): $(tail -3 ref.out)"
[ "$(lines ref.log)" = "$STEPS" ] || fail "the uninterrupted run logged $(lines ref.log) of $STEPS lines"
[ "$(lines job.log)" = "$STEPS" ] ||
	fail "the job logged $(lines job.log) of $STEPS lines (killed at $killed_at); its stderr: $(grep -h '^peer_job' run.err restore.err | tail -3 | paste -sd'|')"
cmp job.log ref.log || fail "the job's log is not the uninterrupted run's (killed at $killed_at)"
# The job runs between the shim's disabling and the driver's lock, and
# between the driver's unlock and the shim's enabling, and a launch of its
# that waited out the lock goes on at once: the shim must hold its kernel
# launches while its peer access is off (its work gate), or a kernel
# reading the peer's memory is refused here (a real one would fault).
# Without the gate, after the restore nearly always.
refused=$(grep -ho '^peer_job: step [0-9]*: .* refused .* at [0-9]* ms' run.err restore.err 2>/dev/null |
	awk -v l="$t_live" -v k="$t_kill" -v r="$t_restore" '{ t = $(NF - 1)
		when = t >= r ? "after the restore" : t >= k ? "in the --kill checkpoint" : t >= l ? "in the live checkpoint" : "before any checkpoint"
		printf "%s%s %s", (NR > 1 ? ", " : ""), $3, when }' || true)
[ -z "$refused" ] || fail "copies of the job were refused while it ran with its peer access off, at step $refused"
echo "PASS: peer access 0>1 and 1>0 under the shim: off while the driver held the job, on again after a live checkpoint at step $at1 and a --kill at $at2 (log at $killed_at) and its restore; $STEPS lines identical to an uninterrupted run's; without the shim, the driver could give the job back neither time"
