# casctl gc killed with SIGKILL at a random moment (issue 12, cas/gc.h's
# "Order"): 20 rounds on one store of two branches, each round adding a few
# snapshots (a data tree of some MiB, 4 KiB blocks rewritten at random all
# over it, so nearly every 1 MiB pack holds dead records once the old
# snapshots expire), then `casctl gc --keep-last 2 --rewrite-below 1.0` in
# the background, killed at a random moment of the run (the window is the
# longest run seen so far, at first 300 ms). After each round:
#  - casctl verify passes as the store is; if it does not (a commit in
#    doubt, which the next writer's open settles), a writer opens it (a
#    tiny put) and verify must pass then;
#  - every snapshot still listed restores bit-exact against its saved tree,
#    and none appeared from nowhere;
#  - the snapshots the policy keeps (the newest 2 of each branch, heads
#    among them) are all still listed.
# At the end a gc run to completion leaves exactly the policy's kept set,
# and packs holding nothing but live records.
# The seed is printed; CREST_TEST_SEED replays the choices (not the timing).
source "$(dirname "$0")/lib.sh"
# Small runs of live ids: the mark spills and merges many of them (cas/gc.c).
export CREST_GC_RUN_IDS=${CREST_GC_RUN_IDS:-1024}
# and small groups of packs to rewrite: many commits, and kills between them.
export CREST_GC_GROUP_BYTES=${CREST_GC_GROUP_BYTES:-262144}
SEED=${CREST_TEST_SEED:-$(( $(date +%s%N) % 1000000 ))}
echo "seed $SEED"
export CREST_PACK_LIMIT=1048576
mkdir -p "$T/w"
CREST_BIN=$CREST CASCTL_BIN=$CASCTL W=$T/w SEED=$SEED SCALE=$SCALE ROUNDS=${GC_KILL_ROUNDS:-20} python3 - <<'PY'
import hashlib, json, os, random, shutil, signal, subprocess, sys, time

crest, casctl = os.environ["CREST_BIN"], os.environ["CASCTL_BIN"]
W, seed, scale = os.environ["W"], int(os.environ["SEED"]), int(os.environ["SCALE"])
rounds = int(os.environ["ROUNDS"])
rng = random.Random(seed)
B = 4096

def fail(msg):
    sys.exit(f"FAIL (seed {seed}): {msg}")

def run(argv, ok=True, cwd=None):
    p = subprocess.run(argv, capture_output=True, text=True, cwd=cwd)
    if ok and p.returncode != 0:
        fail(f"{' '.join(argv)}: rc {p.returncode}: {p.stderr.strip()}")
    return p

def js(*args, cwd=None):
    return json.loads(run([crest, "--json", *args], cwd=cwd).stdout)

data = os.path.join(W, "data")
saved = os.path.join(W, "saved")
os.makedirs(data)
os.makedirs(saved)

