#!/bin/bash
# Issue 2's benchmark: ingest of realistic memory-like data side by side with
# sha256sum, OpenSSL's SHA-256 (what crest uses) and lz4 -1 on the same
# bytes; crest put at 1 worker and at all cores against
#   target = 0.8 x min(N x one-core SHA-256 rate, disk write rate);
# restore (crest get) against cat of the same bytes; and the dedup series:
# ten versions of a state, 2% of its pages changed between versions, stored
# bytes against logical bytes. Prints markdown, and draws both into
# PLOTS/NAME.png (default bench/plots/ingest.png; NAME from PLOT_NAME) with
# the numbers it was drawn from in NAME.dat beside it.
# Usage: bench/store/ingest.sh [SIZE [SERIES_SIZE]]   (defaults 4G 1G)
. "$(dirname "$0")/lib.sh"
SIZE=${1:-4G}
SERIES=${2:-1G}
N=$(nproc)
NAME=${PLOT_NAME:-ingest}
STAMP=$(stamp)
command -v lz4 >/dev/null || { echo "bench: lz4 missing (apt-get install -y lz4)" >&2; exit 1; }

data=$WORK/in/state.bin
mkdir -p "$WORK/in"
"$STORE_TOOL" memory "$data" "$SIZE" 1
bytes=$(stat -c %s "$data")
sync
cat "$data" >/dev/null  # every reader below starts from the page cache

# timed CMD...: runs CMD, prints its wall seconds.
timed() {
	local t0 t1
	t0=$(now)
	"$@" >/dev/null
	t1=$(now)
	awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }'
}

echo "### Ingest of $SIZE of memory-like data ($N cores)"
echo
echo "Data: \`store_tool memory\`: 4 KiB pages, ~25% zero, ~35% random, ~40% structured records (LZ4 -1 shrinks it to $(( $(lz4 -1 -c "$data" | wc -c) * 100 / bytes ))%)."
echo
echo "| what | seconds | MB/s |"
echo "|---|---|---|"
# row WHAT SECONDS [SHORT KIND WORKERS]: a table row; with SHORT, a bar of
# the picture too (KIND: tool, put or get; WORKERS: a put's, for its target).
: >"$WORK/rates.dat"
row() {
	echo "| $1 | $2 | $(rate "$bytes" "$2") |"
	[ -z "${3:-}" ] || echo "\"$3\" $(rate "$bytes" "$2") $4 ${5:-0}" >>"$WORK/rates.dat"
}
t_sum=$(timed sha256sum "$data");                  row "sha256sum (coreutils, 1 core)" "$t_sum" "sha256sum, 1 core" tool
t_ossl=$(timed openssl dgst -sha256 "$data");      row "openssl dgst -sha256 (EVP, 1 core)" "$t_ossl" "openssl SHA-256, 1 core" tool
t_lz4=$(timed lz4 -1 -c "$data");                  row "lz4 -1 (1 core)" "$t_lz4" "lz4 -1, 1 core" tool
sync
t_dd=$(timed dd if="$data" of="$WORK/dd.out" bs=4M conv=fdatasync status=none); row "disk write: dd bs=4M conv=fdatasync" "$t_dd" "disk write (dd, fdatasync)" tool
rm -f "$WORK/dd.out"
sync

declare -A T
for chunking in default fixed4k; do
	args=()
	[ $chunking = fixed4k ] && args=(--chunker fixed --chunk-size 4K)
	for w in 1 "$N"; do
		rm -rf "$WORK/s"
		sync
		t=$(timed "$CREST" --store "$WORK/s" --workers "$w" --quiet put "${args[@]}" "$data")
		T[$chunking-$w]=$t
		row "crest --workers $w put ($chunking chunking; stored $(du -sb "$WORK/s/packs" | cut -f1) bytes)" "$t" \
			"crest put, $chunking, $w worker$([ "$w" = 1 ] || echo s)" put "$w"
	done
done
sync
t_get=$(timed "$CREST" --store "$WORK/s" --quiet get "$("$CREST" --store "$WORK/s" ls --json | sed -n 's/.*"snapshot": "\([0-9a-f]*\)".*/\1/p' | tail -1)" "$WORK/out")
sync
t_cat=$(timed sh -c "cat '$data' > '$WORK/cat.out'")
row "crest get (restore, $N threads)" "$t_get" "crest get (restore), $N threads" get
row "cat of the same bytes to a file" "$t_cat" "cat to a file" tool
cmp "$data" "$WORK/out/state.bin" || { echo "bench: restored bytes differ" >&2; exit 1; }
rm -rf "$WORK/out" "$WORK/cat.out" "$WORK/s"

