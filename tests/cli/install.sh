#!/bin/bash
# cmake --install into a temporary prefix: the man pages render without
# warnings and hold every command, EXIT STATUS and ENVIRONMENT; the bash
# completion, sourced from where it was installed, completes commands,
# options, option values, and the tags and ids of a real small store.
set -u
# Stores here are made on first use (crest init and its refusals: tests/store/init.sh).
export CREST_INIT=1
: "${BUILD:?}"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cmake --install "$BUILD" --prefix "$T/prefix" >"$T/log" 2>&1 || fail "cmake --install: $(tail -3 "$T/log")"
B=$T/prefix/bin
[ -x "$B/crest" ] && [ -x "$B/casctl" ] || fail "programs not installed"

for prog in crest casctl; do
	page=$T/prefix/share/man/man1/$prog.1
	[ -f "$page" ] || fail "$page not installed"
	# man-db when present (Debian's), else groff itself.
	if command -v man >/dev/null; then
		MANWIDTH=80 man -l "$page" >"$T/$prog.txt" 2>"$T/err" || fail "man -l $page: $(head -2 "$T/err")"
	else
		groff -man -Tutf8 "$page" >"$T/$prog.txt" 2>"$T/err" || fail "groff $page"
	fi
	groff -man -ww -z "$page" 2>>"$T/err"
	[ ! -s "$T/err" ] || fail "$page: warnings: $(head -3 "$T/err")"
	for s in NAME SYNOPSIS COMMANDS "EXIT STATUS" ENVIRONMENT; do
		grep -q "^$s" "$T/$prog.txt" || fail "$prog(1): no $s section"
	done
	grep -q CREST_STORE "$T/$prog.txt" || fail "$prog(1): no CREST_STORE"
	grep -q NO_COLOR "$T/$prog.txt" || fail "$prog(1): no NO_COLOR"
	for cmd in $("$B/$prog" help | sed -n 's/^  \([a-z]*\) .*/\1/p'); do
		grep -q "^   $cmd" "$T/$prog.txt" || fail "$prog(1): no section for $cmd"
	done
done
grep -q -- "--chunk-size" "$T/crest.txt" || fail "crest(1): no --chunk-size"
grep -q -- "--rewrite-below" "$T/casctl.txt" || fail "casctl(1): no --rewrite-below"

# Completion, as bash calls it: COMP_WORDS, COMP_CWORD, the function.
C=$T/prefix/share/bash-completion/completions
[ -f "$C/crest" ] && [ -f "$C/casctl" ] || fail "completion not installed"
source "$C/crest"
S=$T/store
mkdir "$T/data" && echo hello >"$T/data/f"
"$B/crest" --store "$S" put --tag cli-test-tag "$T/data" >/dev/null 2>"$T/put.err" || fail "crest put"
# Not a terminal: no progress line, no terminal controls at all on stderr.
! grep -q $'[\r\033]' "$T/put.err" || fail "crest put wrote terminal controls to a file"
id=$("$B/crest" --store "$S" --json ls | sed -n 's/.*"snapshot": "\([0-9a-f]\{12\}\).*/\1/p')
[ -n "$id" ] || fail "no snapshot id in crest --json ls"
comp() {   # comp FUNCTION WORD... : COMPREPLY, one a line, for the last word
	local f=$1
	shift
	COMP_WORDS=("$@")
	COMP_CWORD=$(($# - 1))
	COMPREPLY=()
	"$f"
	printf '%s\n' "${COMPREPLY[@]}"
}
has() {   # has WHAT EXPECTED FUNCTION WORD...
	local what=$1 want=$2
	shift 2
	comp "$@" >"$T/c" 2>"$T/cerr"
	[ ! -s "$T/cerr" ] || fail "$what: stderr: $(head -1 "$T/cerr")"
	grep -qx -- "$want" "$T/c" || fail "$what: no '$want' in: $(tr '\n' ' ' <"$T/c")"
}
has "commands" checkpoint _crest_crest "$B/crest" ch
has "commands" restore _crest_crest "$B/crest" ""
has "casctl commands" gc _crest_casctl "$B/casctl" g
has "options" --chunk-size _crest_crest "$B/crest" put --ch
has "global options" --store _crest_crest "$B/crest" put --st
has "options after an operand" --branch _crest_crest "$B/crest" clone abcd --
has "option values" cdc _crest_crest "$B/crest" put --chunker ""
has "casctl options" --keep-tagged _crest_casctl "$B/casctl" gc --keep-t
has "snapshot tags" cli-test-tag _crest_crest "$B/crest" --store "$S" show cli
has "snapshot ids" "$id" _crest_crest "$B/crest" --store "$S" get ""
has "snapshots after options" cli-test-tag _crest_crest "$B/crest" restore --keep-files --store "$S" ""
has "snapshot values" cli-test-tag _crest_crest "$B/crest" --store "$S" branch b1 ""
has "casctl snapshots" cli-test-tag _crest_casctl "$B/casctl" --store "$S" verify ""
has "latest" latest _crest_crest "$B/crest" --store "$S" get l
has "branches as snapshots" main _crest_crest "$B/crest" --store "$S" show ma
has "casctl gc's new options" --keep-weekly _crest_casctl "$B/casctl" gc --keep-w
has "branches" main _crest_crest "$B/crest" --store "$S" log ""
has "help topics" checkpoint _crest_crest "$B/crest" help che
# Nothing, and quietly, where there is no store or the operands are done.
[ -z "$(comp _crest_crest "$B/crest" --store "$T/none" get "" 2>&1)" ] || fail "no store: not quiet and empty"
[ -z "$(comp _crest_crest "$B/crest" --store "$S" tag "$id" "" 2>&1)" ] || fail "a TAG operand completed"
echo PASS
