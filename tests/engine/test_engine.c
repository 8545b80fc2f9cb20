/*
 * test_engine.c - the ingest engine driven directly, with faults injected.
 *
 *   test_engine CASE STORE_DIR [SEED]
 *
 * Cases:
 *   deadlock  many workers, many snapshots whose segments hold the same few
 *             chunks in random orders, and a writer that has failed: every
 *             batch is dropped, and the workers that waited for its chunks
 *             store them themselves. No two of them may end up waiting for
 *             each other: each round must finish within a time bound.
 *
 * Exits 0 on success, 1 on failure (a hang included: waits are bounded).
 * SEED (else $CREST_TEST_SEED, else the clock) is printed; pass it to replay.
 */
#include "cas/cas.h"
#include "engine/engine.h"
#include "util/err.h"
#include "tests/check.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHUNK 4096u
#define SEG (8 * CHUNK)          /* the engine's segment: 8 chunks */

static uint64_t rng_state;

static uint64_t rng(void)
{
	uint64_t x = rng_state;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	rng_state = x;
	return x * 0x2545f4914f6cdd1dull;
}

static void fill(uint8_t *p, size_t n)
{
	for (size_t i = 0; i + 8 <= n; i += 8) {
		uint64_t v = rng();
		memcpy(p + i, &v, 8);
	}
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static struct cas_store *fresh_store(const char *dir)
{
	char cmd[4200];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0) {
		fprintf(stderr, "FAIL: cannot clear %s\n", dir);
		exit(1);
	}
	struct cas_store *s;
	OK(cas_open(dir, CAS_WRITE, &s));
	return s;
}

static void opts(struct engine_opts *o, unsigned workers)
{
	engine_opts_default(o);
	o->workers = workers;
	o->segment_bytes = SEG;
	dedup_params_init(&o->memory_chunking, DEDUP_FIXED, CHUNK);
	dedup_params_init(&o->file_chunking, DEDUP_FIXED, CHUNK);
}

/* One memory stream of len bytes at p. */
/* Waits for s until deadline; a snapshot still not done then means the
 * engine hung: report and exit (its threads cannot be stopped). */
static void wait_bounded(struct engine_snap *s, uint64_t deadline, const char *what, uint64_t seed)
{
	uint64_t now = now_ns();
	if (!engine_snapshot_timedwait(s, deadline > now ? deadline - now : 0)) {
		fprintf(stderr, "FAIL: %s did not finish in time: the engine hung (seed %" PRIu64 ")\n",
			what, seed);
		fflush(stderr);
		_exit(1);
	}
}

/* See the top of the file. A probe snapshot makes the writer fail (its
 * first write is the injected fault) while the round's snapshots, begun
 * before it finishes, keep the engine from recovering: every batch they
 * queue is then refused and dropped. */
