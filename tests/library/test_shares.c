/*
 * test_shares.c - capture_regions' device path on a machine without a GPU:
 * a fake CUDA driver whose "device memory" is host memory, so that small
 * regions of several contexts sharing staging slices (capture/regions.c,
 * copy_small) run here.
 *
 *   test_shares STORE [SEED]
 *
 * The fake driver keeps what a real one would check and would do late:
 *  - contexts: a stream, an event and a region's memory belong to the
 *    context current when they were made; a copy or record with another
 *    context current fails, as does a copy from memory of another context.
 *  - asynchrony: a device-to-host copy is only queued on its stream; it
 *    lands when the stream is synchronized, or when an event recorded after
 *    it is (an event stands for its latest record, as cuEventRecord's
 *    does). Staging read before its copy landed holds stale bytes.
 *  - faults: a drawn call of the copy or of the event synchronization
 *    fails, so capture_regions' failure paths run.
 *
 * Cases, each through staging pools of 2 to 6 slices, with regions drawn
 * from the seed: host and device regions of up to four contexts, many of
 * them small (they share slices), some of a quarter slice or several
 * slices; every snapshot is restored stream by stream and compared. A pool
 * as small as the count of contexts with small regions must not hang the
 * copy (each context's open share holds a slice). After every capture,
 * failed or not, every slice must come back to the pool. The seed is
 * printed; CREST_TEST_SEED or argv[2] replays it.
 */
#include "capture/regions.h"
#include "cas/cas.h"
#include "cas/manifest.h"
#include "engine/engine.h"
#include "gpu/pool.h"
#include "restore/restore.h"
#include "util/err.h"
#include "tests/check.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)
#define SLICE ((size_t)4 << 20)
#define MAXCTX 4
#define MAXREG 64

/* ---- the fake driver ---- */

struct fcopy {
	void *dst;
	const void *src;
	size_t n;
};

struct fstream {
	CUcontext ctx;
	struct fcopy *q;
	size_t n, done, cap;
};

struct fevent {
	CUcontext ctx;
	struct fstream *s;   /* its latest record: s's copies up to at */
	size_t at;
};

struct falloc {
	const uint8_t *p;
	size_t n;
	CUcontext ctx;
};

static CUcontext cur;
static struct falloc allocs[MAXREG];
static size_t nallocs;
static long fail_at, calls;   /* the call that fails; 0: none */
static unsigned failed;       /* captures that failed as injected */

static bool fault(void)
{
	return fail_at && ++calls == fail_at;
}

static void run_to(struct fstream *s, size_t at)
{
	for (; s->done < at; s->done++)
		memcpy(s->q[s->done].dst, s->q[s->done].src, s->q[s->done].n);
}

static CUresult f_ctxset(CUcontext c)
{
	cur = c;
	return CUDA_SUCCESS;
}

static CUresult f_ctxget(CUcontext *c)
{
	*c = cur;
	return CUDA_SUCCESS;
}

static CUresult f_streamcreate(CUstream *s, unsigned flags)
{
	(void)flags;
	struct fstream *x = calloc(1, sizeof(*x));
	if (!x)
		return CUDA_ERROR_OUT_OF_MEMORY;
	x->ctx = cur;
	*s = (CUstream)x;
	return CUDA_SUCCESS;
}

static CUresult f_streamsync(CUstream s)
{
	struct fstream *x = (struct fstream *)s;
	if (x)
		run_to(x, x->n);
	return CUDA_SUCCESS;
}

static CUresult f_streamdestroy(CUstream s)
{
	struct fstream *x = (struct fstream *)s;
	if (x) {
		run_to(x, x->n);
		free(x->q);
		free(x);
	}
	return CUDA_SUCCESS;
}

static CUresult f_eventcreate(CUevent *e, unsigned flags)
{
	(void)flags;
	struct fevent *x = calloc(1, sizeof(*x));
	if (!x)
		return CUDA_ERROR_OUT_OF_MEMORY;
	x->ctx = cur;
	*e = (CUevent)x;
	return CUDA_SUCCESS;
}

