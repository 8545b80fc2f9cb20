#!/bin/sh
# writer_tmpfs.sh [GIB [DIR]] - what bounds an ingest into a store on tmpfs:
# crest put of GIB GiB (8) of new memory-like data into a store in DIR
# (/dev/shm) with CREST_TRACE, once for each lane count in LANES ("1 2 4
# 8": CREST_PACK_LANES, packs written at once by as many writer threads),
# whose engine line says how long the writers were busy for how many bytes;
# beside it, in the same run, what tmpfs takes from one writing thread
# against several: the same bytes written to one file by one dd, and split
# over 4 and 8 files by as many dds at once. If crest's writers are busy for
# about the whole of the chunks' time at about one dd's rate each, they
# bound the ingest; more lanes can then go as far as the 4- or 8-file rate.
# Runs from the repository root with binaries from .gpu/ or build/
# (bins.sh).
set -u
# Stores here are made on first use (crest init and its refusals: tests/store/init.sh).
export CREST_INIT=1
gib=${1:-8}
dir=${2:-/dev/shm}
. "$(dirname "$0")/bins.sh"
w=$dir/crest-writer-bench
rm -rf "$w" && mkdir -p "$w/src" "$w/dd"
echo "writer_tmpfs: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cpus, $gib GiB in $dir ($(findmnt -no FSTYPE,OPTIONS -T "$dir")), $(crest --version | head -1)"
store_tool memory "$w/src/mem" "${gib}G" 7 >/dev/null
bytes=$((gib * 1073741824))
# ddn N: the source's bytes written to N files by N dds at once, each its
# own share (bs 4 MiB).
ddn() {
	n=$1 blocks=$((bytes / 4194304)) i=0
	per=$((blocks / n))
	rm -rf "$w/dd" && mkdir -p "$w/dd"
	t0=$(now)
	while [ $i -lt "$n" ]; do
		dd if="$w/src/mem" of="$w/dd/f$i" bs=4M skip=$((i * per)) count=$per status=none &
		i=$((i + 1))
	done
	wait
	t1=$(now)
	rate $((per * n * 4194304)) "$t0" "$t1"
}
ddn 1 >/dev/null   # warm-up: the first pass over fresh tmpfs pages is slower here
d1=$(ddn 1); d4=$(ddn 4); d8=$(ddn 8)
rm -rf "$w/dd"
echo "tmpfs write: 1 file by 1 dd $d1 GB/s; 4 files by 4 dds $d4 GB/s; 8 files by 8 dds $d8 GB/s"
for lanes in ${LANES:-1 2 4 8}; do
	rm -rf "$w/st"
	t0=$(now)
	CREST_PACK_LANES=$lanes CREST_TRACE=1 crest --store "$w/st" --quiet put "$w/src/mem" >/dev/null 2>"$w/trace" ||
		{ echo "crest put failed"; cat "$w/trace"; exit 1; }
	t1=$(now)
	put=$(rate $bytes "$t0" "$t1")
	grep -E "crest trace: (engine|cas_commit)" "$w/trace"
	# "N writers busy X s summed for Y MB (Z GB/s each)"
	busy=$(sed -n 's/.* busy \([0-9.]*\) s summed.*/\1/p' "$w/trace" | head -1)
	chunks=$(sed -n 's/.*chunks done \([0-9.]*\) s.*/\1/p' "$w/trace" | head -1)
	wrate=$(sed -n 's/.*MB (\([0-9.]*\) GB\/s each).*/\1/p' "$w/trace" | head -1)
	echo "RESULT lanes=$lanes put_new_GBps=$put chunks_s=$chunks writers_busy_s=$busy writer_GBps_each=$wrate" \
		"dd1_GBps=$d1 dd4_GBps=$d4 dd8_GBps=$d8" \
		"busy_over_lanes_x_chunks=$(awk -v a="$busy" -v b="$chunks" -v l="$lanes" 'BEGIN { printf "%.2f", a / (l * b) }')"
done
rm -rf "$w"
