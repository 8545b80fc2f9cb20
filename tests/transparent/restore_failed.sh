# Issue 10, item 2: a restore that fails leaves the job's files byte for
# byte as they were. They used to be cut back to their snapshot size before
# the chunks were read and before CRIU ran, so a failed restore lost the
# job's output written after the snapshot. Three failures: CRIU refuses (a
# stand-in criu), the chunk of the job's log is damaged in the store, and a
# chunk of the images that CRIU reads is. Then two restores that must work
# without the image server: CRIU fails on streamed images, and --tmpdir is
# too deep for its socket.
# Each time the log and stdout are compared with copies taken before, the
# message must say the files were left untouched, and no temporary file may
# be left beside them. The damage is then undone and a real restore works.
source "$(dirname "$0")/lib.sh"
need_root
cd "$T"
start_job job.out --mib 16 --interval-ms 50 --log "$T/job.log"
wait_lines job.log 4
# --file-limit below the log's size: the restore keeps the file's own tail.
"$CREST" --store "$S" checkpoint --pid "$JOB" --tag j --file-limit 100 >/dev/null
at=$(lines job.log)
wait_lines job.log $((at + 4))
kill_gone "$JOB"
cp job.log log.before
cp job.out out.before
echo "log: $(wc -c <job.log) bytes now"

untouched() {
	cmp job.log log.before || fail "$1: the job's log was changed by a failed restore"
	cmp job.out out.before || fail "$1: the job's stdout was changed by a failed restore"
	grep -q "left untouched" "$T/err.txt" || fail "$1: the message does not say the files were left untouched"
	local left
	left=$(find "$T" -maxdepth 1 -name '.*crest-*' | head -3)
	[ -z "$left" ] || fail "$1: temporaries left behind: $left"
	[ -e /proc/"$JOB" ] && fail "$1: the job is running though the restore failed"
	echo "$1: files byte-for-byte as before"
}

# 1. CRIU fails.
cat >fake-criu <<'FAKE'
#!/bin/sh
[ "$1" = --version ] && { echo "Version: 4.1.1"; exit 0; }
exit 1
FAKE
chmod +x fake-criu
expect_error "criu restore failed" env CREST_CRIU="$T/fake-criu" "$CREST" --store "$S" restore j
untouched "criu fails"

# 2. The log's chunk is damaged (stdout holds the same lines: one chunk
# for both): find it by its SHA-256 in the packs.
read -r kept size < <("$CREST" --store "$S" show j --json | python3 -c '
import json, sys
for s in json.load(sys.stdin)["streams"]:
    if s["type"] == "jobfile" and s["meta"].endswith("/job.log"):
        print(s["size"], s["meta"].split("size=")[1].split(";")[0])')
[ -n "$size" ] || fail "no job file stream for job.log in the snapshot"
[ "$kept" -lt "$size" ] || fail "the log ($size bytes) is not above --file-limit ($kept kept)"
sha=$(head -c "$kept" job.log | sha256sum | cut -d' ' -f1)
rec=""
for pack in "$S"/packs/*.pack; do
	rec=$("$STORE_TOOL" records "$pack" | awk -v s="$sha" '$4 == s' | head -1)
	[ -n "$rec" ] && break
done
[ -n "$rec" ] || fail "the log's chunk $sha is in no pack"
read -r off _ stored _ <<<"$rec"
flip=$((off + $("$STORE_TOOL" format CAS_REC_HEADER) + stored / 2))   # cas/format.h's layout
"$STORE_TOOL" flip "$pack" "$flip"
expect_error "${sha:0:16}" "$CREST" --store "$S" restore j
untouched "damaged log chunk"
"$STORE_TOOL" flip "$pack" "$flip"

# 2b. A chunk of the images is damaged: the largest record, one of the
# job's memory pages. The images are served to CRIU while it reads them
# (restore/imgsrv.h), so the damage is found with CRIU under way: the
# restore must fail naming the chunk and its image, and leave the files as
# they were and no process of the job behind (CRIU's killed tree reaped:
# a zombie would hold the job's pid, and step 3 would find it in use).
logsha=$sha
read -r pack off stored sha < <(for p in "$S"/packs/*.pack; do
	"$STORE_TOOL" records "$p" | awk -v p="$p" '{ print p, $1, $3, $4 }'
done | awk -v skip="$logsha" '$4 != skip' | sort -k3,3n | tail -1)
[ -n "$sha" ] || fail "no record to damage in the packs"
flip=$((off + $("$STORE_TOOL" format CAS_REC_HEADER) + stored / 2))
"$STORE_TOOL" flip "$pack" "$flip"
expect_error "${sha:0:16}" "$CREST" --store "$S" restore j
# Served, the error says "image NAME.img". Where CRIU's streamed restore
# died first (it kills a job built with AddressSanitizer: RESULTS.md), crest
# writes the images out to run CRIU from files, finds the damage doing so,
# and names the stream: "stream criu/NAME.img". Either names the image.
grep -Eq "(image |stream criu/)[a-z0-9-]*\.img" "$T/err.txt" || fail "the message does not name the damaged image"
untouched "damaged image chunk"
"$STORE_TOOL" flip "$pack" "$flip"

# 3. Undamaged, with the real criu behind a stand-in that fails whenever it
# is asked to read streamed images (as CRIU 4.1.1 does for a job built with
# AddressSanitizer): crest writes the images out and restores from files.
# The log goes back to its snapshot size.
real=${CREST_CRIU:-$(cd "$(dirname "$0")/../.." && pwd)/.deps/criu/criu}
[ -x "$real" ] || real=$(command -v criu) || fail "no criu to run"
cat >stream-fails <<FAKE
#!/bin/sh
for a; do [ "\$a" = --stream ] && { echo "Error (stand-in): no streams here" >>"\$3/restore.log"; exit 1; }; done
exec "$real" "\$@"
FAKE
chmod +x stream-fails
CREST_CRIU="$T/stream-fails" "$CREST" --store "$S" restore j >restore.out
cat restore.out
grep -q "restoring from image files instead" restore.out || fail "no note that the restore went back to image files"
grep -q "discarded" restore.out || fail "the restore did not cut the log back"
# The restored job appends at once: the first $size bytes are the log at
# the snapshot, its kept $kept bytes from the store, the rest its own tail.
[ "$(wc -c <job.log)" -ge "$size" ] || fail "the restored log is shorter than at the snapshot"
head -c "$size" log.before | cmp - <(head -c "$size" job.log) || fail "the restored log's first $size bytes differ"

# 4. A --tmpdir too deep for the image server's socket (a unix socket's
# path has 107 bytes): the images are written out there instead, the job
# comes back and runs on, and the directory is left empty.
kill_gone "$JOB"
deep=$T/$(printf '%0100d' 0)
mkdir "$deep"
"$CREST" --store "$S" restore j --tmpdir "$deep" >restore.out 2>&1 || { cat restore.out; fail "a restore with a --tmpdir of ${#deep} characters failed"; }
n=$(lines job.log)
wait_lines job.log $((n + 2))
[ -z "$(ls -A "$deep")" ] || fail "the restore left $(ls -A "$deep") in its --tmpdir"
echo "a --tmpdir of ${#deep} characters: restored from image files, the job runs on"
echo PASS
