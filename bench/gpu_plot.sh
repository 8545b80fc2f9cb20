#!/bin/bash
# gpu_plot.sh OUTDIR... - draws the GPU benches' figures, here on the
# development machine: the device machine has no gnuplot, so its benches only
# write their figures, and this draws them once OUTDIR is copied back.
#   OUTDIR of bench/library/gpu_bench.sh (library.dat, machine.txt)
#     -> PLOTS/gpu-library.png: checkpoint stall, background ingest and
#        restore into the GPU per round, against restore_ceiling's figures
#        on the same packs, the PCIe copy rate and the driver's own
#        checkpoint and restore;
#   OUTDIR of bench/transparent/gpu.sh (bare1.json, bare2.json, demo.json,
#        run.json)
#     -> PLOTS/gpu-transparent.png: the bare driver + CRIU checkpoint and
#        restore against crest demo's stall and restore, phase by phase.
# One OUTDIR may hold both. PLOTS (default bench/plots) names the folder;
# PLOT_PREFIX (default gpu) the start of the file names. Each picture's
# figures, reshaped for gnuplot, are kept beside it as NAME.dat.
# Usage: bench/gpu_plot.sh OUTDIR [OUTDIR...]
set -euo pipefail
# Stores here are made on first use (crest init and its refusals: tests/store/init.sh).
export CREST_INIT=1
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PLOTS=${PLOTS:-$ROOT/bench/plots}
PREFIX=${PLOT_PREFIX:-gpu}
[ $# -ge 1 ] || { echo "usage: $0 OUTDIR [OUTDIR...]" >&2; exit 2; }
command -v gnuplot >/dev/null || { echo "gpu_plot: gnuplot missing (apt-get install -y gnuplot-nox)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "gpu_plot: python3 missing" >&2; exit 1; }
mkdir -p "$PLOTS"
drew=0

# library OUTDIR: library.dat's "round name value" lines to a line per round.
library() {
	local dir=$1 name=$PREFIX-library
	python3 - "$dir/library.dat" "$PLOTS/$name.dat" <<'EOF'
import re, sys
src, dst = sys.argv[1:]
head, rounds = [], {}
for line in open(src):
    if line.startswith("#"):
        head.append(line[1:].strip())
        continue
    f = line.split()
    if len(f) == 3:
        rounds.setdefault(int(f[0]), {})[f[1]] = f[2]
if not rounds:
    sys.exit("gpu_plot: %s holds no round's figures" % src)
# head: date, nvidia-smi's line, cpus/RAM/kernel, crest --version, then ours
date, gpu, host, crest = (head + [""] * 4)[:4]
crest = re.sub(r"^crest (\S+) \(git (\S+)\)", r"crest \2 (\1)", crest)
stamp = "%s; %s; %s; %s" % (gpu.split(",")[0].strip(), host, crest, date)

def ceiling(r, mode):
    """restore_ceiling's figure for MODE at the most threads it ran."""
    best = None
    for k, v in r.items():
        m = re.match(r"ceiling_(.+)_(\d+)_GBps$", k)
        if m and m.group(1) == mode and (best is None or int(m.group(2)) > best[0]):
            best = (int(m.group(2)), v)
    return best or (0, "NaN")

cols = ["stall_s", "stall_GBps", "stall2_s", "stall2_GBps", "ingest_s", "ingest2_s",
        "restore1_s", "restore1_GBps", "restore2_s", "restore2_GBps",
        "driver_checkpoint_s", "driver_restore_s", "pcie_dtoh_4streams_GBps", "gib"]
modes = ["pinned+h2d", "pinned", "read+crc+copy", "read"]
with open(dst, "w") as o:
    o.write("# %s\n" % stamp)
    o.write("# drawn from %s (bench/library/gpu_bench.sh)\n" % src)
    o.write("# round %s %s bitexact\n" % (" ".join(cols), " ".join("ceiling_%s_GBps threads" % m for m in modes)))
    for n in sorted(rounds):
        r = rounds[n]
        ok = "yes" if all(r.get(k) == "yes" for k in ("restore1_bitexact", "restore2_bitexact")) else "NO"
        cs = " ".join("%s %d" % (ceiling(r, m)[1], ceiling(r, m)[0]) for m in modes)
        o.write("%d %s %s %s\n" % (n, " ".join(r.get(c, "NaN") for c in cols), cs, ok))
EOF
	gnuplot -e "dat='$PLOTS/$name.dat'; out='$PLOTS/$name.png'" "$ROOT/bench/library/gpu_bench.gp"
	echo "gpu_plot: $PLOTS/$name.png (figures in $name.dat beside it)"
	drew=1
}

# transparent OUTDIR: the bare runs' and crest demo's JSON to two tables.
transparent() {
	local dir=$1 name=$PREFIX-transparent
	python3 - "$dir" "$PLOTS/$name.dat" <<'EOF'
import json, os, re, sys
d, dst = sys.argv[1:]
load = lambda f: json.load(open(os.path.join(d, f)))
demo = load("demo.json")
bare = [load(f) for f in ("bare1.json", "bare2.json") if os.path.exists(os.path.join(d, f))]
run = load("run.json") if os.path.exists(os.path.join(d, "run.json")) else {}
crest = re.sub(r"^crest (\S+) \(git (\S+)\)", r"crest \2 (\1)", run.get("crest", "crest ?"))
stamp = "%s; %s CPUs, %s GiB RAM; %s; %s; %s" % (run.get("gpu", "GPU ?").split(",")[0], run.get("cpus", "?"),
        run.get("mem_gib", "?"), run.get("criu", "criu ?"), crest, run.get("date", "date ?"))
gb = lambda b: b / 1e9
with open(dst, "w") as o:
    o.write("# %s\n" % stamp)
    o.write("# drawn from %s (bench/transparent/gpu.sh); job: %d MiB on the GPU, %d%% of its pages changed a step\n"
            % (d, demo.get("state_mib", 0), demo.get("change_pct", 0)))
    # index 0: the stalls, phase by phase
    o.write("# label lock driver_checkpoint criu_dump driver_restore_unlock other stall\n")
    for i, b in enumerate(bare, 1):
        ph = [b["lock_seconds"], b["checkpoint_seconds"], b["criu_dump_seconds"], b["restore_unlock_seconds"]]
        o.write('"bare %d (no crest)" %s %.4f %.4f\n' % (i, " ".join("%.4f" % x for x in ph),
                max(b["stall_seconds"] - sum(ph), 0), b["stall_seconds"]))
    for i, c in enumerate(demo["checkpoints"], 1):
        ph = [c["gpu_lock_seconds"], c["gpu_checkpoint_seconds"], c["criu_dump_seconds"], c["gpu_resume_seconds"]]
        o.write('"crest %d (step %d)" %s %.4f %.4f\n' % (i, c["step"], " ".join("%.4f" % x for x in ph),
                max(c["stall_seconds"] - sum(ph), 0), c["stall_seconds"]))
    # index 1: the restores: bare's driver restore + unlock (in place, the
    # process never left), crest's restore of a snapshot into a new process
    o.write("\n\n# label images_from_store criu_restore driver_restore_unlock other total\n")
    for i, b in enumerate(bare, 1):
        o.write('"bare %d" 0 0 %.4f 0 %.4f\n' % (i, b["restore_unlock_seconds"],
                b["restore_unlock_seconds"]))
    r = demo["restore"]
    ph = [r["stream_seconds"], r["criu_seconds"], r["gpu_seconds"]]
    o.write('"crest: checkpoint %d" %s %.4f %.4f\n' % (r["from"], " ".join("%.4f" % x for x in ph),
            max(r["seconds"] - sum(ph), 0), r["seconds"]))
    # index 2: each checkpoint's bytes and background ingest
    o.write("\n\n# checkpoint step logical_GB changed_max_GB new_GB stored_GB ingest_s\n")
    for i, c in enumerate(demo["checkpoints"], 1):
        o.write("%d %d %.3f %s %.3f %.3f %.2f\n" % (i, c["step"], gb(c["logical_bytes"]),
                "%.3f" % gb(c["changed_bytes_max"]) if c["changed_bytes_max"] else "NaN",
                gb(c["new_bytes"]), gb(c["stored_bytes"]), c["ingest_seconds"]))
    # the target and the verdict, for the titles
    mean = sum(b["stall_seconds"] for b in bare) / len(bare) if bare else float("nan")
    o.write("\n\n# bare_mean_stall_s target_s crest_mean_stall_s identical lines_compared\n")
    cm = sum(c["stall_seconds"] for c in demo["checkpoints"]) / len(demo["checkpoints"])
    o.write("%.4f %.4f %.4f %s %d\n" % (mean, 1.15 * mean, cm, "yes" if demo.get("identical") else "NO",
            demo.get("lines_compared", 0)))
EOF
	gnuplot -e "dat='$PLOTS/$name.dat'; out='$PLOTS/$name.png'" "$ROOT/bench/transparent/gpu.gp"
	echo "gpu_plot: $PLOTS/$name.png (figures in $name.dat beside it)"
	drew=1
}

for dir in "$@"; do
	[ -d "$dir" ] || { echo "gpu_plot: $dir: no such directory" >&2; exit 1; }
	found=0
	[ -f "$dir/library.dat" ] && { library "$dir"; found=1; }
	[ -f "$dir/demo.json" ] && { transparent "$dir"; found=1; }
	[ "$found" = 1 ] || echo "gpu_plot: $dir has neither library.dat (gpu_bench.sh) nor demo.json (gpu.sh)" >&2
done
[ "$drew" = 1 ] || exit 1
