# Issue 12: `crest run --every` checkpoints a job that runs in a pid
# namespace of its own; a copy of its 2nd snapshot (crest clone) runs beside
# the still-running original, both go on, and each one's output equals an
# uninterrupted run's. Also: exit statuses and signals pass through crest
# run, an in-place restore is refused while the original runs, and the
# copy's first checkpoint goes on the copy's branch.
source "$(dirname "$0")/lib.sh"
need_root
cd "$T"
status() { local rc=0; "$@" 2>/dev/null || rc=$?; echo "$rc"; }
kill_tree() { local c; for c in $(pgrep -P "$1"); do kill_tree "$c"; done; kill -9 "$1" 2>/dev/null || true; }
[ "$(status "$CREST" --quiet run -- sh -c 'exit 7')" = 7 ] || fail "crest run did not pass exit 7 on"
[ "$(status "$CREST" --quiet run -- sh -c 'kill -TERM $$')" = 143 ] || fail "a job killed by SIGTERM is not 143"
[ "$(status "$CREST" --quiet run -- /nonexistent/x)" = 127 ] || fail "a missing command is not 127"
# Signals crest run is sent reach the job, and crest lives on to pass its
# exit status back: each of these once killed crest run itself (138, 131,
# 140), leaving the job orphaned.
for sig in USR1 QUIT USR2; do
	# Gone first: the shell truncates sig.out in the background child, and
	# the loop below could otherwise see the last round's "ready" before
	# that and signal the child before it is crest run, in which SIGQUIT
	# is ignored (an asynchronous list's) and SIGUSR2 kills it.
	rm -f sig.out
	"$CREST" --quiet run -- sh -c "trap 'exit 9' $sig; echo ready; while :; do sleep 0.05; done" >sig.out 2>/dev/null &
	rp=$!
	# Generous limits: under load (an ASan build beside other tests) the
	# start alone was seen to take over 10 s. A lost signal fails here,
	# named, rather than hanging the test until ctest's timeout.
	deadline=$((SECONDS + 60))
	until grep -q ready sig.out 2>/dev/null; do
		[ $SECONDS -lt $deadline ] || { kill_tree "$rp"; fail "the job under crest run did not start within 60 s"; }
		sleep 0.05
	done
	kill -"$sig" "$rp"
	deadline=$((SECONDS + 60))
	while kill -0 "$rp" 2>/dev/null && [ "$(awk '{print $3}' /proc/"$rp"/stat 2>/dev/null)" != Z ]; do
		if [ $SECONDS -ge $deadline ]; then
			why="SIG$sig to crest run (pid $rp): neither it nor its job ended within 60 s: the signal was lost ($(ps -o pid=,stat=,args= --ppid "$rp" | head -3 | paste -sd';'))"
			kill_tree "$rp"   # crest run, its helper, the init and the job: none left running
			fail "$why"
		fi
		sleep 0.05
	done
	rc=0
	wait "$rp" || rc=$?
	[ "$rc" = 9 ] || fail "SIG$sig to crest run: exit $rc, not the job's 9"
done
[ "$("$CREST" --quiet run -- sh -c 'echo $$')" = 2 ] || fail "the job is not pid 2 of its namespace"
# Its own /proc (CUDA needs one): the job's child sees itself as pid 3.
own=$("$CREST" --quiet run -- sh -c 'readlink /proc/self; :')
[ "$own" = 3 ] || fail "the job's /proc is not its namespace's: /proc/self of its child is '$own'"
# The job gets the user's umask, not crest's own 077 for its snapshots.
for m in 0022 0002; do
	got=$(umask "$m" && "$CREST" --quiet run -- sh -c umask)
	[ "$got" = "$m" ] || fail "under umask $m the job's umask is $got"
done
echo "ok: exit statuses 7, 143, 127 passed on; the job is pid 2, has a /proc of its own and the user's umask"

: >run.err
"$CREST" --store "$S" run --every 1s -- "$WORKLOAD" --mib 64 --interval-ms 100 --log "$T/job.log" \
	</dev/null >job.out 2>run.err &
RUN=$!
PIDS+=("$RUN")
deadline=$((SECONDS + 30))
while [ "$(grep -c '^crest: snapshot' run.err || true)" -lt 3 ]; do
	[ $SECONDS -lt $deadline ] || { cat run.err >&2; fail "crest run took no 3 snapshots in 30 s"; }
	sleep 0.1
