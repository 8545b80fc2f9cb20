#!/bin/bash
# `crest restore` killed with -9 while it streams a snapshot's images onto
# /dev/shm used to leave them there for good (as large as the job's state:
# RAM nobody gets back). Now the images directory is held by an flock while
# its crest lives, and the next restore removes those of crests that are
# gone. After kills at random moments and one restore that finishes, none
# of the killed restores' directories is left, and the job runs again.
source "$(dirname "$0")/lib.sh"
need_root
cd "$T"
leak_setup

# No job file (output to /dev/null): a restore of a job with files has a
# guard that removes the images of a killed restore at once
# (restore/guard.h); this test is of the sweep that needs no guard.
start_job /dev/null --mib "$mib" --interval-ms 50
sleep 0.5
"$CREST" --store "$S" --quiet checkpoint --pid "$JOB" --tag j >/dev/null || fail "the checkpoint failed"
kill_gone "$JOB"

# Entries on /dev/shm that were not there when the test began: tests of
# this label run one at a time, so they are this test's restores'.
before=$(ls /dev/shm | grep '^crest-restore-' || true)
left() { ls /dev/shm | grep '^crest-restore-' | grep -vxF -e "$before" -e '' || true; }
# restore_gone: no criu of a killed restore runs on, and the job a restore
# brought back (or half brought back) is ended, so the next restore finds
# the job's pid free.
restore_gone() {
	local deadline=$((SECONDS + 60))
	while pgrep -f "criu.*/crest-restore-" >/dev/null; do
		[ $SECONDS -lt $deadline ] || fail "criu of a killed restore still runs after 60 s"
		sleep 0.05
	done
	kill_gone "$JOB"
}

t0=$(date +%s%N)
"$CREST" --store "$S" --quiet restore j >/dev/null || fail "a first restore failed"
full_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
restore_gone
echo "one restore of a $mib MiB job takes $full_ms ms; kills fall in 0 to $full_ms ms"

most=0
for i in $(seq 1 "$kills"); do
	kill_at_random "$full_ms" "$CREST" --store "$S" --quiet restore j
	restore_gone
	n=$(left | grep -c -v '\.' || true)
	echo "kill $i after $delay ms: $n image directories of killed restores on /dev/shm"
	[ "$n" -gt "$most" ] && most=$n
done

"$CREST" --store "$S" --quiet restore j >/dev/null || fail "the restore after the kills failed"
echo "after the next restore: $(left | wc -l) entries of killed restores on /dev/shm ($most directories before it)"
if [ -n "$(left)" ]; then
	left >&2
	for e in $(left); do rm -rf "/dev/shm/$e"; done   # RAM back, whatever the outcome
	fail "images of killed restores left on /dev/shm"
fi
[ "$most" -gt 0 ] || fail "no kill landed while images were on /dev/shm (seed $seed): nothing was shown"
sleep 1   # the job has no output to watch: it runs (same pid), not stopped
kill -0 "$JOB" && [ "$(awk '{print $3}' /proc/"$JOB"/stat)" != T ] || fail "the restored job is not running"
"$CASCTL" --store "$S" --quiet verify || fail "casctl verify"

# A crest killed while its child tells whether hardware breakpoints fire
# (os/criu.c, before criu runs) leaves no such child behind: it once held
# the write end of the pipe it waited on, and waited for good, holding
# crest's descriptors (a store's readers lock among them).
P=$T/probe.pause
env -u CRIU_FAULT CREST_FAULT_PAUSE="criu.probe:$P" "$CREST" --store "$S" --quiet checkpoint --pid "$JOB" \
	--tmpdir "$T" >/dev/null 2>&1 &
cp=$!
for i in $(seq 1 500); do [ -e "$P" ] && break; sleep 0.02; done
[ -e "$P" ] || fail "crest checkpoint never reached the breakpoint probe"
kill -9 "$cp"
wait "$cp" 2>/dev/null || true
rm -f "$P"
for i in $(seq 1 100); do pgrep -f -- "checkpoint --pid $JOB " >/dev/null || break; sleep 0.05; done
if pgrep -f -- "checkpoint --pid $JOB " >/dev/null; then
	pkill -9 -f -- "checkpoint --pid $JOB " || true
	fail "the breakpoint probe's child of a killed crest was left waiting"
fi
kill -0 "$JOB" && [ "$(awk '{print $3}' /proc/"$JOB"/stat)" != T ] || fail "the job is not running after the killed checkpoint"
echo PASS
