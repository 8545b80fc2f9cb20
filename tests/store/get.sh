#!/bin/bash
# Issue 14, item 3: crest get restores files by windows of chunks read in
# long runs (restore/gpu.c), not chunk by chunk. Randomized: a random tree
# (sizes 0, 1, chunk-1, chunk, chunk+1, multi-MiB raw and LZ4 data, repeated
# chunks, sparse files with holes at either end, a file all hole, thousands
# of small files, random modes) goes in with crest put (fixed and CDC
# chunks), comes back with crest get: bytes, modes, mtimes and holes agree.
# Then one chunk is damaged so that only its SHA-256 shows it (the record's
# CRC32C written anew): crest get fails naming the chunk, and no file with
# wrong bytes is left in place. GET_SEED=N replays a run.
. "$(dirname "$0")/lib.sh"

seed=${GET_SEED:-$(od -An -N2 -tu2 /dev/urandom | tr -d ' ')}
echo "seed $seed (GET_SEED=$seed replays it)"
RANDOM=$seed
C=65536   # the fixed chunker's chunk size below
SHM=/dev/shm/crest-get-test.$$
trap 'rm -rf "$SHM"; umount "$T/small" 2>/dev/null || true; cleanup' EXIT

src=$T/src
mkdir -p "$src/small" "$src/big/deeper"
modes=(0600 0644 0755 0400 0640 0700 0444 0000)
mode() { chmod "${modes[RANDOM % ${#modes[@]}]}" "$1"; }
# data KIND PATH SIZE: random (raw records) or memory (LZ4 records).
data() { "$STORE_TOOL" "$1" "$2" "$3" $((RANDOM * 32768 + RANDOM)); }
# any PATH SIZE: either kind. Not through $(...): a subshell's RANDOM is
# seeded anew, and the run would not replay.
any() { if ((RANDOM % 2)); then data random "$@"; else data memory "$@"; fi; }

note "edge sizes"
for n in 0 1 $((C - 1)) $C $((C + 1)) $((2 * C + 1)) $((RANDOM % C + 2))
do
	any "$src/size-$n" "$n"
	mode "$src/size-$n"
done

note "multi-MiB files"
for i in 1 2 3; do
	f=$src/big/file-$i
	any "$f" $(((RANDOM % (9 << 20) + (1 << 20)) / SCALE + RANDOM % 4096))
	mode "$f"
done
# Large enough that a file's windows go to several threads.
any "$src/big/deeper/large" $(((48 << 20) / SCALE + RANDOM))
# The same chunk several times in a window: one record, several places.
data random "$T/rep" $((3 * C))
cat "$T/rep" "$T/rep" "$T/rep" "$T/rep" >"$src/big/repeated"

note "sparse files"
holes_slack=0
for i in 1 2 3 4; do
	f=$src/big/sparse-$i
	size=$(((RANDOM % 32 + 8) << 20))
	truncate -s "$size" "$f"
	islands=$((RANDOM % 4 + 1))
	for ((k = 0; k < islands; k++)); do
		any "$T/island" $((RANDOM % (1 << 20) + 1))
		# Where: anywhere, the very start or the very end.
		case $((RANDOM % 3)) in
		0) at=$(((RANDOM * 32768 + RANDOM) % (size - (1 << 20)))) ;;
		1) at=0 ;;
		2) at=$((size - $(stat -c %s "$T/island"))) ;;
		esac
		dd if="$T/island" of="$f" bs=1M seek="$at" oflag=seek_bytes conv=notrunc status=none
		holes_slack=$((holes_slack + 2 * C))
	done
	mode "$f"
done
truncate -s 20M "$src/big/all-hole"

note "many small files"
# Slices of one random MiB, random modes; one process makes them all.
"$STORE_TOOL" files "$src/small" $((2000 / SCALE)) $((RANDOM * 32768 + RANDOM))
chmod 0555 "$src/small/d3"
touch -d '2011-11-11 11:11:11' "$src/small" "$src/big/deeper"

# alloc_ok SRC OUT: the restored file allocates no more than its source,
# give or take chunk edges around each data island: holes stay holes.
alloc_ok() {
	local a b
	a=$(du -B1 "$1" | cut -f1)
	b=$(du -B1 "$2" | cut -f1)
	[ "$b" -le $((a + holes_slack + (1 << 20))) ] || fail "$2 lost its holes ($b bytes allocated, source $a)"
}

