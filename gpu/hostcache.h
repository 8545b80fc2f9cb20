/*
 * hostcache.h - a host copy of a library job's device regions, kept in a
 * file in shared memory (a tmpfs such as /dev/shm) so that it outlives the
 * job: a job restarted on the same node after a crash restores its GPU from
 * host memory instead of the store (issue 14, item 4).
 *
 * The cache is an accelerator and never an authority. Its bytes are
 * written by the checkpoints that copied them (capture/regions.c, as the
 * engine is done with each staging slice), may be of any mix of
 * checkpoints after a crash or a failed ingest, and may have been changed
 * by anyone who can write the file. A restore from it therefore hashes
 * every restored chunk on the GPU and compares it with the snapshot's ids
 * before it counts (lib/crest.c); anything else comes from the store. So
 * nothing in this file is trusted but its layout, which is checked.
 *
 * The file (one per store and GPU: hostcache_name), version 1, all
 * integers little-endian:
 *
 *   offset 0   8 bytes  magic "CRESTHC\0"
 *          8   u32      version (1); a reader refuses any other
 *         12   u32      n, the number of regions (at most HOSTCACHE_MAX_REGIONS)
 *         16   u64      header bytes (h), this header and its region table
 *         24   u64      file bytes
 *         32   n times: u64 offset, u64 size, u16 name length (1..1024),
 *                       the name's bytes (no NUL)
 *          h - 32  32 bytes: SHA-256 of header bytes [0, h - 32)
 *          h   8 bytes  "CRESTHCH", then 32 bytes: the hint, the id of the
 *                       snapshot the cache was last seen to hold whole
 *                       (hostcache_hint_set), or zeros. Not covered by the
 *                       checksum, and not trusted either: it only spares a
 *                       restore of another snapshot the copy and check.
 *
 * Each region's bytes lie at its offset, a multiple of HOSTCACHE_ALIGN
 * (2 MiB, so a tmpfs mounted with huge pages maps them whole), past the
 * hint and in increasing order, the last ending at or before the file's
 * end. A file whose header does not check out is ignored (and replaced by
 * the next checkpoint), never read.
 *
 * A layout change (regions registered or dropped) writes a new file under a
 * temporary name and renames it over the old one, so a reader never sees
 * a half-written header and a writer still copying into the old mapping
 * (a checkpoint in flight) writes into the old, unlinked file, harmlessly.
 * The old mapping, and with it the old file's memory, is kept until
 * hostcache_forget_old or hostcache_close.
 *
 * The file holds as much host memory as the regions it caches, and is only
 * opened if it is a regular file owned by the caller (O_NOFOLLOW), as a
 * shared directory like /dev/shm lets anyone put a file there. Calls util/
 * and gpu/ (the pool and the driver).
 */
#ifndef CREST_GPU_HOSTCACHE_H
#define CREST_GPU_HOSTCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu/cudrv.h"
#include "gpu/pool.h"

#define HOSTCACHE_VERSION 1u
#define HOSTCACHE_ALIGN (2u << 20)
#define HOSTCACHE_MAX_REGIONS 65536u

struct hostcache;

struct hostcache_region {
	const char *name;
	uint64_t size;
};

/* The file's name in its directory for a store and a GPU: "crest-cache-"
 * and 16 hex digits of SHA-256(store path, NUL, gpu uuid). cap >= 29. */
int hostcache_name(const char *store, const uint8_t uuid[16], char *out, size_t cap);

/* 0 when dir is a directory; else a negative code and "host cache
 * directory DIR: why". hostcache_open checks this first; a caller with no
 * cache to open (no GPU) checks the option the same way. */
int hostcache_dir_check(const char *dir);

/* A handle on dir/name. An existing file's layout is read when it checks
 * out (see the top); otherwise the cache starts empty, and the first
 * hostcache_layout writes it. Fails only for dir itself (not a directory,
 * not writable) or memory. */
int hostcache_open(const char *dir, const char *name, struct hostcache **out);
/* Unmaps everything; no copy into or out of the cache may be running. NULL
 * is a no-op. */
void hostcache_close(struct hostcache *hc);

/* Makes the file hold exactly r[0..n) (by name and size, in this order);
 * nothing happens when it already does. A new file's bytes read as zeros. */
int hostcache_layout(struct hostcache *hc, const struct hostcache_region *r, size_t n);

/* Unmaps the files that hostcache_layout replaced, so that their memory
 * (a whole copy of the regions each) goes back to the tmpfs; no copy into
 * them may still be running. */
void hostcache_forget_old(struct hostcache *hc);

/* Where region name of size bytes lies in the mapping; NULL when the file
 * (as read at open or laid out since) has no such region. */
uint8_t *hostcache_find(const struct hostcache *hc, const char *name, uint64_t size);

/* Copies len bytes at src (in the cache's mapping) to dst, device memory
 * of context ctx, through slices of the pinned pool: up to threads threads
 * (0: one per core; never more than the pool has slices), each with two
 * buffers, so that memcpy and the host-to-device copy overlap. (Mapping
 * the cache's memory for DMA instead, cuMemHostRegister, took 1.4 s for
 * 8 GiB of 4 KiB pages on the H100 host: more than the whole restore.) Returns once the bytes are on the
 * device. */
int hostcache_to_device(const uint8_t *src, uint64_t len, const struct cudrv *d, CUcontext ctx, CUdeviceptr dst,
			struct pool *pool, unsigned threads);

/* Makes the cache mapping's pages under [p, p + n) (widened to whole
 * pages) present, before they are read (write false) or written (write
 * true): MADV_POPULATE_READ or _WRITE, Linux 5.14. The file lives on a
 * tmpfs, where touching a hole allocates a page: in a full tmpfs a plain
 * load or store there is a SIGBUS, which would end the job, while this
 * fails instead. 0, or -errno (EINVAL on a kernel without it); no message,
 * as each caller either does without the cache or says what it was doing. */
int hostcache_populate(const void *p, size_t n, bool write);

/* Records that the cache now holds snapshot id whole (every copy of its
 * checkpoint written); id NULL: that it holds none (a checkpoint is writing
 * it). hostcache_hint_is answers whether it said id. */
void hostcache_hint_set(struct hostcache *hc, const uint8_t id[32]);
bool hostcache_hint_is(const struct hostcache *hc, const uint8_t id[32]);

#endif
