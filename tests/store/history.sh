# Branches and parents (issue 12): a random sequence of puts on a few
# branches, branches started at random snapshots, and puts that follow,
# checked after every step against a model of what each branch's head is
# and what each new snapshot's parent and branch must be; then `crest log`
# (whole, per branch, --graph, each graph line checked to lead to its
# parent and no root to anything) and `crest branch` against the same
# model, in --json. `crest branch NAME S` must be a ref to S (no snapshot
# written). Random tags, and after every step random names of every kind
# (TAG, latest, BRANCH, NAME~N) resolved by crest show against the model,
# whose tags (text and --json) must be the model's. The seed is printed;
# CREST_TEST_SEED replays a run.
source "$(dirname "$0")/lib.sh"
SEED=${CREST_TEST_SEED:-$(( $(date +%s%N) % 1000000 ))}
echo "seed $SEED"
mkdir -p "$T/tree"
CREST_BIN=$CREST CASCTL_BIN=$CASCTL T=$T DATA=$T/tree SEED=$SEED python3 - <<'PY'
import json, os, random, subprocess, sys

crest, data, seed = os.environ["CREST_BIN"], os.environ["DATA"], int(os.environ["SEED"])
rng = random.Random(seed)

def run(*args, ok=True):
    p = subprocess.run([crest, *args], capture_output=True, text=True)
    if ok and p.returncode != 0:
        sys.exit(f"FAIL: crest {' '.join(args)}: rc {p.returncode}: {p.stderr.strip()}")
    return p

def js(*args):
    return json.loads(run("--json", *args).stdout)

heads = {}       # branch -> head id (the model)
parent = {}      # id -> parent id or None
branch_of = {}   # id -> branch
order = []       # ids, oldest first (and newest last: latest)
tags = {}        # id -> set of tags
refs = {}        # branch -> the snapshot `crest branch` pointed it at

def check_new(out, br, want_parent):
    sid = out["snapshot"]
    show = js("show", sid)
    if show.get("parent") != want_parent:
        sys.exit(f"FAIL: snapshot {sid[:12]} on {br}: parent {show.get('parent')}, model {want_parent}")
    if show["labels"].get("crest.branch") != br:
        sys.exit(f"FAIL: snapshot {sid[:12]}: branch label {show['labels'].get('crest.branch')}, model {br}")
    parent[sid] = want_parent
    branch_of[sid] = br
    heads[br] = sid
    order.append(sid)

def back(sid, n):
    for _ in range(n):
        sid = parent[sid] if sid else None
    return sid

def check_names():
    """Every kind of name, against the model: one resolver everywhere."""
    cases = [("latest", order[-1])]
    for br, h in heads.items():
        cases.append((br, h))
        k = rng.randrange(0, 4)
        cases.append((f"{br}~{k}", back(h, k)))
    for sid, ts in tags.items():
        for t in ts:
            cases.append((t, sid))
            cases.append((f"{t}~", back(sid, 1)))
    cases.append(("latest~1", back(order[-1], 1)))
    for name, want in rng.sample(cases, min(len(cases), 8)):
        p = run("--json", "show", name, ok=False)
        if want is None:
            if p.returncode != 1 or len(p.stderr.strip().splitlines()) != 1:
                sys.exit(f"FAIL: show {name}: past the root, rc {p.returncode}: {p.stderr!r}")
            continue
        if p.returncode != 0:
            sys.exit(f"FAIL: show {name}: rc {p.returncode}: {p.stderr.strip()} (model {want[:12]})")
        got = json.loads(p.stdout)
        if got["snapshot"] != want:
            sys.exit(f"FAIL: show {name}: {got['snapshot'][:12]}, model {want[:12]}")
        if sorted(got["tags"]) != sorted(tags.get(want, ())):
            sys.exit(f"FAIL: show {name}: tags {got['tags']}, model {sorted(tags.get(want, ()))}")
        txt = run("show", name).stdout
        if sorted(l.split()[1] for l in txt.splitlines() if l.startswith("tag ")) != sorted(tags.get(want, ())):
            sys.exit(f"FAIL: show {name} (text): tag lines differ from {sorted(tags.get(want, ()))}")

