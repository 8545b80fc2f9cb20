#!/bin/sh
# incremental.sh [GIB] [PCT] [WORK] [ROUNDS] - the incremental library
# checkpoint on the device machine (issues 14 and 36), three ways side by
# side in one run. Each is gpu_bench on GIB GiB (8) of device memory: a full
# checkpoint, an unchanged one, and one after PCT percent (2) of the 4 KiB
# chunks were rewritten at random; the third snapshot and the first are
# restored and checked word for word.
#   cpu:  CREST_GPU_HASH=0, every checkpoint copied whole and hashed by the
#         CPU (crest without GPU hashing);
#   sha:  CREST_GPU_WIDE=0, changed chunks found by SHA-256 of every chunk
#         on the GPU, then only they are copied (crest before issue 36);
#   wide: the default, changed chunks found by the wide hash (gpu/gpusha.h),
#         SHA-256 only of those, then only they are copied.
# The modes alternate, ROUNDS (1) times, in the order $MODES names them
# ("cpu sha wide"; run it again reversed to see what the order costs). Prints the RESULT lines of each run
# and, per mode, the medians and the ratio issue 36 states its target in:
# the 2% checkpoint's stall over the full-copy (cpu) first stall.
# The stores are WORK-MODE (WORK: /tmp/crest-incr-bench, on the root disk;
# /dev/shm/... puts them in tmpfs, where the disk does not bound the first
# ingest). Needs .gpu with gpu_bench and casctl (see gpu_bench.sh).
set -u
# Stores here are made on first use (crest init and its refusals: tests/store/init.sh).
export CREST_INIT=1
gib=${1:-8}
pct=${2:-2}
work=${3:-/tmp/crest-incr-bench}
rounds=${4:-1}
sum=$work-results
: >"$sum"
r=1
while [ "$r" -le "$rounds" ]; do
	for mode in ${MODES:-cpu sha wide}; do
		rm -rf "$work-$mode"
		case $mode in
		cpu) env CREST_GPU_HASH=0 GPU_BENCH_DRIVER=0 GPU_BENCH_CHANGE_PCT=$pct \
			.gpu/run gpu_bench "$work-$mode" "$gib" >"$work-$mode.log" 2>&1 ;;
		sha) env CREST_GPU_WIDE=0 CREST_TRACE=1 GPU_BENCH_DRIVER=0 GPU_BENCH_CHANGE_PCT=$pct \
			.gpu/run gpu_bench "$work-$mode" "$gib" >"$work-$mode.log" 2>&1 ;;
		wide) env CREST_TRACE=1 GPU_BENCH_DRIVER=0 GPU_BENCH_CHANGE_PCT=$pct \
			.gpu/run gpu_bench "$work-$mode" "$gib" >"$work-$mode.log" 2>&1 ;;
		esac
		echo "round $r $mode: gpu_bench exit $?; $(.gpu/run casctl --store "$work-$mode" verify 2>&1 | tail -1)"
		grep -E '^(RESULT (stall|restore)|checkpoint|crest trace: crest_checkpoint)' "$work-$mode.log" |
			sed "s/^/round $r $mode: /"
		for k in stall_s stall2_s stall3_s ingest3_s; do
			v=$(sed -n "s/^RESULT .*[ ]*\b$k=\([0-9.]*\).*/\1/p" "$work-$mode.log" | head -1)
			echo "$mode $k ${v:-nan}" >>"$sum"
		done
		grep -q '^RESULT restore3_bitexact=yes' "$work-$mode.log" || echo "round $r $mode: the 2% snapshot did NOT restore bit-exact"
		rm -rf "$work-$mode"
	done
	r=$((r + 1))
done
# Medians per mode and figure, then the ratios.
awk '{ v[$1 " " $2] = v[$1 " " $2] " " $3 }
END {
	for (k in v) { n = split(v[k], a, " "); for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		m[k] = n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
	full = m["cpu stall_s"]
	for (i = 1; i <= 3; i++) { mode = i == 1 ? "cpu" : i == 2 ? "sha" : "wide"
		printf "RESULT mode=%s first_stall_s=%.4f unchanged_stall_s=%.4f incr_stall_s=%.4f incr_over_full_cpu=%.4f incr_ingest_s=%.3f\n",
			mode, m[mode " stall_s"], m[mode " stall2_s"], m[mode " stall3_s"], m[mode " stall3_s"] / full, m[mode " ingest3_s"] }
	printf "RESULT wide_incr_over_sha_incr=%.3f wide_unchanged_over_sha_unchanged=%.3f\n",
		m["wide stall3_s"] / m["sha stall3_s"], m["wide stall2_s"] / m["sha stall2_s"]
}' "$sum"
