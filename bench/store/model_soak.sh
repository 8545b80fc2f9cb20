#!/bin/bash
# The randomized model test (tests/store/model.c) for longer than CI runs it:
# one run after another, each with a fresh random seed and store, for
# MINUTES minutes (default 10), each run OPS operations (default 20000) or
# until the time is up. Prints one line per run and, at the end, the seeds
# that failed (replay one with CREST_TEST_SEED=N or --seed N; each failure's
# output is kept in the log directory named at the end). Exits 1 if any failed.
# BUILD names the build directory (default build/; build-asan/ soaks the
# sanitizer build). Each run's figures also go to PLOTS/NAME.dat (default
# bench/plots/model_soak.dat; NAME from PLOT_NAME), one line per run, and
# bench/store/model_soak.gp draws ops/s per run, failures marked, into
# PLOTS/NAME.png.
# Usage: bench/store/model_soak.sh [MINUTES [OPS]]
. "$(dirname "$0")/lib.sh"
MODEL=$BUILD/tests/store/store_model
[ -x "$MODEL" ] || { echo "model_soak: $MODEL missing: build first (cmake -S . -B build && make -C build)" >&2; exit 1; }
export CREST CASCTL
MINUTES=${1:-10}
OPS=${2:-20000}
NAME=${PLOT_NAME:-model_soak}
STAMP=$(stamp)
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/crest-soak.XXXXXX")
# run seconds ops ops/s ok|FAIL seed, a line per run, kept as the runs go.
echo "# run seconds ops ops_per_s result seed" >"$WORK/runs.dat"
end=$(( $(date +%s) + MINUTES * 60 ))
runs=0 ops=0
failed=()
while :; do
	left=$(( end - $(date +%s) ))
	[ "$left" -gt 5 ] || break
	seed=$(( (RANDOM << 15 | RANDOM) % 1000000000 ))
	log=$LOGS/seed-$seed.log
	t0=$(now)
	if CREST_TEST_SEED=$seed "$MODEL" --ops "$OPS" --seconds "$left" >"$log" 2>&1; then
		line=$(grep 'model: ok:' "$log" || true)
		echo "seed $seed: ${line#model: }"
		n=$(sed -n 's/.*ok: \([0-9]*\) operations.*/\1/p' "$log")
		ops=$(( ops + n ))
		result=ok
		rm -f "$log"
	else
		echo "seed $seed: FAILED: $(grep 'model: FAIL' "$log" | head -1)"
		failed+=("$seed")
		# the operations done before the one that failed
		n=$(sed -n 's/.*model: FAIL at op \([0-9]*\).*/\1/p' "$log" | head -1)
		result=FAIL
	fi
	runs=$((runs + 1))
	awk -v r="$runs" -v t0="$t0" -v t1="$(now)" -v n="${n:-0}" -v res="$result" -v s="$seed" \
		'BEGIN { printf "%d %.2f %d %.1f %s %s\n", r, t1 - t0, n, n / (t1 - t0), res, s }' >>"$WORK/runs.dat"
done
echo "model_soak: $runs runs, $ops operations passed, ${#failed[@]} failed, in $MINUTES min"
if have_gnuplot; then
	mkdir -p "$PLOTS"
	{ echo "# $STAMP"; echo "# bench/store/model_soak.sh $MINUTES $OPS (BUILD=${BUILD#"$ROOT"/})"; cat "$WORK/runs.dat"; } >"$PLOTS/$NAME.dat"
	gnuplot -e "dat='$PLOTS/$NAME.dat'; out='$PLOTS/$NAME.png'; minutes='$MINUTES'; ops='$OPS'" "$(dirname "$0")/model_soak.gp"
	echo "model_soak: picture $PLOTS/$NAME.png (drawn from $NAME.dat beside it)"
fi
if [ "${#failed[@]}" -gt 0 ]; then
	echo "model_soak: failing seeds: ${failed[*]} (logs in $LOGS)"
	exit 1
fi
rmdir "$LOGS" 2>/dev/null || true
