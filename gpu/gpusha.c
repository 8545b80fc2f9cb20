/* gpusha.c - loads and launches the kernels of gpusha.cu; see gpusha.h. */
#include "gpu/gpusha.h"
#include "gpu/gpusha_core.h"
#include "util/err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>

/* Launch shapes; gpusha.cu's GS_*_THREADS must agree. */
#define HASH_THREADS 128
#define CMP_THREADS 256
#define SCAN_THREADS 1024
#define GATHER_THREADS 256
#define WIDE_THREADS 256

_Static_assert(GPUSHA_WIDE_MAX == GS_WIDE_MAX && GPUSHA_WIDE_KEYS == GS_WIDE_KEYS &&
		       GPUSHA_WIDE_KEY_WORDS == GS_WIDE_KEY_WORDS,
	       "gpusha.h and gpusha_core.h must agree on the wide hash");

#ifdef CREST_GPUSHA_PTX
/* The PTX text of gpusha.cu, NUL-terminated (generated into the build
 * directory by gpu/embed_ptx.cmake). */
extern const char gpusha_ptx[];
extern const char gpusha_ptx_nvcc[];   /* the nvcc version that made it */
#endif

struct gpusha {
	const struct cudrv *d;
	CUmodule mod;
	CUfunction hash, cmp, scan, emit, gather, wide, hash_list;
	CUdeviceptr scratch;   /* per-block counts of gpusha_changed */
	size_t scratch_cap;    /* in uint32 */
	CUdeviceptr dkey;      /* the wide hash's keys on the GPU */
	uint64_t key_id;       /* from the same draw as key: see gpusha_key_id */
	_Alignas(16) uint32_t key[GS_WIDE_KEYS * GS_WIDE_KEY_WORDS];
};

bool gpusha_built(void)
{
#ifdef CREST_GPUSHA_PTX
	return true;
#else
	return false;
#endif
}

const char *gpusha_ptx_text(const char **nvcc)
{
#ifdef CREST_GPUSHA_PTX
	*nvcc = gpusha_ptx_nvcc;
	return gpusha_ptx;
#else
	*nvcc = NULL;
	return NULL;
#endif
}

void gpusha_close(struct gpusha *g)
{
	if (!g)
		return;
	if (g->scratch)
		g->d->MemFree(g->scratch);
	if (g->dkey)
		g->d->MemFree(g->dkey);
	if (g->mod)
		g->d->ModuleUnload(g->mod);
	free(g);
}

#ifdef CREST_GPUSHA_PTX
/* The driver's JIT log names the line it rejected; keep its first line. */
static int load_module(struct gpusha *g)
{
	const struct cudrv *d = g->d;
	char log[1024] = "";
	CUjit_option opt[2] = { CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES };
	void *val[2] = { log, (void *)(uintptr_t)sizeof(log) };
	const CUresult r = d->ModuleLoadDataEx(&g->mod, gpusha_ptx, 2, opt, val);
	if (r == CUDA_SUCCESS)
		return 0;
	g->mod = NULL;
	for (char *p = log; *p; p++)
		if (*p == '\n') {
			*p = 0;
			break;
		}
	char what[128];
	snprintf(what, sizeof(what), "gpusha: loading the SHA-256 kernels (PTX made by nvcc %s)", gpusha_ptx_nvcc);
	int err = cudrv_check(d, r, what);
	char msg[512];
	crest_errcpy(msg, sizeof(msg));
	/* A driver older than the nvcc that made the PTX, or a GPU it cannot
	 * compile for: not a failure, the CPU hashes instead. */
	if (r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION || r == CUDA_ERROR_INVALID_PTX ||
	    r == CUDA_ERROR_NO_BINARY_FOR_GPU || r == CUDA_ERROR_JIT_COMPILER_NOT_FOUND ||
	    r == CUDA_ERROR_INVALID_IMAGE)
		err = -ENOTSUP;
	return crest_errx(err, "%s%s%s", msg, *log ? "; JIT: " : "", log);
}
#endif

