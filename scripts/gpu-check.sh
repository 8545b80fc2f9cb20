#!/bin/bash
# gpu-check.sh - every GPU path of crest on a GPU machine, in one run (issue 9).
#
#   scripts/gpu-check.sh             run the checks (from the repository root or anywhere)
#   scripts/gpu-check.sh --bundle    here, on the build machine: make .gpu/ for a GPU machine
#
# One line per check, "PASS name (details)", "FAIL name: reason",
# "SKIP name: reason" or "KNOWN name: cause" (a failure an open issue
# reports), then a summary line; the exit status is 1 when any
# check failed. Checks:
#   test_gpu    tests/library/test_gpu: device regions, rounds, restore, errors
#   gpu_uvm     tests/library/test_uvm: a CUDA managed region, its pages on
#               the host and the GPU, checkpointed twice and restored bit-exact
#   gpu_multi   tests/library/gpu_multi: five device regions and a host region,
#               six checkpoints with random changes, every snapshot restored
#               and compared by SHA-256; tiny extent-list pieces (CREST_PIECE_*);
#               on a machine with several GPUs the device regions are spread
#               over them, at least two used (so are gpu_cpuhash's, gpu_held's
#               and gpu_pitched's)
#   gpusha      tests/gpu/test_gpusha: the GPU SHA-256 kernels against OpenSSL,
#               the changed-chunk list against a model, packing changed chunks
#   gpu_settle  tests/gpu/test_settle_gpu: the guards' settle with a zombie CUDA
#               process beside a live one; prints what the driver says of both
#   gpu_multi's checkpoints hash device regions on the GPU and copy only the
#               chunks that changed (CREST_TRACE must show it did, at least once)
#   gpu_shacmp  gpu_multi with CREST_GPU_WIDE=0: changed chunks found by
#               comparing every chunk's SHA-256 on the GPU, not the wide
#               hash (gpu_multi's trace must show the wide hash found them)
#   gpu_cpuhash gpu_multi with CREST_GPU_HASH=0: every region copied whole and
#               hashed by the CPU, as in a build without the kernels
#   gpu_held    gpu_multi with the store let go after every checkpoint
#               (CREST_STORE_IDLE_MS=0): each checkpoint is held in host
#               memory and ingested by the session's keeper, as while gc runs
#   gpu_pitched gpu_multi through a 1 GiB staging pool: restore windows of
#               whole segments, read as records whole into pitched slots and
#               copied to the device by one pitched copy (restore/gpu.c);
#               CREST_TRACE must show pitched windows
#   gpu_cache   bench/library/cache_bench all: a job with a host cache
#               (crest_options.host_cache in /dev/shm) checkpoints 2 GiB twice
#               and ends as a crash would; a new process restores from the
#               cache (checked on the GPU) and from the store, then again
#               with one byte of the cache flipped: bit-exact every time, and
#               the flipped cache not used
#   gpu_cache_full  the same with the cache on a 64 MiB tmpfs: the job lives
#               (no SIGBUS), the restore comes from the store, bit-exact
#   gpu_multidev  bench/library/multidev_bench at 1 GiB a GPU: GPU 0 alone
#               beside every GPU (up to 4) in one handle (issue 34), through a
#               pool that holds the state and through the default 1 GiB one;
#               every restore checked word for word; the stall and restore
#               ratios (N GPUs over 1) and the pinned copy ceiling in the
#               message, reported, not judged (two GPUs only)
#   demo        crest demo --gpu: a CUDA job of $GPU_MIB MiB (1024) checkpointed
#               4 times while it runs, killed, restored from checkpoint 3; its
#               output must equal an uninterrupted run's
#   demo_nobp   the same with CRIU_FAULT=130: criu without hardware
#               breakpoints, as crest runs it where they do not fire
#   gpu_move    a CUDA job restored onto GPU 1 (two GPUs only)
#   gpu_clone   a CUDA job under crest run (its own pid and mount namespaces
#               and /proc), cloned beside itself: both outputs equal an
#               uninterrupted run's; the copy's snapshot shares what it did
#               not change
#   gpu_kill    crest checkpoint of a CUDA job killed -9 three times: twice
#               while criu dumps it, once at any moment: the job runs on (the guard gives its driver state
#               back), its output equal to an uninterrupted run's
#   gpu_restore_kill  crest restore of a CUDA job killed -9 after CRIU
#               brought it back: once exactly before the driver's restore
#               (the guard must restore and unlock its GPU state), once at
#               a random moment; each output equals an uninterrupted run's
#   multigpu_refuse  a PyTorch process with layers on cuda:0 and cuda:1,
#               activations moved device to device (peer access), which the
#               driver cannot restore: crest checkpoint must refuse it before
#               freezing it, its output equal to an uninterrupted run's
#               (two GPUs only); the log shows its /dev/nvidia* maps and fds
#   ddp_gloo    a 2-rank DDP job (gloo over 127.0.0.1, one GPU a rank)
#               checkpointed by its launcher's pid with --kill and restored:
#               each rank's losses equal an uninterrupted run's (two GPUs only).
#               A rank PyTorch gave a context on the other GPU too is refused
#               first (the job must run on), then taken with
#               --multi-gpu-process; that failing is KNOWN (issue 33)
#   ddp_nccl    the same with NCCL, NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1,
#               restored with the GPUs swapped (--gpu-map): each rank seen
#               on the other GPU afterwards (nvidia-smi), its losses the same
#   nccl_p2p_refuse  the same with NCCL's defaults (P2P): refused before the
#               freeze, naming NCCL_P2P_DISABLE=1; the job runs on to its end
#   nccl_teardown  NCCL's defaults again, in a job that destroys its process
#               group at a quiet point: checkpointed with --kill, restored,
#               its group rebuilt; losses equal an uninterrupted run's
#   peer_shim   multigpu_refuse's process under crest run --cuda-shim: its
#               peer access disabled around the checkpoint, taken, restored
#   nccl_shim   NCCL's defaults, all GPUs (up to 4), under crest run
#               --cuda-shim: checkpointed live and with --kill, restored;
#               losses equal an uninterrupted run's; the shim's step cost
#   infer_server  a PyTorch HTTP server with its model on the GPU,
#               checkpointed (--kill --tcp-close) while a client queries it,
#               restored: the same answers, byte for byte, on the same port
#   train       python/examples/train.py --mode check --device cuda: PyTorch
#               training SIGKILLed, resumed in a fresh process, losses bit for bit
#   train_split the same with --device split: the model's first layers on
#               cuda:0, the rest on cuda:1, one Checkpointer for both (two GPUs)
#   lib_ddp     tests/library/test_python_ddp.py on GPUs: python/examples/
#               ddp_train.py, a DDP job of 2 ranks under torchrun, NCCL, one
#               GPU a rank, each checkpointing ~200 MiB through libcrest as one
#               job; a rank SIGKILLed in the middle of a job checkpoint: only
#               whole job snapshots listed, each rank of each restorable, the
#               relaunch's losses bit for bit an uninterrupted run's, the
#               replicas stored once (two GPUs; no CRIU, no root)
#   lib_fsdp    the same with the model sharded by FSDP2's fully_shard: each
#               rank saves and restores its own shards (DTensors' local
#               tensors), 1/2 of the state, each stored once (two GPUs)
#   bench_gpu   crest bench restore --to gpu on gpu_multi's store: GB/s against
#               the pinned+H2D ceiling (and a plot, where gnuplot is installed)
#   verify:X    casctl verify of each store the checks above left
# Without a GPU (nvidia-smi lists none) the GPU checks say "SKIP ...: no GPU
# here"; test_gpu and gpu_multi still run, to show that they skip.
#
# Binaries come from .gpu/ (a bundle made by --bundle) when it is there, else
# from build/ (a normal build, scripts/setup.sh); criu from .gpu/criu/criu,
# else wherever crest finds it (.deps/criu, $CREST_CRIU). Logs go to
# $OUT/gpu-check/ when $OUT is set (the device tool's output folder), else to
# $GPU_CHECK_WORK/logs; the stores to $GPU_CHECK_WORK (/tmp/crest-gpu-check).
# GPU_CHECK_ONLY="NAME ..." runs only the checks named (e.g. to see one fail
# with a fix reverted).
#
# For the lead, two steps. Here, in the checkout's root (nvcc must be here,
# so that build/cli/crest-workload-gpu exists; criu 4 in .deps/criu):
#   cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo && make -C build -j2
#   scripts/gpu-check.sh --bundle        # = rm -rf .gpu; ../shared/tools/gpu-bundle .gpu
#                                        #   build/cli/{crest,casctl,crest-workload-gpu}
#                                        #   build/tests/library/{test_gpu,gpu_multi,test_uvm}
#                                        #   build/lib/libcrest.so; criu prefix -> .gpu/criu
# (GPU_BUNDLE=PATH names the gpu-bundle tool when it is not ../shared/tools
# or ../../shared/tools.) Then one device call:
#   run(command="bash scripts/gpu-check.sh", carry=[".gpu"], timeout_s=600)
# Expected: about 3 minutes on an H100 (estimated from bench/RESULTS.md, not yet
# measured). Each check has its own time limit, so a hang fails that check only.
set -uo pipefail
# Stores here are made on first use (crest init and its refusals: tests/store/init.sh).
export CREST_INIT=1
cd "$(dirname "$0")/.."
ROOT=$PWD

