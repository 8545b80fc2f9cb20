#!/bin/bash
# Issue 13's restore benchmark, drawn: `crest bench restore --repeat 3 --json`
# to each target this machine has (null, files, host; gpu is the device
# machine's, scripts/gpu-check.sh), page cache warm and --cold, in one run,
# on two snapshots:
#   memory:  SIZE of memory-like data (store_tool memory: ~25% zero pages,
#            ~35% random, ~40% structured records) put with crest put;
#   process: the checkpoint of `crest demo --cpu --checkpoints 1` (its 512 MiB
#            sample job; needs root and criu; left out when demo fails).
# crest's GB/s (logical bytes over wall time), the ceiling measured in the
# same run (a plain parallel read of the same pack bytes, as logical bytes
# over its time) and their ratio go into one PNG and the JSON it was drawn
# from, PLOTS/NAME.png and .json (default bench/plots/restore-targets), and
# a markdown table on stdout. Run as root: --cold drops the store's pack
# pages from the page cache (posix_fadvise), which a store one cannot write
# to may refuse.
# Usage: bench/restore/restore.sh [--size SIZE] [--store DIR] [--name NAME]
#   --size   memory-like data to put (default 1G)
#   --store  use DIR's newest files and process snapshots if it has any,
#            else build the two into DIR and keep it (for the next run)
#   --name   file name of the picture and JSON (default restore-targets)
#   --replot FILE.json: draw the picture again from a JSON this script kept
#            (into PLOTS/NAME.png), running nothing
# Stores here are made on first use (crest init and its refusals: tests/store/init.sh).
export CREST_INIT=1
. "$(dirname "$0")/../store/lib.sh"
SIZE=1G
STORE=
NAME=restore-targets
REPLOT=
while [ $# -gt 0 ]; do
	case $1 in
	--size) SIZE=$2 ;;
	--store) STORE=$2 ;;
	--name) NAME=$2 ;;
	--replot) REPLOT=$2 ;;
	*) echo "usage: $0 [--size SIZE] [--store DIR] [--name NAME] [--replot FILE.json]" >&2; exit 2 ;;
	esac
	shift 2 || { echo "$0: $1 needs a value" >&2; exit 2; }
done
command -v python3 >/dev/null || { echo "bench: python3 missing" >&2; exit 1; }
[ -n "$REPLOT" ] || [ "$(id -u)" = 0 ] || echo "bench: not root: crest demo will fail and --cold may not drop the pages" >&2
S=${STORE:-$WORK/store}
T0=$(now)

# newest KIND: the newest snapshot of that kind in the store, or nothing.
newest() {
	"$CREST" --store "$S" --json ls 2>/dev/null | python3 -c '
import json, sys
try:
    s = [x for x in json.load(sys.stdin) if x["kind"] == sys.argv[1]]
except ValueError:  # no store there yet
    s = []
print(max(s, key=lambda x: x["time_ns"])["snapshot"] if s else "")' "$1"
}

T1=$T0 T2=$T0 STAMP= LOADAVG= LOADEND=
if [ -z "$REPLOT" ]; then
	mem=$( [ -d "$S" ] && newest files || true)
	proc=$( [ -d "$S" ] && newest process || true)
	if [ -z "$mem" ] && [ -z "$proc" ]; then
		echo "bench: building the store in $S: $SIZE of memory-like data, then crest demo" >&2
		"$STORE_TOOL" memory "$WORK/memory.bin" "$SIZE" 1
		"$CREST" --store "$S" --quiet put --tag bench-memory "$WORK/memory.bin" >/dev/null
		rm -f "$WORK/memory.bin"
		mem=$(newest files)
		(cd "$WORK" && "$CREST" --store "$S" demo --cpu --checkpoints 1 --restore-from 1) >"$WORK/demo.out" 2>&1 ||
			{ echo "bench: crest demo failed (root and criu needed); the process snapshot is left out:" >&2
			  tail -3 "$WORK/demo.out" >&2; }
		proc=$(newest process)
	fi
	T1=$(now)

	STAMP=$(stamp)
	LOADAVG=$(cut -d' ' -f1-3 /proc/loadavg)
	: >"$WORK/runs.jsonl"
	for which in memory process; do
		id=$mem
		[ $which = process ] && id=$proc
		[ -n "$id" ] || continue
		for to in null files host; do
			for cold in "" --cold; do
				echo "bench: $which ${id:0:12} --to $to $cold" >&2
				out=$("$CREST" --store "$S" bench restore "$id" --to "$to" $cold --repeat 3 --json)
				printf '{"which": "%s", "result": %s}\n' "$which" "$out" >>"$WORK/runs.jsonl"
			done
		done
	done
	LOADEND=$(cut -d' ' -f1-3 /proc/loadavg)
	T2=$(now)
