# Issue 3, item 2: a process killed, or exiting, during its checkpoint
# leaves no half snapshot, and the store verifies.
source "$(dirname "$0")/lib.sh"
need_root
cd "$T"
# A put first, so the store has something to keep intact.
head -c 1048576 /dev/urandom >data.bin
"$CREST" --store "$S" put --quiet data.bin >/dev/null

# 1. Killed in the middle of CRIU's dump: a big state makes the dump last.
start_job job.out --mib $((MIB * 4)) --interval-ms 100
wait_lines job.out 1
"$CREST" --store "$S" checkpoint --pid "$JOB" >ck.out 2>ck.err &
CK=$!
sleep 0.3
kill -9 "$JOB"
if wait "$CK"; then
	echo "note: the checkpoint finished before the kill; retrying with an exiting job"
else
	cat ck.err
	grep -q "crest:" ck.err || fail "no error message"
fi
wait "$JOB" 2>/dev/null || true

# 2. Exits by itself while crest works: --steps ends it after one more step.
start_job job2.out --mib "$MIB" --interval-ms 0 --steps 3
"$CREST" --store "$S" checkpoint --pid "$JOB" >ck2.out 2>ck2.err || cat ck2.err
wait "$JOB" 2>/dev/null || true

# Whatever happened, no half snapshot: every listed one is whole.
n=$("$CREST" --store "$S" ls --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
echo "snapshots listed: $n"
"$CASCTL" --store "$S" verify
for id in $("$CREST" --store "$S" ls --json | python3 -c 'import json,sys; [print(s["snapshot"]) for s in json.load(sys.stdin)]'); do
	"$CREST" --store "$S" show "$id" >/dev/null
done
ls /dev/shm | grep -q "crest-ckpt-$JOB" && fail "images of pid $JOB left in /dev/shm"
echo PASS
