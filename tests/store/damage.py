#!/usr/bin/env python3
"""damage.py - issue 32: one damaged byte range must cost what it hit, no more.

A store of a few snapshots that share chunks is made once. Then, round
after round, a fresh copy of it gets 1 or 4 bytes of one file changed
(packs most often, their headers too; meta logs; index files), and:
  - casctl verify names only chunks the damage hit, and every snapshot that
    lost data after the repair was named damaged by it before;
  - when verify passes on a damaged index, every snapshot is listed with
    its tag and restores bit-exact;
  - casctl repair keeps every snapshot whose manifest survived: one that
    used a damaged chunk is marked damaged (ls --json), others are not;
    no intact chunk leaves the index (chunk count);
  - after the repair every snapshot that uses no damaged byte restores
    bit-exact; a damaged one is refused by crest get, and restored with
    --allow-damaged: zeros exactly where it says bytes are lost, bit-exact
    elsewhere, the ranges lost being the extents of damaged chunks, which
    verify names.
The model of which snapshot uses which chunk comes from the pristine
store's files, decoded here (cas/FORMAT.md), not from crest.

CREST_TEST_SEED replays a run. CREST_DAMAGE_VERIFY_META=1 adds the check
that waits for casctl verify to read the meta logs whole (the verify
branch): verify must fail when a manifest, piece or tag record of a meta
log was damaged where a check reads it (not its padding, nor a manifest's
id field, which a repair takes from the hash). Today's verify reads no
log, so that check fails.
"""
import atexit
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time

CREST, CASCTL, STORE_TOOL = os.environ["CREST"], os.environ["CASCTL"], os.environ["STORE_TOOL"]
SCALE = max(1, int(os.environ.get("CREST_TEST_SCALE") or 1))
VERIFY_META = os.environ.get("CREST_DAMAGE_VERIFY_META") == "1"
seed = int(os.environ.get("CREST_TEST_SEED") or random.randrange(1 << 31))
print(f"seed {seed} (CREST_TEST_SEED={seed} replays it)", flush=True)
rng = random.Random(seed)

REC = 56            # record header (cas/format.h)
FILE_HDR = 16

T = tempfile.mkdtemp(prefix="crest-damage.")
atexit.register(shutil.rmtree, T, True)
S0, S, D = f"{T}/pristine", f"{T}/store", f"{T}/d"
env = dict(os.environ, CREST_PACK_LIMIT="131072", CREST_PACK_LANES="1")
env.pop("CREST_STORE", None)
ROUND = "setup"


def fail(msg):
    print(f"FAIL (seed {seed}, {ROUND}): {msg}", file=sys.stderr, flush=True)
    if os.environ.get("CREST_DAMAGE_KEEP"):   # the store stays, for a look
        print(f"kept {T}", file=sys.stderr)
        os._exit(1)
    sys.exit(1)


def run(prog, *args, store=S, ok=(0,)):
    p = subprocess.run([prog, "--store", store, *args], env=env, capture_output=True, text=True)
    if p.returncode >= 128 or p.returncode < 0:
        fail(f"{os.path.basename(prog)} {' '.join(args)} died (rc {p.returncode}): {p.stderr}")
    if ok is not None and p.returncode not in ok:
        fail(f"{os.path.basename(prog)} {' '.join(args)}: rc {p.returncode}: {p.stderr}")
    return p


# ---- the pristine store ----
# Snapshots of junk first, which gc then expires, compacting the meta logs
# into one that holds every live manifest and tag (and its delete records):
# damage there must cost one record, not the ones after it. The last
# snapshot comes after gc, in a log of its own.
run(CREST, "--quiet", "init", store=S0)
os.makedirs(f"{T}/junk")
subprocess.run([STORE_TOOL, "files", f"{T}/junk", "150", str(seed)], check=True)
for _ in range(2):
    run(CREST, "--quiet", "put", f"{T}/junk", store=S0)
