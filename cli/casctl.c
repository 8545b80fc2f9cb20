/* casctl.c - the casctl command: the store itself (stats, verify, repair). */
#include "cli/commands.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static void usage(void)
{
	fprintf(stderr,
		"usage: casctl [--store DIR] [--json] [--quiet] [--workers N] COMMAND ...\n"
		"  stats               logical and stored bytes, dedup and compression ratios\n"
		"  verify [SNAPSHOT]   re-read and re-hash every chunk the snapshot(s) need; list\n"
		"                      each snapshot, damaged ones with what they lost\n"
		"  repair              rebuild the index from the packs and meta logs (the old one is kept)\n"
		"  gc --keep-...       expire snapshots by a retention policy per branch; reclaim their space\n");
}

int main(int argc, char **argv)
{
	struct cli c = { .prog = "casctl" };
	umask(077);
	argc = cli_parse_globals(&c, argc, argv);
	if (argc < 0)
		return 2;
	if (argc < 2 || !strcmp(argv[1], "help") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage();
		return argc < 2 ? 2 : 0;
	}
	if (!strcmp(argv[1], "stats"))
		return cmd_stats(&c, argc - 1, argv + 1);
	if (!strcmp(argv[1], "verify"))
		return cmd_verify(&c, argc - 1, argv + 1);
	if (!strcmp(argv[1], "repair"))
		return cmd_repair(&c, argc - 1, argv + 1);
	if (!strcmp(argv[1], "gc"))
		return cmd_gc(&c, argc - 1, argv + 1);
	fprintf(stderr, "casctl: unknown command '%s'\n", argv[1]);
	usage();
	return 2;
}
