/*
 * fake_device.c - a stand-in for libcuda.so.1 with device memory, for the
 * library's device path on machines without a GPU: FAKE_DEVICE_GPUS GPUs
 * (default 2) whose memory is host memory, each with its primary context.
 * Every copy is done when its call returns, so streams and events only
 * check how they are used; there are no modules (no kernels), so crest
 * copies device regions without hashing them on the GPU, as where the
 * kernels cannot be loaded. It checks what a real driver would refuse:
 *  - a copy or memset reaching outside one device allocation;
 *  - an event recorded on a stream of another context;
 *  - a stream, event or allocation made with no context current;
 *  - cuMemGetAddressRange of memory of another context (the driver looks
 *    only in the current one: cudrv.h, lib/crest.c);
 * and answers each with an error crest must report, not survive silently.
 * Tests point CREST_LIBCUDA at it and set CREST_TEST_FAKE_GPU=1
 * (tests/gpu_here.h), so that the GPU tests run their device path here.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
struct CUctx_st { int dev; };
struct CUstream_st { struct CUctx_st *ctx; };
struct CUevent_st { struct CUctx_st *ctx; };

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_INVALID_CONTEXT 201
#define CUDA_ERROR_INVALID_HANDLE 400
#define CUDA_ERROR_NOT_FOUND 500

#define MAXGPU 16
static struct CUctx_st ctxs[MAXGPU];
static __thread struct CUctx_st *current;

/* The device allocations, under mu: base, size, context. */
struct alloc {
	uint8_t *p;
	size_t size;
	struct CUctx_st *ctx;
};
static struct alloc *allocs;
static size_t nallocs, capallocs;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static int ngpus(void)
{
	const char *v = getenv("FAKE_DEVICE_GPUS");
	const int n = v && *v ? atoi(v) : 2;
	return n >= 1 && n <= MAXGPU ? n : 2;
}

/* The allocation holding [p, p + n), or NULL. Under mu. */
static const struct alloc *find(uintptr_t p, size_t n)
{
	for (size_t i = 0; i < nallocs; i++) {
		const uintptr_t b = (uintptr_t)allocs[i].p;
		if (p >= b && p - b < allocs[i].size && n <= allocs[i].size - (p - b))
			return &allocs[i];
	}
	return NULL;
}

static int in_device(uintptr_t p, size_t n)
{
	if (n == 0)
		return 1;
	pthread_mutex_lock(&mu);
	const int ok = find(p, n) != NULL;
	pthread_mutex_unlock(&mu);
	return ok;
}

CUresult cuInit(unsigned int f) { (void)f; return CUDA_SUCCESS; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return CUDA_SUCCESS; }
CUresult cuGetErrorName(CUresult r, const char **s)
{
	*s = r == CUDA_SUCCESS ? "CUDA_SUCCESS" : r == CUDA_ERROR_INVALID_VALUE ? "CUDA_ERROR_INVALID_VALUE"
		: r == CUDA_ERROR_INVALID_CONTEXT ? "CUDA_ERROR_INVALID_CONTEXT"
		: r == CUDA_ERROR_INVALID_HANDLE ? "CUDA_ERROR_INVALID_HANDLE"
		: r == CUDA_ERROR_NOT_FOUND ? "CUDA_ERROR_NOT_FOUND" : "CUDA_ERROR_OUT_OF_MEMORY";
	return CUDA_SUCCESS;
}
CUresult cuGetErrorString(CUresult r, const char **s) { return cuGetErrorName(r, s); }
CUresult cuDeviceGetCount(int *n) { *n = ngpus(); return CUDA_SUCCESS; }
CUresult cuDeviceGet(int *dev, int i) { *dev = i; return i >= 0 && i < ngpus() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }
CUresult cuDeviceGetName(char *name, int len, int dev)
{
	snprintf(name, (size_t)len, "crest fake device %d", dev);
	return CUDA_SUCCESS;
}
CUresult cuDeviceGetUuid(unsigned char *uuid, int dev)
{
	for (int i = 0; i < 15; i++)
		uuid[i] = (unsigned char)(0xd0 + i);
	uuid[15] = (unsigned char)dev;
	return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRetain(struct CUctx_st **c, int dev)
{
	if (dev < 0 || dev >= ngpus())
		return CUDA_ERROR_INVALID_VALUE;
	ctxs[dev].dev = dev;
	*c = &ctxs[dev];
	return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRelease_v2(int dev) { (void)dev; return CUDA_SUCCESS; }
CUresult cuCtxSetCurrent(struct CUctx_st *c) { current = c; return CUDA_SUCCESS; }
CUresult cuCtxGetCurrent(struct CUctx_st **c) { *c = current; return CUDA_SUCCESS; }
CUresult cuCtxSynchronize(void) { return current ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT; }

CUresult cuStreamCreate(struct CUstream_st **s, unsigned int flags)
{
	(void)flags;
	if (!current)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!(*s = malloc(sizeof(**s))))
		return CUDA_ERROR_OUT_OF_MEMORY;
	(*s)->ctx = current;
	return CUDA_SUCCESS;
}
CUresult cuStreamDestroy_v2(struct CUstream_st *s) { free(s); return CUDA_SUCCESS; }
CUresult cuStreamSynchronize(struct CUstream_st *s) { (void)s; return CUDA_SUCCESS; }
CUresult cuEventCreate(struct CUevent_st **e, unsigned int flags)
{
	(void)flags;
	if (!current)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!(*e = malloc(sizeof(**e))))
		return CUDA_ERROR_OUT_OF_MEMORY;
	(*e)->ctx = current;
	return CUDA_SUCCESS;
}
/* The driver: the event and the stream must be of one context (the NULL
 * stream is the current context's). */
