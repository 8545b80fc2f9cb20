# Issue 33: a plain PyTorch DDP job that knows nothing of crest, 2 ranks on
# the CPU (gloo) under torchrun, whose elastic agent, rendezvous store and
# ranks talk over TCP on 127.0.0.1, is checkpointed by torchrun's pid with
# --kill at a random step (seed printed) and restored: each rank's losses
# must equal an uninterrupted run's, bit for bit, and the job must end by
# itself, all processes gone. Skipped (77) where /usr/bin/python3 has no
# torch.
source "$(dirname "$0")/lib.sh"
need_root
PY=/usr/bin/python3
$PY -c 'import torch, torch.distributed.run' 2>/dev/null || { echo "SKIP: /usr/bin/python3 has no torch"; exit 77; }
cd "$T"
seed=${CREST_SEED:-$(( $(date +%s%N) % 100000 ))}
RANDOM=$seed
at=$((15 + RANDOM % 40))
echo "seed $seed: checkpoint once both ranks are $at steps in"
cat >ddp.py <<'PY'
import os, sys, time, torch
import torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64))
ddp = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
g = torch.Generator().manual_seed(1 + rank)
x = torch.randn(32, 64, generator=g)
log = open(os.path.join(sys.argv[1], "rank%d.log" % rank), "a", buffering=1)
for i in range(int(sys.argv[2])):
    loss = ddp(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    log.write("step %d loss %.10f\n" % (i, loss.item()))
    time.sleep(0.05)
dist.barrier()
dist.destroy_process_group()
PY
# run DIR: torchrun of 2 ranks on this machine, a free port for its store
run() {
	local port fd
	# None of the test runner's files (a restore in place checks them).
	for fd in $(ls /proc/$$/fd); do [ "$fd" -gt 2 ] && eval "exec $fd>&-"; done
	port=$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	# --redirects/--tee: Debian's torch 1.13 under Python 3.11 cannot parse
	# the default (test_python_ddp.py says more).
	exec $PY -m torch.distributed.run --nnodes 1 --nproc_per_node 2 --master_addr 127.0.0.1 \
		--master_port "$port" --max_restarts 0 --redirects 2 --tee 2 --log_dir "$1/torchrun" \
		"$T/ddp.py" "$1" 150
}
mkdir ref job
(export OMP_NUM_THREADS=1; cd ref && run "$T/ref") >ref.out 2>&1 || fail "the uninterrupted run failed: $(tail -3 ref.out)"
for r in 0 1; do [ "$(lines ref/rank$r.log)" = 150 ] || fail "the uninterrupted run's rank $r wrote $(lines ref/rank$r.log) lines"; done
(export OMP_NUM_THREADS=1; cd job && exec setsid bash -c "$(declare -f run); PY=$PY T=$T run $T/job" </dev/null >job.out 2>&1) &
JOB=$!
PIDS+=("$JOB")
wait_lines job/rank0.log "$at" 120
wait_lines job/rank1.log "$at" 120
tree_of() { local c; echo "$1"; for c in $(pgrep -P "$1"); do tree_of "$c"; done; }
tree=$(tree_of "$JOB" | paste -sd' ')
PIDS+=($tree)
echo "the job: $(echo "$tree" | wc -w) processes (torchrun, its ranks)"
"$CREST" --store "$S" --quiet checkpoint --pid "$JOB" --kill --tag ddp 2>ck.err || fail "checkpoint of the DDP job: $(cat ck.err)"
for p in $tree; do
	for i in $(seq 1 200); do [ -e /proc/"$p" ] && [ "$(awk '{print $3}' /proc/"$p"/stat 2>/dev/null)" != Z ] || break; sleep 0.05; done
done
wait "$JOB" 2>/dev/null || true
n0=$(lines job/rank0.log)
"$CREST" --store "$S" --quiet restore ddp >/dev/null 2>rs.err || fail "restore of the DDP job: $(cat rs.err)"
deadline=$((SECONDS + 120))
for p in $tree; do
	while [ -e /proc/"$p" ] && [ "$(awk '{print $3}' /proc/"$p"/stat 2>/dev/null)" != Z ]; do
		[ $SECONDS -lt $deadline ] || fail "the restored job did not end (pid $p, rank 0 at $(lines job/rank0.log) lines)"
		sleep 0.1
	done
done
for r in 0 1; do
	cmp -s job/rank$r.log ref/rank$r.log ||
		fail "rank $r's losses differ from an uninterrupted run's ($(lines job/rank$r.log) of 150 lines; first: $(cmp job/rank$r.log ref/rank$r.log | head -1))"
done
echo "PASS: a torchrun DDP job (gloo, 2 ranks) checkpointed at step $n0 with --kill, restored, ended by itself: both ranks' 150 losses identical to an uninterrupted run's"
