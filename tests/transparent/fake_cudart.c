/*
 * fake_cudart.c - a stand-in for the CUDA runtime, libcudart.so.13, on the
 * CPU: enough of it for the test of crest's shim and peer access
 * (peer_shim.sh); fake_cudart.h says where its state lives and who reads
 * it. FAKE_CUDA_GPUS devices (default 2, at most FAKE_RT_MAX_DEV), none
 * with memory of its own: a "device buffer" is host memory.
 *
 *  cudaGetDeviceCount, cudaSetDevice, cudaGetDevice  the calling thread's
 *      current device (0 until set), as in the runtime;
 *  cudaDeviceCanAccessPeer  any two distinct devices can;
 *  cudaDeviceEnablePeerAccess(peer, flags)  access from the calling
 *      thread's current device to peer's memory, process-wide:
 *      cudaErrorPeerAccessAlreadyEnabled (704) when it is on already,
 *      cudaErrorInvalidDevice for the device itself or no such device,
 *      cudaErrorInvalidValue for flags other than 0;
 *  cudaDeviceDisablePeerAccess(peer)  the reverse: 705
 *      (cudaErrorPeerAccessNotEnabled) when it is off;
 *  cudaLaunchKernel(fakeCudaPeerCopyKernel, grid, block, args, 0, 0)
 *      with args {&dst, &src, &n, &peer}: n bytes from src, memory of
 *      device peer, to dst, as a kernel on the current device reading its
 *      peer's memory directly: it needs access from the current device to
 *      peer, else it copies nothing and answers
 *      cudaErrorPeerAccessNotEnabled (a real kernel would fault). Launched
 *      through cudaLaunchKernel, as PyTorch launches its kernels, so that
 *      the shim's hold on launches (its work gate) applies to it;
 *  cudaDeviceSynchronize  nothing to wait for (a "kernel" runs in the call);
 *  fakeCudaPeerCopy(dst, src, n, peer)  the same copy as a plain call.
 * Every call waits while the stand-in driver has the process locked or
 * checkpointed (as the driver's lock holds a process's CUDA calls).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "fake_cudart.h"

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

enum {
	cudaSuccess = 0,
	cudaErrorInvalidValue = 1,
	cudaErrorInitializationError = 3,
	cudaErrorInvalidDevice = 101,
	cudaErrorPeerAccessAlreadyEnabled = 704,
	cudaErrorPeerAccessNotEnabled = 705,
};

static struct fake_rt_page *page;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static __thread int current;

__attribute__((constructor)) static void fake_rt_load(void)
{
	/* Kept open (the driver finds the page by it) and across exec not. */
	const int fd = memfd_create(FAKE_RT_MEMFD_NAME, MFD_CLOEXEC);
	if (fd < 0)
		return;
	void *p = MAP_FAILED;
	if (ftruncate(fd, 4096) == 0)
		p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		close(fd);
		return;
	}
	page = p;
	__atomic_store_n(&page->magic, FAKE_RT_MAGIC, __ATOMIC_RELEASE);
}

static int ndev(void)
{
	const char *v = getenv("FAKE_CUDA_GPUS");
	const int n = v ? atoi(v) : 2;
	return n >= 1 && n <= FAKE_RT_MAX_DEV ? n : 2;
}

/* Waits while the driver holds the process (locked, checkpointed). */
static int enter(void)
{
	if (!page)
		return cudaErrorInitializationError;
	while (__atomic_load_n(&page->state, __ATOMIC_ACQUIRE) != 0) {
		struct timespec ts = { 0, 1000 * 1000 };
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
	}
	return cudaSuccess;
}

static uint64_t bit(int from, int to)
{
	return 1ull << (from * FAKE_RT_MAX_DEV + to);
}

EXPORT int cudaGetDeviceCount(int *n)
{
	const int e = enter();
	if (e == cudaSuccess)
		*n = ndev();
	return e;
}

EXPORT int cudaSetDevice(int dev)
{
	const int e = enter();
	if (e != cudaSuccess)
		return e;
	if (dev < 0 || dev >= ndev())
		return cudaErrorInvalidDevice;
	current = dev;
	return cudaSuccess;
}

EXPORT int cudaGetDevice(int *dev)
{
	const int e = enter();
	if (e == cudaSuccess)
		*dev = current;
	return e;
}

EXPORT int cudaDeviceCanAccessPeer(int *can, int dev, int peer)
{
	const int e = enter();
	if (e != cudaSuccess)
		return e;
	if (dev < 0 || dev >= ndev() || peer < 0 || peer >= ndev())
		return cudaErrorInvalidDevice;
	*can = dev != peer;
	return cudaSuccess;
}

static int peer_set(int peer, unsigned flags, int on)
{
	const int e = enter();
	if (e != cudaSuccess)
		return e;
	if (flags != 0)
		return cudaErrorInvalidValue;
	if (peer < 0 || peer >= ndev() || peer == current)
		return cudaErrorInvalidDevice;
	const uint64_t b = bit(current, peer);
	pthread_mutex_lock(&mu);
	const uint64_t pairs = __atomic_load_n(&page->pairs, __ATOMIC_ACQUIRE);
	int r = cudaSuccess;
	if (on && (pairs & b))
		r = cudaErrorPeerAccessAlreadyEnabled;
	else if (!on && !(pairs & b))
		r = cudaErrorPeerAccessNotEnabled;
	else {
		__atomic_store_n(&page->pairs, pairs ^ b, __ATOMIC_RELEASE);
		__atomic_store_n(&page->npairs, (uint32_t)__builtin_popcountll(pairs ^ b), __ATOMIC_RELEASE);
		__atomic_add_fetch(&page->changes, 1, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&mu);
	return r;
}

EXPORT int cudaDeviceEnablePeerAccess(int peer, unsigned int flags)
{
	return peer_set(peer, flags, 1);
}

EXPORT int cudaDeviceDisablePeerAccess(int peer)
{
	return peer_set(peer, 0, 0);
}

EXPORT int fakeCudaPeerCopy(void *dst, const void *src, size_t n, int peer)
{
	const int e = enter();
	if (e != cudaSuccess)
		return e;
	if (peer < 0 || peer >= ndev())
		return cudaErrorInvalidDevice;
	if (peer != current && !(__atomic_load_n(&page->pairs, __ATOMIC_ACQUIRE) & bit(current, peer)))
		return cudaErrorPeerAccessNotEnabled;
	memmove(dst, src, n);
	return cudaSuccess;
}

/* The kernel cudaLaunchKernel knows; its address is all that matters. */
EXPORT void fakeCudaPeerCopyKernel(void)
{
}

typedef struct {
	unsigned x, y, z;
} fake_dim3;

EXPORT int cudaLaunchKernel(const void *func, fake_dim3 grid, fake_dim3 block, void **args, size_t shm, void *stream)
{
	(void)grid;
	(void)block;
	(void)shm;
	(void)stream;
	if (func != (const void *)fakeCudaPeerCopyKernel || !args)
		return cudaErrorInvalidValue;
	return fakeCudaPeerCopy(*(void **)args[0], *(const void **)args[1], *(size_t *)args[2], *(int *)args[3]);
}

EXPORT int cudaDeviceSynchronize(void)
{
	return enter();
}
