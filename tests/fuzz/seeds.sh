#!/bin/bash
# Makes the seed corpus of the fuzz targets (corpus/<target>/seed-*) from
# real stores written by crest put, and a few hand-written inputs; the
# files are committed, so this runs only to refresh them:
#   tests/fuzz/seeds.sh [BUILD_DIR]      (default build-fuzz, as run.sh makes it)
# Needs BUILD_DIR/cli/crest and BUILD_DIR/tests/fuzz/fuzz_seed_dump, and
# python3. Leaves regression inputs (corpus/<target>/regress-*) alone.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$root/build-fuzz}" && pwd)
CREST=${CREST:-$build/cli/crest}
DUMP=$build/tests/fuzz/fuzz_seed_dump
for x in "$CREST" "$DUMP"; do
	[ -x "$x" ] || { echo "seeds.sh: $x is missing: build $build first (tests/fuzz/run.sh does)" >&2; exit 1; }
done
corpus=$here/corpus
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export ASAN_OPTIONS=detect_leaks=0

# Store a: a few small files, so that its pack is small enough to be one
# input: text (stored LZ4), random bytes (stored raw), an empty file, a
# symlink, in a directory; tagged.
mkdir -p "$work/a/tree"
cd "$work/a"
printf 'hello crest %.0s' $(seq 40) >tree/text
head -c 700 /dev/urandom >tree/random
: >tree/empty
ln -s text tree/link
"$CREST" --store st put --tag seed-a tree >/dev/null
mkdir dump
"$DUMP" st/index dump >/dev/null

# Store b: a 256 KiB file, partly a hole, in 4 KiB chunks with tiny pieces
# (as tests/store/pieces.sh makes them): a manifest that names pieces.
mkdir -p "$work/b"
cd "$work/b"
head -c 131072 /dev/urandom >big
truncate -s 262144 big
CREST_PIECE_MIN_EXTENTS=4 CREST_PIECE_SPAN=65536 \
	"$CREST" --store st put --chunker fixed --chunk-size 4K big >/dev/null
mkdir dump
"$DUMP" st/index dump >/dev/null

# Store c: a 256 KiB file put three times on one branch, in 4 KiB chunks
# with tiny pieces: before the second put one chunk is rewritten, before the
# third another is and a third punched to a hole, all in the first piece.
# So the later snapshots name deltas against the first's piece (manifests
# of version 3), the third's with every change since.
mkdir -p "$work/c"
cd "$work/c"
head -c 262144 /dev/urandom >big
cput() {
	CREST_PIECE_MIN_EXTENTS=4 CREST_PIECE_SPAN=65536 \
		"$CREST" --store st put --chunker fixed --chunk-size 4K big >/dev/null
}
cput
head -c 4096 /dev/urandom | dd of=big bs=4096 seek=2 conv=notrunc status=none
cput
head -c 4096 /dev/urandom | dd of=big bs=4096 seek=5 conv=notrunc status=none
fallocate -p -o 36864 -l 4096 big
cput
mkdir dump
"$DUMP" st/index dump >/dev/null

for t in fuzz_manifest fuzz_piece fuzz_loc fuzz_record fuzz_names fuzz_cli_parse; do
	mkdir -p "$corpus/$t"
	rm -f "$corpus/$t"/seed-*
done
python3 - "$work" "$corpus" <<'PY'
import glob, os, struct, sys
work, corpus = sys.argv[1], sys.argv[2]

def put(target, name, data):
    with open(os.path.join(corpus, target, "seed-" + name), "wb") as f:
        f.write(data)

def values(store, t):
    return sorted(glob.glob(os.path.join(work, store, "dump", t + "-*")))

def read(p):
    with open(p, "rb") as f:
        return f.read()

# Manifests and summaries of every store.
for s in "abc":
    for t in "mi":
        for p in values(s, t):
            put("fuzz_manifest", s + "-" + os.path.basename(p), read(p))

# Index values; and for the records, each value of store a with its pack.
pack = read(os.path.join(work, "a", "st", "packs", "00000001.pack"))
for s in "ab":
    for p in values(s, "c")[:6]:
        put("fuzz_loc", s + "-" + os.path.basename(p), read(p))
for p in values("a", "c"):
    put("fuzz_record", "a-" + os.path.basename(p), read(p) + pack)

