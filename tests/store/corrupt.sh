#!/bin/bash
# Issue 2, item 3: a byte flipped inside a pack file is caught by
# `casctl verify` (non-zero exit, the chunk named) and by `crest get`, which
# writes no wrong bytes. Tried on a raw chunk's data, an LZ4 chunk's data and
# a record header; each flip is undone afterwards and the store verifies
# again, which shows it was the flip that was caught.
. "$(dirname "$0")/lib.sh"
# One lane (cas.h): the damage below names packs by number, and lanes would
# spread each put over several (store.lanes and store.model test lanes).
export CREST_PACK_LANES=1

src=$T/src
mkdir -p "$src"
"$STORE_TOOL" random "$src/a-random" 3M 31     # incompressible: raw records
"$STORE_TOOL" memory "$src/b-memory" 3M 32     # compressible: LZ4 records
printf 'intact\n' >"$src/c-small"
put --tag t "$src"
verify_store "before any damage"

pack=$(ls "$S"/packs/*.pack | head -1)
"$STORE_TOOL" records "$pack" >"$T/records"
# records: offset codec stored sha. Pick a raw and an LZ4 record, mid-pack.
raw_rec=$(awk '$2 == 0' "$T/records" | sed -n 5p)
lz4_rec=$(awk '$2 == 1' "$T/records" | sed -n 5p)
[ -n "$raw_rec" ] && [ -n "$lz4_rec" ] || fail "expected raw and LZ4 records in $pack"

# check_caught WHAT OFFSET SHA
check_caught() {
	local what=$1 off=$2 sha=$3
	note "flip: $what (byte $off of $(basename "$pack"))"
	"$STORE_TOOL" flip "$pack" "$off"
	local rc=0
	"$CASCTL" --quiet verify >"$T/v.out" 2>"$T/v.err" || rc=$?
	[ "$rc" -ne 0 ] || fail "$what: casctl verify passed on a damaged pack"
	[ "$rc" -lt 128 ] || fail "$what: casctl verify died (rc $rc)"
	grep -q "$sha" "$T/v.err" || { cat "$T/v.err" >&2; fail "$what: casctl verify did not name chunk $sha"; }
	echo "   verify rc $rc: $(head -1 "$T/v.err")"
	# The same through one named snapshot.
	"$CASCTL" --quiet verify t >/dev/null 2>&1 && fail "$what: casctl verify t passed"

	rm -rf "$T/out"
	expect_error "$what: crest get" "$CREST" --quiet get t "$T/out"
	echo "$ERR" | grep -q "${sha:0:16}" || fail "$what: crest get's error does not name chunk ${sha:0:16}"
	# Nothing wrong written: every file that is there is bit-exact, and no
	# temporary file is left behind.
	intact_only "$what" "$T/out" "$src"
	echo "   crest get wrote $INTACT intact file(s), nothing else"
	"$STORE_TOOL" flip "$pack" "$off"
	verify_store "after undoing the $what flip"
}

# The record layout is cas/format.h's, through store_tool: never a copy here.
hdr=$("$STORE_TOOL" format CAS_REC_HEADER)
raw_at=$("$STORE_TOOL" format CAS_REC_RAW)
read -r off _ stored sha <<<"$raw_rec"
check_caught "raw chunk data" $((off + hdr + stored / 2)) "$sha"
read -r off _ stored sha <<<"$lz4_rec"
check_caught "LZ4 chunk data" $((off + hdr + stored / 2)) "$sha"
check_caught "record header" $((off + raw_at)) "$sha"

note "after undoing every flip, get is bit-exact"
rm -rf "$T/out"
crest get t "$T/out"
same_tree "$src" "$T/out/src"
echo "PASS"
