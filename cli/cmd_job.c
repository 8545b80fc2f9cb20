/*
 * cmd_job.c - crest job commit and crest job ls: job snapshots, the N rank
 * snapshots of one step of a job named by one commit (cas/jobsnap.h).
 * libcrest commits through the API; commit here is for scripts and tests.
 */
#include "cas/jobsnap.h"
#include "cli/commands.h"
#include "util/err.h"
#include "util/json.h"
#include "util/sha256.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* crest job commit NAME --step S [--gpu R=UUID]... [--tag T] SNAPSHOT... */
static int job_commit(struct cli *c, int argc, char **argv)
{
	const char *name = NULL, *tag = NULL, *step_s = NULL;
	uint64_t step = 0;
	/* Operands and --gpu values point into argv: at most one per argument. */
	const char **snaps = calloc((size_t)argc, sizeof(*snaps));
	const char **gpus = calloc((size_t)argc, sizeof(*gpus));
	uint32_t *gpu_rank = calloc((size_t)argc, sizeof(*gpu_rank));
	size_t nsnaps = 0, ngpus = 0;
	int rc = 0;
	if (!snaps || !gpus || !gpu_rank) {
		rc = cli_fail(c, crest_errf(-ENOMEM, "job commit"));
		goto out;
	}
	for (int i = 1; i < argc && rc == 0; i++) {
		const char *a = argv[i];
		if (a[0] != '-' || !a[1]) {
			if (!name)
				name = a;
			else
				snaps[nsnaps++] = a;
			continue;
		}
		if (i + 1 >= argc) {
			rc = cli_usage(c, "job", "%s needs a value", a);
			break;
		}
		const char *v = argv[++i];
		if (!strcmp(a, "--step")) {
			step_s = v;
			if (cli_parse_uint(v, 0, UINT64_MAX, &step) < 0)
				rc = cli_usage(c, "job", "--step %s: not a step number", v);
		} else if (!strcmp(a, "--tag")) {
			tag = v;
			if (cas_tag_check(tag) < 0)
				rc = cli_usage_fail(c, -EINVAL);
		} else if (!strcmp(a, "--gpu")) {
			const char *eq = strchr(v, '=');
			uint64_t r;
			char num[16];
			if (!eq || eq == v || (size_t)(eq - v) >= sizeof(num)) {
				rc = cli_usage(c, "job", "--gpu %s: want RANK=UUID", v);
				break;
			}
			snprintf(num, sizeof(num), "%.*s", (int)(eq - v), v);
			if (cli_parse_uint(num, 0, CAS_JOBSNAP_WORLD_MAX - 1, &r) < 0) {
				rc = cli_usage(c, "job", "--gpu %s: %s is not a rank", v, num);
				break;
			}
			if (cas_jobsnap_gpu_check(eq + 1) < 0) {
				rc = cli_usage_fail(c, -EINVAL);
				break;
			}
			for (size_t k = 0; k < ngpus; k++)
				if (gpu_rank[k] == r)
					rc = cli_usage(c, "job", "--gpu: rank %s given twice", num);
			gpu_rank[ngpus] = (uint32_t)r;
			gpus[ngpus++] = eq + 1;
		} else {
			rc = cli_usage(c, "job", "commit: unknown option %s", a);
		}
	}
	if (rc)
		goto out;
	if (!name || !nsnaps) {
		rc = cli_usage(c, "job", "commit wants NAME and one SNAPSHOT per rank, in rank order");
		goto out;
	}
	if (!step_s) {
		rc = cli_usage(c, "job", "commit needs --step S");
		goto out;
	}
	if (cas_jobsnap_name_check(name) < 0) {
		rc = cli_usage_fail(c, -EINVAL);
		goto out;
	}
	if (nsnaps > CAS_JOBSNAP_WORLD_MAX) {
		rc = cli_usage(c, "job", "commit: at most %d ranks", CAS_JOBSNAP_WORLD_MAX);
		goto out;
	}
	for (size_t k = 0; k < ngpus; k++)
		if (gpu_rank[k] >= nsnaps) {
			rc = cli_usage(c, "job", "--gpu %u=...: the job has ranks 0 to %zu", gpu_rank[k], nsnaps - 1);
			goto out;
		}
	const char **by_rank = calloc(nsnaps, sizeof(*by_rank));
	uint8_t (*ids)[32] = calloc(nsnaps, 32);
	struct cas_store *store = NULL;
	if (!by_rank || !ids)
		rc = crest_errf(-ENOMEM, "job commit");
	for (size_t k = 0; rc == 0 && k < ngpus; k++)
		by_rank[gpu_rank[k]] = gpus[k];
	if (rc == 0)
		rc = cli_store_open(c, CAS_WRITE, &store);
	/* Names resolved under the writer lock too. A full id is taken as it
	 * is: whether it is in the store is the commit's check (a script
	 * gathers the ranks' ids as libcrest does). */
	for (size_t r = 0; rc == 0 && r < nsnaps; r++)
		if (strlen(snaps[r]) != 64 || hex_decode(snaps[r], ids[r], 32) != 32)
			rc = cas_snapshot_resolve(store, snaps[r], ids[r]);
	uint8_t id[32];
	if (rc == 0)
		rc = cas_jobsnap_commit(store, name, step, (uint32_t)nsnaps, (const uint8_t (*)[32])ids,
					(const char *const *)by_rank, tag, id);
	if (store)
		cas_close(store);
	free(by_rank);
	free(ids);
	if (rc < 0) {
		rc = cli_fail(c, rc);
		goto out;
	}
	char hex[65];
	cli_print_id(hex, id);
	if (c->json) {
		printf("{\"snapshot\": \"%s\", \"job\": ", hex);
		json_str(stdout, name);
		printf(", \"step\": %llu, \"world\": %zu}\n", (unsigned long long)step, nsnaps);
	} else {
		printf("%s\n", hex);
	}
out:
	free(snaps);
	free(gpus);
	free(gpu_rank);
	return rc;
}

