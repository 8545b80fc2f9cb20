#!/bin/bash
# dump_stream.sh - issue 36, item 2, measured before anything is built: CRIU's
# dump of one job into tmpfs (what crest does today) beside the same dump
# streamed to a process (`criu dump --stream`, CRIU's image streamer), on the
# same job in one run, rounds alternated.
#
#   bash bench/transparent/dump_stream.sh [MIB] [ROUNDS] [THREADS]
#
# The job: crest-workload --mib MIB (default 4096), MIB of random anonymous
# memory, 2% of it rewritten every 100 ms; on the GPU machine a CUDA job's
# driver staging is the same kind of memory, dumped the same way. Each round,
# in this order, `criu dump --leave-running` of the running job:
#   files  into a fresh directory on /dev/shm (today's flow; the images stay on
#          tmpfs until the engine has stored them);
#   drop   --stream into bench/transparent/dump_sink.c reading and dropping:
#          the pipe's own ceiling;
#   mem    --stream, every image read into fresh memory of the sink's: what
#          crest would hold when the stall ends with the engine not yet run;
#   hash   --stream, read through a ring of 4 MiB windows (256 MiB in all),
#          each 4 KiB chunk hashed with SHA-256 by THREADS threads (default
#          the CPUs less one) while CRIU dumps: the engine's chunking and
#          hashing overlapped with the dump, nothing of the images kept.
# The dump's wall time is the stall's CRIU phase; "done" (hash) is when the
# last chunk is hashed. Ratios are each mode's median over files' median.
# Needs root and criu 4.x (.deps/criu/criu, or CREST_CRIU; .gpu/criu/criu in
# a bundle); binaries from build/ (BUILD), else from a bundle's .gpu/.
# Prints one line a dump and a table; JSON lines in $OUT/dump_stream.jsonl
# when OUT is set.
set -euo pipefail
MIB=${1:-4096}
ROUNDS=${2:-3}
THREADS=${3:-$(($(nproc) > 1 ? $(nproc) - 1 : 1))}
cd "$(dirname "$0")/../.."
ROOT=$PWD
B=${BUILD:-build}
if [ ! -x "$B/bench/transparent/crest-dump-sink" ] && [ -x .gpu/run ]; then
	WL=("$ROOT/.gpu/run" crest-workload) SINK=("$ROOT/.gpu/run" crest-dump-sink)
	CRIU=${CREST_CRIU:-$ROOT/.gpu/criu/criu}
	commit=$(cat .gpu/COMMIT 2>/dev/null || echo '?')
else
	WL=("$ROOT/$B/cli/crest-workload") SINK=("$ROOT/$B/bench/transparent/crest-dump-sink")
	CRIU=${CREST_CRIU:-$ROOT/.deps/criu/criu}
	commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!bench' || echo '+')
fi
[ -x "$CRIU" ] || { echo "dump_stream: no criu at $CRIU (scripts/install-criu.sh)" >&2; exit 1; }
W=$(mktemp -d /tmp/crest-dump-stream.XXXXXX)
F=/dev/shm/crest-dump-stream.$$
JL=${OUT:+$OUT/dump_stream.jsonl}
JL=${JL:-$W/dump_stream.jsonl}
: >"$JL"
wpid=
cleanup() {
	[ -z "$wpid" ] || kill "$wpid" 2>/dev/null || true   # set -e: a job already gone must not stop the removal
	rm -rf "$W" "$F"
}
trap cleanup EXIT
echo "dump_stream: $(date -u '+%F %H:%M') UTC, $(nproc) cpus, $(uname -r), $("$CRIU" --version | head -1)," \
	"commit $commit, $MIB MiB job, $ROUNDS rounds, $THREADS hash threads"
setsid "${WL[@]}" --mib "$MIB" --interval-ms 100 </dev/null >"$W/job.out" 2>&1 &
wpid=$!
# Its second line: past the start, whose fill threads are gone by then.
for _ in $(seq 600); do [ "$(wc -l <"$W/job.out")" -ge 2 ] && break; sleep 0.1; done
[ "$(wc -l <"$W/job.out")" -ge 2 ] || { echo "dump_stream: the job never started" >&2; exit 1; }

now() { date +%s.%N; }
for r in $(seq "$ROUNDS"); do
	for m in files drop mem hash; do
		rm -rf "$F" "$W/img"
		mkdir -p "$F" "$W/img"
		if [ "$m" = files ]; then
			t0=$(now)
			"$CRIU" dump -t "$wpid" -D "$F" --leave-running --shell-job -o dump.log ||
				{ tail -5 "$F/dump.log" >&2; exit 1; }
			t1=$(now)
			bytes=$(du -sb "$F" | cut -f1)
			extra="\"images_on_tmpfs\": $bytes"
		else
			"${SINK[@]}" "$W/img" "$m" "$THREADS" >"$W/sink.out" &
			spid=$!
			for _ in $(seq 200); do grep -q listening "$W/sink.out" && break; sleep 0.05; done
			t0=$(now)
			"$CRIU" dump -t "$wpid" -D "$W/img" --stream --leave-running --shell-job -o dump.log ||
				{ tail -5 "$W/img/dump.log" >&2; kill "$spid"; exit 1; }
			t1=$(now)
			wait "$spid"
			extra=$(tail -1 "$W/sink.out" | sed 's/^{//; s/}$//')
		fi
		kill -0 "$wpid" || { echo "dump_stream: the job died after the $m dump" >&2; exit 1; }
		dump=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
		echo "{\"round\": $r, \"how\": \"$m\", \"dump_s\": $dump, $extra}" >>"$JL"
		printf 'round %d %-5s dump %6.3f s\n' "$r" "$m" "$dump"
	done
done
python3 - "$JL" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = lambda m, k: statistics.median(r[k] for r in rows if r["how"] == m)
base = med("files", "dump_s")
print(f"{'how':6} {'dump (median)':>14} {'/ files':>8} {'done (median)':>14}")
for m in ("files", "drop", "mem", "hash"):
    d = med(m, "dump_s")
    done = f"{med(m, 'done_s'):.3f} s" if m == "hash" else ""
    print(f"{m:6} {d:12.3f} s {d / base:8.3f} {done:>14}")
gb = statistics.median(r["images_on_tmpfs"] for r in rows if r["how"] == "files") / 1e9
print(f"images {gb:.2f} GB; files leaves them on tmpfs, hash holds 0.27 GB (its ring)")
PY
