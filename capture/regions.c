/*
 * regions.c - library capture: regions into an engine snapshot through the
 * staging pool; see regions.h.
 */
#include "capture/regions.h"

#include "cas/cas.h"
#include "cas/history.h"
#include "gpu/gpusha.h"
#include "gpu/hostcache.h"
#include "util/err.h"
#include "util/progress.h"
#include "util/sha256.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The most threads capture_hold copies with. */
#define HOLD_THREADS 8
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define MAX_CTX 16

/* Streams and per-slice events of one CUDA context, and its GPU hashing:
 * the kernels, the stream they run on, and the buffers the changed chunks
 * are packed into (made on first use). */
struct ctxset {
	CUcontext ctx;
	CUstream *s;
	unsigned ns;
	CUevent *ev;                  /* ev[slice index] */
	CUevent *ev_ids;              /* ev_ids[slice index]: its ids copied, on hs */
	struct gpusha *sha;           /* NULL: not loaded yet, or sha_off */
	bool sha_off;                 /* the kernels cannot be had here */
	CUstream hs;                  /* hashing, and the packed copies */
	CUdeviceptr pack, pack_dig;   /* a slice of packed chunks, and their digests */
	uint32_t *hcount;             /* pinned: the changed chunks' count */
	bool hashing;                 /* a hash of this checkpoint may still run on hs */
	struct share *open;           /* the slice small regions are filling (copy_small) */
};

/* A slice that small regions share (copy_small): each piece the engine has
 * holds a reference, and so does the copy while it may add more; the last
 * one gives the slice back. A slice per region would leave a model of many
 * small tensors (biases, norms, their optimizer moments) short of slices:
 * each of 63 tensors of 16 KiB took a 64 MiB slice, and the copy waited for
 * the ingest to give slices back (ddp_bench, bench/RESULTS.md). The pieces
 * of one share are copied on one stream, so its per-slice event, recorded
 * after each, is passed only once every earlier piece is copied too. */
struct share {
	struct pool_slice *sl;
	atomic_uint refs;
	size_t used;                  /* bytes of the slice taken (the copy's alone) */
	CUstream stream;              /* a device share's copies (the copy's alone) */
};

/* A slice on its way to the host cache as well as to the engine: what the
 * release callback writes where (see cache_release). */
struct cache_put {
	struct pool_slice *sl;
	atomic_uint *writes;          /* the copier's count, less one when done */
	uint8_t *dst;                 /* whole: the slice's place; sparse: the region's */
	size_t len;                   /* whole: bytes */
	uint32_t cnt, chunk;          /* sparse: chunks in the slice, and their size */
	uint64_t base, size;          /* sparse: idx[] counts from chunk base; region bytes */
};

struct capture_copier {
	const struct cudrv *d;
	struct pool *pool;
	struct cache_put *puts;       /* puts[slice index] */
	struct share *shares;         /* shares[slice index] */
	atomic_uint cache_writes;     /* slices handed to the engine, not yet in the cache */
	unsigned copy_streams;
	bool gpu_hash;
	bool wide;                    /* changed chunks found by the wide hash (gpusha.h) */
	struct ctxset ctxs[MAX_CTX];
	unsigned nctx;
	char sha_why[256];            /* why GPU hashing is off, once it is */
};

/* See regions.h. cmp[prev], when prev_ok, holds the digests of snapshot
 * prev_id that a checkpoint compares its own with; a checkpoint always
 * hashes into the other one, cmp[1 - prev] (tagged token), so the parent's
 * digests survive any number of checkpoints that fail or are never
 * committed as parent. Committing the token makes that buffer prev.
 *
 * When wide, cmp holds wide digests (gpusha_wide, under gpusha key id key)
 * and sha the SHA-256 ids of the checkpoint's chunks, all of them for a
 * whole copy, only the changed ones for a sparse one; the ids of the others
 * are the parent's, from its manifest. Otherwise cmp holds SHA-256 ids and
 * sha is 0: the ids are cmp[1 - prev]. */
struct capture_digests {
	CUcontext ctx;
	const uint8_t *ptr;
	size_t size;
	uint32_t chunk;
	uint64_t n;                   /* chunks */
	bool wide;
	CUdeviceptr cmp[2];           /* n * 32 bytes each */
	CUdeviceptr sha;              /* n * 32 bytes when wide; else 0 */
	CUdeviceptr list;             /* n + 1 uint32: changed chunks, then their count */
	int prev;                     /* cmp[prev]: snapshot prev_id's, when prev_ok */
	bool prev_ok;
	uint64_t key;                 /* wide: the key id cmp[prev] was made under */
	uint64_t key_next;            /* and cmp[1 - prev], once hashed */
	uint8_t prev_id[32];
	uint64_t token;               /* 0: cmp[1 - prev] belongs to no checkpoint */
};

/* Where the SHA-256 ids of the checkpoint that hashes into cmp[nw] go. */
static CUdeviceptr ids_buf(const struct capture_digests *g, int nw)
{
	return g->wide ? g->sha : g->cmp[nw];
}

/* A region copied as changed chunks only: its appends so far. */
struct sparse {
	struct engine_stream *st;
	uint64_t size, nch;
	uint32_t chunk;
	uint64_t done;                /* chunks appended */
};

/* A copied slice not yet with the engine. */
struct copied {
	struct pool_slice *sl;        /* NULL: a sparse region's last append */
	struct share *sh;             /* sl is shared: the piece at off, its ids at ids_off */
	size_t off, ids_off;
	struct engine_stream *st;
	size_t len;
	CUevent ev;                   /* NULL: a host copy, already done */
	struct sparse *sp;            /* packed changed chunks of a sparse region */
	uint32_t cnt;                 /* how many */
	uint8_t *cache;               /* whole: the slice's place in the host cache;
				       * sparse: the region's; NULL: none */
	CUevent ev_ids;               /* whole, hashed on the GPU: the slice's ids are
				       * in sl->ids once this is done; NULL: no ids */
};

/* One capture_regions call: the FIFO of copied slices. */
struct fifo {
	struct capture_copier *cp;
	struct share *open_host;      /* host memory's share being filled */
	struct copied *q;
	size_t head, n, cap;
	uint64_t wait_ns, copied;
	unsigned rounds, next_stream, hashed, sparse, whole_ids, sparse_wide;
};

int capture_copier_open(const struct cudrv *d, struct pool *pool, unsigned copy_streams, bool gpu_hash,
			struct capture_copier **out)
{
	struct capture_copier *cp = calloc(1, sizeof(*cp));
	if (!cp)
		return crest_errf(-ENOMEM, "allocating the copier");
	cp->d = d;
	cp->pool = pool;
	cp->copy_streams = copy_streams ? copy_streams : 1;
	cp->gpu_hash = gpu_hash && d;
	/* CREST_GPU_WIDE=0: changed chunks found by comparing SHA-256 ids, as
	 * before the wide hash (to measure one beside the other). */
	const char *e = getenv("CREST_GPU_WIDE");
	cp->wide = !e || strcmp(e, "0");
	cp->puts = calloc(pool_nslices(pool), sizeof(*cp->puts));
	cp->shares = calloc(pool_nslices(pool), sizeof(*cp->shares));
	if (!cp->puts || !cp->shares) {
		free(cp->puts);
		free(cp->shares);
		free(cp);
		return crest_errf(-ENOMEM, "allocating the copier");
	}
	*out = cp;
	return 0;
}

static int ctxset_get(struct capture_copier *cp, CUcontext ctx, struct ctxset **out)
{
	for (unsigned i = 0; i < cp->nctx; i++)
		if (cp->ctxs[i].ctx == ctx) {
			*out = &cp->ctxs[i];
			return 0;
		}
	if (cp->nctx == MAX_CTX)
		return crest_errx(-ENOSPC, "device regions in more than %d CUDA contexts", MAX_CTX);
	const struct cudrv *d = cp->d;
	struct ctxset *cs = &cp->ctxs[cp->nctx];
	memset(cs, 0, sizeof(*cs));
	cs->ctx = ctx;
	cs->ns = cp->copy_streams;
	cs->s = calloc(cs->ns, sizeof(*cs->s));
	cs->ev = calloc(pool_nslices(cp->pool), sizeof(*cs->ev));
	cs->ev_ids = calloc(pool_nslices(cp->pool), sizeof(*cs->ev_ids));
	if (!cs->s || !cs->ev || !cs->ev_ids) {
		free(cs->s);
		free(cs->ev);
		free(cs->ev_ids);
		return crest_errf(-ENOMEM, "allocating copy streams");
	}
	cp->nctx++;   /* counted now: close frees whatever was created */
	int rc = cudrv_check(d, d->CtxSetCurrent(ctx), "entering a region's context (cuCtxSetCurrent)");
	for (unsigned i = 0; rc == 0 && i < cs->ns; i++)
		rc = cudrv_check(d, d->StreamCreate(&cs->s[i], CU_STREAM_NON_BLOCKING),
				 "creating a copy stream (cuStreamCreate)");
	for (unsigned i = 0; rc == 0 && i < pool_nslices(cp->pool); i++) {
		rc = cudrv_check(d, d->EventCreate(&cs->ev[i], CU_EVENT_DISABLE_TIMING),
				 "creating a copy event (cuEventCreate)");
		if (rc == 0)
			rc = cudrv_check(d, d->EventCreate(&cs->ev_ids[i], CU_EVENT_DISABLE_TIMING),
					 "creating a copy event (cuEventCreate)");
	}
	*out = cs;
	return rc;
}

