#!/bin/bash
# Sets crest up on a fresh Debian 12 machine and runs its main job:
#   1. Debian's packages crest builds and tests with (only those missing);
#   2. criu 4.2 or later in a private prefix (scripts/install-criu.sh:
#      Debian 12's criu 3.17 fails on current kernels, and 4.1.1 cannot dump
#      an AF_INET socket on Linux >= 6.16; the system's libc is left alone).
#      A .deps/criu that holds an older criu (4.1.1) is upgraded in place;
#   3. a release build in build/;
#   4. `crest demo` on a store in the working directory (./crest-store).
# Options: --deps-only (steps 1-2), --no-demo (steps 1-3). Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=all
case "${1:-}" in
	--deps-only) mode=deps ;;
	--no-demo) mode=build ;;
	"") ;;
	*) echo "usage: scripts/setup.sh [--deps-only | --no-demo]" >&2; exit 2 ;;
esac
if [ "$(id -u)" != 0 ]; then
	echo "setup.sh: run as root (it installs packages, and crest demo checkpoints a process with CRIU)" >&2
	exit 1
fi

# Build: compiler, CMake, and the libraries crest links. Tests: lz4 (the
# benchmark's baseline), setpriv and pgrep, python3 with Debian's PyTorch
# for the Python binding's tests, clang and its libFuzzer runtime for the
# fuzz targets (tests/fuzz); gnuplot-nox draws the --plot pictures.
# Ceph's monitor, OSD and manager, its command-line clients and librados'
# headers: the tests start a one-node cluster of their own
# (scripts/ceph-cluster.sh) for the store's coming rados backend (issue 35);
# no radosgw, nothing here speaks S3.
pkgs=(gcc make cmake pkg-config librocksdb-dev liblz4-dev libssl-dev liburing-dev
      lz4 util-linux procps python3 python3-torch clang libclang-rt-14-dev man-db groff-base
      gnuplot-nox gdb ceph-mon ceph-osd ceph-mgr ceph-common librados-dev)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "=== installing: ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	# Once, before any look-up: a fresh machine's package lists may be
	# empty or stale, and a stale list names versions no longer served.
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "=== criu 4.2"
scripts/install-criu.sh
[ "$mode" = deps ] && exit 0

echo "=== building crest in build/"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
make -C build -j"$(nproc)" --no-print-directory >/dev/null
[ "$mode" = build ] && exit 0

echo "=== crest demo"
exec build/cli/crest demo
