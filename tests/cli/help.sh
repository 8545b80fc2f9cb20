#!/bin/bash
# crest's and casctl's help against the commands' table (cli/help.c), read
# from the generated completion table (CREST_BASH): every command's --help,
# -h and help COMMAND exit 0 on stdout and name every option the table
# lists; every option the table lists gets past its command's parser; every
# option a parser compares against is in the table; unknown commands and
# options are one line on stderr and exit 2; --version names the store
# format of cas/format.h.
set -u
: "${CREST:?}" "${CASCTL:?}" "${CREST_BASH:?}" "${SRC:?}"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
source "$CREST_BASH"
bin() { [ "$1" = crest ] && echo "$CREST" || echo "$CASCTL"; }

for prog in crest casctl; do
	P=$(bin $prog)
	for cmd in $(_crest_cmds $prog); do
		_crest_table $prog "$cmd"
		for how in "$cmd --help" "$cmd -h" "help $cmd"; do
			"$P" $how >"$T/out" 2>"$T/err"
			rc=$?
			[ $rc -eq 0 ] || fail "$prog $how: exit $rc"
			[ ! -s "$T/err" ] || fail "$prog $how: wrote to stderr: $(head -1 "$T/err")"
			grep -q "^usage: $prog $cmd" "$T/out" || fail "$prog $how: no usage line"
			for o in $_c_opts; do
				grep -q -- "$o" "$T/out" || fail "$prog $how: does not mention $o"
			done
		done
	done
	"$P" help >"$T/out" 2>"$T/err" || fail "$prog help: exit $?"
	for cmd in $(_crest_cmds $prog); do
		grep -q "^  $cmd " "$T/out" || fail "$prog help: does not list $cmd"
	done
	# Unknown things: one line on stderr, exit 2, nothing on stdout.
	for bad in "no-such-command" "--no-such-option" "$(_crest_cmds $prog | cut -d' ' -f1) --no-such-option"; do
		"$P" $bad >"$T/out" 2>"$T/err"
		rc=$?
		[ $rc -eq 2 ] || fail "$prog $bad: exit $rc, expected 2"
		[ "$(wc -l <"$T/err")" -eq 1 ] || fail "$prog $bad: $(wc -l <"$T/err") lines on stderr, expected 1"
		[ ! -s "$T/out" ] || fail "$prog $bad: wrote to stdout"
	done
	"$P" >/dev/null 2>&1 && fail "$prog with no command: exit 0"
	# The version, and the store format it writes, as cas/format.h says.
	fmt=$(sed -n 's/^#define CAS_FORMAT_VERSION \([0-9]*\).*/\1/p' "$SRC/cas/format.h")
	for how in --version version; do
		"$P" $how >"$T/out" || fail "$prog $how: exit $?"
		grep -q "^$prog [0-9]*\.[0-9]*\.[0-9]*" "$T/out" || fail "$prog $how: no version: $(cat "$T/out")"
		grep -q "store format $fmt " "$T/out" || fail "$prog $how: no store format $fmt"
	done
	"$P" --json version | grep -q "\"store_format\": $fmt," || fail "$prog --json version"
done

