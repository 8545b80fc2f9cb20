# casctl gc (issue 12): retention per branch, then mark and sweep.
#
# About 30 snapshots over three branches (and one branch started with
# `crest branch`) of a data tree mutated at random between puts (4 KiB block
# rewrites, files added and removed), every version's tree kept beside the
# store (hard-linked copies: the tree is only ever changed by writing a new
# file and renaming it over the old). A few are tagged. Then:
#  - gc with no --keep-* option: exit 2, one line;
#  - a series of --dry-run policies, each one's kept and expired lists
#    against a model computed from `crest log --json`, and the store's packs
#    and meta logs byte-identical afterwards, the listing too;
#  - a gc that expires: the same lists, expired snapshots gone from ls and
#    log and failing to resolve, every kept one restoring bit-exact, verify
#    passing, and the same gc again expiring nothing;
#  - more snapshots, then a gc with --rewrite-below 1.0: the packs shrink
#    (bytes_after < bytes_before), and what is left on disk is no more than
#    the kept snapshots' own stored bytes plus the packs' headers, measured
#    by putting the kept trees alone into a fresh store;
#  - on a small store: a record one gc left dead in a pack it did not
#    rewrite (above the threshold) is reclaimed by a later gc with
#    --rewrite-below 1.0.
# The seed is printed; CREST_TEST_SEED replays a run.
source "$(dirname "$0")/lib.sh"
# Small runs of live ids: the mark spills and merges many of them (cas/gc.c).
export CREST_GC_RUN_IDS=${CREST_GC_RUN_IDS:-2048}
# and small groups of packs to rewrite: many commits, and kills between them.
export CREST_GC_GROUP_BYTES=${CREST_GC_GROUP_BYTES:-1048576}
# Extent lists in tiny pieces (cas/manifest.c), most of them shared by
# successive snapshots: the mark fetches each distinct piece once, and every
# kept snapshot must still restore.
export CREST_PIECE_MIN_EXTENTS=${CREST_PIECE_MIN_EXTENTS:-4}
export CREST_PIECE_SPAN=${CREST_PIECE_SPAN:-65536}
SEED=${CREST_TEST_SEED:-$(( $(date +%s%N) % 1000000 ))}
echo "seed $SEED"
mkdir -p "$T/w"
CREST_BIN=$CREST CASCTL_BIN=$CASCTL W=$T/w SEED=$SEED SCALE=$SCALE python3 - <<'PY'
import hashlib, json, os, random, shutil, subprocess, sys, time

crest, casctl = os.environ["CREST_BIN"], os.environ["CASCTL_BIN"]
W, seed, scale = os.environ["W"], int(os.environ["SEED"]), int(os.environ["SCALE"])
store = os.environ["CREST_STORE"]
rng = random.Random(seed)
B = 4096

def fail(msg):
    sys.exit(f"FAIL (seed {seed}): {msg}")

def run(argv, ok=True, env=None):
    p = subprocess.run(argv, capture_output=True, text=True, env=env)
    if ok and p.returncode != 0:
        fail(f"{' '.join(argv)}: rc {p.returncode}: {p.stderr.strip()}")
    return p

def js(*args):
    return json.loads(run([crest, "--json", *args]).stdout)

# --- the data tree and its versions -------------------------------------
data = os.path.join(W, "data")      # put as "data" from W: stream names data/...
saved = os.path.join(W, "saved")    # saved/ID: the tree the snapshot holds
os.makedirs(data)
os.makedirs(saved)

