#!/bin/bash
# Fixed against content-defined chunking at 4, 8, 16 and 64 KiB, on the two
# kinds of change crest sees:
#  - in place: a 1 GiB memory-like image, then 1% of its 4 KiB pages
#    rewritten (what a process's memory does between checkpoints);
#  - shifts: a 256 MiB file, then 100 runs of 1-64 bytes inserted at random
#    places (what an edited file does).
# Each configuration gets a fresh store: the first put's rate (all data new),
# then the changed data's new bytes and rate. Prints a markdown table.
# Usage: bench/store/chunkers.sh [MEM_SIZE FILE_SIZE]   (defaults 1G 256M)
. "$(dirname "$0")/lib.sh"
MEM=${1:-1G}
FILE=${2:-256M}

"$STORE_TOOL" memory "$WORK/mem0" "$MEM" 1
cp "$WORK/mem0" "$WORK/mem1"
"$STORE_TOOL" scatter "$WORK/mem1" 0.01 2 >/dev/null
"$STORE_TOOL" random "$WORK/file0" "$FILE" 3
"$STORE_TOOL" insert "$WORK/file0" "$WORK/file1" 100 4

# one DATA0 DATA1 KIND SIZE: prints "chunks rate0 new% rate1"
one() {
	local s=$WORK/store out0 out1 d=$WORK/d
	rm -rf "$s" "$d"
	mkdir -p "$d"
	cp --reflink=auto "$1" "$d/data"
	sync
	out0=$("$CREST" --store "$s" --json put --chunker "$3" --chunk-size "$4" "$d/data")
	cp --reflink=auto "$2" "$d/data"
	sync
	out1=$("$CREST" --store "$s" --json put --chunker "$3" --chunk-size "$4" "$d/data")
	awk -v c="$(field chunks "$out0")" -v l0="$(field logical_bytes "$out0")" -v s0="$(field seconds "$out0")" \
	    -v n1="$(field new_bytes "$out1")" -v l1="$(field logical_bytes "$out1")" -v s1="$(field seconds "$out1")" \
	    'BEGIN { printf "%d | %.0f | %.2f%% | %.0f", c, l0 / s0 / 1e6, 100 * n1 / l1, l1 / s1 / 1e6 }'
}

echo "| data, change | chunker | size | chunks | first put MB/s | new bytes after change | second put MB/s |"
echo "|---|---|---|---|---|---|---|"
for kind in fixed cdc; do
	for size in 4K 8K 16K 64K; do
		echo "| memory $MEM, 1% pages rewritten | $kind | $size | $(one "$WORK/mem0" "$WORK/mem1" $kind $size) |"
	done
done
for kind in fixed cdc; do
	for size in 4K 8K 16K 64K; do
		echo "| file $FILE, 100 insertions | $kind | $size | $(one "$WORK/file0" "$WORK/file1" $kind $size) |"
	done
done
