#!/bin/bash
# Issue 33: the stall of a DDP job of 2 ranks (one process a GPU) beside
# one rank alone, and beside the bare driver + CRIU flow of the same
# processes, in one run on a 2-GPU machine. Each job (world size 1 or 2,
# torch.multiprocessing.spawn, NCCL over sockets: NCCL_P2P_DISABLE=1
# NCCL_SHM_DISABLE=1, USE_LIBUV=0) holds $DDP_MIB MiB (default 2048) of
# extra device memory a rank and trains on; it is checkpointed in turn,
# ROUNDS times each (default 2): by crest (its stall_seconds) and
# by crest-bare-ckpt (lock + checkpoint of every rank at once, criu dump of
# the launcher's tree into /dev/shm, restore + unlock). Then crest
# checkpoint --kill and crest restore, timed (the restore: until the
# command returns with every rank running). Prints one table and a JSON
# line; bench/RESULTS.md keeps the figures.
#
# Run from the repository root with .gpu/ (scripts/gpu-check.sh --bundle)
# carried: bash bench/transparent/ddp_stall.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
export CREST_INIT=1 CREST_CRIU=$ROOT/.gpu/criu/criu
export USE_LIBUV=0 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 CUBLAS_WORKSPACE_CONFIG=:4096:8
MIB=${DDP_MIB:-2048} ROUNDS=${ROUNDS:-2}
W=${DDP_WORK:-/tmp/crest-ddp-stall}
rm -rf "$W" /dev/shm/crest-bare-*
mkdir -p "$W"
CR() { "$ROOT/.gpu/run" "$ROOT/.gpu/bin/crest" "$@"; }
cat >"$W/ddp.py" <<'PY'
import os, socket, sys, time, torch
import torch.distributed as dist
import torch.multiprocessing as mp
def rank_main(rank, world, out, mib, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    torch.manual_seed(0)
    extra = torch.randn(mib << 18, device="cuda")    # mib MiB of fp32
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).cuda()
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    x = torch.randn(512, 1024, device="cuda")
    log = open(os.path.join(out, "rank%d.log" % rank), "a", buffering=1)
    i = 0
    while True:
        loss = ddp(x).pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
        log.write("step %d loss %.8f\n" % (i, loss.item()))
        i += 1
        time.sleep(0.05)
if __name__ == "__main__":
    world, out, mib = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    mp.spawn(rank_main, args=(world, out, mib, port), nprocs=world)
