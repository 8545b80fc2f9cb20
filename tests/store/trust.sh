#!/bin/bash
# A store crest must not trust (issue 10, item 4): a store directory that
# others can write or that another user owns is refused with one line that
# says how to fix it; a symlink in the store (lock, packs, FORMAT) is never
# followed, and root's file it points at stays as it was; the library (no
# umask of its own) makes the store's files as private as the CLI does.
. "$(dirname "$0")/lib.sh"
: "${CRAFT_TREE:?CRAFT_TREE must name craft_tree}"
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root, to create a second user"; exit 77; }

. "$(dirname "$0")/../attacker.sh"

echo data >"$T/f"
put --tag one "$T/f"

note "a store writable by everyone, then by its group"
chmod 777 "$S"
expect_error "store mode 777" "$CREST" put "$T/f"
case $ERR in *"chmod 700 $S"*) ;; *) fail "no fix named: $ERR" ;; esac
expect_error "store mode 777, reader" "$CREST" ls
chmod 770 "$S"
expect_error "store mode 770" "$CREST" put "$T/f"
chmod 700 "$S"
crest ls >/dev/null || fail "store back to 700 not accepted"

note "a store owned by another user"
chown "$U" "$S"
expect_error "store of another user" "$CREST" put "$T/f"
case $ERR in *chown*) ;; *) fail "no fix named: $ERR" ;; esac
expect_error "store of another user, reader" "$CREST" get one "$T/got"
chown 0 "$S"

note "symlinks in the store"
mv "$S/lock" "$T/lock.real"
ln -s "$SECRET" "$S/lock"
expect_error "lock is a symlink" "$CREST" put "$T/f"
untouched "lock symlink"
rm "$S/lock"
mv "$T/lock.real" "$S/lock"
mv "$S/packs" "$T/packs.real"
ln -s "$OUT" "$S/packs"
expect_error "packs is a symlink" "$CREST" put "$T/f"
untouched "packs symlink"
rm "$S/packs"
mv "$T/packs.real" "$S/packs"
mv "$S/FORMAT" "$T/FORMAT.real"
ln -s "$T/FORMAT.real" "$S/FORMAT"
expect_error "FORMAT is a symlink" "$CREST" ls
rm "$S/FORMAT"
mv "$T/FORMAT.real" "$S/FORMAT"
chmod 777 "$S/meta"
expect_error "meta writable by all" "$CREST" put "$T/f"
chmod 700 "$S/meta"
put --tag two "$T/f"
verify_store "after the refusals"

note "the library's files as private as the CLI's, whatever the umask"
(umask 022 && "$CRAFT_TREE" "$T/lib" t "f:x:$(head -c 20000 /dev/urandom | base64 -w0)" d:y) ||
	fail "craft_tree failed"
bad=$(find "$T/lib" -perm /077 -printf '%m %P\n')
[ -z "$bad" ] || fail "store files open to others under umask 022: $bad"
echo PASS
