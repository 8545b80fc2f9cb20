#!/bin/bash
# Issue 33 item 6: what crest's NCCL shim costs a DDP job, and what it
# buys. One run on a machine of 2 or more GPUs, WORLD ranks (default: every
# GPU, at most 4), one GPU a rank, a model whose gradients are 256 MiB a
# step (4 Linear(4096, 4096)), so that NCCL's transport shows:
#  1. the step time (forward, backward, AdamW, synchronized; median of the
#     steps after the first 50) of the same job three ways, alternating,
#     ROUNDS times each: NCCL's defaults (P2P over NVLink) bare; the same
#     under the shim (LD_PRELOAD=libcrest-shim.so); and NCCL over sockets
#     (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1), the one way to checkpoint
#     such a job without the shim;
#  2. the stall of a live crest checkpoint of that job holding $DDP_MIB MiB
#     (default 2048) more a rank, ROUNDS times: under crest run --cuda-shim
#     with P2P on (and the shim's release and rebuild within it), and over
#     sockets (crest checkpoint of the launcher, no shim).
# Prints a table and a JSON line; bench/RESULTS.md keeps the figures.
#
# Run from the repository root with .gpu/ (scripts/gpu-check.sh --bundle)
# carried: bash bench/transparent/nccl_shim.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
export CREST_INIT=1 CREST_CRIU=$ROOT/.gpu/criu/criu USE_LIBUV=0
MIB=${DDP_MIB:-2048} ROUNDS=${ROUNDS:-2} STEPS=${STEPS:-300}
ngpu=$(nvidia-smi -L | grep -c '^GPU ')
WORLD=${WORLD:-$((ngpu < 4 ? ngpu : 4))}
[ "$WORLD" -ge 2 ] || { echo "nccl_shim: needs 2 GPUs (this machine has $ngpu)" >&2; exit 1; }
SHIM=$ROOT/.gpu/lib/libcrest-shim.so
[ -f "$SHIM" ] || { echo "nccl_shim: $SHIM is missing: scripts/gpu-check.sh --bundle" >&2; exit 1; }
W=${SHIM_WORK:-/tmp/crest-nccl-shim}
rm -rf "$W"
mkdir -p "$W"
CR() { "$ROOT/.gpu/run" "$ROOT/.gpu/bin/crest" "$@"; }
cat >"$W/ddp.py" <<'PY'
import os, socket, sys, time, torch
import torch.distributed as dist
import torch.multiprocessing as mp
def rank_main(rank, world, out, mib, steps, pause, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    torch.manual_seed(0)
    extra = torch.randn(mib << 18, device="cuda") if mib else None
    model = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(4)]).cuda()
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4)
    x = torch.randn(256, 4096, device="cuda")
    log = open(os.path.join(out, "rank%d.log" % rank), "a", buffering=1)
    i = 0
    while steps == 0 or i < steps:
        s0 = time.perf_counter()
        loss = ddp(x).pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
        torch.cuda.synchronize()
        log.write("step %d %.7f loss %.8f\n" % (i, time.perf_counter() - s0, loss.item()))
        i += 1
        time.sleep(pause)
    dist.barrier()
    dist.destroy_process_group()
if __name__ == "__main__":
    world, out, mib, steps, pause = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    mp.spawn(rank_main, args=(world, out, mib, steps, pause, port), nprocs=world)
PY
tree_of() { local p=$1 c; echo "$p"; for c in $(pgrep -P "$p"); do tree_of "$c"; done; }
median_step() {  # median_step DIR...: of every rank's steps after the 50th
	python3 - "$@" <<'PY'
import glob, statistics, sys
v = []
for d in sys.argv[1:]:
    for f in glob.glob(d + "/rank*.log"):
        v += [float(l.split()[2]) for l in open(f) if int(l.split()[1]) >= 50]
print("%.3f" % (statistics.median(v) * 1e3))
PY
}
# 1. Step time, three ways, alternating.
for k in $(seq 1 "$ROUNDS"); do
	for mode in p2p shim sockets; do
		d=$W/step-$mode-$k
		mkdir -p "$d"
		case $mode in
		p2p) python3 "$W/ddp.py" "$WORLD" "$d" 0 "$STEPS" 0 >"$d/out" 2>&1 ;;
		shim) LD_PRELOAD=$SHIM python3 "$W/ddp.py" "$WORLD" "$d" 0 "$STEPS" 0 >"$d/out" 2>&1 ;;
		sockets) NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 python3 "$W/ddp.py" "$WORLD" "$d" 0 "$STEPS" 0 >"$d/out" 2>&1 ;;
		esac || { echo "nccl_shim: the $mode job failed: $(tail -3 "$d/out")" >&2; exit 1; }
	done
