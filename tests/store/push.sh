#!/bin/bash
# Issue 35, item 4: crest push and crest pull (cas/copy.h) between stores,
# against what each put said it added. Seeded (printed; CREST_TEST_SEED
# replays): a tree of random files goes through 3 to 6 versions, each
# rewriting a random stretch of a random file, appending to one, or adding
# one; each version is put into store A. Then:
#  - each version pushed to B in order sends exactly the chunks and data
#    its put stored as new in A (B then holds what A held), keeps its id,
#    and arrives with its tag; a push again sends nothing;
#  - a random version pulled from B into a fresh C (another node) restores
#    bit-exact, as do all the others pulled after it, each sending only
#    what C lacked; verify passes on B and C;
#  - every version pushed at once (one process each) into a fresh F: each
#    restores bit-exact, and F holds as many chunks (and unique bytes) as
#    A, which holds the versions' union: shared chunks stored once;
#  - a job snapshot of two versions as ranks, pushed to a fresh D, brings
#    both ranks first: get --rank restores each bit-exact from D;
#  - a push killed (-9) after its records are written, before its commit,
#    leaves D without that snapshot and whole (verify); the next push
#    lists it;
#  - a record of v1 in A whose bytes no longer match their SHA-256 (its
#    CRC32C forged to match: damage only the hash sees) fails the push into a
#    fresh E, naming the chunk; E lists nothing and verifies; undone, the
#    push goes through;
#  - bad input: a missing operand or the store itself is a usage error
#    (2); an unknown snapshot or a STORE that is no store fails (1).
source "$(dirname "$0")/lib.sh"
export CREST_PACK_LANES=1   # the forged record below is found in one pack
SEED=${CREST_TEST_SEED:-$(( $(date +%s%N) % 1000000 ))}
echo "seed $SEED"
RANDOM=$SEED
A=$S B=$T/B C=$T/C D=$T/D E=$T/E
src=$T/src
mkdir -p "$src"
"$STORE_TOOL" random "$src/r0" $(( (RANDOM % 6 + 2) << 20 )) $RANDOM
"$STORE_TOOL" memory "$src/m0" $(( (RANDOM % 4 + 1) << 20 )) $RANDOM
mkdir "$src/small"
"$STORE_TOOL" files "$src/small" 40 $RANDOM
nv=$((RANDOM % 4 + 3))
declare -a ID NEWC NEWB
for v in $(seq 1 "$nv"); do
	files=("$src"/r* "$src"/m*)
	f=${files[RANDOM % ${#files[@]}]}
	case $((RANDOM % 3)) in
	0) size=$(stat -c %s "$f")
	   off=$(( (RANDOM * 32768 + RANDOM) % size ))
	   head -c $(( (RANDOM % 256 + 1) << 10 )) /dev/urandom | dd of="$f" bs=1 seek="$off" conv=notrunc status=none
	   what="rewrote bytes from $off of $(basename "$f")";;
	1) head -c $(( (RANDOM % 512 + 1) << 10 )) /dev/urandom >>"$f"; what="appended to $(basename "$f")";;
	2) "$STORE_TOOL" random "$src/r$v" $(( (RANDOM % 2 + 1) << 20 )) $RANDOM; what="added r$v";;
	esac
	put --tag "v$v" "$src"
	ID[v]=$(field snapshot) NEWC[v]=$(field new_chunks) NEWB[v]=$(field new_bytes)
	rm -rf "$T/tree$v"
	cp -a "$src" "$T/tree$v"
	echo "v$v: $what: ${ID[v]:0:12}, ${NEWC[v]} new chunks, ${NEWB[v]} new bytes"
done

