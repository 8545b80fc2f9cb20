#!/bin/bash
# Issue 32, item 4: as root, `crest get SNAP DEST` follows a symlink on the
# way to DEST (DEST itself included) only when root or the caller owns it,
# as the kernel's protected_symlinks does: a user who made DEST, or a
# directory above it, a link to a root-only directory gets a one-line
# refusal, and nothing is written there. Root's own links still work.
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root, to create a second user"; exit 77; }
. "$(dirname "$0")/../attacker.sh"

chmod 755 "$T"
A=$T/attacker
mkdir "$A" && chown "$U" "$A"
"$CREST" init >/dev/null || fail "crest init"
mkdir "$T/data"
head -c 5000 /dev/urandom >"$T/data/f"
put --tag one "$T/data"

refused() {   # refused WHAT DEST
	local rc=0
	"$CREST" get one "$2" >/dev/null 2>"$T/err" || rc=$?
	[ "$rc" != 0 ] || fail "$1: crest get into $2 succeeded"
	[ "$(wc -l <"$T/err")" = 1 ] || { cat "$T/err" >&2; fail "$1: not one line"; }
	grep -q "symlink owned by uid" "$T/err" || { cat "$T/err" >&2; fail "$1: not refused for its symlink"; }
	untouched "$1"
	echo "ok: $1: $(cat "$T/err")"
}

note "DEST is a link the user made to a root-only directory"
as_user ln -s "$OUT" "$A/restore"
refused "DEST a user's link" "$A/restore"
note "a link the user made higher up, DEST below it (made by crest)"
as_user ln -s "$T" "$A/up"
refused "a user's link above DEST" "$A/up/out/new"
refused "a user's link above an existing DEST" "$A/up/out"
note "a link chowned to nobody (65534), as the issue's report"
ln -s "$OUT" "$T/nobody-link" && chown -h 65534 "$T/nobody-link"
refused "DEST a link of nobody's" "$T/nobody-link"
note "a user's link that leads to a link of root's"
ln -s "$OUT" "$T/root-link"
as_user ln -s "$T/root-link" "$A/chain"
refused "a user's link to root's link" "$A/chain"

note "root's own links are followed: DEST through them works"
mkdir "$T/real"
ln -s "$T/real" "$T/rl"
ln -s rl "$T/rl2"       # relative, and a link to a link
"$CREST" get one "$T/rl2/got" >/dev/null || fail "get through root's links failed"
cmp -s "$T/data/f" "$T/real/got/data/f" || fail "get through root's links: wrong bytes"
( cd "$T" && "$CREST" get one rl/./got2 >/dev/null ) || fail "get through a relative DEST failed"
cmp -s "$T/data/f" "$T/real/got2/data/f" || fail "relative DEST: wrong bytes"
echo "ok: root's own links, absolute and relative, still lead to DEST"
note "the user's own DEST (a plain directory the user owns) still works"
as_user mkdir "$A/mine"
"$CREST" get one "$A/mine/x" >/dev/null || fail "get into the user's plain directory failed"
cmp -s "$T/data/f" "$A/mine/x/data/f" || fail "user's directory: wrong bytes"
echo "ok: a user's plain directory is still a DEST"
untouched "the end"
echo "PASS get_dest_link"