if [ "${1:-}" = --bundle ]; then
	set -e
	tool=${GPU_BUNDLE:-}
	if [ -z "$tool" ]; then
		for t in ../shared/tools/gpu-bundle ../../shared/tools/gpu-bundle; do
			[ -x "$t" ] && { tool=$t; break; }
		done
	fi
	if [ -z "$tool" ] || [ ! -x "$tool" ]; then echo "gpu-check: no gpu-bundle tool found; set GPU_BUNDLE" >&2; exit 1; fi
	files=(build/cli/crest build/cli/casctl build/cli/crest-workload-gpu build/tests/library/test_gpu
	       build/tests/library/gpu_multi build/tests/library/test_uvm build/tests/gpu/test_gpusha
	       build/tests/gpu/test_settle_gpu build/bench/library/cache_bench build/bench/library/multidev_bench
	       build/bench/transparent/crest-bare-ckpt build/bench/transparent/crest-dump-sink build/cli/crest-workload
	       build/bench/library/gpu_bench
	       build/lib/libcrest.so build/gpu/libcrest-shim.so)
	for f in "${files[@]}"; do
		[ -e "$f" ] || { echo "gpu-check: $f is missing: build first (crest-workload-gpu needs nvcc)" >&2; exit 1; }
	done
	[ -x .deps/criu/criu ] || { echo "gpu-check: .deps/criu/criu is missing: run scripts/install-criu.sh" >&2; exit 1; }
	rm -rf .gpu
	"$tool" .gpu "${files[@]}"
	# Without their debug sections (symbols stay, so backtraces still name
	# functions): the device call carries the tree and .gpu in 64 MiB.
	for f in "${files[@]}"; do
		b=.gpu/bin/${f##*/}
		[ -f "$b" ] || b=.gpu/lib/${f##*/}
		[ -f "$b" ] && strip --strip-debug "$b"
	done
	# The criu prefix without apt's download cache; its links are relative
	# (lib -> usr/lib) and travel as links.
	mkdir -p .gpu/criu
	(cd .deps/criu && tar --exclude=./.apt -cf - .) | tar -xf - -C .gpu/criu
	# The commit the binaries were built from: the tree that travels with
	# them need not have the same .git.
	{ git rev-parse --short HEAD; git diff --quiet HEAD || echo "(+ uncommitted changes)"; } | paste -sd' ' >.gpu/COMMIT
	.gpu/criu/criu --version | head -1
	du -sh .gpu | awk '{print "gpu-check: .gpu is " $1 " (the device call carries at most 64 MiB with the tree)"}'
	exit 0
fi
[ $# -eq 0 ] || { echo "usage: scripts/gpu-check.sh [--bundle]" >&2; exit 2; }

WORK=${GPU_CHECK_WORK:-/tmp/crest-gpu-check}
LOGS=${OUT:+$OUT/gpu-check}
LOGS=${LOGS:-$WORK/logs}
GPU_MIB=${GPU_MIB:-1024}
rm -rf "$WORK"
mkdir -p "$WORK" "$LOGS"
T0=$SECONDS

# Where the programs are.
if [ -x .gpu/run ]; then
	FROM=".gpu/ (bundle)"
	bin() { echo "$ROOT/.gpu/bin/$1"; }
	RUN=("$ROOT/.gpu/run")   # sets LD_LIBRARY_PATH to the bundle's libraries
	LIBCREST=$ROOT/.gpu/lib/libcrest.so
	[ -x .gpu/criu/criu ] && export CREST_CRIU=$ROOT/.gpu/criu/criu
else
	FROM="build/"
	declare -A where=([crest]=build/cli/crest [casctl]=build/cli/casctl
		[crest-workload-gpu]=build/cli/crest-workload-gpu
		[test_gpu]=build/tests/library/test_gpu [gpu_multi]=build/tests/library/gpu_multi
		[test_uvm]=build/tests/library/test_uvm
		[test_gpusha]=build/tests/gpu/test_gpusha [test_settle_gpu]=build/tests/gpu/test_settle_gpu
		[cache_bench]=build/bench/library/cache_bench [multidev_bench]=build/bench/library/multidev_bench)
	bin() { echo "$ROOT/${where[$1]}"; }
	RUN=()
	LIBCREST=$ROOT/build/lib/libcrest.so
fi
# x PROGRAM ARGS...: runs one of crest's programs; "${RUN[@]}" "$(bin PROGRAM)"
# where a command line is needed (under timeout).
x() { local p; p=$(bin "$1"); shift; "${RUN[@]}" "$p" "$@"; }
# cmd_file PROGRAM: a file that runs PROGRAM as x does, for a test that is
# given a program to run (a bundle's program needs .gpu/run's library path,
# which the test's python must not get).
cmd_file() {
	[ ${#RUN[@]} -eq 0 ] && { bin "$1"; return; }
	mkdir -p "$WORK/cmd"
	printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "${RUN[0]}" "$(bin "$1")" >"$WORK/cmd/$1"
	chmod +x "$WORK/cmd/$1"
	echo "$WORK/cmd/$1"
}

PASSED=0 FAILED=0 SKIPPED=0
pass() { echo "PASS $1 ($2)"; PASSED=$((PASSED + 1)); }
skip() { echo "SKIP $1: $2"; SKIPPED=$((SKIPPED + 1)); }
# A failure already known and reported in an open issue, with its cause:
# shown on every run, not counted as passed, and not failing the run.
KNOWN=0
known() { echo "KNOWN $1: $2"; KNOWN=$((KNOWN + 1)); }
# fail NAME REASON [LOG]: the log's last lines follow, indented, to read the cause.
fail() {
	echo "FAIL $1: $2"
	FAILED=$((FAILED + 1))
	[ -n "${3:-}" ] && [ -s "$3" ] && tail -n 15 "$3" | sed 's/^/    | /'
	return 0
}
# wanted NAME: 0 unless GPU_CHECK_ONLY lists checks and NAME is not one of
# them (a revert check reruns one check, not all).
wanted() { [ -z "${GPU_CHECK_ONLY:-}" ] || [[ " $GPU_CHECK_ONLY " == *" $1 "* ]]; }
# A program's path, or "" when it is not there.
have() { local p; p=$(bin "$1"); [ -f "$p" ] && [ -x "$p" ] && echo "$p"; }
# cuda_ready NAME WHY: 0 when a check of a CUDA job under CRIU can run (a
# GPU, root, the job built); else it says why (skip, or fail) and is 1.
cuda_ready() {
	if ! wanted "$1"; then
		:
	elif [ $GPU = 0 ]; then
		skip "$1" "no GPU here"
	elif [ "$(id -u)" != 0 ]; then
		skip "$1" "$2"
	elif [ -z "$(have crest-workload-gpu)" ]; then
		fail "$1" "crest-workload-gpu was not built"
	else
		return 0
	fi
	return 1
}
# runlog NAME SECONDS CMD...: runs CMD with its output in $LOGS/NAME.log;
# sets RC (124: timed out) and DT (seconds).
runlog() {
	local name=$1 limit=$2 t=$SECONDS
	shift 2
	timeout -k 10 "$limit" "$@" >"$LOGS/$name.log" 2>&1
	RC=$?
	DT=$((SECONDS - t))
}

# The machine, for the log.
GPU=0
# (grep reads all of the list: grep -q would stop at the first line, and
# nvidia-smi, killed by SIGPIPE writing the next, fail the pipeline.)
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep '^GPU ' >/dev/null; then
	GPU=1
fi
# How many: the checks of several GPUs skip on one.
ngpu=0
[ $GPU = 1 ] && ngpu=$(nvidia-smi -L | grep -c '^GPU ')
{
	echo "gpu-check: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cpus, $(free -g | awk '/Mem:/{print $2}') GiB RAM," \
		"kernel $(uname -r), binaries from $FROM, commit $( if [ "$FROM" = ".gpu/ (bundle)" ] && [ -f .gpu/COMMIT ]; then cat .gpu/COMMIT; else git rev-parse --short HEAD 2>/dev/null || echo '?'; fi)"
	if [ $GPU = 1 ]; then
		nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sed 's/^/gpu-check: gpu: /'
	else
		echo "gpu-check: no GPU here (nvidia-smi lists none)"
	fi
	[ -z "${GPU_CHECK_ONLY:-}" ] || echo "gpu-check: only $GPU_CHECK_ONLY (GPU_CHECK_ONLY)"
} | tee "$LOGS/machine.txt"

# A library test program: pass on 0, skip on 77 (with its reason), else fail.
# $DETAIL picks the log line for the details; $EXTRA, a function, may add to
# them (its output) or fail the check (its status).
lib_check() {  # lib_check NAME STORE LIMIT PROGRAM ARGS...
	local name=$1 store=$2 limit=$3 prog=$4
	shift 4
	wanted "$name" || return
	if [ -z "$(have "$prog")" ]; then
		fail "$name" "$prog was not built ($(bin "$prog") is missing)"
		return
	fi
	runlog "$name" "$limit" "${RUN[@]}" "$(bin "$prog")" "$@"
	local log=$LOGS/$name.log more=""
	case $RC in
	0)
		[ -d "$store" ] && STORES+=("$name=$store")   # (test_gpusha makes none)
		if [ -n "${EXTRA:-}" ] && ! more=$("$EXTRA" "$store" "$log"); then
			fail "$name" "$more" "$log"
			return
		fi
		pass "$name" "$(grep -E "$DETAIL" "$log" | tail -1 | sed 's/^[a-z_]*: //')$more, ${DT} s"
		;;
	77)
		local why
		why=$(sed -n 's/^SKIP: //p' "$log" | head -1)
		if [ $GPU = 1 ]; then
			fail "$name" "skipped although nvidia-smi lists a GPU: $why" "$log"
		else
			case $why in "no GPU here"*) skip "$name" "$why" ;; *) skip "$name" "no GPU here ($why)" ;; esac
		fi
		;;
	124) fail "$name" "timed out after $limit s" "$log" ;;
	*)
		[ -d "$store" ] && STORES+=("$name=$store")
		fail "$name" "exit $RC: $(grep -E '^FAIL' "$log" | head -1)" "$log"
		;;
	esac
}

# gpu_multi's pieces: tiny pieces must have made hundreds of them.
multi_extra() {  # multi_extra STORE LOG
	local pieces seed
	pieces=$(x casctl --store "$1" --json stats 2>/dev/null | sed -n 's/.*"pieces": \([0-9]*\).*/\1/p')
	seed=$(sed -n 's/.*CREST_TEST_SEED=\([0-9]*\).*/\1/p' "$2" | head -1)
	if [ "${pieces:-0}" -le 100 ]; then
		echo "the store holds ${pieces:-no} extent-list pieces; CREST_PIECE_* should have made hundreds"
		return 1
	fi
	echo "; seed $seed, $pieces extent-list pieces"
}

# gpu_multi with GPU hashing: its trace (CREST_TRACE) must show checkpoints
# that copied only the changed chunks of device regions. Its second one does,
# whatever the seed (tests/library/gpu_multi.c says why). Its first copies
# them whole, with the ids the GPU computed, which the engine trusts: casctl
# verify (below) hashes every chunk of the store again with OpenSSL.
hash_extra() {  # hash_extra STORE LOG
	local more n sparse whole why
	more=$(multi_extra "$@") || { echo "$more"; return 1; }
	n=$(grep -c 'crest trace: crest_checkpoint' "$2")
	sparse=$(grep 'crest trace: crest_checkpoint' "$2" | sed -n 's/.*, \([0-9]*\) of them copied as changed chunks only.*/\1/p' |
		awk '$1 > 0' | wc -l)
	whole=$(grep 'crest trace: crest_checkpoint' "$2" | sed -n 's/.* \([0-9]*\) whole with their ids.*/\1/p' |
		awk '$1 > 0' | wc -l)
	why=$(grep -o 'no GPU hashing: .*' "$2" | head -1)
	if [ "$sparse" -eq 0 ]; then
		echo "none of $n checkpoints copied changed chunks only${why:+ ($why)}"
		return 1
	fi
	if [ "$whole" -eq 0 ]; then
		echo "none of $n checkpoints copied a region whole with its ids${why:+ ($why)}"
		return 1
	fi
	# How the changed chunks were found: by the wide hash (the default),
	# or by SHA-256 ids where CREST_GPU_WIDE=0 says so.
	wide=$(grep 'crest trace: crest_checkpoint' "$2" | sed -n 's/.*(\([0-9]*\) found by the wide hash).*/\1/p' |
		awk '$1 > 0' | wc -l)
	if [ "${CREST_GPU_WIDE:-1}" = 0 ] && [ "$wide" -ne 0 ]; then
		echo "CREST_GPU_WIDE=0, yet $wide of $n checkpoints found changed chunks by the wide hash"
		return 1
	elif [ "${CREST_GPU_WIDE:-1}" != 0 ] && [ "$wide" -eq 0 ]; then
		echo "none of $n checkpoints found changed chunks by the wide hash"
		return 1
	fi
	echo "$more; $sparse of $n checkpoints copied changed chunks only ($wide by the wide hash), $whole copied regions whole with their ids"
}

STORES=()

# 1. The GPU library test.
DETAIL='^gpu: restored' CREST_TEST_KEEP_STORE=1 lib_check test_gpu "$WORK/test_gpu" 120 test_gpu "$WORK/test_gpu"

# 1a. CUDA managed memory as a region (issue 34).
DETAIL='^test_uvm: ok' lib_check gpu_uvm "$WORK/uvm" 120 test_uvm "$WORK/uvm"

# 1b. The GPU SHA-256 kernels against OpenSSL.
DETAIL='GB/s' lib_check gpusha "$WORK/gpusha" 180 test_gpusha

# 1b. The guards' settle with a zombie CUDA process beside a live one.
DETAIL='settled in' lib_check gpu_settle "$WORK/settle" 60 test_settle_gpu

# 2. Six snapshots of several device regions, every one restored; tiny pieces.
# Device regions are hashed on the GPU, and only changed chunks copied.
CREST_TRACE=1 CREST_PIECE_MIN_EXTENTS=4 CREST_PIECE_SPAN=65536 DETAIL='^gpu_multi: ok' EXTRA=hash_extra \
	lib_check gpu_multi "$WORK/multi" 180 gpu_multi "$WORK/multi" 256

# 2-. The same with the changed chunks found by comparing SHA-256 ids, not
# by the wide hash (CREST_GPU_WIDE=0; the path chunks over 4 KiB take).
CREST_GPU_WIDE=0 CREST_TRACE=1 CREST_PIECE_MIN_EXTENTS=4 CREST_PIECE_SPAN=65536 DETAIL='^gpu_multi: ok' \
	EXTRA=hash_extra lib_check gpu_shacmp "$WORK/shacmp" 180 gpu_multi "$WORK/shacmp" 256

# 2a. The same copied whole and hashed by the CPU.
CREST_GPU_HASH=0 DETAIL='^gpu_multi: ok' lib_check gpu_cpuhash "$WORK/cpuhash" 180 gpu_multi "$WORK/cpuhash" 256

# 2b. The same with every checkpoint held in host memory first (the store let
# go in between, as when gc or another writer waits for it).
CREST_STORE_IDLE_MS=0 DETAIL='^gpu_multi: ok' lib_check gpu_held "$WORK/held" 180 gpu_multi "$WORK/held" 256

# 2c. The same through a pool large enough for restore windows that are
# pitched: the pool is split into two windows a restore thread (one a
# core), and windows of 8 MiB or less never are. 1 GiB on 32 cores gives
# 16 MiB windows; on 64 cores it gave 8 MiB and no window pitched
# (4x H200, 2026-11-28), so 32 MiB a core, 1 GiB at least.
pitched_extra() {  # pitched_extra STORE LOG
	local more p
	more=$(multi_extra "$@") || { echo "$more"; return 1; }
	p=$(sed -n 's/.* \([0-9]*\) windows pitched;.*/\1/p' "$2" | awk '{ s += $1 } END { print s + 0 }')
	if [ "$p" -eq 0 ]; then
		echo "no restore window was pitched"
		return 1
	fi
	echo "$more; $p restore windows pitched"
}
pitch_mib=$(( $(nproc) * 32 > 1024 ? $(nproc) * 32 : 1024 ))
CREST_TRACE=1 GPU_MULTI_STAGING_MIB=$pitch_mib CREST_PIECE_MIN_EXTENTS=4 CREST_PIECE_SPAN=65536 DETAIL='^gpu_multi: ok' \
	EXTRA=pitched_extra lib_check gpu_pitched "$WORK/pitched" 180 gpu_multi "$WORK/pitched" 256

# 2d. The host cache: restore after a crash from host memory, checked.
HC=$(mktemp -d /dev/shm/crest-gpu-check.XXXXXX 2>/dev/null || mktemp -d "$WORK/hc.XXXXXX")
DETAIL='^cache_bench: ok' lib_check gpu_cache "$WORK/cache" 240 cache_bench all "$WORK/cache" "$HC" 2 "$RANDOM"
rm -rf "$HC"
# 2e. The same with the cache's tmpfs far too small (64 MiB for 1 GiB): the
# job must live (a store into a tmpfs page that cannot be had is a SIGBUS),
# and the restore come from the store.
if ! wanted gpu_cache_full; then
	:
elif [ $GPU = 0 ]; then
	skip gpu_cache_full "no GPU here"
elif [ "$(id -u)" != 0 ]; then
	skip gpu_cache_full "mounting a small tmpfs needs root"
else
	HC=$(mktemp -d)
	if mount -t tmpfs -o size=64m crest-gpu-check "$HC"; then
		t=$SECONDS
		{ timeout -k 5 120 "${RUN[@]}" "$(bin cache_bench)" save "$WORK/cachefull" "$HC" 1 5 &&
			timeout -k 5 120 "${RUN[@]}" "$(bin cache_bench)" restore "$WORK/cachefull" "$HC" 1 5 full; } \
			>"$LOGS/gpu_cache_full.log" 2>&1
		RC=$? DT=$((SECONDS - t))
		umount "$HC"
		if [ $RC = 0 ]; then
			STORES+=("gpu_cache_full=$WORK/cachefull")
			pass gpu_cache_full "a 1 GiB region checkpointed twice with its host cache on a 64 MiB tmpfs: the job lived, and the restore came from the store, bit-exact, ${DT} s"
		else
			fail gpu_cache_full "exit $RC: $(grep -E 'FAIL|failed|restore after' "$LOGS/gpu_cache_full.log" | head -1)" "$LOGS/gpu_cache_full.log"
		fi
	else
		fail gpu_cache_full "could not mount a 64 MiB tmpfs on $HC"
	fi
	rmdir "$HC"
fi