# Every option in the table gets past its parser: run with a sample value
# and operands that fail later (no such store, file or process), never with
# a usage message. A value name without a sample here fails the test: add one.
sample() {
	case $1 in
	TAG) echo t1 ;; BRANCH) echo b1 ;; SIZE) echo 64K ;; PID) echo 2147483647 ;;
	DURATION) echo 1h ;; N | K) echo 1 ;; P) echo 2 ;; MS) echo 100 ;; DIR) echo "$T" ;;
	FILE) echo "$T/file" ;; ADDR) echo 127.0.0.1:1 ;; PATTERN) echo "$T/w%d" ;;
	OLD=NEW,...) echo GPU-00000000-0000-0000-0000-000000000000=GPU-00000000-0000-0000-0000-000000000001 ;; FRACTION) echo 0.5 ;; *'|'*) echo "${1%%|*}" ;;
	S | R) echo 1 ;; R=UUID) echo 0=GPU-0 ;; K=V) echo k=v ;;
	*) return 1 ;;
	esac
}
# The operands and options around the one tried, per command: valid, and
# bound to fail after parsing.
around() {
	case "$1 $2" in
	"crest put") pre=() post=("$T/no/such/file") ;;
	"crest checkpoint") pre=(--pid 2147483647) post=()
		case $3 in --count|--metrics|--metrics-file) pre+=(--every 1h) ;; --workdir-limit) pre+=(--workdir "$T") ;; esac ;;
	"crest restore") pre=(deadbeef) post=() ;;
	"crest get") pre=(deadbeef "$T/out") post=() ;;
	"crest clone") pre=(deadbeef --branch b2) post=() ;;
	"crest tag") pre=() post=(deadbeef t1) ;;
	# bench: each option through the subcommand that takes it.
	"crest bench") case $3 in --size|--regions|--change|--staging) pre=(checkpoint --dir "$T/no/such") ;;
		--keep) pre=(restore deadbeef --to files) ;; *) pre=(restore deadbeef) ;; esac
		post=() ;;
	"crest demo") pre=() post=()   # no criu (CREST_CRIU below): fails after parsing
		[ "$3" = --checkpoints ] && post=(--restore-from 1) ;;
	"crest run") pre=() post=(-- /bin/true)
		case $3 in --metrics|--metrics-file|--branch|--file-limit|--tmpdir|--tcp-close|--huge-pages|--workdir|--push-to) pre=(--every 1h) ;;
			--workdir-limit) pre=(--every 1h --workdir "$T") ;; esac ;;
	"casctl gc") pre=() post=(--keep-last 1) ;;
	"crest job") pre=(commit j1 --step 1) post=(deadbeef) ;;
	*) pre=() post=() ;;
	esac
}
tried=0
for prog in crest casctl; do
	P=$(bin $prog)
	for cmd in $(_crest_cmds $prog); do
		_crest_table $prog "$cmd"
		for o in $_c_opts; do
			around $prog "$cmd" "$o"
			[ "$o" = -h ] || [ "$o" = --help ] && continue
			# Given already by the words around it (--pid, --branch, --to):
			# tried there, and twice would be refused.
			case " ${pre[*]} ${post[*]} " in *" $o "*) tried=$((tried + 1)); continue ;; esac
			a=$(_crest_argof "$o")
			v=()
			if [ -n "$a" ]; then
				s=$(sample "$a") || fail "$prog $cmd $o $a: no sample value for $a in tests/cli/help.sh"
				v=("$s")
			fi
			[ "$o" = --staging ] && v=(1G)   # at least two of the engine's segments
			CREST_CRIU=$T/no/such/criu "$P" --store "$T/no/such/store" "$cmd" "${pre[@]}" "$o" "${v[@]}" \
				"${post[@]}" >"$T/out" 2>"$T/err" </dev/null
			rc=$?
			# Exit 2 is a usage error (tests/cli/usage.sh): the parser refused it.
			if [ $rc -eq 2 ] || grep -qi "usage:\|unknown option" "$T/err"; then
				fail "$prog $cmd ${pre[*]} $o ${v[*]} ${post[*]}: its parser refused it (exit $rc): $(head -2 "$T/err")"
			fi
			tried=$((tried + 1))
		done
	done
done
# The global options, on one command each.
for g in "--workers 2" "--quiet" "-q" "--json" "--store=$T/no"; do
	for P in "$CREST" "$CASCTL"; do
		"$P" $g version >/dev/null 2>"$T/err" || fail "$P $g version: exit $?: $(head -1 "$T/err")"
	done
done
echo "table options accepted by their parsers: $tried"

# Every option a command's parser compares against (in its cmd_NAME
# function) is in that command's entry of the table; the global ones
# (common.c) among the global options.
n=0
while read -r fn o; do
	[ "$o" = -- ] && continue
	if [ "$fn" = globals ]; then
		list=" $_crest_globals "
	else
		prog=crest
		[ -n "$(_crest_cmds casctl | tr ' ' '\n' | grep -x "$fn")" ] && prog=casctl
		_crest_table $prog "$fn"
		[ -n "$_c_operands$_c_opts" ] || _crest_cmds $prog | grep -qw "$fn" ||
			fail "cmd_$fn: no command $fn in cli/help.c's table"
		list=" $_c_opts "
	fi
	case "$list" in *" $o "*) ;; *) fail "$fn: its parser takes $o, cli/help.c's table does not list it" ;; esac
	n=$((n + 1))
done < <(awk '/^int cmd_[a-z]+\(/ { f = $2; sub(/^cmd_/, "", f); sub(/\(.*/, "", f) }
	      /^int cli_parse_globals\(/ { f = "globals" }
	      /^}/ { f = "" }
	      f != "" { while (match($0, /strcmp\([^,]*, "-[-a-z]*"\)/)) {
			s = substr($0, RSTART, RLENGTH); sub(/.*, "/, "", s); sub(/"\)$/, "", s)
			print f, s; $0 = substr($0, RSTART + RLENGTH) } }' "$SRC"/cli/cmd_*.c "$SRC"/cli/common.c | sort -u)
[ $n -gt 30 ] || fail "found only $n options in the parsers: the scan is broken"
echo "parser options found in their command's table entry: $n"
echo "PASS"