static void ctxset_free(const struct cudrv *d, struct ctxset *cs, unsigned nev)
{
	if (d && d->CtxSetCurrent(cs->ctx) == CUDA_SUCCESS) {
		if (cs->hs) {
			d->StreamSynchronize(cs->hs);
			d->StreamDestroy(cs->hs);
		}
		if (cs->pack)
			d->MemFree(cs->pack);
		if (cs->pack_dig)
			d->MemFree(cs->pack_dig);
		if (cs->hcount)
			d->MemFreeHost(cs->hcount);
		gpusha_close(cs->sha);
		for (unsigned i = 0; i < cs->ns; i++)
			if (cs->s[i]) {
				d->StreamSynchronize(cs->s[i]);
				d->StreamDestroy(cs->s[i]);
			}
		for (unsigned i = 0; i < nev; i++) {
			if (cs->ev[i])
				d->EventDestroy(cs->ev[i]);
			if (cs->ev_ids[i])
				d->EventDestroy(cs->ev_ids[i]);
		}
	}
	free(cs->s);
	free(cs->ev);
	free(cs->ev_ids);
}

void capture_copier_close(struct capture_copier *cp)
{
	if (!cp)
		return;
	for (unsigned i = 0; i < cp->nctx; i++)
		ctxset_free(cp->d, &cp->ctxs[i], cp->pool ? pool_nslices(cp->pool) : 0);
	free(cp->puts);
	free(cp->shares);
	free(cp);
}

/* Allocates the cache's pages under [p, p + n): false when they cannot be
 * had (its tmpfs is full). A plain store into such a page of a shared
 * mapping is a SIGBUS, which would end the job; MADV_POPULATE_WRITE
 * (Linux 5.14, hostcache_populate) fails instead. Where the kernel lacks
 * it the cache is not written at all, and restores come from the store. */
static bool cache_room(uint8_t *p, size_t n)
{
	return hostcache_populate(p, n, true) == 0;
}

/* The engine is done with a slice: its bytes into the host cache, then the
 * slice back to the pool. Runs in an engine worker, so the copy costs the
 * job no stall; what a crash or a failed ingest leaves half-written there
 * is found by the restore's check (gpu/hostcache.h). */
static void cache_release(void *arg)
{
	const struct cache_put *c = arg;
	const uint8_t *p = c->sl->p;
	if (!c->cnt) {
		if (cache_room(c->dst, c->len))
			memcpy(c->dst, p, c->len);
	} else {
		const uint32_t *idx = (const uint32_t *)(p + (size_t)c->cnt * ((size_t)c->chunk + 32));
		for (uint32_t j = 0; j < c->cnt; j++) {
			const uint64_t at = (c->base + idx[j]) * c->chunk;
			const uint64_t n = c->size - at < c->chunk ? c->size - at : c->chunk;
			if (cache_room(c->dst + at, n))
				memcpy(c->dst + at, p + (size_t)j * c->chunk, n);
		}
	}
	atomic_uint *writes = c->writes;
	pool_give(c->sl);   /* from here c may be another slice's */
	atomic_fetch_sub_explicit(writes, 1, memory_order_release);
}

/* Drops one reference to a shared slice: the last gives it back. An engine
 * release callback (arg: the struct share), and the copy's own drop. */
static void share_put(void *arg)
{
	struct share *sh = arg;
	if (atomic_fetch_sub_explicit(&sh->refs, 1, memory_order_acq_rel) == 1)
		pool_give(sh->sl);
}

/* A copied piece's slice given up (a failure before the engine had it). */
static void copied_drop(const struct copied *x)
{
	if (x->sh)
		share_put(x->sh);
	else if (x->sl)
		pool_give(x->sl);
}

/* The release callback and its argument for slice x: through the host
 * cache when x has a place there. */
static void release_for(struct capture_copier *cp, const struct copied *x, uint64_t base,
			void (**rel)(void *), void **arg)
{
	if (x->sh) {   /* never with a cache place: see copy_small */
		*rel = share_put;
		*arg = x->sh;
		return;
	}
	if (!x->cache) {
		*rel = pool_release_cb;
		*arg = x->sl;
		return;
	}
	struct cache_put *c = &cp->puts[x->sl->idx];
	*c = (struct cache_put){ .sl = x->sl, .writes = &cp->cache_writes, .dst = x->cache, .len = x->len };
	if (x->sp)
		*c = (struct cache_put){ .sl = x->sl, .writes = &cp->cache_writes, .dst = x->cache, .cnt = x->cnt,
					 .chunk = x->sp->chunk, .base = base, .size = x->sp->size };
	atomic_fetch_add_explicit(&cp->cache_writes, 1, memory_order_relaxed);
	*rel = cache_release;
	*arg = c;
}

/* A slice of packed changed chunks of a sparse region, to the engine: the
 * slice holds cnt chunks, then their ids, then their chunk numbers in the
 * region. Its append runs from the end of the last one to just past its
 * last chunk; unchanged chunks in between are the parent's. */
static int sparse_flush(struct capture_copier *cp, const struct copied *x)
{
	struct sparse *sp = x->sp;
	static const uint32_t none[1];
	if (!x->sl) {   /* the region's end: every chunk left is unchanged */
		const uint64_t from = sp->done * sp->chunk;
		sp->done = sp->nch;
		return from < sp->size ? engine_stream_add_chunks(sp->st, sp->size - from, none, 0, NULL, NULL, NULL, NULL)
				       : 0;
	}
	uint8_t *data = x->sl->p, *ids = data + (size_t)x->cnt * sp->chunk;
	uint32_t *idx = (uint32_t *)(ids + (size_t)x->cnt * 32);
	const uint64_t base = sp->done, end = (uint64_t)idx[x->cnt - 1] + 1;
	for (uint32_t j = 0; j < x->cnt; j++)
		idx[j] -= (uint32_t)base;
	const uint64_t len = (end == sp->nch ? sp->size : end * sp->chunk) - base * sp->chunk;
	sp->done = end;
	void (*rel)(void *);
	void *arg;
	release_for(cp, x, base, &rel, &arg);
	/* The engine calls rel once, even when this fails. */
	return engine_stream_add_chunks(sp->st, len, idx, x->cnt, data, ids, rel, arg);
}

/* Hands the oldest copied slice to the engine, once its copy is done. */
static int fifo_flush_one(struct fifo *f)
{
	struct copied x = f->q[f->head];
	f->head = (f->head + 1) % f->cap;
	f->n--;
	int rc = 0;
	if (x.ev)
		rc = cudrv_check(f->cp->d, f->cp->d->EventSynchronize(x.ev),
				 "waiting for a device-to-host copy (cuEventSynchronize)");
	if (rc == 0 && x.ev_ids)
		rc = cudrv_check(f->cp->d, f->cp->d->EventSynchronize(x.ev_ids),
				 "waiting for a slice's ids (cuEventSynchronize)");
	if (rc < 0) {
		copied_drop(&x);
		return rc;
	}
	if (x.sp)
		return sparse_flush(f->cp, &x);
	void (*rel)(void *);
	void *arg;
	release_for(f->cp, &x, 0, &rel, &arg);
	/* The engine calls rel once, even when this fails. With the ids the
	 * GPU computed, its workers do not hash the slice again. */
	if (x.ev_ids)
		return engine_stream_add_chunks(x.st, x.len, NULL, 0, x.sl->p + x.off, x.sl->ids + x.ids_off, rel, arg);
	return engine_stream_add_memory(x.st, x.sl->p + x.off, x.len, rel, arg);
}

