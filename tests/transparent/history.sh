#!/bin/bash
# Issue 12: parents and branches of process snapshots. A job's next
# checkpoint is a child of the snapshot it last came from (its previous
# checkpoint, or the one it was restored from) and stays on that branch
# unless --branch names another; a job crest never saw continues the head
# of its branch. Checked through `crest show --json`, `crest branch --json`
# and `crest log --json`.
source "$(dirname "$0")/lib.sh"
need_root
cd "$T"
C() { "$CREST" --store "$S" "$@"; }
snap() { C --json checkpoint --pid "$1" "${@:2}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["snapshot"])'; }
field() { C --json show "$1" | python3 -c "import json,sys; m=json.load(sys.stdin); print(m['parent'] if '$2'=='parent' else m['labels'].get('crest.branch'))"; }
expect() {   # expect SNAP PARENT BRANCH
	local p b
	p=$(field "$1" parent); b=$(field "$1" branch)
	[ "$p" = "$2" ] || fail "snapshot ${1:0:12}: parent ${p:0:12}, want ${2:0:12}"
	[ "$b" = "$3" ] || fail "snapshot ${1:0:12}: branch $b, want $3"
	echo "ok: ${1:0:12} parent ${p:0:12} branch $b"
}

echo data >d.txt
M1=$(C --json put d.txt | python3 -c 'import json,sys; print(json.load(sys.stdin)["snapshot"])')
start_job j1.out --mib 8 --interval-ms 50
J=$JOB
wait_lines j1.out 3
S1=$(snap "$J" --branch train); expect "$S1" None train   # a new branch: no parent
S2=$(snap "$J");                expect "$S2" "$S1" train  # the job's own branch, not main
kill_gone "$J"

# Restored from S1 onto a new branch: its checkpoints follow S1 there.
R=$(C --json restore "$S1" --branch lr2 | python3 -c 'import json,sys; print(json.load(sys.stdin)["pid"])')
PIDS+=("$R")
S3=$(snap "$R");           expect "$S3" "$S1" lr2
S4=$(snap "$R");           expect "$S4" "$S3" lr2
S5=$(snap "$R" --branch x); expect "$S5" "$S4" x          # the job's line, onto a new branch
kill_gone "$R"

# A job crest never saw continues main's head.
start_job j2.out --mib 8 --interval-ms 50
wait_lines j2.out 3
S6=$(snap "$JOB"); expect "$S6" "$M1" main
kill_gone "$JOB"

C --json branch | python3 -c "
import json, sys
b = {x['branch']: (x['head'], x['snapshots']) for x in json.load(sys.stdin)}
want = {'main': ('$S6', 2), 'train': ('$S2', 2), 'lr2': ('$S4', 2), 'x': ('$S5', 1)}
assert b == want, f'branches {b}, want {want}'
print('ok: branches and heads')"
C --json log x | python3 -c "
import json, sys
got = [e['snapshot'] for e in json.load(sys.stdin)]
want = ['$S5', '$S4', '$S3', '$S1']
assert got == want, f'log x: {[g[:12] for g in got]}, want {[w[:12] for w in want]}'
print('ok: log x is S5 S4 S3 S1')"
C log --graph
"$CASCTL" --store "$S" verify >/dev/null
echo PASS