static void t_deadlock(const char *dir, uint64_t seed)
{
	enum { ROUNDS = 40, NSNAP = 48, NSEG = 8, NBLOCKS = 8 };
	const uint64_t budget_ns = 10ull * 1000000000u;   /* per round; a round takes milliseconds */
	struct cas_store *store = fresh_store(dir);
	setenv("CREST_FAULT_WRITE", "1", 1);
	struct engine_opts o;
	opts(&o, 16);
	uint8_t *blocks = malloc(NBLOCKS * CHUNK), *probe = malloc(SEG);
	uint8_t *buf = malloc((size_t)NSNAP * NSEG * SEG);
	if (!blocks || !probe || !buf) {
		fprintf(stderr, "FAIL: out of memory\n");
		exit(1);
	}
	unsigned failed = 0;
	const uint64_t t0 = now_ns();
	for (unsigned r = 0; r < ROUNDS; r++) {
		fill(blocks, NBLOCKS * CHUNK);   /* new chunks every round */
		fill(probe, SEG);
		for (size_t g = 0; g < (size_t)NSNAP * NSEG; g++) {
			unsigned perm[NBLOCKS];
			for (unsigned i = 0; i < NBLOCKS; i++)
				perm[i] = i;
			for (unsigned i = NBLOCKS - 1; i > 0; i--) {
				unsigned j = (unsigned)(rng() % (i + 1)), t = perm[i];
				perm[i] = perm[j];
				perm[j] = t;
			}
			for (unsigned i = 0; i < NBLOCKS; i++)
				memcpy(buf + g * SEG + (size_t)i * CHUNK, blocks + (size_t)perm[i] * CHUNK, CHUNK);
		}
		struct engine *e;
		OK(engine_open(store, &o, &e));
		struct engine_snap *p, *s[NSNAP];
		struct engine_stream *st[NSNAP], *pst;
		/* The probe is begun first and given its data last: the snapshots
		 * begun behind it are in the commit queue when its write fails,
		 * so the engine cannot recover (it does once the queue is empty)
		 * before they are done, and every one of them must fail. */
		OK(engine_snapshot_begin(e, "test", &p));
		OK(engine_stream_open(p, "probe", CAS_STREAM_REGION, true, &pst));
		for (unsigned i = 0; i < NSNAP; i++) {
			OK(engine_snapshot_begin(e, "test", &s[i]));
			OK(engine_stream_open(s[i], "mem", CAS_STREAM_REGION, true, &st[i]));
		}
		OK(engine_stream_add_memory(pst, probe, SEG, NULL, NULL));
		OK(engine_stream_close(pst));
		OK(engine_snapshot_seal(p));
		const uint64_t deadline = now_ns() + budget_ns;
		wait_bounded(p, deadline, "the probe snapshot", seed);
		int rc = engine_snapshot_wait(p, NULL);
		CHECK(rc == -EIO, "round %u: the probe snapshot returned %d (%s), expected the injected -EIO",
		      r, rc, crest_errmsg());
		/* Segment g of every snapshot before segment g + 1 of any: the
		 * snapshots' segments are in flight together. */
		for (unsigned g = 0; g < NSEG; g++)
			for (unsigned i = 0; i < NSNAP; i++)
				OK(engine_stream_add_memory(st[i], buf + ((size_t)i * NSEG + g) * SEG, SEG, NULL, NULL));
		for (unsigned i = 0; i < NSNAP; i++) {
			OK(engine_stream_close(st[i]));
			OK(engine_snapshot_seal(s[i]));
		}
		for (unsigned i = 0; i < NSNAP; i++) {
			char what[64];
			snprintf(what, sizeof(what), "round %u, snapshot %u", r, i);
			wait_bounded(s[i], deadline, what, seed);
			rc = engine_snapshot_wait(s[i], NULL);
			/* The writer failed before any of their chunks was queued:
			 * none may commit. */
			CHECK(rc < 0, "round %u: snapshot %u committed although the writer had failed", r, i);
			failed += rc < 0;
		}
		engine_close(e);
	}
	printf("deadlock: %u rounds of %u snapshots x %u segments, 16 workers: %u failed as they must, "
	       "none hung (%.2f s)\n", ROUNDS, NSNAP, NSEG, failed, (now_ns() - t0) / 1e9);
	free(blocks);
	free(probe);
	free(buf);
	cas_close(store);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: test_engine CASE STORE_DIR [SEED]\n");
		return 2;
	}
	const char *env = getenv("CREST_TEST_SEED");
	uint64_t seed = argc > 3 ? strtoull(argv[3], NULL, 0)
			: env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	printf("%s: seed %" PRIu64 " (replay: test_engine %s STORE_DIR %" PRIu64 ")\n", argv[1], seed, argv[1],
	       seed);
	rng_state = seed * 0x9e3779b97f4a7c15ull + 1;
	if (!rng_state)
		rng_state = 1;
	if (!strcmp(argv[1], "deadlock"))
		t_deadlock(argv[2], seed);
	else {
		fprintf(stderr, "unknown case %s\n", argv[1]);
		return 2;
	}
	if (failures)
		fprintf(stderr, "%d check(s) failed\n", failures);
	return failures ? 1 : 0;
}
