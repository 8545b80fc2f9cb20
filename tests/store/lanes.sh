#!/bin/bash
# A writer session writes several packs at once, one per lane (cas/pack.c),
# so a writer that fails or is killed can leave uncommitted bytes in packs
# below the last one the index records, not only past it. 24 random rounds,
# each with its own lane count (CREST_PACK_LANES 1..8), pack size limit
# (CREST_PACK_LIMIT 64K/256K/1M, so lanes roll over many packs) and fresh
# data (sometimes with a file shared by all rounds, for dedup), and one of:
#   put   a put that must succeed;
#   fault a put of 8 to 16 MiB, in 2 to 8 lanes, whose Kth pack write
#         fails (CREST_FAULT_WRITE=K, K in 1..3): it exits non-zero with the
#         injected failure's message, or 0 when it has fewer than K batches
#         to write;
#   kill  a put killed with kill -9 at a random moment within its duration;
#   ckpt  a session of several commits (`crest bench checkpoint` into the
#         store: library-style checkpoints of host regions) killed likewise.
#         A put commits once, at its end, so a killed put leaves only packs
#         past the last recorded one; a session killed after a commit leaves
#         each lane's tail in a recorded pack, below the last recorded one.
# Checked:
#  (a) after every crest that opened the store as a writer exited (success
#      or failure), each pack file has a 'p' end equal to its size, or an 'r'
#      key, and each 'p' key names a pack on disk (store_tool ends);
#  (b) after a kill, the next writer (a small put) cuts what the kill left,
#      so (a) holds again once it exits;
#  (c) every 6 rounds and at the end: every listed snapshot restores
#      bit-exact (a put's to what was put under its tag; a checkpoint's to
#      the same checkpoint of an uninterrupted session), every put that
#      exited 0 is listed, no failed put is, a killed one may be, and
#      `casctl verify` passes.
# The seed is printed; CREST_TEST_SEED replays a run's choices and data (not
# where the kills land, which depends on timing).
. "$(dirname "$0")/lib.sh"

seed=${CREST_TEST_SEED:-$(( (RANDOM << 15 | RANDOM) % 1000000 ))}
RANDOM=$seed
echo "seed $seed (CREST_TEST_SEED=$seed replays it)"
rounds=24
# Killed puts (and the timed one) put 16 MiB: of their 80 ms or so, about
# half is pack writes; the others put 2 to 8 MiB.
kill_bytes=$(scaled $((16 << 20)))
mkdir -p "$T/data"
shared=$T/data/shared.bin
"$STORE_TOOL" random "$shared" "$(scaled $((4 << 20)))" $((seed * 1000))
# ckpt STORE KIB CHANGE: sets CKPT to the command of a checkpoint session,
# 6 checkpoints of 4 regions, KIB KiB in all, with CHANGE% of each region
# rewritten between them (in 1 MiB blocks at random places). Its data
# depends on KIB and CHANGE alone, so a session killed in the store and an
# uninterrupted one in a store of its own (the reference) have the same Kth
# checkpoints. KIB differs from session to session, so that each has new
# data to write from its second checkpoint on (bench's generator starts
# from a fixed seed; the size moves where its changes fall). --store: bench
# writes to a temporary store unless one is named. (A command, not a
# function: the kill must reach crest itself, not a subshell running it.)
ckpt() {
	CKPT=("$CREST" --quiet --store "$1" bench checkpoint --size "$(scaled $(($2 << 10)))" --regions 4
		--repeat 6 --change "$3" --staging 64M)
}

# mksrc DIR BYTES: fresh data, different for every directory (store_tool
# seeds from the test's seed), and half the time the shared file.
nsrc=0
mksrc() {
	nsrc=$((nsrc + 1))
	mkdir -p "$1/sub"
	"$STORE_TOOL" random "$1/own.bin" "$2" $((seed * 1000 + nsrc))
	"$STORE_TOOL" random "$1/sub/small.bin" $((1 + RANDOM % 5000)) $((seed * 1000 + 500 + nsrc))
	SHARED=
	if [ $((RANDOM % 2)) = 1 ]; then
		ln "$shared" "$1/shared.bin"
		SHARED=" + shared"
	fi
}

