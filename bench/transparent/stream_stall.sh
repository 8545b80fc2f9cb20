#!/bin/bash
# Issue 36, item 2: the transparent stall with CRIU's images streamed into
# the engine (the default) beside the same checkpoint staged on tmpfs
# and beside the bare flow (driver lock + checkpoint, CRIU dump into
# /dev/shm, driver restore + unlock: crest-bare-ckpt), one CUDA job of
# $GPU_MIB MiB of device memory (default 8192), all in one run.
#
# Per round (ROUNDS, default 3; the order reversed in every other round):
# bare, crest --huge-pages --stage-images, crest --huge-pages, crest
# --stage-images, crest (kinds crest_hp, crest_hp_stream, crest,
# crest_stream). Each kind of crest checkpoint has a store of its
# own, so that its round 1 is a first checkpoint (everything new) and the
# later rounds are incremental ones; each returns only once its snapshot
# is stored, so no ingest runs under the next measurement. A store lives
# on /dev/shm (STORE_DIR to move it), as in thp.sh; the streamed kinds'
# ingest then runs as the dump does, the staged kinds' after it.
#
# Run from the repository root with .gpu/ (scripts/gpu-check.sh --bundle)
# carried:
#   run(command='bash bench/transparent/stream_stall.sh "$OUT/ss"', carry=[".gpu"])
# Prints one JSON line a measurement (OUT/stream_stall.jsonl) and a table.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${1:-/tmp/crest-stream-stall}
MIB=${GPU_MIB:-8192}
ROUNDS=${ROUNDS:-3}
SD=${STORE_DIR:-/dev/shm}
export CREST_INIT=1 CREST_CRIU=$ROOT/.gpu/criu/criu
RUN=$ROOT/.gpu/run
W=$ROOT/.gpu/bin/crest-workload-gpu
mkdir -p "$OUT"
: >"$OUT/stream_stall.jsonl"
{
	date -u '+%Y-%m-%d %H:%M UTC'
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1
	echo "cpus $(nproc), $(free -g | awk '/Mem:/{print $2}') GiB RAM, kernel $(uname -r)"
	echo "transparent huge pages: $(cat /sys/kernel/mm/transparent_hugepage/enabled)"
	"$CREST_CRIU" --version | head -1
	"$RUN" crest --version | head -1
	echo "job: crest-workload-gpu --mib $MIB; rounds $ROUNDS; stores in $SD"
} 2>&1 | tee "$OUT/machine.txt"

setsid "$W" --mib "$MIB" --interval-ms 1500 </dev/null >"$OUT/job.out" 2>&1 &
JOB=$!
trap 'kill -9 $JOB 2>/dev/null; rm -rf "$SD"/crest-ss-* /dev/shm/crest-ss-bare' EXIT
until [ "$(wc -l <"$OUT/job.out")" -ge 1 ]; do sleep 0.1; done
job_alive() {
	local n
	n=$(wc -l <"$OUT/job.out")
	timeout 20 sh -c "until [ \$(wc -l <'$OUT/job.out') -gt $n ]; do sleep 0.1; done"
}
record() { echo "{\"kind\": \"$1\", \"round\": $2, \"result\": $3}" | tee -a "$OUT/stream_stall.jsonl"; }
one() {  # one ROUND KIND
	local j
	case $2 in
	bare)
		rm -rf /dev/shm/crest-ss-bare
		j=$("$RUN" crest-bare-ckpt "$JOB" /dev/shm/crest-ss-bare 2>"$OUT/err") || j=
		rm -rf /dev/shm/crest-ss-bare ;;
	*)
		local flags=
		case $2 in *hp*) flags="--huge-pages" ;; esac
		case $2 in *stream*) ;; *) flags="$flags --stage-images" ;; esac
		j=$("$RUN" crest --store "$SD/crest-ss-$2" --json checkpoint --pid "$JOB" $flags 2>"$OUT/err") || j= ;;
	esac
	[ -n "$j" ] || { echo "$2 failed in round $1: $(tail -2 "$OUT/err")"; exit 1; }
	record "$2" "$1" "$j"
	job_alive || { echo "the job did not run on after $2"; exit 1; }
}
KINDS="bare crest_hp crest_hp_stream crest crest_stream"
for r in $(seq 1 "$ROUNDS"); do
	ks=$KINDS
	[ $((r % 2)) = 0 ] && ks=$(echo "$KINDS" | tr ' ' '\n' | tac | tr '\n' ' ')
	for k in $ks; do one "$r" "$k"; done
done

python3 - "$OUT/stream_stall.jsonl" <<'PY'
import json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def vals(kind, key, first=None):
    return [r["result"][key] for r in rows if r["kind"] == kind and key in r["result"]
            and (first is None or (r["round"] == 1) == first)]
keys = {"bare": ("stall_seconds", "checkpoint_seconds", "criu_dump_seconds", "restore_unlock_seconds")}
ck = ("stall_seconds", "gpu_checkpoint_seconds", "criu_dump_seconds", "gpu_resume_seconds", "ingest_seconds", "new_bytes")
print("%-16s %-24s %-10s %s" % ("kind", "key", "median", "each (round 1 first)"))
for kind in ("bare", "crest_hp", "crest_hp_stream", "crest", "crest_stream"):
    for k in keys.get(kind, ck):
        v = vals(kind, k)
        if v:
            print("%-16s %-24s %-10.3f %s" % (kind, k, st.median(v), " ".join("%.3f" % x for x in v)))
b = st.median(vals("bare", "stall_seconds"))
for kind in ("crest_hp", "crest_hp_stream", "crest", "crest_stream"):
    f, l = vals(kind, "stall_seconds", True), vals(kind, "stall_seconds", False)
    print("ratio %s / bare stall: first %.3f, later %.3f (median of %d)" %
          (kind, f[0] / b if f else float("nan"), st.median(l) / b if l else float("nan"), len(l)))
for a, s in (("crest_hp", "crest_hp_stream"), ("crest", "crest_stream")):
    for key in ("stall_seconds", "criu_dump_seconds", "ingest_seconds"):
        x, y = vals(a, key, False), vals(s, key, False)
        if x and y:
            print("ratio %s / %s %s, later: %.3f" % (s, a, key, st.median(y) / st.median(x)))
PY
