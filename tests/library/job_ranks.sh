#!/bin/bash
# Issue 34: job snapshots of N host-memory ranks, each its own process and
# libcrest handle on one store (job_ranks.c). Randomized (world size, steps,
# which rank dies and when; the seed is printed, CREST_TEST_SEED replays):
#  1. every step of a job whose ranks all finish has one job snapshot,
#     committed by exactly one rank, naming WORLD rank snapshots; each rank
#     restores its own part of any of them bit-exact, in a new process,
#     by the newest (no name) or by id; a job of another world size is
#     refused and so is a plain crest_restore of a job snapshot;
#  2. the replica (the same "model" bytes in every rank) is stored once:
#     unique bytes stay within 1.1 x one replica plus the shards per step;
#  3. gc --keep-last 2 keeps the newest 2 job snapshots whole (every rank
#     restores them), the older ones are gone, and verify passes;
#  4. kill -9 of one rank in the middle of a job checkpoint (its ingest in
#     flight): no job snapshot of that step or later is listed, every
#     earlier one restores, and the siblings' snapshots show as partial.
set -euo pipefail
JOB_RANKS=${1:?usage: job_ranks.sh JOB_RANKS CREST CASCTL STORE_DIR}
CREST=${2:?}
CASCTL=${3:?}
S=${4:?}
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1}
rm -rf "$S"
mkdir -p "$S.tmp"
T=$S.tmp
export CREST_STORE=$S CREST_INIT=1

fail() { echo "FAIL: $*" >&2; exit 1; }

seed=${CREST_TEST_SEED:-$(( $(date +%s) % 100000 + $$ ))}
# bash's RANDOM from nearby seeds starts alike: mix the seed first.
RANDOM=$(( ((seed * 6364136223846793005 + 1442695040888963407) >> 33) & 0x7fffffff ))
world=$(( 2 + RANDOM % 3 ))
steps=$(( 3 + RANDOM % 3 ))
echo "random seed $seed (CREST_TEST_SEED=$seed replays it): $world ranks, $steps steps"

# job_ls NAME: the job snapshots of job NAME, one line each: "ID STEP WORLD".
job_ls() {
	"$CREST" --json job ls "$1" | /usr/bin/python3 -c '
import json, sys
for j in json.load(sys.stdin):
    print(j["snapshot"], j["step"], j["world"])'
}

# run_job NAME ATTEMPT STEPS [RANK DIE_AT]: all ranks at once, each its own process.
run_job() {
	local name=$1 attempt=$2 n=$3 die_rank=${4:--1} die_at=${5:-0} pids=() r rc
	for r in $(seq 0 $((world - 1))); do
		if [ "$r" -eq "$die_rank" ]; then
			"$JOB_RANKS" rank "$S" "$name" "$attempt" "$r" "$world" "$n" "$seed" "$die_at" >"$T/$name.$r.out" 2>&1 &
		else
			"$JOB_RANKS" rank "$S" "$name" "$attempt" "$r" "$world" "$n" "$seed" >"$T/$name.$r.out" 2>&1 &
		fi
		pids+=($!)
	done
	for r in $(seq 0 $((world - 1))); do
		rc=0
		wait "${pids[$r]}" || rc=$?
		if [ "$r" -eq "$die_rank" ]; then
			[ $rc -eq 137 ] || { cat "$T/$name.$r.out" >&2; fail "rank $r of $name: rc $rc, expected its kill (137)"; }
		else
			[ $rc -eq 0 ] || { cat "$T/$name.$r.out" >&2; fail "rank $r of $name: rc $rc"; }
		fi
	done
}

# restore_rank NAME RANK WORLD STEP [SNAPSHOT]: a new process of rank RANK.
restore_rank() {
	"$JOB_RANKS" restore "$S" "$1" "$2" "$3" "$4" "$seed" ${5:+"$5"} >"$T/restore.out" 2>&1
}

# 1. a whole job
run_job train a "$steps"
job_ls train >"$T/jobs"
n=$(wc -l <"$T/jobs")
[ "$n" -eq "$steps" ] || { cat "$T/jobs" >&2; fail "$n job snapshots of train listed, expected $steps"; }
for s in $(seq 1 "$steps"); do
	c=$(cat "$T"/train.*.out | grep -c "^step $s committed" || true)
	[ "$c" -ge 1 ] || fail "step $s: no rank says it committed the job snapshot"
	id=$(awk -v s="$s" '$2 == s { print $1 }' "$T/jobs")
	[ -n "$id" ] || fail "no job snapshot of step $s in: $(cat "$T/jobs")"
	# Every rank that says it committed names the one job snapshot listed.
	for x in $(cat "$T"/train.*.out | sed -n "s/^step $s committed //p"); do
		[ "$x" = "$id" ] || fail "step $s: a rank committed $x, the listing has $id"
	done
	w=$(awk -v s="$s" '$2 == s { print $3 }' "$T/jobs")
	[ "$w" -eq "$world" ] || fail "job snapshot of step $s has world $w, expected $world"
