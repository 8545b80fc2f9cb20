# bins.sh - sourced by the sh benchmarks that run on the GPU machine as well
# as here (put_disk.sh, get_tmpfs.sh, writer_tmpfs.sh), from the repository
# root: crest, casctl and store_tool from .gpu/ (scripts/gpu-check.sh
# --bundle, plus build/tests/store/store_tool) when it is there, else from
# build/; now, the time in seconds with nanoseconds; and rate BYTES T0 T1,
# BYTES over the seconds from T0 to T1 in GB/s, two decimals.
# Stores here are made on first use (crest init and its refusals: tests/store/init.sh).
export CREST_INIT=1
if [ -x .gpu/run ] && [ -x .gpu/bin/store_tool ]; then
	crest() { .gpu/run crest "$@"; }
	casctl() { .gpu/run casctl "$@"; }
	store_tool() { .gpu/run store_tool "$@"; }
else
	crest() { build/cli/crest "$@"; }
	casctl() { build/cli/casctl "$@"; }
	store_tool() { build/tests/store/store_tool "$@"; }
fi
now() { date +%s.%N; }
rate() { awk -v b="$1" -v t0="$2" -v t1="$3" 'BEGIN { printf "%.2f", b / (t1 - t0) / 1e9 }'; }
