#!/bin/bash
# Issue 14's peers benchmark: crest beside restic and borg on the same bytes,
# in one run, on this machine, every repository on the same disk (WORK).
#
# Data: one file of SIZE memory-like bytes (`store_tool memory FILE SIZE 1`:
# 4 KiB pages, ~25% zero, ~35% random, ~40% structured records).
# Three phases, each run RUNS times (default 3), the median reported:
#   ingest:    into an empty repository (made fresh for every run)
#                crest --store S --quiet put FILE   (default chunking)
#                restic backup FILE                 (after restic init)
#                borg create R::first FILE          (after borg init --encryption none;
#                                                    default compression, lz4)
#              the input in the page cache before each (cat to /dev/null).
#   re-ingest: the same unchanged file again, a second snapshot: as each
#              tool runs by default (restic skips a file its parent snapshot
#              has with the same size, mtime and inode, without reading it;
#              the output says whether borg read it again), and restic
#              backup --force, which reads and chunks it again like crest.
#   restore:   the newest snapshot into a fresh directory on the same disk:
#              crest get, restic restore, borg extract; cold (dropcache
#              before each: needs root, else the caches stay warm and the
#              output says so) and warm (the repository in the page cache,
#              read by the cold run just before). Every restored file is
#              compared with the original (cmp); a difference fails the run.
# Prints markdown: per phase a table of tool, median wall seconds, MB/s
# (logical input bytes / wall, 10^6), median CPU seconds (user + sys), and
# peer seconds / crest seconds, with the issue's targets on a 2-core machine
# (ingest >= 4x, restore >= 3x against the faster of restic and borg) said
# met or not; the stored size of each repository (du -sb); which of the
# three make their writes durable (counted with strace when it is here);
# and CREST_TRACE's phases of one more crest put and cold get. Beside the
# ingest and restore targets: the least work of crest's put and get of the
# same bytes here (bench/store/work_floor, when built), and whether the
# target asks for less time than that.
# Needs: restic (apt-get install -y restic), borg (apt-get install -y
# borgbackup), /usr/bin/time (apt-get install -y time); strace optional.
# Usage: bench/store/peers.sh [SIZE [RUNS]]   (defaults 1G 3)
# Stores here are made on first use (crest init and its refusals: tests/store/init.sh).
export CREST_INIT=1
. "$(dirname "$0")/lib.sh"
SIZE=${1:-1G}
RUNS=${2:-3}
for t in restic borg /usr/bin/time; do
	command -v "$t" >/dev/null || { echo "bench: $t missing (apt-get install -y ${t#/usr/bin/}; borg: borgbackup)" >&2; exit 1; }
done
TOOLS="crest restic borg"
# restic: its cache and temporary packs under WORK, on the disk measured.
export RESTIC_PASSWORD=bench RESTIC_CACHE_DIR=$WORK/restic-cache TMPDIR=$WORK/tmp
# borg: its cache, config and security folders under WORK; no prompts.
export BORG_BASE_DIR=$WORK/borg-home BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK=yes \
	BORG_RELOCATED_REPO_ACCESS_IS_OK=yes
mkdir -p "$TMPDIR" "$WORK/in"
COLD=yes
[ -w /proc/sys/vm/drop_caches ] || { COLD=no; echo "bench: not root: drop_caches fails, the cold restores are warm" >&2; }

LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
data=$WORK/in/state.bin
"$STORE_TOOL" memory "$data" "$SIZE" 1 >/dev/null
bytes=$(stat -c %s "$data")
sync  # the input's own writeback is done before anything is timed