/* On failure: waits for copies in flight and gives their slices back. */
static void fifo_drain(struct fifo *f)
{
	while (f->n) {
		struct copied x = f->q[f->head];
		f->head = (f->head + 1) % f->cap;
		f->n--;
		if (x.ev)
			f->cp->d->EventSynchronize(x.ev);
		if (x.ev_ids)
			f->cp->d->EventSynchronize(x.ev_ids);
		copied_drop(&x);
	}
}

/* A region's stream ("mem=device" or "mem=host" in its meta) or a blob's,
 * opened alike by capture_regions, capture_blobs and capture_held_ingest:
 * a held checkpoint's streams are those a direct one would have had. */
static int stream_open(struct engine_snap *snap, const char *name, bool blob, bool device, struct engine_stream **st)
{
	int rc = engine_stream_open(snap, name, blob ? CAS_STREAM_BLOB : CAS_STREAM_REGION, true, st);
	if (rc == 0 && !blob)
		rc = cas_stream_set_str(&engine_stream_meta(*st)->meta, device ? "mem=device" : "mem=host");
	return rc;
}

/* Lets go of the copy's own reference to the share it was filling. */
static void share_close(struct share **open)
{
	if (*open)
		share_put(*open);
	*open = NULL;
}

/* Lets go of every share the copy is filling; whether there was one. */
static bool shares_close_all(struct fifo *f)
{
	bool any = f->open_host != NULL;
	share_close(&f->open_host);
	for (unsigned i = 0; i < f->cp->nctx; i++) {
		any |= f->cp->ctxs[i].open != NULL;
		share_close(&f->cp->ctxs[i].open);
	}
	return any;
}

static void fifo_push(struct fifo *f, const struct copied *x)
{
	f->q[(f->head + f->n) % f->cap] = *x;
	f->n++;
}

static int fifo_slice(struct fifo *f, struct pool_slice **out)
{
	for (;;) {
		struct pool_slice *sl = pool_try_take(f->cp->pool);
		if (sl) {
			*out = sl;
			return 0;
		}
		if (f->n) {   /* the pool ran dry: let the engine have what is copied */
			int rc = fifo_flush_one(f);
			if (rc < 0)
				return rc;
			continue;
		}
		/* The engine has every piece: what it holds comes back, but not
		 * the slices small regions are filling, which the copy keeps
		 * while it may add more (host memory's and each context's). With
		 * no other slice out, waiting would never end: a pool of two
		 * slices with a small host and a small device region open. */
		if (shares_close_all(f))
			continue;
		uint64_t t = time_now_ns();
		*out = pool_take(f->cp->pool);
		f->wait_ns += time_now_ns() - t;
		f->rounds++;
		return 0;
	}
}

/* A host region into staging with streaming stores: staging is not read
 * again by this thread, so filling the cache with it (and reading each line
 * before writing it) only slows the copy. glibc's memcpy does the same, but
 * only above a size threshold that slices may fall under. */
static void copy_to_staging(uint8_t *dst, const uint8_t *src, size_t n)
{
#ifdef __SSE2__
	size_t head = (16 - ((uintptr_t)dst & 15)) & 15;
	if (head > n)
		head = n;
	memcpy(dst, src, head);
	dst += head;
	src += head;
	n -= head;
	size_t i = 0;
	for (; i + 64 <= n; i += 64) {
		const __m128i a = _mm_loadu_si128((const __m128i *)(src + i));
		const __m128i b = _mm_loadu_si128((const __m128i *)(src + i + 16));
		const __m128i c = _mm_loadu_si128((const __m128i *)(src + i + 32));
		const __m128i d = _mm_loadu_si128((const __m128i *)(src + i + 48));
		_mm_stream_si128((__m128i *)(dst + i), a);
		_mm_stream_si128((__m128i *)(dst + i + 16), b);
		_mm_stream_si128((__m128i *)(dst + i + 32), c);
		_mm_stream_si128((__m128i *)(dst + i + 48), d);
	}
	memcpy(dst + i, src + i, n - i);
	_mm_sfence();   /* the engine's workers read it next */
#else
	memcpy(dst, src, n);
#endif
}

/* The kernels, the hashing stream and the count's pinned word of cs,
 * made once. false: no GPU hashing in this context (no kernels in the
 * build, a driver that cannot take them, or no memory); the region is then
 * copied whole and the CPU hashes it, and why is kept for CREST_TRACE. */
static bool ctxset_sha(struct capture_copier *cp, struct ctxset *cs)
{
	if (cs->sha || cs->sha_off)
		return !cs->sha_off;
	const struct cudrv *d = cp->d;
	int rc = gpusha_open(d, &cs->sha);
	if (rc == 0)
		rc = cudrv_check(d, d->StreamCreate(&cs->hs, CU_STREAM_NON_BLOCKING),
				 "creating the hashing stream (cuStreamCreate)");
	if (rc == 0)
		rc = cudrv_check(d, d->MemHostAlloc((void **)&cs->hcount, 64, 0),
				 "allocating the changed count (cuMemHostAlloc)");
	if (rc < 0) {
		crest_errcpy(cp->sha_why, sizeof(cp->sha_why));
		cs->sha_off = true;
	}
	return !cs->sha_off;
}

/* Whether device region r, whose context's set is cs, is hashed on the
 * GPU in chunks of chunk bytes (0: chunked by content, never): it has a
 * digest slot, hashing is on, the kernels take that size and are loaded. */
static bool gpu_hashed(struct capture_copier *cp, struct ctxset *cs, const struct capture_region *r,
		       uint32_t chunk)
{
	return cs && r->dig && cp->gpu_hash && chunk && chunk % 64 == 0 && chunk <= GPUSHA_CHUNK_MAX &&
	       ctxset_sha(cp, cs);
}

/* r's digest slot, made (or made again, when the region moved or grew)
 * with room for its digests and changed list. */
static int digests_get(const struct capture_copier *cp, const struct capture_region *r, uint32_t chunk,
		       struct capture_digests **out)
{
	const struct cudrv *d = cp->d;
	const bool wide = cp->wide && chunk <= GPUSHA_WIDE_MAX;
	struct capture_digests *g = *r->dig;
	if (g && g->ctx == r->ctx && g->ptr == r->ptr && g->size == r->size && g->chunk == chunk && g->wide == wide) {
		*out = g;
		return 0;
	}
	capture_digests_free(d, g);
	*r->dig = NULL;
	g = calloc(1, sizeof(*g));
	if (!g)
		return crest_errf(-ENOMEM, "allocating a digest slot");
	g->ctx = r->ctx;
	g->ptr = r->ptr;
	g->size = r->size;
	g->chunk = chunk;
	g->wide = wide;
	g->n = gpusha_nchunks(r->size, chunk);
	int rc = g->n < UINT32_MAX ? 0 : crest_errx(-EFBIG, "region %s has too many chunks to hash", r->name);
	for (int i = 0; rc == 0 && i < 2; i++)
		rc = cudrv_check(d, d->MemAlloc(&g->cmp[i], g->n * 32), "allocating digests (cuMemAlloc)");
	if (rc == 0 && wide)
		rc = cudrv_check(d, d->MemAlloc(&g->sha, g->n * 32), "allocating digests (cuMemAlloc)");
	if (rc == 0)
		rc = cudrv_check(d, d->MemAlloc(&g->list, (g->n + 1) * 4), "allocating a chunk list (cuMemAlloc)");
	if (rc < 0) {
		capture_digests_free(d, g);
		return rc;
	}
	*r->dig = g;
	*out = g;
	return 0;
}

void capture_digests_commit(struct capture_digests *g, uint64_t token, const uint8_t id[32])
{
	if (!g || !token || g->token != token)
		return;
	g->prev = 1 - g->prev;
	g->prev_ok = true;
	g->key = g->key_next;
	memcpy(g->prev_id, id, 32);
	g->token = 0;
}

void capture_digests_free(const struct cudrv *d, struct capture_digests *g)
{
	if (!g)
		return;
	if (d && d->CtxSetCurrent(g->ctx) == CUDA_SUCCESS) {
		for (int i = 0; i < 2; i++)
			if (g->cmp[i])
				d->MemFree(g->cmp[i]);
		if (g->sha)
			d->MemFree(g->sha);
		if (g->list)
			d->MemFree(g->list);
	}
	free(g);
}