int gpusha_open(const struct cudrv *d, struct gpusha **out)
{
#ifndef CREST_GPUSHA_PTX
	(void)d;
	(void)out;
	return crest_errx(-ENOTSUP, "no GPU hashing in this build (nvcc was not found when crest was configured)");
#else
	if (!d->ModuleLoadDataEx || !d->ModuleGetFunction || !d->ModuleUnload || !d->LaunchKernel)
		return crest_errx(-ENOTSUP, "gpusha: the NVIDIA driver library lacks cuModuleLoadDataEx, "
				  "cuModuleGetFunction, cuModuleUnload or cuLaunchKernel");
	struct gpusha *g = calloc(1, sizeof(*g));
	if (!g)
		return crest_errf(-ENOMEM, "gpusha: allocating the handle");
	g->d = d;
	int rc = load_module(g);
	static const char *const names[7] = { "gpusha_hash_k", "gpusha_cmp_k",	  "gpusha_scan_k",
					      "gpusha_emit_k", "gpusha_gather_k", "gpusha_wide_k",
					      "gpusha_hash_list_k" };
	CUfunction *fn[7] = { &g->hash, &g->cmp, &g->scan, &g->emit, &g->gather, &g->wide, &g->hash_list };
	for (int i = 0; rc == 0 && i < 7; i++) {
		rc = cudrv_check(d, d->ModuleGetFunction(fn[i], g->mod, names[i]), "gpusha: cuModuleGetFunction");
		if (rc < 0)
			crest_errctx(rc, "gpusha: kernel %s", names[i]);
	}
	/* The wide hash's bound holds for keys drawn independently of the
	 * bytes hashed: fresh ones from the kernel's generator, per handle. */
	if (rc == 0 && (getrandom(g->key, sizeof(g->key), 0) != (ssize_t)sizeof(g->key) ||
			getrandom(&g->key_id, sizeof(g->key_id), 0) != (ssize_t)sizeof(g->key_id)))
		rc = crest_errf(-EIO, "gpusha: drawing the wide hash's keys (getrandom)");
	if (rc == 0)
		rc = cudrv_check(d, d->MemAlloc(&g->dkey, sizeof(g->key)), "gpusha: cuMemAlloc (the wide hash's keys)");
	if (rc == 0)
		rc = cudrv_check(d, d->MemcpyHtoDAsync(g->dkey, g->key, sizeof(g->key), 0),
				 "gpusha: copying the wide hash's keys to the GPU (cuMemcpyHtoDAsync)");
	if (rc == 0)
		rc = cudrv_check(d, d->StreamSynchronize(0), "gpusha: copying the wide hash's keys to the GPU");
	if (rc < 0) {
		gpusha_close(g);
		return rc;
	}
	*out = g;
	return 0;
#endif
}

static int launch(struct gpusha *g, CUfunction f, const char *what, uint64_t blocks, unsigned threads,
		  CUstream s, void **args)
{
	if (blocks > 0x7fffffffu)
		return crest_errx(-EINVAL, "gpusha: %s: %llu blocks is past the grid's limit", what,
				  (unsigned long long)blocks);
	return cudrv_check(g->d, g->d->LaunchKernel(f, (unsigned)blocks, 1, 1, threads, 1, 1, 0, s, args, NULL),
			   what);
}

/* The arguments gpusha_hash and gpusha_wide share: len bytes in chunks of
 * chunk, a multiple of 64 up to max, into a 16-byte aligned digest array;
 * what names the work in the message ("hashing"). */
static int chunks_check(const char *what, uint64_t len, uint32_t chunk, uint32_t max, CUdeviceptr digests)
{
	if (len == 0 || chunk == 0 || chunk % 64 || chunk > max)
		return crest_errx(-EINVAL, "gpusha: %s %llu bytes in %u-byte chunks: the length must be at least 1 "
				  "and the chunk size a multiple of 64 up to %u", what, (unsigned long long)len, chunk,
				  max);
	if (digests % 16)
		return crest_errx(-EINVAL, "gpusha: the digest array at 0x%llx is not 16-byte aligned",
				  (unsigned long long)digests);
	return 0;
}

int gpusha_hash(struct gpusha *g, CUdeviceptr src, uint64_t len, uint32_t chunk, CUdeviceptr digests,
		CUstream s)
{
	const int rc = chunks_check("hashing", len, chunk, GPUSHA_CHUNK_MAX, digests);
	if (rc < 0)
		return rc;
	uint64_t nchunks = gpusha_nchunks(len, chunk);
	int vec = src % 16 == 0;
	void *args[] = { &src, &len, &chunk, &nchunks, &vec, &digests };
	return launch(g, g->hash, "gpusha: launching the SHA-256 kernel",
		      (nchunks + HASH_THREADS - 1) / HASH_THREADS, HASH_THREADS, s, args);
}

int gpusha_wide(struct gpusha *g, CUdeviceptr src, uint64_t len, uint32_t chunk, CUdeviceptr digests,
		CUstream s)
{
	const int rc = chunks_check("the wide hash of", len, chunk, GPUSHA_WIDE_MAX, digests);
	if (rc < 0)
		return rc;
	uint64_t nchunks = gpusha_nchunks(len, chunk);
	int vec = src % 16 == 0;
	void *args[] = { &src, &len, &chunk, &nchunks, &vec, &g->dkey, &digests };
	return launch(g, g->wide, "gpusha: launching the wide hash kernel",
		      (nchunks * 32 + WIDE_THREADS - 1) / WIDE_THREADS, WIDE_THREADS, s, args);
}

