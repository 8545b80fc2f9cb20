#!/usr/bin/env python3
"""Plain PyTorch DDP or FSDP2 training checkpointed with crest as a job of many ranks.

    torchrun --nproc_per_node 2 ddp_train.py --store S --steps 12 --every 3
    torchrun --nproc_per_node 2 ddp_train.py --store S --steps 12 --every 3 --resume
    torchrun --nproc_per_node 2 ddp_train.py --store S --device cuda [--fsdp] ...

--device cpu (the default): DDP over gloo. --device cuda: each rank on
cuda:LOCAL_RANK, DDP over NCCL. --fsdp (with --device cuda): the model sharded with
FSDP2's fully_shard instead of DDP, its parameters and Adam's state DTensors: each
rank checkpoints its own shards (crest saves a DTensor's local shard) and restores
them in place.

(Debian's torch 1.13 under Python 3.11 fails in torchrun's own default --redirects 0,
"'NoneType' object has no attribute 'get'": add --redirects 2 --tee 2 there.)

Each rank opens crest.Checkpointer(S, job=NAME): rank and world come from
torch.distributed. Every --every steps each rank saves its model state_dict and
optimizer state, with its RNG state and the step in `state`, at step=STEP; once every
rank's checkpoint of the step is committed, the store holds one job snapshot of it.
No rank waits for another for that: the store is the meeting place, and the rank that
completes the set commits the job snapshot. A checkpoint is waited for as soon as it
is done (polled each step), or before the next one.

--resume: each rank restores its part of the newest job snapshot of NAME (in place:
the model and the optimizer are built first) and goes on from its step. The losses
after the resumed step equal an uninterrupted run's bit for bit: fixed seeds,
deterministic algorithms (on CUDA with CUBLAS_WORKSPACE_CONFIG, set here before torch
starts), each rank's data drawn from its own torch CPU RNG and its dropout from its
device's RNG, both saved and restored, the optimizer's lazily made state created
before the restore (crest.materialize_optimizer), and the gradients' buckets laid out
alike in every launch (below).

Per step each rank prints "rank R step S loss L" (L as repr(float): every digit);
per checkpoint, before it is taken, "rank R saving step S tensors LOCAL of FULL
bytes" (LOCAL: the bytes of the rank's tensors crest copies, its shards under --fsdp;
FULL: those tensors' whole size); per checkpoint waited for "rank R arrived step S
snapshot ID", and "rank R committed job snapshot step S ID" when its arrival
completed the set; after a restore "rank R resumed step S from snapshot ID".
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
# cuBLAS is deterministic (--device cuda) only with this workspace setting, which it
# reads when CUDA starts: so before torch is imported. Nothing reads it on the CPU.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import crest  # noqa: E402


def say(line):
    """One line in one write: the ranks share torchrun's stdout, and print() writes the
    text and its newline apart when Python runs unbuffered."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--job", default="ddp-train", help="the job's name in the store")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--every", type=int, default=3, help="checkpoint every K steps (0: never)")
    ap.add_argument("--resume", action="store_true", help="restore the newest job snapshot of --job first")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--hidden", type=int, default=256,
                    help="the width of the hidden layers: the model holds about hidden^2 parameters "
                         "(4096: 64 MiB, 192 MiB with Adam's moments)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--step-sleep", type=float, default=0.0,
                    help="seconds to sleep after each step (a slower job to kill in the middle)")
    ap.add_argument("--staging-mib", type=int, default=64)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="cpu: gloo; cuda: each rank on cuda:LOCAL_RANK, NCCL")
    ap.add_argument("--fsdp", action="store_true", help="shard the model with FSDP2's fully_shard, not DDP "
                    "(needs --device cuda and torch >= 2.4)")
    args = ap.parse_args()
    if args.fsdp and args.device != "cuda":
        ap.error("--fsdp needs --device cuda (FSDP2 over NCCL)")
    if args.fsdp and fully_shard() is None:
        ap.error("--fsdp needs torch.distributed.fsdp.fully_shard (torch >= 2.4); this torch is %s"
                 % torch.__version__)
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: this torch (%s) sees no CUDA GPU" % torch.__version__)
    return args


def fully_shard():
    """FSDP2's fully_shard, or None. Public in torch.distributed.fsdp since 2.6, in
    torch.distributed._composable.fsdp in 2.4 and 2.5. Any exception, not only
    ImportError: torch 1.13 under Python 3.11 fails importing torch.distributed.fsdp
    with ValueError."""
    for mod in ("torch.distributed.fsdp", "torch.distributed._composable.fsdp"):
        try:
            f = getattr(__import__(mod, fromlist=["fully_shard"]), "fully_shard", None)
        except Exception:
            continue
        if f is not None:
            return f
    return None


def start(args):
    """Joins the process group; returns (rank, world, device)."""
    if args.device == "cpu":
        dist.init_process_group("gloo")   # env:// from torchrun: RANK, WORLD_SIZE, MASTER_ADDR/PORT
        return dist.get_rank(), dist.get_world_size(), torch.device("cpu")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    torch.cuda.set_device(device)        # before NCCL, so that every rank's communicator is on its GPU
    dist.init_process_group("nccl", device_id=device)
    return dist.get_rank(), dist.get_world_size(), device


