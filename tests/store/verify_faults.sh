#!/bin/bash
# Issue 32, items 1, 2 and 4: casctl verify reads every durable byte a
# restore or a repair depends on, compares the index with the meta logs
# both ways, and says each fault in one line:
#   FAULT WHERE: WHAT; costs N snapshot(s): ID ...   (or "costs no snapshot")
#  - a byte flipped anywhere in a meta log (the file casctl repair rebuilds
#    the index from): a FAULT naming that log, at or before the byte;
#  - a summary ('i') or manifest ('m') key deleted from the index: a FAULT
#    naming the key and its snapshot, and casctl repair puts it back;
#  - one damaged extent-list piece shared by three snapshots: one FAULT
#    line, naming the piece and all three;
#  - the index's WAL deleted with the newest commit in it: a FAULT naming
#    that snapshot, the WAL, and the next writer or casctl repair.
# Each damage is undone (or repaired) and verify passes again.
. "$(dirname "$0")/lib.sh"
# The store is made on purpose, as a user must (crest init), not by --init.
unset CREST_INIT
"$CREST" --quiet init "$S" >/dev/null || fail "crest init $S"
export CREST_PACK_LANES=1

seed=${CREST_TEST_SEED:-$$}
echo "random seed $seed (CREST_TEST_SEED=$seed reproduces it)"
RANDOM=$seed
mkdir -p "$T"/{a,b,c,d,e}
# big.bin is the same in a, b and c: ~3000 chunks, its extent list in
# pieces that all three snapshots name.
"$STORE_TOOL" random "$T/a/big.bin" 24M "$seed"
cp "$T/a/big.bin" "$T/b/big.bin"
cp "$T/a/big.bin" "$T/c/big.bin"
for x in a b c d e; do "$STORE_TOOL" random "$T/$x/own.bin" 64K $((seed + $(printf '%d' "'$x"))); done
declare -A ID
for x in a b c d; do
	put --tag "$x" "$T/$x"
	ID[$x]=$(field snapshot)
done
verify_store "before any damage"

# verify_faults WHAT: runs casctl verify, which must fail with FAULT
# lines; they are left in $T/faults.
verify_faults() {
	local rc=0
	"$CASCTL" verify >"$T/v.out" 2>"$T/v.err" || rc=$?
	grep '^FAULT' "$T/v.out" >"$T/faults" || true
	sed 's/^/   | /' "$T/faults"
	tail -1 "$T/v.err" | sed 's/^/   ! /'
	[ $rc -eq 1 ] || fail "$1: casctl verify exit $rc, not 1"
	[ -s "$T/faults" ] || fail "$1: no FAULT line"
}

