#!/bin/bash
# Issue 9: every older format is read. A format 1 store (fixtures/, written
# by crest at c4e282a) lists and restores bit-exact with this crest; its
# first writer upgrades it to format 2 without losing anything, after which
# the new snapshot, the old ones and casctl repair all work.
. "$(dirname "$0")/lib.sh"

F=$(dirname "$0")/fixtures
tar -C "$T" -xJf "$F/format1.tar.xz"
# The trees that were put, made again the same way (see fixtures/README.md).
mk_src() {  # DIR EDIT
	mkdir -p "$1/d"
	python3 "$F/format1-pages.py" "$1/mem.bin" 11 "$2"
	"$STORE_TOOL" random "$1/d/small.bin" 3001 12
	printf 'x' >"$1/d/one"
	: >"$1/d/empty"
	ln -s d/small.bin "$1/link"
	truncate -s 2M "$1/sparse"
	printf 'tail' >>"$1/sparse"
	chmod 640 "$1/d/one"
	touch -h -d @1700000000 "$1/mem.bin" "$1/d/small.bin" "$1/d/one" "$1/d/empty" "$1/sparse" "$1/d" "$1"
}
mk_src "$T/first/src" 0
mk_src "$T/second/src" 1
check() {  # WHAT
	local tag
	for tag in first second; do
		rm -rf "$T/out"
		crest get "v1-$tag" "$T/out" || fail "$1: get v1-$tag"
		cmp "$T/$tag/src/mem.bin" "$T/out/src/mem.bin" || fail "$1: v1-$tag mem.bin differs"
		cmp "$T/$tag/src/d/small.bin" "$T/out/src/d/small.bin" || fail "$1: v1-$tag small.bin differs"
		cmp "$T/$tag/src/sparse" "$T/out/src/sparse" || fail "$1: v1-$tag sparse differs"
		[ "$(readlink "$T/out/src/link")" = d/small.bin ] || fail "$1: v1-$tag link"
		[ "$(stat -c %a "$T/out/src/d/one")" = 640 ] || fail "$1: v1-$tag mode of d/one"
		[ -f "$T/out/src/d/empty" ] && [ ! -s "$T/out/src/d/empty" ] || fail "$1: v1-$tag d/empty"
	done
}
[ "$(cat "$S/FORMAT")" = "crest-store 1" ] || fail "the fixture is not format 1"
note "read as it is"
[ "$("$CREST" --json ls | grep -c '"snapshot"')" -eq 2 ] || fail "ls of the format 1 store"
check "format 1"
verify_store "format 1"
[ "$(cat "$S/FORMAT")" = "crest-store 1" ] || fail "a reader changed FORMAT"
expect_error "repair of a format 1 store" "$CASCTL" repair

note "upgraded by its first writer"
"$STORE_TOOL" random "$T/new.bin" 200K 5
crest put --tag new "$T/new.bin" >/dev/null || fail "put into the format 1 store"
v=$("$STORE_TOOL" format CAS_FORMAT_VERSION)   # cas/format.h's current version
[ "$(cat "$S/FORMAT")" = "crest-store $v" ] || fail "FORMAT is not $v after a writer: $(cat "$S/FORMAT")"
check "upgraded"
verify_store "upgraded"

note "repair of the upgraded store"
rm -rf "$S/index"
"$CASCTL" repair || fail "repair after the upgrade"
[ "$("$CREST" --json ls | grep -c '"snapshot"')" -eq 3 ] || fail "repair did not bring back all 3 snapshots"
check "repaired"
rm -rf "$T/out"
crest get new "$T/out" && cmp "$T/new.bin" "$T/out/new.bin" || fail "the new snapshot after repair"
verify_store "repaired"
echo "ok"