fi

mkdir -p "$PLOTS"
# One JSON (the figures kept, the per-run arrays too: they are small) and
# one data block per snapshot for gnuplot, and the markdown table.
python3 - "${REPLOT:-$WORK/runs.jsonl}" "$PLOTS/$NAME.json" "$WORK/plot.dat" "$WORK/titles" "$SIZE" "$STAMP" \
	"$LOADAVG" "$LOADEND" "$(awk -v a="$T1" -v b="$T2" 'BEGIN { printf "%.0f", b - a }')" <<'EOF'
import json, sys
src, jout, dat, titles, size, stamp, load0, load1, secs = sys.argv[1:]
if src.endswith(".json"):  # --replot
    doc = json.load(open(src))
    rows, stamp, size = doc["runs"], doc["stamp"], doc["memory_size"]
else:
    rows = [json.loads(l) for l in open(src)]
    doc = {"bench": "bench/restore/restore.sh", "stamp": stamp, "load_at_start": load0, "load_at_end": load1,
           "bench_seconds": int(secs), "memory_size": size, "runs": rows}
# One run's figures to a line: small, and diffs of a rerun stay readable.
with open(jout, "w") as f:
    head = dict(doc, runs=None)
    f.write(json.dumps(head)[:-len('null}')] + "[\n " + ",\n ".join(json.dumps(r) for r in rows) + "\n]}\n")
mib = lambda b: b / 2**20
with open(dat, "w") as d, open(titles, "w") as t:
    t.write(stamp + "\n")
    print("| snapshot | target | cache | crest GB/s (min / median / max) | ceiling GB/s (median) | ratio (median) |")
    print("|---|---|---|---|---|---|")
    for which in ("memory", "process"):
        rs = [r["result"] for r in rows if r["which"] == which]
        if not rs:
            continue
        r0 = rs[0]
        what = ("memory-like data, %s put with crest put" % size if which == "memory"
                else "process checkpoint of the crest demo CPU job")
        t.write("%s: snapshot %.12s, %.0f MiB logical, %.0f MiB of packs\n"
                % (what, r0["snapshot"], mib(r0["logical_bytes"]), mib(r0["pack_bytes"])))
        for r in rs:
            cache = "cold" if r["cold"] else "warm"
            g, c, q = r["gbps"], r["ceiling_gbps"], r["ratio"]
            d.write('"to %s\\n%s" %g %g %g %g %g %g %g\n' % (r["target"], cache, g["median"], g["min"],
                    g["max"], c["median"], c["min"], c["max"], q["median"]))
            print("| %s %.12s | %s | %s | %.2f / %.2f / %.2f | %.2f | %.3f |" % (which, r["snapshot"],
                  r["target"], cache, g["min"], g["median"], g["max"], c["median"], q["median"]))
        d.write("\n\n")
EOF
if have_gnuplot; then
	nb=$(($(grep -c . "$WORK/titles") - 1))
	gnuplot -e "dat='$WORK/plot.dat'; out='$PLOTS/$NAME.png'; nb=$nb; titles='$WORK/titles'" \
		"$(dirname "$0")/restore.gp"
	echo
	echo "Picture: $PLOTS/$NAME.png; figures: $PLOTS/$NAME.json."
fi
[ -z "$REPLOT" ] || exit 0
echo
echo "- $STAMP (load average at the end: $LOADEND); threads: one per core."
echo "- seconds: building the store $(awk -v a="$T0" -v b="$T1" 'BEGIN { printf "%.0f", b - a }'), the benches $(awk -v a="$T1" -v b="$T2" 'BEGIN { printf "%.0f", b - a }'), in all $(awk -v a="$T0" -v b="$(now)" 'BEGIN { printf "%.0f", b - a }')."