# 2f. Several GPUs in one handle (issue 34): multidev_bench at 1 GiB a GPU,
# on up to 4 GPUs so that the check stays short (its restores are checked on
# the host, word by word). Its ratios are shown, not held to the issue's
# targets: at 1 GiB a stall is tens of ms, and bench/library/multidev.sh
# measures them at 8 GiB. Its two stores of every GPU in one handle are
# verified below (verify:gpu_multidev, verify:gpu_multidev_pool1g).
multidev_extra() {  # multidev_extra STORE LOG
	awk '/^RESULT/ { for (i = 2; i <= NF; i++) if (split($i, kv, "=") == 2) f[kv[1]] = kv[2] }
	END {
		if (f["ngpu"] == "" || f["full_bitexact"] != "yes" || f["pool1g_bitexact"] != "yes") {
			print "no RESULT lines saying both passes were bit-exact"; exit 1
		}
		printf "; %s GPUs at %s GiB each; stall N/1 %s (%s s over %s s) with a pool of the state, %s with 1 GiB; " \
			"restore rate N/1 %s (%s over %s GB/s), %s with 1 GiB (issue targets: <= 1.1 and >= 1.8); " \
			"pinned D2H ceiling %s GB/s from GPU 0, %s from all", f["ngpu"], f["gib_per_gpu"],
			f["full_stall_ratio"], f["full_stall_all_s"], f["full_stall_1gpu_s"], f["pool1g_stall_ratio"],
			f["full_restore_ratio"], f["full_restore_all_GBps"], f["full_restore_1gpu_GBps"],
			f["pool1g_restore_ratio"], f["ceiling_dtoh_1gpu_GBps"], f["ceiling_dtoh_all_GBps"]
	}' "$2"
}
if ! wanted gpu_multidev; then
	:
elif [ $GPU = 0 ]; then
	skip gpu_multidev "no GPU here"
elif [ "$ngpu" -lt 2 ]; then
	skip gpu_multidev "needs 2 GPUs, this machine has $ngpu"
else
	md=$((ngpu > 4 ? 4 : ngpu))
	MULTIDEV_KEEP=1 DETAIL='^multidev_bench: ok' EXTRA=multidev_extra \
		lib_check gpu_multidev "$WORK/multidev/full-${md}gpu" 120 multidev_bench "$WORK/multidev" 1 "$md"
	[ -d "$WORK/multidev/pool1g-${md}gpu" ] && STORES+=("gpu_multidev_pool1g=$WORK/multidev/pool1g-${md}gpu")
fi

# 3. The README's main job on the GPU: checkpoints while it runs, restore
# from a later snapshot, output equal to an uninterrupted run.
# demo_check NAME [ENV...]: the demo, with ENV (VAR=VALUE) for crest.
demo_check() {
	local name=$1
	shift
	if ! wanted "$name"; then
		return
	elif [ $GPU = 0 ]; then
		skip "$name" "no GPU here"
		return
	elif [ "$(id -u)" != 0 ]; then
		skip "$name" "crest demo needs root (CRIU)"
		return
	elif [ -z "$(have crest)" ] || [ -z "$(have crest-workload-gpu)" ]; then
		fail "$name" "crest or crest-workload-gpu was not built (crest-workload-gpu needs nvcc at build time)"
		return
	fi
	# The demo makes its scratch folder under /tmp; its JSON goes to
	# NAME.json, its messages to NAME.log.
	local t=$SECONDS log=$LOGS/$name.log summary why
	(cd "$WORK" && exec env "$@" timeout -k 10 300 "${RUN[@]}" "$(bin crest)" --store "$WORK/$name" demo --gpu \
		--json --mib "$GPU_MIB" --checkpoints 4 --restore-from 3) >"$LOGS/$name.json" 2>"$log"
	RC=$? DT=$((SECONDS - t))
	if [ "$RC" = 124 ]; then
		fail "$name" "timed out after 300 s" "$log"
	else
		summary=$(python3 - "$LOGS/$name.json" <<'PY' 2>&1
import json, sys
try:
    d = json.load(open(sys.argv[1]))
    ck, r = d["checkpoints"], d["restore"]
    stall = sum(c["stall_seconds"] for c in ck) / len(ck)
except Exception as e:
    print("bad no result from crest demo (%s: %s)" % (type(e).__name__, e))
    sys.exit()
print("%s %s job of %d MiB, %d checkpoints (mean stall %.2f s), restored checkpoint %d (step %d) in %.2f s, "
      "%d lines compared: %s" % ("ok" if d["identical"] and d["mode"] == "cuda" else "bad", d["mode"],
      d["state_mib"], len(ck), stall, r["from"], r["step"], r["seconds"], d["lines_compared"],
      "identical to an uninterrupted run" if d["identical"] else "DIFFERENT from an uninterrupted run"))
PY
		)
		if [ "$RC" = 0 ] && [ "${summary%% *}" = ok ]; then
			STORES+=("$name=$WORK/$name")
			pass "$name" "${summary#ok }, ${DT} s"
		else
			why=$(grep -E '^crest' "$log" | tail -1)
			fail "$name" "exit $RC: ${why:-${summary#* }}" "$log"
			[ -d "$WORK/$name" ] && STORES+=("$name=$WORK/$name")
		fi
	fi
}
demo_check demo
# 3a. The same with criu told not to use hardware breakpoints, as crest runs
# it where they do not fire (a VM that drops debug registers: os/criu.c,
# hw_breakpoints_fire): a CUDA job dumped and restored that way too.
demo_check demo_nobp CRIU_FAULT=130
# 3a'. The same with CRIU's images staged on tmpfs (--stage-images), as
# before they were streamed into the engine as CRIU dumps (issue 36, item 2:
# capture/imgstream.h, the default that demo and demo_nobp take).
demo_check demo_staged CREST_CHECKPOINT_IMAGES=files

# 3b. A CUDA job moved to another GPU (issue 10, item 7): checkpointed on
# GPU 0, killed, restored with `--gpu 1` and again with the partial map
# GPU0=GPU1 that the driver alone refuses; each run's output must equal an
# uninterrupted run's, the restored job must run on GPU 1, and a map onto a
# GPU that is not here must be refused before anything is restored, the
# job's log untouched. The --gpu 1 restore is from another store, as on
# another node: the snapshot pushed to a third store and pulled from there.
# Needs two GPUs (nvidia-h200-x2); skipped on one.
move_run() {  # move_run WHAT ARGS...: restore, then wait for the job; sets MOVE_ERR
	local what=$1 t
	shift
	if ! "${RUN[@]}" "$(bin crest)" --store "$MOVE_STORE" restore mv "$@" >>"$LOGS/gpu_move.log" 2>&1; then
		MOVE_ERR="$what: crest restore failed: $(grep -E '^crest' "$LOGS/gpu_move.log" | tail -1)"
		return 1
	fi
	local on="" i
	for i in $(seq 1 50); do
		on=$(nvidia-smi --query-compute-apps=pid,gpu_uuid --format=csv,noheader 2>/dev/null |
			awk -F', ' -v p="$mpid" '$1 == p {print $2}')
		[ -n "$on" ] && break
		sleep 0.1
	done
	for t in $(seq 1 600); do kill -0 "$mpid" 2>/dev/null || break; sleep 0.1; done
	if [ "$on" != "$uuid1" ]; then
		MOVE_ERR="$what: the restored job ran on '${on:-no GPU seen}', not on GPU 1 ($uuid1)"
		return 1
	fi
	if ! cmp -s "$mw/job.out" "$mw/ref.out"; then
		MOVE_ERR="$what: its output differs from an uninterrupted run's"
		return 1
	fi
	return 0
}
if ! wanted gpu_move; then
	:
elif [ $GPU = 0 ]; then
	skip gpu_move "no GPU here"
elif [ "$ngpu" -lt 2 ]; then
	skip gpu_move "one GPU here: moving a job needs two (nvidia-h200-x2)"
elif [ -z "$(have crest-workload-gpu)" ]; then
	fail gpu_move "crest-workload-gpu was not built"
else
	mw=$WORK/move MOVE_ERR="" t=$SECONDS
	mkdir -p "$mw"
	uuid0=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | sed -n 1p)
	uuid1=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | sed -n 2p)
	wl=(--mib 256 --steps 40 --interval-ms 100)
	: >"$LOGS/gpu_move.log"
	"${RUN[@]}" "$(bin crest-workload-gpu)" "${wl[@]}" >"$mw/ref.out" 2>>"$LOGS/gpu_move.log"
	(cd "$mw" && exec setsid "${RUN[@]}" "$(bin crest-workload-gpu)" "${wl[@]}" >"$mw/job.out" 2>&1 </dev/null) &
	mpid=$!
	for i in $(seq 1 100); do [ "$(wc -l <"$mw/job.out")" -ge 10 ] && break; sleep 0.1; done
	if ! "${RUN[@]}" "$(bin crest)" --store "$mw/store" checkpoint --pid "$mpid" --tag mv >>"$LOGS/gpu_move.log" 2>&1; then
		MOVE_ERR="checkpoint failed: $(grep -E '^crest' "$LOGS/gpu_move.log" | tail -1)"
	fi
	kill -9 "$mpid" 2>/dev/null
	wait "$mpid" 2>/dev/null
	# The snapshot names the GPUs its job saw, with the memory it used on
	# GPU 0 (nvidia-smi), so a restore can check a target has it free.
	gpus=$("${RUN[@]}" "$(bin crest)" --store "$mw/store" show mv 2>/dev/null | sed -n 's/^label *gpus=//p')
	mib0=$(grep -o "$uuid0=[^;@]*@[0-9]*" <<<"$gpus" | sed 's/.*@//')
	if [ -z "$MOVE_ERR" ] && [ "${mib0:-0}" -le 0 ]; then
		MOVE_ERR="the snapshot does not record the job's memory on GPU 0: gpus=$gpus"
	fi
	if [ -z "$MOVE_ERR" ]; then
		cp "$mw/job.out" "$mw/job.keep"
		if "${RUN[@]}" "$(bin crest)" --store "$mw/store" restore mv \
			--gpu-map "$uuid0=GPU-00000000-0000-0000-0000-000000000000" >"$mw/bad.out" 2>&1; then
			MOVE_ERR="a map onto a GPU that is not here was accepted"
		elif ! grep -q "not on this machine" "$mw/bad.out"; then
			MOVE_ERR="a map onto a missing GPU failed without saying why: $(tail -1 "$mw/bad.out")"
		elif ! cmp -s "$mw/job.out" "$mw/job.keep" || kill -0 "$mpid" 2>/dev/null; then
			MOVE_ERR="a refused map touched the job's log or left a process"
		fi
	fi
	# The first restore as on another node: from a store the snapshot was
	# pushed to and pulled from (issue 35, item 4).
	if [ -z "$MOVE_ERR" ] && ! { "${RUN[@]}" "$(bin crest)" --store "$mw/store" --init push mv "$mw/shared" &&
		"${RUN[@]}" "$(bin crest)" --store "$mw/node2" --init pull mv "$mw/shared"; } >>"$LOGS/gpu_move.log" 2>&1; then
		MOVE_ERR="crest push or pull of the snapshot failed: $(grep -E '^crest' "$LOGS/gpu_move.log" | tail -1)"
	fi
	MOVE_STORE=$mw/node2
	[ -z "$MOVE_ERR" ] && move_run "--gpu 1, from a pulled store" --gpu 1 &&
		MOVE_STORE=$mw/store && move_run "--gpu-map GPU0=GPU1 alone" --gpu-map "$uuid0=$uuid1"
	DT=$((SECONDS - t))
	if [ -z "$MOVE_ERR" ]; then
		STORES+=("gpu_move=$mw/store" "gpu_move_pulled=$mw/node2")
		pass gpu_move "checkpointed on GPU 0 (its memory there recorded: $mib0 MiB), restored onto GPU 1 with --gpu 1 from a store it was pushed to and pulled from, and with GPU0=GPU1 alone from its own: ran there, output identical to an uninterrupted run both times; a map onto a missing GPU refused before restoring, log untouched, ${DT} s"
	else
		fail gpu_move "$MOVE_ERR" "$LOGS/gpu_move.log"
	fi
fi

