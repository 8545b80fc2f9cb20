# Issue 33, item 8: a job that writes files by path, opening them again
# each step (`echo >> run.log`, as training jobs do with their logs, event
# files and checkpoints), under `crest run --workdir DIR`.
# - clone: the copy's lines go to its own run.log (DIR.clone-1, mounted
#   over DIR for it), and the original's run.log holds the original's
#   lines only, no interleaving;
# - restore in place after a kill: run.log is the snapshot's and goes on
#   from there (no line from after the snapshot, none missing), and files
#   made after the snapshot are gone;
# - a DIR over --workdir-limit is refused before anything is frozen.
source "$(dirname "$0")/lib.sh"
need_root
cd "$T"
mkdir w
# Step i appends "step i" to run.log by path and, every 5 steps, writes
# ck-i holding i: an uninterrupted run leaves run.log = step 1..n.
JOB='i=0; while :; do i=$((i+1)); echo "step $i" >>"$0/run.log"; [ $((i % 5)) -ne 0 ] || echo $i >"$0/ck-$i"; sleep 0.05; done'
# The log an uninterrupted run has after n steps.
ref() { for ((k = 1; k <= $1; k++)); do echo "step $k"; done; }
# The ck-N files in $1 must be exactly those of an uninterrupted run of $2 steps.
check_cks() {
	local want got n=$2
	# Killed between step n's line and its ck-n: ck-n may be missing.
	[ $((n % 5)) -ne 0 ] || [ -e "$1/ck-$n" ] || n=$((n - 1))
	set -- "$1" "$n"
	want=$(for ((k = 5; k <= $2; k += 5)); do echo "ck-$k"; done)
	got=$(cd "$1" && ls | grep '^ck-' | sort -t- -k2 -n || true)
	[ "$want" = "$got" ] || fail "$1 holds $(echo $got) after $2 steps; an uninterrupted run makes $(echo $want)"
	for f in "$1"/ck-*; do [ "$(cat "$f")" = "${f##*-}" ] || fail "$f holds $(cat "$f")"; done
}
# run.err exists before the job's shell makes it: the wait below reads it at once.
: >run.err
# Its stdout is a file inside DIR too (dumped as external: a copy must get its own).
"$CREST" --store "$S" run --every 1s --workdir "$T/w" -- sh -c "$JOB" "$T/w" </dev/null >w/job.out 2>run.err &
RUN=$!
PIDS+=("$RUN")
deadline=$((SECONDS + 30))
while [ "$(grep -c '^crest: snapshot' run.err || true)" -lt 2 ]; do
	[ $SECONDS -lt $deadline ] || { cat run.err >&2; fail "crest run took no 2 snapshots in 30 s"; }
	sleep 0.1
done
INIT=$(sed -n 's/.* runs as pid \([0-9]*\) .*/\1/p' run.err)
PIDS+=("$INIT")
SNAP1=$(grep '^crest: snapshot' run.err | sed -n '1s/^crest: snapshot \([0-9a-f]*\) .*/\1/p')
SNAP2=$(grep '^crest: snapshot' run.err | sed -n '2s/^crest: snapshot \([0-9a-f]*\) .*/\1/p')
"$CREST" --store "$S" show "$SNAP1" | grep -q "workdir=$T/w" || fail "snapshot 1 does not name its workdir"
"$CREST" --store "$S" show "$SNAP1" | grep -q " workdir/run.log$" || fail "snapshot 1 does not hold run.log"

# A clone of snapshot 1 beside the running original.
"$CREST" --store "$S" clone "$SNAP1" --branch copy >clone.out || fail "clone: $(cat clone.out)"
cat clone.out
CPID=$(sed -n 's/^clone 1 of .*: pid \([0-9]*\),.*/\1/p' clone.out)
[ -n "$CPID" ] || fail "clone printed no pid"
PIDS+=("$CPID")
[ -d w.clone-1 ] || fail "the copy's workdir w.clone-1 was not made"
[ "$(readlink /proc/"$CPID"/fd/1)" = "$T/w.clone-1/job.out" ] || fail "the copy's stdout is $(readlink /proc/"$CPID"/fd/1), not its own w.clone-1/job.out"
c0=$(lines w.clone-1/run.log)
wait_lines w.clone-1/run.log $((c0 + 20)) 30
# The copy's own checkpoint keeps --workdir (the snapshot it came from had
# it) and holds the copy's run.log, not the original's; in place it is
# refused, since it would replace the original's DIR.
b0=$(stat -c %s w.clone-1/run.log)
"$CREST" --store "$S" checkpoint --pid "$CPID" --branch copy --tag copyck >ck.out || fail "checkpoint of the copy: $(cat ck.out)"
b1=$(stat -c %s w.clone-1/run.log)
grep -q -- "--workdir $T/w, as in the snapshot" ck.out || { cat ck.out >&2; fail "the copy's checkpoint did not keep --workdir"; }
got=$("$CREST" --store "$S" show copyck | awk '$NF == "workdir/run.log" { print $2 }')
[ -n "$got" ] && [ "$got" -ge "$b0" ] && [ "$got" -le "$b1" ] ||
	fail "the copy's snapshot holds a run.log of ${got:-no} bytes; the copy's had $b0..$b1 (the original's: $(stat -c %s w/run.log))"
