/*
 * crest.c - libcrest: regions, checkpoints through the staging pool,
 * restores; see include/crest.h.
 *
 * A checkpoint copies each region slice by slice (pool_slice_bytes, a
 * multiple of the engine's 4 MiB segment, so slices never cut a segment and
 * the chunks of a region land where they did last time). Copied slices wait
 * in a FIFO and are handed to the engine only when the pool runs dry or all
 * copies are done: while the state fits, no ingest thread competes with the
 * copy for CPU or memory bandwidth, and the stall is the copy alone. The
 * engine gives each slice back through pool_release_cb.
 */
#include "crest.h"

#include "gpu/cudrv.h"
#include "gpu/pool.h"
#include "cas/cas.h"
#include "engine/engine.h"
#include "restore/gpu.h"
#include "restore/restore.h"
#include "util/err.h"
#include "util/par.h"
#include "util/progress.h"
#include "util/sha256.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define MAX_CTX 16
#define SEGMENT ENGINE_SEGMENT_BYTES       /* slices are whole segments */
#define RESTORE_WINDOW (64u << 20)          /* largest restore window: see restore_regions */

struct region {
	uint64_t id;
	char *name;
	uint8_t *ptr;
	size_t size;
	enum crest_mem mem;
	CUcontext ctx;                /* device regions */
};

/* Streams and per-slice events of one CUDA context. */
struct ctxset {
	CUcontext ctx;
	CUstream *s;
	unsigned ns;
	CUevent *ev;                  /* ev[slice index] */
};

struct pending {
	uint64_t id;
	struct engine_snap *snap;
	uint64_t stall_ns, wait_ns;
	unsigned rounds;
};

struct crest {
	struct crest_options o;
	struct cas_store *store;
	struct engine *eng;
	char *store_dir;     /* to open it again (reopen_if_broken) */
	struct pool *pool;
	const struct cudrv *d;        /* NULL: no GPU at open */
	CUdevice dev;
	CUcontext pctx;               /* retained primary context, or NULL */
	struct region *regions;
	size_t nregions, capregions;
	uint64_t next_region;
	struct ctxset ctxs[MAX_CTX];
	unsigned nctx;
	struct pending *ckpts;
	size_t nckpts, capckpts;
	uint64_t next_ckpt;
	uint8_t parent_id[32];
	struct cas_manifest *parent;  /* newest waited-for snapshot: dedup hints */
};

/* ---- handles ---- */

/*
 * A crest_t * given to the caller is a token, never the address of the
 * struct: slot and generation of a process-wide table, odd so that no real
 * pointer matches one. Every public function looks the token up under the
 * lock and gets the struct only if the slot is live and of the same
 * generation. A closed handle (its slot freed, or reused by a later
 * crest_open with the next generation), a handle closed twice, or a pointer
 * that never came from crest_open is -EBADF and is never dereferenced. The
 * lock covers the lookup only: a handle is still used by one thread at a
 * time (crest.h), so no call is running on a handle while it is closed.
 */
#define HANDLE_SLOTS 65535u

struct handle_slot {
	crest_t *c;          /* NULL: free */
	uint32_t gen;
};

static pthread_mutex_t handles_lock = PTHREAD_MUTEX_INITIALIZER;
static struct handle_slot *handles;
static size_t nhandles;

static crest_t *handle_token(size_t slot, uint32_t gen)
{
	return (crest_t *)(((uintptr_t)gen << 17) | ((uintptr_t)(slot + 1) << 1) | 1u);
}

/* A slot for c; *out its token. */
static int handle_add(crest_t *c, crest_t **out)
{
	int rc = 0;
	pthread_mutex_lock(&handles_lock);
	size_t i = 0;
	while (i < nhandles && handles[i].c)
		i++;
	if (i == nhandles) {
		struct handle_slot *n = NULL;
		if (nhandles < HANDLE_SLOTS)
			n = realloc(handles, (nhandles + 1) * sizeof(*n));
		if (!n)
			rc = crest_errx(-EMFILE, "crest_open: %zu crest handles are open already", nhandles);
		else {
			handles = n;
			handles[nhandles++] = (struct handle_slot){ 0 };
		}
	}
	if (rc == 0) {
		handles[i].c = c;
		handles[i].gen = (handles[i].gen + 1) & 0x7fffffffu;   /* fits the token on 32-bit too */
		*out = handle_token(i, handles[i].gen);
	}
	pthread_mutex_unlock(&handles_lock);
	return rc;
}

/* The struct behind token h; with drop, the slot is freed in the same
 * critical section, so of two crest_close calls only one gets it. */
static int handle_get(const crest_t *h, const char *what, bool drop, crest_t **out)
{
	*out = NULL;
	if (!h)
		return crest_errx(-EBADF, "%s: the crest handle is NULL", what);
	const uintptr_t t = (uintptr_t)h;
	const size_t slot = ((t >> 1) & 0xffffu) - 1;
	const uint32_t gen = (uint32_t)(t >> 17);
	pthread_mutex_lock(&handles_lock);
	if ((t & 1) && slot < nhandles && handles[slot].c && handles[slot].gen == gen) {
		*out = handles[slot].c;
		if (drop)
			handles[slot].c = NULL;
	}
	pthread_mutex_unlock(&handles_lock);
	if (!*out)
		return crest_errx(-EBADF, "%s: not an open crest handle (closed, or never opened)", what);
	return 0;
}

void crest_options_init(struct crest_options *o)
{
	memset(o, 0, sizeof(*o));
	o->staging_bytes = (size_t)1 << 30;
	o->copy_streams = 4;
}

