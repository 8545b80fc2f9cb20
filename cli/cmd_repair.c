/* cmd_repair.c - casctl repair: a new index built from the packs and meta
 * logs, for a store whose index is damaged or lost. The old index is kept
 * aside; nothing is deleted. What cannot be recovered is named. */
#include "cli/commands.h"
#include "util/err.h"

#include <stdio.h>

int cmd_repair(struct cli *c, int argc, char **argv)
{
	if (argc != 1)
		return cli_usage(c, "repair", "takes no operands: %s", argv[1]);
	struct cas_store *store;
	int rc = cli_store_open(c, CAS_REPAIR, &store);
	if (rc < 0)
		return cli_fail(c, rc);
	struct cas_recovery r;
	cas_recovery_get(store, &r);
	cas_close(store);
	if (c->json)
		printf("{\"chunk_records\": %llu, \"snapshots\": %u, \"damaged_snapshots\": %u, "
		       "\"lost_snapshots\": %u, \"failed_commits\": %u}\n", (unsigned long long)r.records,
		       r.recovered, r.damaged, r.dropped, r.revoked);
	else if (!c->quiet)
		printf("repaired %s: %llu chunk records indexed, %u snapshots recovered, %u kept damaged and %u lost "
		       "(named above), %u failed commits left out\n", c->store, (unsigned long long)r.records,
		       r.recovered, r.damaged, r.dropped, r.revoked);
	/* Not whole: a script must not take the store for repaired whole. */
	return r.dropped || r.damaged ? 1 : 0;
}
