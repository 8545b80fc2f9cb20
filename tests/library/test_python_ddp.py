#!/usr/bin/python3
"""A DDP job of 2 ranks under torchrun, checkpointed as a crest job (issue 34, item 4),
killed in the middle and resumed: python/examples/ddp_train.py.

    test_python_ddp.py STORE_DIR CREST CASCTL     (CREST_LIB names libcrest.so)

 1. reference: 12 steps, a checkpoint every 3, never interrupted (its own store);
 2. kill: the same job, slowed down (--step-sleep), in another store; once the job
    snapshot of step KILL_AFTER is committed, one rank is killed with SIGKILL right after
    it took its checkpoint of the next step, before it arrives with it; torchrun
    (--max_restarts 0) stops the other;
 3. resume: a new launch with --resume.

Checked: every rank's loss after the resumed step equals the reference's bit for bit;
the resume started from the newest job snapshot listed (`crest job ls --json`), in every
rank, from that job snapshot's own member; no job snapshot of a step after the kill is
listed, and each one listed names one committed snapshot per rank, labelled with its
rank and step (none is partial), and each rank of each is restorable (`crest get
--rank`), every chunk's hash checked, to the bytes of tensors the rank said it saved;
the relaunch is a new attempt. And the replicas are stored once (DDP), or each rank
holds and stores its own shards (FSDP): see the bounds below. The victim rank and
KILL_AFTER come from a seed (printed; $CREST_TEST_SEED sets it).

The ranks run on CPU over gloo, unless the environment says otherwise:
  CREST_TEST_DDP_WORLD=N       N ranks, not 2
  CREST_TEST_DDP_DEVICE=cuda   each rank on its own GPU (cuda:LOCAL_RANK), NCCL, and a
                               model of about 200 MiB a rank with Adam's state
  CREST_TEST_DDP_FSDP=1        (with cuda) the model sharded by FSDP2's fully_shard
  CREST_TEST_DDP_HIDDEN=H      ddp_train.py --hidden H (256 on CPU, 4096 on CUDA)
Skips (77) only without torch, torch.distributed or gloo (NCCL, N GPUs, fully_shard
where asked for).
"""
import importlib
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

try:
    import torch
    import torch.distributed as dist
except ImportError as e:
    print("SKIP: no torch here (%s in %s): install python3-torch" % (e, sys.executable))
    sys.exit(77)
DEVICE = os.environ.get("CREST_TEST_DDP_DEVICE") or "cpu"
FSDP = os.environ.get("CREST_TEST_DDP_FSDP", "0") not in ("", "0")
WORLD = int(os.environ.get("CREST_TEST_DDP_WORLD") or 2)   # ranks (3 passes too, in half a minute more)
if DEVICE not in ("cpu", "cuda") or (FSDP and DEVICE != "cuda"):
    sys.exit("FAIL: CREST_TEST_DDP_DEVICE=%s CREST_TEST_DDP_FSDP=%s: the device is cpu or cuda, and FSDP "
             "needs cuda" % (DEVICE, os.environ.get("CREST_TEST_DDP_FSDP", "")))


def skip_why():
    """Why this torch cannot run the job asked for, or None."""
    if not dist.is_available() or not dist.is_gloo_available():
        return "this torch (%s) has no torch.distributed with gloo" % torch.__version__
    if DEVICE == "cuda" and torch.cuda.device_count() < WORLD:
        return "%d ranks on CUDA need %d GPUs; this torch (%s) sees %d" % (
            WORLD, WORLD, torch.__version__, torch.cuda.device_count())
    if DEVICE == "cuda" and not dist.is_nccl_available():
        return "this torch (%s) has no NCCL" % torch.__version__
    if FSDP:
        errs = []
        for mod in ("torch.distributed.fsdp", "torch.distributed._composable.fsdp"):   # 2.6+, 2.4-2.5
            try:
                if hasattr(importlib.import_module(mod), "fully_shard"):
                    return None
            except Exception as e:   # torch 1.13 under Python 3.11 raises ValueError here
                errs.append("%s: %s" % (mod, e))
        return "this torch (%s) has no FSDP2 fully_shard (%s)" % (torch.__version__, "; ".join(errs) or "none")
    return None


why = skip_why()
if why:
    print("SKIP: " + why)
    sys.exit(77)

