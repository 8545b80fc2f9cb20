#!/bin/bash
# A store on RADOS under damage, contention and a dead gc (issue 35), each
# node an index cache of its own (CREST_CACHE_DIR), as in nodes.sh. What it
# shows, each step checked:
#   - one byte flipped in the stored data of a chunk record of a pack
#     object (rados get, flip, rados put) is caught: casctl verify fails
#     and names the damage, crest get of the snapshot that uses the chunk
#     fails with one line, and a snapshot of other data still restores
#     equal;
#   - 8 writers at once, each a node of its own, each putting a tree of a
#     shared part (the same files in all) and a part of its own: all
#     finish (they queue on the writer lock), every snapshot restores bit
#     for bit on another node, and the pack objects, summed with rados
#     stat, hold the shared part once: at least the distinct data, at most
#     1.1 x it plus the record headers;
#   - casctl gc killed -9 while it holds the writer lock (held at the end
#     of its open, CREST_FAULT_PAUSE=store.write_open): the next gc waits
#     for the lease (CREST_RADOS_LEASE=3) and no longer, then runs; verify
#     passes, the kept snapshot restores equal and the expired ones are no
#     longer listed.
# Random trees, the seed printed (CREST_TEST_SEED replays it). About 20 s
# on the 2-core development VM.
# usage: store.sh CREST CASCTL
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
export CREST_RADOS_LEASE=3 CREST_LOCK_TIMEOUT=120
on() {  # on NODE CMD...: the command as node NODE
	local n=$1
	shift
	CREST_CACHE_DIR=$T/node-$n "$@"
}
# N random bytes, from the seed and FILE's path, so that a seed replays
# the bytes too (and with them the chunks and the packs' layout).
rnd() {  # rnd N FILE
	python3 -c 'import random, sys; sys.stdout.buffer.write(random.Random(sys.argv[1]).randbytes(int(sys.argv[2])))' \
		"$seed:${2#"$T"}" "$1" >"$2"
}
# A tree of random files: a few of random sizes, from the seed.
tree() {  # tree DIR
	mkdir -p "$1"
	local i
	for ((i = 0; i < 4; i++)); do
		rnd $(( RANDOM * 8 + RANDOM % 7 + 4096 )) "$1/f$i"
	done
}
same() {  # same A B WHAT
	diff -r "$1" "$2" >/dev/null || fail "$3: the restored tree differs from the one put"
}
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
packs() {  # packs NS: the namespace's pack objects, one a line, sorted
	timeout 60 rados -p "$pool" -N "$1" ls | grep '^pack\.' | sort
}
t_start=$(date +%s%N)
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