note "each version pushed to B sends what its put added to A"
for v in $(seq 1 "$nv"); do
	out=$("$CREST" --json push "v$v" "$B") || fail "push v$v failed"
	[ "$(json_field "$out" snapshot)" = "${ID[v]}" ] || fail "push v$v: $out"
	[ "$(json_field "$out" chunks_sent)" = "${NEWC[v]}" ] || fail "push v$v sent $(json_field "$out" chunks_sent) chunks, put added ${NEWC[v]}: $out"
	[ "$(json_field "$out" raw_sent)" = "${NEWB[v]}" ] || fail "push v$v sent $(json_field "$out" raw_sent) bytes of data, put added ${NEWB[v]}"
	[ "$(json_field "$out" tags)" = 1 ] || fail "push v$v gave $(json_field "$out" tags) tags: $out"
done
[ "$("$CREST" --store "$B" --json ls | grep -o '"snapshot": "[0-9a-f]*"' | sort)" = \
  "$("$CREST" --json ls | grep -o '"snapshot": "[0-9a-f]*"' | sort)" ] || fail "B does not list A's snapshots"
for v in $(seq 1 "$nv"); do
	[ "$("$CREST" --store "$B" --json show "v$v" | grep -o '"snapshot": "[0-9a-f]*"' | head -1)" = "\"snapshot\": \"${ID[v]}\"" ] ||
		fail "tag v$v in B does not name ${ID[v]}"
done
out=$("$CREST" --json push "v$nv" "$B")
[ "$(json_field "$out" chunks_sent)" = 0 ] && [ "$(json_field "$out" present)" = 1 ] || fail "a second push sent something: $out"
echo "ok: $nv versions, each sending its own new chunks; again: nothing"

note "pulled into a fresh store, in a random order, bit-exact"
order=$(seq 1 "$nv" | awk -v s="$SEED" 'BEGIN { srand(s) } { print rand(), $0 }' | sort -n | cut -d' ' -f2)
for v in $order; do
	"$CREST" --store "$C" --quiet pull "v$v" "$B" || fail "pull v$v failed"
	rm -rf "$T/out"
	"$CREST" --store "$C" --quiet get "v$v" "$T/out" || fail "get v$v from C failed"
	same_tree "$T/tree$v" "$T/out/src"
done
"$CASCTL" --store "$B" --quiet verify || fail "verify of B failed"
"$CASCTL" --store "$C" --quiet verify || fail "verify of C failed"
echo "ok: pulled in the order $(echo $order), each restored bit-exact"

note "every version pushed at once into one store: each whole, shared chunks stored once"
F=$T/F   # made by whichever push comes first (CREST_INIT=1)
pids=()
for v in $(seq 1 "$nv"); do
	"$CREST" --quiet push "v$v" "$F" 2>"$T/conc$v.err" &
	pids+=($!)
done
for k in "${!pids[@]}"; do
	wait "${pids[k]}" || fail "concurrent push of v$((k + 1)) failed: $(cat "$T/conc$((k + 1)).err")"
done
for v in $(seq 1 "$nv"); do
	rm -rf "$T/out"
	"$CREST" --store "$F" --quiet get "v$v" "$T/out" || fail "get v$v from F failed"
	same_tree "$T/tree$v" "$T/out/src"
done
jstat() { json_field "$("$CASCTL" --store "$1" --json stats)" "$2"; }
[ "$(jstat "$F" chunks)" = "$(jstat "$A" chunks)" ] ||
	fail "F holds $(jstat "$F" chunks) chunks after $nv concurrent pushes, A $(jstat "$A" chunks): a shared chunk stored twice, or one lost"
[ "$(jstat "$F" unique_bytes)" = "$(jstat "$A" unique_bytes)" ] || fail "F's unique bytes differ from A's"
"$CASCTL" --store "$F" --quiet verify || fail "verify of F failed"
echo "ok: $nv pushes at once: each restored bit-exact, $(jstat "$F" chunks) chunks as in A"