# 3c. A clone of a CUDA job beside the original (issue 12): the job runs
# under `crest run` (a pid namespace of its own), is checkpointed while it
# runs, and `crest clone` starts a copy from that snapshot beside it, on the
# same GPU. Both must finish with output equal to an uninterrupted run's
# (the copy writes its own copy of the log), and a checkpoint of the copy,
# on its branch, must add only what it changed since (new bytes well under
# its logical bytes).
if cuda_ready gpu_clone "crest run and clone need root (CRIU)"; then
	cw=$WORK/clone CLONE_ERR="" CLONE_KNOWN="" t=$SECONDS
	mkdir -p "$cw"
	cl=$LOGS/gpu_clone.log
	: >"$cl"
	wl=(--mib 256 --steps 120 --interval-ms 100 --change-pct 0.5)
	"${RUN[@]}" "$(bin crest-workload-gpu)" "${wl[@]}" >"$cw/ref.out" 2>>"$cl"
	(cd "$cw" && exec timeout -k 10 120 "${RUN[@]}" "$(bin crest)" --store "$cw/store" run -- \
		"${RUN[@]}" "$(bin crest-workload-gpu)" "${wl[@]}" >"$cw/job.out" 2>"$cw/run.err" </dev/null) &
	crun=$!
	for i in $(seq 1 100); do [ "$(wc -l <"$cw/job.out" 2>/dev/null || echo 0)" -ge 10 ] && break; sleep 0.1; done
	init=$(sed -n 's/.* runs as pid \([0-9]*\) .*/\1/p' "$cw/run.err")
	if [ -z "$init" ]; then
		CLONE_ERR="crest run did not say the job's pid: $(head -3 "$cw/run.err")"
	elif grep -q "OS call failed or operation not supported" "$cw/run.err"; then
		CLONE_ERR="CUDA did not start under crest run: $(grep -m1 'OS call failed' "$cw/run.err")"
	elif ! "${RUN[@]}" "$(bin crest)" --store "$cw/store" checkpoint --pid "$init" --tag c1 >>"$cl" 2>&1; then
		CLONE_ERR="checkpoint of the crest run job failed: $(grep -E '^crest' "$cl" | tail -1)"
	elif ! "${RUN[@]}" "$(bin crest)" --store "$cw/store" clone c1 --branch gclone >"$cw/clone.out" 2>>"$cl"; then
		CLONE_ERR="crest clone failed: $(grep -E '^crest' "$cl" | tail -1)"
	fi
	cpid=$(sed -n 's/^clone 1 of .*: pid \([0-9]*\), branch gclone$/\1/p' "$cw/clone.out" 2>/dev/null)
	cat "$cw/clone.out" >>"$cl" 2>/dev/null
	if [ -z "$CLONE_ERR$CLONE_KNOWN" ] && [ -z "$cpid" ]; then
		CLONE_ERR="crest clone printed no pid: $(cat "$cw/clone.out")"
	fi
	if [ -z "$CLONE_ERR$CLONE_KNOWN" ]; then
		# Let the copy run a little, then checkpoint it on its branch.
		sleep 1.5
		if ! "${RUN[@]}" "$(bin crest)" --store "$cw/store" --json checkpoint --pid "$cpid" >"$cw/c2.json" 2>>"$cl"; then
			CLONE_ERR="checkpoint of the copy failed: $(grep -E '^crest' "$cl" | tail -1)"
		fi
	fi
	# Both run to their end (the copy is not our child: poll its pid).
	wait "$crun" 2>/dev/null
	for i in $(seq 1 300); do [ -n "$cpid" ] && kill -0 "$cpid" 2>/dev/null || break; sleep 0.1; done
	[ -n "$cpid" ] && kill -9 "$cpid" 2>/dev/null
	if [ -z "$CLONE_ERR$CLONE_KNOWN" ]; then
		nref=$(wc -l <"$cw/ref.out")
		if ! cmp -s "$cw/job.out" "$cw/ref.out"; then
			CLONE_ERR="the original's output differs from an uninterrupted run's ($(wc -l <"$cw/job.out") of $nref lines)"
		elif ! cmp -s "$cw/job.out.clone-1" "$cw/ref.out"; then
			CLONE_ERR="the copy's output differs from an uninterrupted run's ($(wc -l <"$cw/job.out.clone-1" 2>/dev/null) of $nref lines)"
		fi
	fi
	if [ -z "$CLONE_ERR$CLONE_KNOWN" ]; then
		read -r newb logb branch < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["new_bytes"], d["logical_bytes"], d.get("branch", "?"))' "$cw/c2.json" 2>>"$cl")
		if [ -z "${logb:-}" ] || [ "$logb" -le 0 ]; then
			CLONE_ERR="no figures from the copy's checkpoint: $(head -c 300 "$cw/c2.json")"
		elif [ $((newb * 2)) -ge "$logb" ]; then
			CLONE_ERR="the copy's checkpoint added $newb new bytes of $logb: it shares too little with the original"
		elif ! "${RUN[@]}" "$(bin crest)" --store "$cw/store" log gclone >>"$cl" 2>&1; then
			CLONE_ERR="crest log gclone failed"
		fi
	fi
	DT=$((SECONDS - t))
	{ echo "== run.err"; cat "$cw/run.err"; echo "== job.out (last lines)"; tail -3 "$cw/job.out"; } >>"$cl" 2>&1
	if [ -n "$CLONE_KNOWN" ] && [ -z "$CLONE_ERR" ]; then
		known gpu_clone "$CLONE_KNOWN"
	elif [ -z "$CLONE_ERR" ]; then
		STORES+=("gpu_clone=$cw/store")
		pass gpu_clone "a crest run CUDA job of 256 MiB checkpointed and cloned beside itself on one GPU: both outputs identical to an uninterrupted run's ($nref lines); the copy's checkpoint added $newb new bytes of $logb, ${DT} s"
	else
		fail gpu_clone "$CLONE_ERR" "$cl"
		[ -d "$cw/store" ] && STORES+=("gpu_clone=$cw/store")
	fi
fi

# gpu_job DIR LOG [ref] ARGS...: a crest-workload-gpu job in the background,
# its own session, its output in DIR/job.out, its pid in JOB; with "ref",
# an uninterrupted run of it first, into DIR/ref.out, to compare with.
# The job's errors go to LOG's name with .job.err for .log, never to LOG
# itself: a restore in place puts back every file the job has open, at
# its size at the snapshot, and would take with it the lines crest and
# its guard wrote to LOG after the checkpoint (docs/SECURITY.md's known
# limit on files a job shares with a live process).
gpu_job() {
	local dir=$1 log=${2%.log}.job.err
	shift 2
	if [ "$1" = ref ]; then
		shift
		"${RUN[@]}" "$(bin crest-workload-gpu)" "$@" >"$dir/ref.out" 2>>"$log"
	fi
	setsid "${RUN[@]}" "$(bin crest-workload-gpu)" "$@" >"$dir/job.out" 2>>"$log" </dev/null &
	JOB=$!
}

# gpu_kill: crest checkpoint of a CUDA job killed with -9 at random moments,
# three times. Between the freeze and the resume the job's driver state is
# locked and checkpointed; a crest killed there left it so, and the job
# stuck for good. The guard (capture/guard.h) gives it back: the job must
# run to its end with output equal to an uninterrupted run's.
if cuda_ready gpu_kill "checkpoints need root (CRIU)"; then
	kw=$WORK/kill KILL_ERR="" t=$SECONDS seed=${GPU_KILL_SEED:-$$}
	RANDOM=$seed
	mkdir -p "$kw"
	kl=$LOGS/gpu_kill.log
	echo "seed $seed (GPU_KILL_SEED replays the delays)" >"$kl"
	gpu_job "$kw" "$kl" ref --mib 1024 --steps 150 --interval-ms 100 --change-pct 0.5
	kjob=$JOB
	delays=""
	for r in 1 2 3; do
		for i in $(seq 1 300); do [ "$(wc -l <"$kw/job.out")" -ge $((r * 25)) ] && break; sleep 0.1; done
		# Rounds 1 and 2 aim at the window: once criu dump runs, the
		# driver state is checkpointed; round 3 at any moment.
		d=$(( r < 3 ? RANDOM % 500 : RANDOM % 3000 ))
		"${RUN[@]}" "$(bin crest)" --store "$kw/store" --quiet checkpoint --pid "$kjob" >>"$kl" 2>&1 &
		ck=$!
		if [ $r -lt 3 ]; then
			for i in $(seq 1 3000); do pgrep -f "criu dump" >/dev/null && break; sleep 0.01; done
			delays="$delays criu+$d"
		else
			delays="$delays $d"
		fi
		sleep "$(awk "BEGIN { print $d / 1000 }")"
		kill -9 "$ck" 2>/dev/null
		wait "$ck" 2>/dev/null
		n=$(wc -l <"$kw/job.out")
		for i in $(seq 1 600); do
			[ "$(wc -l <"$kw/job.out")" -gt "$n" ] && break
			kill -0 "$kjob" 2>/dev/null || break
			sleep 0.1
		done
		if [ "$(wc -l <"$kw/job.out")" -le "$n" ] && kill -0 "$kjob" 2>/dev/null; then
			KILL_ERR="round $r: the job made no progress in 60 s after crest was killed at $d ms"
			break
		fi
	done
	for i in $(seq 1 600); do kill -0 "$kjob" 2>/dev/null || break; sleep 0.1; done
	kill -9 "$kjob" 2>/dev/null
	wait "$kjob" 2>/dev/null
	gave=$(grep -c "ended without crest" "$kl" || true)
	nref=$(wc -l <"$kw/ref.out")
	if [ -z "$KILL_ERR" ] && ! cmp -s "$kw/job.out" "$kw/ref.out"; then
		KILL_ERR="the job's output differs from an uninterrupted run's ($(wc -l <"$kw/job.out") of $nref lines)"
	fi
	{ echo "kill delays (ms):$delays"; echo "== job.out (last lines)"; tail -3 "$kw/job.out"; } >>"$kl" 2>&1
	if [ -z "$KILL_ERR" ]; then
		pass gpu_kill "a CUDA job of 1024 MiB, crest checkpoint killed -9 at$delays ms: the guard gave it back $gave time(s), its output identical to an uninterrupted run's ($nref lines), $((SECONDS - t)) s"
	else
		fail gpu_kill "$KILL_ERR" "$kl"
	fi
fi

