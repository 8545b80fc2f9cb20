#!/bin/bash
# A store on RADOS used from two "nodes" (issue 35): each node is an index
# cache of its own (CREST_CACHE_DIR; cas/cache.c), the store one namespace
# of the suite's cluster. What it shows, each step checked:
#   - a snapshot put on node A restores on node B byte for byte, and B's
#     put of a changed tree stores only what changed (chunks A stored are
#     found by B: one store, not two);
#   - each node sees the other's snapshots, never a stale listing: a cache
#     behind a sealed head (its writer closed cleanly) catches up, says so
#     and reads only what was committed since (the chunk entries a commit
#     logs, no pack); one behind an open head (a
#     writer died) or a gc (a new base) is rebuilt, and says so;
#   - a writer killed between recording a new generation in its cache and
#     putting it as the store's head (CREST_FAULT_DIE=store.head_bump)
#     leaves a cache that is rebuilt, not trusted;
#   - a writer killed after its put, before it seals the head
#     (store.head_seal): both nodes rebuild and list the put;
#   - a put of 160 MiB goes into pack objects of 64 MiB at most;
#   - a writer killed -9 in the middle of a put on one node leaves a store
#     the other node writes to, and both verify; its lease runs out
#     (CREST_RADOS_LEASE=3) for the next writer;
#   - casctl gc on one node: the other lists and restores what was kept;
#   - two tiers: a local store's snapshot pushed to the RADOS store (the
#     second push only what changed) and pulled by the other node into a
#     local store of its own, restored equal;
#   - bad store names: one line, a non-zero exit, nothing made.
# Random trees, the seed printed (CREST_TEST_SEED replays it).
# usage: nodes.sh CREST CASCTL
set -u
CREST=$1 CASCTL=$2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
: "${CEPH_CONF:?CEPH_CONF names the cluster (the ceph fixture sets it)}"
[ -f "$CEPH_CONF" ] || fail "no cluster: $CEPH_CONF is missing (did the fixture ceph.start fail?)"
pool=${CREST_CEPH_POOL:-crest}
seed=${CREST_TEST_SEED:-$(( $(date +%s%N) % 1000000000 ))}
echo "seed $seed (CREST_TEST_SEED=$seed replays it)"
RANDOM=$seed
S=rados:$pool/nodes-$seed-$$
export CREST_RADOS_LEASE=3 CREST_LOCK_TIMEOUT=60
on() {  # on NODE CMD...: the command as node NODE (a or b)
	local n=$1
	shift
	CREST_CACHE_DIR=$T/node-$n "$@"
}
# A tree of random files: a few of random sizes, from the seed.
tree() {  # tree DIR
	mkdir -p "$1"
	local i
	for ((i = 0; i < 6; i++)); do
		head -c $(( RANDOM * 40 + RANDOM % 7 )) /dev/urandom >"$1/f$i"
	done
}
same() {  # same A B WHAT
	diff -r "$1" "$2" >/dev/null || fail "$3: the restored tree differs from the one put"
}
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

on a "$CREST" init --store "$S" >/dev/null || fail "init of $S"
on b "$CREST" init --store "$S" 2>"$T/err" && fail "a second init of $S succeeded"
grep -q "is a crest store already" "$T/err" || fail "a second init said: $(cat "$T/err")"

# Put on A, restore on B.
tree "$T/v1"
on a "$CREST" --json put --tag v1 --store "$S" "$T/v1" >"$T/p1" || fail "put on node a"
on b "$CREST" get --store "$S" v1 "$T/r1" 2>"$T/err" >/dev/null || fail "get on node b: $(cat "$T/err")"
same "$T/v1/" "$T/r1/v1/" "node b's restore of node a's v1"

# B changes one file and puts: A's chunks serve B's dedup.
cp -a "$T/v1" "$T/v2"
head -c 5000 /dev/urandom >>"$T/v2/f3"
on b "$CREST" --json put --tag v2 --store "$S" "$T/v2" >"$T/p2" 2>"$T/err" || fail "put on node b: $(cat "$T/err")"
total=$(json 'd["logical_bytes"]' <"$T/p2")
new=$(json 'd["new_bytes"]' <"$T/p2")
echo "node b's put: $new new bytes of $total"
(( new < total / 4 )) || fail "node b stored $new of $total bytes: node a's chunks were not found"

# A's cache is behind B's put, which sealed the head: it catches up (B's
# put's records, not the store's) and lists v2.
on a "$CREST" --json ls --store "$S" >"$T/ls" 2>"$T/err" || fail "ls on node a: $(cat "$T/err")"
grep -q "caught up with what other nodes committed" "$T/err" ||
	fail "node a did not catch up with node b's put: $(cat "$T/err")"
