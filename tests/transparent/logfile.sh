# Issue 3, item 3: a job that keeps appending to a log after its checkpoint
# is restored from it, and its log ends where it ended at the snapshot
# before the restored job writes on: no line lost, none repeated.
source "$(dirname "$0")/lib.sh"
need_root
cd "$T"
start_job job.out --mib 64 --interval-ms 150 --log "$T/job.log"
wait_lines job.log 3
"$CREST" --store "$S" checkpoint --pid "$JOB" --tag logjob >ck.out
at=$(grep -c . job.log)     # at least the lines at the snapshot
wait_lines job.log $((at + 5))
kill_gone "$JOB"
before=$(lines job.log)
"$CREST" --store "$S" restore logjob >restore.out
cat restore.out
grep -q "job.log" restore.out || fail "restore did not say what it did to job.log"
grep -q "discarded" restore.out || fail "restore did not say that later lines were discarded"
# Its log, and its stdout (size-checked by CRIU), continue the same way.
same_as_uninterrupted "$T/job.log" job.out "$before" 64 150
echo "PASS: $N log lines, identical to an uninterrupted run"
