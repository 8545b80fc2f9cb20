#!/bin/bash
# check-layers.sh [ROOT] - fails on an #include that points up or sideways.
#
# crest's modules are layered; a module may include its own headers and
# those of layers below it, never one beside or above it:
#
#   4  cli  lib          argument parsing and printing; the public API
#   3  capture  restore  into the store; out of it
#   2  engine  gpu  os   ingest; the CUDA driver; /proc and CRIU
#   1  cas  dedup        the store and its format; chunkers
#   0  util              errors, hashing, threads, files
#
# "crest.h" (include/) is the public API: lib/ implements it and nothing
# else in the tree includes it (tests, bench and python are users, not
# modules, and are not checked). Prints one line per wrong include and
# exits 1 if there is any; exit 0 and a summary otherwise.
set -u
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
declare -A rank=([util]=0 [cas]=1 [dedup]=1 [engine]=2 [gpu]=2 [os]=2
		 [capture]=3 [restore]=3 [lib]=4 [cli]=4)
bad=0 n=0
for mod in "${!rank[@]}"; do
	[ -d "$root/$mod" ] || { echo "check-layers: module $mod/ is missing from $root" >&2; exit 2; }
	while IFS= read -r f; do
		while IFS=: read -r line inc; do
			n=$((n + 1))
			rel=${f#"$root"/}
			if [ "$inc" = crest.h ]; then
				[ "$mod" = lib ] && continue
				echo "$rel:$line: includes \"crest.h\": only lib/ may (the public API sits above every module)"
				bad=$((bad + 1))
				continue
			fi
			to=${inc%%/*}
			if [ "$to" = "$inc" ] || [ -z "${rank[$to]+x}" ]; then
				echo "$rel:$line: includes \"$inc\", which is not a module's header"
				bad=$((bad + 1))
			elif [ "$to" != "$mod" ] && [ "${rank[$to]}" -ge "${rank[$mod]}" ]; then
				what=$([ "${rank[$to]}" -gt "${rank[$mod]}" ] && echo up || echo sideways)
				echo "$rel:$line: $mod/ (layer ${rank[$mod]}) includes \"$inc\" (layer ${rank[$to]}): points $what"
				bad=$((bad + 1))
			fi
		done < <(awk 'match($0, /^[ \t]*#[ \t]*include[ \t]*"[^"]*"/) {
				s = substr($0, RSTART, RLENGTH); sub(/^[^"]*"/, "", s); sub(/"$/, "", s)
				print FNR ":" s }' "$f")
	done < <(find "$root/$mod" -name '*.[ch]' -type f | sort)
done
if [ "$bad" -gt 0 ]; then
	echo "check-layers: $bad include(s) point up, sideways or outside the modules"
	exit 1
fi
echo "check-layers: ok, $n includes in ${#rank[@]} modules all point down"
