# Job snapshots (issue 34, item 2; cas/jobsnap.h, docs/JOBS.md).
#
# A job of W ranks (2 to 4) puts one small tree per rank and step (crest put
# --label crest.job=..., as libcrest labels its rank snapshots), and commits
# a job snapshot per step, in a random order of steps, some steps reusing
# the previous step's snapshot of a rank (a member shared by two job
# snapshots). Then:
#  - before its commit a step's ranks are listed as partial; after it, ls
#    lists the job snapshot as one line and hides its ranks (ls --all shows
#    them), and job ls lists every job snapshot, newest first;
#  - job:NAME is the job snapshot of the highest step, whatever the order of
#    the commits; job:NAME~1 its parent, the one of the highest step below
#    committed before it;
#  - a commit naming a snapshot not in the store (an id, and a name) is
#    refused, naming the rank, and nothing is listed; so is a job snapshot
#    as a member;
#  - the same commit twice gives the same id and commits nothing;
#  - get --rank R restores rank R's tree bit-exact; get without --rank
#    refuses the job snapshot, naming --rank;
#  - rounds of gc against a model (random --keep-last, new steps with shared
#    members, partial ranks): the job snapshots kept are the newest K of the
#    job, every member of a kept one stays and restores, the others' members
#    go, partial ranks go once older than --keep-partial and stay while
#    younger, a plain snapshot on main stays; --dry-run says the same as the
#    gc after it; verify passes after each;
#  - job:NAME is the highest step even where a lower one is newer by time;
#  - a store of format 4 is left as it is by a reader and upgraded to 5 by a
#    writer; one of format 6 is refused;
#  - a job snapshot whose member the index lost: get --rank names the rank,
#    show says MISSING.
# The seed is printed; CREST_TEST_SEED replays a run.
source "$(dirname "$0")/lib.sh"
SEED=${CREST_TEST_SEED:-$(( $(date +%s%N) % 1000000 ))}
echo "seed $SEED"
mkdir -p "$T/w"
CREST_BIN=$CREST CASCTL_BIN=$CASCTL STORE_TOOL_BIN=$STORE_TOOL W=$T/w S=$S SEED=$SEED python3 - <<'PY'
import json, os, random, subprocess, sys, time

crest, casctl, tool = os.environ["CREST_BIN"], os.environ["CASCTL_BIN"], os.environ["STORE_TOOL_BIN"]
W, S, seed = os.environ["W"], os.environ["S"], int(os.environ["SEED"])
rng = random.Random(seed)

def fail(msg):
    print("FAIL:", msg, file=sys.stderr)
    sys.exit(1)

def run(prog, *args, ok=True):
    p = subprocess.run([prog, "--quiet", *args], capture_output=True, text=True)
    if ok and p.returncode != 0:
        fail(f"{os.path.basename(prog)} {' '.join(args)}: exit {p.returncode}: {p.stderr.strip()}")
    return p

def js(prog, *args):
    p = subprocess.run([prog, "--json", *args], capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"{os.path.basename(prog)} --json {' '.join(args)}: exit {p.returncode}: {p.stderr.strip()}")
    return json.loads(p.stdout)

def refused(what, p, *needles):
    if p.returncode == 0:
        fail(f"{what}: exit 0, expected a refusal")
    err = p.stderr.strip()
    if len(err.splitlines()) != 1:
        fail(f"{what}: {len(err.splitlines())} lines on stderr, expected 1: {err}")
    for n in needles:
        if n not in err:
            fail(f"{what}: '{n}' not in: {err}")
    print(f"   refused as it should: {what}: {err}")

world = rng.randint(2, 4)
JOB = "train-" + str(seed)
print(f"world {world}, job {JOB}")
trees = {}      # snapshot id -> its tree's directory
ctr = [0]

