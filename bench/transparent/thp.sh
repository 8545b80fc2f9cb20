#!/bin/bash
# Issue 36, item 1: the transparent stall and restore of one CUDA job with
# and without --huge-pages, beside the bare flow (driver lock + checkpoint,
# CRIU dump into /dev/shm, driver restore + unlock: crest-bare-ckpt) with the
# machine's transparent huge pages as they are and switched to "always", all
# in one run on one job of $GPU_MIB MiB of device memory (default 8192).
#
# Per round (ROUNDS, default 2; the order is reversed in every other round so
# that neither setting always goes first): bare, bare with "always", crest
# checkpoint, crest checkpoint --huge-pages. Each crest checkpoint returns only
# once its snapshot is stored, so no ingest runs under the next measurement.
# Then, on a fresh job each: crest checkpoint --kill, crest restore (timed),
# with and without --huge-pages on both; and the bare restore the issue holds
# crest's against (crest-bare-ckpt --kill, then --restore: criu restore from
# the images on /dev/shm, the driver's restore + unlock), with the machine's
# setting and with "always" for the restore.
#
# The bare flow with "always" sets the system setting itself (crest-bare-ckpt
# knows nothing of it) and puts the one it found back, on exit too. At the end
# the script checks that the setting is the one it found at the start: a
# crest that left it changed fails the run (exit 1).
#
# Run from the repository root with .gpu/ (scripts/gpu-check.sh --bundle,
# with crest-bare-ckpt and crest-workload-gpu) carried:
#   run(command='bash bench/transparent/thp.sh "$OUT/thp"', carry=[".gpu"])
# Prints a table and one JSON object a measurement (OUT/thp.jsonl).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${1:-/tmp/crest-thp-bench}
MIB=${GPU_MIB:-8192}
ROUNDS=${ROUNDS:-2}
THP=/sys/kernel/mm/transparent_hugepage/enabled
export CREST_INIT=1 CREST_CRIU=$ROOT/.gpu/criu/criu
RUN=$ROOT/.gpu/run
W=$ROOT/.gpu/bin/crest-workload-gpu
S=/tmp/crest-thp-store
mkdir -p "$OUT"
: >"$OUT/thp.jsonl"

# The setting in force: the word in brackets.
thp_now() { sed 's/.*\[\([a-z]*\)\].*/\1/' "$THP"; }
ORIG=$(thp_now)
trap 'echo "$ORIG" >"$THP"' EXIT

{
	date -u '+%Y-%m-%d %H:%M UTC'
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1
	echo "cpus $(nproc), $(free -g | awk '/Mem:/{print $2}') GiB RAM, kernel $(uname -r)"
	echo "transparent huge pages: $(cat $THP); defrag: $(cat /sys/kernel/mm/transparent_hugepage/defrag)"
	"$CREST_CRIU" --version | head -1
	"$RUN" crest --version | head -1
	echo "job: crest-workload-gpu --mib $MIB; rounds $ROUNDS"
} 2>&1 | tee "$OUT/machine.txt"

JOB=
job_start() {
	setsid "$W" --mib "$MIB" --interval-ms 1500 </dev/null >"$OUT/job.out" 2>&1 &
	JOB=$!
	until [ "$(wc -l <"$OUT/job.out")" -ge 1 ]; do sleep 0.1; done
}
job_stop() { kill -9 "$JOB" 2>/dev/null; wait "$JOB" 2>/dev/null; JOB=; }
# job_alive: the job printed another line since its round trip.
job_alive() {
	local n
	n=$(wc -l <"$OUT/job.out")
	timeout 20 sh -c "until [ \$(wc -l <'$OUT/job.out') -gt $n ]; do sleep 0.1; done"
}

# record KIND ROUND JSON: one line of thp.jsonl.
record() { echo "{\"kind\": \"$1\", \"round\": $2, \"result\": $3}" | tee -a "$OUT/thp.jsonl"; }

bare() {  # bare ROUND SETTING
	rm -rf /dev/shm/crest-thp-bare
	[ "$2" = asis ] || echo "$2" >"$THP"
	local j
	j=$("$RUN" crest-bare-ckpt "$JOB" /dev/shm/crest-thp-bare 2>"$OUT/bare.err")
	echo "$ORIG" >"$THP"
	rm -rf /dev/shm/crest-thp-bare
	[ -n "$j" ] || { echo "bare failed: $(tail -1 "$OUT/bare.err")"; exit 1; }
	record "bare_$2" "$1" "$j"
	job_alive || { echo "the job did not run on after the bare round trip"; exit 1; }
}

crest_ckpt() {  # crest_ckpt ROUND FLAG
	local j kind=crest
	[ -n "$2" ] && kind=crest_hp
	j=$("$RUN" crest --store "$S" --json checkpoint --pid "$JOB" $2 2>"$OUT/ckpt.err") \
		|| { echo "crest checkpoint $2 failed: $(tail -2 "$OUT/ckpt.err")"; exit 1; }
	record "$kind" "$1" "$j"
	[ "$(thp_now)" = "$ORIG" ] || { echo "after crest checkpoint $2 the setting is $(thp_now), not $ORIG"; exit 1; }
	job_alive || { echo "the job did not run on after crest checkpoint $2"; exit 1; }
}

rm -rf "$S"
job_start
for r in $(seq 1 "$ROUNDS"); do
	if [ $((r % 2)) = 1 ]; then
		bare "$r" asis; bare "$r" always; crest_ckpt "$r" ""; crest_ckpt "$r" --huge-pages
	else
		crest_ckpt "$r" --huge-pages; crest_ckpt "$r" ""; bare "$r" always; bare "$r" asis
	fi