# (a): every pack on disk recorded with its size as its end, or retired;
# every recorded pack on disk. ends_bad leaves in $T/bad the packs that are
# not, as "PACK SIZE END" lines.
ends_bad() {
	"$STORE_TOOL" ends "$S" >"$T/ends" || fail "store_tool ends $S"
	awk '$3 == "r" && $2 != "-" { next } $2 == "-" || $3 == "-" || $2 != $3' "$T/ends" >"$T/bad"
}
check_ends() {
	ends_bad
	[ ! -s "$T/bad" ] || { echo "PACK SIZE END:" >&2; cat "$T/bad" >&2; fail "$* (invariant a)"; }
}

# The bytes of a restored tree, as one SHA-256.
tree_sum() { (cd "$1" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-64); }

# The model: src[TAG] the directory put under TAG (every put tried), must[TAG]
# set when that put exited 0, failed[TAG] when it exited with an error;
# ckpt_ref[SUM] set for the checkpoints of the reference sessions, and
# kibs[KIB] for the sizes of the sessions so far.
declare -A src must failed ckpt_ref kibs
check_store() {
	verify_store "$*"
	"$CREST" --json ls >"$T/ls.json" || fail "crest ls: $*"
	local line tags tag id n=0 nc=0
	declare -A seen=()
	while IFS= read -r line; do
		case $line in *'"snapshot"'*) ;; *) continue ;; esac
		id=$(printf '%s\n' "$line" | sed -n 's/.*"snapshot": "\([0-9a-f]*\)".*/\1/p')
		tags=$(printf '%s\n' "$line" | grep -o '"tags": \[[^]]*\]' | grep -o '"[^"]*"' | grep -v '"tags"' |
			tr -d '"' || true)
		rm -rf "$T/out"
		if [ -z "$tags" ] && [[ $line == *'"kind": "library"'*'"crest.branch": "crest-bench"'* ]]; then
			crest get "$id" "$T/out" || fail "$*: cannot restore checkpoint $id"
			[ -n "${ckpt_ref[$(tree_sum "$T/out")]:-}" ] ||
				fail "$*: checkpoint $id differs from every checkpoint of the reference sessions"
			nc=$((nc + 1))
			continue
		fi
		[ "$(echo "$tags" | grep -c .)" = 1 ] || fail "$*: a listed snapshot without exactly one tag: $line"
		tag=$tags
		[ -n "${src[$tag]:-}" ] || fail "$*: $tag is listed, but no put used that tag"
		[ -z "${failed[$tag]:-}" ] || fail "$*: $tag is listed, but its put failed"
		crest get "$tag" "$T/out" || fail "$*: cannot restore $tag"
		same_tree "${src[$tag]}" "$T/out/$(basename "${src[$tag]}")"
		seen[$tag]=1
		n=$((n + 1))
	done <"$T/ls.json"
	for tag in "${!must[@]}"; do
		[ -n "${seen[$tag]:-}" ] || fail "$*: $tag is not listed, though its put exited 0"
	done
	echo "   $*: $n snapshots and $nc checkpoints listed, each restored bit-exact; verify passes"
}

human() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

note "an uninterrupted put, to time one"
mksrc "$T/src-0" "$kill_bytes"
sync
t0=$(date +%s%N)
CREST_PACK_LANES=4 CREST_PACK_LIMIT=262144 "$CREST" --quiet put --tag lanes-0 "$T/src-0" >/dev/null ||
	fail "the first put failed"
put_ms=$(ms_since "$t0")
src[lanes-0]=$T/src-0
must[lanes-0]=1
check_ends "after the first put"
echo "   a put of $(human "$kill_bytes") takes $put_ms ms; kills fall within that"

