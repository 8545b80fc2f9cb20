/*
 * regions.h - library capture: a job's registered memory regions (host and
 * device) copied into an engine snapshot through the pinned staging pool.
 *
 * Each region is copied slice by slice (a slice is a whole number of the
 * engine's segments, so slices never cut a segment and a region's chunks
 * land where they did last time). Copied slices wait in a FIFO and go to the
 * engine only when the pool runs dry or all copies are done: while the state
 * fits, no ingest thread competes with the copy for CPU or memory bandwidth,
 * and the job's stall is the copy alone. The engine gives each slice back
 * through pool_release_cb. Regions of several contexts (GPUs) are copied
 * at once, a slice of each in turn, so that every GPU's link is busy
 * however small the pool.
 *
 * Owns the per-context copy streams and events (made on first use, kept
 * for the next checkpoint). Calls engine/, gpu/ and util/; knows nothing of
 * libcrest's handles, which lib/ keeps.
 */
#ifndef CREST_CAPTURE_REGIONS_H
#define CREST_CAPTURE_REGIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "gpu/cudrv.h"
#include "gpu/pool.h"

/* The SHA-256 of every chunk of a device region, computed on its GPU at a
 * checkpoint and kept there for the next one (issue 14). */
struct capture_digests;

struct capture_region {
	const char *name;
	const uint8_t *ptr;
	size_t size;
	bool device;                  /* device memory of context ctx */
	CUcontext ctx;
	/* Device regions: where the region's digests are kept from one
	 * checkpoint to the next (the caller's, freed with
	 * capture_digests_free); NULL: the region is copied whole and the
	 * CPU hashes it, as when the build or the driver has no kernels. */
	struct capture_digests **dig;
	/* Device regions: where the region's bytes lie in the host cache
	 * (gpu/hostcache.h), NULL when there is none. Each slice copied for
	 * the engine is also written there, by the engine worker that is done
	 * with it (never in the stall): the whole slice, or the changed chunks
	 * at their places. */
	uint8_t *cache;
};

struct capture_blob {
	const char *name;
	const void *data;
	size_t len;
};

struct capture_copier;

/* d: the driver, or NULL when no region is on a device; copy_streams: the
 * CUDA streams per context that device copies spread over (at least 1);
 * gpu_hash: hash device regions that have a digest slot on their GPU. */
int capture_copier_open(const struct cudrv *d, struct pool *pool, unsigned copy_streams, bool gpu_hash,
			struct capture_copier **out);
/* Waits for the copy streams and frees them; before the pool is closed. */
void capture_copier_close(struct capture_copier *cp);

struct capture_stats {
	uint64_t wait_ns;             /* waited for a free slice */
	unsigned rounds;              /* times the pool ran dry */
	uint64_t copied;              /* region bytes copied to staging */
	unsigned hashed, sparse;      /* device regions hashed on the GPU; of them,
				       * copied as changed chunks only */
	unsigned whole_ids;           /* and copied whole, each slice with the ids
				       * of its chunks (the engine does not hash them) */
	unsigned sparse_wide;         /* of the sparse ones, those whose changed
				       * chunks the wide hash found (gpu/gpusha.h) */
};

/* One REGION stream per region in snap ("mem=host" or "mem=device"), its
 * bytes copied through the pool; returns once every copy is done and with
 * the engine. The current CUDA context is left changed: the caller saves
 * and restores it. On failure, copies in flight are waited for and their
 * slices given back; the caller aborts snap.
 *
 * A device region with a digest slot is hashed on its GPU (gpu/gpusha.h)
 * into digests tagged with token (the caller's number for this
 * checkpoint, not 0). When the slot also holds digests of this snapshot's
 * parent (capture_digests_commit) and the engine has the parent's chunks
 * of the region, only the chunks whose digests differ are copied, with
 * their ids (engine_stream_add_chunks); otherwise the region is copied
 * whole while the GPU hashes it. Either way every digest is computed from
 * the bytes as they were at the sync, before this returns. */
int capture_regions(struct capture_copier *cp, struct engine_snap *snap, const struct capture_region *r,
		    size_t n, uint64_t token, struct capture_stats *st);