/* crest job ls [NAME]: the job snapshots, newest first. */
static int job_ls(struct cli *c, int argc, char **argv)
{
	const char *name = NULL;
	for (int i = 1; i < argc; i++) {
		if (argv[i][0] == '-' && argv[i][1])
			return cli_usage(c, "job", "ls: unknown option %s", argv[i]);
		if (name)
			return cli_usage(c, "job", "ls wants at most one NAME: %s", argv[i]);
		name = argv[i];
	}
	if (name && cas_jobsnap_name_check(name) < 0)
		return cli_usage_fail(c, -EINVAL);
	struct cas_store *store;
	int rc = cli_store_open(c, CAS_READ, &store);
	if (rc < 0)
		return cli_fail(c, rc);
	struct cas_jobsnap_entry *v = NULL;
	size_t n = 0;
	char ***tags = NULL;
	size_t *ntags = NULL;
	rc = cas_jobsnap_list(store, name, &v, &n);
	if (rc == 0 && (!(tags = calloc(n ? n : 1, sizeof(*tags))) || !(ntags = calloc(n ? n : 1, sizeof(*ntags)))))
		rc = crest_errf(-ENOMEM, "job ls");
	for (size_t i = 0; rc == 0 && i < n; i++)
		rc = cas_snapshot_tags(store, v[i].id, &tags[i], &ntags[i]);
	cas_close(store);
	if (rc == 0) {
		if (c->json)
			printf("[");
		else
			printf("%-12s  %-19s  %-24s  %10s  %6s  %s\n", "SNAPSHOT", "TIME", "JOB", "STEP", "WORLD", "TAGS");
		for (size_t i = 0; i < n; i++) {
			const struct cas_jobsnap *j = v[i].j;
			char hex[65], tbuf[32];
			cli_print_id(hex, v[i].id);
			if (c->json) {
				printf("%s\n {\"snapshot\": \"%s\", \"name\": ", i ? "," : "", hex);
				json_str(stdout, j->name);
				printf(", \"step\": %llu, \"world\": %u, \"time_ns\": %llu, \"tags\": [",
				       (unsigned long long)j->step, j->world, (unsigned long long)j->time_ns);
				for (size_t t = 0; t < ntags[i]; t++) {
					printf("%s", t ? ", " : "");
					json_str(stdout, tags[i][t]);
				}
				printf("], \"members\": [");
				for (uint32_t r = 0; r < j->world; r++) {
					char mh[65];
					cli_print_id(mh, j->members[r].id);
					printf("%s\"%s\"", r ? ", " : "", mh);
				}
				printf("]}");
			} else {
				cli_fmt_time(j->time_ns, tbuf, sizeof(tbuf));
				printf("%.12s  %-19s  %-24s  %10llu  %6u  ", hex, tbuf, j->name,
				       (unsigned long long)j->step, j->world);
				for (size_t t = 0; t < ntags[i]; t++)
					printf("%s%s", t ? "," : "", tags[i][t]);
				printf("\n");
			}
		}
		if (c->json)
			printf("%s]\n", n ? "\n" : "");
	}
	for (size_t i = 0; tags && i < n; i++)
		cas_snapshot_tags_free(tags[i], ntags ? ntags[i] : 0);
	free(tags);
	free(ntags);
	cas_jobsnap_list_free(v, n);
	return rc < 0 ? cli_fail(c, rc) : 0;
}

int cmd_job(struct cli *c, int argc, char **argv)
{
	if (argc < 2)
		return cli_usage(c, "job", "wants commit or ls");
	if (!strcmp(argv[1], "commit"))
		return job_commit(c, argc - 1, argv + 1);
	if (!strcmp(argv[1], "ls"))
		return job_ls(c, argc - 1, argv + 1);
	return cli_usage(c, "job", "wants commit or ls, not %s", argv[1]);
}