done
job_stop

# Restores: a fresh job each, checkpointed with --kill, restored at once.
i=0
for flag in "" --huge-pages "" --huge-pages; do
	i=$((i + 1))
	job_start
	kind=restore
	[ -n "$flag" ] && kind=restore_hp
	"$RUN" crest --store "$S" --json checkpoint --pid "$JOB" --kill $flag --tag "r$i" >"$OUT/kill.json" \
		2>"$OUT/ckpt.err" || { echo "crest checkpoint --kill failed: $(tail -2 "$OUT/ckpt.err")"; exit 1; }
	wait "$JOB" 2>/dev/null
	j=$("$RUN" crest --store "$S" --json restore "r$i" $flag 2>"$OUT/restore.err") \
		|| { echo "crest restore $flag failed: $(tail -2 "$OUT/restore.err")"; exit 1; }
	record "$kind" 0 "$j"
	JOB=$(echo "$j" | python3 -c 'import json,sys; print(json.load(sys.stdin)["pid"])')
	[ "$(thp_now)" = "$ORIG" ] || { echo "after crest restore $flag the setting is $(thp_now), not $ORIG"; exit 1; }
	n=$(wc -l <"$OUT/job.out")
	timeout 20 sh -c "until [ \$(wc -l <'$OUT/job.out') -gt $n ]; do sleep 0.1; done" \
		|| { echo "the restored job printed nothing"; exit 1; }
	kill -9 "$JOB" 2>/dev/null
	sleep 1
done
# Bare restores: the same job dumped by criu alone (--kill), restored by criu
# and the driver alone, in the order asis, always, always, asis.
i=0
for setting in asis always always asis; do
	i=$((i + 1))
	job_start
	rm -rf /dev/shm/crest-thp-bare
	"$RUN" crest-bare-ckpt --kill "$JOB" /dev/shm/crest-thp-bare >"$OUT/bare-kill.json" 2>"$OUT/bare.err" ||
		{ echo "bare --kill failed: $(tail -1 "$OUT/bare.err")"; exit 1; }
	wait "$JOB" 2>/dev/null
	[ "$setting" = asis ] || echo "$setting" >"$THP"
	j=$("$RUN" crest-bare-ckpt --restore /dev/shm/crest-thp-bare 2>"$OUT/bare.err")
	echo "$ORIG" >"$THP"
	[ -n "$j" ] || { echo "bare restore failed: $(tail -1 "$OUT/bare.err")"; exit 1; }
	record "bare_restore_$setting" "$i" "$j"
	JOB=$(echo "$j" | python3 -c 'import json,sys; print(json.load(sys.stdin)["pid"])')
	n=$(wc -l <"$OUT/job.out")
	timeout 20 sh -c "until [ \$(wc -l <'$OUT/job.out') -gt $n ]; do sleep 0.1; done" \
		|| { echo "the bare-restored job printed nothing"; exit 1; }
	kill -9 "$JOB" 2>/dev/null
	rm -rf /dev/shm/crest-thp-bare
	sleep 1
done
rm -rf "$S"

python3 - "$OUT/thp.jsonl" <<'PY'
import json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(kind, key):
    v = [r["result"][key] for r in rows if r["kind"] == kind and key in r["result"]]
    return (st.median(v), v) if v else (float("nan"), [])
print("%-14s %-26s %s" % ("kind", "key", "median (each)"))
for kind, keys in (("bare_asis", ("stall_seconds", "checkpoint_seconds", "criu_dump_seconds", "restore_unlock_seconds")),
                   ("bare_always", ("stall_seconds", "checkpoint_seconds", "criu_dump_seconds", "restore_unlock_seconds")),
                   ("crest", ("stall_seconds", "gpu_checkpoint_seconds", "criu_dump_seconds", "gpu_resume_seconds")),
                   ("crest_hp", ("stall_seconds", "gpu_checkpoint_seconds", "criu_dump_seconds", "gpu_resume_seconds")),
                   ("restore", ("seconds", "stream_seconds", "criu_seconds", "gpu_seconds")),
                   ("restore_hp", ("seconds", "stream_seconds", "criu_seconds", "gpu_seconds")),
                   ("bare_restore_asis", ("restore_seconds", "criu_restore_seconds", "driver_restore_unlock_seconds")),
                   ("bare_restore_always", ("restore_seconds", "criu_restore_seconds", "driver_restore_unlock_seconds"))):
    for k in keys:
        m, v = med(kind, k)
        print("%-14s %-26s %.3f (%s)" % (kind, k, m, " ".join("%.3f" % x for x in v)))
b = med("bare_asis", "stall_seconds")[0]
for kind in ("bare_always", "crest", "crest_hp"):
    print("ratio %s / bare_asis stall: %.3f" % (kind, med(kind, "stall_seconds")[0] / b))
print("ratio restore_hp / restore: %.3f" % (med("restore_hp", "seconds")[0] / med("restore", "seconds")[0]))
br = med("bare_restore_asis", "restore_seconds")[0]
for kind in ("restore", "restore_hp"):
    print("ratio %s / bare_restore_asis: %.3f" % (kind, med(kind, "seconds")[0] / br))
print("ratio bare_restore_always / bare_restore_asis: %.3f" % (med("bare_restore_always", "restore_seconds")[0] / br))
PY
echo "thp.sh: setting at the end: $(thp_now) (at the start: $ORIG)"
