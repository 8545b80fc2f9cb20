/*
 * test_uvm.c - libcrest on CUDA managed memory (CREST_MEM_MANAGED).
 *
 *   test_uvm STORE
 *
 * A managed allocation of odd size has its pages in two places: the first
 * half last written by the CPU (its pages on the host), the second by the
 * GPU (cuMemcpyHtoD and a zeroing cuMemsetD8: on the device). It is
 * registered as managed beside a device region and checkpointed through a
 * pool smaller than the state. Then the CPU writes into the GPU's half and
 * the GPU into the CPU's (the pages move), and a second checkpoint is taken.
 * Each snapshot is restored over a scribble, in a fresh handle as well, and
 * read back by the CPU: every byte must be the snapshot's. Device memory
 * registered as managed must fail with a clear line. The driver's
 * transparent checkpoint refuses a process with managed memory (driver 580:
 * CUDA_ERROR_NOT_SUPPORTED), so this is the path such a job has.
 *
 * Skips (77, "SKIP: no GPU here (...)") only without a GPU. The seed is
 * printed; CREST_TEST_SEED=N replays it. Exit 0 when all came back.
 */
#include "crest.h"
#include "gpu/cudrv.h"
#include "tests/check.h"
#include "tests/gpu_here.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)

static const struct cudrv *d;
static uint64_t rng;

static void rnd_fill(uint8_t *p, size_t n)
{
	check_fill(p, n, check_rnd(&rng));
}

/* The managed and device regions hold exactly um and dv? (read by the CPU,
 * and copied back from the device) */
