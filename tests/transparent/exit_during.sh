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

# 3. criu itself hangs after the process died (criu 4.1.1 was seen to, now
#    and then, in case 1): crest stops it and fails with a message, within
#    its grace period, instead of hanging with it. A stand-in criu that
#    answers --version and never finishes a dump.
cat >fake-criu <<'FAKE'
#!/bin/sh
[ "$1" = --version ] && { echo "Version: 4.1.1"; exit 0; }
exec sleep 600
FAKE
chmod +x fake-criu
start_job job3.out --mib 1 --interval-ms 100
t0=$(date +%s)
CREST_CRIU=$PWD/fake-criu "$CREST" --store "$S" checkpoint --pid "$JOB" >ck3.out 2>ck3.err &
CK=$!
sleep 1
kill -9 "$JOB"
wait "$JOB" 2>/dev/null || true
rc=0
wait "$CK" || rc=$?
t=$(( $(date +%s) - t0 ))
cat ck3.err
[ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] || fail "checkpoint with a hung criu: rc $rc"
grep -q "had not finished .* after process" ck3.err || fail "no message about the hung criu"
[ "$t" -lt 60 ] || fail "crest took $t s to give up on a hung criu"
echo "hung criu stopped; crest returned in $t s"
pgrep -f "$PWD/fake-criu" >/dev/null && fail "the hung criu was left running"

# Whatever happened, no half snapshot: every listed one is whole.
n=$("$CREST" --store "$S" ls --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
echo "snapshots listed: $n"
"$CASCTL" --store "$S" verify
for id in $("$CREST" --store "$S" ls --json | python3 -c 'import json,sys; [print(s["snapshot"]) for s in json.load(sys.stdin)]'); do
	"$CREST" --store "$S" show "$id" >/dev/null
done
ls /dev/shm | grep -q "crest-ckpt-$JOB" && fail "images of pid $JOB left in /dev/shm"
echo PASS
