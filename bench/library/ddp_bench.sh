#!/bin/sh
# ddp_bench.sh OUT [GIB_PER_RANK] [WORLDS] - issue 34, item 6: crest's job
# checkpoint beside PyTorch DCP's async_save, a DDP job under torchrun, one
# process a GPU, in one invocation: world 1 first (the 1-rank figures the
# others are divided by), then each world of WORLDS ("1 2"; "1 2 4" on a
# 4-GPU machine), GIB_PER_RANK (4) GiB of fp32 parameters and AdamW moments
# a rank. Each launch is bench/library/ddp_bench.py (its docstring says what
# is timed and how) on a fresh crest store and a fresh DCP directory, both
# under WORK, on one medium: $DDP_BENCH_WORK, else /dev/shm/crest-ddp-bench
# (tmpfs: neither side is timed against a disk), else /tmp/crest-ddp-bench
# when /dev/shm has too little room; the run says which. After each launch,
# `casctl verify` of its store; then the directory is removed.
#
# On the device machine, after a build and bundle here
#   cmake -S . -B build && make -C build -j2 && scripts/gpu-check.sh --bundle
# one call, .gpu carried (binaries and libcrest from .gpu/: CREST_LIB and
# casctl are set from it):
#   bash bench/library/ddp_bench.sh "$OUT/ddp" 4 "1 2"      (nvidia-h200-x2)
#   bash bench/library/ddp_bench.sh "$OUT/ddp" 4 "1 2 4"    (nvidia-h200-x4)
# Without a GPU (nvidia-smi lists none, or DDP_BENCH_DEVICE=cpu) the ranks
# run on the CPU with gloo, crest with host regions, and DCP where this
# torch has async_save: for checking the bench, not for figures.
#
# Logs in OUT: machine.txt, wN.log (the launch), wN.json (its figures),
# summary.txt (the table and the ratios, also printed). Exit 0 when every
# launch ran, every store verified and every restore check passed.
# Env: PY (python3: the one with torch), DDP_BENCH_LIMIT (seconds a launch
# may take, 300), BUILD (build/ when there is no .gpu/), DDP_BENCH_STAGING_GIB
# (crest's staging pool a rank; default: the state rounded up to 256 MiB).
set -u
usage() { echo "usage: ddp_bench.sh OUT [GIB_PER_RANK] [WORLDS]: $1" >&2; exit 2; }
if [ $# -lt 1 ] || [ $# -gt 3 ]; then usage "one to three arguments"; fi
out=$1
gib=${2:-4}
worlds=${3:-1 2}
py=${PY:-python3}
limit=${DDP_BENCH_LIMIT:-300}
if ! echo "$gib" | grep -Eq '^([0-9]+\.?[0-9]*|\.[0-9]+)$' || ! awk -v g="$gib" 'BEGIN { exit !(g > 0) }'; then
	usage "GIB_PER_RANK '$gib' is not a number > 0"
fi
for w in $worlds; do
	echo "$w" | grep -Eq '^[1-9][0-9]*$' || usage "world '$w' of WORLDS '$worlds' is not an integer >= 1"
done
echo "$limit" | grep -Eq '^[1-9][0-9]*$' || usage "DDP_BENCH_LIMIT '$limit' is not a number of seconds"
# World 1 first, whatever the order given: every ratio is to it.
list=1
for w in $worlds; do case " $list " in *" $w "*) ;; *) list="$list $w" ;; esac; done
cd "$(dirname "$0")/../.." || exit 1
root=$PWD

# Where crest comes from: the bundle (the device machine), else a build.
if [ -x .gpu/run ]; then
	export CREST_LIB="${CREST_LIB:-$root/.gpu/lib/libcrest.so}"
	casctl="$root/.gpu/run casctl"
	commit="$(cat .gpu/COMMIT 2>/dev/null || echo '?') (.gpu/COMMIT)"
else
	build=${BUILD:-build}
	export CREST_LIB="${CREST_LIB:-$root/$build/lib/libcrest.so}"
	casctl=$root/$build/cli/casctl
	commit="$(git rev-parse --short HEAD 2>/dev/null || echo '?') (build/)"
fi
[ -f "$CREST_LIB" ] || usage "no libcrest at $CREST_LIB: build (and on the device, bundle) first"
$casctl --help >/dev/null 2>&1 || usage "casctl does not run: $casctl"
"$py" -c 'import torch, torch.distributed.run' 2>/dev/null || usage "$py has no torch with torch.distributed"

ngpu=0
if command -v nvidia-smi >/dev/null 2>&1; then
	ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
fi
device=${DDP_BENCH_DEVICE:-}
[ -n "$device" ] || { [ "$ngpu" -gt 0 ] && device=cuda || device=cpu; }
case $device in cuda | cpu) ;; *) usage "DDP_BENCH_DEVICE '$device' is neither cuda nor cpu" ;; esac
maxw=0
for w in $list; do [ "$w" -gt "$maxw" ] && maxw=$w; done
[ "$device" = cpu ] || [ "$maxw" -le "$ngpu" ] || usage "world $maxw wants $maxw GPUs, this machine has $ngpu"

