#!/bin/bash
# push.sh [GIB [DIR]] - crest push and crest pull of a snapshot of GIB GiB
# (default 2: half memory-like data, which LZ4 packs, half random, stored
# raw) between two stores in DIR (default /var/tmp), beside the ceiling of
# the same run: cp -r of the source store's packs/ into the same
# filesystem, the same bytes file to file with nothing checked. Then an
# incremental push after 2% of the data changed in 64 KiB stretches, beside
# the put that stored the change. Page cache warm for all (the bytes were
# just written), and everything synced before each timed step, which ends
# when its own data is durable (push and pull sync their packs; cp is
# followed by sync -f); each figure the best of REPS (3) runs. Issue 35,
# item 4.
# Run from the repository root after a build (build/).
set -euo pipefail
export CREST_INIT=1
gib=${1:-2}
dir=${2:-/var/tmp}
reps=${REPS:-3}
crest() { build/cli/crest "$@"; }
store_tool() { build/tests/store/store_tool "$@"; }
now() { date +%s.%N; }
secs() { awk -v t0="$1" -v t1="$2" 'BEGIN { printf "%.3f", t1 - t0 }'; }
w=$dir/crest-push-bench
rm -rf "$w" && mkdir -p "$w/src"
trap 'rm -rf "$w"' EXIT
echo "push: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cpus, $gib GiB in $dir ($(findmnt -no FSTYPE -T "$dir")), $(crest --version | head -1), commit $(git rev-parse --short HEAD 2>/dev/null || echo ?)"
half=$((gib * 512))
store_tool memory "$w/src/mem" "${half}M" 7 >/dev/null
store_tool random "$w/src/rnd" "${half}M" 8 >/dev/null
crest --store "$w/A" --json put --tag v1 "$w/src" >"$w/put1.json"
stored=$(du -sb "$w/A/packs" | cut -f1)
best() { tr ' ' '\n' | grep . | sort -n | head -1; }
cpt="" pusht="" pullt=""
for r in $(seq 1 "$reps"); do
	rm -rf "$w/cp" "$w/B" "$w/C"
	sync
	t0=$(now); cp -r "$w/A/packs" "$w/cp"; sync -f "$w/cp"; t1=$(now); cpt+="$(secs "$t0" "$t1") "
	sync
	t0=$(now); crest --store "$w/A" --quiet push v1 "$w/B"; t1=$(now); pusht+="$(secs "$t0" "$t1") "
	sync
	t0=$(now); crest --store "$w/C" --quiet pull v1 "$w/B"; t1=$(now); pullt+="$(secs "$t0" "$t1") "
	echo "run $r: cp -r packs $(echo $cpt | awk '{print $NF}') s, push $(echo $pusht | awk '{print $NF}') s, pull $(echo $pullt | awk '{print $NF}') s"
done
rm -rf "$w/out"
crest --store "$w/C" --quiet get v1 "$w/out"
cmp "$w/src/mem" "$w/out/src/mem" && cmp "$w/src/rnd" "$w/out/src/rnd" || { echo "push: pulled snapshot differs"; exit 1; }
c=$(echo "$cpt" | best) p=$(echo "$pusht" | best) l=$(echo "$pullt" | best)
gbs() { awk -v b="$stored" -v s="$1" 'BEGIN { printf "%.2f", b / s / 1e9 }'; }
printf '| %s | %s s | %s GB/s | %s |\n' "cp -r packs/ (ceiling)" "$c" "$(gbs "$c")" "1.00"
printf '| %s | %s s | %s GB/s | %.2f |\n' "crest push" "$p" "$(gbs "$p")" "$(awk -v a="$c" -v b="$p" 'BEGIN { print a / b }')"
printf '| %s | %s s | %s GB/s | %.2f |\n' "crest pull" "$l" "$(gbs "$l")" "$(awk -v a="$c" -v b="$l" 'BEGIN { print a / b }')"
echo "stored bytes: $stored (of $((gib << 30)) logical); the pulled snapshot restored bit-exact"
# Incremental: 2% of each file rewritten in 64 KiB stretches.
for f in mem rnd; do
	size=$(stat -c %s "$w/src/$f")
	n=$((size / 65536 / 50))
	for k in $(seq 1 "$n"); do
		off=$(( (k * 7919 % (size / 65536)) * 65536 ))
		head -c 65536 /dev/urandom | dd of="$w/src/$f" bs=65536 seek=$((off / 65536)) conv=notrunc status=none
	done
done
t0=$(now); crest --store "$w/A" --json put --tag v2 "$w/src" >"$w/put2.json"; t1=$(now)
putt=$(secs "$t0" "$t1")
t0=$(now); crest --store "$w/A" --json push v2 "$w/B" >"$w/push2.json"; t1=$(now)
p2=$(secs "$t0" "$t1")
new=$(sed -n 's/.*"new_bytes": \([0-9]*\).*/\1/p' "$w/put2.json")
sent=$(sed -n 's/.*"raw_sent": \([0-9]*\).*/\1/p' "$w/push2.json")
echo "incremental: put v2 $putt s ($new new bytes); push v2 $p2 s, $sent bytes of data sent ($(sed -n 's/.*"chunks_sent": \([0-9]*\).*/\1/p' "$w/push2.json") chunks)"
[ "$new" = "$sent" ] || { echo "push: the incremental push sent $sent bytes, the put stored $new new"; exit 1; }
