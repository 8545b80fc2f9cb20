/*
 * pool.h - the staging pool: one block of host memory, cut into equal
 * slices, allocated once and reused by every checkpoint and restore.
 *
 * With a GPU driver the block is pinned (cuMemHostAlloc, portable to every
 * context), so device-to-host copies run at PCIe speed; without one it is
 * ordinary memory, touched once at open so that no checkpoint pays page
 * faults. A slice is taken by the copying thread and given back by whoever
 * is done with it last (an engine worker, through the release callback).
 * A pinned pool also gives each slice pinned room for the SHA-256 ids of
 * its chunks (POOL_IDS_CHUNK bytes or larger), which the GPU computes for
 * a region copied whole: they travel and are given back with the slice.
 */
#ifndef CREST_GPU_POOL_H
#define CREST_GPU_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu/cudrv.h"

struct pool;

/* The smallest chunk whose ids a slice has room for. */
#define POOL_IDS_CHUNK 4096u

struct pool_slice {
	struct pool *pool;
	unsigned idx;
	uint8_t *p;
	uint8_t *ids;                 /* pool_ids_bytes of pinned room; NULL: none */
};

/* bytes is rounded down to whole slices of slice_bytes (at least 2).
 * d: pin with this driver (a context must be current); NULL: pageable. */
int pool_open(const struct cudrv *d, size_t bytes, size_t slice_bytes, struct pool **out);
/* Every slice must have been given back. */
void pool_close(struct pool *p);

size_t pool_slice_bytes(const struct pool *p);
/* Each slice's room for ids: 32 bytes for every POOL_IDS_CHUNK of the
 * slice; 0 when slices have none (a pageable pool, or no pinned memory
 * for it). */
size_t pool_ids_bytes(const struct pool *p);
unsigned pool_nslices(const struct pool *p);
bool pool_pinned(const struct pool *p);

/* A free slice, or NULL when none is free right now. */
struct pool_slice *pool_try_take(struct pool *p);
/* Blocks until a slice is free. */
struct pool_slice *pool_take(struct pool *p);
/* Thread-safe; wakes a waiting taker. */
void pool_give(struct pool_slice *s);
/* An engine release callback: arg is a struct pool_slice. */
void pool_release_cb(void *arg);

#endif
