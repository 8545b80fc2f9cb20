#!/bin/bash
# check-layers.sh [ROOT] - fails on an #include that points up or sideways, or closes a circle inside a module.
# check-layers.sh --graph MOD [ROOT] - prints MOD's picture instead: each of its
#   files with the headers of MOD it includes, then each header of MOD with the
#   files of other modules that include it (who calls MOD), one line each.
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
# modules, and are not checked). Inside a module the includes form no
# circle. Prints one line per wrong include and exits 1 if there is any;
# exit 0 and a summary otherwise.
set -u
if [ "${1:-}" = --graph ]; then
	mod=${2:?usage: check-layers.sh --graph MOD [ROOT]}
	root=${3:-$(cd "$(dirname "$0")/.." && pwd)}
	[ -d "$root/$mod" ] || { echo "check-layers: no module $mod/ in $root" >&2; exit 2; }
	cd "$root" || exit 2
	incs() { awk 'match($0, /^[ \t]*#[ \t]*include[ \t]*"[^"]*"/) {
		s = substr($0, RSTART, RLENGTH); sub(/^[^"]*"/, "", s); sub(/"$/, "", s); print s }' "$1"; }
	echo "# $mod/: its files and the $mod/ headers each includes"
	for f in $(find "$mod" -name '*.[ch]' -type f | sort); do
		echo "$f: $(incs "$f" | grep "^$mod/" | sort | tr '\n' ' ' | sed 's/ $//')"
	done
	echo "# $mod/'s headers and the files of other modules that include them"
	users=$(for f in $(find util cas dedup engine gpu os capture restore lib cli -name '*.[ch]' -type f 2>/dev/null | grep -v "^$mod/"); do
		for i in $(incs "$f" | grep "^$mod/"); do echo "$i $f"; done
	done)
	for h in $(find "$mod" -name '*.h' -type f | sort); do
		echo "$h <- $(echo "$users" | awk -v h="$h" '$1 == h { print $2 }' | sort | tr '\n' ' ' | sed 's/ $//')"
	done
	exit 0
fi
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
declare -A rank=([util]=0 [cas]=1 [dedup]=1 [engine]=2 [gpu]=2 [os]=2
		 [capture]=3 [restore]=3 [lib]=4 [cli]=4)
bad=0 n=0
edges=$(mktemp)
trap 'rm -f "$edges"' EXIT
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
			elif [ "$to" = "$mod" ]; then
				echo "$rel $inc $line" >>"$edges"   # inside the module: for the circle check below
			elif [ "${rank[$to]}" -ge "${rank[$mod]}" ]; then
				what=$([ "${rank[$to]}" -gt "${rank[$mod]}" ] && echo up || echo sideways)
				echo "$rel:$line: $mod/ (layer ${rank[$mod]}) includes \"$inc\" (layer ${rank[$to]}): points $what"
				bad=$((bad + 1))
			fi
		done < <(awk 'match($0, /^[ \t]*#[ \t]*include[ \t]*"[^"]*"/) {
				s = substr($0, RSTART, RLENGTH); sub(/^[^"]*"/, "", s); sub(/"$/, "", s)
				print FNR ":" s }' "$f")
	done < <(find "$root/$mod" -name '*.[ch]' -type f | sort)
done
# Inside a module the files form no circle either: a header that includes,
# through others of its module, itself. One line per circle, at the include
# that closes it, with the whole circle.
circles=$(awk '
	{
		to[$1] = to[$1] " " $2; at[$1 " " $2] = $3
		if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 }
	}
	function visit(u,   i, j, k, v, w, p) {
		state[u] = 1; path[++depth] = u
		k = split(to[u], v, " ")
		for (i = 1; i <= k; i++) {
			w = v[i]
			if (state[w] == 1) {
				p = w
				for (j = depth; j >= 1 && path[j] != w; j--) ;
				for (j++; j <= depth; j++) p = p " -> " path[j]
				printf "%s:%s: includes \"%s\", which closes a circle inside its module: %s -> %s\n", u, at[u " " w], w, p, w
			} else if (!state[w])
				visit(w)
		}
		depth--; state[u] = 2
	}
	END { for (i = 1; i <= n; i++) if (!state[order[i]]) visit(order[i]) }' "$edges")
if [ -n "$circles" ]; then
	echo "$circles"
	bad=$((bad + $(echo "$circles" | wc -l)))
fi
if [ "$bad" -gt 0 ]; then
	echo "check-layers: $bad include(s) point up, sideways, outside the modules or in a circle"
	exit 1
fi
echo "check-layers: ok, $n includes in ${#rank[@]} modules all point down, and none inside a module forms a circle"
