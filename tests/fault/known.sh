#!/bin/bash
# known.sh - issue 9, items 2 and 4: the reported failures, each replayed
# with one injected fault, asserting what a correct store must do.
#
#   wal-sync   EIO on the fdatasync of the index's WAL during a put's commit
#   dir-sync   EIO on the fsync of the index directory during that commit
#   every      one transient EIO on the WAL sync of the 2nd of 4 checkpoints
#              of `crest checkpoint --every` (root and criu only)
#   lost-pack  a pack file removed, then the same data put again
#
# For each, the failed snapshot must not be listed, every listed snapshot
# must pass casctl verify, and what is reported OK must restore.
set -uo pipefail
# Stores here are made on first use (crest init and its refusals: tests/store/init.sh).
export CREST_INIT=1
: "${CREST:?}" "${CASCTL:?}" "${STORE_TOOL:?}" "${FAULTSHIM:?}"
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=0:verify_asan_link_order=0}
T=$(mktemp -d "${TMPDIR:-/tmp}/crest-known.XXXXXX")
JOB=
trap '[ -n "$JOB" ] && kill -9 $JOB 2>/dev/null; rm -rf "$T"' EXIT
nfail=0
bad() { echo "FAIL [$case] $*"; nfail=$((nfail + 1)); }
ok() { echo "   ok: $*"; }

mkdir -p "$T/a" "$T/b"
"$STORE_TOOL" random "$T/a/x.bin" 3M 1 >/dev/null
"$STORE_TOOL" random "$T/b/y.bin" 2M 2 >/dev/null
packs() { (cd "$1/packs" && ls -l --time-style=+ | awk 'NR > 1 { printf " %s=%s", $6, $5 }'); }

# A put whose commit fails at the Nth fdatasync/fsync on the index.
commit_fault() {   # FUNC PATHSUB
	local S=$T/$case
	"$CREST" --store "$S" --quiet put --tag base "$T/b" >/dev/null
	echo "   before: packs:$(packs "$S")"
	# The commit's WAL sync is the only fdatasync of a .log file in a put
	# of a store opened without a WAL to recover; its directory's fsync
	# follows it.
	local n
	rm -f "$T/trace"
	cp -a "$S" "$T/$case.probe"
	CREST_FAULT="any:path=$T/$case.probe/" CREST_FAULT_TRACE=$T/trace LD_PRELOAD=$FAULTSHIM \
		"$CREST" --store "$T/$case.probe" --quiet put --tag probe "$T/a" >/dev/null
	n=$(awk -v f="$1" -v p="$2" '$1 == f && $3 ~ p { print $2 }' "$T/trace" | tail -1)
	echo "   $1 of $2: call $n of the put ($(grep -c . "$T/trace") traced calls)"
	rc=0
	CREST_FAULT="$1:path=$S/:nth=$n:errno=EIO" LD_PRELOAD=$FAULTSHIM \
		"$CREST" --store "$S" put --tag failed "$T/a" >"$T/out" 2>&1 || rc=$?
	sed 's/^/   put: /' "$T/out"
	echo "   after the failed put: packs:$(packs "$S")"
	[ "$rc" -ne 0 ] || bad "the put with a failed commit exited 0"
	"$CREST" --store "$S" ls | sed 's/^/   ls: /'
	"$CREST" --store "$S" --json ls | grep -q '"failed"' && bad "the failed snapshot is listed after the next open"
	"$CASCTL" --store "$S" --quiet verify >"$T/v" 2>&1 || bad "verify: $(head -1 "$T/v")"
	rc=0
	"$CREST" --store "$S" put --tag again "$T/a" >"$T/out" 2>&1 || rc=$?
	sed 's/^/   put again: /' "$T/out"
	echo "   after it: packs:$(packs "$S")"
	rm -rf "$T/get"
	if [ "$rc" -ne 0 ]; then
		bad "the put after it fails: $(head -1 "$T/out")"
	elif ! "$CREST" --store "$S" --quiet get again "$T/get" >"$T/g" 2>&1; then
		bad "the put after it exits 0 but does not restore: $(head -1 "$T/g")"
	elif ! cmp -s "$T/a/x.bin" "$T/get/a/x.bin"; then
		bad "the put after it restores other bytes"
	else
		ok "the put after it restores"
	fi
}

case=wal-sync
echo "== $case: EIO on the index WAL's fdatasync in a put's commit"
commit_fault fdatasync '\.log$'
case=dir-sync
echo "== $case: EIO on the index directory's fsync in a put's commit"
commit_fault fsync 'index$'

case=lost-pack
echo "== $case: a pack is lost, then the same data is put again"
S=$T/$case
"$CREST" --store "$S" --quiet put --tag base "$T/b" >/dev/null
"$CREST" --store "$S" --quiet put --tag first "$T/a" >/dev/null
echo "   packs:$(packs "$S"); removing 00000002.pack (snapshot 'first')"
rm "$S/packs/00000002.pack"
"$CASCTL" --store "$S" --quiet verify >"$T/v" 2>&1 && bad "verify passes with a pack gone"
rc=0
"$CREST" --store "$S" put --tag again "$T/a" >"$T/out" 2>&1 || rc=$?
sed 's/^/   put again: /' "$T/out"
rm -rf "$T/get"
if [ "$rc" -eq 0 ] && ! "$CREST" --store "$S" --quiet get again "$T/get" >"$T/g" 2>&1; then
	bad "the put of the same data exits 0 but does not restore: $(head -1 "$T/g")"
elif [ "$rc" -eq 0 ]; then
	ok "the put of the same data restores"
else
	ok "the put of the same data reports failure: $(head -1 "$T/out")"
fi

case=every
if [ "$(id -u)" = 0 ] && [ -n "${WORKLOAD:-}" ]; then
	echo "== $case: one transient EIO on the WAL sync of the 2nd of 4 checkpoints --every 1s"
	S=$T/$case
	setsid "$WORKLOAD" --mib 16 --interval-ms 50 </dev/null >"$T/job.out" 2>&1 &
	JOB=$!
	sleep 0.3
	# The 2nd WAL fdatasync of the run is the 2nd checkpoint's commit (the
	# store is new: its open recovers no WAL).
	rc=0
	CREST_FAULT_PROG=crest CREST_FAULT="fdatasync:path=.log:nth=2:errno=EIO" LD_PRELOAD=$FAULTSHIM \
		"$CREST" --store "$S" checkpoint --pid "$JOB" --every 1s --count 4 >"$T/out" 2>&1 || rc=$?
	grep -v '^  ' "$T/out" | sed 's/^/   ckpt: /'
	"$CREST" --store "$S" ls | sed 's/^/   ls: /'
	n=$("$CREST" --store "$S" --json ls | grep -c '"snapshot"')
	okn=$(grep -c '^snapshot ' "$T/out")
	echo "   $okn checkpoints reported OK, $n listed"
	[ "$n" -eq "$okn" ] || bad "$n snapshots listed, $okn checkpoints reported OK"
	for id in $("$CREST" --store "$S" --json ls | sed -n 's/.*"snapshot": "\([0-9a-f]*\)".*/\1/p'); do
		"$CASCTL" --store "$S" --quiet verify "$id" >"$T/v" 2>&1 ||
			bad "snapshot ${id:0:12} fails verify: $(head -1 "$T/v" | cut -c1-200)"
	done
fi

echo "$nfail failures"
[ "$nfail" -eq 0 ] && echo PASS
exit $((nfail > 0))
