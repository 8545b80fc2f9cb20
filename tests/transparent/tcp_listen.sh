#!/bin/bash
# Issue 33: a small HTTP server (a listening socket, and a count of the
# requests it answered in its memory) is checkpointed, answers more
# requests, is killed, and is restored: the restored server listens on the
# same port again and answers the same requests with the same bytes as the
# server answered them after the checkpoint. Its clients (this script)
# connect from outside the job, one connection per request, none open at
# the checkpoint.
source "$(dirname "$0")/lib.sh"
need_root
cd "$T"
# The store is made on purpose (lib.sh's CREST_INIT=1 would make it too).
"$CREST" init "$S" >/dev/null || fail "crest init $S"
cat >server.py <<'PY'
import os, signal, socket, sys
os.closerange(3, 1 << 16)
signal.alarm(300)   # ends by itself, whatever becomes of the test (restored too: CRIU keeps the timer)
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(8)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write("%d\n" % srv.getsockname()[1])
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
served = 0
while True:
    c, _ = srv.accept()
    try:    # a connection restored closed (--tcp-close) fails here, as a client gone would
        req = c.makefile("rb").readline().split()
        if not req:
            continue
        served += 1
        n = int(req[1].strip(b"/")) if len(req) > 1 and req[1].strip(b"/").isdigit() else 0
        body = b"request %d: %d squared is %d\n" % (served, n, n * n)
        c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    except OSError:
        pass
    finally:
        c.close()
PY
setsid python3 "$T/server.py" "$T/port" </dev/null >/dev/null 2>server.err &
JOB=$!
PIDS+=("$JOB")
deadline=$((SECONDS + 20))
until [ -s port ]; do
	[ $SECONDS -lt $deadline ] || fail "the server did not start: $(cat server.err)"
	sleep 0.05
done
PORT=$(cat port)
# get N: the server's answer to GET /N, whole (headers and body).
get() {
	exec 3<>"/dev/tcp/127.0.0.1/$PORT" || fail "cannot connect to the server on port $PORT"
	printf 'GET /%s HTTP/1.0\r\n\r\n' "$1" >&3
	timeout 10 cat <&3
	exec 3<&-
}
for n in 1 2 3; do get "$n"; done >before.txt
grep -q "request 3: 3 squared is 9" before.txt || fail "the server did not answer: $(cat before.txt)"
# criu 4.1 cannot dump an internet socket on Linux >= 6.16: refused before
# the freeze, naming the way to 4.2 (a stand-in that says it is 4.1.1).
kernel=$(uname -r)
if [ "${kernel%%.*}" -gt 6 ] || { [ "${kernel%%.*}" = 6 ] && [ "$(echo "$kernel" | cut -d. -f2)" -ge 16 ]; }; then
	REAL_CRIU=${CREST_CRIU:-$(cd "$(dirname "$0")/../.." && pwd)/.deps/criu/criu}
	printf '#!/bin/sh\n[ "$1" = --version ] && { echo "Version: 4.1.1"; exit 0; }\nexec %s "$@"\n' "$REAL_CRIU" >old-criu
	chmod +x old-criu
	expect_error "install-criu.sh installs criu 4.2" env CREST_CRIU="$T/old-criu" "$CREST" --store "$S" checkpoint --pid "$JOB"
	case "$(awk '{print $3}' /proc/"$JOB"/stat)" in T|t) fail "a refused checkpoint left the server stopped" ;; esac
fi
"$CREST" --store "$S" --quiet checkpoint --pid "$JOB" --tag srv || fail "checkpoint of the listening server"
for n in 4 5 6; do get "$n"; done >after.txt
grep -q "request 6: 6 squared is 36" after.txt || fail "the server did not go on after the checkpoint: $(cat after.txt)"
kill_gone "$JOB"
(exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && fail "something still listens on port $PORT after the kill"
"$CREST" --store "$S" --quiet restore srv >/dev/null || fail "restore of the listening server"
PIDS+=("$JOB")
ss -tlnp | grep -q "127.0.0.1:$PORT .*pid=$JOB," || fail "the restored server (pid $JOB) does not listen on port $PORT: $(ss -tlnp | grep ":$PORT ")"
for n in 4 5 6; do get "$n"; done >restored.txt
cmp after.txt restored.txt || fail "the restored server answered otherwise: $(cat restored.txt)"
echo "ok: the restored server listens on port $PORT again and answered requests 4-6 byte for byte as before the kill ($(wc -c <after.txt) bytes)"

# A client that connects between crest's look at the sockets and the
# freeze (a server under traffic): with --tcp-close the checkpoint takes
# the connection closed. crest is held right after its look
# (CREST_FAULT_PAUSE), a client connects and holds its connection open
# (the server waits for its request line), then crest goes on. Without
# telling criu so, criu refused the connection ("Connected TCP socket").
rm -f hold
CREST_FAULT_PAUSE=capture.sockets:$T/hold "$CREST" --store "$S" --quiet checkpoint --pid "$JOB" --tcp-close --kill \
	--tag mid 2>mid.err &
ck=$!
for i in $(seq 1 600); do [ -e hold ] && break; sleep 0.05; done
[ -e hold ] || fail "crest did not stop after looking at the sockets: $(cat mid.err)"
python3 -c 'import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
print("connected", flush=True)
time.sleep(60)' "$PORT" >held.out 2>&1 &
held=$!
for i in $(seq 1 100); do grep -q connected held.out && break; sleep 0.05; done
grep -q connected held.out || fail "the client could not connect while crest was held: $(cat held.out); listening: $(ss -tlnp | grep ":$PORT "); crest: $(cat mid.err)"
for i in $(seq 1 100); do ss -tn state established "( sport = :$PORT )" | grep -q ":$PORT" && break; sleep 0.05; done
ss -tn state established "( sport = :$PORT )" | grep -q ":$PORT" || fail "the server did not accept the held connection"
rm -f hold
wait "$ck" || fail "checkpoint --tcp-close with a client connected after crest's look: $(cat mid.err)"
kill "$held" 2>/dev/null
kill_gone "$JOB"
"$CREST" --store "$S" --quiet restore mid >/dev/null || fail "restore of the server checkpointed mid-connection"
PIDS+=("$JOB")
# The held connection comes back closed: the server's readline ends, it
# answers nobody, and takes the next client.
for n in 7 8; do get "$n"; done >mid.txt
grep -q " 8 squared is 64" mid.txt || fail "the server restored with a closed connection does not answer: $(cat mid.txt)"
echo "PASS: a client connected after crest looked at the sockets: checkpointed with --tcp-close, restored, answering ($(tail -1 mid.txt))"