def build(args, device):
    """(model, net, opt): the model (its state_dict is saved), what the steps call (DDP's
    wrapper, or the model sharded in place by fully_shard), its Adam."""
    torch.manual_seed(args.seed)      # the same initial model in every rank (DDP broadcasts rank 0's anyway)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, args.hidden), torch.nn.Tanh(), torch.nn.Dropout(0.1),
        torch.nn.Linear(args.hidden, args.hidden), torch.nn.Tanh(),
        torch.nn.Linear(args.hidden, 10)).to(device)
    if args.fsdp:
        # One FSDP group per Linear, then the root: each rank keeps dim-0 shards of every
        # parameter, and Adam's moments, made like them, are sharded the same.
        shard = fully_shard()
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                shard(layer)
        shard(model)
        net = model
    else:
        # find_unused_parameters=True keeps DDP from rebuilding its gradient buckets after the
        # first step of a launch (in the order the gradients came), so a relaunch's first step
        # lays them out as every step of an uninterrupted run does. Gloo's all-reduce of 3 or
        # more ranks adds in an order that depends on where a value sits in its bucket: with
        # the rebuild, losses after a resume differ from the uninterrupted run's in the last
        # bits (seen with 3 ranks); with 2 ranks a + b is exact in either order.
        net = DDP(model, device_ids=[device.index] if device.type == "cuda" else None,
                  find_unused_parameters=True)
    return model, net, torch.optim.Adam(net.parameters(), lr=1e-3)


def tensor_bytes(obj):
    """(local, full): the bytes of the tensors in obj crest copies (a DTensor's local
    shard) and their whole size (a DTensor's global shape)."""
    if isinstance(obj, torch.Tensor):
        full = obj.numel() * obj.element_size()
        to_local = getattr(obj, "to_local", None)    # a DTensor
        if to_local is None:
            return full, full
        with torch.no_grad():
            loc = to_local()
        return loc.numel() * loc.element_size(), full
    vals = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()
    sums = [tensor_bytes(v) for v in vals]
    return sum(a for a, _ in sums), sum(b for _, b in sums)


def gpu_uuid(device):
    """The GPU's UUID as nvidia-smi -L prints it (GPU-...), for the job snapshot; None on
    CPU or where this torch does not say."""
    if device.type != "cuda":
        return None
    u = getattr(torch.cuda.get_device_properties(device), "uuid", None)
    if u is None:
        return None
    u = str(u)
    return u if u.startswith("GPU-") else "GPU-" + u


def main():
    args = parse_args()
    rank, world, device = start(args)
    say("rank %d pid %d world %d device %s%s" % (rank, os.getpid(), world, device, " fsdp" if args.fsdp else ""))

    torch.use_deterministic_algorithms(True)
    model, net, opt = build(args, device)
    torch.manual_seed(args.seed + 1000 * (rank + 1))   # this rank's data and dropout

    def tree():
        return {"model": model.state_dict(), "optim": opt.state_dict()}

    ck = crest.Checkpointer(args.store, staging_bytes=args.staging_mib << 20, no_gpu=device.type == "cpu",
                            device=device.index or 0, job=args.job, gpu=gpu_uuid(device))
    if rank == 0:
        say("job %s attempt %s" % (args.job, ck.job["attempt"]))
    start_step = 0
    if args.resume:
        crest.materialize_optimizer(opt)
        st = ck.restore_full(tree())
        crest.set_rng_state(st["state"]["rng"])
        start_step = st["state"]["step"]
        say("rank %d resumed step %d from snapshot %s" % (rank, start_step, st["snapshot"]))

    def report(r):
        say("rank %d arrived step %d snapshot %s" % (rank, r["step"], r["snapshot"]))
        if r["committed"]:
            say("rank %d committed job snapshot step %d %s" % (rank, r["step"], r["job_snapshot"]))

    net.train()
    pending = None
    for step in range(start_step + 1, args.steps + 1):
        if pending is not None and ck.done(pending):
            report(ck.wait(pending))
            pending = None
        x = torch.randn(args.batch, 32).to(device)        # drawn on the CPU RNG, then moved
        y = torch.randint(0, 10, (args.batch,)).to(device)
        loss = torch.nn.functional.cross_entropy(net(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        say("rank %d step %d loss %r" % (rank, step, loss.item()))
        if args.every and step % args.every == 0:
            if pending is not None:
                report(ck.wait(pending))
            t = tree()
            say("rank %d saving step %d tensors %d of %d bytes" % ((rank, step) + tensor_bytes(t)))
            pending = ck.save(t, state={"step": step, "rng": crest.rng_state()}, step=step)
        if args.step_sleep:
            time.sleep(args.step_sleep)
    if pending is not None:
        report(ck.wait(pending))
    ck.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