names = ["main", "exp", "lr-0.1", "a/b", "fresh"]
ntag = 0
for step in range(40):
    op = rng.random()
    if op < 0.6 or not order:
        # A put on a branch with no head starts a new root (item: log --graph).
        br = rng.choice(names[:2] if not order else names)
        with open(os.path.join(data, "f"), "a") as f:
            f.write(f"{step} {rng.random()}\n")
        out = js("put", "--branch", br, data)
        check_new(out, br, heads.get(br))
    elif op < 0.75:
        sid = rng.choice(order)
        t = f"t{ntag}"
        ntag += 1
        run("--quiet", "tag", sid, t)
        tags.setdefault(sid, set()).add(t)
    else:
        br = rng.choice(names)
        frm = rng.choice(order)
        nsnap = len(js("ls"))
        p = run("--json", "branch", br, frm, ok=False)
        if br in heads:
            if p.returncode == 0 or "exists already" not in p.stderr:
                sys.exit(f"FAIL: branch {br} again: rc {p.returncode}: {p.stderr}")
            continue
        if p.returncode != 0:
            sys.exit(f"FAIL: crest branch {br} {frm[:12]}: {p.stderr}")
        out = json.loads(p.stdout)
        if out["from"] != frm or out["snapshot"] != frm:
            sys.exit(f"FAIL: branch {br} from {out['from']} snapshot {out['snapshot']}, asked {frm}: "
                     f"a branch is a ref to the snapshot itself")
        if len(js("ls")) != nsnap:
            sys.exit(f"FAIL: crest branch {br} wrote a snapshot: {nsnap} -> {len(js('ls'))}")
        heads[br] = frm
        refs[br] = frm
    # Branch heads and counts after every step.
    got = {b["branch"]: (b["head"], b["snapshots"]) for b in js("branch")}
    want = {b: (h, sum(1 for s in order if branch_of[s] == b)) for b, h in heads.items()}
    if got != want:
        sys.exit(f"FAIL: step {step}: branches {got}, model {want}")
    check_names()

# log of each branch: its head, then parent after parent to the root.
for br, h in heads.items():
    chain = []
    s = h
    while s:
        chain.append(s)
        s = parent[s]
    got = [e["snapshot"] for e in js("log", br)]
    if got != sorted(chain, key=order.index, reverse=True):
        sys.exit(f"FAIL: log {br}: {len(got)} snapshots, model {len(chain)}")
    for e in js("log", br):
        if e["parent"] != parent[e["snapshot"]] or e["branch"] != branch_of[e["snapshot"]]:
            sys.exit(f"FAIL: log {br}: {e['snapshot'][:12]} parent/branch differ from the model")

def check_graph(lines, what):
    """Each '*' goes down its column as '|' to its parent's line (drawn
    there '*' or '/'), and a snapshot whose parent is not drawn (a root)
    has nothing under it on the next line: two '*' one above the other
    would read as child and parent."""
    at = {e["snapshot"]: i for i, e in enumerate(lines)}
    ch = lambda g, c: g[2 * c] if len(g) > 2 * c else " "
    for i, e in enumerate(lines):
        g = e["graph"]
        if g.count("*") != 1:
            sys.exit(f"FAIL: {what}: line {g!r} has not one '*'")
        c = g.index("*") // 2
        p = at.get(e["parent"]) if e["parent"] else None
        if p is None:
            if i + 1 < len(lines) and ch(lines[i + 1]["graph"], c) in "*|":
                sys.exit(f"FAIL: {what}: root {e['snapshot'][:12]} (line {i}) has "
                         f"{lines[i + 1]['graph']!r} under it, as if {lines[i + 1]['snapshot'][:12]} were its parent")
            continue
        for j in range(i + 1, p):
            if ch(lines[j]["graph"], c) != "|":
                sys.exit(f"FAIL: {what}: {e['snapshot'][:12]}'s line breaks at line {j}: {lines[j]['graph']!r}")
        if ch(lines[p]["graph"], c) not in "*/":
            sys.exit(f"FAIL: {what}: {e['snapshot'][:12]} does not reach its parent's line {lines[p]['graph']!r}")

# The whole log, newest first, with every head marked, and a graph whose
# lines lead each snapshot to its parent and no root to anything.
full = js("log", "--graph")
if [e["snapshot"] for e in full] != order[::-1]:
    sys.exit("FAIL: log: not every snapshot, newest first")
for e in full:
    want = sorted(b for b, h in heads.items() if h == e["snapshot"])
    if sorted(e["heads"]) != want:
        sys.exit(f"FAIL: log: {e['snapshot'][:12]} heads {e['heads']}, model {want}")
    if sorted(e["tags"]) != sorted(tags.get(e["snapshot"], ())):
        sys.exit(f"FAIL: log: {e['snapshot'][:12]} tags {e['tags']}")
check_graph(full, "log --graph")
for br in heads:
    check_graph(js("log", "--graph", br), f"log --graph {br}")
# And the case that drew wrongly once, whatever the seed: main's head
# newest but one, then the root of a new branch: the root's line must not
# sit on main's head.
for br in ("main", "solo"):
    with open(os.path.join(data, "f"), "a") as f:
        f.write(f"{br} {rng.random()}\n")
    check_new(js("put", "--branch", br, data), br, heads.get(br))