def block():
    if rng.random() < 0.7:
        return rng.randbytes(B)
    line = b"%d gc kill line\n" % rng.randrange(1 << 30)
    return (line * (B // len(line) + 1))[:B]

def write_new(path, content):
    # Never in place: the saved versions share inodes with the tree.
    with open(path + ".tmp", "wb") as f:
        f.write(content)
    os.rename(path + ".tmp", path)

nfiles = 6
# About 8 MiB in all: gc's rewrite then has many steps (groups, commits)
# for the kills to land between. A sanitizer build is slower at
# everything, gc included, so it needs less data.
per_file = max(16, (8 << 20) // B // max(1, scale // 2) // nfiles)
for i in range(nfiles):
    write_new(os.path.join(data, f"f{i}"), b"".join(block() for _ in range(per_file)))

def mutate():
    # About 6% of the blocks of every file: every pack gets some dead bytes.
    for i in range(nfiles):
        p = os.path.join(data, f"f{i}")
        c = bytearray(open(p, "rb").read())
        n = len(c) // B
        for _ in range(max(1, n // 16)):
            j = rng.randrange(n)
            c[j * B:(j + 1) * B] = block()
        write_new(p, bytes(c))

def listing(root):
    out = {}
    for r, dirs, names in os.walk(root):
        for n in dirs + names:
            p = os.path.join(r, n)
            st = os.lstat(p)
            isf = os.path.isfile(p)
            out[os.path.relpath(p, root)] = (isf, st.st_mode & 0o7777, st.st_size if isf else 0,
                                             st.st_mtime_ns if isf else 0,
                                             hashlib.sha256(open(p, "rb").read()).hexdigest() if isf else None)
    return out

want_listing = {}
def save(sid, tree):
    shutil.copytree(tree, os.path.join(saved, sid), copy_function=os.link)
    want_listing[sid] = listing(tree)

def check_restore(sid):
    dst = os.path.join(W, "get")
    shutil.rmtree(dst, ignore_errors=True)
    p = run([crest, "--quiet", "get", sid, dst], ok=False)
    if p.returncode != 0:
        fail(f"listed snapshot {sid[:12]} does not restore: {p.stderr.strip()}")
    if listing(os.path.join(dst, "data")) != want_listing[sid]:
        fail(f"snapshot {sid[:12]} restores differently from its tree")
    shutil.rmtree(dst)

FIX = ["--chunker", "fixed", "--chunk-size", "4K"]
branches = ["main", "exp"]
def put_some(n):
    for _ in range(n):
        mutate()
        sid = js("put", "--branch", rng.choice(branches), *FIX, "data", cwd=W)["snapshot"]
        save(sid, data)

def snaps():
    return [{"id": e["snapshot"], "branch": e["branch"], "t": e["time_ns"]} for e in js("log")]

def model(ss, last=2):
    keep = set()
    for br in {s["branch"] for s in ss}:
        L = sorted((s for s in ss if s["branch"] == br), key=lambda s: (s["t"], s["id"]), reverse=True)
        keep |= {s["id"] for s in L[:max(1, last)]}
    return keep

def verify():
    return run([casctl, "--json", "verify"], ok=False)

tiny = os.path.join(W, "tiny")
tinyno = 0
def writer_open():
    # A tiny put on its own branch: a writer's open settles what a kill left.
    global tinyno
    tinyno += 1
    os.makedirs(os.path.join(tiny, "data"), exist_ok=True)
    write_new(os.path.join(tiny, "data", "t"), b"tiny %d\n" % tinyno)
    sid = js("put", "--branch", "scratch", "data", cwd=tiny)["snapshot"]
    save(sid, os.path.join(tiny, "data"))
    return sid

GC = [casctl, "--quiet", "gc", "--keep-last", "2", "--rewrite-below", "1.0"]
put_some(4)
killed = finished = settled = 0
where = {"nothing forgotten": 0, "forgotten": 0, "partly forgotten": 0}
t_gc = []
for rnd in range(rounds):
    put_some(rng.randrange(2, 4))
    ss = snaps()
    before = {s["id"] for s in ss}
    keep = model(ss)
    if keep == before:
        fail(f"round {rnd}: nothing to expire")
    # The kill lands anywhere in a whole run: the window is the longest
    # run seen so far, a little more so some runs finish, and starts at
    # 300 ms. A fixed window let a fast machine finish every gc inside
    # it, and then no round tested a kill at all.
    delay = rng.random() * 1.1 * (max(t_gc) if t_gc else 0.3)
    t0 = time.monotonic()
    gc = subprocess.Popen(GC, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        gc.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        gc.send_signal(signal.SIGKILL)
        gc.wait()
    if gc.returncode == -signal.SIGKILL:
        killed += 1
        how = "killed"
    else:
        finished += 1
        t_gc.append(time.monotonic() - t0)
        if gc.returncode != 0:
            fail(f"round {rnd}: gc failed: rc {gc.returncode}: {gc.stderr.read().decode().strip()}")
        how = "finished"
    gc.stderr.close()
    new = set()
    v = verify()
    if v.returncode != 0:
        first = (v.stdout + v.stderr).strip().splitlines()[:2]
        settled += 1
        new.add(writer_open())
        v = verify()
        if v.returncode != 0:
            fail(f"round {rnd} ({how} after {delay * 1000:.0f} ms): verify fails even after a writer's open: "
                 f"{(v.stdout + v.stderr).strip()[:600]} (before it: {first})")
        print(f"   round {rnd}: verify failed before a writer's open: {first}")
    listed = {e["snapshot"] for e in js("ls")}
    if listed - before - new:
        fail(f"round {rnd}: snapshots from nowhere: {sorted(x[:12] for x in listed - before - new)}")
    if keep - listed:
        fail(f"round {rnd} ({how} after {delay * 1000:.0f} ms): kept snapshots gone: "
             f"{sorted(x[:12] for x in keep - listed)}")
    if how == "finished" and listed - new != keep:
        fail(f"round {rnd}: gc finished but left {len(listed - new)} snapshots, the policy keeps {len(keep)}")
    for sid in listed:
        check_restore(sid)
    if how == "killed":
        where["nothing forgotten" if listed - new == before else
              "forgotten" if listed - new == keep else "partly forgotten"] += 1
    took = delay if how == "killed" else t_gc[-1]
    print(f"   round {rnd}: {how} after {took * 1000:.0f} ms; {len(before)} -> {len(listed)} snapshots "
          f"(policy keeps {len(keep)}), all restore")

print(f"ok: {rounds} rounds: {killed} killed mid-run, {finished} finished"
      f"{' (in %.0f-%.0f ms)' % (min(t_gc) * 1000, max(t_gc) * 1000) if t_gc else ''}, "
      f"{settled} needed a writer's open before verify passed; kills left: {where}")
if killed == 0:
    fail("no gc was killed mid-run: the store is too small for the kills to test anything")

# A gc run to completion leaves exactly the policy's kept set.
ss = snaps()
keep = model(ss)
p = run([casctl, "--json", "gc", "--keep-last", "2", "--rewrite-below", "1.0"])
r = json.loads(p.stdout)
if set(r["kept"]) != keep or set(r["expired"]) != {s["id"] for s in ss} - keep:
    fail(f"final gc: kept {len(r['kept'])}, expired {len(r['expired'])}; the policy keeps {len(keep)}")
listed = {e["snapshot"] for e in js("ls")}
if listed != keep:
    fail(f"after the final gc {len(listed)} snapshots are listed, the policy keeps {len(keep)}")
for sid in listed:
    check_restore(sid)
v = verify()
if v.returncode != 0:
    fail(f"verify after the final gc: {(v.stdout + v.stderr).strip()[:600]}")
print(f"ok: the final gc keeps exactly the policy's {len(keep)} snapshots; they restore; verify ok")
# And the space: with every pack that holds a dead record rewritten, the
# packs hold the live records and their headers, whatever the kills left.
st = json.loads(run([casctl, "--json", "stats"]).stdout)
if st["pack_bytes"] > st["stored_bytes"] + 16 * st["packs"]:
    fail(f"after the final gc --rewrite-below 1.0 the packs take {st['pack_bytes']} bytes for "
         f"{st['stored_bytes']} stored in {st['packs']} packs: records killed runs left dead are never reclaimed")
print(f"ok: the packs hold only live records ({st['pack_bytes']} bytes, {st['packs']} packs)")
PY
echo PASS