CUresult cuEventRecord(struct CUevent_st *e, struct CUstream_st *s)
{
	const struct CUctx_st *sc = s ? s->ctx : current;
	return e && e->ctx == sc ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
CUresult cuEventSynchronize(struct CUevent_st *e) { return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; }
CUresult cuEventQuery(struct CUevent_st *e) { return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; }
CUresult cuEventDestroy_v2(struct CUevent_st *e) { free(e); return CUDA_SUCCESS; }

CUresult cuMemAlloc_v2(CUdeviceptr *dp, size_t n)
{
	if (!current)
		return CUDA_ERROR_INVALID_CONTEXT;
	void *p = NULL;
	if (!n || posix_memalign(&p, 256, n))
		return n ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
	memset(p, 0xEE, n);   /* what was there before: not zeros */
	pthread_mutex_lock(&mu);
	if (nallocs == capallocs) {
		const size_t cap = capallocs ? 2 * capallocs : 64;
		struct alloc *na = realloc(allocs, cap * sizeof(*na));
		if (!na) {
			pthread_mutex_unlock(&mu);
			free(p);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		allocs = na;
		capallocs = cap;
	}
	allocs[nallocs++] = (struct alloc){ p, n, current };
	pthread_mutex_unlock(&mu);
	*dp = (CUdeviceptr)(uintptr_t)p;
	return CUDA_SUCCESS;
}
CUresult cuMemFree_v2(CUdeviceptr dp)
{
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < nallocs; i++)
		if ((uintptr_t)allocs[i].p == dp) {
			free(allocs[i].p);
			allocs[i] = allocs[--nallocs];
			pthread_mutex_unlock(&mu);
			return CUDA_SUCCESS;
		}
	pthread_mutex_unlock(&mu);
	return CUDA_ERROR_INVALID_VALUE;
}
CUresult cuMemHostAlloc(void **p, size_t n, unsigned int flags)
{
	(void)flags;
	return posix_memalign(p, 4096, n ? n : 1) ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}
CUresult cuMemFreeHost(void *p) { free(p); return CUDA_SUCCESS; }
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, struct CUstream_st *s)
{
	(void)s;
	if (!in_device((uintptr_t)src, n))
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(dst, (const void *)(uintptr_t)src, n);
	return CUDA_SUCCESS;
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, struct CUstream_st *s)
{
	(void)s;
	if (!in_device((uintptr_t)dst, n))
		return CUDA_ERROR_INVALID_VALUE;
	memcpy((void *)(uintptr_t)dst, src, n);
	return CUDA_SUCCESS;
}
CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n)
{
	if (!in_device((uintptr_t)dst, n))
		return CUDA_ERROR_INVALID_VALUE;
	memset((void *)(uintptr_t)dst, v, n);
	return CUDA_SUCCESS;
}
CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p)
{
	pthread_mutex_lock(&mu);
	const struct alloc *a = find((uintptr_t)p, 1);
	const int ok = a && a->ctx == current;
	if (ok) {
		if (base)
			*base = (CUdeviceptr)(uintptr_t)a->p;
		if (size)
			*size = a->size;
	}
	pthread_mutex_unlock(&mu);
	return ok ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}
/* The attributes crest asks for: CONTEXT 1, MEMORY_TYPE 2, IS_MANAGED 8,
 * DEVICE_ORDINAL 9, RANGE_START_ADDR 11, RANGE_SIZE 12. Host memory is not
 * the driver's: CUDA_ERROR_INVALID_VALUE, as for memory it never saw. */
CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr p)
{
	pthread_mutex_lock(&mu);
	const struct alloc *a = find((uintptr_t)p, 1);
	const struct alloc x = a ? *a : (struct alloc){ 0 };
	pthread_mutex_unlock(&mu);
	if (!a)
		return CUDA_ERROR_INVALID_VALUE;
	switch (attr) {
	case 1: *(struct CUctx_st **)data = x.ctx; return CUDA_SUCCESS;
	case 2: *(unsigned int *)data = 2; return CUDA_SUCCESS;   /* CU_MEMORYTYPE_DEVICE */
	case 8: *(unsigned int *)data = 0; return CUDA_SUCCESS;
	case 9: *(int *)data = x.ctx->dev; return CUDA_SUCCESS;
	case 11: *(CUdeviceptr *)data = (CUdeviceptr)(uintptr_t)x.p; return CUDA_SUCCESS;
	case 12: *(size_t *)data = x.size; return CUDA_SUCCESS;
	default: return CUDA_ERROR_INVALID_VALUE;
	}
}