root, crest_bin, casctl_bin = (os.path.abspath(a) for a in sys.argv[1:4])
HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "python", "examples", "ddp_train.py")
JOB, STEPS, EVERY = "ddp-test", 12, 3
HIDDEN = int(os.environ.get("CREST_TEST_DDP_HIDDEN") or (4096 if DEVICE == "cuda" else 256))
# ddp_train.py's arguments of every launch: the staging holds a rank's state in one round.
JOB_ARGS = ["--device", DEVICE, "--hidden", str(HIDDEN), "--staging-mib", "256" if DEVICE == "cuda" else "64"] + \
    (["--fsdp"] if FSDP else [])
seed = int(os.environ.get("CREST_TEST_SEED") or time.time_ns() % 1000000)
rnd = random.Random(seed)
KILL_AFTER = rnd.choice([3, 6])        # the job snapshot that must exist before the kill
VICTIM = rnd.randrange(WORLD)
print("seed %d: rank %d is killed once the job snapshot of step %d is committed (CREST_TEST_SEED=%d repeats it)"
      % (seed, VICTIM, KILL_AFTER, seed), flush=True)
print("job: %d ranks, %s, %s, hidden %d (torch %s)" % (WORLD, "FSDP2" if FSDP else "DDP",
      "NCCL on cuda:0-%d" % (WORLD - 1) if DEVICE == "cuda" else "gloo on CPU", HIDDEN, torch.__version__), flush=True)

shutil.rmtree(root, ignore_errors=True)
os.makedirs(root)
fails = []


def check(ok, msg):
    if not ok:
        print("FAIL:", msg, flush=True)
        fails.append(msg)
    return ok


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli(*args):
    r = subprocess.run(list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    if r.returncode != 0:
        sys.exit("FAIL: %s exited %d: %s" % (" ".join(args), r.returncode, r.stderr.strip()))
    return r.stdout


def torchrun(store, name, extra, wait=True):
    """torchrun of ddp_train.py, its output (both streams) into ROOT/NAME.log. Debian's
    torch 1.13 under Python 3.11 cannot parse torchrun's default --redirects 0 (Std.NONE
    is not iterated: "'NoneType' object has no attribute 'get'"); --redirects 2 --tee 2
    leaves stdout alone and sends stderr to the console too."""
    log = os.path.join(root, name + ".log")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", str(WORLD),
           "--max_restarts", "0", "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
           "--redirects", "2", "--tee", "2", "--log_dir", os.path.join(root, name + ".torchrun"),
           EXAMPLE, "--store", store, "--job", JOB, "--steps", str(STEPS), "--every", str(EVERY)] + JOB_ARGS + extra
    env = dict(os.environ, UV_USE_IO_URING="0")
    # torch >= 2.4's TCPStore (torchrun's rendezvous) defaults to libuv, which fails on the
    # GPU machine; older torch reads nothing of it.
    env.setdefault("USE_LIBUV", "0")
    f = open(log, "w")
    p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    f.close()
    if wait:
        try:
            p.wait(timeout=180)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            sys.exit("FAIL: torchrun %s did not end in 180 s (%s)" % (name, log))
    return p, log


def parse(log):
    out = {"loss": {}, "pid": {}, "resumed": {}, "attempt": None, "committed": set(), "arrived": set(), "saving": {}}
    for line in open(log, errors="replace"):
        # With --tee, torchrun prefixes the ranks' stderr lines; stdout is the ranks' own.
        m = re.match(r"rank (\d+) step (\d+) loss (\S+)$", line.strip())
        if m:
            out["loss"][(int(m[1]), int(m[2]))] = m[3]   # a later line of the same step wins
            continue
        m = re.match(r"rank (\d+) pid (\d+) world", line)
        if m:
            out["pid"][int(m[1])] = int(m[2])
        m = re.match(r"rank (\d+) resumed step (\d+) from snapshot ([0-9a-f]{64})", line)
        if m:
            out["resumed"][int(m[1])] = (int(m[2]), m[3])
        m = re.match(r"job \S+ attempt (\S+)", line)
        if m:
            out["attempt"] = m[1]
        m = re.match(r"rank \d+ committed job snapshot step (\d+)", line)
        if m:
            out["committed"].add(int(m[1]))
        m = re.match(r"rank (\d+) arrived step (\d+) ", line)
        if m:
            out["arrived"].add((int(m[1]), int(m[2])))
        m = re.match(r"rank (\d+) saving step (\d+) tensors (\d+) of (\d+) bytes", line)
        if m:
            out["saving"][(int(m[1]), int(m[2]))] = (int(m[3]), int(m[4]))
    return out


def job_ls(store):
    return json.loads(cli(crest_bin, "--store", store, "--json", "job", "ls", JOB))


def ls_all(store):
    return {s["snapshot"]: s for s in json.loads(cli(crest_bin, "--store", store, "--json", "ls", "--all"))}