static struct region *region_find(crest_t *c, uint64_t id)
{
	for (size_t i = 0; i < c->nregions; i++)
		if (c->regions[i].id == id)
			return &c->regions[i];
	return NULL;
}

static struct region *region_by_name(crest_t *c, const char *name)
{
	for (size_t i = 0; i < c->nregions; i++)
		if (!strcmp(c->regions[i].name, name))
			return &c->regions[i];
	return NULL;
}

static struct pending *pending_find(crest_t *c, uint64_t id)
{
	for (size_t i = 0; i < c->nckpts; i++)
		if (c->ckpts[i].id == id)
			return &c->ckpts[i];
	return NULL;
}

/* ---- the driver ---- */

/* The driver, for a device region; a clear error when there is none. */
static int need_gpu(crest_t *c, const char *what)
{
	if (c->d)
		return 0;
	if (c->o.flags & CREST_OPEN_NO_GPU)
		return crest_errx(-ENODEV, "%s: the store was opened with CREST_OPEN_NO_GPU", what);
	const struct cudrv *d;
	int rc = cudrv_load(&d);
	if (rc < 0)
		return crest_errctx(rc, "%s", what);
	return crest_errx(-ENODEV, "%s: no NVIDIA GPU was visible when the store was opened", what);
}

static int ctxset_get(crest_t *c, CUcontext ctx, struct ctxset **out)
{
	for (unsigned i = 0; i < c->nctx; i++)
		if (c->ctxs[i].ctx == ctx) {
			*out = &c->ctxs[i];
			return 0;
		}
	if (c->nctx == MAX_CTX)
		return crest_errx(-ENOSPC, "device regions in more than %d CUDA contexts", MAX_CTX);
	const struct cudrv *d = c->d;
	struct ctxset *cs = &c->ctxs[c->nctx];
	memset(cs, 0, sizeof(*cs));
	cs->ctx = ctx;
	cs->ns = c->o.copy_streams;
	cs->s = calloc(cs->ns, sizeof(*cs->s));
	cs->ev = calloc(pool_nslices(c->pool), sizeof(*cs->ev));
	if (!cs->s || !cs->ev) {
		free(cs->s);
		free(cs->ev);
		return crest_errf(-ENOMEM, "allocating copy streams");
	}
	c->nctx++;   /* counted now: close frees whatever was created */
	int rc = cudrv_check(d, d->CtxSetCurrent(ctx), "entering a region's context (cuCtxSetCurrent)");
	for (unsigned i = 0; rc == 0 && i < cs->ns; i++)
		rc = cudrv_check(d, d->StreamCreate(&cs->s[i], CU_STREAM_NON_BLOCKING),
				 "creating a copy stream (cuStreamCreate)");
	for (unsigned i = 0; rc == 0 && i < pool_nslices(c->pool); i++)
		rc = cudrv_check(d, d->EventCreate(&cs->ev[i], CU_EVENT_DISABLE_TIMING),
				 "creating a copy event (cuEventCreate)");
	*out = cs;
	return rc;
}

static void ctxset_free(const struct cudrv *d, struct ctxset *cs, unsigned nev)
{
	if (d && d->CtxSetCurrent(cs->ctx) == CUDA_SUCCESS) {
		for (unsigned i = 0; i < cs->ns; i++)
			if (cs->s[i]) {
				d->StreamSynchronize(cs->s[i]);
				d->StreamDestroy(cs->s[i]);
			}
		for (unsigned i = 0; i < nev; i++)
			if (cs->ev[i])
				d->EventDestroy(cs->ev[i]);
	}
	free(cs->s);
	free(cs->ev);
}

/* ---- open and close ---- */

static int open_gpu(crest_t *c)
{
	const struct cudrv *d;
	if (c->o.flags & CREST_OPEN_NO_GPU)
		return 0;
	if (cudrv_load(&d) < 0)
		return 0;   /* host regions only; a device region says why */
	int n = 0;
	if (d->DeviceGetCount(&n) != CUDA_SUCCESS || n == 0)
		return 0;
	if (c->o.device < 0 || c->o.device >= n)
		return crest_errx(-EINVAL, "GPU %d does not exist: this machine has %d", c->o.device, n);
	int rc = cudrv_check(d, d->DeviceGet(&c->dev, c->o.device), "cuDeviceGet");
	if (rc == 0)
		rc = cudrv_check(d, d->DevicePrimaryCtxRetain(&c->pctx, c->dev),
				 "retaining the GPU's primary context (cuDevicePrimaryCtxRetain)");
	if (rc < 0)
		return rc;
	c->d = d;
	return 0;
}

/* A slice: a multiple of the engine segment, 1/16 of the pool, 4..64 MiB. */
static size_t slice_size(size_t pool)
{
	size_t s = pool / 16;
	if (s > (64u << 20))
		s = 64u << 20;
	s -= s % SEGMENT;
	return s < SEGMENT ? SEGMENT : s;
}

/* The engine on c's store, with the handle's options. */
static int engine_start(crest_t *c)
{
	struct engine_opts eo;
	engine_opts_default(&eo);
	if (c->o.workers)
		eo.workers = c->o.workers;
	return engine_open(c->store, &eo, &c->eng);
}

static int crest_destroy(crest_t *c);

