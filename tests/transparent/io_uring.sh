#!/bin/bash
# Issue 33: CRIU 4.2.1 cannot dump a process that holds an io_uring, and
# says so only once the tree is frozen ("Unknown shit 600
# (anon_inode:[io_uring])"; a PyTorch rank got one from libuv). crest
# refuses such a tree before anything is frozen, in one line naming the
# pid, its command and what it holds, and the way around it
# (UV_USE_IO_URING=0). The job is never stopped, not even for a moment (a
# watcher samples its state through the refused checkpoint), its counter
# goes on, no cgroup freezes it, and no snapshot is stored. Caught wherever
# the ring is: the root's descriptor and mapping; a child's mapping alone
# (descriptor closed); a descriptor alone in a thread with a table of its
# own; a libcrest handle's (the message says how it lets go); a child of a
# crest run job, whose own init does not trip the check. The same program
# without a ring is checkpointed, plain and under crest run.
source "$(dirname "$0")/lib.sh"
need_root
cd "$T"
"$CREST" init "$S" >/dev/null || fail "crest init $S"

# start NAME ARGS...: uring_job writing NAME.log, its stdout in NAME.out; once
# it has said where its ring is and counted a few steps: JOB, and RPID, RTID
# and RFD from its "ring pid P tid T fd F" line.
start() {
	local name=$1
	shift
	setsid "$URING_JOB" "$T/$name.log" "$@" </dev/null >"$name.out" 2>"$name.err" &
	JOB=$!
	PIDS+=("$JOB")
	local deadline=$((SECONDS + 30))
	until grep -q '^ring' "$name.out" 2>/dev/null; do
		[ $SECONDS -lt $deadline ] || fail "uring_job $* did not start: $(cat "$name.err")"
		sleep 0.05
	done
	read -r _ _ RPID _ RTID _ RFD < <(grep '^ring' "$name.out")
	PIDS+=("$RPID")
	wait_lines "$name.log" 5
}

# watch PID...: until unwatch, samples each pid's state as fast as bash
# reads (no fork per sample) and notes any stop (T, or t: CRIU's ptrace
# seize) in stops.txt.
watch() {
	rm -f "$T/watch.stop" "$T/stops.txt"
	(
		while [ ! -e "$T/watch.stop" ]; do
			for p in "$@"; do
				read -r l 2>/dev/null <"/proc/$p/stat" || continue
				s=${l##*) }
				s=${s%% *}
				case $s in T | t) echo "$p $s" >>"$T/stops.txt" ;; esac
			done
		done
	) &
	WATCH=$!
	sleep 0.1
}
unwatch() {
	touch "$T/watch.stop"
	wait "$WATCH"
}

# running LOG PID...: each pid is not stopped now, sits in no frozen cgroup,
# and the counter in LOG goes on.
running() {
	local log=$1 p st cg
	shift
	for p in "$@"; do
		st=$(awk '{print $3}' /proc/"$p"/stat)
		case "$st" in T | t) fail "pid $p was left stopped ($st) by a refused checkpoint" ;; esac
		cg=$(sed -n 's/^0:://p' /proc/"$p"/cgroup)
		if [ -n "$cg" ] && [ -f "/sys/fs/cgroup$cg/cgroup.freeze" ]; then
			[ "$(cat "/sys/fs/cgroup$cg/cgroup.freeze")" = 0 ] || fail "pid $p's cgroup $cg is frozen"
		fi
		for f in /sys/fs/cgroup/freezer"$(sed -n 's/^[0-9]*:freezer://p' /proc/"$p"/cgroup)"/freezer.state; do
			[ ! -f "$f" ] || [ "$(cat "$f")" = THAWED ] || fail "pid $p's freezer cgroup is $(cat "$f")"
		done
	done
	local at
	at=$(lines "$log")
	wait_lines "$log" $((at + 10)) 10
}

# refused WANT ARGS...: crest checkpoint --pid $JOB ARGS... fails in one line
# holding "io_uring", the holder's pid and command, WANT and the way
# around it; the job was never stopped, runs on, and nothing was stored.
refused() {
	local want=$1 who=$2 comm=$3 root=${ROOT:-$JOB}
	shift 3
	watch "$@"
	local rc=0
	"$CREST" --store "$S" checkpoint --pid "$root" >/dev/null 2>err.txt || rc=$?
	unwatch
	[ "$rc" != 0 ] || fail "the checkpoint of pid $root, whose pid $who holds an io_uring, succeeded"
	[ "$(wc -l <err.txt)" -eq 1 ] || { cat err.txt >&2; fail "more than one error line"; }
	for s in "io_uring" "pid $who ($comm) holds an io_uring ($want" "nothing was frozen" "UV_USE_IO_URING=0" "USE_LIBUV=0"; do
		grep -qF -- "$s" err.txt || fail "the refusal does not say '$s': $(cat err.txt)"
	done
	grep -q libcrest err.txt && [ "$comm" != uring_job_crest ] && fail "libcrest named for a job without it: $(cat err.txt)"
	[ ! -s stops.txt ] || fail "the refused checkpoint stopped the job: $(sort -u stops.txt | tr '\n' ' ')($(cat err.txt))"
	running "$T/$LOG" "$@"
	[ -z "$(ls /dev/shm | grep "^crest-ckpt-$root-" || true)" ] || fail "the refused checkpoint left images behind"
	"$CREST" --store "$S" --quiet log | grep -q . && fail "the refused checkpoint stored a snapshot"
	echo "ok: $(cat err.txt)"
}

