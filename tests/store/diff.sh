#!/bin/bash
# Issue 12: crest diff A B against a model. A random tree (seeded; the seed
# is printed and CREST_TEST_SEED replays it) is put with fixed 4 KiB chunks,
# changed at random (blocks overwritten, a hole filled, an append, a
# truncation, a delete, a file added with a deleted file's bytes, a chmod, a
# symlink retargeted, a file rewritten with the same bytes and its mtime put
# back), and put again. The model, computed here from the two trees' stat
# and 4 KiB block hashes, must equal `crest --json diff` on every field of
# every stream and on the totals; the mutation log gives the changed files'
# bytes_differ by formula too. Then diff A A is all same, and bad input is
# one line and exit 1 (unknown snapshot) or 2 (usage).
. "$(dirname "$0")/lib.sh"

SEED=${CREST_TEST_SEED:-$((RANDOM * 32768 + RANDOM))}
echo "   seed $SEED (CREST_TEST_SEED=$SEED replays it)"
# Tiny extent-list pieces, so most files' lists are loaded from pieces.
export CREST_PIECE_MIN_EXTENTS=8 CREST_PIECE_SPAN=65536

tree=$T/tree
mkdir -p "$tree"
cat >"$T/lib.py" <<'EOF'
import hashlib, json, os, random, stat, sys
B = 4096
def blocks(path):
    """A file's 4 KiB blocks as the fixed chunker cuts them: None for an
    all-zero block (the engine stores it as a hole), else its SHA-256 and
    length (a chunk's identity)."""
    out = []
    with open(path, 'rb') as f:
        while True:
            b = f.read(B)
            if not b:
                return out
            out.append(None if b.count(0) == len(b) else (hashlib.sha256(b).hexdigest(), len(b)))
def dump(root):
    """name -> what crest put stores of it."""
    top = os.path.basename(root)
    d = {}
    for dirpath, dirs, files in os.walk(root):
        for n in [''] + dirs + files if dirpath == root else dirs + files:
            p = os.path.join(dirpath, n) if n else dirpath
            st = os.lstat(p)
            name = top + ('/' + os.path.relpath(p, root) if p != root else '')
            e = {'mode': st.st_mode & 0o7777, 'mtime': st.st_mtime_ns, 'target': ''}
            if stat.S_ISLNK(st.st_mode):
                e.update(type='symlink', size=0, blocks=[], target=os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                e.update(type='dir', size=0, blocks=[])
            else:
                e.update(type='file', size=st.st_size, blocks=blocks(p))
            d[name] = e
    return d
EOF

note "a random tree, put with fixed 4 KiB chunks"
python3 - "$tree" "$SEED" <<'EOF' || fail "making the tree failed"
import os, random, sys
root, seed = sys.argv[1], int(sys.argv[2])
r = random.Random(seed)
for d in ('d1', 'd1/d2', 'd3'):
    os.makedirs(os.path.join(root, d), exist_ok=True)
dirs = ['', 'd1', 'd1/d2', 'd3']
for i in range(24):
    n = r.choice([0, 1, 100, 4095, 4096, 4097]) if i < 4 else r.randrange(3 * 4096, 40 * 4096)
    if i == 4:
        n = 6 << 20   # over a thousand extents
    data = bytearray(r.randbytes(n))
    if i in (5, 6):   # a zero block: a hole in the manifest
        data[4096:8192] = bytes(4096)
    with open(os.path.join(root, r.choice(dirs), 'f%02d' % i), 'wb') as f:
        f.write(data)
os.symlink('f00', os.path.join(root, 'l1'))
os.symlink('../d3', os.path.join(root, 'd1/l2'))
EOF
python3 -c "import json,sys; sys.path.insert(0,'$T'); import lib; json.dump(lib.dump('$tree'), open('$T/a.json','w'))"
put --chunker fixed --chunk-size 4K --tag a "$tree"
ida=$(field snapshot)
pieces=$("$CASCTL" --json stats | sed -n 's/.*"pieces": \([0-9]*\).*/\1/p')
[ "${pieces:-0}" -gt 0 ] || fail "no extent list was stored in pieces: the test misses that path"

note "random changes"
python3 - "$tree" "$SEED" "$T/log.json" <<'EOF' || fail "changing the tree failed"
import json, os, random, sys
root, seed, logf = sys.argv[1], int(sys.argv[2]), sys.argv[3]
r = random.Random(seed * 7 + 1)
B = 4096
files = sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs
               if not os.path.islink(os.path.join(d, f)))