expect_error "is of a copy" "$CREST" --store "$S" restore copyck
c0=$(lines w.clone-1/run.log)
wait_lines w.clone-1/run.log $((c0 + 5)) 30
kill -9 "$CPID"
n=$(lines w.clone-1/run.log)
ref "$n" | cmp - w.clone-1/run.log || fail "the copy's run.log is not an uninterrupted run's"
check_cks w.clone-1 "$n"
cp w/run.log orig.log   # the original still runs: a copy, whole lines (one write each)
m=$(lines orig.log)
ref "$m" | cmp - orig.log || fail "the original's run.log holds lines that are not its own (the copy wrote into it?)"
echo "ok: the copy wrote $n lines to its own run.log; the original's $m lines are its own"

# With clone --workdir PATTERN the copy's DIR is PATTERN/w.
"$CREST" --store "$S" clone "$SNAP1" --branch copy2 --workdir "$T/c%d" >clone2.out || fail "clone 2: $(cat clone2.out)"
C2=$(sed -n 's/^clone 1 of .*: pid \([0-9]*\),.*/\1/p' clone2.out)
[ -n "$C2" ] || fail "clone 2 printed no pid"
PIDS+=("$C2")
c0=$(lines c1/w/run.log)
wait_lines c1/w/run.log $((c0 + 10)) 30
kill -9 "$C2"
n=$(lines c1/w/run.log)
ref "$n" | cmp - c1/w/run.log || fail "copy 2's run.log (c1/w) is not an uninterrupted run's"
echo "ok: a copy with clone --workdir $T/c%d wrote $n lines to c1/w/run.log"

# The limit: refused before the job is frozen, and the job runs on.
expect_error "over --workdir-limit" "$CREST" --store "$S" checkpoint --pid "$INIT" --workdir "$T/w" --workdir-limit 100
# A store inside DIR would be copied into itself at each checkpoint.
expect_error "copy the store into itself" "$CREST" --store "$T/w/store" checkpoint --pid "$INIT" --workdir "$T/w"
[ ! -e w/store ] || fail "the refused checkpoint made its store inside w"
m=$(lines w/run.log)
wait_lines w/run.log $((m + 5)) 30

# Restore in place of snapshot 2, once the original is gone and has run
# well past it, with a file made by hand after it.
wait_lines w/run.log $((m + 40)) 30
kill -9 "$RUN" "$INIT"
kill_gone "$INIT"
wait "$RUN" 2>/dev/null || true
orig=$(lines w/run.log)
echo junk >w/made-after
# A crest that dies with the snapshot's DIR swapped in, before CRIU: its
# guard swaps the job's DIR back (the staged tree stays beside it).
sum=$(cat w/run.log w/made-after | md5sum)
if CREST_FAULT_DIE=restore.workdir "$CREST" --store "$S" restore "$SNAP2" >die.out 2>&1; then
	fail "a restore told to die at restore.workdir did not"
fi
deadline=$((SECONDS + 10))
until [ -e w/made-after ] && [ "$(cat w/run.log w/made-after | md5sum)" = "$sum" ]; do
	[ $SECONDS -lt $deadline ] || { cat die.out >&2; ls -la w >&2; fail "the guard did not put w back after crest died"; }
	sleep 0.05
done
echo "ok: crest died with the snapshot's w swapped in; its guard put the job's w back ($(lines w/run.log) lines)"
rm -rf .w.crest-restore-*   # the staged tree the guard left
"$CREST" --store "$S" restore "$SNAP2" >restore.out || fail "restore: $(cat restore.out)"
cat restore.out
grep -q "restored --workdir $T/w" restore.out || fail "restore did not say that it put the workdir back"
RPID=$(sed -n 's/^restored .*: pid \([0-9]*\) running again.*/\1/p' restore.out)
[ -n "$RPID" ] || fail "restore printed no pid"
PIDS+=("$RPID")
[ ! -e w/made-after ] || fail "w/made-after, made after the snapshot, is still there"
r0=$(lines w/run.log)
[ "$r0" -lt "$orig" ] || fail "run.log has $r0 lines after the restore, as many as the original left ($orig)"
wait_lines w/run.log $((r0 + 10)) 30
kill -9 "$RPID"
r=$(lines w/run.log)
ref "$r" | cmp - w/run.log || fail "run.log after the restore is not an uninterrupted run's"
check_cks w "$r"
ls -a | grep -q 'crest-restore' && fail "a staging directory was left beside w: $(ls -a)"
# A job whose working directory is inside DIR: its relative paths would
# reach the original's DIR through a bind, so a clone is refused.
mkdir w2
: >run2.err
"$CREST" --store "$S" run --every 1s --branch inside --workdir "$T/w2" -- sh -c 'cd "$0" && while :; do echo x >>run.log; sleep 0.05; done' "$T/w2" \
	</dev/null >job2.out 2>run2.err &
RUN2=$!
PIDS+=("$RUN2")
deadline=$((SECONDS + 30))
until grep -q '^crest: snapshot' run2.err; do
	[ $SECONDS -lt $deadline ] || { cat run2.err >&2; fail "crest run in w2 took no snapshot in 30 s"; }
	sleep 0.1
done
INIT2=$(sed -n 's/.* runs as pid \([0-9]*\) .*/\1/p' run2.err)
PIDS+=("$INIT2")
SNAP3=$(sed -n '0,/^crest: snapshot/s/^crest: snapshot \([0-9a-f]*\) .*/\1/p' run2.err)
expect_error "working directory is below --workdir" "$CREST" --store "$S" clone "$SNAP3" --branch inside-copy
[ ! -e w2.clone-1 ] || fail "a refused clone made w2.clone-1"
kill -TERM "$RUN2"
wait "$RUN2" 2>/dev/null || true
echo "PASS: restored run.log went on from the snapshot ($r0 lines, the original had left $orig): $r lines, identical to an uninterrupted run; files made after the snapshot gone"