static bool holds(const uint8_t *mp, const uint8_t *um, size_t n, CUdeviceptr dptr, const uint8_t *dv, size_t dn,
		  uint8_t *scratch, const char *what)
{
	CU(d->CtxSynchronize());
	CU(d->MemcpyDtoHAsync(scratch, dptr, dn, NULL));
	CU(d->CtxSynchronize());
	bool ok = true;
	if (memcmp(mp, um, n)) {
		printf("FAIL: %s: managed region differs at byte %zu of %zu\n", what, first_diff(mp, um, n), n);
		ok = false;
	}
	if (memcmp(scratch, dv, dn)) {
		printf("FAIL: %s: device region differs at byte %zu of %zu\n", what, first_diff(scratch, dv, dn), dn);
		ok = false;
	}
	return ok;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: test_uvm STORE\n");
		return 2;
	}
	const int start = gpu_test_start(&d);
	if (start)
		return start;
	const char *lib = getenv("CREST_LIBCUDA");
	void *h = dlopen(lib && *lib ? lib : "libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
	CUresult (*alloc_managed)(CUdeviceptr *, size_t, unsigned) =
		h ? (CUresult(*)(CUdeviceptr *, size_t, unsigned))dlsym(h, "cuMemAllocManaged") : NULL;
	if (!alloc_managed) {
		printf("FAIL: the driver has no cuMemAllocManaged\n");
		return 1;
	}
	const uint64_t seed = check_seed(argc, argv, 2);
	rng = check_state(seed);
	printf("test_uvm: seed %llu (CREST_TEST_SEED=%llu replays it)\n", (unsigned long long)seed,
	       (unsigned long long)seed);
	char cmd[4200];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", argv[1]);
	if (system(cmd) != 0)
		return 1;

	CUdevice dev;
	CUcontext ctx;
	CU(d->DeviceGet(&dev, 0));
	CU(d->DevicePrimaryCtxRetain(&ctx, dev));
	CU(d->CtxSetCurrent(ctx));
	const size_t n = 24 * MiB + 1234, half = n / 2, dn = 3 * MiB + 5;
	CUdeviceptr m, dptr;
	CU(alloc_managed(&m, n, 1 /* CU_MEM_ATTACH_GLOBAL */));
	CU(d->MemAlloc(&dptr, dn));
	uint8_t *mp = (uint8_t *)(uintptr_t)m;
	uint8_t *um1 = malloc(n), *um2 = malloc(n), *dv = malloc(dn), *scratch = malloc(dn);
	if (!um1 || !um2 || !dv || !scratch)
		return 1;
	rnd_fill(um1, n);
	rnd_fill(dv, dn);
	memset(um1 + half + 4096, 0, MiB);   /* a hole, zeroed by the GPU */
	memcpy(mp, um1, half);                                          /* pages on the host */
	CU(d->MemcpyHtoDAsync(m + half, um1 + half, n - half, NULL));   /* pages on the GPU */
	CU(d->MemsetD8(m + half + 4096, 0, MiB));
	CU(d->MemcpyHtoDAsync(dptr, dv, dn, NULL));
	CU(d->CtxSynchronize());

	struct crest_options o;
	crest_options_init(&o);
	o.staging_bytes = 8 * MiB;   /* smaller than the state: rounds */
	crest_t *c;
	OK(crest_open(argv[1], &o, &c));
	crest_region_t hm, hd, hx;
	int rc = crest_register(c, "wrong", (void *)(uintptr_t)dptr, dn, CREST_MEM_MANAGED, &hx);
	printf("test_uvm: device memory registered as managed -> %d: %s\n", rc, crest_errmsg());
	CHECK(rc == -EFAULT && strstr(crest_errmsg(), "not CUDA managed memory"), "expected -EFAULT, got %d", rc);
	OK(crest_register(c, "uvm", mp, n, CREST_MEM_MANAGED, &hm));
	OK(crest_register(c, "dev", (void *)(uintptr_t)dptr, dn, CREST_MEM_DEVICE, &hd));
	crest_ckpt_t k;
	struct crest_result res;
	OK(crest_checkpoint(c, &(struct crest_checkpoint_opts){ .tag = "uvm-1" }, &k));
	OK(crest_wait(c, k, &res));
	printf("test_uvm: checkpoint 1 %.12s: %.1f MB, stall %.1f ms (%u staging waits)\n", res.snapshot,
	       res.bytes / 1e6, res.stall_ns / 1e6, res.rounds);

	/* The pages change sides: the CPU writes the GPU's half, the GPU the
	 * CPU's. */
	memcpy(um2, um1, n);
	rnd_fill(um2 + half + 100, 5 * MiB);
	rnd_fill(um2 + 77, 2 * MiB);
	memcpy(mp + half + 100, um2 + half + 100, 5 * MiB);
	CU(d->MemcpyHtoDAsync(m + 77, um2 + 77, 2 * MiB, NULL));
	CU(d->CtxSynchronize());
	OK(crest_checkpoint(c, &(struct crest_checkpoint_opts){ .tag = "uvm-2" }, &k));
	OK(crest_wait(c, k, &res));
	printf("test_uvm: checkpoint 2 %.12s: %.1f MB, %.1f MB new, stall %.1f ms\n", res.snapshot, res.bytes / 1e6,
	       res.new_bytes / 1e6, res.stall_ns / 1e6);

	const struct {
		const char *tag;
		const uint8_t *um;
	} want[] = { { "uvm-1", um1 }, { "uvm-2", um2 }, { "uvm-1", um1 } };
	for (int i = 0; i < 3; i++) {
		if (i == 2) {   /* a fresh handle, as a restarted job has */
			OK(crest_close(c));
			OK(crest_open(argv[1], &o, &c));
			OK(crest_register(c, "uvm", mp, n, CREST_MEM_MANAGED, &hm));
			OK(crest_register(c, "dev", (void *)(uintptr_t)dptr, dn, CREST_MEM_DEVICE, &hd));
		}
		memset(mp, 0xee, half);                       /* scribbled by both */
		CU(d->MemsetD8(m + half, 0xdd, n - half));
		CU(d->MemsetD8(dptr, 0xcc, dn));
		CU(d->CtxSynchronize());
		OK(crest_restore(c, want[i].tag, NULL));
		char what[64];
		snprintf(what, sizeof(what), "restore %d of %s", i + 1, want[i].tag);
		CHECK(holds(mp, want[i].um, n, dptr, dv, dn, scratch, what), "%s", what);
		printf("test_uvm: %s: bit-exact\n", what);
	}
	OK(crest_close(c));
	d->MemFree(m);
	d->MemFree(dptr);
	free(um1);
	free(um2);
	free(dv);
	free(scratch);
	printf("test_uvm: ok: a managed region (%.1f MB, pages on the host and the GPU) and a device region, "
	       "2 snapshots, 3 restores bit-exact\n", n / 1e6);
	return 0;
}
