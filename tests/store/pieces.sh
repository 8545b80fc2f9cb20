#!/bin/bash
# Issue 9, item 1: a snapshot whose extent list shares a piece with an
# earlier snapshot must store every piece it names that the store lacks.
# Pieces are made tiny (CREST_PIECE_*), so a 1 MiB file in 4 KiB chunks has
# 16 pieces; each round edits pages at random places (the seed is printed),
# puts the file again, and requires every snapshot so far to come back
# bit-exact and verify. Before the fix, the piece loop stopped at the first
# piece already stored and the second snapshot lost the pieces after it.
. "$(dirname "$0")/lib.sh"

export CREST_PIECE_MIN_EXTENTS=4 CREST_PIECE_SPAN=65536
seed=${CREST_TEST_SEED:-$RANDOM}
echo "seed $seed (CREST_TEST_SEED=$seed replays it)"
mkdir -p "$T/data" "$T/keep"
f=$T/data/state.bin
"$STORE_TOOL" random "$f" 1M "$seed"
ids=()
for round in 0 1 2 3 4 5; do
	if [ "$round" -gt 0 ]; then
		"$STORE_TOOL" scatter "$f" 0.03 $((seed + round))
	fi
	cp "$f" "$T/keep/$round"
	put --chunker fixed --chunk-size 4K "$f"
	ids+=("$(field snapshot)")
done
pieces=$("$CASCTL" --json stats | sed -n 's/.*"pieces": \([0-9]*\).*/\1/p')
[ "$pieces" -gt 16 ] || fail "expected more than 16 extent-list pieces, got $pieces"
for round in "${!ids[@]}"; do
	rm -rf "$T/out"
	crest get "${ids[$round]}" "$T/out" || fail "get of snapshot $round (${ids[$round]}) failed"
	cmp "$T/keep/$round" "$T/out/state.bin" || fail "snapshot $round came back different"
done
verify_store "after $((${#ids[@]})) snapshots"
echo "ok: ${#ids[@]} snapshots, $pieces pieces, all bit-exact"