note "a byte flipped at random in a meta log"
logs=("$S"/meta/*.log)
log=${logs[$((RANDOM % ${#logs[@]}))]}
size=$(stat -c %s "$log")
off=$(( (RANDOM * 32768 + RANDOM) % size ))
echo "   $log byte $off of $size"
"$STORE_TOOL" flip "$log" "$off"
verify_faults "meta log byte $off"
at=$(sed -n "s|^FAULT meta log $log at \([0-9]*\):.*|\1|p" "$T/faults" | head -1)
[ -n "$at" ] || fail "no FAULT names $log"
[ "$at" -le "$off" ] || fail "the FAULT is at $at, past the flipped byte $off"
"$STORE_TOOL" flip "$log" "$off"
verify_store "the meta log byte put back"

note "a meta log cut short at random below its committed end"
cp "$log" "$T/log.keep"
cut=$(( 16 + (RANDOM * 32768 + RANDOM) % (size - 16) ))
truncate -s "$cut" "$log"
echo "   $log cut to $cut of $size bytes"
verify_faults "meta log cut to $cut"
grep -q "^FAULT meta log $log at [0-9]*: the log is cut short.*to $size unreadable" "$T/faults" ||
	fail "no FAULT names the cut of $log"
[ "$(grep -c "^FAULT meta log $log at" "$T/faults")" -eq 1 ] || fail "one cut of $log, more than one FAULT"
cp "$T/log.keep" "$log"
verify_store "the meta log put back whole"

note "a summary key deleted: ls, show and get by id do not see the snapshot"
"$STORE_TOOL" drop-key "$S" i "${ID[d]}"
verify_faults "'i' key deleted"
grep -q "key 'i' ${ID[d]}: the snapshot's summary is missing.*; costs 1 snapshot: ${ID[d]}$" "$T/faults" ||
	fail "no FAULT for d's summary"
[ "$(wc -l <"$T/faults")" -eq 1 ] || fail "one deleted key, more than one FAULT"
casctl repair >/dev/null 2>&1 || fail "casctl repair"
verify_store "the summary repaired"

note "a manifest key deleted: crest get fails"
"$STORE_TOOL" drop-key "$S" m "${ID[a]}"
verify_faults "'m' key deleted"
grep -q "key 'm' ${ID[a]}: the snapshot's manifest is missing.*casctl repair.*; costs 1 snapshot: ${ID[a]}$" "$T/faults" ||
	fail "no FAULT for a's manifest"
[ "$(wc -l <"$T/faults")" -eq 1 ] || fail "one deleted key, more than one FAULT"
casctl repair >/dev/null 2>&1 || fail "casctl repair"
verify_store "the manifest repaired"

note "both keys of a snapshot deleted: the index has none of it, the meta log has"
"$STORE_TOOL" drop-key "$S" m "${ID[b]}"
"$STORE_TOOL" drop-key "$S" i "${ID[b]}"
verify_faults "'m' and 'i' keys deleted"
grep -q "^FAULT meta log .*: a committed snapshot that the index lacks.*casctl repair brings it back; costs 1 snapshot: ${ID[b]}$" \
	"$T/faults" || fail "no FAULT for b, gone from the index"
[ "$(wc -l <"$T/faults")" -eq 1 ] || fail "one snapshot gone, more than one FAULT"
casctl repair >/dev/null 2>&1 || fail "casctl repair"
verify_store "b repaired"

note "a tag key deleted: crest get of the tag fails"
"$STORE_TOOL" drop-key "$S" t c
verify_faults "'t' key deleted"
grep -q "^FAULT index $S/index, tag c: the tag is missing from the index.*casctl repair puts it back; costs 1 snapshot: ${ID[c]}$" \
	"$T/faults" || fail "no FAULT for tag c"
[ "$(wc -l <"$T/faults")" -eq 1 ] || fail "one tag gone, more than one FAULT"
casctl repair >/dev/null 2>&1 || fail "casctl repair"
verify_store "tag c repaired"

note "one piece of the extent list a, b and c share, damaged"
piece=$("$STORE_TOOL" damage-piece "$S" flip)
verify_faults "shared piece"
grep "key 'l' $piece" "$T/faults" >"$T/pf" || fail "no FAULT names piece ${piece:0:12}"
[ "$(wc -l <"$T/pf")" -eq 1 ] || fail "piece ${piece:0:12}: more than one FAULT line"
for x in a b c; do
	grep -q "${ID[$x]}" "$T/pf" || fail "the piece's FAULT does not cost $x"
done
grep -q "does not match its SHA-256.*costs 3 snapshots" "$T/pf" || fail "the piece's FAULT says not why, or not 3"
grep -q "${ID[d]}" "$T/pf" && fail "the piece's FAULT costs d, which does not name it"
# The same fault in --json: faults[] of {where, what, snapshots}.
"$CASCTL" --json verify >"$T/v.json" 2>/dev/null && fail "--json verify passed with a damaged piece"
python3 - "$T/v.json" "$piece" "${ID[a]}" "${ID[b]}" "${ID[c]}" <<'PY' || fail "the --json faults are wrong"
import json, sys
r = json.load(open(sys.argv[1]))
piece, want = sys.argv[2], set(sys.argv[3:6])
f = [x for x in r["faults"] if piece in x["where"]]
assert r["ok"] is False and len(f) == 1, r["faults"]
assert set(f[0]["snapshots"]) == want and "SHA-256" in f[0]["what"], f[0]
PY
"$STORE_TOOL" damage-piece "$S" flip >/dev/null
verify_store "the piece put back"

note "the index's WAL deleted, the newest commit in it"
CREST_CLOSE_FLUSH_MIN=1000000000000 put --tag e "$T/e"
ID[e]=$(field snapshot)
ls "$S"/index/*.log >/dev/null 2>&1 || fail "no WAL in $S/index"
rm -f "$S"/index/*.log
verify_faults "WAL deleted"
grep -q "write-ahead log.*next writer, or casctl repair, brings it back; costs 1 snapshot: ${ID[e]}$" "$T/faults" ||
	fail "no FAULT names e and its remedy"
tail -1 "$T/v.err" | grep -q "not in the index" || fail "the error line does not say what the index lacks"
"$STORE_TOOL" random "$T/e/new.bin" 4K "$seed"
crest put "$T/e" >/dev/null 2>&1 || fail "the next put"
verify_store "the next writer recovered e"
rm -rf "$T/out"
crest get e "$T/out" || fail "crest get e"
cmp "$T/e/own.bin" "$(find "$T/out" -name own.bin)" || fail "e came back different"
echo PASS