PY
tree_of() { local p=$1 c; echo "$p"; for c in $(pgrep -P "$p"); do tree_of "$c"; done; }
# start WORLD DIR: sets JOB and RANKS (the pids that hold CUDA state)
start() {
	local world=$1 d=$2 i r
	mkdir -p "$d"
	(cd "$d" && exec setsid python3 "$W/ddp.py" "$world" "$d" "$MIB" >"$d/launcher.out" 2>&1 </dev/null) &
	JOB=$!
	for i in $(seq 1 1200); do
		local ok=1
		for r in $(seq 0 $((world - 1))); do [ "$(cat "$d/rank$r.log" 2>/dev/null | wc -l)" -ge 20 ] || ok=0; done
		[ $ok = 1 ] && break
		kill -0 "$JOB" 2>/dev/null || { echo "ddp_stall: the job of $world rank(s) died: $(tail -3 "$d/launcher.out")" >&2; exit 1; }
		sleep 0.1
	done
	# The ranks: the launcher's children that multiprocessing spawned
	# (not its resource tracker, which maps libcuda with no context).
	RANKS=$(for p in $(pgrep -P "$JOB"); do grep -q spawn_main /proc/"$p"/cmdline 2>/dev/null && echo "$p"; done | paste -sd' ')
	[ "$(echo "$RANKS" | wc -w)" = "$world" ] ||
		{ echo "ddp_stall: found ranks '$RANKS' under launcher $JOB, not $world" >&2; exit 1; }
}
stop() { local p; for p in $(tree_of "$JOB"); do kill -9 "$p" 2>/dev/null; done; wait "$JOB" 2>/dev/null; sleep 1; }
# progress DIR WORLD: every rank steps on
progress() {
	local r n
	for r in $(seq 0 $(($2 - 1))); do
		n=$(wc -l <"$1/rank$r.log"); sleep 1
		[ "$(wc -l <"$1/rank$r.log")" -gt "$n" ] || { echo "ddp_stall: rank $r of $2 made no progress" >&2; return 1; }
	done
}
declare -A FIG
for world in 1 2; do
	d=$W/w$world
	start "$world" "$d"
	echo "world $world: launcher $JOB, CUDA ranks $RANKS"
	for k in $(seq 1 "$ROUNDS"); do
		CR --store "$W/store$world" --json checkpoint --pid "$JOB" >"$d/ck$k.json" 2>"$d/ck$k.err" ||
			{ echo "ddp_stall: crest checkpoint of $world rank(s) failed: $(tail -1 "$d/ck$k.err")" >&2; exit 1; }
		s=$(python3 -c 'import json,sys; print("%.3f" % json.load(open(sys.argv[1]))["stall_seconds"])' "$d/ck$k.json")
		FIG[crest,$world]+="$s "
		progress "$d" "$world" || exit 1
		rm -rf /dev/shm/crest-bare-$world
		"$ROOT/.gpu/run" "$ROOT/.gpu/bin/crest-bare-ckpt" "$JOB" /dev/shm/crest-bare-$world $RANKS >"$d/bare$k.json" 2>"$d/bare$k.err" ||
			{ echo "ddp_stall: the bare flow on $world rank(s) failed: $(tail -1 "$d/bare$k.err")" >&2; exit 1; }
		s=$(python3 -c 'import json,sys; print("%.3f" % json.load(open(sys.argv[1]))["stall_seconds"])' "$d/bare$k.json")
		FIG[bare,$world]+="$s "
		FIG[phases,$world]+=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.2f/%.2f/%.2f" % (d["checkpoint_seconds"], d["criu_dump_seconds"], d["restore_unlock_seconds"]))' "$d/bare$k.json")" "
		rm -rf /dev/shm/crest-bare-$world
		progress "$d" "$world" || exit 1
	done
	CR --store "$W/store$world" --quiet checkpoint --pid "$JOB" --kill --tag last 2>"$d/kill.err" ||
		{ echo "ddp_stall: crest checkpoint --kill failed: $(tail -1 "$d/kill.err")" >&2; exit 1; }
	for p in $RANKS $JOB; do while kill -0 "$p" 2>/dev/null && [ "$(awk '{print $3}' /proc/"$p"/stat)" != Z ]; do sleep 0.1; done; done
	wait "$JOB" 2>/dev/null
	t0=$(date +%s.%N)
	CR --store "$W/store$world" --quiet restore last 2>"$d/rs.err" ||
		{ echo "ddp_stall: crest restore failed: $(tail -1 "$d/rs.err")" >&2; exit 1; }
	FIG[restore,$world]=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }')
	progress "$d" "$world" || exit 1
	stop
done
med() { tr ' ' '\n' | grep . | sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
c1=$(echo "${FIG[crest,1]}" | med) c2=$(echo "${FIG[crest,2]}" | med)
b1=$(echo "${FIG[bare,1]}" | med) b2=$(echo "${FIG[bare,2]}" | med)
printf '%-28s %12s %12s %8s\n' "" "1 rank" "2 ranks" "2 / 1"
printf '%-28s %12s %12s %8.3f\n' "crest stall, s (median)" "$c1" "$c2" "$(awk -v a="$c2" -v b="$c1" 'BEGIN{print a/b}')"
printf '%-28s %12s %12s %8.3f\n' "bare flow stall, s (median)" "$b1" "$b2" "$(awk -v a="$b2" -v b="$b1" 'BEGIN{print a/b}')"
printf '%-28s %12.3f %12.3f\n' "crest / bare" "$(awk -v a="$c1" -v b="$b1" 'BEGIN{print a/b}')" "$(awk -v a="$c2" -v b="$b2" 'BEGIN{print a/b}')"
printf '%-28s %12s %12s\n' "bare ckpt/dump/restore, s" "${FIG[phases,1]}" "${FIG[phases,2]}"
printf '%-28s %12s %12s %8.3f\n' "crest restore, s" "${FIG[restore,1]}" "${FIG[restore,2]}" "$(awk -v a="${FIG[restore,2]}" -v b="${FIG[restore,1]}" 'BEGIN{print a/b}')"
echo "{\"mib_per_rank\": $MIB, \"rounds\": $ROUNDS, \"crest_stall_s\": {\"1\": [${FIG[crest,1]// /, }], \"2\": [${FIG[crest,2]// /, }]}, \"bare_stall_s\": {\"1\": [${FIG[bare,1]// /, }], \"2\": [${FIG[bare,2]// /, }]}, \"bare_phases_s\": {\"1\": \"${FIG[phases,1]% }\", \"2\": \"${FIG[phases,2]% }\"}, \"crest_restore_s\": {\"1\": ${FIG[restore,1]}, \"2\": ${FIG[restore,2]}}}" | sed 's/, ]/]/g'
