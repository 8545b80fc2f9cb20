# Issue 13: Prometheus metrics of `crest checkpoint --every` and `crest run
# --every`. A bad --metrics or --metrics-file is one line and exit 2 before
# anything starts; /metrics is scraped during the runs and must parse
# (prom.py: every sample `name{labels} value` with a TYPE before it), its
# counter grow and its bytes be > 0; hostile clients do not stop a scrape;
# the node_exporter textfile is replaced whole after every round and holds
# the final figures; the port is closed once crest has ended.
D=$(cd "$(dirname "$0")" && pwd)
source "$D/lib.sh"
need_root
cd "$T"
prom() { python3 "$D/prom.py" "$@"; }
# The value of metric $2 in prom's output $1.
val() { awk -v n="$2" '$1 == n { print $2 }' <<<"$1"; }
positive() { awk -v v="$2" 'BEGIN { exit !(v > 0) }' || fail "$1 is '$2', not > 0"; }
# Waits until crest's stderr ($1) says where its metrics are; prints the URL.
url_of() {
	local deadline=$((SECONDS + 30)) u=
	while [ -z "$u" ]; do
		[ $SECONDS -lt $deadline ] || { cat "$1" >&2; fail "no 'metrics on' line in $1"; }
		sleep 0.05
		u=$(sed -n -e 's/^crest: metrics on \(http:.*\)$/\1/p' -e 's/^{"metrics": "\(http:.*\)"}$/\1/p' "$1")
	done
	echo "$u"
}
prom selftest   # the reader itself refuses what is not the format

# Refusals: exit 2, one line, no job started, no store made.
usage_error() {   # usage_error WANT COMMAND...
	local want=$1 rc=0; shift
	"$@" >/dev/null 2>err.txt || rc=$?
	[ "$rc" = 2 ] || { cat err.txt >&2; fail "'$*' exited $rc, not 2"; }
	[ "$(wc -l <err.txt)" = 1 ] && grep -qF -- "$want" err.txt || { cat err.txt >&2; fail "'$*': not one line about '$want'"; }
	[ ! -e started ] || fail "'$*' started its job"
	echo "ok: $(cat err.txt)"
}
for a in abc 65536 127.0.0.1:-1 ::1:80 '[::1' '[::1]' 1.2.3:80 127.0.0.1:x localhost:1:2 ''; do
	usage_error "--metrics $a: not an address" "$CREST" --store "$S" run --every 1s --metrics "$a" -- touch started
done
usage_error "go with --every" "$CREST" --store "$S" run --metrics 0 -- touch started
usage_error "go with --every" "$CREST" --store "$S" checkpoint --pid $$ --metrics 0
mkdir real
ln -s "$T/real" via
usage_error "a symlink on its path" "$CREST" --store "$S" run --every 1s --metrics-file "$T/via/c.prom" -- touch started
ln -s /etc/passwd-nonexistent real/link.prom
usage_error "a symlink, not a regular file" "$CREST" --store "$S" run --every 1s --metrics-file real/link.prom -- touch started
usage_error "its directory" "$CREST" --store "$S" run --every 1s --metrics-file "$T/none/c.prom" -- touch started
[ ! -e "$S" ] || fail "a refused command made the store"

# crest checkpoint --every: scraped during the run.
mkdir prom
start_job job.out --mib 32 --interval-ms 100
wait_lines job.out 2
t0=$(date +%s)
"$CREST" --store "$S" --json checkpoint --pid "$JOB" --every 500ms --count 20 --metrics 127.0.0.1:0 \
	--metrics-file "$T/prom/crest.prom" >ck.out 2>ck.err &