grep -q "is behind the store" "$T/err" && fail "node a rebuilt its index after a clean put: $(cat "$T/err")"
# ... from the chunk entries B's commit logged, reading no pack.
grep -Eq "[1-9][0-9]* chunk entries from the meta logs, 0 records read from packs" "$T/err" ||
	fail "node a's catch-up did not take node b's entries from the meta log: $(cat "$T/err")"
n=$(json 'len(d)' <"$T/ls")
[ "$n" = 2 ] || fail "node a lists $n snapshots, not 2"
on a "$CREST" get --store "$S" v2 "$T/r2" >/dev/null 2>&1 || fail "get of v2 on node a"
same "$T/v2/" "$T/r2/v2/" "node a's restore of node b's v2"
on a "$CREST" ls --store "$S" >/dev/null 2>"$T/err"
[ -s "$T/err" ] && fail "node a rebuilt its index again with nothing written: $(cat "$T/err")"

# A writer killed between its cache's new generation and the head.
tree "$T/v3"
on a env CREST_FAULT_DIE=store.head_bump "$CREST" put --store "$S" "$T/v3" >/dev/null 2>&1
[ $? = 137 ] || fail "the writer did not die at store.head_bump"
on a "$CREST" --json ls --store "$S" >"$T/ls" 2>"$T/err" || fail "ls on node a after the kill: $(cat "$T/err")"
grep -q "is behind the store" "$T/err" || fail "node a trusted an index the head does not name: $(cat "$T/err")"
[ "$(json 'len(d)' <"$T/ls")" = 2 ] || fail "node a lists $(json 'len(d)' <"$T/ls") snapshots after the kill, not 2"

# A writer killed at its close, its put committed, the head not yet sealed
# (CREST_FAULT_DIE=store.head_seal): neither node catches up to an open
# head; both rebuild and list the put.
on a env CREST_FAULT_DIE=store.head_seal "$CREST" put --tag v2s --store "$S" "$T/v2" >/dev/null 2>&1
[ $? = 137 ] || fail "the writer did not die at store.head_seal"
for n in a b; do
	on $n "$CREST" --json ls --store "$S" >"$T/ls" 2>"$T/err" || fail "ls on node $n after the kill at the seal: $(cat "$T/err")"
	grep -q "is behind the store" "$T/err" || fail "node $n did not rebuild after a kill at the seal: $(cat "$T/err")"
	[ "$(json 'len(d)' <"$T/ls")" = 3 ] || fail "node $n lists $(json 'len(d)' <"$T/ls") snapshots after the kill at the seal, not 3"
done

