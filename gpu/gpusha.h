/*
 * gpusha.h - SHA-256 of fixed-size chunks of device memory, on the GPU, and
 * which chunks changed since an earlier set of digests (issue 14).
 *
 * A checkpoint hashes every chunk of a device region where it lies, compares
 * the digests with the previous checkpoint's, and copies only the chunks
 * that changed. The digests are exactly SHA-256 (FIPS 180-4) of each chunk's
 * bytes, the same ids the CPU computes, so GPU- and CPU-hashed chunks dedup
 * against each other.
 *
 * Which chunks changed is found by a cheaper, keyed hash first (gpusha_wide:
 * NH, gpusha_core.h says what it is and what it promises): it reads device
 * memory at the memory's speed, a few times faster than SHA-256 runs, and
 * SHA-256 then runs only on the chunks it lists (gpusha_hash_list). Two
 * chunks of the same length that differ get the same wide digest with
 * probability at most 2^-128 (the keys are random per handle and drawn
 * before the bytes are known); a chunk found equal keeps the id it had, so
 * that is the probability a snapshot names a stale chunk. Wide digests of
 * different handles (keys) are never compared: gpusha_key_id tells them
 * apart.
 *
 * The kernels (gpu/gpusha.cu) are built into PTX when nvcc is found at
 * configure time and embedded in the library; the driver compiles them for
 * the GPU at gpusha_open. A build without nvcc has no kernels: gpusha_open
 * says -ENOTSUP ("no GPU hashing in this build"), and so does a driver too
 * old for the embedded PTX; either way the caller hashes on the CPU.
 *
 * A handle belongs to the context current at gpusha_open and is used by one
 * thread at a time; its gpusha_changed calls must be ordered (one stream),
 * as they share a scratch buffer. Every call is asynchronous on the given
 * stream (0: the legacy default stream), with that context current.
 */
#ifndef CREST_GPU_GPUSHA_H
#define CREST_GPU_GPUSHA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu/cudrv.h"

#define GPUSHA_DIGEST 32                 /* bytes per chunk's digest */
#define GPUSHA_CHUNK 4096                /* the default chunk size */
#define GPUSHA_CHUNK_MAX (1u << 20)      /* chunk sizes: multiples of 64 up to this */

struct gpusha;

/* Whether this build embeds the kernels (nvcc was found at configure time). */
bool gpusha_built(void);
/* The embedded PTX text, and in *nvcc the version of nvcc that made it;
 * NULL in a build without kernels. */
const char *gpusha_ptx_text(const char **nvcc);

/* Loads the kernels into the current context (cuModuleLoadData: the driver
 * compiles the PTX for this GPU, tens of milliseconds, cached by the driver
 * across runs). -ENOTSUP when the build has no kernels or the driver
 * cannot take them; another negative code when the driver fails. */
int gpusha_open(const struct cudrv *d, struct gpusha **out);
/* Unloads the kernels; no work may be in flight on them. NULL is a no-op. */
void gpusha_close(struct gpusha *g);

/* How many chunks of chunk bytes cut len bytes (the last may be short). */
static inline uint64_t gpusha_nchunks(uint64_t len, uint32_t chunk)
{
	return (len + chunk - 1) / chunk;
}

/* SHA-256 of each chunk of src[0..len): chunk i is bytes
 * [i * chunk, min((i + 1) * chunk, len)), its digest the 32 bytes at
 * digests + 32 * i. len >= 1; chunk a multiple of 64, at most
 * GPUSHA_CHUNK_MAX; digests 16-byte aligned (any cuMemAlloc'd pointer is).
 * src may have any alignment; 16-byte aligned is the fast path. */
int gpusha_hash(struct gpusha *g, CUdeviceptr src, uint64_t len, uint32_t chunk, CUdeviceptr digests,
		CUstream s);

/* The longest chunk gpusha_wide takes; longer ones are compared by SHA-256. */
#define GPUSHA_WIDE_MAX 4096u

/* The wide digest (32 bytes) of each chunk of src[0..len), laid out as
 * gpusha_hash's digests; the same arguments, with chunk at most
 * GPUSHA_WIDE_MAX (-EINVAL past it). */
int gpusha_wide(struct gpusha *g, CUdeviceptr src, uint64_t len, uint32_t chunk, CUdeviceptr digests,
		CUstream s);
/* A number that differs between handles (their keys): wide digests made
 * under one id are comparable only with others made under the same one. */
uint64_t gpusha_key_id(const struct gpusha *g);
/* The wide digest of the n bytes at p (n <= GPUSHA_WIDE_MAX), computed on
 * the host with g's keys: the kernel's reference, for tests. */
void gpusha_wide_ref(const struct gpusha *g, const void *p, uint32_t n, uint8_t out[GPUSHA_DIGEST]);
/* g's keys on the host: GPUSHA_WIDE_KEY_WORDS words each of GPUSHA_WIDE_KEYS
 * keys, key j from word j * GPUSHA_WIDE_KEY_WORDS (for tests). */
#define GPUSHA_WIDE_KEYS 4
#define GPUSHA_WIDE_KEY_WORDS (GPUSHA_WIDE_MAX / 4)
const uint32_t *gpusha_wide_key(const struct gpusha *g);

/* SHA-256 of the chunks list[0..count) (device uint32 chunk numbers) of
 * src[0..len), each digest at digests + 32 * its chunk number, as
 * gpusha_hash would put it; the other digests are left as they were.
 * count >= 1. */
int gpusha_hash_list(struct gpusha *g, CUdeviceptr src, uint64_t len, uint32_t chunk, CUdeviceptr list,
		     uint32_t count, CUdeviceptr digests, CUstream s);

/* Compares n digests at cur with n at prev (both 16-byte aligned). Writes
 * the indices of the chunks whose digests differ, ascending, as uint32 at
 * list (room for n), and their number as one uint32 at count. flags, unless
 * 0, gets one byte per chunk: 1 changed, 0 not. n >= 1, n < 2^32. */
int gpusha_changed(struct gpusha *g, CUdeviceptr cur, CUdeviceptr prev, uint64_t n, CUdeviceptr flags,
		   CUdeviceptr list, CUdeviceptr count, CUstream s);

/* Packs the chunks list[0..count) (device uint32 chunk numbers) of
 * src[0..len) back to back at dst (count * chunk bytes; the last chunk of
 * src may be short, and then so is its copy) and, unless dig_out is 0,
 * their digests from digests to dig_out (count * 32 bytes). dst and dig_out
 * 16-byte aligned. count >= 1, at most 2^31 - 1. */
int gpusha_gather(struct gpusha *g, CUdeviceptr src, uint64_t len, uint32_t chunk, CUdeviceptr list,
		  uint32_t count, CUdeviceptr digests, CUdeviceptr dst, CUdeviceptr dig_out, CUstream s);

#endif