note "a job snapshot brings its ranks"
j=$("$CREST" job commit train --step 7 v1 "v$nv") || fail "job commit failed"
out=$("$CREST" --json push job:train "$D") || fail "push of the job snapshot failed"
[ "$(json_field "$out" snapshots)" = 3 ] || fail "the job snapshot's push committed $(json_field "$out" snapshots) snapshots, not 3: $out"
for r in 0 1; do
	v=1; [ $r = 1 ] && v=$nv
	rm -rf "$T/out"
	"$CREST" --store "$D" --quiet get --rank $r "${j:0:12}" "$T/out" || fail "get --rank $r from D failed"
	same_tree "$T/tree$v" "$T/out/src"
done
echo "ok: job snapshot ${j:0:12} and its 2 ranks in D, each rank bit-exact"

note "a push killed before its commit leaves nothing listed"
# A version D lacks: neither v1 nor v$nv, the job's ranks; named as the
# parent of the one after it.
k=$((RANDOM % (nv - 2) + 2))
CREST_FAULT_PAUSE="copy.commit:$T/pause" "$CREST" --quiet push "v$((k + 1))~1" "$D" 2>/dev/null &
pid=$!
for _ in $(seq 1 1000); do [ -e "$T/pause" ] && break; sleep 0.01; done
[ -e "$T/pause" ] || fail "the push never reached its commit"
kill -9 $pid
wait $pid 2>/dev/null || true
rm -f "$T/pause"
want=${ID[k]}
"$CREST" --store "$D" --json ls --all | grep -q "\"snapshot\": \"$want\"" && fail "a killed push left ${want:0:12} listed"
"$CASCTL" --store "$D" --quiet verify || fail "verify of D failed after a killed push"
"$CREST" --quiet push "v$((k + 1))~1" "$D" || fail "the push after the killed one failed"
"$CREST" --store "$D" --json ls --all | grep -q "\"snapshot\": \"$want\"" || fail "${want:0:12} not listed after the push"
"$CASCTL" --store "$D" --quiet verify || fail "verify of D failed"
echo "ok: killed before its commit: not listed, D whole; pushed again: listed"

note "a chunk that no longer matches its SHA-256 fails the push"
pack=$(ls "$A"/packs/*.pack | head -1)
# A raw record of v1's (the first put fills the first pack): a forged LZ4
# record might fail to unpack before its hash is checked.
read -r off _ _ sha < <("$STORE_TOOL" records "$pack" | awk '$2 == 0' | sed -n 3p)
[ -n "$sha" ] || fail "no raw record in $pack"
"$STORE_TOOL" forge "$pack" "$off"
expect_error "push of a forged chunk" "$CREST" --quiet push v1 "$E"
echo "$ERR" | grep -q "${sha:0:16}.*SHA-256" || fail "the push's error does not name chunk ${sha:0:16}: $ERR"
[ "$("$CREST" --store "$E" --json ls --all | grep -c '"snapshot"')" = 0 ] || fail "E lists a snapshot after a failed push"
"$CASCTL" --store "$E" --quiet verify || fail "verify of E failed after a failed push"
"$STORE_TOOL" forge "$pack" "$off"
"$CREST" --quiet push v1 "$E" || fail "the push after the forge was undone failed"
echo "ok: $ERR"

note "bad input"
code() { local rc=0; "$@" >/dev/null 2>"$T/err" || rc=$?; echo $rc; }
[ "$(code "$CREST" push v1)" = 2 ] || fail "push without STORE: not a usage error"
[ "$(code "$CREST" push v1 "$A")" = 2 ] || fail "push into the store itself: not a usage error"
[ "$(code "$CREST" push v1 "$B" extra)" = 2 ] || fail "push with an extra operand: not a usage error"
[ "$(code "$CREST" push nosuch "$B")" = 1 ] || fail "push of an unknown snapshot: not 1"
mkdir "$T/plain"
[ "$(CREST_INIT=0 code "$CREST" push v1 "$T/plain")" = 1 ] || fail "push into a directory that is no store: not 1"
grep -q "not a crest store" "$T/err" || fail "push into a directory that is no store: $(cat "$T/err")"
[ "$(code "$CREST" --store "$C" pull nosuch "$B")" = 1 ] || fail "pull of an unknown snapshot: not 1"
echo "PASS"
