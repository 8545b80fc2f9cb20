#!/bin/bash
# casctl gc's retention rules (cas_gc_keep) against restic's, written out
# again here with Python's calendar: random branches of snapshots, hours to
# years apart, some tagged, and random policies of --keep-last, -hourly,
# -daily, -weekly (ISO weeks), -monthly, -yearly, -within, --keep-tagged
# and --keep-tag. For each rule restic walks the snapshots newest first and
# keeps the first of each bucket (UTC) until N buckets that have snapshots
# were counted; a branch's head always stays. The seed is printed;
# CREST_TEST_SEED replays a run.
set -euo pipefail
exec python3 - "$GC_KEEP" <<'PY'
import datetime, os, random, subprocess, sys
tool = sys.argv[1]
seed = int(os.environ.get("CREST_TEST_SEED", random.SystemRandom().randrange(1 << 32)))
print(f"seed {seed}")
rng = random.Random(seed)
H = 3600 * 10**9
TAGS = ["a", "b", "c", "release", "x.y"]

def buckets(t):
    d = datetime.datetime.fromtimestamp(t // 10**9, tz=datetime.timezone.utc)
    iso = d.isocalendar()
    return {"hourly": (d.year, d.month, d.day, d.hour), "daily": (d.year, d.month, d.day),
            "weekly": (iso[0], iso[1]), "monthly": (d.year, d.month), "yearly": (d.year,)}

def model(pol, snaps):
    # snaps newest first: (t, head, tags)
    keep = [False] * len(snaps)
    for i in range(len(snaps)):
        if i == 0 or snaps[i][1] or i < pol["last"]:
            keep[i] = True
    for rule in ("hourly", "daily", "weekly", "monthly", "yearly"):
        left, last = pol[rule], None
        for i, (t, _, _) in enumerate(snaps):
            if left == 0:
                break
            b = buckets(t)[rule]
            if b != last:
                keep[i], last, left = True, b, left - 1
    for i, (t, _, tags) in enumerate(snaps):
        if pol["within"] and t >= snaps[0][0] - pol["within"]:
            keep[i] = True
        if pol["tagged"] and tags:
            keep[i] = True
        if set(tags) & set(pol["tags"]):
            keep[i] = True
    return keep

rounds = 400
for r in range(rounds):
    n = rng.randrange(1, 60)
    # Gaps of minutes to months, so every kind of bucket has empty ones.
    scale = rng.choice([60, 3600, 86400, 7 * 86400, 40 * 86400])
    t = rng.randrange(10**9, 2 * 10**9) * 10**9
    ts = []
    for _ in range(n):
        ts.append(t)
        t -= rng.randrange(0, 3 * scale * 10**9)
    snaps = [(x, rng.random() < 0.05, sorted(rng.sample(TAGS, rng.choice([0, 0, 0, 1, 2])))) for x in ts]
    pol = {k: rng.choice([0, 0, 1, 2, 3, 5, 10]) for k in ("last", "hourly", "daily", "weekly", "monthly", "yearly")}
    pol["within"] = rng.choice([0, 0, rng.randrange(1, 3 * scale) * 10**9])
    pol["tagged"] = rng.random() < 0.2
    pol["tags"] = rng.sample(TAGS, rng.choice([0, 0, 1, 2]))
    inp = " ".join(str(pol[k]) for k in ("last", "hourly", "daily", "weekly", "monthly", "yearly"))
    inp += f" {pol['within']} {int(pol['tagged'])} {len(pol['tags'])} {' '.join(pol['tags'])}\n"
    inp += "".join(f"{x} {int(h)} {','.join(tg) or '-'}\n" for x, h, tg in snaps)
    out = subprocess.run([tool], input=inp, capture_output=True, text=True, check=True).stdout.split()
    got = [o == "1" for o in out]
    want = model(pol, snaps)
    if got != want:
        bad = [i for i in range(n) if got[i] != want[i]]
        i = bad[0]
        print(f"FAIL (seed {seed}) round {r}: policy {pol}; snapshot {i} of {n} "
              f"({datetime.datetime.fromtimestamp(snaps[i][0] // 10**9, tz=datetime.timezone.utc)}, tags {snaps[i][2]}): "
              f"gc keeps {got[i]}, restic's rules {want[i]}; {len(bad)} differ")
        sys.exit(1)
print(f"ok: {rounds} random branches and policies keep what restic's rules keep")
PY
