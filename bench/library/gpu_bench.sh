#!/bin/sh
# gpu_bench.sh OUTDIR - library capture on the device machine, in one go.
#
# Build on the development machine first, then bundle (see ../../../shared/tools/gpu-bundle):
#   cmake -S . -B build && make -C build -j2
#   ../shared/tools/gpu-bundle .gpu build/tests/library/test_gpu build/tests/library/test_library \
#       build/bench/library/gpu_bench build/bench/library/restore_ceiling build/lib/libcrest.so \
#       build/cli/crest build/cli/casctl
# and run this from the repository root there, with .gpu carried:
#   sh bench/library/gpu_bench.sh "$OUT" [ROUNDS]
# Logs land in OUTDIR; RESULT lines are the figures for bench/RESULTS.md.
# ROUNDS (default 1) repeats step 2 (gpu_bench and restore_ceiling) that many
# times. Every round's RESULT lines also go to OUTDIR/library.dat as they
# come, "round name value" a line, which bench/gpu_plot.sh draws later on a
# machine with gnuplot (this one has none).
set -u
# Stores here are made on first use (crest init and its refusals: tests/store/init.sh).
export CREST_INIT=1
out=${1:-/tmp/crest-gpu-bench}
rounds=${2:-1}
gib=8
mkdir -p "$out"
work=/tmp/crest-gpu-bench-work
rm -rf "$work" && mkdir -p "$work"
run() { echo "== $*"; "$@"; echo "== exit $?"; }
{
  date -u '+%Y-%m-%d %H:%M UTC'
  nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max --format=csv,noheader
  echo "cpus $(nproc), $(free -g | awk '/Mem:/{print $2}') GiB RAM, kernel $(uname -r)"
  .gpu/run crest --version | head -1
} 2>&1 | tee "$out/machine.txt"
{
  sed 's/^/# /' "$out/machine.txt"
  echo "# bench/library/gpu_bench.sh: gpu_bench STORE $gib, then restore_ceiling on its packs; $rounds round(s)"
  echo "# round name value (RESULT lines; restore_ceiling's as ceiling_MODE_THREADS_GBps)"
} >"$out/library.dat"
# figures ROUND FILE...: the RESULT lines of FILE... as "ROUND name value",
# numbers and yes/NO only (a figure the run could not take is left out).
figures() {
  r=$1; shift
  echo "$r gib $gib"
  grep -h '^RESULT' "$@" | awk -v r="$r" '
    $2 == "ceiling" {
      for (i = 3; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
      print r, "ceiling_" f["mode"] "_" f["threads"] "_GBps", f["GBps"]; next }
    { for (i = 2; i <= NF; i++) {
        if (split($i, kv, "=") != 2) continue
        if (kv[2] ~ /^[0-9.]+$/ || kv[2] == "yes" || kv[2] == "NO") print r, kv[1], kv[2] } }'
}

# 1. The GPU test, and the host-region tests with pinned staging.
{
  run .gpu/run test_gpu "$work/test-gpu"
  for t in roundtrip dedup stall rounds errors; do run .gpu/run test_library $t "$work/test-$t"; done
} 2>&1 | tee "$out/tests.log"

# 2. 8 GiB of device memory: stall, restore (with where its time went), and
#    the driver's checkpoint; then what the machine allows a restore on the
#    same packs (restore_ceiling), side by side.
#    Round 1's logs keep their old names; later rounds' carry -rN.
r=1
while [ "$r" -le "$rounds" ]; do
  sfx=; [ "$r" -eq 1 ] || sfx=-r$r
  export CREST_TRACE=1
  run .gpu/run gpu_bench "$work/store" "$gib" >"$out/gpu_bench$sfx.log" 2>&1
  unset CREST_TRACE
  grep -v "restore thread" "$out/gpu_bench$sfx.log"
  .gpu/run casctl --store "$work/store" verify 2>&1 | tail -1 | tee -a "$out/gpu_bench$sfx.log"
  .gpu/run restore_ceiling "$work/store/packs" 1 8 16 2>&1 | tee "$out/ceiling$sfx.log"
  rm -rf "$work/store"
  figures "$r" "$out/gpu_bench$sfx.log" "$out/ceiling$sfx.log" >>"$out/library.dat"
  r=$((r + 1))
done

# 3. PyTorch on the GPU: killed, resumed in a fresh process, losses bit for bit.
export CREST_LIB="$PWD/.gpu/lib/libcrest.so" PYTHONUNBUFFERED=1
python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))' 2>&1 | tee "$out/train.log"
run python3 python/examples/train.py --mode check --device cuda --store "$work/train" \
    --steps 300 --every 25 --kill-at 190 --hidden 2048 --staging-mib 512 2>&1 | tee -a "$out/train.log"
grep -h RESULT "$out"/*.log