def put_rank(step, rank):
    d = os.path.join(W, f"s{step}r{rank}-{ctr[0]}")
    ctr[0] += 1
    os.makedirs(os.path.join(d, "t"))
    for k in range(rng.randint(1, 3)):
        with open(os.path.join(d, "t", f"f{k}"), "wb") as f:
            f.write(rng.randbytes(rng.randint(1, 40000)))
    out = js(crest, "put", "--label", f"crest.job={JOB}", "--label", f"crest.job.step={step}",
             "--label", f"crest.job.rank={rank}", os.path.join(d, "t"))
    trees[out["snapshot"]] = os.path.join(d, "t")
    return out["snapshot"]

def ls(*extra):
    return {e["snapshot"]: e for e in js(crest, "ls", *extra)}

def same_tree(a, b):
    p = subprocess.run([tool, "same", a, b], capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"trees {a} and {b} differ: {p.stderr.strip()}")

jobs = {}       # job snapshot id -> (step, [member ids])
steps = {}      # step -> job snapshot id

def commit(step, members, *extra):
    out = js(crest, "job", "commit", JOB, "--step", str(step), *extra, *members)
    if out["world"] != len(members) or out["step"] != step:
        fail(f"job commit: {out}")
    jobs[out["snapshot"]] = (step, list(members))
    steps[step] = out["snapshot"]
    return out["snapshot"]

# A plain snapshot on main, which gc keeps as main's head throughout.
os.makedirs(os.path.join(W, "plain"))
with open(os.path.join(W, "plain", "p"), "wb") as f:
    f.write(rng.randbytes(5000))
plain = js(crest, "put", os.path.join(W, "plain"))["snapshot"]

# Steps 1..4: every rank put, the commits in a random order; a rank of a
# step may reuse the previous step's snapshot of it (shared member).
ranks = {}
for step in range(1, 5):
    ranks[step] = []
    for r in range(world):
        if step > 1 and rng.random() < 0.3:
            ranks[step].append(ranks[step - 1][r])
        else:
            ranks[step].append(put_rank(step, r))
    if step == 1:
        v = ls()
        for r, sid in enumerate(ranks[1]):
            e = v.get(sid) or fail(f"rank {r} of step 1 not listed before its commit")
            if not e.get("job") or e["job"]["partial"] is not True:
                fail(f"rank {r} of step 1 not partial before its commit: {e}")
order = list(range(1, 5))
rng.shuffle(order)
print("commit order", order)
for step in order:
    gpus = []
    for r in range(world):
        if rng.random() < 0.5:
            gpus += ["--gpu", f"{r}=GPU-{seed}-{r}"]
    commit(step, ranks[step], *gpus)

print("== listed whole only")
v, va = ls(), ls("--all")
members = {m for _, ms in jobs.values() for m in ms}
listed_jobs = {i for i, e in v.items() if e["kind"] == "job"}
if listed_jobs != set(jobs):
    fail(f"ls lists job snapshots {sorted(listed_jobs)}, committed {sorted(jobs)}")
for m in members:
    if m in v:
        fail(f"ls lists rank snapshot {m}, which a job snapshot names (only --all should)")
    if m not in va or va[m]["job"]["partial"] is not False:
        fail(f"ls --all does not list rank snapshot {m} as a member: {va.get(m)}")
for i, (step, ms) in jobs.items():
    j = v[i]["job"]
    if j["name"] != JOB or j["step"] != step or j["world"] != world or [x["snapshot"] for x in j["members"]] != ms:
        fail(f"ls --json of job snapshot {i}: {j}")
jl = js(crest, "job", "ls", JOB)
if [e["snapshot"] for e in jl] != sorted(jobs, key=lambda i: (-v[i]["time_ns"], -jobs[i][0])):
    fail(f"job ls is not every job snapshot, newest first: {[e['step'] for e in jl]}")

print("== job:NAME is the newest step")
got = js(crest, "show", f"job:{JOB}")["snapshot"]
if got != steps[4]:
    fail(f"job:{JOB} is {got}, not step 4's {steps[4]}")
# Its parent: the job snapshot of the highest step below 4 committed before it.
before4 = [s_ for s_ in order[:order.index(4)] if s_ < 4]
got = js(crest, "show", f"job:{JOB}~1")["snapshot"] if before4 else None
if before4 and got != steps[max(before4)]:
    fail(f"job:{JOB}~1 is {got}, not step {max(before4)}'s {steps[max(before4)]} (the parent)")
