/*
 * test_library.c - libcrest on host regions (no GPU needed).
 *
 *   test_library CASE STORE_DIR [CREST_BIN CASCTL_BIN]
 *
 * Cases: roundtrip, dedup, stall, errors, rounds, small, corrupt, direct, scatter,
 * recover, nogpu, cli. Each prints what it measured and exits 0 on success, 1 on
 * any other result: none of them skips (nogpu hides the GPU driver itself).
 */
#include "crest.h"
#include "cas/cas.h"      /* the pack layout (cas/format.h) and CAS_CODEC_RAW: never copies */
#include "tests/check.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MiB (1024u * 1024u)

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Deterministic bytes that do not compress or dedup: xorshift64*. */
static void fill(void *p, size_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1, *q = p;
	for (size_t i = 0; i < n / 8; i++) {
		x ^= x >> 12;
		x ^= x << 25;
		x ^= x >> 27;
		q[i] = x * 0x2545f4914f6cdd1dull;
	}
	for (size_t i = n / 8 * 8; i < n; i++)
		((uint8_t *)p)[i] = (uint8_t)(seed + i);
}

static void *big(size_t n)
{
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (p == MAP_FAILED) {
		perror("mmap");
		exit(1);
	}
	return p;
}

static crest_t *open_store(const char *dir, size_t staging)
{
	struct crest_options o;
	crest_options_init(&o);
	o.staging_bytes = staging;
	o.flags = CREST_OPEN_NO_GPU;
	crest_t *c;
	OK(crest_open(dir, &o, &c));
	return c;
}

/* A handle on dir without a GPU, a 32 MiB pool, restore_threads threads
 * (0: one a core), and r registered as the one host region "state". */
static crest_t *open_state(const char *dir, unsigned restore_threads, void *r, size_t size)
{
	struct crest_options o;
	crest_options_init(&o);
	o.staging_bytes = 32 * MiB;
	o.flags = CREST_OPEN_NO_GPU;
	o.restore_threads = restore_threads;
	crest_t *c;
	OK(crest_open(dir, &o, &c));
	crest_region_t h;
	OK(crest_register(c, "state", r, size, CREST_MEM_HOST, &h));
	return c;
}

/* Several host regions, odd sizes and zero pages among them, through a
 * checkpoint, a scribble and a restore, also from a fresh handle. */
static void t_roundtrip(const char *dir)
{
	const size_t sizes[] = { 3 * MiB + 17, 1, 4096, 9 * MiB, 0, 65536 + 5 };
	const size_t n = sizeof(sizes) / sizeof(sizes[0]);
	uint8_t *r[6], *ref[6];
	crest_t *c = open_store(dir, 32 * MiB);
	crest_region_t h[6];
	for (size_t i = 0; i < n; i++) {
		r[i] = malloc(sizes[i] + 1);
		ref[i] = malloc(sizes[i] + 1);
		fill(r[i], sizes[i], i + 1);
		if (i == 3)
			memset(r[i] + MiB, 0, 2 * MiB);   /* a hole */
		memcpy(ref[i], r[i], sizes[i]);
		char name[32];
		snprintf(name, sizeof(name), "region/%zu", i);
		OK(crest_register(c, name, r[i], sizes[i], CREST_MEM_HOST, &h[i]));
	}
	const char *labels[] = { "step=7", "job=roundtrip" };
	const struct crest_blob blob = { "state", "hello state", 11 };
	struct crest_checkpoint_opts co = { .tag = "rt-1", .labels = labels, .nlabels = 2, .blobs = &blob, .nblobs = 1 };
	crest_ckpt_t ck;
	OK(crest_checkpoint(c, &co, &ck));
	struct crest_result res;
	OK(crest_wait(c, ck, &res));
	printf("roundtrip: snapshot %.12s, %llu bytes, %llu new, %llu zero, stall %.2f ms, ingest %.2f ms\n",
	       res.snapshot, (unsigned long long)res.bytes, (unsigned long long)res.new_bytes,
	       (unsigned long long)res.zero_bytes, res.stall_ns / 1e6, res.ingest_ns / 1e6);
	for (size_t i = 0; i < n; i++)
		memset(r[i], 0xa5, sizes[i]);
	struct crest_restore_result rr;
	OK(crest_restore(c, "rt-1", &rr));
	for (size_t i = 0; i < n; i++)
		CHECK(!memcmp(r[i], ref[i], sizes[i]), "region %zu differs after restore", i);
	printf("roundtrip: restored %llu bytes in %.2f ms\n", (unsigned long long)rr.bytes, rr.ns / 1e6);
	OK(crest_close(c));

	/* A fresh handle, as a new process would: restore the newest by default. */
	c = open_store(dir, 32 * MiB);
	for (size_t i = 0; i < n; i++) {
		memset(r[i], 0x5a, sizes[i]);
		char name[32];
		snprintf(name, sizeof(name), "region/%zu", i);
		OK(crest_register(c, name, r[i], sizes[i], CREST_MEM_HOST, &h[i]));
	}
	OK(crest_restore(c, NULL, &rr));
	CHECK(!strcmp(rr.snapshot, res.snapshot), "newest snapshot is %s, not %s", rr.snapshot, res.snapshot);
	for (size_t i = 0; i < n; i++)
		CHECK(!memcmp(r[i], ref[i], sizes[i]), "region %zu differs after restore in a fresh handle", i);
	void *b;
	size_t blen;
	OK(crest_read_blob(c, NULL, "state", &b, &blen));
	CHECK(blen == 11 && !memcmp(b, "hello state", 11), "blob differs");
	crest_free(b);
	OK(crest_close(c));
	for (size_t i = 0; i < n; i++) {
		free(r[i]);
		free(ref[i]);
	}
}

/* A store that failed once costs one checkpoint, not every later one: the
 * engine's first pack write fails (CREST_FAULT_WRITE=1, nothing written),
 * then checkpoints of the same bytes commit with every chunk stored anew
 * (none may point at what the failed one reserved) and restore bit for
 * bit, also from a fresh handle, after the failed writes were cut. */
static void t_recover(const char *dir)
{
	const size_t size = 8 * MiB + 3 * 4096;
	uint8_t *r = malloc(size), *ref1 = malloc(size), *ref2 = malloc(size);
	if (!r || !ref1 || !ref2)
		exit(1);
	fill(r, size, 42);
	memset(r + 2 * MiB, 0, MiB);
	memcpy(ref1, r, size);
	setenv("CREST_FAULT_WRITE", "1", 1);
	crest_t *c = open_store(dir, 32 * MiB);
	unsetenv("CREST_FAULT_WRITE");   /* read once, at open */
	crest_region_t h;
	OK(crest_register(c, "w", r, size, CREST_MEM_HOST, &h));
	crest_ckpt_t ck;
	OK(crest_checkpoint(c, NULL, &ck));
	EXPECT_ERR(crest_wait(c, ck, NULL), -EIO, "CREST_FAULT_WRITE");
	struct crest_result res1, res2;
	OK(crest_checkpoint(c, NULL, &ck));
	OK(crest_wait(c, ck, &res1));
	CHECK(res1.new_bytes == size - MiB, "checkpoint after the failure stored %llu new bytes, expected %zu",
	      (unsigned long long)res1.new_bytes, size - MiB);
	fill(r + MiB, MiB / 2, 7);
	memcpy(ref2, r, size);
	OK(crest_checkpoint(c, NULL, &ck));
	OK(crest_wait(c, ck, &res2));
	printf("recover: after the failed checkpoint, %.12s (%llu new bytes) and %.12s (%llu new bytes)\n",
	       res1.snapshot, (unsigned long long)res1.new_bytes, res2.snapshot,
	       (unsigned long long)res2.new_bytes);
	memset(r, 0xa5, size);
	OK(crest_restore(c, res1.snapshot, NULL));
	CHECK(!memcmp(r, ref1, size), "first snapshot after the failure differs after restore");
	OK(crest_restore(c, res2.snapshot, NULL));
	CHECK(!memcmp(r, ref2, size), "second snapshot after the failure differs after restore");
	OK(crest_close(c));

	c = open_store(dir, 32 * MiB);
	OK(crest_register(c, "w", r, size, CREST_MEM_HOST, &h));
	memset(r, 0x5a, size);
	OK(crest_restore(c, res1.snapshot, NULL));
	CHECK(!memcmp(r, ref1, size), "first snapshot after the failure differs in a fresh handle");
	OK(crest_restore(c, NULL, NULL));
	CHECK(!memcmp(r, ref2, size), "newest snapshot differs in a fresh handle");
	OK(crest_close(c));
	free(r);
	free(ref1);
	free(ref2);
}

