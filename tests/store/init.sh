#!/bin/bash
# init.sh - a store is made only on purpose: crest init, --init or
# CREST_INIT=1. Every writing command given a store that does not exist (a
# mistyped --store) fails with a line naming crest init and leaves nothing
# behind; init refuses a store that exists and a directory holding anything
# else; two --init writers racing on one fresh store both succeed.
. "$(dirname "$0")/lib.sh"
unset CREST_INIT   # lib.sh sets it for the other tests

echo data >"$T/f"
mkdir "$T/d" && echo more >"$T/d/g"

# refused WHAT STORE CMD...: exit 1, a line naming crest init, STORE not made.
refused() {
	local what=$1 st=$2
	shift 2
	local rc=0
	"$@" >"$T/out" 2>"$T/err" || rc=$?
	[ "$rc" = 1 ] || fail "$what: exit $rc, not 1 ($(cat "$T/err"))"
	[ "$(wc -l <"$T/err")" = 1 ] || fail "$what: not one line: $(cat "$T/err")"
	grep -q "crest init" "$T/err" || fail "$what: no remedy named: $(cat "$T/err")"
	[ ! -e "$st" ] || [ -z "$(ls -A "$st")" ] || fail "$what: made $st"
	[ -e "$st" ] && [ -n "$(ls -A "$st")" ] && fail "$what: wrote into $st"
	return 0
}

note "writers refuse a store that is not there"
M=$T/mistyped
refused "put" "$M" "$CREST" --store "$M" put "$T/f"
refused "put (CREST_STORE)" "$M" env CREST_STORE="$M" "$CREST" put "$T/f"
refused "put (CREST_INIT=0)" "$M" env CREST_INIT=0 "$CREST" --store "$M" put "$T/f"
refused "tag" "$M" "$CREST" --store "$M" tag abcd t
refused "branch" "$M" "$CREST" --store "$M" branch b
refused "gc" "$M" "$CASCTL" --store "$M" gc --keep-last 1
refused "repair" "$M" "$CASCTL" --store "$M" repair
mkdir "$T/empty"
refused "put into an empty directory" "$T/empty" "$CREST" --store "$T/empty" put "$T/f"
[ ! -e "$M" ] || fail "$M exists after the refusals"

note "crest init makes one; a second init is refused and harms nothing"
"$CREST" --store "$S" init >"$T/out" || fail "crest init"
grep -q "made a new crest store at $S" "$T/out" || fail "init said: $(cat "$T/out")"
[ -f "$S/FORMAT" ] || fail "no FORMAT after init"
"$CREST" put --tag one "$T/f" >/dev/null || fail "put into an initialised store"
rc=0; "$CREST" init 2>"$T/err" || rc=$?
[ "$rc" = 1 ] || fail "second init: exit $rc"
grep -q "is a crest store already" "$T/err" || fail "second init said: $(cat "$T/err")"
"$CREST" get one "$T/back" >/dev/null || fail "get after a second init"
cmp -s "$T/f" "$T/back/f" || fail "data changed by a second init"

note "init DIR, --json, an empty directory, and a directory with files"
"$CREST" --json init "$T/s2" >"$T/out" || fail "init DIR"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["store"]==sys.argv[2] and d["format"]>=2' \
	"$T/out" "$T/s2" || fail "init --json: $(cat "$T/out")"
"$CREST" init "$T/empty" >/dev/null || fail "init of an empty directory"
rc=0; "$CREST" init "$T/d" 2>"$T/err" || rc=$?
[ "$rc" = 1 ] && grep -q "not a crest store" "$T/err" || fail "init of a directory with files: exit $rc: $(cat "$T/err")"
[ "$(ls -A "$T/d")" = g ] || fail "init wrote into a directory with files"
rc=0; "$CREST" init "$T/no/such" 2>/dev/null || rc=$?
[ "$rc" = 1 ] && [ ! -e "$T/no" ] || fail "init made parents (exit $rc)"
rc=0; "$CREST" init a b 2>/dev/null || rc=$?
[ "$rc" = 2 ] || fail "init with two operands: exit $rc, not 2"

note "--init and CREST_INIT=1 make the store on first use, and are harmless after"
"$CREST" --store "$T/s3" --init put "$T/f" >/dev/null || fail "--init put"
"$CREST" --store "$T/s3" --init put "$T/f" >/dev/null || fail "--init put on an existing store"
CREST_INIT=1 "$CREST" --store "$T/s4" put "$T/d" >/dev/null || fail "CREST_INIT=1 put"
rc=0; "$CREST" --store "$T/s5" --init put --chunker nope "$T/f" 2>/dev/null || rc=$?
[ "$rc" != 0 ] && [ ! -e "$T/s5" ] || fail "--init with a refused command line: exit $rc, made the store: $(ls -d "$T/s5" 2>&1)"
[ "$("$CREST" --store "$T/s3" ls --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" = 2 ] ||
	fail "--init store does not list its two snapshots"

note "two --init writers race on one fresh store"
for round in 1 2 3 4 5; do
	R=$T/race$round
	"$CREST" --store "$R" --init put "$T/f" >/dev/null 2>"$T/e1" & a=$!
	"$CREST" --store "$R" --init put "$T/d" >/dev/null 2>"$T/e2" & b=$!
	wait $a || fail "racing --init (round $round): $(cat "$T/e1")"
	wait $b || fail "racing --init (round $round): $(cat "$T/e2")"
	"$CASCTL" --store "$R" verify >/dev/null || fail "racing --init (round $round): verify"
done
echo "ok: stores are made only by init, --init or CREST_INIT=1"