uint64_t gpusha_key_id(const struct gpusha *g)
{
	return g->key_id;
}

const uint32_t *gpusha_wide_key(const struct gpusha *g)
{
	return g->key;
}

void gpusha_wide_ref(const struct gpusha *g, const void *p, uint32_t n, uint8_t out[GPUSHA_DIGEST])
{
	gs_u64 a[GS_WIDE_KEYS] = { 0, 0, 0, 0 };
	gs_nh_part(p, n, 0, g->key, 0, 1, a);
	gs_nh_store(a, out);
}

int gpusha_hash_list(struct gpusha *g, CUdeviceptr src, uint64_t len, uint32_t chunk, CUdeviceptr list,
		     uint32_t count, CUdeviceptr digests, CUstream s)
{
	if (len == 0 || count == 0 || chunk == 0 || chunk % 64 || chunk > GPUSHA_CHUNK_MAX || digests % 16)
		return crest_errx(-EINVAL, "gpusha: hashing %u listed chunks of %u bytes into 0x%llx: the count must "
				  "be at least 1, the chunk size a multiple of 64 up to %u and the digests "
				  "16-byte aligned", count, chunk, (unsigned long long)digests, GPUSHA_CHUNK_MAX);
	int vec = src % 16 == 0;
	void *args[] = { &src, &len, &chunk, &list, &count, &vec, &digests };
	return launch(g, g->hash_list, "gpusha: launching the listed SHA-256 kernel",
		      ((uint64_t)count + HASH_THREADS - 1) / HASH_THREADS, HASH_THREADS, s, args);
}

int gpusha_changed(struct gpusha *g, CUdeviceptr cur, CUdeviceptr prev, uint64_t n, CUdeviceptr flags,
		   CUdeviceptr list, CUdeviceptr count, CUstream s)
{
	const struct cudrv *d = g->d;
	if (n == 0 || n > UINT32_MAX)
		return crest_errx(-EINVAL, "gpusha: comparing %llu digests: the count must be 1 to 2^32-1",
				  (unsigned long long)n);
	if (cur % 16 || prev % 16)
		return crest_errx(-EINVAL, "gpusha: the digest arrays (0x%llx, 0x%llx) must be 16-byte aligned",
				  (unsigned long long)cur, (unsigned long long)prev);
	uint64_t nblk = (n + CMP_THREADS - 1) / CMP_THREADS;
	if (nblk > g->scratch_cap) {
		/* The old buffer may still be read by work queued on s. */
		int rc = cudrv_check(d, d->StreamSynchronize(s), "gpusha: waiting for the stream");
		if (rc < 0)
			return rc;
		if (g->scratch)
			d->MemFree(g->scratch);
		g->scratch = 0;
		g->scratch_cap = 0;
		rc = cudrv_check(d, d->MemAlloc(&g->scratch, nblk * sizeof(uint32_t)), "gpusha: cuMemAlloc (scratch)");
		if (rc < 0)
			return crest_errctx(rc, "gpusha: %llu bytes of scratch", (unsigned long long)(nblk * 4));
		g->scratch_cap = nblk;
	}
	uint32_t nblk32 = (uint32_t)nblk;
	void *a_cmp[] = { &cur, &prev, &n, &flags, &g->scratch };
	int rc = launch(g, g->cmp, "gpusha: launching the compare kernel", nblk, CMP_THREADS, s, a_cmp);
	void *a_scan[] = { &g->scratch, &nblk32, &count };
	if (rc == 0)
		rc = launch(g, g->scan, "gpusha: launching the scan kernel", 1, SCAN_THREADS, s, a_scan);
	void *a_emit[] = { &cur, &prev, &n, &g->scratch, &list };
	if (rc == 0)
		rc = launch(g, g->emit, "gpusha: launching the list kernel", nblk, CMP_THREADS, s, a_emit);
	return rc;
}

int gpusha_gather(struct gpusha *g, CUdeviceptr src, uint64_t len, uint32_t chunk, CUdeviceptr list,
		  uint32_t count, CUdeviceptr digests, CUdeviceptr dst, CUdeviceptr dig_out, CUstream s)
{
	if (count == 0 || count > 0x7fffffffu || chunk == 0 || dst % 16 || dig_out % 16)
		return crest_errx(-EINVAL, "gpusha: gathering %u chunks of %u bytes to 0x%llx: the count must be "
				  "1 to 2^31-1 and the destinations 16-byte aligned", count, chunk,
				  (unsigned long long)dst);
	int vec = src % 16 == 0 && chunk % 16 == 0;
	void *args[] = { &src, &len, &chunk, &list, &digests, &dst, &dig_out, &vec };
	return launch(g, g->gather, "gpusha: launching the gather kernel", count, GATHER_THREADS, s, args);
}