# gpu_restore_kill: crest restore of a CUDA job killed with -9 after CRIU
# has its processes back. Until crest restores and unlocks their GPU state
# they hold it in host memory and cannot use the GPU; a crest killed there
# left the job so for good. The restore's guard (restore/guard.h) brings it
# back. Three rounds, each on a checkpoint of its own:
#  exact: crest killed right before the driver's restore (util/fault.h's
#         CREST_FAULT_DIE=restore.cuda): the guard must say it brought the
#         GPU state back, and the job run to its end;
#  timed: crest killed from outside at a random moment soon after CRIU
#         ended (crest may have finished first): the job runs to its end;
#  fail:  as exact, with the guard's own driver restore failed too
#         (CREST_FAULT_SITE=guard.gpu): the guard must end the job and put
#         its files back, and a second crest restore of the same snapshot
#         then run the job to its end.
# Each job's output must equal an uninterrupted run's.
rk_round() {  # rk_round NAME [ENV...]: sets RK_ERR, RK_SAID
	local name=$1 rjob rs rp="" i
	shift
	RK_SAID=""
	gpu_job "$rw" "$rl" "${wl[@]}"
	rjob=$JOB
	for i in $(seq 1 300); do [ "$(wc -l <"$rw/job.out")" -ge 20 ] && break; sleep 0.1; done
	"${RUN[@]}" "$(bin crest)" --store "$rw/store" --quiet checkpoint --pid "$rjob" --kill --tag "$name" >>"$rl" 2>&1 ||
		{ RK_ERR="$name: the checkpoint failed"; return; }
	wait "$rjob" 2>/dev/null
	local mark
	mark=$(wc -l <"$rl")
	env "$@" "${RUN[@]}" "$(bin crest)" --store "$rw/store" --quiet restore "$name" >>"$rl" 2>&1 &
	rs=$!
	# The job's processes appear while CRIU restores them (before crest
	# can die of the fault hook; looked for again below if missed).
	for i in $(seq 1 3000); do
		rp=$(pgrep -f -- "$me" | head -1)
		[ -n "$rp" ] && break
		kill -0 "$rs" 2>/dev/null || break
		sleep 0.01
	done
	if [ $# -eq 0 ]; then
		# crest serves CRIU its images, so a kill before CRIU is done
		# fails the restore (files put back: the other guard's case).
		# Aim after it, into the driver's restore.
		for i in $(seq 1 3000); do pgrep -P "$rs" -f criu >/dev/null || break; sleep 0.01; done
		sleep "$(printf '0.%03d' "$d")"
		kill -9 "$rs" 2>/dev/null
	fi
	wait "$rs" 2>/dev/null
	if [ "$name" = fail ]; then
		# The guard's driver restore fails at once and it ends the job,
		# often before the pgrep above has seen it (the job lives for a
		# few milliseconds): what counts is that no such job runs once
		# the guard is done.
		for i in $(seq 1 300); do pgrep -x crest-rguard >/dev/null || break; sleep 0.1; done
		rp=$(pgrep -f -- "$me" | head -1)
		if [ -n "$rp" ]; then
			RK_ERR="fail: the job whose GPU state could not come back still runs after its guard (30 s)"
			kill -9 "$rp" 2>/dev/null
			return
		fi
		RK_SAID=$(tail -n +"$((mark + 1))" "$rl" | grep -o "the restore ended without crest.*" | head -1)
		[[ "$RK_SAID" == *"so the guard ended them"* && "$RK_SAID" != *"not all of them"* ]] ||
			{ RK_ERR="fail: the guard did not say it ended the job (and put any files back): ${RK_SAID:-nothing}"; return; }
		"${RUN[@]}" "$(bin crest)" --store "$rw/store" --quiet restore "$name" >>"$rl" 2>&1 ||
			{ RK_ERR="fail: the second restore of the snapshot failed"; return; }
		rp=$(pgrep -f -- "$me" | head -1)
		[ -n "$rp" ] || { RK_ERR="fail: the second restore's job is not running"; return; }
	fi
	[ -n "$rp" ] || rp=$(pgrep -f -- "$me" | head -1)
	[ -n "$rp" ] || { RK_ERR="$name: the restored job never appeared"; return; }
	for i in $(seq 1 900); do kill -0 "$rp" 2>/dev/null || break; sleep 0.1; done
	if kill -0 "$rp" 2>/dev/null; then
		RK_ERR="$name: the restored job did not end within 90 s ($(wc -l <"$rw/job.out") lines)"
		kill -9 "$rp" 2>/dev/null
		return
	fi
	for i in $(seq 1 100); do pgrep -x crest-rguard >/dev/null || break; sleep 0.1; done
	[ "$name" = fail ] || RK_SAID=$(tail -n +"$((mark + 1))" "$rl" | grep -o "the restore ended without crest.*" | head -1)
	if ! cmp -s "$rw/job.out" "$rw/ref.out"; then
		RK_ERR="$name: the job's output differs from an uninterrupted run's ($(wc -l <"$rw/job.out") of $(wc -l <"$rw/ref.out") lines)"
	fi
	{ echo "== $name: job.out (last lines)"; tail -3 "$rw/job.out"; } >>"$rl" 2>&1
}
if cuda_ready gpu_restore_kill "restores need root (CRIU)"; then
	rw=$WORK/rkill RK_ERR="" t=$SECONDS seed=${GPU_RKILL_SEED:-$$}
	RANDOM=$seed
	mkdir -p "$rw"
	rl=$LOGS/gpu_restore_kill.log
	echo "seed $seed (GPU_RKILL_SEED replays the delay)" >"$rl"
	wl=(--mib 1024 --steps 80 --interval-ms 100 --change-pct 0.5 --seed 77)
	me="crest-workload-gpu --mib 1024 --steps 80 "
	"${RUN[@]}" "$(bin crest-workload-gpu)" "${wl[@]}" >"$rw/ref.out" 2>>"$rl"
	# The driver restores 1 GiB in about a quarter of a second: a kill
	# within 60 ms of CRIU's end may land inside it.
	d=$((RANDOM % 60))
	rk_round exact CREST_FAULT_DIE=restore.cuda
	said_exact=$RK_SAID
	if [ -z "$RK_ERR" ] && [[ "$said_exact" != *"their GPU state was brought back"* ]]; then
		RK_ERR="exact: crest died before the driver's restore, and the guard did not say it brought the GPU state back: ${said_exact:-nothing}"
	fi
	[ -n "$RK_ERR" ] || rk_round timed
	said_timed=$RK_SAID
	[ -n "$RK_ERR" ] || rk_round fail CREST_FAULT_DIE=restore.cuda CREST_FAULT_SITE=guard.gpu:1:EIO
	nref=$(wc -l <"$rw/ref.out")
	echo "killed the timed crest restore $d ms after its CRIU ended" >>"$rl"
	if [ -z "$RK_ERR" ]; then
		pass gpu_restore_kill "a CUDA job of 1024 MiB, crest restore killed before the driver's restore: ${said_exact#the restore ended without crest (was it killed?): }; killed -9 ${d} ms after its CRIU ended: ${said_timed:-crest had finished (no guard needed)}; with the guard's driver restore failed too: ${RK_SAID#the restore ended without crest (was it killed?): }, and a second restore ran it; each output identical to an uninterrupted run's ($nref lines), $((SECONDS - t)) s"
	else
		fail gpu_restore_kill "$RK_ERR" "$rl"
	fi
fi

# 3d. Issue 33: PyTorch jobs on two GPUs. Both need two GPUs, root and
# torch; each PyTorch program is written into its work folder here.
# torch_2gpu NAME: 0 when NAME can run; else it says why (skip, or fail).
torch_2gpu() {
	local ok
	if ! wanted "$1"; then
		return 1
	elif [ $GPU = 0 ]; then
		skip "$1" "no GPU here"
	elif [ "$ngpu" -lt 2 ]; then
		skip "$1" "needs two GPUs (one here: nvidia-h200-x2)"
	elif [ "$(id -u)" != 0 ]; then
		skip "$1" "checkpoints need root (CRIU)"
	elif ! ok=$(python3 -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null); then
		skip "$1" "python3 has no torch"
	elif [ "$ok" -lt 2 ]; then
		fail "$1" "torch sees $ok GPU(s) although nvidia-smi lists $ngpu"
	else
		return 0
	fi
	return 1
}
# gpu_files PID: the /dev/nvidiaN a process maps and holds open, and the
# GPUs nvidia-smi lists it under: what gpu/gpumap.c's gpumap_held may go
# by (its rule is nvidia-smi's list, else the maps).
gpu_files() {
	local m f s
	m=$(grep -o '/dev/nvidia[0-9]*' /proc/"$1"/maps 2>/dev/null | sort -u | paste -sd, -)
	f=$(ls -l /proc/"$1"/fd 2>/dev/null | grep -o '/dev/nvidia[0-9]*' | sort -u | paste -sd, -)
	s=$(nvidia-smi --query-compute-apps=pid,gpu_uuid --format=csv,noheader 2>/dev/null | awk -F', ' -v p="$1" '$1 == p' | wc -l)
	echo "maps ${m:-none}; fds ${f:-none}; nvidia-smi lists it under $s GPU(s)"
}

# live_of PID...: those of the pids that still exist, neither zombie nor
# dead (status 1 when none does).
live_of() {
	local p st any=1
	for p in "$@"; do
		st=$(sed 's/.*) //' /proc/"$p"/stat 2>/dev/null | cut -d' ' -f1)   # past comm, which may hold spaces
		[ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ] && { echo "$p"; any=0; }
	done
	return $any
}

# multigpu_refuse: one PyTorch process with layers on cuda:0 and cuda:1,
# its activations moved device to device (which lets PyTorch enable peer
# access): the driver checkpoints it and cannot restore it (shared notes),
# so crest checkpoint must refuse it before freezing anything, with a
# line naming its pid and both GPUs; its output must then equal an
# uninterrupted run's (it was never stopped).
mg_script() {  # mg_script FILE
	cat >"$1" <<'PY'
import os, sys, time, torch
torch.use_deterministic_algorithms(True)
torch.manual_seed(0)
a = torch.nn.Linear(512, 512).to("cuda:0")
b = torch.nn.Linear(512, 512).to("cuda:1")
x = torch.randn(256, 512, device="cuda:0")
opt = torch.optim.SGD(list(a.parameters()) + list(b.parameters()), lr=0.01)
for i in range(int(sys.argv[1])):
    h = a(x).relu().to("cuda:1")   # device to device
    loss = b(h).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print("step %d loss %.10f" % (i, loss.item()), flush=True)
    time.sleep(0.05)
PY
}
if torch_2gpu multigpu_refuse; then
	gw=$WORK/multigpu MG_ERR="" t=$SECONDS
	mkdir -p "$gw"
	ml=$LOGS/multigpu_refuse.log
	: >"$ml"
	mg_script "$gw/mg.py"
	export CUBLAS_WORKSPACE_CONFIG=:4096:8
	timeout -k 5 60 python3 "$gw/mg.py" 150 >"$gw/ref.out" 2>>"$ml" || MG_ERR="the uninterrupted run failed"
	if [ -z "$MG_ERR" ]; then
		(cd "$gw" && exec setsid python3 "$gw/mg.py" 150 >"$gw/job.out" 2>"$gw/job.err" </dev/null) &
		gpid=$!
		for i in $(seq 1 600); do [ "$(wc -l <"$gw/job.out")" -ge 20 ] && break; kill -0 "$gpid" 2>/dev/null || break; sleep 0.1; done
		probe=$(gpu_files "$gpid")
		echo "the job, pid $gpid: $probe" >>"$ml"
		if [ "$(wc -l <"$gw/job.out")" -lt 20 ]; then
			MG_ERR="the job did not start ($(wc -l <"$gw/job.out") lines)"
		elif "${RUN[@]}" "$(bin crest)" --store "$gw/store" checkpoint --pid "$gpid" >>"$ml" 2>"$gw/ck.err"; then
			MG_ERR="crest checkpoint took a process on two GPUs (not refused)"
		# On 2 GPUs or more: PyTorch made a context on each GPU of the
		# 4-GPU machine (seen, 2026-11-28), though the job uses two.
		elif ! grep -Eq "pid $gpid holds CUDA state on [2-9][0-9]* GPUs" "$gw/ck.err" || ! grep -q "nothing was frozen" "$gw/ck.err"; then
			MG_ERR="the checkpoint failed, but not with the refusal: $(tail -1 "$gw/ck.err")"
		fi
		cat "$gw/ck.err" >>"$ml"
		for i in $(seq 1 600); do kill -0 "$gpid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$gpid" 2>/dev/null
		wait "$gpid" 2>/dev/null
		if [ -z "$MG_ERR" ] && ! cmp -s "$gw/job.out" "$gw/ref.out"; then
			MG_ERR="the refused job's output differs from an uninterrupted run's ($(wc -l <"$gw/job.out") of $(wc -l <"$gw/ref.out") lines)"
		fi
	fi
	unset CUBLAS_WORKSPACE_CONFIG
	if [ -z "$MG_ERR" ]; then
		pass multigpu_refuse "a PyTorch process on cuda:0 and cuda:1 (activations device to device) refused before the freeze, its output identical to an uninterrupted run's ($(wc -l <"$gw/ref.out") lines); $probe, $((SECONDS - t)) s"
	else
		fail multigpu_refuse "$MG_ERR" "$ml"
	fi
fi

# peer_shim (issue 33 items 5 and 6): multigpu_refuse's process (peer
# access between cuda:0 and cuda:1) under crest run --cuda-shim, which
# disables its peer access before the freeze and enables it again after:
# taken without --multi-gpu-process, checkpointed live, then with --kill
# and restored; its output must equal an uninterrupted run's.
if torch_2gpu peer_shim; then
	pw=$WORK/peer_shim PS_ERR="" t=$SECONDS
	mkdir -p "$pw"
	psl=$LOGS/peer_shim.log
	: >"$psl"
	mg_script "$pw/mg.py"
	export CUBLAS_WORKSPACE_CONFIG=:4096:8
	timeout -k 5 60 python3 "$pw/mg.py" 150 >"$pw/ref.out" 2>>"$psl" || PS_ERR="the uninterrupted run failed"
	if [ -z "$PS_ERR" ]; then
		(cd "$pw" && exec timeout -k 10 200 "${RUN[@]}" "$(bin crest)" --store "$pw/store" run --cuda-shim -- \
			env -u LD_LIBRARY_PATH python3 "$pw/mg.py" 150 >"$pw/job.out" 2>"$pw/run.err" </dev/null) &
		crun=$!
		for i in $(seq 1 600); do [ "$(wc -l <"$pw/job.out")" -ge 20 ] && break; kill -0 "$crun" 2>/dev/null || break; sleep 0.1; done
		init=$(sed -n 's/.* runs as pid \([0-9]*\) .*/\1/p' "$pw/run.err")
		if [ -z "$init" ] || [ "$(wc -l <"$pw/job.out")" -lt 20 ]; then
			PS_ERR="the job did not start under crest run --cuda-shim: $(tail -2 "$pw/run.err" | paste -sd' ')"
		elif ! timeout -k 5 120 "${RUN[@]}" "$(bin crest)" --store "$pw/store" checkpoint --pid "$init" --tag live >>"$psl" 2>"$pw/ck1.err"; then
			PS_ERR="the live checkpoint failed: $(tail -1 "$pw/ck1.err")"
		elif ! grep -q "CUDA shim: [1-9][0-9]* peer access pair(s) of 1 process(es) disabled" "$pw/ck1.err"; then
			PS_ERR="the live checkpoint disabled no peer access: $(grep 'shim:' "$pw/ck1.err" || tail -1 "$pw/ck1.err")"
		else
			n0=$(wc -l <"$pw/job.out")
			for i in $(seq 1 100); do [ "$(wc -l <"$pw/job.out")" -ge $((n0 + 10)) ] && break; sleep 0.1; done
			if [ "$(wc -l <"$pw/job.out")" -lt $((n0 + 10)) ]; then
				PS_ERR="the job made no progress after the live checkpoint"
			elif ! timeout -k 5 120 "${RUN[@]}" "$(bin crest)" --store "$pw/store" checkpoint --pid "$init" --kill --tag peer >>"$psl" 2>"$pw/ck2.err"; then
				PS_ERR="crest checkpoint --kill failed: $(tail -1 "$pw/ck2.err")"
			else
				wait "$crun" 2>/dev/null
				for i in $(seq 1 100); do kill -0 "$init" 2>/dev/null || break; sleep 0.1; done
				timeout -k 5 120 "${RUN[@]}" "$(bin crest)" --store "$pw/store" restore peer >>"$psl" 2>"$pw/rs.err" ||
					PS_ERR="crest restore failed: $(tail -1 "$pw/rs.err")"
				cat "$pw/rs.err" >>"$psl"
			fi
		fi
		cat "$pw/ck1.err" "$pw/ck2.err" >>"$psl" 2>/dev/null
		for i in $(seq 1 600); do [ "$(wc -l <"$pw/job.out")" -ge 150 ] && break; [ -n "$PS_ERR" ] && break; sleep 0.1; done
		sleep 0.5
		[ -n "$init" ] && kill -9 "$init" 2>/dev/null
		kill "$crun" 2>/dev/null; wait "$crun" 2>/dev/null
		if [ -z "$PS_ERR" ] && ! cmp -s "$pw/job.out" "$pw/ref.out"; then
			PS_ERR="the restored job's output differs from an uninterrupted run's ($(wc -l <"$pw/job.out") of $(wc -l <"$pw/ref.out") lines)"
		fi
	fi
	unset CUBLAS_WORKSPACE_CONFIG
	[ -d "$pw/store" ] && STORES+=("peer_shim=$pw/store")
	if [ -z "$PS_ERR" ]; then
		pass peer_shim "a PyTorch process on cuda:0 and cuda:1 (activations device to device, peer access) under crest run --cuda-shim: \"$(grep -m1 'CUDA shim' "$pw/ck1.err" | cut -c1-200)\"; checkpointed live (it ran on) and with --kill, restored: output identical to an uninterrupted run's ($(wc -l <"$pw/ref.out") lines), $((SECONDS - t)) s"
	else
		fail peer_shim "$PS_ERR" "$psl"
	fi
fi

# DDP jobs of 2 ranks (torch.multiprocessing.spawn; the ranks meet over
# TCP through PyTorch's TCPStore on 127.0.0.1; rank R on cuda:R, each
# printing its loss per step to its own log), checkpointed by the
# launcher's pid with --kill, then restored: each rank's log must equal an
# uninterrupted run's (two GPUs only).
#   ddp_gloo   gloo between the ranks (TCP). A rank PyTorch gave a context
#              on the other GPU too is refused first (the job must run
#              on), then taken with --multi-gpu-process; that failing is
#              KNOWN (issue 33)
#   ddp_nccl   NCCL with NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1: its ranks
#              connect over sockets, which CRIU saves (--tcp-established);
#              restored with the two GPUs swapped (issue 33 item 7)
#   nccl_p2p_refuse  NCCL's defaults (P2P over NVLink: the driver cannot
#              restore such ranks, CUDA_ERROR_NOT_SUPPORTED): crest must
#              refuse before the freeze, naming NCCL_P2P_DISABLE=1, and the
#              job run on to its end, unstopped (a rank with P2P on maps
#              nothing of NCCL's from /dev/shm: crest knows it by PyTorch's
#              NCCL watchdog thread)
# All with USE_LIBUV=0: PyTorch's TCPStore holds an io_uring otherwise
# (PyTorch 2.11, with UV_USE_IO_URING=0 too), which CRIU cannot dump and
# crest refuses before the freeze (os/uring.h).
DDP_KNOWN=""
if ! x crest help checkpoint 2>&1 | grep -e '--tcp-close' >/dev/null; then
	DDP_KNOWN="this crest cannot save TCP connections between a job's processes (no checkpoint --tcp-close: the sockets work of issue 33, with criu 4.2 and --tcp-established, is not in this build)"
fi
ddp_script() {  # ddp_script FILE
	cat >"$1" <<'PY'
import os, socket, sys, time, torch
import torch.distributed as dist
import torch.multiprocessing as mp

def rank_main(rank, out, steps, port, backend):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.cuda.set_device(rank)
    kw = {"device_id": torch.device("cuda", rank)} if backend == "nccl" else {}
    n = int(os.environ.get("DDP_RANKS", "2"))
    dist.init_process_group(backend, rank=rank, world_size=n, **kw)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 512)).cuda()
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    g = torch.Generator(device="cuda").manual_seed(1 + rank)
    x = torch.randn(256, 512, device="cuda", generator=g)
    log = open(os.path.join(out, "rank%d.log" % rank), "a", buffering=1)
    # DDP_TIME: each step's time (forward, backward, optimizer, synced)
    # to timeR.log; DDP_SLEEP: seconds between steps (0.1).
    tl = open(os.path.join(out, "time%d.log" % rank), "a", buffering=1) if os.environ.get("DDP_TIME") else None
    pause = float(os.environ.get("DDP_SLEEP", "0.1"))
    for i in range(steps):
        s0 = time.perf_counter()
        loss = ddp(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        log.write("step %d loss %.10f\n" % (i, loss.item()))
        if tl:
            torch.cuda.synchronize()
            tl.write("%.7f\n" % (time.perf_counter() - s0))
        time.sleep(pause)
    dist.barrier()
    dist.destroy_process_group()

if __name__ == "__main__":
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    mp.spawn(rank_main, args=(sys.argv[1], int(sys.argv[2]), port, sys.argv[3]), nprocs=int(os.environ.get("DDP_RANKS", "2")))
PY
}
# ddp_start DIR BACKEND STEPS: the job in DIR (its output not into a log
# crest writes too: a restore in place would take the lines written after
# the checkpoint with it), once each rank is 30 steps in; sets DPID and
# DPIDS (the launcher, its ranks, multiprocessing's resource tracker: a
# restore in place wants their pids free), or DDP_ERR.
ddp_start() {
	local dir=$1 backend=$2 steps=$3 i
	(cd "$dir" && exec setsid python3 "$WORK/ddp.py" "$dir" "$steps" "$backend" >"$dir/launcher.out" 2>&1 </dev/null) &
	DPID=$!
	for i in $(seq 1 900); do
		[ "$(cat "$dir/rank0.log" 2>/dev/null | wc -l)" -ge 30 ] && [ "$(cat "$dir/rank1.log" 2>/dev/null | wc -l)" -ge 30 ] && break
		kill -0 "$DPID" 2>/dev/null || break
		sleep 0.1
	done
	DPIDS="$DPID $(pgrep -P "$DPID" | paste -sd' ' -)"
	if [ "$(cat "$dir/rank1.log" 2>/dev/null | wc -l)" -lt 30 ]; then
		DDP_ERR="the job did not start ($(cat "$dir/rank1.log" 2>/dev/null | wc -l) lines of rank 1): $(tail -1 "$dir/launcher.out")"
	fi
}
# ddp_end: every process of the job ends (by itself, or after 90 s).
ddp_end() {
	local i r
	for i in $(seq 1 900); do live_of $DPIDS >/dev/null || break; sleep 0.1; done
	for r in $(live_of $DPIDS); do kill -9 "$r" 2>/dev/null; done
	wait "$DPID" 2>/dev/null
}
# ddp_check NAME BACKEND: the whole round (see above); the caller exports
# the job's environment.
ddp_check() {
	local name=$1 backend=$2 dw=$WORK/$1 dl=$LOGS/$1.log t=$SECONDS steps=100 n0 r
	local refpid map="" moved="" before after u
	DDP_ERR="" DDP_REFUSED="" DDP_STALL=""
	mkdir -p "$dw/ref" "$dw/job"
	: >"$dl"
	# The uninterrupted run beside the job, not before it (half the time).
	(timeout -k 5 90 python3 "$WORK/ddp.py" "$dw/ref" "$steps" "$backend" >"$dw/ref.out" 2>&1; echo $? >"$dw/ref.rc") &
	refpid=$!
	ddp_start "$dw/job" "$backend" "$steps"
	# DDP_SWAP: the restore puts each rank on the other GPU (--gpu-map
	# with both pairs: the driver wants every GPU a process saw mapped).
	if [ -n "${DDP_SWAP:-}" ] && [ -z "$DDP_ERR" ]; then
		read -r u0 u1 < <(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -2 | paste -sd' ')
		map="--gpu-map $u0=$u1,$u1=$u0"
		before=$(nvidia-smi --query-compute-apps=pid,gpu_uuid --format=csv,noheader | tr -d ' ' | sort)
	fi
	if [ -z "$DDP_ERR" ]; then
		for r in $DPIDS; do echo "process $r of the job ($(tr '\0' ' ' </proc/"$r"/cmdline | cut -c1-80)): $(gpu_files "$r")" >>"$dl"; done
		if ! timeout -k 5 120 "${RUN[@]}" "$(bin crest)" --store "$dw/store" checkpoint --pid "$DPID" --kill --tag ddp \
			>>"$dl" 2>"$dw/ck.err"; then
			cat "$dw/ck.err" >>"$dl"
			# A rank with a context on the other GPU too (PyTorch's
			# gloo makes one there; seen on the H200) is refused
			# before the freeze, since peer access cannot be told
			# from outside (gpu/gpuckpt.h). The job must run on,
			# unfrozen; then the same with --multi-gpu-process,
			# which these ranks (no peer access) should survive.
			if grep -q "holds CUDA state on 2 GPUs" "$dw/ck.err"; then
				n0=$(wc -l <"$dw/job/rank1.log")
				sleep 2
				if [ "$(wc -l <"$dw/job/rank1.log")" -le "$n0" ]; then
					DDP_ERR="refused, but the job stopped writing after the refusal"
				else
					DDP_REFUSED="refused by default (a rank holds a context on both GPUs; the job ran on), then taken with --multi-gpu-process"
					if ! timeout -k 5 120 "${RUN[@]}" "$(bin crest)" --store "$dw/store" checkpoint --pid "$DPID" --kill \
						--multi-gpu-process --tag ddp >>"$dl" 2>"$dw/ck.err"; then
						DDP_ERR="crest checkpoint --kill --multi-gpu-process of the launcher failed: $(tail -1 "$dw/ck.err")"
						DDP_KNOWN="issue 33: a DDP rank with a context on both GPUs, taken with --multi-gpu-process"
					fi
				fi
			elif grep -q "holds an io_uring" "$dw/ck.err"; then
				DDP_ERR="refused: a process holds an io_uring with USE_LIBUV=0 set: $(tail -1 "$dw/ck.err")"
			else
				DDP_ERR="crest checkpoint --kill of the launcher failed: $(tail -1 "$dw/ck.err")"
			fi
		fi
		cat "$dw/ck.err" >>"$dl"
		if [ -z "$DDP_ERR" ]; then
			DDP_STALL=$(x crest --store "$dw/store" --json show ddp 2>/dev/null | python3 -c \
				'import json,sys; d=json.load(sys.stdin); print("%.2f" % (int(d["labels"]["stall_ns"]) / 1e9))' 2>/dev/null || echo "?")
			wait "$DPID" 2>/dev/null
			for i in $(seq 1 100); do live_of $DPIDS >/dev/null || break; sleep 0.1; done
			# shellcheck disable=SC2086
			if ! timeout -k 5 120 "${RUN[@]}" "$(bin crest)" --store "$dw/store" restore ddp $map >>"$dl" 2>"$dw/rs.err"; then
				DDP_ERR="crest restore of the DDP job failed: $(tail -1 "$dw/rs.err")"
				[ -n "$DDP_REFUSED" ] && DDP_KNOWN="issue 33: a DDP rank with a context on both GPUs, taken with --multi-gpu-process"
			fi
			cat "$dw/rs.err" >>"$dl"
			if [ -n "$map" ] && [ -z "$DDP_ERR" ]; then
				after=$(nvidia-smi --query-compute-apps=pid,gpu_uuid --format=csv,noheader | tr -d ' ' | sort)
				echo "GPUs before: $before; after the restore with $map: $after" >>"$dl"
				for r in $DPIDS; do
					u=$(echo "$before" | grep "^$r," | cut -d, -f2)
					[ -z "$u" ] && continue
					if echo "$after" | grep -q "^$r,$u\$"; then
						DDP_ERR="pid $r is on $u again after the restore with the GPUs swapped"
					else
						moved="$moved $r"
					fi
				done
				[ -z "$DDP_ERR" ] && [ -z "$moved" ] && DDP_ERR="no rank was seen on a GPU after the restore (nvidia-smi: $after)"
			fi
		fi
		ddp_end
		wait "$refpid"
		[ -z "$DDP_ERR" ] && [ "$(cat "$dw/ref.rc" 2>/dev/null)" != 0 ] && DDP_ERR="the uninterrupted run failed: $(tail -1 "$dw/ref.out")"
		for r in 0 1; do
			if [ -z "$DDP_ERR" ] && ! cmp -s "$dw/job/rank$r.log" "$dw/ref/rank$r.log"; then
				DDP_ERR="rank $r's log differs from an uninterrupted run's ($(wc -l <"$dw/job/rank$r.log") of $(wc -l <"$dw/ref/rank$r.log") lines)"
			fi
		done
	fi
	wait "$refpid" 2>/dev/null
	DT=$((SECONDS - t))
	[ -d "$dw/store" ] && STORES+=("$name=$dw/store")
	if [ -z "$DDP_ERR" ]; then
		pass "$name" "a 2-rank DDP job ($backend${NCCL_P2P_DISABLE:+, NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1}, one GPU a rank) checkpointed by its launcher's pid with --kill${DDP_REFUSED:+ ($DDP_REFUSED)} (stall ${DDP_STALL} s), restored${map:+ with the GPUs swapped (ranks$moved each seen on the other GPU)}: both ranks' logs identical to an uninterrupted run's ($steps lines each), ${DT} s"
	elif [ -n "$DDP_KNOWN" ]; then
		known "$name" "$DDP_KNOWN (this run: $DDP_ERR)"
	elif [ "$backend" = nccl ]; then
		# Issue 33 reports NCCL DDP failing; this check is where it is
		# shown to work, and until then its failure is that one.
		known "$name" "issue 33: a NCCL DDP job over sockets (this run: $DDP_ERR)"
	else
		fail "$name" "$DDP_ERR" "$dl"
	fi
}
if wanted ddp_gloo || wanted ddp_nccl || wanted nccl_p2p_refuse || wanted nccl_shim; then
	ddp_script "$WORK/ddp.py"
