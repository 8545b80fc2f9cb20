#!/bin/sh
# put_disk.sh [GIB [DIR]] - crest put of GIB GiB (8) of new, memory-like data
# from a tmpfs into a store on the disk under DIR (/var/tmp), beside the
# disk's own write rate in the same run: dd of the same source file to a
# file in DIR, synced (conv=fsync), as crest syncs what it commits. Issue
# 14's row "crest put onto disk: >= 0.9 x the disk's write rate in stored
# bytes". Three rounds, dd and put alternating, each into a fresh file or
# store; the ratio is crest's stored bytes per second over dd's bytes per
# second, medians of the three. Every store is checked with casctl verify.
# Runs from the repository root with binaries from .gpu/ or build/
# (bins.sh).
set -u
# Stores here are made on first use (crest init and its refusals: tests/store/init.sh).
export CREST_INIT=1
gib=${1:-8}
dir=${2:-/var/tmp}
. "$(dirname "$0")/bins.sh"
src=$(mktemp -d /dev/shm/crest-put-disk.XXXXXX)
w=$dir/crest-put-disk
rm -rf "$w" && mkdir -p "$w"
trap 'rm -rf "$src" "$w"' EXIT
echo "put_disk: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cpus, $gib GiB from /dev/shm to $dir ($(findmnt -no SOURCE,FSTYPE -T "$dir")), $(crest --version | head -1)"
store_tool memory "$src/mem" "${gib}G" 11 >/dev/null
bytes=$((gib * 1073741824))
med() { sort -n | sed -n 2p; }
: >"$w/dd.txt"; : >"$w/put.txt"
for r in 1 2 3; do
	sync
	t0=$(now); dd if="$src/mem" of="$w/dd.out" bs=8M conv=fsync status=none; t1=$(now)
	rm -f "$w/dd.out"; sync
	d=$(awk -v b=$bytes -v t0="$t0" -v t1="$t1" 'BEGIN { printf "%.3f", b / (t1 - t0) / 1e9 }')
	echo "$d" >>"$w/dd.txt"
	rm -rf "$w/st"
	t0=$(now); crest --store "$w/st" --quiet put "$src/mem" >/dev/null || { echo "crest put failed"; exit 1; }; t1=$(now)
	stored=$(casctl --store "$w/st" --json stats | sed -n 's/.*"stored_bytes": \([0-9]*\).*/\1/p')
	casctl --store "$w/st" verify >/dev/null 2>&1 || { echo "casctl verify failed"; exit 1; }
	p=$(awk -v b="$stored" -v t0="$t0" -v t1="$t1" 'BEGIN { printf "%.3f", b / (t1 - t0) / 1e9 }')
	echo "$p" >>"$w/put.txt"
	echo "round $r: dd $d GB/s; crest put $(awk -v t0="$t0" -v t1="$t1" 'BEGIN { printf "%.2f", t1 - t0 }') s, $stored stored bytes, $p GB/s stored"
	rm -rf "$w/st"
done
dd_m=$(med <"$w/dd.txt"); put_m=$(med <"$w/put.txt")
echo "RESULT dd_GBps=$dd_m put_stored_GBps=$put_m ratio=$(awk -v a="$put_m" -v b="$dd_m" 'BEGIN { printf "%.2f", a / b }')"
