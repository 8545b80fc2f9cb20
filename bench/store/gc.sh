#!/bin/bash
# Issue 12's benchmark: casctl gc on a store of >= 1 million 4 KiB chunks and
# 100+ snapshots, half of them expired, side by side with restic's
# `forget --prune` on the same versions of the same data, in one run.
#
# Data: one file of SIZE incompressible bytes (store_tool random), then
# VERSIONS-1 more versions, each rewriting RUNS runs of RUN bytes at random
# 4 KiB-aligned offsets with fresh random bytes (8 x 4.5 MiB = 36 MiB = 9216
# new 4 KiB chunks per version at the defaults: 131072 + 100 x 9216 is
# about 1.05 million distinct chunks). The changes are runs, not scattered
# pages: scattered 4 KiB changes would touch nearly every one of restic's
# ~1 MiB chunks, so its repository would hold ~100 full copies (~50 GB).
# Every version is snapshotted by
#   fixed:   crest put --chunker fixed --chunk-size 4K  (the >= 1M chunk store)
#   cdc:     crest put  (crest's default content-defined chunking)
#   cdc1m:   crest put --chunker cdc --chunk-size 1M  (restic's chunk count)
#   restic:  restic backup DIR  (CDC, ~1 MiB average chunks)
# then, caches dropped before each, casctl gc --keep-last K and restic forget
# --keep-last K --prune, timed, with peak RSS (/usr/bin/time -v) and du -sb
# of each repository before and after. casctl gc --dry-run at several store
# sizes and keep counts gives peak RSS against chunks. Prints markdown, and
# draws gc wall time, peak RSS, ingest time and the dry runs' RSS into
# PLOTS/NAME.png (default bench/plots/gc.png; NAME from PLOT_NAME) with the
# numbers drawn in NAME.dat beside it (bench/store/gc.gp draws that file).
# Needs root for drop_caches (else the caches stay warm), restic, time.
# Usage: bench/store/gc.sh [SIZE [VERSIONS [RUNS [RUN [KEEP]]]]]
#        (defaults 512M 101 8 4608K 50)
# Stores here are made on first use (crest init and its refusals: tests/store/init.sh).
export CREST_INIT=1
. "$(dirname "$0")/lib.sh"
SIZE=${1:-512M}
VERSIONS=${2:-101}
RUNS=${3:-8}
RUN=${4:-4608K}
KEEP=${5:-50}
NAME=${PLOT_NAME:-gc}
STAMP=$(stamp)
command -v restic >/dev/null || { echo "bench: restic missing (apt-get install -y restic)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "bench: /usr/bin/time missing (apt-get install -y time)" >&2; exit 1; }
export RESTIC_PASSWORD=bench RESTIC_CACHE_DIR=$WORK/restic-cache
R=$WORK/restic
STORES="fixed cdc cdc1m"
declare -A ARGS=([fixed]="--chunker fixed --chunk-size 4K" [cdc]="" [cdc1m]="--chunker cdc --chunk-size 1M")

# measure NAME CMD...: runs CMD under /usr/bin/time -v, its output in
# $WORK/NAME.out and .time; sets WALL (seconds) and RSS (KiB).
measure() {
	local name=$1 t0 t1
	shift
	t0=$(now)
	/usr/bin/time -v -o "$WORK/$name.time" "$@" >"$WORK/$name.out" 2>&1 ||
		{ echo "bench: $name failed:" >&2; tail "$WORK/$name.out" "$WORK/$name.time" >&2; exit 1; }
	t1=$(now)
	WALL=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
	RSS=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$WORK/$name.time")
}
mib() { awk -v k="$1" 'BEGIN { printf "%.0f", k / 1024 }'; }
gb() { awk -v b="$1" 'BEGIN { printf "%.3f", b / 1e9 }'; }
chunks_of() { field chunks "$("$CASCTL" --store "$WORK/$1" --json stats)"; }

data=$WORK/in/state.bin
mkdir -p "$WORK/in"
pages=$(( $(numfmt --from=iec "$SIZE") / 4096 ))
runpages=$(( $(numfmt --from=iec "$RUN") / 4096 ))
restic -r "$R" init -q >/dev/null
declare -A ING=()
memrows=()
echo "bench: $VERSIONS versions of $SIZE into $STORES and restic" >&2
for v in $(seq 1 "$VERSIONS"); do
	if [ "$v" -eq 1 ]; then
		"$STORE_TOOL" random "$data" "$SIZE" 1
	else
		# RUNS offsets from a seeded awk (mawk here): the same every run.
		for off in $(awk -v s="$v" -v n="$RUNS" -v p="$pages" -v r="$runpages" \
				'BEGIN { srand(s); for (i = 0; i < n; i++) print int(rand() * (p - r)) }'); do
			"$STORE_TOOL" random "$WORK/in.patch" "$RUN" $((v * 1000 + off % 997))
			dd if="$WORK/in.patch" of="$data" bs=4096 seek="$off" conv=notrunc status=none
		done
	fi
	for s in $STORES; do
		t0=$(now)
		# shellcheck disable=SC2086
		"$CREST" --store "$WORK/$s" --quiet put ${ARGS[$s]} "$data" >/dev/null
		ING[$s]=$(awk -v a="${ING[$s]:-0}" -v t0="$t0" -v t1="$(now)" 'BEGIN { print a + t1 - t0 }')
	done
	t0=$(now)
	restic -r "$R" backup -q --host bench "$WORK/in" >/dev/null
	ING[restic]=$(awk -v a="${ING[restic]:-0}" -v t0="$t0" -v t1="$(now)" 'BEGIN { print a + t1 - t0 }')
	# Peak RSS of a dry run against the store's size as it grows.
	if [ $((v % 25)) -eq 0 ] && [ "$v" -lt "$VERSIONS" ]; then
		measure dry "$CASCTL" --store "$WORK/fixed" --json gc --keep-last "$KEEP" --dry-run
		k=$((v < KEEP ? v : KEEP))
		memrows+=("| $v | $(chunks_of fixed) | $k | $((k * pages)) | $WALL | $(mib "$RSS") |")
	fi
	[ $((v % 10)) -eq 0 ] && echo "bench: version $v" >&2
done
rm -f "$WORK/in.patch"
sync
for k in 1 "$KEEP" "$VERSIONS"; do
	measure dry "$CASCTL" --store "$WORK/fixed" --json gc --keep-last "$k" --dry-run
	memrows+=("| $VERSIONS | $(chunks_of fixed) | $k | $((k * pages)) | $WALL | $(mib "$RSS") |")
done
nchunks=$(chunks_of fixed)

echo "### gc of $VERSIONS snapshots, $((VERSIONS - KEEP)) expired (--keep-last $KEEP): casctl gc against restic forget --prune"
echo
echo "Data: $VERSIONS versions of one $SIZE file of incompressible random bytes (\`store_tool random\`); each version after"
echo "the first rewrites $RUNS runs of $RUN at random 4 KiB-aligned offsets with new random bytes."
echo "$(restic version | cut -d' ' -f1-2), repository version $(restic -r "$R" cat config 2>/dev/null | sed -n 's/.*"version": \([0-9]*\).*/\1/p') (compression auto)."
echo
echo "| store | snapshots | chunks (index entries) | ingest of all versions, s |"
echo "|---|---|---|---|"
for s in $STORES; do
	st=$("$CASCTL" --store "$WORK/$s" --json stats)
	echo "| crest $s (\`${ARGS[$s]:-default}\`) | $(field snapshots "$st") | $(field chunks "$st") | $(printf %.1f "${ING[$s]}") |"
done
rblobs=$(restic -r "$R" stats --mode raw-data 2>/dev/null | sed -n 's/.*Total Blob Count: *//p')
echo "| restic | $(restic -r "$R" snapshots --json | grep -o '"short_id"' | wc -l) | $rblobs (blobs, data and tree) | $(printf %.1f "${ING[restic]}") |"
echo
echo "| gc (caches dropped before each) | wall s | peak RSS MiB | bytes before | bytes after | freed | restic wall / this wall |"
echo "|---|---|---|---|---|---|---|"
declare -A W B A M
LOADAVG=$(cut -d' ' -f1-3 /proc/loadavg)
for s in $STORES; do
	B[$s]=$(du -sb "$WORK/$s" | cut -f1)
	dropcache
	measure "gc-$s" "$CASCTL" --store "$WORK/$s" --json gc --keep-last "$KEEP"
	W[$s]=$WALL M[$s]=$RSS
	A[$s]=$(du -sb "$WORK/$s" | cut -f1)
done
B[restic]=$(du -sb "$R" | cut -f1)
dropcache
measure gc-restic restic -r "$R" forget --keep-last "$KEEP" --prune
W[restic]=$WALL M[restic]=$RSS
A[restic]=$(du -sb "$R" | cut -f1)
for s in $STORES restic; do
	name="crest $s: \`casctl gc --keep-last $KEEP\`"
	[ "$s" = restic ] && name="restic: \`forget --keep-last $KEEP --prune\`"
	echo "| $name | ${W[$s]} | $(mib "${M[$s]}") | $(gb "${B[$s]}") GB | $(gb "${A[$s]}") GB | $(gb $((B[$s] - A[$s]))) GB | $(awk -v a="${W[restic]}" -v b="${W[$s]}" 'BEGIN { printf "%.1f", a / b }') |"
done
echo
for s in $STORES; do
	g=$(cat "$WORK/gc-$s.out")
	echo "- crest $s gc: $(field dead_chunks "$g") of $(field chunks "$g") chunks dead, $(field packs_rewritten "$g") of $(field packs "$g") packs rewritten ($(gb "$(field bytes_moved "$g")") GB moved), packs $(gb "$(field bytes_before "$g")") -> $(gb "$(field bytes_after "$g")") GB."
done
echo "- restic prune said: $(grep -E '^(to repack|this removes|to delete|total prune|remaining|unused size after prune)' "$WORK/gc-restic.out" | tr -s ' ' | paste -sd ';' -)"
echo "- load average (1, 5, 15 min) as the gc runs began: $LOADAVG; this machine is shared with other builds and tests."
echo "- restic cache (RESTIC_CACHE_DIR under the scratch directory, not counted above): $(gb "$(du -sb "$RESTIC_CACHE_DIR" | cut -f1)") GB."

# Nothing the kept snapshots need is gone: every store verifies, and the
# newest snapshot restores to the last version's bytes.
for s in $STORES; do
	"$CASCTL" --store "$WORK/$s" verify >"$WORK/verify-$s.out" 2>&1 ||
		{ echo "bench: casctl verify of $s after gc failed:" >&2; tail "$WORK/verify-$s.out" >&2; exit 1; }
	id=$("$CREST" --store "$WORK/$s" ls --json | sed -n 's/.*"snapshot": "\([0-9a-f]*\)".*/\1/p' | tail -1)
	rm -rf "$WORK/out"
	"$CREST" --store "$WORK/$s" --quiet get "$id" "$WORK/out" >/dev/null
	cmp "$data" "$WORK/out/state.bin" || { echo "bench: $s: the newest snapshot differs after gc" >&2; exit 1; }
done
rm -rf "$WORK/out"
restic -r "$R" check -q >"$WORK/check.out" 2>&1 || { echo "bench: restic check failed:" >&2; tail "$WORK/check.out" >&2; exit 1; }
echo "- After gc: \`casctl verify\` ok and the newest snapshot restores bit-exact in every crest store; \`restic check\` ok."
echo
echo "Peak RSS of \`casctl gc --dry-run\` (the mark and the index scans; no rewrite) on the fixed 4 KiB store:"
echo
echo "| versions stored | chunks in the index | snapshots kept | extents the kept manifests name | wall s | peak RSS MiB |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${memrows[@]}"
echo
echo "Real gc of the fixed store: peak RSS $(mib "${M[fixed]}") MiB for $nchunks chunks = $(awk -v k="${M[fixed]}" -v n="$nchunks" 'BEGIN { printf "%.0f", k * 1024 / n }') bytes per chunk in the index, or $(awk -v k="${M[fixed]}" -v n="$((KEEP * pages))" 'BEGIN { printf "%.0f", k * 1024 / n }') bytes per extent of the $KEEP kept snapshots."

# The picture, from the figures above; NAME.dat keeps them.
have_gnuplot || exit 0
mkdir -p "$PLOTS"
{
	echo "# $STAMP"
	echo "# bench/store/gc.sh $SIZE $VERSIONS $RUNS $RUN $KEEP: store gc_wall_s gc_peak_rss_kib bytes_before bytes_after ingest_s"
	for s in $STORES restic; do
		label="crest $s"
		[ "$s" = restic ] && label="restic prune"
		echo "\"$label\" ${W[$s]} ${M[$s]} ${B[$s]} ${A[$s]} ${ING[$s]}"
	done
	printf '\n\n# dry runs on the fixed store: versions_stored chunks kept extents wall_s peak_rss_mib\n'
	printf '%s\n' "${memrows[@]}" | awk -F'|' '{ print $2, $3, $4, $5, $6, $7 }'
} >"$PLOTS/$NAME.dat"
gnuplot -e "dat='$PLOTS/$NAME.dat'; out='$PLOTS/$NAME.png'; keep='$KEEP'; versions='$VERSIONS'" "$(dirname "$0")/gc.gp"
echo
echo "Picture: $PLOTS/$NAME.png (drawn from $NAME.dat beside it)."
