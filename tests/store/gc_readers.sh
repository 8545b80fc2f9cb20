# A pack gc rewrote is unlinked only once no reader holds the store
# (STORE/readers, flock()ed shared by every reader): a reader that opened
# before the rewrite may still read it. Until then it is retired ('r'), and
# neither a writer's open (which cuts packs past the last recorded one) nor
# anything else removes it; the next gc with no reader open does.
source "$(dirname "$0")/lib.sh"
mkdir -p "$T/d"
put() { "$CREST" put --quiet --chunker fixed --chunk-size 4K "$T/d" >/dev/null; }
head -c 1048576 /dev/urandom >"$T/d1"
head -c 1048576 /dev/urandom >"$T/d2"
cp "$T/d1" "$T/d/f"; put          # pack 1
cp "$T/d2" "$T/d/f"; put          # pack 2: all of it dead once the next put is the only one kept
cp "$T/d1" "$T/d/f"; put          # the same chunks as the first: no new pack
pack2=$(ls "$S/packs" | sort | sed -n 2p)
[ -n "$pack2" ] || fail "no second pack: $(ls "$S/packs")"
exec 9<>"$S/readers"    # this shell is a reader now
flock -s 9
out=$("$CASCTL" --json gc --keep-last 1)
retired=$(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["packs_retired"])')
[ "$retired" -ge 1 ] || fail "gc with a reader open retired no pack: $out"
[ -f "$S/packs/$pack2" ] || fail "gc unlinked $pack2 while a reader held the store"
echo "more" >"$T/d/g"; put      # a writer's open must leave the retired pack alone
[ -f "$S/packs/$pack2" ] || fail "a writer's open unlinked the retired $pack2"
exec 9>&-               # and no longer
out=$("$CASCTL" --json gc --keep-last 1)
[ "$(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["packs_retired"])')" = 0 ] ||
	fail "gc with no reader left packs retired: $out"
[ ! -e "$S/packs/$pack2" ] || fail "gc with no reader open kept the retired $pack2"
"$CASCTL" verify >/dev/null
rm -rf "$T/out"; "$CREST" get --quiet "$("$CREST" --json ls | python3 -c 'import json,sys; print(json.load(sys.stdin)[-1]["snapshot"])')" "$T/out"
cmp "$T/out/d/f" "$T/d1" || fail "the kept snapshot does not read back"
echo PASS