check_graph(js("log", "--graph"), "log --graph, a new root above main's head")
roots = sum(1 for s in order if parent[s] is None)
print(f"ok: {len(order)} snapshots ({roots} roots) on {len(heads)} branches ({len(refs)} started as refs); "
      f"heads, parents, names, tags, logs and graphs match the model")

# The same names wherever a snapshot is named: one resolver.
newest, main_head = order[-1], heads["main"]
run("get", "latest", os.path.join(os.environ["T"], "got-latest"))
with open(os.path.join(os.environ["T"], "got-latest", os.path.basename(data), "f")) as f, \
     open(os.path.join(data, "f")) as g:
    if f.read() != g.read():
        sys.exit("FAIL: crest get latest: not the newest snapshot's tree")
for args in (["diff", "main~1", "main"] if parent[main_head] else ["diff", "main", "latest"],
             ["bench", "restore", "latest", "--to", "null"]):
    run(*args)
# latest is the root of solo: nothing is back from it.
p = run("tag", "latest~1", "x", ok=False)
if p.returncode != 1 or "has no parent" not in p.stderr:
    sys.exit(f"FAIL: crest tag latest~1 past a root: rc {p.returncode}: {p.stderr.strip()}")
if parent[main_head]:
    run("--quiet", "tag", "main~", "named-by-tilde")
    if js("show", "named-by-tilde")["snapshot"] != parent[main_head]:
        sys.exit("FAIL: crest tag main~: tagged another snapshot")
if subprocess.run([os.environ["CASCTL_BIN"], "verify", "main"], capture_output=True).returncode != 0:
    sys.exit("FAIL: casctl verify main")
out = js("branch", "from-main", "main")
if out["snapshot"] != main_head:
    sys.exit(f"FAIL: crest branch from-main main: points at {out['snapshot'][:12]}, main's head is {main_head[:12]}")

# A name that is a branch and an id prefix at once: refused, and BRANCH~0
# is the branch.
amb = order[0][:6]
run("--quiet", "branch", amb, order[-1])
p = run("show", amb, ok=False)
if p.returncode != 1 or "both a branch and a snapshot id prefix" not in p.stderr:
    sys.exit(f"FAIL: show {amb} (a branch and an id prefix): rc {p.returncode}: {p.stderr.strip()}")
if js("show", f"{amb}~0")["snapshot"] != order[-1]:
    sys.exit(f"FAIL: show {amb}~0 is not the branch's head")
# Names a user may not take: latest, crest.'s own, '~'.
for args in (["tag", order[0], "latest"], ["tag", order[0], "crest.x"], ["branch", "latest"],
             ["tag", order[0], "a~1"]):
    p = run(*args, ok=False)
    if p.returncode == 0:
        sys.exit(f"FAIL: crest {' '.join(args)} was taken")
PY
# Bad input: one line, non-zero (2: a name no branch can have is a usage error), and the store unharmed.
rc=0; "$CREST" branch 'no spaces' 2>"$T/err" || rc=$?
[ "$rc" -eq 2 ] && [ "$(wc -l <"$T/err")" -eq 1 ] || fail "bad branch name: rc $rc, $(cat "$T/err")"
rc=0; "$CREST" log no-such-branch 2>"$T/err" || rc=$?
[ "$rc" -eq 1 ] && grep -q "no snapshot on branch no-such-branch" "$T/err" || fail "log of a missing branch: rc $rc"
# A ref is a tag named crest.branch/NAME: 115 characters are the most.
long=$(printf 'b%.0s' $(seq 115))
"$CREST" --quiet branch "$long" || fail "branch of 115 characters refused"
[ "$("$CREST" --json branch | grep -c "\"$long\"")" -eq 1 ] || fail "branch of 115 characters not listed"
rc=0; "$CREST" branch "x$long" 2>"$T/err" || rc=$?
[ "$rc" -eq 1 ] && [ "$(wc -l <"$T/err")" -eq 1 ] && grep -q "at most 115" "$T/err" || fail "branch of 116 characters: rc $rc, $(cat "$T/err")"
rc=0; "$CREST" branch x deadbeefdeadbeef 2>"$T/err" || rc=$?
[ "$rc" -eq 1 ] || fail "branch from a missing snapshot: rc $rc"
rc=0; "$CREST" put --branch '' "$T/tree" 2>"$T/err" || rc=$?
[ "$rc" -eq 2 ] || fail "put on an empty branch name: rc $rc"
# Refs are in the meta log like tags: an index rebuilt from the logs has
# every branch as it was.
"$CREST" --json branch >"$T/branches.before"
"$CASCTL" --quiet repair >/dev/null 2>&1 || fail "casctl repair failed"
"$CREST" --json branch >"$T/branches.after"
cmp -s "$T/branches.before" "$T/branches.after" || fail "branches differ after casctl repair: $(diff "$T/branches.before" "$T/branches.after")"
"$CASCTL" verify >/dev/null
echo PASS
