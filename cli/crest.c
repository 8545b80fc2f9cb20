/* crest.c - the crest command: snapshots in and out of the store. */
#include "capture/transparent.h"
#include "cli/commands.h"
#include "cli/help.h"
#include "os/pidns.h"
#include "restore/guard.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#ifdef __SANITIZE_ADDRESS__
/* Set when this process is criu's action script (below). LeakSanitizer's
 * check at exit stops the world through ptrace; run by criu among the tasks
 * it holds (a clone's post-restore step, which binds its --workdir copy),
 * it failed, and its exit status failed the restore. Only the sanitizer
 * build has the check, and only the hook goes without it. */
static int in_criu_hook;
int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void)
{
	return in_criu_hook;
}
#endif

int main(int argc, char **argv)
{
	/* criu runs crest itself inside its freeze, to copy the job's files. */
	if (argc >= 2 && !strcmp(argv[1], "__criu-hook")) {
#ifdef __SANITIZE_ADDRESS__
		in_criu_hook = 1;
#endif
		return tp_hook_main(argc - 1, argv + 1);
	}
	/* Gives a job back if crest checkpoint dies holding it (capture/guard.h). */
	if (argc >= 2 && !strcmp(argv[1], "__capture-guard"))
		return tp_guard_main(argc - 1, argv + 1);
	/* Gives the job's files back if crest restore dies holding them (restore/guard.h). */
	if (argc >= 2 && !strcmp(argv[1], "__restore-guard"))
		return rp_guard_main(argc - 1, argv + 1);
	/* crest run's init, pid 1 of the job's namespaces (os/pidns.h). */
	if (argc >= 3 && !strcmp(argv[1], "__pidns-init"))
		return pidns_init_main(argv + 2);
	struct cli c = { .prog = "crest" };
	c.umask = umask(077);  /* snapshots hold process memory: nothing for others */
	argc = cli_parse_globals(&c, argc, argv);
	if (argc < 0)
		return 2;
	/* help, version, unknown commands and options: from the table (help.c) */
	int hrc = cli_help_dispatch(&c, argc, argv);
	if (hrc >= 0)
		return hrc;
	/* Repeated options, and ones that need or exclude another (common.c). */
	if (cli_check_opts(&c, argc, argv))
		return CLI_EXIT_USAGE;
	static const struct {
		const char *name;
		int (*fn)(struct cli *, int, char **);
	} cmds[] = {
		{ "init", cmd_init }, { "put", cmd_put }, { "get", cmd_get }, { "ls", cmd_ls },
		{ "show", cmd_show }, { "tag", cmd_tag }, { "diff", cmd_diff },
		{ "checkpoint", cmd_checkpoint }, { "restore", cmd_restore }, { "demo", cmd_demo },
		{ "log", cmd_log }, { "branch", cmd_branch }, { "run", cmd_run }, { "clone", cmd_clone },
		{ "bench", cmd_bench }, { "job", cmd_job }, { "push", cmd_push }, { "pull", cmd_pull },
	};
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (!strcmp(argv[1], cmds[i].name))
			return cmds[i].fn(&c, argc - 1, argv + 1);
	/* In help.c's table, not here: a bug, which tests/cli catches. */
	fprintf(stderr, "crest: command '%s' is listed but not built in\n", argv[1]);
	return 2;
}
