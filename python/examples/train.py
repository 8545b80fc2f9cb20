#!/usr/bin/env python3
"""A small deterministic training loop snapshotted with crest every k steps.

    train.py --mode full   --out full.txt            uninterrupted run
    train.py --mode kill   --out a.txt --store S     snapshots every k steps, SIGKILLs itself
    train.py --mode resume --out b.txt --store S     fresh process: restores the newest, goes on
    train.py --mode check  --store S                 all three as child processes; compares

Each run writes "STEP LOSS" lines, the loss as float.hex(): the losses after a
restore must equal the uninterrupted run's bit for bit. Deterministic: fixed
seeds, deterministic algorithms, data drawn from the (restored) torch RNG,
dropout drawing from the device RNG.
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")   # before CUDA starts
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import crest  # noqa: E402


def build(args, torch):
    """The model, its optimizer, and the devices its input and output live on.
    --device split puts the first half of the layers on cuda:0 and the rest on
    cuda:1 (a model spread over two GPUs in one process): its parameters and
    optimizer state are then tensors on both, which one Checkpointer saves."""
    torch.manual_seed(1234)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    split = args.device == "split"
    dev_in = torch.device("cuda:0" if split else args.device)
    dev_out = torch.device("cuda:1" if split else args.device)
    first = torch.nn.Sequential(torch.nn.Linear(64, args.hidden), torch.nn.ReLU(), torch.nn.Dropout(0.1)).to(dev_in)
    second = torch.nn.Sequential(torch.nn.Linear(args.hidden, args.hidden), torch.nn.ReLU(),
                                 torch.nn.Linear(args.hidden, 10)).to(dev_out)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.first, self.second = first, second

        def forward(self, x):
            return self.second(self.first(x).to(dev_out))

    model = Model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    return (dev_in, dev_out), model, opt


def step_once(torch, dev, model, opt):
    x = torch.randn(64, 64).to(dev[0])          # torch CPU RNG: part of the saved state
    y = torch.randint(0, 10, (64,)).to(dev[1])
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


def tree(model, opt):
    return {"model": model.state_dict(), "optim": opt.state_dict()}


def train(args):
    import torch
    dev, model, opt = build(args, torch)
    ck = crest.Checkpointer(args.store, staging_bytes=args.staging_mib << 20) if args.mode != "full" else None
    start = 0
    if args.mode == "resume":
        crest.materialize_optimizer(opt)
        if dev[0].type == "cuda":
            torch.cuda.init()               # so the CUDA RNG state exists to be set
        t = time.time()
        st = ck.restore_full(tree(model, opt))
        state = st["state"]
        crest.set_rng_state(state["rng"])
        start = state["step"]
        print("resumed from snapshot %.12s at step %d: %d bytes in %.3f s (%.3f s with the state)"
              % (st["snapshot"], start, st["bytes"], st["seconds"], time.time() - t), flush=True)
    model.train()
    out = open(args.out, "a" if args.mode == "resume" else "w", buffering=1)
    pending = None
    stalls = []
    for step in range(start + 1, args.steps + 1):
        loss = step_once(torch, dev, model, opt)
        out.write("%d %s\n" % (step, float(loss).hex()))
        if ck and step % args.every == 0 and args.mode == "kill":
            if pending is not None:
                ck.wait(pending)
            if dev[0].type == "cuda":
                for d in set(dev):
                    torch.cuda.synchronize(d)
            pending = ck.save(tree(model, opt), state={"step": step, "rng": crest.rng_state()},
                              tag="train-step-%d" % step, labels={"step": step})
            stalls.append(time.time())
        if args.mode == "kill" and step == args.kill_at:
            out.flush()
            if pending is not None:
                ck.wait(pending)   # the newest snapshot must be committed to be found
            print("killing myself at step %d" % step, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
    if pending is not None:
        print("last checkpoint:", ck.wait(pending), flush=True)
    if ck:
        ck.close()


def read_losses(path):
    d = {}
    with open(path) as f:
        for line in f:
            s, l = line.split()
            d[int(s)] = l
    return d


def check(args):
    here = os.path.abspath(__file__)
    base = [sys.executable, here, "--steps", str(args.steps), "--every", str(args.every), "--device", args.device,
            "--hidden", str(args.hidden), "--store", args.store, "--staging-mib", str(args.staging_mib)]
    full, part = args.store + ".full.txt", args.store + ".part.txt"
    shutil.rmtree(args.store, ignore_errors=True)
    subprocess.run(base + ["--mode", "full", "--out", full], check=True)
    r = subprocess.run(base + ["--mode", "kill", "--out", part, "--kill-at", str(args.kill_at)])
    if r.returncode != -signal.SIGKILL:
        sys.exit("check: the kill run ended with %d, not SIGKILL" % r.returncode)
    subprocess.run(base + ["--mode", "resume", "--out", part], check=True)
    a, b = read_losses(full), read_losses(part)
    # part holds steps 1..kill_at, then the resumed steps again from the snapshot on:
    # the later lines win, and every step must match the full run exactly.
    bad = [s for s in a if b.get(s) != a[s]]
    resumed = sorted(b)
    print("check: %d steps, killed at %d, losses compared %d, mismatches %d; last loss %s"
          % (args.steps, args.kill_at, len(a), len(bad), a[args.steps]))
    if bad or resumed != sorted(a):
        print("check: FAIL: steps differ: %s" % bad[:10])
        sys.exit(1)
    print("check: bit-exact OK")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["full", "kill", "resume", "check"], required=True)
    ap.add_argument("--store", default="crest-store")
    ap.add_argument("--out", default="losses.txt")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--kill-at", type=int, default=37)
    ap.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, or split (cuda:0 and cuda:1)")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--staging-mib", type=int, default=64)
    args = ap.parse_args()
    if args.mode == "check":
        check(args)
    else:
        train(args)


if __name__ == "__main__":
    main()