fi
export CUBLAS_WORKSPACE_CONFIG=:4096:8 USE_LIBUV=0
torch_2gpu ddp_gloo && ddp_check ddp_gloo gloo
if torch_2gpu ddp_nccl; then
	NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 DDP_SWAP=1 ddp_check ddp_nccl nccl
fi
if torch_2gpu nccl_p2p_refuse; then
	pw=$WORK/nccl_p2p pl=$LOGS/nccl_p2p_refuse.log DDP_ERR="" t=$SECONDS
	mkdir -p "$pw"
	: >"$pl"
	ddp_start "$pw" nccl 100
	if [ -z "$DDP_ERR" ]; then
		if timeout -k 5 120 "${RUN[@]}" "$(bin crest)" --store "$pw/store" checkpoint --pid "$DPID" --kill >>"$pl" 2>"$pw/ck.err"; then
			DDP_ERR="crest took a job whose NCCL has P2P on (its restore would fail: CUDA_ERROR_NOT_SUPPORTED)"
		elif ! grep -q "has a NCCL communicator" "$pw/ck.err" || ! grep -q "NCCL_P2P_DISABLE=1" "$pw/ck.err"; then
			DDP_ERR="refused, but not for NCCL's P2P: $(tail -1 "$pw/ck.err")"
		fi
		cat "$pw/ck.err" >>"$pl"
		for r in $DPIDS; do
			st=$(sed 's/.*) //' /proc/"$r"/stat 2>/dev/null | cut -d' ' -f1)
			[ "$st" = T ] || [ "$st" = t ] && [ -z "$DDP_ERR" ] && DDP_ERR="pid $r of the job is stopped ($st) after the refusal"
		done
		ddp_end
		wait "$DPID"; rc=$?
		for r in 0 1; do
			n=$(wc -l <"$pw/rank$r.log")
			[ -z "$DDP_ERR" ] && [ "$n" != 100 ] && DDP_ERR="rank $r wrote $n of 100 lines after the refusal (launcher exit $rc)"
		done
	fi
	if [ -z "$DDP_ERR" ]; then
		pass nccl_p2p_refuse "a 2-rank NCCL DDP job with NCCL's defaults (P2P on) refused before the freeze: \"$(tail -1 "$pw/ck.err" | cut -c1-150)...\"; the job ran on to its 100th step, $((SECONDS - t)) s"
	else
		fail nccl_p2p_refuse "$DDP_ERR" "$pl"
	fi
fi
# nccl_teardown (issue 33 item 6, the experiment): NCCL's defaults (P2P
# on) restore once the job has destroyed its communicators. The job tears
# its process group down at step 40 (what a shim would do before the
# lock), says so in a file and waits for another; crest checkpoints it
# with --kill and restores it; the job then builds a new group and DDP
# wrapper and runs on. Its ranks' logs must equal an uninterrupted run's
# that does the same teardown and rebuild; the teardown and rebuild
# times, and the step time after, are what such a shim would cost.
if torch_2gpu nccl_teardown; then
	tw=$WORK/nccl_teardown tl=$LOGS/nccl_teardown.log DDP_ERR="" t=$SECONDS
	mkdir -p "$tw/job" "$tw/ref"
	: >"$tl"
	cat >"$tw/teardown.py" <<'PY'
