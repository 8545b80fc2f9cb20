#!/bin/bash
# gc compacts the meta logs (cas_meta_compact, cas/meta.c): what the index
# names is copied into gc's own log and the older logs are removed, oldest
# first. Without it they grew for good (86 MB a checkpoint for a region of
# 8 GiB in 4 KiB chunks), whatever gc expired.
#
#   1. A whole run: the logs shrink to what the kept snapshots need, the
#      kept ones restore bit-exact, the expired ones are gone, and
#      `casctl repair` (the index rebuilt from the packs and the logs
#      alone) gives back exactly the kept ones, tags included.
#   2. gc killed at every unlink of an old log and at every sync of the
#      meta logs (the points the shim lists in a traced run): after each,
#      the store verifies, exactly the kept snapshots are listed and
#      restore bit-exact, and a repair brings no expired one back.
# The versions' changes are random; the seed is printed (GC_META_SEED).
set -uo pipefail
# Stores here are made on first use (crest init and its refusals: tests/store/init.sh).
export CREST_INIT=1
: "${CREST:?}" "${CASCTL:?}" "${STORE_TOOL:?}" "${FAULTSHIM:?}"
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=0:verify_asan_link_order=0}
T=$(mktemp -d "${TMPDIR:-/tmp}/crest-gcmeta.XXXXXX")
trap 'rm -rf "$T"' EXIT
nfail=0
bad() { echo "FAIL $*"; nfail=$((nfail + 1)); }
seed=${GC_META_SEED:-$(od -An -N2 -tu2 /dev/urandom | tr -d ' ')}
echo "seed $seed (GC_META_SEED=$seed replays it)"
RANDOM=$seed
# Small pieces, so that a few MiB make many; every log counts.
export CREST_PIECE_MIN_EXTENTS=16 CREST_PIECE_SPAN=65536 CREST_META_COMPACT_MIN=0
N=10
KEEP=3

mkdir -p "$T/src"
"$STORE_TOOL" random "$T/src/f" 8M "$seed" >/dev/null
# Odd versions change few chunks, and their pieces are deltas against the
# version before; even ones change most, and their pieces are whole. So the
# logs hold both, the kept snapshots (v8 whole, v9 a delta on v8, v10
# whole) need a base, and the expired whole pieces make the old logs more
# than twice what is live, which is when gc compacts them.
for i in $(seq 1 $N); do
	if [ $((i % 2)) -eq 1 ]; then frac=0.0$((RANDOM % 9 + 1)); else frac=0.$((RANDOM % 3 + 5)); fi
	"$STORE_TOOL" scatter "$T/src/f" "$frac" $((RANDOM)) >/dev/null
	cp "$T/src/f" "$T/v$i"
	"$CREST" --store "$T/tpl" --quiet put --chunker fixed --chunk-size 4K --tag "v$i" "$T/src" >/dev/null ||
		{ echo "FAIL: put $i"; exit 1; }
	# Halfway, a gc that leaves the logs alone: its delete records (in a
	# log newer than the manifests they delete) are what must outlive
	# those manifests while a later compaction removes the old logs.
	if [ "$i" -eq $((N / 2)) ]; then
		CREST_META_COMPACT_MIN=1000000000000 "$CASCTL" --store "$T/tpl" --quiet gc --keep-last $KEEP >/dev/null ||
			{ echo "FAIL: the first gc"; exit 1; }
	fi
done
echo "template: $("$CREST" --store "$T/tpl" ls --json | grep -c "\"snapshot\"") snapshots, $(ls "$T/tpl/meta" | wc -l) meta logs, $(du -sb "$T/tpl/meta" | cut -f1) bytes"

# check S WHAT: exactly v$((N-KEEP+1))..v$N listed, verified, bit-exact.
check() {
	local S=$1 what=$2 listed want i
	"$CASCTL" --store "$S" --quiet verify >"$T/verify.out" 2>&1 || bad "$what: casctl verify: $(tail -2 "$T/verify.out")"
	listed=$("$CREST" --store "$S" ls --json | grep -o '"tags": \[[^]]*\]' | grep -o 'v[0-9]*' | sort | tr '\n' ' ')
	want=$(for i in $(seq $((N - KEEP + 1)) $N); do echo "v$i"; done | sort | tr '\n' ' ')
	[ "$listed" = "$want" ] || bad "$what: listed [$listed], want [$want]"
	[ "$("$CREST" --store "$S" ls --json | grep -c '"snapshot"')" -eq "$KEEP" ] ||
		bad "$what: not $KEEP snapshots listed"
	for i in $(seq $((N - KEEP + 1)) $N); do
		rm -rf "$T/get"
		"$CREST" --store "$S" --quiet get "v$i" "$T/get" 2>/dev/null && cmp -s "$T/get/src/f" "$T/v$i" ||
			bad "$what: v$i does not restore bit-exact"
	done
}
# repaired S WHAT: a copy of S repaired from its packs and logs alone.
repaired() {
	rm -rf "$T/rep"
	cp -a "$1" "$T/rep"
	"$CASCTL" --store "$T/rep" --quiet repair >/dev/null 2>"$T/repair.err" || bad "$2: repair: $(tail -1 "$T/repair.err")"
	check "$T/rep" "$2, repaired"
}

