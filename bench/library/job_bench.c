/*
 * job_bench.c - a job of WORLD ranks checkpointing through libcrest's job
 * calls (issue 34), on host memory (CREST_OPEN_NO_GPU), timed per rank and
 * per step. Driven by job_bench.sh, which runs world 1, 2 and 4 on fresh
 * stores and prints the ratios.
 *
 *   job_bench STORE OUTDIR WORLD STEPS MODEL_MIB SHARD_MIB PCT
 *
 * Forks WORLD rank processes (each its own crest handle on STORE). Each
 * registers two host regions, data-parallel style: "model" (MODEL_MIB),
 * the same bytes in every rank (a replica), and "shard" (SHARD_MIB), its
 * own. Before each step after the first, every rank rewrites PCT percent
 * of the 4 KiB chunks of both regions (the model's the same chunks with
 * the same bytes in every rank, the shard's its own), then all ranks meet
 * at a barrier (the step's all-reduce) and call crest_job_checkpoint at
 * once, then crest_job_wait. The bytes neither compress nor dedup but
 * where the replica makes them equal (splitmix64 of the word's index,
 * version and region).
 *
 * Each rank writes OUTDIR/rank-R.txt, one line a step:
 *   STEP RANK T0 T1 T2 COMMITTED BYTES NEW_BYTES STALL_NS INGEST_NS
 * T0: before crest_job_checkpoint, T1: after it (its return; crest_job_wait
 * starts), T2: crest_job_wait returned (CLOCK_MONOTONIC ns: one boot).
 * The parent then prints per step the stall per rank (T1-T0), the time
 * from the step's first call (min T0) to its job snapshot's commit (T2 of
 * the rank that got committed=1), the crest_job_wait per rank (T2-T1),
 * and RESULT lines: step 1 (the whole state new) apart from steps 2..S
 * (PCT changed), each as the median and max over ranks and steps.
 */
#include "crest.h"
#define BENCH_NAME "job_bench"
#include "fail.h"
#include "util/progress.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)
#define CHUNK 4096u
#define WORDS (CHUNK / 8)
#define VERSION_OFF (1ull << 40)