done
for r in $(seq 0 $((world - 1))); do
	restore_rank train "$r" "$world" "$steps" || { cat "$T/restore.out" >&2; fail "rank $r: restore of the newest"; }
	s=$(( 1 + RANDOM % steps ))
	id=$(awk -v s="$s" '$2 == s { print $1 }' "$T/jobs")
	restore_rank train "$r" "$world" "$s" "$id" || { cat "$T/restore.out" >&2; fail "rank $r: restore of step $s ($id)"; }
done
echo "   $world ranks x $steps steps: $steps job snapshots, every rank restores its part of each bit-exact"
rc=0
restore_rank train 0 $((world + 1)) "$steps" || rc=$?
[ $rc -eq 3 ] && grep -q "has $world ranks; this job has $((world + 1))" "$T/restore.out" ||
	fail "a job of another world size: rc $rc, $(cat "$T/restore.out")"
echo "   refused: $(sed 's/^error -[0-9]*: //' "$T/restore.out")"

# 2. the replica stored once
ub=$("$CASCTL" --json stats | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["unique_bytes"])')
model=$((1 << 20)) shard=$(( (256 << 10) + 4093 ))
bound=$(( steps * (model * 11 / 10 + world * shard) ))
[ "$ub" -le "$bound" ] || fail "unique bytes $ub > $bound: the replica is not stored once per step"
echo "   unique bytes $ub for $steps steps of $world replicas of 1 MiB and $world shards (bound $bound; stored $world times it would be $(( steps * world * (model + shard) )))"

# 3. gc keeps job snapshots whole
"$CASCTL" gc --keep-last 2 >"$T/gc.out" 2>&1 || { cat "$T/gc.out" >&2; fail "casctl gc --keep-last 2"; }
"$CASCTL" --quiet verify >"$T/v.out" 2>&1 || { cat "$T/v.out" >&2; fail "verify after gc"; }
cp "$T/jobs" "$T/jobs.before"
job_ls train >"$T/jobs"
kept=$(wc -l <"$T/jobs")
[ "$kept" -eq 2 ] || fail "gc --keep-last 2 kept $kept job snapshots of train: $(cat "$T/jobs")"
[ "$(cut -d' ' -f2 "$T/jobs" | sort -n | tr '\n' ' ')" = "$((steps - 1)) $steps " ] ||
	fail "gc kept the job snapshots of steps $(cut -d' ' -f2 "$T/jobs" | tr '\n' ' '), not the newest 2"
old=$(awk '$2 == 1 { print $1 }' "$T/jobs.before")
rc=0
restore_rank train 0 "$world" 1 "$old" || rc=$?
[ $rc -eq 3 ] || fail "the job snapshot of step 1 ($old) still restores after gc --keep-last 2"
while read -r id s w; do
	for r in $(seq 0 $((world - 1))); do
		restore_rank train "$r" "$world" "$s" "$id" || { cat "$T/restore.out" >&2; fail "after gc: rank $r, step $s"; }
	done
done <"$T/jobs"
echo "   gc --keep-last 2: $kept job snapshots of train kept, each whole; verify passes"
# 4. kill -9 of one rank in the middle of a job checkpoint
die_rank=$(( RANDOM % world ))
die_at=$(( 2 + RANDOM % (steps - 1) ))
run_job crash a "$steps" "$die_rank" "$die_at"
job_ls crash >"$T/jobs"
n=$(wc -l <"$T/jobs")
[ "$n" -eq $((die_at - 1)) ] || { cat "$T/jobs" >&2; fail "rank $die_rank killed at step $die_at: $n job snapshots listed, expected $((die_at - 1))"; }
awk -v d="$die_at" '$2 >= d { exit 1 }' "$T/jobs" || fail "a job snapshot of step $die_at or later is listed: $(cat "$T/jobs")"
for s in $(seq 1 $((die_at - 1))); do
	id=$(awk -v s="$s" '$2 == s { print $1 }' "$T/jobs")
	for r in $(seq 0 $((world - 1))); do
		restore_rank crash "$r" "$world" "$s" "$id" || { cat "$T/restore.out" >&2; fail "crash: rank $r, step $s"; }
	done
done
"$CREST" ls >"$T/ls"
grep -q partial "$T/ls" || fail "the killed job's siblings are not shown as partial: $(cat "$T/ls")"
echo "   rank $die_rank killed at step $die_at: $((die_at - 1)) job snapshots, each restores; siblings partial"

rm -rf "$S" "$T"
echo PASS