/* 1% of the pages change: the second checkpoint stores <= 2% new bytes. */
static void t_dedup(const char *dir)
{
	const size_t size = 64 * MiB, pages = size / 4096;
	uint8_t *r = big(size);
	fill(r, size, 42);
	crest_t *c = open_store(dir, 96 * MiB);
	crest_region_t h;
	OK(crest_register(c, "weights", r, size, CREST_MEM_HOST, &h));
	crest_ckpt_t ck;
	struct crest_result r1, r2;
	OK(crest_checkpoint(c, NULL, &ck));
	OK(crest_wait(c, ck, &r1));
	/* Scattered, not contiguous: every 100th page gets one new byte. */
	size_t changed = 0;
	for (size_t pg = 0; pg < pages; pg += 100, changed++)
		r[pg * 4096 + 123] ^= 0xff;
	OK(crest_checkpoint(c, NULL, &ck));
	OK(crest_wait(c, ck, &r2));
	const double pct = 100.0 * (double)r2.new_bytes / (double)r2.bytes;
	printf("dedup: first %llu new of %llu; after changing %zu of %zu pages (%.2f%%): %llu new bytes = %.2f%%\n",
	       (unsigned long long)r1.new_bytes, (unsigned long long)r1.bytes, changed, pages,
	       100.0 * (double)changed / (double)pages, (unsigned long long)r2.new_bytes, pct);
	CHECK(r1.new_bytes >= size * 99 / 100, "first checkpoint stored only %llu new bytes",
	      (unsigned long long)r1.new_bytes);
	CHECK(pct <= 2.0, "second checkpoint added %.2f%% new bytes, more than 2%%", pct);
	/* And the second restores to what it was. */
	uint8_t *ref = big(size);
	memcpy(ref, r, size);
	memset(r, 0, size);
	OK(crest_restore(c, r2.snapshot, NULL));
	CHECK(!memcmp(r, ref, size), "dedup: restore of the second snapshot differs");
	OK(crest_close(c));
	munmap(r, size);
	munmap(ref, size);
}

/* crest_checkpoint returns while ingest runs, within 1.5x a plain memcpy of
 * the same bytes measured just before. A loaded CI box can delay either
 * measurement, so up to three tries, each waited for before the next. */
static void t_stall(const char *dir)
{
	const size_t size = 256 * MiB;
	uint8_t *r = big(size), *dst = big(size);
	fill(r, size, 7);
	crest_t *c = open_store(dir, size + 32 * MiB);
	crest_region_t h;
	OK(crest_register(c, "state", r, size, CREST_MEM_HOST, &h));
	bool ok = false;
	bool ingest_seen_running = false;
	for (int attempt = 1; attempt <= 3 && !ok; attempt++) {
		r[(size_t)attempt * 4096] ^= 1;   /* not all old news to the store */
		memcpy(dst, r, size);             /* warm: both sides touched */
		uint64_t t0 = now_ns();
		memcpy(dst, r, size);
		const uint64_t memcpy_ns = now_ns() - t0;
		crest_ckpt_t ck;
		t0 = now_ns();
		OK(crest_checkpoint(c, NULL, &ck));
		const uint64_t ck_ns = now_ns() - t0;
		const int running = crest_poll(c, ck) == 0;
		struct crest_result res;
		OK(crest_wait(c, ck, &res));
		const double ratio = (double)ck_ns / (double)memcpy_ns;
		printf("stall: try %d: memcpy of %zu MiB %.1f ms (%.2f GB/s); crest_checkpoint %.1f ms "
		       "(%.2f GB/s) = %.2fx memcpy; ingest %s at return, took %.1f ms more\n",
		       attempt, size / MiB, memcpy_ns / 1e6, size / (double)memcpy_ns, ck_ns / 1e6,
		       size / (double)ck_ns, ratio, running ? "still running" : "already done",
		       res.ingest_ns / 1e6 - ck_ns / 1e6);
		ingest_seen_running |= running;
		ok = ratio <= 1.5 && running;
	}
	CHECK(ingest_seen_running, "ingest was already done when crest_checkpoint returned");
#ifdef __SANITIZE_ADDRESS__
	/* ASan instruments crest's copy loop and the memcpy baseline
	 * differently: the ratio means nothing here. The normal build checks it. */
	(void)ok;
	printf("stall: the 1.5x memcpy bound is checked in the normal build, not under ASan\n");
#else
	CHECK(ok, "crest_checkpoint took more than 1.5x memcpy in all three tries");
#endif
	OK(crest_close(c));
	munmap(r, size);
	munmap(dst, size);
}

/* State four times the pool: copies go in rounds, and still round-trip. */
static void t_rounds(const char *dir)
{
	const size_t size = 64 * MiB;
	uint8_t *r = big(size), *ref = big(size);
	fill(r, size, 99);
	memcpy(ref, r, size);
	crest_t *c = open_store(dir, 16 * MiB);
	crest_region_t h;
	OK(crest_register(c, "big", r, size, CREST_MEM_HOST, &h));
	crest_ckpt_t ck;
	struct crest_result res;
	OK(crest_checkpoint(c, NULL, &ck));
	OK(crest_wait(c, ck, &res));
	printf("rounds: %zu MiB through a 16 MiB pool: %u waits for staging, %.1f ms of %.1f ms stall\n",
	       size / MiB, res.rounds, res.staging_wait_ns / 1e6, res.stall_ns / 1e6);
	CHECK(res.rounds > 0, "a state larger than the pool reported no rounds");
	memset(r, 0, size);
	OK(crest_restore(c, res.snapshot, NULL));
	CHECK(!memcmp(r, ref, size), "rounds: restore differs");
	OK(crest_close(c));
	munmap(r, size);
	munmap(ref, size);
}