static uint64_t mix(uint64_t i)
{
	uint64_t z = i + 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Chunk c of a region (salt: which region, which rank) at version v. */
static void chunk_fill(uint64_t *p, size_t c, uint64_t salt, uint64_t v)
{
	const uint64_t base = salt + v * VERSION_OFF + (uint64_t)c * WORDS;
	for (size_t i = 0; i < WORDS; i++)
		p[c * WORDS + i] = mix(base + i);
}

/* Whether chunk c changes at step s (PCT in hundredths of a percent):
 * key picks the same chunks in every rank (the model) or a rank's own. */
static int chunk_changes(size_t c, uint64_t key, uint64_t s, unsigned pct100)
{
	return mix(((uint64_t)c << 20) ^ (key * 0x100000001b3ull) ^ (s * 0xff51afd7ed558ccdull)) % 10000u < pct100;
}

static void region_step(uint64_t *p, size_t bytes, uint64_t salt, uint64_t key, uint64_t s, unsigned pct100)
{
	const size_t n = bytes / CHUNK;
	for (size_t c = 0; c < n; c++)
		if (s == 0 || chunk_changes(c, key, s, pct100))
			chunk_fill(p, c, salt, s);
}

struct rec {
	uint64_t step, t0, t1, t2, bytes, new_bytes, stall_ns, ingest_ns;
	unsigned rank;
	int committed;
};

static int rank_main(const char *store, const char *outdir, unsigned rank, unsigned world, unsigned steps,
		     size_t model_b, size_t shard_b, unsigned pct100, pthread_barrier_t *bar)
{
	struct crest_options o;
	crest_options_init(&o);
	o.flags = CREST_OPEN_NO_GPU;
	uint64_t *model = aligned_alloc(CHUNK, model_b), *shard = aligned_alloc(CHUNK, shard_b);
	if (!model || !shard)
		die("allocating the regions", -ENOMEM);
	/* Salts: the model is the same in every rank, each shard its own. */
	const uint64_t model_salt = 0, shard_salt = (uint64_t)(rank + 1) << 52;
	region_step(model, model_b, model_salt, 0, 0, 0);
	region_step(shard, shard_b, shard_salt, rank + 1, 0, 0);
	crest_t *c;
	OK(crest_open(store, &o, &c));
	crest_region_t r;
	OK(crest_register(c, "model", model, model_b, CREST_MEM_HOST, &r));
	OK(crest_register(c, "shard", shard, shard_b, CREST_MEM_HOST, &r));
	char path[4096];
	snprintf(path, sizeof(path), "%s/rank-%u.txt", outdir, rank);
	FILE *f = fopen(path, "w");
	if (!f)
		die("opening the rank's output", -errno);
	char gpu[32];
	snprintf(gpu, sizeof(gpu), "GPU-bench-%u", rank);
	const struct crest_job j = { .name = "bench", .attempt = "a1", .rank = rank, .world = world, .gpu = gpu };
	pthread_barrier_wait(bar);   /* every rank has opened the store */
	for (unsigned s = 1; s <= steps; s++) {
		if (s > 1) {
			region_step(model, model_b, model_salt, 0, s, pct100);
			region_step(shard, shard_b, shard_salt, rank + 1, s, pct100);
		}
		pthread_barrier_wait(bar);   /* the step's all-reduce */
		struct rec x = { .step = s, .rank = rank };
		crest_ckpt_t h;
		x.t0 = time_now_ns();
		OK(crest_job_checkpoint(c, &j, s, NULL, &h));
		x.t1 = time_now_ns();
		struct crest_job_result res;
		OK(crest_job_wait(c, &j, s, h, &res));
		x.t2 = time_now_ns();
		x.committed = res.committed;
		x.bytes = res.rank.bytes;
		x.new_bytes = res.rank.new_bytes;
		x.stall_ns = res.rank.stall_ns;
		x.ingest_ns = res.rank.ingest_ns;
		fprintf(f, "%llu %u %llu %llu %llu %d %llu %llu %llu %llu\n", (unsigned long long)x.step, x.rank,
			(unsigned long long)x.t0, (unsigned long long)x.t1, (unsigned long long)x.t2, x.committed,
			(unsigned long long)x.bytes, (unsigned long long)x.new_bytes, (unsigned long long)x.stall_ns,
			(unsigned long long)x.ingest_ns);
		fflush(f);
	}
	fclose(f);
	OK(crest_close(c));
	free(model);
	free(shard);
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Median (the lower middle one of an even count: a value that was
 * measured) and max of n values, in seconds. */
static void med_max(uint64_t *v, size_t n, double *med, double *max)
{
	qsort(v, n, sizeof(*v), cmp_u64);
	*med = n ? v[(n - 1) / 2] / 1e9 : 0;
	*max = n ? v[n - 1] / 1e9 : 0;
}

int main(int argc, char **argv)
{
	if (argc != 8) {
		fprintf(stderr, "usage: job_bench STORE OUTDIR WORLD STEPS MODEL_MIB SHARD_MIB PCT\n");
		return 2;
	}
	const char *store = argv[1], *outdir = argv[2];
	const unsigned world = (unsigned)atoi(argv[3]), steps = (unsigned)atoi(argv[4]);
	const size_t model_b = strtoull(argv[5], NULL, 10) * MiB, shard_b = strtoull(argv[6], NULL, 10) * MiB;
	const unsigned pct100 = (unsigned)(strtod(argv[7], NULL) * 100 + 0.5);
	if (!world || world > 64 || !steps || !model_b || !shard_b) {
		fprintf(stderr, "job_bench: WORLD in [1, 64], STEPS, MODEL_MIB and SHARD_MIB above 0\n");
		return 2;
	}
	pthread_barrier_t *bar = mmap(NULL, sizeof(*bar), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pthread_barrierattr_t ba;
	if (bar == MAP_FAILED || pthread_barrierattr_init(&ba) ||
	    pthread_barrierattr_setpshared(&ba, PTHREAD_PROCESS_SHARED) || pthread_barrier_init(bar, &ba, world))
		die("a barrier shared by the ranks", -errno);
	pid_t pids[64];
	for (unsigned r = 0; r < world; r++) {
		pids[r] = fork();
		if (pids[r] < 0)
			die("fork", -errno);
		if (pids[r] == 0) {
			/* The rank's stderr (CREST_TRACE's lines among it) apart. */
			char path[4096];
			snprintf(path, sizeof(path), "%s/rank-%u.err", outdir, r);
			if (!freopen(path, "w", stderr))
				_exit(1);
			_exit(rank_main(store, outdir, r, world, steps, model_b, shard_b, pct100, bar));
		}
	}
	int bad = 0;
	for (unsigned r = 0; r < world; r++) {
		int st;
		if (waitpid(pids[r], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) {
			fprintf(stderr, "job_bench: rank %u failed\n", r);
			bad = 1;
		}
	}
	if (bad)
		return 1;
	/* Gather: rec[step-1][rank]. */
	struct rec *rec = calloc((size_t)steps * world, sizeof(*rec));
	if (!rec)
		die("gathering", -ENOMEM);
	for (unsigned r = 0; r < world; r++) {
		char path[4096];
		snprintf(path, sizeof(path), "%s/rank-%u.txt", outdir, r);
		FILE *f = fopen(path, "r");
		if (!f)
			die("reading a rank's output", -errno);
		struct rec x;
		unsigned long long v[9];
		while (fscanf(f, "%llu %u %llu %llu %llu %d %llu %llu %llu %llu", &v[0], &x.rank, &v[1], &v[2], &v[3],
			      &x.committed, &v[4], &v[5], &v[6], &v[7]) == 10) {
			x.step = v[0], x.t0 = v[1], x.t1 = v[2], x.t2 = v[3];
			x.bytes = v[4], x.new_bytes = v[5], x.stall_ns = v[6], x.ingest_ns = v[7];
			if (x.step >= 1 && x.step <= steps && x.rank < world)
				rec[(x.step - 1) * world + x.rank] = x;
		}
		fclose(f);
	}
	printf("world %u, %u steps, model %zu MiB + shard %zu MiB a rank, %.2f%% of the chunks changed a step\n",
	       world, steps, model_b / MiB, shard_b / MiB, pct100 / 100.0);
	printf("step rank  stall_s  wait_s  ingest_s  new_MiB  committed\n");
	uint64_t logical = 0, *v1 = calloc(world, 8), *w1 = calloc(world, 8);
	uint64_t *vn = calloc((size_t)steps * world, 8), *wn = calloc((size_t)steps * world, 8),
		 *jn = calloc(steps, 8), j1 = 0;
	size_t nn = 0, njn = 0;
	if (!v1 || !w1 || !vn || !wn || !jn)
		die("gathering", -ENOMEM);
	for (unsigned s = 1; s <= steps; s++) {
		uint64_t first = UINT64_MAX, commit = 0;
		int commits = 0;
		for (unsigned r = 0; r < world; r++) {
			const struct rec *x = &rec[(s - 1) * world + r];
			if (x->step != s)
				die("a rank's record of a step is missing", -EIO);
			printf("%4u %4u  %7.3f  %6.3f  %8.3f  %7.1f  %d\n", s, r, (x->t1 - x->t0) / 1e9,
			       (x->t2 - x->t1) / 1e9, x->ingest_ns / 1e9, x->new_bytes / (double)MiB, x->committed);
			logical += x->bytes;
			if (x->t0 < first)
				first = x->t0;
			if (x->committed)
				commit = x->t2, commits++;
			if (s == 1) {
				v1[r] = x->t1 - x->t0;
				w1[r] = x->t2 - x->t1;
			} else {
				vn[nn] = x->t1 - x->t0;
				wn[nn++] = x->t2 - x->t1;
			}
		}
		if (commits != 1)
			fprintf(stderr, "job_bench: step %u: %d ranks said they committed the job snapshot\n", s, commits);
		if (!commits)
			die("a step's job snapshot was not committed", -EIO);
		printf("step %u: first call to job snapshot committed %.3f s\n", s, (commit - first) / 1e9);
		if (s == 1)
			j1 = commit - first;
		else
			jn[njn++] = commit - first;
	}
	double sm, sx, wm, wx, jm, jx;
	med_max(v1, world, &sm, &sx);
	med_max(w1, world, &wm, &wx);
	printf("RESULT world=%u phase=first stall_med_s=%.4f stall_max_s=%.4f wait_med_s=%.4f wait_max_s=%.4f "
	       "job_s=%.4f\n", world, sm, sx, wm, wx, j1 / 1e9);
	if (nn) {
		med_max(vn, nn, &sm, &sx);
		med_max(wn, nn, &wm, &wx);
		med_max(jn, njn, &jm, &jx);
		printf("RESULT world=%u phase=incr stall_med_s=%.4f stall_max_s=%.4f wait_med_s=%.4f wait_max_s=%.4f "
		       "job_s=%.4f job_max_s=%.4f\n", world, sm, sx, wm, wx, jm, jx);
	}
	/* What a store that keeps each distinct chunk once must hold: one
	 * replica and the shards as first written, and every chunk version a
	 * later step wrote (the model's once: the same in every rank). */
	uint64_t base = model_b + (uint64_t)world * shard_b, ideal = base;
	for (unsigned s = 2; s <= steps; s++) {
		for (size_t c = 0; c < model_b / CHUNK; c++)
			ideal += chunk_changes(c, 0, s, pct100) ? CHUNK : 0;
		for (unsigned r = 0; r < world; r++)
			for (size_t c = 0; c < shard_b / CHUNK; c++)
				ideal += chunk_changes(c, r + 1, s, pct100) ? CHUNK : 0;
	}
	printf("RESULT world=%u logical_bytes=%llu replica_plus_shards=%llu distinct_bytes=%llu\n", world,
	       (unsigned long long)logical, (unsigned long long)base, (unsigned long long)ideal);
	free(rec);
	free(v1);
	free(w1);
	free(vn);
	free(wn);
	free(jn);
	return 0;
}
