#!/bin/bash
# Issue 32, item 1: a duration crest accepts is carried whole. crest run
# --every once went to an int of milliseconds: 4294967296ms became 0 (a
# checkpoint after every 20 ms poll), 4294968s became 704 ms, and 2^31 ms
# and more turned negative (no checkpoint ever). Out-of-range and malformed
# durations, and --lock-timeout past what the driver's unsigned int holds,
# are usage errors: one line, exit 2, no job started.
D=$(cd "$(dirname "$0")" && pwd)
source "$D/lib.sh"
need_root
cd "$T"

usage_error() {   # usage_error WANT COMMAND...
	local want=$1 rc=0; shift
	"$@" >/dev/null 2>err.txt || rc=$?
	[ "$rc" = 2 ] || { cat err.txt >&2; fail "'$*' exited $rc, not 2"; }
	[ "$(wc -l <err.txt)" = 1 ] && grep -qF -- "$want" err.txt || { cat err.txt >&2; fail "'$*': not one line about '$want'"; }
	[ ! -e started ] || fail "'$*' started its job"
	echo "ok: $(cat err.txt)"
}
for v in 367d 4294967296 8785h 0 0ms 0.0001ms 1e3 inf nan -5s ' 5s' 5x 5s5 . '' 99999999999999999999999s; do
	usage_error "--every $v: not a duration" "$CREST" --store "$S" run --every "$v" -- touch started
done
usage_error "--keep-within 367d: not a duration" "$CASCTL" --store "$S" gc --keep-within 367d
for v in -1 ' 5' 99999999999999999999999 0; do
	usage_error "--count $v: not a positive number" "$CREST" --store "$S" checkpoint --pid $$ --every 1s --count "$v"
done
for v in 4294967296 2h 0 -1; do
	usage_error "--lock-timeout $v: not a duration" "$CREST" --store "$S" checkpoint --pid $$ --lock-timeout "$v"
done

# CREST_LOCK_TIMEOUT through the same parser: a usage error on the
# command line, before anything runs.
for v in inf nan 1e400 -1 367d 5x; do
	CREST_LOCK_TIMEOUT=$v usage_error "CREST_LOCK_TIMEOUT=$v: not a duration" "$CREST" --store "$S" run --every 1s -- touch started
done

# Accepted, and long: a 3-second job sees no checkpoint at all, and ends
# when it ends (not 54 back-to-back checkpoints, nor one every 704 ms).
for v in 4294967296ms 4294968s 2147483648ms 30d 366d; do
	t0=$SECONDS
	"$CREST" --store "$S" run --every "$v" -- sleep 3 >run.out 2>run.err ||
		{ cat run.err >&2; fail "run --every $v failed"; }
	grep -q "the job ended with status 0 after 0 checkpoints" run.err ||
		{ cat run.err >&2; fail "run --every $v: checkpoints taken of a 3 s job"; }
	[ $((SECONDS - t0)) -le 10 ] || fail "run --every $v took $((SECONDS - t0)) s for a 3 s job"
	echo "ok: run --every $v: no checkpoint of a 3 s job"
done
# And short still works: 1s gives a 3-second job its checkpoints.
"$CREST" --store "$S" init >/dev/null || fail "crest init"
"$CREST" --store "$S" run --every 1s -- sleep 3 >run.out 2>run.err || { cat run.err >&2; fail "run --every 1s failed"; }
n=$(sed -n 's/.*after \([0-9]*\) checkpoints/\1/p' run.err)
[ -n "$n" ] && [ "$n" -ge 1 ] && [ "$n" -le 4 ] || { cat run.err >&2; fail "run --every 1s: '$n' checkpoints of a 3 s job"; }
echo "ok: run --every 1s: $n checkpoints of a 3 s job"
echo "PASS every_range"
