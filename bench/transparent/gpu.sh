#!/bin/bash
# Issue 3 on the GPU machine, in one run: a CUDA job with $GPU_MIB MiB of
# device memory (default 8 GiB). First the bare baseline (driver lock +
# checkpoint, CRIU dump into /dev/shm, driver restore + unlock: no crest),
# then crest demo on the same job size: checkpoints while it runs, kill,
# restore from a middle snapshot, bit-for-bit continuation. Results go to
# $OUT (or ./gpu-out) as JSON: bare1.json, bare2.json, demo.json, stats.json
# and run.json (when, where, which crest, image sizes), which
# bench/gpu_plot.sh draws later on a machine with gnuplot (this one has none).
#
# Run from the repository root with .gpu/ (gpu-bundle of crest, casctl,
# crest-bare-ckpt, crest-workload, crest-workload-gpu) and .gpu/criu (the
# criu prefix) carried.
set -euo pipefail
# Stores here are made on first use (crest init and its refusals: tests/store/init.sh).
export CREST_INIT=1
OUT=${OUT:-$PWD/gpu-out}
MIB=${GPU_MIB:-8192}
declare -a IMAGES
mkdir -p "$OUT"
export CREST_CRIU=$PWD/.gpu/criu/criu
RUN=$PWD/.gpu/run
W=$PWD/.gpu/bin/crest-workload-gpu
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
echo "cpus: $(nproc), mem: $(free -g | awk '/Mem/{print $2}') GiB" | tee -a "$OUT/gpu.txt"
"$CREST_CRIU" --version | head -1 | tee -a "$OUT/gpu.txt"
"$RUN" crest --version | head -1 | tee -a "$OUT/gpu.txt"
STARTED=$(date -u '+%Y-%m-%d %H:%M UTC')

# 1. Bare baseline, twice, on a fresh job each time.
for i in 1 2; do
	setsid "$W" --mib "$MIB" --interval-ms 1500 </dev/null >/tmp/bare$i.out 2>&1 &
	P=$!
	until [ "$(wc -l </tmp/bare$i.out)" -ge 1 ]; do sleep 0.1; done
	"$RUN" crest-bare-ckpt "$P" /dev/shm/bare$i | tee "$OUT/bare$i.json"
	du -sb /dev/shm/bare$i | awk '{print "bare images bytes:", $1}' | tee -a "$OUT/gpu.txt"
	IMAGES[$i]=$(du -sb /dev/shm/bare$i | cut -f1)
	n=$(wc -l </tmp/bare$i.out); until [ "$(wc -l </tmp/bare$i.out)" -ge $((n + 1)) ]; do sleep 0.1; done
	echo "bare run $i: job ran on after the round trip" | tee -a "$OUT/gpu.txt"
	kill -9 "$P"; wait "$P" 2>/dev/null || true
	rm -rf /dev/shm/bare$i
done

printf '{"date": "%s", "gpu": "%s", "cpus": %s, "mem_gib": %s, "criu": "%s", "crest": "%s", "mib": %s, "bare_images_bytes": [%s, %s]}\n' \
	"$STARTED" "$(sed -n 1p "$OUT/gpu.txt")" "$(nproc)" "$(free -g | awk '/Mem/{print $2}')" \
	"$(sed -n 3p "$OUT/gpu.txt")" "$(sed -n 4p "$OUT/gpu.txt")" "$MIB" "${IMAGES[1]}" "${IMAGES[2]}" >"$OUT/run.json"

# 2. crest demo, same size.
rm -rf /tmp/gpu-store
cd /tmp
"$RUN" crest --store /tmp/gpu-store demo --gpu --json --mib "$MIB" --checkpoints 3 --restore-from 2 \
	>"$OUT/demo.json" 2>"$OUT/demo.err" || { cat "$OUT/demo.err"; exit 1; }
cat "$OUT/demo.json"
"$RUN" casctl --store /tmp/gpu-store stats --json | tee "$OUT/stats.json"
