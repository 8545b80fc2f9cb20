#!/bin/bash
# The transparent restore of a CUDA job, its images served to CRIU as it
# reads them (CREST_RESTORE_IMAGES=stream, the default) beside the same
# restore with the images written to tmpfs first (files), alternated in one
# run on one machine. Each round: crest demo --gpu (GPU_MIB MiB, 2
# checkpoints, restore of the second, output compared with an uninterrupted
# run). The files rounds' CRIU and driver phases are CRIU + driver alone,
# the ceiling issue 14 names; the ratio is each mode's median wall time over
# the median of that.
#   bash bench/transparent/restore_modes.sh [ROUNDS]     (default 2 of each)
# Run from the repository root on the GPU machine with .gpu/ carried (as
# bench/transparent/gpu.sh). JSON of every round lands in $OUT (./gpu-out).
set -euo pipefail
# Stores here are made on first use (crest init and its refusals: tests/store/init.sh).
export CREST_INIT=1
ROUNDS=${1:-2}
OUT=${OUT:-$PWD/gpu-out}
MIB=${GPU_MIB:-8192}
mkdir -p "$OUT"
export CREST_CRIU=$PWD/.gpu/criu/criu
RUN=$PWD/.gpu/run
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "cpus $(nproc), $("$RUN" crest --version | head -1), $MIB MiB"
cd /tmp
for r in $(seq 1 "$ROUNDS"); do
	for mode in stream files; do
		rm -rf /tmp/crest-modes-store
		CREST_RESTORE_IMAGES=$mode "$RUN" crest --store /tmp/crest-modes-store demo --gpu --json --mib "$MIB" \
			--checkpoints 2 --restore-from 2 >"$OUT/modes-$mode-$r.json" 2>"$OUT/modes-$mode-$r.err" ||
			{ tail -3 "$OUT/modes-$mode-$r.err"; exit 1; }
	done
done
rm -rf /tmp/crest-modes-store
python3 - "$OUT" "$ROUNDS" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
runs = {m: [json.load(open(f"{out}/modes-{m}-{r}.json")) for r in range(1, rounds + 1)] for m in ("stream", "files")}
for m, rs in runs.items():
    for d in rs:
        x = d["restore"]
        print(f"{m}: {x['seconds']:.2f} s (images {x['stream_seconds']:.2f}, criu {x['criu_seconds']:.2f}, "
              f"driver {x['gpu_seconds']:.2f}); output identical: {d['identical']}")
ceiling = statistics.median(d["restore"]["criu_seconds"] + d["restore"]["gpu_seconds"] for d in runs["files"])
print(f"CRIU + driver alone (files rounds' phases), median: {ceiling:.2f} s")
for m, rs in runs.items():
    w = statistics.median(d["restore"]["seconds"] for d in rs)
    print(f"RESULT mode={m} median_s={w:.2f} ratio={w / ceiling:.2f}")
if not all(d["identical"] for rs in runs.values() for d in rs):
    sys.exit("a restored job's output differed from an uninterrupted run's")
PY