/* xorshift64: the small case's draws, from its printed seed. */
static uint64_t draw(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* Many small regions share staging slices (capture/regions.c, copy_small):
 *  1. 120 regions of 1 B to 64 KiB (3.9 MiB or so) through a 16 MiB pool of
 *     4 MiB slices: with a slice each they would need 120, and the copy
 *     would wait for the ingest to give slices back; shared, none waits.
 *  2. a randomized model: those regions beside regions of a quarter slice
 *     (the largest that share) and of one to two slices, registered in a
 *     drawn order, 4 checkpoints each after changes to drawn regions, then
 *     every snapshot restored, in a drawn order, over scribbled regions
 *     and compared with the model's copy of it. The pool runs dry on the
 *     way, so shared slices go to the engine while later pieces fill. */
static void t_small(const char *dir)
{
	const char *env = getenv("CREST_TEST_SEED");
	const uint64_t seed = env && *env ? strtoull(env, NULL, 10) : (uint64_t)now_ns() % 1000000;
	printf("small: seed %llu (CREST_TEST_SEED=%llu repeats it)\n", (unsigned long long)seed,
	       (unsigned long long)seed);
	uint64_t x = seed * 2654435761u + 1;
	enum { NSMALL = 120, NMID = 6, NBIG = 3, N = NSMALL + NMID + NBIG, NCK = 4 };
	size_t size[N], order[N];
	uint8_t *r[N], *model[NCK][N];
	crest_region_t h[N];
	char cmd_rm[4200];
	for (int i = 0; i < N; i++) {
		size[i] = i < NSMALL ? 1 + draw(&x) % (64 * 1024)
			  : i < NSMALL + NMID ? 1 * MiB - draw(&x) % 2 * (draw(&x) % 4096)
					     : 4 * MiB + draw(&x) % (4 * MiB);
		r[i] = malloc(size[i]);
		if (!r[i]) {
			fprintf(stderr, "small: out of memory\n");
			exit(1);
		}
		fill(r[i], size[i], seed + i);
		order[i] = (size_t)i;
	}

	crest_t *c = open_store(dir, 16 * MiB);
	for (int i = 0; i < NSMALL; i++) {
		char name[32];
		snprintf(name, sizeof(name), "small/%03d", i);
		OK(crest_register(c, name, r[i], size[i], CREST_MEM_HOST, &h[i]));
	}
	crest_ckpt_t ck;
	struct crest_result res;
	OK(crest_checkpoint(c, &(struct crest_checkpoint_opts){ .tag = "small-only" }, &ck));
	OK(crest_wait(c, ck, &res));
	size_t total = 0;
	for (int i = 0; i < NSMALL; i++)
		total += size[i];
	printf("small: %d regions, %zu bytes, through a 16 MiB pool: %u waits for staging, stall %.1f ms\n", NSMALL,
	       total, res.rounds, res.stall_ns / 1e6);
	CHECK(res.rounds == 0, "%d small regions (%zu bytes) waited %u times for staging: each took a slice",
	      NSMALL, total, res.rounds);
	for (int i = 0; i < NSMALL; i++)
		memset(r[i], 0xA5, size[i]);
	OK(crest_restore(c, "small-only", NULL));
	for (int i = 0; i < NSMALL; i++) {
		uint8_t *want = malloc(size[i]);
		fill(want, size[i], seed + i);
		CHECK(!memcmp(r[i], want, size[i]), "small-only: region %d (%zu bytes) restored wrong", i, size[i]);
		free(want);
	}
	for (int i = 0; i < NSMALL; i++)
		OK(crest_unregister(c, h[i]));

	/* 2: the model. */
	for (int i = N - 1; i > 0; i--) {
		const size_t j = draw(&x) % (size_t)(i + 1), t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
	for (int k = 0; k < N; k++) {
		const size_t i = order[k];
		char name[32];
		snprintf(name, sizeof(name), "r/%03zu", i);
		OK(crest_register(c, name, r[i], size[i], CREST_MEM_HOST, &h[i]));
	}
	char tags[NCK][16];
	unsigned rounds = 0;
	for (int k = 0; k < NCK; k++) {
		const int changes = 1 + (int)(draw(&x) % 20);
		for (int m = 0; m < changes; m++) {
			const size_t i = draw(&x) % N, at = draw(&x) % size[i];
			const size_t len = 1 + draw(&x) % (size[i] - at);
			uint8_t *tmp = malloc(len);   /* fill writes words: r[i] + at may be unaligned */
			if (!tmp) {
				fprintf(stderr, "small: out of memory\n");
				exit(1);
			}
			fill(tmp, len, draw(&x));
			memcpy(r[i] + at, tmp, len);
			free(tmp);
		}
		for (int i = 0; i < N; i++) {
			model[k][i] = malloc(size[i]);
			if (!model[k][i]) {
				fprintf(stderr, "small: out of memory\n");
				exit(1);
			}
			memcpy(model[k][i], r[i], size[i]);
		}
		snprintf(tags[k], sizeof(tags[k]), "model-%d", k);
		OK(crest_checkpoint(c, &(struct crest_checkpoint_opts){ .tag = tags[k] }, &ck));
		OK(crest_wait(c, ck, &res));
		rounds += res.rounds;
	}
	int pick[NCK];
	for (int k = 0; k < NCK; k++)
		pick[k] = k;
	for (int k = NCK - 1; k > 0; k--) {
		const int j = (int)(draw(&x) % (uint64_t)(k + 1)), t = pick[k];
		pick[k] = pick[j];
		pick[j] = t;
	}
	int bad = 0;
	for (int q = 0; q < NCK; q++) {
		const int k = pick[q];
		for (int i = 0; i < N; i++)
			memset(r[i], 0x5A, size[i]);
		OK(crest_restore(c, tags[k], NULL));
		for (int i = 0; i < N; i++)
			if (memcmp(r[i], model[k][i], size[i])) {
				CHECK(0, "%s: region %d (%zu bytes) restored wrong", tags[k], i, size[i]);
				bad++;
			}
	}
	printf("small: model: %d regions (%d small, %d of a quarter slice, %d of 1-2 slices), %d checkpoints "
	       "(%u waits for staging in all), each restored: %d regions wrong\n", N, NSMALL, NMID, NBIG, NCK,
	       rounds, bad);
	OK(crest_close(c));

	/* 3: the same regions held in memory (capture_hold): a handle that
	 * lets its store go once idle (at once here) holds each later
	 * checkpoint in its pool and ingests it when the store is back; small
	 * regions share slices there too. The model's last state, changed
	 * again between checkpoints, each snapshot restored and compared. */
	char dir2[4096];
	snprintf(dir2, sizeof(dir2), "%s.held", dir);
	snprintf(tags[0], sizeof(tags[0]), "held");
	setenv("CREST_STORE_IDLE_MS", "0", 1);
	c = open_store(dir2, 16 * MiB);
	unsetenv("CREST_STORE_IDLE_MS");
	for (int i = 0; i < N; i++) {
		char name[32];
		snprintf(name, sizeof(name), "h/%03d", i);
		OK(crest_register(c, name, r[i], size[i], CREST_MEM_HOST, &h[i]));
	}
	char held_ids[NCK][65];
	for (int k = 0; k < NCK; k++) {
		for (int m = 0; m < 8; m++) {
			const size_t i = draw(&x) % N;
			fill(model[k][i], size[i], draw(&x));
			memcpy(r[i], model[k][i], size[i]);
		}
		for (int i = 0; i < N; i++)
			memcpy(model[k][i], r[i], size[i]);
		OK(crest_checkpoint(c, NULL, &ck));
		OK(crest_wait(c, ck, &res));
		snprintf(held_ids[k], sizeof(held_ids[k]), "%s", res.snapshot);
		usleep(50000);   /* the keeper lets the store go: the next one is held */
	}
	int hbad = 0;
	for (int k = NCK - 1; k >= 0; k--) {
		for (int i = 0; i < N; i++)
			memset(r[i], 0x3C, size[i]);
		OK(crest_restore(c, held_ids[k], NULL));
		for (int i = 0; i < N; i++)
			if (memcmp(r[i], model[k][i], size[i])) {
				CHECK(0, "held snapshot %d: region %d (%zu bytes) restored wrong", k, i, size[i]);
				hbad++;
			}
	}
	printf("small: held: %d checkpoints of the %d regions, the store let go after each, each restored: %d "
	       "regions wrong\n", NCK, N, hbad);
	OK(crest_close(c));
	snprintf(cmd_rm, sizeof(cmd_rm), "rm -rf '%s'", dir2);
	if (system(cmd_rm) != 0)
		CHECK(0, "could not remove %s", dir2);
	for (int i = 0; i < N; i++) {
		free(r[i]);
		for (int k = 0; k < NCK; k++)
			free(model[k][i]);
	}
}

static void t_errors(const char *dir)
{
	crest_t *c = open_store(dir, 16 * MiB);
	const size_t size = 1 * MiB;
	uint8_t *a = malloc(size), *b = malloc(2 * size);
	fill(a, size, 1);
	fill(b, 2 * size, 2);
	crest_region_t ha, hb, hx;
	crest_ckpt_t ck;
	struct crest_result res;

	printf("errors: bad handles\n");
	EXPECT_ERR(crest_checkpoint(NULL, NULL, &ck), -EBADF, "NULL");
	EXPECT_ERR(crest_wait(c, 12345, &res), -EBADF, "12345");
	EXPECT_ERR(crest_poll(c, 0), -EBADF, "not pending");
	EXPECT_ERR(crest_unregister(c, 999), -EBADF, "999");
	OK(crest_register(c, "a", a, size, CREST_MEM_HOST, &ha));
	EXPECT_ERR(crest_register(c, "a", b, size, CREST_MEM_HOST, &hx), -EEXIST, "already registered");
	EXPECT_ERR(crest_register(c, "z", NULL, size, CREST_MEM_HOST, &hx), -EINVAL, "NULL pointer");
	OK(crest_register(c, "b", b, 2 * size, CREST_MEM_HOST, &hb));
	OK(crest_checkpoint(c, &(struct crest_checkpoint_opts){ .tag = "two" }, &ck));
	OK(crest_wait(c, ck, &res));
	EXPECT_ERR(crest_wait(c, ck, &res), -EBADF, "already waited");
	const char *bad_label[] = { "novalue" };
	EXPECT_ERR(crest_checkpoint(c, &(struct crest_checkpoint_opts){ .labels = bad_label, .nlabels = 1 }, &ck),
		   -EINVAL, "key=value");
	EXPECT_ERR(crest_restore(c, "no-such-tag", NULL), -ENOENT, "no-such-tag");

	printf("errors: snapshot regions differ from the registered ones\n");
	OK(crest_unregister(c, hb));
	EXPECT_ERR(crest_unregister(c, hb), -EBADF, "not registered");
	OK(crest_register(c, "b", b, size, CREST_MEM_HOST, &hb));   /* same name, half the size */
	memset(a, 0x11, size);
	EXPECT_ERR(crest_restore(c, "two", NULL), -EINVAL, "2097152");
	CHECK(a[0] == 0x11 && a[size - 1] == 0x11, "a failed restore wrote into a region");
	OK(crest_unregister(c, hb));
	EXPECT_ERR(crest_restore(c, "two", NULL), -EINVAL, "not registered");
	OK(crest_register(c, "b", b, 2 * size, CREST_MEM_HOST, &hb));
	OK(crest_register(c, "c", b, 16, CREST_MEM_HOST, &hx));
	EXPECT_ERR(crest_restore(c, "two", NULL), -EINVAL, "has no region c");
	OK(crest_unregister(c, hx));
	OK(crest_restore(c, "two", NULL));
	uint8_t ref[64];
	fill(ref, sizeof(ref), 1);
	CHECK(!memcmp(a, ref, sizeof(ref)), "restore after the errors did not bring a back");

	printf("errors: a region freed while registered\n");
	const size_t fsz = 8 * MiB;
	uint8_t *f = big(fsz);
	OK(crest_register(c, "freed", f, fsz, CREST_MEM_HOST, &hx));
	munmap(f, fsz);
	EXPECT_ERR(crest_checkpoint(c, NULL, &ck), -EFAULT, "no longer mapped");
	EXPECT_ERR(crest_restore(c, "two", NULL), -EINVAL, "has no region freed");
	OK(crest_unregister(c, hx));
	OK(crest_checkpoint(c, NULL, &ck));   /* fine again once unregistered */
	OK(crest_wait(c, ck, NULL));

	printf("errors: two blobs of one name\n");
	const struct crest_blob twins[] = { { "s", "x", 1 }, { "t", "y", 1 }, { "s", "z", 1 } };
	EXPECT_ERR(crest_checkpoint(c, &(struct crest_checkpoint_opts){ .blobs = twins, .nblobs = 3 }, &ck),
		   -EEXIST, "blobs 0 and 2 are both named s");
	OK(crest_checkpoint(c, &(struct crest_checkpoint_opts){ .blobs = twins, .nblobs = 2 }, &ck));
	OK(crest_wait(c, ck, NULL));

	printf("errors: a closed, a twice-closed and a foreign handle\n");
	OK(crest_close(c));
	crest_t *closed = c;
	void *data;
	size_t len;
	EXPECT_ERR(crest_register(closed, "a", a, size, CREST_MEM_HOST, &hx), -EBADF, "not an open crest handle");
	EXPECT_ERR(crest_unregister(closed, ha), -EBADF, "crest_unregister");
	CHECK(crest_region_count(closed) == 0, "crest_region_count of a closed handle");
	EXPECT_ERR(crest_checkpoint(closed, NULL, &ck), -EBADF, "crest_checkpoint");
	EXPECT_ERR(crest_poll(closed, ck), -EBADF, "crest_poll");
	EXPECT_ERR(crest_wait(closed, ck, NULL), -EBADF, "crest_wait");
	EXPECT_ERR(crest_restore(closed, "two", NULL), -EBADF, "crest_restore");
	EXPECT_ERR(crest_read_blob(closed, NULL, "s", &data, &len), -EBADF, "crest_read_blob");
	EXPECT_ERR(crest_close(closed), -EBADF, "crest_close");
	/* The next open may reuse the slot (and malloc the address): the old
	 * handle must still be refused, and the new one must still work. */
	crest_t *c2 = open_store(dir, 16 * MiB);
	EXPECT_ERR(crest_checkpoint(closed, NULL, &ck), -EBADF, "not an open crest handle");
	EXPECT_ERR(crest_close(closed), -EBADF, "crest_close");
	uint64_t foreign[64] = { 0 };
	EXPECT_ERR(crest_checkpoint((crest_t *)foreign, NULL, &ck), -EBADF, "not an open crest handle");
	EXPECT_ERR(crest_close((crest_t *)((uintptr_t)c2 ^ 2)), -EBADF, "crest_close");
	OK(crest_read_blob(c2, NULL, "s", &data, &len));
	CHECK(len == 1 && *(char *)data == 'x', "blob s of the newest snapshot");
	crest_free(data);
	OK(crest_close(c2));
	EXPECT_ERR(crest_open(dir, &(struct crest_options){ .staging_bytes = 4096 }, &c), -EINVAL, "too small");
	free(a);
	free(b);
}

/* Device regions without a GPU driver: a clear error. The driver is hidden
 * (CREST_LIBCUDA names a library that is not there, read at the first
 * load), so this runs, and must pass, on GPU machines too: any other
 * result, success included, is a failure, never a skip. */
static void t_nogpu(const char *dir)
{
	setenv("CREST_LIBCUDA", "/nonexistent/crest-test/libcuda.so.1", 1);
	crest_t *c;
	OK(crest_open(dir, &(struct crest_options){ .staging_bytes = 16 * MiB }, &c));
	crest_region_t h;
	static uint8_t fake[4096];
	int rc = crest_register(c, "gpu", fake, sizeof(fake), CREST_MEM_DEVICE, &h);
	printf("nogpu: crest_register(device) -> %d: %s\n", rc, crest_errmsg());
	CHECK(rc == -ENODEV, "expected -ENODEV, got %d", rc);
	CHECK(strstr(crest_errmsg(), "no NVIDIA GPU driver here") != NULL, "message: %s", crest_errmsg());
	CHECK(strstr(crest_errmsg(), "gpu") != NULL, "message does not name the region: %s", crest_errmsg());
	rc = crest_register(c, "uvm", fake, sizeof(fake), CREST_MEM_MANAGED, &h);
	printf("nogpu: crest_register(managed) -> %d: %s\n", rc, crest_errmsg());
	CHECK(rc == -ENODEV && strstr(crest_errmsg(), "no NVIDIA GPU driver here") &&
	      strstr(crest_errmsg(), "managed region uvm"), "managed: %d: %s", rc, crest_errmsg());
	rc = crest_register(c, "odd", fake, sizeof(fake), (enum crest_mem)7, &h);
	CHECK(rc == -EINVAL && strstr(crest_errmsg(), "memory kind 7"), "kind 7: %d: %s", rc, crest_errmsg());
	/* Host regions go on working in the same handle. */
	OK(crest_register(c, "host", fake, sizeof(fake), CREST_MEM_HOST, &h));
	crest_ckpt_t ck;
	OK(crest_checkpoint(c, NULL, &ck));
	OK(crest_wait(c, ck, NULL));
	OK(crest_close(c));
}

/* Library snapshots are ordinary snapshots for the command-line tools. */
static void t_cli(const char *dir, const char *crest_bin, const char *casctl_bin)
{
	uint8_t *r = malloc(MiB);
	fill(r, MiB, 3);
	crest_t *c = open_store(dir, 16 * MiB);
	crest_region_t h;
	OK(crest_register(c, "model/w", r, MiB, CREST_MEM_HOST, &h));
	const struct crest_blob blob = { "pystate", "xyz", 3 };
	crest_ckpt_t ck;
	OK(crest_checkpoint(c, &(struct crest_checkpoint_opts){ .tag = "cli", .blobs = &blob, .nblobs = 1 }, &ck));
	OK(crest_wait(c, ck, NULL));
	OK(crest_close(c));
	static char cmd[1 << 17];
	/* What get writes is compared with the region as it was. */
	char ref[4200];
	snprintf(ref, sizeof(ref), "%s.ref", dir);
	FILE *f = fopen(ref, "wb");
	fwrite(r, 1, MiB, f);
	fclose(f);
	/* And pushed to a shared store, pulled from there into another
	 * (issue 35: another node's), and got from that one. */
	snprintf(cmd, sizeof(cmd), "set -e; %s --store %s ls; %s --store %s show cli; %s --store %s verify; "
		 "rm -rf %s.get; %s --store %s get cli %s.get; cmp %s.get/model/w %s; "
		 "printf xyz | cmp %s.get/pystate -; echo cli: ls, show, verify, get all fine; "
		 "rm -rf %s.shared %s.other %s.get; %s --store %s --init push cli %s.shared; "
		 "%s --store %s.other --init pull cli %s.shared; %s --store %s.other get cli %s.get; "
		 "cmp %s.get/model/w %s; printf xyz | cmp %s.get/pystate -; %s --store %s.other verify; "
		 "echo cli: pushed, pulled into another store, got from it bit-exact",
		 crest_bin, dir, crest_bin, dir, casctl_bin, dir, dir, crest_bin, dir, dir, dir, ref, dir,
		 dir, dir, dir, crest_bin, dir, dir, crest_bin, dir, dir, crest_bin, dir, dir, dir, ref, dir,
		 casctl_bin, dir);
	int rc = system(cmd);
	CHECK(rc == 0, "the command-line tools failed on a library snapshot (%d)", rc);
	free(r);
}

/* The first pack file of a store, into path. */
static void first_pack(const char *dir, char *path, size_t cap)
{
	char d[2048];
	snprintf(d, sizeof(d), "%s/packs", dir);
	DIR *dd = opendir(d);
	CHECK(dd, "cannot open %s", d);
	struct dirent *e;
	path[0] = 0;
	while (dd && (e = readdir(dd)))
		if (strstr(e->d_name, ".pack") && (!path[0] || strcmp(strrchr(path, '/') + 1, e->d_name) > 0))
			snprintf(path, cap, "%.2047s/%.255s", d, e->d_name);
	if (dd)
		closedir(dd);
}

static void flip(const char *path, uint64_t off)
{
	int fd = open(path, O_RDWR);
	uint8_t b = 0;
	CHECK(fd >= 0 && pread(fd, &b, 1, (off_t)off) == 1, "cannot read %s", path);
	b ^= 0x40;
	CHECK(pwrite(fd, &b, 1, (off_t)off) == 1, "cannot write %s", path);
	close(fd);
}

/* A byte flipped in a pack: the restore of a host region stops with an
 * error naming snapshot, region, offset and the failed check (the region's
 * bytes are then unspecified: see restore/gpu.h). Records are walked as
 * cas/format.h lays them out. */
static void t_corrupt(const char *dir)
{
	const size_t size = 16 * MiB;
	uint8_t *r = big(size), *ref = malloc(size);
	fill(r, size, 77);
	memcpy(ref, r, size);
	crest_t *c = open_store(dir, 32 * MiB);
	crest_region_t h;
	OK(crest_register(c, "model/weights", r, size, CREST_MEM_HOST, &h));
	crest_ckpt_t ck;
	struct crest_result res;
	OK(crest_checkpoint(c, &(struct crest_checkpoint_opts){ .tag = "good" }, &ck));
	OK(crest_wait(c, ck, &res));

	/* The 1000th record: find its chunk's place in the region. */
	char pack[4200];
	first_pack(dir, pack, sizeof(pack));
	FILE *f = fopen(pack, "rb");
	CHECK(f, "cannot open %s", pack);
	if (!f)
		return;
	uint64_t off = CAS_FILE_HEADER, at = UINT64_MAX;
	uint8_t hdr[CAS_REC_HEADER], data[4096];
	for (int k = 0; k < 1000 && fseeko(f, (off_t)off, SEEK_SET) == 0 && fread(hdr, 1, sizeof(hdr), f) == sizeof(hdr);
	     k++) {
		const uint32_t stored = le32_get(hdr + CAS_REC_STORED);
		if (k == 999 && stored == 4096 && fread(data, 1, 4096, f) == 4096)
			for (uint64_t o = 0; o < size; o += 4096)
				if (!memcmp(r + o, data, 4096))
					at = o;
		if (k < 999)
			off += CAS_REC_HEADER + stored;
	}
	fclose(f);
	CHECK(at != UINT64_MAX, "record 1000 of %s is not a raw chunk of the region", pack);
	if (at == UINT64_MAX)
		return;
	const uint64_t bad = off + CAS_REC_HEADER + 1234;
	flip(pack, bad);

	memset(r, 0xa5, size);
	char want[64];
	snprintf(want, sizeof(want), "offset %llu", (unsigned long long)at);
	EXPECT_ERR(crest_restore(c, "good", NULL), -EBADMSG, want);
	const char *m = crest_errmsg();
	CHECK(strstr(m, "model/weights") && strstr(m, res.snapshot) && strstr(m, "CRC32C"),
	      "error does not name snapshot %s, region and the check: %s", res.snapshot, m);
	printf("corrupt: byte %llu of %s flipped: %s\n", (unsigned long long)bad, strrchr(pack, '/') + 1, m);

	flip(pack, bad);   /* undone: the same restore is bit-exact again */
	memset(r, 0xa5, size);
	OK(crest_restore(c, "good", NULL));
	CHECK(!memcmp(r, ref, size), "region differs after restore");
	OK(crest_close(c));
	munmap(r, size);
	free(ref);
}

/* The CREST_TRACE summary line of one restore, caught from stderr: the
 * chunks read direct (restore/gpu.c, run_direct), the records walked, the
 * chunks a direct read skipped and those looked up one by one. */
struct restore_sum {
	unsigned long long direct, walked, skipped, lookups;
};

/* Returns what crest_restore returned. */
static int traced_restore(crest_t *c, const char *dir, const char *snap, struct restore_sum *sum)
{
	char path[2100], text[8192], line[1024] = "";
	snprintf(path, sizeof(path), "%s.trace", dir);
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600), saved = dup(2);
	CHECK(fd >= 0 && saved >= 0, "cannot open %s", path);
	fflush(stderr);
	dup2(fd, 2);
	setenv("CREST_TRACE", "1", 1);
	const int rc = crest_restore(c, snap, NULL);
	unsetenv("CREST_TRACE");
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	const ssize_t n = pread(fd, text, sizeof(text) - 1, 0);
	close(fd);
	text[n > 0 ? n : 0] = 0;
	const char *l = strstr(text, "crest trace: restore: ");
	if (l)
		snprintf(line, sizeof(line), "%.*s", (int)strcspn(l, "\n"), l);
	const char *p = strstr(line, "summed; ");
	*sum = (struct restore_sum){ 0 };
	CHECK(p && sscanf(p,
			  "summed; %llu chunks direct, %llu records walked, %llu skipped in direct reads, "
			  "%llu chunks looked up one by one",
			  &sum->direct, &sum->walked, &sum->skipped, &sum->lookups) == 4,
	      "no restore summary in the trace: %s", text);
	printf("  %s\n", line);
	return rc;
}

/* A record in pack of a raw 4 KiB chunk of r (size bytes), the first after
 * skipping `skip` such: *off its header's offset in the pack, *at where r
 * holds its chunk. Records are walked as in t_corrupt. */
static bool raw_record(const char *pack, const uint8_t *r, size_t size, int skip, uint64_t *off, uint64_t *at)
{
	FILE *f = fopen(pack, "rb");
	CHECK(f, "cannot open %s", pack);
	uint8_t hdr[CAS_REC_HEADER], data[4096];
	bool found = false;
	for (uint64_t o = CAS_FILE_HEADER;
	     !found && f && fseeko(f, (off_t)o, SEEK_SET) == 0 && fread(hdr, 1, sizeof(hdr), f) == sizeof(hdr);) {
		const uint32_t stored = le32_get(hdr + CAS_REC_STORED);
		if (hdr[CAS_REC_CODEC] == CAS_CODEC_RAW && stored == 4096 && fread(data, 1, 4096, f) == 4096) {
			uint64_t key, k;   /* a cheap first test: ASan makes memcmp a call */
			memcpy(&key, data, 8);
			for (uint64_t p = 0; p < size && !found; p += 4096) {
				memcpy(&k, r + p, 8);
				if (k == key && !memcmp(r + p, data, 4096) && skip-- == 0) {
					*off = o;
					*at = p;
					found = true;
				}
			}
		}
		o += CAS_REC_HEADER + stored;
	}
	if (f)
		fclose(f);
	return found;
}

/* Runs of raw records are read straight into the region (restore/gpu.c,
 * run_direct), the rest walked: random data is read direct, chunks met twice
 * and compressed ones are not, and all restore bit-exact. A damaged byte in
 * the data or the header of a record read direct fails the restore with the
 * walk's error, naming snapshot, region and offset; once undone, the restore
 * is bit-exact and direct again. */
static void t_direct(const char *dir)
{
	const size_t size = 32 * MiB, dsize = 8 * MiB, tsize = 8 * MiB;
	uint8_t *w = big(size), *d = big(dsize), *t = big(tsize);
	uint8_t *wref = malloc(size), *dref = malloc(dsize), *tref = malloc(tsize);
	fill(w, size, 5);
	fill(d, dsize, 6);
	memcpy(d + 3 * 4096, d + 1 * 4096, 4096);      /* twice in the first run of 1024 chunks */
	memcpy(d + 1500 * 4096, d + 2 * 4096, 4096);   /* in the second, first seen in the first */
	/* and twice in the second: the engine's workers may take the second
	 * run's segment first (seen under a loaded ctest -j: chunk 2 was then
	 * stored in it, and it read direct), so it must hold a repeat of its
	 * own, whichever order the segments went in. */
	memcpy(d + 1700 * 4096, d + 1600 * 4096, 4096);
	for (size_t p = 0; p < tsize; p += 4096) {     /* compresses: LZ4 records */
		for (size_t i = 0; i < 4096; i += 32) {
			char line[40];
			snprintf(line, sizeof(line), "page %-8zu line %-3zu of text.\n", p / 4096, i / 32);
			memcpy(t + p + i, line, 32);
		}
	}
	memcpy(wref, w, size);
	memcpy(dref, d, dsize);
	memcpy(tref, t, tsize);
	crest_t *c = open_store(dir, 64 * MiB);
	crest_region_t h;
	OK(crest_register(c, "weights", w, size, CREST_MEM_HOST, &h));
	OK(crest_register(c, "dups", d, dsize, CREST_MEM_HOST, &h));
	OK(crest_register(c, "text", t, tsize, CREST_MEM_HOST, &h));
	crest_ckpt_t ck;
	struct crest_result res;
	OK(crest_checkpoint(c, &(struct crest_checkpoint_opts){ .tag = "d1" }, &ck));
	OK(crest_wait(c, ck, &res));

	struct restore_sum sum;
	memset(w, 0xa5, size);
	memset(d, 0xa5, dsize);
	memset(t, 0xa5, tsize);
	OK(traced_restore(c, dir, "d1", &sum));
	CHECK(!memcmp(w, wref, size) && !memcmp(d, dref, dsize) && !memcmp(t, tref, tsize),
	      "a region differs after restore");
	/* Every run of weights is read direct; none of dups (a chunk met
	 * twice in each run) or of text (compressed). */
	CHECK(sum.direct == size / 4096, "%llu chunks read direct, not the %zu of weights", sum.direct,
	      size / 4096);
	CHECK(sum.walked >= (dsize + tsize) / 4096 - 3, "only %llu records walked", sum.walked);
	/* and no further: a run that cannot be read direct is walked up to its
	 * last chunk's record, not MISS_MAX records past it */
	CHECK(sum.walked <= (dsize + tsize) / 4096, "%llu records walked: past the runs' ends", sum.walked);

	/* The 700th chunk of weights in the pack: in the middle of a run and
	 * of a direct read, so the walk takes over there. */
	char pack[4200];
	first_pack(dir, pack, sizeof(pack));
	uint64_t off = 0, at = 0;
	CHECK(raw_record(pack, wref, size, 700, &off, &at), "%s holds no 700th raw chunk of weights", pack);
	char want[64];
	snprintf(want, sizeof(want), "offset %llu", (unsigned long long)at);
	/* data (CRC32C), header SHA-256 */
	const uint64_t bad[] = { off + CAS_REC_HEADER + 1234, off + CAS_REC_SHA + 5 };
	const char *check[] = { "CRC32C", "does not match the index" };
	for (int k = 0; k < 2; k++) {
		flip(pack, bad[k]);
		memset(w, 0xa5, size);
		const int rc = traced_restore(c, dir, "d1", &sum);
		const char *m = crest_errmsg();
		printf("direct: byte %llu of %s flipped: %d: %s\n", (unsigned long long)bad[k],
		       strrchr(pack, '/') + 1, rc, m);
		CHECK(rc == -EBADMSG, "restore of a damaged pack returned %d", rc);
		CHECK(strstr(m, res.snapshot) && strstr(m, "weights") && strstr(m, want) && strstr(m, check[k]),
		      "error does not name snapshot %s, weights, %s and %s: %s", res.snapshot, want, check[k], m);
		/* The damaged record was not taken from the direct read. (How
		 * many others were depends on when the error stopped the
		 * other threads: no lower bound.) */
		CHECK(sum.direct < size / 4096, "%llu chunks read direct, the damaged one among them", sum.direct);
		flip(pack, bad[k]);
	}
	memset(w, 0xa5, size);
	OK(traced_restore(c, dir, "d1", &sum));
	CHECK(!memcmp(w, wref, size), "weights differ after the damage was undone");
	CHECK(sum.direct == size / 4096, "%llu chunks read direct after the damage was undone", sum.direct);
	OK(crest_close(c));
	munmap(w, size);
	munmap(d, dsize);
	munmap(t, tsize);
	free(wref);
	free(dref);
	free(tref);
}

/* Restores that cannot walk one run of records: a second snapshot that
 * changed scattered pages (its new chunks lie in another pack, so windows
 * also need chunks found by look-up; its unchanged ones are still read
 * direct), and windows with holes; both snapshots, with one thread and
 * with several, bit-exact. */
static void t_scatter(const char *dir)
{
	const size_t size = 24 * MiB + 4096 * 3;
	uint8_t *r = big(size), *ref1 = malloc(size), *ref2 = malloc(size);
	fill(r, size, 99);
	memset(r + 5 * MiB, 0, 3 * MiB + 4096);   /* a hole across windows */
	memcpy(ref1, r, size);
	for (int t = 0; t < 2; t++) {
		crest_t *c = open_state(dir, t ? 0 : 1, r, size);
		crest_ckpt_t ck;
		struct crest_result res;
		if (t == 0) {
			OK(crest_checkpoint(c, &(struct crest_checkpoint_opts){ .tag = "s1" }, &ck));
			OK(crest_wait(c, ck, &res));
			/* A new writer starts a new pack: the changed chunks are
			 * out of every walk's reach and found by look-up. */
			OK(crest_close(c));
			c = open_state(dir, 1, r, size);
			for (size_t p = 3; p * 4096 < size; p += 37)
				r[p * 4096 + (p % 4000)] ^= 0x5a;   /* scattered pages */
			memcpy(ref2, r, size);
			OK(crest_checkpoint(c, &(struct crest_checkpoint_opts){ .tag = "s2" }, &ck));
			OK(crest_wait(c, ck, &res));
			printf("scatter: second snapshot %llu new bytes of %zu\n", (unsigned long long)res.new_bytes,
			       size);
		}
		memset(r, 0x33, size);
		struct restore_sum sum;
		OK(traced_restore(c, dir, "s2", &sum));
		CHECK(!memcmp(r, ref2, size), "s2 differs after restore (%s threads)", t ? "default" : "1");
		/* s2's unchanged chunks lie where s1 wrote them, its changed
		 * ones' old records between them: the direct reads skip those
		 * and go on, so nearly all of the unchanged are read direct
		 * (all but runs that begin or end on a changed chunk, which
		 * are walked). */
		size_t unchanged = 0;
		for (size_t p = 0; p + 4096 <= size; p += 4096) {
			static const uint8_t zero[4096];
			unchanged += !memcmp(ref1 + p, ref2 + p, 4096) && memcmp(ref2 + p, zero, 4096);
		}
		CHECK(sum.direct >= unchanged * 2 / 3, "s2: %llu chunks read direct of its %zu unchanged",
		      sum.direct, unchanged);
		memset(r, 0x33, size);
		OK(crest_restore(c, "s1", NULL));
		CHECK(!memcmp(r, ref1, size), "s1 differs after restore (%s threads)", t ? "default" : "1");
		OK(crest_close(c));
	}
	munmap(r, size);
	free(ref1);
	free(ref2);
}

/* A later snapshot that changed the first or last chunk of runs (pages
 * 1024k and 1024k + 1023, and some next to them: restore/gpu.c looks runs
 * up by their ends, every RUN_CHUNKS = 1024 chunks from a window's start,
 * and windows start at multiples of the engine's 4 MiB segment) and a
 * random 2% of the others:
 * its restore reads the unchanged chunks direct all the same (run_anchors
 * anchors the run one chunk in), and the changed ones by a walk over where
 * they lie together (skipped_start), not by a look-up each.
 * Random data, changes and thread count from a printed seed
 * (CREST_TEST_SEED replays it); bit-exact either way. */
static void t_ends(const char *dir)
{
	const char *se = getenv("CREST_TEST_SEED");
	const unsigned seed = se ? (unsigned)strtoul(se, NULL, 10) : (unsigned)(time(NULL) ^ getpid());
	printf("ends: seed %u (CREST_TEST_SEED=%u replays it)\n", seed, seed);
	srand(seed);
	/* A fresh store: in one kept from an earlier run, a pack may fill up
	 * within a run of e1's records, and a run split across two packs
	 * is walked and looked up whole (1024 chunks), as it would be in a
	 * store of any age. */
	char cmd[4200];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	CHECK(system(cmd) == 0, "cannot remove %s", dir);
	const size_t pages = 6144, size = pages * 4096;
	uint8_t *r = big(size), *ref = malloc(size);
	fill(r, size, seed);
	const unsigned threads = 1 + (unsigned)(rand() % 4);
	crest_t *c = open_state(dir, threads, r, size);
	crest_ckpt_t ck;
	struct crest_result res;
	OK(crest_checkpoint(c, &(struct crest_checkpoint_opts){ .tag = "e1" }, &ck));
	OK(crest_wait(c, ck, &res));
	OK(crest_close(c));   /* the changes go to a new pack */
	c = open_state(dir, threads, r, size);
	/* Each run's first and last chunk changed; in every other run its
	 * second too, in every third its last but one (so that the anchors
	 * are one or two in, at either end); 2% of the rest at random, but
	 * never the two next to either end: three changed at one end would
	 * leave the run to the walk (restore/gpu.c tries ANCHOR_TRIES = 3). */
	size_t changed = 0;
	for (size_t p = 0; p < pages; p++) {
		const size_t q = p % 1024, k = p / 1024;
		const bool near = q == 1 || q == 2 || q == 1021 || q == 1022;
		if (q == 0 || q == 1023 || (q == 1 && k % 2) || (q == 1022 && k % 3 == 0) ||
		    (!near && rand() % 50 == 0)) {
			r[p * 4096 + (size_t)rand() % 4096] ^= (uint8_t)(1 + rand() % 255);
			changed++;
		}
	}
	memcpy(ref, r, size);
	OK(crest_checkpoint(c, &(struct crest_checkpoint_opts){ .tag = "e2" }, &ck));
	OK(crest_wait(c, ck, &res));
	memset(r, 0x33, size);
	struct restore_sum sum;
	OK(traced_restore(c, dir, "e2", &sum));
	CHECK(!memcmp(r, ref, size), "e2 differs after restore (%u threads)", threads);
	printf("ends: %zu of %zu chunks changed, %u restore threads\n", changed, pages, threads);
	CHECK(sum.direct >= (pages - changed) * 9 / 10, "%llu chunks read direct of the %zu unchanged", sum.direct,
	      pages - changed);
	/* The changed chunks of a run lie together in the new pack: found by
	 * a walk between the first and last of them (two look-ups a run);
	 * only those at the runs' ends are looked up one by one. */
	CHECK(sum.lookups <= changed / 4, "%llu chunks looked up one by one; %zu changed", sum.lookups, changed);
	OK(crest_close(c));
	munmap(r, size);
	free(ref);
}

/* The bytes of dir's packs (its chunk records). */
static uint64_t pack_bytes(const char *dir)
{
	char pd[4300];
	snprintf(pd, sizeof(pd), "%s/packs", dir);
	DIR *d = opendir(pd);
	uint64_t n = 0;
	for (struct dirent *e; d && (e = readdir(d));) {
		char path[4600];
		struct stat st;
		snprintf(path, sizeof(path), "%s/%s", pd, e->d_name);
		if (strstr(e->d_name, ".pack") && stat(path, &st) == 0)
			n += (uint64_t)st.st_size;
	}
	if (d)
		closedir(d);
	return n;
}

/* crest_options.push_to: every snapshot the handle commits is pushed to
 * another store in the background, waited for or not, only what it lacks;
 * both restore there bit-exact under the same ids and tags. push_to the
 * store itself, or no store, is refused at open; a push that fails is
 * crest_close's failure, naming it. */
static void t_push(const char *dir)
{
	const size_t size = 16 * MiB;
	char dst[4200], gone[4200];
	snprintf(dst, sizeof(dst), "%s.push", dir);
	snprintf(gone, sizeof(gone), "%s.gone", dir);
	crest_t *c = open_store(dst, 16 * MiB);   /* libcrest makes the store */
	OK(crest_close(c));
	struct crest_options o;
	crest_options_init(&o);
	o.staging_bytes = 24 * MiB;
	o.flags = CREST_OPEN_NO_GPU;
	o.push_to = dir;
	c = open_store(dir, 16 * MiB);            /* dir exists: the refusal is of push_to alone */
	OK(crest_close(c));
	int rc = crest_open(dir, &o, &c);
	CHECK(rc == -EINVAL && strstr(crest_errmsg(), "is the store itself"), "push_to itself: %d: %s", rc,
	      crest_errmsg());
	o.push_to = gone;
	rc = crest_open(dir, &o, &c);
	CHECK(rc == -EINVAL && strstr(crest_errmsg(), gone), "push_to no store: %d: %s", rc, crest_errmsg());

	uint8_t *r = big(size), *ref1 = big(size), *ref2 = big(size);
	fill(r, size, 77);
	memcpy(ref1, r, size);
	o.push_to = dst;
	OK(crest_open(dir, &o, &c));
	crest_region_t h;
	OK(crest_register(c, "state", r, size, CREST_MEM_HOST, &h));
	crest_ckpt_t ck;
	struct crest_result r1;
	OK(crest_checkpoint(c, &(struct crest_checkpoint_opts){ .tag = "p1" }, &ck));
	OK(crest_wait(c, ck, &r1));
	fill(r + 3 * MiB, MiB, 78);   /* 1 MiB changed */
	memcpy(ref2, r, size);
	OK(crest_checkpoint(c, &(struct crest_checkpoint_opts){ .tag = "p2" }, &ck));
	OK(crest_close(c));           /* p2 never waited for: pushed all the same */
	const uint64_t sent = pack_bytes(dst);
	printf("push: %.1f MiB of packs in the other store after two pushes of a %zu MiB region, 1 MiB changed\n",
	       sent / 1048576.0, size / MiB);
	CHECK(sent >= size && sent <= size + 2 * MiB, "%llu bytes of packs pushed: not one region and the change",
	      (unsigned long long)sent);

	c = open_store(dst, 16 * MiB);
	OK(crest_register(c, "state", r, size, CREST_MEM_HOST, &h));
	memset(r, 0xee, size);
	OK(crest_restore(c, "p1", NULL));
	CHECK(!memcmp(r, ref1, size), "p1 from the other store differs");
	memset(r, 0xee, size);
	char prefix[13];
	snprintf(prefix, sizeof(prefix), "%.12s", r1.snapshot);
	OK(crest_restore(c, prefix, NULL));   /* the same id there */
	CHECK(!memcmp(r, ref1, size), "p1 by its id from the other store differs");
	memset(r, 0xee, size);
	OK(crest_restore(c, "p2", NULL));
	CHECK(!memcmp(r, ref2, size), "p2 from the other store differs");
	OK(crest_close(c));

	/* A push that fails: the other store is gone by the time it runs. */
	c = open_store(gone, 16 * MiB);
	OK(crest_close(c));
	o.push_to = gone;
	OK(crest_open(dir, &o, &c));
	OK(crest_register(c, "state", r, size, CREST_MEM_HOST, &h));
	char cmd[4300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", gone);
	OK(system(cmd) == 0 ? 0 : -EIO);
	OK(crest_checkpoint(c, NULL, &ck));
	OK(crest_wait(c, ck, NULL));
	rc = crest_close(c);
	printf("push: to a store gone meanwhile: crest_close -> %d: %s\n", rc, crest_errmsg());
	CHECK(rc < 0 && strstr(crest_errmsg(), "pushing snapshot") && strstr(crest_errmsg(), gone),
	      "a failed push: crest_close gave %d: %s", rc, crest_errmsg());
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dst);
	OK(system(cmd) == 0 ? 0 : -EIO);
	munmap(r, size);
	munmap(ref1, size);
	munmap(ref2, size);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: test_library roundtrip|dedup|stall|errors|rounds|small|corrupt|direct|scatter|ends|recover|nogpu|push|cli "
			"STORE [CREST CASCTL]\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	const char *t = argv[1], *dir = argv[2];
	char cmd[4200];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s.get' '%s.ref' '%s.trace'", dir, dir, dir, dir);
	if (system(cmd) != 0)
		return 1;
	if (!strcmp(t, "roundtrip"))
		t_roundtrip(dir);
	else if (!strcmp(t, "dedup"))
		t_dedup(dir);
	else if (!strcmp(t, "stall"))
		t_stall(dir);
	else if (!strcmp(t, "rounds"))
		t_rounds(dir);
	else if (!strcmp(t, "small"))
		t_small(dir);
	else if (!strcmp(t, "errors"))
		t_errors(dir);
	else if (!strcmp(t, "corrupt"))
		t_corrupt(dir);
	else if (!strcmp(t, "direct"))
		t_direct(dir);
	else if (!strcmp(t, "scatter"))
		t_scatter(dir);
	else if (!strcmp(t, "ends"))
		t_ends(dir);
	else if (!strcmp(t, "recover"))
		t_recover(dir);
	else if (!strcmp(t, "nogpu"))
		t_nogpu(dir);
	else if (!strcmp(t, "push"))
		t_push(dir);
	else if (!strcmp(t, "cli") && argc >= 5)
		t_cli(dir, argv[3], argv[4]);
	else {
		fprintf(stderr, "test_library: unknown case %s\n", t);
		return 2;
	}
	if (failures) {
		fprintf(stderr, "%s: %d check(s) failed\n", t, failures);
		return 1;
	}
	if (system(cmd) != 0)
		return 1;
	printf("%s: ok\n", t);
	return 0;
}
