#!/bin/bash
# Issue 9, item 7: `crest checkpoint` killed with -9 in the middle of its
# checkpoint used to leave CRIU's images on /dev/shm for good (74
# directories, 4.5 GB of RAM after 46 kills). Now the next checkpoint
# removes the images of every crest that is gone; afterwards none of this
# job's image directories is left.
source "$(dirname "$0")/lib.sh"
need_root
cd "$T"
leak_setup

start_job job.out --mib "$mib" --interval-ms 50
wait_lines job.out 1
shm() { ls /dev/shm | grep "^crest-ckpt-$JOB-" || true; }

t0=$(date +%s%N)
"$CREST" --store "$S" --quiet checkpoint --pid "$JOB" >/dev/null || fail "a first checkpoint failed"
full_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
echo "one checkpoint of a $mib MiB job takes $full_ms ms; kills fall in 0 to $full_ms ms"
[ -z "$(shm)" ] || fail "a finished checkpoint left $(shm)"

# criu goes on with its dump after crest is killed; the next one must wait
# for it (two dumps of one process cannot run at once).
criu_gone() {
	local deadline=$((SECONDS + 60))
	while pgrep -f "crest-ckpt-$JOB-" >/dev/null; do
		[ $SECONDS -lt $deadline ] || fail "criu of a killed checkpoint still runs after 60 s"
		sleep 0.05
	done
}
most=0
for i in $(seq 1 "$kills"); do
	kill_at_random "$full_ms" "$CREST" --store "$S" --quiet checkpoint --pid "$JOB"
	criu_gone
	left=$(shm | grep -vc '\.' || true)
	echo "kill $i after $delay ms: $left image directories of pid $JOB on /dev/shm"
	[ "$left" -gt "$most" ] && most=$left
done
kill -0 "$JOB" || fail "the job died"

"$CREST" --store "$S" --quiet checkpoint --pid "$JOB" >/dev/null || fail "the checkpoint after the kills failed"
echo "after the next checkpoint: $(shm | wc -l) entries of pid $JOB on /dev/shm ($most directories before it)"
[ -z "$(shm)" ] || { shm >&2; fail "images of killed checkpoints left on /dev/shm"; }
[ "$most" -gt 0 ] || fail "no kill landed while images were on /dev/shm (seed $seed): nothing was shown"
"$CASCTL" --store "$S" --quiet verify || fail "casctl verify"
echo PASS