echo "== 1. a whole gc"
cp -a "$T/tpl" "$T/s1"
out=$("$CASCTL" --store "$T/s1" --json gc --keep-last $KEEP) || bad "gc failed"
before=$(echo "$out" | sed -n 's/.*"meta_bytes_before": \([0-9]*\).*/\1/p')
after=$(echo "$out" | sed -n 's/.*"meta_bytes_after": \([0-9]*\).*/\1/p')
removed=$(echo "$out" | sed -n 's/.*"meta_logs_removed": \([0-9]*\).*/\1/p')
echo "   meta logs $before -> $after bytes, $removed removed; $(ls "$T/s1/meta" | wc -l) left"
[ "${removed:-0}" -gt $N ] || bad "gc removed ${removed:-0} meta logs, not the $((N + 1)) old ones"
[ "$(ls "$T/s1/meta" | wc -l)" -eq 1 ] || bad "more than one meta log left: $(ls "$T/s1/meta" | tr '\n' ' ')"
[ "$((after * 2))" -lt "$before" ] || bad "the logs did not shrink by half ($before -> $after)"
ondisk=$(find "$T/s1/meta" -type f -printf '%s\n' | awk '{ t += $1 } END { print t + 0 }')
[ "$ondisk" -eq "$after" ] || bad "gc's figure ($after) is not what is on disk ($ondisk)"
check "$T/s1" "whole gc"
repaired "$T/s1" "whole gc"
out=$("$CASCTL" --store "$T/s1" --json gc --keep-last $KEEP) || bad "a second gc failed"
echo "$out" | grep -q '"meta_logs_removed": 0' || bad "a second gc with nothing expired compacted again: $out"

echo "== 2. gc killed in the compaction"
cp -a "$T/tpl" "$T/probe"
CREST_FAULT="unlink,fdatasync,fsync:path=/meta" CREST_FAULT_TRACE=$T/trace CREST_FAULT_PROG=casctl \
	LD_PRELOAD=$FAULTSHIM "$CASCTL" --store "$T/probe" --quiet gc --keep-last $KEEP >/dev/null ||
	bad "the traced gc failed"
# The in-process points (uring:, in the pack rewrite) are gc_kill.sh's.
mapfile -t points < <(awk '$1 !~ /^uring:/ { print $1 ":" $2 }' "$T/trace")
echo "   ${#points[@]} points: ${points[*]}"
[ "${#points[@]}" -ge $N ] || bad "only ${#points[@]} fault points in the meta logs"
for pt in "${points[@]}"; do
	fn=${pt%%:*} nth=${pt##*:}
	rm -rf "$T/s2"
	cp -a "$T/tpl" "$T/s2"
	# In a subshell: bash would say "Killed" of a job of its own.
	(CREST_FAULT="$fn:path=/meta:nth=$nth:errno=kill" CREST_FAULT_PROG=casctl LD_PRELOAD=$FAULTSHIM \
		"$CASCTL" --store "$T/s2" --quiet gc --keep-last $KEEP; exit $?) >/dev/null 2>&1
	rc=$?
	[ "$rc" -eq 137 ] || bad "$pt: gc was not killed there (exit $rc)"
	# Before any writer: what a reader sees verifies (the expired ones
	# may still be listed, if the kill came before gc forgot them).
	"$CASCTL" --store "$T/s2" --quiet verify >/dev/null 2>&1 || bad "$pt: casctl verify right after the kill"
	# A repair from what the kill left: no expired snapshot comes back
	# once forgotten, none kept is lost.
	rm -rf "$T/rep0"
	cp -a "$T/s2" "$T/rep0"
	"$CASCTL" --store "$T/rep0" --quiet repair >/dev/null 2>&1 || bad "$pt: repair right after the kill"
	"$CASCTL" --store "$T/rep0" --quiet verify >/dev/null 2>&1 || bad "$pt: verify after a repair right after the kill"
	# The next gc (its open reconciles) finishes the job.
	"$CASCTL" --store "$T/s2" --quiet gc --keep-last $KEEP >/dev/null 2>&1 || bad "$pt: a gc after the kill failed"
	check "$T/s2" "killed at $pt"
	repaired "$T/s2" "killed at $pt"
	echo "   killed at $pt: $(ls "$T/s2/meta" | wc -l) meta logs after the next gc; kept ones whole"
done
[ "$nfail" -eq 0 ] || { echo "$nfail failures"; exit 1; }
echo PASS