refused("job:NAME of no job", run(crest, "show", "job:nosuchjob", ok=False), "no job snapshot of job nosuchjob")

print("== bad members refused, nothing committed")
before = ls("--all")
missing = "%064x" % rng.getrandbits(256)
bad = list(ranks[4])
br = rng.randrange(world)
bad[br] = missing
refused("a member not in the store", run(crest, "job", "commit", JOB, "--step", "9", *bad, ok=False),
        f"rank {br}'s snapshot {missing} is not in")
bad[br] = "nosuchtag"
refused("a member named by nothing", run(crest, "job", "commit", JOB, "--step", "9", *bad, ok=False),
        "nosuchtag")
bad[br] = steps[1]
refused("a job snapshot as a member", run(crest, "job", "commit", JOB, "--step", "9", *bad, ok=False),
        "job snapshot itself")
refused("a bad job name", run(crest, "job", "commit", ".x", "--step", "9", *ranks[4], ok=False), "job name")
if ls("--all") != before:
    fail("a refused job commit changed the listing")

print("== the same commit twice: the same id, nothing committed")
again = js(crest, "job", "commit", JOB, "--step", "2", *ranks[2],
           *sum([["--gpu", f"{r}=GPU-{seed}-{r}"] for r in range(world) if
                 js(crest, "show", steps[2])["job"]["members"][r]["gpu"]], []))
if again["snapshot"] != steps[2]:
    fail(f"the same commit again gave {again['snapshot']}, not {steps[2]}")
if ls("--all") != before:
    fail("committing the same job snapshot again changed the listing")

print("== get --rank, and get of a job snapshot refused")
dst = os.path.join(W, "out")
for r in range(world):
    d = f"{dst}{r}"
    run(crest, "get", "--rank", str(r), f"job:{JOB}", d)
    same_tree(trees[ranks[4][r]], os.path.join(d, "t"))
refused("get of a job snapshot", run(crest, "get", steps[3], dst + "x", ok=False), "--rank")
if os.path.exists(dst + "x"):
    fail("a refused get of a job snapshot made its DEST")
refused("get --rank past the world", run(crest, "get", "--rank", str(world), steps[3], dst + "y", ok=False),
        f"no rank {world}")
refused("get --rank of a plain snapshot", run(crest, "get", "--rank", "0", plain, dst + "z", ok=False),
        "not a job snapshot")

