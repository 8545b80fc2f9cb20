# A reader's open beside a gc (issue 32): a reader takes STORE/readers
# before it opens the index (cas/store.c, readers_join), so a gc that
# rewrites packs while the reader opens either comes first (the reader's
# index never names the old packs) or keeps the old packs. With the lock
# taken after the index (as it once was), a gc in between unlinked packs
# the reader's index named: a healthy store read as damaged.
#
# The window is held open, not hoped for: CREST_FAULT_PAUSE stops the
# reader once its index is open (util/fault.h, "store.read_open") until
# the test removes the pause file, and gc runs meanwhile.
source "$(dirname "$0")/lib.sh"
mkdir -p "$T/d"
put() { "$CREST" put --quiet --chunker fixed --chunk-size 4K "$T/d" >/dev/null; }
head -c 1048576 /dev/urandom >"$T/d/a"
head -c 2097152 /dev/urandom >"$T/d/b"
put                       # pack 1: a and b
rm "$T/d/b"; put          # a alone, no new chunk: once the first snapshot
                          # expires pack 1 is a third live and is rewritten
keep=$("$CREST" --json ls | python3 -c 'import json,sys; print(json.load(sys.stdin)[-1]["snapshot"])')
packs_before=$(ls "$S/packs")

# reader NAME CMD...: starts CMD held at the pause, waits until it is there.
reader() {
	local name=$1
	shift
	rm -f "$T/pause.$name"
	CREST_FAULT_PAUSE="store.read_open:$T/pause.$name" "$@" >"$T/$name.out" 2>&1 &
	PID=$!
	for _ in $(seq 500); do
		[ -e "$T/pause.$name" ] && return 0
		running "$PID" || break
		sleep 0.02
	done
	cat "$T/$name.out" >&2
	fail "$name never reached the pause"
}

reader verify "$CASCTL" verify
vpid=$PID
reader get "$CREST" get --quiet "$keep" "$T/out"
gpid=$PID
out=$("$CASCTL" --json gc --keep-last 1) || fail "gc beside the readers failed: $out"
rewritten=$(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["packs_rewritten"])')
retired=$(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["packs_retired"])')
[ "$rewritten" -ge 1 ] || fail "gc rewrote no pack, so nothing was tested: $out"
gone=
for p in $packs_before; do
	[ -f "$S/packs/$p" ] || gone="$gone $p"
done
rm -f "$T/pause.verify" "$T/pause.get"
rc=0; wait "$vpid" || rc=$?
[ "$rc" -eq 0 ] || { cat "$T/verify.out" >&2; fail "casctl verify beside gc failed (rc $rc) on a healthy store"; }
rc=0; wait "$gpid" || rc=$?
[ "$rc" -eq 0 ] || { cat "$T/get.out" >&2; fail "crest get beside gc failed (rc $rc) on a healthy store"; }
cmp "$T/out/d/a" "$T/d/a" || fail "crest get beside gc read wrong bytes"
[ "$retired" -ge 1 ] && [ -z "$gone" ] ||
	fail "gc unlinked${gone:- no pack but retired none} while two readers were opening: $out"

# No reader now: the next gc unlinks what was retired, and the store reads.
out=$("$CASCTL" --json gc --keep-last 1)
[ "$(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["packs_retired"])')" = 0 ] ||
	fail "gc with no reader left packs retired: $out"
verify_store "after the retired packs went"
echo PASS
