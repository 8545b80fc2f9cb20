#!/bin/bash
# Issue 13: crest bench restore on a small snapshot (a few MiB of random
# files, seeded: the seed is printed and CREST_TEST_SEED replays it).
# --to null|files|host --json give one well-formed object with positive
# figures; the files target restores bit-exact (kept with --keep, compared)
# and, without --keep, leaves nothing behind; --to gpu skips with its
# reason where there is no GPU (scripts/gpu-check.sh runs it on one); the
# store is untouched afterwards (casctl verify, every file's bytes the
# same). With gnuplot, --plot and crest log --plot write PNGs; without it,
# the figures come first, then one line and a non-zero exit. crest bench
# checkpoint gives sane figures (all new at first, then about what changed)
# and removes its temporary store; with --store it goes on branch crest-bench.
. "$(dirname "$0")/lib.sh"

SEED=${CREST_TEST_SEED:-$((RANDOM * 32768 + RANDOM))}
echo "   seed $SEED (CREST_TEST_SEED=$SEED replays it)"

src=$T/src
python3 - "$src" "$SEED" <<'EOF'
import os, random, sys
root, seed = sys.argv[1], int(sys.argv[2])
r = random.Random(seed)
os.makedirs(root + '/sub/deep')
def rnd(n):
    return r.getrandbits(8 * n).to_bytes(n, 'little') if n else b''
for i in range(4):   # incompressible, odd sizes
    open(f'{root}/r{i}', 'wb').write(rnd(r.randrange(200_000, 1_500_000)))
# compressible, and repeated (dedup inside the snapshot)
words = b''.join(r.choice([b'alpha ', b'beta ', b'gamma\n']) for _ in range(150_000))
open(root + '/sub/text', 'wb').write(words)
open(root + '/sub/deep/text-again', 'wb').write(words)
with open(root + '/sub/sparse', 'wb') as f:   # a hole between data
    f.write(rnd(70_000))
    f.seek(3 << 20)
    f.write(rnd(5_000))
open(root + '/empty', 'wb').close()
os.symlink('sub/text', root + '/link')
os.chmod(root + '/sub/deep', 0o500)   # read-only: the temp dir must still go
EOF
put --tag b1 "$src"
logical=$(field logical_bytes)

# The store's every file, bytes and names, before and after.
crest ls >/dev/null   # readers' files made before the first listing
store_sum() { (cd "$S" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum); }
before=$(store_sum)

check_json() {   # check_json TARGET JSON
	python3 - "$1" "$logical" "$2" <<'EOF' || fail "bench restore --to $1: bad JSON or figures: $3"
import json, sys
to, logical, doc = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
assert doc['target'] == to, doc['target']
assert doc['logical_bytes'] == logical, (doc['logical_bytes'], logical)
assert 0 < doc['data_bytes'] <= logical and doc['pack_bytes'] > 0
assert doc['repeat'] == 2 and len(doc['runs']) == 2
for k in ('seconds', 'gbps', 'ceiling_gbps', 'ratio'):
    s = doc[k]
    assert 0 < s['min'] <= s['median'] <= s['max'], (k, s)
assert doc['phases']['manifest']['min'] > 0
for run in doc['runs']:
    assert run['restore_s'] > 0 and run['ceiling_read_s'] > 0
    b = run['phase_bytes']
    assert b['read'] > 0 and run['phase_thread_s']['read'] > 0, run
    if to in ('null', 'files'):   # every byte checked and handed on
        assert b['check'] == doc['data_bytes'] and b['copy'] == doc['data_bytes'], run
    else:
        assert b['read'] == logical, run   # the region path counts windows
print(f"   {to}: {doc['gbps']['median']:.3f} GB/s, ceiling {doc['ceiling_gbps']['median']:.3f} GB/s")
EOF
}

for to in null files host; do
	note "bench restore --to $to --json"
	mkdir "$T/tmp-$to"
	out=$("$CREST" --json bench restore b1 --to $to --repeat 2 --threads 2 --dir "$T/tmp-$to") ||
		fail "bench restore --to $to failed"
	check_json $to "$out"
	[ -z "$(ls -A "$T/tmp-$to")" ] || fail "bench restore --to $to left $(ls -A "$T/tmp-$to") behind"
done

note "--to files --keep: the restore is bit-exact"
mkdir "$T/keep"
err=$("$CREST" bench restore b1 --to files --keep --repeat 1 --dir "$T/keep" 2>&1 >/dev/null) ||
	fail "bench restore --keep failed: $err"
