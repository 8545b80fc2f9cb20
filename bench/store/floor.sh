#!/bin/bash
# floor.sh [GIB [DIR]] - crest put and crest get of GIB GiB (8) of
# memory-like data, the store and the restored file in DIR (/dev/shm), in
# one run beside two floors measured on the same machine:
#   - work_floor: the least CPU work put and get do on the same bytes
#     (chunking, SHA-256, LZ4, CRC32C, copies), stage by stage, on every
#     core, nothing else counted (see work_floor.c);
#   - tmpfs_fill: the fastest of its ways to fill one new file in DIR from
#     every core (what a get's output costs the kernel with nothing else to
#     do). Not a proven floor: the fastest way found; a get faster than it
#     shows as crest / floor > 1.
# Prints a markdown table of crest's rate, the floor's, crest / floor,
# issue 14's target and target / floor. A put target above its work floor
# (target / floor > 1) cannot be met on this machine by any program that
# does the same work; the get row's floor is the lower of its work floor and
# the fill rate, and the fill rate is only the fastest way found.
# Targets (issue 14): put of new and of unchanged data >= 0.8 x the SHA-256
# rate of all cores (work_floor's verify stage: SHA-256 of every chunk);
# get into tmpfs >= 10 GB/s. crest's figures are get_tmpfs.sh's (every
# restored file compared with cmp), on the same bytes.
# Runs from the repository root with binaries from .gpu/ (a bundle with
# work_floor and tmpfs_fill) or build/.
set -euo pipefail
# Stores here are made on first use (crest init and its refusals: tests/store/init.sh).
export CREST_INIT=1
gib=${1:-8}
dir=${2:-/dev/shm}
. "$(dirname "$0")/bins.sh"
if [ -x .gpu/run ] && [ -x .gpu/bin/work_floor ]; then
	work_floor() { .gpu/run work_floor "$@"; }
	tmpfs_fill() { .gpu/run tmpfs_fill "$@"; }
else
	work_floor() { build/bench/store/work_floor "$@"; }
	tmpfs_fill() { build/bench/store/tmpfs_fill "$@"; }
fi
w=$dir/crest-floor-bench
rm -rf "$w" && mkdir -p "$w/src" "$w/out"
trap 'rm -rf "$w"' EXIT
cores=$(nproc)
bytes=$((gib * 1073741824))
echo "floor: $(date -u '+%Y-%m-%d %H:%M UTC'), $cores cpus ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')), $gib GiB in $dir ($(findmnt -no FSTYPE,OPTIONS -T "$dir")), $(crest --version | head -1)"
store_tool memory "$w/src/mem" "${gib}G" 7 >/dev/null
cat "$w/src/mem" >/dev/null

# RESULT fields: get NAME LINE
get() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }
# Each tool's own lines go to stderr whole (not through tee /dev/stderr,
# which reopens a redirected stderr and writes over what is there).
floor1=$(work_floor "$w/src/mem" 1)
echo "$floor1" >&2
floor1=$(grep '^RESULT' <<<"$floor1")
floorn=$(work_floor "$w/src/mem" "$cores")
echo "$floorn" >&2
floorn=$(grep '^RESULT' <<<"$floorn")
fill=$(tmpfs_fill "$dir" $((gib * 1024)) "$cores")
echo "$fill" >&2
fill=$(awk '!/^#/ && $3 + 0 > best { best = $3 + 0; m = $1 } END { if (m != "") print best, m }' <<<"$fill")
[ -n "$fill" ] || { echo "floor: tmpfs_fill gave no rate" >&2; exit 1; }
fillm=${fill#* }
fill=${fill% *}

# crest itself: get_tmpfs.sh's put, put again and best of three gets (each
# compared with cmp), on the same bytes (store_tool memory, seed 7).
gt=$(sh "$(dirname "$0")/get_tmpfs.sh" "$gib" "$dir") || { echo "$gt" >&2; echo "floor: get_tmpfs.sh failed" >&2; exit 1; }
echo "$gt" >&2
gt=$(grep '^RESULT' <<<"$gt")
put1=$(get put_new_GBps "$gt")
put2=$(get put_unchanged_GBps "$gt")
best=$(get get_best_GBps "$gt")

sha=$(get sha_GBps "$floorn")
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
target=$(awk -v s="$sha" 'BEGIN { printf "%.2f", 0.8 * s }')
fpn=$(get put_new_floor_GBps "$floorn")
fpu=$(get put_unchanged_floor_GBps "$floorn")
fpc=$(get put_cuts_floor_GBps "$floorn")
fg=$(get get_floor_GBps "$floorn")
gbound=$(awk -v a="$fg" -v b="$fill" 'BEGIN { print (a < b) ? a : b }')
echo
echo "$gib GiB of memory-like data in $dir, $cores cores; one core: SHA-256 $(get sha_GBps "$floor1") GB/s," \
	"put floor $(get put_new_floor_GBps "$floor1") (new) / $(get put_unchanged_floor_GBps "$floor1") (unchanged)," \
	"get floor $(get get_floor_GBps "$floor1") GB/s"
echo
echo "| path | crest GB/s | floor GB/s, same run | crest / floor | issue 14's target GB/s | target / floor |"
echo "|---|---|---|---|---|---|"
echo "| put, new data | $put1 | $fpn (work) | $(ratio "$put1" "$fpn") | $target (0.8 x SHA-256 $sha) | $(ratio "$target" "$fpn") |"
echo "| put, unchanged | $put2 | $fpu (work); $fpc without the scan | $(ratio "$put2" "$fpu"); $(ratio "$put2" "$fpc") | $target | $(ratio "$target" "$fpu"); $(ratio "$target" "$fpc") |"
echo "| get, best of 3 | $best | $gbound (work $fg, one file's fill $fill, $fillm) | $(ratio "$best" "$gbound") | 10 | $(ratio 10 "$gbound") |"
echo "RESULT cores=$cores sha_GBps=$sha put_new_GBps=$put1 put_new_floor_GBps=$fpn put_unchanged_GBps=$put2" \
	"put_unchanged_floor_GBps=$fpu put_cuts_floor_GBps=$fpc get_GBps=$best get_floor_GBps=$fg fill_GBps=$fill"