CK=$!
PIDS+=("$CK")
U=$(url_of ck.err)
L="branch=main,pid=$JOB"
# The textfile is there from the start, before any checkpoint.
[ -f prom/crest.prom ] || fail "no textfile once the metrics are up"
prom file prom/crest.prom --labels "$L" >/dev/null
m1=$(prom wait "$U" 1 --labels "$L") || fail "no checkpoint counted on $U"
c1=$(val "$m1" crest_checkpoints_total)
# The port taken: another crest refuses it before starting its job.
H=${U#http://}
usage_error "cannot listen there" "$CREST" --store "$S" run --every 1s --metrics "${H%/metrics}" -- touch started
[ "$(prom status "${U%/metrics}/other" "${U%/metrics}/" "$U?x=1" | tr '\n' ' ')" = "404 404 200 " ] ||
	fail "/other, / and /metrics?x=1 are not 404, 404, 200"
prom abuse "$U"
m2=$(prom wait "$U" $((c1 + 1)) --labels "$L") || fail "checkpoints_total did not grow from $c1"
c2=$(val "$m2" crest_checkpoints_total)
echo "ok: checkpoints_total $c1, then $c2, scraped during the run"
for n in last_logical_bytes last_new_bytes last_stored_bytes last_stall_seconds last_ingest_seconds; do
	positive "$n" "$(val "$m2" crest_checkpoint_$n)"
done
positive store_size_bytes "$(val "$m2" crest_store_size_bytes)"
# SIGTERM ends the loop after its round (--count 20 only bounds a test
# that went wrong): crest exits 0, having failed no checkpoint.
kill -TERM "$CK"
rc=0
wait "$CK" || rc=$?
[ "$rc" = 0 ] || { cat ck.err >&2; fail "crest checkpoint exited $rc"; }
n=$(grep -c snapshot ck.out)
# After the run: the port is closed, the textfile holds the last round.
[ "$(prom status "$U")" = refused ] || fail "$U still answers after crest ended"
f=$(prom file prom/crest.prom --labels "$L")
[ "$(val "$f" crest_checkpoints_total)" = "$n" ] && [ "$n" -ge "$c2" ] ||
	fail "textfile: checkpoints_total $(val "$f" crest_checkpoints_total); crest printed $n snapshots, $c2 scraped"
[ "$(val "$f" crest_checkpoint_failures_total)" = 0 ] || fail "textfile: failures"
[ "$(val "$f" crest_checkpoint_interval_seconds)" = 0.5 ] || fail "textfile: interval"
ts=$(val "$f" crest_checkpoint_last_success_timestamp_seconds)
awk -v t="$ts" -v a="$t0" -v b="$(date +%s)" 'BEGIN { exit !(t >= a && t <= b + 1) }' ||
	fail "last success at $ts, not between $t0 and now"
positive store_size_bytes "$(val "$f" crest_store_size_bytes)"
# The last round's figures are those crest checkpoint --json printed for it.
for k in logical new stored; do
	want=$(tail -1 ck.out | sed -n "s/.*\"${k}_bytes\": \([0-9]*\).*/\1/p")
	[ -n "$want" ] && [ "$(val "$f" crest_checkpoint_last_${k}_bytes)" = "$want" ] ||
		fail "textfile: last ${k} bytes $(val "$f" crest_checkpoint_last_${k}_bytes), the last snapshot's $want"
done
[ "$(ls -A prom)" = crest.prom ] || fail "left beside the textfile: $(ls -A prom)"
[ "$(stat -c %a prom/crest.prom)" = 644 ] || fail "textfile mode $(stat -c %a prom/crest.prom)"
echo "ok: textfile after the run: $n checkpoints, 0 failures; nothing left beside it; port closed"
kill_gone "$JOB"

# crest run --every: its job's init is the pid label, --branch the branch;
# on IPv6's loopback where this machine has one.
A=0
python3 -c 'import socket; socket.socket(socket.AF_INET6).bind(("::1", 0))' 2>/dev/null && A='[::1]:0'
: >run.err
"$CREST" --store "$S" run --every 500ms --branch exp --metrics "$A" --metrics-file "$T/prom/run.prom" -- \
	"$WORKLOAD" --mib 32 --interval-ms 100 </dev/null >run.out 2>run.err &
RUN=$!
PIDS+=("$RUN")
U=$(url_of run.err)
INIT=$(sed -n 's/.* runs as pid \([0-9]*\) .*/\1/p' run.err)
PIDS+=("$INIT")
L="branch=exp,pid=$INIT"
m=$(prom wait "$U" 2 --labels "$L") || { cat run.err >&2; fail "crest run: no 2 checkpoints counted on $U"; }
c=$(val "$m" crest_checkpoints_total)
positive last_new_bytes "$(val "$m" crest_checkpoint_last_new_bytes)"
kill -TERM "$RUN"
rc=0
wait "$RUN" || rc=$?
[ "$rc" = 143 ] || { cat run.err >&2; fail "crest run exited $rc after SIGTERM, not 143"; }
[ "$(prom status "$U")" = refused ] || fail "$U still answers after crest run ended"
f=$(prom file prom/run.prom --labels "$L")
n=$(grep -c '^crest: snapshot' run.err)
[ "$(val "$f" crest_checkpoints_total)" = "$n" ] || fail "run.prom: checkpoints_total $(val "$f" crest_checkpoints_total), crest run said $n"
echo "PASS: crest run: $n checkpoints on $U, scraped at $c; textfile agrees"
