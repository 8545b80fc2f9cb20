/*
 * cmd_gc.c - casctl gc: expire snapshots by a retention policy per branch
 * and reclaim the space only they used (cas/gc.h).
 */
#include "cas/gc.h"
#include "cli/commands.h"
#include "util/err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_count(const char *opt, const char *v, unsigned *out)
{
	uint64_t n;
	if (cli_parse_uint(v, 0, 1000000, &n) < 0) {
		fprintf(stderr, "casctl: gc: %s %s: not a count from 0 to 1000000\n", opt, v);
		return -1;
	}
	*out = (unsigned)n;
	return 0;
}

static int gc_parse(const struct cli *c, struct cas_gc_policy *pp, const char **tags, int argc, char **argv);
static int gc_run(struct cli *c, const struct cas_gc_policy *pp);

/* The ids of v that were what to gc (what: enum cas_gc_what, or -1 for all). */
static void print_ids(const char *key, uint8_t (*v)[32], const uint8_t *whats, size_t n, int what)
{
	printf(", \"%s\": [", key);
	bool first = true;
	for (size_t i = 0; i < n; i++) {
		if (what >= 0 && whats[i] != what)
			continue;
		char hex[65];
		cli_print_id(hex, v[i]);
		printf("%s\"%s\"", first ? "" : ", ", hex);
		first = false;
	}
	printf("]");
}

static const char *what_name(uint8_t w)
{
	switch (w) {
	case CAS_GC_JOB: return "  (job snapshot)";
	case CAS_GC_MEMBER: return "  (rank of an expired job snapshot)";
	case CAS_GC_PARTIAL: return "  (partial rank snapshot, older than --keep-partial)";
	default: return "";
	}
}

int cmd_gc(struct cli *c, int argc, char **argv)
{
	struct cas_gc_policy p = { 0 };
	/* --keep-tag's values point into argv: at most one per argument. */
	const char **tags = calloc((size_t)argc, sizeof(*tags));
	if (!tags)
		return cli_fail(c, crest_errf(-ENOMEM, "gc"));
	p.keep_tags = tags;
	const int rc0 = gc_parse(c, &p, tags, argc, argv);
	if (rc0) {
		free(tags);
		return rc0;
	}
	const int rc = gc_run(c, &p);
	free(tags);
	return rc;
}

static int gc_parse(const struct cli *c, struct cas_gc_policy *pp, const char **tags, int argc, char **argv)
{
	struct cas_gc_policy p = *pp;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--keep-tagged")) {
			p.keep_tagged = true;
			continue;
		}
		if (!strcmp(a, "--dry-run")) {
			p.dry_run = true;
			continue;
		}
		if (a[0] != '-')
			return cli_usage(c, "gc", "takes no operands: %s", a);
		if (i + 1 >= argc)
			return cli_usage(c, "gc", "%s needs a value", a);
		const char *v = argv[++i];
		if (!strcmp(a, "--keep-last")) {
			if (parse_count(a, v, &p.keep_last) < 0)
				return 2;
		} else if (!strcmp(a, "--keep-hourly")) {
			if (parse_count(a, v, &p.keep_hourly) < 0)
				return 2;
		} else if (!strcmp(a, "--keep-daily")) {
			if (parse_count(a, v, &p.keep_daily) < 0)
				return 2;
		} else if (!strcmp(a, "--keep-weekly")) {
			if (parse_count(a, v, &p.keep_weekly) < 0)
				return 2;
		} else if (!strcmp(a, "--keep-monthly")) {
			if (parse_count(a, v, &p.keep_monthly) < 0)
				return 2;
		} else if (!strcmp(a, "--keep-yearly")) {
			if (parse_count(a, v, &p.keep_yearly) < 0)
				return 2;
		} else if (!strcmp(a, "--keep-tag")) {
			if (!(cas_snapshot_name_kind(v) & CAS_NAME_TAG))
				return cli_usage(c, "gc", "--keep-tag %s: not a tag name", v);
			tags[p.nkeep_tags++] = v;
		} else if (!strcmp(a, "--keep-within")) {
			if (cli_parse_duration(v, &p.keep_within_ns) < 0)
				return cli_usage(c, "gc", "--keep-within %s: not a duration from 1ms to 366 days "
						 "(30m, 12h, 7d, 2w)", v);
		} else if (!strcmp(a, "--keep-partial")) {
			if (cli_parse_duration(v, &p.keep_partial_ns) < 0)
				return cli_usage(c, "gc", "--keep-partial %s: not a duration from 1ms to 366 days "
						 "(30m, 12h, 7d, 2w)", v);
		} else if (!strcmp(a, "--rewrite-below")) {
			char *end;
			p.rewrite_below = strtod(v, &end);
			if (*end || end == v || !(p.rewrite_below > 0 && p.rewrite_below <= 1)) {
				fprintf(stderr, "casctl: --rewrite-below %s: a fraction above 0, at most 1\n", v);
				return 2;
			}
		} else {
			return cli_usage(c, "gc", "unknown option %s", a);
		}
	}
	if (cas_gc_policy_check(&p) < 0) {
		fprintf(stderr, "casctl: %s\n", crest_errmsg());
		return 2;
	}
	*pp = p;
	return 0;
}