static CUresult f_eventrecord(CUevent e, CUstream s)
{
	struct fevent *x = (struct fevent *)e;
	struct fstream *y = (struct fstream *)s;
	if (x->ctx != cur || !y || y->ctx != cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	x->s = y;
	x->at = y->n;
	return CUDA_SUCCESS;
}

static CUresult f_eventsync(CUevent e)
{
	struct fevent *x = (struct fevent *)e;
	if (fault())
		return CUDA_ERROR_UNKNOWN;
	if (x->s)
		run_to(x->s, x->at);
	return CUDA_SUCCESS;
}

static CUresult f_eventdestroy(CUevent e)
{
	free(e);
	return CUDA_SUCCESS;
}

static CUresult f_dtoh(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
	struct fstream *y = (struct fstream *)s;
	if (fault())
		return CUDA_ERROR_UNKNOWN;
	if (!y || y->ctx != cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	const uint8_t *p = (const uint8_t *)(uintptr_t)src;
	bool mine = false;
	for (size_t i = 0; i < nallocs && !mine; i++)
		mine = p >= allocs[i].p && p + n <= allocs[i].p + allocs[i].n && allocs[i].ctx == cur;
	if (!mine)
		return CUDA_ERROR_INVALID_VALUE;
	if (y->n == y->cap) {
		y->cap = y->cap ? 2 * y->cap : 16;
		y->q = realloc(y->q, y->cap * sizeof(*y->q));
		if (!y->q)
			return CUDA_ERROR_OUT_OF_MEMORY;
	}
	y->q[y->n++] = (struct fcopy){ .dst = dst, .src = p, .n = n };
	return CUDA_SUCCESS;
}

static CUresult f_ctxsync(void)
{
	return CUDA_SUCCESS;
}

static CUresult f_errstr(CUresult r, const char **s)
{
	*s = r == CUDA_ERROR_UNKNOWN ? "fault injected" : "fake driver error";
	return CUDA_SUCCESS;
}

static CUresult f_errname(CUresult r, const char **s)
{
	*s = r == CUDA_ERROR_UNKNOWN ? "CUDA_ERROR_UNKNOWN" : "CUDA_ERROR_FAKE";
	return CUDA_SUCCESS;
}

static const struct cudrv fake = {
	.GetErrorString = f_errstr,
	.GetErrorName = f_errname,
	.CtxSetCurrent = f_ctxset,
	.CtxGetCurrent = f_ctxget,
	.CtxSynchronize = f_ctxsync,
	.StreamCreate = f_streamcreate,
	.StreamDestroy = f_streamdestroy,
	.StreamSynchronize = f_streamsync,
	.EventCreate = f_eventcreate,
	.EventRecord = f_eventrecord,
	.EventSynchronize = f_eventsync,
	.EventDestroy = f_eventdestroy,
	.MemcpyDtoHAsync = f_dtoh,
};

/* ---- the cases ---- */

/* A hang is a failure: the copy waiting for a slice that never comes. */
static void *watchdog(void *arg)
{
	(void)arg;
	sleep(60);
	fprintf(stderr, "FAIL: still running after 60 s: a capture waits for a staging slice that never comes\n");
	_exit(1);
}

/* Every slice of the pool back, within a few seconds (the engine's
 * workers give the last ones back after the snapshot is done). */
static bool all_back(struct pool *pool)
{
	const unsigned n = pool_nslices(pool);
	struct pool_slice *sl[64];
	for (int tries = 0; tries < 500; tries++) {
		unsigned got = 0;
		while (got < n && (sl[got] = pool_try_take(pool)))
			got++;
		for (unsigned i = 0; i < got; i++)
			pool_give(sl[i]);
		if (got == n)
			return true;
		usleep(10000);
	}
	return false;
}

struct model {
	size_t n;
	struct capture_region r[MAXREG];
	uint8_t *mem[MAXREG];
	char names[MAXREG][32];
};

static void model_free(struct model *m)
{
	for (size_t i = 0; i < m->n; i++)
		free(m->mem[i]);
	nallocs = 0;
	m->n = 0;
}

static void add_region(struct model *m, size_t size, int ctx, uint64_t *st)
{
	const size_t i = m->n++;
	m->mem[i] = malloc(size ? size : 1);
	if (!m->mem[i]) {
		fprintf(stderr, "test_shares: out of memory\n");
		exit(1);
	}
	check_fill64(m->mem[i], size, st);
	snprintf(m->names[i], sizeof(m->names[i]), "%s/%02zu", ctx ? "dev" : "host", i);
	m->r[i] = (struct capture_region){ .name = m->names[i], .ptr = m->mem[i], .size = size, .device = ctx != 0,
					   .ctx = ctx ? (CUcontext)(uintptr_t)ctx : NULL };
	if (ctx)
		allocs[nallocs++] = (struct falloc){ .p = m->mem[i], .n = size, .ctx = (CUcontext)(uintptr_t)ctx };
}

/* One capture of m into a snapshot; then every stream restored and
 * compared. fail: a fault is injected (the capture may fail). */
static void one(struct cas_store *store, struct engine *e, struct pool *pool, unsigned streams,
		const struct model *m, const char *what, bool fail)
{
	struct capture_copier *cp;
	OK(capture_copier_open(&fake, pool, streams, false, &cp));
	struct engine_snap *snap;
	OK(engine_snapshot_begin(e, "library", &snap));
	struct capture_stats cst;
	calls = 0;
	int rc = capture_regions(cp, snap, m->r, m->n, 1, &cst);
	fail_at = 0;
	if (rc < 0) {
		CHECK(fail, "%s: capture_regions -> %d: %s", what, rc, crest_errmsg());
		failed += fail;
		engine_snapshot_abort(snap);
	} else {
		OK(engine_snapshot_seal(snap));
		struct engine_result res;
		rc = engine_snapshot_wait(snap, &res);
		CHECK(rc == 0 || fail, "%s: the snapshot -> %d: %s", what, rc, crest_errmsg());
		struct cas_manifest *man = NULL;
		if (rc == 0)
			OK(cas_manifest_load(store, res.id, &man));
		for (size_t i = 0; man && i < m->n; i++) {
			const struct cas_stream *st = cas_manifest_find(man, m->r[i].name);
			CHECK(st && st->size == m->r[i].size, "%s: stream %s missing or of the wrong size", what,
			      m->r[i].name);
			if (!st || st->size != m->r[i].size)
				continue;
			uint8_t *back = malloc(m->r[i].size + 1);
			memset(back, 0x5A, m->r[i].size);
			const struct restore_ctx rx = { .store = store, .snapshot = what, .threads = 2 };
			OK(restore_stream_to_memory(&rx, st, back, m->r[i].size));
			CHECK(!memcmp(back, m->mem[i], m->r[i].size), "%s: region %s (%zu bytes, %s) differs at byte %zu",
			      what, m->r[i].name, m->r[i].size, m->r[i].device ? "device" : "host",
			      first_diff(back, m->mem[i], m->r[i].size));
			free(back);
		}
		cas_manifest_free(man);
	}
	CHECK(all_back(pool), "%s: a staging slice never came back to the pool", what);
	capture_copier_close(cp);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2) {
		fprintf(stderr, "usage: test_shares STORE [SEED]\n");
		return 2;
	}
	const uint64_t seed = check_seed(argc, argv, 2) % 1000000007ull;
	uint64_t st = check_state(seed);
	printf("test_shares: seed %llu (CREST_TEST_SEED=%llu replays it)\n", (unsigned long long)seed,
	       (unsigned long long)seed);
	pthread_t wd;
	pthread_create(&wd, NULL, watchdog, NULL);
	pthread_detach(wd);

	char cmd[4200];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", argv[1]);
	if (system(cmd) != 0)
		return 1;
	struct cas_store *store;
	OK(cas_init(argv[1]));
	OK(cas_open(argv[1], CAS_WRITE, &store));
	struct engine_opts o;
	engine_opts_default(&o);
	o.workers = 2;
	struct engine *e;
	OK(engine_open(store, &o, &e));

	/* 1. Fixed: a pool of two slices, a small host region and a small
	 * device one (each opens a share: both slices), then regions that
	 * need slices of their own. */
	{
		struct pool *pool;
		OK(pool_open(NULL, 2 * SLICE, SLICE, &pool));
		struct model m = { 0 };
		add_region(&m, 10000, 0, &st);
		add_region(&m, 10000, 1, &st);
		add_region(&m, SLICE + 12345, 0, &st);
		add_region(&m, SLICE + 777, 1, &st);
		add_region(&m, 1, 1, &st);
		printf("test_shares: two slices, small regions of host memory and of one context, then larger ones\n");
		one(store, e, pool, 1, &m, "two-slices", false);
		model_free(&m);
		pool_close(pool);
	}

	/* 2. Drawn: pools of 2 to 6 slices, up to four contexts, many small
	 * regions, some of a quarter slice, some of one to two slices. */
	for (int round = 0; round < 12; round++) {
		const unsigned nsl = 2 + (unsigned)(check_rnd(&st) % 5), nctx = 1 + (unsigned)(check_rnd(&st) % MAXCTX);
		const unsigned streams = 1 + (unsigned)(check_rnd(&st) % 3);
		struct pool *pool;
		OK(pool_open(NULL, nsl * SLICE, SLICE, &pool));
		struct model m = { 0 };
		const size_t nreg = 4 + check_rnd(&st) % 40;
		for (size_t i = 0; i < nreg; i++) {
			const int ctx = (int)(check_rnd(&st) % (nctx + 1));   /* 0: host */
			const unsigned kind = (unsigned)(check_rnd(&st) % 10);
			const size_t size = kind < 6 ? 1 + check_rnd(&st) % (64 * 1024)
					    : kind < 8 ? SLICE / 4 - check_rnd(&st) % 2 * (check_rnd(&st) % 4096)
						       : SLICE + check_rnd(&st) % SLICE;
			add_region(&m, size, ctx, &st);
		}
		char what[64];
		snprintf(what, sizeof(what), "round %d (%u slices, %u contexts, %zu regions)", round, nsl, nctx, nreg);
		one(store, e, pool, streams, &m, what, false);
		/* The same with a fault: the copy fails part way, and every
		 * slice must still come back. */
		fail_at = 1 + (long)(check_rnd(&st) % (2 * nreg));
		snprintf(what, sizeof(what), "round %d with a fault at call %ld", round, fail_at);
		one(store, e, pool, streams, &m, what, true);
		model_free(&m);
		pool_close(pool);
	}
	engine_close(e);
	cas_close(store);
	if (failures) {
		printf("test_shares: FAILED: %d; seed %llu\n", failures, (unsigned long long)seed);
		return 1;
	}
	printf("test_shares: ok (%u of 12 captures with a fault failed, every slice back)\n", failed);
	return 0;
}
