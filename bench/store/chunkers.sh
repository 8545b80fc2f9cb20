#!/bin/bash
# Fixed against content-defined chunking at 4, 8, 16 and 64 KiB, on the two
# kinds of change crest sees:
#  - in place: a 1 GiB memory-like image, then 1% of its 4 KiB pages
#    rewritten (what a process's memory does between checkpoints);
#  - shifts: a 256 MiB file, then 100 runs of 1-64 bytes inserted at random
#    places (what an edited file does).
# Each configuration gets a fresh store: the first put's rate (all data new),
# then the changed data's new bytes and rate. Prints a markdown table, and
# draws new bytes and put rates into PLOTS/NAME.png (default
# bench/plots/chunkers.png; NAME from PLOT_NAME) with the figures drawn in
# NAME.dat beside it (bench/store/chunkers.gp draws that file).
# Usage: bench/store/chunkers.sh [MEM_SIZE FILE_SIZE]   (defaults 1G 256M)
. "$(dirname "$0")/lib.sh"
MEM=${1:-1G}
FILE=${2:-256M}
NAME=${PLOT_NAME:-chunkers}
STAMP=$(stamp)

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
# Each row also goes to rows.dat, one block per kind of data for the picture:
# data chunker size chunks first_MB/s new_% second_MB/s.
: >"$WORK/rows.dat"
for data in memory file; do
	for kind in fixed cdc; do
		for size in 4K 8K 16K 64K; do
			if [ $data = memory ]; then
				r=$(one "$WORK/mem0" "$WORK/mem1" $kind $size)
				echo "| memory $MEM, 1% pages rewritten | $kind | $size | $r |"
			else
				r=$(one "$WORK/file0" "$WORK/file1" $kind $size)
				echo "| file $FILE, 100 insertions | $kind | $size | $r |"
			fi
			echo "$data $kind $size $r" | tr -d '|%' | tr -s ' ' >>"$WORK/rows.dat"
		done
	done
	printf '\n\n' >>"$WORK/rows.dat"
done

# The picture, from the rows above; NAME.dat keeps them.
have_gnuplot || exit 0
mkdir -p "$PLOTS"
{
	echo "# $STAMP"
	echo "# bench/store/chunkers.sh $MEM $FILE: data chunker size chunks first_put_MB/s new_bytes_% second_put_MB/s"
	echo "# (index 0: memory $MEM, 1% of its 4 KiB pages rewritten; index 1: file $FILE, 100 insertions)"
	cat "$WORK/rows.dat"
} >"$PLOTS/$NAME.dat"
gnuplot -e "dat='$PLOTS/$NAME.dat'; out='$PLOTS/$NAME.png'; mem='$MEM'; file='$FILE'" "$(dirname "$0")/chunkers.gp"
echo
echo "Picture: $PLOTS/$NAME.png (drawn from $NAME.dat beside it)."
