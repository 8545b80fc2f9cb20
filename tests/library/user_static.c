/*
 * user_static.c - a user's program linked statically against libcrest.a
 * (issue 11). It defines, non-static and with signatures and behaviour of
 * its own, functions named like crest's insides (crc32c, par_run,
 * hex_encode, time_now_ns, json_str, pool_open). The link must succeed (no
 * duplicate symbol), its calls must reach its own functions, and crest's
 * must reach crest's: a host region goes through a checkpoint, a scribble
 * and a restore byte for byte, and each of the user's functions has been
 * called exactly as often as the user called it (crest never called one).
 *
 *   user_static PARENT_DIR [SEED]
 *
 * Only crest.h is included, as in a user's program. The store is a fresh
 * temporary directory under PARENT_DIR, removed at the end. The region's
 * bytes come from SEED (default: the clock); it is printed for a replay.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* nftw */
#endif
#include "crest.h"

#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* The user's own functions: nothing like crest's, and counting calls. */
static unsigned calls[6];
enum { C_CRC, C_PAR, C_HEX, C_TIME, C_JSON, C_POOL };

int crc32c(int x) { calls[C_CRC]++; return x * 3 + 1; }
const char *par_run(void) { calls[C_PAR]++; return "user par_run"; }
double hex_encode(double a, double b) { calls[C_HEX]++; return a * b; }
long time_now_ns(long base) { calls[C_TIME]++; return base + 42; }
char json_str(const char *s) { calls[C_JSON]++; return s[0]; }
int pool_open(int *pool, int n) { calls[C_POOL]++; *pool = n * 2; return 7; }

static int failures;
#define CHECK(cond, ...)                                                       \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);   \
			fprintf(stderr, __VA_ARGS__);                          \
			fprintf(stderr, "\n");                                 \
			failures++;                                            \
		}                                                              \
	} while (0)
#define OK(call)                                                               \
	do {                                                                   \
		int rc_ = (call);                                              \
		if (rc_ < 0) {                                                 \
			fprintf(stderr, "FAIL %s:%d: %s = %d: %s\n", __FILE__, \
				__LINE__, #call, rc_, crest_errmsg());         \
			exit(1);                                               \
		}                                                              \
	} while (0)

/* Deterministic bytes that do not compress or dedup: xorshift64*. */
static void fill(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
	for (size_t i = 0; i < n; i++) {
		x ^= x >> 12;
		x ^= x << 25;
		x ^= x >> 27;
		p[i] = (uint8_t)((x * 0x2545f4914f6cdd1dull) >> 56);
	}
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	return remove(path);
}

/* The user's functions, called once each: their own results, not crest's. */
static void call_own(void)
{
	int pool = 0;
	CHECK(crc32c(5) == 16, "crc32c(5) is not the user's");
	CHECK(strcmp(par_run(), "user par_run") == 0, "par_run() is not the user's");
	CHECK(hex_encode(1.5, 4.0) == 6.0, "hex_encode(1.5, 4.0) is not the user's");
	CHECK(time_now_ns(100) == 142, "time_now_ns(100) is not the user's");
	CHECK(json_str("xyz") == 'x', "json_str(\"xyz\") is not the user's");
	CHECK(pool_open(&pool, 21) == 7 && pool == 42, "pool_open is not the user's");
}

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: user_static PARENT_DIR [SEED]\n");
		return 2;
	}
	uint64_t seed = argc == 3 ? strtoull(argv[2], NULL, 0) : (uint64_t)time(NULL);
	printf("seed %llu (replay: user_static DIR %llu)\n", (unsigned long long)seed,
	       (unsigned long long)seed);
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s/user-static-XXXXXX", argv[1]);
	mkdir(argv[1], 0700);
	if (!mkdtemp(dir)) {
		perror(dir);
		return 1;
	}

	call_own();

	/* An odd size, several chunks, some of it zero. */
	const size_t n = 5 * 1024 * 1024 + 4093 + (seed % 4096);
	uint8_t *r = malloc(n), *ref = malloc(n);
	if (!r || !ref)
		return 1;
	fill(r, n, seed);
	memset(r + n / 3, 0, n / 5);
	memcpy(ref, r, n);

	struct crest_options o;
	crest_options_init(&o);
	o.staging_bytes = 16 * 1024 * 1024;
	o.flags = CREST_OPEN_NO_GPU;
	crest_t *c;
	OK(crest_open(dir, &o, &c));
	crest_region_t h;
	OK(crest_register(c, "user", r, n, CREST_MEM_HOST, &h));
	/* An internal error path (crest_errf inside) through the API. */
	CHECK(crest_unregister(c, h + 1000) < 0 && crest_errmsg()[0],
	      "unregistering an unknown region did not fail with a message");
	crest_ckpt_t ck;
	struct crest_result res;
	OK(crest_checkpoint(c, NULL, &ck));
	OK(crest_wait(c, ck, &res));
	CHECK(res.bytes == n, "checkpoint stored %llu bytes, not %zu", (unsigned long long)res.bytes, n);
	fill(r, n, seed + 1);   /* the job goes on */
	struct crest_restore_result rr;
	OK(crest_restore(c, res.snapshot, &rr));
	size_t d = 0;
	while (d < n && r[d] == ref[d])
		d++;
	CHECK(d == n, "restored bytes differ from the checkpointed ones at %zu of %zu", d, n);
	CHECK(rr.bytes == n, "restore wrote %llu bytes, not %zu", (unsigned long long)rr.bytes, n);
	OK(crest_unregister(c, h));
	OK(crest_close(c));

	/* crest checksummed, hashed, timed, pooled and wrote JSON above: with
	 * its own functions, never the user's. */
	static const char *const names[] = { "crc32c", "par_run", "hex_encode", "time_now_ns",
					     "json_str", "pool_open" };
	for (int i = 0; i < 6; i++)
		CHECK(calls[i] == 1, "%s called %u times, the user called it once: crest called the user's",
		      names[i], calls[i]);
	call_own();
	for (int i = 0; i < 6; i++)
		CHECK(calls[i] == 2, "%s called %u times, not 2", names[i], calls[i]);

	nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	free(r);
	free(ref);
	if (failures)
		return 1;
	printf("ok: snapshot %.12s, %zu bytes restored; the user's crc32c, par_run, hex_encode, "
	       "time_now_ns, json_str, pool_open are its own\n", res.snapshot, n);
	return 0;
}
