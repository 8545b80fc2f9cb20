# A restore whose streamed attempt fails after the tree has resumed, and
# that crest makes again from image files. CRIU can fail so (in CI: a
# crest run job's tree came up from streamed images, ran for a moment and
# was ended, "killed by signal 11"), and by then the tree may have written
# to the files the restore put back for it. The attempt from files must
# start from the snapshot's files again, not from the ones the failed tree
# wrote to: a second CRIU run over them left a copy's log with a line
# twice (the CI failure of transparent.workdir).
# A stand-in for criu runs the real one on streamed images, lets the tree
# run for a random 0.1-0.5 s (seed printed; CREST_AGAIN_SEED replays it),
# kills it, takes its pid file away and fails; from files it is the real
# criu. Each restored job's output must be an uninterrupted run's:
# 1. a job that holds its log open (crest-workload), restored in place;
# 2. a shell loop under crest run --workdir that appends to a log by path,
#    cloned (the copy's own DIR) and then restored in place.
source "$(dirname "$0")/lib.sh"
need_root
cd "$T"
seed=${CREST_AGAIN_SEED:-$$}
RANDOM=$seed
echo "seed $seed (CREST_AGAIN_SEED replays it)"
real=${CREST_CRIU:-$(cd "$(dirname "$0")/../.." && pwd)/.deps/criu/criu}
[ -x "$real" ] || real=$(command -v criu) || fail "no criu to run"
# stand-in MS: as above, the tree running MS ms; each failure is counted
# in ./failed.
stand_in() {
	cat >resumes-then-fails <<FAKE
#!/bin/bash
stream=0 dir= pidfile= prev=
for a; do
	[ "\$a" = --stream ] && stream=1
	[ "\$prev" = -D ] && dir=\$a
	[ "\$prev" = --pidfile ] && pidfile=\$a
	prev=\$a
done
[ "\$1" = restore ] && [ \$stream = 1 ] || exec "$real" "\$@"
"$real" "\$@" || exit
pid=\$(cat "\$pidfile")
rm -f "\$pidfile"
sleep $(printf '0.%03d' "$1")
kill -9 "\$pid"
echo "Error (stand-in): \$pid killed by signal 11 after it resumed" >>"\$dir/restore.log"
echo x >>"$T/failed"
exit 1
FAKE
	chmod +x resumes-then-fails
}
# again WHAT CMD...: CMD, under the stand-in, must go back to image files
# once; its output is in again.out.
again() {
	local what=$1; shift
	local before
	before=$(lines failed)
	stand_in $((100 + RANDOM % 400))
	CREST_CRIU="$T/resumes-then-fails" "$@" >again.out 2>&1 || { cat again.out >&2; fail "$what failed"; }
	cat again.out
	[ "$(grep -c "restoring from image files instead" again.out)" -eq 1 ] ||
		fail "$what: not one note that it went back to image files"
	# A job built with AddressSanitizer (the ASan build's) fails the real
	# CRIU's streamed restore by itself, before the stand-in's turn.
	if [ "$(lines failed)" -eq "$before" ] && grep -q "streamed images (criu restore failed.*Segmentation fault" again.out; then
		echo "($what: CRIU itself failed on the streamed images)"
	else
		[ "$(lines failed)" -eq $((before + 1)) ] || fail "$what: the stand-in did not fail a streamed attempt once"
	fi
}

# 1. Held open: the restored job's log and stdout are an uninterrupted run's.
start_job job.out --mib 16 --interval-ms 20 --log "$T/job.log"
wait_lines job.log 4
"$CREST" --store "$S" checkpoint --pid "$JOB" --tag j >/dev/null
wait_lines job.log $(($(lines job.log) + 20))
kill_gone "$JOB"
again "restore in place" "$CREST" --store "$S" restore j
same_as_uninterrupted "$T/job.log" job.out 0 16 20
echo "ok: 1. restored in place from files after a failed streamed attempt: $N lines as uninterrupted"

# 2. By path, under crest run --workdir.
mkdir w
JOB='i=0; while :; do i=$((i+1)); echo "step $i" >>"$0/run.log"; sleep 0.02; done'
ref() { for ((k = 1; k <= $1; k++)); do echo "step $k"; done; }
: >run.err
"$CREST" --store "$S" run --every 1s --workdir "$T/w" -- sh -c "$JOB" "$T/w" </dev/null >job2.out 2>run.err &
RUN=$!
PIDS+=("$RUN")
wait_run run.err
again "clone" "$CREST" --store "$S" clone "$SNAP" --branch copy
CPID=$(sed -n 's/^clone 1 of .*: pid \([0-9]*\),.*/\1/p' again.out)
[ -n "$CPID" ] || fail "clone printed no pid"
PIDS+=("$CPID")
wait_lines w.clone-1/run.log $(($(lines w.clone-1/run.log) + 20)) 30
kill -9 "$CPID"
n=$(lines w.clone-1/run.log)
ref "$n" | cmp - w.clone-1/run.log || fail "the copy's run.log is not an uninterrupted run's"
echo "ok: 2. a copy from files after a failed streamed attempt: $n lines as uninterrupted"
wait_lines w/run.log $(($(lines w/run.log) + 20)) 30
kill -9 "$RUN" "$INIT"
kill_gone "$INIT"
wait "$RUN" 2>/dev/null || true
again "restore of the crest run job in place" "$CREST" --store "$S" restore "$SNAP"
RPID=$(sed -n 's/^restored .*: pid \([0-9]*\) running again.*/\1/p' again.out)
[ -n "$RPID" ] || fail "restore printed no pid"
PIDS+=("$RPID")
wait_lines w/run.log $(($(lines w/run.log) + 20)) 30
kill -9 "$RPID"
r=$(lines w/run.log)
ref "$r" | cmp - w/run.log || fail "run.log after the restore is not an uninterrupted run's"
echo "ok: 2. the crest run job in place from files after a failed streamed attempt: $r lines as uninterrupted"
echo PASS