import os, socket, sys, time, torch
import torch.distributed as dist
import torch.multiprocessing as mp
def group(rank, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"; os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("nccl", rank=rank, world_size=2, device_id=torch.device("cuda", rank))
def rank_main(rank, out, steps, ports, at):
    torch.cuda.set_device(rank)
    group(rank, ports[0])
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 512)).cuda()
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x = torch.randn(256, 512, device="cuda", generator=torch.Generator(device="cuda").manual_seed(1 + rank))
    log = open(os.path.join(out, "rank%d.log" % rank), "a", buffering=1)
    tl = open(os.path.join(out, "time%d.log" % rank), "a", buffering=1)
    for i in range(steps):
        if i == at:
            t0 = time.time()
            dist.destroy_process_group()
            torch.cuda.synchronize()
            t1 = time.time()
            open(os.path.join(out, "quiet%d" % rank), "w").close()
            while not os.path.exists(os.path.join(out, "go")):
                time.sleep(0.02)
            t2 = time.time()
            group(rank, ports[1])
            ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])
            torch.cuda.synchronize()
            tl.write("teardown %.3f rebuild %.3f\n" % (t1 - t0, time.time() - t2))
        s0 = time.time()
        loss = ddp(x).pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
        log.write("step %d loss %.10f\n" % (i, loss.item()))
        torch.cuda.synchronize()
        tl.write("step %d %.5f\n" % (i, time.time() - s0))
        time.sleep(0.05)
    dist.barrier(); dist.destroy_process_group()
if __name__ == "__main__":
    socks = [socket.socket() for _ in range(2)]
    for s in socks: s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks: s.close()
    mp.spawn(rank_main, args=(sys.argv[1], int(sys.argv[2]), ports, int(sys.argv[3])), nprocs=2)
PY
	touch "$tw/ref/go"
	(timeout -k 5 120 python3 "$tw/teardown.py" "$tw/ref" 80 40 >"$tw/ref.out" 2>&1; echo $? >"$tw/ref.rc") &
	refpid=$!
	(cd "$tw/job" && exec setsid python3 "$tw/teardown.py" "$tw/job" 80 40 >"$tw/job/launcher.out" 2>&1 </dev/null) &
	DPID=$!
	for i in $(seq 1 900); do
		[ -e "$tw/job/quiet0" ] && [ -e "$tw/job/quiet1" ] && break
		kill -0 "$DPID" 2>/dev/null || break
		sleep 0.1
	done
	DPIDS="$DPID $(pgrep -P "$DPID" | paste -sd' ' -)"
	if ! [ -e "$tw/job/quiet0" ] || ! [ -e "$tw/job/quiet1" ]; then
		DDP_ERR="the job did not reach its teardown: $(tail -1 "$tw/job/launcher.out")"
	elif ! timeout -k 5 120 "${RUN[@]}" "$(bin crest)" --store "$tw/store" checkpoint --pid "$DPID" --kill --tag quiet \
		>>"$tl" 2>"$tw/ck.err"; then
		DDP_ERR="crest checkpoint --kill of a NCCL job whose group was destroyed failed: $(tail -1 "$tw/ck.err")"
	else
		wait "$DPID" 2>/dev/null
		for i in $(seq 1 100); do live_of $DPIDS >/dev/null || break; sleep 0.1; done
		timeout -k 5 120 "${RUN[@]}" "$(bin crest)" --store "$tw/store" restore quiet >>"$tl" 2>"$tw/rs.err" ||
			DDP_ERR="crest restore of the NCCL job (P2P on, group destroyed) failed: $(tail -1 "$tw/rs.err")"
		cat "$tw/rs.err" >>"$tl"
	fi
	cat "$tw/ck.err" >>"$tl" 2>/dev/null
	touch "$tw/job/go"
	ddp_end
	wait "$refpid"
	[ -z "$DDP_ERR" ] && [ "$(cat "$tw/ref.rc" 2>/dev/null)" != 0 ] && DDP_ERR="the uninterrupted run failed: $(tail -1 "$tw/ref.out")"
	for r in 0 1; do
		[ -z "$DDP_ERR" ] && ! cmp -s "$tw/job/rank$r.log" "$tw/ref/rank$r.log" &&
			DDP_ERR="rank $r's log differs from an uninterrupted run's ($(wc -l <"$tw/job/rank$r.log") of 80 lines)"
	done
	[ -d "$tw/store" ] && STORES+=("nccl_teardown=$tw/store")
	if [ -z "$DDP_ERR" ]; then
		cost=$(python3 - "$tw/ref" <<'PY'
import statistics, sys
t = [l.split() for r in (0, 1) for l in open("%s/time%d.log" % (sys.argv[1], r))]
td = max(float(l[1]) for l in t if l[0] == "teardown"); rb = max(float(l[3]) for l in t if l[0] == "teardown")
st = lambda a, b: statistics.median(float(l[2]) for l in t if l[0] == "step" and a <= int(l[1]) < b)
print("teardown %.2f s + rebuild %.2f s a checkpoint; median step %.1f ms before, %.1f ms after" % (td, rb, st(5, 40) * 1e3, st(41, 80) * 1e3))
PY
)
		pass nccl_teardown "a 2-rank NCCL DDP job with NCCL's defaults (P2P on) that destroyed its process group at step 40 taken by crest checkpoint --kill, restored, its group rebuilt: both ranks' logs identical to an uninterrupted run's (80 lines each); in the uninterrupted run: $cost; $((SECONDS - t)) s"
	else
		fail nccl_teardown "$DDP_ERR" "$tl"
	fi
fi
# nccl_shim (issue 33 item 6): NCCL's defaults (P2P on), as in
# nccl_p2p_refuse, but the job started by `crest run --cuda-shim`, with as
# many ranks as GPUs (up to 4). A live checkpoint (the job runs on), then
# one with --kill and a restore: every rank's log must equal an
# uninterrupted run's (without the shim), and crest must say it went
# through the shim. Then the shim's cost on the step: the same job, no
# checkpoint, its steps timed, with and without the shim, alternating.
if torch_2gpu nccl_shim; then
	sw=$WORK/nccl_shim sl=$LOGS/nccl_shim.log DDP_ERR="" t=$SECONDS
	nr=$ngpu; [ "$nr" -gt 4 ] && nr=4
	export DDP_RANKS=$nr
	mkdir -p "$sw/job" "$sw/ref"
	: >"$sl"
	shimlib=$(dirname "$(bin crest)")/../lib/libcrest-shim.so
	[ -f "$shimlib" ] || shimlib=$ROOT/build/gpu/libcrest-shim.so
	echo "PyTorch's NCCL imports (libtorch_cuda.so): $(nm -D --undefined-only "$(python3 -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cuda.so"))')" 2>/dev/null | awk '/ nccl/ {print $2}' | sed 's/@.*//' | sort -u | paste -sd' ')" >>"$sl"
	echo "the shim defines: $(nm -D --defined-only "$shimlib" | awk '/ nccl/ {print $3}' | sort -u | paste -sd' ')" >>"$sl"
	missing=$(comm -23 <(nm -D --undefined-only "$(python3 -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cuda.so"))')" 2>/dev/null | awk '/ nccl/ {print $2}' | sed 's/@.*//' | sort -u) \
		<(nm -D --defined-only "$shimlib" | awk '/ nccl/ {print $3}' | sort -u) | grep -vE '^nccl(GetVersion|GetUniqueId|GetErrorString|MemAlloc|MemFree)$' | paste -sd' ')
	echo "imported by PyTorch, taking a communicator, not in the shim: ${missing:-none}" >>"$sl"
	(timeout -k 5 150 python3 "$WORK/ddp.py" "$sw/ref" 100 nccl >"$sw/ref.out" 2>&1; echo $? >"$sw/ref.rc") &
	refpid=$!
	(cd "$sw/job" && export NCCL_DEBUG=${NCCL_DEBUG:-WARN} && exec timeout -k 10 200 "${RUN[@]}" "$(bin crest)" --store "$sw/store" run --cuda-shim -- \
		env -u LD_LIBRARY_PATH python3 "$WORK/ddp.py" "$sw/job" 100 nccl >"$sw/job/launcher.out" 2>"$sw/run.err" </dev/null) &
	crun=$!
	for i in $(seq 1 900); do
		[ "$(cat "$sw/job/rank$((nr - 1)).log" 2>/dev/null | wc -l)" -ge 25 ] && break
		kill -0 "$crun" 2>/dev/null || break
		sleep 0.1
	done
	init=$(sed -n 's/.* runs as pid \([0-9]*\) .*/\1/p' "$sw/run.err")
	if [ -z "$init" ] || [ "$(cat "$sw/job/rank$((nr - 1)).log" 2>/dev/null | wc -l)" -lt 25 ]; then
		DDP_ERR="the job did not start under crest run --cuda-shim: $(tail -2 "$sw/run.err" | paste -sd' ') $(tail -1 "$sw/job/launcher.out")"
	elif ! timeout -k 5 120 "${RUN[@]}" "$(bin crest)" --store "$sw/store" checkpoint --pid "$init" --tag live >>"$sl" 2>"$sw/ck1.err"; then
		DDP_ERR="the live checkpoint of the shimmed job failed: $(tail -1 "$sw/ck1.err")"
	elif ! grep -q "NCCL shim: [0-9]* communicator(s) of $nr process" "$sw/ck1.err"; then
		DDP_ERR="the live checkpoint did not go through the shim: $(tail -1 "$sw/ck1.err")"
	else
		n0=$(wc -l <"$sw/job/rank0.log")
		for i in $(seq 1 100); do [ "$(wc -l <"$sw/job/rank0.log")" -ge $((n0 + 10)) ] && break; sleep 0.1; done
		if [ "$(wc -l <"$sw/job/rank0.log")" -lt $((n0 + 10)) ]; then
			DDP_ERR="the job made no progress after the live checkpoint ($(wc -l <"$sw/job/rank0.log") lines)"
		elif ! timeout -k 5 120 "${RUN[@]}" "$(bin crest)" --store "$sw/store" checkpoint --pid "$init" --kill --tag shim >>"$sl" 2>"$sw/ck2.err"; then
			DDP_ERR="crest checkpoint --kill of the shimmed job failed: $(tail -1 "$sw/ck2.err")"
		else
			wait "$crun" 2>/dev/null
			for i in $(seq 1 100); do kill -0 "$init" 2>/dev/null || break; sleep 0.1; done
			if ! timeout -k 5 120 "${RUN[@]}" "$(bin crest)" --store "$sw/store" restore shim >>"$sl" 2>"$sw/rs.err"; then
				DDP_ERR="crest restore of the shimmed NCCL job failed: $(tail -1 "$sw/rs.err")"
			fi
			cat "$sw/rs.err" >>"$sl"
		fi
	fi
	cat "$sw/ck1.err" "$sw/ck2.err" >>"$sl" 2>/dev/null
	[ -n "$DDP_ERR" ] && { echo "== the job's output"; tail -40 "$sw/job/launcher.out"; } >>"$sl" 2>/dev/null
	# The restored job (not our child) runs to its end.
	for i in $(seq 1 1200); do
		[ "$(cat "$sw/job/rank$((nr - 1)).log" 2>/dev/null | wc -l)" -ge 100 ] && [ "$(cat "$sw/job/rank0.log" | wc -l)" -ge 100 ] && break
		[ -n "$DDP_ERR" ] && break
		sleep 0.1
	done
	sleep 1
	[ -n "$init" ] && kill -9 "$init" 2>/dev/null
	kill "$crun" 2>/dev/null; wait "$crun" 2>/dev/null
	wait "$refpid"
	[ -z "$DDP_ERR" ] && [ "$(cat "$sw/ref.rc" 2>/dev/null)" != 0 ] && DDP_ERR="the uninterrupted run failed: $(tail -1 "$sw/ref.out")"
	for r in $(seq 0 $((nr - 1))); do
		[ -z "$DDP_ERR" ] && ! cmp -s "$sw/job/rank$r.log" "$sw/ref/rank$r.log" &&
			DDP_ERR="rank $r's log differs from an uninterrupted run's ($(wc -l <"$sw/job/rank$r.log") of $(wc -l <"$sw/ref/rank$r.log") lines)"
	done
	[ -d "$sw/store" ] && STORES+=("nccl_shim=$sw/store")
	cost=""
	if [ -z "$DDP_ERR" ]; then
		# The shim's cost on the step: 300 timed steps, back to back, with and without.
		for k in 1 2; do
			for mode in bare shim; do
				mkdir -p "$sw/cost-$mode-$k"
				if [ $mode = shim ]; then
					LD_PRELOAD=$shimlib DDP_TIME=1 DDP_SLEEP=0 timeout -k 5 120 python3 "$WORK/ddp.py" "$sw/cost-$mode-$k" 300 nccl >>"$sl" 2>&1
				else
					DDP_TIME=1 DDP_SLEEP=0 timeout -k 5 120 python3 "$WORK/ddp.py" "$sw/cost-$mode-$k" 300 nccl >>"$sl" 2>&1
				fi
			done
		done
		cost=$(python3 - "$sw" <<'PY'
import glob, statistics, sys
def med(mode):
    v = []
    for f in glob.glob("%s/cost-%s-*/time*.log" % (sys.argv[1], mode)):
        v += [float(x) for x in open(f).read().split()[50:]]
    return statistics.median(v)
b, s = med("bare"), med("shim")
print("median step %.3f ms with the shim, %.3f ms without (%+.2f%%: a 2.5 ms step beside other jobs, a few %% of noise; bench/transparent/nccl_shim.sh measures it)" % (s * 1e3, b * 1e3, (s / b - 1) * 100))
PY
)
	fi
	stall1=$(sed -n 's/.*resumed after a \([0-9.]*\) s stall.*/\1/p' "$sl" | head -1)
	note=$(grep -m1 "NCCL shim:" "$sw/ck1.err" | cut -c1-200)
	unset DDP_RANKS
	if [ -z "$DDP_ERR" ]; then
		pass nccl_shim "a $nr-rank NCCL DDP job with NCCL's defaults (P2P on) under crest run --cuda-shim: checkpointed live (stall ${stall1:-?} s; \"$note\"), then with --kill and restored: every rank's log identical to an uninterrupted run's without the shim (100 lines each); $cost; $((SECONDS - t)) s"
	else
		fail nccl_shim "$DDP_ERR" "$sl"
	fi
