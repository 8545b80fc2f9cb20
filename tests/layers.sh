#!/bin/bash
# The include check (scripts/check-layers.sh) passes on the tree, and fails,
# naming the file and line, on a copy with one wrong include added: up
# (cas/ -> engine/), sideways (gpu/ -> os/), the public header from a
# module, a header outside the modules, and a circle of includes inside a
# module.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
check=$src/scripts/check-layers.sh
"$check" "$src"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
# with FILE INCLUDE: the check on a copy of the modules with INCLUDE added
# to FILE must fail (exit 1); its output in $T/out.
with() {
	rm -rf "$T/tree"
	mkdir "$T/tree"
	for m in util cas dedup engine gpu os capture restore lib cli; do cp -r "$src/$m" "$T/tree/"; done
	printf '#include "%s"\n' "$2" >>"$T/tree/$1"
	local rc=0
	"$check" "$T/tree" >"$T/out" 2>&1 || rc=$?
	[ "$rc" -eq 1 ] || { cat "$T/out"; echo "FAIL: $1 including $2 passed the check (rc $rc)"; exit 1; }
}
try() {   # try FILE INCLUDE WORD: a copy with INCLUDE added to FILE must fail with WORD
	with "$1" "$2"
	grep -q "^$1:[0-9]*: .*$3" "$T/out" || { cat "$T/out"; echo "FAIL: no line naming $1 and '$3'"; exit 1; }
	echo "ok: $(grep "^$1:" "$T/out")"
}
try cas/pack.c engine/engine.h "points up"
try gpu/pool.c os/proc.h "points sideways"
try capture/regions.h restore/regions.h "points sideways"
try restore/process.c crest.h "only lib/ may"
try util/fs.c tests/check.h "not a module's header"
# A circle inside cas/: format.h including cas_int.h, which includes cas.h,
# which includes format.h. The line names the whole circle.
try_circle() {   # try_circle FILE INCLUDE
	with "$1" "$2"
	grep "closes a circle inside its module" "$T/out" | grep -q "$1 -> $2\|$2 ->.*$1" ||
		{ cat "$T/out"; echo "FAIL: no line naming the circle through $1 and $2"; exit 1; }
	echo "ok: $(grep 'closes a circle' "$T/out")"
}
try_circle cas/format.h cas/cas_int.h
echo PASS
