#!/bin/bash
# The randomized model test (tests/store/model.c) for longer than CI runs it:
# one run after another, each with a fresh random seed and store, for
# MINUTES minutes (default 10), each run OPS operations (default 20000) or
# until the time is up. Prints one line per run and, at the end, the seeds
# that failed (replay one with CREST_TEST_SEED=N or --seed N; each failure's
# output is kept in the log directory named at the end). Exits 1 if any failed.
# BUILD names the build directory (default build/; build-asan/ soaks the
# sanitizer build).
# Usage: bench/store/model_soak.sh [MINUTES [OPS]]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
MODEL=$BUILD/tests/store/store_model
[ -x "$MODEL" ] || { echo "model_soak: $MODEL missing: build first (cmake -S . -B build && make -C build)" >&2; exit 1; }
export CREST=$BUILD/cli/crest CASCTL=$BUILD/cli/casctl
MINUTES=${1:-10}
OPS=${2:-20000}
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/crest-soak.XXXXXX")
end=$(( $(date +%s) + MINUTES * 60 ))
runs=0 ops=0
failed=()
while :; do
	left=$(( end - $(date +%s) ))
	[ "$left" -gt 5 ] || break
	seed=$(( (RANDOM << 15 | RANDOM) % 1000000000 ))
	log=$LOGS/seed-$seed.log
	if CREST_TEST_SEED=$seed "$MODEL" --ops "$OPS" --seconds "$left" >"$log" 2>&1; then
		line=$(grep 'model: ok:' "$log" || true)
		echo "seed $seed: ${line#model: }"
		ops=$(( ops + $(sed -n 's/.*ok: \([0-9]*\) operations.*/\1/p' "$log") ))
		rm -f "$log"
	else
		echo "seed $seed: FAILED: $(grep 'model: FAIL' "$log" | head -1)"
		failed+=("$seed")
	fi
	runs=$((runs + 1))
done
echo "model_soak: $runs runs, $ops operations passed, ${#failed[@]} failed, in $MINUTES min"
if [ "${#failed[@]}" -gt 0 ]; then
	echo "model_soak: failing seeds: ${failed[*]} (logs in $LOGS)"
	exit 1
fi
rmdir "$LOGS" 2>/dev/null || true
