#!/bin/bash
# crest get as root into a directory another user controls (issue 10, item
# 3): symlinks that user plants, and a snapshot whose own symlink leads out
# of DEST, must never make root write or chmod anything outside DEST. A
# root-only file and a root-only directory are the targets; after every
# attempt they are byte for byte what they were, and a refusal is one line.
# Also: a file name of 250 bytes restores (the temporary name is short).
. "$(dirname "$0")/lib.sh"
: "${CRAFT_TREE:?CRAFT_TREE must name craft_tree}"
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root, to create a second user"; exit 77; }

SEED=${CREST_TEST_SEED:-$RANDOM}
echo "seed $SEED (CREST_TEST_SEED replays it)"
RANDOM=$SEED

. "$(dirname "$0")/../attacker.sh"

chmod 755 "$T"
A=$T/attacker
mkdir "$A" && chown "$U" "$A"
# The targets: SECRET and OUT (attacker.sh).

mkdir -p "$T/data/sub"
head -c $((5000 + RANDOM)) /dev/urandom >"$T/data/f"
head -c $((100 + RANDOM % 100)) /dev/urandom >"$T/data/sub/g"
put --tag one "$T/data/f"
put --tag tree "$T/data"

note "a symlink planted at the old temporary name .f.crest-tmp"
as_user mkdir "$A/d1"
as_user ln -s "$SECRET" "$A/d1/.f.crest-tmp"
crest get one "$A/d1" || fail "get beside a planted symlink failed"
untouched "planted temporary"
cmp -s "$T/data/f" "$A/d1/f" || fail "f restored wrong"
[ "$(stat -c %u "$A/d1/f")" = 0 ] || fail "f not root's"

note "a symlink planted at the target's own name"
as_user mkdir "$A/d2"
as_user ln -s "$SECRET" "$A/d2/f"
expect_error "target is a planted symlink" "$CREST" get one "$A/d2"
untouched "planted target"

note "a snapshot holding the symlink a -> $OUT and the file a/x"
"$CRAFT_TREE" "$S" evil "l:a:$OUT" "f:a/x:written through a symlink" || fail "craft_tree failed"
expect_error "entry below the snapshot's own symlink" "$CREST" get evil "$A/d3"
untouched "snapshot's own symlink"
[ ! -e "$A/d3" ] || fail "DEST created although the restore was refused"

note "a directory of DEST replaced by a symlink to $OUT"
"$CRAFT_TREE" "$S" nodir "f:sub/x:written through a planted symlink" || fail "craft_tree failed"
as_user mkdir "$A/d4"
as_user ln -s "$OUT" "$A/d4/sub"
expect_error "planted directory symlink" "$CREST" get nodir "$A/d4"
untouched "planted directory symlink"

note "the same without openat2 (component by component)"
export CREST_FAULT_SITE=fs.openat2:1:38
rc=0
"$CREST" --quiet get nodir "$A/d4" 2>"$T/e" || rc=$?
[ $rc -ne 0 ] || fail "planted directory symlink without openat2: exit 0"
grep -q "refusing" "$T/e" || fail "no refusal without openat2: $(cat "$T/e")"
untouched "planted directory symlink without openat2"
crest get tree "$T/walk" 2>/dev/null || fail "get without openat2 failed"
same_tree "$T/data" "$T/walk/data"
unset CREST_FAULT_SITE

note "a file name of 250 bytes"
LONG=$(printf 'n%.0s' $(seq 250))
mkdir "$T/long"
head -c $((RANDOM)) /dev/urandom >"$T/long/$LONG"
put --tag long "$T/long"
crest get long "$T/longout" || fail "get of a 250-byte name failed"
same_tree "$T/long" "$T/longout/long"
echo "PASS"
