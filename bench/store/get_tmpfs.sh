#!/bin/sh
# get_tmpfs.sh [GIB [DIR]] - crest put and crest get of GIB GiB (8) of
# memory-like data with the store and the files in DIR (/dev/shm, a tmpfs:
# give another to compare mount options, such as huge=), beside the ceiling
# of the same run: cp of the same file between the same tmpfs folders.
# Issue 14's rows "crest put into tmpfs" and "crest get into tmpfs
# (>= 10 GB/s)". Every restored file is compared with its source.
# Runs from the repository root with binaries from .gpu/ or build/
# (bins.sh).
set -u
# Stores here are made on first use (crest init and its refusals: tests/store/init.sh).
export CREST_INIT=1
gib=${1:-8}
dir=${2:-/dev/shm}
. "$(dirname "$0")/bins.sh"
w=$dir/crest-get-bench
rm -rf "$w" && mkdir -p "$w/src" "$w/out" "$w/cp"
echo "get_tmpfs: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cpus, $gib GiB in $dir ($(findmnt -no FSTYPE,OPTIONS -T "$dir")), $(crest --version | head -1)"
store_tool memory "$w/src/mem" "${gib}G" 7 >/dev/null
bytes=$((gib * 1073741824))
t0=$(now); cp "$w/src/mem" "$w/cp/mem"; t1=$(now)
cpr=$(rate $bytes "$t0" "$t1")
rm -f "$w/cp/mem"
t0=$(now); crest --store "$w/st" --quiet put --tag v1 "$w/src/mem" >/dev/null; t1=$(now)
put1=$(rate $bytes "$t0" "$t1")
t0=$(now); crest --store "$w/st" --quiet put --tag v2 "$w/src/mem" >/dev/null; t1=$(now)
put2=$(rate $bytes "$t0" "$t1")
best=0
for rep in 1 2 3; do
	rm -rf "$w/out" && mkdir -p "$w/out"
	t0=$(now); crest --store "$w/st" --quiet get v1 "$w/out/r" || { echo "crest get failed"; exit 1; }; t1=$(now)
	r=$(rate $bytes "$t0" "$t1")
	cmp -s "$w/src/mem" "$w/out/r/mem" || { echo "restored bytes differ"; exit 1; }
	echo "get $rep: $r GB/s, bit-exact"
	best=$(awk -v a="$best" -v b="$r" 'BEGIN { print (b > a) ? b : a }')
	t0=$(now); cp "$w/src/mem" "$w/cp/mem"; t1=$(now)
	c=$(rate $bytes "$t0" "$t1"); rm -f "$w/cp/mem"
	echo "cp $rep: $c GB/s"
	cpr=$(awk -v a="$cpr" -v b="$c" 'BEGIN { print (b > a) ? b : a }')
done
echo "RESULT put_new_GBps=$put1 put_unchanged_GBps=$put2 get_best_GBps=$best cp_best_GBps=$cpr get_over_cp=$(awk -v a="$best" -v b="$cpr" 'BEGIN { printf "%.2f", a / b }')"
rm -rf "$w"
