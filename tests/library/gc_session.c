/*
 * gc_session.c - a libcrest job beside `casctl gc` (issue 12; run by
 * gc_beside.sh).
 *
 *   gc_session run STORE ROUNDS PERIOD_MS LOG [SEED [UNTIL]]
 *   gc_session check STORE LOG
 *
 * run: two host regions (one of an odd size), part of each filled with new
 * random bytes every round (SEED, default the clock; printed), then a
 * checkpoint and its wait, every PERIOD_MS, ROUNDS times; with UNTIL (a
 * path), at least ROUNDS times and then until UNTIL exists, so that a test
 * waiting for something to happen while the session runs does not depend
 * on how fast this machine is (at most MAXROUNDS in all). Each round appends to LOG the
 * snapshot's id and the SHA-256 of every region as checkpointed, and prints
 * the time crest_checkpoint took in the caller (the stall): median and max.
 * check: restores every snapshot of LOG the store still has and compares
 * the regions' SHA-256 with LOG's; prints how many were kept and expired.
 * Fails unless at least two were kept, the last one among them.
 */
#include "crest.h"
#include "tests/check.h"
#include "util/sha256.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NREG 2
#define MAXROUNDS 1000
static const size_t sizes[NREG] = { 3u << 20, (1u << 20) + 4093 };

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
	const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static crest_t *open_handle(const char *dir, uint8_t *r[NREG])
{
	struct crest_options o;
	crest_options_init(&o);
	o.staging_bytes = 16u << 20;
	o.workers = 2;
	o.flags = CREST_OPEN_NO_GPU;
	crest_t *c;
	OK(crest_open(dir, &o, &c));
	for (int i = 0; i < NREG; i++) {
		char name[16];
		snprintf(name, sizeof(name), "r%d", i);
		crest_region_t h;
		OK(crest_register(c, name, r[i], sizes[i], CREST_MEM_HOST, &h));
	}
	return c;
}

static bool exists(const char *path)
{
	FILE *f = fopen(path, "r");
	if (f)
		fclose(f);
	return f != NULL;
}

static void run(const char *dir, int rounds, int period_ms, const char *log, uint64_t seed, const char *until)
{
	printf("gc_session: seed %llu (replay: gc_session run STORE %d %d LOG %llu)\n", (unsigned long long)seed,
	       rounds, period_ms, (unsigned long long)seed);
	uint64_t rng = seed ? seed : 1;
	uint8_t *r[NREG];
	for (int i = 0; i < NREG; i++) {
		r[i] = malloc(sizes[i]);
		CHECK(r[i], "out of memory");
		if (!r[i])
			exit(1);
		check_fill(r[i], sizes[i], check_rnd(&rng));
	}
	FILE *f = fopen(log, "w");
	CHECK(f, "cannot write %s", log);
	if (!f)
		exit(1);
	crest_t *c = open_handle(dir, r);
	uint64_t stall[MAXROUNDS];
	int k;
	for (k = 0; k < MAXROUNDS && (k < rounds || (until && !exists(until))); k++) {
		const uint64_t t0 = now_ns();
		/* A quarter of each region anew: expired snapshots leave chunks
		 * that only they used, for gc to collect. */
		for (int i = 0; i < NREG; i++) {
			const size_t len = sizes[i] / 4, off = check_rnd(&rng) % (sizes[i] - len);
			check_fill(r[i] + off, len, check_rnd(&rng));
		}
		crest_ckpt_t ck;
		const uint64_t a = now_ns();
		OK(crest_checkpoint(c, NULL, &ck));
		stall[k] = now_ns() - a;
		struct crest_result res;
		OK(crest_wait(c, ck, &res));
		fprintf(f, "%s", res.snapshot);
		for (int i = 0; i < NREG; i++) {
			uint8_t sha[32];
			char hex[65];
			OK(sha256_once(r[i], sizes[i], sha));
			hex_encode(sha, 32, hex);
			fprintf(f, " %s", hex);
		}
		fprintf(f, "\n");
		fflush(f);
		const uint64_t spent = now_ns() - t0, period = (uint64_t)period_ms * 1000000u;
		if (spent < period) {
			const uint64_t left = period - spent;   /* tv_nsec must stay under 1 s */
			nanosleep(&(struct timespec){ (time_t)(left / 1000000000u), (long)(left % 1000000000u) }, NULL);
		}
	}
	OK(crest_close(c));
	fclose(f);
	qsort(stall, (size_t)k, sizeof(stall[0]), cmp_u64);
	printf("gc_session: %d checkpoints; crest_checkpoint stall median %.1f ms, max %.1f ms\n", k,
	       stall[k / 2] / 1e6, stall[k - 1] / 1e6);
	for (int i = 0; i < NREG; i++)
		free(r[i]);
}

static void check(const char *dir, const char *log)
{
	uint8_t *r[NREG];
	for (int i = 0; i < NREG; i++)
		if (!(r[i] = malloc(sizes[i])))
			exit(1);
	FILE *f = fopen(log, "r");
	CHECK(f, "cannot read %s", log);
	if (!f)
		exit(1);
	crest_t *c = open_handle(dir, r);
	char id[65], want[NREG][65];
	int kept = 0, expired = 0, n = 0;
	bool last_kept = false;
	while (fscanf(f, "%64s %64s %64s", id, want[0], want[1]) == 3) {
		n++;
		for (int i = 0; i < NREG; i++)
			memset(r[i], 0xa5, sizes[i]);
		int rc = crest_restore(c, id, NULL);
		last_kept = rc == 0;
		if (rc == -ENOENT) {
			expired++;
			continue;
		}
		CHECK(rc == 0, "restore of kept snapshot %.12s: %s", id, crest_errmsg());
		if (rc < 0)
			continue;
		kept++;
		for (int i = 0; i < NREG; i++) {
			uint8_t sha[32];
			char hex[65];
			OK(sha256_once(r[i], sizes[i], sha));
			hex_encode(sha, 32, hex);
			CHECK(!strcmp(hex, want[i]), "snapshot %.12s (round %d): region r%d restored with SHA-256 %.16s, "
			      "checkpointed with %.16s", id, n, i, hex, want[i]);
		}
	}
	fclose(f);
	OK(crest_close(c));
	printf("gc_session: %d snapshots logged: %d kept and restored bit-exact, %d expired by gc\n", n, kept,
	       expired);
	CHECK(kept >= 2 && last_kept, "gc --keep-last 2 left %d of them (the last %s): expected at least 2, the last "
	      "among them", kept, last_kept ? "kept" : "gone");
	for (int i = 0; i < NREG; i++)
		free(r[i]);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 6 && !strcmp(argv[1], "run")) {
		const int rounds = atoi(argv[3]), period = atoi(argv[4]);
		if (rounds < 1 || rounds > MAXROUNDS || period < 0 || period > 60000) {
			fprintf(stderr, "gc_session: 1..%d rounds, 0..60000 ms\n", MAXROUNDS);
			return 2;
		}
		run(argv[2], rounds, period, argv[5], argc > 6 ? strtoull(argv[6], NULL, 0) : (uint64_t)time(NULL),
		    argc > 7 ? argv[7] : NULL);
	} else if (argc == 4 && !strcmp(argv[1], "check")) {
		check(argv[2], argv[3]);
	} else {
		fprintf(stderr, "usage: gc_session run STORE ROUNDS PERIOD_MS LOG [SEED [UNTIL]] | check STORE LOG\n");
		return 2;
	}
	if (failures) {
		fprintf(stderr, "gc_session: %d check(s) failed\n", failures);
		return 1;
	}
	return 0;
}
