#!/bin/bash
# rados_store.sh [BUILD] - crest's store on RADOS (`--store rados:POOL/NS`,
# issue 35 item 2) beside `rados bench` in one run, on the same cluster:
#   - put of RS_MIB (512) MiB of random bytes from node a (a file in
#     $TMPDIR), then the same again (every chunk already stored);
#   - get of it on node a (its index trusted), compared with the file;
#   - on node b (an index cache of its own: CREST_CACHE_DIR), the first
#     open, which builds b's index from the packs and meta logs, then a
#     get there;
#   - node a puts the tree again with RS_MIB/8 MiB more in a new file;
#     node b's next open catches its index up (what the put committed),
#     beside node c's first open, a full build of the same store;
#   - `rados bench` write and sequential read of 4 MiB objects, 16 in
#     flight, RS_BENCH_S (10) seconds each.
# Ratios are crest's rate over rados bench's of the same direction. MB/s
# are 10^6 bytes a second, as rados bench reports them.
#
# The cluster: the one CEPH_CONF names (pool $CREST_CEPH_POOL, default
# crest), else a one-node cluster of its own (bench/store/ceph_setup.sh).
# BUILD (build) holds cli/crest. Exit: 0 done, 1 a step failed, 2 usage.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$here/../..
if [ $# -gt 1 ]; then
	echo "usage: bench/store/rados_store.sh [BUILD]" >&2
	exit 2
fi
build=${1:-$root/build}
crest=$build/cli/crest
mib=${RS_MIB:-512}
bench_s=${RS_BENCH_S:-10}
for v in "$mib" "$bench_s"; do
	[[ $v =~ ^[1-9][0-9]*$ ]] || {
		echo "rados_store.sh: RS_MIB and RS_BENCH_S are whole numbers, not '$v'" >&2
		exit 2
	}
done
[ -x "$crest" ] || {
	echo "rados_store.sh: $crest is missing: build crest first" >&2
	exit 1
}
source "$here/ceph_setup.sh"
ceph_setup rados_store.sh
S=rados:$pool/bench-store-$$
data=$work/data
mkdir -p "$data"
head -c $((mib << 20)) /dev/urandom >"$data/blob"
bytes=$((mib << 20))

now() { date +%s%N; }
mbs() { python3 -c "print(f'{$1 / ($2 / 1e9) / 1e6:.0f}')"; }   # mbs BYTES NS
step() {  # step NODE WHAT CMD...: runs it as node NODE, prints ns taken
	local n=$1 what=$2 t0
	shift 2
	t0=$(now)
	CREST_CACHE_DIR=$work/node-$n "$@" >"$work/out" 2>"$work/err" || {
		echo "rados_store.sh: $what failed: $(tail -3 "$work/err")" >&2
		exit 1
	}
	echo $(($(now) - t0))
}

step a init "$crest" init --store "$S" >/dev/null
put1=$(step a "the first put" "$crest" --json put --store "$S" "$data")
put2=$(step a "the second put" "$crest" --json put --store "$S" "$data")
rm -rf "$work/r"
get_a=$(step a "the get on node a" "$crest" get --store "$S" latest "$work/r")
cmp -s "$data/blob" "$work/r/data/blob" || { echo "rados_store.sh: node a's get differs" >&2; exit 1; }
rm -rf "$work/r"
build_b=$(step b "node b's first open" "$crest" ls --store "$S")
get_b=$(step b "the get on node b" "$crest" get --store "$S" latest "$work/r")
cmp -s "$data/blob" "$work/r/data/blob" || { echo "rados_store.sh: node b's get differs" >&2; exit 1; }
rm -rf "$work/r"
inc=$(( (mib + 7) / 8 ))
head -c $((inc << 20)) /dev/urandom >"$data/more"
put3=$(step a "the incremental put" "$crest" --json put --store "$S" "$data")
catch_b=$(step b "node b's catch-up" "$crest" ls --store "$S")
grep -q "caught up" "$work/err" || { echo "rados_store.sh: node b did not catch up: $(cat "$work/err")" >&2; exit 1; }
build_c=$(step c "node c's first open" "$crest" ls --store "$S")
rm -rf "$data"

# rados bench, the same cluster and pool, after crest's steps.
run=crest-store-bench-$$
rb() {  # rb write|seq: MB/s
	local b=()
	[ "$1" = write ] && b=(-b 4M --no-cleanup)
	timeout $((bench_s * 6 + 120)) rados bench -p "$pool" "$bench_s" "$1" "${b[@]}" -t 16 \
		--run-name "$run" >"$work/rb-$1" 2>&1 || {
		echo "rados_store.sh: rados bench $1 failed: $(tail -3 "$work/rb-$1")" >&2
		exit 1
	}
	awk '/^Bandwidth \(MB\/sec\):/ { print $3 }' "$work/rb-$1"
}
rbw=$(rb write)
rbr=$(rb seq)
timeout 120 rados -p "$pool" cleanup --run-name "$run" >/dev/null 2>&1 || true

pw=$(mbs $bytes "$put1")
pw2=$(mbs $bytes "$put2")
ga=$(mbs $bytes "$get_a")
gb=$(mbs $bytes "$get_b")
ratio() { python3 -c "print(f'{$1 / $2:.2f}')"; }
echo "| $mib MiB, 4 MiB objects for rados bench | MB/s | / rados bench |"
echo "|---|---|---|"
echo "| crest put, first (all new) | $pw | $(ratio "$pw" "$rbw") of write |"
echo "| crest put, again (all stored) | $pw2 | $(ratio "$pw2" "$rbw") of write |"
echo "| crest get, node a | $ga | $(ratio "$ga" "$rbr") of seq read |"
echo "| node b's first open: its index built from the packs and logs | $(mbs $bytes "$build_b") | $(python3 -c "print(f'{$build_b / 1e9:.2f} s')") |"
echo "| crest get, node b | $gb | $(ratio "$gb" "$rbr") of seq read |"
echo "| node a's put of $inc MiB more | $(mbs $((inc << 20)) "$put3") | $(ratio "$(mbs $((inc << 20)) "$put3")" "$rbw") of write |"
echo "| node b's open after it: its index caught up | $(python3 -c "print(f'{$catch_b / 1e9:.2f} s')") | $(ratio "$catch_b" "$build_c") of node c's build |"
echo "| node c's first open: the same store built ($((mib + inc)) MiB) | $(mbs $(((mib + inc) << 20)) "$build_c") | $(python3 -c "print(f'{$build_c / 1e9:.2f} s')") |"
echo "| rados bench write, 16 in flight | $rbw | 1 |"
echo "| rados bench seq read, 16 in flight | $rbr | 1 |"