# 1. The root holds a ring as liburing sets one up: descriptor and mapping.
start root
LOG=root.log refused "descriptor $RFD is anon_inode:[io_uring]" "$JOB" uring_job "$JOB"
kill_gone "$JOB"

# 2. Its child holds the ring's mapping only.
start child --child --ring map
[ "$RPID" != "$JOB" ] && [ "$RFD" = -1 ] || fail "the child case is not a child's mapping: $(cat child.out)"
LOG=child.log refused "/proc/$RPID/maps has an anon_inode:[io_uring] mapping" "$RPID" uring_job "$JOB" "$RPID"
kill_gone "$RPID"
kill_gone "$JOB"

# 3. A thread with a descriptor table of its own holds the ring's
# descriptor only: its process's /proc/PID/fd does not show it.
start thread --thread --ring fd
[ "$RTID" != "$JOB" ] || fail "the thread case's ring is not a thread's: $(cat thread.out)"
ls -l /proc/"$JOB"/fd | grep -q io_uring && fail "the process's own table shows the thread's ring"
LOG=thread.log refused "descriptor $RFD of its thread $RTID is anon_inode:[io_uring]" "$JOB" uring_job "$JOB"
kill_gone "$JOB"

# 4. libcrest's handle holds its store writer's ring: said so.
setsid "$URING_JOB_CREST" "$T/lib.log" --libcrest "$T/libstore" </dev/null >lib.out 2>lib.err &
JOB=$!
PIDS+=("$JOB")
wait_lines lib.log 5
LOG=lib.log refused "descriptor" "$JOB" uring_job_crest "$JOB"
grep -qF "pid $JOB maps libcrest" err.txt && grep -qF "CREST_STORE_IDLE_MS" err.txt ||
	fail "the refusal does not say the ring may be libcrest's: $(cat err.txt)"
kill_gone "$JOB"

# 5. Under crest run: the init (crest itself) holds none; the job's child does.
"$CREST" --store "$S" run -- "$URING_JOB" "$T/run.log" --child >run.out 2>run.err &
PIDS+=("$!")
wait_lines run.log 5
INIT=$(sed -n 's/.* runs as pid \([0-9]*\) .*/\1/p' run.err)
[ -n "$INIT" ] || fail "crest run did not say its init's pid: $(cat run.err)"
RJOB=$(pgrep -P "$INIT")
HOLDER=$(pgrep -P "$RJOB")
[ -n "$RJOB" ] && [ -n "$HOLDER" ] || fail "no job and child under crest run's init $INIT"
PIDS+=("$INIT" "$RJOB" "$HOLDER")
LOG=run.log ROOT=$INIT refused "descriptor" "$HOLDER" uring_job "$INIT" "$RJOB" "$HOLDER"
kill_gone "$INIT"

# 6. Without a ring, the same program is checkpointed: alone, and with a
# child under crest run (its init is looked at like the rest, and passes).
# The watcher sees these checkpoints stop the job: it would have seen a
# refused one do it.
start none --ring none
watch "$JOB"
"$CREST" --store "$S" --quiet checkpoint --pid "$JOB" --tag none || fail "checkpoint of the job without io_uring"
unwatch
[ -s stops.txt ] || echo "note: the watcher did not see this checkpoint's freeze (a loaded machine?)"
"$CREST" --store "$S" --quiet log | grep -q . || fail "no snapshot after the checkpoint without io_uring"
running "$T/none.log" "$JOB"
kill_gone "$JOB"
"$CREST" --store "$S" run -- "$URING_JOB" "$T/run2.log" --child --ring none >run2.out 2>run2.err &
PIDS+=("$!")
wait_lines run2.log 5
INIT=$(sed -n 's/.* runs as pid \([0-9]*\) .*/\1/p' run2.err)
PIDS+=("$INIT")
"$CREST" --store "$S" --quiet checkpoint --pid "$INIT" --tag run || fail "checkpoint of a crest run job without io_uring"
kill_gone "$INIT"
echo "PASS: refused before any freeze wherever the ring was (root, a child's mapping, a thread's own table, libcrest, under crest run); without one, checkpointed"
