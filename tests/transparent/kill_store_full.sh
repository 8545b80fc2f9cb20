# Issue 10, item 1: `crest checkpoint --kill` into a store that then fails
# (a tmpfs too small for the job) must not lose the job: CRIU used to kill
# it before the ingest, and the failed ingest deleted the images, its only
# copy. Now the job is left stopped until the snapshot is committed, and
# runs on when it is not. Then a --kill into a store with room ends it and
# a restore brings it back.
source "$(dirname "$0")/lib.sh"
need_root
cd "$T"
small_store
start_job job.out --mib 32 --interval-ms 100
wait_lines job.out 2
set +e
"$CREST" --store small/st checkpoint --pid "$JOB" --kill >ck.out 2>ck.err
rc=$?
set -e
cat ck.out ck.err
[ $rc -ne 0 ] || fail "--kill into a store too small for the job reported success"
grep -q "No space left on device" ck.err || fail "the error does not say the store is full"
st=$(awk '{print $3}' /proc/"$JOB"/stat 2>/dev/null || true)
[ -n "$st" ] && [ "$st" != Z ] || fail "the job is gone: --kill ended it though nothing was stored"
[ "$st" != T ] || fail "the job was left stopped"
grep -q "was not ended.*runs on" ck.err || fail "the error does not say the job runs on"
n=$(lines job.out); wait_lines job.out $((n + 2)) 10
echo "job $JOB runs on after the failed --kill: $(lines job.out) lines"

# Into a store with room: stored, then ended; the restore continues it.
"$CREST" --store "$S" checkpoint --pid "$JOB" --kill --tag k >ck2.out
cat ck2.out
grep -q "^snapshot " ck2.out || fail "--kill into a store with room stored nothing"
kill_gone "$JOB"
at=$(lines job.out)
"$CREST" --store "$S" restore k
wait_lines job.out $((at + 2)) 20
echo "PASS: restored job printed $(lines job.out) lines (was $at at the kill)"
