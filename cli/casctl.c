/* casctl.c - the casctl command: the store itself (stats, verify, repair). */
#include "cli/commands.h"
#include "cli/help.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

int main(int argc, char **argv)
{
	struct cli c = { .prog = "casctl" };
	umask(077);
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
	if (!strcmp(argv[1], "stats"))
		return cmd_stats(&c, argc - 1, argv + 1);
	if (!strcmp(argv[1], "verify"))
		return cmd_verify(&c, argc - 1, argv + 1);
	if (!strcmp(argv[1], "repair"))
		return cmd_repair(&c, argc - 1, argv + 1);
	if (!strcmp(argv[1], "gc"))
		return cmd_gc(&c, argc - 1, argv + 1);
	/* In help.c's table, not here: a bug, which tests/cli catches. */
	fprintf(stderr, "casctl: command '%s' is listed but not built in\n", argv[1]);
	return 2;
}