note "$rounds rounds"
kills=0 midway=0 left=0 below=0 faults=0
for i in $(seq 1 $rounds); do
	lanes=$((1 + RANDOM % 8))
	case $((RANDOM % 3)) in 0) limit=65536 lim=64K ;; 1) limit=262144 lim=256K ;; *) limit=1048576 lim=1M ;; esac
	case $((RANDOM % 10)) in 0 | 1) what=put ;; 2 | 3) what=fault ;; 4 | 5 | 6) what=kill ;; *) what=ckpt ;; esac
	tag=lanes-$i
	dir=$T/src-$i
	# A killed put has the size the timed one had, so its delay fits it.
	bytes=$kill_bytes
	[ "$what" = kill ] || bytes=$(scaled $(( (2 + RANDOM % 7) << 20 )))
	# A failed put writes 8 to 16 MiB (2 to 4 segments of 4 MiB, one pack
	# write each) in 2 lanes or more, so that its failure finds other
	# lanes' records written.
	if [ "$what" = fault ]; then
		bytes=$(scaled $(( (8 + RANDOM % 9) << 20 )))
		lanes=$((2 + RANDOM % 7))
	fi
	if [ "$what" = ckpt ]; then
		desc="round $i: ckpt, lanes $lanes, limit $lim"
	else
		mksrc "$dir" "$bytes"
		src[$tag]=$dir
		desc="round $i: $what, lanes $lanes, limit $lim, $(human "$bytes")$SHARED"
	fi
	# Half the rounds add their chunk entries to the index as table files
	# (cas/ingest.c), which else only commits of 64 K chunks do: a kill
	# may land in the ingest or between it and the commit's batch.
	ingest=1000000000
	[ $((RANDOM % 2)) = 0 ] && ingest=16
	export CREST_PACK_LANES=$lanes CREST_PACK_LIMIT=$limit CREST_COMMIT_INGEST_MIN=$ingest
	[ "$ingest" = 16 ] && desc="$desc, entries as table files"
	case $what in
	put)
		"$CREST" --quiet put --tag "$tag" "$dir" >/dev/null 2>"$T/put.err" ||
			{ cat "$T/put.err" >&2; fail "$desc: the put failed"; }
		must[$tag]=1
		check_ends "$desc"
		echo "   $desc: ok"
		;;
	fault)
		k=$((1 + RANDOM % 3))
		rc=0
		CREST_FAULT_WRITE=$k "$CREST" --quiet put --tag "$tag" "$dir" >/dev/null 2>"$T/put.err" || rc=$?
		if [ "$rc" = 0 ]; then
			must[$tag]=1
			state="succeeded (fewer than $k pack writes)"
		else
			[ "$rc" -lt 128 ] || { cat "$T/put.err" >&2; fail "$desc: died of a signal (rc $rc)"; }
			grep -q "CREST_FAULT_WRITE" "$T/put.err" ||
				{ cat "$T/put.err" >&2; fail "$desc: exit $rc without the injected failure's message"; }
			failed[$tag]=1
			faults=$((faults + 1))
			state="failed (rc $rc): $(head -n 1 "$T/put.err")"
		fi
		check_ends "$desc, CREST_FAULT_WRITE=$k"
		echo "   $desc, CREST_FAULT_WRITE=$k: $state"
		;;
	kill | ckpt)
		full_ms=$put_ms
		if [ "$what" = ckpt ]; then
			# 8 to 20 MiB, in steps of 256 KiB: more sizes than rounds.
			kib=$(( (32 + RANDOM % 49) * 256 ))
			while [ -n "${kibs[$kib]:-}" ]; do kib=$(( (32 + RANDOM % 49) * 256 )); done
			kibs[$kib]=1
			change=$((50 + RANDOM % 51))
			desc="$desc, $(human "$(scaled $((kib << 10)))"), change $change%"
			# The reference session, timed: uninterrupted, in a store
			# of its own, with the same lanes and limit.
			rm -rf "$T/ref"
			t0=$(date +%s%N)
			ckpt "$T/ref" "$kib" "$change"
			"${CKPT[@]}" >/dev/null || fail "$desc: the reference session failed"
			full_ms=$(ms_since "$t0")
			"$CREST" --store "$T/ref" --json ls >"$T/ref.json"
			[ "$(grep -c '"snapshot"' "$T/ref.json")" = 6 ] || fail "$desc: the reference session left no 6 checkpoints"
			for id in $(sed -n 's/.*"snapshot": "\([0-9a-f]*\)".*/\1/p' "$T/ref.json"); do
				rm -rf "$T/out"
				crest --store "$T/ref" get "$id" "$T/out"
				ckpt_ref[$(tree_sum "$T/out")]=1
			done
			rm -rf "$T/ref"
		fi
		sync   # the writer should not be timed by the writeback of its own data
		delay=$(( (RANDOM * 32768 + RANDOM) % (full_ms + 1) ))
		# A session in the store is quicker than its reference (its first
		# checkpoint is mostly there already): its kills fall in the
		# middle half, after its start and before its end.
		[ "$what" = kill ] || delay=$(( full_ms / 4 + delay / 2 ))
		b0=$(pack_sizes)
		if [ "$what" = kill ]; then
			"$CREST" --quiet put --tag "$tag" "$dir" >/dev/null 2>"$T/put.err" &
		else
			ckpt "$S" "$kib" "$change"
			"${CKPT[@]}" >/dev/null 2>"$T/put.err" &
		fi
		kill_midway $! "$delay" "$b0"
		rc=$KILL_RC alive=$KILL_ALIVE grew=$KILL_GREW
		case $rc in
		137) kills=$((kills + 1)); state=killed ;;
		0) [ "$what" = ckpt ] || must[$tag]=1; state="had finished" ;;
		*) cat "$T/put.err" >&2; fail "$desc: it failed on its own (rc $rc)" ;;
		esac
		if [ "$rc" = 137 ] && [ "$alive" = 1 ] && [ "$grew" -gt 0 ]; then
			midway=$((midway + 1))
			state="killed mid-way, $grew pack bytes written"
		fi
		# What the kill left, before a writer opens the store again: packs
		# past their ends, and of those, recorded ones below the last
		# recorded pack (what only lanes leave).
		ends_bad
		nbad=$(wc -l <"$T/bad")
		nbelow=$(awk 'NR == FNR { if ($3 ~ /^[0-9]+$/) last = $1; next }
			$3 ~ /^[0-9]+$/ && $1 < last { n++ } END { print n + 0 }' "$T/ends" "$T/bad")
		[ "$nbad" = 0 ] || { left=$((left + 1)); state="$state, $nbad packs left off their ends"; }
		[ "$nbelow" = 0 ] || { below=$((below + 1)); state="$state ($nbelow recorded, below the last)"; }
		# (b): the next writer's open cuts it.
		mkdir -p "$T/small-$i"
		"$STORE_TOOL" random "$T/small-$i/f.bin" $((64 << 10)) $((seed * 1000 + 900 + i))
		unset CREST_PACK_LANES CREST_PACK_LIMIT
		"$CREST" --quiet put --tag "after-$i" "$T/small-$i" >/dev/null 2>"$T/put.err" ||
			{ cat "$T/put.err" >&2; fail "$desc: the put after the kill failed"; }
		src[after-$i]=$T/small-$i
		must[after-$i]=1
		check_ends "$desc, kill at $delay ms, then a put"
		if [ "$what" = kill ]; then
			"$CREST" --json ls >"$T/ls.json" || fail "crest ls after round $i"
			grep -q "\"$tag\"" "$T/ls.json" && state="$state; listed" || state="$state; not listed"
		fi
		echo "   $desc, kill at $delay of $full_ms ms: $state (rc $rc)"
		;;
	esac
	unset CREST_PACK_LANES CREST_PACK_LIMIT
	[ $((i % 6)) != 0 ] && [ "$i" != "$rounds" ] || check_store "after round $i"
done

echo "   $kills kills landed before the writer finished, $midway of them mid-way (running, pack bytes" \
	"written); $left left packs off their ends, $below of them recorded packs below the last;" \
	"$faults puts failed by CREST_FAULT_WRITE"
# A run whose kills all fell at the start or the end did not test the lanes'
# tails (CREST_TEST_SEED replays the choices, not the timing).
[ "$midway" -ge 3 ] || fail "only $midway kills landed mid-way: the test proves too little"
echo "PASS"
