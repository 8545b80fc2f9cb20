#!/bin/bash
# Issue 14's delta pieces, against a model: random steps on one store whose
# file's extent list is cut into tiny pieces (CREST_PIECE_*: 16 extents of
# 4 KiB each), so that a put that rewrites a few chunks stores deltas
# against the parent's pieces (cas/manifest.h). Each step is one of:
#  - an edit of the head of one of the branches, then `crest put` on that
#    branch (its head is the parent, which is what makes deltas): mostly
#    0-3 chunks rewritten, sometimes many, sometimes a chunk set back to an
#    older version's content (a base's own extent among them), sometimes
#    whole chunks added or removed at the end or in the middle (the piece
#    layout moves);
#  - `crest branch NEW S` at an older snapshot S (its pieces, deltas too);
#  - `casctl gc --keep-last K` (K 1-3, per branch), sometimes killed with
#    SIGKILL at a random moment (the next writer's open settles it);
#  - `casctl repair` (the index again from the logs: bases found there).
# The model keeps every version's bytes on disk (keyed by snapshot id) and
# encodes the pieces as FORMAT.md says a writer must (a delta when at most
# a quarter of a piece's extents differ from the parent's base, naming the
# same base with every change since), so it knows each piece's id and size.
# After each step:
#  - the snapshots listed are those the model allows (gc's policy keeps,
#    none appears from nowhere), and the branch heads, the new snapshot and
#    a random sample of the rest restore byte for byte;
#  - `casctl stats` counts exactly the model's pieces and piece bytes
#    (unless a killed gc left garbage no completed gc has swept since); a
#    put's piece bytes grow by what the model's new pieces take, so a put of
#    a few chunks that stops writing deltas (656 bytes a full piece, 82 a
#    delta of one extent) fails;
#  - after gc and repair, casctl verify passes.
# At the end a completed gc, verify, and every listed snapshot bit-exact.
# The seed is printed; CREST_TEST_SEED replays the choices (not a kill's
# timing, nor which snapshots it leaves listed).
source "$(dirname "$0")/lib.sh"
export CREST_PIECE_MIN_EXTENTS=4 CREST_PIECE_SPAN=65536
# Small packs and rewrite groups: a killed gc stops between many commits.
export CREST_PACK_LIMIT=${CREST_PACK_LIMIT:-1048576}
export CREST_GC_GROUP_BYTES=${CREST_GC_GROUP_BYTES:-262144}
export CREST_GC_RUN_IDS=${CREST_GC_RUN_IDS:-1024}
SEED=${CREST_TEST_SEED:-$(( $(date +%s%N) % 1000000 ))}
echo "seed $SEED (CREST_TEST_SEED=$SEED replays it)"
mkdir -p "$T/w"
CREST_BIN=$CREST CASCTL_BIN=$CASCTL W=$T/w SEED=$SEED SCALE=$SCALE STEPS=${DELTA_STEPS:-$([ "${SCALE}" -ge 4 ] && echo 35 || echo 50)} python3 - <<'PY'
import hashlib, json, os, random, shutil, signal, struct, subprocess, sys, time

crest, casctl = os.environ["CREST_BIN"], os.environ["CASCTL_BIN"]
W, seed, scale = os.environ["W"], int(os.environ["SEED"]), int(os.environ["SCALE"])
steps = int(os.environ["STEPS"])
rng = random.Random(seed)               # every choice; never fed what was observed
B, SPAN_N, MIN_N = 4096, 65536 // 4096, 4
FULL_EXT = 41                           # u8 hole, u64 len, sha[32]
DELTA_HEAD = 1 + 32 + 4
step_no = -1

def fail(msg):
    sys.exit(f"FAIL (seed {seed}, step {step_no}): {msg}")

def run(argv, ok=True):
    p = subprocess.run(argv, capture_output=True, text=True, cwd=W)
    if ok and p.returncode != 0:
        fail(f"{' '.join(argv[1:])}: rc {p.returncode}: {p.stderr.strip()[:600]}")
    return p

def js(binary, *args):
    return json.loads(run([binary, "--json", *args]).stdout)

# --- content: a pool of 4 KiB chunks, a version is a list of pool indices --
pool, pool_sha = [], []
def new_chunk():
    pool.append(rng.randbytes(B))                 # random: never a hole
    pool_sha.append(hashlib.sha256(pool[-1]).digest())
    return len(pool) - 1

