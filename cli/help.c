/* help.c - the commands' table and what is made from it at run time; see
 * help.h. Every option a command's parser takes is listed in its entry:
 * tests/cli checks both ways. */
#include "cli/help.h"
#include "cas/format.h"
#include "cli/common.h"

#include <string.h>

#ifndef CREST_VERSION
#define CREST_VERSION "0.0.0"
#endif
#ifndef CREST_GIT
#define CREST_GIT ""
#endif

const struct cli_opt_doc cli_global_opts[] = {
	{ "--store", NULL, "DIR", "the store: a directory or rados:POOL[/NS] (else $CREST_STORE, else ./crest-store)" },
	{ "--init", NULL, NULL, "make the store first if it is not one yet, as crest init would" },
	{ "--json", NULL, NULL, "print JSON on stdout, and no progress or notes on stderr" },
	{ "--quiet", "-q", NULL, "no progress line and no notes on stderr; errors still" },
	{ "--workers", NULL, "N", "threads for hashing, compression and reading (1 to 1024; default: every core)" },
	{ "--help", "-h", NULL, "this help, on stdout" },
	{ NULL, NULL, NULL, NULL },
};

const struct cli_env_doc cli_env_docs[] = {
	{ "CREST_STORE", "the store when --store is not given (default ./crest-store)" },
	{ "CREST_INIT", "1: as --init, for scripts and job launchers that start on a fresh machine" },
	{ "CREST_LOCK_TIMEOUT", "seconds a writer waits for another writer to let go of the store (default 600)" },
	{ "CREST_CRIU", "the criu program to run (default: the one beside crest's tree, else criu on PATH)" },
	{ "CRIU_FAULT", "passed on to criu as it is; unset, crest sets 130 (criu without hardware breakpoints) "
	  "where a breakpoint set through ptrace never stops a task, as on some virtual machines: "
	  "criu would wait for it for good" },
	{ "CREST_RESTORE_IMAGES", "stream (default): restore serves CRIU its images from the store as it reads them; "
	  "files: writes them all to --tmpdir first" },
	{ "CREST_RUN_DIR", "where crest restore keeps restore.lock, which one restore in place at a time holds "
	  "(default /run/crest)" },
	{ "CREST_PLOT_SCRIPT", "crest bench restore --plot also keeps the gnuplot script it ran at this path, "
	  "and the script's data beside it as PATH.dat (to redraw or restyle the picture)" },
	{ "CREST_WORKLOAD, CREST_WORKLOAD_GPU", "the sample job crest demo runs (default: beside crest)" },
	{ "NO_COLOR", "crest prints no colour at all; its one terminal control, the progress line, is drawn "
		      "only when stderr is a terminal and neither --quiet nor --json is given" },
	{ NULL, NULL },
};

#define SNAP_NAMES "SNAPSHOT is job:JOB (the newest job snapshot of job JOB), a tag, latest (the " \
	"store's newest), a branch (its head), a full id or a unique id prefix (4 hex digits or more), " \
	"tried in that order; NAME~N is N parents back from NAME (main~1: the parent of main's head)."

