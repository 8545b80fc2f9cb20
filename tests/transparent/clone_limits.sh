#!/bin/bash
# Issue 32, item 2: crest clone --count N records each copy as it starts
# (its line, its branch NEW-k and its job note), stops starting more on
# SIGINT or SIGTERM and says what runs (pids and branches, exit 128 +
# signal), and refuses before starting any a count the machine cannot hold
# (the snapshot's memory times the count against MemAvailable; tasks
# against pid_max and threads-max), saying why.
source "$(dirname "$0")/lib.sh"
need_root
cd "$T"
"$CREST" --store "$S" init >/dev/null || fail "crest init"
"$CREST" --store "$S" run --every 1h -- "$WORKLOAD" --mib 64 --interval-ms 100 --log "$T/job.log" \
	</dev/null >job.out 2>run.err &
RUN=$!
PIDS+=("$RUN")
deadline=$((SECONDS + 30))
until grep -q ' runs as pid ' run.err; do
	[ $SECONDS -lt $deadline ] || { cat run.err >&2; fail "crest run did not start"; }
	sleep 0.1
done
INIT=$(sed -n 's/.* runs as pid \([0-9]*\) .*/\1/p' run.err)
PIDS+=("$INIT")
wait_lines job.log 2
"$CREST" --store "$S" --quiet checkpoint --pid "$INIT" --tag base >/dev/null || fail "checkpoint of the job"
branches() { "$CREST" --store "$S" --json branch | python3 -c 'import json, sys
print(" ".join(sorted(x["branch"] for x in json.load(sys.stdin))))'; }
b0=$(branches)

# Too many for the machine's memory: refused, nothing started.
avail=$(($(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo) * 1024))
n=$((avail / (64 << 20) + 50))
[ "$n" -le 1000 ] || { echo "SKIP: $((avail >> 30)) GiB available: 1000 copies of 64 MiB fit"; exit 77; }
# Watched: a crest that starts copies anyway is stopped at its first one,
# not left to fill the machine.
"$CREST" --store "$S" clone base --branch big --count "$n" >big.out 2>big.err &
BIG=$!
PIDS+=("$BIG")
while kill -0 "$BIG" 2>/dev/null; do
	if grep -q '^clone ' big.out; then
		kill -INT "$BIG"
		wait "$BIG" || true   # the copy being started comes up and is printed
		for p in $(sed -n 's/^clone .*: pid \([0-9]*\),.*/\1/p' big.out); do kill -9 "$p" 2>/dev/null || true; done
		kill -9 "$BIG" 2>/dev/null || true
		fail "clone --count $n of a 64 MiB job started copies with $((avail >> 20)) MiB available"
	fi
	sleep 0.05
done
rc=0
wait "$BIG" || rc=$?
PIDS+=($(sed -n 's/^clone .*: pid \([0-9]*\),.*/\1/p' big.out))
[ "$rc" != 0 ] || fail "clone --count $n of a 64 MiB job succeeded with $((avail >> 20)) MiB available"
[ "$(wc -l <big.err)" = 1 ] && grep -q "MemAvailable.*at most [0-9]* copies fit; none started" big.err ||
	{ cat big.err >&2; fail "clone --count $n: not one line saying how many fit"; }
[ ! -s big.out ] || fail "clone --count $n started copies: $(cat big.out)"
[ "$(branches)" = "$b0" ] || fail "clone --count $n made branches: $(branches)"
echo "ok: $(cat big.err)"

# And what crest's own cgroup allows: 10 copies of 64 MiB in a memory
# cgroup of 256 MiB are refused (where a child cgroup can be made here).
cg=$(sed -n 's/^[0-9]*:memory:\(.*\)$/\1/p' /proc/self/cgroup)
cgd=/sys/fs/cgroup/memory$cg/crest-test-$$
if [ -n "$cg" ] && mkdir "$cgd" 2>/dev/null; then
	echo $((256 << 20)) >"$cgd/memory.limit_in_bytes"
	rc=0
	sh -c 'echo $$ >"$1/cgroup.procs" && exec "$2" --store "$3" clone base --branch cg --count 10' sh "$cgd" "$CREST" "$S" \
		>cg.out 2>cg.err || rc=$?
	# Whatever a failing crest started there ends now, and the cgroup goes.
	for p in $(sed -n 's/^clone .*: pid \([0-9]*\),.*/\1/p' cg.out); do kill -9 "$p" 2>/dev/null || true; done
	for _ in $(seq 50); do
		for p in $(cat "$cgd/cgroup.procs" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
		rmdir "$cgd" 2>/dev/null && break
		sleep 0.1
	done
	[ "$rc" != 0 ] && grep -q "cgroup allows): at most [0-9] copies fit; none started" cg.err ||
		{ cat cg.out cg.err >&2; fail "clone --count 10 in a 256 MiB cgroup: not refused"; }
	echo "ok: in a 256 MiB memory cgroup: $(cat cg.err)"
else
	echo "note: no memory cgroup of v1 to make here: the cgroup limit is not checked"
fi

# --workdir through a symlink another user owns (to a root-only
# directory): refused, as crest get's DEST (issue 32, item 4), nothing
# written there and no copy left running.
. "$(dirname "$0")/../attacker.sh"
chmod 755 "$T"
mkdir "$T/attacker" && chown "$U" "$T/attacker"
as_user ln -s "$OUT" "$T/attacker/wd"
chmod 700 "$T"   # its mode at the snapshot: CRIU checks the job's cwd
rc=0
"$CREST" --store "$S" clone base --branch wd --workdir "$T/attacker/wd" >wd.out 2>wd.err || rc=$?
PIDS+=($(sed -n 's/^clone .*: pid \([0-9]*\),.*/\1/p' wd.out))
[ "$rc" != 0 ] || fail "clone --workdir through a user's symlink succeeded"
grep -q "symlink owned by uid" wd.err || { cat wd.err >&2; fail "clone --workdir: not refused for the symlink"; }
! grep -q '^clone ' wd.out || fail "clone --workdir through a user's symlink left a copy: $(cat wd.out)"
untouched "clone --workdir through a user's symlink"
echo "ok: $(head -1 wd.err)"

# Interrupted: each copy that ran has its line, branch and note.
python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])' \
	"$CREST" --store "$S" clone base --branch exp --count 30 >clone.out 2>clone.err &