# --- the model's encoder (FORMAT.md, "Manifests") -------------------------
def ext_enc(c):
    return b"\0" + struct.pack("<Q", B) + pool_sha[c]

def encode(chunks, parent):
    """The pieces a writer stores for a file of these chunks whose parent
    snapshot's pieces are parent (None: no parent): per piece a dict of
    first, n, sha, enc, delta, base, chg (the indices a delta replaces)."""
    if len(chunks) < MIN_N:
        return []
    at = {p["first"]: p for p in parent} if parent else {}
    out = []
    for first in range(0, len(chunks), SPAN_N):
        ext = chunks[first:first + SPAN_N]
        n = len(ext)
        full = b"".join(ext_enc(c) for c in ext)
        piece = dict(first=first, n=n, ext=list(ext), delta=False, base=None, chg=())
        bp = at.get(first)
        if bp and bp["n"] == n:
            # Changed: what differs from the parent's extents, and what the
            # parent's delta changed already (even if set back to the base's).
            was = set(bp["chg"])
            chg = [j for j in range(n) if j in was or ext[j] != bp["ext"][j]]
            if len(chg) <= n // 4 and (bp["delta"] or chg):
                base = bp["base"] if bp["delta"] else bp["sha"]
                enc = (b"\x02" + base + struct.pack("<I", len(chg)) +
                       b"".join(struct.pack("<I", j) + ext_enc(ext[j]) for j in chg))
                piece.update(delta=True, base=base, chg=tuple(chg), enc=enc)
        if not piece["delta"]:
            piece["enc"] = full
        piece["sha"] = hashlib.sha256(piece["enc"]).digest()
        out.append(piece)
    return out

def named(pieces):
    """Every piece a manifest needs in the store: its own and its deltas' bases."""
    out = {p["sha"]: len(p["enc"]) for p in pieces}
    for p in pieces:
        if p["delta"]:
            out[p["base"]] = full_len[p["base"]]
    return out
full_len = {}           # sha -> length, of every piece the model ever made

# --- the model's snapshots ------------------------------------------------
snap = {}               # id -> dict(branch, seq, chunks, pieces, parent)
heads = {}              # branch -> id (its newest snapshot)
refs = {}               # branch -> id: made by crest branch, a ref to that snapshot (no copy)
policy = set()          # what the store must list, were every gc completed
live = set()            # what it may list (kills leave more)
store_pieces = {}       # sha -> len: the index's pieces, when exact
exact = True            # no killed gc's garbage since the last completed gc
seq = 0
saved = os.path.join(W, "saved")
os.makedirs(saved)

def add_snapshot(sid, branch, chunks, pieces, parent):
    global seq
    if sid in snap:
        fail(f"snapshot id {sid[:12]} made twice")
    seq += 1
    snap[sid] = dict(branch=branch, seq=seq, chunks=chunks, pieces=pieces, parent=parent)
    heads[branch] = sid
    policy.add(sid)
    live.add(sid)

def keep_last(ids, k):
    keep = set()
    for br in {snap[i]["branch"] for i in ids}:
        on = sorted((i for i in ids if snap[i]["branch"] == br), key=lambda i: snap[i]["seq"], reverse=True)
        keep |= set(on[:k])
    # A ref is its branch's head while the branch has no snapshot of its
    # own: gc keeps what it points at.
    branches_with_own = {snap[i]["branch"] for i in ids}
    keep |= {t for name, t in refs.items() if name not in branches_with_own and t in ids}
    return keep

def listed():
    return {e["snapshot"] for e in js(crest, "ls")}

def stats():
    return js(casctl, "stats")

def check_pieces(what):
    st = stats()
    want_n, want_b = len(store_pieces), sum(store_pieces.values())
    if exact and (st["pieces"], st["piece_bytes"]) != (want_n, want_b):
        fail(f"{what}: the store has {st['pieces']} pieces of {st['piece_bytes']} bytes, "
             f"the model {want_n} of {want_b}")
    return st