const struct cli_cmd_doc cli_cmd_docs[] = {
	/* ---- crest ---- */
	{ "crest", "init", "[DIR]", "make a new store",
	  "Makes DIR (default: the store, --store or $CREST_STORE or ./crest-store) a new, empty "
	  "store; its parent must exist. Nothing else makes a store, so that a mistyped --store is "
	  "an error rather than a new store beside the real one; --init (or CREST_INIT=1) lets any "
	  "command make its store first. Refuses a store that exists and a directory that holds "
	  "anything else.",
	  "DIR", false, { { NULL, NULL, NULL, NULL } } },
	{ "crest", "put", "[--tag TAG] [--branch BRANCH] [--label K=V]... [--chunker fixed|cdc] [--chunk-size SIZE] PATH...",
	  "snapshot files and directory trees",
	  "Stores each PATH, and for a directory everything below it, as one snapshot: contents "
	  "(holes kept), modes, times and symlinks. Chunks the store holds already are not stored "
	  "again. Prints the new snapshot's id. Ctrl-C or SIGTERM before the commit: nothing is "
	  "committed, the pack space written is given back, and crest exits 130 (143 for SIGTERM).",
	  "PATH...", false, {
		{ "--tag", NULL, "TAG", "name the snapshot" },
		{ "--branch", NULL, "BRANCH", "the branch it goes on (default main)" },
		{ "--label", NULL, "K=V", "label the snapshot (repeat for more); keys starting crest. are crest's, "
		  "but for crest.job, crest.job.step and crest.job.rank, which make it a job's rank snapshot "
		  "as libcrest does" },
		{ "--chunker", NULL, "fixed|cdc", "cut files in fixed-size chunks, or content-defined ones" },
		{ "--chunk-size", NULL, "SIZE", "the (average) chunk size: 4096, 64K, 1M" },
	} },
	{ "crest", "get", "[--allow-damaged] [--rank R] SNAPSHOT DEST", "restore a snapshot's files under DEST",
	  "Writes the files of a snapshot made by put under the directory DEST, every chunk's hash "
	  "checked on the way. Files belong to whoever runs get (owners are not restored); run "
	  "as root, get leaves out files' set-user-ID and set-group-ID bits, which would make "
	  "them root's. A snapshot casctl repair kept without chunks it lost (DAMAGED in ls) is "
	  "refused, naming the bytes lost, unless --allow-damaged. A job snapshot is refused: --rank R "
	  "gets its rank R's snapshot. " SNAP_NAMES,
	  "SNAPSHOT DIR", false, {
		{ "--rank", NULL, "R", "of a job snapshot, get rank R's snapshot (crest show lists them)" },
		{ "--allow-damaged", NULL, NULL, "restore a damaged snapshot all the same: zeros where bytes "
		  "are lost, each range named on stderr (in --json, \"lost\")" },
	} },
	{ "crest", "ls", "[--all]", "list snapshots",
	  "Lists every snapshot: id, time, kind (files, process, library or job), logical size and tags, and "
	  "DAMAGED after them for one casctl repair kept without chunks it lost; with --json also "
	  "its streams, parent and labels. A job snapshot is one line (kind job, its job, step and "
	  "world size; its ranks' bytes); the rank snapshots it names are left out unless --all. A "
	  "rank snapshot no job snapshot names is marked partial: its job's commit never came (or "
	  "has not yet). --json: \"job\" {name, step, world, members} of a job snapshot, {name, "
	  "step, rank, partial, in} of a rank snapshot.",
	  "", false, {
		{ "--all", NULL, NULL, "also list the rank snapshots that job snapshots name" },
	} },
	{ "crest", "show", "SNAPSHOT", "a snapshot's metadata and streams",
	  "Prints a snapshot's metadata (kind, time, parent, branch, tags, labels) and its streams "
	  "with their sizes; for a damaged snapshot, the byte ranges of each stream it lost; for a "
	  "job snapshot, its members (rank, snapshot, kind, bytes, GPU; MISSING for one the store "
	  "lacks); --json too. " SNAP_NAMES,
	  "SNAPSHOT", false, { { NULL, NULL, NULL, NULL } } },
	{ "crest", "tag", "[--force] SNAPSHOT TAG", "name a snapshot",
	  "Gives SNAPSHOT the name TAG, usable wherever a snapshot is named. Tags do not move: a "
	  "tag that names another snapshot is refused (by put and checkpoint too) unless --force "
	  "moves it. A tagged snapshot can be kept by casctl gc --keep-tagged or --keep-tag TAG. "
	  "A TAG may not be latest, 4 to 64 hex digits, or start with crest. (crest's own). " SNAP_NAMES,
	  "SNAPSHOT TAG", false, {
		{ "--force", "-f", NULL, "move TAG to SNAPSHOT if it names another snapshot" },
	} },
	{ "crest", "push", "SNAPSHOT STORE", "copy a snapshot into another store",
	  "Copies SNAPSHOT from the store (--store) into the store at STORE, as git pushes to a remote: "
	  "only the chunks and extent-list pieces STORE lacks are sent, each chunk checked against its "
	  "SHA-256 on the way, and the snapshot keeps its id there. A job snapshot brings its ranks' "
	  "snapshots. STORE lists the snapshot only once all of it is there; its tags are given to it "
	  "where STORE has them free. STORE is made with --init (or CREST_INIT=1). " SNAP_NAMES,
	  "SNAPSHOT DIR", false, { { NULL, NULL, NULL, NULL } } },
	{ "crest", "pull", "SNAPSHOT STORE", "copy a snapshot from another store",
	  "Copies SNAPSHOT from the store at STORE into the store (--store): crest push the other way, "
	  "to restore on this machine a snapshot another one pushed. Only what the store lacks is "
	  "read, every chunk checked against its SHA-256. SNAPSHOT is named as STORE knows it.",
	  "SNAPSHOT DIR", false, { { NULL, NULL, NULL, NULL } } },
	{ "crest", "diff", "SNAPSHOT_A SNAPSHOT_B", "what changed from A to B, stream by stream",
	  "Compares two snapshots stream by stream: streams added, removed and changed, the bytes "
	  "that differ and the chunks they share. " SNAP_NAMES,
	  "SNAPSHOT SNAPSHOT", false, { { NULL, NULL, NULL, NULL } } },
	{ "crest", "checkpoint",
	  "--pid PID [--tag TAG] [--branch BRANCH] [--every DURATION [--count N]] [--kill] [--file-limit SIZE] "
	  "[--workdir DIR [--workdir-limit SIZE]] [--tmpdir DIR] [--lock-timeout MS] [--lock-within DURATION] "
	  "[--multi-gpu-process] [--huge-pages] [--stage-images] [--tcp-close] [--metrics ADDR] [--metrics-file FILE]",
	  "snapshot a running process",
	  "Checkpoints process PID and its children with CRIU (as root), GPU state included, into "
	  "one snapshot; the job runs on as soon as its state is copied out, while crest stores it. "
	  "With --every, checkpoints again every DURATION until stopped (or --count times). Files "
	  "the job holds open for writing are stored with it; files it opens again each step (a log it "
	  "appends to, event files, its own checkpoints) only with --workdir DIR, which stores DIR whole, "
	  "as the freeze saw it. So are its listening sockets and the TCP connections between its own "
	  "processes. A connection to a peer outside the job is refused before anything is frozen, "
	  "unless --tcp-close drops it (a unix socket connected outside the job is refused always: CRIU "
	  "cannot save it). So is a job holding an io_uring, which CRIU cannot save either: start a "
	  "PyTorch job with USE_LIBUV=0 (its TCPStore holds one otherwise), another libuv program with "
	  "UV_USE_IO_URING=0.",
	  "", false, {
		{ "--pid", NULL, "PID", "the process to checkpoint (required)" },
		{ "--tag", NULL, "TAG", "name the snapshot; not with --every" },
		{ "--branch", NULL, "BRANCH", "the branch it goes on (default: the job's own, else main)" },
		{ "--every", NULL, "DURATION", "checkpoint again every DURATION: 30s, 5m, 1h, 7d, 250ms (1ms to 366 days)" },
		{ "--count", NULL, "N", "with --every: stop after N checkpoints" },
		{ "--kill", NULL, NULL, "end the job once its snapshot is committed (it runs on if the store fails); not with --every" },
		{ "--file-limit", NULL, "SIZE", "the largest open file stored with the job, and the largest deleted file it maps (default 64M)" },
		{ "--workdir", NULL, "DIR", "a directory the job writes by path (logs, event files, its own checkpoints): "
		  "stored whole with each snapshot, put back exactly by restore, copied for each clone" },
		{ "--workdir-limit", NULL, "SIZE", "the most --workdir may hold (default 1G): larger is refused before the job is frozen" },
		{ "--tmpdir", NULL, "DIR", "CRIU's working directory, and where its images are staged with --stage-images" },
		{ "--lock-timeout", NULL, "MS", "how long each try waits to lock the job's GPU state: milliseconds, or a "
		  "duration (2s), up to 1h (default 10s); the CUDA processes are locked all at once" },
		{ "--lock-within", NULL, "DURATION", "how long crest keeps trying to lock every CUDA process at once "
		  "(default 30s): a lock that gives up (NCCL: a collective in flight while a peer rank is locked) "
		  "lets all go and tries again after a pause; then crest says why and the job runs on, unfrozen" },
		{ "--multi-gpu-process", NULL, NULL, "take a process that holds CUDA state on several GPUs, which is "
		  "refused otherwise: the driver cannot restore one that moves data between its GPUs (peer access). "
		  "If its GPU state then cannot be brought back, crest stores the snapshot, ends the job and says so" },
		{ "--huge-pages", NULL, NULL, "switch the machine's transparent huge pages to \"always\" from just "
		  "before the freeze until the job runs again, so that the memory the driver stages a CUDA "
		  "process's device memory in is faulted in 2 MiB pages; then put back (by the guard if crest is "
		  "killed). Every process on the machine sees the setting meanwhile; needs root" },
		{ "--stage-images", NULL, NULL, "write CRIU's images to --tmpdir first and store them once the job "
		  "runs again, as crest did before it streamed them into the store as CRIU dumps (the default): "
		  "a store too slow to take them as fast as CRIU writes then cannot lengthen the stall, but tmpfs "
		  "holds a copy of the job's memory meanwhile (CREST_CHECKPOINT_IMAGES=files makes it the default)" },
		{ "--tcp-close", NULL, NULL, "checkpoint a job with connections to peers outside it: a restore "
		  "gives the job every TCP connection closed (for a server whose clients reconnect)" },
		{ "--metrics", NULL, "ADDR", "with --every: serve Prometheus metrics at http://ADDR/metrics "
		  "(PORT or :PORT listen on 127.0.0.1 only; HOST:PORT, [V6]:PORT, 0.0.0.0:PORT for every "
		  "interface; port 0 picks one)" },
		{ "--metrics-file", NULL, "FILE", "with --every: write the metrics as a node_exporter textfile after each round" },
		{ "--push-to", NULL, "DIR", "push each snapshot to the store DIR once stored (crest push), the job running on" },
	} },
	{ "crest", "restore", "SNAPSHOT [--keep-files] [--gpu N | --gpu-map OLD=NEW,...] [--tmpdir DIR] [--branch BRANCH] "
	  "[--huge-pages] [--allow-damaged]",
	  "bring a checkpointed process back",
	  "Restores the process tree of a snapshot made by checkpoint or run, GPU memory included, "
	  "and lets it go on. Files it held open are put back as they were at the snapshot. "
	  "One restore in place runs at a time, and one is refused, touching nothing, while a process "
	  "holds the job's files open for writing (the job, or a copy of it, runs). "
	  SNAP_NAMES,
	  "SNAPSHOT", false, {
		{ "--keep-files", NULL, NULL, "leave the job's open files (and its --workdir) as they are now" },
		{ "--gpu", NULL, "N", "move the job's first GPU to GPU N (an index or a UUID); not with --gpu-map" },
		{ "--gpu-map", NULL, "OLD=NEW,...", "map the job's GPUs by UUID onto GPUs here" },
		{ "--tmpdir", NULL, "DIR", "CRIU's working directory (and its images with CREST_RESTORE_IMAGES=files)" },
		{ "--branch", NULL, "BRANCH", "the branch the restored job's next checkpoints go on" },
		{ "--huge-pages", NULL, NULL, "switch the machine's transparent huge pages to \"always\" while CRIU "
		  "and the driver restore the job, so that its memory is faulted in 2 MiB pages; then put back "
		  "(by the guard if crest is killed). Every process on the machine sees the setting meanwhile" },
		{ "--allow-damaged", NULL, NULL, "restore a damaged snapshot all the same: zeros where bytes "
		  "are lost, each range named" },
	} },
	{ "crest", "log", "[--graph] [--plot FILE] [BRANCH]", "the history of snapshots",
	  "Lists every snapshot, newest first, or only BRANCH's head and its ancestors; --graph "
	  "draws how they descend from one another. --plot draws BRANCH's snapshot sizes "
	  "(logical, new, stored) and stalls over time into a PNG (gnuplot).",
	  "BRANCH", false, {
		{ "--graph", NULL, NULL, "draw the parent links as a graph" },
		{ "--plot", NULL, "FILE", "draw the branch's sizes and stalls over time into FILE (PNG); not with --graph" },
	} },
	{ "crest", "branch", "[NAME [SNAPSHOT]]", "list branches, or start one",
	  "Without NAME, lists the branches with their heads. With NAME, points the new branch NAME "
	  "at SNAPSHOT (default: the head of main), as git does: a ref, no copy of the snapshot. "
	  "The next checkpoint on NAME is SNAPSHOT's child; gc keeps SNAPSHOT while it is NAME's "
	  "head. " SNAP_NAMES,
	  "NAME SNAPSHOT", false, { { NULL, NULL, NULL, NULL } } },
	{ "crest", "run", "[--every DURATION] [--branch BRANCH] [--file-limit SIZE] [--workdir DIR [--workdir-limit SIZE]] "
	  "[--tmpdir DIR] [--tcp-close] [--cuda-shim] [--huge-pages] [--stage-images] [--metrics ADDR] [--metrics-file FILE] [--] COMMAND "
	  "[ARG...]",
	  "run a job in a pid namespace of its own, checkpointed",
	  "Runs COMMAND as root in a new pid namespace, so that it can be restored with the same "
	  "pids, and checkpoints it every DURATION. Exits with the job's status. With --workdir DIR each "
	  "snapshot holds DIR as the frozen job saw it: restore puts it back exactly (files made after "
	  "the snapshot removed), and each clone runs with its own copy mounted over DIR.",
	  "PROGRAM...", true, {
		{ "--every", NULL, "DURATION", "checkpoint every DURATION: 30s, 5m, 1h, 7d (1ms to 366 days)" },
		{ "--branch", NULL, "BRANCH", "with --every: the branch its snapshots go on (default main)" },
		{ "--file-limit", NULL, "SIZE", "with --every: the largest open file stored with the job" },
		{ "--workdir", NULL, "DIR", "with --every: a directory the job writes by path (logs, event files, its own "
		  "checkpoints): stored whole with each snapshot, put back exactly by restore, copied for each clone" },
		{ "--workdir-limit", NULL, "SIZE", "the most --workdir may hold (default 1G): larger is refused before the job is frozen" },
		{ "--tmpdir", NULL, "DIR", "with --every: where CRIU's images are staged" },
		{ "--tcp-close", NULL, NULL, "with --every: as checkpoint's, drop TCP connections to peers outside the job" },
		{ "--stage-images", NULL, NULL, "with --every: as checkpoint's, CRIU's images staged in --tmpdir "
		  "first, not streamed into the store as CRIU dumps them" },
		{ "--huge-pages", NULL, NULL, "with --every: as checkpoint's, the machine's huge pages \"always\" for "
		  "each checkpoint's window" },
		{ "--cuda-shim", NULL, NULL, "preload crest's NCCL shim into the job (LD_PRELOAD): each checkpoint ends its "
		  "NCCL communicators at a point all ranks agree on, just before the freeze, and makes them again after, "
		  "so that ranks with NCCL's P2P transport on (its default on one node) can be checkpointed and restored" },
		{ "--metrics", NULL, "ADDR", "with --every: serve Prometheus metrics at http://ADDR/metrics "
		  "(PORT or :PORT listen on 127.0.0.1 only; HOST:PORT, [V6]:PORT, 0.0.0.0:PORT for every "
		  "interface; port 0 picks one)" },
		{ "--metrics-file", NULL, "FILE", "with --every: write the metrics as a node_exporter textfile after each round" },
		{ "--push-to", NULL, "DIR", "push each snapshot to the store DIR once stored (crest push), the job running on" },
	} },
	{ "crest", "clone", "SNAPSHOT --branch NEW [--count N] [--workdir PATTERN] [--tmpdir DIR] "
	  "[--gpu N | --gpu-map OLD=NEW,...]",
	  "run copies of a job beside it",
	  "Restores N copies of a snapshot of a job started by crest run, each in a pid namespace "
	  "of its own, on branch NEW (NEW-1 .. NEW-N for several); each copy's checkpoints continue "
	  "its branch. PATTERN names each copy's directory for the job's files, %d its number "
	  "(1..N); without it each file is copied beside itself as FILE.clone-N. A snapshot taken "
	  "with --workdir DIR gives each copy its own copy of DIR (DIR.clone-N, or PATTERN/BASENAME), "
	  "mounted over DIR for it. N copies must fit "
	  "what the machine (and crest's cgroup) can hold, the snapshot's memory and tasks times N, "
	  "or none starts. Each copy's line, branch and note are made as it starts; Ctrl-C or "
	  "SIGTERM stops the starting, says which copies run and exits 130 (143).",
	  "SNAPSHOT", false, {
		{ "--branch", NULL, "BRANCH", "the new branch the copies go on (required)" },
		{ "--count", NULL, "N", "how many copies (1 to 1000, default 1)" },
		{ "--workdir", NULL, "PATTERN", "each copy's directory for the job's files, %d its number" },
		{ "--tmpdir", NULL, "DIR", "CRIU's working directory (and its images with CREST_RESTORE_IMAGES=files)" },
		{ "--gpu", NULL, "N", "put the copy's first GPU on GPU N (an index or a UUID)" },
		{ "--gpu-map", NULL, "OLD=NEW,...", "map the job's GPUs by UUID onto GPUs here" },
	} },
	{ "crest", "bench", "restore SNAPSHOT [--to null|files|host|gpu] [--cold] [--threads N] [--repeat K] "
	  "[--dir DIR] [--keep] [--plot FILE] | checkpoint [--size SIZE] [--regions N] [--change P] "
	  "[--staging SIZE] [--repeat K] [--dir DIR]",
	  "how fast snapshots come back and go in on this machine",
	  "bench restore brings SNAPSHOT back without harming anything: into a temporary directory "
	  "(files, removed after unless --keep), scratch memory (host), the GPU (gpu) or nowhere "
	  "(null: read, check, decompress). It prints GB/s and the time per phase, min/median/max "
	  "over --repeat runs, and this machine's ceiling for the same bytes measured in the same "
	  "run (a plain parallel read of the same pack bytes; pinned host-to-device copies for "
	  "gpu), with the ratio. --cold first drops the store's packs from the page cache. The store "
	  "is only read. bench checkpoint measures the stall and ingest of library-style "
	  "checkpoints of host regions, into a temporary store unless --store is given.",
	  "restore|checkpoint SNAPSHOT", false, {
		{ "--to", NULL, "null|files|host|gpu", "restore: where the snapshot goes (default null)" },
		{ "--cold", NULL, NULL, "restore: drop the store's packs from the page cache before each run" },
		{ "--threads", NULL, "N", "restore: threads (default: --workers, else every core)" },
		{ "--repeat", NULL, "K", "runs to take min/median/max over (restore 3, checkpoint 5)" },
		{ "--dir", NULL, "DIR", "where the temporary directory or store goes" },
		{ "--keep", NULL, NULL, "restore, with --to files: keep the restored files" },
		{ "--plot", NULL, "FILE", "restore: draw throughput and busy threads per phase into a PNG (gnuplot)" },
		{ "--size", NULL, "SIZE", "checkpoint: bytes of host regions in all (default 256M)" },
		{ "--regions", NULL, "N", "checkpoint: how many regions (default 4)" },
		{ "--change", NULL, "P", "checkpoint: percent of the bytes rewritten between checkpoints (default 10)" },
		{ "--staging", NULL, "SIZE", "checkpoint: the staging pool (default 1G)" },
	} },
	{ "crest", "demo", "[--cpu | --gpu] [--mib N] [--checkpoints N] [--restore-from K] [--change-pct P] "
	  "[--interval-ms MS]",
	  "checkpoint, kill and restore a sample job",
	  "Starts a sample job (on a GPU if one is here, else on the CPU) that changes part of its "
	  "memory each step, checkpoints it several times, kills it, restores checkpoint K and "
	  "checks that it goes on from there. Needs root.",
	  "", false, {
		{ "--cpu", NULL, NULL, "the CPU job, even with a GPU here; not with --gpu" },
		{ "--gpu", NULL, NULL, "the GPU job (fails without a GPU)" },
		{ "--mib", NULL, "N", "the job's memory in MiB" },
		{ "--checkpoints", NULL, "N", "how many checkpoints (default 5)" },
		{ "--restore-from", NULL, "K", "the checkpoint to restore (default 3)" },
		{ "--change-pct", NULL, "P", "percent of its memory the job changes each step (default 2)" },
		{ "--interval-ms", NULL, "MS", "milliseconds between checkpoints (default 1500)" },
	} },
	{ "crest", "job", "commit NAME --step S [--gpu R=UUID]... [--tag TAG] SNAPSHOT... | ls [NAME]",
	  "job snapshots: the rank snapshots of one step of a job, whole",
	  "A job of N processes checkpoints each rank as a snapshot of its own; a job snapshot names "
	  "the N of one step, committed once all of them are: listed only whole. job commit commits "
	  "the job snapshot of step S of job NAME (letters, digits, -_.; up to 96) from one SNAPSHOT "
	  "per rank, in rank order, each checked to be in the store under the writer lock, and prints "
	  "its id; the same commit again gives the same id and commits nothing. libcrest commits "
	  "through its API; this is for scripts. job ls lists the job snapshots (of NAME), newest "
	  "first. job:NAME names the newest (by step) wherever a snapshot is named; crest get --rank R "
	  "gets a rank's files, and casctl gc keeps a job snapshot's ranks with it. " SNAP_NAMES,
	  "commit|ls NAME SNAPSHOT...", false, {
		{ "--step", NULL, "S", "commit: the job's step (required)" },
		{ "--gpu", NULL, "R=UUID", "commit: rank R ran on GPU UUID (repeat for more ranks)" },
		{ "--tag", NULL, "TAG", "commit: name the job snapshot" },
	} },
	{ "crest", "help", "[COMMAND]", "the commands, or one command's options",
	  "Prints the commands, or one command's synopsis and options, on stdout.",
	  "COMMAND", false, { { NULL, NULL, NULL, NULL } } },
	{ "crest", "version", "", "crest's version and the store format it reads and writes",
	  "Prints crest's version (with the git commit it was built from) and the store format "
	  "versions it writes and reads; the same as --version.",
	  "", false, { { NULL, NULL, NULL, NULL } } },

	/* ---- casctl ---- */
	{ "casctl", "stats", "", "logical and stored bytes, dedup and compression ratios",
	  "Prints the store's snapshots, logical bytes, unique and stored bytes, and the dedup and "
	  "compression ratios.",
	  "", false, { { NULL, NULL, NULL, NULL } } },
	{ "casctl", "verify", "[SNAPSHOT]", "re-read and check every byte restores and repairs depend on",
	  "Reads back every chunk SNAPSHOT (default: every snapshot) needs and checks its hash. "
	  "Without SNAPSHOT it also reads every meta log whole and every pack up to its committed "
	  "end, and compares the index with the meta logs both ways: every durable byte a restore or "
	  "a repair depends on, always (restic's --read-data as the default: the store is local, so "
	  "reading it all costs a disk's time, and a check that skips bytes passes damage a repair "
	  "would find too late). Each fault is one line, FAULT WHERE: WHAT; costs N snapshots: ID ... "
	  "(or: costs no snapshot), WHERE a file and offset or an index key; then each snapshot, the "
	  "damaged ones with what they lost. A commit in progress beside it is no fault. --json: "
	  "faults[] of {where, what, snapshots}. Exits 1 if anything is damaged.",
	  "SNAPSHOT", false, { { NULL, NULL, NULL, NULL } } },
	{ "casctl", "repair", "", "rebuild the index from the packs and meta logs",
	  "Builds a new index from the packs and meta logs, for a store whose index is damaged or "
	  "lost. The old index is kept aside; nothing is deleted. Reads on past damaged records: "
	  "one bad chunk costs that chunk, and a snapshot that used it stays, marked DAMAGED with "
	  "the byte ranges it lost (crest show; crest get --allow-damaged). Says what cannot be "
	  "recovered; exits 1 when a snapshot is damaged or lost. Writes FORMAT again when it is lost and the "
	  "directory is plainly a crest store (only a store's entries, and a crest meta log in meta/).",
	  "", false, { { NULL, NULL, NULL, NULL } } },
	{ "casctl", "gc", "[--keep-last N] [--keep-hourly N] [--keep-daily N] [--keep-weekly N] [--keep-monthly N] "
	  "[--keep-yearly N] [--keep-within DURATION] [--keep-tagged] [--keep-tag TAG]... [--keep-partial DURATION] "
	  "[--rewrite-below FRACTION] [--dry-run]",
	  "expire snapshots by a retention policy per branch; reclaim their space",
	  "Per branch, restic's rules: keeps the newest N, the newest in each of the newest N hours, "
	  "days, weeks (Monday to Sunday), months or years that have snapshots (UTC; a bucket "
	  "without one is not counted), all within DURATION of the branch's newest, every tagged "
	  "snapshot or those with a given TAG; the head of every branch always stays. The rest are "
	  "forgotten and their chunks reclaimed: packs less live than FRACTION are rewritten. A job "
	  "snapshot counts as one snapshot of its branch job/NAME; the rank snapshots it names are "
	  "kept exactly while a kept job snapshot names them, and partial ones (a rank snapshot no "
	  "job snapshot names) while younger than --keep-partial. "
	  "--dry-run opens the store read-only and changes nothing in it.",
	  "", false, {
		{ "--keep-last", NULL, "N", "keep the newest N snapshots of each branch" },
		{ "--keep-hourly", NULL, "N", "keep the newest snapshot of each of the newest N hours" },
		{ "--keep-daily", NULL, "N", "keep the newest snapshot of each of the newest N days" },
		{ "--keep-weekly", NULL, "N", "keep the newest snapshot of each of the newest N weeks" },
		{ "--keep-monthly", NULL, "N", "keep the newest snapshot of each of the newest N months" },
		{ "--keep-yearly", NULL, "N", "keep the newest snapshot of each of the newest N years" },
		{ "--keep-within", NULL, "DURATION", "keep all within DURATION of the branch's newest: 12h, 7d, 2w" },
		{ "--keep-tagged", NULL, NULL, "keep every tagged snapshot" },
		{ "--keep-tag", NULL, "TAG", "keep the snapshots tagged TAG (repeat for more tags)" },
		{ "--keep-partial", NULL, "DURATION", "keep partial rank snapshots (in no job snapshot) younger "
		  "than this (default 24h)" },
		{ "--rewrite-below", NULL, "FRACTION", "rewrite packs less live than this (above 0, at most 1; default 0.5)" },
		{ "--dry-run", NULL, NULL, "say what would go, and change nothing (opens the store read-only)" },
	} },
	{ "casctl", "help", "[COMMAND]", "the commands, or one command's options",
	  "Prints the commands, or one command's synopsis and options, on stdout.",
	  "COMMAND", false, { { NULL, NULL, NULL, NULL } } },
	{ "casctl", "version", "", "crest's version and the store format it reads and writes",
	  "Prints crest's version (with the git commit it was built from) and the store format "
	  "versions it writes and reads; the same as --version.",
	  "", false, { { NULL, NULL, NULL, NULL } } },
	{ NULL, NULL, NULL, NULL, NULL, NULL, false, { { NULL, NULL, NULL, NULL } } },
};

