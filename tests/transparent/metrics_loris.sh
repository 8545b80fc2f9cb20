#!/bin/bash
# Issue 32, item 3: slow clients cannot blind the metrics endpoint. 48
# connections on 127.0.0.1 that send their request a byte a second (the
# old server's 8 slots and backlog of 16 made a scrape wait 8 s beside 16
# of them, and answered 1 of 3 within 10 s beside 32) while scrapes run
# every 0.5 s for 12 s, then 150 (more than the server holds) for 4 s:
# each scrape is answered within 1 s, and crest run's
# checkpoint schedule holds meanwhile. And --metrics PORT or :PORT
# listens on loopback only: every interface only when named.
D=$(cd "$(dirname "$0")" && pwd)
source "$D/lib.sh"
need_root
cd "$T"
url_of() {
	local deadline=$((SECONDS + 30)) u=
	while [ -z "$u" ]; do
		[ $SECONDS -lt $deadline ] || { cat "$1" >&2; fail "no 'metrics on' line in $1"; }
		sleep 0.05
		u=$(sed -n 's/^crest: metrics on \(http:.*\)$/\1/p' "$1")
	done
	echo "$u"
}
"$CREST" --store "$S" init >/dev/null || fail "crest init"

# The default address: loopback, for PORT and for :PORT alike.
for a in 0 :0; do
	"$CREST" --store "$S" run --every 1h --metrics "$a" -- sleep 2 >/dev/null 2>def.err &
	P=$!
	PIDS+=("$P")
	U=$(url_of def.err)
	case $U in http://127.0.0.1:*) ;; *) fail "--metrics $a listens at $U, not on 127.0.0.1" ;; esac
	port=${U##*:}
	port=${port%/metrics}
	# What the kernel says it listens on, not only what crest prints.
	ss -Hltn "sport = :$port" | awk '{ print $4 }' | grep -qx "127.0.0.1:$port" ||
		fail "--metrics $a: the socket is not bound to 127.0.0.1:$port: $(ss -Hltn "sport = :$port")"
	wait "$P" || fail "crest run --metrics $a failed"
	echo "ok: --metrics $a listens on 127.0.0.1:$port only"
done
# Every interface when asked for.
"$CREST" --store "$S" run --every 1h --metrics 0.0.0.0:0 -- sleep 2 >/dev/null 2>any.err &
P=$!
PIDS+=("$P")
U=$(url_of any.err)
case $U in http://0.0.0.0:*) ;; *) fail "--metrics 0.0.0.0:0 listens at $U" ;; esac
wait "$P" || fail "crest run --metrics 0.0.0.0:0 failed"
echo "ok: --metrics 0.0.0.0:0 listens on every interface"

# Slow clients beside scrapes, while crest run checkpoints a job every 1 s.
"$CREST" --store "$S" run --every 1s --metrics 127.0.0.1:0 -- "$WORKLOAD" --mib 8 --interval-ms 100 \
	</dev/null >run.out 2>run.err &
RUN=$!
PIDS+=("$RUN")
U=$(url_of run.err)
INIT=$(sed -n 's/.* runs as pid \([0-9]*\) .*/\1/p' run.err)
PIDS+=("$INIT")
c0=$(grep -c "^crest: snapshot" run.err || true)
python3 "$D/prom.py" loris "$U" 48 12 || { cat run.err >&2; fail "scrapes beside slow clients"; }
# More than the server holds (64): the oldest idle ones make room.
python3 "$D/prom.py" loris "$U" 150 4 || { cat run.err >&2; fail "scrapes beside 150 slow clients"; }
c1=$(grep -c "^crest: snapshot" run.err || true)
# 16 s at one a second: the schedule held if most came (each takes time of
# its own on a loaded machine).
[ $((c1 - c0)) -ge 6 ] || { cat run.err >&2; fail "only $((c1 - c0)) checkpoints in the 16 s under attack"; }
echo "ok: $((c1 - c0)) checkpoints in the 16 s under attack"
kill -TERM "$RUN"
wait "$RUN" || true
echo "PASS metrics_loris"
