# Issue 3, errors: each a clear message, non-zero exit, nothing harmed.
source "$(dirname "$0")/lib.sh"
need_root
cd "$T"
head -c 100000 /dev/urandom >data.bin
"$CREST" --store "$S" put --quiet data.bin >/dev/null
start_job job.out --mib 16 --interval-ms 100
wait_lines job.out 2

# No such pid.
expect_error "no process with pid" "$CREST" --store "$S" checkpoint --pid 999999
# Not root.
chown -R 65534:65534 "$T"
expect_error "not permitted" setpriv --reuid=65534 --regid=65534 --clear-groups "$CREST" --store "$S" checkpoint --pid "$JOB"
chown -R 0:0 "$T"
# CRIU missing, and too old.
expect_error "no such program" env CREST_CRIU=/nonexistent/criu "$CREST" --store "$S" checkpoint --pid "$JOB"
printf '#!/bin/sh\necho "Version: 3.17.1"\n' >old-criu && chmod +x old-criu
expect_error "needs criu 4" env CREST_CRIU="$T/old-criu" "$CREST" --store "$S" checkpoint --pid "$JOB"

# A process that maps libcuda: without a driver, with a driver too old for
# the checkpoint API, and with one that refuses to checkpoint it.
mkdir cuda && head -c 4096 /dev/zero >cuda/libcuda.so.1
python3 -c 'import mmap,time,sys; f=open(sys.argv[1],"rb"); m=mmap.mmap(f.fileno(),0,prot=mmap.PROT_READ); time.sleep(120)' cuda/libcuda.so.1 &
CUDAJOB=$!; PIDS+=("$CUDAJOB")
sleep 0.5
expect_error "no NVIDIA GPU driver" env CREST_LIBCUDA=/nonexistent/libcuda.so.1 "$CREST" --store "$S" checkpoint --pid "$CUDAJOB"
expect_error "has no checkpoint API" env CREST_LIBCUDA="$FAKE_CUDA_OLD" "$CREST" --store "$S" checkpoint --pid "$CUDAJOB"
expect_error "CUDA_ERROR_NOT_SUPPORTED.*CREST_MEM_MANAGED" env CREST_LIBCUDA="$FAKE_CUDA_REFUSES" "$CREST" --store "$S" checkpoint --pid "$CUDAJOB"
kill -0 "$CUDAJOB" || fail "the CUDA-like job did not survive the failed checkpoints"

# Restore of a job that still runs (it holds its files open for writing).
"$CREST" --store "$S" checkpoint --pid "$JOB" --tag errjob >/dev/null
expect_error "open for writing, so the job runs already" "$CREST" --store "$S" restore errjob
# Unknown and damaged snapshots.
expect_error "no snapshot named" "$CREST" --store "$S" restore nosuchsnapshot
expect_error "not a process" "$CREST" --store "$S" restore "$("$CREST" --store "$S" ls --json | python3 -c 'import json,sys; print([s["snapshot"] for s in json.load(sys.stdin) if s["kind"]=="files"][0])')"

# Process snapshots whose numbers are damaged or crafted: each refused with
# one line before anything is done to the host. "4294967295" read with
# strtol and cast to pid_t is -1, and a failed tree is ended with
# kill(pid, SIGKILL) as root: every process on the host.
forged=0
forge() {
	local want=$1; shift
	forged=$((forged + 1))
	"$CRAFT_TREE" "$S" "forged$forged" k:process "$@" || fail "craft_tree $*"
	expect_error "$want" "$CREST" --store "$S" restore "forged$forged"
}
for bad in 4294967295 -1 0 2147483648 4194305 99999999999999999999999 12x ' 12' +12 1,,2 1, ,1; do
	forge "pid list" "L:pids=$bad"
	forge "pid list" L:pids=999990 "L:cuda_pids=$bad"
done
forge "names no processes" L:pids=
for bad in abc -1 18446744073709551616 '4026531836 '; do
	forge "pid namespace label" L:pids=999990 "L:pidns=$bad"
done
for meta in "size=-1;uid=0;path=$T/x" "size=12;uid=4294967295;path=$T/x" "size=1x;path=$T/x" "uid=0;path=$T/x"; do
	forge "job file stream" L:pids=999990 "j:files/0:$meta"
done
[ -e "$T/x" ] && fail "a refused snapshot wrote its job file"
# An external file (ext_fds) the snapshot names is opened by its path: a
# FIFO there with no reader held crest in open() for good, the job's files
# swapped in. Now the open fails at once and the files go back.
mkfifo "$T/fifo"
printf 'kept\n' >"$T/jobf"
forged=$((forged + 1))
"$CRAFT_TREE" "$S" "forged$forged" k:process L:pids=999990 "j:files/0:size=0;uid=0;path=$T/jobf" \
	"L:ext_fds=file[1:1] 01 0 $T/fifo" || fail "craft_tree fifo"
expect_error "cannot open $T/fifo again for the restored job" timeout 60 "$CREST" --store "$S" restore "forged$forged"
[ "$(cat "$T/jobf")" = kept ] || fail "a failed restore left the job's file swapped"
# A job file's path is the snapshot's word too: a device there is refused
# without being opened (opening a watchdog arms it). Major 0 has no driver:
# an open of it would fail with ENXIO, not be refused.
mknod "$T/dev0" c 0 0
forge "no longer a regular file" L:pids=999990 "j:files/0:size=0;uid=0;path=$T/dev0"

# The job ran on through all of it, and the store is whole.
n=$(lines job.out); wait_lines job.out $((n + 2))
"$CASCTL" --store "$S" verify >/dev/null

# Damaged snapshot: the middle byte of every chunk record's stored bytes
# inverted (so it changes, whatever it was), in every pack: the chunks of
# errjob among them, wherever they lie. Then restore must refuse.
kill_gone "$JOB"
chunks=$("$CREST" --store "$S" show --json errjob |
	python3 -c 'import json, sys; print(sum(s["chunks"] for s in json.load(sys.stdin)["streams"]))')
[ "$chunks" -gt 0 ] || fail "errjob names no chunk: damage could not reach it"
hdr=$("$STORE_TOOL" format CAS_REC_HEADER)
flipped=0
for p in "$S"/packs/*.pack; do
	n=$("$STORE_TOOL" records "$p" | python3 -c '
import sys
n = 0
with open(sys.argv[1], "r+b") as f:
    for line in sys.stdin:
        off, codec, stored, sha = line.split()
        if int(stored):
            at = int(off) + int(sys.argv[2]) + int(stored) // 2
            f.seek(at); b = f.read(1); f.seek(at); f.write(bytes([b[0] ^ 0xff])); n += 1
print(n)' "$p" "$hdr")
	flipped=$((flipped + n))
done
# Every record is hit, so each of errjob's chunks (its pages share some) is.
[ "$flipped" -gt 0 ] || fail "no chunk record found to damage"
expect_error "damaged" "$CREST" --store "$S" restore errjob
[ -e /proc/"$JOB" ] && fail "a damaged snapshot brought a process back"
# Repaired, errjob stays, marked damaged (every chunk it had is lost), and
# restore still refuses it, saying what is lost, unless --allow-damaged.
"$CASCTL" --store "$S" repair >/dev/null 2>&1 && fail "repair of a store that lost chunks exited 0"
"$CREST" --store "$S" ls | grep -q "errjob.*DAMAGED" || fail "errjob is not listed damaged after the repair"
expect_error "damaged: casctl repair found .* bytes of .* lost (" "$CREST" --store "$S" restore errjob
[ -e /proc/"$JOB" ] && fail "a damaged snapshot brought a process back"
echo PASS
