#!/bin/bash
# restore_stream_to_pipe, as crest restore serves CRIU its images
# (restore/imgsrv.h): files of every kind (empty, one byte, odd sizes, holes,
# compressible and random data, several windows' worth) are put with both
# chunkers, and test_pipe reads each stream back through a pipe in random
# bites with random pauses, sometimes leaving early. Every stream read to
# its end must equal its file byte for byte; the pipe holds the restore's
# buffers by reference, so a buffer refilled before the reader took it
# shows here. The seed is printed; CREST_TEST_SEED replays the reader's
# choices (not the threads' timing).
source "$(dirname "$0")/lib.sh"
: "${TEST_PIPE:?TEST_PIPE must name test_pipe}"
SEED=${CREST_TEST_SEED:-$(( $(date +%s%N) % 1000000 ))}
echo "seed $SEED (CREST_TEST_SEED=$SEED replays it)"
d=$T/data
mkdir -p "$d"
: >"$d/empty"
printf x >"$d/one"
"$STORE_TOOL" random "$d/odd" 12345 "$SEED" >/dev/null
"$STORE_TOOL" memory "$d/memory" "$(scaled $((24 << 20)))" "$SEED" >/dev/null
"$STORE_TOOL" random "$d/random" "$(( $(scaled $((40 << 20))) + 777 ))" "$((SEED + 1))" >/dev/null
# A hole of 8 MiB between data: zeros the pipe must carry.
"$STORE_TOOL" random "$d/holes" 4096 "$((SEED + 2))" >/dev/null
truncate -s $((8 << 20)) "$d/holes"
head -c 100000 "$d/random" >>"$d/holes"
# compare WHAT: every stream test_pipe's log says came through the pipe
# whole ($out/INDEX) must equal its file; n counts them.
compare() {
	n=0
	while read -r _ i name rest; do
		case $rest in *"through the pipe") ;; *) continue ;; esac
		name=${name%:}
		[ -f "$d/$(basename "$name")" ] || continue   # the directory's own stream
		cmp "$out/$i" "$d/$(basename "$name")" || fail "$1: stream $name came through the pipe changed"
		n=$((n + 1))
	done <"$T/log"
}
for chunker in fixed cdc; do
	"$CREST" --store "$S" put --chunker "$chunker" --tag "$chunker" "$d" >/dev/null
	out=$T/out-$chunker
	rm -rf "$out" && mkdir -p "$out"
	"$TEST_PIPE" "$S" "$chunker" "$out" "$((SEED + ${#chunker}))" | tee "$T/log"
	compare "$chunker"
	grep -q "reader left" "$T/log" || fail "$chunker: no reader left early"
	[ "$n" -ge 2 ] || fail "$chunker: only $n streams were read to their end"
	echo "$chunker: $n streams equal to their files"
	# Windows smaller than the pipe, not a multiple of 4 KiB: a thread's
	# buffer then shares the pipe with the next thread's send (restore/gpu.c,
	# pipe_drained), which default sizes never do. Fixed 4 KiB chunks fit.
	if [ "$chunker" = fixed ]; then
		rm -rf "$out" && mkdir -p "$out"
		CREST_PIPE_WINDOW=700000 "$TEST_PIPE" "$S" "$chunker" "$out" "$((SEED + 7))" | tee "$T/log"
		compare "small windows"
		echo "$chunker, 700000-byte windows: streams equal to their files"
	fi
done
echo PASS
