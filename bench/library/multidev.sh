#!/bin/sh
# multidev.sh OUTDIR [GIB [NGPU]] - several GPUs in one libcrest handle
# (issue 34) on the device machine, in one go: multidev_bench with GIB GiB
# (8) on GPU 0 alone beside GIB GiB on each of NGPU GPUs (all), a pool that
# holds the state and the default 1 GiB one, against the pinned copy
# ceiling of the same GPUs.
#
# Needs two GPUs or more (nvidia-h200-x2 and up); on one, multidev_bench
# refuses (exit 2). Build here, bundle, then one device call with .gpu
# carried:
#   cmake -S . -B build && make -C build -j2
#   scripts/gpu-check.sh --bundle       # .gpu/ holds multidev_bench
#   run(command='sh bench/library/multidev.sh "$OUT"', carry=[".gpu"], kind="nvidia-h200-x2")
# Logs land in OUTDIR: machine.txt (the GPUs and how they are linked),
# multidev.log (with CREST_TRACE=1: where each checkpoint's copies and each
# restore's time went), and multidev.dat, the RESULT lines as "name value"
# a line (numbers and yes/NO), for bench/RESULTS.md. The exit status is
# multidev_bench's: 0 when every restore was bit-exact.
set -u
# Stores here are made on first use (crest init and its refusals: tests/store/init.sh).
export CREST_INIT=1
out=${1:-/tmp/crest-multidev-bench}
gib=${2:-8}
ngpu=${3:-}
mkdir -p "$out"
work=/tmp/crest-multidev-work
rm -rf "$work"
{
  date -u '+%Y-%m-%d %H:%M UTC'
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max --format=csv,noheader
  nvidia-smi topo -m
  echo "cpus $(nproc), $(free -g | awk '/Mem:/{print $2}') GiB RAM, kernel $(uname -r)"
  .gpu/run crest --version | head -1
} 2>&1 | tee "$out/machine.txt"

# Each case's store is removed once measured: at 8 GiB on 8 GPUs the four
# would take 144 GiB. Every restore is checked word for word instead
# (gpu-check's gpu_multidev keeps its small stores and verifies them).
CREST_TRACE=1 .gpu/run multidev_bench "$work" "$gib" ${ngpu:+"$ngpu"} >"$out/multidev.log" 2>&1
rc=$?
grep -v "restore thread" "$out/multidev.log"
echo "== multidev_bench exit $rc"
rm -rf "$work"
{
  sed 's/^/# /' "$out/machine.txt"
  echo "# bench/library/multidev.sh: multidev_bench STORE $gib ${ngpu:-(all GPUs)}; exit $rc"
  grep -h '^RESULT' "$out/multidev.log" | awk '
    { for (i = 2; i <= NF; i++) {
        if (split($i, kv, "=") != 2) continue
        if (kv[2] ~ /^[0-9.]+$/ || kv[2] == "yes" || kv[2] == "NO") print kv[1], kv[2] } }'
} >"$out/multidev.dat"
exit $rc