const struct cli_cmd_doc *cli_doc_find(const char *prog, const char *name)
{
	for (const struct cli_cmd_doc *d = cli_cmd_docs; d->name; d++)
		if (!strcmp(d->prog, prog) && !strcmp(d->name, name))
			return d;
	return NULL;
}

static bool opt_is(const struct cli_opt_doc *o, const char *arg)
{
	return !strcmp(o->name, arg) || (o->alias && !strcmp(o->alias, arg));
}

const struct cli_opt_doc *cli_doc_opt(const struct cli_cmd_doc *d, const char *arg)
{
	for (const struct cli_opt_doc *o = d->opts; o->name; o++)
		if (opt_is(o, arg))
			return o;
	for (const struct cli_opt_doc *o = cli_global_opts; o->name; o++)
		if (opt_is(o, arg))
			return o;
	return NULL;
}

const char *cli_version(void)
{
	return CREST_VERSION;
}

const char *cli_version_git(void)
{
	return CREST_GIT;
}

static void print_opts(FILE *f, const struct cli_opt_doc *o)
{
	for (; o->name; o++) {
		char head[64];
		snprintf(head, sizeof(head), "%s%s%s%s%s", o->alias ? o->alias : "", o->alias ? ", " : "", o->name,
			 o->arg ? " " : "", o->arg ? o->arg : "");
		if (strlen(head) <= 24)
			fprintf(f, "  %-24s  %s\n", head, o->help);
		else
			fprintf(f, "  %s\n  %-24s  %s\n", head, "", o->help);
	}
}