int crest_open(const char *dir, const struct crest_options *o, crest_t **out)
{
	if (!out)
		return crest_errx(-EINVAL, "crest_open: out is NULL");
	*out = NULL;
	crest_t *c = calloc(1, sizeof(*c));
	if (!c)
		return crest_errf(-ENOMEM, "crest_open");
	crest_options_init(&c->o);
	if (o) {
		c->o = *o;
		if (!c->o.staging_bytes)
			c->o.staging_bytes = (size_t)1 << 30;
		if (!c->o.copy_streams)
			c->o.copy_streams = 4;
	}
	c->next_region = c->next_ckpt = 1;
	if (!dir)
		dir = cas_default_path();
	int rc = 0;
	if (c->o.staging_bytes < 2 * SEGMENT)
		rc = crest_errx(-EINVAL, "staging pool of %zu bytes is too small: crest needs at least %u",
				c->o.staging_bytes, 2 * SEGMENT);
	if (rc == 0 && !(c->store_dir = strdup(dir)))
		rc = crest_errf(-ENOMEM, "opening crest store %s", dir);
	if (rc == 0)
		rc = cas_open(dir, CAS_WRITE, &c->store);
	if (rc == 0)
		rc = open_gpu(c);
	if (rc == 0) {
		CUcontext saved = NULL;
		if (c->d) {
			c->d->CtxGetCurrent(&saved);
			c->d->CtxSetCurrent(c->pctx);
		}
		rc = pool_open(c->d, c->o.staging_bytes, slice_size(c->o.staging_bytes), &c->pool);
		if (c->d)
			c->d->CtxSetCurrent(saved);
	}
	if (rc == 0)
		rc = engine_start(c);
	if (rc < 0) {
		rc = crest_errctx(rc, "opening crest store %s", dir);
		char msg[1024];
		crest_errcpy(msg, sizeof(msg));
		crest_destroy(c);
		crest_errset_str(msg);
		return rc;
	}
	rc = handle_add(c, out);
	if (rc < 0)
		crest_destroy(c);   /* keeps the message: destroy has nothing to wait for */
	return rc;
}

static void result_fill(const struct pending *p, const struct engine_result *er, struct crest_result *r)
{
	memset(r, 0, sizeof(*r));
	hex_encode(er->id, 32, r->snapshot);
	r->bytes = er->logical_bytes;
	r->new_bytes = er->new_bytes;
	r->stored_bytes = er->stored_bytes;
	r->zero_bytes = er->zero_bytes;
	r->ingest_ns = er->ingest_ns;
	r->stall_ns = p->stall_ns;
	r->staging_wait_ns = p->wait_ns;
	r->rounds = p->rounds;
}

/* Waits for the pending checkpoints and frees c: crest_close, and
 * crest_open's failures. */
static int crest_destroy(crest_t *c)
{
	int first = 0;
	char msg[1024] = "";
	for (size_t i = 0; i < c->nckpts; i++) {
		struct engine_result er;
		int w = engine_snapshot_wait(c->ckpts[i].snap, &er);
		if (w < 0 && !first) {
			first = w;
			crest_errcpy(msg, sizeof(msg));
		}
	}
	c->nckpts = 0;
	engine_close(c->eng);   /* before the pool: its workers give slices back */
	const struct cudrv *d = c->d;
	CUcontext saved = NULL;
	if (d)
		d->CtxGetCurrent(&saved);
	for (unsigned i = 0; i < c->nctx; i++)
		ctxset_free(d, &c->ctxs[i], c->pool ? pool_nslices(c->pool) : 0);
	if (d && c->pctx)
		d->CtxSetCurrent(c->pctx);
	pool_close(c->pool);
	if (d) {
		d->CtxSetCurrent(saved);
		if (c->pctx)
			d->DevicePrimaryCtxRelease(c->dev);
	}
	cas_manifest_free(c->parent);
	cas_close(c->store);
	free(c->store_dir);
	for (size_t i = 0; i < c->nregions; i++)
		free(c->regions[i].name);
	free(c->regions);
	free(c->ckpts);
	free(c);
	if (first)
		crest_errset_str(msg);
	return first;
}

int crest_close(crest_t *ch)
{
	if (!ch)
		return 0;
	crest_t *c;
	int rc = handle_get(ch, "crest_close", true, &c);
	if (rc < 0)
		return rc;
	return crest_destroy(c);
}

/* ---- regions ---- */

/* Whether [p, p+len) is still mapped: a region freed with munmap (large
 * malloc blocks, freed tensors) shows up here instead of as a crash. */
static int host_mapped(const void *p, size_t len)
{
	const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t a = (uintptr_t)p & ~(pg - 1);
	const uintptr_t end = (uintptr_t)p + len;
	unsigned char vec[4096];
	while (a < end) {
		size_t pages = (end - a + pg - 1) / pg;
		if (pages > sizeof(vec))
			pages = sizeof(vec);
		if (mincore((void *)a, pages * pg, vec) < 0)
			return -errno;
		a += pages * pg;
	}
	return 0;
}