/* The checkpoint token committed as snapshot id, which becomes the next
 * checkpoint's parent: the digests computed for it describe id from now
 * on. A token that is not the slot's newest (another checkpoint hashed
 * since) changes nothing. NULL is a no-op. */
void capture_digests_commit(struct capture_digests *g, uint64_t token, const uint8_t id[32]);
/* Frees the slot's device memory (its context must still exist). */
void capture_digests_free(const struct cudrv *d, struct capture_digests *g);
/* Makes ahead what checkpoints of device region r need (its context's
 * copy streams, the kernels, its digests for chunks of chunk bytes; 0: no
 * GPU hashing), so that the first checkpoint's stall has none of it.
 * Changes the current context. Best effort: what fails here is tried again
 * at the checkpoint (or the region is copied whole). */
void capture_prepare(struct capture_copier *cp, const struct capture_region *r, uint32_t chunk);
/* Why device regions are not hashed on the GPU (no kernels in this build,
 * a driver that cannot take them, ...), once that was found; else NULL. */
const char *capture_gpu_hash_why(const struct capture_copier *cp);

/* Whether no slice handed to the engine is still to be written into the
 * host cache (capture_region.cache): then no copy into any of its files
 * runs, nor will until the next capture_regions. */
bool capture_cache_idle(struct capture_copier *cp);

struct cas_stream;
/* Checks device region r, just restored from the host cache, against
 * stream st of snapshot id: hashes it on its GPU (gpu/gpusha.h) and
 * compares each chunk's digest with the id st names at that place (a hole:
 * the digest of zeros). *nbad is the number of chunks that differ; when it
 * is 0, r's digest slot holds id's digests, as if id had been the last
 * checkpoint committed, so the next checkpoint copies changed chunks only.
 * -ENOTSUP (no message) when this cannot be checked on the GPU (no
 * kernels, st not cut in fixed chunks of the size the engine cuts regions
 * in): the caller restores from the store. Changes the current context. */
int capture_cache_verify(struct capture_copier *cp, const struct capture_region *r, const struct cas_stream *st,
			 uint32_t chunk, const uint8_t id[32], uint64_t *nbad);

/* A checkpoint held in host memory while no store is open (a libcrest
 * session that stepped aside for gc or another writer): every region and
 * blob copied, so the job goes on at once and the snapshot is ingested
 * once the store is back. */
struct capture_held;
/* Copies r[0..n) (after capture_sync) and b[0..nb), with a few threads,
 * into pool's free slices while they last (no engine may use the pool
 * until capture_held_ingest hands them over or capture_held_free gives them
 * back), then into new memory. -ENOMEM (with a message) when the memory
 * cannot be had. */
int capture_hold(const struct cudrv *d, struct pool *pool, const struct capture_region *r, size_t n,
		 const struct capture_blob *b, size_t nb, struct capture_held **out);
/* Its streams into snap, in the form capture_regions and capture_blobs give
 * them (so its chunks dedup against every other library snapshot), with its
 * directory entries; the memory goes to the engine, which frees it. Once
 * called, h only keeps what capture_held_free frees, whatever the result. */
int capture_held_ingest(struct capture_held *h, struct engine_snap *snap);
void capture_held_free(struct capture_held *h);

/* Makes the devices idle: cuCtxSynchronize on every context a device
 * region of r[0..n) lives in (changes the current context). */
int capture_sync(const struct cudrv *d, const struct capture_region *r, size_t n);

/* Directory entries for every "a/" prefix of the names, parents first, so
 * that `crest get` can lay the snapshot out as a tree. */
int capture_dirs(struct engine_snap *s, const char *const *names, size_t n);
/* "key=value" labels into the snapshot's manifest; keys that start with
 * "crest." are crest's own (cas/history.h) and -EINVAL. s NULL: only checks. */
int capture_labels(struct engine_snap *s, const char *const *labels, size_t n);
/* One BLOB stream per blob, its bytes copied (the caller's may go away). */
int capture_blobs(struct engine_snap *s, const struct capture_blob *b, size_t n);

#endif