for chunker in "fixed --chunk-size $C" cdc; do
	note "put and get, $chunker chunks"
	# shellcheck disable=SC2086
	put --tag "t-${chunker%% *}" --chunker $chunker "$src"
	rm -rf "$T/out"
	crest get "t-${chunker%% *}" "$T/out"
	same_tree "$src" "$T/out/src"
	for f in "$src"/big/sparse-* "$src/big/all-hole"; do
		alloc_ok "$f" "$T/out/src/big/${f##*/}"
	done
	[ "$(du -B1 "$T/out/src/big/all-hole" | cut -f1)" -eq 0 ] || fail "all-hole was written"
	chmod -R u+rwx "$T/out"
	# Into tmpfs, the other way a file is written: several threads
	# through a shared mapping (restore/gpu.c), where other file systems
	# take pwrite.
	rm -rf "$SHM"
	crest get "t-${chunker%% *}" "$SHM"
	# Directories' sizes are the file system's own: left out.
	listing() { (cd "$1" && find . -type d -printf '%P|%y|%m|%l||%T@\n' -o -printf '%P|%y|%m|%l|%s|%T@\n' |
		LC_ALL=C sort); }
	diff <(listing "$src") <(listing "$SHM/src") >&2 || fail "trees $src and $SHM/src differ (listing)"
	"$STORE_TOOL" same "$src" "$SHM/src" || fail "trees $src and $SHM/src differ (bytes)"
	for f in "$src"/big/sparse-* "$src/big/all-hole"; do
		alloc_ok "$f" "$SHM/src/big/${f##*/}"
	done
	chmod -R u+rwx "$SHM"
	rm -rf "$SHM"
done
verify_store "after the puts"

if [ "$(id -u)" = 0 ]; then
	note "a tmpfs too small for a file: one line, no crash"
	# The pages of a mapping are made before they are written, so a full
	# tmpfs is an error (ENOSPC), not SIGBUS.
	mkdir -p "$T/small"
	mount -t tmpfs -o size=8m tmpfs "$T/small" || fail "cannot mount a small tmpfs (as root)"
	expect_error "crest get into a full tmpfs" "$CREST" --quiet get t-fixed "$T/small/out"
	echo "$ERR" | grep -qi "space" || { umount "$T/small"; fail "the error does not say the file system is full: $ERR"; }
	umount "$T/small"
fi

note "damage only the SHA-256 can see"
# A raw record, picked at random: its bytes change and its CRC32C is
# written anew, so the record checks out and only hashing its bytes tells it
# from its name. Picked by chunk id, not place: parallel ingest lays the
# packs out differently each run, the seed still names the same chunk.
for p in "$S"/packs/*.pack; do
	"$STORE_TOOL" records "$p" | awk -v p="$p" '$2 == 0 && $3 >= 2 { print $4, $1, p }'
done | LC_ALL=C sort >"$T/records"
nrec=$(wc -l <"$T/records")
[ "$nrec" -gt 0 ] || fail "no raw records in the packs"
pick=$((RANDOM % nrec + 1))   # here, not in the subshell below
read -r sha off pack < <(sed -n "${pick}p" "$T/records")
echo "   record at $off of $(basename "$pack"), chunk ${sha:0:16}"
"$STORE_TOOL" forge "$pack" "$off"
"$CASCTL" --quiet verify >/dev/null 2>&1 && fail "casctl verify passed a forged chunk"
failed=0
for t in t-fixed t-cdc; do
	rm -rf "$T/out"
	# The chunk may belong to one snapshot only (CDC cuts elsewhere).
	rc=0
	"$CREST" --quiet get "$t" "$T/out" >"$T/get.out" 2>"$T/get.err" || rc=$?
	if [ "$rc" -ne 0 ]; then
		expect_error "$t: crest get" "$CREST" --quiet get "$t" "$T/out2"
		echo "$ERR" | grep -q "${sha:0:16}" || fail "$t: crest get's error does not name chunk ${sha:0:16}"
		echo "$ERR" | grep -q "snapshot .*stream .*offset" || fail "$t: no snapshot, stream and offset in: $ERR"
		failed=$((failed + 1))
	fi
	# Nothing wrong left in place: every file there is bit-exact, and no
	# temporary file remains.
	intact_only "$t" "$T/out" "$src"
	echo "   $t: rc $rc, $INTACT intact file(s) restored, nothing else"
	chmod -R u+rwx "$T/out" "$T/out2" 2>/dev/null || true
	rm -rf "$T/out2"
done
[ "$failed" -gt 0 ] || fail "crest get passed a forged chunk in both snapshots"
"$STORE_TOOL" forge "$pack" "$off"
verify_store "after undoing the forgery"
rm -rf "$T/out"
crest get t-fixed "$T/out"
same_tree "$src" "$T/out/src"
echo "PASS"