sha1=$(rate "$bytes" "$t_ossl")
disk=$(rate "$bytes" "$t_dd")
echo
echo "Target: 0.8 x min(N x one-core SHA-256, disk write), with the OpenSSL rate (the faster, so the stricter) as one-core SHA-256:"
echo
echo "| crest put | workers | MB/s | target MB/s | ratio to target |"
echo "|---|---|---|---|---|"
for chunking in default fixed4k; do
	for w in 1 "$N"; do
		awk -v r="$(rate "$bytes" "${T[$chunking-$w]}")" -v n="$w" -v s="$sha1" -v d="$disk" -v c="$chunking" 'BEGIN {
			t = 0.8 * ((n * s < d) ? n * s : d)
			printf "| %s chunking | %d | %d | %.0f | %.2f |\n", c, n, r, t, r / t }'
	done
done
echo
echo "Restore: crest get $(rate "$bytes" "$t_get") MB/s against cat $(rate "$bytes" "$t_cat") MB/s (ratio $(awk -v a="$t_cat" -v b="$t_get" 'BEGIN { printf "%.2f", a / b }'))."

echo
echo "### Dedup series: 10 versions of a $SERIES state, 2% of its 4 KiB pages changed between versions"
echo
echo "| version | chunking | logical bytes | new bytes | stored bytes (this version) |"
: >"$WORK/series.dat"
echo "|---|---|---|---|---|"
"$STORE_TOOL" memory "$WORK/in/series.bin" "$SERIES" 2
rm -f "$data"
for chunking in fixed4k default; do
	args=()
	[ $chunking = fixed4k ] && args=(--chunker fixed --chunk-size 4K)
	cp "$WORK/in/series.bin" "$WORK/in/state.bin"
	rm -rf "$WORK/s"
	for v in $(seq 1 10); do
		[ "$v" -eq 1 ] || "$STORE_TOOL" scatter "$WORK/in/state.bin" 0.02 $((1000 + v)) >/dev/null
		out=$("$CREST" --store "$WORK/s" --json put --branch series "${args[@]}" "$WORK/in/state.bin")
		echo "| $v | $chunking | $(field logical_bytes "$out") | $(field new_bytes "$out") | $(field stored_bytes "$out") |"
		echo "$v $chunking $(field logical_bytes "$out") $(field new_bytes "$out") $(field stored_bytes "$out")" >>"$WORK/series.dat"
	done
	st=$("$CASCTL" --store "$WORK/s" --json stats)
	echo "| **all 10** | $chunking | $(field logical_bytes "$st") | $(field unique_bytes "$st") unique | $(field stored_bytes "$st") (dedup $(field dedup_ratio "$st")x, compression $(field compression_ratio "$st")x, stored/logical $(awk -v a="$(field stored_bytes "$st")" -v b="$(field logical_bytes "$st")" 'BEGIN { printf "%.3f", a / b }')) |"
done

# The picture: the rates as bars (a put's target as a mark on its bar), then
# new and stored bytes of each version of the series; NAME.dat keeps them.
have_gnuplot || exit 0
mkdir -p "$PLOTS"
{
	echo "# $STAMP"
	echo "# bench/store/ingest.sh $SIZE $SERIES: what MB/s kind workers target_MB/s"
	awk -v s="$sha1" -v d="$disk" '{ t = 0; if ($(NF - 1) == "put") { n = $NF * s; t = 0.8 * (n < d ? n : d) }
		print $0, t }' "$WORK/rates.dat"
	printf '\n\n# version chunking logical_bytes new_bytes stored_bytes\n'
	cat "$WORK/series.dat"
} >"$PLOTS/$NAME.dat"
gnuplot -e "dat='$PLOTS/$NAME.dat'; out='$PLOTS/$NAME.png'; size='$SIZE'; series='$SERIES'" "$(dirname "$0")/ingest.gp"
echo
echo "Picture: $PLOTS/$NAME.png (drawn from $NAME.dat beside it)."
