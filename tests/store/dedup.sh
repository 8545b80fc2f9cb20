#!/bin/bash
# Issue 2, item 2:
#  - the same data again adds under 1% new bytes (default chunking);
#  - 1% of a 1 GiB file changed in place by scattered 4 KiB writes adds
#    under 3%, with fixed 4 KiB chunks: crest's default for memory, the data
#    that changes this way. Files default to content-defined chunks, and no
#    CDC size meets 3% here (4 KiB: 3.5%, 8 KiB: 5.1%): a changed page
#    dirties the whole variable-size chunk around it and often its
#    neighbour. bench/RESULTS.md has the measurement;
#  - one byte inserted at the start of a 256 MiB file adds under 5% with
#    content-defined chunking.
# new_bytes (crest put --json) counts chunk bytes the store did not have.
# The same data again also adds no extent-list piece (casctl stats).
. "$(dirname "$0")/lib.sh"

# pct NEW TOTAL: NEW as a percentage of TOTAL, two decimals.
pct() { awk -v n="$1" -v t="$2" 'BEGIN { printf "%.2f", 100 * n / t }'; }
# below NEW TOTAL LIMIT_PCT WHAT
below() {
	local p
	p=$(pct "$1" "$2")
	echo "   $4: $1 new of $2 bytes = $p% (limit $3%)"
	awk -v p="$p" -v l="$3" 'BEGIN { exit !(p < l) }' || fail "$4: $p% new, limit $3%"
}

mkdir -p "$T/a" "$T/b"
big=$(scaled $((1 << 30)))
f=$T/a/state.bin
"$STORE_TOOL" random "$f" "$big" 21
put --chunker fixed --chunk-size 4K "$f"
[ "$(field new_bytes)" -eq "$big" ] || fail "first put of fresh data: new_bytes $(field new_bytes) != $big"

# stat NAME: a number from casctl --json stats.
stat() { "$CASCTL" --json stats | sed -n "s/.*\"$1\": \([0-9]*\).*/\1/p"; }
pieces=$(stat pieces)
[ "$pieces" -gt 0 ] || fail "a $big-byte file's extent list was not stored in pieces"

note "same data again"
put --chunker fixed --chunk-size 4K "$f"
below "$(field new_bytes)" "$big" 1 "same data, fixed 4 KiB"
# Its extent list too: the pieces are the same ones, stored once.
[ "$(stat pieces)" -eq "$pieces" ] || fail "the same data again stored $(( $(stat pieces) - pieces )) new pieces"
echo "   extent-list pieces: $pieces, none new"
put "$f"   # other chunk edges: new to the store
put "$f"
below "$(field new_bytes)" "$big" 1 "same data, default chunking"

note "1% changed in place by scattered 4 KiB writes"
n=$("$STORE_TOOL" scatter "$f" 0.01 22)
echo "   $n pages of 4 KiB rewritten"
put --chunker fixed --chunk-size 4K "$f"
below "$(field new_bytes)" "$big" 3 "1% in place"
crest get "$(field snapshot)" "$T/out-inplace"
cmp "$f" "$T/out-inplace/state.bin" || fail "in-place edited file differs after get"
rm -rf "$T/out-inplace"

note "one byte inserted at the start, content-defined chunking"
mid=$(scaled $((256 << 20)))
g=$T/b/shifted.bin
head -c "$mid" "$f" >"$g"
put --chunker cdc "$g"
{ printf 'X'; cat "$g"; } >"$g.new"
mv "$g.new" "$g"
put --chunker cdc "$g"
below "$(field new_bytes)" "$mid" 5 "1 byte inserted"
crest get "$(field snapshot)" "$T/out-shift"
cmp "$g" "$T/out-shift/shifted.bin" || fail "shifted file differs after get"

note "the same chunks in many segments at once (workers wait for each other's new chunks)"
r=$T/b/repeated.bin
"$STORE_TOOL" random "$T/b/blocks" $((8 << 20)) 23
for i in $(seq 16); do cat "$T/b/blocks"; done >"$r"
rm "$T/b/blocks"
PUT_OUT=$("$CREST" --workers 8 --json put --chunker fixed --chunk-size 4K "$r") || fail "crest put of the repeated file failed"
new=$(field new_bytes)
[ "$new" -eq $((8 << 20)) ] || fail "128 MiB made of one 8 MiB block 16 times: $new new bytes, not $((8 << 20))"
crest get "$(field snapshot)" "$T/out-rep"
cmp "$r" "$T/out-rep/repeated.bin" || fail "repeated file differs after get"
rm -rf "$T/out-rep" "$r"

verify_store
echo "PASS"