/* Hashes device region r on its GPU into its slot's free buffer, tagged
 * with token. When the slot has the digests of the snapshot's parent, and
 * the engine the parent's chunks of this stream, finds the chunks that
 * changed: *nchanged, and *sparse when copying only those is worth it
 * (less than half the region). The hashes run on cs->hs; *dig gets where
 * the chunks' SHA-256 ids will be. With *sparse, the ids of the changed
 * chunks alone are computed (copy_sparse's packing waits for them on the
 * same stream); without, the caller copies the region whole meanwhile, and
 * capture_regions waits for the hash before it returns.
 *
 * In a wide slot the wide hash finds what changed, and SHA-256 runs after
 * it on what it lists (or on every chunk, when the region is copied
 * whole): the stall of a sparse checkpoint is one read of the region at
 * memory speed, not a SHA-256 of it. */
static int region_hash(struct fifo *f, struct ctxset *cs, const struct capture_region *r, struct engine_stream *st,
		       uint32_t chunk, uint64_t token, struct capture_digests **gout, CUdeviceptr *dig, bool *sparse,
		       uint32_t *nchanged)
{
	const struct cudrv *d = f->cp->d;
	const CUdeviceptr src = (CUdeviceptr)(uintptr_t)r->ptr;
	struct capture_digests *g = NULL;
	*sparse = false;
	*gout = NULL;
	int rc = digests_get(f->cp, r, chunk, &g);
	if (rc < 0)
		return rc;
	const int nw = 1 - g->prev;
	g->token = 0;
	rc = g->wide ? gpusha_wide(cs->sha, src, r->size, chunk, g->cmp[nw], cs->hs)
		     : gpusha_hash(cs->sha, src, r->size, chunk, g->cmp[nw], cs->hs);
	if (rc < 0)
		return rc;
	g->token = token;
	g->key_next = g->wide ? gpusha_key_id(cs->sha) : 0;
	*gout = g;
	*dig = ids_buf(g, nw);
	uint8_t pid[32];
	uint64_t psize;
	const bool parent = g->prev_ok && engine_stream_parent(st, pid, &psize) && psize == r->size &&
			    !memcmp(pid, g->prev_id, 32) && g->key == g->key_next;
	if (parent) {
		rc = gpusha_changed(cs->sha, g->cmp[nw], g->cmp[g->prev], g->n, 0, g->list, g->list + g->n * 4, cs->hs);
		if (rc == 0)
			rc = cudrv_check(d, d->MemcpyDtoHAsync(cs->hcount, g->list + g->n * 4, 4, cs->hs),
					 "copying the changed count (cuMemcpyDtoHAsync)");
		if (rc == 0)
			rc = cudrv_check(d, d->StreamSynchronize(cs->hs), "hashing on the GPU (cuStreamSynchronize)");
		if (rc < 0)
			return rc;
		*nchanged = *cs->hcount;
		*sparse = (uint64_t)*nchanged * chunk * 2 < r->size;
	}
	if (!g->wide)
		return 0;
	if (*sparse)
		return *nchanged ? gpusha_hash_list(cs->sha, src, r->size, chunk, g->list, *nchanged, g->sha, cs->hs) : 0;
	return gpusha_hash(cs->sha, src, r->size, chunk, g->sha, cs->hs);
}

/* Copies the changed chunks of r, packed on the GPU a slice at a time:
 * each slice gets cnt chunks, their ids and their chunk numbers (see
 * sparse_flush), then one more entry ends the region. */
static int copy_sparse(struct fifo *f, struct ctxset *cs, const struct capture_region *r, struct capture_digests *g,
		       uint32_t k, struct sparse *sp)
{
	const struct cudrv *d = f->cp->d;
	const size_t slice = pool_slice_bytes(f->cp->pool);
	const uint32_t chunk = g->chunk, per = (uint32_t)(slice / ((size_t)chunk + 36));
	int rc = 0;
	if (!cs->pack) {
		rc = cudrv_check(d, d->MemAlloc(&cs->pack, (size_t)per * chunk), "allocating a packing buffer (cuMemAlloc)");
		if (rc == 0)
			rc = cudrv_check(d, d->MemAlloc(&cs->pack_dig, (size_t)per * 32),
					 "allocating a packing buffer (cuMemAlloc)");
		if (rc < 0)
			return rc;
	}
	for (uint32_t b0 = 0; b0 < k; b0 += per) {
		const uint32_t cnt = k - b0 < per ? k - b0 : per;
		struct pool_slice *sl;
		rc = fifo_slice(f, &sl);
		if (rc < 0)
			return rc;
		const CUdeviceptr list = g->list + (CUdeviceptr)b0 * 4;
		uint8_t *p = sl->p;
		/* One stream: each packing waits for the copies out of the last. */
		rc = gpusha_gather(cs->sha, (CUdeviceptr)(uintptr_t)r->ptr, r->size, chunk, list, cnt, ids_buf(g, 1 - g->prev),
				   cs->pack, cs->pack_dig, cs->hs);
		if (rc == 0)
			rc = cudrv_check(d, d->MemcpyDtoHAsync(p, cs->pack, (size_t)cnt * chunk, cs->hs),
					 "copying changed chunks to staging (cuMemcpyDtoHAsync)");
		if (rc == 0)
			rc = cudrv_check(d, d->MemcpyDtoHAsync(p + (size_t)cnt * chunk, cs->pack_dig, (size_t)cnt * 32,
							       cs->hs), "copying digests to staging (cuMemcpyDtoHAsync)");
		if (rc == 0)
			rc = cudrv_check(d, d->MemcpyDtoHAsync(p + (size_t)cnt * (chunk + 32), list, (size_t)cnt * 4,
							       cs->hs), "copying a chunk list to staging (cuMemcpyDtoHAsync)");
		if (rc == 0)
			rc = cudrv_check(d, d->EventRecord(cs->ev[sl->idx], cs->hs), "cuEventRecord");
		if (rc < 0) {
			d->StreamSynchronize(cs->hs);
			pool_give(sl);
			return crest_errctx(rc, "region %s, changed chunks from %u", r->name, b0);
		}
		fifo_push(f, &(struct copied){ .sl = sl, .st = sp->st, .ev = cs->ev[sl->idx], .sp = sp, .cnt = cnt,
					       .cache = r->cache });
		f->copied += (uint64_t)cnt * chunk;
	}
	fifo_push(f, &(struct copied){ .st = sp->st, .sp = sp });
	return 0;
}

/* A region copied whole, slice by slice: where its copy stands. */
struct whole {
	const struct capture_region *r;
	struct engine_stream *st;
	struct ctxset *cs;            /* NULL: host memory */
	CUdeviceptr dig;              /* its ids on the GPU, for each slice; 0: none */
	size_t off;                   /* bytes copied so far */
};

/* Starts region r: enters its context and hashes it on its GPU if it can.
 * A region whose changed chunks alone are copied is copied here (a few
 * slices); any other is left to copy_slice, through *w, with *whole set. */
static int region_start(struct fifo *f, const struct capture_region *r, struct engine_stream *st, uint64_t token,
			struct sparse *sp, struct whole *w, bool *whole)
{
	const struct cudrv *d = f->cp->d;
	struct ctxset *cs = NULL;
	int rc = 0;
	*whole = false;
	if (r->device && r->size) {
		rc = d ? ctxset_get(f->cp, r->ctx, &cs) : crest_errx(-ENODEV, "no GPU driver");
		if (rc == 0)
			rc = cudrv_check(d, d->CtxSetCurrent(r->ctx), "entering the region's context");
		if (rc < 0)
			return crest_errctx(rc, "region %s", r->name);
	}
	const uint32_t chunk = engine_stream_fixed_chunk(st);
	CUdeviceptr dig = 0;   /* the region's ids on the GPU, for a whole copy; 0: none */
	if (gpu_hashed(f->cp, cs, r, chunk)) {
		struct capture_digests *g = NULL;
		bool sparse = false;
		uint32_t k = 0;
		cs->hashing = true;   /* whatever was launched is waited for */
		if (region_hash(f, cs, r, st, chunk, token, &g, &dig, &sparse, &k) < 0) {
			/* No digests (no device memory for them, say): the
			 * region is copied whole, as without kernels. */
			(void)crest_errctx(-EIO, "region %s: hashing on the GPU", r->name);
			crest_errcpy(f->cp->sha_why, sizeof(f->cp->sha_why));
			if (*r->dig)
				(*r->dig)->token = 0;
			sparse = false;
			dig = 0;
		} else {
			f->hashed++;
		}
		if (sparse && g) {
			f->sparse++;
			f->sparse_wide += g->wide;
			*sp = (struct sparse){ .st = st, .size = r->size, .nch = g->n, .chunk = chunk };
			return copy_sparse(f, cs, r, g, k, sp);
		}
	}
	/* A slice's ids go with it when its room holds them: each slice
	 * starts at a multiple of the chunk (slices are whole segments). */
	if (dig && gpusha_nchunks(pool_slice_bytes(f->cp->pool), chunk) * GPUSHA_DIGEST > pool_ids_bytes(f->cp->pool))
		dig = 0;
	f->whole_ids += dig != 0;
	*w = (struct whole){ .r = r, .st = st, .cs = cs, .dig = dig };
	*whole = r->size > 0;
	return 0;
}

