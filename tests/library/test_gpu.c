/*
 * test_gpu.c - libcrest on device regions. Skips (77, "SKIP: no GPU here
 * (...)") only where there is no NVIDIA GPU (tests/gpu_here.h); a GPU whose
 * driver fails to load or sees no device fails the test.
 *
 * Three device regions (one with a zeroed stretch, one of odd size) and a
 * host region go through a checkpoint whose state is larger than the staging
 * pool (rounds), a scribble and a restore; the same restore from a copy of
 * the store with damaged packs must fail; then a device region freed while
 * registered and a size mismatch must fail clearly.
 */
#include "crest.h"
#include "cas/format.h"
#include "gpu/cudrv.h"
#include "tests/check.h"
#include "tests/gpu_here.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MiB (1024u * 1024u)

static const struct cudrv *d;

/* Flips one byte in the stored data of every every-th record of each pack
 * in dir (cas/format.h: a file header, then records of a header and their
 * stored bytes), never in a header, so that only a check of the data finds
 * it: how many. */
static int flip_data(const char *dir, unsigned every)
{
	DIR *dh = opendir(dir);
	int n = 0;
	for (struct dirent *de; dh && (de = readdir(dh));) {
		char path[4200 + 256];
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		const int fd = strstr(de->d_name, ".pack") ? open(path, O_RDWR) : -1;
		uint8_t h[CAS_REC_HEADER];
		off_t at = CAS_FILE_HEADER;
		for (unsigned k = 0; fd >= 0 && pread(fd, h, sizeof(h), at) == (ssize_t)sizeof(h) &&
				     !memcmp(h, CAS_REC_MAGIC, 4); k++) {
			const uint32_t stored = le32_get(h + CAS_REC_STORED);
			uint8_t b;
			const off_t x = at + CAS_REC_HEADER + stored / 2;
			if (k % every == 0 && stored && pread(fd, &b, 1, x) == 1) {
				b ^= 0x55;
				n += pwrite(fd, &b, 1, x) == 1;
			}
			at += CAS_REC_HEADER + (off_t)stored;
		}
		if (fd >= 0)
			close(fd);
	}
	if (dh)
		closedir(dh);
	return n;
}

/* A handle on dir as o, but with a pool of `staging` bytes and `threads`
 * restore threads, and main's three device regions and its host region
 * registered. */
static crest_t *open_registered(const char *dir, const struct crest_options *o, size_t staging, unsigned threads,
				const CUdeviceptr dp[3], const size_t sizes[3], const char *const names[3], void *host,
				size_t hsize)
{
	struct crest_options o2 = *o;
	o2.staging_bytes = staging;
	o2.restore_threads = threads;
	crest_t *c;
	OK(crest_open(dir, &o2, &c));
	crest_region_t h;
	for (int i = 0; i < 3; i++)
		OK(crest_register(c, names[i], (void *)(uintptr_t)dp[i], sizes[i], CREST_MEM_DEVICE, &h));
	OK(crest_register(c, "host", host, hsize, CREST_MEM_HOST, &h));
	return c;
}

/* How many of the three device regions differ from ref, each named with
 * what the restore was (`how`). */
