#!/bin/bash
# Root must not follow symlinks the job's user controls (issue 10, item 3).
# A job logs into a directory a second user owns and is checkpointed. (1) The user replaces the log with a symlink to a
# root-only file: crest restore refuses with one line before CRIU runs and
# the root file is unchanged; with the log put back, the restore works.
# (2) The post-dump hook, given the log's device and inode, copies nothing
# when the path has become a symlink to the root-only file.
source "$(dirname "$0")/lib.sh"
need_root
. "$(dirname "$0")/../attacker.sh"
chmod 755 "$T"
A=$T/home
mkdir "$A" && chown "$U" "$A"

cd "$T"
# The job runs as root (CRIU here cannot dump another user's process: its
# rlimits are out of reach) in a directory the second user owns.
start_job job.out --mib 16 --interval-ms 150 --log "$A/job.log"
wait_lines "$A/job.log" 3
"$CREST" --store "$S" checkpoint --pid "$JOB" --tag userjob >ck.out
kill_gone "$JOB"

echo "== the log replaced by a symlink to a root-only file"
as_user mv "$A/job.log" "$A/job.log.real"
as_user ln -s "$SECRET" "$A/job.log"
expect_error "symlink" "$CREST" --store "$S" restore userjob
untouched "restore through a symlinked log"
pgrep -f "crest-workload --mib 16 --interval-ms 150 --log $A/job.log" >/dev/null &&
	fail "the job came back although the restore was refused"

echo "== a directory on the log's path replaced by a symlink"
as_user mkdir "$A/sub"
as_user mv "$A/job.log.real" "$A/sub/job.log"
rm "$A/job.log"
as_user mv "$A" "$T/home.real" 2>/dev/null || mv "$A" "$T/home.real"
ln -s "$T/home.real/sub" "$A"
expect_error "symlink" "$CREST" --store "$S" restore userjob
rm "$A"
mv "$T/home.real" "$A"

echo "== the log put back: the restore works"
as_user mv "$A/sub/job.log" "$A/job.log"
"$CREST" --store "$S" restore userjob >restore.out || fail "restore with the log in place failed"
NEW=$(pgrep -f "crest-workload --mib 16 --interval-ms 150 --log $A/job.log" | head -n1 || true)
[ -n "$NEW" ] || fail "the job did not come back"
PIDS+=("$NEW")
[ "$(stat -c %u "$A/job.log")" = 0 ] || fail "the log changed owner"
kill_gone "$NEW"

echo "== the post-dump hook: the listed file swapped for a symlink"
H=$T/hook
mkdir "$H"
read -r dev ino < <(stat -c '%d %i' "$A/job.log")
echo "$dev $ino $A/job.log" >"$H/list"
as_user mv "$A/job.log" "$A/job.log.real"
as_user ln -s "$SECRET" "$A/job.log"
CRTOOLS_SCRIPT_ACTION=post-dump "$CREST" __criu-hook "$H" 1000000 || fail "the hook failed"
[ ! -e "$H/0.data" ] || fail "the hook copied what the symlink points at"
echo "ok: nothing copied through the symlink"
rm "$A/job.log"
as_user mv "$A/job.log.real" "$A/job.log"
CRTOOLS_SCRIPT_ACTION=post-dump "$CREST" __criu-hook "$H" 1000000 || fail "the hook failed"
cmp -s "$H/0.data" "$A/job.log" || fail "the hook did not copy the job's own log"
untouched "the hook"
echo "PASS"
