/* cmd_init.c - crest init: the one way a store comes to be (with --init,
 * which does the same before any command). */
#include "cli/commands.h"
#include "util/json.h"

#include <stdio.h>

int cmd_init(struct cli *c, int argc, char **argv)
{
	if (argc > 2)
		return cli_usage(c, "init", "wants at most one DIR, no more: %s", argv[2]);
	const char *dir = argc == 2 ? argv[1] : c->store;
	int rc = cas_init(dir);
	if (rc < 0)
		return cli_fail(c, rc);
	if (c->json) {
		printf("{\"store\":");
		json_str(stdout, dir);
		printf(",\"format\":%d}\n", CAS_FORMAT_VERSION);
	} else {
		printf("made a new crest store at %s\n", dir);
	}
	return 0;
}
