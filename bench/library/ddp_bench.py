#!/usr/bin/env python3
"""DDP job checkpoints: crest's job checkpoint beside PyTorch DCP's async_save (issue 34, item 6).

One launch, under torchrun, one process a GPU (NCCL; --device cpu: gloo, for a machine
without one):

    torchrun --nproc_per_node N ddp_bench.py --store S --dcp D --gib 4 --json OUT.json

Each rank builds the same DDP model, a stack of Linear(H, H) layers sized so that its
fp32 parameters and AdamW's two moments come to about --gib GiB, and takes one
optimizer step (the moments exist from then on). Then two checkpoints, the second after
one more optimizer step, each taken twice, one after the other, on the same state:

  crest  every rank ck.save(tree, step=S) on its own Checkpointer(S, job=...): stall =
         wall time of save() (beside the library's own stall_s); then ck.wait():
         time until this rank arrived; "job" = from the first rank's save() call to the
         return of the wait() that committed the job snapshot.
  DCP    dcp.async_save(state_dict, checkpoint_id=D/step-S): stall = time until it
         returns; then .result(): "saved" = from the first rank's call to the last
         rank's return of result().

Before each timed call the ranks synchronize their GPU and meet at a barrier, so that
they start together; the state dicts are built before it (bookkeeping, the same for
both). Stored bytes after each checkpoint: crest's `casctl stats --json` (unique and
stored bytes) and the store directory's size; DCP's step directory's size. Beside them,
"one replica plus what differs between ranks": rank 0's tensor bytes, plus each other
rank's 4 KiB chunks that differ from rank 0's (compared on the device before the
checkpoint, not assumed), plus every rank's pickled state (crest's bytes beyond its
tensors). After the second checkpoint rank 0 restores its part of the newest job
snapshot into zeroed tensors and compares them with the live ones: a broken checkpoint
fails the run (exit 1) rather than showing a number.

Rank 0 prints progress lines ("ddp_bench: ...") and, at the end, one RESULT line per
checkpoint, and writes --json for the summary:

    ddp_bench.py --summary W1.json W2.json ...   # one table and the ratios to world 1

Exit 2 on bad arguments; 1 when a check failed.
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "python"))

GIB = 1 << 30
CHUNK = 4096   # crest's chunk of a device region: what "differs" is counted in


def usage(msg):
    """Bad input: one line, exit 2."""
    sys.stderr.write("ddp_bench: %s\n" % msg)
    sys.exit(2)


def dir_bytes(path):
    """Bytes of the files under path (du -sb without the directories' own blocks)."""
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except FileNotFoundError:
                pass   # a temporary file renamed away while walking
    return total


def walk(obj, fn):
    """obj with every tensor replaced by fn(tensor); dicts, lists and tuples rebuilt."""
    import torch
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, dict):
        return obj.__class__((k, walk(v, fn)) for k, v in obj.items())   # an OrderedDict stays one
    if isinstance(obj, (list, tuple)):
        return type(obj)(walk(v, fn) for v in obj)
    return obj


def tensors_of(obj, out=None, prefix=""):
    """[(path, tensor)] in a fixed order: the same in every rank for the same tree."""
    import torch
    out = [] if out is None else out
    if isinstance(obj, torch.Tensor):
        out.append((prefix, obj))
    elif isinstance(obj, dict):
        for k, v in obj.items():
            tensors_of(v, out, "%s/%s" % (prefix, k))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            tensors_of(v, out, "%s/%d" % (prefix, i))
    return out


def nbytes(t):
    return t.numel() * t.element_size()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--summary", nargs="+", metavar="JSON", help="print the table of these launches' --json and exit")
    ap.add_argument("--store", help="crest store (fresh)")
    ap.add_argument("--dcp", help="DCP's directory (fresh); each checkpoint in DIR/step-S")
    ap.add_argument("--gib", type=float, default=4.0, help="parameters + AdamW moments a rank, GiB (4)")
    ap.add_argument("--hidden", type=int, default=0, help="layer width (0: 4096 on cuda, 256 on cpu)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--staging-gib", type=float, default=0,
                    help="crest's staging pool a rank (0: the state, rounded up to 256 MiB, so a copy fits)")
    ap.add_argument("--casctl", default="casctl", help="command line of casctl (e.g. '.gpu/run casctl')")
    ap.add_argument("--job", default="ddp-bench")
    ap.add_argument("--json", help="rank 0 writes the launch's figures here")
    args = ap.parse_args()
    if args.summary:
        return summary(args.summary)
    if not args.store or not args.dcp:
        usage("--store and --dcp are needed (or --summary)")
    if not args.gib > 0 or args.hidden < 0 or args.staging_gib < 0:
        usage("--gib must be > 0, --hidden and --staging-gib >= 0")
    for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        if v not in os.environ:
            usage("$%s is not set: run this under torchrun (ddp_bench.sh does)" % v)
    return run(args)


