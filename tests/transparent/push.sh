# Issue 35, item 4: a transparent CPU snapshot pushed from the node that
# took it to a shared store, pulled from there into a fresh store (another
# node's), and restored from that one: the job's log ends where it ended
# at the snapshot, and the restored job writes on as an uninterrupted run
# would. The first store is gone by then, so nothing can come from it.
# Then checkpoint --every --push-to: each round's snapshot is in the other
# store, listed with the same id, and it verifies; --push-to naming the
# store itself or a directory that is no store is refused before anything
# is frozen (exit 1), the job running on.
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
same_as_uninterrupted "$T/job.log" job.out "$before" 64 150
n=$N
"$CASCTL" --store "$T/other" --quiet verify || fail "verify of the pulled store failed"

start_job job2.out --mib 16 --interval-ms 100 --log "$T/job2.log"
wait_lines job2.log 2
mkdir "$T/plain"
for bad in "$T/other" "$T/plain"; do
	rc=0
	CREST_INIT=0 "$CREST" --store "$T/other" checkpoint --pid "$JOB" --push-to "$bad" >/dev/null 2>bad.err || rc=$?
	[ $rc = 1 ] || fail "--push-to $bad: exit $rc, not 1: $(cat bad.err)"
	[ "$(wc -l <bad.err)" = 1 ] || fail "--push-to $bad: not one line: $(cat bad.err)"
	[ "$(sed 's/.*) //' /proc/"$JOB"/stat | cut -d' ' -f1)" != T ] || fail "--push-to $bad: the job was left stopped"
	echo "refused: $(cat bad.err)"
done
n0=$(lines job2.log)
"$CREST" --store "$T/other" --json checkpoint --pid "$JOB" --every 300ms --count 3 --push-to "$T/shared" >every.out ||
	fail "checkpoint --every --push-to failed: $(cat every.out)"
[ "$(grep -c '"pushed"' every.out)" = 3 ] || fail "not 3 pushes: $(cat every.out)"
for id in $(grep -o '"pushed": "[0-9a-f]*"' every.out | cut -d'"' -f4); do
	"$CREST" --store "$T/shared" --json ls | grep -q "\"snapshot\": \"$id\"" || fail "$id was pushed but is not listed in the shared store"
done
"$CASCTL" --store "$T/shared" --quiet verify || fail "verify of the shared store failed"
wait_lines job2.log $((n0 + 3))
echo "PASS: pushed, pulled into a fresh store, restored from it: $n log lines, identical to an uninterrupted run; 3 rounds of --every pushed as taken"
