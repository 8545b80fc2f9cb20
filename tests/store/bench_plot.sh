#!/bin/bash
# Issue 32, item 3: crest bench restore --plot draws what the table says.
# CREST_PLOT_SCRIPT keeps the gnuplot script crest ran and its data; read
# back, both panels have the same time axis and margins, every point drawn
# lies within its panel's y range and the data fill at least half of it
# (no empty half), the title's figures are the table's medians as printed,
# and the title names the run: snapshot, --to, how many runs, threads, the
# date, crest's version.
. "$(dirname "$0")/lib.sh"
command -v gnuplot >/dev/null || { echo "SKIP: gnuplot is not installed"; exit 77; }

mkdir -p "$T/src"
"$STORE_TOOL" random "$T/src/a.bin" "$(scaled $((48 << 20)))" 7
"$STORE_TOOL" random "$T/src/b.bin" "$(scaled $((16 << 20)))" 8
crest put --tag p1 "$T/src" >/dev/null

for to in null files; do
	note "--to $to"
	rm -f "$T/p.png" "$T/p.gp" "$T/p.gp.dat"
	CREST_PLOT_SCRIPT=$T/p.gp "$CREST" --workers 2 bench restore p1 --to "$to" --dir "$T" --repeat 3 \
		--plot "$T/p.png" >"$T/table" || fail "bench restore --to $to --plot failed"
	[ -s "$T/p.png" ] || fail "--to $to: no picture"
	[ -s "$T/p.gp" ] && [ -s "$T/p.gp.dat" ] || fail "--to $to: CREST_PLOT_SCRIPT kept no script or data"
	python3 - "$T/p.gp" "$T/table" "$to" "$("$CREST" --version | head -1)" <<'PY' || fail "--to $to: the picture disagrees (above)"
import math, re, sys
script, table, to, version = open(sys.argv[1]).read(), open(sys.argv[2]).read(), sys.argv[3], sys.argv[4]
bad = []
def check(ok, what):
    if not ok:
        bad.append(what)

# The panels: the settings in force at each plot command.
state, panels = {"log": False}, []
for line in script.splitlines():
    m = re.match(r"set (xrange|yrange) \[([^:]*):([^\]]*)\]", line)
    if m:
        state[m.group(1)] = (float(m.group(2)), float(m.group(3)))
    elif re.match(r"set [lr]margin", line):
        k, v = line.split()[1:3]
        state[k] = v
    elif line == "set logscale y":
        state["log"] = True
    elif line == "unset logscale y":
        state["log"] = False
    elif line.startswith("plot"):
        cols = [int(c) for c in re.findall(r"using 1:(\d+)", line)]
        consts = [float(c) for c in re.findall(r", ([0-9.e+-]+) with lines", line)]
        panels.append(dict(state, cols=cols, consts=consts))
check(len(panels) == 2, f"{len(panels)} panels, expected 2")
check(all(p.get("xrange") == panels[0].get("xrange") for p in panels), "the panels' time axes differ")
check(all(p.get("lmargin") == panels[0].get("lmargin") and p.get("rmargin") == panels[0].get("rmargin")
          for p in panels), "the panels' margins differ")

dat = script.split("plot '", 1)[1].split("'", 1)[0]
rows = [[float(x) for x in l.split()] for l in open(dat) if l.strip()]
x0, x1 = panels[0]["xrange"]
check(all(x0 <= r[0] <= x1 for r in rows), f"a point's time is outside [{x0}, {x1}]")
check(rows[-1][0] >= x1 * 0.9, "the time axis runs well past the data: an empty stretch")
threads = int(re.search(r"threads busy \(of (\d+)\)", script).group(1))
for n, p in enumerate(panels):
    lo, hi = p["yrange"]
    vals = [r[c - 1] for r in rows for c in p["cols"]] + p["consts"]
    vals = [v for v in vals if not math.isnan(v)]
    check(all(lo <= v <= hi for v in vals), f"panel {n + 1}: a point outside its y range [{lo}, {hi}]: "
          f"{[v for v in vals if not lo <= v <= hi][:3]}")
    # The data (above: not the ceiling's line; below: with the threads
    # there are) fill at least half the axis, and it ends just past them.
    data = [r[c - 1] for r in rows for c in p["cols"]]
    data = [v for v in data if not math.isnan(v)]
    top = max(data + ([threads] if n == 1 else []))
    check(hi <= (1.3 if p["log"] else 1.1) * max(vals + ([threads] if n == 1 else [])),
          f"panel {n + 1}: the axis runs to {hi}, far past the highest point drawn")
    if p["log"]:
        # From just below the lowest point to just above the highest one
        # drawn (above), nothing empty at either end. The ceiling's line
        # may stand far above the data: a run much slower than the
        # machine can read shows as that gap, not as an empty axis.
        low = min(v for v in data if v > 0)
        check(0 < lo <= low <= 1.3 * lo,
              f"panel {n + 1}: the log axis [{lo}, {hi}] does not start just below the lowest point ({low})")
    else:
        check(lo == 0 and top >= hi / 2, f"panel {n + 1}: the top half of [0, {hi}] is empty (highest {top})")

# The title: the table's medians, as printed, and which run it is.
title = re.search(r'title "(.*)"', script).group(1)
med = {}
for key in ("restore GB/s", "ceiling GB/s", "ratio to ceiling"):
    m = re.search(r"^  " + re.escape(key) + r"[^0-9]*\s+(\S+)\s+(\S+)\s+(\S+)$", table, re.M)
    check(m is not None, f"no '{key}' line in the table")
    med[key] = m.group(2) if m else "?"
want = (f"{med['restore GB/s']} GB/s, {med['ratio to ceiling']} of the ceiling "
        f"({med['ceiling GB/s']} GB/s), medians of 3 runs")
check(want in title, f"the title's figures are not the table's: want '{want}' in '{title}'")
snap = re.search(r"^bench restore ([0-9a-f]{12})", table, re.M).group(1)
for part in (snap, "p1 (files", f"--to {to}", "2 threads", "the last run", "crest " + version.split()[1], " UTC"):
    check(part in title, f"the title does not say '{part}': {title}")
check(re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", title), f"the title has no date: {title}")
for b in bad:
    print("FAIL:", b)
print("   title:", title.replace("\\n", " / "))
print("   y ranges:", [p["yrange"] for p in panels], "log" if panels[0]["log"] else "linear")
sys.exit(1 if bad else 0)
PY
done
echo PASS