print("== gc rounds against a model")
partial = {}    # partial rank snapshot -> its put time (monotonic, s)
next_step = 5
for rnd in range(4):
    # New steps, some sharing members with older steps (any of them).
    for _ in range(rng.randint(1, 3)):
        step = next_step
        next_step += 1
        ms = []
        for r in range(world):
            olds = [s for s in ranks if rng.random() < 0.25]
            ms.append(ranks[rng.choice(olds)][r] if olds else put_rank(step, r))
        ranks[step] = ms
        commit(step, ms)
    # Partial ranks: an old one (put, then waited out) and a young one.
    old = put_rank(1000 + rnd, 0)
    time.sleep(3.5)
    young = put_rank(2000 + rnd, 1)
    keep = rng.randint(1, 3)
    vb = ls("--all")
    t_job = {i: vb[i]["time_ns"] for i in jobs}
    by_time = sorted(jobs, key=lambda i: (t_job[i], i), reverse=True)
    kept_jobs = set(by_time[:keep])
    kept_members = {m for i in kept_jobs for m in jobs[i][1]}
    all_members = {m for _, ms in jobs.values() for m in ms}
    want_gone = (set(jobs) - kept_jobs) | (all_members - kept_members) | {old} | \
        {p for p in partial if p not in all_members}
    want_gone -= kept_members
    args = ["gc", "--keep-last", str(keep), "--keep-partial", "3s"]
    dry = js(casctl, *args, "--dry-run")
    r = js(casctl, *args)
    for name, res in (("dry run", dry), ("gc", r)):
        if set(res["expired"]) != want_gone:
            fail(f"round {rnd} {name}: expired {sorted(res['expired'])}, the model says {sorted(want_gone)}")
        if set(res["jobs"]["expired_jobs"]) != set(jobs) - kept_jobs:
            fail(f"round {rnd} {name}: expired_jobs {res['jobs']['expired_jobs']}")
        if old not in res["jobs"]["expired_partial"] or young not in res["jobs"]["kept_partial"]:
            fail(f"round {rnd} {name}: partial ranks: {res['jobs']}")
    print(f"   round {rnd}: keep-last {keep}: {len(jobs)} job snapshots, {len(kept_jobs)} kept; "
          f"{len(r['expired'])} snapshots expired ({len(r['jobs']['expired_members'])} members, "
          f"{len(r['jobs']['expired_partial'])} partial)")
    va = ls("--all")
    for g in want_gone:
        if g in va:
            fail(f"round {rnd}: {g} still listed after gc")
    for k in kept_jobs | kept_members | {young, plain}:
        if k not in va:
            fail(f"round {rnd}: {k} gone after gc (it should stay)")
    for i in set(jobs) - kept_jobs:
        del jobs[i]
    for s_, i in list(steps.items()):
        if i not in jobs:
            del steps[s_]
            del ranks[s_]
    partial = {young: 0}
    for i in kept_jobs:
        for rr, m in enumerate(jobs[i][1]):
            d = os.path.join(W, f"g{rnd}-{i[:8]}-{rr}")
            run(crest, "get", "--rank", str(rr), i, d)
            same_tree(trees[m], os.path.join(d, os.path.basename(trees[m])))
    run(casctl, "verify")
    # The young partial rank is older by the next round's gc: gone then.

print("== job:NAME by step, not by time")
# Step 100's ranks are older than step 50's: the newest job snapshot is still step 100's.
J2 = JOB + "-b"
olds = [put_rank(100, r) for r in range(world)]
news = [put_rank(50, r) for r in range(world)]
hi = js(crest, "job", "commit", J2, "--step", "100", *olds)["snapshot"]
lo = js(crest, "job", "commit", J2, "--step", "50", *news)["snapshot"]
got = js(crest, "show", f"job:{J2}")["snapshot"]
if got != hi:
    fail(f"job:{J2} is {got}, not step 100's {hi} (step 50's, newer by time, is {lo})")

print("== format 4 upgraded to 5 by a writer, 6 refused")
with open(os.path.join(S, "FORMAT")) as f:
    if f.read() != "crest-store 5\n":
        fail("a new store is not format 5")
with open(os.path.join(S, "FORMAT"), "w") as f:
    f.write("crest-store 4\n")
run(crest, "ls")
with open(os.path.join(S, "FORMAT")) as f:
    if f.read() != "crest-store 4\n":
        fail("a reader rewrote FORMAT")
put_rank(3000, 0)
with open(os.path.join(S, "FORMAT")) as f:
    got = f.read()
    if got != "crest-store 5\n":
        fail(f"a writer left FORMAT {got.strip()}, not crest-store 5")
with open(os.path.join(S, "FORMAT"), "w") as f:
    f.write("crest-store 6\n")
refused("a store of format 6", run(crest, "ls", ok=False), "newer")
with open(os.path.join(S, "FORMAT"), "w") as f:
    f.write("crest-store 5\n")

print("== a member the index lost")
jid = steps[max(steps)]
step, ms = jobs[jid]
lr = rng.randrange(world)
lost = ms[lr]
for k in "im":
    p = subprocess.run([tool, "drop-key", S, k, lost], capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"store_tool drop-key {k} {lost}: {p.stderr.strip()}")
refused("get --rank of a lost member", run(crest, "get", "--rank", str(lr), jid, dst + "lost", ok=False),
        f"rank {lr}'s snapshot {lost} is not in")
sh = js(crest, "show", jid)
if sh["job"]["members"][lr]["present"] is not False:
    fail(f"show does not say rank {lr} is missing: {sh['job']}")
print("ok")
PY
