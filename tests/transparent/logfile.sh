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
NEW=$(pgrep -f "crest-workload --mib 64 --interval-ms 150 --log $T/job.log" | head -n1 || true)
[ -n "$NEW" ] && PIDS+=("$NEW")
wait_lines job.log $((before + 2))
kill -9 "$NEW" 2>/dev/null || true
n=$(lines job.log)
"$WORKLOAD" --mib 64 --interval-ms 0 --steps "$n" >ref.txt
cmp job.log ref.txt || fail "the restored job's log is not the uninterrupted run's"
# And its stdout, size-checked by CRIU, continues the same way.
head -n "$n" ref.txt | cmp - <(head -n "$n" job.out) || fail "stdout differs"
echo "PASS: $n log lines, identical to an uninterrupted run"
