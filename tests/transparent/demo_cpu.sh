# Issue 3, item 1: the sample job with $MIB MiB of state, about 2% changed
# between checkpoints, checkpointed 5 times while it runs, killed, restored
# from the 3rd snapshot: its output from there on equals the uninterrupted
# run, and snapshots 2..5 each add new bytes <= 1.5 x changed + 8 MiB.
source "$(dirname "$0")/lib.sh"
need_root
cd "$T"
CREST_WORKLOAD=$WORKLOAD "$CREST" --store "$S" demo --cpu --json --mib "$MIB" --checkpoints 5 \
	--restore-from 3 >demo.json
python3 - demo.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["identical"], "output after restore differs from the uninterrupted run"
ck = d["checkpoints"]
assert len(ck) == 5
for i, c in enumerate(ck[1:], 2):
    bound = 1.5 * c["changed_bytes_max"] + 8 * 2**20
    print(f"snapshot {i}: step {c['step']}, new {c['new_bytes']/2**20:.1f} MiB, "
          f"changed <= {c['changed_bytes_max']/2**20:.1f} MiB, bound {bound/2**20:.1f} MiB, "
          f"stall {c['stall_seconds']:.3f} s")
    assert c["new_bytes"] <= bound, f"snapshot {i} added {c['new_bytes']} > {bound}"
r = d["restore"]
print(f"restored from {r['from']} (step {r['step']}) in {r['seconds']:.2f} s; "
      f"{d['lines_compared']} lines identical")
PY
"$CASCTL" --store "$S" verify
[ "$("$CREST" --store "$S" ls --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" = 5 ]
echo PASS
