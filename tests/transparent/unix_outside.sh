#!/bin/bash
# A job holding a unix socket connected to a peer outside it (a server this
# script runs) cannot be checkpointed: CRIU saves no half of a unix
# connection ("Can't dump half of stream unix connection") and would say
# so only once the job is frozen. crest refuses it before, naming the
# socket's peer and the pid that holds it, and the job runs on, unfrozen.
# Once the job has closed that connection, the same job (which also holds
# a socketpair between its two processes: both ends inside) is
# checkpointed and restored, and its log equals an uninterrupted run's.
source "$(dirname "$0")/lib.sh"
need_root
cd "$T"
"$CREST" init "$S" >/dev/null || fail "crest init $S"
cat >server.py <<'PY'
import os, signal, socket, sys, threading
signal.alarm(300)   # ends by itself, whatever becomes of the test
srv = socket.socket(socket.AF_UNIX)
srv.bind(sys.argv[1])
srv.listen(4)
def serve(c):
    for line in c.makefile("rb"):
        c.sendall(line)
while True:
    threading.Thread(target=serve, args=(srv.accept()[0],), daemon=True).start()
PY
# The job: a child answers i*i over a socketpair; the parent logs it, and
# talks to the outside server until the file "$T/go" appears.
cat >job.py <<'PY'
import os, socket, sys, time
os.closerange(3, 1 << 16)
log, sock, go, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
a, b = socket.socketpair()
child = os.fork()
if child == 0:
    a.close()
    f = b.makefile("rw", buffering=1)
    for line in f:
        f.write("%d\n" % (int(line) ** 2))
        f.flush()
    os._exit(0)
b.close()
ext = socket.socket(socket.AF_UNIX)
ext.connect(sock)
f = a.makefile("rw", buffering=1)
out = open(log, "a", buffering=1)
for i in range(n):
    if ext and os.path.exists(go):
        ext.close()
        ext = None
    if ext:
        ext.sendall(b"%d\n" % i)
        ext.recv(64)
    f.write("%d\n" % i)
    f.flush()
    out.write("step %d %s" % (i, f.readline()))
    time.sleep(0.02)
f.close()
a.close()
os.waitpid(child, 0)
PY
python3 "$T/server.py" "$T/ext.sock" </dev/null >/dev/null 2>server.err &
PIDS+=("$!")
deadline=$((SECONDS + 20))
until [ -S ext.sock ]; do
	[ $SECONDS -lt $deadline ] || fail "the server did not start: $(cat server.err)"
	sleep 0.05
done
STEPS=400
for i in $(seq 0 $((STEPS - 1))); do echo "step $i $((i * i))"; done >ref.log
setsid python3 "$T/job.py" "$T/job.log" "$T/ext.sock" "$T/go" "$STEPS" </dev/null >/dev/null 2>job.err &
JOB=$!
PIDS+=("$JOB")
wait_lines job.log 10
pids=$(pgrep -f -- "job.py $T/job.log")
for p in $pids; do PIDS+=("$p"); done
expect_error "unix socket" "$CREST" --store "$S" checkpoint --pid "$JOB"
grep -q "pid $JOB holds a unix socket (inode [0-9]*) connected to $T/ext.sock, a peer outside the job" err.txt ||
	fail "the refusal does not name pid $JOB and $T/ext.sock: $(cat err.txt)"
for p in $pids; do
	case "$(awk '{print $3}' /proc/"$p"/stat)" in T|t) fail "pid $p was left stopped by a refused checkpoint" ;; esac
done
at=$(lines job.log)
wait_lines job.log $((at + 10)) 10
echo "ok: refused before the freeze, the job runs on"
touch go
sleep 0.5
"$CREST" --store "$S" --quiet checkpoint --pid "$JOB" --tag u || fail "checkpoint once the outside connection is closed"
for p in $pids; do kill -9 "$p" 2>/dev/null || true; done
for p in $pids; do kill_gone "$p"; done
"$CREST" --store "$S" --quiet restore u >/dev/null || fail "restore"
deadline=$((SECONDS + 60))
while pgrep -f -- "job.py $T/job.log" >/dev/null; do
	[ $SECONDS -lt $deadline ] || fail "the restored job did not end"
	sleep 0.1
done
cmp job.log ref.log || fail "the restored job's log differs from an uninterrupted run's ($(lines job.log) of $STEPS lines)"
echo "PASS: refused with a unix connection outside; without it, restored with its socketpair: $STEPS lines as uninterrupted"
