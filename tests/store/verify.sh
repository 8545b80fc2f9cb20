#!/bin/bash
# Issue 9, item 5: `casctl verify` checks every snapshot and lists every
# damaged one with what it lost, never stopping at the first damage; a bad
# chunk counts against every snapshot that uses it.
#
# Six snapshots: A and B share a file (shared.bin) one of whose chunks is
# damaged; D's manifest is damaged; E's extent list is in pieces, one of
# them damaged; C and F are whole. verify must report exactly A, B, D, E as
# damaged (A and B: the chunk, in shared.bin; D: its manifest; E: its
# piece), C and F as ok, and exit non-zero.
. "$(dirname "$0")/lib.sh"
# One lane (cas.h): the damage below names packs by number, and lanes would
# spread each put over several (store.lanes and store.model test lanes).
export CREST_PACK_LANES=1

seed=${CREST_VERIFY_SEED:-$$}
echo "random seed $seed (CREST_VERIFY_SEED=$seed reproduces the data)"
mkdir -p "$T"/{a,b,c,d,e,f}
# shared.bin is memory-like (LZ4 records), everything else random (raw
# records): A's pack tells shared.bin's chunks by their codec.
"$STORE_TOOL" memory "$T/a/shared.bin" 2M "$seed"
cp "$T/a/shared.bin" "$T/b/shared.bin"
for x in a b c d f; do "$STORE_TOOL" random "$T/$x/own.bin" 512K $((seed + $(printf '%d' "'$x"))); done
"$STORE_TOOL" random "$T/e/big.bin" 24M $((seed + 7))   # ~3000 chunks: its extent list is in pieces

declare -A ID
for x in a b c d e f; do
	put --tag "$x" "$T/$x"
	ID[$x]=$(field snapshot)
done
verify_store "before any damage"

note "damage: a chunk of shared.bin (A and B), D's manifest, a piece of E's extent list"
pack=$(ls "$S"/packs/*.pack | sort -V | head -1)   # A's put wrote the first pack
"$STORE_TOOL" records "$pack" >"$T/records"
rec=$(awk '$2 == 1' "$T/records" | sed -n 2p)
[ -n "$rec" ] || fail "no LZ4 record (shared.bin) in $pack"
read -r off _ stored sha <<<"$rec"
hdr=$("$STORE_TOOL" format CAS_REC_HEADER)   # cas/format.h's, never a copy
"$STORE_TOOL" flip "$pack" $((off + hdr + stored / 2))
"$STORE_TOOL" damage-manifest "$S" "${ID[d]}"
piece=$("$STORE_TOOL" damage-piece "$S" flip)
echo "   chunk ${sha:0:16}, manifest of ${ID[d]:0:12}, piece ${piece:0:12}"

note "casctl verify"
rc=0
"$CASCTL" verify >"$T/v.out" 2>"$T/v.err" || rc=$?
sed 's/^/   | /' "$T/v.out"
sed 's/^/   ! /' "$T/v.err"
[ $rc -ne 0 ] && [ $rc -lt 128 ] || fail "casctl verify: rc $rc with damage"
for x in a b d e; do
	grep -q "^DAMAGED ${ID[$x]}" "$T/v.out" || fail "snapshot $x (${ID[$x]:0:12}) not listed as damaged"
done
for x in c f; do
	grep -q "^ok      ${ID[$x]}" "$T/v.out" || fail "snapshot $x (${ID[$x]:0:12}) not listed as ok"
done
[ "$(grep -c '^DAMAGED' "$T/v.out")" -eq 4 ] || fail "expected exactly 4 damaged snapshots"
[ "$(grep -c "stream .*shared.bin: .* in 1 chunks lost; bad: ${sha:0:16}" "$T/v.out")" -eq 2 ] ||
	fail "A and B do not both name the bad chunk of shared.bin"
grep "^DAMAGED ${ID[d]}" "$T/v.out" | grep -q "manifest of snapshot .* is damaged" || fail "D: no word of its manifest"
grep "^DAMAGED ${ID[e]}" "$T/v.out" | grep -q "piece ${piece:0:12}" || fail "E: the damaged piece is not named"
tail -1 "$T/v.err" | grep -q "4 of 6 snapshots are damaged" || fail "the error line does not count the damaged"

note "casctl verify --json"
rc=0
"$CASCTL" --json verify >"$T/v.json" 2>/dev/null || rc=$?
[ $rc -ne 0 ] || fail "casctl --json verify: exit 0 with damage"
python3 - "$T/v.json" "$sha" "$piece" "${ID[a]}" "${ID[b]}" "${ID[c]}" "${ID[d]}" "${ID[e]}" "${ID[f]}" <<'PY' || fail "the --json report is wrong"
import json, sys
r = json.load(open(sys.argv[1]))
sha, piece = sys.argv[2], sys.argv[3]
a, b, c, d, e, f = sys.argv[4:10]
by = {x["snapshot"]: x for x in r["results"]}
assert r["ok"] is False and r["snapshots"] == 6 and r["damaged"] == 4, r
assert set(by) == {a, b, c, d, e, f}, by.keys()
for x in (c, f):
    assert by[x]["ok"] and by[x]["error"] is None and by[x]["streams"] == [], by[x]
for x in (a, b):
    s = by[x]
    assert not s["ok"] and s["error"] is None, s
    assert len(s["streams"]) == 1 and s["streams"][0]["name"].endswith("shared.bin"), s
    assert s["streams"][0]["bad"] == [sha] and s["lost_chunks"] == s["streams"][0]["lost_chunks"] >= 1, s
    assert s["lost_bytes"] > 0, s
assert not by[d]["ok"] and "manifest" in by[d]["error"], by[d]
assert not by[e]["ok"] and piece[:12] in by[e]["error"], by[e]
print("   json: a, b lost chunk %s; d, e unreadable; c, f ok" % sha[:16])
PY

note "one whole snapshot alone verifies; the damage undone, all do"
casctl verify c || fail "casctl verify c"
"$STORE_TOOL" flip "$pack" $((off + hdr + stored / 2))
"$STORE_TOOL" damage-manifest "$S" "${ID[d]}"
"$STORE_TOOL" damage-piece "$S" flip >/dev/null
verify_store "after undoing the damage"
echo "PASS"