ref_store, run_store, one_store = (os.path.join(root, n) for n in ("ref", "run", "one"))
for s in (ref_store, run_store, one_store):
    cli(crest_bin, "init", s)

# 0. The binding alone, in this process: a job of one rank completes each step by itself.
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
import crest  # noqa: E402
t = {"w": torch.arange(5000, dtype=torch.float32)}
with crest.Checkpointer(one_store, staging_bytes=16 << 20, no_gpu=True, job="one", rank=0, world=1,
                        attempt="t0") as ck:
    try:
        ck.save(t, state={"step": 1})
        check(False, "a job's save without step was taken")
    except ValueError as e:
        print("refused, a job's save without step:", e)
    firsts = []
    for step in (1, 2):
        t["w"] += 1
        r = ck.wait(ck.save(t, state={"step": step}, step=step, tag="one-%d" % step))
        check(r["committed"] is True and r["step"] == step and re.fullmatch("[0-9a-f]{64}", r["job_snapshot"] or ""),
              "the one rank of a job did not commit its step %d: %s" % (step, r))
        firsts.append(r)
    try:
        ck.wait(12345)
        check(False, "wait took a handle it never gave")
    except crest.CrestError as e:
        check(e.errno == 9, "wait of an unknown handle: %s" % e)
    t["w"].zero_()
    for name, step in ((None, 2), ("job:one", 2), (firsts[0]["job_snapshot"], 1)):
        st = ck.restore_full(t, name)
        check(st["state"] == {"step": step} and float(t["w"][0]) == step and st["snapshot"] == firsts[step - 1]["snapshot"],
              "restore %s: state %s, w[0] %s, member %.12s" % (name, st["state"], float(t["w"][0]), st["snapshot"]))
    try:
        ck.restore(t, "one-1")          # the rank's snapshot, not a job snapshot
        check(False, "a job's restore took a rank snapshot")
    except crest.CrestError as e:
        print("refused, a rank snapshot given to a job's restore:", e)
with crest.Checkpointer(one_store, staging_bytes=16 << 20, no_gpu=True, job="one", rank=0, world=2) as ck:
    try:
        ck.restore(t)
        check(False, "a job of 2 ranks restored a job snapshot of 1")
    except crest.CrestError as e:
        print("refused, another world size:", e)
        check(e.errno == 22, "restore into another world size: %s" % e)
print("binding: a job of one rank saves, commits and restores", flush=True)

# 1. The reference.
t0 = time.time()
p, log = torchrun(ref_store, "ref", [])
ref = parse(log)
if p.returncode != 0:
    sys.exit("FAIL: the reference run exited %d; its log, %s:\n%s" % (p.returncode, log, open(log).read()[-4000:]))
want = {(r, s) for r in range(WORLD) for s in range(1, STEPS + 1)}
if set(ref["loss"]) != want:
    sys.exit("FAIL: the reference printed losses of %d (rank, step) pairs, not %d (%s)" % (len(ref["loss"]), len(want), log))
print("reference: %d steps of %d ranks in %.1f s, job snapshots of steps %s" %
      (STEPS, WORLD, time.time() - t0, sorted(j["step"] for j in job_ls(ref_store))), flush=True)

# 2. Killed in the middle.
t0 = time.time()
p, log = torchrun(run_store, "kill", ["--step-sleep", "0.25"], wait=False)
killed_at = None
deadline = time.time() + 120
while time.time() < deadline and p.poll() is None:
    run = parse(log)
    # Right after the victim's checkpoint of the next step was taken (it prints the step's
    # loss, saves, then sleeps): its ingest may be done, but it has not arrived, while the
    # other rank arrives at that step with its own checkpoint, which no job snapshot may name.
    if KILL_AFTER in run["committed"] and VICTIM in run["pid"] and (VICTIM, KILL_AFTER + EVERY) in run["loss"]:
        os.kill(run["pid"][VICTIM], signal.SIGKILL)
        killed_at = max((s for (r, s) in run["loss"] if r == VICTIM), default=0)
        print("killed rank %d (pid %d) with SIGKILL after its step %d" % (VICTIM, run["pid"][VICTIM], killed_at),
              flush=True)
        break
    time.sleep(0.02)
try:
    p.wait(timeout=60)
except subprocess.TimeoutExpired:
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    sys.exit("FAIL: torchrun went on for 60 s after rank %d was killed (%s)" % (VICTIM, log))
if killed_at is None:
    sys.exit("FAIL: the job ended (%s) before the job snapshot of step %d was seen; its log, %s:\n%s"
             % (p.returncode, KILL_AFTER, log, open(log).read()[-4000:]))
