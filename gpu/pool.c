/* pool.c - the staging pool; see pool.h. */
#include "gpu/pool.h"
#include "util/err.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

struct pool {
	const struct cudrv *d;       /* non-NULL: base is pinned */
	uint8_t *base;
	uint8_t *ids;                /* pinned: ids_bytes for each slice, or NULL */
	size_t bytes, slice, ids_bytes;
	unsigned n;
	struct pool_slice *slices;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned *free_idx;          /* stack of free slices, under lock */
	unsigned nfree;
};

int pool_open(const struct cudrv *d, size_t bytes, size_t slice_bytes, struct pool **out)
{
	if (slice_bytes == 0 || bytes / slice_bytes < 2)
		return crest_errx(-EINVAL, "staging pool of %zu bytes holds fewer than two slices of %zu bytes",
				  bytes, slice_bytes);
	struct pool *p = calloc(1, sizeof(*p));
	if (!p)
		return crest_errf(-ENOMEM, "allocating the staging pool");
	p->slice = slice_bytes;
	p->n = (unsigned)(bytes / slice_bytes);
	p->bytes = (size_t)p->n * slice_bytes;
	p->slices = calloc(p->n, sizeof(*p->slices));
	p->free_idx = calloc(p->n, sizeof(*p->free_idx));
	if (!p->slices || !p->free_idx) {
		pool_close(p);
		return crest_errf(-ENOMEM, "allocating the staging pool");
	}
	if (d) {
		void *b = NULL;
		int rc = cudrv_check(d, d->MemHostAlloc(&b, p->bytes, CU_MEMHOSTALLOC_PORTABLE),
				     "pinning the staging pool (cuMemHostAlloc)");
		if (rc < 0) {
			pool_close(p);
			return crest_errctx(rc, "%zu bytes of staging", p->bytes);
		}
		p->d = d;
		p->base = b;
		/* 1/128 more for ids. Without it the CPU hashes what the GPU
		 * did (capture/regions.c): slower, not wrong, so a failure
		 * here does not fail the open. */
		const size_t ib = slice_bytes / POOL_IDS_CHUNK * 32;
		b = NULL;
		if (ib && d->MemHostAlloc(&b, ib * p->n, CU_MEMHOSTALLOC_PORTABLE) == CUDA_SUCCESS) {
			p->ids = b;
			p->ids_bytes = ib;
		}
	} else {
		/* MAP_POPULATE faults every page in now, not during a checkpoint. */
		void *b = mmap(NULL, p->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
			       -1, 0);
		if (b == MAP_FAILED) {
			int err = -errno;
			pool_close(p);
			return crest_errf(err, "allocating %zu bytes of staging", bytes);
		}
		p->base = b;
	}
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->cond, NULL);
	for (unsigned i = 0; i < p->n; i++) {
		p->slices[i] = (struct pool_slice){ .pool = p, .idx = i, .p = p->base + (size_t)i * p->slice,
						    .ids = p->ids ? p->ids + (size_t)i * p->ids_bytes : NULL };
		p->free_idx[p->nfree++] = p->n - 1 - i;   /* slice 0 comes out first */
	}
	*out = p;
	return 0;
}

void pool_close(struct pool *p)
{
	if (!p)
		return;
	if (p->ids)
		p->d->MemFreeHost(p->ids);
	if (p->base) {
		if (p->d)
			p->d->MemFreeHost(p->base);
		else
			munmap(p->base, p->bytes);
		pthread_mutex_destroy(&p->lock);
		pthread_cond_destroy(&p->cond);
	}
	free(p->slices);
	free(p->free_idx);
	free(p);
}

size_t pool_slice_bytes(const struct pool *p)
{
	return p->slice;
}

size_t pool_ids_bytes(const struct pool *p)
{
	return p->ids_bytes;
}

unsigned pool_nslices(const struct pool *p)
{
	return p->n;
}

bool pool_pinned(const struct pool *p)
{
	return p->d != NULL;
}

struct pool_slice *pool_try_take(struct pool *p)
{
	struct pool_slice *s = NULL;
	pthread_mutex_lock(&p->lock);
	if (p->nfree)
		s = &p->slices[p->free_idx[--p->nfree]];
	pthread_mutex_unlock(&p->lock);
	return s;
}

struct pool_slice *pool_take(struct pool *p)
{
	pthread_mutex_lock(&p->lock);
	while (!p->nfree)
		pthread_cond_wait(&p->cond, &p->lock);
	struct pool_slice *s = &p->slices[p->free_idx[--p->nfree]];
	pthread_mutex_unlock(&p->lock);
	return s;
}

void pool_give(struct pool_slice *s)
{
	struct pool *p = s->pool;
	pthread_mutex_lock(&p->lock);
	p->free_idx[p->nfree++] = s->idx;
	pthread_cond_signal(&p->cond);
	pthread_mutex_unlock(&p->lock);
}

void pool_release_cb(void *arg)
{
	pool_give(arg);
}