os.makedirs(D)
NSNAP = 6
subprocess.run([STORE_TOOL, "random", f"{T}/shared", str(rng.randrange(100, 300) * 1024), str(seed)], check=True)
for k in range(NSNAP):
    d = f"{D}/s{k}"
    os.makedirs(d)
    subprocess.run([STORE_TOOL, "random", f"{d}/own.bin", str(rng.randrange(80, 500) * 1024 // SCALE + 1000),
                    str(seed + k + 1)], check=True)
    shutil.copy(f"{T}/shared", f"{d}/shared.bin")
    if k:
        shutil.copy(f"{D}/s{k - 1}/own.bin", f"{d}/prev.bin")
    with open(f"{d}/small.txt", "w") as f:
        f.write(f"snapshot {k}\n")
    open(f"{d}/empty", "w").close()
    os.symlink("own.bin", f"{d}/link")
    if k == NSNAP - 1:
        env["CREST_META_COMPACT_MIN"] = "1"
        run(CASCTL, "--quiet", "gc", "--keep-last", str(NSNAP - 1), store=S0)
        del env["CREST_META_COMPACT_MIN"]
    run(CREST, "--quiet", "put", "--tag", f"s{k}", d, store=S0)


def records(path, magic):
    """(offset, end, kind/codec, sha) of each record of a pack or log, in order."""
    b = open(path, "rb").read()
    out, off = [], FILE_HDR
    while off + REC <= len(b):
        if b[off:off + 4] != magic:
            fail(f"pristine {path}: no record at {off}")
        n = struct.unpack_from("<I", b, off + (12 if magic == b"CRCK" else 8))[0]
        out.append((off, off + REC + n, b[off + 4], b[off + 24:off + 56]))
        off += REC + n
    return out


def manifest(p):
    """The streams of a manifest's encoding: [(name, [(off, len, sha or None)])]."""
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, p, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0]

    def s():
        nonlocal pos
        n = take("I")
        pos += n
        return p[pos - n:pos].decode()

    assert p[:4] == b"CRMF"
    pos = 4
    version = take("H")
    take("H"), take("Q"), s()
    if take("B"):
        pos += 32
    take("Q")
    for _ in range(take("I")):
        s(), s()
    streams = []
    for _ in range(take("I")):
        name = s()
        take("B"), take("I"), take("q"), take("Q"), s(), s()
        n = take("Q")
        if version >= 2 and take("I"):
            fail("the test's snapshots must keep their extent lists inline")
        ext, off = [], 0
        for _ in range(n):
            hole, ln = take("B"), take("Q")
            sha = None if hole else p[pos:pos + 32]
            pos += 0 if hole else 32
            ext.append((off, ln, sha))
            off += ln
        streams.append((name, ext))
    return streams


PACKS = sorted(f for f in os.listdir(f"{S0}/packs") if f.endswith(".pack"))
LOGS = sorted(f for f in os.listdir(f"{S0}/meta") if f.endswith(".log"))
pack_recs = {f: records(f"{S0}/packs/{f}", b"CRCK") for f in PACKS}
log_recs = {f: records(f"{S0}/meta/{f}", b"CRMR") for f in LOGS}
snaps = {}      # id hex -> {"tag", "streams"}
tag_of = {}
for f in LOGS:
    b = open(f"{S0}/meta/{f}", "rb").read()
    for off, end, kind, sha in log_recs[f]:
        if kind == 1:
            snaps[sha.hex()] = {"streams": manifest(b[off + REC:end])}
        elif kind == 3:
            tag_of[sha.hex()] = b[off + REC:end].decode()
for i, m in snaps.items():
    m["tag"] = tag_of[i]
    m["shas"] = {sha for _, ext in m["streams"] for _, _, sha in ext if sha}
if len(snaps) != NSNAP:
    fail(f"{len(snaps)} manifests in the logs, {NSNAP} puts")
CHUNKS = json.loads(run(CASCTL, "--json", "stats", store=S0).stdout)["chunks"]
IDX = [f for f in sorted(os.listdir(f"{S0}/index")) if os.path.isfile(f"{S0}/index/{f}") and f != "LOCK"]
print(f"{NSNAP} snapshots, {CHUNKS} chunks in {len(PACKS)} packs, {len(LOGS)} meta logs, "
      f"{len(IDX)} index files", flush=True)


