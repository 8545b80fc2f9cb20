/*
 * peer_job.c - a job with peer access between two GPUs that knows nothing
 * of crest, for the test of the shim's peer access handling
 * (peer_shim.sh), linked with the stand-in CUDA runtime (fake_cudart.c:
 * DT_NEEDED libcudart.so.13, found by its DT_RPATH), whose peer access
 * calls it makes as any program does: undefined symbols the dynamic linker
 * binds at run time, to a preloaded shim's definitions when there is one.
 *
 *   peer_job LIBCUDA LOG STEPS
 *
 * It loads LIBCUDA (the stand-in driver: a process that maps libcuda.so is
 * a CUDA process to crest), enables peer access from device 0 to 1 on the
 * main thread and from 1 to 0 on a thread of its own (the current device
 * is a thread's), checking the runtime's answers on the way (an enable of
 * a pair on already is 704, a disable of one off 705), so that two pairs
 * are on. Then for each step i it fills a buffer "on device 0" with values
 * of i alone, copies it to device 1 as a kernel of device 1 reading its
 * peer's memory (access 1 -> 0), transforms it there, copies it back as a
 * kernel of device 0 (0 -> 1), appends "step i sum CHECKSUM" to LOG (one
 * descriptor, open the whole run) and sleeps 20 ms. What it logs depends
 * on STEPS alone.
 *
 * A copy refused (the pair's access off) is said on stderr, once a step
 * ("peer_job: step I: copy ... refused ... at MS ms", MS the wall clock
 * in milliseconds since the epoch), and tried again every
 * millisecond; after 10 s of refusals the job ends with status 3: peer
 * access that does not come back is a job that cannot run.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The runtime's, as libcudart declares them (no cuda_runtime.h here). */
int cudaGetDeviceCount(int *n);
int cudaSetDevice(int dev);
int cudaGetDevice(int *dev);
int cudaDeviceEnablePeerAccess(int peer, unsigned int flags);
int cudaDeviceDisablePeerAccess(int peer);
typedef struct {
	unsigned x, y, z;
} dim3;
int cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shm, void *stream);
/* The stand-in's own (fake_cudart.c): the "kernel" that reads a peer's memory. */
void fakeCudaPeerCopyKernel(void);

#define LEN 64

static void die(const char *what, int rc)
{
	fprintf(stderr, "peer_job: %s: %d\n", what, rc);
	exit(2);
}

static void want(const char *what, int rc, int expect)
{
	if (rc != expect) {
		fprintf(stderr, "peer_job: %s answered %d, not %d\n", what, rc, expect);
		exit(2);
	}
}

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static void sleep_us(long us)
{
	struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static void *enable_1_to_0(void *arg)
{
	(void)arg;
	want("cudaSetDevice(1) on a thread", cudaSetDevice(1), 0);
	want("cudaDeviceEnablePeerAccess(0) on device 1", cudaDeviceEnablePeerAccess(0, 0), 0);
	want("cudaDeviceEnablePeerAccess(0) on device 1 again", cudaDeviceEnablePeerAccess(0, 0), 704);
	return NULL;
}

/* A copy of n bytes from peer's memory on device dev, tried until it
 * goes through (10 s at most). */
static void copy(int step, int dev, void *dst, const void *src, size_t n, int peer)
{
	int said = 0;
	for (long tries = 0;; tries++) {
		want("cudaSetDevice", cudaSetDevice(dev), 0);
		void *args[] = { &dst, &src, &n, &peer };
		const int rc = cudaLaunchKernel((const void *)fakeCudaPeerCopyKernel, (dim3){ 1, 1, 1 }, (dim3){ 1, 1, 1 },
						args, 0, NULL);
		if (rc == 0)
			return;
		if (!said) {
			struct timespec now;
			clock_gettime(CLOCK_REALTIME, &now);
			fprintf(stderr, "peer_job: step %d: copy from device %d to %d refused (cudaError %d) at %lld ms: "
				"trying again\n", step, peer, dev, rc,
				(long long)now.tv_sec * 1000 + now.tv_nsec / 1000000);
		}
		said = 1;
		if (tries >= 10000) {
			fprintf(stderr, "peer_job: step %d: peer access from device %d to %d still off after 10 s\n", step,
				dev, peer);
			exit(3);
		}
		sleep_us(1000);
	}
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: peer_job LIBCUDA LOG STEPS\n");
		return 2;
	}
	if (!dlopen(argv[1], RTLD_NOW | RTLD_LOCAL)) {
		fprintf(stderr, "peer_job: %s\n", dlerror());
		return 2;
	}
	const int steps = atoi(argv[3]);
	const int fd = open(argv[2], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0) {
		fprintf(stderr, "peer_job: %s: %s\n", argv[2], strerror(errno));
		return 2;
	}
	int n = 0, rc = cudaGetDeviceCount(&n);
	if (rc != 0 || n < 2)
		die("cudaGetDeviceCount (2 devices wanted)", rc ? rc : n);
	/* 0 -> 1 on this thread, enabled, disabled and enabled again. */
	want("cudaSetDevice(0)", cudaSetDevice(0), 0);
	want("cudaDeviceEnablePeerAccess(1) on device 0", cudaDeviceEnablePeerAccess(1, 0), 0);
	want("cudaDeviceDisablePeerAccess(1) on device 0", cudaDeviceDisablePeerAccess(1), 0);
	want("cudaDeviceDisablePeerAccess(1) on device 0 again", cudaDeviceDisablePeerAccess(1), 705);
	want("cudaDeviceEnablePeerAccess(1) on device 0, the second time", cudaDeviceEnablePeerAccess(1, 0), 0);
	/* 1 -> 0 on another thread, whose current device this one's is not. */
	pthread_t th;
	if ((rc = pthread_create(&th, NULL, enable_1_to_0, NULL)) != 0)
		die("pthread_create", rc);
	pthread_join(th, NULL);
	int cur = -1;
	want("cudaGetDevice", cudaGetDevice(&cur), 0);
	if (cur != 0)
		die("the main thread's device, after another thread set its own", cur);

	static uint64_t a[LEN], b[LEN], c[LEN];
	for (int i = 0; i < steps; i++) {
		for (int j = 0; j < LEN; j++)
			a[j] = mix(((uint64_t)i << 16) ^ (uint64_t)j);
		copy(i, 1, b, a, sizeof(a), 0);   /* device 1 reads device 0's a */
		for (int j = 0; j < LEN; j++)
			b[j] = b[j] * 3 + 1;
		copy(i, 0, c, b, sizeof(b), 1);   /* device 0 reads device 1's b */
		uint64_t sum = 0xcbf29ce484222325ull;
		for (int j = 0; j < LEN; j++)
			sum = (sum ^ c[j]) * 0x100000001b3ull;
		char line[96];
		const int len = snprintf(line, sizeof(line), "step %d sum %016llx\n", i, (unsigned long long)sum);
		if (write(fd, line, (size_t)len) != len)
			die("write to the log", errno);
		sleep_us(20000);
	}
	close(fd);
	return 0;
}
