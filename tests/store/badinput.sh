#!/bin/bash
# Issue 2, item 5: a missing path, an unreadable file, a store path that is a
# file, a damaged manifest, an unknown snapshot name: each a one-line error
# and a non-zero exit, and the store unharmed (it verifies, and what was in
# it still restores bit-exact).
. "$(dirname "$0")/lib.sh"

mkdir -p "$T/src"
"$STORE_TOOL" random "$T/src/data.bin" 2M 51
printf 'keep\n' >"$T/src/note.txt"
put --tag good "$T/src"
good=$(field snapshot)
put --tag other "$T/src/note.txt"
other=$(field snapshot)

unharmed() {
	verify_store "after: $1"
	[ "$("$CREST" ls --json | grep -c '"snapshot"')" -eq 2 ] || fail "after $1: the store no longer lists 2 snapshots"
	rm -rf "$T/out"
	crest get good "$T/out" || fail "after $1: cannot restore good"
	same_tree "$T/src" "$T/out/src"
}

note "missing path"
expect_error "put of a missing path" "$CREST" put "$T/no/such/file"
expect_error "put of a missing path after a good one" "$CREST" put "$T/src" "$T/missing"
unharmed "missing path"

note "unreadable file"
# Root reads everything, so the put runs as nobody against a store nobody
# owns; the file is root's, mode 0600. Without root, chmod alone does it.
mkdir -p "$T/unreadable"
printf 'secret\n' >"$T/unreadable/secret"
chmod 0600 "$T/unreadable/secret"
printf 'fine\n' >"$T/unreadable/fine"
chmod 0644 "$T/unreadable/fine"
if [ "$(id -u)" -eq 0 ]; then
	command -v setpriv >/dev/null || fail "setpriv (util-linux) is needed to drop root"
	chmod 0755 "$T" "$T/unreadable"
	ns=$T/nobody-store
	mkdir "$ns"
	chown 65534:65534 "$ns"
	as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
	# Let nobody reach the binaries (they may live under a private dir).
	bin=$T/bin
	mkdir -p "$bin"
	cp "$CREST" "$CASCTL" "$bin/"
	chmod 0755 "$bin" "$bin"/*
	as_nobody "$bin/crest" --quiet --store "$ns" put "$T/unreadable/fine" >/dev/null ||
		fail "nobody cannot put a readable file (test set-up)"
	expect_error "put of an unreadable file" as_nobody "$bin/crest" --store "$ns" put "$T/unreadable"
	echo "$ERR" | grep -q "secret" || fail "the error does not name the unreadable file"
	as_nobody "$bin/casctl" --quiet --store "$ns" verify >/dev/null || fail "nobody's store does not verify after the failed put"
	[ "$(as_nobody "$bin/crest" --store "$ns" ls --json | grep -c '"snapshot"')" -eq 1 ] ||
		fail "the failed put of an unreadable file left a snapshot"
else
	chmod 0000 "$T/unreadable/secret"
	expect_error "put of an unreadable file" "$CREST" put "$T/unreadable"
fi
unharmed "unreadable file"

note "store path that is a file"
printf 'not a store\n' >"$T/plain-file"
expect_error "put with --store a file" "$CREST" --store "$T/plain-file" put "$T/src/note.txt"
expect_error "ls with --store a file" "$CREST" --store "$T/plain-file" ls
expect_error "get with --store a file" "$CREST" --store "$T/plain-file" get good "$T/out2"
expect_error "verify with --store a file" "$CASCTL" --store "$T/plain-file" verify
[ "$(cat "$T/plain-file")" = "not a store" ] || fail "the plain file was changed"
mkdir -p "$T/not-a-store"
printf 'x\n' >"$T/not-a-store/something"
expect_error "put with --store a non-store directory" "$CREST" --store "$T/not-a-store" put "$T/src/note.txt"
unharmed "store path that is a file"

note "unknown snapshot name"
expect_error "get of an unknown tag" "$CREST" get no-such-tag "$T/out3"
[ ! -e "$T/out3" ] || fail "get of an unknown snapshot created its destination"
expect_error "show of an unknown id prefix" "$CREST" show deadbeef
expect_error "verify of an unknown snapshot" "$CASCTL" verify no-such-tag
expect_error "tag of an unknown snapshot" "$CREST" tag 0123456789abcdef newtag
unharmed "unknown snapshot name"

note "damaged manifest"
"$STORE_TOOL" damage-manifest "$S" "$other"
expect_error "show of a damaged manifest" "$CREST" show other
echo "$ERR" | grep -q damaged || fail "the error does not say the manifest is damaged"
expect_error "get of a damaged manifest" "$CREST" get other "$T/out4"
[ ! -e "$T/out4" ] || fail "get of a damaged manifest created its destination"
rc=0
"$CASCTL" --quiet verify >/dev/null 2>&1 || rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] || fail "casctl verify passed (or crashed, rc $rc) with a damaged manifest"
# The damage stays with that one snapshot: the other still verifies and restores.
"$CASCTL" --quiet verify good || fail "the undamaged snapshot no longer verifies"
rm -rf "$T/out"
crest get good "$T/out"
same_tree "$T/src" "$T/out/src"
"$CREST" ls >/dev/null || fail "crest ls fails with one damaged manifest"

# A long extent list is stored in pieces apart from its manifest (manifest.h).
# A piece damaged or lost makes that snapshot fail to load, with a message,
# and leaves the store otherwise as it was. In a store of its own, so that the
# piece damaged is this file's.
note "damaged and missing extent-list piece"
export CREST_STORE=$T/store-pieces
mkdir -p "$T/psrc"
"$STORE_TOOL" random "$T/psrc/big" 24M 51     # ~3000 chunks: pieces
crest put --tag big "$T/psrc"
crest put --tag small "$T/src/note.txt"
casctl verify || fail "the store with pieces does not verify"
piece=$("$STORE_TOOL" damage-piece "$CREST_STORE" flip)
expect_error "show with a damaged piece" "$CREST" show big
echo "$ERR" | grep -q "piece ${piece:0:12}.*does not match" || fail "the error does not name the damaged piece"
expect_error "get with a damaged piece" "$CREST" get big "$T/out5"
[ ! -e "$T/out5" ] || fail "get with a damaged piece created its destination"
expect_error "verify with a damaged piece" "$CASCTL" verify big
"$CASCTL" --quiet verify small || fail "a snapshot without pieces no longer verifies"
"$STORE_TOOL" damage-piece "$CREST_STORE" flip >/dev/null   # undone: the same byte inverted again
casctl verify || fail "the piece, flipped back, does not verify"
"$STORE_TOOL" damage-piece "$CREST_STORE" drop >/dev/null
expect_error "get with a missing piece" "$CREST" get big "$T/out6"
echo "$ERR" | grep -q "piece ${piece:0:12}.*missing" || fail "the error does not say the piece is missing"
crest get small "$T/out7"
cmp "$T/src/note.txt" "$T/out7/note.txt" || fail "the snapshot without pieces no longer restores"
echo "PASS"
