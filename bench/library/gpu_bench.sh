#!/bin/sh
# gpu_bench.sh OUTDIR - library capture on the device machine, in one go.
#
# Build on the development machine first, then bundle (see ../../../shared/tools/gpu-bundle):
#   cmake -S . -B build && make -C build -j2
#   ../shared/tools/gpu-bundle .gpu build/tests/library/test_gpu build/tests/library/test_library \
#       build/bench/library/gpu_bench build/bench/library/restore_ceiling build/lib/libcrest.so \
#       build/cli/crest build/cli/casctl
# and run this from the repository root there, with .gpu carried:
#   sh bench/library/gpu_bench.sh "$OUT"
# Logs land in OUTDIR; RESULT lines are the figures for bench/RESULTS.md.
set -u
out=${1:-/tmp/crest-gpu-bench}
mkdir -p "$out"
work=/tmp/crest-gpu-bench-work
rm -rf "$work" && mkdir -p "$work"
run() { echo "== $*"; "$@"; echo "== exit $?"; }
{
  date -u '+%Y-%m-%d %H:%M UTC'
  nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max --format=csv,noheader
  echo "cpus $(nproc), $(free -g | awk '/Mem:/{print $2}') GiB RAM, kernel $(uname -r)"
} 2>&1 | tee "$out/machine.txt"

# 1. The GPU test, and the host-region tests with pinned staging.
{
  run .gpu/run test_gpu "$work/test-gpu"
  for t in roundtrip dedup stall rounds errors; do run .gpu/run test_library $t "$work/test-$t"; done
} 2>&1 | tee "$out/tests.log"

# 2. 8 GiB of device memory: stall, restore (with where its time went), and
#    the driver's checkpoint; then what the machine allows a restore on the
#    same packs (restore_ceiling), side by side.
export CREST_TRACE=1
run .gpu/run gpu_bench "$work/store" 8 >"$out/gpu_bench.log" 2>&1
unset CREST_TRACE
grep -v "restore thread" "$out/gpu_bench.log"
.gpu/run casctl --store "$work/store" verify 2>&1 | tail -1 | tee -a "$out/gpu_bench.log"
.gpu/run restore_ceiling "$work/store/packs" 1 8 16 2>&1 | tee "$out/ceiling.log"
rm -rf "$work/store"

# 3. PyTorch on the GPU: killed, resumed in a fresh process, losses bit for bit.
export CREST_LIB="$PWD/.gpu/lib/libcrest.so" PYTHONUNBUFFERED=1
python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))' 2>&1 | tee "$out/train.log"
run python3 python/examples/train.py --mode check --device cuda --store "$work/train" \
    --steps 300 --every 25 --kill-at 190 --hidden 2048 --staging-mib 512 2>&1 | tee -a "$out/train.log"
grep -h RESULT "$out"/*.log
