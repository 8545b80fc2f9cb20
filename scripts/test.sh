#!/bin/bash
# The whole test suite, as CI runs it: a normal build (build/) and an
# AddressSanitizer + UndefinedBehaviorSanitizer build (build-asan/), each
# configured, built and run through ctest. The sanitizer build runs the big
# store tests at a reduced scale (CREST_TEST_SCALE, set by CMake there).
# A Release build (build-release/) is only built, not run: its optimizer
# warns where the others do not (about a minute on two cores). All three
# build with CREST_WERROR, so a warning fails the suite; users' builds do
# not set it.
# Then the fuzz targets (tests/fuzz/run.sh, clang, build-fuzz/), each for
# FUZZ_SECONDS (20): one test per target.
# Installs nothing: scripts/setup.sh does. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=$(nproc)

need() {
	command -v "$1" >/dev/null || {
		echo "test.sh: $1 is missing; run the setup command from README.md first" >&2
		exit 1
	}
}
need cmake
need ctest
need make
need cc
need pkg-config

# The python3 first on PATH may be a pyenv shim, a script that picks the
# interpreter anew on every call: 0.7 s a call on the development VM, where
# the interpreter itself starts in 0.07 s, and the suite calls it about 120
# times a build. The interpreter the shim picks goes first on PATH instead:
# the same python, found once.
if py=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null) && [ -x "$py" ]; then
	PATH=$(dirname "$py"):$PATH
	export PATH
fi

status=0
build() {  # build DIR CMAKE_ARGS...
	local dir=$1
	shift
	echo "=== $dir: configure and build"
	if ! cmake -S . -B "$dir" -DCREST_WERROR=ON "$@" >"$dir/configure.log" 2>&1; then
		cat "$dir/configure.log" >&2
		echo "test.sh: configuring $dir failed (missing libraries? run the setup command from README.md)" >&2
		exit 1
	fi
	rm -f "$dir/configure.log"
	make -C "$dir" -j"$JOBS" --no-print-directory >/dev/null || { echo "test.sh: building $dir failed" >&2; exit 1; }
}
run() {  # run DIR CMAKE_ARGS...
	local dir=$1
	build "$@"
	echo "=== $dir: ctest"
	# Two at a time on CI's two cores: many tests wait on fsyncs, processes
	# and timers rather than the CPU, so the suite's wall time drops by a
	# sixth (472 -> 397 s plain, 512 -> 417 s ASan). Tests that must have
	# the machine alone (fault.points, fault.known, ...) say RUN_SERIAL.
	(cd "$dir" && ctest -j"$JOBS" --output-on-failure) 2>&1 | tee "$dir/ctest.log" || status=1
	# ctest's own summary line, added up over both builds at the end.
	local line
	line=$( (grep -E "tests passed, [0-9]+ tests? failed out of [0-9]+" "$dir/ctest.log" || true) | tail -n1)
	local failed total skipped
	failed=$(sed -E 's/.* ([0-9]+) tests? failed out of.*/\1/' <<<"$line")
	total=$(sed -E 's/.*out of ([0-9]+).*/\1/' <<<"$line")
	skipped=$(grep -cE "^\s+[0-9]+ - .*\(Skipped\)" "$dir/ctest.log" || true)
	[ -n "$line" ] || { failed=1; total=1; status=1; }
	# Each skipped test's reason: the first "SKIP: " line of its output in
	# ctest's log (ctest itself shows only "Skipped"). A skip without one,
	# or for anything but "no GPU here" / "no torch here", is a failure:
	# a skip must never hide a test that could have run.
	local name reason bad=0
	while read -r name; do
		reason=$(awk -v t="$name" '
			$2 == "Test:" && $3 == t { on = 1; next }
			on && /^<end of output>/ { exit }
			on && /^SKIP: / { sub(/^SKIP: /, ""); print; exit }' "$dir/Testing/Temporary/LastTest.log")
		case $reason in
		"no GPU here"* | "no torch here"*) SKIPS+=("$dir: $name: $reason") ;;
		"") SKIPS+=("$dir: $name: FAILED: skipped without a \"SKIP: reason\" line"); bad=$((bad + 1)) ;;
		*) SKIPS+=("$dir: $name: FAILED: a skip is allowed only for no GPU or no torch here: $reason"); bad=$((bad + 1)) ;;
		esac
	done < <(sed -nE 's/^\s+[0-9]+ - (.*) \(Skipped\)$/\1/p' "$dir/ctest.log")
	[ "$bad" -eq 0 ] || status=1
	PASSED=$((PASSED + total - failed - skipped))
	FAILED=$((FAILED + failed + bad))
	SKIPPED=$((SKIPPED + skipped - bad))
}
PASSED=0 FAILED=0 SKIPPED=0 SKIPS=()

mkdir -p build build-asan build-release
build build-release -DCMAKE_BUILD_TYPE=Release
run build
run build-asan -DCREST_SANITIZE=ON
# Third stage: the fuzz targets, one test each; skipped (with the reason)
# only where clang or libFuzzer is missing.
echo "=== build-fuzz: fuzz targets"
mkdir -p build-fuzz
set +e
tests/fuzz/run.sh 2>&1 | tee build-fuzz/run.log
frc=${PIPESTATUS[0]}
set -e
fpass=$(grep -cE "^fuzz_[a-z_]+: passed" build-fuzz/run.log || true)
ffail=$(grep -cE "^fuzz_[a-z_]+: FAILED" build-fuzz/run.log || true)
fskip=$(grep -cE "^skip fuzz_[a-z_]+:" build-fuzz/run.log || true)
if [ "$frc" -ne 0 ] && [ "$frc" -ne 77 ] && [ "$ffail" -eq 0 ]; then
	ffail=1   # it failed before running a target (configure, build)
fi
[ "$frc" -eq 0 ] || [ "$frc" -eq 77 ] || status=1
PASSED=$((PASSED + fpass))
FAILED=$((FAILED + ffail))
SKIPPED=$((SKIPPED + fskip))
while read -r l; do SKIPS+=("build-fuzz: ${l#skip }"); done < <(grep -E "^skip fuzz_[a-z_]+:" build-fuzz/run.log || true)
[ "$FAILED" -eq 0 ] || status=1
[ "$status" -eq 0 ] && echo "=== all tests passed" || echo "=== some tests FAILED" >&2
# What did not run and why, just above the totals (which stay the last line).
echo "=== skipped: ${#SKIPS[@]}"
for l in "${SKIPS[@]}"; do echo "  $l"; done
echo "$PASSED passed, $FAILED failed, $SKIPPED skipped"
exit "$status"
