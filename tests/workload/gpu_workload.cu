/*
 * gpu_workload.cu - the CUDA sample job for checkpoint tests: like
 * cpu_workload.c, but its large state lives in GPU memory.
 *
 * It fills --mib MiB of device memory deterministically (random pages,
 * every tenth page zeros), and each step rewrites --change-pct percent of
 * its 4 KiB pages, chosen by a PRNG whose state lives in host memory, then
 * prints `step N checksum HEX`, where the checksum covers every byte on the
 * device (a wrapping sum of mixed words: order-free, so deterministic).
 * Two runs print the same lines; so does a run checkpointed and restored.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PAGE_WORDS 512  /* 4 KiB */

static __host__ __device__ uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

__global__ void fill(uint64_t *w, uint64_t n, uint64_t seed)
{
	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x)
		w[i] = (i / PAGE_WORDS) % 10 == 0 ? 0 : mix(seed ^ i);
}

__global__ void rewrite(uint64_t *w, const uint64_t *pages, uint64_t npages, uint64_t step)
{
	uint64_t total = npages * PAGE_WORDS;
	for (uint64_t k = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; k < total; k += (uint64_t)gridDim.x * blockDim.x) {
		uint64_t p = pages[k / PAGE_WORDS], j = k % PAGE_WORDS;
		w[p * PAGE_WORDS + j] = mix(step * 0x100000001b3ull ^ (p * PAGE_WORDS + j));
	}
}

__global__ void checksum(const uint64_t *w, uint64_t n, unsigned long long *out)
{
	uint64_t acc = 0;
	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x)
		acc += mix(w[i] ^ i);
	atomicAdd(out, (unsigned long long)acc);
}

static int check(cudaError_t e, const char *what)
{
	if (e == cudaSuccess)
		return 0;
	fprintf(stderr, "crest-workload-gpu: %s: %s\n", what, cudaGetErrorString(e));
	return 1;
}

int main(int argc, char **argv)
{
	unsigned long long mib = 1024, steps = 0, seed = 1;
	double pct = 2.0;
	unsigned interval_ms = 200;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--mib"))
			mib = strtoull(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--change-pct"))
			pct = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "--interval-ms"))
			interval_ms = (unsigned)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--steps"))
			steps = strtoull(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--seed"))
			seed = strtoull(argv[i + 1], NULL, 10);
		else {
			fprintf(stderr, "usage: crest-workload-gpu [--mib N] [--change-pct P] [--interval-ms MS] "
					"[--steps N] [--seed S]\n");
			return 2;
		}
	}
	/* Descriptors inherited by accident would be checkpointed with us. */
	for (int fd = 3; fd < 1024; fd++)
		close(fd);
	const uint64_t words = mib * 1048576ull / 8, npages = words / PAGE_WORDS;
	const uint64_t nchange = (uint64_t)((double)npages * pct / 100.0);
	uint64_t *w, *dpages;
	unsigned long long *dsum;
	uint64_t *hpages = (uint64_t *)malloc((nchange ? nchange : 1) * sizeof(uint64_t));
	if (!hpages || check(cudaMalloc(&w, words * 8), "cudaMalloc state") ||
	    check(cudaMalloc(&dpages, (nchange ? nchange : 1) * 8), "cudaMalloc pages") ||
	    check(cudaMalloc(&dsum, 8), "cudaMalloc sum"))
		return 1;
	fill<<<1024, 256>>>(w, words, seed);
	if (check(cudaDeviceSynchronize(), "fill"))
		return 1;
	uint64_t rng = mix(seed * 7919);  /* host state: checkpointed by CRIU */
	for (uint64_t step = 1; !steps || step <= steps; step++) {
		for (uint64_t k = 0; k < nchange; k++) {
			rng = mix(rng);
			hpages[k] = rng % npages;
		}
		if (nchange) {
			if (check(cudaMemcpy(dpages, hpages, nchange * 8, cudaMemcpyHostToDevice), "copy pages"))
				return 1;
			rewrite<<<1024, 256>>>(w, dpages, nchange, step);
		}
		unsigned long long sum = 0;
		if (check(cudaMemset(dsum, 0, 8), "memset") ||
		    (checksum<<<1024, 256>>>(w, words, dsum), check(cudaGetLastError(), "checksum")) ||
		    check(cudaMemcpy(&sum, dsum, 8, cudaMemcpyDeviceToHost), "copy sum"))
			return 1;
		printf("step %llu checksum %016llx\n", (unsigned long long)step, sum);
		fflush(stdout);
		if (interval_ms) {
			struct timespec ts = { (time_t)(interval_ms / 1000), (long)(interval_ms % 1000) * 1000000L };
			nanosleep(&ts, NULL);
		}
	}
	return 0;
}
