/*
 * job_ranks.c - one rank of a many-process job checkpointing through
 * libcrest's job calls (issue 34), and the check of what it left; driven
 * by job_ranks.sh.
 *
 *   job_ranks rank STORE NAME ATTEMPT RANK WORLD STEPS SEED [DIE_AT]
 *   job_ranks restore STORE NAME RANK WORLD STEP SEED [SNAPSHOT]
 *
 * Each rank registers two host regions: "model", the same bytes in every
 * rank (a data-parallel replica: f(SEED, step)), and "shard", its own
 * (g(SEED, rank, step)). For each step 1..STEPS it fills both, checkpoints
 * with crest_job_checkpoint and waits with crest_job_wait, printing
 * "step S committed JOBID" when its arrival completed the set. With DIE_AT
 * it kills itself (SIGKILL) at that step, right after crest_job_checkpoint
 * returned: its ingest is in flight, it never arrives.
 *
 * restore: a fresh process of rank RANK restores its part of a job
 * snapshot (SNAPSHOT, which crest_restore must refuse: no one process's;
 * or the newest of NAME) and checks both regions
 * against step STEP's bytes; it prints "restored STEP" or the error line
 * (exit 3 when the call failed, 1 when the bytes differ).
 */
#include "crest.h"
#include "tests/check.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MODEL (1u << 20)
#define SHARD ((256u << 10) + 4093)   /* an odd size: the last chunk is short */

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t st = seed ? seed : 1;
	for (size_t i = 0; i < n; i += 8) {
		const uint64_t v = check_rnd(&st);
		memcpy(p + i, &v, n - i < 8 ? n - i : 8);
	}
}

static uint64_t model_seed(uint64_t seed, uint64_t step)
{
	return seed * 1000003u + step;
}

static uint64_t shard_seed(uint64_t seed, uint32_t rank, uint64_t step)
{
	return (seed * 7919u + rank) * 1000033u + step + 1;
}

static crest_t *open_rank(const char *dir, uint8_t **model, uint8_t **shard)
{
	struct crest_options o;
	crest_options_init(&o);
	o.staging_bytes = 16u << 20;
	o.workers = 2;
	o.flags = CREST_OPEN_NO_GPU;
	crest_t *c;
	OK(crest_open(dir, &o, &c));
	*model = malloc(MODEL);
	*shard = malloc(SHARD);
	if (!*model || !*shard) {
		fprintf(stderr, "out of memory\n");
		exit(1);
	}
	crest_region_t r;
	OK(crest_register(c, "model", *model, MODEL, CREST_MEM_HOST, &r));
	OK(crest_register(c, "shard", *shard, SHARD, CREST_MEM_HOST, &r));
	return c;
}

int main(int argc, char **argv)
{
	if (argc >= 9 && !strcmp(argv[1], "rank")) {
		struct crest_job j = { .name = argv[3], .attempt = argv[4] };
		j.rank = (uint32_t)atoi(argv[5]);
		j.world = (uint32_t)atoi(argv[6]);
		const uint64_t steps = strtoull(argv[7], NULL, 10), seed = strtoull(argv[8], NULL, 10);
		const uint64_t die = argc > 9 ? strtoull(argv[9], NULL, 10) : 0;
		char gpu[32];
		snprintf(gpu, sizeof(gpu), "GPU-test-%u", j.rank);
		j.gpu = gpu;
		uint8_t *model, *shard;
		crest_t *c = open_rank(argv[2], &model, &shard);
		for (uint64_t s = 1; s <= steps; s++) {
			fill(model, MODEL, model_seed(seed, s));
			fill(shard, SHARD, shard_seed(seed, j.rank, s));
			crest_ckpt_t h;
			OK(crest_job_checkpoint(c, &j, s, NULL, &h));
			if (s == die) {
				printf("rank %u: killing itself at step %llu\n", j.rank, (unsigned long long)s);
				fflush(stdout);
				raise(SIGKILL);
			}
			struct crest_job_result r;
			OK(crest_job_wait(c, &j, s, h, &r));
			if (r.committed)
				printf("step %llu committed %s\n", (unsigned long long)s, r.job_snapshot);
			fflush(stdout);
		}
		OK(crest_close(c));
		free(model);
		free(shard);
		return 0;
	}
	if (argc >= 8 && !strcmp(argv[1], "restore")) {
		struct crest_job j = { .name = argv[3], .attempt = "restore" };
		j.rank = (uint32_t)atoi(argv[4]);
		j.world = (uint32_t)atoi(argv[5]);
		const uint64_t step = strtoull(argv[6], NULL, 10), seed = strtoull(argv[7], NULL, 10);
		uint8_t *model, *shard;
		crest_t *c = open_rank(argv[2], &model, &shard);
		memset(model, 0xa5, MODEL);
		memset(shard, 0xa5, SHARD);
		struct crest_restore_result r;
		/* A job snapshot is no one process's: crest_restore refuses it. */
		if (argc > 8)
			EXPECT_ERR(crest_restore(c, argv[8], &r), -EINVAL, "is a job snapshot");
		const int rc = crest_job_restore(c, &j, argc > 8 ? argv[8] : NULL, &r);
		if (rc < 0) {
			printf("error %d: %s\n", rc, crest_errmsg());
			crest_close(c);
			free(model);
			free(shard);
			return 3;
		}
		uint8_t *want = malloc(MODEL);
		fill(want, MODEL, model_seed(seed, step));
		CHECK(!memcmp(model, want, MODEL), "rank %u: model differs from step %llu's at byte %zu", j.rank,
		      (unsigned long long)step, first_diff(model, want, MODEL));
		fill(want, SHARD, shard_seed(seed, j.rank, step));
		CHECK(!memcmp(shard, want, SHARD), "rank %u: shard differs from step %llu's at byte %zu", j.rank,
		      (unsigned long long)step, first_diff(shard, want, SHARD));
		free(want);
		OK(crest_close(c));
		free(model);
		free(shard);
		if (failures)
			return 1;
		printf("restored %llu from %.12s\n", (unsigned long long)step, r.snapshot);
		return 0;
	}
	fprintf(stderr, "usage: job_ranks rank STORE NAME ATTEMPT RANK WORLD STEPS SEED [DIE_AT]\n"
			"       job_ranks restore STORE NAME RANK WORLD STEP SEED [SNAPSHOT]\n");
	return 2;
}
