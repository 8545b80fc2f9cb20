#!/bin/bash
# Issue 33: a job whose child holds a TCP connection to a peer outside the
# job (an echo server this script runs on 127.0.0.1) cannot be restored
# with that connection: crest checkpoint refuses it before anything is
# frozen, naming the connection's two addresses and the pid that holds
# it, and the job runs on unfrozen, still writing. With --tcp-close the
# checkpoint is taken (the connection left out) and the job runs on, still
# talking to its peer; restored after a kill, it finds the connection
# closed, connects again, and goes on from the snapshot's step.
source "$(dirname "$0")/lib.sh"
need_root
cd "$T"
# The store is made on purpose (lib.sh's CREST_INIT=1 would make it too).
"$CREST" init "$S" >/dev/null || fail "crest init $S"
cat >echo.py <<'PY'
import os, signal, socket, sys, threading
signal.alarm(300)   # ends by itself, whatever becomes of the test
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 0))
srv.listen(8)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write("%d\n" % srv.getsockname()[1])
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
def serve(c):
    for line in c.makefile("rb"):
        c.sendall(line)
while True:
    threading.Thread(target=serve, args=(srv.accept()[0],), daemon=True).start()
PY
# The job: a parent that waits, and a child that sends each step to the
# peer, logs the echo, and on a broken connection connects again and logs
# that too.
cat >job.py <<'PY'
import os, socket, sys, time
os.closerange(3, 1 << 16)
log, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
child = os.fork()
if child:
    os.waitpid(child, 0)
    sys.exit(0)
out = open(log, "a", buffering=1)
def connect():
    c = socket.create_connection(("127.0.0.1", port))
    return c, c.makefile("rb")
c, f = connect()
i = 0
while i < n:
    try:
        c.sendall(b"%d\n" % i)
        got = f.readline()
        if not got:
            raise OSError("closed")
        out.write("step %d echo %s" % (i, got.decode()))
        i += 1
    except OSError:
        out.write("reconnect at step %d\n" % i)
        c, f = connect()
    time.sleep(0.02)
PY
python3 "$T/echo.py" "$T/port" </dev/null >/dev/null 2>echo.err &
PIDS+=("$!")
deadline=$((SECONDS + 20))
until [ -s port ]; do
	[ $SECONDS -lt $deadline ] || fail "the echo server did not start: $(cat echo.err)"
	sleep 0.05
done
PORT=$(cat port)
STEPS=400
setsid python3 "$T/job.py" "$T/job.log" "$PORT" "$STEPS" </dev/null >/dev/null 2>job.err &
JOB=$!
PIDS+=("$JOB")
wait_lines job.log 10
CHILD=$(pgrep -P "$JOB")
[ -n "$CHILD" ] || fail "the job has no child"
PIDS+=("$CHILD")
LOCAL=$(ss -tnp state established "( dport = :$PORT )" | sed -n "s/.* \(127.0.0.1:[0-9]*\) *127.0.0.1:$PORT .*pid=$CHILD,.*/\1/p")
[ -n "$LOCAL" ] || fail "the job's child holds no connection to the echo server"

# 1. Refused before the freeze, with what and who.
expect_error "outside the job" "$CREST" --store "$S" checkpoint --pid "$JOB"
grep -q "pid $CHILD holds a TCP connection from $LOCAL to 127.0.0.1:$PORT" "$T/err.txt" ||
	fail "the refusal does not name pid $CHILD and $LOCAL -> 127.0.0.1:$PORT: $(cat "$T/err.txt")"
grep -q -- "--tcp-close" "$T/err.txt" || fail "the refusal does not say the way around it"
for p in "$JOB" "$CHILD"; do
	st=$(awk '{print $3}' /proc/"$p"/stat)
	case "$st" in T|t) fail "pid $p was left stopped ($st) by a refused checkpoint" ;; esac
done
at=$(lines job.log)
wait_lines job.log $((at + 10)) 10
[ -z "$(ls /dev/shm | grep "^crest-ckpt-$JOB-" || true)" ] || fail "the refused checkpoint left images behind"
"$CREST" --store "$S" --quiet log | grep -q . && fail "the refused checkpoint stored a snapshot"
echo "ok: refused before the freeze: $(cat "$T/err.txt")"

# 2. With --tcp-close: taken, and the job keeps its connection meanwhile.
"$CREST" --store "$S" --quiet checkpoint --pid "$JOB" --tcp-close --tag c || fail "checkpoint with --tcp-close"
at=$(lines job.log)
wait_lines job.log $((at + 20)) 20
grep -q reconnect job.log && fail "the running job lost its connection at a --tcp-close checkpoint"
kill -9 "$CHILD" "$JOB"
kill_gone "$CHILD"
kill_gone "$JOB"
"$CREST" --store "$S" --quiet restore c >/dev/null || fail "restore of the --tcp-close snapshot"
deadline=$((SECONDS + 60))
while pgrep -f -- "job.py $T/job.log" >/dev/null; do
	[ $SECONDS -lt $deadline ] || fail "the restored job did not end"
	sleep 0.1
done
grep -q "^reconnect at step" job.log || fail "the restored job did not find its connection closed"
# Its log: the steps in order, each echoed, with one reconnect after the snapshot's step.
grep -v '^reconnect' job.log >steps.log
for i in $(seq 0 $((STEPS - 1))); do echo "step $i echo $i"; done >ref.log
cmp steps.log ref.log || fail "the restored job's steps differ from an uninterrupted run's"
echo "PASS: refused without --tcp-close (job left running); with it, restored, reconnected ($(grep '^reconnect' job.log)), all $STEPS steps"