big = [f for f in files if os.path.getsize(os.path.join(root, f)) >= 3 * B and f[-3:] not in ('f05', 'f06')]
r.shuffle(big)
log = {'overwrite': {}}
p = lambda f: os.path.join(root, f)
top = os.path.basename(root) + '/'
for f in big[:3]:   # K distinct whole blocks, new random bytes
    size = os.path.getsize(p(f))
    ks = r.sample(range(size // B), r.randint(1, min(4, size // B)))
    with open(p(f), 'r+b') as fh:
        for k in ks:
            fh.seek(k * B)
            fh.write(r.randbytes(B))
    log['overwrite'][top + f] = len(ks)
f = big[3]; size = os.path.getsize(p(f)); n = r.randint(1, 3 * B)
with open(p(f), 'ab') as fh:
    fh.write(r.randbytes(n))
log['append'] = [top + f, size % B + n]
f = big[4]; size = os.path.getsize(p(f)); L = r.randrange(1, size)
if L % B == 0:
    L -= 1
os.truncate(p(f), L)
log['truncate'] = [top + f, L % B + size - L]
f = big[5]
gone = open(p(f), 'rb').read()
os.unlink(p(f))
log['delete'] = top + f
with open(p('d3/new'), 'wb') as fh:   # the deleted file's bytes under a new name
    fh.write(gone)
log['add'] = [top + 'd3/new', len(gone)]
f = big[6]
os.chmod(p(f), 0o640 if os.stat(p(f)).st_mode & 0o777 != 0o640 else 0o600)
log['chmod'] = top + f
f = big[7]; st = os.stat(p(f)); data = open(p(f), 'rb').read()
with open(p(f), 'wb') as fh:
    fh.write(data)
os.utime(p(f), ns=(st.st_atime_ns, st.st_mtime_ns))
log['same'] = top + f
f = next(x for x in files if x.endswith('f05'))
with open(p(f), 'r+b') as fh:   # the hole filled
    fh.seek(B)
    fh.write(r.randbytes(B))
log['overwrite'][top + f] = 1
os.unlink(p('l1'))
os.symlink('f01', p('l1'))
json.dump(log, open(logf, 'w'))
print('  ', json.dumps(log))
EOF
python3 -c "import json,sys; sys.path.insert(0,'$T'); import lib; json.dump(lib.dump('$tree'), open('$T/b.json','w'))"
put --chunker fixed --chunk-size 4K --tag b "$tree"
idb=$(field snapshot)

"$CREST" --json diff a b >"$T/diff.json" || fail "crest diff a b failed"
"$CREST" diff "${idb:0:12}" "$ida" >/dev/null || fail "crest diff by id prefix and full id failed"

note "crest diff a b against the model"
python3 - "$T" "$ida" "$idb" <<'EOF' || fail "crest diff disagrees with the model (seed $SEED)"
import json, sys
T, ida, idb = sys.argv[1:4]
A, Bm = json.load(open(T + '/a.json')), json.load(open(T + '/b.json'))
log = json.load(open(T + '/log.json'))
got = json.load(open(T + '/diff.json'))
bad = []
def check(what, g, e):
    if g != e:
        bad.append('%s: crest says %r, model %r' % (what, g, e))
check('a', got['a'], ida)
check('b', got['b'], idb)

def chunks(e):
    return [tuple(b) for b in e['blocks'] if b is not None]
def expect(name, a, b):
    x = {'name': name, 'type': (b or a)['type'], 'size_a': a and a['size'], 'size_b': b and b['size'],
         'chunks_shared': 0, 'chunks_b': len({c for c in chunks(b)}) if b else 0, 'shared_bytes': 0,
         'meta_changed': []}
    if not a or not b:
        x['status'] = 'added' if b else 'removed'
        x['bytes_differ'] = (b or a)['size']
        if b:
            x['shared_bytes'] = 0
        return x
    diff = abs(a['size'] - b['size'])
    for i in range(min(len(a['blocks']), len(b['blocks']))):
        # Both holes, or one chunk (same bytes, same length) at the same offset: the same.
        if a['blocks'][i] != b['blocks'][i]:
            diff += min(a['size'], b['size'], (i + 1) * 4096) - i * 4096
    x['bytes_differ'] = diff
    ca = set(chunks(a))
    x['chunks_shared'] = len({c for c in chunks(b) if c in ca})
    x['shared_bytes'] = sum(c[1] for c in chunks(b) if c in ca)
    x['meta_changed'] = [k for k in ('type', 'mode', 'mtime', 'target') if a[k] != b[k]]
    x['status'] = 'changed' if diff or x['meta_changed'] else 'same'
    return x

names = sorted(set(A) | set(Bm), key=lambda s: s.encode())
check('stream names in order', [s['name'] for s in got['streams']], names)
gs = {s['name']: s for s in got['streams']}
tot = {'added': 0, 'removed': 0, 'changed': 0, 'same': 0, 'bytes_differ': 0, 'shared_bytes': 0}
for n in names:
    e = expect(n, A.get(n), Bm.get(n))
    tot[e['status']] += 1
    tot['bytes_differ'] += e['bytes_differ']
    tot['shared_bytes'] += e['shared_bytes']
    g = gs.get(n, {})
    for k in e:
        check('%s %s' % (n, k), g.get(k), e[k])
all_a = {c for e in A.values() for c in chunks(e)}
tot['dedup_bytes'] = sum(c[1] for e in Bm.values() for c in chunks(e) if c in all_a)
tot['bytes_a'] = sum(e['size'] for e in A.values())
tot['bytes_b'] = sum(e['size'] for e in Bm.values())
for k in tot:
    check('total ' + k, got['total'].get(k), tot[k])

# The mutation log, by formula, independent of the model above.
for n, k in log['overwrite'].items():
    check(n + ' overwritten blocks: bytes_differ', gs[n]['bytes_differ'], 4096 * k)
    check(n + ' status', gs[n]['status'], 'changed')
for op in ('append', 'truncate'):
    n, d = log[op]
    check('%s %s: bytes_differ' % (n, op), gs[n]['bytes_differ'], d)
check('deleted ' + log['delete'], gs[log['delete']]['status'], 'removed')
n, size = log['add']
check('added ' + n, (gs[n]['status'], gs[n]['bytes_differ'], gs[n]['chunks_shared']), ('added', size, 0))
check('chmod ' + log['chmod'], (gs[log['chmod']]['status'], gs[log['chmod']]['meta_changed'],
      gs[log['chmod']]['bytes_differ']), ('changed', ['mode'], 0))
check('rewritten with the same bytes ' + log['same'], gs[log['same']]['status'], 'same')
if size >= 4096:
    # The added file holds the deleted one's bytes: B shares them with A, not by name.
    if not got['total']['dedup_bytes'] >= got['total']['shared_bytes'] + size // 4096 * 4096:
        bad.append('dedup_bytes %d does not count the renamed file' % got['total']['dedup_bytes'])
print('   %d streams: %s' % (len(names), json.dumps(got['total'])))
if bad:
    print('\n'.join('FAIL: ' + b for b in bad[:20]), file=sys.stderr)
    sys.exit(1)
EOF

note "the human output: one line per stream not the same, then the count of same ones and the total"
"$CREST" diff a b >"$T/diff.txt" || fail "crest diff a b (human) failed"
cat "$T/diff.txt" | sed 's/^/   /' | head -20
notsame=$(python3 -c "import json; print(sum(s['status'] != 'same' for s in json.load(open('$T/diff.json'))['streams']))")
same=$(python3 -c "import json; print(json.load(open('$T/diff.json'))['total']['same'])")
[ "$(wc -l <"$T/diff.txt")" -eq $((3 + notsame + 2)) ] || fail "human output: expected $((notsame + 5)) lines"
grep -qx "$same same" "$T/diff.txt" || fail "human output lacks '$same same'"
grep -q "^total: " "$T/diff.txt" || fail "human output lacks the total"

note "diff A A: every stream the same, nothing differs"
"$CREST" --json diff a "$ida" >"$T/aa.json" || fail "crest diff a a failed"
python3 - "$T/aa.json" "$T/a.json" <<'EOF' || fail "diff A A is not all same"
import json, sys
g, A = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
t = g['total']
assert g['a'] == g['b'], g['a']
assert all(s['status'] == 'same' and s['bytes_differ'] == 0 and not s['meta_changed'] and
           s['chunks_shared'] == s['chunks_b'] for s in g['streams']), 'a stream not the same'
assert (t['added'], t['removed'], t['changed'], t['same'], t['bytes_differ']) == (0, 0, 0, len(A), 0), t
nz = sum(c[1] for e in A.values() for c in e['blocks'] if c)
assert t['shared_bytes'] == t['dedup_bytes'] == nz, (t, nz)
EOF

note "bad input"
rc=0
expect_error "unknown snapshot" "$CREST" diff a no-such-snapshot
"$CREST" diff a no-such-snapshot 2>/dev/null || rc=$?
[ "$rc" -eq 1 ] || fail "unknown snapshot: exit $rc, expected 1"
rc=0
expect_error "one snapshot only" "$CREST" diff a
"$CREST" diff a 2>/dev/null || rc=$?
[ "$rc" -eq 2 ] || fail "one argument: exit $rc, expected 2"
rc=0
expect_error "three snapshots" "$CREST" diff a b a
"$CREST" diff a b a 2>/dev/null || rc=$?
[ "$rc" -eq 2 ] || fail "three arguments: exit $rc, expected 2"
echo "   ok"