/* A region is small when it takes at most a quarter of a slice: it then
 * shares one with other small regions of its context (copy_small), unless
 * it has a place in the host cache (whose writes go a slice at a time,
 * cache_release). */
static bool small_region(const struct fifo *f, const struct whole *w)
{
	return w->off == 0 && w->r->size <= pool_slice_bytes(f->cp->pool) / 4 && !(w->cs && w->r->cache);
}

/* Copies small region w whole into the slice its context's small regions
 * are filling (taking a new one when it has no room left), at an offset
 * that is a multiple of the region's chunk: its chunks' ids then lie in
 * the slice's ids at that offset's chunk. */
static int copy_small(struct fifo *f, struct whole *w)
{
	const struct cudrv *d = f->cp->d;
	const struct capture_region *r = w->r;
	struct ctxset *cs = w->cs;
	const size_t slice = pool_slice_bytes(f->cp->pool), n = r->size;
	const uint32_t chunk = engine_stream_fixed_chunk(w->st);
	const size_t align = chunk ? chunk : 4096;
	struct share **open = cs ? &cs->open : &f->open_host;
	struct share *sh = *open;
	size_t off = sh ? (sh->used + align - 1) / align * align : 0;
	if (!sh || off + n > slice) {
		share_close(open);
		struct pool_slice *sl;
		int rc = fifo_slice(f, &sl);
		if (rc < 0)
			return rc;
		sh = &f->cp->shares[sl->idx];
		sh->sl = sl;
		atomic_store_explicit(&sh->refs, 1, memory_order_relaxed);
		sh->stream = cs ? cs->s[f->next_stream++ % cs->ns] : NULL;
		*open = sh;
		off = 0;
	}
	sh->used = off + n;
	atomic_fetch_add_explicit(&sh->refs, 1, memory_order_relaxed);   /* the piece's */
	struct copied x = { .sl = sh->sl, .sh = sh, .off = off, .st = w->st, .len = n };
	if (cs) {
		x.ev = cs->ev[sh->sl->idx];
		int rc = cudrv_check(d, d->CtxSetCurrent(r->ctx), "entering the region's context");
		if (rc == 0)
			rc = cudrv_check(d, d->MemcpyDtoHAsync(sh->sl->p + off, (CUdeviceptr)(uintptr_t)r->ptr, n,
							       sh->stream), "copying to staging (cuMemcpyDtoHAsync)");
		if (rc == 0)
			rc = cudrv_check(d, d->EventRecord(x.ev, sh->stream), "cuEventRecord");
		if (rc == 0 && w->dig) {
			x.ev_ids = cs->ev_ids[sh->sl->idx];
			x.ids_off = off / chunk * GPUSHA_DIGEST;
			rc = cudrv_check(d, d->MemcpyDtoHAsync(sh->sl->ids + x.ids_off, w->dig,
							       gpusha_nchunks(n, chunk) * GPUSHA_DIGEST, cs->hs),
					 "copying a region's ids to staging (cuMemcpyDtoHAsync)");
			if (rc == 0)
				rc = cudrv_check(d, d->EventRecord(x.ev_ids, cs->hs), "cuEventRecord");
		}
		if (rc < 0) {
			d->StreamSynchronize(sh->stream);
			if (w->dig)
				d->StreamSynchronize(cs->hs);
			share_put(sh);   /* the piece's; the copy's goes at the end */
			return crest_errctx(rc, "region %s", r->name);
		}
	} else {
		copy_to_staging(sh->sl->p + off, r->ptr, n);
	}
	fifo_push(f, &x);
	f->copied += n;
	w->off = n;
	return 0;
}

/* Copies the next slice of w into staging (a device region: starts its
 * copy on one of its context's streams). */
static int copy_slice(struct fifo *f, struct whole *w)
{
	if (small_region(f, w))
		return copy_small(f, w);
	const struct cudrv *d = f->cp->d;
	const struct capture_region *r = w->r;
	struct ctxset *cs = w->cs;
	const size_t slice = pool_slice_bytes(f->cp->pool), off = w->off;
	const size_t n = r->size - off < slice ? r->size - off : slice;
	struct pool_slice *sl;
	int rc = fifo_slice(f, &sl);
	if (rc < 0)
		return rc;
	struct copied x = { .sl = sl, .st = w->st, .len = n, .cache = cs && r->cache ? r->cache + off : NULL };
	if (cs) {
		const uint32_t chunk = engine_stream_fixed_chunk(w->st);
		CUstream s = cs->s[f->next_stream++ % cs->ns];
		x.ev = cs->ev[sl->idx];
		rc = cudrv_check(d, d->CtxSetCurrent(r->ctx), "entering the region's context");
		if (rc == 0)
			rc = cudrv_check(d, d->MemcpyDtoHAsync(sl->p, (CUdeviceptr)(uintptr_t)(r->ptr + off), n, s),
					 "copying to staging (cuMemcpyDtoHAsync)");
		if (rc == 0)
			rc = cudrv_check(d, d->EventRecord(x.ev, s), "cuEventRecord");
		/* Its ids on the hashing stream, after the hash. */
		if (rc == 0 && w->dig) {
			x.ev_ids = cs->ev_ids[sl->idx];
			rc = cudrv_check(d, d->MemcpyDtoHAsync(sl->ids, w->dig + off / chunk * GPUSHA_DIGEST,
							       gpusha_nchunks(n, chunk) * GPUSHA_DIGEST, cs->hs),
					 "copying a slice's ids to staging (cuMemcpyDtoHAsync)");
			if (rc == 0)
				rc = cudrv_check(d, d->EventRecord(x.ev_ids, cs->hs), "cuEventRecord");
		}
		if (rc < 0) {
			d->StreamSynchronize(s);
			if (w->dig)
				d->StreamSynchronize(cs->hs);
			pool_give(sl);
			return crest_errctx(rc, "region %s, offset %zu", r->name, off);
		}
	} else {
		copy_to_staging(sl->p, r->ptr + off, n);
	}
	fifo_push(f, &x);
	f->copied += n;
	w->off += n;
	return 0;
}

/* Copies the regions of w[0..n) whole, a slice of each context in turn
 * (host memory counting as one more), so that every GPU's link is busy at
 * once even when the pool holds less than one GPU's share: region by
 * region, a pool that ran dry would wait on one GPU's copies while the
 * others sat idle. Within a context, regions go one after another, in
 * order, and each stream's slices reach the engine in order (the FIFO). */
static int copy_wholes(struct fifo *f, struct whole *w, size_t n)
{
	struct ctxset *grp[MAX_CTX + 1];
	size_t cur[MAX_CTX + 1], ng = 0, left = n;
	for (size_t i = 0; i < n; i++) {
		size_t g = 0;
		while (g < ng && grp[g] != w[i].cs)
			g++;
		if (g == ng) {
			grp[ng] = w[i].cs;
			cur[ng++] = i;
		}
	}
	while (left) {
		for (size_t g = 0; g < ng; g++) {
			while (cur[g] < n && (w[cur[g]].cs != grp[g] || w[cur[g]].off == w[cur[g]].r->size))
				cur[g]++;
			if (cur[g] == n)
				continue;
			struct whole *x = &w[cur[g]];
			int rc = copy_slice(f, x);
			if (rc < 0)
				return rc;
			left -= x->off == x->r->size;
		}
	}
	return 0;
}

/* Waits for the hashing of every context (the digests must be of the
 * bytes as they were at the sync: the job goes on once this returns). */
static int hash_wait(struct capture_copier *cp)
{
	int rc = 0;
	for (unsigned i = 0; i < cp->nctx; i++) {
		struct ctxset *cs = &cp->ctxs[i];
		if (!cs->hashing)
			continue;
		cs->hashing = false;
		int r = cudrv_check(cp->d, cp->d->CtxSetCurrent(cs->ctx), "entering a region's context");
		if (r == 0)
			r = cudrv_check(cp->d, cp->d->StreamSynchronize(cs->hs), "hashing on the GPU (cuStreamSynchronize)");
		if (rc == 0)
			rc = r;
	}
	return rc;
}