# run NAME DIR CMD...: runs CMD in DIR, stdout and stderr in $WORK/NAME.log;
# sets WALL (seconds) and CPU (user + sys seconds). A failure ends the bench.
run() {
	local name=$1 dir=$2 t0 t1
	shift 2
	t0=$(now)
	(cd "$dir" && /usr/bin/time -f '%U %S' -o "$WORK/$name.time" "$@") >"$WORK/$name.log" 2>&1 ||
		{ echo "bench: $name failed: $*" >&2; tail "$WORK/$name.log" >&2; exit 1; }
	t1=$(now)
	WALL=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
	CPU=$(awk '{ printf "%.2f", $1 + $2 }' "$WORK/$name.time")
}
# med ARRAY KEY: the median of ARRAY[KEY-1] .. ARRAY[KEY-RUNS].
med() {
	local -n a=$1
	local i
	for i in $(seq 1 "$RUNS"); do echo "${a[$2-$i]}"; done | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}
ratio() { awk -v p="$1" -v c="$2" 'BEGIN { printf "%.2f", p / c }'; }
warm_input() { sync; cat "$data" >/dev/null; }
newest_crest() { "$CREST" --store "$1" ls --json | sed -n 's/.*"snapshot": "\([0-9a-f]*\)".*/\1/p' | tail -1; }

# ingest TOOL REPO NAME KIND: one ingest of the input; KIND first, again or force.
ingest() {
	local tool=$1 repo=$2 name=$3 kind=$4
	warm_input
	case $tool in
	crest) run "$name" "$WORK" "$CREST" --store "$repo" --quiet put "$data" ;;
	restic)
		if [ "$kind" = force ]; then
			run "$name" "$WORK" restic -r "$repo" backup --host bench --force "$data"
		else
			run "$name" "$WORK" restic -r "$repo" backup --host bench "$data"
		fi ;;
	borg) run "$name" "$WORK/in" borg create --list --filter=AMEU "$repo::$kind" state.bin ;;
	esac
}

declare -A W C S   # W[phase-tool-run], C[...]: wall and CPU seconds; S[tool]: stored bytes
for i in $(seq 1 "$RUNS"); do
	echo "bench: run $i of $RUNS: ingest and re-ingest" >&2
	for tool in $TOOLS; do
		repo=$WORK/repo-$tool
		rm -rf "$repo" "$RESTIC_CACHE_DIR" "$BORG_BASE_DIR"
		sync
		case $tool in
		restic) restic -r "$repo" init >"$WORK/init.log" 2>&1 ;;
		borg) borg init --encryption none "$repo" >"$WORK/init.log" 2>&1 ;;
		esac
		ingest "$tool" "$repo" "first-$tool" first
		W[first-$tool-$i]=$WALL C[first-$tool-$i]=$CPU
		sync
		S[$tool]=$(du -sb "$repo" | cut -f1)
		ingest "$tool" "$repo" "again-$tool" again
		W[again-$tool-$i]=$WALL C[again-$tool-$i]=$CPU
		if [ "$tool" = restic ]; then
			ingest restic "$repo" force-restic force
			W[force-restic-$i]=$WALL C[force-restic-$i]=$CPU
		fi
	done
done
# What the second snapshots did, from the last run's output.
restic_again=$(grep -m1 '^Files:' "$WORK/again-restic.log" | tr -s ' ' || true)
restic_force=$(grep -m1 '^Files:' "$WORK/force-restic.log" | tr -s ' ' || true)
borg_again=$(grep -c '^[AM] ' "$WORK/again-borg.log" || true)

# Restores from the last run's repositories (each holds the snapshots of
# one ingest and its re-ingests; the newest is restored).
for i in $(seq 1 "$RUNS"); do
	echo "bench: run $i of $RUNS: restore" >&2
	for tool in $TOOLS; do
		repo=$WORK/repo-$tool
		for temp in cold warm; do
			out=$WORK/out-$tool
			rm -rf "$out"
			mkdir -p "$out"
			sync
			[ $temp = cold ] && dropcache
			case $tool in
			crest) run "get-$tool" "$WORK" "$CREST" --store "$repo" --quiet get "$(newest_crest "$repo")" "$out" ;;
			restic) run "get-$tool" "$WORK" restic -r "$repo" restore latest --target "$out" ;;
			borg) run "get-$tool" "$out" borg extract "$repo::again" ;;
			esac
			W[$temp-$tool-$i]=$WALL C[$temp-$tool-$i]=$CPU
			got=$(find "$out" -type f -name state.bin)
			[ "$(printf '%s\n' "$got" | grep -c .)" = 1 ] || { echo "bench: $tool restored no single state.bin: $got" >&2; exit 1; }
			cmp "$data" "$got" || { echo "bench: $tool's restored bytes differ from the original ($temp run $i)" >&2; exit 1; }
		done
	done