CL=$!
PIDS+=("$CL")
deadline=$((SECONDS + 120))
until [ "$(grep -c '^clone ' clone.out)" -ge 2 ]; do
	[ $SECONDS -lt $deadline ] || { cat clone.out clone.err >&2; fail "no 2 copies in 120 s"; }
	kill -0 "$CL" 2>/dev/null || { cat clone.err >&2; fail "clone ended before it was interrupted"; }
	sleep 0.05
done
kill -INT "$CL"
rc=0
wait "$CL" || rc=$?
cat clone.out
# Every copy that printed its line is ended on exit, whatever fails below.
PIDS+=($(sed -n 's/^clone .*: pid \([0-9]*\),.*/\1/p' clone.out))
grep -v '^clone ' clone.err >&2 || true
[ "$rc" = 130 ] || fail "interrupted clone exited $rc, not 130"
made=$(grep -c '^clone ' clone.out)
[ "$made" -lt 30 ] || fail "all 30 copies started despite SIGINT"
line=$(grep 'clone interrupted (SIGINT)' clone.err) || fail "no 'clone interrupted' line"
echo "$line" | grep -q "after $made of 30 copies; running:" || fail "the line does not say $made of 30: $line"
for k in $(seq 1 "$made"); do
	p=$(sed -n "s/^clone $k of .*: pid \([0-9]*\), branch exp-$k\$/\1/p" clone.out)
	[ -n "$p" ] || fail "no line for copy $k"
	PIDS+=("$p")
	[ -e /proc/"$p" ] || fail "copy $k (pid $p) is not running"
	echo "$line" | grep -q "pid $p branch exp-$k" || fail "the line does not list copy $k: $line"
	branches | tr ' ' '\n' | grep -qx "exp-$k" || fail "no branch exp-$k for copy $k"
done
[ "$(branches | tr ' ' '\n' | grep -c '^exp-')" = "$made" ] || fail "branches $(branches) for $made copies"
# The job note: copy 1's next checkpoint continues exp-1.
"$CREST" --store "$S" --json checkpoint --pid "$(sed -n 's/^clone 1 of .*: pid \([0-9]*\),.*/\1/p' clone.out)" \
	>c1.json || fail "checkpoint of copy 1"
C1=$(python3 -c 'import json; print(json.load(open("c1.json"))["snapshot"])')
"$CREST" --store "$S" --json log exp-1 | grep -q "\"snapshot\": \"$C1\"" ||
	fail "copy 1's checkpoint $C1 is not on exp-1"
echo "ok: SIGINT after $made copies: each runs with its line, branch and note; exit 130"
kill -TERM "$RUN"
wait "$RUN" || true
echo "PASS clone_limits"
