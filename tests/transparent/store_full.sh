# Issue 3: a failure after resume (here, a full store) never harms the
# running job: every checkpoint reports it, the job runs on, and once
# there is room again the next checkpoint of the same --every run works.
source "$(dirname "$0")/lib.sh"
need_root
cd "$T"
mkdir small
mount -t tmpfs -o size=16m tmpfs small || fail "cannot mount a small tmpfs (these tests run as root)"
trap 'umount "$T/small" 2>/dev/null; cleanup' EXIT
start_job job.out --mib 8 --interval-ms 100
wait_lines job.out 2
# Fill the small store; free the room again once crest has reported the
# first failure, while it waits for its next period.
head -c 15m /dev/zero >small/filler
( until grep -q "No space left" ck.err 2>/dev/null; do sleep 0.05; done; rm -f small/filler ) &
set +e
"$CREST" --store small/st checkpoint --pid "$JOB" --every 2s --count 3 >ck.out 2>ck.err
rc=$?
set -e
cat ck.out ck.err
[ $rc -ne 0 ] || fail "checkpoints into a full store reported success"
grep -q "No space left on device" ck.err || fail "the error does not say the store is full"
n=$(lines job.out); wait_lines job.out $((n + 3))
kill -0 "$JOB" || fail "the job did not survive"
grep -q "^snapshot " ck.out || fail "no checkpoint worked once there was room again"
"$CASCTL" --store small/st verify
echo PASS