done
declare -A STEP
for mode in p2p shim sockets; do STEP[$mode]=$(median_step "$W"/step-$mode-*); done
# 2. Stalls: wait until every rank is 20 steps in, then ROUNDS live checkpoints.
wait_steps() {  # wait_steps DIR N
	local i r ok
	for i in $(seq 1 1800); do
		ok=1
		for r in $(seq 0 $((WORLD - 1))); do [ "$(cat "$1/rank$r.log" 2>/dev/null | wc -l)" -ge "$2" ] || ok=0; done
		[ $ok = 1 ] && return 0
		sleep 0.1
	done
	echo "nccl_shim: the job in $1 did not reach $2 steps" >&2
	return 1
}
declare -A STALL
json_of() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); s=d.get("shim", {}); print("%.3f %.3f %.3f" % (d["stall_seconds"], s.get("release_seconds", 0), s.get("rebuild_seconds", 0)))' "$1"; }
for mode in shim sockets; do
	d=$W/stall-$mode
	mkdir -p "$d"
	if [ $mode = shim ]; then
		(cd "$d" && exec "$ROOT/.gpu/run" "$ROOT/.gpu/bin/crest" --store "$W/store-$mode" run --cuda-shim -- \
			env -u LD_LIBRARY_PATH python3 "$W/ddp.py" "$WORLD" "$d" "$MIB" 0 0.05 >"$d/out" 2>"$d/run.err" </dev/null) &
		JOB=$!
		wait_steps "$d" 20 || exit 1
		target=$(sed -n 's/.* runs as pid \([0-9]*\) .*/\1/p' "$d/run.err")
	else
		(cd "$d" && NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 exec setsid python3 "$W/ddp.py" "$WORLD" "$d" "$MIB" 0 0.05 \
			>"$d/out" 2>&1 </dev/null) &
		JOB=$!
		wait_steps "$d" 20 || exit 1
		target=$JOB
	fi
	for k in $(seq 1 "$ROUNDS"); do
		CR --store "$W/store-$mode" --json checkpoint --pid "$target" >"$d/ck$k.json" 2>"$d/ck$k.err" ||
			{ echo "nccl_shim: the $mode checkpoint failed: $(tail -1 "$d/ck$k.err")" >&2; exit 1; }
		read -r s rel reb < <(json_of "$d/ck$k.json")
		STALL[$mode]+="$s " STALL[$mode,rel]+="$rel " STALL[$mode,reb]+="$reb "
		n=$(wc -l <"$d/rank0.log")
		wait_steps "$d" $((n + 10)) || exit 1
	done
	for p in $(tree_of "$target"); do kill -9 "$p" 2>/dev/null; done
	wait "$JOB" 2>/dev/null
	sleep 1
done
med() { tr ' ' '\n' | grep . | sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
ss=$(echo "${STALL[shim]}" | med) so=$(echo "${STALL[sockets]}" | med)
rel=$(echo "${STALL[shim,rel]}" | med) reb=$(echo "${STALL[shim,reb]}" | med)
printf '%-44s %10s %10s %10s\n' "$WORLD ranks, one GPU each" "P2P" "P2P+shim" "sockets"
printf '%-44s %10s %10s %10s\n' "median step, ms" "${STEP[p2p]}" "${STEP[shim]}" "${STEP[sockets]}"
printf '%-44s %10s %10.3f %10.3f\n' "step / P2P's" "1" "$(awk -v a="${STEP[shim]}" -v b="${STEP[p2p]}" 'BEGIN{print a/b}')" \
	"$(awk -v a="${STEP[sockets]}" -v b="${STEP[p2p]}" 'BEGIN{print a/b}')"
printf '%-44s %10s %10s %10s\n' "live checkpoint stall, s (median, +$MIB MiB/rank)" "refused" "$ss" "$so"
printf '%-44s %10s %10s %10s\n' "  of it the shim's release + rebuild, s" "" "$rel + $reb" ""
echo "{\"world\": $WORLD, \"mib_per_rank\": $MIB, \"rounds\": $ROUNDS, \"steps\": $STEPS, \"step_ms\": {\"p2p\": ${STEP[p2p]}, \"shim\": ${STEP[shim]}, \"sockets\": ${STEP[sockets]}}, \"stall_s\": {\"shim\": [${STALL[shim]// /, }], \"sockets\": [${STALL[sockets]// /, }]}, \"shim_release_s\": [${STALL[shim,rel]// /, }], \"shim_rebuild_s\": [${STALL[shim,reb]// /, }]}" | sed 's/, ]/]/g'