def run(args):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    import crest

    t_launch = time.monotonic()
    local = int(os.environ["LOCAL_RANK"])
    cuda = args.device == "cuda"
    if cuda:
        if not torch.cuda.is_available():
            usage("--device cuda, but torch sees no GPU (--device cpu for a CPU run)")
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
    else:
        dev = torch.device("cpu")
    have_dcp = False
    why_no_dcp = ""
    try:
        import torch.distributed.checkpoint as dcp
        have_dcp = hasattr(dcp, "async_save")
        if not have_dcp:
            why_no_dcp = "torch %s has no torch.distributed.checkpoint.async_save" % torch.__version__
    except ImportError as e:
        why_no_dcp = "torch %s: %s" % (torch.__version__, e)
    # DCP's async_save refuses a process group without a CPU backend (its plans travel
    # as objects); DDP's gradients go through NCCL. Barriers and the figures' gathers go
    # through a gloo group of their own: no CUDA work of ours queued beside the job's.
    dist.init_process_group("cpu:gloo,cuda:nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")

    def say(line):
        if rank == 0:
            sys.stdout.write("ddp_bench: [%6.1f s] %s\n" % (time.monotonic() - t_launch, line))
            sys.stdout.flush()

    def meet():
        if cuda:
            torch.cuda.synchronize()
        dist.barrier(group=gloo)

    def gather(obj):
        out = [None] * world
        dist.all_gather_object(out, obj, group=gloo)
        return out

    hidden = args.hidden or (4096 if cuda else 256)
    per_layer = 12 * (hidden * hidden + hidden)   # weight + bias, fp32, and two moments of each
    layers = max(1, round(args.gib * GIB / per_layer))
    say("world %d, device %s, %d x Linear(%d, %d): %.3f GiB of parameters + AdamW moments a rank"
        % (world, dev, layers, hidden, hidden, layers * per_layer / GIB))
    torch.manual_seed(1234)   # the same model in every rank (DDP broadcasts rank 0's anyway)
    # Weights of variance 1/H and tanh between layers keep the activations and gradients
    # of every layer well away from zero: with PyTorch's default init and ReLU a deep stack
    # leaves the last layers' gradients, and so AdamW's moments, mostly zero, which crest
    # would store as holes and DCP write whole.
    mods = []
    for i in range(layers):
        lin = torch.nn.Linear(hidden, hidden, device=dev)
        with torch.no_grad():
            lin.weight.normal_(0, hidden ** -0.5)
        mods.append(lin)
        if i + 1 < layers:
            mods.append(torch.nn.Tanh())
    model = torch.nn.Sequential(*mods)
    ddp = DDP(model, device_ids=[local]) if cuda else DDP(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4)
    gen = torch.Generator(device=dev)
    gen.manual_seed(77 + rank)   # each rank its own batch: DDP averages the gradients

    def step():
        x = torch.randn(16, hidden, device=dev, generator=gen)
        loss = ddp(x).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if cuda:
            torch.cuda.synchronize()

    step()
    say("model built and one optimizer step taken")

    def crest_tree():
        return {"model": model.state_dict(), "optim": opt.state_dict()}

    def dcp_state():
        # DCP's own way to a DDP model's state (parameter names without "module.",
        # the optimizer's state by them); no copies.
        from torch.distributed.checkpoint.state_dict import get_state_dict
        msd, osd = get_state_dict(ddp, opt)
        return {"model": msd, "optim": osd}

    tree = crest_tree()
    tensor_bytes = sum(nbytes(t) for _, t in tensors_of(tree))
    staging = int(args.staging_gib * GIB) if args.staging_gib else -(-tensor_bytes // (256 << 20)) * (256 << 20)
    t = time.monotonic()
    ck = crest.Checkpointer(args.store, staging_bytes=staging, device=local if cuda else 0,
                            no_gpu=not cuda, job=args.job)
    say("crest store opened by every rank (staging %.2f GiB a rank, %.1f s)" % (staging / GIB, time.monotonic() - t))
    if not have_dcp:
        say("DCP skipped: %s" % why_no_dcp)

    def differ_bytes(tr):
        """This rank's bytes, in 4 KiB chunks, that differ from rank 0's (0 on rank 0)."""
        n = 0
        for _, t in tensors_of(tr):
            ref = t.detach().clone()
            dist.broadcast(ref, 0)    # CUDA tensors through NCCL, CPU ones through gloo
            if rank == 0:
                continue
            d = (t.detach().reshape(-1).view(torch.uint8) != ref.reshape(-1).view(torch.uint8))
            full = d.numel() // CHUNK * CHUNK
            n += int(d[:full].view(-1, CHUNK).any(1).sum().item()) * CHUNK
            if d.numel() > full and bool(d[full:].any()):
                n += d.numel() - full
        return n

    def zero_bytes(tr):
        """Bytes of tr in all-zero 4 KiB chunks (crest stores them as holes)."""
        n = 0
        for _, t in tensors_of(tr):
            nz = t.detach().reshape(-1).view(torch.uint8) != 0
            full = nz.numel() // CHUNK * CHUNK
            n += int((~nz[:full].view(-1, CHUNK).any(1)).sum().item()) * CHUNK
            if nz.numel() > full and not bool(nz[full:].any()):
                n += nz.numel() - full
        return n

    def casctl_stats():
        cmd = shlex.split(args.casctl) + ["--store", args.store, "stats", "--json"]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
        if p.returncode != 0:
            raise RuntimeError("%s: exit %d: %s" % (" ".join(cmd), p.returncode, p.stderr.strip()[-300:]))
        return json.loads(p.stdout)

    figures = {"world": world, "device": str(dev), "layers": layers, "hidden": hidden,
               "tensor_bytes": tensor_bytes, "staging_bytes": staging, "dcp": have_dcp,
               "why_no_dcp": why_no_dcp, "ckpts": []}
    prev_unique = prev_stored = prev_dir = 0
    for k, S in ((1, 1), (2, 2)):
        if k == 2:
            step()
            say("one more optimizer step")
        tree = crest_tree()
        diff = differ_bytes(tree)
        zeros = zero_bytes(tree) if rank == 0 else 0
        meet()
        # crest: save() on every rank at once, then wait().
        t0 = time.monotonic()
        h = ck.save(tree, state={"step": S}, step=S)
        t1 = time.monotonic()
        r = ck.wait(h)
        t2 = time.monotonic()
        blob = r["bytes"] - tensor_bytes
        mine = {"rank": rank, "start": t0, "stall": t1 - t0, "stall_lib": r["stall_s"], "wait": t2 - t1,
                "end": t2, "committed": r["committed"], "ingest": r["ingest_s"], "new_bytes": r["new_bytes"],
                "stored_bytes": r["stored_bytes"], "rounds": r["rounds"], "blob": blob, "differ": diff}
        all_c = gather(mine)
        meet()
        c = {"stall": [x["stall"] for x in all_c], "stall_lib": [x["stall_lib"] for x in all_c],
             "wait": [x["wait"] for x in all_c], "ingest": [x["ingest"] for x in all_c],
             "rounds": max(x["rounds"] for x in all_c),
             "new_bytes": sum(x["new_bytes"] for x in all_c), "stored_bytes": sum(x["stored_bytes"] for x in all_c)}
        done = [x["end"] for x in all_c if x["committed"]]
        if not done:
            say("FAIL: no rank's wait() committed the job snapshot of step %d" % S)
            return 1
        c["job"] = min(done) - min(x["start"] for x in all_c)
        ref = tensor_bytes + sum(x["differ"] for x in all_c) + sum(x["blob"] for x in all_c)
        fig = {"ckpt": k, "step": S, "crest": c, "ref_bytes": ref, "differ_bytes": sum(x["differ"] for x in all_c),
               "blob_bytes": sum(x["blob"] for x in all_c), "zero_bytes": zeros}
        if rank == 0:
            st = casctl_stats()
            d = dir_bytes(args.store)
            c.update(unique_total=st["unique_bytes"], stored_total=st["stored_bytes"], dir_total=d,
                     unique=st["unique_bytes"] - prev_unique, stored=st["stored_bytes"] - prev_stored,
                     dir=d - prev_dir)
            prev_unique, prev_stored, prev_dir = st["unique_bytes"], st["stored_bytes"], d
        say("checkpoint %d crest: stall max %.3f s (library's %.3f), job snapshot at %.3f s, %s new bytes"
            % (k, max(c["stall"]), max(c["stall_lib"]), c["job"], c["new_bytes"]))
        if have_dcp:
            sd = dcp_state()
            path = os.path.join(args.dcp, "step-%d" % S)
            meet()
            t0 = time.monotonic()
            f = dcp.async_save(sd, checkpoint_id=path)
            t1 = time.monotonic()
            # PyTorch 2.9+ returns an AsyncSaveResponse where the stager stages in the
            # background (not the default); its upload future is the one to wait for.
            f = getattr(f, "upload_completion", f)
            f.result()
            t2 = time.monotonic()
            all_d = gather({"start": t0, "stall": t1 - t0, "result": t2 - t1, "end": t2})
            meet()
            dd = {"stall": [x["stall"] for x in all_d], "result": [x["result"] for x in all_d],
                  "saved": max(x["end"] for x in all_d) - min(x["start"] for x in all_d)}
            if rank == 0:
                dd["dir"] = dir_bytes(path)
                dd["dir_total"] = dir_bytes(args.dcp)
            fig["dcp"] = dd
            say("checkpoint %d DCP: stall max %.3f s, saved at %.3f s" % (k, max(dd["stall"]), dd["saved"]))
            del sd
        figures["ckpts"].append(fig)

    # The check: rank 0's part of the newest job snapshot, restored into zeroed tensors,
    # equals the live state (the second checkpoint's; nothing changed since).
    ok = True
    if rank == 0:
        live = crest_tree()
        zero = walk(live, lambda t: torch.zeros_like(t))
        t = time.monotonic()
        st = ck.restore_full(zero)
        figures["restore_s"] = time.monotonic() - t
        bad = [p for (p, a), (_, b) in zip(tensors_of(live), tensors_of(zero)) if not torch.equal(a, b)]
        if st["state"] != {"step": 2} or bad:
            ok = False
            say("FAIL: the restored job snapshot differs from the live state: state %r, %d tensors differ (%s)"
                % (st["state"], len(bad), ", ".join(bad[:3])))
        else:
            say("restore check: rank 0's part of the job snapshot of step 2 (%d tensors, %d bytes) equals the "
                "live state (%.2f s)" % (len(tensors_of(live)), st["bytes"], figures["restore_s"]))
        figures["restore_ok"] = ok
        del zero
    meet()
    ck.close()
    if rank == 0:
        for fig in figures["ckpts"]:
            c, d = fig["crest"], fig.get("dcp")
            line = ("RESULT world=%d ckpt=%d crest_stall_med_s=%.4f crest_stall_max_s=%.4f crest_lib_stall_max_s=%.4f "
                    "crest_wait_max_s=%.4f crest_job_s=%.4f crest_unique_bytes=%d crest_stored_bytes=%d "
                    "crest_dir_bytes=%d ref_bytes=%d differ_bytes=%d zero_bytes=%d"
                    % (world, fig["ckpt"], statistics.median(c["stall"]), max(c["stall"]), max(c["stall_lib"]),
                       max(c["wait"]), c["job"], c["unique"], c["stored"], c["dir"], fig["ref_bytes"],
                       fig["differ_bytes"], fig["zero_bytes"]))
            if d:
                line += (" dcp_stall_med_s=%.4f dcp_stall_max_s=%.4f dcp_saved_s=%.4f dcp_bytes=%d"
                         % (statistics.median(d["stall"]), max(d["stall"]), d["saved"], d["dir"]))
            print(line)
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(figures, fh, indent=1)
    dist.destroy_process_group()
    return 0 if ok else 1


def summary(files):
    runs = []
    for f in files:
        try:
            with open(f) as fh:
                runs.append(json.load(fh))
        except (OSError, ValueError) as e:
            usage("--summary: %s: %s" % (f, e))
    base = next((r for r in runs if r["world"] == 1), None)
    if base is None:
        usage("--summary: no launch of world 1 among %s: the ratios are to it" % " ".join(files))
    have_dcp = all(r["dcp"] for r in runs)
    gb = lambda b: b / 1e9   # noqa: E731
    # A figure of 0 (a launch that saved nothing) shows as nan, not as a traceback.
    q = lambda a, b: a / b if b else float("nan")   # noqa: E731
    print("ddp_bench: per-rank stall = wall time of save() / async_save(); med/max over ranks; bytes in GB (1e9)")
    hdr = ("%-5s %-4s %19s %9s %8s %9s %8s %8s %8s %8s" %
           ("world", "ckpt", "crest stall med/max", "lib max", "wait max", "crest job", "uniq GB", "stor GB",
            "ref GB", "stor/ref"))
    if have_dcp:
        hdr += " %19s %9s %8s" % ("DCP stall med/max", "DCP saved", "DCP GB")
    print(hdr)
    for r in runs:
        for fig in r["ckpts"]:
            c = fig["crest"]
            line = ("%-5d %-4d %9.3f/%-9.3f %9.3f %8.3f %9.3f %8.3f %8.3f %8.3f %8.3f" %
                    (r["world"], fig["ckpt"], statistics.median(c["stall"]), max(c["stall"]), max(c["stall_lib"]),
                     max(c["wait"]), c["job"], gb(c["unique"]), gb(c["stored"]), gb(fig["ref_bytes"]),
                     q(c["stored"], fig["ref_bytes"])))
            if have_dcp:
                d = fig["dcp"]
                line += " %9.3f/%-9.3f %9.3f %8.3f" % (statistics.median(d["stall"]), max(d["stall"]), d["saved"],
                                                      gb(d["dir"]))
            print(line)
    print("ratios (stall: the slowest rank's; crest bytes: stored, the increment of each checkpoint):")
    for r in runs:
        for fig, b in zip(r["ckpts"], base["ckpts"]):
            c, cb = fig["crest"], b["crest"]
            line = ("RESULT ratio world=%d ckpt=%d crest_stall_max_over_1=%.3f crest_stall_med_over_1=%.3f "
                    "crest_job_over_1=%.3f crest_stored_over_ref=%.3f crest_unique_over_ref=%.3f" %
                    (r["world"], fig["ckpt"], q(max(c["stall"]), max(cb["stall"])),
                     q(statistics.median(c["stall"]), statistics.median(cb["stall"])), q(c["job"], cb["job"]),
                     q(c["stored"], fig["ref_bytes"]), q(c["unique"], fig["ref_bytes"])))
            if have_dcp:
                d = fig["dcp"]
                line += (" crest_over_dcp_stall=%.3f crest_job_over_dcp_saved=%.3f crest_over_dcp_bytes=%.3f "
                         "crest_dir_over_dcp_bytes=%.3f dcp_stall_max_over_1=%.3f" %
                         (q(max(c["stall"]), max(d["stall"])), q(c["job"], d["saved"]), q(c["stored"], d["dir"]),
                          q(c["dir"], d["dir"]), q(max(d["stall"]), max(b["dcp"]["stall"]))))
            print(line)
    for r in runs:
        for fig in r["ckpts"]:
            if fig["zero_bytes"] > fig["ref_bytes"] / 100:
                print("note: world %d checkpoint %d: %.1f%% of rank 0's state is in all-zero 4 KiB chunks (crest "
                      "stores them as holes)" % (r["world"], fig["ckpt"], 100.0 * fig["zero_bytes"] / fig["ref_bytes"]))
    for r in runs:
        if r["world"] == 1:
            continue
        for fig, b in zip(r["ckpts"], base["ckpts"]):
            s = q(max(fig["crest"]["stall"]), max(b["crest"]["stall"]))
            o = q(fig["crest"]["stored"], fig["ref_bytes"])
            yn = lambda v: "yes" if v <= 1.1 else "NO"   # noqa: E731
            print("issue 34 item 6, world %d, checkpoint %d: stall / 1 rank's %.3f (<= 1.1: %s); stored / (one "
                  "replica + what differs) %.3f (<= 1.1: %s)" % (r["world"], fig["ckpt"], s, yn(s), o, yn(o)))
    if not have_dcp:
        print("DCP: not measured (%s)" % next(r["why_no_dcp"] for r in runs if not r["dcp"]))
    bad = [r["world"] for r in runs if not r.get("restore_ok")]
    if bad:
        print("restore check FAILED in world %s" % bad)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
