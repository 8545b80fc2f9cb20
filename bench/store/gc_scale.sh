#!/bin/bash
# gc_scale.sh - issue 35 (item 6 and "what it must show"): casctl gc's time
# and peak memory against the store's size, up to the biggest store the
# machine's disk holds, each size a store of its own in one run.
#
#   bash bench/store/gc_scale.sh [GB ...]        (default: 2 8 32)
#
# Each store: VERSIONS (8) snapshots of a memory-like job, 4 KiB fixed
# chunks as the library and the transparent path store memory (crest put
# --chunker fixed --chunk-size 4K), each snapshot a file of GB/VERSIONS*2
# bytes of which half is the previous snapshot's second half and half new
# random bytes, so every chunk lives in two consecutive snapshots; the
# source file is made, put and removed one version at a time, so the disk
# holds the store and one version. Then, caches dropped, casctl gc
# --keep-last VERSIONS/2 under /usr/bin/time -v: its wall time, peak RSS,
# the chunks and stored bytes before and after, and casctl verify of the
# store after (not timed). About half the chunks die, in packs that also
# hold live ones (versions share packs' neighbours), so gc both deletes and
# rewrites.
# Prints a markdown table; WORK_PARENT (default /var/tmp) is where the
# stores go: a disk, not a tmpfs. Needs root for drop_caches (else the
# caches stay warm, and the line says so) and /usr/bin/time.
. "$(dirname "$0")/lib.sh"
SIZES=${*:-2 8 32}
VERSIONS=${VERSIONS:-8}
[ -x /usr/bin/time ] || { echo "bench: /usr/bin/time missing (apt-get install -y time)" >&2; exit 1; }
for g in $SIZES; do
	echo "$g" | grep -Eq '^[1-9][0-9]*$' || { echo "usage: gc_scale.sh [GB ...]: '$g' is not a whole number of GB" >&2; exit 2; }
done
machine
drop=yes
[ -w /proc/sys/vm/drop_caches ] || drop="no (not root): caches warm"
echo "- caches dropped before each gc: $drop; $VERSIONS versions a store, gc --keep-last $((VERSIONS / 2))"
echo
echo "| store | chunks | stored | ingest | gc wall | gc peak RSS | chunks after | stored after | s / M chunks | verify |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for g in $SIZES; do
	S=$WORK/store-$g
	half=$((g * 1000000000 / VERSIONS))   # a version adds this many new bytes
	half=$((half / 4096 * 4096))
	"$CREST" --quiet --store "$S" init >/dev/null
	t0=$(now)
	src=$WORK/v.bin
	"$STORE_TOOL" random "$WORK/new.bin" "$half" "$g"01
	for v in $(seq 1 "$VERSIONS"); do
		# This version: the last one's new half, then a fresh one.
		if [ "$v" -gt 1 ]; then mv "$WORK/new.bin" "$WORK/old.bin"; "$STORE_TOOL" random "$WORK/new.bin" "$half" "$g$v"; fi
		[ -e "$WORK/old.bin" ] || "$STORE_TOOL" random "$WORK/old.bin" "$half" "$g"00
		cat "$WORK/old.bin" "$WORK/new.bin" >"$src"
		"$CREST" --quiet --store "$S" put --chunker fixed --chunk-size 4K --tag "v$v" "$src" >/dev/null
		rm -f "$src"
	done
	rm -f "$WORK/old.bin" "$WORK/new.bin"
	t1=$(now)
	ingest=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f s", b - a }')
	st=$("$CASCTL" --store "$S" --json stats)
	c0=$(field chunks "$st")
	b0=$(du -sb "$S" | cut -f1)
	dropcache
	t0=$(now)
	/usr/bin/time -v -o "$WORK/gc.time" "$CASCTL" --quiet --store "$S" gc --keep-last $((VERSIONS / 2)) \
		>"$WORK/gc.out" 2>&1 || { echo "bench: gc of the $g GB store failed:" >&2; cat "$WORK/gc.out" >&2; exit 1; }
	t1=$(now)
	wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
	rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$WORK/gc.time")
	st=$("$CASCTL" --store "$S" --json stats)
	c1=$(field chunks "$st")
	b1=$(du -sb "$S" | cut -f1)
	if "$CASCTL" --quiet --store "$S" verify >"$WORK/verify.out" 2>&1; then ok=ok; else ok="FAILED"; fi
	awk -v g="$g" -v c0="$c0" -v b0="$b0" -v ing="$ingest" -v w="$wall" -v r="$rss" -v c1="$c1" -v b1="$b1" -v ok="$ok" \
		'BEGIN { printf "| %d GB | %.2f M | %.2f GB | %s | %.2f s | %.0f MiB | %.2f M | %.2f GB | %.2f | %s |\n",
			 g, c0 / 1e6, b0 / 1e9, ing, w, r / 1024, c1 / 1e6, b1 / 1e9, w / (c0 / 1e6), ok }'
	[ "$ok" = ok ] || { cat "$WORK/verify.out" >&2; exit 1; }
	rm -rf "$S"
done
