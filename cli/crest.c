/* crest.c - the crest command: snapshots in and out of the store. */
#include "capture/transparent.h"
#include "cli/commands.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static void usage(void)
{
	fprintf(stderr,
		"usage: crest [--store DIR] [--json] [--quiet] [--workers N] COMMAND ...\n"
		"  put [--tag T] [--branch B] [--chunker fixed|cdc] [--chunk-size N] PATH...   snapshot files and trees\n"
		"  get SNAPSHOT DEST                 restore a snapshot's files under DEST\n"
		"  ls                                list snapshots\n"
		"  show SNAPSHOT                     a snapshot's metadata and streams\n"
		"  tag SNAPSHOT TAG                  name a snapshot\n"
		"  diff SNAPSHOT_A SNAPSHOT_B        what changed from A to B, stream by stream\n"
		"  checkpoint --pid PID [--tag T] [--branch B] [--every DURATION] [--kill]   snapshot a running process\n"
		"  restore SNAPSHOT [--keep-files] [--gpu N|--gpu-map OLD=NEW]  bring a process back\n"
		"  log [--graph] [BRANCH]            the history: every snapshot, or a branch's head and ancestors\n"
		"  branch [NAME [SNAPSHOT]]          list branches, or start NAME at SNAPSHOT\n"
		"  run [--every DURATION] [--branch B] -- COMMAND...   run a job in a pid namespace of its own, checkpointed\n"
		"  clone SNAPSHOT --branch NEW [--count N] [--workdir PATTERN]   run copies of a `run` job beside it\n"
		"  demo                              checkpoint, kill and restore a sample job\n"
		"  bench restore SNAPSHOT [--to null|files|host|gpu] [--cold] [--plot FILE.png]   how fast it comes back\n"
		"SNAPSHOT is a full id, a unique id prefix (4+ hex digits) or a tag.\n"
		"The store is --store DIR, else $CREST_STORE, else ./crest-store.\n");
}

int main(int argc, char **argv)
{
	/* criu runs crest itself inside its freeze, to copy the job's files. */
	if (argc >= 2 && !strcmp(argv[1], "__criu-hook"))
		return tp_hook_main(argc - 1, argv + 1);
	struct cli c = { .prog = "crest" };
	umask(077);  /* snapshots hold process memory: nothing for others */
	argc = cli_parse_globals(&c, argc, argv);
	if (argc < 0)
		return 2;
	if (argc < 2 || !strcmp(argv[1], "help") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage();
		return argc < 2 ? 2 : 0;
	}
	static const struct {
		const char *name;
		int (*fn)(struct cli *, int, char **);
	} cmds[] = {
		{ "put", cmd_put }, { "get", cmd_get }, { "ls", cmd_ls },
		{ "show", cmd_show }, { "tag", cmd_tag }, { "diff", cmd_diff },
		{ "checkpoint", cmd_checkpoint }, { "restore", cmd_restore }, { "demo", cmd_demo },
		{ "log", cmd_log }, { "branch", cmd_branch }, { "run", cmd_run }, { "clone", cmd_clone },
		{ "bench", cmd_bench },
	};
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (!strcmp(argv[1], cmds[i].name))
			return cmds[i].fn(&c, argc - 1, argv + 1);
	fprintf(stderr, "crest: unknown command '%s'\n", argv[1]);
	usage();
	return 2;
}
