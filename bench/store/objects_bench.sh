#!/bin/bash
# objects_bench.sh [BUILD] - a commit's meta-log append + sync through the
# objects table (cas/objects.h, issue 35) on the directory (/var/tmp, a
# disk) and on RADOS, beside `rados bench` with one write in flight (the
# cluster's own latency for a write of the same size), in one run, for
# records of 4 KiB, 64 KiB and 1 MiB.
#
# The cluster: CEPH_CONF's, else a one-node one of its own (ceph_setup.sh).
# BUILD: the build directory with bench/store/objects_bench (./build).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
ob=$build/bench/store/objects_bench
[ -x "$ob" ] || { echo "objects_bench.sh: $ob is missing: build first" >&2; exit 1; }
source "$here/ceph_setup.sh"
ceph_setup objects_bench.sh
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p"; }
printf '| record | directory: append+sync median (p99) | RADOS: append+sync median (p99) | rados bench -t 1: write latency | RADOS append / rados bench |\n|---|---|---|---|---|\n'
for spec in "4K 1000 4096" "64K 500 65536" "1M 60 1048576"; do
	set -- $spec
	d=$("$ob" "$work/dir" "$2" "$1")
	r=$("$ob" "rados:$pool/objects-bench" "$2" "$1")
	for x in "$d" "$r"; do
		[ "$(echo "$x" | field readback_equal)" = yes ] || { echo "objects_bench.sh: read back differs: $x" >&2; exit 1; }
	done
	timeout 120 rados bench -p "$pool" 5 write -b "$3" -t 1 >"$work/rb.log" 2>&1 || { tail "$work/rb.log" >&2; exit 1; }
	rb=$(awk '/^Average Latency\(s\):/ { printf "%.3f", $3 * 1000 }' "$work/rb.log")
	timeout 120 rados -p "$pool" cleanup >/dev/null 2>&1 || true
	rm=$(echo "$r" | field append_sync_median_ms)
	printf '| %s | %s ms (%s) | %s ms (%s) | %s ms | %.2f |\n' "$1" \
		"$(echo "$d" | field append_sync_median_ms)" "$(echo "$d" | field p99_ms)" \
		"$rm" "$(echo "$r" | field p99_ms)" "$rb" "$(echo "$rm $rb" | awk '{print $1 / $2}')"
done
