#!/bin/bash
# rados_writers.sh [BUILD] - N crest writers, each standing for a node (an
# index cache of its own: CREST_CACHE_DIR), putting into one store on RADOS
# at once (issue 35, items 3 and 6), for N in RW_WRITERS ("1 2 4 8 16"):
#   - each writer puts a tree of RW_MIB (64) MiB: half of it the same bytes
#     in every writer (a replica), half its own;
#   - two rounds: the first checkpoint (each node's cache empty), then a
#     second with each writer's own half new (caches caught up): the wall
#     time of each round, and each writer's own (its lock wait, its cache's
#     build or catch-up, its put);
#   - the bytes the store's pack objects hold (rados stat), beside what the
#     data would take stored once: RW_MIB/2 for the shared half plus
#     RW_MIB/2 a writer a round;
#   - the first and the last writer's second snapshots got back and
#     compared.
# A store on RADOS has one writer at a time (cas/cache.c): the writers queue
# on its lock, and each catches its index up with the puts before it. This
# measures what that costs as N grows; it is not a model of the sharded
# index docs/SCALE.md proposes for many writers.
#
# The cluster: the one CEPH_CONF names (pool $CREST_CEPH_POOL, default
# crest), else a one-node cluster of its own (bench/store/ceph_setup.sh).
# MB/s are 10^6 bytes a second. Exit: 0 done, 1 a step failed, 2 usage.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$here/../..
if [ $# -gt 1 ]; then
	echo "usage: bench/store/rados_writers.sh [BUILD]" >&2
	exit 2
fi
build=${1:-$root/build}
crest=$build/cli/crest
mib=${RW_MIB:-64}
writers=${RW_WRITERS:-1 2 4 8 16}
for v in "$mib" $writers; do
	[[ $v =~ ^[1-9][0-9]*$ ]] || {
		echo "rados_writers.sh: RW_MIB and RW_WRITERS are whole numbers, not '$v'" >&2
		exit 2
	}
done
[ -x "$crest" ] || {
	echo "rados_writers.sh: $crest is missing: build crest first" >&2
	exit 1
}
source "$here/ceph_setup.sh"
ceph_setup rados_writers.sh
export CREST_LOCK_TIMEOUT=3600
half=$((mib / 2))
max=0
for n in $writers; do (( n > max )) && max=$n; done
mkdir -p "$work/shared"
head -c $((half << 20)) /dev/urandom >"$work/shared/replica"
for ((i = 1; i <= max; i++)); do
	mkdir -p "$work/d$i"
	ln "$work/shared/replica" "$work/d$i/replica"
	head -c $((half << 20)) /dev/urandom >"$work/d$i/own"
done
now() { date +%s%N; }
py() { python3 -c "print($1)"; }

# round WRITERS TAG: the writers' puts at once; sets wall, tmin, tmax (ns).
round() {
	local n=$1 tag=$2 i t0 pids=()
	t0=$(now)
	for ((i = 1; i <= n; i++)); do
		( s=$(now)
		  CREST_CACHE_DIR=$work/c$i-$n "$crest" put --tag "$tag$i" --store "$S" "$work/d$i" >/dev/null 2>"$work/err$i" ||
			{ echo "rados_writers.sh: writer $i of $n failed: $(tail -2 "$work/err$i")" >&2; exit 1; }
		  echo $(($(now) - s)) >"$work/t$i" ) &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || exit 1; done
	wall=$(($(now) - t0))
	tmin=$(for ((i = 1; i <= n; i++)); do cat "$work/t$i"; done | sort -n | head -1)
	tmax=$(for ((i = 1; i <= n; i++)); do cat "$work/t$i"; done | sort -n | tail -1)
}
secs() { py "f'{$1 / 1e9:.2f}'"; }

echo "Round 1: each writer's first checkpoint, its node's index cache empty (built from what the writers before it stored)."
echo "Round 2: each writer's second, its own half new bytes, its cache caught up with the puts since its last."
echo
echo "| writers | round 1 wall s | writer s, min-max | round 2 wall s | MB/s, all writers | writer s, min-max | stored MiB | data once, MiB | stored / once |"
echo "|---|---|---|---|---|---|---|---|---|"
for n in $writers; do
	S=rados:$pool/bench-writers-$n-$$
	ns=${S#rados:$pool/}
	CREST_CACHE_DIR=$work/c0-$n "$crest" init --store "$S" >/dev/null
	round "$n" a
	r1="| $n | $(secs $wall) | $(secs $tmin)-$(secs $tmax) |"
	for ((i = 1; i <= n; i++)); do head -c $((half << 20)) /dev/urandom >"$work/d$i/own"; done
	round "$n" b
	stored=0
	for o in $(timeout 120 rados -p "$pool" -N "$ns" ls | grep '^pack\.'); do
		size=$(timeout 60 rados -p "$pool" -N "$ns" stat "$o" | sed 's/.*size //')
		stored=$((stored + size))
	done
	for i in 1 "$n"; do
		rm -rf "$work/r"
		CREST_CACHE_DIR=$work/c$i-$n "$crest" get --store "$S" "b$i" "$work/r" >/dev/null 2>&1 ||
			{ echo "rados_writers.sh: get of writer $i's snapshot failed" >&2; exit 1; }
		cmp -s "$work/d$i/own" "$work/r/d$i/own" && cmp -s "$work/shared/replica" "$work/r/d$i/replica" ||
			{ echo "rados_writers.sh: writer $i's snapshot differs" >&2; exit 1; }
	done
	rm -rf "$work/r" "$work"/c*-"$n"
	once=$((half + 2 * n * half))
	echo "$r1 $(secs $wall) | $(py "f'{$n * ($mib << 20) / ($wall / 1e9) / 1e6:.0f}'") |" \
	     "$(secs $tmin)-$(secs $tmax) | $(py "f'{$stored / 1048576:.0f}'") | $once |" \
	     "$(py "f'{$stored / 1048576 / $once:.2f}'") |"
done
