#!/bin/bash
# Issue 10, item 6: odd input to crest put, each a clear one-line error or
# the right result: --chunk-size 0, a tag that reads as an id prefix, mode
# 0000, hard links, a /proc file (st_size 0), a character device.
. "$(dirname "$0")/lib.sh"

note "--chunk-size 0"
mkdir -p "$T/src"
printf 'x\n' >"$T/src/a"
expect_error "put --chunk-size 0" "$CREST" put --chunk-size 0 "$T/src"
echo "$ERR" | grep -q "must be more than 0" || fail "--chunk-size 0: the message does not say why"
[ ! -e "$S/index" ] && [ -z "$("$CREST" ls --json 2>/dev/null | grep '"snapshot"')" ] ||
	fail "--chunk-size 0 stored a snapshot"

note "a tag of hex digits would shadow an id prefix"
put --tag plain "$T/src"
id=$(field snapshot)
for t in "${id:0:4}" deadbeef "${id}" 0123456789ABCDEF; do
	expect_error "put --tag $t" "$CREST" put --tag "$t" "$T/src"
	echo "$ERR" | grep -q "snapshot id prefix" || fail "--tag $t: the message does not say why"
	expect_error "tag plain $t" "$CREST" tag plain "$t"
done
# Still fine: too short or too long to be a prefix, or a letter past f.
put --tag abc "$T/src"
put --tag "deadbeefg" "$T/src"
"$CREST" --quiet show "${id:0:8}" >/dev/null || fail "the id prefix ${id:0:8} no longer resolves"

note "mode 0000 and other modes come back exact"
mkdir -p "$T/modes"
for m in 0000 0400 0755 4755 2755 6755 0640 1777; do
	printf 'mode %s\n' "$m" >"$T/modes/m$m"
	chmod "$m" "$T/modes/m$m"