# 160 MiB in one put: packs roll over under RADOS's largest object.
mkdir -p "$T/big"
head -c $((160 << 20)) /dev/urandom >"$T/big/blob"
on a "$CREST" put --store "$S" "$T/big" >/dev/null 2>"$T/err" || fail "a put of 160 MiB: $(cat "$T/err")"
ns=${S#rados:$pool/}
packs=0
for o in $(timeout 60 rados -p "$pool" -N "$ns" ls | grep '^pack\.'); do
	size=$(timeout 60 rados -p "$pool" -N "$ns" stat "$o" | sed 's/.*size //')
	(( size <= 64 << 20 )) || fail "pack object $o holds $size bytes, past the 64 MiB limit"
	packs=$((packs + 1))
done
(( packs >= 3 )) || fail "160 MiB went into $packs pack objects"

# B's writer killed -9 with the head open (held at the end of its open,
# CREST_FAULT_PAUSE): what a dead writer left past its commits may be cut
# later, so A's cache, sealed by its own ls, is rebuilt, not caught up.
on a "$CREST" ls --store "$S" >/dev/null 2>&1 || fail "ls on node a before node b's writer dies"
(CREST_CACHE_DIR=$T/node-b CREST_FAULT_PAUSE=store.write_open:$T/pause exec "$CREST" put --store "$S" "$T/v1" \
	>/dev/null 2>&1) &
pid=$!
for ((i = 0; i < 600; i++)); do [ -e "$T/pause" ] && break; sleep 0.1; done
[ -e "$T/pause" ] || fail "node b's writer never reached the end of its open"
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
rm -f "$T/pause"
on a "$CREST" --json ls --store "$S" >"$T/ls" 2>"$T/err" || fail "ls on node a after node b's writer died: $(cat "$T/err")"
grep -q "is behind the store" "$T/err" || fail "node a did not rebuild after node b's writer died: $(cat "$T/err")"

# A writer killed -9 in the middle of a put on B; A then writes.
head -c $((96 << 20)) /dev/urandom >"$T/big/blob"
# In a subshell that execs crest, so that $! is crest's pid: "on b ... &"
# forks a shell whose kill left crest running to the end of its put.
(CREST_CACHE_DIR=$T/node-b exec "$CREST" put --store "$S" "$T/big" >/dev/null 2>&1) &
pid=$!
sleep 0.$(( 3 + RANDOM % 5 ))
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
t0=$(date +%s%N)
on a "$CREST" put --tag v3 --store "$S" "$T/v3" >/dev/null 2>"$T/err" || fail "put on node a after node b's writer was killed: $(cat "$T/err")"
echo "node a's put after the kill: $(( ($(date +%s%N) - t0) / 1000000 )) ms (lease 3 s)"
for n in a b; do
	on $n "$CASCTL" verify --store "$S" >"$T/v" 2>&1 || fail "verify on node $n: $(tail -3 "$T/v")"
done
on b "$CREST" get --store "$S" v3 "$T/r3" >/dev/null 2>&1 || fail "get of v3 on node b"
same "$T/v3/" "$T/r3/v3/" "node b's restore of v3"

# gc on B, keeping the last one; A lists and restores what is kept.
on b "$CASCTL" gc --store "$S" --keep-last 1 >"$T/gc" 2>&1 || fail "gc on node b: $(cat "$T/gc")"
# A's cache is sealed, the head too, but gc drew a new base: rebuilt.
on a "$CREST" --json ls --store "$S" >"$T/ls" 2>"$T/err" || fail "ls on node a after gc: $(cat "$T/err")"
grep -q "is behind the store" "$T/err" || fail "node a did not rebuild after node b's gc: $(cat "$T/err")"
grep -q "could not catch up" "$T/err" && fail "node a tried to catch up across node b's gc: $(cat "$T/err")"
[ "$(json 'len(d)' <"$T/ls")" = 1 ] || fail "node a lists $(json 'len(d)' <"$T/ls") snapshots after gc kept 1"
rm -rf "$T/r3"
on a "$CREST" get --store "$S" latest "$T/r3" >/dev/null 2>&1 || fail "get of the kept snapshot on node a"
same "$T/v3/" "$T/r3/v3/" "node a's restore after gc"
on a "$CASCTL" verify --store "$S" >"$T/v" 2>&1 || fail "verify on node a after gc: $(tail -3 "$T/v")"

# Two tiers: node a's local store pushes to the RADOS store, only what
# it lacks; node b pulls into a local store of its own and restores.
L=$T/local-a
on a "$CREST" init --store "$L" >/dev/null || fail "init of a local store"
tree "$T/v4"
on a "$CREST" put --tag v4 --store "$L" "$T/v4" >/dev/null || fail "put into the local store"
on a "$CREST" --json push --store "$L" v4 "$S" >"$T/push" 2>"$T/err" || fail "push to $S: $(cat "$T/err")"
[ "$(json 'd["present"]' <"$T/push")" = 0 ] || fail "push: v4 was in $S already"
head -c 3000 /dev/urandom >>"$T/v4/f0"
on a "$CREST" put --tag v5 --store "$L" "$T/v4" >/dev/null || fail "second put into the local store"
on a "$CREST" --json push --store "$L" v5 "$S" >"$T/push" 2>"$T/err" || fail "push of v5: $(cat "$T/err")"
sent=$(json 'd["chunks_sent"]' <"$T/push")
chunks=$(json 'd["chunks"]' <"$T/push")
echo "second push: $sent of $chunks chunks sent"
(( sent >= 1 && sent * 4 < chunks )) || fail "the second push sent $sent of $chunks chunks: not only what changed"
on b "$CREST" init --store "$T/local-b" >/dev/null || fail "init of node b's local store"
on b "$CREST" pull --store "$T/local-b" v5 "$S" >/dev/null 2>"$T/err" || fail "pull on node b: $(cat "$T/err")"
on b "$CREST" get --store "$T/local-b" v5 "$T/r5" >/dev/null 2>&1 || fail "get of the pulled v5"
same "$T/v4/" "$T/r5/v4/" "node b's restore of v5, pushed by node a and pulled"

# Bad names: one line each, a non-zero exit.
for bad in "rados:" "rados:/ns" "rados:$pool/" "rados:no-such-pool-$$" "rados:$pool/a/b" "rados:$pool/none-$$"; do
	on a "$CREST" ls --store "$bad" >/dev/null 2>"$T/err"
	rc=$?
	[ $rc -ne 0 ] && [ $rc -lt 128 ] || fail "ls --store $bad exited $rc"
	[ "$(wc -l <"$T/err")" = 1 ] || fail "ls --store $bad said $(wc -l <"$T/err") lines: $(cat "$T/err")"
done
on a "$CREST" init --store "rados:$pool/a/b" >/dev/null 2>&1 && fail "init of a namespace with a / succeeded"
echo "ok: two nodes on $S"
