#!/bin/bash
# seam_ab.sh OLD NEW [ROUNDS] [WORK] - two crest binaries side by side on
# what a change below the store's commit touches (issue 35's seam): 40
# commits of a 64 KiB file each (a put is an open, its locks, one commit of
# its meta log and index batch, a close), then one 256 MiB put of random
# bytes (the pack writer's lanes), then a get of it back (the chunk reads,
# from the page cache: the code's cost, not the disk's), compared with the
# file. Each binary its own store under WORK (/var/tmp/seam-ab: a disk, so
# syncs are real), the two alternating and the order flipped every round,
# ROUNDS (12) times; prints each round and the medians.
set -eu
OLD=$1 NEW=$2 ROUNDS=${3:-12} W=${4:-/var/tmp/seam-ab}
rm -rf "$W"
mkdir -p "$W"
trap 'rm -rf "$W"' EXIT
head -c $((256 << 20)) /dev/urandom >"$W/big"
for i in $(seq 1 40); do head -c 65536 /dev/urandom >"$W/s$i"; done
export CREST_INIT=1
now() { date +%s.%N; }
for r in $(seq 1 "$ROUNDS"); do
	order="old new"
	[ $((r % 2)) = 0 ] && order="new old"
	for b in $order; do
		bin=$OLD
		[ "$b" = new ] && bin=$NEW
		S=$W/store-$b
		rm -rf "$S"
		t0=$(now)
		for i in $(seq 1 40); do "$bin" --quiet --store "$S" put "$W/s$i" >/dev/null; done
		t1=$(now)
		"$bin" --quiet --store "$S" put "$W/big" >/dev/null
		t2=$(now)
		rm -rf "$W/out"
		"$bin" --quiet --store "$S" get latest "$W/out" >/dev/null
		t3=$(now)
		cmp -s "$W/big" "$W/out/big" || { echo "seam_ab: $b's get of big differs" >&2; exit 1; }
		echo "round $r $b: small $(echo "$t1 - $t0" | bc) big $(echo "$t2 - $t1" | bc) get $(echo "$t3 - $t2" | bc)"
	done
done | tee "$W/runs"
awk '{ v[$3 " small"] = v[$3 " small"] " " $5; v[$3 " big"] = v[$3 " big"] " " $7; v[$3 " get"] = v[$3 " get"] " " $9 }
END {
	for (k in v) { n = split(v[k], a, " "); for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		printf "RESULT %s median %.3f s (%.3f to %.3f, %d runs)\n", k, n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2, a[1], a[n], n }
}' "$W/runs" | sort
