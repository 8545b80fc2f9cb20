#!/bin/bash
# Names and labels are a snapshot's word, and a crafted store may hold any
# bytes there: an escape sequence in a tag, a label or a stream's name must
# not reach a terminal (it can set the title, clear or hide text, or make
# the terminal answer back), nor a control character end an error's one
# line. On a terminal (script(1) gives one) the listings show '?' for each
# control character and C1 control; to a pipe they stay exact; error lines
# never hold one.
. "$(dirname "$0")/lib.sh"
: "${CRAFT_TREE:?CRAFT_TREE must name craft_tree}"
command -v script >/dev/null || fail "script (util-linux) is needed for a terminal"

esc=$(printf '\033]0;title\007\033[2J\302\233K\r')
"$CRAFT_TREE" "$S" evil "L:note=a${esc}b" "f:x${esc}y:text" "d:d${esc}" || fail "craft_tree failed"
# Control bytes but newline, tab and the CR that the terminal adds to each
# newline; a C1 control as UTF-8 (0xc2 0x80-0x9f).
bad() { LC_ALL=C grep -c -P '[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|\xc2[\x80-\x9f]|\r[^\n]' "$1" || true; }
for cmd in "show evil" "ls" "log" "log --graph" "diff evil evil" "branch"; do
	script -qec "$CREST --store $S $cmd" /dev/null >"$T/tty.out" 2>&1 </dev/null ||
		{ cat -v "$T/tty.out" >&2; fail "crest $cmd on a terminal failed"; }
	[ "$(bad "$T/tty.out")" = 0 ] || { cat -v "$T/tty.out" >&2; fail "crest $cmd wrote control characters to a terminal"; }
	echo "ok: crest $cmd on a terminal: no control characters"
done
"$CREST" --store "$S" show evil >"$T/pipe.out"
grep -qF "note=a${esc}b" "$T/pipe.out" || fail "crest show to a pipe changed the label's bytes"
echo "ok: to a pipe the label is exact"

# Errors: one line, no control character, whatever the name holds.
"$CRAFT_TREE" "$S" evilname "f:../${esc}x:t" || fail "craft_tree failed"
expect_error "a name that leaves the destination" "$CREST" --store "$S" get evilname "$T/out"
[ "$(wc -l <"$T/err.stderr")" = 1 ] || fail "the error is not one line: $(cat -v "$T/err.stderr")"
[ "$(bad "$T/err.stderr")" = 0 ] || fail "the error holds control characters: $(cat -v "$T/err.stderr")"
echo "ok: $(cat "$T/err.stderr")"
echo PASS
