#!/bin/bash
# Issue 32, item 1: every usage error of crest and casctl exits 2 with one
# line on stderr and nothing on stdout: an unknown or bad value, a missing
# value or operand, one too many, a bad number, an option given twice, one
# without the option it needs or with one it excludes. Failures that are
# not the command line's (no store, no such process) keep exit 1.
#
# Each line of the table: the exit code, then the command line (eval'd,
# after PROG --store NOSTORE). Nothing here may reach criu or a store: the
# store does not exist, CREST_CRIU names no program, and the test checks
# that no store was made.
set -u
: "${CREST:?}" "${CASCTL:?}"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
export CREST_CRIU=$T/no/such/criu
unset CREST_STORE
NOSTORE=$T/nostore
echo data >"$T/f"
echo more >"$T/g"

n=0 bad=0
while IFS= read -r line; do
	case $line in '' | '#'*) continue ;; esac
	want=${line%% *}
	rest=${line#* }
	prog=${rest%% *}
	args=
	[ "$prog" = "$rest" ] || args=${rest#* }
	P=$CREST
	[ "$prog" = casctl ] && P=$CASCTL
	eval "set -- $args"
	"$P" --store "$NOSTORE" "$@" >"$T/out" 2>"$T/err" </dev/null
	rc=$?
	n=$((n + 1))
	# Every line checked, every failure named: one run shows them all.
	why=
	if [ $rc -ne "$want" ]; then why="exit $rc, expected $want"
	elif [ "$(wc -l <"$T/err")" -ne 1 ]; then why="$(wc -l <"$T/err") lines on stderr, expected 1"
	elif [ -s "$T/out" ]; then why="wrote to stdout"
	elif [ -e "$NOSTORE" ]; then why="made a store"; fi
	rm -rf "$NOSTORE"
	if [ -n "$why" ]; then
		echo "FAIL: $prog $args: $why: $(head -2 "$T/err" | tr '\n' ' ')"
		bad=$((bad + 1))
		continue
	fi
	printf '   %s %-60s %s\n' "$rc" "$prog $args" "$(cat "$T/err")"
done <<EOF
# global options
2 crest --store other ls
2 crest --workers 0 ls
2 crest --workers 1x ls
2 crest --workers ' 4' ls
2 crest --workers 2 --workers 3 ls
2 casctl --workers -1 stats
# put
2 crest put
2 crest put --chunker foo "$T/f"
2 crest put --chunk-size 3 "$T/f"
2 crest put --chunk-size 0 "$T/f"
2 crest put --chunk-size 1Q "$T/f"
2 crest put --tag a --tag b "$T/f"
2 crest put --tag 'bad tag' "$T/f"
2 crest put --branch 'bad name' "$T/f"
2 crest put --chunker fixed --chunker cdc "$T/f"
2 crest put "$T/f" "$T/../$(basename "$T")/f"
2 crest put .
2 crest put "$T/f" --tag
2 crest put --label k "$T/f"
2 crest put --label =v "$T/f"
2 crest put --label crest.branch=x "$T/f"
2 crest put --label k=1 --label k=2 "$T/f"
# init
2 crest init a b
# get, ls, show, diff, tag, branch, log
2 crest get
2 crest get snap
2 crest get snap dest extra
2 crest get --allow-damaged snap
2 crest get snap --allow-damaged --bogus dest
2 crest ls extra
2 crest ls --bogus
2 crest get --rank snap dest
2 crest get --rank -1 snap dest
2 crest get --rank 1 --rank 2 snap dest
2 crest show
2 crest show a b
2 crest diff a
2 crest diff a b c
2 crest tag a
2 crest tag a b c
2 crest tag --bogus a b
2 crest tag a 'bad tag'
2 crest branch 'bad name'
2 crest branch a b c
2 crest log a b
2 crest log --plot
2 crest log --plot x.png --graph
2 crest log --plot x.png --plot y.png
2 crest log 'bad name'
# checkpoint
2 crest checkpoint
2 crest checkpoint 5
2 crest checkpoint --pid
2 crest checkpoint --pid 0
2 crest checkpoint --pid -5
2 crest checkpoint --pid ' 5'
2 crest checkpoint --pid 5x
2 crest checkpoint --pid 99999999999
2 crest checkpoint --pid 5 --pid 6
2 crest checkpoint --pid 5 --count 3
2 crest checkpoint --pid 5 --every 1s --count 0
2 crest checkpoint --pid 5 --every 1s --count -1
2 crest checkpoint --pid 5 --every 1s --every 2s
2 crest checkpoint --pid 5 --every 0s
2 crest checkpoint --pid 5 --every soon
2 crest checkpoint --pid 5 --lock-timeout ''
2 crest checkpoint --pid 5 --lock-timeout -1
2 crest checkpoint --pid 5 --lock-timeout 10x
2 crest checkpoint --pid 5 --metrics 0
2 crest checkpoint --pid 5 --metrics-file "$T/m"
2 crest checkpoint --pid 5 --every 1s --kill
2 crest checkpoint --pid 5 --every 1s --tag t
2 crest checkpoint --pid 5 --tag 'bad tag'
2 crest checkpoint --pid 5 --branch 'bad name'
2 crest checkpoint --pid 5 --file-limit lots
2 crest checkpoint --pid 5 --tmpdir a --tmpdir b
# restore
2 crest restore
2 crest restore a b
2 crest restore --allow-damaged
2 crest restore a --gpu
2 crest restore a --gpu 0 --gpu-map GPU-a=GPU-b
2 crest restore a --gpu-map nonsense
2 crest restore a --gpu first
2 crest restore a --gpu 0 --gpu 1
2 crest restore a --branch 'bad name'
2 crest restore a --tmpdir x --tmpdir y
# run
2 crest run
2 crest run --every
2 crest run --every 1s
2 crest run --every never -- true
2 crest run --metrics 0 -- true
2 crest run --metrics-file "$T/m" -- true
2 crest run --branch a --branch b -- true
2 crest run --every 1s --branch 'bad name' -- true
2 crest run --branch b -- true
2 crest run --file-limit 1M -- true
2 crest run --tmpdir "$T" -- true
# clone
2 crest clone
2 crest clone a
2 crest clone a b --branch c
2 crest clone a --branch b --count 0
2 crest clone a --branch b --count 1001
2 crest clone a --branch b --count ' 2'
2 crest clone a --branch b --count 2 --count 3
2 crest clone a --branch b --gpu 0 --gpu-map GPU-a=GPU-b
2 crest clone a --branch b --gpu-map nonsense
2 crest clone a --branch b --gpu first
2 crest clone a --branch 'bad name'
2 crest clone a --branch b --count 2 --workdir "$T/w"
# bench
2 crest bench
2 crest bench nothing
2 crest bench restore
2 crest bench restore a b
2 crest bench restore a --to disk
2 crest bench restore a --threads 0
2 crest bench restore a --repeat ' 3'
2 crest bench restore a --repeat 2 --repeat 3
2 crest bench restore a --keep
2 crest bench restore a --size 1M
2 crest bench restore a --to
2 crest bench checkpoint a
2 crest bench checkpoint --size 0
2 crest bench checkpoint --change 101
2 crest bench checkpoint --cold
2 crest bench checkpoint --regions
# job
2 crest job
2 crest job nothing
2 crest job commit
2 crest job commit j1 deadbeef
2 crest job commit j1 --step 1
2 crest job commit j1 --step x deadbeef
2 crest job commit .j --step 1 deadbeef
2 crest job commit j1 --step 1 --step 2 deadbeef
2 crest job commit j1 --step 1 --gpu 5 deadbeef
2 crest job commit j1 --step 1 --gpu 1=GPU-a deadbeef
2 crest job commit j1 --step 1 --gpu 0=a --gpu 0=b deadbeef
2 crest job commit j1 --step 1 --gpu '0=a b' deadbeef
2 crest job commit j1 --step 1 --tag 'bad tag' deadbeef
2 crest job ls a b
2 crest job ls --bogus
2 crest job ls 'bad name'
# demo
2 crest demo extra
2 crest demo --cpu --gpu
2 crest demo --mib -1
2 crest demo --mib 0
2 crest demo --checkpoints 2 --restore-from 3
2 crest demo --change-pct 101
2 crest demo --interval-ms
2 crest demo --mib 8 --mib 9
# unknown things
2 crest nothing
2 crest put --nothing "$T/f"
2 crest --nothing ls
# casctl
2 casctl stats extra
2 casctl verify a b
2 casctl repair extra
2 casctl gc
2 casctl gc --keep-last
2 casctl gc --keep-last -1
2 casctl gc --keep-last ' 1'
2 casctl gc --keep-last 1 --keep-last 2
2 casctl gc --keep-within forever
2 casctl gc --keep-last 1 --keep-partial soon
2 casctl gc --keep-last 1 --keep-partial 1h --keep-partial 2h
2 casctl gc --keep-last 1 --rewrite-below 2
2 casctl gc --keep-last 1 extra
2 casctl nothing
# not usage errors: exit 1
1 crest ls
1 crest get snap "$T/out"
1 crest put "$T/no/such/file"
1 crest checkpoint --pid 2147483647
1 crest restore a
1 crest restore a --gpu 0
1 crest restore a --gpu-map GPU-00000000-0000-0000-0000-000000000000=GPU-00000000-0000-0000-0000-000000000001
1 casctl stats
1 casctl verify
1 casctl gc --keep-last 1
1 crest tag a b
1 crest put "$T/f"
1 crest branch b1
EOF
# No command at all: the list of commands, as git does, on stderr; exit 2.
for P in "$CREST" "$CASCTL"; do
	"$P" >"$T/out" 2>"$T/err"
	rc=$?
	[ $rc -eq 2 ] && [ ! -s "$T/out" ] && grep -q "^usage: " "$T/err" || fail "$P with no command: exit $rc"
done
[ $bad -eq 0 ] || fail "$bad of $n command lines"
[ $n -gt 100 ] || fail "only $n command lines tried: the table is broken"
echo "command lines: $n"
echo PASS