# The medium: both sides on the same one. Room: crest's two checkpoints
# and DCP's, with room for DCP to write every rank's copy (it should write
# one replica), and a quarter more.
need_kb=$(awk -v g="$gib" -v w="$maxw" 'BEGIN { printf "%d", (2 + 2 * w) * g * 1.25 * 1048576 }')
work=${DDP_BENCH_WORK:-}
if [ -z "$work" ]; then
	work=/tmp/crest-ddp-bench
	shm_kb=$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 { print $4 }')
	if [ -n "$shm_kb" ] && [ "$shm_kb" -ge "$need_kb" ]; then
		work=/dev/shm/crest-ddp-bench
	else
		echo "ddp_bench: /dev/shm has ${shm_kb:-no} KiB free, under the $need_kb KiB wanted: both go to /tmp"
	fi
fi
mkdir -p "$out" || exit 1
rm -rf "$work" && mkdir -p "$work" || exit 1

# The same thread settings in every launch: torchrun sets OMP_NUM_THREADS=1
# for more than one rank only. USE_LIBUV=0: torchrun's store without libuv,
# as on this project's earlier runs of PyTorch 2.11 (shared notes).
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" USE_LIBUV=0 PYTHONUNBUFFERED=1
# Debian's torch 1.13 under Python 3.11 cannot parse torchrun's default
# --redirects (tests/library/test_python_ddp.py).
old_torch=$("$py" -c 'import torch; print(int(torch.__version__.split(".")[0]) < 2)')
{
	date -u '+%Y-%m-%d %H:%M UTC'
	[ "$ngpu" -gt 0 ] && nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
	[ "$ngpu" -gt 1 ] && nvidia-smi topo -m
	echo "cpus $(getconf _NPROCESSORS_ONLN), $(free -g | awk '/Mem:/{print $2}') GiB RAM, kernel $(uname -r)"
	"$py" -c 'import sys, torch
nccl = ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else "none"
print("python %s, torch %s, NCCL %s" % (sys.version.split()[0], torch.__version__, nccl))'
	echo "crest commit $commit, libcrest $CREST_LIB; this bench from $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD -- bench/library/ddp_bench.py bench/library/ddp_bench.sh python/crest 2>/dev/null || echo ' (+ changes)')"
	echo "device $device, worlds $list, $gib GiB a rank"
	echo "work $work ($(stat -f -c %T "$work"), $(df -Ph "$work" | awk 'NR == 2 { print $4 }') free): crest store and DCP directory both there"
} 2>&1 | tee "$out/machine.txt"

rc=0
jsons=
for w in $list; do
	d=$work/w$w
	rm -rf "$d" && mkdir -p "$d/dcp"
	sync   # the last launch's writes are not this one's
	echo "== world $w: torchrun --nproc_per_node $w ($(date -u +%T))"
	extra=
	[ "$old_torch" = True ] && extra="--redirects 2 --tee 2 --log_dir $d/torchrun"
	# shellcheck disable=SC2086
	timeout -k 10 "$limit" "$py" -m torch.distributed.run --standalone --nnodes 1 --nproc_per_node "$w" \
		--max_restarts 0 $extra bench/library/ddp_bench.py --store "$d/store" --dcp "$d/dcp" --gib "$gib" \
		--device "$device" --casctl "$casctl" --json "$out/w$w.json" \
		${DDP_BENCH_STAGING_GIB:+--staging-gib "$DDP_BENCH_STAGING_GIB"} 2>&1 | tee "$out/w$w.log"
	# The pipeline's status is tee's: the launch's is read from its log.
	if [ ! -s "$out/w$w.json" ] || ! grep -q '^RESULT world' "$out/w$w.log"; then
		echo "== world $w: FAILED (no figures; the log above says why, or it ran past $limit s)"
		rc=1
	else
		jsons="$jsons $out/w$w.json"
		grep -q 'FAIL' "$out/w$w.log" && rc=1
	fi
	if [ -d "$d/store" ]; then
		v=$($casctl --store "$d/store" verify 2>&1)
		vrc=$?
		echo "== world $w: casctl verify exit $vrc: $(echo "$v" | tail -1)" | tee -a "$out/w$w.log"
		[ $vrc = 0 ] || rc=1
	fi
	rm -rf "$d"
done
rm -rf "$work"
if [ -n "$jsons" ]; then
	# shellcheck disable=SC2086
	"$py" bench/library/ddp_bench.py --summary $jsons >"$out/summary.txt" 2>&1 || rc=1
	cat "$out/summary.txt"
fi
echo "== ddp_bench.sh exit $rc"
exit $rc