/* Is the region still what was registered? */
static int region_check(crest_t *c, const struct region *r)
{
	if (r->size == 0)
		return 0;
	if (r->mem == CREST_MEM_HOST) {
		int rc = host_mapped(r->ptr, r->size);
		if (rc < 0)
			return crest_errx(-EFAULT, "host region %s (%p, %zu bytes) is no longer mapped: freed while "
					  "registered? (unregister it first)", r->name, (void *)r->ptr, r->size);
		return 0;
	}
	CUdeviceptr base = 0;
	size_t bsize = 0;
	CUresult cr = c->d->MemGetAddressRange(&base, &bsize, (CUdeviceptr)(uintptr_t)r->ptr);
	if (cr != CUDA_SUCCESS)
		return crest_errx(-EFAULT, "device region %s (0x%llx, %zu bytes) is not device memory any more: "
				  "freed while registered? (unregister it first)", r->name,
				  (unsigned long long)(uintptr_t)r->ptr, r->size);
	if ((uintptr_t)r->ptr + r->size > base + bsize)
		return crest_errx(-EFAULT, "device region %s (0x%llx, %zu bytes) runs past the end of its "
				  "allocation (0x%llx, %zu bytes)", r->name, (unsigned long long)(uintptr_t)r->ptr,
				  r->size, (unsigned long long)base, bsize);
	return 0;
}

int crest_register(crest_t *ch, const char *name, void *ptr, size_t size, enum crest_mem mem, crest_region_t *out)
{
	crest_t *c;
	int rc = handle_get(ch, "crest_register", false, &c);
	if (rc < 0)
		return rc;
	if (!name || !*name || !out)
		return crest_errx(-EINVAL, "crest_register: a region needs a name and an out handle");
	if (!ptr && size)
		return crest_errx(-EINVAL, "region %s: NULL pointer with %zu bytes", name, size);
	if (mem != CREST_MEM_HOST && mem != CREST_MEM_DEVICE)
		return crest_errx(-EINVAL, "region %s: memory kind %d is neither host nor device", name, (int)mem);
	if (region_by_name(c, name))
		return crest_errx(-EEXIST, "region %s is already registered", name);
	struct region r = { .name = strdup(name), .ptr = ptr, .size = size, .mem = mem };
	if (!r.name)
		return crest_errf(-ENOMEM, "registering region %s", name);
	if (mem == CREST_MEM_DEVICE) {
		char what[300];
		snprintf(what, sizeof(what), "device region %s", name);
		rc = need_gpu(c, what);
		if (rc == 0 && size)
			rc = cudrv_check(c->d, c->d->PointerGetAttribute(&r.ctx, CU_POINTER_ATTRIBUTE_CONTEXT,
									 (CUdeviceptr)(uintptr_t)ptr),
					 "looking up its context (cuPointerGetAttribute)");
		if (rc < 0 && size)
			rc = crest_errctx(rc, "device region %s at 0x%llx", name, (unsigned long long)(uintptr_t)ptr);
		if (rc == 0 && !r.ctx)
			r.ctx = c->pctx;
	}
	if (rc == 0)
		rc = region_check(c, &r);
	if (rc == 0 && c->nregions == c->capregions) {
		size_t cap = c->capregions ? c->capregions * 2 : 16;
		struct region *nr = realloc(c->regions, cap * sizeof(*nr));
		if (!nr)
			rc = crest_errf(-ENOMEM, "registering region %s", name);
		else {
			c->regions = nr;
			c->capregions = cap;
		}
	}
	if (rc < 0) {
		free(r.name);
		return rc;
	}
	r.id = c->next_region++;
	c->regions[c->nregions++] = r;
	*out = r.id;
	return 0;
}

int crest_unregister(crest_t *ch, crest_region_t id)
{
	crest_t *c;
	int rc = handle_get(ch, "crest_unregister", false, &c);
	if (rc < 0)
		return rc;
	struct region *r = region_find(c, id);
	if (!r)
		return crest_errx(-EBADF, "crest_unregister: region handle %llu is not registered "
				  "(never was, or already unregistered)", (unsigned long long)id);
	free(r->name);
	size_t i = (size_t)(r - c->regions);
	memmove(r, r + 1, (c->nregions - i - 1) * sizeof(*r));
	c->nregions--;
	return 0;
}

size_t crest_region_count(const crest_t *ch)
{
	crest_t *c;
	return handle_get(ch, "crest_region_count", false, &c) < 0 ? 0 : c->nregions;
}

/* ---- checkpoint ---- */

struct copied {
	struct pool_slice *sl;
	struct engine_stream *st;
	size_t len;
	CUevent ev;                   /* NULL: a host copy, already done */
};

struct copier {
	crest_t *c;
	struct copied *q;             /* FIFO of copied slices not yet with the engine */
	size_t head, n, cap;
	uint64_t wait_ns;
	unsigned rounds, next_stream;
};

/* Hands the oldest copied slice to the engine, once its copy is done. */
static int copier_flush_one(struct copier *cp)
{
	struct copied x = cp->q[cp->head];
	cp->head = (cp->head + 1) % cp->cap;
	cp->n--;
	int rc = 0;
	if (x.ev)
		rc = cudrv_check(cp->c->d, cp->c->d->EventSynchronize(x.ev),
				 "waiting for a device-to-host copy (cuEventSynchronize)");
	if (rc < 0) {
		pool_give(x.sl);
		return rc;
	}
	/* The engine calls pool_release_cb once, even when this fails. */
	return engine_stream_add_memory(x.st, x.sl->p, x.len, pool_release_cb, x.sl);
}

/* On failure: waits for copies in flight and gives their slices back. */
static void copier_drain(struct copier *cp)
{
	while (cp->n) {
		struct copied x = cp->q[cp->head];
		cp->head = (cp->head + 1) % cp->cap;
		cp->n--;
		if (x.ev)
			cp->c->d->EventSynchronize(x.ev);
		pool_give(x.sl);
	}
}

