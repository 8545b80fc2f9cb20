# Issue 32, item 2: only one restore of a job may win. Two `crest restore`
# of one snapshot at once used to both go ahead: for a plain job the loser,
# swapping "its originals" back, left the winner's job writing to an
# unlinked log; for a crest run job both won and two copies ran. And a
# second restore of a crest run job whose first copy still ran won too,
# unlinking the first copy's log. Now an in-place restore holds the host's
# restore lock and, under it, before touching any file, refuses when a
# process holds the job's files open for writing, or when the copy an
# earlier restore of the crest run job made still runs (restore/process.c).
#
# The race is made certain, not hoped for: CREST_FAULT_PAUSE holds each
# restore at "restore.lock" (once it holds the lock, before its checks)
# until the test lets go. Without the lock both reach it and are let go
# together; with it the second waits for the first to finish.
source "$(dirname "$0")/lib.sh"
need_root
cd "$T"
export CREST_RUN_DIR=$T/run    # this test's own restore lock
MIB=16

# copies LOG: the job's processes running (not zombies) that write LOG.
copies() {
	local p n=0
	for p in $(pgrep -f -- "--log $1" || true); do
		[ "$(cat /proc/"$p"/comm 2>/dev/null)" = crest-workload ] || continue
		[ "$(awk '{print $3}' /proc/"$p"/stat 2>/dev/null)" != Z ] || continue
		n=$((n + 1))
		COPY=$p
	done
	echo "$n"
}
# one_copy_linked LOG WHAT: exactly one copy runs, its LOG is the file at
# LOG's path (not an unlinked one) and it keeps growing there.
one_copy_linked() {
	local log=$1 what=$2 n fd ok=0
	n=$(copies "$log")
	[ "$n" = 1 ] || fail "$what: $n copies of the job run, not 1"
	copies "$log" >/dev/null
	n=$(copies "$log"); PIDS+=("$COPY")
	for fd in /proc/"$COPY"/fd/*; do
		[ "$(readlink "$fd")" = "$log" ] || continue
		[ "$(stat -L -c %i "$fd")" = "$(stat -c %i "$log")" ] && ok=1
	done
	[ "$ok" = 1 ] || fail "$what: the running job (pid $COPY) writes no linked $log: $(ls -l /proc/"$COPY"/fd | grep -F "${log##*/}")"
	local at
	at=$(lines "$log")
	wait_lines "$log" $((at + 3)) 20
	echo "ok: $what: one copy (pid $COPY) runs, and its $log is linked and grows ($at lines and on)"
}
# race SNAP WHAT: two crest restore of SNAP at once, each held at the
# lock's pause; exactly one must win, the other fail with one line.
race() {
	local snap=$1 what=$2 a b ra=0 rb=0
	rm -f pause.a pause.b
	CREST_FAULT_PAUSE="restore.lock:$T/pause.a" "$CREST" --store "$S" restore "$snap" >a.out 2>a.err &
	a=$!
	local deadline=$((SECONDS + 30))
	until [ -e pause.a ]; do
		[ $SECONDS -lt $deadline ] && [ -e /proc/$a ] || { cat a.err >&2; fail "$what: restore A never reached the lock"; }
		sleep 0.02
	done
	CREST_FAULT_PAUSE="restore.lock:$T/pause.b" "$CREST" --store "$S" restore "$snap" >b.out 2>b.err &
	b=$!
	# Without a lock B reaches the pause too: a moment for it to get there.
	deadline=$((SECONDS + 2))
	while [ ! -e pause.b ] && [ $SECONDS -lt $deadline ]; do sleep 0.02; done
	rm -f pause.a pause.b
	# Let B go whenever it gets to its pause (after A, with the lock).
	while [ -e /proc/$b ] && [ "$(awk '{print $3}' /proc/$b/stat 2>/dev/null)" != Z ]; do
		rm -f pause.b
		sleep 0.02
	done
	wait "$a" || ra=$?
	wait "$b" || rb=$?
	local f p
	for f in a.out b.out; do    # whatever came back ends with the test
		p=$(sed -n 's/.*: pid \([0-9]*\) running again.*/\1/p' $f)
		[ -z "$p" ] || PIDS+=("$p")
	done
	echo "$what: restore A exit $ra, restore B exit $rb"
	if [ "$ra" = 0 ]; then LOSER=b; else LOSER=a; fi
	[ $(( (ra == 0) + (rb == 0) )) = 1 ] || { cat a.err b.err >&2; fail "$what: $(( (ra == 0) + (rb == 0) )) restores won, not 1"; }
}
# loser_says WHAT: the losing restore failed with one line saying why.
loser_says() {
	[ "$(wc -l <$LOSER.err)" = 1 ] || { cat $LOSER.err >&2; fail "$1: the losing restore printed not one line"; }
	grep -qE "open for writing|restored before still runs" $LOSER.err || { cat $LOSER.err >&2; fail "$1: the loser does not say why"; }
	echo "ok: $1: the loser: $(cat $LOSER.err)"
}

# 1. A plain job.
start_job job.out --mib $MIB --interval-ms 100 --log "$T/job.log"
wait_lines job.log 3
"$CREST" --store "$S" --quiet checkpoint --pid "$JOB" --tag plain
kill_gone "$JOB"
race plain "plain job"
one_copy_linked "$T/job.log" "plain job"
loser_says "plain job"
kill_gone "$COPY"

