# Issue 3, item 2: a process killed, or exiting, during its checkpoint
# leaves no half snapshot, and the store verifies.
source "$(dirname "$0")/lib.sh"
need_root
cd "$T"
# A put first, so the store has something to keep intact.
head -c 1048576 /dev/urandom >data.bin
"$CREST" --store "$S" put --quiet data.bin >/dev/null

nsnap() { "$CREST" --store "$S" ls --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))'; }
# Whether pid $1, a child of this shell, is still running (not a zombie).
running() { local st; st=$(ps -o stat= -p "$1" 2>/dev/null) && [ -n "$st" ] && [ "${st#Z}" = "$st" ]; }
# One line on stderr, naming the process that went away mid-checkpoint.
gone_error() {
	[ "$(wc -l <"$1")" -eq 1 ] || { cat "$1" >&2; fail "$2: not one error line"; }
	# Gone before crest first looked (a slow, sanitized crest may start
	# after a short job ended) or while it worked: either is one clean line.
	grep -qE "^crest: (process $3 exited during its checkpoint|no process with pid $3\$|process $3 has exited)" "$1" ||
		{ cat "$1" >&2; fail "$2: wrong error"; }
}

# 1. Killed in the middle of CRIU's dump: a big state makes the dump last.
#    The kill must land while crest works and fail it with one line and no
#    new snapshot; a kill that came too late (crest had exited, or had
#    finished the dump) is tried again sooner, up to three times.
#    The job's parent is a sleep that never reaps it, so the killed job stays
#    a zombie while crest looks: the state crest most often finds (a busy
#    parent reaps late), and the one CI once caught it misnaming.
# start_orphan MIB: the sample job of MIB MiB under a parent (a sleep) that
# never reaps it; sets JOB and PARENT.
start_orphan() {
	setsid sh -c '"$0" "$@" </dev/null >job.out 2>&1 & echo $! >job.pid; exec sleep 600' \
		"$WORKLOAD" --mib "$1" --interval-ms 100 &
	PARENT=$!
	PIDS+=("$PARENT")
	until [ -s job.pid ]; do sleep 0.01; done
	JOB=$(cat job.pid); rm -f job.pid
	PIDS+=("$JOB")
	wait_lines job.out 1
}
hit=0
for delay in 0.3 0.15 0.05; do
	n0=$(nsnap)
	start_orphan $((MIB * 4))
	"$CREST" --store "$S" checkpoint --pid "$JOB" >ck.out 2>ck.err &
	CK=$!
	sleep "$delay"
	alive=0
	running "$CK" && alive=1
	kill -9 "$JOB"
	rc=0
	wait "$CK" || rc=$?
	kill_gone "$PARENT"
	if [ "$alive" = 1 ] && [ "$rc" -ne 0 ]; then
		cat ck.err
		gone_error ck.err "case 1" "$JOB"
		[ "$(nsnap)" -eq "$n0" ] || fail "case 1: a failed checkpoint left a snapshot listed"
		hit=1
		break
	fi
	[ "$rc" -eq 0 ] || { cat ck.err; fail "case 1: checkpoint failed before the kill (rc $rc)"; }
	[ "$(nsnap)" -eq $((n0 + 1)) ] || fail "case 1: a checkpoint that succeeded listed no snapshot"
	echo "note: kill after ${delay} s came after the dump (crest $([ "$alive" = 1 ] && echo still ingesting || echo done)); again, sooner"
done
[ "$hit" = 1 ] || fail "case 1: no kill landed while crest was dumping: the case proves nothing"

# 2. Exits by itself while crest works: --steps ends it after one more step.
#    Either CRIU dumped it whole first (a snapshot, listed and shown) or
#    crest fails with one line and lists nothing; the job exits 0 by itself
#    either way.
n0=$(nsnap)
start_job job2.out --mib "$MIB" --interval-ms 0 --steps 3
running "$JOB" || fail "case 2: the job was gone before crest started"
rc=0
"$CREST" --store "$S" checkpoint --pid "$JOB" >ck2.out 2>ck2.err || rc=$?
jrc=0
wait "$JOB" || jrc=$?
[ "$jrc" -eq 0 ] || fail "case 2: the job did not exit 0 by itself (rc $jrc)"
if [ "$rc" -eq 0 ]; then
	[ "$(nsnap)" -eq $((n0 + 1)) ] || fail "case 2: a checkpoint that succeeded listed no snapshot"
	id=$("$CREST" --store "$S" ls --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[-1]["snapshot"])')
	"$CREST" --store "$S" show "$id" | grep -q "process" || fail "case 2: snapshot $id is not a process snapshot"
	echo "case 2: dumped whole before the job exited"
else
	cat ck2.err
	gone_error ck2.err "case 2" "$JOB"
	[ "$(nsnap)" -eq "$n0" ] || fail "case 2: a failed checkpoint left a snapshot listed"
	echo "case 2: the job exited first; crest failed cleanly"
fi
ls /dev/shm | grep -q "crest-ckpt-$JOB" && fail "case 2: images of pid $JOB left in /dev/shm"

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

# 4. Kills at random moments of the whole checkpoint (seed printed): each
#    either succeeds with a snapshot listed or fails with the one line that
#    names the exit. CRIU gives up as soon as ptrace loses the job, which can
#    be before /proc shows it dying: CI once got CRIU's raw message when the
#    kill came as CRIU was taking its parasite out, near the dump's end. The
#    delays spread over one uninterrupted checkpoint's time, so the dump's
#    every phase is hit.
SEED=${SEED:-$(( $(date +%s) % 100000 ))}
echo "case 4: seed $SEED (SEED=$SEED to replay)"
RANDOM=$SEED
start_orphan $((MIB / 2))
t0=$(date +%s%N)
"$CREST" --store "$S" checkpoint --pid "$JOB" >ck.out 2>ck.err || { cat ck.err; fail "case 4: a checkpoint with no kill failed"; }
span=$(( ($(date +%s%N) - t0) / 1000000 * 12 / 10 ))
kill_gone "$PARENT"; kill_gone "$JOB"
named=0 whole=0
for i in $(seq 1 ${KILLS:-12}); do
	n0=$(nsnap)
	start_orphan $((MIB / 2))
	ms=$((RANDOM % span))
	"$CREST" --store "$S" checkpoint --pid "$JOB" >ck.out 2>ck.err &
	CK=$!
	sleep "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))"
	kill -9 "$JOB"
	rc=0
	wait "$CK" || rc=$?
	kill_gone "$PARENT"
	if [ "$rc" -eq 0 ]; then
		[ "$(nsnap)" -eq $((n0 + 1)) ] || fail "case 4: kill $i: a checkpoint that succeeded listed no snapshot"
		whole=$((whole + 1))
	else
		gone_error ck.err "case 4: kill $i after $ms ms" "$JOB"
		[ "$(nsnap)" -eq "$n0" ] || fail "case 4: kill $i: a failed checkpoint left a snapshot listed"
		named=$((named + 1))
	fi
done
echo "case 4: kills spread over ${span} ms: $named named the exit, $whole came after the dump"

# Whatever happened, no half snapshot: every listed one is whole.
n=$("$CREST" --store "$S" ls --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
echo "snapshots listed: $n"
"$CASCTL" --store "$S" verify
for id in $("$CREST" --store "$S" ls --json | python3 -c 'import json,sys; [print(s["snapshot"]) for s in json.load(sys.stdin)]'); do
	"$CREST" --store "$S" show "$id" >/dev/null
done
ls /dev/shm | grep -q "crest-ckpt-$JOB" && fail "images of pid $JOB left in /dev/shm"
echo PASS