done
INIT=$(sed -n 's/.* runs as pid \([0-9]*\) .*/\1/p' run.err)
PIDS+=("$INIT")
SNAP2=$(grep '^crest: snapshot' run.err | sed -n '2s/^crest: snapshot \([0-9a-f]*\) .*/\1/p')
[ -n "$INIT" ] && [ -n "$SNAP2" ] || { cat run.err >&2; fail "crest run did not say its pid and snapshots"; }
expect_error "still runs" "$CREST" --store "$S" restore "$SNAP2"
"$CREST" --store "$S" clone "$SNAP2" --branch copy --workdir "$T/c%d" >clone.out || fail "clone: $(cat clone.out)"
CPID=$(sed -n 's/^clone 1 of .*: pid \([0-9]*\),.*/\1/p' clone.out)
[ -n "$CPID" ] || { cat clone.out >&2; fail "clone printed no pid"; }
PIDS+=("$CPID")
at=$(lines c1/job.log)
now=$(lines job.log)
[ "$at" -lt "$now" ] || fail "the copy starts at $at lines, the original is at $now: not the 2nd snapshot"
[ "$CPID" != "$INIT" ] || fail "the copy has the original's host pid"
grep -q "^NSpid:.*[[:space:]]1$" /proc/"$CPID"/status || fail "the copy is not pid 1 of a namespace: $(grep NSpid /proc/"$CPID"/status)"
wait_lines c1/job.log $((at + 10)) 30
wait_lines job.log $((now + 10)) 30
echo "ok: copy pid $CPID started at $at lines beside the original (pid $INIT, at $now); both went on"
"$CREST" --store "$S" --quiet checkpoint --pid "$CPID" --branch copy || fail "checkpoint of the copy"
# The branch is a ref to SNAP2 (no copy of it): the copy's checkpoint is
# the one snapshot on it, SNAP2's child.
[ "$("$CREST" --store "$S" log copy | grep -c " copy .*parent ${SNAP2:0:12}")" = 1 ] || { "$CREST" --store "$S" log copy >&2; fail "branch copy does not hold the copy's checkpoint alone, a child of ${SNAP2:0:12}"; }
# SIGTERM to the copy's init reaches the job; SIGTERM to crest run too.
kill -TERM "$CPID"
deadline=$((SECONDS + 10))
while [ -e /proc/"$CPID" ] && [ "$(cat /proc/"$CPID"/stat 2>/dev/null | awk '{print $3}')" != Z ]; do
	[ $SECONDS -lt $deadline ] || fail "the copy did not end on SIGTERM"
	sleep 0.05
done
kill -TERM "$RUN"
rc=0
wait "$RUN" || rc=$?
[ "$rc" = 143 ] || { cat run.err >&2; fail "crest run exited $rc after SIGTERM, not 143"; }
n=$(lines c1/job.log)
m=$(lines job.log)
"$WORKLOAD" --mib 64 --interval-ms 0 --steps $((n > m ? n : m)) >ref.txt
head -n "$n" ref.txt | cmp - c1/job.log || fail "the copy's log is not the uninterrupted run's"
head -n "$n" ref.txt | cmp - <(head -n "$n" c1/job.out) || fail "the copy's stdout is not the uninterrupted run's"
head -n "$m" ref.txt | cmp - job.log || fail "the original's log is not the uninterrupted run's"
head -n "$m" ref.txt | cmp - <(head -n "$m" job.out) || fail "the original's stdout is not the uninterrupted run's"
# In place, once the original has ended: its stdout (a file of the host's
# mounts, dumped as external) is handed back at its offset, so job.out
# goes on from the snapshot and holds exactly what an uninterrupted run
# prints.
"$CREST" --store "$S" restore "$SNAP2" >restore.out || fail "restore in place: $(cat restore.out)"
RPID=$(sed -n 's/^restored .*: pid \([0-9]*\) running again.*/\1/p' restore.out)
[ -n "$RPID" ] || { cat restore.out >&2; fail "restore printed no pid"; }
PIDS+=("$RPID")
[ "$(readlink /proc/"$RPID"/fd/1)" = "$T/job.out" ] || fail "the restored job writes $(readlink /proc/"$RPID"/fd/1)"
r0=$(lines job.log)
wait_lines job.log $((r0 + 10)) 30
kill -9 "$RPID"
r=$(lines job.log)
"$WORKLOAD" --mib 64 --interval-ms 0 --steps "$r" >ref.txt
cmp ref.txt job.log || fail "the log restored in place is not the uninterrupted run's"
head -n "$r" ref.txt | cmp - <(head -n "$r" job.out) || fail "stdout restored in place is not the uninterrupted run's"
echo "PASS: copy $n lines, original $m lines, both identical to an uninterrupted run; crest run exited 143;"
echo "      restored in place: $r lines of log and stdout, identical too"
