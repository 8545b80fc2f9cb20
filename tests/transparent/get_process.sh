#!/bin/bash
# Issue 10, item 6: `crest get` of a process snapshot writes its CRIU images
# and the job's files as a tree (its images are named criu/NAME with no
# directory entry for criu/), and CRIU restores the job from what get wrote:
# the job goes on printing where it stopped.
source "$(dirname "$0")/lib.sh"
need_root
CRIU=${CREST_CRIU:-$(dirname "$CREST")/../../.deps/criu/criu}
[ -x "$CRIU" ] || fail "no criu at $CRIU (scripts/install-criu.sh)"
cd "$T"
start_job job.out --mib 16 --interval-ms 50
wait_lines job.out 5
# --kill: the job ends once stored, so its output file keeps the size CRIU saw.
"$CREST" --store "$S" --quiet checkpoint --pid "$JOB" --tag p --kill >/dev/null || fail "checkpoint --kill"
kill_gone "$JOB"
n0=$(lines job.out)
"$CREST" --store "$S" --quiet get p "$T/out" || fail "crest get of a process snapshot"
[ -f "$T/out/criu/inventory.img" ] || fail "get wrote no criu/inventory.img: $(cd "$T/out" && find . | head)"
# Without hardware breakpoints (CRIU_FAULT=130, as crest runs criu where
# they do not fire: os/CRIU-NOTES.md): this test is about get's tree, and
# criu run by hand would wait for good on a machine without them.
CRIU_FAULT=130 "$CRIU" restore -D "$T/out/criu" -d -o restore.log >/dev/null 2>&1 ||
	fail "criu restore from what crest get wrote: $(tail -3 "$T/out/criu/restore.log")"
PIDS+=("$JOB")   # CRIU brings it back under its pid
wait_lines job.out $((n0 + 5)) 30
echo "PASS: the job ran on from $n0 lines after a restore from crest get's tree"
