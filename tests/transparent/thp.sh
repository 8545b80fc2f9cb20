#!/bin/bash
# crest checkpoint --huge-pages raises the machine's transparent huge page
# setting for its window only, and no process sees it changed once crest has
# ended, killed or not (os/thp.h). Against a stand-in for the sysfs file
# (CREST_THP_FILE) and a state directory of the test's own (CREST_THP_STATE),
# so that the machine's own setting is never touched. Each window is held
# open at the step after the setting is raised (CREST_FAULT_PAUSE
# capture.thp), before anything is frozen:
#   1. without --huge-pages the setting is never written;
#   2. raised in the window, put back after it;
#   3. two checkpoints at once: the first to end leaves it raised for the
#      other, the last puts it back;
#   4. crest killed -9 in the window: its guard puts it back;
#   5. crest and its guard both killed: it stays raised (nobody is left),
#      and the next --huge-pages checkpoint first puts back what they left
#      (its saved setting is the machine's, not theirs), then puts it back
#      again at its end;
#   6. a setting that cannot be read or recorded: one line, nothing frozen,
#      the setting untouched;
#   7. crest restore --huge-pages: raised while CRIU and the driver restore
#      (held before CRIU runs: CREST_FAULT_PAUSE restore.thp), put back
#      after; killed -9 there, its guard puts it back.
# After each, the job runs on.
source "$(dirname "$0")/lib.sh"
need_root
cd "$T"
export CREST_THP_FILE=$T/enabled CREST_THP_STATE=$T/run/crest/thp
ORIG="always [madvise] never"
echo "$ORIG" >"$CREST_THP_FILE"
mode() {   # the setting in force: the bracketed word, or the file's first
	local s
	s=$(cat "$CREST_THP_FILE")
	[[ $s == *"["* ]] && { s=${s#*[}; s=${s%%]*}; }
	echo "${s%% *}"
}
want_mode() {   # want_mode MODE WHAT [SECONDS]: the setting is (or becomes) MODE
	local deadline=$((SECONDS + ${3:-0}))
	until [ "$(mode)" = "$1" ]; do
		[ $SECONDS -lt $deadline ] || fail "$2: the setting is '$(mode)', expected '$1'"
		sleep 0.05
	done
}
wait_file() {
	local deadline=$((SECONDS + 60))
	until [ -e "$1" ]; do
		[ $SECONDS -lt $deadline ] || fail "crest never reached its window ($1)"
		sleep 0.05
	done
}
runs_on() {   # runs_on OUT WHAT: the job writing OUT is not stopped, and OUT grows
	local n deadline=$((SECONDS + 30))
	n=$(lines "$1")
	until [ "$(lines "$1")" -gt "$n" ]; do
		[ $SECONDS -lt $deadline ] || fail "$2: the job does not run on"
		sleep 0.05
	done
}
no_guard() {   # waits until no guard runs (one per checkpoint, ended with it)
	local deadline=$((SECONDS + 15))
	while pgrep -x crest-guard >/dev/null; do
		[ $SECONDS -lt $deadline ] || fail "$1: a guard is left running"
		sleep 0.05
	done
}
# held NAME STORE PID: crest checkpoint --huge-pages of PID into STORE, held
# in its window until $T/NAME is removed; its pid in HELD.
held() {
	CREST_FAULT_PAUSE="capture.thp:$T/$1" "$CREST" --store "$2" --quiet checkpoint --pid "$3" --huge-pages \
		>"$1.out" 2>"$1.err" &
	HELD=$!
	PIDS+=("$HELD")
	wait_file "$T/$1"
}

start_job job.out --mib "$MIB" --interval-ms 50
JOB1=$JOB
wait_lines job.out 2

# 1.
"$CREST" --store "$S" --quiet checkpoint --pid "$JOB1" >/dev/null || fail "a checkpoint without --huge-pages failed"
[ "$(cat "$CREST_THP_FILE")" = "$ORIG" ] || fail "1: without --huge-pages the setting was written: $(cat "$CREST_THP_FILE")"
echo "ok 1: without --huge-pages the setting is untouched"

# 2.
held p1 "$S" "$JOB1"
want_mode always "2: in the window"
rm "$T/p1"
wait "$HELD" || fail "2: the checkpoint failed: $(cat p1.err)"
want_mode madvise "2: after the checkpoint"
[ ! -e "$CREST_THP_STATE/saved" ] || fail "2: the saved setting is left behind"
runs_on job.out 2
echo "ok 2: raised in the window, put back after it"

# 3.
start_job job2.out --mib "$MIB" --interval-ms 60
JOB2=$JOB
wait_lines job2.out 2
held p1 "$S" "$JOB1"
C1=$HELD
held p2 "$T/store2" "$JOB2"
C2=$HELD
want_mode always "3: two in their windows"
rm "$T/p1"
wait "$C1" || fail "3: the first checkpoint failed: $(cat p1.err)"
want_mode always "3: the first ended, the second still in its window"
rm "$T/p2"
wait "$C2" || fail "3: the second checkpoint failed: $(cat p2.err)"
want_mode madvise "3: both ended"
runs_on job.out 3
runs_on job2.out 3
echo "ok 3: two at once: raised until the last one ended"

# 4.
no_guard 4
held p1 "$S" "$JOB1"
want_mode always "4: in the window"
kill -9 "$HELD"
wait "$HELD" 2>/dev/null || true
rm -f "$T/p1"
want_mode madvise "4: crest killed in its window, its guard" 15
runs_on job.out 4
no_guard 4
echo "ok 4: crest killed -9 in its window: its guard put the setting back"

# 5.
held p1 "$S" "$JOB1"
# The guard names itself once its program runs (a moment after crest
# spawned it; longer under AddressSanitizer): waited for.
deadline=$((SECONDS + 30))
until guard=$(pgrep -x crest-guard); do
	[ $SECONDS -lt $deadline ] || fail "5: no guard runs for the held checkpoint"
	sleep 0.05
done
[ "$(echo "$guard" | wc -l)" -eq 1 ] || fail "5: more than one guard: $guard"
kill -9 "$guard" "$HELD"
wait "$HELD" 2>/dev/null || true
rm -f "$T/p1"
sleep 0.5
want_mode always "5: crest and its guard killed (nobody left to put it back)"
held p1 "$S" "$JOB1"
saved=$(cat "$CREST_THP_STATE/saved")
[ "$saved" = madvise ] || fail "5: the next checkpoint saved '$saved', not the machine's own setting"
want_mode always "5: the next checkpoint's window"
rm "$T/p1"
wait "$HELD" || fail "5: the next checkpoint failed: $(cat p1.err)"
want_mode madvise "5: after the next checkpoint"
runs_on job.out 5
echo "ok 5: what a crest killed with its guard left was put back by the next one"

# 6.
before=$("$CREST" --store "$S" --json ls | grep -c '"snapshot"' || true)
expect_error "reading the huge page setting" env CREST_THP_FILE="$T/no-such-file" "$CREST" --store "$S" \
	checkpoint --pid "$JOB1" --huge-pages
touch "$T/not-a-dir"
expect_error "nothing was frozen" env CREST_THP_STATE="$T/not-a-dir/thp" "$CREST" --store "$S" \
	checkpoint --pid "$JOB1" --huge-pages
want_mode madvise "6: after the refusals"
[ "$(cat "$CREST_THP_FILE")" = "$ORIG" ] || [ "$(mode)" = madvise ] || fail "6: the setting changed"
after=$("$CREST" --store "$S" --json ls | grep -c '"snapshot"' || true)
[ "$after" = "$before" ] || fail "6: a refused checkpoint stored a snapshot ($before -> $after)"
runs_on job.out 6
no_guard 6
echo "ok 6: a setting that cannot be read or recorded: refused, nothing frozen"

# 7.
"$CREST" --store "$S" --quiet checkpoint --pid "$JOB1" --kill --tag gone >/dev/null || fail "7: checkpoint --kill failed"
CREST_FAULT_PAUSE="restore.thp:$T/r1" "$CREST" --store "$S" restore gone --huge-pages >r1.out 2>r1.err &
R=$!
PIDS+=("$R")
wait_file "$T/r1"
want_mode always "7: a restore in its window"
kill -9 "$R"
wait "$R" 2>/dev/null || true
rm -f "$T/r1"
want_mode madvise "7: crest restore killed in its window, its guard" 15
CREST_FAULT_PAUSE="restore.thp:$T/r1" "$CREST" --store "$S" restore gone --huge-pages >r1.out 2>r1.err &
R=$!
PIDS+=("$R")
wait_file "$T/r1"
want_mode always "7: a restore in its window"
rm "$T/r1"
wait "$R" || fail "7: the restore failed: $(cat r1.err)"
want_mode madvise "7: after the restore"
back=$(pgrep -f "crest-workload --mib $MIB --interval-ms 50" | head -n1 || true)
[ -n "$back" ] || fail "7: the restored job is not running"
PIDS+=("$back")
runs_on job.out 7
echo "ok 7: a restore raised it while CRIU ran, and put it back; killed, its guard did"
echo PASS
