# Issue 12: `crest clone --count 2` runs two copies of a `crest run`
# snapshot beside the original, each in its own pid namespace and with its
# own copy of the job's files (FILE.clone-N by default): no two write one
# file, and each copy's log equals an uninterrupted run's. Branches NEW-1
# and NEW-2 start at the snapshot; a taken branch, and a snapshot of a job
# not started by crest run, are refused before anything runs.
source "$(dirname "$0")/lib.sh"
need_root
cd "$T"
"$CREST" --store "$S" run --every 1s -- "$WORKLOAD" --mib 32 --interval-ms 100 --log "$T/job.log" \
	</dev/null >job.out 2>run.err &
RUN=$!
PIDS+=("$RUN")
wait_run run.err
"$CREST" --store "$S" clone "$SNAP" --branch exp --count 2 >clone.out || fail "clone: $(cat clone.out)"
cat clone.out
P1=$(sed -n 's/^clone 1 of .*: pid \([0-9]*\), branch exp-1$/\1/p' clone.out)
P2=$(sed -n 's/^clone 2 of .*: pid \([0-9]*\), branch exp-2$/\1/p' clone.out)
[ -n "$P1" ] && [ -n "$P2" ] || fail "clone did not print two pids on branches exp-1 and exp-2"
PIDS+=("$P1" "$P2")
[ "$(readlink /proc/"$P1"/ns/pid)" != "$(readlink /proc/"$P2"/ns/pid)" ] || fail "the copies share a pid namespace"
[ "$(readlink /proc/"$P1"/fd/1)" = "$T/job.out.clone-1" ] || fail "copy 1 writes $(readlink /proc/"$P1"/fd/1)"
for k in 1 2; do
	wait_lines job.log.clone-$k $(($(lines job.log.clone-$k) + 5)) 30
done
expect_error "has snapshots already" "$CREST" --store "$S" clone "$SNAP" --branch exp-1
# A copy's checkpoint continues its own branch, from the snapshot it was
# cloned from, and stores only what the copy changed since.
FORK=$("$CREST" --store "$S" --json branch | python3 -c 'import json,sys
print([x for x in json.load(sys.stdin) if x["branch"] == "exp-1"][0]["head"])') || fail "no branch exp-1 listed"
"$CREST" --store "$S" --json checkpoint --pid "$P1" >c1.json || fail "checkpoint of copy 1: $(cat c1.json)"
python3 - "$S" "$CREST" "$FORK" <<'PY' || fail "copy 1's checkpoint is not on its branch, or shares too little"
import json, subprocess, sys
store, crest, fork = sys.argv[1:]
c = json.load(open("c1.json"))
log = json.loads(subprocess.check_output([crest, "--store", store, "--json", "log", "exp-1"]))
head = [s for s in log if s["snapshot"] == c["snapshot"]]
assert head and head[0]["branch"] == "exp-1", "not on exp-1: %s" % head
assert head[0]["parent"] == fork, "parent %s, not the fork %s" % (head[0]["parent"], fork)
assert c["new_bytes"] * 4 < c["logical_bytes"], "new %d of %d bytes" % (c["new_bytes"], c["logical_bytes"])
print("copy 1's checkpoint %s: on exp-1 after the fork, %d new bytes of %d" % (c["snapshot"][:12], c["new_bytes"], c["logical_bytes"]))
PY
# The copy's own snapshot comes back in place once the copy has ended: its
# files were handed to it by crest (dumped as external now), and it had a
# network namespace of its own (named external, a fresh one on restore).
C1=$(python3 -c 'import json; print(json.load(open("c1.json"))["snapshot"])')
kill -9 "$P1"
deadline=$((SECONDS + 10))
while [ -e /proc/"$P1" ]; do
	[ $SECONDS -lt $deadline ] || fail "copy 1 (pid $P1) was not reaped within 10 s of SIGKILL"
	sleep 0.05
done
"$CREST" --store "$S" restore "$C1" >r1.out || fail "restore of copy 1's snapshot in place: $(cat r1.out)"
P1=$(sed -n 's/^restored .*: pid \([0-9]*\) running again.*/\1/p' r1.out)
[ -n "$P1" ] || { cat r1.out >&2; fail "restore printed no pid"; }
PIDS+=("$P1")
[ "$(readlink /proc/"$P1"/ns/net)" != "$(readlink /proc/self/ns/net)" ] || fail "restored copy 1 is in the host's network namespace"
wait_lines job.log.clone-1 $(($(lines job.log.clone-1) + 5)) 30
echo "ok: copy 1's snapshot restored in place (pid $P1) and went on"
# A job crest run did not start: no namespace of its own, no copy.
setsid "$WORKLOAD" --mib 8 --interval-ms 100 </dev/null >plain.out 2>&1 &
PLAIN=$!
PIDS+=("$PLAIN")
wait_lines plain.out 2
"$CREST" --store "$S" --quiet checkpoint --pid "$PLAIN" --tag plain >/dev/null || fail "checkpoint of a plain job"
expect_error "not started by crest run" "$CREST" --store "$S" clone plain --branch p
kill -9 "$P1" "$P2" "$PLAIN"
kill -TERM "$RUN"
wait "$RUN" || true
for f in job.log job.log.clone-1 job.log.clone-2 job.out.clone-2; do
	n=$(lines "$f")
	"$WORKLOAD" --mib 32 --interval-ms 0 --steps "$n" | cmp - <(head -n "$n" "$f") ||
		fail "$f is not the uninterrupted run's"
done
echo "PASS: two copies beside the original, $(lines job.log.clone-1) and $(lines job.log.clone-2) lines, identical to an uninterrupted run"