def tree_same(out, src, lost=()):
    """out/ against src/: bit-exact, but the lost ranges (name, off, len), which must be zeros."""
    for dp, dn, fn in os.walk(src):
        for name in fn:
            sp = os.path.join(dp, name)
            rel = os.path.relpath(sp, D)
            op = os.path.join(out, rel)
            if os.path.islink(sp):
                if not os.path.islink(op) or os.readlink(op) != os.readlink(sp):
                    return f"{rel}: symlink differs"
                continue
            if not os.path.isfile(op):
                return f"{rel}: missing"
            a, b = bytearray(open(sp, "rb").read()), open(op, "rb").read()
            if len(a) != len(b):
                return f"{rel}: {len(b)} bytes, not {len(a)}"
            for stream, off, ln in lost:
                if stream == rel:
                    if b[off:off + ln] != bytes(ln):
                        return f"{rel}: bytes {off} to {off + ln} named lost are not zeros"
                    a[off:off + ln] = bytes(ln)
            if a != b:
                first = next(i for i in range(len(a)) if a[i] != b[i])
                return f"{rel}: differs at byte {first}, not in a range named lost"
    return None


def verify_bad(p):
    """{id: set of bad shas, or None when unreadable} of the damaged snapshots of a verify --json."""
    try:
        v = json.loads(p.stdout)
    except ValueError:
        return None
    out = {}
    for r in v["results"]:
        if not r["ok"]:
            out[r["snapshot"]] = None if r["error"] else {bytes.fromhex(h) for s in r["streams"] for h in s["bad"]}
    return out


def get(idhex, allow=False):
    out = f"{T}/out"
    shutil.rmtree(out, ignore_errors=True)
    args = ["--json", "get"] + (["--allow-damaged"] if allow else []) + [idhex[:16], out]
    return run(CREST, *args, ok=None), f"{out}"