int capture_regions(struct capture_copier *cp, struct engine_snap *snap, const struct capture_region *r,
		    size_t n, uint64_t token, struct capture_stats *stats)
{
	/* Room for every slice, and for each sparse region's last entry. */
	struct fifo f = { .cp = cp, .cap = pool_nslices(cp->pool) + n };
	f.q = calloc(f.cap, sizeof(*f.q));
	struct sparse *sp = calloc(n + 1, sizeof(*sp));
	if (!f.q || !sp) {
		free(f.q);
		free(sp);
		return crest_errf(-ENOMEM, "starting a checkpoint");
	}
	struct whole *w = calloc(n + 1, sizeof(*w));
	if (!w) {
		free(f.q);
		free(sp);
		return crest_errf(-ENOMEM, "starting a checkpoint");
	}
	/* Every region started (hashes launched, changed chunks copied)
	 * before any is copied whole: see copy_wholes. A stream is closed once
	 * nothing more is appended to it; its slices may still wait in the
	 * FIFO for the engine, as they did before. */
	int rc = 0;
	size_t nw = 0;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		struct engine_stream *st;
		bool whole = false;
		rc = stream_open(snap, r[i].name, false, r[i].device, &st);
		if (rc == 0)
			rc = region_start(&f, &r[i], st, token, &sp[i], &w[nw], &whole);
		if (rc == 0 && !whole)
			engine_stream_close(st);
		nw += rc == 0 && whole;
	}
	if (rc == 0)
		rc = copy_wholes(&f, w, nw);
	for (size_t i = 0; rc == 0 && i < nw; i++)
		engine_stream_close(w[i].st);
	/* The copy's own references to the slices small regions shared: the
	 * engine's pieces keep them until it is done with them. */
	shares_close_all(&f);
	while (rc == 0 && f.n)
		rc = fifo_flush_one(&f);
	if (rc < 0)
		fifo_drain(&f);
	const int hrc = cp->d ? hash_wait(cp) : 0;
	if (rc == 0)
		rc = hrc;
	free(f.q);
	free(sp);
	free(w);
	if (stats) {
		stats->wait_ns = f.wait_ns;
		stats->rounds = f.rounds;
		stats->copied = f.copied;
		stats->hashed = f.hashed;
		stats->sparse = f.sparse;
		stats->whole_ids = f.whole_ids;
		stats->sparse_wide = f.sparse_wide;
	}
	return rc;
}

/* The digest every chunk of st should have, in chunk order, into e (n
 * entries); -ENOTSUP when st is not cut in chunks of chunk bytes (each
 * extent one chunk, or a hole of whole chunks; the last may be short). */
static int expected_digests(const struct cas_stream *st, uint32_t chunk, uint64_t n, uint8_t *e)
{
	uint8_t *zeros = calloc(1, chunk);
	uint8_t zfull[32], zlast[32];
	const uint64_t last = st->size - (n - 1) * (uint64_t)chunk;
	int rc = zeros ? 0 : crest_errf(-ENOMEM, "checking a restore from the host cache");
	if (rc == 0)
		rc = sha256_once(zeros, chunk, zfull);
	if (rc == 0)
		rc = sha256_once(zeros, last, zlast);
	free(zeros);
	uint64_t k = 0;
	for (uint64_t i = 0; rc == 0 && i < st->nextents; i++) {
		const struct cas_extent *x = &st->ext[i];
		if (!x->hole) {
			if (k >= n || x->len != (k == n - 1 ? last : chunk))
				return -ENOTSUP;
			memcpy(e + 32 * k++, x->sha, 32);
			continue;
		}
		for (uint64_t left = x->len; left; k++) {
			const uint64_t want = k == n - 1 ? last : chunk;
			if (k >= n || left < want)
				return -ENOTSUP;
			memcpy(e + 32 * k, k == n - 1 ? zlast : zfull, 32);
			left -= want;
		}
	}
	return rc < 0 ? rc : k == n ? 0 : -ENOTSUP;
}

bool capture_cache_idle(struct capture_copier *cp)
{
	return !cp || atomic_load_explicit(&cp->cache_writes, memory_order_acquire) == 0;
}

int capture_cache_verify(struct capture_copier *cp, const struct capture_region *r, const struct cas_stream *st,
			 uint32_t chunk, const uint8_t id[32], uint64_t *nbad)
{
	const struct cudrv *d = cp->d;
	struct ctxset *cs = NULL;
	if (!d || !r->device || !r->size || !r->dig || st->size != r->size)
		return -ENOTSUP;
	int rc = ctxset_get(cp, r->ctx, &cs);
	if (rc == 0)
		rc = cudrv_check(d, d->CtxSetCurrent(r->ctx), "entering the region's context");
	if (rc < 0)
		return rc;
	if (!gpu_hashed(cp, cs, r, chunk))
		return -ENOTSUP;
	struct capture_digests *g;
	if ((rc = digests_get(cp, r, chunk, &g)) < 0)
		return rc;
	const CUdeviceptr src = (CUdeviceptr)(uintptr_t)r->ptr, cur = ids_buf(g, 0);
	uint8_t *e = malloc(g->n * 32);
	if (!e)
		return crest_errf(-ENOMEM, "checking region %s restored from the host cache", r->name);
	rc = expected_digests(st, chunk, g->n, e);
	/* From here both buffers are overwritten: the slot no longer holds
	 * its parent's digests unless the check passes. The snapshot's ids go
	 * into cmp[1] and are compared with the region's SHA-256; a wide slot
	 * also gets the region's wide digests in cmp[0], its next parent's. */
	if (rc == 0) {
		g->prev_ok = false;
		g->token = 0;
		rc = cudrv_check(d, d->MemcpyHtoDAsync(g->cmp[1], e, g->n * 32, cs->hs),
				 "copying the snapshot's ids to the GPU (cuMemcpyHtoDAsync)");
	}
	if (rc == 0)
		rc = gpusha_hash(cs->sha, src, r->size, chunk, cur, cs->hs);
	if (rc == 0)
		rc = gpusha_changed(cs->sha, cur, g->cmp[1], g->n, 0, g->list, g->list + g->n * 4, cs->hs);
	if (rc == 0 && g->wide)
		rc = gpusha_wide(cs->sha, src, r->size, chunk, g->cmp[0], cs->hs);
	if (rc == 0)
		rc = cudrv_check(d, d->MemcpyDtoHAsync(cs->hcount, g->list + g->n * 4, 4, cs->hs),
				 "copying the count of chunks that differ (cuMemcpyDtoHAsync)");
	if (rc == 0)
		rc = cudrv_check(d, d->StreamSynchronize(cs->hs), "hashing on the GPU (cuStreamSynchronize)");
	free(e);
	if (rc < 0)
		return rc == -ENOTSUP ? rc : crest_errctx(rc, "checking region %s restored from the host cache", r->name);
	*nbad = *cs->hcount;
	if (*nbad == 0) {
		g->prev = 0;
		g->prev_ok = true;
		g->key = g->wide ? gpusha_key_id(cs->sha) : 0;
		memcpy(g->prev_id, id, 32);
	}
	return 0;
}

void capture_prepare(struct capture_copier *cp, const struct capture_region *r, uint32_t chunk)
{
	struct ctxset *cs;
	if (!cp->d || !r->device || !r->size || ctxset_get(cp, r->ctx, &cs) < 0 ||
	    cudrv_check(cp->d, cp->d->CtxSetCurrent(r->ctx), "entering the region's context") < 0)
		return;
	struct capture_digests *g;
	if (gpu_hashed(cp, cs, r, chunk))
		(void)digests_get(cp, r, chunk, &g);
}

const char *capture_gpu_hash_why(const struct capture_copier *cp)
{
	return cp->sha_why[0] ? cp->sha_why : NULL;
}

int capture_sync(const struct cudrv *d, const struct capture_region *r, size_t n)
{
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		if (!r[i].device || !r[i].size)
			continue;
		bool seen = false;
		for (size_t k = 0; k < i && !seen; k++)
			seen = r[k].device && r[k].ctx == r[i].ctx;
		if (seen)
			continue;
		rc = cudrv_check(d, d->CtxSetCurrent(r[i].ctx), "entering a region's context");
		if (rc == 0)
			rc = cudrv_check(d, d->CtxSynchronize(), "making the device idle (cuCtxSynchronize)");
	}
	return rc;
}

