#!/bin/sh
# incremental.sh [GIB] [PCT] [WORK] - issue 14's incremental library checkpoint on
# the device machine, GPU hashing beside the CPU path, in one run. Both are
# gpu_bench on GIB GiB (8) of device memory: a full checkpoint, an
# unchanged one, and one after PCT percent (2) of the 4 KiB chunks were
# rewritten at random. "gpu": device regions hashed on the GPU, only the
# changed chunks copied (the default); "cpu": CREST_GPU_HASH=0, every
# checkpoint copied whole and hashed by the CPU, as before. Prints the
# RESULT lines of both and the ratios the issue's targets are stated in:
# the incremental stall over the full-copy stall of the same run, and the
# first stall with GPU hashing over the first without.
# The stores are WORK-cpu and WORK-gpu (WORK: /tmp/crest-incr-bench, on the
# root disk; /dev/shm/... puts them in tmpfs, where the disk does not bound
# the first ingest).
# Needs .gpu with gpu_bench and casctl (see gpu_bench.sh for bundling).
set -u
# Stores here are made on first use (crest init and its refusals: tests/store/init.sh).
export CREST_INIT=1
gib=${1:-8}
pct=${2:-2}
work=${3:-/tmp/crest-incr-bench}
for mode in cpu gpu; do
	rm -rf "$work-$mode"
	if [ "$mode" = cpu ]; then
		CREST_GPU_HASH=0 GPU_BENCH_CHANGE_PCT=$pct .gpu/run gpu_bench "$work-$mode" "$gib" >"$work-$mode.log" 2>&1
	else
		CREST_TRACE=1 GPU_BENCH_CHANGE_PCT=$pct .gpu/run gpu_bench "$work-$mode" "$gib" >"$work-$mode.log" 2>&1
	fi
	echo "$mode: gpu_bench exit $?; $(.gpu/run casctl --store "$work-$mode" verify 2>&1 | tail -1)"
	grep -E '^(RESULT (stall|restore)|checkpoint|crest trace: (crest_checkpoint|engine|cas_commit))' "$work-$mode.log" | sed "s/^/$mode: /"
	rm -rf "$work-$mode"
done
val() { sed -n "s/^RESULT .*$2=\([0-9.]*\).*/\1/p" "$work-$1.log" | head -1; }
awk -v s1c="$(val cpu stall_s)" -v s1g="$(val gpu stall_s)" -v s3c="$(val cpu stall3_s)" -v s3g="$(val gpu stall3_s)" \
    -v i3c="$(val cpu ingest3_s)" -v i3g="$(val gpu ingest3_s)" 'BEGIN {
	printf "RESULT full_stall_cpu_s=%s full_stall_gpu_s=%s first_gpu_over_cpu=%.3f\n", s1c, s1g, s1g / s1c
	printf "RESULT incr_stall_cpu_s=%s incr_stall_gpu_s=%s incr_gpu_over_full_gpu=%.3f incr_gpu_over_full_cpu=%.3f\n", s3c, s3g, s3g / s1g, s3g / s1c
	printf "RESULT incr_ingest_cpu_s=%s incr_ingest_gpu_s=%s\n", i3c, i3g }'