static int copier_slice(struct copier *cp, struct pool_slice **out)
{
	for (;;) {
		struct pool_slice *sl = pool_try_take(cp->c->pool);
		if (sl) {
			*out = sl;
			return 0;
		}
		if (cp->n) {   /* the pool ran dry: let the engine have what is copied */
			int rc = copier_flush_one(cp);
			if (rc < 0)
				return rc;
			continue;
		}
		uint64_t t = time_now_ns();
		*out = pool_take(cp->c->pool);
		cp->wait_ns += time_now_ns() - t;
		cp->rounds++;
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

static int copy_region(struct copier *cp, const struct region *r, struct engine_stream *st)
{
	crest_t *c = cp->c;
	struct ctxset *cs = NULL;
	int rc = 0;
	if (r->mem == CREST_MEM_DEVICE && r->size) {
		rc = ctxset_get(c, r->ctx, &cs);
		if (rc == 0)
			rc = cudrv_check(c->d, c->d->CtxSetCurrent(r->ctx), "entering the region's context");
		if (rc < 0)
			return crest_errctx(rc, "region %s", r->name);
	}
	const size_t slice = pool_slice_bytes(c->pool);
	for (size_t off = 0; off < r->size; off += slice) {
		const size_t n = r->size - off < slice ? r->size - off : slice;
		struct pool_slice *sl;
		rc = copier_slice(cp, &sl);
		if (rc < 0)
			return rc;
		struct copied x = { .sl = sl, .st = st, .len = n };
		if (cs) {
			CUstream s = cs->s[cp->next_stream++ % cs->ns];
			x.ev = cs->ev[sl->idx];
			rc = cudrv_check(c->d, c->d->MemcpyDtoHAsync(sl->p, (CUdeviceptr)(uintptr_t)(r->ptr + off), n, s),
					 "copying to staging (cuMemcpyDtoHAsync)");
			if (rc == 0)
				rc = cudrv_check(c->d, c->d->EventRecord(x.ev, s), "cuEventRecord");
			if (rc < 0) {
				c->d->StreamSynchronize(s);
				pool_give(sl);
				return crest_errctx(rc, "region %s, offset %zu", r->name, off);
			}
		} else {
			copy_to_staging(sl->p, r->ptr + off, n);
		}
		cp->q[(cp->head + cp->n) % cp->cap] = x;
		cp->n++;
	}
	return 0;
}

/* Makes the device idle: the given streams, else every context in use. */
static int sync_devices(crest_t *c, void *const *streams, size_t nstreams)
{
	int rc = 0;
	if (nstreams) {
		rc = need_gpu(c, "synchronizing the given streams");
		for (size_t i = 0; rc == 0 && i < nstreams; i++)
			rc = cudrv_check(c->d, c->d->StreamSynchronize((CUstream)streams[i]),
					 "synchronizing a given stream (cuStreamSynchronize)");
		return rc;
	}
	for (size_t i = 0; rc == 0 && i < c->nregions; i++) {
		const struct region *r = &c->regions[i];
		if (r->mem != CREST_MEM_DEVICE || !r->size)
			continue;
		bool seen = false;
		for (size_t k = 0; k < i && !seen; k++)
			seen = c->regions[k].mem == CREST_MEM_DEVICE && c->regions[k].ctx == r->ctx;
		if (seen)
			continue;
		rc = cudrv_check(c->d, c->d->CtxSetCurrent(r->ctx), "entering a region's context");
		if (rc == 0)
			rc = cudrv_check(c->d, c->d->CtxSynchronize(), "making the device idle (cuCtxSynchronize)");
	}
	return rc;
}

/* Directory entries for every "a/" prefix of a region or blob name, parents
 * first, so that `crest get` can lay the snapshot out as a tree. */
static int add_dirs(crest_t *c, struct engine_snap *s, const struct crest_checkpoint_opts *o)
{
	char **seen = NULL;
	size_t nseen = 0;
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < c->nregions + o->nblobs; i++) {
		const char *name = i < c->nregions ? c->regions[i].name : o->blobs[i - c->nregions].name;
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

static int add_labels(struct engine_snap *s, const struct crest_checkpoint_opts *o)
{
	struct cas_manifest *m = engine_snapshot_manifest(s);
	for (size_t i = 0; i < o->nlabels; i++) {
		const char *kv = o->labels[i];
		const char *eq = kv ? strchr(kv, '=') : NULL;
		if (!eq || eq == kv)
			return crest_errx(-EINVAL, "label \"%s\" is not key=value", kv ? kv : "(null)");
		char key[256];
		if ((size_t)(eq - kv) >= sizeof(key))
			return crest_errx(-EINVAL, "label key in \"%s\" is longer than %zu bytes", kv, sizeof(key) - 1);
		memcpy(key, kv, (size_t)(eq - kv));
		key[eq - kv] = 0;
		if (cas_manifest_label(m, key, eq + 1) < 0)
			return crest_errf(-ENOMEM, "adding label %s", kv);
	}
	return 0;
}

static int add_blobs(struct engine_snap *s, const struct crest_checkpoint_opts *o)
{
	for (size_t i = 0; i < o->nblobs; i++) {
		const struct crest_blob *b = &o->blobs[i];
		if (!b->name || !*b->name || (!b->data && b->len))
			return crest_errx(-EINVAL, "blob %zu has no name or no data", i);
		struct engine_stream *st;
		int rc = engine_stream_open(s, b->name, CAS_STREAM_BLOB, true, &st);
		if (rc < 0)
			return rc;
		void *copy = malloc(b->len ? b->len : 1);
		if (!copy)
			return crest_errf(-ENOMEM, "copying blob %s (%zu bytes)", b->name, b->len);
		memcpy(copy, b->data, b->len);
		rc = engine_stream_add_memory(st, copy, b->len, free, copy);
		if (rc < 0)
			return rc;
		engine_stream_close(st);
	}
	return 0;
}

/* After a commit that failed in the index, the store refuses commits until
 * it is opened again, and its next open puts it right (cas_commit's notes):
 * a job that checkpoints every few minutes goes on with the next one. Only
 * with no checkpoint in flight, whose handles name the old engine. */
static int reopen_if_broken(crest_t *c)
{
	if ((c->store && c->eng && !cas_store_broken(c->store)) || c->nckpts)
		return 0;
	const char *dir = c->store_dir;
	if (c->eng)
		engine_close(c->eng);
	c->eng = NULL;
	cas_close(c->store);
	c->store = NULL;
	cas_manifest_free(c->parent);   /* the parent may be one that failed */
	c->parent = NULL;
	int rc = cas_open(dir, CAS_WRITE, &c->store);
	if (rc == 0)
		rc = engine_start(c);
	if (rc < 0)
		rc = crest_errctx(rc, "reopening crest store %s after a failed commit", dir);
	return rc;
}

int crest_checkpoint(crest_t *ch, const struct crest_checkpoint_opts *o, crest_ckpt_t *out)
{
	const struct crest_checkpoint_opts none = { 0 };
	crest_t *c;
	int rc = handle_get(ch, "crest_checkpoint", false, &c);
	if (rc < 0)
		return rc;
	if (!out)
		return crest_errx(-EINVAL, "crest_checkpoint: out is NULL");
	if (!o)
		o = &none;
	const uint64_t t0 = time_now_ns();
	for (size_t i = 0; i < o->nblobs; i++)
		if (o->blobs[i].name && region_by_name(c, o->blobs[i].name))
			return crest_errx(-EEXIST, "blob %s has the name of a region", o->blobs[i].name);
	/* Two streams of one name: the manifest would hold both and a reader
	 * would get whichever it finds first. Quadratic, but blobs are few. */
	for (size_t i = 0; i < o->nblobs; i++)
		for (size_t j = 0; j < i && o->blobs[i].name; j++)
			if (o->blobs[j].name && !strcmp(o->blobs[i].name, o->blobs[j].name))
				return crest_errx(-EEXIST, "blobs %zu and %zu are both named %s", j, i,
						  o->blobs[i].name);
	if (o->tag && (rc = cas_tag_check(o->tag)) < 0)
		return rc;
	for (size_t i = 0; i < c->nregions; i++)
		if ((rc = region_check(c, &c->regions[i])) < 0)
			return crest_errctx(rc, "checkpoint");
	if (c->nckpts == c->capckpts) {
		size_t cap = c->capckpts ? c->capckpts * 2 : 8;
		struct pending *np = realloc(c->ckpts, cap * sizeof(*np));
		if (!np)
			return crest_errf(-ENOMEM, "starting a checkpoint");
		c->ckpts = np;
		c->capckpts = cap;
	}
	CUcontext saved = NULL;
	if (c->d)
		c->d->CtxGetCurrent(&saved);
	struct copier cp = { .c = c, .cap = pool_nslices(c->pool) };
	cp.q = calloc(cp.cap, sizeof(*cp.q));
	if (!cp.q)
		return crest_errf(-ENOMEM, "starting a checkpoint");
	struct engine_snap *snap = NULL;
	rc = reopen_if_broken(c);
	if (rc == 0)
		rc = sync_devices(c, o->sync_streams, o->nsync_streams);
	if (rc == 0)
		rc = engine_snapshot_begin(c->eng, "library", &snap);
	if (rc == 0)
		rc = add_labels(snap, o);
	if (rc == 0 && o->tag)
		rc = engine_snapshot_set_tag(snap, o->tag);
	if (rc == 0)
		rc = add_dirs(c, snap, o);
	if (rc == 0 && c->parent) {
		engine_snapshot_set_parent(snap, c->parent_id, c->parent);  /* takes it */
		c->parent = NULL;
	}
	uint64_t total = 0;
	for (size_t i = 0; i < c->nregions; i++)
		total += c->regions[i].size;
	if (rc == 0)
		engine_snapshot_expect(snap, total);
	for (size_t i = 0; rc == 0 && i < c->nregions; i++) {
		const struct region *r = &c->regions[i];
		struct engine_stream *st;
		rc = engine_stream_open(snap, r->name, CAS_STREAM_REGION, true, &st);
		if (rc == 0)
			rc = cas_stream_set_str(&engine_stream_meta(st)->meta,
						r->mem == CREST_MEM_DEVICE ? "mem=device" : "mem=host");
		if (rc == 0)
			rc = copy_region(&cp, r, st);
		if (rc == 0)
			engine_stream_close(st);
	}
	while (rc == 0 && cp.n)
		rc = copier_flush_one(&cp);
	if (rc == 0)
		rc = add_blobs(snap, o);
	if (rc == 0)
		rc = engine_snapshot_seal(snap);
	if (c->d)
		c->d->CtxSetCurrent(saved);
	if (rc < 0) {
		copier_drain(&cp);
		free(cp.q);
		if (snap)
			engine_snapshot_abort(snap);
		return crest_errctx(rc, "checkpoint");
	}
	free(cp.q);
	struct pending *p = &c->ckpts[c->nckpts++];
	*p = (struct pending){ .id = c->next_ckpt++, .snap = snap, .wait_ns = cp.wait_ns, .rounds = cp.rounds };
	p->stall_ns = time_now_ns() - t0;
	*out = p->id;
	return 0;
}

int crest_poll(crest_t *ch, crest_ckpt_t h)
{
	crest_t *c;
	int rc = handle_get(ch, "crest_poll", false, &c);
	if (rc < 0)
		return rc;
	struct pending *p = pending_find(c, h);
	if (!p)
		return crest_errx(-EBADF, "crest_poll: checkpoint handle %llu is not pending "
				  "(already waited for, or never issued)", (unsigned long long)h);
	return engine_snapshot_timedwait(p->snap, 0) ? 1 : 0;
}

int crest_wait(crest_t *ch, crest_ckpt_t h, struct crest_result *r)
{
	crest_t *c;
	int rc = handle_get(ch, "crest_wait", false, &c);
	if (rc < 0)
		return rc;
	struct pending *p = pending_find(c, h);
	if (!p)
		return crest_errx(-EBADF, "crest_wait: checkpoint handle %llu is not pending "
				  "(already waited for, or never issued)", (unsigned long long)h);
	struct pending me = *p;
	memmove(p, p + 1, (size_t)(c->ckpts + c->nckpts - p - 1) * sizeof(*p));
	c->nckpts--;
	struct engine_result er;
	rc = engine_snapshot_wait(me.snap, &er);
	if (rc < 0)
		return crest_errctx(rc, "checkpoint %llu", (unsigned long long)h);
	if (r)
		result_fill(&me, &er, r);
	/* The newest committed snapshot tells the next checkpoint's workers
	 * which chunks the store has: unchanged memory costs no index look-up. */
	struct cas_manifest *m;
	if (cas_manifest_load(c->store, er.id, &m) == 0) {
		cas_manifest_free(c->parent);
		c->parent = m;
		memcpy(c->parent_id, er.id, 32);
	}
	return 0;
}

/* ---- restore ---- */

/* name NULL: the newest snapshot of kind "library". */
static int resolve(crest_t *c, const char *name, uint8_t id[32])
{
	if (!c->store) {   /* a reopen after a failed commit failed: try again */
		const int rc = reopen_if_broken(c);
		if (rc < 0)
			return rc;
	}
	if (name)
		return cas_snapshot_resolve(c->store, name, id);
	struct cas_snapinfo *v;
	size_t n;
	int rc = cas_snapshot_list(c->store, &v, &n);
	if (rc < 0)
		return rc;
	rc = crest_errx(-ENOENT, "store %s holds no library snapshot", cas_dir(c->store));
	for (size_t i = n; i-- > 0;)
		if (!strcmp(v[i].head->kind, "library")) {
			memcpy(id, v[i].id, 32);
			rc = 0;
			break;
		}
	cas_snapshot_list_free(v, n);
	return rc;
}

static int load(crest_t *c, const char *name, char hex[65], struct cas_manifest **m)
{
	uint8_t id[32];
	int rc = resolve(c, name, id);
	if (rc == 0) {
		hex_encode(id, 32, hex);
		rc = cas_manifest_load(c->store, id, m);
	}
	return rc;
}

/* The snapshot's regions and the registered ones, by name and size. */
static int match_regions(crest_t *c, const struct cas_manifest *m, const char *snap)
{
	for (size_t i = 0; i < c->nregions; i++) {
		const struct region *r = &c->regions[i];
		const struct cas_stream *st = cas_manifest_find(m, r->name);
		if (!st || st->type != CAS_STREAM_REGION)
			return crest_errx(-EINVAL, "snapshot %.12s has no region %s (registered with %zu bytes)",
					  snap, r->name, r->size);
		if (st->size != r->size)
			return crest_errx(-EINVAL, "region %s has %llu bytes in snapshot %.12s but %zu registered",
					  r->name, (unsigned long long)st->size, snap, r->size);
	}
	for (size_t i = 0; i < m->nstreams; i++) {
		const struct cas_stream *st = &m->streams[i];
		if (st->type == CAS_STREAM_REGION && !region_by_name(c, st->name))
			return crest_errx(-EINVAL, "snapshot %.12s has region %s (%llu bytes), which is not registered",
					  snap, st->name, (unsigned long long)st->size);
	}
	return 0;
}

/* Every region, host and device, through restore/gpu.c's windows: chunks
 * read through cas_reader_get (header SHA-256 and CRC32C, no per-chunk
 * hashing or look-up), device windows staged in pinned slices. */
static int restore_regions(crest_t *c, const struct restore_ctx *rc_ctx, const struct cas_manifest *m)
{
	size_t n = 0, ndev = 0;
	for (size_t i = 0; i < c->nregions; i++) {
		n += c->regions[i].size > 0;
		ndev += c->regions[i].mem == CREST_MEM_DEVICE && c->regions[i].size;
	}
	if (!n)
		return 0;
	struct restore_gpu_dst *dst = calloc(n, sizeof(*dst));
	struct pool_slice **sl = calloc(pool_nslices(c->pool), sizeof(*sl));
	unsigned threads = c->o.restore_threads;
	if (!threads)
		threads = par_cores();
	/* Windows as large as two per thread allow, up to 64 MiB: a window is
	 * restored by walking the packs over the segments it covers (gpu.c),
	 * and the more of the segments that were ingested side by side it
	 * covers, the fewer records each walk passes over for nothing. Host
	 * regions need no staging and take the largest. */
	const size_t slice = pool_slice_bytes(c->pool);
	size_t win = (size_t)pool_nslices(c->pool) * slice / (2 * (size_t)threads);
	win = win > RESTORE_WINDOW ? RESTORE_WINDOW : win;
	win = win > slice ? slice : win;
	win -= win % SEGMENT;
	win = win < SEGMENT ? SEGMENT : win;
	const size_t per = slice / win;
	uint8_t **bufs = calloc((size_t)pool_nslices(c->pool) * per, sizeof(*bufs));
	int rc = dst && sl && bufs ? 0 : crest_errf(-ENOMEM, "restoring device regions");
	size_t k = 0;
	for (size_t i = 0; rc == 0 && i < c->nregions; i++) {
		const struct region *r = &c->regions[i];
		if (!r->size)
			continue;
		if (r->mem == CREST_MEM_HOST)
			dst[k++] = (struct restore_gpu_dst){ .st = cas_manifest_find(m, r->name), .host = r->ptr };
		else
			dst[k++] = (struct restore_gpu_dst){ .st = cas_manifest_find(m, r->name), .ctx = r->ctx,
							     .dst = (CUdeviceptr)(uintptr_t)r->ptr };
	}
	/* Two windows per thread; take slices as they come, waiting only for
	 * the first (a checkpoint still being ingested holds the rest). */
	size_t want = ndev ? (2 * (size_t)threads + per - 1) / per : 0, got = 0, nbufs = 0;
	if (ndev && want < 1)
		want = 1;
	while (rc == 0 && got < want) {
		struct pool_slice *s = got == 0 || nbufs < 2 ? pool_take(c->pool) : pool_try_take(c->pool);
		if (!s)
			break;
		sl[got++] = s;
		for (size_t j = 0; j < per; j++)
			bufs[nbufs++] = s->p + j * win;
	}
	if (rc == 0) {
		struct restore_gpu_opts go = { .d = c->d, .bufs = bufs, .nbufs = (unsigned)nbufs,
					       .buf_bytes = ndev ? win : RESTORE_WINDOW, .win_step = SEGMENT };
		rc = restore_streams_to_device(rc_ctx, dst, n, &go);
	}
	for (size_t i = 0; i < got; i++)
		pool_give(sl[i]);
	free(dst);
	free(sl);
	free(bufs);
	return rc;
}

int crest_restore(crest_t *ch, const char *snapshot, struct crest_restore_result *res)
{
	crest_t *c;
	int rc = handle_get(ch, "crest_restore", false, &c);
	if (rc < 0)
		return rc;
	const uint64_t t0 = time_now_ns();
	char hex[65];
	struct cas_manifest *m = NULL;
	rc = load(c, snapshot, hex, &m);
	if (rc < 0)
		return crest_errctx(rc, "restore");
	rc = match_regions(c, m, hex);
	for (size_t i = 0; rc == 0 && i < c->nregions; i++)
		rc = region_check(c, &c->regions[i]);
	CUcontext saved = NULL;
	if (c->d)
		c->d->CtxGetCurrent(&saved);
	if (rc == 0)
		rc = sync_devices(c, NULL, 0);   /* nothing may still be reading the regions */
	struct restore_ctx rctx = { .store = c->store, .snapshot = hex, .threads = c->o.restore_threads };
	uint64_t bytes = 0;
	for (size_t i = 0; rc == 0 && i < c->nregions; i++)
		bytes += c->regions[i].size;
	const uint64_t t1 = time_now_ns();
	if (rc == 0)
		rc = restore_regions(c, &rctx, m);
	if (getenv("CREST_TRACE"))
		fprintf(stderr, "crest trace: crest_restore: manifest and checks %.3f s, regions %.3f s\n",
			(t1 - t0) / 1e9, (time_now_ns() - t1) / 1e9);
	if (c->d)
		c->d->CtxSetCurrent(saved);
	cas_manifest_free(m);
	if (rc < 0)
		return crest_errctx(rc, "restore");
	if (res) {
		memset(res, 0, sizeof(*res));
		memcpy(res->snapshot, hex, sizeof(res->snapshot));
		res->bytes = bytes;
		res->ns = time_now_ns() - t0;
	}
	return 0;
}

int crest_read_blob(crest_t *ch, const char *snapshot, const char *name, void **data, size_t *len)
{
	crest_t *c;
	int rc = handle_get(ch, "crest_read_blob", false, &c);
	if (rc < 0)
		return rc;
	if (!name || !data || !len)
		return crest_errx(-EINVAL, "crest_read_blob: name, data and len are needed");
	char hex[65];
	struct cas_manifest *m = NULL;
	rc = load(c, snapshot, hex, &m);
	if (rc < 0)
		return crest_errctx(rc, "reading blob %s", name);
	const struct cas_stream *st = cas_manifest_find(m, name);
	if (!st || st->type != CAS_STREAM_BLOB) {
		cas_manifest_free(m);
		return crest_errx(-ENOENT, "snapshot %.12s has no blob %s", hex, name);
	}
	void *buf = malloc(st->size ? st->size : 1);
	if (!buf) {
		rc = crest_errf(-ENOMEM, "reading blob %s (%llu bytes)", name, (unsigned long long)st->size);
	} else {
		struct restore_ctx rctx = { .store = c->store, .snapshot = hex, .threads = 1 };
		rc = restore_stream_to_memory(&rctx, st, buf, st->size);
	}
	if (rc == 0) {
		*data = buf;
		*len = st->size;
	} else {
		free(buf);
	}
	cas_manifest_free(m);
	return rc;
}

void crest_free(void *p)
{
	free(p);
}