kept=$(printf '%s\n' "$err" | sed -n 's/.*restored into \(.*\) (kept)$/\1/p')
[ -d "$kept/src" ] || fail "no kept restore named in: $err"
chmod -R u+rwx "$kept" "$src"   # read-only dirs: listed with their modes below
diff -r --no-dereference "$src" "$kept/src" || fail "the kept restore differs from the source"
chmod 500 "$src/sub/deep"

note "--cold, and the human report"
"$CREST" bench restore b1 --cold --repeat 1 | grep -q "restore GB/s" || fail "no report with --cold"

note "--to gpu"
if out=$("$CREST" --json bench restore b1 --to gpu --repeat 2); then
	if printf '%s' "$out" | grep -q '"skipped"'; then
		python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["target"]=="gpu" and len(d["skipped"]) > 10, d; print("   skipped:", d["skipped"])' "$out" ||
			fail "bad skip: $out"
	else
		check_json gpu "$out"
	fi
else
	fail "bench restore --to gpu failed"
fi

note "bad input"
rc=0; "$CREST" bench restore b1 --to disk 2>/dev/null || rc=$?
[ $rc = 2 ] || fail "--to disk: exit $rc, not 2"
rc=0; "$CREST" bench restore nosuch 2>/dev/null || rc=$?
[ $rc = 1 ] || fail "unknown snapshot: exit $rc, not 1"

note "pictures"
png_ok() { [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] && [ "$(stat -c %s "$1")" -gt 2000 ]; }
if command -v gnuplot >/dev/null; then
	"$CREST" bench restore b1 --repeat 1 --plot "$T/r.png" >/dev/null || fail "bench restore --plot failed"
	png_ok "$T/r.png" || fail "bench restore --plot: not a PNG"
	[ "$(store_sum)" = "$before" ] || fail "the benches changed the store's files"
	put --tag b2 "$src/sub"
	"$CREST" log --plot "$T/l.png" main >/dev/null || fail "log --plot failed"
	png_ok "$T/l.png" || fail "log --plot: not a PNG"
	before=$(store_sum)   # b2 was added on purpose
else
	echo "   gnuplot is not installed: only its absence is checked"
fi
rc=0
out=$(env PATH=/nonexistent "$CREST" bench restore b1 --repeat 1 --plot "$T/no.png" 2>"$T/err") || rc=$?
[ $rc = 1 ] || fail "--plot without gnuplot: exit $rc, not 1"
printf '%s' "$out" | grep -q "restore GB/s" || fail "--plot without gnuplot: the figures must come first"
[ "$(wc -l <"$T/err")" = 1 ] && grep -q "gnuplot is not installed" "$T/err" || fail "not one clear line: $(cat "$T/err")"
[ ! -e "$T/no.png" ] || fail "a PNG without gnuplot?"

note "the store is untouched"
casctl verify >/dev/null || fail "casctl verify after the benches"
[ "$(store_sum)" = "$before" ] || fail "the benches changed the store's files"
note "bench checkpoint: a temporary store, removed after"
mkdir "$T/ck"
out=$("$CREST" --json bench checkpoint --size 8M --regions 2 --repeat 3 --change 25 --staging 16M --dir "$T/ck") ||
	fail "bench checkpoint failed"
python3 - "$out" <<'EOF' || fail "bench checkpoint: bad JSON or figures: $out"
import json, sys
d = json.loads(sys.argv[1])
ck = d['checkpoints']
assert d['size'] == 8 << 20 and d['store'] is None and len(ck) == 3, d
assert all(c['stall_s'] > 0 and c['ingest_s'] > 0 and c['logical_bytes'] == 8 << 20 for c in ck), ck
assert ck[0]['new_bytes'] == 8 << 20, ck[0]   # random bytes: all new
# 25% of each 4 MiB region in 1 MiB blocks at random places: 1 to 2 MiB new
assert all(1 << 20 <= c['new_bytes'] <= 2 << 20 for c in ck[1:]), ck
assert 0 < d['stall_s']['min'] <= d['stall_s']['max'], d
print("   stall median %.4f s, ingest median %.3f s" % (d['stall_s']['median'], d['ingest_s']['median']))
EOF
[ -z "$(ls -A "$T/ck")" ] || fail "bench checkpoint left $(ls -A "$T/ck") behind"
note "bench checkpoint --store: on branch crest-bench of that store"
"$CREST" --store "$S" bench checkpoint --size 4M --regions 1 --repeat 2 --staging 16M >/dev/null ||
	fail "bench checkpoint --store failed"
[ "$("$CREST" log crest-bench | wc -l)" = 2 ] || fail "crest-bench should hold 2 snapshots: $("$CREST" log crest-bench)"
casctl verify >/dev/null || fail "casctl verify after bench checkpoint --store"
echo "ok"
