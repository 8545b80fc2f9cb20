#!/bin/bash
# Builds the libFuzzer targets (clang, ASan + UBSan, in build-fuzz/) and runs
# each for a bounded time from its seed corpus (corpus/<target>/: seeds from
# seeds.sh, and regress-* inputs that once crashed, which run first).
# Targets run side by side, as many at once as there are cores.
#   tests/fuzz/run.sh [TARGET...]        (default: every fuzz_*.c here)
# Environment: FUZZ_SECONDS per target (20), FUZZ_BUILD (build-fuzz),
# FUZZ_ARGS more libFuzzer options, CC (clang).
# Prints one line per target: "TARGET: passed|FAILED, N runs in S s".
# Exits 0 when all pass, 1 on any crash, leak, sanitizer report or broken
# check (the input is kept under FUZZ_BUILD/fuzz-artifacts/), and 77, with
# "skip TARGET: why" lines, when clang or libFuzzer is missing.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
secs=${FUZZ_SECONDS:-20}
build=${FUZZ_BUILD:-build-fuzz}
cc=${CC:-clang}
[[ "$cc" == *clang* ]] || cc=clang
if [ $# -gt 0 ]; then
	targets=("$@")
else
	targets=()
	for f in "$here"/fuzz_*.c; do targets+=("$(basename "$f" .c)"); done
fi

skip() {
	for t in "${targets[@]}"; do echo "skip $t: $1"; done
	exit 77
}
command -v "$cc" >/dev/null || skip "$cc is missing (scripts/setup.sh installs clang)"
probe=$(mktemp -d)
printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' >"$probe/p.c"
if ! "$cc" -fsanitize=fuzzer,address,undefined "$probe/p.c" -o "$probe/p" >"$probe/log" 2>&1; then
	cat "$probe/log" >&2
	rm -rf "$probe"
	skip "$cc cannot link libFuzzer (scripts/setup.sh installs libclang-rt-14-dev)"
fi
rm -rf "$probe"

echo "=== $build: configure and build the fuzz targets ($cc)"
mkdir -p "$build"
if ! CC=$cc cmake -S . -B "$build" -DCREST_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$build/configure.log" 2>&1; then
	cat "$build/configure.log" >&2
	echo "run.sh: configuring $build failed" >&2
	exit 1
fi
if ! make -C "$build" -j"$(nproc)" --no-print-directory fuzz_all >"$build/build.log" 2>&1; then
	tail -n 40 "$build/build.log" >&2
	echo "run.sh: building the fuzz targets failed" >&2
	exit 1
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# One target per core at a time: each libFuzzer process is single-threaded,
# so running them side by side gives each the same time as running them in
# turn, in a fraction of the wall time (CI's 20-minute budget).
fuzz_one() {  # fuzz_one TARGET: runs it, leaves its verdict in $build/fuzz-TARGET.verdict
	local t=$1
	local bin=$build/tests/fuzz/$t
	local seeds=$here/corpus/$t
	local work=$build/fuzz-corpus/$t        # what a run adds; the seeds stay as committed
	local art=$build/fuzz-artifacts/$t/
	local log=$build/fuzz-$t.log
	local verdict=$build/fuzz-$t.verdict
	mkdir -p "$work" "$art" "$seeds"
	local start rc took runs
	start=$(date +%s%N)
	# -timeout: one input for longer than that is a hang, reported as such.
	"$bin" "$work" "$seeds" -max_total_time="$secs" -timeout=25 -rss_limit_mb=2048 \
		-artifact_prefix="$art" -print_final_stats=1 ${FUZZ_ARGS:-} >"$log" 2>&1
	rc=$?
	took=$((($(date +%s%N) - start) / 1000000000))
	runs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$log" | tail -n1)
	if [ "$rc" -eq 0 ] && grep -q "^Done [0-9]* runs" "$log"; then
		printf '%s: passed, %s runs in %d s\n' "$t" "${runs:-?}" "$took" >"$verdict"
	else
		{
			printf '%s: FAILED (exit %d), %s runs in %d s; log %s, input under %s\n' "$t" "$rc" \
				"${runs:-?}" "$took" "$log" "$art"
			grep -E "ERROR|runtime error|fails|SUMMARY|Test unit written" "$log" | head -n 8 | sed 's/^/    /'
		} >"$verdict"
	fi
}
slots=$(nproc)
running=0
for t in "${targets[@]}"; do
	rm -f "$build/fuzz-$t.verdict"
	if [ "$running" -ge "$slots" ]; then
		wait -n
		running=$((running - 1))
	fi
	fuzz_one "$t" &
	running=$((running + 1))
done
wait
status=0 passed=0 failed=0
for t in "${targets[@]}"; do
	verdict=$build/fuzz-$t.verdict
	if [ -s "$verdict" ] && grep -q "^$t: passed" "$verdict"; then
		cat "$verdict"
		passed=$((passed + 1))
	else
		[ -s "$verdict" ] && cat "$verdict" || echo "$t: FAILED (no verdict: the runner died)"
		failed=$((failed + 1))
		status=1
	fi
done
echo "fuzz: $passed passed, $failed failed"
exit "$status"
