#!/usr/bin/env python3
"""Plain PyTorch DDP training (CPU, gloo) checkpointed with crest as a job of many ranks.

    torchrun --nproc_per_node 2 ddp_train.py --store S --steps 12 --every 3
    torchrun --nproc_per_node 2 ddp_train.py --store S --steps 12 --every 3 --resume

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
deterministic algorithms, each rank's data and dropout drawn from its own torch RNG,
which is saved and restored, and the optimizer's lazily made state created before the
restore (crest.materialize_optimizer), and the gradients' buckets laid out alike in
every launch (below).

Per step each rank prints "rank R step S loss L" (L as repr(float): every digit);
per checkpoint waited for "rank R arrived step S snapshot ID", and "rank R committed
job snapshot step S ID" when its arrival completed the set; after a restore
"rank R resumed step S from snapshot ID".
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import crest  # noqa: E402


def say(line):
    """One line in one write: the ranks share torchrun's stdout, and print() writes the
    text and its newline apart when Python runs unbuffered."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--job", default="ddp-train", help="the job's name in the store")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--every", type=int, default=3, help="checkpoint every K steps (0: never)")
    ap.add_argument("--resume", action="store_true", help="restore the newest job snapshot of --job first")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--step-sleep", type=float, default=0.0,
                    help="seconds to sleep after each step (a slower job to kill in the middle)")
    ap.add_argument("--staging-mib", type=int, default=64)
    args = ap.parse_args()

    dist.init_process_group("gloo")   # env:// from torchrun: RANK, WORLD_SIZE, MASTER_ADDR/PORT
    rank, world = dist.get_rank(), dist.get_world_size()
    say("rank %d pid %d world %d" % (rank, os.getpid(), world))

    torch.use_deterministic_algorithms(True)
    torch.manual_seed(args.seed)      # the same initial model in every rank (DDP broadcasts rank 0's anyway)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, args.hidden), torch.nn.Tanh(), torch.nn.Dropout(0.1),
        torch.nn.Linear(args.hidden, args.hidden), torch.nn.Tanh(),
        torch.nn.Linear(args.hidden, 10))
    # find_unused_parameters=True keeps DDP from rebuilding its gradient buckets after the
    # first step of a launch (in the order the gradients came), so a relaunch's first step
    # lays them out as every step of an uninterrupted run does. Gloo's all-reduce of 3 or
    # more ranks adds in an order that depends on where a value sits in its bucket: with
    # the rebuild, losses after a resume differ from the uninterrupted run's in the last
    # bits (seen with 3 ranks); with 2 ranks a + b is exact in either order.
    ddp = DDP(model, find_unused_parameters=True)
    opt = torch.optim.Adam(ddp.parameters(), lr=1e-3)
    torch.manual_seed(args.seed + 1000 * (rank + 1))   # this rank's data and dropout

    def tree():
        return {"model": model.state_dict(), "optim": opt.state_dict()}

    ck = crest.Checkpointer(args.store, staging_bytes=args.staging_mib << 20, no_gpu=True, job=args.job)
    if rank == 0:
        say("job %s attempt %s" % (args.job, ck.job["attempt"]))
    start = 0
    if args.resume:
        crest.materialize_optimizer(opt)
        st = ck.restore_full(tree())
        crest.set_rng_state(st["state"]["rng"])
        start = st["state"]["step"]
        say("rank %d resumed step %d from snapshot %s" % (rank, start, st["snapshot"]))

    def report(r):
        say("rank %d arrived step %d snapshot %s" % (rank, r["step"], r["snapshot"]))
        if r["committed"]:
            say("rank %d committed job snapshot step %d %s" % (rank, r["step"], r["job_snapshot"]))

    ddp.train()
    pending = None
    for step in range(start + 1, args.steps + 1):
        if pending is not None and ck.done(pending):
            report(ck.wait(pending))
            pending = None
        x = torch.randn(args.batch, 32)
        y = torch.randint(0, 10, (args.batch,))
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        say("rank %d step %d loss %r" % (rank, step, loss.item()))
        if args.every and step % args.every == 0:
            if pending is not None:
                report(ck.wait(pending))
            pending = ck.save(tree(), state={"step": step, "rng": crest.rng_state()}, step=step)
        if args.step_sleep:
            time.sleep(args.step_sleep)
    if pending is not None:
        report(ck.wait(pending))
    ck.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
