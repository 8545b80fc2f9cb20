#!/bin/bash
# rados_design.sh [BUILD] - the shared store's design choices on RADOS
# (issue 35, items 2 and 6), measured in one run: 1, 2, 4, 8 and 16 writer
# processes putting content-addressed units (4 MiB, then 64 KiB) by
# exclusive create, half of each writer's units shared by all (replicas);
# then each index design (one shared omap object under compare-and-set,
# per-writer objects merged on read, 64 shards under compare-and-set; the
# shared and sharded ones guarded by a version xattr, then by the keys'
# absence) under the same writer counts, half of each writer's entries the
# same in every writer. Beside them, in the same run and on the same
# cluster, `rados bench` writes of the same sizes with 16 in flight: the
# data rows give their put rate as a ratio of it.
#
# BUILD (build) is the build directory holding bench/store/rados_design.
# The cluster: the one CEPH_CONF names (pool $CREST_CEPH_POOL, default
# crest, which must exist), else a one-node cluster of its own
# (scripts/ceph-cluster.sh, a 40 GiB sparse OSD) in a new directory under
# ${TMPDIR:-/var/tmp}, stopped and removed at the end; only then is the
# OSD's CPU time known (its PID). Sizes, per writer (environment):
# RD_UNITS (64) units of 4 MiB, RD_SMALL_UNITS (400) of 64 KiB, RD_ENTRIES
# (20000) index entries in batches of RD_BATCH (1000), RD_LOOKUPS (10000),
# RD_WRITERS ("1 2 4 8 16"), RD_BENCH_S (5) seconds of rados bench a size.
# On the 2-core development VM the whole run takes about 2 minutes
# (110 s of measurement, plus the cluster's start and stop).
#
# Prints the markdown tables, then every JSON line. Exit: 0 done, 1 a step
# failed (its message), 2 bad usage.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$here/../..
if [ $# -gt 1 ]; then
	echo "usage: bench/store/rados_design.sh [BUILD]" >&2
	exit 2
fi
build=${1:-$root/build}
bin=$build/bench/store/rados_design
units=${RD_UNITS:-64}
small=${RD_SMALL_UNITS:-400}
entries=${RD_ENTRIES:-20000}
batch=${RD_BATCH:-1000}
lookups=${RD_LOOKUPS:-10000}
writers=${RD_WRITERS:-1 2 4 8 16}
bench_s=${RD_BENCH_S:-5}
for v in "$units" "$small" "$entries" "$batch" "$lookups" "$bench_s" $writers; do
	[[ $v =~ ^[1-9][0-9]*$ ]] || {
		echo "rados_design.sh: RD_* settings are whole numbers, not '$v'" >&2
		exit 2
	}
done
[ -x "$bin" ] || {
	echo "rados_design.sh: $bin is missing: build it (librados-dev installed, make rados_design)" >&2
	exit 1
}
source "$here/ceph_setup.sh"
ceph_setup rados_design.sh
osd_args=()
[ -z "$own" ] || osd_args=(--osd-pid "$(<"$own/run/osd.0.pid")")
export CREST_CEPH_POOL=$pool
t_start=$SECONDS

# rados bench write of one size, 16 in flight: its MB/s.
bench() {  # bench SIZE
	local run=crest-design-bench-$1-$$ log=$work/bench-$1
	timeout $((bench_s * 6 + 120)) rados bench -p "$pool" "$bench_s" write -b "$1" -t 16 --no-cleanup \
		--run-name "$run" >"$log" 2>&1 || {
		echo "rados_design.sh: rados bench write -b $1 failed:" >&2
		tail -n 20 "$log" >&2
		exit 1
	}
	timeout 600 rados -p "$pool" cleanup --run-name "$run" >>"$log" 2>&1 || {
		echo "rados_design.sh: removing rados bench's $1 objects failed" >&2
		exit 1
	}
	awk '/^Bandwidth \(MB\/sec\):/ { bw = $3 } END { if (bw == "") exit 1; printf "%.1f\n", bw }' "$log" || {
		echo "rados_design.sh: no summary in rados bench's output:" >&2
		tail -n 20 "$log" >&2
		exit 1
	}
}

# One run of the tool: its table's row kept in ROWS_<kind>, the header
# once, the JSON line in JSON.
declare -A header
rows_data=() rows_index=() json=()
one() {  # one KIND [RATIO-BASE] -- ARGS...
	local kind=$1 base=$2 out
	shift 3
	out=$("$bin" "$@" "${osd_args[@]}") || {
		echo "rados_design.sh: rados_design $* failed" >&2
		exit 1
	}
	header[$kind]=$(sed -n 1,2p <<<"$out")
	local row
	row=$(sed -n 3p <<<"$out")
	json+=("$(sed -n 4p <<<"$out")")
	if [ "$kind" = data ]; then
		# put MB/s is the 7th column: its ratio to rados bench's
		row=$(awk -F' \\| ' -v b="$base" '{ printf "%s | %.2f |\n", substr($0, 1, length($0) - 2), $7 / b }' <<<"$row")
		rows_data+=("$row")
	else
		rows_index+=("$row")
	fi
}

bench4m=$(bench 4M)
bench64k=$(bench 64K)
for n in $writers; do
	one data "$bench4m" -- data -n "$n" -u 4M -c "$units"
done
for n in $writers; do
	one data "$bench64k" -- data -n "$n" -u 64K -c "$small"
done
# DESIGN:OPTIONS, the options last (they win over the defaults): the
# sharded one also with disjoint ids (no dedup race: what contention alone
# costs) and with ten times the batch (sub-batches of ~150 entries a shard
# instead of ~15: what an op's fixed cost is).
for d in "shared:--guard version" "shared:--guard absent" "perwriter:" "sharded:--guard version" \
	"sharded:--guard absent" "sharded:--guard absent -o 0" "sharded:--guard absent -b $((batch * 10))"; do
	for n in $writers; do
		# shellcheck disable=SC2086 # the options' words
		one index 0 -- index "${d%%:*}" -n "$n" -e "$entries" -b "$batch" -l "$lookups" ${d#*:}
	done
done

echo "rados bench write, 16 in flight, $bench_s s, pool $pool: 4 MiB $bench4m MB/s, 64 KiB $bench64k MB/s" \
	"($(rados --version | head -n1 | cut -d' ' -f1-3))"
echo
echo "Data: content-addressed units by exclusive create, 16 in flight a writer, half of each writer's units shared by all:"
echo
sed -n 1p <<<"${header[data]}" | sed 's/ |$/ | put \/ rados bench |/'
sed -n 2p <<<"${header[data]}" | sed 's/$/---|/'
printf '%s\n' "${rows_data[@]}"
echo
echo "Index: $entries entries a writer (half of them the same in every writer), batches of $batch;" \
	"scan: all entries in order; $lookups lookups of random ids, 16 ops in flight:"
echo
printf '%s\n' "${header[index]}"
printf '%s\n' "${rows_index[@]}"
echo
printf '%s\n' "${json[@]}"
echo "rados_design.sh: $((SECONDS - t_start)) s of measurement" >&2