done
rm -rf "$WORK"/out-*

# table PHASE TARGET TITLE ROWS...: one phase's table; a ROW is TOOL[:KEY]
# (KEY names the W/C entries, default PHASE-TOOL). Ratio: this row's seconds
# over crest's; then the faster peer's against the target (0: none).
table() {
	local phase=$1 target=$2 title=$3 row tool key m c crest best=
	shift 3
	echo "#### $title"
	echo
	echo "| tool | seconds (median of $RUNS) | runs | MB/s | CPU s (user + sys) | this tool's s / crest's s |"
	echo "|---|---|---|---|---|---|"
	crest=$(med W "$phase-crest")
	for row in "$@"; do
		tool=${row%%:*} key=${row#*:}
		[ "$key" = "$row" ] && key=$phase-$tool
		m=$(med W "$key")
		c=$(med C "$key")
		echo "| $(label "$key") | $m | $(for i in $(seq 1 "$RUNS"); do printf '%s ' "${W[$key-$i]}"; done | sed 's/ $//; s/ /, /g') | $(rate "$bytes" "$m") | $c | $(if [ "$tool" = crest ]; then echo —; else ratio "$m" "$crest"; fi) |"
		if [ "$tool" != crest ] && { [ -z "$best" ] || awk -v a="$m" -v b="$best" 'BEGIN { exit !(a < b) }'; }; then
			best=$m BEST=$(label "$key")
		fi
	done
	echo
	if [ "$target" != 0 ]; then
		local r
		r=$(ratio "$best" "$crest")
		echo "Faster peer: $BEST, $best s; ratio to crest $r; target >= $target: **$(awk -v r="$r" -v t="$target" 'BEGIN { print (r >= t) ? "met" : "not met" }')**."
		echo
	fi
}
label() {
	case $1 in
	*-crest) echo "crest" ;;
	again-restic) echo "restic (default: parent snapshot, the file skipped unread)" ;;
	force-restic) echo "restic --force (reads and chunks the file again)" ;;
	again-borg) echo "borg (its files cache: see below)" ;;
	*-restic) echo "restic" ;;
	*-borg) echo "borg" ;;
	esac
}

echo "### crest beside restic and borg: $SIZE of memory-like data ($(nproc) cores)"
echo
echo "Command: \`bash bench/store/peers.sh $*\` (size $SIZE, $RUNS runs each); $(date -u '+%Y-%m-%d %H:%M UTC'); load average (1, 5, 15 min) $LOAD0 at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end of the timed runs."
echo
machine
echo "- software: $("$CREST" version | head -1); $(restic version | cut -d' ' -f1-2) (repository version $(restic -r "$WORK/repo-restic" cat config 2>/dev/null | sed -n 's/.*"version": \([0-9]*\).*/\1/p'), compression auto); $(borg --version) (compression lz4, encryption none)"
echo "- data: \`store_tool memory\`, $bytes bytes: 4 KiB pages, ~25% zero, ~35% random, ~40% structured records"
echo "- every repository, restic's cache and temporary packs and borg's cache under $WORK (same disk); the input in the page cache before each ingest"
echo
# ingest and re-ingest
table first 4 "Ingest into an empty repository" crest restic borg
# The least work of crest's put and get of these bytes on this machine
# (work_floor: nothing stored, nothing written), beside what the targets
# ask: a target below it is out of reach for any program doing that work.
FLOOR=$BUILD/bench/store/work_floor
fl_new= fl_get=
# against_floor PHASE TARGET FLOOR_S WHAT: the time the target asks for in
# PHASE (the faster peer's median over TARGET) beside the floor.
against_floor() {
	local peer want
	peer=$(awk -v a="$(med W "$1-restic")" -v b="$(med W "$1-borg")" 'BEGIN { print (a < b) ? a : b }')
	want=$(awk -v p="$peer" -v t="$2" 'BEGIN { printf "%.3f", p / t }')
	echo "- $1: the target (>= $2x) asks for $want s; the least work of $4 is $3 s (bench/store/work_floor, after the timed runs): $(awk -v w="$want" -v f="$3" 'BEGIN { print (w < f) ? "below that floor, out of reach" : "above that floor" }')."
}
if [ -x "$FLOOR" ]; then
	warm_input
	fl=$("$FLOOR" "$data" | grep '^RESULT') || { echo "bench: work_floor failed" >&2; exit 1; }
	fl_new=$(sed -n 's/.* put_new_floor_s=\([^ ]*\).*/\1/p' <<<"$fl")
	fl_get=$(sed -n 's/.* get_floor_s=\([^ ]*\).*/\1/p' <<<"$fl")
	against_floor first 4 "$fl_new" "this put on $(nproc) cores (read, chunk, hash, compress; nothing stored)"
	echo
