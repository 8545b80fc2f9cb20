#!/bin/bash
# Issue 33: a job of two processes that talk over a loopback TCP connection
# (a parent that listens and accepts, a child that connects) is
# checkpointed, killed and restored, and the connection comes back with
# both ends (criu --tcp-established, the network locked with nftables
# where criu has it, not iptables): the job's log then equals an
# uninterrupted run's. Once as a plain job in the host's network namespace
# (crest checkpoint --pid), once under crest run (its pid and mount
# namespaces; the network namespace is still the host's), and once as a
# copy (crest clone) in a network namespace of its own beside the original.
source "$(dirname "$0")/lib.sh"
need_root
cd "$T"
# The store is made on purpose (lib.sh's CREST_INIT=1 would make it too).
"$CREST" init "$S" >/dev/null || fail "crest init $S"
STEPS=300
# The parent asks, the child answers i*i over the connection; the parent
# logs each answer. Inherited descriptors are closed: a file the job holds
# open for writing is one of its files (ctest's log among them).
cat >job.py <<'PY'
import os, socket, sys, time
os.closerange(3, 1 << 16)
log, n = sys.argv[1], int(sys.argv[2])
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(1)
port = srv.getsockname()[1]
child = os.fork()
if child == 0:
    srv.close()
    c = socket.create_connection(("127.0.0.1", port))
    f = c.makefile("rw", buffering=1)
    for line in f:
        f.write("%d\n" % (int(line) ** 2))
        f.flush()
    os._exit(0)
conn, _ = srv.accept()
f = conn.makefile("rw", buffering=1)
out = open(log, "a", buffering=1)
for i in range(n):
    f.write("%d\n" % i)
    f.flush()
    out.write("step %d %s" % (i, f.readline()))
    time.sleep(0.02)
f.close()   # the file holds the socket open too: both go, and the child reads its end
conn.close()
os.waitpid(child, 0)
PY
for i in $(seq 0 $((STEPS - 1))); do echo "step $i $((i * i))"; done >ref.log
# The job's processes: python3 job.py with this log, oldest first.
job_pids() { pgrep -f -- "job.py $T/$1" || true; }
# Waits until the job writing $1 has ended (all of its processes).
wait_end() {
	local deadline=$((SECONDS + 60))
	while [ -n "$(job_pids "$1")" ]; do
		[ $SECONDS -lt $deadline ] || fail "the job writing $1 did not end"
		sleep 0.1
	done
}

# 1. In the host's network namespace.
setsid python3 "$T/job.py" "$T/a.log" "$STEPS" </dev/null >/dev/null 2>a.err &
JOB=$!
PIDS+=("$JOB")
wait_lines a.log 20
pids=$(job_pids a.log)
[ "$(echo "$pids" | wc -w)" = 2 ] || fail "the job is not two processes: $pids"
ss -tnp state established | grep -q "pid=$JOB," || fail "the job holds no established TCP connection"
# A criu that cannot lock the network (no nftables lock, no iptables): the
# checkpoint is refused before anything is frozen, and the job runs on.
REAL_CRIU=${CREST_CRIU:-$(cd "$(dirname "$0")/../.." && pwd)/.deps/criu/criu}
printf '#!/bin/sh\n[ "$1" = check ] && exit 1\nPATH=/usr/bin:/bin exec %s "$@"\n' "$REAL_CRIU" >nolock-criu
chmod +x nolock-criu
expect_error "lock the network" env PATH=/nonexistent CREST_CRIU="$T/nolock-criu" "$CREST" --store "$S" checkpoint --pid "$JOB"
for p in $pids; do
	case "$(awk '{print $3}' /proc/"$p"/stat)" in T|t) fail "pid $p was left stopped by a refused checkpoint" ;; esac
done
at=$(lines a.log)
wait_lines a.log $((at + 10)) 10
"$CREST" --store "$S" --quiet checkpoint --pid "$JOB" --tag a || fail "checkpoint of a job with a loopback connection"
at=$(lines a.log)
wait_lines a.log $((at + 20))
for p in $pids; do PIDS+=("$p"); kill -9 "$p" 2>/dev/null || true; done
for p in $pids; do kill_gone "$p"; done
"$CREST" --store "$S" --quiet restore a >/dev/null || fail "restore of the job with a loopback connection"
wait_end a.log
cmp a.log ref.log || fail "the restored job's log differs from an uninterrupted run's ($(lines a.log) of $STEPS lines)"
echo "ok: host namespace: checkpointed at line $at, killed, restored; the connection went on: $STEPS lines as uninterrupted"

# 2. Under crest run.
: >run.err   # there before the loop below reads it
"$CREST" --store "$S" run --every 1s -- python3 "$T/job.py" "$T/b.log" "$STEPS" </dev/null >/dev/null 2>run.err &
RUN=$!
PIDS+=("$RUN")
deadline=$((SECONDS + 30))
while [ "$(grep -c '^crest: snapshot' run.err || true)" -lt 2 ]; do
	[ $SECONDS -lt $deadline ] || { cat run.err >&2; fail "crest run took no 2 snapshots in 30 s"; }
	sleep 0.1
done
INIT=$(sed -n 's/.* runs as pid \([0-9]*\) .*/\1/p' run.err)
SNAP=$(grep '^crest: snapshot' run.err | sed -n '2s/^crest: snapshot \([0-9a-f]*\) .*/\1/p')
[ -n "$INIT" ] && [ -n "$SNAP" ] || { cat run.err >&2; fail "crest run did not say its pid and snapshots"; }
PIDS+=("$INIT")
grep -q "checkpoint.*failed" run.err && { cat run.err >&2; fail "a checkpoint under crest run failed"; }
# 3. A copy beside the running original (crest clone): in a network
# namespace of its own, where the connection comes back on the same ports.
"$CREST" --store "$S" clone "$SNAP" --branch copy --workdir "$T/c%d" >clone.out || fail "clone: $(cat clone.out)"
CPID=$(sed -n 's/^clone 1 of .*: pid \([0-9]*\),.*/\1/p' clone.out)
[ -n "$CPID" ] || { cat clone.out >&2; fail "clone printed no pid"; }
PIDS+=("$CPID")
deadline=$((SECONDS + 60))
while [ -e /proc/"$CPID" ] && [ "$(awk '{print $3}' /proc/"$CPID"/stat 2>/dev/null)" != Z ]; do
	[ $SECONDS -lt $deadline ] || fail "the copy did not end"
	sleep 0.1
done
cmp c1/b.log ref.log || fail "the copy's log differs from an uninterrupted run's ($(lines c1/b.log) of $STEPS lines)"
echo "ok: crest clone: the copy's connection came back in its own namespace; $STEPS lines as uninterrupted"
kill -9 "$RUN" 2>/dev/null || true   # it may have ended with its job meanwhile
wait "$RUN" 2>/dev/null || true
kill_gone "$INIT"   # the namespace's init: the kernel ends the rest with it
wait_end b.log
"$CREST" --store "$S" --quiet restore "$SNAP" >/dev/null || fail "restore of the crest run job"
wait_end b.log
cmp b.log ref.log || fail "the crest run job's restored log differs from an uninterrupted run's ($(lines b.log) of $STEPS lines)"
echo "PASS: crest run: restored from its 2nd snapshot; $STEPS lines as uninterrupted"
