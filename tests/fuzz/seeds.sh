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

# Manifests and summaries of both stores.
for s in "ab":
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
# piece u32 n, u64 bytes, u16 len, the encoding.
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