else
	echo "($FLOOR not built: the floors are not measured)"
	echo
fi
# The faster peer for the re-ingest: among the ones that read the file again.
table again 0 "Re-ingest of the unchanged file (a second snapshot)" crest restic restic:force-restic borg
best=$(med W force-restic)
bb=$(med W again-borg)
ca=$(med W again-crest)
ra=$(med W again-restic)
echo "- restic as run by default: ${restic_again:-?} (ratio to crest $(ratio "$ra" "$ca")); with --force: ${restic_force:-?}."
if [ "${borg_again:-0}" -gt 0 ]; then
	echo "- borg read and chunked the file again (\`--list\` says A or M: its files cache keeps no entry for a file whose ctime/mtime is as new as the newest in the backup, which a lone file always is)."
	reread=$(awk -v r="$best" -v b="$bb" 'BEGIN { print (r < b) ? "restic --force" : "borg" }')
	best=$(awk -v r="$best" -v b="$bb" 'BEGIN { print (r < b) ? r : b }')
else
	echo "- borg skipped the file by its files cache (\`--list\` says U)."
	reread="restic --force"
fi
echo "- of the peers that read the file again, the faster: $reread, ratio to crest $(ratio "$best" "$ca") (the issue sets no target here)."
echo
table cold 3 "Restore of the newest snapshot, caches dropped before each$([ $COLD = yes ] || echo ' (NOT dropped: not root)')" crest restic borg
table warm 3 "Restore of the newest snapshot, warm (the repository in the page cache)" crest restic borg
if [ -n "$fl_get" ]; then
	for t in cold warm; do
		against_floor "$t" 3 "$fl_get" "a get of these bytes on $(nproc) cores (copy, check, decode, verify; no file written)"
	done
	echo
fi
echo "Every restored file compared with the original by \`cmp\`: all $((RUNS * 6)) identical."
echo
echo "#### Stored size (du -sb of the repository after the first ingest; caches outside it not counted)"
echo
echo "| tool | bytes | of the input |"
echo "|---|---|---|"
for tool in $TOOLS; do
	echo "| $tool | ${S[$tool]} | $(awk -v s="${S[$tool]}" -v b="$bytes" 'BEGIN { printf "%.1f%%", 100 * s / b }') |"
done
echo

