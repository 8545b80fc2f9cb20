#!/bin/bash
# rados_bench.sh [SECONDS] - the ceiling for crest's rados backend (issue
# 35): what Ceph's own client, `rados bench`, writes and reads back on a
# cluster, 16 operations in flight, for objects of 4 MiB and of 64 KiB,
# SECONDS (10) each. crest's backend will be measured against these.
#
# The cluster: the one CEPH_CONF names (pool $CREST_CEPH_POOL, default
# crest, which must exist), else a one-node cluster of its own
# (scripts/ceph-cluster.sh) in a new directory under ${TMPDIR:-/var/tmp},
# with an OSD of 40 GiB (sparse), since 10 s of 4 MiB writes may write
# 8 GB, and stopped and removed at the end.
#
# Per object size: a write phase (objects kept), a sequential read of what
# it wrote (it ends early once every object has been read), then the
# objects removed. Prints a markdown table: MB/s (as rados reports them,
# 10^6 bytes), average IOPS and latency of each phase. Run from anywhere;
# needs no build.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
secs=${1:-10}
if [ $# -gt 1 ] || ! [[ $secs =~ ^[1-9][0-9]*$ ]]; then
	echo "usage: bench/store/rados_bench.sh [SECONDS]" >&2
	exit 2
fi
# The OSD's 40 GiB file is sparse; what it holds is removed after each size.
source "$here/ceph_setup.sh"
ceph_setup rados_bench.sh

# One phase: rados bench's output kept, its summary's figures printed as
# "MB/s IOPS latency-ms".
phase() {  # phase LOG rados-bench-arguments...
	local log=$work/$1
	shift
	timeout $((secs * 6 + 120)) rados bench -p "$pool" "$secs" "$@" >"$log" 2>&1 || {
		echo "rados_bench.sh: rados bench $* failed:" >&2
		tail -n 20 "$log" >&2
		exit 1
	}
	awk '
		/^Bandwidth \(MB\/sec\):/ { bw = $3 }
		/^Average IOPS:/ { iops = $3 }
		/^Average Latency\(s\):/ { lat = $3 * 1000 }
		END {
			if (bw == "" || iops == "" || lat == "") exit 1
			printf "%.1f %d %.1f\n", bw, iops, lat
		}' "$log" || {
		echo "rados_bench.sh: no summary in the output of rados bench $*:" >&2
		tail -n 20 "$log" >&2
		exit 1
	}
}

rows=()
for size in 4M 64K; do
	case $size in 4M) label="4 MiB" ;; 64K) label="64 KiB" ;; esac
	run=crest-bench-$size-$$
	read -r wbw wiops wlat <<<"$(phase "write-$size" write -b "$size" -t 16 --no-cleanup --run-name "$run")"
	read -r rbw riops rlat <<<"$(phase "seq-$size" seq -t 16 --run-name "$run")"
	# What this size wrote goes before the next size writes: the OSD's
	# file is bounded and a fuller bluestore is a slower one.
	timeout 600 rados -p "$pool" cleanup --run-name "$run" >"$work/cleanup-$size" 2>&1 || {
		echo "rados_bench.sh: removing the $size objects failed: $(tail -n 3 "$work/cleanup-$size")" >&2
		exit 1
	}
	rows+=("| $label | $wbw | $wiops | $wlat | $rbw | $riops | $rlat |")
done

echo "rados bench, 16 in flight, $secs s a phase, pool $pool ($(rados --version | head -n1 | cut -d' ' -f1-3)):"
echo
echo "| object | write MB/s | write IOPS | write latency (ms) | seq read MB/s | read IOPS | read latency (ms) |"
echo "|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