# Pieces, in fuzz_piece's frame: u8 np-1, u64 size, u64 extents, then per
# piece u32 n, u64 bytes, u16 len, the encoding; full pieces need no base,
# so these frames end there (the target reads a missing u16 blen as 0).
def extents(enc):
    n = total = i = 0
    while i < len(enc):
        hole = enc[i] != 0
        total += struct.unpack_from("<Q", enc, i + 1)[0]
        i += 9 if hole else 41
        n += 1
    return n, total

pieces = [read(p) for p in values("b", "l")]
def frame(ps):
    ns = [extents(e) for e in ps]
    out = struct.pack("<BQQ", len(ps) - 1, sum(b for _, b in ns), sum(n for n, _ in ns))
    for e, (n, b) in zip(ps, ns):
        out += struct.pack("<IQH", n, b, len(e)) + e
    return out
for k, e in enumerate(pieces[:4]):
    put("fuzz_piece", "one-%d" % k, frame([e]))
if len(pieces) >= 2:
    put("fuzz_piece", "two", frame(pieces[:2]))
if len(pieces) >= 4:
    put("fuzz_piece", "four", frame(pieces[:4]))

# Deltas, in the same frame with their base after the pieces (u16 blen,
# the base's encoding). n and bytes come from the references of store c's
# manifests, which are parsed here; each manifest's pieces in its order.
import hashlib
def manifest_refs(m):
    at = [0]
    def take(n):
        v = m[at[0]:at[0] + n]
        at[0] += n
        return v
    def uint(n):
        return int.from_bytes(take(n), "little")
    def skip_str():
        take(uint(4))
    assert take(4) == b"CRMF"
    version = uint(2)
    uint(2); uint(8); skip_str()
    if uint(1):
        take(32)
    uint(8)
    for _ in range(uint(4)):
        skip_str(); skip_str()
    lists = []
    for _ in range(uint(4)):
        skip_str(); uint(1); uint(4); uint(8); uint(8); skip_str(); skip_str()
        ne = uint(8)
        np_ = uint(4) if version >= 2 else 0
        if np_ == 0:
            for _ in range(ne):   # inline extents: u8 hole, u64 len, sha
                hole = uint(1)
                uint(8)
                if not hole:
                    take(32)
            continue
        lists.append([(uint(8), uint(8), take(32)) for _ in range(np_)])
    return version, lists

cpieces = {hashlib.sha256(read(p)).digest(): read(p) for p in values("c", "l")}
def dframe(refs, base):
    out = struct.pack("<BQQ", len(refs) - 1, sum(b for _, b, _ in refs), sum(n for n, _, _ in refs))
    for n, b, sha in refs:
        e = cpieces[sha]
        out += struct.pack("<IQH", n, b, len(e)) + e
    return out + (struct.pack("<H", len(base)) + base if base is not None else b"")
k = 0
for p in values("c", "m"):
    version, lists = manifest_refs(read(p))
    for refs in lists:
        deltas = [cpieces[sha] for _, _, sha in refs if cpieces[sha][0] == 2]
        if not deltas:
            continue
        base = cpieces[deltas[0][1:33]]
        put("fuzz_piece", "delta-all-%d" % k, dframe(refs[:4], base))
        for r in refs:
            if cpieces[r[2]][0] == 2:
                put("fuzz_piece", "delta-%d" % k, dframe([r], base))
                put("fuzz_piece", "delta-nobase-%d" % k, dframe([r], None))
                break
        k += 1
assert k == 2, "store c should hold two snapshots with deltas, not %d" % k

# Names and CLI arguments, as users type them.
for k, n in enumerate([b"seed-a", b"v1.0/run@3+x_y-z", b"deadbeef", b"DEADBEEF0123",
                       b"0123456789abcdef" * 4, b"a" * 128, b"a" * 129, b"bad name", b""]):
    put("fuzz_names", str(k), n)
for k, a in enumerate([b"4096", b"64K", b"16M", b"2G", b"1T", b"4KiB", b"8MB", b"30s", b"250ms",
                       b"5m", b"1h", b"1.5", b"2.5e1s", b"18446744073709551615",
                       b"GPU-0d3a4e6c-1f2b-4c5d-8e9f-a0b1c2d3e4f5"]):
    put("fuzz_cli_parse", str(k), a)
PY
for t in "$corpus"/*; do
	printf '%-16s %3d seeds\n' "$(basename "$t")" "$(ls "$t" | grep -c '^seed-' || true)"
done
