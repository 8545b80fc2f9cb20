#!/bin/bash
# Issue 32, item 5: Ctrl-C (SIGINT) or SIGTERM in the middle of a large
# crest put says so in one line ("put interrupted ... nothing committed;
# N bytes of pack space reclaimed"), exits 128 + the signal (130 for
# Ctrl-C, as shells expect), commits no snapshot, and leaves the pack files
# exactly as large as before the put: the uncommitted tail is cut on the
# way out, not left to the next writer.
. "$(dirname "$0")/lib.sh"

packs() { find "$S/packs" -name '*.pack' -printf '%s\n' 2>/dev/null | awk '{ s += $1 } END { print s + 0 }'; }
"$CREST" init >/dev/null || fail "crest init"
head -c 1M /dev/urandom >"$T/small"
"$CREST" put --tag first "$T/small" >/dev/null
snaps0=$("$CREST" ls | grep -c .)
bytes0=$(packs)
note "before: $snaps0 snapshot line(s), $bytes0 pack bytes"
big=$(scaled $((1536 << 20)))
head -c "$big" /dev/urandom >"$T/big"

for sig in INT TERM; do
	want=$((128 + $(kill -l "$sig")))
	# With SIGINT as a terminal's Ctrl-C finds it: a non-interactive
	# shell starts `cmd &` ignoring SIGINT (and crest keeps that).
	python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])' \
		"$CREST" put "$T/big" >"$T/out" 2>"$T/err" &
	P=$!
	# Interrupted once it has written 32 MiB or more of packs: mid-put.
	deadline=$((SECONDS + 60))
	while [ "$(packs)" -lt $((bytes0 + (32 << 20))) ]; do
		kill -0 $P 2>/dev/null || { cat "$T/err" >&2; fail "put ended before it could be interrupted"; }
		[ $SECONDS -lt $deadline ] || fail "put wrote no 32 MiB in 60 s"
		sleep 0.02
	done
	mid=$(packs)
	kill -"$sig" $P
	rc=0
	wait $P || rc=$?
	cat "$T/err"
	[ "$rc" = "$want" ] || fail "SIG$sig: put exited $rc, not $want"
	[ "$(wc -l <"$T/err")" = 1 ] || fail "SIG$sig: not one line on stderr"
	grep -q "put interrupted (SIG$sig): nothing committed; [0-9]* bytes of pack space reclaimed" "$T/err" ||
		fail "SIG$sig: no 'interrupted, nothing committed, N bytes reclaimed' line"
	n=$(sed -n 's/.*; \([0-9]*\) bytes of pack.*/\1/p' "$T/err")
	[ "$n" -ge $((mid - bytes0)) ] || fail "SIG$sig: said $n bytes reclaimed; $((mid - bytes0)) were written"
	[ ! -s "$T/out" ] || fail "SIG$sig: printed a snapshot: $(cat "$T/out")"
	[ "$("$CREST" ls | grep -c .)" = "$snaps0" ] || fail "SIG$sig: a snapshot was committed"
	[ "$(packs)" = "$bytes0" ] || fail "SIG$sig: packs hold $(packs) bytes, $bytes0 before the put"
	echo "ok: SIG$sig mid-put: exit $rc, no snapshot, packs back to $bytes0 bytes ($n reclaimed)"
done
# Ctrl-C while the put waits for another writer's lock ends it at once
# (nothing is written yet): it does not wait on for the lock first.
flock "$S/lock" sleep 5 &
F=$!
sleep 0.5
python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])' \
	"$CREST" put "$T/small" >"$T/out" 2>"$T/err" &
P=$!
sleep 1
t0=$SECONDS
kill -INT $P
rc=0
wait $P || rc=$?
[ "$rc" = 130 ] || { cat "$T/err"; fail "SIGINT while waiting for the lock: exit $rc, not 130"; }
[ $((SECONDS - t0)) -le 2 ] || fail "SIGINT while waiting for the lock took $((SECONDS - t0)) s"
[ "$(packs)" = "$bytes0" ] || fail "packs changed by a put stopped while waiting for the lock"
echo "ok: SIGINT while waiting for another writer's lock: ended at once (exit 130)"
wait $F

# The store is whole and takes the next put.
"$CREST" put --tag again "$T/small" >/dev/null
"$CASCTL" verify >/dev/null || fail "verify after the interrupted puts"
echo "PASS put_interrupt"
