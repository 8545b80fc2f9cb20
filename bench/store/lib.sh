# lib.sh - shared by the store benchmarks (sourced). BUILD names a build
# directory (default: build/ at the top of the repository); WORK a scratch
# directory on the disk to measure (default: a new one under /var/tmp, which
# is not a tmpfs here), removed at the end.
# Stores here are made on first use (crest init and its refusals: tests/store/init.sh).
export CREST_INIT=1
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
CREST=$BUILD/cli/crest
CASCTL=$BUILD/cli/casctl
STORE_TOOL=$BUILD/tests/store/store_tool
for b in "$CREST" "$CASCTL" "$STORE_TOOL"; do
	[ -x "$b" ] || { echo "bench: $b missing: build first (cmake -S . -B build && make -C build)" >&2; exit 1; }
done
WORK=$(mktemp -d "${WORK_PARENT:-/var/tmp}/crest-bench.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# field NAME JSON: a number or string out of a flat JSON object.
field() { printf '%s' "$2" | sed -n "s/.*\"$1\": \"\{0,1\}\([^\",}]*\)\"\{0,1\}.*/\1/p"; }
# now: seconds since the epoch, nanosecond resolution.
now() { date +%s.%N; }
# rate BYTES SECONDS: MB/s (10^6 bytes).
rate() { awk -v b="$1" -v s="$2" 'BEGIN { printf "%.0f", b / s / 1e6 }'; }
dropcache() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true; }
machine() {
	echo "- machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(free -g | awk '/Mem:/ {print $2}') GiB RAM"
	echo "- disk: $(df -h "$WORK" | awk 'NR==2 {print $1 " (" $2 ")"}'), $(findmnt -no FSTYPE -T "$WORK")"
	echo "- kernel: $(uname -r); crest $(git -C "$ROOT" rev-parse --short HEAD)"
}
# Pictures: PLOTS names the folder they go to (default bench/plots/, where
# RESULTS.md shows them from); stamp is the line a picture's title carries,
# so a PNG seen alone still says where, when and at which commit it was made.
PLOTS=${PLOTS:-$ROOT/bench/plots}
stamp() {
	local dirty=
	git -C "$ROOT" diff --quiet HEAD 2>/dev/null || dirty=+changes
	echo "$(nproc)-core $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //; s/ [0-9]*-Core Processor//'), $(free -g | awk '/Mem:/ {print $2}') GiB RAM; crest $(git -C "$ROOT" rev-parse --short HEAD)$dirty; $(date -u '+%Y-%m-%d %H:%M UTC'); load $(cut -d' ' -f1-3 /proc/loadavg)"
}
# have_gnuplot: true when pictures can be drawn; says why not otherwise.
have_gnuplot() {
	command -v gnuplot >/dev/null && return 0
	echo "bench: gnuplot missing (apt-get install -y gnuplot-nox): no pictures drawn" >&2
	return 1
}
