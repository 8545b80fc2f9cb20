#!/bin/bash
# `crest checkpoint` killed with -9 at a random moment must not take the job
# with it. With --kill, CRIU leaves the job stopped until the commit, and a
# crest killed before it left the job stopped for good; a CUDA job's driver
# state (locked, checkpointed) would stay so from any kill between the
# freeze and the resume. Now a guard (capture/guard.h) gives the job back.
# After each kill the job must run on (not stopped, its output growing),
# unless the kill came after a --kill checkpoint committed (then the job is
# gone and the snapshot listed); after the last, a checkpoint that is let
# finish commits, and the store verifies.
source "$(dirname "$0")/lib.sh"
need_root
cd "$T"
leak_setup

start_job job.out --mib "$mib" --interval-ms 50
wait_lines job.out 2
runs_on() {   # the job's output grows, and it is not stopped
	local deadline=$((SECONDS + 30)) n
	n=$(lines job.out)
	while [ "$(lines job.out)" -le "$n" ] || [ "$(awk '{print $3}' /proc/"$JOB"/stat 2>/dev/null)" = T ]; do
		[ -e /proc/"$JOB" ] || return 1
		[ $SECONDS -lt $deadline ] || fail "round $1: the job is stopped or stuck 30 s after crest was killed" \
			"(state $(awk '{print $3}' /proc/"$JOB"/stat), $(lines job.out) lines)"
		sleep 0.05
	done
}
for i in $(seq 1 "$kills"); do
	mode=; [ $((i % 2)) -eq 0 ] && mode=--kill
	before=$("$CREST" --store "$S" --json ls 2>/dev/null | grep -c '"snapshot"' || true)
	kill_at_random 2500 "$CREST" --store "$S" --quiet checkpoint --pid "$JOB" $mode
	# CRIU, left to finish alone, lets go of the tree; then the guard acts.
	if ! runs_on "$i"; then
		after=$("$CREST" --store "$S" --json ls 2>/dev/null | grep -c '"snapshot"' || true)
		[ -n "$mode" ] && [ "$after" -gt "$before" ] ||
			fail "round $i: the job is gone after crest checkpoint $mode was killed at $delay ms" \
				"(snapshots $before -> $after)"
		echo "round $i: --kill committed before the kill at $delay ms: the job ended as asked"
		start_job job.out --mib "$mib" --interval-ms 50
		wait_lines job.out 2
		continue
	fi
	echo "round $i: crest checkpoint $mode killed at $delay ms: the job runs on"
done
"$CREST" --store "$S" --quiet checkpoint --pid "$JOB" --tag last >/dev/null || fail "the last checkpoint failed"
"$CASCTL" --store "$S" --quiet verify || fail "casctl verify after the kills"
# A guard whose crest died before CRIU froze the job has nothing to give
# back, but only knows that after a quiet second with no CRIU of the job
# (capture/guard.c): the job runs on meanwhile, and the test may get here
# first. Each must end on its own soon after; none may be left.
deadline=$((SECONDS + 10))
while pgrep -x crest-guard >/dev/null; do
	[ $SECONDS -lt $deadline ] || fail "a guard is left running 10 s after the last round"
	sleep 0.1
done
echo PASS