# 1. Corruption caught. Two snapshots of different random data, each
# put by a writer of its own, so each in pack objects of its own (a writer
# always starts a fresh pack): the packs there after the first put hold
# only the first snapshot's chunks.
S=rados:$pool/store-$seed-$$
ns=${S#rados:$pool/}
on a "$CREST" init --store "$S" >/dev/null || fail "init of $S"
tree "$T/c1"
tree "$T/c2"
on a "$CREST" --json put --tag c1 --store "$S" "$T/c1" >"$T/putc1" 2>"$T/err" || fail "put of c1: $(cat "$T/err")"
c1=$(json 'd["snapshot"]' <"$T/putc1")
packs "$ns" >"$T/packs1"
[ -s "$T/packs1" ] || fail "the put of c1 left no pack object in $S"
on a "$CREST" put --tag c2 --store "$S" "$T/c2" >/dev/null 2>"$T/err" || fail "put of c2: $(cat "$T/err")"
packs "$ns" >"$T/packs2"
comm -13 "$T/packs1" "$T/packs2" | grep -q . || fail "the put of c2 wrote no pack object of its own"
# Undamaged, it verifies: what fails below is the flipped byte.
on a "$CASCTL" verify --store "$S" >"$T/v" 2>&1 || fail "verify before the damage: $(tail -3 "$T/v")"
# The largest of c1's packs; in it one chunk record, picked by the seed,
# and one byte of its stored data (past the 56-byte record header,
# cas/FORMAT.md), flipped by a nonzero mask.
victim=$(while read -r o; do
	echo "$(timeout 60 rados -p "$pool" -N "$ns" stat "$o" | sed 's/.*size //') $o"
done <"$T/packs1" | sort -n | tail -1 | cut -d' ' -f2)
timeout 60 rados -p "$pool" -N "$ns" get "$victim" "$T/pack" || fail "rados get of $victim"
# (drawn here: a command substitution's subshell reseeds RANDOM)
pick=$RANDOM mask=$(( RANDOM % 255 + 1 ))
where=$(python3 - "$T/pack" "$pick" "$mask" <<'PY'
import struct, sys
path, pick, mask = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
b = bytearray(open(path, "rb").read())
if b[:8] != b"CRESTPAK":
    sys.exit("not a pack: magic %r" % bytes(b[:8]))
recs, off = [], 16
while off + 56 <= len(b):
    magic, codec, raw, stored = struct.unpack_from("<4sB3xII", b, off)
    if magic != b"CRCK":
        sys.exit("no chunk record at offset %d: magic %r" % (off, magic))
    if stored:
        recs.append((off, stored))
    off += 56 + stored
if off != len(b) or not recs:
    sys.exit("records end at %d of %d bytes, %d with data" % (off, len(b), len(recs)))
rec, stored = recs[pick % len(recs)]
at = rec + 56 + (pick * 7919) % stored
b[at] ^= mask
open(path, "wb").write(b)
print("record at %d of %d, byte %d of its %d stored, of %d records" % (rec, len(b), at, stored, len(recs)))
PY
) || fail "the chunk records of $victim: $where"
timeout 60 rados -p "$pool" -N "$ns" put "$victim" "$T/pack" || fail "rados put of the damaged $victim"
echo "damaged $victim: $where"
on a "$CASCTL" verify --store "$S" >"$T/v" 2>&1
rc=$?
[ $rc -ne 0 ] && [ $rc -lt 128 ] || fail "verify exited $rc with a byte of $victim flipped: $(tail -3 "$T/v")"
# It names the snapshot, the pack object and the check that failed.
grep "${c1:0:12}" "$T/v" | grep "$victim" | grep -Eqi "crc|damaged" ||
	fail "verify failed without naming c1 and $victim as damaged: $(tail -3 "$T/v")"
echo "verify: $(grep "$victim" "$T/v" | head -1)"
on a "$CREST" get --store "$S" c1 "$T/r1" >/dev/null 2>"$T/err"
rc=$?
[ $rc -ne 0 ] && [ $rc -lt 128 ] || fail "get of the damaged c1 exited $rc: $(cat "$T/err")"
[ "$(wc -l <"$T/err")" = 1 ] || fail "get of the damaged c1 said $(wc -l <"$T/err") lines: $(head -3 "$T/err")"
grep -q "$victim" "$T/err" || fail "get of the damaged c1 did not name $victim: $(cat "$T/err")"
echo "get of c1: $(cat "$T/err")"
# A fresh node builds its index from the packs: it skips the damaged
# record (saying so) and marks c1 damaged; verify and get fail there too.
on b "$CASCTL" verify --store "$S" >"$T/v" 2>&1
rc=$?
[ $rc -ne 0 ] && [ $rc -lt 128 ] || fail "verify on a fresh node exited $rc with a byte of $victim flipped: $(tail -3 "$T/v")"
grep "DAMAGED $c1" "$T/v" >/dev/null || fail "verify on a fresh node did not name c1 damaged: $(tail -3 "$T/v")"
on c "$CREST" get --store "$S" c1 "$T/r1-c" >/dev/null 2>"$T/err"
rc=$?
[ $rc -ne 0 ] && [ $rc -lt 128 ] || fail "get of the damaged c1 on a fresh node exited $rc: $(cat "$T/err")"
tail -1 "$T/err" | grep "${c1:0:12}" | grep -q "damaged" || fail "get of the damaged c1 on a fresh node ended: $(tail -1 "$T/err")"
# c2 shares no chunk with c1: it restores, on this node and on a fresh one.
for n in a b; do
	on $n "$CREST" get --store "$S" c2 "$T/r2-$n" >/dev/null 2>"$T/err" || fail "get of c2 on node $n beside the damaged c1: $(cat "$T/err")"
	same "$T/c2/" "$T/r2-$n/c2/" "node $n's restore of c2 beside the damaged c1"
done
echo "corruption: $(ms $t_start) ms"

# 2. 8 writers at once, each a node of its own, with overlapping trees:
# a shared part (the same files in each, about 4 MiB) and a part of its
# own (about 1 MiB). They queue on the writer lock (CREST_LOCK_TIMEOUT).
t0=$(date +%s%N)
S=rados:$pool/store-$seed-$$-w
ns=${S#rados:$pool/}
on w0 "$CREST" init --store "$S" >/dev/null || fail "init of $S"
mkdir -p "$T/shared"
rnd $(( (3 << 20) + RANDOM )) "$T/shared/s0"
rnd $(( (1 << 20) + RANDOM )) "$T/shared/s1"
shared=$(cat "$T/shared"/* | wc -c)
own=0
for ((i = 0; i < 8; i++)); do
	cp -r "$T/shared" "$T/w$i"
	rnd $(( (1 << 20) + RANDOM )) "$T/w$i/own"
	own=$(( own + $(wc -c <"$T/w$i/own") ))
done
pids=()
for ((i = 0; i < 8; i++)); do
	# exec: $! is crest's pid, its exit status wait's.
	(CREST_CACHE_DIR=$T/node-w$i exec "$CREST" --json put --tag w$i --store "$S" "$T/w$i" >"$T/put$i" 2>"$T/err$i") &
	pids+=($!)
done
for ((i = 0; i < 8; i++)); do
	wait ${pids[$i]} || fail "writer $i of 8 exited $?: $(tail -2 "$T/err$i")"
done
echo "8 writers: $(ms $t0) ms, $(cat "$T"/err? | grep -c "is locked by") waited past a second (told to wait)"
# Each snapshot back on the next writer's node, bit for bit.
for ((i = 0; i < 8; i++)); do
	id=$(json 'd["snapshot"]' <"$T/put$i") || fail "writer $i printed no snapshot: $(cat "$T/put$i")"
	n=w$(( (i + 1) % 8 ))
	on $n "$CREST" get --store "$S" "$id" "$T/g$i" >/dev/null 2>"$T/err" || fail "get of writer $i's snapshot on node $n: $(cat "$T/err")"
	same "$T/w$i/" "$T/g$i/w$i/" "node $n's restore of writer $i's snapshot"
done
# The shared part once, counted on the RADOS side: random data does not
# compress, so the packs hold the distinct data plus a 56-byte header per
# record (chunks of 2 KiB at least) and 16 bytes per pack.
data=$(( shared + own ))
npacks=0 stored=0
for o in $(packs "$ns"); do
	size=$(timeout 60 rados -p "$pool" -N "$ns" stat "$o" | sed 's/.*size //')
	stored=$(( stored + size )) npacks=$(( npacks + 1 ))
done
echo "pack objects: $stored bytes in $npacks for $shared shared + $own own bytes ($(( 8 * shared + own )) put)"
(( stored >= data )) || fail "the pack objects hold $stored bytes, less than the $data distinct bytes put"
(( stored <= data * 11 / 10 + data / 2048 * 56 + 16 * npacks )) ||
	fail "the pack objects hold $stored bytes for $data distinct ones: the shared part is stored more than once"
on w0 "$CASCTL" verify --store "$S" >"$T/v" 2>&1 || fail "verify after the 8 writers: $(tail -3 "$T/v")"

# 3. casctl gc killed -9 holding the writer lock: held at the end of its
# open (CREST_FAULT_PAUSE=store.write_open), the lock taken and the head
# put open, then killed. The next gc waits until the lease (3 s) runs out.
t0=$(date +%s%N)
S=rados:$pool/store-$seed-$$-g
on g0 "$CREST" init --store "$S" >/dev/null || fail "init of $S"
for k in 1 2 3; do
	tree "$T/k$k"
	on g0 "$CREST" --json put --tag k$k --store "$S" "$T/k$k" >"$T/putk$k" 2>"$T/err" || fail "put of k$k: $(cat "$T/err")"
done
# In a subshell that execs casctl, so that $! is casctl's pid: a kill of
# a forked shell would leave casctl holding the lock to the end of its gc.
(CREST_CACHE_DIR=$T/node-g1 CREST_FAULT_PAUSE=store.write_open:$T/pause exec "$CASCTL" gc --store "$S" --keep-last 1 \
	>"$T/gc1" 2>&1) &
pid=$!
for ((i = 0; i < 600; i++)); do [ -e "$T/pause" ] && break; sleep 0.1; done
[ -e "$T/pause" ] || fail "the first gc never reached the end of its open: $(cat "$T/gc1")"
# Past the first renewal (a third of the lease): a lease held, not just taken.
sleep 1.$(( RANDOM % 5 ))
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
rc=$?
[ $rc = 137 ] || fail "the first gc exited $rc, not killed: $(cat "$T/gc1")"
rm -f "$T/pause"
t1=$(date +%s%N)
on g2 "$CASCTL" --json gc --store "$S" --keep-last 1 >"$T/gc2" 2>"$T/err" || fail "gc after the kill of the first: $(cat "$T/err")"
waited=$(ms $t1)
echo "gc after the kill: $waited ms (lease 3 s)"
grep -q "is locked by pid $pid " "$T/err" || fail "gc after the kill did not wait for the dead gc (pid $pid): $(cat "$T/err")"
(( waited >= 1000 )) || fail "gc after the kill took $waited ms: it did not wait for the dead gc's lease"
(( waited <= 30000 )) || fail "gc after the kill took $waited ms: far past the dead gc's 3 s lease"
on g3 "$CASCTL" verify --store "$S" >"$T/v" 2>&1 || fail "verify after the gcs: $(tail -3 "$T/v")"
on g3 "$CREST" --json ls --store "$S" >"$T/ls" 2>"$T/err" || fail "ls after the gcs: $(cat "$T/err")"
# (by the listed ids: the kept one names k2 as its parent)
json '"\n".join(e["snapshot"] for e in d)' <"$T/ls" >"$T/ids"
for k in 1 2; do
	id=$(json 'd["snapshot"]' <"$T/putk$k")
	grep -qx "$id" "$T/ids" && fail "k$k, expired by gc --keep-last 1, is still listed"
done
grep -qx "$(json 'd["snapshot"]' <"$T/putk3")" "$T/ids" || fail "k3, the newest, is not listed after gc --keep-last 1"
[ "$(json 'len(d)' <"$T/ls")" = 1 ] || fail "$(json 'len(d)' <"$T/ls") snapshots listed after gc kept 1"
on g3 "$CREST" get --store "$S" k3 "$T/rk3" >/dev/null 2>"$T/err" || fail "get of the kept k3: $(cat "$T/err")"
same "$T/k3/" "$T/rk3/k3/" "the restore of k3 after the gcs"
echo "gc kill: $(ms $t0) ms"
echo "ok: a store on RADOS: damage caught, 8 writers deduplicated, a dead gc's lock taken over ($(ms $t_start) ms)"
