#!/bin/sh
# job_bench.sh [MODEL_MIB] [SHARD_MIB] [STEPS] [PCT] [WORK] - issue 34's
# measurement of job checkpoints: one rank alone beside 2 and 4 ranks at
# once, in one run, on the same data sizes and the same store layout.
# Each configuration is job_bench (bench/library/job_bench.c) on a fresh
# store WORK/wN/store (WORK: /tmp/crest-job-bench, on disk, not tmpfs):
# WORLD rank processes, each with a MODEL_MIB (256) "model" region equal
# in every rank and a SHARD_MIB (32) "shard" of its own, STEPS (4) steps,
# PCT (5) percent of the 4 KiB chunks of both rewritten before each step
# after the first. Prints each configuration's per-step table and RESULT
# lines, casctl stats and verify of its store, and then the ratios of
# N ranks to one: stall (time inside crest_job_checkpoint, median and max
# over ranks and steps), time from a step's first checkpoint call to its
# job snapshot's commit, crest_job_wait per rank, and the store's unique
# bytes over one replica plus the shards. Step 1 (everything new) and
# steps 2..STEPS (PCT changed) apart.
# BUILD (./build) names the build with job_bench and casctl.
set -u
model=${1:-256}
shard=${2:-32}
steps=${3:-4}
pct=${4:-5}
work=${5:-/tmp/crest-job-bench}
build=${BUILD:-build}
bench=$build/bench/library/job_bench
casctl=$build/cli/casctl
for w in 1 2 4; do
	d=$work/w$w
	rm -rf "$d" && mkdir -p "$d/out"
	sync   # the last configuration's pack writes are not this one's
	"$bench" "$d/store" "$d/out" "$w" "$steps" "$model" "$shard" "$pct" >"$d/bench.log" 2>&1
	echo "== world $w: job_bench exit $?"
	cat "$d/bench.log"
	for f in "$d"/out/rank-*.err; do
		[ -s "$f" ] && sed "s|^|$(basename "$f" .err): |" "$f"
	done
	"$casctl" --store "$d/store" stats --json >"$d/stats.json"
	echo "stats: $(cat "$d/stats.json")"
	echo "verify: $("$casctl" --store "$d/store" verify 2>&1 | tail -1)"
done
# The ratios, from the logs just written.
awk -v work="$work" 'function val(w, phase, key,   f, line, n, a, i, kv) {
		f = work "/w" w "/bench.log"
		while ((getline line < f) > 0) {
			if (line !~ /^RESULT / || (phase != "" && line !~ ("phase=" phase " ")))
				continue
			n = split(line, a, " ")
			for (i = 2; i <= n; i++) {
				split(a[i], kv, "=")
				if (kv[1] == key) { close(f); return kv[2] }
			}
		}
		close(f)
		return ""
	}
	function stat(w, key,   f, line, re) {
		f = work "/w" w "/stats.json"
		getline line < f
		close(f)
		re = "\"" key "\": [0-9.]+"
		if (match(line, re))
			return substr(line, RSTART + length(key) + 4, RLENGTH - length(key) - 4)
		return ""
	}
	BEGIN {
		printf "%-6s %-6s %10s %10s %10s %10s %10s %10s %10s\n", "world", "phase", "stall_med", "stall_max",
			"wait_med", "wait_max", "job_s", "stall/1", "job/1"
		for (wi = 1; wi <= 3; wi++) {
			w = wi == 1 ? 1 : (wi == 2 ? 2 : 4)
			for (pi = 1; pi <= 2; pi++) {
				p = pi == 1 ? "first" : "incr"
				sm = val(w, p, "stall_med_s"); sx = val(w, p, "stall_max_s")
				wm = val(w, p, "wait_med_s"); wx = val(w, p, "wait_max_s"); j = val(w, p, "job_s")
				if (sm == "") continue
				printf "%-6s %-6s %10.4f %10.4f %10.4f %10.4f %10.4f %10.2f %10.2f\n", w, p, sm, sx, wm, wx, j,
					sm / val(1, p, "stall_med_s"), j / val(1, p, "job_s")
				printf "RESULT ratio world=%s phase=%s stall_med_over_1=%.3f stall_max_over_1=%.3f " \
					"job_over_1=%.3f wait_med_over_1=%.3f\n", w, p, sm / val(1, p, "stall_med_s"),
					sx / val(1, p, "stall_max_s"), j / val(1, p, "job_s"), wm / val(1, p, "wait_med_s")
			}
			u = stat(w, "unique_bytes"); l = stat(w, "logical_bytes")
			b = val(w, "", "replica_plus_shards"); dd = val(w, "", "distinct_bytes")
			printf "RESULT store world=%s unique_bytes=%s logical_bytes=%s replica_plus_shards=%s " \
				"distinct_written=%s unique_over_replica_plus_shards=%.3f unique_over_distinct=%.3f\n",
				w, u, l, b, dd, u / b, u / dd
		}
	}'
