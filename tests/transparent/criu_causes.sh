# Issue 32, item 2: where crest can tell why criu failed, the one line says
# the cause and what to do, not only criu's own words: a kernel thread
# (refused before anything is frozen), the images' directory full (which
# directory, how big, how much the images took), no CAP_SYS_PTRACE or
# CAP_SYS_ADMIN (capsh --drop), and every cause of os/criu.c's table, each
# read from a criu log a fake criu writes.
source "$(dirname "$0")/lib.sh"
need_root
cd "$T"
start_job job.out --mib 16 --interval-ms 100
wait_lines job.out 2

# A kernel thread: kthreadd, pid 2, and none of its tree is frozen.
expect_error "pid 2 (kthreadd) is a kernel thread" "$CREST" --store "$S" checkpoint --pid 2
grep -q '^State:.*[RSI]' /proc/2/status || fail "kthreadd is not running after the refusal"

# The images' directory too small: a tmpfs of 1 MiB for a job of 16 MiB.
mkdir tiny
mount -t tmpfs -o size=1m tmpfs tiny 2>/dev/null || { echo "SKIP: cannot mount a small tmpfs here"; exit 77; }
trap 'umount "$T/tiny" 2>/dev/null; cleanup' EXIT
# (Staged images: streamed ones never fill --tmpdir.)
CREST_CHECKPOINT_IMAGES=files expect_error "no space left in $T/tiny/crest-" "$CREST" --store "$S" checkpoint \
	--pid "$JOB" --tmpdir "$T/tiny"
grep -q "file system holds 1.0 MiB" "$T/err.txt" || fail "the line does not say how big the directory's file system is"
grep -q "the images had taken [0-9.]* [KM]iB" "$T/err.txt" || fail "the line does not say what the images took"
grep -q "resident memory, [0-9.]* MiB" "$T/err.txt" || fail "the line does not say what the images need"
grep -q -- "--tmpdir" "$T/err.txt" || fail "the line does not say what to do"
n=$(lines job.out)
wait_lines job.out $((n + 2)) 20   # the job runs on after the failed dump

# Causes from the log: a fake criu writes one line of a real criu's log
# into the images' directory (-D) and its log (-o), and fails.
cat >fake-criu <<'FAKE'
#!/bin/sh
[ "$1" = --version ] && { echo "Version: 4.1.1"; exit 0; }
dir= log=
while [ $# -gt 0 ]; do
	case $1 in -D) dir=$2; shift ;; -o) log=$2; shift ;; esac
	shift
done
{ echo "Error (criu/util.c:1533): rlimit: Can't setup RLIMIT_NOFILE for self: Operation not permitted"
  echo "$FAKE_LINE"; } >"$dir/$log"
[ -z "$FAKE_SIG" ] || kill -"$FAKE_SIG" $$
exit 1
FAKE
chmod +x fake-criu
# A third field: a capability crest runs without (capsh --drop), where
# the cause depends on it.
command -v capsh >/dev/null || fail "capsh (libcap) is needed"
while IFS='|' read -r line want drop; do
	[ -n "$line" ] || continue
	expect_error "$want" capsh --drop="${drop:-cap_wake_alarm}" -- -c \
		'CREST_CRIU="$0" FAKE_LINE="$1" exec "$2" --store "$3" checkpoint --pid "$4"' \
		"$T/fake-criu" "$line" "$CREST" "$S" "$JOB"
	grep -q "criu: .*${line#*): }" "$T/err.txt" || fail "criu's own line is not kept after the cause"
done <<'EOF'
Error (criu/pie/restorer.c:1505): prctl PR_SET_MM_MAP failed with -1|crest runs without CAP_SYS_RESOURCE|cap_sys_resource
Error (criu/crtools.c:290): CRIU needs to have the CAP_SYS_ADMIN or the CAP_CHECKPOINT_RESTORE capability: |without CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE
Warn  (compel/src/lib/infect.c:133): Unable to interrupt task: 77 (Operation not permitted)|could not stop a task of the tree: a kernel thread
Error (criu/net.c:3094): net: Unable create a network namespace: Operation not permitted|could not make a network namespace to probe the kernel (a container
Error (criu/bfd.c:131): bfd: Error flushing image: No space left on device|no space left in
EOF
# The same causes for real: criu itself fails without the capability.
expect_error "crest runs without CAP_SYS_PTRACE, so criu could not stop the job's tasks" \
	capsh --drop=cap_sys_ptrace -- -c '"$0" --store "$1" checkpoint --pid "$2"' "$CREST" "$S" "$JOB"
expect_error "crest runs without CAP_SYS_ADMIN, which criu needs" \
	capsh --drop=cap_sys_admin -- -c '"$0" --store "$1" checkpoint --pid "$2"' "$CREST" "$S" "$JOB"
# A log without a known cause: criu's errors, as before.
expect_error "failed (exit 1): Something else broke" env CREST_CRIU="$T/fake-criu" \
	FAKE_LINE="Error (criu/x.c:1): Something else broke" "$CREST" --store "$S" checkpoint --pid "$JOB"
# A criu that aborts on one of its own BUG() checks (criu 4.2.1 does on a
# 16 TiB MAP_NORESERVE mapping with pages touched across it): the signal
# and the BUG its log names.
expect_error "was killed by signal 6 (Aborted) (criu: page-pipe: BUG at criu/page-pipe.c:270)" \
	env CREST_CRIU="$T/fake-criu" FAKE_SIG=ABRT FAKE_LINE="Error (criu/page-pipe.c:270): page-pipe: BUG at criu/page-pipe.c:270" \
	"$CREST" --store "$S" checkpoint --pid "$JOB"
grep -q "criu dump of pid $JOB" "$T/err.txt" || fail "the line does not say which dump"
kill -0 "$JOB" || fail "the job did not survive the failed checkpoints"
echo PASS