done
put "$T/modes"
mid=$(field snapshot)
rm -rf "$T/out"
crest get "$mid" "$T/out"
# Owners are not restored, so as root a set-ID bit would make the file a
# set-ID root program of bytes any user could have put: root's get leaves
# those bits out (2755 and 6755 too), anyone else's keeps them.
for m in 0000 0400 0755 4755 2755 6755 0640 1777; do
	got=$(stat -c %04a "$T/out/modes/m$m")
	want=$m
	[ "$(id -u)" -eq 0 ] && want=$(printf '%04o' $((8#$m & ~8#6000)))
	[ "$got" = "$want" ] || fail "mode $m came back as $got, not $want"
	[ "$want" = "$m" ] || chmod "$want" "$T/modes/m$m"
done
chmod -R u+r "$T/out" "$T/modes"
same_tree "$T/modes" "$T/out/modes"

note "hard links come back as links"
# Random contents and link layout; the seed replays it.
seed=${CREST_TEST_SEED:-$RANDOM}
echo "   seed $seed (CREST_TEST_SEED replays it)"
RANDOM=$seed
mkdir -p "$T/links/d1/d2" "$T/other"
"$STORE_TOOL" random "$T/links/big" 3M "$seed"
printf 'small %s\n' "$RANDOM" >"$T/links/d1/small"
ln "$T/links/big" "$T/links/d1/d2/big-again"
ln "$T/links/d1/small" "$T/links/small-too"
ln "$T/links/d1/small" "$T/links/d1/d2/small-three"
ln "$T/links/big" "$T/other/big-elsewhere"   # a link between two put paths
put "$T/links" "$T/other"
lid=$(field snapshot)
"$CREST" --json show "$lid" | grep -q 'link=links/big' || fail "show does not list the link meta"
rm -rf "$T/out"
crest get "$lid" "$T/out"
same_tree "$T/links" "$T/out/links"
ino() { stat -c %i "$1"; }
[ "$(ino "$T/out/links/big")" = "$(ino "$T/out/links/d1/d2/big-again")" ] || fail "big and d1/d2/big-again are separate files"
[ "$(ino "$T/out/links/big")" = "$(ino "$T/out/other/big-elsewhere")" ] || fail "big and other/big-elsewhere are separate files"
[ "$(ino "$T/out/links/d1/small")" = "$(ino "$T/out/links/small-too")" ] &&
	[ "$(ino "$T/out/links/d1/small")" = "$(ino "$T/out/links/d1/d2/small-three")" ] || fail "small's links are separate files"
[ "$(stat -c %h "$T/out/links/d1/small")" -eq 3 ] || fail "small has $(stat -c %h "$T/out/links/d1/small") links, not 3"
cmp -s "$T/links/big" "$T/out/other/big-elsewhere" || fail "the link's bytes differ"
verify_store "after the links"

note "a /proc file is stored as read, with a warning"
[ -r /proc/self/status ] || fail "no /proc here"
"$CREST" --quiet put /proc/self/mounts >"$T/put.out" 2>"$T/put.err" || fail "put /proc/self/mounts failed: $(cat "$T/put.err")"
echo "   $(cat "$T/put.err")"
[ "$(wc -l <"$T/put.err")" -eq 1 ] && grep -q "warning: /proc/self/mounts does not report its true size" "$T/put.err" ||
	fail "no one-line warning for /proc/self/mounts: $(cat "$T/put.err")"
rm -rf "$T/out"
crest get "$("$CREST" ls --json | sed -n 's/.*"snapshot": "\([0-9a-f]*\)".*/\1/p' | tail -1)" "$T/out"
[ -s "$T/out/mounts" ] || fail "/proc/self/mounts came back empty"
grep -q ' / ' "$T/out/mounts" || fail "/proc/self/mounts came back without the root mount: $(head -c 200 "$T/out/mounts")"

note "a character device is skipped with a warning"
mkdir -p "$T/dev"
printf 'kept\n' >"$T/dev/file"
if [ "$(id -u)" -eq 0 ]; then
	mknod "$T/dev/null" c 1 3
else
	ln -s /dev/null "$T/dev/null-link"   # cannot mknod: a FIFO below stands in
fi
mkfifo "$T/dev/fifo"
"$CREST" --quiet put "$T/dev" >"$T/put.out" 2>"$T/put.err" || fail "put of a tree with special files failed: $(cat "$T/put.err")"
cat "$T/put.err" | sed 's/^/   /'
grep -q "warning: skipping $T/dev/fifo: a FIFO" "$T/put.err" || fail "no warning for the FIFO"
if [ "$(id -u)" -eq 0 ]; then
	grep -q "warning: skipping $T/dev/null: a character device" "$T/put.err" || fail "no warning for the character device"
fi
note "a file that shrinks while crest reads it (the workers read it after put has queued it)"
# Random delays: the cut falls before, during or after the reads. Whatever
# it meets, a put succeeds with the whole file or with the cut one, or fails
# with one line; and the store stays sound.
seed=${CREST_SHRINK_SEED:-$$}
RANDOM=$seed
echo "   random seed $seed (CREST_SHRINK_SEED=$seed reproduces the delays)"
mkdir -p "$T/shrink"
head -c "$(scaled $((256 << 20)))" /dev/urandom >"$T/shrink.orig"
head -c 1M "$T/shrink.orig" >"$T/shrink.cut"
failed=0
for i in 1 2 3 4 5 6; do
	cp "$T/shrink.orig" "$T/shrink/f"
	"$CREST" --quiet --json put "$T/shrink" >"$T/shrink.out" 2>"$T/shrink.err" &
	pid=$!
	sleep "$(awk -v r=$((RANDOM % 400)) 'BEGIN { print r / 1000 }')"
	truncate -s 1M "$T/shrink/f"
	rc=0
	wait "$pid" || rc=$?
	if [ "$rc" -ne 0 ]; then
		[ "$rc" -lt 128 ] || fail "shrink $i: crest put died of a signal (rc $rc): $(cat "$T/shrink.err")"
		[ "$(wc -l <"$T/shrink.err")" -eq 1 ] || fail "shrink $i: expected one line on stderr: $(cat "$T/shrink.err")"
		grep -q "shrank while crest read it\|cannot read" "$T/shrink.err" ||
			fail "shrink $i: the message does not say the file changed: $(cat "$T/shrink.err")"
		echo "   shrink $i -> rc $rc: $(cat "$T/shrink.err")"
		failed=$((failed + 1))
		continue
	fi
	id=$(sed -n 's/.*"snapshot": "\([0-9a-f]*\)".*/\1/p' "$T/shrink.out")
	rm -rf "$T/shrink.get"
	crest get "$id" "$T/shrink.get"
	if cmp -s "$T/shrink.get/shrink/f" "$T/shrink.orig"; then
		echo "   shrink $i -> the whole file"
	elif cmp -s "$T/shrink.get/shrink/f" "$T/shrink.cut"; then
		echo "   shrink $i -> the cut file"
	else
		fail "shrink $i: put succeeded with bytes that are neither the file nor its cut ($(stat -c %s "$T/shrink.get/shrink/f") bytes)"
	fi
done
verify_store "after puts of a shrinking file"
note "a sparse file as long as a file can be comes back at once"
# One hole of 8 EiB: a file's holes are left as its truncation made them,
# and cut into windows of 16 MiB they took 2^39 turns (a day of CPU). Only
# tmpfs takes a file that long.
if [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ]; then
	sp=$(mktemp -d /dev/shm/crest-test-sparse.XXXXXX)
	truncate -s 9223372036854775807 "$sp/huge"
	put "$sp/huge"
	hid=$(field snapshot)
	# Not quiet: the speed line's rate, 8 EiB over a moment, must not
	# overflow (the sanitizer build checks the conversion).
	"$CREST" put "$sp/huge" >/dev/null || fail "a second put of the 8 EiB sparse file failed"
	if ! timeout 60 "$CREST" get "$hid" "$sp/out" >/dev/null; then
		rm -rf "$sp"
		fail "crest get of an 8 EiB sparse file did not end within 60 s"
	fi
	size=$(stat -c %s "$sp/out/huge")
	rm -rf "$sp"
	[ "$size" = 9223372036854775807 ] || fail "the 8 EiB sparse file came back with $size bytes"
else
	echo "   skipped: /dev/shm is not tmpfs"
fi
echo "inputs: all good"