# Durability: what each tool syncs in one ingest and one restore of a small
# file, counted by strace (the figures above are without strace).
echo "#### Durability"
echo
if command -v strace >/dev/null; then
	head -c 64M "$data" >"$WORK/in/small.bin"
	small=$(( $(stat -c %s "$WORK/in/small.bin") / 1048576 ))
	sync
	rm -rf "$WORK"/d-* "$BORG_BASE_DIR" "$RESTIC_CACHE_DIR"
	restic -r "$WORK/d-restic" init >/dev/null 2>&1
	borg init --encryption none "$WORK/d-borg" >/dev/null 2>&1
	syncs() { strace -f -qq -o "$WORK/strace.out" -e trace=fsync,fdatasync,sync_file_range,syncfs,sync "$@" >/dev/null 2>&1 ||
			{ echo "bench: strace $* failed" >&2; exit 1; }
		{ grep -oE '^[0-9]+ +(fsync|fdatasync|sync_file_range|syncfs|sync)\(' "$WORK/strace.out" || true; } | sed 's/^[0-9]* *//; s/($//' |
			sort | uniq -c | awk '{ printf "%s%s %s", sep, $1, $2; sep = ", " } END { if (!NR) printf "none" }'; }
	mkdir -p "$WORK/d-out-c" "$WORK/d-out-r" "$WORK/d-out-b"
	p_c=$(syncs "$CREST" --store "$WORK/d-crest" --quiet put "$WORK/in/small.bin")
	p_r=$(syncs restic -r "$WORK/d-restic" backup "$WORK/in/small.bin")
	p_b=$(cd "$WORK/in" && syncs borg create "$WORK/d-borg::x" small.bin)
	g_c=$(syncs "$CREST" --store "$WORK/d-crest" --quiet get "$(newest_crest "$WORK/d-crest")" "$WORK/d-out-c")
	g_r=$(syncs restic -r "$WORK/d-restic" restore latest --target "$WORK/d-out-r")
	g_b=$(cd "$WORK/d-out-b" && syncs borg extract "$WORK/d-borg::x")
	echo "Sync calls in one ingest and one restore of $small MiB of the same data (strace -f):"
	echo
	echo "| tool | ingest | restore |"
	echo "|---|---|---|"
	echo "| crest | $p_c | $g_c |"
	echo "| restic | $p_r | $g_r |"
	echo "| borg | $p_b | $g_b |"
	echo
	echo "- restic's packs: $(find "$WORK/d-restic/data" -type f | wc -l) files in data/; borg's segments: $(find "$WORK/d-borg/data" -type f | wc -l) files; crest's packs: $(find "$WORK/d-crest/packs" -type f | wc -l)."
	rm -rf "$WORK"/d-* "$WORK/in/small.bin"
else
	echo "(strace missing: sync calls not counted; apt-get install -y strace)"
fi
echo "- Note: all three commit durably: crest fdatasyncs its packs and index before a snapshot is visible; restic's local backend fsyncs every file it saves (packs, indexes, snapshots), then its directory (\`Save\` in internal/backend/local/local.go); borg fdatasyncs a segment when it closes it and at commit. None of the three syncs a restored file (restic's two fsyncs are of its lock file): the restore figures stop before the restored bytes' writeback, for all three alike."
echo

# Where crest's time goes: one more put into a new store and one cold get,
# with CREST_TRACE (not among the medians above).
echo "#### Where crest's time goes (CREST_TRACE=1, one more put into a new store and one cold get)"
echo
rm -rf "$WORK/repo-crest" "$WORK/out-crest"
warm_input
run trace-put "$WORK" env CREST_TRACE=1 "$CREST" --store "$WORK/repo-crest" put "$data"
tput=$WALL cput=$CPU
sync
dropcache
run trace-get "$WORK" env CREST_TRACE=1 "$CREST" --store "$WORK/repo-crest" get "$(newest_crest "$WORK/repo-crest")" "$WORK/out-crest"
cmp "$data" "$WORK/out-crest/state.bin" || { echo "bench: traced crest get's bytes differ" >&2; exit 1; }
echo "put: $tput s wall, $cput s CPU; get (cold): $WALL s wall, $CPU s CPU."
echo
echo '```'
grep -h -e '^crest trace' -e 'logical' -e '^restored' "$WORK/trace-put.log" "$WORK/trace-get.log" | sed 's/^  *//'
echo '```'
