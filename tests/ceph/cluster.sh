#!/bin/bash
# The suite's own Ceph (the ceph fixture: scripts/ceph-cluster.sh, started
# once for every test that needs it) takes real objects: 64 of random
# sizes and contents put with rados, read back equal, listed, counted by
# the cluster's statistics, removed, and gone. No rados bench: a few
# seconds. Without Ceph installed it fails, never skips: CI installs it
# (scripts/setup.sh), and a skip would hide the tests that need it.
set -u
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
command -v rados >/dev/null || fail "rados is missing: Ceph's packages are not installed (scripts/setup.sh --deps-only installs them)"
: "${CEPH_CONF:?CEPH_CONF names the cluster (the ceph fixture sets it)}"
[ -f "$CEPH_CONF" ] || fail "no cluster: $CEPH_CONF is missing (did the fixture ceph.start fail?)"
export CEPH_CONF
pool=${CREST_CEPH_POOL:-crest}
# A client that cannot reach the cluster would retry for ever.
r() { timeout 60 rados -p "$pool" "$@"; }
# The pool's statistics, as "objects copies bytes".
pool_stats() {
	timeout 60 rados df -f json 2>"$T/df.err" | python3 -c '
import json, sys
for p in json.load(sys.stdin)["pools"]:
    if p["name"] == sys.argv[1]:
        print(p["num_objects"], p["num_object_copies"], p["size_bytes"])' "$pool"
}
# The statistics reach the monitor through the manager, a second or two
# late: wait for OBJECTS objects, 30 s at most.
wait_objects() {  # wait_objects OBJECTS
	local s i
	for ((i = 0; i < 150; i++)); do
		s=$(pool_stats)
		[ "${s%% *}" = "$1" ] && { echo "$s"; return 0; }
		sleep 0.2
	done
	fail "rados df: pool $pool holds '${s%% *}' objects after 30 s, expected $1 ($(head -c 300 "$T/df.err"))"
}

# Names of this run only, so another test on the same pool is not counted.
prefix=cluster-test-$$-
n=64
mkdir "$T/in" "$T/out"
for ((i = 0; i < n; i++)); do
	# Sizes that matter to a store: empty, one byte, around a 4 KiB block,
	# and the rest random up to 256 KiB; one of 4 MiB + 1, past the size
	# rados itself writes in one piece.
	case $i in
	0) size=0 ;;
	1) size=1 ;;
	2) size=4095 ;;
	3) size=4097 ;;
	4) size=$((4 * 1024 * 1024 + 1)) ;;
	*) size=$((RANDOM * 8 + RANDOM % 8)) ;;
	esac
	head -c "$size" /dev/urandom >"$T/in/$i"
	r put "$prefix$i" "$T/in/$i" 2>"$T/err" || fail "rados put $prefix$i ($size bytes): $(head -c 300 "$T/err")"
done

for ((i = 0; i < n; i++)); do
	r get "$prefix$i" "$T/out/$i" 2>"$T/err" || fail "rados get $prefix$i: $(head -c 300 "$T/err")"
	cmp -s "$T/in/$i" "$T/out/$i" || fail "object $prefix$i read back differs from what was put ($(stat -c %s "$T/in/$i") bytes put, $(stat -c %s "$T/out/$i") read)"
done
# The size the cluster records, for the odd ones.
for i in 0 1 4; do
	want=$(stat -c %s "$T/in/$i")
	r stat "$prefix$i" >"$T/stat" 2>&1 || fail "rados stat $prefix$i: $(head -c 300 "$T/stat")"
	grep -q "size $want\$" "$T/stat" || fail "rados stat $prefix$i: expected size $want, got: $(cat "$T/stat")"
done
# Overwritten whole: the second put replaces the first, not merges.
head -c 1000 /dev/urandom >"$T/in/new"
if ! r put "${prefix}5" "$T/in/new" || ! r get "${prefix}5" "$T/out/new"; then
	fail "overwriting ${prefix}5"
fi
cmp -s "$T/in/new" "$T/out/new" || fail "${prefix}5 after an overwrite is not the new content"
mv "$T/in/new" "$T/in/5"
total=$(stat -c %s "$T"/in/* | awk '{ s += $1 } END { print s }')

r ls >"$T/ls" 2>"$T/err" || fail "rados ls: $(head -c 300 "$T/err")"
listed=$(grep -c "^$prefix" "$T/ls")
[ "$listed" -eq "$n" ] || fail "rados ls lists $listed objects of this run, expected $n"

# Counted: the objects, one copy each (pool size 1), and at least their
# bytes allocated (bluestore rounds each up to its allocation unit).
read -r objects copies bytes <<<"$(wait_objects "$n")"
[ "$copies" -eq "$n" ] || fail "rados df: $copies copies of $n objects, expected one each (pool size 1)"
[ "$bytes" -ge "$total" ] || fail "rados df: $bytes bytes stored for $total bytes of objects"

# Removed, in one call; gone from the listing, from reads and from the count.
names=()
for ((i = 0; i < n; i++)); do names+=("$prefix$i"); done
r rm "${names[@]}" 2>"$T/err" || fail "rados rm: $(head -c 300 "$T/err")"
r ls >"$T/ls" 2>"$T/err" || fail "rados ls after rm: $(head -c 300 "$T/err")"
! grep -q "^$prefix" "$T/ls" || fail "rados ls still lists $(grep -c "^$prefix" "$T/ls") removed objects"
! r get "${prefix}7" "$T/out/gone" 2>/dev/null || fail "rados get of a removed object succeeded"
wait_objects 0 >/dev/null
echo "ok: $n objects, $total bytes, put, read back, counted ($objects objects, $bytes bytes allocated) and removed"
