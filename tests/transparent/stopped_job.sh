#!/bin/bash
# A job stopped by its owner (SIGSTOP, job control, a scheduler) before a
# `crest checkpoint --kill` whose store then fails must stay stopped: crest
# used to SIGCONT every process of the tree to let it "run on", so a
# suspended job went on running (and writing) behind its owner's back. A
# plain checkpoint leaves it stopped too (CRIU restores its state).
source "$(dirname "$0")/lib.sh"
need_root
cd "$T"
small_store
state() { awk '{print $3}' /proc/"$JOB"/stat 2>/dev/null || echo gone; }
start_job job.out --mib 32 --interval-ms 50
wait_lines job.out 2
kill -STOP "$JOB"
sleep 0.2
[ "$(state)" = T ] || fail "the job did not stop"
"$CREST" --store "$S" --quiet checkpoint --pid "$JOB" >/dev/null || fail "the plain checkpoint failed"
[ "$(state)" = T ] || fail "a plain checkpoint continued the stopped job (state $(state))"
set +e
"$CREST" --store small/st checkpoint --pid "$JOB" --kill >ck.out 2>ck.err
rc=$?
set -e
cat ck.err
[ $rc -ne 0 ] || fail "--kill into a store too small for the job reported success"
n=$(lines job.out)
sleep 1
[ "$(state)" = T ] || fail "the failed --kill continued the job its owner had stopped (state $(state))"
[ "$(lines job.out)" -eq "$n" ] || fail "the stopped job wrote $(( $(lines job.out) - n )) lines after the failed --kill"
kill -CONT "$JOB"
wait_lines job.out $((n + 2)) 10
echo "PASS: the job stayed stopped through both checkpoints, and runs when its owner continues it"
