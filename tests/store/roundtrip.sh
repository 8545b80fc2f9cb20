#!/bin/bash
# Issue 2, item 1: put then get is bit-exact for an empty file, a 1-byte
# file, a sparse file with holes, 1 GiB of random data, and a tree with nested
# directories, symlinks and modes.
. "$(dirname "$0")/lib.sh"

src=$T/src
mkdir -p "$src"

note "empty and 1-byte files"
: >"$src/empty"
printf 'x' >"$src/one"
put "$src/empty"
[ "$(field logical_bytes)" -eq 0 ] || fail "empty file: logical_bytes $(field logical_bytes)"
id_empty=$(field snapshot)
put "$src/one"
id_one=$(field snapshot)
crest get "$id_empty" "$T/out-empty"
crest get "$id_one" "$T/out-one"
[ -f "$T/out-empty/empty" ] && [ ! -s "$T/out-empty/empty" ] || fail "empty file not restored empty"
cmp "$src/one" "$T/out-one/one" || fail "1-byte file differs"

note "sparse file"
# 64 MiB apparent size, three 1 MiB data islands (one at the very end), the
# rest holes. crest must keep the holes as holes, not write zeros.
sp=$src/sparse
truncate -s 64M "$sp"
"$STORE_TOOL" random "$T/island" 1M 11
dd if="$T/island" of="$sp" bs=1M seek=0 conv=notrunc status=none
dd if="$T/island" of="$sp" bs=1M seek=20 conv=notrunc status=none
dd if="$T/island" of="$sp" bs=1M seek=63 conv=notrunc status=none
put "$sp"
[ "$(field zero_bytes)" -ge $((60 << 20)) ] || fail "sparse: only $(field zero_bytes) bytes seen as holes"
crest get "$(field snapshot)" "$T/out-sparse"
cmp "$sp" "$T/out-sparse/sparse" || fail "sparse file differs"
alloc_src=$(du -B1 "$sp" | cut -f1)
alloc_out=$(du -B1 "$T/out-sparse/sparse" | cut -f1)
echo "   allocated: source $alloc_src, restored $alloc_out of $((64 << 20)) bytes"
# The restored file may round its islands to chunk edges; it must not be
# filled in: well under half its size allocated.
[ "$alloc_out" -le $((alloc_src + (1 << 20))) ] || fail "restored sparse file lost its holes ($alloc_out bytes allocated)"

note "random data"
big=$(scaled $((1 << 30)))
"$STORE_TOOL" random "$src/random" "$big" 12
put "$src/random"
[ "$(field logical_bytes)" -eq "$big" ] || fail "random: logical_bytes $(field logical_bytes) != $big"
id_rand=$(field snapshot)
crest get "$id_rand" "$T/out-random"
cmp "$src/random" "$T/out-random/random" || fail "random data differs after get"
rm -rf "$T/out-random"

note "tree with nested directories, symlinks and modes"
tree=$T/tree
mkdir -p "$tree/a/b/c" "$tree/d" "$tree/ro"
"$STORE_TOOL" random "$tree/a/b/c/deep.bin" 300K 13
"$STORE_TOOL" memory "$tree/a/mem.bin" 2M 14
printf 'hello\n' >"$tree/a/b/hello.txt"
: >"$tree/d/empty"
printf '#!/bin/sh\necho hi\n' >"$tree/d/run.sh"
chmod 0755 "$tree/d/run.sh"
chmod 0600 "$tree/a/b/hello.txt"
chmod 0444 "$tree/a/mem.bin"
chmod 2750 "$tree/d"
ln -s b/hello.txt "$tree/a/rel-link"
ln -s /etc/hostname "$tree/abs-link"
ln -s does/not/exist "$tree/d/dangling"
ln -s ../a "$tree/d/dir-link"
touch -h -d '2001-02-03 04:05:06' "$tree/a/rel-link"
touch -d '1999-12-31 23:59:59' "$tree/a/b/c/deep.bin"
printf 'r\n' >"$tree/ro/file"
chmod 0500 "$tree/ro"
touch -d '2010-01-01 00:00:00' "$tree/ro" "$tree/a/b/c" "$tree/a/b" "$tree/a" "$tree/d"
put --tag tree "$tree"
crest get tree "$T/out-tree"
same_tree "$tree" "$T/out-tree/tree"

note "everything again from one listing: every snapshot verifies"
[ "$("$CREST" ls --json | grep -c '"snapshot"')" -eq 5 ] || fail "expected 5 snapshots"
verify_store

note "a writer leaves no write-ahead log for the next open to replay"
# Readers (get, ls, restore) replay whatever log a writer left, each time:
# half a second per 2 GiB of 4 KiB chunks. A writer flushes at close when
# its memtable holds 8 MiB or more; here (CREST_CLOSE_FLUSH_MIN) any.
CREST_CLOSE_FLUSH_MIN=1 "$CREST" --quiet put --tag again "$tree" >/dev/null || fail "put with a flush at close"
logs=$(find "$S/index" -name '*.log' -size +0 | head -3)
[ -z "$logs" ] || fail "the index's write-ahead log is not empty after the writer closed: $logs"
echo "PASS"
