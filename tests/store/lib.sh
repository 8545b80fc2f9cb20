# lib.sh - shared set-up for the store tests (sourced, not run).
#
# Every test gets a fresh temporary directory (store and data inside it),
# removed on exit whatever happens. CREST, CASCTL and STORE_TOOL come from
# CMake; CREST_TEST_SCALE divides the big sizes (1 in a normal build).
set -euo pipefail
# Stores here are made on first use (crest init and its refusals: tests/store/init.sh).
export CREST_INIT=1

: "${CREST:?CREST must name the crest binary}"
: "${CASCTL:?CASCTL must name the casctl binary}"
: "${STORE_TOOL:?STORE_TOOL must name store_tool}"
SCALE=${CREST_TEST_SCALE:-1}

# Under a sanitizer build a leak or error must fail the test, not scroll by.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

T=$(mktemp -d "${TMPDIR:-/tmp}/crest-test.XXXXXX")
cleanup() {
	# A test may leave read-only directories behind (mode checks).
	chmod -R u+rwx "$T" 2>/dev/null || true
	rm -rf "$T"
}
trap cleanup EXIT
S=$T/store
export CREST_STORE=$S

fail() {
	echo "FAIL: $*" >&2
	exit 1
}
note() {
	echo "== $*"
}

# size NAME BYTES: BYTES divided by the scale, kept a multiple of 4 KiB.
scaled() {
	local b=$(( $1 / SCALE ))
	echo $(( b / 4096 * 4096 ))
}

crest() { "$CREST" --quiet "$@"; }
casctl() { "$CASCTL" --quiet "$@"; }

# put_json FIELD ARGS...: runs `crest --json put ARGS` and prints FIELD.
PUT_OUT=
put() {
	PUT_OUT=$("$CREST" --json put "$@") || fail "crest put $* failed"
}
# json_field JSON FIELD: a number or string of crest's flat JSON object
# (empty when it has no FIELD).
json_field() {
	printf '%s' "$1" | sed -n "s/.*\"$2\": \"\{0,1\}\([^\",}]*\)\"\{0,1\}.*/\1/p"
}
field() {   # field FIELD: of the last put's output
	local v
	v=$(json_field "$PUT_OUT" "$1")
	[ -n "$v" ] || fail "no $1 in: $PUT_OUT"
	echo "$v"
}

# same_tree A B: contents, types, modes, symlink targets and mtimes agree.
tree_listing() {
	(cd "$1" && find . -printf '%P|%y|%m|%l|%s|%T@\n' | LC_ALL=C sort)
}
same_tree() {
	diff <(tree_listing "$1") <(tree_listing "$2") >&2 || fail "trees $1 and $2 differ (listing)"
	# One process for all the files: a cmp each cost 2000 spawns a tree.
	"$STORE_TOOL" same "$1" "$2" || fail "trees $1 and $2 differ (bytes)"
}

# intact_only WHAT OUT SRC: what a failed crest get left in OUT holds no
# temporary file of its own (".crest-XXXXXXXX", restore/restore.c) and no
# wrong bytes: every file of OUT/<SRC's name> is bit-exact against SRC.
# Sets INTACT to the number of those files.
INTACT=0
intact_only() {
	local what=$1 out=$2 src=$3 left
	INTACT=0
	[ -d "$out" ] || return 0
	left=$(find "$out" -name '.crest-*' | head -1)
	[ -z "$left" ] || fail "$what: crest get left $left behind"
	local tree=$out/${src##*/}
	[ -d "$tree" ] || return 0
	"$STORE_TOOL" same "$tree" "$src" || fail "$what: crest get wrote wrong bytes"
	INTACT=$(find "$tree" -type f | wc -l)
}

verify_store() {
	"$CASCTL" --quiet verify >"$T/verify.out" 2>&1 || { cat "$T/verify.out" >&2; fail "casctl verify: $*"; }
}

# expect_error WHAT CMD...: CMD must exit non-zero with exactly one line on
# stderr (and no sanitizer report); the line is left in $ERR.
ERR=
expect_error() {
	local what=$1 rc=0
	shift
	"$@" >"$T/err.stdout" 2>"$T/err.stderr" || rc=$?
	ERR=$(cat "$T/err.stderr")
	[ "$rc" -ne 0 ] || fail "$what: exit 0 (expected an error)"
	[ "$rc" -lt 128 ] || fail "$what: died of a signal (rc $rc): $ERR"
	[ "$(wc -l <"$T/err.stderr")" -eq 1 ] || fail "$what: expected one line on stderr, got: $ERR"
	echo "   $what -> rc $rc: $ERR"
}

# For the kill tests (crash.sh, lanes.sh). pack_sizes: each pack of $S,
# "NAME BYTES" lines. pack_growth BEFORE: the chunk bytes packs gained
# since that listing (a new pack counts past its header: a writer's open
# creates one, empty). Gains, not the total: a writer's open first cuts
# back what a killed writer left behind.
pack_sizes() { [ -d "$S/packs" ] && find "$S/packs" -name '*.pack' -printf '%f %s\n' || true; }
pack_growth() {
	awk -v h="$("$STORE_TOOL" format CAS_FILE_HEADER)" 'NR == FNR { was[$1] = $2; next }
		!($1 in was) { if ($2 > h) g += $2 - h; next }
		$2 > was[$1] { g += $2 - was[$1] } END { print g + 0 }' \
		<(printf '%s\n' "$1") <(pack_sizes)
}
# Whether pid $1, a child of this shell, is still running (not a zombie).
running() { local st; st=$(ps -o stat= -p "$1" 2>/dev/null) && [ -n "$st" ] && [ "${st#Z}" = "$st" ]; }
# kill_midway PID MS BEFORE: MS milliseconds on, kill -9 of PID (a child of
# this shell), reaped. KILL_RC: its exit status (137: the kill came first;
# one that had exited is a zombie, and the kill succeeds on it too).
# KILL_ALIVE: 1 when it was still running just before the kill. KILL_GREW:
# the chunk bytes packs had gained since the listing BEFORE by then.
kill_midway() {
	sleep "$(awk -v d="$2" 'BEGIN { printf "%.3f", d / 1000 }')"
	KILL_ALIVE=0
	running "$1" && KILL_ALIVE=1
	KILL_GREW=$(pack_growth "$3")
	kill -9 "$1" 2>/dev/null || true
	KILL_RC=0
	{ wait "$1"; } 2>/dev/null || KILL_RC=$?
}