def restore(sid, why):
    dst = os.path.join(W, "get")
    shutil.rmtree(dst, ignore_errors=True)
    p = run([crest, "--quiet", "get", sid, dst], ok=False)
    if p.returncode != 0:
        fail(f"{why} snapshot {sid[:12]} (branch {snap[sid]['branch']}, #{snap[sid]['seq']}) does not "
             f"restore: rc {p.returncode}: {p.stderr.strip()[:400]}")
    with open(os.path.join(saved, sid), "rb") as a, open(os.path.join(dst, "data.bin"), "rb") as b:
        want, got = a.read(), b.read()
    if got != want:
        bad = [i for i in range(max(len(got), len(want)) // B) if got[i * B:(i + 1) * B] != want[i * B:(i + 1) * B]]
        fail(f"{why} snapshot {sid[:12]} (branch {snap[sid]['branch']}, #{snap[sid]['seq']}) restores "
             f"{len(got)} bytes, the model {len(want)}; chunks differ at {bad[:8]}{'...' if len(bad) > 8 else ''}")
    shutil.rmtree(dst)

def verify(what):
    v = run([casctl, "--json", "verify"], ok=False)
    if v.returncode != 0:
        fail(f"casctl verify {what}: rc {v.returncode}: {(v.stdout + v.stderr).strip()[:600]}")

def check_listing():
    """The listing against the model: what gc's policy keeps is there,
    nothing the model does not know is, and what went stays gone."""
    global live
    L = listed()
    if L - live:
        fail(f"listed but not in the model: {sorted(x[:12] for x in L - live)}")
    if policy - L:
        fail(f"the model keeps these, the store lists none of them: {sorted(x[:12] for x in policy - L)}")
    for sid in live - L:
        os.unlink(os.path.join(saved, sid))
    live = L
    return L

def check_restores(L, extra=()):
    look = random.Random(f"{seed}/{step_no}")     # which ones: not a choice of the run
    ids = set(heads.values()) | set(extra)
    rest = sorted(L - ids)
    ids |= set(look.sample(rest, min(2, len(rest))))
    for sid in sorted(ids, key=lambda i: snap[i]["seq"]):
        restore(sid, "listed")

def check_log(L):
    """crest log: each listed snapshot's branch and parent as the model's,
    and time order the order they were made."""
    log = js(crest, "log")
    if {e["snapshot"] for e in log} != L:
        fail("crest log and crest ls list different snapshots")
    for e in log:
        m = snap[e["snapshot"]]
        if e["branch"] != m["branch"] or e["parent"] != m["parent"]:
            fail(f"snapshot {e['snapshot'][:12]}: branch {e['branch']} parent {str(e['parent'])[:12]}, "
                 f"the model {m['branch']} {str(m['parent'])[:12]}")
    by_t = [e["snapshot"] for e in sorted(log, key=lambda e: (e["time_ns"], e["snapshot"]))]
    if by_t != sorted(L, key=lambda i: snap[i]["seq"]):
        fail("the snapshots' time order is not the order they were made in")

# --- edits ----------------------------------------------------------------
def ancestors(sid):
    out = []
    while sid is not None and sid in snap:
        out.append(sid)
        sid = snap[sid]["parent"]
    return out

def edit(chunks, head):
    c = list(chunks)
    n = len(c)
    r = rng.random()
    if r < 0.50:
        kind = "sparse"
        for i in rng.sample(range(n), rng.choice([0, 1, 1, 2, 2, 3, 3])):
            c[i] = new_chunk()
    elif r < 0.60:
        kind = "many"
        k = rng.randrange(n // 8, n // 3)
        if rng.random() < 0.5:
            for i in rng.sample(range(n), k):
                c[i] = new_chunk()
        else:
            s = rng.randrange(n - k)
            c[s:s + k] = [new_chunk() for _ in range(k)]
    elif r < 0.78:
        kind = "revert"
        # Back to an older version's chunk: an ancestor's (often the
        # delta's own base extent) or any version's at all.
        anc = ancestors(head)[1:]
        for _ in range(rng.randrange(1, 4)):
            src = rng.choice(anc) if anc and rng.random() < 0.6 else rng.choice(sorted(snap, key=lambda i: snap[i]["seq"]))
            old = snap[src]["chunks"]
            i = rng.randrange(min(n, len(old)))
            c[i] = old[i]
        if rng.random() < 0.5:
            c[rng.randrange(n)] = new_chunk()
    elif r < 0.86:
        kind = "grow"
        k = rng.randrange(1, 40)
        at = n if rng.random() < 0.7 else rng.randrange(n)
        c[at:at] = [new_chunk() for _ in range(k)]
    else:
        kind = "shrink"
        k = rng.randrange(1, min(40, n - lo_chunks) + 1) if n > lo_chunks else 0
        at = n - k if rng.random() < 0.7 else rng.randrange(n - k + 1)
        del c[at:at + k]
    return kind, c

# 2-3 MiB: 32-48 pieces. A sanitizer build (scale 4) takes half that: its
# time goes mostly to starting the commands, not to the data.
lo_chunks = max(48, 512 // max(1, scale // 2))
hi_chunks = max(96, 768 // max(1, scale // 2))
data = os.path.join(W, "data.bin")

def write_new(path, chunks):
    with open(path + ".tmp", "wb") as f:
        f.write(b"".join(pool[i] for i in chunks))
    os.rename(path + ".tmp", path)

delta_puts = []          # (piece bytes grown, a full list's bytes) of sparse puts that wrote only deltas
counts = {}
# Checks of what a step stored, run after the restores (a snapshot that
# comes back wrong says more than a count of bytes).
pending = []
def run_pending():
    for check in pending:
        check()
    pending.clear()

def do_put(branch, kind, chunks):
    parent = heads.get(branch)
    pieces = encode(chunks, snap[parent]["pieces"] if parent else None)
    write_new(data, chunks)
    before = stats() if parent or snap else {"piece_bytes": 0}
    sid = js(crest, "put", "--branch", branch, "--chunker", "fixed", "--chunk-size", "4K", "data.bin")["snapshot"]
    os.link(data, os.path.join(saved, sid))
    for p in pieces:
        if not p["delta"]:
            full_len[p["sha"]] = len(p["enc"])
    add_snapshot(sid, branch, chunks, pieces, parent)
    n = seq
    store_pieces.update(named(pieces))
    grew = stats()["piece_bytes"] - before["piece_bytes"]
    pn = named(snap[parent]["pieces"]) if parent else {}
    bound = sum(l for s, l in named(pieces).items() if s not in pn)
    nd = sum(p["delta"] for p in pieces)
    counts["delta pieces"] = counts.get("delta pieces", 0) + nd
    counts["full pieces"] = counts.get("full pieces", 0) + len(pieces) - nd
    fresh = [p for p in pieces if p["sha"] not in pn]

    def check():
        check_pieces(f"put #{n} ({kind}) on {branch}")
        # Whatever a kill left: a put never stores more than its pieces
        # the parent does not name.
        if grew > bound:
            fail(f"put #{n} ({kind}): piece bytes grew by {grew}, more than its new pieces' {bound}")
        if kind == "sparse" and parent and fresh and all(p["delta"] for p in fresh):
            delta_puts.append((grew, len(chunks) * FULL_EXT))
            # Spelled out: a few changed chunks cost a few deltas, not pieces.
            if grew > len(fresh) * (DELTA_HEAD + (SPAN_N // 4) * (4 + FULL_EXT)):
                fail(f"put #{n}: {len(fresh)} changed pieces grew the piece bytes by {grew}, more than "
                     f"{len(fresh)} deltas take (a full piece: {SPAN_N * FULL_EXT}): deltas not written?")
    pending.append(check)
    return sid, f"put #{n} {kind} on {branch}: {len(chunks)} chunks, {len(pieces)} pieces " \
                f"({nd} deltas), +{grew} piece bytes"

def do_gc(k, extra, kill_after=None):
    """gc --keep-last k (completed, or killed after kill_after seconds);
    returns what it did, and whether it completed."""
    global exact, store_pieces, policy
    L0 = live
    want = keep_last(L0, k)
    policy = keep_last(policy, k)
    what = f"gc --keep-last {k}{''.join(' ' + a for a in extra)}"
    argv = [casctl, "--json", "gc", "--keep-last", str(k), *extra]
    if kill_after is None:
        out = run(argv).stdout
    else:
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=W)
        time.sleep(kill_after)
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.communicate()
            exact = False          # garbage, maybe, until a gc completes
            counts["gc killed"] = counts.get("gc killed", 0) + 1
            return f"{what} killed after {kill_after * 1000:.0f} ms", False
        out, err = p.communicate()
        if p.returncode != 0:
            fail(f"{what}: rc {p.returncode}: {err.decode().strip()[:400]}")
        what += f" (finished before the kill at {kill_after * 1000:.0f} ms)"
    r = json.loads(out)
    if set(r["kept"]) != want or set(r["expired"]) != L0 - want:
        fail(f"{what}: kept {len(r['kept'])} expired {len(r['expired'])}; the model keeps "
             f"{len(want)} of {len(L0)}: {sorted(x[:12] for x in set(r['kept']) ^ want)}")
    live_pieces = {}
    for sid in want:
        live_pieces.update(named(snap[sid]["pieces"]))
    n, dead, want_n, want_dead = r["pieces"], r["dead_pieces"], len(store_pieces), len(store_pieces) - len(live_pieces)
    if exact:
        def check():
            if (n, dead) != (want_n, want_dead):
                fail(f"{what}: {n} pieces, {dead} dead; the model {want_n}, {want_dead} dead")
        pending.append(check)
    store_pieces, exact = live_pieces, True
    counts["gc"] = counts.get("gc", 0) + 1
    return (f"{what}: kept {len(want)}, expired {len(L0 - want)}, dead pieces {r['dead_pieces']}/{r['pieces']}, "
            f"packs rewritten {r['packs_rewritten']}/{r['packs']}"), True

# --- the run --------------------------------------------------------------
branches = ["main", "exp"]
forks = 0
step_no = 0
chunks = [new_chunk() for _ in range(rng.randrange(lo_chunks, hi_chunks))]
sid, msg = do_put("main", "first", chunks)
check_restores(check_listing(), [sid])
run_pending()
print(f"   step 0: {msg}")
kinds_seen = set()
for step_no in range(1, steps + 1):
    r = rng.random()
    extra, settled = [], False
    if step_no == steps or r < 0.64:
        br = rng.choice(branches)
        head = heads.get(br)
        base_chunks = snap[head]["chunks"] if head else snap[heads["main"]]["chunks"]
        kind, chunks = edit(base_chunks, head or heads["main"])
        kinds_seen.add(kind)
        sid, msg = do_put(br, kind, chunks)
        extra = [sid]
        counts["puts"] = counts.get("puts", 0) + 1
    elif r < 0.69 and forks < 2:
        forks += 1
        name = f"fork{forks}"
        src = rng.choice(sorted(policy, key=lambda i: snap[i]["seq"]))
        out = js(crest, "branch", name, src)
        sid = out["snapshot"]
        # A ref to src itself, as in git: no snapshot is written.
        if sid != src:
            fail(f"crest branch {name} {src[:12]}: made {sid[:12]}, not a ref to the snapshot itself")
        refs[name] = src
        heads[name] = src
        check_pieces(f"crest branch {name} #{snap[src]['seq']}")     # no pieces of its own
        branches.append(name)
        extra = [sid]
        msg = f"branch {name} at #{snap[src]['seq']} ({snap[src]['branch']})"
    elif r < 0.82:
        check_log(live)
        msg, settled = do_gc(rng.randrange(1, 4), rng.choice([[], ["--rewrite-below", "1.0"]]))
    elif r < 0.92:
        msg, settled = do_gc(rng.randrange(1, 4), ["--rewrite-below", "1.0"], kill_after=rng.randrange(0, 80) / 1000)
    else:
        rep = js(casctl, "repair")
        if rep["lost_snapshots"] or rep["failed_commits"]:
            fail(f"casctl repair lost something: {rep}")
        msg = f"repair: {rep['snapshots']} snapshots, {rep['chunk_records']} chunk records"
        counts["repair"] = counts.get("repair", 0) + 1
        settled = True
    L = check_listing()
    check_restores(L, extra)
    if settled:
        verify(f"after {msg}")
    run_pending()
    check_pieces(msg)
    print(f"   step {step_no}: {msg}; {len(L)} listed")

# --- the end: a completed gc, verify, every listed snapshot --------------
step_no = "end"
check_log(live)
msg, _ = do_gc(2, ["--rewrite-below", "1.0"])
print(f"   end: {msg}")
L = check_listing()
for sid in sorted(L, key=lambda i: snap[i]["seq"]):
    restore(sid, "kept")
verify("at the end")
run_pending()
check_pieces("after the final gc")
if len(delta_puts) < 3:
    fail(f"only {len(delta_puts)} sparse puts stored deltas alone: the test proves too little")
if counts.get("delta pieces", 0) < 10:
    fail(f"only {counts.get('delta pieces', 0)} delta pieces were written")
g = sum(d[0] for d in delta_puts) / len(delta_puts)
f = sum(d[1] for d in delta_puts) / len(delta_puts)
print(f"ok: {len(L)} kept snapshots restore bit-exact, verify ok; {counts}; edits {sorted(kinds_seen)}; "
      f"{len(delta_puts)} sparse puts grew the piece bytes by {g:.0f} on average (a full extent list: {f:.0f})")
PY
echo PASS
