#!/bin/bash
# tmpfs_fill.sh [SIZE_MIB [DIR [METHODS]]] - tmpfs_fill (one file filled by
# several threads, by each method it knows) at 1, 4, 8 and 16 threads (those
# above nproc become nproc), SIZE_MIB (4096) in DIR (/dev/shm), as a markdown
# table of GB/s; before it, tmpfs_fill's own lines (with the per-thread
# sums of CPU time and sleeps) for the most threads. THREADS="1 2 ..."
# overrides the thread counts, WINDOW_KIB the window (8192).
# HUGE=1 (root only) runs it all again in a tmpfs of its own mounted with
# huge=within_size, to show what 2 MiB pages would give where the
# machine's /dev/shm has huge=never (the usual default); it is unmounted at
# the end.
# The binary: $TMPFS_FILL, else .gpu/bin/tmpfs_fill (a bundle), else
# build/bench/store/tmpfs_fill, else compiled here from tmpfs_fill.c with cc.
# Every line tmpfs_fill printed goes to $LOG (a file in /tmp unless set),
# and to $OUT/tmpfs_fill.log when OUT is set.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
size=${1:-4096}
dir=${2:-/dev/shm}
methods=${3:-default}
win=${WINDOW_KIB:-8192}
tmp=$(mktemp -d /tmp/tmpfs_fill.XXXXXX) || exit 1
mnt=""
cleanup() {
	if [ -n "$mnt" ]; then umount "$mnt" 2>/dev/null; rmdir "$mnt" 2>/dev/null; fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -n "${TMPFS_FILL:-}" ]; then
	bin=(${TMPFS_FILL})
elif [ -x "$root/.gpu/bin/tmpfs_fill" ] && [ -x "$root/.gpu/run" ]; then
	bin=("$root/.gpu/run" tmpfs_fill)
elif [ -x "$root/build/bench/store/tmpfs_fill" ]; then
	bin=("$root/build/bench/store/tmpfs_fill")
else
	cc -std=c11 -O2 -Wall -Wextra -Werror -pthread "$here/tmpfs_fill.c" -o "$tmp/tmpfs_fill" ||
		{ echo "tmpfs_fill.sh: no tmpfs_fill binary and cannot compile one" >&2; exit 1; }
	bin=("$tmp/tmpfs_fill")
fi
log=${LOG:-$tmp/all.log}
: >"$log" || exit 1

n=$(nproc)
if [ -n "${THREADS:-}" ]; then
	counts=$THREADS
else
	counts=""
	for t in 1 4 8 16; do
		[ "$t" -gt "$n" ] && t=$n
		case " $counts " in *" $t "*) ;; *) counts="$counts $t" ;; esac
	done
fi

# series KEY LABEL DIR: tmpfs_fill at each thread count; its lines to $log
# and to $tmp/KEY.T; the last count's lines to stdout.
status=0
series() {
	local key=$1 label=$2 d=$3 t last
	for t in $counts; do last=$t; done
	for t in $counts; do
		"${bin[@]}" "$d" "$size" "$t" "$win" "$methods" >"$tmp/$key.$t" 2>"$tmp/$key.$t.err" || status=1
		{ echo "## $label, $t threads"; cat "$tmp/$key.$t" "$tmp/$key.$t.err"; } >>"$log"
		if [ "$t" = "$last" ]; then
			echo "$label, $t threads:"
			echo '```'
			cat "$tmp/$key.$t"
			echo '```'
		fi
		sed -n 's/^tmpfs_fill: /error: /p' "$tmp/$key.$t.err"
	done
}

# table KEY LABEL: methods as rows, thread counts as columns, GB/s in cells.
table() {
	local key=$1 label=$2 t
	printf '\n%s: GB/s filling one %s MiB file (window %s KiB)\n\n| method |' "$label" "$size" "$win"
	for t in $counts; do printf ' %s thr |' "$t"; done
	printf '\n|---|'
	for t in $counts; do printf -- '---:|'; done
	printf '\n'
	local files=()
	for t in $counts; do files+=("$tmp/$key.$t"); done
	awk -v files="${files[*]}" '
		BEGIN {
			n = split(files, f, " ")
			for (i = 1; i <= n; i++)
				while ((getline line < f[i]) > 0) {
					if (line ~ /^#/ || line == "") continue
					split(line, w, " ")
					if (!(w[1] in seen)) { seen[w[1]] = 1; order[++m] = w[1] }
					v[w[1], i] = (w[2] == "FAILED") ? "failed" : w[3]
				}
			for (j = 1; j <= m; j++) {
				printf "| %s |", order[j]
				for (i = 1; i <= n; i++) printf " %s |", ((order[j], i) in v) ? v[order[j], i] : "-"
				printf "\n"
			}
		}'
}

series main "$dir" "$dir"
huge=""
if [ "${HUGE:-0}" = 1 ]; then
	mnt=$(mktemp -d /tmp/tmpfs_fill_huge.XXXXXX)
	if [ "$(id -u)" = 0 ] && mount -t tmpfs -o "size=$((size + 64))m,huge=within_size" tmpfs "$mnt"; then
		huge="tmpfs huge=within_size"
		series huge "$huge" "$mnt"
	else
		echo "HUGE=1: cannot mount a tmpfs with huge=within_size here (needs root); skipped"
	fi
fi
echo
head -1 "$tmp/main.$(echo $counts | cut -d' ' -f1)"
table main "$dir"
[ -n "$huge" ] && table huge "$huge"
[ -n "${OUT:-}" ] && [ -d "$OUT" ] && cp "$log" "$OUT/tmpfs_fill.log"
exit $status