void cli_help_usage(FILE *f, const char *prog)
{
	fprintf(f, "usage: %s [--store DIR] [--init] [--json] [--quiet] [--workers N] COMMAND ...\n\n", prog);
	for (const struct cli_cmd_doc *d = cli_cmd_docs; d->name; d++)
		if (!strcmp(d->prog, prog))
			fprintf(f, "  %-12s %s\n", d->name, d->summary);
	fprintf(f, "\nGlobal options, before or after COMMAND:\n");
	print_opts(f, cli_global_opts);
	fprintf(f, "\n%s help COMMAND, or %s COMMAND --help: a command's options. man %s: all of it.\n",
		prog, prog, prog);
}

/* Paragraph text wrapped at 78 columns, indented. */
static void print_wrapped(FILE *f, const char *s, int indent)
{
	int col = 0;
	while (*s) {
		size_t w = strcspn(s, " ");
		if (col && col + 1 + (int)w > 78) {
			fputc('\n', f);
			col = 0;
		}
		if (!col)
			col = fprintf(f, "%*s", indent, "");
		else
			col += fprintf(f, " ");
		col += fprintf(f, "%.*s", (int)w, s);
		s += w;
		while (*s == ' ')
			s++;
	}
	if (col)
		fputc('\n', f);
}

void cli_help_command(FILE *f, const struct cli_cmd_doc *d)
{
	fprintf(f, "usage: %s %s%s%s\n\n", d->prog, d->name, d->synopsis[0] ? " " : "", d->synopsis);
	print_wrapped(f, d->text, 2);
	if (d->opts[0].name) {
		fprintf(f, "\nOptions:\n");
		print_opts(f, d->opts);
	}
	fprintf(f, "\nGlobal options: --store DIR, --json, --quiet, --workers N (%s help).\n", d->prog);
}