def block(kind):
    if kind < 0.6:
        return rng.randbytes(B)                          # incompressible
    if kind < 0.9:
        line = b"%d gc test line\n" % rng.randrange(1 << 30)   # compresses
        return (line * (B // len(line) + 1))[:B]
    return bytes(B)                                       # zeros

def fill(nblocks):
    out = bytearray()
    for _ in range(nblocks):
        out += block(rng.random())
    return out

def write_new(path, content):
    # Never in place: the saved versions share inodes with the tree.
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(content)
    os.rename(tmp, path)

total_blocks = max(64, (3 << 20) // B // scale)     # about 3 MiB (scaled)
nfiles = 6
os.makedirs(os.path.join(data, "sub"))
for i in range(nfiles):
    d = data if i % 2 else os.path.join(data, "sub")
    write_new(os.path.join(d, f"f{i}"), fill(total_blocks // nfiles + rng.randrange(8)))
fileno = nfiles

def files():
    out = []
    for root, _, names in os.walk(data):
        out += [os.path.join(root, n) for n in names]
    return sorted(out)

def mutate():
    global fileno
    for path in rng.sample(files(), k=min(3, len(files()))):
        c = bytearray(open(path, "rb").read())
        n = len(c) // B
        for _ in range(rng.randrange(1, 6)):
            if n:
                i = rng.randrange(n)
                c[i * B:(i + 1) * B] = block(rng.random())
        if rng.random() < 0.2:
            c += fill(rng.randrange(1, 8))
        write_new(path, bytes(c))
    r = rng.random()
    if r < 0.15 and len(files()) > 3:
        os.unlink(rng.choice(files()))
    elif r < 0.3:
        write_new(os.path.join(data, rng.choice(["", "sub"]), f"n{fileno}"), fill(rng.randrange(1, 32)))
        fileno += 1

def save(sid, tree=data):
    dst = os.path.join(saved, sid)
    if not os.path.exists(dst):
        run(["cp", "-al", tree, dst])

def listing(root):
    out = {}
    for r, dirs, names in os.walk(root):
        for n in dirs + names:
            p = os.path.join(r, n)
            st = os.lstat(p)
            rel = os.path.relpath(p, root)
            kind = "l" if os.path.islink(p) else "d" if os.path.isdir(p) else "f"
            body = None
            if kind == "f":
                body = hashlib.sha256(open(p, "rb").read()).hexdigest()
            out[rel] = (kind, st.st_mode & 0o7777, st.st_size if kind == "f" else 0,
                        st.st_mtime_ns if kind != "d" else 0, body)
    return out

def check_restore(sid):
    dst = os.path.join(W, "get")
    shutil.rmtree(dst, ignore_errors=True)
    run([crest, "--quiet", "get", sid, dst])
    got, want = listing(os.path.join(dst, "data")), listing(os.path.join(saved, sid))
    if got != want:
        diff = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
        fail(f"snapshot {sid[:12]} restores differently from its tree: {diff[:5]}")
    shutil.rmtree(dst)

os.chdir(W)
FIX = ["--chunker", "fixed", "--chunk-size", "4K"]
branches = ["main", "exp", "lr-0.1"]
def put_some(n, sleep=0.05):
    ids = []
    for _ in range(n):
        mutate()
        br = rng.choice(branches)
        sid = js("put", "--branch", br, *FIX, "data")["snapshot"]
        save(sid)
        ids.append(sid)
        time.sleep(sleep * rng.random())
    return ids

ids = put_some(14)
# A branch pointed at an older snapshot: a ref, no new snapshot. Its
# target is the branch's head until a put lands on it, and gc keeps it as
# it keeps every head (the model takes heads from `crest branch`), even
# when its own branch's rules would expire it.
src = rng.choice(ids[:-3])
fork = js("branch", "fork", src)["snapshot"]
if fork != src:
    fail(f"crest branch fork {src[:12]}: made snapshot {fork[:12]}, not a ref to it")
# (no put lands on "fork": its head stays the ref's target through every gc below)
time.sleep(0.3)     # a gap, so keep-within has a clear boundary to find
ids += put_some(14)
tagged = rng.sample(ids, 4)
for i, sid in enumerate(tagged):
    run([crest, "--quiet", "tag", sid, f"keep{i}"])

# --- the model ---------------------------------------------------------
def snaps():
    return [{"id": e["snapshot"], "branch": e["branch"], "t": e["time_ns"], "tags": e["tags"]}
            for e in js("log")]

def cal(t, what):
    import datetime
    d = datetime.datetime.fromtimestamp(t // 10**9, tz=datetime.timezone.utc)
    return {"w": d.isocalendar()[:2], "m": (d.year, d.month), "y": d.year}[what]

def model(ss, last=0, hourly=0, daily=0, weekly=0, monthly=0, yearly=0, within_ns=None, tagged=False, tags=()):
    keep = set()
    for br in {s["branch"] for s in ss}:
        L = sorted((s for s in ss if s["branch"] == br), key=lambda s: (s["t"], s["id"]), reverse=True)
        keep.add(L[0]["id"])                      # the head, always
        keep |= {s["id"] for s in L[:last]}
        for n, width in ((hourly, 3600 * 10**9), (daily, 86400 * 10**9), (weekly, "w"), (monthly, "m"),
                         (yearly, "y")):
            seen = []
            for s in L:
                b = cal(s["t"], width) if isinstance(width, str) else s["t"] // width
                if b not in seen and len(seen) < n:
                    seen.append(b)
                    keep.add(s["id"])
        if within_ns is not None:
            keep |= {s["id"] for s in L if s["t"] >= L[0]["t"] - within_ns}
        if tagged:
            keep |= {s["id"] for s in L if s["tags"]}
        keep |= {s["id"] for s in L if set(s["tags"]) & set(tags)}
    keep |= {b["head"] for b in js("branch")}  # refs' targets too
    return keep

def gc(args, ss, want_keep, dry):
    p = run([casctl, "--json", "gc", *args] + (["--dry-run"] if dry else []))
    try:
        r = json.loads(p.stdout)
    except ValueError:
        fail(f"gc {args}: not JSON: {p.stdout[:200]!r}")
    for k in ("dry_run", "snapshots", "kept", "expired", "chunks", "dead_chunks", "dead_bytes", "pieces",
              "dead_pieces", "packs", "packs_rewritten", "bytes_moved", "bytes_before", "bytes_after",
              "packs_retired"):
        if k not in r:
            fail(f"gc {args}: no {k} in its JSON")
    if r["dry_run"] != dry:
        fail(f"gc {args}: dry_run {r['dry_run']}")
    allids = {s["id"] for s in ss}
    kept, expired = set(r["kept"]), set(r["expired"])
    if r["snapshots"] != len(ss) or len(r["kept"]) != len(kept) or len(r["expired"]) != len(expired):
        fail(f"gc {args}: snapshots {r['snapshots']} (model {len(ss)}), or an id listed twice")
    if kept != want_keep or expired != allids - want_keep:
        fail(f"gc {args}: kept {len(kept)} expired {len(expired)}; model keeps {len(want_keep)}: "
             f"kept but should expire {sorted(x[:12] for x in kept - want_keep)}, "
             f"expired but should stay {sorted(x[:12] for x in expired & want_keep)}, "
             f"neither {sorted(x[:12] for x in allids - kept - expired)}")
    print(f"   gc {' '.join(args)}{' --dry-run' if dry else ''}: kept {len(kept)}, expired {len(expired)}, "
          f"dead chunks {r['dead_chunks']}/{r['chunks']}, packs rewritten {r['packs_rewritten']}/{r['packs']}, "
          f"{r['bytes_before']} -> {r['bytes_after']} bytes")
    return r

def fingerprint():
    out = {}
    # index/ too: a dry run opens the store read-only, and RocksDB must
    # not have written one byte of its files (LOG, MANIFEST, WAL) either.
    for sub in ("packs", "meta", "index"):
        for root, _, names in os.walk(os.path.join(store, sub)):
            for n in names:
                p = os.path.join(root, n)
                out[os.path.relpath(p, store)] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out, run([crest, "--json", "ls"]).stdout

ss = snaps()
if len(ss) != len(ids):
    fail(f"log lists {len(ss)} snapshots, {len(ids)} were made")
# The saved trees are what the snapshots hold (so a mismatch after gc is gc's).
for sid in rng.sample(ids, 4) + [fork]:
    check_restore(sid)
print(f"ok: {len(ss)} snapshots on {len(branches)} branches, tagged {[t[:12] for t in tagged]}")

# No --keep-*: refused with one line, exit 2, nothing changed.
before = fingerprint()
p = run([casctl, "gc"], ok=False)
if p.returncode != 2 or len(p.stderr.strip().splitlines()) != 1:
    fail(f"gc with no --keep-*: rc {p.returncode}, stderr {p.stderr!r} (want 2 and one line)")
p = run([casctl, "gc", "--rewrite-below", "1.0", "--dry-run"], ok=False)
if p.returncode != 2 or len(p.stderr.strip().splitlines()) != 1:
    fail(f"gc --rewrite-below alone: rc {p.returncode}, stderr {p.stderr!r} (want 2 and one line)")

# keep-within: a duration whose edge falls in the middle of the widest gap
# on the branch with the most snapshots, so the answer is not a tie.
by_b = {}
for s in ss:
    by_b.setdefault(s["branch"], []).append(s["t"])
big = max(by_b.values(), key=len)
big.sort(reverse=True)
gaps = [(big[i] - big[i + 1], i) for i in range(len(big) - 1)]
g, i = max(gaps)
within_ms = (big[0] - big[i] + g // 2) // 10**6
within_ms = max(within_ms, 1)
W_ARG = f"{within_ms}ms"
W_NS = within_ms * 10**6

policies = [
    (["--keep-last", "1"], dict(last=1)),
    (["--keep-last", "3"], dict(last=3)),
    (["--keep-tagged"], dict(tagged=True)),
    (["--keep-within", W_ARG], dict(within_ns=W_NS)),
    (["--keep-hourly", "1"], dict(hourly=1)),
    (["--keep-daily", "2"], dict(daily=2)),
    (["--keep-hourly", "3", "--keep-daily", "1", "--keep-last", "2"], dict(hourly=3, daily=1, last=2)),
    (["--keep-last", "2", "--keep-tagged", "--keep-within", W_ARG], dict(last=2, tagged=True, within_ns=W_NS)),
    (["--keep-last", "100"], dict(last=100)),
    # The README's own example: 7d is a duration (it was refused once).
    (["--keep-within", "7d"], dict(within_ns=7 * 86400 * 10**9)),
    (["--keep-weekly", "1"], dict(weekly=1)),
    (["--keep-monthly", "2", "--keep-yearly", "1"], dict(monthly=2, yearly=1)),
    (["--keep-tag", "keep0", "--keep-tag", "keep3"], dict(tags=("keep0", "keep3"))),
]
for args, kw in policies:
    gc(args, ss, model(ss, **kw), dry=True)
if fingerprint() != before:
    a, b = before[0], fingerprint()[0]
    fail(f"a dry run changed the store: {sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))} "
         f"or the listing")
print("ok: dry runs match the model and change nothing (packs/, meta/, index/ and ls byte-identical)")

# A gc that expires (default rewrite threshold).
args, kw = ["--keep-last", "2", "--keep-tagged", "--keep-within", W_ARG], dict(last=2, tagged=True, within_ns=W_NS)
keep = model(ss, **kw)
if len(keep) == len(ss):
    fail("the policy under test expires nothing: the test would prove little")
r = gc(args, ss, keep, dry=False)
if os.environ.get("CREST_PIECE_MIN_EXTENTS") == "4" and not (r["pieces"] > r["dead_pieces"] > 0):
    fail(f"gc saw {r['pieces']} pieces, {r['dead_pieces']} dead: the pieced mark is not exercised")

def check_after(keep, expired):
    listed = {e["snapshot"] for e in js("ls")}
    logged = {e["snapshot"] for e in js("log")}
    if listed != keep or logged != keep:
        fail(f"after gc: ls lists {len(listed)}, log {len(logged)}; {len(keep)} kept")
    for sid in expired:
        for cmd in (["show", sid], ["get", sid, os.path.join(W, "nope")]):
            p = run([crest, *cmd], ok=False)
            if p.returncode == 0:
                fail(f"expired snapshot {sid[:12]}: crest {cmd[0]} succeeds")
            if p.returncode >= 128 or p.returncode < 0:
                fail(f"expired snapshot {sid[:12]}: crest {cmd[0]} died (rc {p.returncode})")
    for sid in keep:
        check_restore(sid)
    # A tag names its snapshot while it is kept, and goes with it.
    for i, sid in enumerate(tagged):
        p = run([crest, "--json", "show", f"keep{i}"], ok=False)
        if sid in keep and (p.returncode != 0 or json.loads(p.stdout)["snapshot"] != sid):
            fail(f"tag keep{i} of kept snapshot {sid[:12]}: rc {p.returncode} {p.stderr.strip()}")
        if sid not in keep and p.returncode == 0:
            fail(f"tag keep{i} still resolves after its snapshot {sid[:12]} expired")
    v = run([casctl, "--json", "verify"], ok=False)
    if v.returncode != 0 or not json.loads(v.stdout)["ok"]:
        fail(f"casctl verify after gc: rc {v.returncode}: {v.stdout[:400]} {v.stderr.strip()}")
    # Branch heads are the newest of what is left; a ref alone still
    # points at its target, which gc kept.
    for b in js("branch"):
        on = [s for s in ss if s["branch"] == b["branch"] and s["id"] in keep]
        if not on:
            if b["branch"] != "fork" or b["head"] != src or src not in keep or b["snapshots"] != 0:
                fail(f"branch {b['branch']}: head {b['head'][:12]}, {b['snapshots']} snapshots; "
                     f"only the ref fork -> {src[:12]} has none")
        elif b["head"] != max(on, key=lambda s: (s["t"], s["id"]))["id"]:
            fail(f"branch {b['branch']}: head {b['head'][:12]} is not its newest kept snapshot")
    if src not in keep:
        fail(f"the ref fork's target {src[:12]} was not kept")

check_after(keep, set(s["id"] for s in ss) - keep)
print(f"ok: {len(keep)} kept snapshots restore bit-exact, {len(ss) - len(keep)} expired ones are gone, verify ok")
ss = snaps()
r2 = gc(args, ss, keep, dry=False)
if r2["expired"]:
    fail("the same gc again expired more")

# More history, then a gc that rewrites every pack with a dead byte.
ids = put_some(6, sleep=0)
ss = snaps()
st0 = json.loads(run([casctl, "--json", "stats"]).stdout)
args, kw = ["--keep-last", "2", "--rewrite-below", "1.0"], dict(last=2)
keep = model(ss, **kw)
r = gc(args, ss, keep, dry=False)
check_after(keep, set(s["id"] for s in ss) - keep)
st = json.loads(run([casctl, "--json", "stats"]).stdout)
# gc's writer has its own pack open while it measures (a 16-byte header,
# removed again at close if nothing went into it): allowed for, no more.
if r["bytes_before"] - st0["pack_bytes"] not in (0, 16):
    fail(f"gc bytes_before {r['bytes_before']}, stats said {st0['pack_bytes']} before it")
if r["packs_retired"] == 0 and r["bytes_after"] - st["pack_bytes"] not in (0, 16):
    fail(f"gc bytes_after {r['bytes_after']}, stats says {st['pack_bytes']}")
if not r["expired"] or not r["bytes_after"] < r["bytes_before"]:
    fail(f"gc expired {len(r['expired'])} snapshots, packs {r['bytes_before']} -> {r['bytes_after']} bytes")
if r["dead_chunks"] == 0 or r["packs_rewritten"] == 0:
    fail(f"gc found {r['dead_chunks']} dead chunks and rewrote {r['packs_rewritten']} packs")
# What the kept snapshots alone store: their trees, in the same order, put
# into a fresh store with the same chunker. Same chunks, same compressed
# records (the stats' stored_bytes counts each distinct chunk's record,
# 56-byte header included), so the gc'd store must hold exactly that, and
# its packs no more than that plus each pack's 16-byte header.
fresh = os.path.join(W, "fresh")
for s in sorted((s for s in ss if s["id"] in keep), key=lambda s: s["t"]):
    os.rename(os.path.join(saved, s["id"]), os.path.join(W, "data.k"))
    try:
        os.rename(data, os.path.join(W, "data.cur"))
        os.rename(os.path.join(W, "data.k"), data)
        run([crest, "--quiet", "--store", fresh, "put", *FIX, "data"])
    finally:
        os.rename(data, os.path.join(saved, s["id"]))
        os.rename(os.path.join(W, "data.cur"), data)
sf = json.loads(run([casctl, "--json", "--store", fresh, "stats"]).stdout)
print(f"   after gc: {st['chunks']} chunks, stored {st['stored_bytes']}, packs {st['packs']} = {st['pack_bytes']} bytes; "
      f"kept trees alone: {sf['chunks']} chunks, stored {sf['stored_bytes']}")
if st["chunks"] != sf["chunks"] or st["stored_bytes"] != sf["stored_bytes"]:
    fail(f"after gc the store holds {st['chunks']} chunks / {st['stored_bytes']} stored bytes; "
         f"the kept snapshots alone need {sf['chunks']} / {sf['stored_bytes']}")
limit = sf["stored_bytes"] + 16 * st["packs"]
if st["pack_bytes"] > limit:
    fail(f"after gc --rewrite-below 1.0 the packs take {st['pack_bytes']} bytes, more than the kept "
         f"snapshots' {sf['stored_bytes']} stored bytes plus {st['packs']} pack headers ({limit})")
ss = snaps()
if gc(args, ss, keep, dry=False)["expired"]:
    fail("the same gc again expired more")
print(f"ok: packs {r['bytes_before']} -> {r['bytes_after']} bytes, no more than the kept snapshots' own ({limit})")

# Dead records a gc leaves in a pack it did not rewrite (live above the
# threshold) stay dead: a later gc with --rewrite-below 1.0 must still see
# them and reclaim them, though their index entries went the first time.
small = os.path.join(W, "small")
os.makedirs(os.path.join(small, "data"))
f = os.path.join(small, "data", "f")
write_new(f, rng.randbytes(4 * B))
subprocess.run([crest, "--quiet", "--store", "s", "put", *FIX, "data"], cwd=small, check=True, capture_output=True)
write_new(f, open(f, "rb").read()[:3 * B] + rng.randbytes(B))
subprocess.run([crest, "--quiet", "--store", "s", "put", *FIX, "data"], cwd=small, check=True, capture_output=True)
sst = os.path.join(small, "s")
r1 = json.loads(run([casctl, "--json", "--store", sst, "gc", "--keep-last", "1"]).stdout)
r2 = json.loads(run([casctl, "--json", "--store", sst, "gc", "--keep-last", "1", "--rewrite-below", "1.0"]).stdout)
st = json.loads(run([casctl, "--json", "--store", sst, "stats"]).stdout)
if st["pack_bytes"] > st["stored_bytes"] + 16 * st["packs"]:
    fail(f"a chunk's record left dead by a gc at the default threshold (dead chunks {r1['dead_chunks']}, "
         f"packs rewritten {r1['packs_rewritten']}) is never reclaimed: the next gc --rewrite-below 1.0 "
         f"sees {r2['dead_chunks']} dead chunks, rewrites {r2['packs_rewritten']} packs, and the packs "
         f"keep {st['pack_bytes']} bytes for {st['stored_bytes']} stored in {st['packs']} packs")
print("ok: dead records left in a pack by one gc are reclaimed by a later one")
PY
echo PASS