run = parse(log)
last = max(s for (r, s) in run["loss"] if r == VICTIM)
check(p.returncode != 0, "torchrun exited 0 although rank %d was killed" % VICTIM)
check(last < STEPS, "rank %d was killed only after its last step (%d)" % (VICTIM, last))
print("kill run: torchrun exited %d after %.1f s; rank %d's last step %d" % (p.returncode, time.time() - t0, VICTIM, last),
      flush=True)

# What the crashed launch left: only whole job snapshots, none after the kill.
jobs = job_ls(run_store)
snaps = ls_all(run_store)
steps = sorted(j["step"] for j in jobs)
print("after the kill: job snapshots of steps %s" % steps, flush=True)
check(KILL_AFTER in steps, "no job snapshot of step %d, which the run said it committed" % KILL_AFTER)
nxt = KILL_AFTER + EVERY
check(nxt not in steps or (VICTIM, nxt) in run["arrived"],
      "a job snapshot of step %d, at which rank %d never arrived (it was killed first)" % (nxt, VICTIM))
check(all(s <= last for s in steps), "job snapshots of steps %s after rank %d's last step %d"
      % ([s for s in steps if s > last], VICTIM, last))
for j in jobs:
    check(j["world"] == WORLD and len(j["members"]) == WORLD and len(set(j["members"])) == WORLD,
          "job snapshot %.12s of step %d names %s" % (j["snapshot"], j["step"], j["members"]))
    for r, m in enumerate(j["members"]):
        lab = snaps.get(m, {}).get("labels", {})
        check(lab.get("crest.job") == JOB and lab.get("crest.job.rank") == str(r) and
              lab.get("crest.job.step") == str(j["step"]),
              "job snapshot %.12s step %d: member %d, %.12s, is %s" % (j["snapshot"], j["step"], r, m,
                                                                        "labelled %s" % lab if m in snaps else "not in the store"))
partial = sorted((s["labels"].get("crest.job.step"), s["labels"].get("crest.job.rank")) for s in snaps.values()
                 if "crest.job.rank" in s.get("labels", {}) and s["labels"].get("crest.job") == JOB and not any(s["snapshot"] in j["members"] for j in jobs))
print("rank snapshots in no job snapshot (step, rank): %s" % (partial or "none"), flush=True)
newest = max(jobs, key=lambda j: j["step"]) if jobs else None


def region_bytes(top):
    """The bytes of the files crest get wrote under top but the pickled state's: the
    tensors' regions."""
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(top) for f in fs
               if os.path.relpath(os.path.join(d, f), top) != "__crest_state__")


def check_restorable(store, jobs, snaps, log):
    """Each rank of each job snapshot listed, restored by crest get --rank (every chunk's
    hash checked on the way): all of its member's bytes, its tensors as many bytes as
    the rank said it saved at that step."""
    dest = os.path.join(root, "get")
    for j in jobs:
        for r, m in enumerate(j["members"]):
            shutil.rmtree(dest, ignore_errors=True)
            got = json.loads(cli(crest_bin, "--store", store, "--json", "get", j["snapshot"], "--rank", str(r), dest))
            want = snaps.get(m, {}).get("logical_bytes")
            saved = log["saving"].get((r, j["step"]), (None,))[0]
            check(got["snapshot"] == m and got["bytes"] == want and region_bytes(dest) == saved,
                  "crest get %.12s --rank %d (step %d): snapshot %.12s, %s bytes of %s, tensors %d bytes, the rank "
                  "saved %s" % (j["snapshot"], r, j["step"], got["snapshot"], got["bytes"], want, region_bytes(dest), saved))
    shutil.rmtree(dest, ignore_errors=True)
    print("restorable: %d job snapshot%s, each rank by crest get --rank" % (len(jobs), "" if len(jobs) == 1 else "s"),
          flush=True)


check_restorable(run_store, jobs, snaps, run)

# 3. Resumed.
t0 = time.time()
p, log = torchrun(run_store, "resume", ["--resume"])
res = parse(log)
if p.returncode != 0:
    sys.exit("FAIL: the resumed run exited %d; its log, %s:\n%s" % (p.returncode, log, open(log).read()[-4000:]))
print("resume: %.1f s" % (time.time() - t0), flush=True)
check(res["attempt"] and res["attempt"] != run["attempt"],
      "the relaunch's attempt %s is the crashed launch's %s" % (res["attempt"], run["attempt"]))