static int gc_run(struct cli *c, const struct cas_gc_policy *pp)
{
	const struct cas_gc_policy p = *pp;
	struct cas_store *store;
	/* A dry run reads: it opens the store as a reader does, so that not
	 * one file of it changes (a writer's open reconciles the index, and
	 * RocksDB writes its own files when opened for writing). */
	int rc = cli_store_open(c, p.dry_run ? CAS_READ : CAS_WRITE, &store);
	if (rc < 0)
		return cli_fail(c, rc);
	struct cas_gc_result r;
	struct progress prog;
	rc = cas_gc(store, &p, &r, c->quiet || c->json ? NULL : &prog);
	cas_close(store);
	if (rc < 0)
		return cli_fail(c, rc);
	if (c->json) {
		printf("{\"dry_run\": %s, \"snapshots\": %zu", p.dry_run ? "true" : "false", r.snapshots);
		print_ids("kept", r.kept, r.kept_what, r.nkept, -1);
		print_ids("expired", r.expired, r.expired_what, r.nexpired, -1);
		printf(", \"jobs\": {\"job_snapshots\": %zu, \"job_snapshots_kept\": %zu, \"members\": %zu, "
		       "\"members_kept\": %zu, \"partial\": %zu, \"partial_kept\": %zu",
		       r.jobs, r.jobs_kept, r.members, r.members_kept, r.partial, r.partial_kept);
		print_ids("expired_jobs", r.expired, r.expired_what, r.nexpired, CAS_GC_JOB);
		print_ids("expired_members", r.expired, r.expired_what, r.nexpired, CAS_GC_MEMBER);
		print_ids("expired_partial", r.expired, r.expired_what, r.nexpired, CAS_GC_PARTIAL);
		print_ids("kept_partial", r.kept, r.kept_what, r.nkept, CAS_GC_PARTIAL);
		printf("}");
		printf(", \"chunks\": %llu, \"dead_chunks\": %llu, \"dead_bytes\": %llu, \"pieces\": %llu, "
		       "\"dead_pieces\": %llu, \"packs\": %llu, \"packs_rewritten\": %llu, \"bytes_moved\": %llu, "
		       "\"bytes_before\": %llu, \"bytes_after\": %llu, \"packs_retired\": %llu, "
		       "\"meta_bytes_before\": %llu, \"meta_bytes_after\": %llu, \"meta_logs_removed\": %u}\n",
		       (unsigned long long)r.chunks, (unsigned long long)r.dead_chunks,
		       (unsigned long long)r.dead_bytes, (unsigned long long)r.pieces,
		       (unsigned long long)r.dead_pieces, (unsigned long long)r.packs,
		       (unsigned long long)r.packs_rewritten, (unsigned long long)r.bytes_moved,
		       (unsigned long long)r.bytes_before, (unsigned long long)r.bytes_after,
		       (unsigned long long)r.packs_retired, (unsigned long long)r.meta_before,
		       (unsigned long long)r.meta_after, (unsigned)r.meta_logs_removed);
	} else if (!c->quiet) {
		char b1[32], b2[32], b3[32], b4[32];
		const char *w = p.dry_run ? "would " : "";
		printf("%skeep %zu of %zu snapshots, %sexpire %zu\n", p.dry_run ? "would " : "", r.nkept, r.snapshots, w,
		       r.nexpired);
		for (size_t i = 0; i < r.nexpired && i < 20; i++) {
			char hex[65];
			cli_print_id(hex, r.expired[i]);
			printf("  %sexpire%s %.12s%s\n", w, p.dry_run ? "" : "d", hex, what_name(r.expired_what[i]));
		}
		if (r.nexpired > 20)
			printf("  ... and %zu more (--json lists all)\n", r.nexpired - 20);
		if (r.jobs || r.partial)
			printf("jobs: %skeep %zu of %zu job snapshots and %zu of %zu rank snapshots they name; "
			       "%skeep %zu of %zu partial rank snapshots (in no job snapshot; younger than "
			       "--keep-partial)\n", w, r.jobs_kept, r.jobs, r.members_kept, r.members, w,
			       r.partial_kept, r.partial);
		printf("dead: %llu of %llu chunks (%s), %llu of %llu pieces\n", (unsigned long long)r.dead_chunks,
		       (unsigned long long)r.chunks, fmt_bytes(r.dead_bytes, b1, sizeof(b1)),
		       (unsigned long long)r.dead_pieces, (unsigned long long)r.pieces);
		printf("packs: %s%llu of %llu rewritten (%s moved); on disk %s -> %s%s\n", w,
		       (unsigned long long)r.packs_rewritten, (unsigned long long)r.packs,
		       fmt_bytes(r.bytes_moved, b2, sizeof(b2)), fmt_bytes(r.bytes_before, b3, sizeof(b3)),
		       fmt_bytes(r.bytes_after, b4, sizeof(b4)), p.dry_run ? " (estimated)" : "");
		if (r.meta_logs_removed)
			printf("meta logs: what the index names copied into one, %u old ones removed; on disk %s -> %s\n",
			       (unsigned)r.meta_logs_removed, fmt_bytes(r.meta_before, b1, sizeof(b1)),
			       fmt_bytes(r.meta_after, b2, sizeof(b2)));
		if (r.packs_retired)
			printf("%llu rewritten packs wait for the store's readers to finish: the next gc removes them\n",
			       (unsigned long long)r.packs_retired);
	}
	cas_gc_result_free(&r);
	return 0;
}
