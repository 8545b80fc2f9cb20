#!/bin/sh
# compare.sh OLD NEW [GIB] [ROUNDS] - two builds of gpu_bench on the same
# GPU, alternating (old, new, old, new, ...) so that drift of the machine
# hits both alike. Prints each run's RESULT lines tagged with its build;
# a change to the store or the commit path is measured against the commit
# before it this way. Run from the repository root on the GPU machine,
# with both binaries bundled into .gpu (gpu_bench links crest statically):
#   cp OLD_BUILD/bench/library/gpu_bench /tmp/x/gpu_bench_old
#   ../shared/tools/gpu-bundle .gpu build/bench/library/gpu_bench /tmp/x/gpu_bench_old
#   sh bench/library/compare.sh gpu_bench_old gpu_bench 8 3
set -u
# Stores here are made on first use (crest init and its refusals: tests/store/init.sh).
export CREST_INIT=1
old=$1 new=$2 gib=${3:-8} rounds=${4:-3}
work=/tmp/crest-compare
i=1
while [ "$i" -le "$rounds" ]; do
	for b in "$old" "$new"; do
		rm -rf "$work" && mkdir -p "$work"
		.gpu/run "$b" "$work/store" "$gib" 2>&1 |
			grep '^RESULT' | grep -v driver | sed "s/^/$b round $i: /"
	done
	i=$((i + 1))
done
rm -rf "$work"