start = None
for r in range(WORLD):
    got = res["resumed"].get(r)
    if not check(got is not None, "rank %d did not say where it resumed (%s)" % (r, log)):
        continue
    check(newest is not None and got == (newest["step"], newest["members"][r]),
          "rank %d resumed step %d from %.12s, not from the newest job snapshot, step %s, its member %.12s"
          % (r, got[0], got[1], newest and newest["step"], newest and newest["members"][r]))
    start = got[0] if start is None else start
    check(got[0] == start, "rank %d resumed step %d, another rank step %d" % (r, got[0], start))
if start is not None:
    compared = bad = 0
    for r in range(WORLD):
        for s in range(1, STEPS + 1):
            mine = res["loss"].get((r, s))
            if s <= start:
                check(mine is None, "rank %d ran step %d again although it resumed after it" % (r, s))
                continue
            compared += 1
            if mine != ref["loss"][(r, s)]:
                bad += 1
                check(False, "rank %d step %d: loss %s after the resume, %s uninterrupted" % (r, s, mine, ref["loss"][(r, s)]))
    print("resumed from step %d: %d losses compared with the reference, %d differ" % (start, compared, bad), flush=True)

# What each rank holds: all of the state under DDP, 1/WORLD of it under FSDP (ddp_train.py
# says, per checkpoint, the bytes of tensors crest copies and their whole size; a few
# bytes more in every rank under FSDP: Adam's step counters, plain tensors in each).
for (r, step), (local, full) in sorted(ref["saving"].items()):
    share = full / WORLD if FSDP else full
    check(abs(local - share) <= 0.01 * full, "rank %d step %d saved %d of %d bytes of tensors, not about %d (%s)"
          % (r, step, local, full, share, "its shards" if FSDP else "all of them"))
print("saved per rank: %s" % sorted({v for v in ref["saving"].values()}), flush=True)

# The replicas are stored once (DDP). Both ranks hold the same model and optimizer state
# (DDP keeps them equal), so in the reference's store the chunks of rank 1's snapshot of a
# step are rank 0's, except for its pickled state (its own RNG state: a few KiB of each
# snapshot's ~3 MiB, the model and Adam's two moments). So unique_bytes is about R0, the
# sum of rank 0's snapshots' logical bytes (a little less: what dedups inside a rank), and
# would be about 2 * R0 with each rank's copy stored. The bound 1.3 * R0 sits between the
# two with room for the state blobs and chunks unique to a rank; the floor 0.7 * R0 says
# the state is real bytes (the Tanh model and Adam leave no zero pages to store as holes),
# so that twice it could not pass under the bound either.
# Under FSDP the ranks' shards differ, and each is stored: unique_bytes is about the sum
# of every rank's snapshots' logical bytes, RA, with the same bounds around it (a rank's
# shards stored twice, or another rank's taken for its own, would leave them).
stats = json.loads(cli(casctl_bin, "--store", ref_store, "--json", "stats"))
mine = [s for s in ls_all(ref_store).values() if s.get("labels", {}).get("crest.job") == JOB
        and "crest.job.rank" in s["labels"]]   # the ranks' snapshots, not the job snapshots
r0 = [s for s in mine if s["labels"].get("crest.job.rank") == "0"]
R0 = sum(s["logical_bytes"] for s in r0)
RA = sum(s["logical_bytes"] for s in mine)
base, what = (RA, "every rank's shards") if FSDP else (R0, "one rank's state")
ratio = stats["unique_bytes"] / base if base else float("inf")
print("dedup: unique_bytes %d for %d rank-0 snapshots of %d logical bytes in all, %d of every rank (%.3fx %s; "
      "%s)" % (stats["unique_bytes"], len(r0), R0, RA, ratio, what,
               "each shard stored once" if FSDP else "each rank's own copy would be about 2x"), flush=True)
check(len(r0) == STEPS // EVERY, "the reference's store has %d rank-0 snapshots, not %d" % (len(r0), STEPS // EVERY))
check(ratio < 1.3, "unique_bytes is %.3fx %s: %s" % (ratio, what, "shards stored more than once" if FSDP
                                                     else "the replicas are not stored once"))
check(ratio > 0.7, "unique_bytes is only %.3fx %s: the bound says nothing" % (ratio, what))

if fails:
    print("FAIL: %d checks failed (seed %d; logs in %s)" % (len(fails), seed, root))
    sys.exit(1)
print("ok: a %s job of %d ranks on %s killed after step %d resumed from step %d bit for bit (seed %d)"
      % ("FSDP2" if FSDP else "DDP", WORLD, DEVICE, last, start, seed))