# ---- rounds ----
rounds = max(8, 40 // SCALE)
deadline = time.monotonic() + 50
counts = {"pack": 0, "pack header": 0, "meta": 0, "index": 0}
kept_damaged = 0
for rnd in range(rounds):
    if time.monotonic() > deadline:
        print(f"time is up after {rnd} rounds")
        break
    shutil.rmtree(S, ignore_errors=True)
    shutil.copytree(S0, S, symlinks=True)
    x = rng.random()
    kind = "pack" if x < 0.6 else "meta" if x < 0.8 else "index"
    # The first rounds aim at what chance seldom hits: a manifest record's
    # id field (in no checksum), its payload, a chunk record's header, a
    # tag record's target (in no checksum either: verify must see it by
    # the snapshot it names, which is nowhere).
    if rnd == 4:
        # A manifest record's magic or length: the record no longer says
        # where it is, and the repair must still name the snapshot.
        kind = "meta"
        f = rng.choice([g for g in LOGS if any(r[2] == 1 for r in log_recs[g])])
        o, e, _, _ = rng.choice([r for r in log_recs[f] if r[2] == 1])
        path = f"{S}/meta/{f}"
        off = o + rng.choice([0, 8]) + rng.randrange(4)
    elif rnd == 3:
        kind = "meta"
        f = rng.choice([g for g in LOGS if any(r[2] == 3 for r in log_recs[g])])
        o, e, _, _ = rng.choice([r for r in log_recs[f] if r[2] == 3])
        path = f"{S}/meta/{f}"
        off = o + 24 + rng.randrange(29)   # up to 4 bytes, all in the field
    elif rnd < 3:
        kind = "meta" if rnd < 2 else "pack"
        f = rng.choice([g for g in (LOGS if rnd < 2 else PACKS)
                        if any(r[2] == 1 for r in log_recs[g])]) if rnd < 2 else rng.choice(PACKS)
        o, e, _, _ = rng.choice([r for r in log_recs[f] if r[2] == 1] if rnd < 2 else pack_recs[f])
        path = f"{S}/{'meta' if rnd < 2 else 'packs'}/{f}"
        off = o + (24 + rng.randrange(32) if rnd == 0 else REC + rng.randrange(e - o - REC) if rnd == 1
                   else rng.randrange(REC))
    elif kind == "pack":
        f = rng.choice(PACKS)
        path = f"{S}/packs/{f}"
        if rng.random() < 0.05:
            kind, off = "pack header", rng.randrange(0, FILE_HDR)
        else:
            off = rng.randrange(FILE_HDR, os.path.getsize(path))
    elif kind == "meta":
        f = rng.choice(LOGS)
        path = f"{S}/meta/{f}"
        off = rng.randrange(0, os.path.getsize(path))
    else:
        f = rng.choice(IDX)
        path = f"{S}/index/{f}"
        if os.path.getsize(path) == 0:
            continue
        off = rng.randrange(0, os.path.getsize(path))
    n = min(rng.choice([1, 4]), os.path.getsize(path) - off, 1 if rnd == 0 else 4,
            (4 - (off - o) % 4) if rnd == 4 else 4)   # round 4: inside its field
    counts[kind] += 1
    ROUND = f"round {rnd}: {n} bytes at {off} of {os.path.relpath(path, S)}"
    print(ROUND, flush=True)
    with open(path, "r+b") as fh:
        fh.seek(off)
        old = fh.read(n)
        fh.seek(off)
        fh.write(bytes(c ^ rng.randrange(1, 256) for c in old))   # every byte changes

    # What the damage hit, by the model.
    hit = set()            # damaged chunk shas
    hit_meta = []          # damaged meta records: (kind, sha)
    if kind == "pack":
        hit = {sha for o, e, _, sha in pack_recs[f] if o < off + n and off < e}
    elif kind == "pack header":
        hit = {sha for _, _, _, sha in pack_recs[f]}
    elif kind == "meta":
        hit_meta = [(k, sha) for o, e, k, sha in log_recs[f] if o < off + n and off < e]
    users = {i for i, m in snaps.items() if m["shas"] & hit}

    # verify before the repair: only chunks the damage hit are named.
    pv = run(CASCTL, "--json", "verify", ok=None)
    before = verify_bad(pv)
    if kind.startswith("pack"):
        if before is None:
            fail(f"verify printed no report: {pv.stderr}")
        for i, bad in before.items():
            if i not in users or bad is None or not bad <= hit:
                fail(f"verify named snapshot {i[:12]} damaged beyond what was hit: {pv.stdout}")
    # A manifest, piece or tag record hit where a check reads (not its
    # padding; a manifest's id field goes by its hash): verify must notice.
    checked = kind == "meta" and any(
        any(not (b - o in (5, 6, 7, 20, 21, 22, 23) or (k == 1 and 24 <= b - o < 56))
            for b in range(max(o, off), min(e, off + n)))
        for o, e, k, _ in log_recs[f] if k in (1, 2, 3) and o < off + n and off < e)
    if VERIFY_META and checked and pv.returncode == 0:
        fail("verify says the store is whole with a damaged meta log record (CREST_DAMAGE_VERIFY_META)")

    if kind == "index" and pv.returncode == 0:
        # verify said whole: then the store is, as readers see it.
        pl = run(CREST, "--json", "ls", ok=None)
        seen = {s["snapshot"]: s for s in json.loads(pl.stdout)} if pl.returncode == 0 else {}
        for i, m in snaps.items():
            if i not in seen or m["tag"] not in seen[i]["tags"]:
                fail(f"verify passed, yet ls lacks {m['tag']} ({i[:12]}): {pl.stderr}")
            p, out = get(i)
            if p.returncode != 0 or tree_same(out, f"{D}/{m['tag']}"):
                fail(f"verify passed, yet {m['tag']} does not restore: {p.stderr}")

    rp = run(CASCTL, "--json", "repair", ok=(0, 1))
    ls = json.loads(run(CREST, "--json", "ls").stdout)
    listed = {s["snapshot"]: s for s in ls}
    stats = json.loads(run(CASCTL, "--json", "stats").stdout)
    if stats["chunks"] < CHUNKS - len(hit):
        fail(f"{CHUNKS - stats['chunks']} chunks left the index; the damage hit {len(hit)}")
    after = verify_bad(run(CASCTL, "--json", "verify", ok=(0, 1)))
    if after is None:
        fail("verify after the repair printed no report")

    for i, m in snaps.items():
        gone_meta = any(k == 1 and sha.hex() == i for k, sha in hit_meta)
        # A record's kind byte is in no checksum: a manifest turned into
        # another kind is not a manifest any more, and nothing names it.
        kind_hit = any(k == 1 and sha.hex() == i and o < off + n and off <= o + 4 < off + n
                       for o, e, k, sha in (log_recs[f] if kind == "meta" else []))
        # Damage only to its id field (or padding), which no checksum covers:
        # the manifest is whole and goes by its SHA-256, so it must stay.
        whole = all(all(b - o in range(24, 56) or b - o in (5, 6, 7, 20, 21, 22, 23)
                        for b in range(max(o, off), min(e, off + n)))
                    for o, e, k, sha in (log_recs[f] if kind == "meta" else [])
                    if k == 1 and sha.hex() == i and o < off + n and off < e)
        if i not in listed:
            if gone_meta and not whole:
                if i[:12] not in rp.stderr and not kind_hit:
                    fail(f"repair lost snapshot {i[:12]} (manifest damaged) without naming it: {rp.stderr}")
                continue
            fail(f"snapshot {i[:12]} ({m['tag']}) is no longer listed after the repair: {rp.stderr}")
        if not any(k == 3 and sha.hex() == i for k, sha in hit_meta) and m["tag"] not in listed[i]["tags"]:
            fail(f"snapshot {i[:12]} lost its tag {m['tag']}; hit {hit_meta}; repair: {rp.stderr}")
        src = f"{D}/{m['tag']}"
        if listed[i]["damaged"]:
            kept_damaged += 1
            if i not in users:
                fail(f"snapshot {i[:12]} is marked damaged but uses no damaged chunk")
            if before is None or i not in before:
                fail(f"snapshot {i[:12]} lost data, and verify before the repair did not say so")
            p, out = get(i)
            if p.returncode == 0 or "damaged" not in p.stderr or p.stderr.count("\n") != 1:
                fail(f"crest get of damaged {i[:12]}: rc {p.returncode}, {p.stderr!r}")
            p, out = get(i, allow=True)
            if p.returncode != 0:
                fail(f"crest get --allow-damaged {i[:12]}: {p.stderr}")
            lost = [(r["stream"], r["offset"], r["length"]) for r in json.loads(p.stdout)["lost"]]
            if not lost:
                fail(f"get --allow-damaged of damaged {i[:12]} names nothing lost")
            # Each range lost is extents of damaged chunks, and verify names them.
            exts = {name: ext for name, ext in m["streams"]}
            lost_shas = set()
            for name, o, ln in lost:
                inside = [e for e in exts.get(name, []) if o <= e[0] and e[0] + e[1] <= o + ln]
                if sum(e[1] for e in inside) != ln or any(e[2] not in hit for e in inside):
                    fail(f"{i[:12]}: range {name} {o}+{ln} is not extents of damaged chunks")
                lost_shas |= {e[2] for e in inside}
            if after.get(i) is None or after[i] != lost_shas:
                fail(f"{i[:12]}: verify after the repair names {after.get(i)}, the ranges lost {lost_shas}")
            why = tree_same(f"{out}", src, lost)
            if why:
                fail(f"get --allow-damaged of {i[:12]}: {why}")
            if m["tag"] == f"s{NSNAP - 1}":
                # The branch's head, damaged: putting its files again stores
                # the lost chunks anew (and only those), and the new snapshot
                # does not take them from its parent's list.
                p = run(CREST, "--json", "put", src)
                put = json.loads(p.stdout)
                if not 0 < put["new_bytes"] <= sum(r[2] for r in lost):
                    fail(f"put of {m['tag']} again stored {put['new_bytes']} bytes new; "
                         f"{sum(r[2] for r in lost)} were lost")
                q, out = get(put["snapshot"])
                if q.returncode != 0 or tree_same(out, src):
                    fail(f"the snapshot put again over damaged {m['tag']} does not restore: {q.stderr}")
            continue
        p, out = get(i)
        if i in users or gone_meta:
            # Hit, but not lost (a byte no check reads, or a record a
            # repair rebuilt from another copy): whole, or named by verify.
            if p.returncode != 0:
                if i not in after:
                    fail(f"get of {i[:12]} failed and verify says it is whole: {p.stderr}")
                continue
        elif p.returncode != 0:
            fail(f"get of {i[:12]}, which uses no damaged byte: {p.stderr}")
        why = tree_same(out, src)
        if why:
            fail(f"get of {i[:12]}: {why}")
    if kind in ("index",) and (rp.returncode != 0 or len(listed) != NSNAP):
        fail(f"repair of a damaged index file did not bring everything back: {rp.stderr}")

print(f"PASS: {sum(counts.values())} rounds ({', '.join(f'{v} {k}' for k, v in counts.items())}), "
      f"{kept_damaged} damaged snapshots kept and checked")