fi
unset CUBLAS_WORKSPACE_CONFIG USE_LIBUV

# 4. PyTorch: killed, resumed in a fresh process, losses bit for bit.
[ $GPU = 1 ] && torch_ok=$(python3 -c 'import torch; print(int(torch.cuda.is_available()))' 2>/dev/null || echo none)
# torch_ready NAME: 0 when a check of a PyTorch job on the GPU can run;
# else it says why (skip, or fail) and is 1.
torch_ready() {
	if ! wanted "$1"; then
		:
	elif [ $GPU = 0 ]; then
		skip "$1" "no GPU here"
	elif [ "$torch_ok" = none ]; then
		skip "$1" "python3 has no torch"
	elif [ "$torch_ok" != 1 ]; then
		fail "$1" "torch.cuda.is_available() is false although nvidia-smi lists a GPU"
	else
		return 0
	fi
	return 1
}
if ! torch_ready train; then
	:
elif [ ! -e "$LIBCREST" ]; then
	fail train "$LIBCREST is missing"
else
	CREST_LIB=$LIBCREST PYTHONUNBUFFERED=1 runlog train 240 python3 python/examples/train.py --mode check \
		--device cuda --store "$WORK/train" --steps 300 --every 25 --kill-at 190 --hidden 2048 --staging-mib 512
	log=$LOGS/train.log
	case $RC in
	0)
		STORES+=("train=$WORK/train")
		pass train "$(grep -E '^check: [0-9]' "$log" | tail -1 | sed 's/^check: //'), ${DT} s"
		;;
	124) fail train "timed out after 240 s" "$log" ;;
	*) fail train "exit $RC: $(grep -E '^check: |Error' "$log" | tail -1)" "$log" ;;
	esac
fi

# train_split: train's model spread over two GPUs in one process (issue 34):
# parameters and Adam's state on both, saved by one libcrest handle, the
# losses after the resume bit for bit those of an uninterrupted run.
if ! wanted train_split; then
	:
elif [ $GPU = 1 ] && [ "$ngpu" -lt 2 ]; then
	skip train_split "needs two GPUs (one here: nvidia-h200-x2)"
elif ! torch_ready train_split; then
	:
elif [ ! -e "$LIBCREST" ]; then
	fail train_split "$LIBCREST is missing"
else
	CREST_LIB=$LIBCREST PYTHONUNBUFFERED=1 runlog train_split 240 python3 python/examples/train.py --mode check \
		--device split --store "$WORK/train_split" --steps 200 --every 25 --kill-at 130 --hidden 2048 \
		--staging-mib 64
	log=$LOGS/train_split.log
	case $RC in
	0)
		STORES+=("train_split=$WORK/train_split")
		pass train_split "model on cuda:0 and cuda:1: $(grep -E '^check: [0-9]' "$log" | tail -1 | sed 's/^check: //'), ${DT} s"
		;;
	124) fail train_split "timed out after 240 s" "$log" ;;
	*) fail train_split "exit $RC: $(grep -E '^check: |Error' "$log" | tail -1)" "$log" ;;
	esac
fi

# lib_ddp, lib_fsdp: tests/library/test_python_ddp.py on GPUs (issue 34 item
# 4): python/examples/ddp_train.py under torchrun, 2 ranks, one GPU a rank,
# NCCL, each rank checkpointing its tensors through libcrest as one job
# (crest.Checkpointer(job=...)); one rank SIGKILLed in the middle of a job
# checkpoint, the job relaunched and resumed. lib_fsdp shards the model with
# FSDP2's fully_shard, so each rank saves its own shards (DTensors' local
# tensors). No CRIU, no root: the library path.
lib_ddp_check() {  # lib_ddp_check NAME FSDP(0|1)
	local name=$1 log=$LOGS/$1.log why
	if ! wanted "$name"; then
		return
	elif [ $GPU = 1 ] && [ "$ngpu" -lt 2 ]; then
		skip "$name" "needs two GPUs (one here: nvidia-h200-x2)"
		return
	elif ! torch_ready "$name"; then
		return
	elif [ ! -e "$LIBCREST" ]; then
		fail "$name" "$LIBCREST is missing"
		return
	fi
	CREST_LIB=$LIBCREST CREST_TEST_DDP_DEVICE=cuda CREST_TEST_DDP_FSDP=$2 USE_LIBUV=0 PYTHONUNBUFFERED=1 \
		runlog "$name" 360 python3 tests/library/test_python_ddp.py "$WORK/$name" "$(cmd_file crest)" \
		"$(cmd_file casctl)"
	[ -d "$WORK/$name/ref" ] && STORES+=("$name.ref=$WORK/$name/ref")
	[ -d "$WORK/$name/run" ] && STORES+=("$name.run=$WORK/$name/run")
	case $RC in
	0)
		pass "$name" "$(sed -n 's/^ok: //p' "$log"); $(sed -n 's/^restorable: //p' "$log"); unique bytes $(sed -n \
			's/^dedup: .*(\([0-9.]*x [^;]*\);.*/\1/p' "$log"), ${DT} s"
		;;
	77)
		why=$(sed -n 's/^SKIP: //p' "$log" | head -1)
		skip "$name" "${why:-the test skipped without saying why}"
		;;
	124) fail "$name" "timed out after 360 s" "$log" ;;
	*) fail "$name" "exit $RC: $(grep -E '^FAIL|Error' "$log" | head -1)" "$log" ;;
	esac
}
lib_ddp_check lib_ddp 0
lib_ddp_check lib_fsdp 1

# infer_server: a small PyTorch inference server (a 256 MiB model on the
# GPU behind an HTTP port on 127.0.0.1, Python's http.server) answering
# clients that know nothing of crest. A client queries it throughout; crest
# checkpoints it mid-traffic with --kill --tcp-close (a client's connection
# in flight is a peer outside the job: the restored server finds it closed,
# and the client retries), then restores it: the same port answers again,
# and 16 fixed requests get the same bytes as before the checkpoint.
if ! torch_ready infer_server; then
	:
elif [ "$(id -u)" != 0 ]; then
	skip infer_server "checkpoints need root (CRIU)"
else
	iw=$WORK/infer il=$LOGS/infer_server.log INF_ERR="" t=$SECONDS
	mkdir -p "$iw"
	: >"$il"
	cat >"$iw/server.py" <<'PY'
import hashlib, http.server, os, sys, torch
torch.manual_seed(0)
torch.use_deterministic_algorithms(True)
model = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(4)]).cuda().eval()
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    def do_GET(self):
        try:
            seed = int(self.path.strip("/"))
        except ValueError:
            self.send_error(400); return
        g = torch.Generator(device="cuda").manual_seed(seed)
        with torch.no_grad():
            y = model(torch.randn(8, 4096, device="cuda", generator=g))
        body = ("%d %s %.6f\n" % (seed, hashlib.sha256(y.cpu().numpy().tobytes()).hexdigest(), float(y.sum()))).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
s = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H)
print("ready", flush=True)
s.serve_forever()
PY
	cat >"$iw/client.py" <<'PY'
# client.py PORT MODE: "fixed" prints the 16 fixed answers (exit 1 on any
# failure); "loop" queries until killed, retrying failures, and counts.
import sys, time, urllib.request
port, mode = int(sys.argv[1]), sys.argv[2]
def ask(i):
    with urllib.request.urlopen("http://127.0.0.1:%d/%d" % (port, i), timeout=30) as r:
        return r.read().decode()
if mode == "fixed":
    sys.stdout.write("".join(ask(i) for i in range(16)))
else:
    ok = bad = 0
    i = 1000
    while True:
        try:
            ask(i); ok += 1
        except Exception:
            bad += 1
            time.sleep(0.05)
        i += 1
        print("ok %d failed %d" % (ok, bad), flush=True)
PY
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	(cd "$iw" && exec setsid python3 "$iw/server.py" "$port" >"$iw/server.out" 2>&1 </dev/null) &
	spid=$!
	for i in $(seq 1 600); do grep -q ready "$iw/server.out" 2>/dev/null && break; kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
	if ! timeout 60 python3 "$iw/client.py" "$port" fixed >"$iw/before.txt" 2>>"$il"; then
		INF_ERR="the server did not answer before the checkpoint: $(tail -1 "$iw/server.out")"
	fi
	if [ -z "$INF_ERR" ]; then
		python3 "$iw/client.py" "$port" loop >"$iw/loop.txt" 2>/dev/null &
		cpid=$!
		sleep 1
		if ! timeout -k 5 120 "${RUN[@]}" "$(bin crest)" --store "$iw/store" checkpoint --pid "$spid" --kill --tcp-close \
			--tag srv >>"$il" 2>"$iw/ck.err"; then
			INF_ERR="crest checkpoint --kill --tcp-close of the server failed: $(tail -1 "$iw/ck.err")"
		fi
		cat "$iw/ck.err" >>"$il"
		during=$(tail -1 "$iw/loop.txt")
	fi
	if [ -z "$INF_ERR" ]; then
		wait "$spid" 2>/dev/null
		for i in $(seq 1 100); do live_of "$spid" >/dev/null || break; sleep 0.1; done
		t1=$SECONDS
		if ! timeout -k 5 120 "${RUN[@]}" "$(bin crest)" --store "$iw/store" restore srv >>"$il" 2>"$iw/rs.err"; then
			INF_ERR="crest restore of the server failed: $(tail -1 "$iw/rs.err")"
		fi
		cat "$iw/rs.err" >>"$il"
	fi
	if [ -z "$INF_ERR" ]; then
		if ! timeout 60 python3 "$iw/client.py" "$port" fixed >"$iw/after.txt" 2>>"$il"; then
			INF_ERR="the restored server did not answer on port $port"
		elif ! cmp -s "$iw/before.txt" "$iw/after.txt"; then
			INF_ERR="the restored server's answers differ from its answers before the checkpoint: $(diff "$iw/before.txt" "$iw/after.txt" | head -2 | paste -sd' ')"
		fi
		back=$((SECONDS - t1))
		n0=$(tail -1 "$iw/loop.txt" | awk '{print $2}')
		sleep 1
		n1=$(tail -1 "$iw/loop.txt" | awk '{print $2}')
		[ -z "$INF_ERR" ] && [ "${n1:-0}" -le "${n0:-0}" ] && INF_ERR="the querying client gets no answers from the restored server ($(tail -1 "$iw/loop.txt"))"
	fi
	kill "${cpid:-}" 2>/dev/null; wait "${cpid:-}" 2>/dev/null
	pkill -9 -f "$iw/server.py" 2>/dev/null
	[ -d "$iw/store" ] && STORES+=("infer_server=$iw/store")
	if [ -z "$INF_ERR" ]; then
		pass infer_server "a PyTorch HTTP server (256 MiB model on the GPU) checkpointed with --kill --tcp-close while a client queried it (client before the kill: $during), restored and answering again in ${back} s: 16 requests, the same bytes as before the checkpoint; client at the end: $(tail -1 "$iw/loop.txt"), $((SECONDS - t)) s"
	else
		fail infer_server "$INF_ERR" "$il"
	fi
fi

# 4b. crest bench restore --to gpu on gpu_multi's newest snapshot: figures
# against the pinned+H2D ceiling, and the picture where gnuplot is here.
bench_snap=$(x crest --store "$WORK/multi" --json log 2>/dev/null | python3 -c \
	'import json,sys; print(json.load(sys.stdin)[0]["snapshot"])' 2>/dev/null || true)
if ! wanted bench_gpu; then
	:
elif [ $GPU = 0 ]; then
	skip bench_gpu "no GPU here"
elif [ -z "$bench_snap" ]; then
	fail bench_gpu "gpu_multi left no snapshot to bench"
else
	plot=()
	command -v gnuplot >/dev/null 2>&1 && plot=(--plot "$LOGS/bench-restore-gpu.png")
	runlog bench_gpu 120 "${RUN[@]}" "$(bin crest)" --store "$WORK/multi" --json bench restore "$bench_snap" \
		--to gpu --repeat 3 "${plot[@]}"
	if [ $RC != 0 ]; then
		fail bench_gpu "exit $RC" "$LOGS/bench_gpu.log"
	elif why=$(python3 - "$LOGS/bench_gpu.log" <<'PY'
import json, sys
d = next(json.loads(l) for l in open(sys.argv[1]) if l.startswith('{'))
if 'skipped' in d:
    print('skipped although nvidia-smi lists a GPU: ' + d['skipped']); sys.exit(1)
g, c, r = d['gbps']['median'], d['ceiling_gbps']['median'], d['ratio']['median']
if not (g > 0 and c > 0):
    print('figures not positive: %r' % d); sys.exit(1)
print('%.1f MiB to the GPU: %.2f GB/s median of 3, ceiling (read, pinned H2D) %.2f GB/s, ratio %.2f'
      % (d['logical_bytes'] / 2**20, g, c, r))
PY
	); then
		pass bench_gpu "$why, ${DT} s"
	else
		fail bench_gpu "$why" "$LOGS/bench_gpu.log"
	fi
fi

# 5. Every chunk of every store used, re-read and re-hashed.
if [ ${#STORES[@]} -eq 0 ] && [ -z "${GPU_CHECK_ONLY:-}" ]; then
	skip verify "no store was written (no GPU here)"
fi
for s in "${STORES[@]}"; do
	name=${s%%=*} dir=${s#*=}
	runlog "verify-$name" 120 "${RUN[@]}" "$(bin casctl)" --store "$dir" verify
	case $RC in
	0) pass "verify:$name" "$(tail -1 "$LOGS/verify-$name.log"), ${DT} s" ;;
	124) fail "verify:$name" "timed out after 120 s" "$LOGS/verify-$name.log" ;;
	*) fail "verify:$name" "exit $RC: $(tail -1 "$LOGS/verify-$name.log")" "$LOGS/verify-$name.log" ;;
	esac
done

echo "gpu-check: $PASSED passed, $FAILED failed, $SKIPPED skipped, $KNOWN known failures (open issues) in $((SECONDS - T0)) s (logs in $LOGS)"
[ "$FAILED" -eq 0 ]
