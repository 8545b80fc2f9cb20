#!/bin/bash
# Issue 9, item 6 (a) and (b): writers and readers racing at open.
#
# (a) Two `crest put`s into a store that does not exist yet, 50 times over:
#     both must succeed (one creates the store, the other opens it), and the
#     store must then list both snapshots and verify.
# (b) Readers (`crest ls`, `crest get`) beside a writer doing many puts, each
#     of which opens the index and so flushes and, every few puts, compacts
#     it (deleting table files under the readers): every read must succeed.
. "$(dirname "$0")/lib.sh"

seed=${CREST_CONCURRENT_SEED:-$$}
echo "random seed $seed (CREST_CONCURRENT_SEED=$seed reproduces the data)"
tries=${CREST_CONCURRENT_TRIES:-50}

mkdir -p "$T/a" "$T/b"
"$STORE_TOOL" random "$T/a/a.bin" 256K "$seed"
"$STORE_TOOL" random "$T/b/b.bin" 256K $((seed + 1))

note "(a) two puts into a new store, $tries times"
bad=0
for i in $(seq 1 "$tries"); do
	st=$T/new-$i
	"$CREST" --quiet --store "$st" put "$T/a" >"$T/pa.out" 2>&1 & pa=$!
	"$CREST" --quiet --store "$st" put "$T/b" >"$T/pb.out" 2>&1 & pb=$!
	ra=0 rb=0
	wait $pa || ra=$?
	wait $pb || rb=$?
	if [ $ra -ne 0 ] || [ $rb -ne 0 ]; then
		bad=$((bad + 1))
		echo "   try $i: put a rc $ra: $(cat "$T/pa.out")" >&2
		echo "   try $i: put b rc $rb: $(cat "$T/pb.out")" >&2
		continue
	fi
	n=$("$CREST" --store "$st" --json ls | grep -c "\"snapshot\"" || true)
	[ "$n" -eq 2 ] || fail "try $i: $n snapshots listed in $st, expected 2"
	"$CASCTL" --quiet --store "$st" verify >/dev/null 2>&1 || fail "try $i: casctl verify of $st failed"
	rm -rf "$st"
done
[ $bad -eq 0 ] || fail "(a) $bad of $tries tries had a failed put"
echo "   $tries tries, every put succeeded, every store listed both snapshots"

note "(b) readers beside a writer doing many puts"
puts=${CREST_CONCURRENT_PUTS:-60}
crest put --tag first "$T/a" >/dev/null
mkdir -p "$T/w"
(
	for i in $(seq 1 "$puts"); do
		"$STORE_TOOL" random "$T/w/w.bin" 64K $((seed + 10 + i))
		"$CREST" --quiet put "$T/w" >/dev/null 2>"$T/writer.err" || { echo "writer put $i failed" >&2; exit 1; }
	done
) & writer=$!
reads=0 rfail=0
reader() {   # reader N: ls and get until the writer is done; counts in files
	local n=0 f=0 k=0
	while kill -0 $writer 2>/dev/null; do
		k=$((k + 1))
		if ! "$CREST" --quiet ls >/dev/null 2>"$T/r$1.err"; then
			f=$((f + 1)); echo "   reader $1 ls: $(cat "$T/r$1.err")" >&2
		fi
		rm -rf "$T/out$1"
		if ! "$CREST" --quiet get first "$T/out$1" 2>"$T/r$1.err"; then
			f=$((f + 1)); echo "   reader $1 get: $(cat "$T/r$1.err")" >&2
		elif ! cmp -s "$T/a/a.bin" "$T/out$1/a/a.bin"; then
			f=$((f + 1)); echo "   reader $1 get: restored bytes differ" >&2
		fi
		n=$((n + 2))
	done
	echo "$n $f" >"$T/r$1.count"
}
reader 1 & r1=$!
reader 2 & r2=$!
reader 3 & r3=$!
wrc=0
wait $writer || wrc=$?
wait $r1 $r2 $r3
for r in 1 2 3; do
	read -r n f <"$T/r$r.count"
	reads=$((reads + n)); rfail=$((rfail + f))
done
[ $wrc -eq 0 ] || fail "the writer failed: $(cat "$T/writer.err")"
echo "   $puts puts beside $reads reads: $rfail reads failed"
[ $rfail -eq 0 ] || fail "(b) $rfail of $reads reads beside a writer failed"
n=$("$CREST" --json ls | grep -c "\"snapshot\"" || true)
[ "$n" -eq $((puts + 1)) ] || fail "(b) $n snapshots listed, expected $((puts + 1))"
verify_store "after the writer"
echo "PASS"