void cli_help_version(FILE *f, const char *prog, bool json)
{
	const char *git = cli_version_git();
	if (json) {
		fprintf(f, "{\"program\": \"%s\", \"version\": \"%s\", \"git\": \"%s\", \"store_format\": %d, "
			"\"store_format_oldest\": %d, \"pack_format\": %d, \"meta_format\": %d}\n", prog,
			cli_version(), git, CAS_FORMAT_VERSION, CAS_FORMAT_OLDEST, CAS_PACK_VERSION,
			CAS_META_VERSION);
		return;
	}
	fprintf(f, "%s %s%s%s%s\n", prog, cli_version(), git[0] ? " (git " : "", git, git[0] ? ")" : "");
	fprintf(f, "store format %d (reads %d to %d), pack format %d, meta log format %d\n", CAS_FORMAT_VERSION,
		CAS_FORMAT_OLDEST, CAS_FORMAT_VERSION, CAS_PACK_VERSION, CAS_META_VERSION);
}

static bool is_help(const char *a)
{
	return !strcmp(a, "--help") || !strcmp(a, "-h");
}

int cli_help_dispatch(const struct cli *c, int argc, char **argv)
{
	const char *prog = c->prog;
	if (argc < 2) {
		cli_help_usage(stderr, prog);
		return 2;
	}
	const char *cmd = argv[1];
	if (is_help(cmd) || !strcmp(cmd, "help")) {
		if (argc < 3 || is_help(cmd)) {
			cli_help_usage(stdout, prog);
			return 0;
		}
		/* "help --help": the help command's own */
		const struct cli_cmd_doc *d = cli_doc_find(prog, is_help(argv[2]) ? "help" : argv[2]);
		if (!d) {
			fprintf(stderr, "%s: help: no command '%s' (%s help lists them)\n", prog, argv[2], prog);
			return 2;
		}
		cli_help_command(stdout, d);
		return 0;
	}
	if (!strcmp(cmd, "--version")) {
		cli_help_version(stdout, prog, c->json);
		return 0;
	}
	const struct cli_cmd_doc *d = cmd[0] == '-' ? NULL : cli_doc_find(prog, cmd);
	if (!d) {
		if (cmd[0] == '-')
			fprintf(stderr, "%s: unknown option '%s' (%s help lists them)\n", prog, cmd, prog);
		else
			fprintf(stderr, "%s: unknown command '%s' (%s help lists them)\n", prog, cmd, prog);
		return 2;
	}
	/* Each option checked against the table, its value skipped: a value
	 * may well start with '-', an operand that does not is the job's (run). */
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--"))
			break;
		if (a[0] != '-' || !a[1]) {
			if (d->operand_ends_opts)
				break;
			continue;
		}
		if (is_help(a)) {
			cli_help_command(stdout, d);
			return 0;
		}
		const struct cli_opt_doc *o = cli_doc_opt(d, a);
		if (!o) {
			fprintf(stderr, "%s: %s: unknown option '%s' (%s %s --help lists them)\n", prog, d->name, a,
				prog, d->name);
			return 2;
		}
		if (o->arg)
			i++;
	}
	if (!strcmp(cmd, "version")) {
		if (argc > 2) {
			fprintf(stderr, "%s: version takes no operands\n", prog);
			return 2;
		}
		cli_help_version(stdout, prog, c->json);
		return 0;
	}
	return -1;
}