int capture_dirs(struct engine_snap *s, const char *const *names, size_t n)
{
	char **seen = NULL;
	size_t nseen = 0;
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		const char *name = names[i];
		for (const char *sl = name ? strchr(name, '/') : NULL; rc == 0 && sl; sl = strchr(sl + 1, '/')) {
			char *dir = strndup(name, (size_t)(sl - name));
			bool dup = false;
			for (size_t k = 0; dir && k < nseen && !dup; k++)
				dup = !strcmp(seen[k], dir);
			char **ns = dir && !dup ? realloc(seen, (nseen + 1) * sizeof(*ns)) : NULL;
			if (!dir || (!dup && !ns)) {
				free(dir);
				rc = crest_errf(-ENOMEM, "adding directories for %s", name);
			} else if (dup) {
				free(dir);
			} else {
				seen = ns;
				seen[nseen++] = dir;
				rc = engine_add_entry(s, dir, CAS_STREAM_DIR, 0700, (int64_t)time_wall_ns(), NULL);
			}
		}
	}
	for (size_t k = 0; k < nseen; k++)
		free(seen[k]);
	free(seen);
	return rc;
}

int capture_labels(struct engine_snap *s, const char *const *labels, size_t n)
{
	struct cas_manifest *m = s ? engine_snapshot_manifest(s) : NULL;
	for (size_t i = 0; i < n; i++) {
		const char *kv = labels[i];
		const char *eq = kv ? strchr(kv, '=') : NULL;
		if (!eq || eq == kv)
			return crest_errx(-EINVAL, "label \"%s\" is not key=value", kv ? kv : "(null)");
		char key[256];
		if ((size_t)(eq - kv) >= sizeof(key))
			return crest_errx(-EINVAL, "label key in \"%s\" is longer than %zu bytes", kv, sizeof(key) - 1);
		memcpy(key, kv, (size_t)(eq - kv));
		key[eq - kv] = 0;
		/* crest.branch and the like are crest's: a user's would be read as
		 * crest's own. */
		int rc = cas_label_check(key);
		if (rc < 0)
			return rc;
		if (m && cas_manifest_label(m, key, eq + 1) < 0)
			return crest_errf(-ENOMEM, "adding label %s", kv);
	}
	return 0;
}

int capture_blobs(struct engine_snap *s, const struct capture_blob *b, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (!b[i].name || !*b[i].name || (!b[i].data && b[i].len))
			return crest_errx(-EINVAL, "blob %zu has no name or no data", i);
		struct engine_stream *st;
		int rc = stream_open(s, b[i].name, true, false, &st);
		if (rc < 0)
			return rc;
		void *copy = malloc(b[i].len ? b[i].len : 1);
		if (!copy)
			return crest_errf(-ENOMEM, "copying blob %s (%zu bytes)", b[i].name, b[i].len);
		memcpy(copy, b[i].data, b[i].len);
		rc = engine_stream_add_memory(st, copy, b[i].len, free, copy);
		if (rc < 0)
			return rc;
		engine_stream_close(st);
	}
	return 0;
}

/* ---- checkpoints held in host memory ---- */

/*
 * A held checkpoint is cut into pieces of one pool slice. While the store is
 * let go no engine uses the pool, so a piece stays in a pool slice where
 * one is free: the copy then costs what a kept checkpoint's does (pinned,
 * pre-touched memory at PCIe speed), and the slice goes to the engine at
 * ingest as a kept checkpoint's would. Pieces past the free slices get
 * memory of their own (held_buf); a device piece reaches it through one of
 * a few slices kept free for that (transient), or, when the pool has none
 * at all (earlier held checkpoints took it), straight from the device into
 * pageable memory, at 1.1 GB/s on the H100 host. A team of threads copies
 * the pieces: first touch of new memory bounds one thread.
 */

/* Memory of a piece's own: an anonymous mapping with transparent huge
 * pages asked for, unmapped once the engine is done with it. */
struct held_buf {
	void *p;
	size_t len;
};

