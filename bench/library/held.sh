#!/bin/sh
# held.sh [GIB] - a library checkpoint held in memory while the store is let
# go (issue 12: gc beside a job) beside one taken with the store kept, on
# the device machine, in one run. Both are gpu_bench on GIB GiB (8) of
# device memory: "kept" as a session runs when nobody waits for its store;
# "held" with CREST_STORE_IDLE_MS=0, so that the store is let go after the
# first checkpoint and the unchanged second one (stall2) is held, as while
# gc runs. Prints both RESULT lines and the ratio of the second stalls.
# Needs .gpu with gpu_bench and casctl (see gpu_bench.sh for bundling).
set -u
# Stores here are made on first use (crest init and its refusals: tests/store/init.sh).
export CREST_INIT=1
gib=${1:-8}
work=/tmp/crest-held-bench
for mode in kept held; do
	rm -rf "$work-$mode"
	if [ "$mode" = held ]; then
		CREST_STORE_IDLE_MS=0 .gpu/run gpu_bench "$work-$mode" "$gib" >"$work-$mode.log" 2>&1
	else
		.gpu/run gpu_bench "$work-$mode" "$gib" >"$work-$mode.log" 2>&1
	fi
	echo "$mode: gpu_bench exit $?; $(.gpu/run casctl --store "$work-$mode" verify 2>&1 | tail -1)"
	grep '^RESULT stall' "$work-$mode.log" | sed "s/^/$mode: /"
	rm -rf "$work-$mode"
done
k=$(sed -n 's/^RESULT stall2_s=\([0-9.]*\).*/\1/p' "$work-kept.log")
h=$(sed -n 's/^RESULT stall2_s=\([0-9.]*\).*/\1/p' "$work-held.log")
[ -n "$k" ] && [ -n "$h" ] && awk -v k="$k" -v h="$h" 'BEGIN { printf "RESULT held_stall_s=%s kept_stall_s=%s held_over_kept=%.2f\n", h, k, h / k }'
