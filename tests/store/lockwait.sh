#!/bin/bash
# Issue 9, item 6 (c): a writer that waits for the store's lock says who
# holds it, says so again while it waits, and gives up after
# CREST_LOCK_TIMEOUT seconds with a one-line error, instead of waiting for a
# stopped writer forever.
. "$(dirname "$0")/lib.sh"

mkdir -p "$T/big" "$T/small"
"$STORE_TOOL" random "$T/big/big.bin" "$(scaled $((512 << 20)))" 7
"$STORE_TOOL" random "$T/small/s.bin" 64K 8
crest put "$T/small" >/dev/null   # the store exists, the lock file too

note "a writer stopped (SIGSTOP) while it holds the lock"
"$CREST" --quiet put "$T/big" >/dev/null 2>"$T/big.err" & W=$!
for _ in $(seq 1 1000); do
	grep -q "^$W " "$S/lock" 2>/dev/null && break
	sleep 0.01
done
grep -q "^$W " "$S/lock" || fail "the writer (pid $W) never wrote itself into $S/lock: $(cat "$S/lock")"
kill -STOP $W
trap 'kill -CONT $W 2>/dev/null || true; cleanup' EXIT
echo "   writer pid $W stopped; lock file says: $(cat "$S/lock")"

t0=$(date +%s%N)
rc=0
CREST_LOCK_TIMEOUT=2 timeout 30 "$CREST" --quiet put "$T/small" >/dev/null 2>"$T/w.err" || rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
sed 's/^/   | /' "$T/w.err"
[ $rc -ne 124 ] || fail "a second writer still waited after 30 s with CREST_LOCK_TIMEOUT=2"
[ $rc -ne 0 ] || fail "a second writer succeeded while the lock was held"
[ $ms -ge 2000 ] && [ $ms -lt 10000 ] || fail "gave up after $ms ms; expected about 2000"
head -1 "$T/w.err" | grep -q "locked by pid $W (.*crest.* put .*big), which is stopped; waiting up to 2 s" ||
	fail "the first line does not name the holder: $(head -1 "$T/w.err")"
tail -1 "$T/w.err" | grep -q "^crest: store $S is locked by pid $W .*gave up after 2 s" ||
	fail "the last line is not the time-out error: $(tail -1 "$T/w.err")"
[ "$(wc -l <"$T/w.err")" -eq 2 ] || fail "expected two lines (waiting, giving up), got $(wc -l <"$T/w.err")"
echo "   gave up after $ms ms, exit $rc"

note "the message is repeated while it waits"
rc=0
CREST_LOCK_TIMEOUT=16 timeout 60 "$CREST" --quiet put "$T/small" >/dev/null 2>"$T/w.err" || rc=$?
sed 's/^/   | /' "$T/w.err"
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "exit $rc with CREST_LOCK_TIMEOUT=16"
grep -q "still waiting for store $S, locked by pid $W .*: 15 s of 16 s" "$T/w.err" ||
	fail "no repeated message after 15 s"

note "a waiter goes on once the holder resumes and finishes"
CREST_LOCK_TIMEOUT=60 "$CREST" --quiet put --tag after "$T/small" >/dev/null 2>"$T/w.err" & P=$!
sleep 1
kill -CONT $W
wait $W || fail "the stopped writer failed once resumed: $(cat "$T/big.err")"
wait $P || fail "the waiting writer failed: $(cat "$T/w.err")"
grep -q "locked by pid $W" "$T/w.err" || fail "the waiter did not say who held the lock"
rm -rf "$T/out" && crest get after "$T/out" && cmp -s "$T/small/s.bin" "$T/out/small/s.bin" ||
	fail "the snapshot of the waiter does not restore"

note "CREST_LOCK_TIMEOUT=0 fails at once"
"$CREST" --quiet put "$T/big" >/dev/null 2>"$T/big.err" & W=$!
for _ in $(seq 1 1000); do grep -q "^$W " "$S/lock" 2>/dev/null && break; sleep 0.01; done
kill -STOP $W
rc=0
CREST_LOCK_TIMEOUT=0 timeout 10 "$CREST" --quiet put "$T/small" >/dev/null 2>"$T/w.err" || rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "CREST_LOCK_TIMEOUT=0: exit $rc"
grep -q "gave up after 0 s" "$T/w.err" || fail "CREST_LOCK_TIMEOUT=0: $(cat "$T/w.err")"
kill -CONT $W
wait $W || fail "the second big writer failed"
note "a writer takes its name out of the lock file when it lets go"
# Left behind, the name of a writer that lives on (a libcrest session that
# stepped aside) was shown as the holder while flock(1), which names no
# one, held the store; and as "this process" to that session itself.
[ ! -s "$S/lock" ] || fail "the lock file still names a writer that has let go: $(cat "$S/lock")"
flock "$S/lock" sleep 3 & F=$!
sleep 0.5
rc=0
CREST_LOCK_TIMEOUT=1 "$CREST" --quiet put "$T/small" >/dev/null 2>"$T/w.err" || rc=$?
sed 's/^/   | /' "$T/w.err"
wait $F
[ $rc -ne 0 ] || fail "a writer got the store while flock(1) held it"
grep -q "locked by another crest (it has not said which)" "$T/w.err" ||
	fail "a holder that named no one was given a name: $(cat "$T/w.err")"
verify_store "after the lock tests"
echo "PASS"
