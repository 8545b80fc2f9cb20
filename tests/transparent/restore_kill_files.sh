#!/bin/bash
# `crest restore` in place swaps the snapshot's versions of the job's files
# in right before CRIU runs, and the originals back if CRIU fails. Killed
# with -9 in between (while CRIU reads the images crest serves it), it used
# to leave the snapshot's versions in place with no job running, and the
# originals (all the job wrote after the snapshot) hidden for good as
# ".NAME.crest-restore-XXXXXX" beside them, more with every kill. Now a
# guard puts them back. Each round kills crest as soon as its CRIU runs
# (the files are swapped then), then at a random moment; after each, the
# job's files must be byte for byte what they were, or the job must be back
# (a kill after CRIU finished), and no temporary of crest's left.
source "$(dirname "$0")/lib.sh"
need_root
cd "$T"
leak_setup

start_job job.out --mib "$mib" --interval-ms 50 --log "$T/job.log"
wait_lines job.log 3
"$CREST" --store "$S" --quiet checkpoint --pid "$JOB" --tag j >/dev/null || fail "the checkpoint failed"
at=$(lines job.log)
wait_lines job.log $((at + 5))
kill_gone "$JOB"
settle() {   # the guard and any criu of the killed crest are done
	local deadline=$((SECONDS + 60))
	while pgrep -x crest-rguard >/dev/null || pgrep -f "criu.*/crest-restore-" >/dev/null; do
		[ $SECONDS -lt $deadline ] || fail "a restore guard or criu still runs after 60 s"
		sleep 0.05
	done
}
restored() { pgrep -f "crest-workload --mib $mib --interval-ms 50 --log $T/job.log" | head -n1 || true; }
check() {   # $1: what the round did
	settle
	local new; new=$(restored)
	if [ -n "$new" ]; then
		PIDS+=("$new")
		echo "$1: the restore had finished; the job is back"
		kill_gone "$new"
	else
		cmp -s job.log job.log.before || fail "$1: job.log is not what it was ($(lines job.log) lines, was $(lines job.log.before))"
		cmp -s job.out job.out.before || fail "$1: job.out is not what it was"
		echo "$1: the job's files are as they were"
	fi
	left=$(ls -A | grep -e '\.crest-' || true)
	[ -z "$left" ] || fail "$1: temporaries of crest left beside the job's files: $left"
	cp job.log job.log.before
	cp job.out job.out.before
}
cp job.log job.log.before
cp job.out job.out.before
for i in 1 2 3; do
	"$CREST" --store "$S" --quiet restore j >/dev/null 2>&1 &
	p=$!
	deadline=$((SECONDS + 60))
	until pgrep -P "$p" -f "criu.*restore" >/dev/null; do
		kill -0 "$p" 2>/dev/null || fail "crest restore ended before its criu was seen"
		[ $SECONDS -lt $deadline ] || fail "no criu restore seen within 60 s"
		sleep 0.002
	done
	kill -9 "$p"
	wait "$p" 2>/dev/null || true
	check "kill $i while criu ran"
done
# Half the usual random kills: the three above are the ones that matter,
# and CI's time is bounded.
for i in $(seq 1 $(( (kills + 1) / 2 ))); do
	kill_at_random 1500 "$CREST" --store "$S" --quiet restore j
	check "random kill $i after $delay ms"
done
"$CREST" --store "$S" --quiet restore j >/dev/null || fail "the restore after the kills failed"
new=$(restored); [ -n "$new" ] && PIDS+=("$new")
[ -n "$new" ] || fail "the last restore brought no job back"
echo PASS