static struct held_buf *held_buf_new(size_t len)
{
	struct held_buf *b = malloc(sizeof(*b));
	if (!b)
		return NULL;
	b->len = len ? len : 1;
	b->p = mmap(NULL, b->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (b->p == MAP_FAILED) {
		free(b);
		return NULL;
	}
#ifdef MADV_HUGEPAGE
	if (b->len >= (2u << 20))
		madvise(b->p, b->len, MADV_HUGEPAGE);   /* advice: works without */
#endif
	return b;
}

static void held_buf_free(void *arg)
{
	struct held_buf *b = arg;
	if (!b)
		return;
	munmap(b->p, b->len);
	free(b);
}

/* A slice small held regions share, as copy_small's: each piece holds a
 * reference; the last gives the slice back and frees this. Made apart
 * from the held checkpoint, which may be freed while the engine still has
 * pieces. */
struct held_share {
	struct pool_slice *sl;
	atomic_uint refs;
};

static void held_share_put(void *arg)
{
	struct held_share *sh = arg;
	if (atomic_fetch_sub_explicit(&sh->refs, 1, memory_order_acq_rel) == 1) {
		pool_give(sh->sl);
		free(sh);
	}
}

struct held_piece {
	struct pool_slice *sl;        /* the piece in a pool slice, or */
	struct held_share *sh;        /* at off in a shared one, or */
	struct held_buf *hb;          /* in memory of its own; all NULL once ingested */
	size_t len, off;
};

struct held_stream {
	char *name;
	bool device, blob;
	size_t len;
	const uint8_t *src;           /* while capture_hold copies */
	CUcontext ctx;
	struct held_piece *pc;
	size_t npc;
};

struct capture_held {
	struct held_stream *s;
	size_t n;
};

void capture_held_free(struct capture_held *h)
{
	if (!h)
		return;
	for (size_t i = 0; i < h->n; i++) {
		for (size_t k = 0; k < h->s[i].npc; k++) {
			if (h->s[i].pc[k].sl)
				pool_give(h->s[i].pc[k].sl);
			if (h->s[i].pc[k].sh)
				held_share_put(h->s[i].pc[k].sh);
			held_buf_free(h->s[i].pc[k].hb);
		}
		free(h->s[i].pc);
		free(h->s[i].name);
	}
	free(h->s);
	free(h);
}

struct hold_team {
	const struct cudrv *d;
	struct pool *pool;
	bool transient;               /* slices are free to stage device pieces */
	struct held_stream *s;
	size_t n, slice;
	const size_t *first;          /* first[i]: index of stream i's first piece */
	size_t pieces;
	atomic_size_t next;
	pthread_mutex_t mu;
	int rc;
	char msg[1024];               /* the first failure's, from its thread */
};

static void hold_fail(struct hold_team *t, int rc)
{
	pthread_mutex_lock(&t->mu);
	if (t->rc == 0) {
		t->rc = rc;
		crest_errcpy(t->msg, sizeof(t->msg));   /* messages are per thread */
	}
	pthread_mutex_unlock(&t->mu);
}

/* One piece of a device region into dst: through a transient slice when
 * there are any, else straight (pageable). */
static int hold_device(struct hold_team *t, CUstream stream, uint8_t *dst, const uint8_t *src, size_t len,
		       bool staged)
{
	const struct cudrv *d = t->d;
	struct pool_slice *sl = staged ? pool_take(t->pool) : NULL;
	int rc = cudrv_check(d, d->MemcpyDtoHAsync(sl ? sl->p : dst, (CUdeviceptr)(uintptr_t)src, len, stream),
			     "copying to host memory (cuMemcpyDtoHAsync)");
	if (rc == 0)
		rc = cudrv_check(d, d->StreamSynchronize(stream), "cuStreamSynchronize");
	if (rc == 0 && sl)
		copy_to_staging(dst, sl->p, len);
	if (sl)
		pool_give(sl);
	return rc;
}

static void *hold_worker(void *arg)
{
	struct hold_team *t = arg;
	const struct cudrv *d = t->d;
	CUcontext ctx = NULL;
	CUstream stream = NULL;
	size_t i = 0;
	for (;;) {
		const size_t k = atomic_fetch_add(&t->next, 1);
		if (k >= t->pieces || t->rc)
			break;
		while (i + 1 < t->n && t->first[i + 1] <= k)
			i++;
		struct held_stream *x = &t->s[i];
		struct held_piece *pc = &x->pc[k - t->first[i]];
		const size_t off = (k - t->first[i]) * t->slice;
		int rc = 0;
		const bool staging = pc->sl || pc->sh;
		if (!staging && !(pc->hb = held_buf_new(pc->len)))
			rc = crest_errf(-ENOMEM, "holding %zu bytes of region %s until the store is back", pc->len,
					x->name);
		uint8_t *dst = pc->sl ? pc->sl->p : pc->sh ? pc->sh->sl->p + pc->off : rc == 0 ? pc->hb->p : NULL;
		if (rc == 0 && !x->device) {
			copy_to_staging(dst, x->src + off, pc->len);
			continue;
		}
		if (rc == 0 && ctx != x->ctx) {
			if (stream)
				d->StreamDestroy(stream);
			stream = NULL;
			ctx = x->ctx;
			rc = cudrv_check(d, d->CtxSetCurrent(ctx), "entering the region's context");
			if (rc == 0)
				rc = cudrv_check(d, d->StreamCreate(&stream, 1 /* CU_STREAM_NON_BLOCKING */), "cuStreamCreate");
		}
		if (rc == 0)
			rc = hold_device(t, stream, dst, x->src + off, pc->len, !staging && t->transient);
		if (rc < 0) {
			crest_errctx(rc, "region %s, offset %zu", x->name, off);
			hold_fail(t, rc);
			break;
		}
	}
	if (stream)
		d->StreamDestroy(stream);
	return NULL;
}

/* Small held pieces go back to back into shared slices, 4 KiB apart at
 * least (no ids to align to, but whole pages). */
#define HELD_ALIGN 4096u

static bool held_small(const struct held_stream *x, size_t slice)
{
	return x->npc == 1 && x->len <= slice / 4;
}

/* Lays the pieces of s[0..n) out in slices, in order: one each, small
 * ones back to back in shared ones. With sl, gives them sl[0..got) and
 * returns the slices used: pieces left over get none (memory of their
 * own), and so do those of a share that cannot be made (no memory).
 * Without sl (NULL), only counts the slices they would take: one walk for
 * both, so that the count is what the placing takes. */
static size_t held_place(struct held_stream *s, size_t n, size_t slice, struct pool_slice **sl, size_t got)
{
	size_t k = 0, used = slice;   /* used: of the shared slice being filled */
	struct held_share *sh = NULL;
	for (size_t i = 0; i < n; i++) {
		struct held_stream *x = &s[i];
		if (!held_small(x, slice)) {
			for (size_t j = 0; j < x->npc && (!sl || k < got); j++, k++)
				if (sl)
					x->pc[j].sl = sl[k];
			continue;
		}
		size_t off = (used + HELD_ALIGN - 1) / HELD_ALIGN * HELD_ALIGN;
		if (off + x->len > slice) {
			if (sl && k == got)
				continue;
			if (sl) {
				struct held_share *nsh = malloc(sizeof(*nsh));
				if (!nsh)
					continue;
				nsh->sl = sl[k];
				atomic_init(&nsh->refs, 0);
				sh = nsh;
			}
			k++;
			off = 0;
		}
		if (sl) {   /* used < slice only once a share was made */
			atomic_fetch_add_explicit(&sh->refs, 1, memory_order_relaxed);
			x->pc[0].sh = sh;
			x->pc[0].off = off;
		}
		used = off + x->len;
	}
	return k;
}

int capture_hold(const struct cudrv *d, struct pool *pool, const struct capture_region *r, size_t n,
		 const struct capture_blob *b, size_t nb, struct capture_held **out)
{
	struct capture_held *h = calloc(1, sizeof(*h));
	size_t *first = calloc(n + 1, sizeof(*first));
	if (!h || !first || !(h->s = calloc(n + nb + 1, sizeof(*h->s)))) {
		free(h);
		free(first);
		return crest_errf(-ENOMEM, "holding a checkpoint in memory");
	}
	const size_t slice = pool_slice_bytes(pool);
	size_t pieces = 0;
	bool device = false;
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < n + nb; i++) {
		const bool blob = i >= n;
		const char *name = blob ? b[i - n].name : r[i].name;
		const size_t len = blob ? b[i - n].len : r[i].size;
		if (blob && (!name || !*name || (!b[i - n].data && len))) {
			rc = crest_errx(-EINVAL, "blob %zu has no name or no data", i - n);
			break;
		}
		struct held_stream *x = &h->s[h->n++];
		x->name = strdup(name);
		x->len = len;
		x->blob = blob;
		x->device = !blob && r[i].device && len;
		x->src = blob ? b[i - n].data : r[i].ptr;
		x->ctx = blob ? NULL : r[i].ctx;
		x->npc = blob ? (len != 0) : (len + slice - 1) / slice;
		x->pc = calloc(x->npc + 1, sizeof(*x->pc));
		if (!x->name || !x->pc) {
			rc = crest_errf(-ENOMEM, "holding %s in memory", name);
			break;
		}
		if (blob) {
			if (len && (!(x->pc[0].hb = held_buf_new(len))))
				rc = crest_errf(-ENOMEM, "holding blob %s (%zu bytes) in memory", name, len);
			else if (len)
				memcpy(x->pc[0].hb->p, x->src, len);
			if (len)
				x->pc[0].len = len;
			continue;
		}
		first[i] = pieces;
		pieces += x->npc;
		device |= x->device;
		for (size_t k = 0; k < x->npc; k++)
			x->pc[k].len = len - k * slice < slice ? len - k * slice : slice;
	}
	if (rc == 0 && device && !d)
		rc = crest_errx(-ENODEV, "no GPU driver");
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	size_t nt = cpus > 0 ? (size_t)cpus : 1;
	if (nt > HOLD_THREADS)
		nt = HOLD_THREADS;
	if (nt > pieces)
		nt = pieces;
	/* Free slices: the first pieces keep one each (small regions, of at
	 * most a quarter slice, share one: copy_small says why), but nt stay
	 * free for the team to stage device pieces through. */
	const size_t need = rc == 0 ? held_place(h->s, n, slice, NULL, 0) : 0;
	size_t got = 0, transient = 0;
	struct pool_slice **sl = rc == 0 && pieces ? calloc(need + nt, sizeof(*sl)) : NULL;
	if (sl) {
		while (got < need + nt && (sl[got] = pool_try_take(pool)))
			got++;
		transient = got < nt ? got : nt;
		for (size_t k = 0; k < transient; k++)
			pool_give(sl[--got]);
		const size_t used = held_place(h->s, n, slice, sl, got);
		while (got > used)
			pool_give(sl[--got]);
		free(sl);
	}
	if (rc == 0 && pieces) {
		struct hold_team t = { .d = d, .pool = pool, .transient = transient > 0, .s = h->s, .n = n,
				       .slice = slice, .first = first, .pieces = pieces };
		atomic_init(&t.next, 0);
		pthread_mutex_init(&t.mu, NULL);
		if (t.transient && nt > transient)
			nt = transient;   /* a device piece takes one at a time per thread */
		pthread_t th[HOLD_THREADS];
		size_t started = 0;
		for (; started + 1 < nt; started++)
			if (pthread_create(&th[started], NULL, hold_worker, &t) != 0)
				break;
		hold_worker(&t);   /* this thread is one of the team */
		for (size_t k = 0; k < started; k++)
			pthread_join(th[k], NULL);
		pthread_mutex_destroy(&t.mu);
		rc = t.rc;
		if (rc < 0)
			crest_errset_str(t.msg);
	}
	free(first);
	if (rc < 0) {
		capture_held_free(h);
		return rc;
	}
	*out = h;
	return 0;
}

int capture_held_ingest(struct capture_held *h, struct engine_snap *snap)
{
	const char **names = calloc(h->n + 1, sizeof(*names));
	if (!names)
		return crest_errf(-ENOMEM, "ingesting a held checkpoint");
	for (size_t i = 0; i < h->n; i++)
		names[i] = h->s[i].name;
	int rc = capture_dirs(snap, names, h->n);
	free(names);
	for (size_t i = 0; rc == 0 && i < h->n; i++) {
		struct held_stream *x = &h->s[i];
		struct engine_stream *st;
		rc = stream_open(snap, x->name, x->blob, x->device, &st);
		for (size_t k = 0; rc == 0 && k < x->npc; k++) {
			/* The engine's now, whatever happens. */
			struct held_piece pc = x->pc[k];
			x->pc[k].sl = NULL;
			x->pc[k].sh = NULL;
			x->pc[k].hb = NULL;
			rc = pc.sl   ? engine_stream_add_memory(st, pc.sl->p, pc.len, pool_release_cb, pc.sl)
			     : pc.sh ? engine_stream_add_memory(st, pc.sh->sl->p + pc.off, pc.len, held_share_put, pc.sh)
				   : engine_stream_add_memory(st, pc.hb->p, pc.len, held_buf_free, pc.hb);
		}
		if (rc == 0)
			engine_stream_close(st);
	}
	return rc;
}
