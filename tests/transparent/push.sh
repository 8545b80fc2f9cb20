# Issue 35, item 4: a transparent CPU snapshot pushed from the node that
# took it to a shared store, pulled from there into a fresh store (another
# node's), and restored from that one: the job's log ends where it ended
# at the snapshot, and the restored job writes on as an uninterrupted run
# would. The first store is gone by then, so nothing can come from it.
source "$(dirname "$0")/lib.sh"
need_root
cd "$T"
start_job job.out --mib 64 --interval-ms 150 --log "$T/job.log"
wait_lines job.log 3
"$CREST" --store "$S" checkpoint --pid "$JOB" --kill --tag moved >ck.out
kill_gone "$JOB"
"$CREST" --store "$S" --init push moved "$T/shared" >push.out || fail "push failed"
cat push.out
mv "$S" "$T/first-node-gone"
"$CREST" --store "$T/other" --init pull moved "$T/shared" >pull.out || fail "pull failed"
cat pull.out
before=$(lines job.log)
"$CREST" --store "$T/other" restore moved >restore.out || fail "restore from the pulled store failed"
NEW=$(pgrep -f "crest-workload --mib 64 --interval-ms 150 --log $T/job.log" | head -n1 || true)
[ -n "$NEW" ] && PIDS+=("$NEW")
wait_lines job.log $((before + 3))
kill -9 "$NEW" 2>/dev/null || true
n=$(lines job.log)
"$WORKLOAD" --mib 64 --interval-ms 0 --steps "$n" >ref.txt
cmp job.log ref.txt || fail "the restored job's log is not the uninterrupted run's"
head -n "$n" ref.txt | cmp - <(head -n "$n" job.out) || fail "stdout differs"
"$CASCTL" --store "$T/other" --quiet verify || fail "verify of the pulled store failed"
echo "PASS: pushed, pulled into a fresh store, restored from it: $n log lines, identical to an uninterrupted run"
