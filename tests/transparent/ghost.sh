# Issue 33: a job that maps a deleted file (NCCL keeps its proxy buffers in
# an unlinked /dev/shm file, 33 MiB for 2 ranks) is saved whole with it:
# criu stores such a "ghost" file's contents only up to --ghost-limit, 1 MiB
# unless told, and crest passes --file-limit (64 MiB by default). The job
# (random size of 2-12 MiB, seed printed) reads the mapping every step and
# prints a digest of it after changing one byte, so a restore that lost or
# changed the file shows. Checkpointed with --kill and restored: its output
# equals an uninterrupted run's. With --file-limit under the file's size:
# one line that names the cause, and the job runs on.
source "$(dirname "$0")/lib.sh"
need_root
cd "$T"
seed=${CREST_SEED:-$(( $(date +%s%N) % 100000 ))}
RANDOM=$seed
mib=$((2 + RANDOM % 11))
echo "seed $seed: a ghost file of $mib MiB"
cat >ghost.py <<'PY'
import hashlib, mmap, os, sys, time
os.closerange(3, 1 << 16)   # none of the test runner's files (a restore in place checks them)
size, steps, out = int(sys.argv[1]) << 20, int(sys.argv[2]), sys.argv[3]
path = "/dev/shm/crest-ghost-test-%d" % os.getpid()
fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
os.ftruncate(fd, size)
m = mmap.mmap(fd, size)
os.unlink(path)
os.close(fd)
for i in range(0, size, 4096):
    m[i] = (i // 4096) % 251
f = open(out, "a", buffering=1)
for s in range(steps):
    m[(s * 7919 * 4096) % size] = s % 256
    f.write("step %d %s\n" % (s, hashlib.sha256(m).hexdigest()[:16]))
    time.sleep(0.05)
PY
python3 ghost.py "$mib" 120 ref.log
setsid python3 ghost.py "$mib" 120 "$T/job.log" </dev/null >/dev/null 2>job.err &
JOB=$!
PIDS+=("$JOB")
wait_lines job.log 10
grep -q 'crest-ghost-test.*(deleted)' /proc/$JOB/maps || fail "the job maps no deleted file"
# Under the file's size: refused by criu's limit, named, and the job runs on.
"$CREST" --store "$S" checkpoint --pid "$JOB" --file-limit 1M >/dev/null 2>ck.err &&
	fail "a job holding a $mib MiB deleted file was checkpointed with --file-limit 1M"
grep -q "deleted file" ck.err && grep -q -- "--file-limit" ck.err ||
	fail "the failure does not name the deleted file and --file-limit: $(cat ck.err)"
n0=$(lines job.log)
sleep 0.5
[ "$(lines job.log)" -gt "$n0" ] || fail "the job makes no progress after the failed checkpoint"
echo "ok: --file-limit 1M: $(tail -1 ck.err | cut -c1-200)"
"$CREST" --store "$S" --quiet checkpoint --pid "$JOB" --kill --tag ghost 2>ck.err ||
	fail "checkpoint of a job holding a $mib MiB deleted file: $(cat ck.err)"
kill_gone "$JOB"
"$CREST" --store "$S" --quiet restore ghost >/dev/null 2>rs.err || fail "restore: $(cat rs.err)"
NEW=$(pgrep -f "ghost.py $mib 120 $T/job.log" | head -n1 || true)
[ -n "$NEW" ] && PIDS+=("$NEW")
for i in $(seq 1 300); do [ -n "$NEW" ] && kill -0 "$NEW" 2>/dev/null || break; sleep 0.1; done
cmp -s job.log ref.log || fail "the restored job's output differs from an uninterrupted run's ($(lines job.log) of $(lines ref.log) lines; first difference: $(cmp job.log ref.log | head -1))"
echo "PASS: a job mapping a $mib MiB deleted file checkpointed, killed and restored: $(lines ref.log) lines as uninterrupted"