# 2. A crest run job: its init killed, two restores at once.
"$CREST" --store "$S" run --every 1s -- "$WORKLOAD" --mib $MIB --interval-ms 100 --log "$T/run.log" \
	</dev/null >run.out 2>run.err &
RUN=$!
PIDS+=("$RUN")
deadline=$((SECONDS + 30))
until grep -q '^crest: snapshot' run.err 2>/dev/null; do
	[ $SECONDS -lt $deadline ] || { cat run.err >&2; fail "crest run took no snapshot in 30 s"; }
	sleep 0.1
done
INIT=$(sed -n 's/.* runs as pid \([0-9]*\) .*/\1/p' run.err)
SNAP=$(grep '^crest: snapshot' run.err | sed -n '1s/^crest: snapshot \([0-9a-f]*\) .*/\1/p')
[ -n "$INIT" ] && [ -n "$SNAP" ] || { cat run.err >&2; fail "crest run did not say its pid and snapshot"; }
kill -9 "$INIT"
wait "$RUN" 2>/dev/null || true
race "$SNAP" "crest run job"
one_copy_linked "$T/run.log" "crest run job"
loser_says "crest run job"
CINIT=$(sed -n 's/.*: pid \([0-9]*\) running again.*/\1/p' a.out b.out | head -n1)
[ -n "$CINIT" ] && PIDS+=("$CINIT")

# 3. Another restore of it while that copy runs: refused, the copy goes on.
if "$CREST" --store "$S" restore "$SNAP" >c.out 2>c.err; then
	CI=$(sed -n 's/.*: pid \([0-9]*\) running again.*/\1/p' c.out); [ -n "$CI" ] && PIDS+=("$CI")
	fail "a second restore of the crest run job won while its first copy ran"
fi
[ "$(wc -l <c.err)" = 1 ] && grep -qE "open for writing|restored before still runs" c.err || { cat c.err >&2; fail "the refused restore did not say why in one line"; }
echo "ok: a restore while the copy runs: $(cat c.err)"
one_copy_linked "$T/run.log" "crest run job, after a refused restore"
kill -9 "$CINIT" 2>/dev/null || true

# 4. The same for a crest run job that holds no file open for writing (its
# stdio /dev/null, no log): only the record of its restored copy's init
# can tell that it runs.
# procs COMM: pids of COMM (not zombies) whose command line has --interval-ms 97.
procs() {
	local p
	for p in $(pgrep -f -- "--interval-ms 97" || true); do
		[ "$(cat /proc/"$p"/comm 2>/dev/null)" = "$1" ] || continue
		[ "$(awk '{print $3}' /proc/"$p"/stat 2>/dev/null)" != Z ] && echo "$p"
	done
}
snap() { "$CREST" --store "$S" --json ls | python3 -c 'import json,sys; v=[s["snapshot"] for s in json.load(sys.stdin) if s["kind"]=="process"]; print(v[-1] if len(v) > int(sys.argv[1]) else "")' "$1"; }
had=$("$CREST" --store "$S" --json ls | python3 -c 'import json,sys; print(sum(s["kind"]=="process" for s in json.load(sys.stdin)))')
"$CREST" --store "$S" run --every 1s -- "$WORKLOAD" --mib $MIB --interval-ms 97 </dev/null >/dev/null 2>&1 &
RUN=$!
PIDS+=("$RUN")
deadline=$((SECONDS + 30))
until [ -n "$(snap "$had")" ]; do
	[ $SECONDS -lt $deadline ] || fail "the quiet crest run job took no snapshot in 30 s"
	sleep 0.2
done
SNAP=$(snap "$had")
INIT=$(procs crest-init)
[ -n "$INIT" ] || fail "no init of the quiet crest run job"
kill -9 $INIT
wait "$RUN" 2>/dev/null || true
"$CREST" --store "$S" restore "$SNAP" >d.out 2>d.err || { cat d.err >&2; fail "the quiet job's restore failed"; }
QINIT=$(sed -n 's/.*: pid \([0-9]*\) running again.*/\1/p' d.out)
PIDS+=("$QINIT")
if "$CREST" --store "$S" restore "$SNAP" >e.out 2>e.err; then
	QI=$(sed -n 's/.*: pid \([0-9]*\) running again.*/\1/p' e.out); [ -n "$QI" ] && PIDS+=("$QI")
	fail "a second restore of the quiet crest run job won while its first copy (pid $QINIT) ran"
fi
[ "$(wc -l <e.err)" = 1 ] && grep -q "restored before still runs (pid $QINIT)" e.err ||
	{ cat e.err >&2; fail "the refused restore of the quiet job did not say why in one line"; }
n=$(procs crest-workload | wc -l)
[ "$n" = 1 ] || fail "$n copies of the quiet job run, not 1"
echo "ok: a restore while the quiet job's copy runs: $(cat e.err)"
kill -9 "$QINIT"
# Once the copy is gone, its record does not stand in the way.
deadline=$((SECONDS + 10))
while [ -n "$(procs crest-workload)" ]; do
	[ $SECONDS -lt $deadline ] || fail "the quiet job's copy did not end"
	sleep 0.05
done
"$CREST" --store "$S" restore "$SNAP" >f.out 2>f.err || { cat f.err >&2; fail "a restore after the copy ended failed"; }
QINIT=$(sed -n 's/.*: pid \([0-9]*\) running again.*/\1/p' f.out)
PIDS+=("$QINIT")
echo "ok: a restore after the copy ended: $(head -n1 f.out)"
kill -9 "$QINIT"
echo PASS
