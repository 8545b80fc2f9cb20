#!/bin/bash
# A reader's view of the index is one state of it: what a listing shows, a
# look-up by id finds. CI once saw `casctl verify` beside a writer fail with
# "snapshot X is not in STORE" for a snapshot it had just listed (1 of 188
# verifies in store.verify_race). The cause: with max_open_files = -1,
# RocksDB's plain read-only open first tries its "fully compacted" mode,
# which it takes when the index's tables sit in one level and its write-ahead
# logs are empty *when it sizes them*; it then replays the logs all the same,
# and its point look-ups read the tables alone, while its iterators read the
# replayed logs too. A writer that commits between the sizing and the replay
# leaves a reader that lists the new snapshot and cannot find it.
#
# The race is made certain here: the writer is held after its open (its
# index recovered into one table, its log empty: util/fault.h's
# store.write_open), the reader is held at its first open of a log file
# (after the sizing, before the replay: faultshim's CREST_FAULT_HOLD), and
# the writer commits in between. Then every listed snapshot must be found.
. "$(dirname "$0")/lib.sh"
: "${FAULTSHIM:?FAULTSHIM must name the fault shim}"
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1}:verify_asan_link_order=0

wait_file() {   # wait_file FILE PID WHAT
	for _ in $(seq 1000); do
		[ -e "$1" ] && return 0
		running "$2" || fail "$3 ended before it reached the hold"
		sleep 0.01
	done
	fail "$3 never reached the hold ($1)"
}

rounds=${CREST_READ_VIEW_ROUNDS:-3}
mkdir -p "$T/d"
for r in $(seq "$rounds"); do
	# One snapshot in the index's log (a fresh store: no table yet), then a
	# writer held right after its open has flushed that log into one table.
	rm -rf "$S" "$T/d"/*
	"$STORE_TOOL" random "$T/d/a.bin" 64K $((r * 2)) || fail "store_tool"
	put "$T/d"
	"$STORE_TOOL" random "$T/d/b.bin" 64K $((r * 2 + 1)) || fail "store_tool"
	rm -f "$T/wp" "$T/rp"
	CREST_FAULT_PAUSE="store.write_open:$T/wp" "$CREST" --quiet put --tag "new$r" "$T/d" \
		>"$T/w.out" 2>&1 &
	wpid=$!
	wait_file "$T/wp" $wpid "the writer"
	# The reader, held at its first open of a write-ahead log.
	LD_PRELOAD=$FAULTSHIM CREST_FAULT_PROG=casctl CREST_FAULT_HOLD=".log:$T/rp" \
		"$CASCTL" verify >"$T/v.out" 2>&1 &
	vpid=$!
	wait_file "$T/rp" $vpid "the reader"
	rm -f "$T/wp"
	wrc=0
	wait $wpid || wrc=$?
	[ $wrc -eq 0 ] || { cat "$T/w.out" >&2; fail "round $r: the writer failed (rc $wrc)"; }
	rm -f "$T/rp"
	vrc=0
	wait $vpid || vrc=$?
	if [ $vrc -ne 0 ]; then
		sed 's/^/   | /' "$T/v.out" >&2
		fail "round $r: casctl verify, opened across a commit, failed (rc $vrc)"
	fi
	grep -q "faultshim: holding at the open of .*/index/.*\.log" "$T/v.out" ||
		fail "round $r: the reader was not held at a log's open: $(cat "$T/v.out")"
	# What the reader listed it could find: 2 snapshots whether or not its
	# view had the new one, and afterwards the store has both.
	"$CASCTL" --quiet verify >/dev/null 2>&1 || fail "round $r: verify after the writer"
	n=$("$CREST" --json ls | grep -o '"snapshot"' | wc -l)
	[ "$n" -eq 2 ] || fail "round $r: $n snapshots listed, expected 2"
	echo "   round $r: verify across the commit: $(grep -E '^ok:' "$T/v.out" | head -1)"
done
echo PASS