static int device_diffs(const CUdeviceptr dp[3], uint8_t *const back[3], uint8_t *const ref[3], const size_t sizes[3],
			const char *const names[3], const char *how)
{
	int bad = 0;
	for (int i = 0; i < 3; i++) {
		CU(d->MemcpyDtoHAsync(back[i], dp[i], sizes[i], NULL));
		CU(d->CtxSynchronize());
		if (memcmp(back[i], ref[i], sizes[i])) {
			printf("FAIL: device region %s differs after %s\n", names[i], how);
			bad++;
		}
	}
	return bad;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: test_gpu STORE\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	const int start = gpu_test_start(&d);
	if (start)
		return start;
	int n = 0;
	if (d->DeviceGetCount(&n) != CUDA_SUCCESS || n == 0) {
		fprintf(stderr, "FAIL: a GPU device node is here but the driver sees no GPU\n");
		return 1;
	}
	char cmd[4200];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", argv[1]);
	if (system(cmd) != 0)
		return 1;
	CUdevice dev;
	CUcontext ctx;
	CU(d->DeviceGet(&dev, 0));
	CU(d->DevicePrimaryCtxRetain(&ctx, dev));
	CU(d->CtxSetCurrent(ctx));

	const size_t sizes[3] = { 96 * MiB + 4096, 5 * MiB + 3, 4096 };
	CUdeviceptr dp[3];
	uint8_t *ref[3], *back[3];
	for (int i = 0; i < 3; i++) {
		ref[i] = malloc(sizes[i]);
		back[i] = malloc(sizes[i]);
		check_fill(ref[i], sizes[i], (uint64_t)i + 10);
		if (i == 0)
			memset(ref[i] + 8 * MiB, 0, 16 * MiB);
		CU(d->MemAlloc(&dp[i], sizes[i]));
		CU(d->MemcpyHtoDAsync(dp[i], ref[i], sizes[i], NULL));
	}
	CU(d->CtxSynchronize());
	uint8_t host[12345], host_ref[12345];
	check_fill(host, sizeof(host), 77);
	memcpy(host_ref, host, sizeof(host));

	struct crest_options o;
	crest_options_init(&o);
	o.staging_bytes = 48 * MiB;   /* smaller than the state: rounds */
	crest_t *c;
	OK(crest_open(argv[1], &o, &c));
	crest_region_t h[4];
	const char *names[3] = { "gpu/a", "gpu/b", "gpu/c" };
	for (int i = 0; i < 3; i++)
		OK(crest_register(c, names[i], (void *)(uintptr_t)dp[i], sizes[i], CREST_MEM_DEVICE, &h[i]));
	OK(crest_register(c, "host", host, sizeof(host), CREST_MEM_HOST, &h[3]));
	crest_ckpt_t ck;
	struct crest_result res;
	OK(crest_checkpoint(c, &(struct crest_checkpoint_opts){ .tag = "gpu-1" }, &ck));
	OK(crest_wait(c, ck, &res));
	printf("gpu: checkpoint %.12s: %llu bytes, stall %.1f ms (%u staging waits), ingest %.1f ms\n", res.snapshot,
	       (unsigned long long)res.bytes, res.stall_ns / 1e6, res.rounds, res.ingest_ns / 1e6);
	int failures = 0;
	if (res.rounds == 0) {
		printf("FAIL: state larger than the pool reported no staging waits\n");
		failures++;
	}
	for (int i = 0; i < 3; i++)
		CU(d->MemsetD8(dp[i], 0xee, sizes[i]));
	memset(host, 0, sizeof(host));
	struct crest_restore_result rr;
	OK(crest_restore(c, "gpu-1", &rr));
	printf("gpu: restored %llu bytes in %.1f ms\n", (unsigned long long)rr.bytes, rr.ns / 1e6);
	failures += device_diffs(dp, back, ref, sizes, names, "restore");
	if (memcmp(host, host_ref, sizeof(host))) {
		printf("FAIL: host region differs after restore\n");
		failures++;
	}

	/* The same snapshot from a copy of the store with a byte flipped in the
	 * data of every 97th record: the restore must fail, though every header
	 * is whole (restore/gpu.c reads raw records into staging direct, and
	 * only the CRC32C of their data finds this). */
	{
		char copy[4200];
		snprintf(copy, sizeof(copy), "rm -rf '%s.damaged' && cp -a '%s' '%s.damaged'", argv[1], argv[1], argv[1]);
		if (system(copy) != 0) {
			printf("FAIL: cannot copy the store\n");
			return 1;
		}
		/* The copy whole first, through a pool large enough for
		 * pitched windows (restore/gpu.c: records read whole into
		 * slots, one pitched copy to the device): bit-exact. */
		{
			snprintf(copy, sizeof(copy), "%s.damaged", argv[1]);
			for (int i = 0; i < 3; i++)
				CU(d->MemsetD8(dp[i], 0xee, sizes[i]));
			crest_t *c3 = open_registered(copy, &o, 1024 * (size_t)MiB, o.restore_threads, dp, sizes, names,
						      host, sizeof(host));
			OK(crest_restore(c3, "gpu-1", &rr));
			printf("gpu: restored %llu bytes in %.1f ms through a pool of 1024 MiB\n",
			       (unsigned long long)rr.bytes, rr.ns / 1e6);
			failures += device_diffs(dp, back, ref, sizes, names, "restore through 1024 MiB");
			OK(crest_close(c3));
		}
		snprintf(copy, sizeof(copy), "%s.damaged/packs", argv[1]);
		const int flipped = flip_data(copy, 97);
		snprintf(copy, sizeof(copy), "%s.damaged", argv[1]);
		/* With this pool's one-segment windows, and with a pool large
		 * enough for pitched ones (records read whole into slots). The
		 * latter by one thread, which restores gpu/a (pitched: all of
		 * it in 4 KiB chunks) before gpu/b (its last window is not), so
		 * that the error must come from a pitched window. */
		const size_t pools[2] = { o.staging_bytes, 1024 * (size_t)MiB };
		for (int p = 0; p < 2; p++) {
			crest_t *c2 = open_registered(copy, &o, pools[p], p ? 1 : o.restore_threads, dp, sizes, names,
						      host, sizeof(host));
			const int rc2 = crest_restore(c2, "gpu-1", NULL);
			printf("gpu: restore (pool of %zu MiB) from a store with %d records' data damaged -> %d: %s\n",
			       pools[p] / MiB, flipped, rc2, rc2 ? crest_errmsg() : "(succeeded)");
			if (flipped < 50 || rc2 != -EBADMSG || (p && !strstr(crest_errmsg(), "gpu/a"))) {
				printf("FAIL: expected -EBADMSG%s after damaging records' data\n",
				       p ? " naming gpu/a" : "");
				failures++;
			}
			OK(crest_close(c2));
		}
		snprintf(copy, sizeof(copy), "rm -rf '%s.damaged'", argv[1]);
		system(copy);
	}

	/* A device region freed while registered. */
	CU(d->MemFree(dp[2]));
	int rc = crest_checkpoint(c, NULL, &ck);
	printf("gpu: checkpoint with gpu/c freed -> %d: %s\n", rc, crest_errmsg());
	if (rc != -EFAULT || !strstr(crest_errmsg(), "gpu/c")) {
		printf("FAIL: expected -EFAULT naming gpu/c\n");
		failures++;
	}
	OK(crest_unregister(c, h[2]));
	OK(crest_unregister(c, h[1]));
	OK(crest_register(c, "gpu/b", (void *)(uintptr_t)dp[1], MiB, CREST_MEM_DEVICE, &h[1]));
	rc = crest_restore(c, "gpu-1", NULL);
	printf("gpu: restore with gpu/b registered smaller -> %d: %s\n", rc, crest_errmsg());
	if (rc != -EINVAL) {
		printf("FAIL: expected -EINVAL\n");
		failures++;
	}
	OK(crest_close(c));
	d->MemFree(dp[0]);
	d->MemFree(dp[1]);
	for (int i = 0; i < 3; i++) {
		free(ref[i]);
		free(back[i]);
	}
	if (failures)
		return 1;
	/* scripts/gpu-check.sh keeps the store to run casctl verify on it. */
	if (!getenv("CREST_TEST_KEEP_STORE"))
		system(cmd);
	printf("gpu: ok\n");
	return 0;
}
