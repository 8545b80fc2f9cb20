/*
 * cache_bench.c - restore after a crash from the host cache
 * (crest_options.host_cache), beside the same restore from the store.
 *
 *   cache_bench save STORE CACHEDIR GIB SEED
 *   cache_bench restore STORE CACHEDIR GIB SEED [tamper|full]
 *   cache_bench all STORE CACHEDIR GIB SEED    (save, restore, restore tamper,
 *                                              each in a process of its own)
 *
 * save with CACHEDIR "-" keeps no cache: its ingest beside one that does.
 *
 * save: GIB GiB of device memory in one region, filled with a pattern that
 * neither compresses nor dedups, checkpointed whole; then 2% of its 4 KiB
 * chunks (picked with SEED) rewritten and checkpointed again (copied as
 * changed chunks only, which patches the cache); then the process ends
 * with _exit, as a crash would, without crest_close.
 *
 * restore: a new process, as the job started again on the same node: wipes
 * its region, opens the store with the host cache, restores the newest
 * snapshot and checks every word; then closes, wipes again and restores
 * the same snapshot from the store alone (no cache) and checks again. With
 * tamper, one byte of the cached region is flipped in the file first: the
 * restore must find it (the region comes from the store, cache_bytes 0)
 * and still be bit-exact. With full, CACHEDIR was a tmpfs too small for the
 * cache when save ran: save must have lived (no SIGBUS), and the restore
 * must take nothing from the cache and be bit-exact. Exit 0 only when every check holds. Lines that
 * start with RESULT are for bench/RESULTS.md; gpu-check runs both modes.
 */
#include "crest.h"
#include "gpu/cudrv.h"
#include "pattern.h"
#include "util/progress.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#define GiB ((size_t)1 << 30)
#define CHUNK 4096

static const struct cudrv *d;
static uint8_t *changed;   /* one byte per chunk: rewritten for the second checkpoint */

static double now(void)
{
	return time_now_ns() / 1e9;
}

static int fail(const char *what, int rc)
{
	fprintf(stderr, "cache_bench: %s failed (%d): %s\n", what, rc, crest_errmsg());
	return 1;
}

static size_t pattern_run(uint64_t *buf, size_t bytes, uint64_t first, bool check)
{
	return bench_pattern_run(buf, bytes, first, check, changed);
}

/* fill: the pattern in; else: the words that differ from it. */
static size_t device_run(CUdeviceptr dp, size_t bytes, uint64_t *pin, bool fill)
{
	size_t bad = 0;
	for (size_t off = 0; off < bytes; off += GiB) {
		if (fill) {
			pattern_run(pin, GiB, off / 8, false);
			if (d->MemcpyHtoDAsync(dp + off, pin, GiB, NULL) || d->CtxSynchronize())
				return SIZE_MAX;
		} else {
			if (d->MemcpyDtoHAsync(pin, dp + off, GiB, NULL) || d->CtxSynchronize())
				return SIZE_MAX;
			bad += pattern_run(pin, GiB, off / 8, true);
		}
	}
	return bad;
}

/* Flips one byte of the first cached region (it lies at 2 MiB: the header
 * of a one-region cache is far shorter). */
static int tamper(const char *dir)
{
	DIR *dh = opendir(dir);
	struct dirent *e;
	int done = 0;
	while (dh && (e = readdir(dh)) && !done) {
		if (strncmp(e->d_name, "crest-cache-", 12))
			continue;
		char path[4096];
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		int fd = open(path, O_RDWR);
		uint8_t b;
		const off_t at = (2 << 20) + 12345 * CHUNK + 17;
		if (fd >= 0 && pread(fd, &b, 1, at) == 1) {
			b ^= 0x40;
			done = pwrite(fd, &b, 1, at) == 1;
		}
		if (fd >= 0)
			close(fd);
	}
	if (dh)
		closedir(dh);
	return done ? 0 : -1;
}

/* Runs this program again with mode (and extra), waits: its exit status. */
static int again(char **argv, const char *mode, const char *extra)
{
	char *args[] = { argv[0], (char *)mode, argv[2], argv[3], argv[4], argv[5], (char *)extra, NULL };
	const pid_t pid = fork();
	if (pid == 0) {
		execv("/proc/self/exe", args);
		_exit(127);
	}
	int st = 0;
	if (pid < 0 || waitpid(pid, &st, 0) < 0)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 6 || (strcmp(argv[1], "save") && strcmp(argv[1], "restore") && strcmp(argv[1], "all"))) {
		fprintf(stderr, "usage: cache_bench save|restore|all STORE CACHEDIR GIB SEED [tamper|full]\n");
		return 2;
	}
	if (!strcmp(argv[1], "all")) {
		const struct cudrv *probe;
		int n = 0;
		if (cudrv_load(&probe) < 0 || probe->DeviceGetCount(&n) || n < 1) {
			printf("SKIP: no GPU here (%s)\n", crest_errmsg());
			return 77;
		}
		int rc = again(argv, "save", NULL);
		if (rc == 0)
			rc = again(argv, "restore", NULL);
		if (rc == 0)
			rc = again(argv, "restore", "tamper");
		if (rc == 0)
			printf("cache_bench: ok: restored after a crash from the host cache, checked on the GPU, and "
			       "from the store with a byte of the cache flipped; bit-exact each time (seed %s)\n", argv[5]);
		else
			printf("FAIL: cache_bench: a step exited %d (seed %s)\n", rc, argv[5]);
		return rc == 0 ? 0 : 1;
	}
	const bool save = !strcmp(argv[1], "save");
	const char *store = argv[2], *dir = argv[3];
	const size_t bytes = (size_t)atoi(argv[4]) * GiB;
	const uint64_t seed = strtoull(argv[5], NULL, 10);
	const bool tampered = argc > 6 && !strcmp(argv[6], "tamper");
	const bool full = argc > 6 && !strcmp(argv[6], "full");
	int rc = cudrv_load(&d);
	if (rc < 0)
		return fail("loading the driver", rc);
	CUdevice dev;
	CUcontext ctx;
	CUdeviceptr dp;
	void *pin;
	if (d->DeviceGet(&dev, 0) || d->DevicePrimaryCtxRetain(&ctx, dev) || d->CtxSetCurrent(ctx) ||
	    d->MemAlloc(&dp, bytes) || d->MemHostAlloc(&pin, GiB, 0))
		return fail("setting up the GPU", -1);
	const size_t nch = bytes / CHUNK;
	uint8_t *chg = calloc(nch, 1);
	size_t nchg = 0;
	for (size_t i = 0; i < nch; i++)
		nchg += chg[i] = bench_mix(seed * 0x100000001b3ull + i) % 50 == 0;   /* 2% */
	struct crest_options o;
	crest_options_init(&o);
	o.staging_bytes = bytes + GiB;   /* the whole copy fits: the stall is the copy */
	o.host_cache = strcmp(dir, "-") ? dir : NULL;
	crest_t *c;
	crest_region_t r;
	if (save) {
		changed = NULL;
		device_run(dp, bytes, pin, true);
		if ((rc = crest_open(store, &o, &c)) < 0 || (rc = crest_register(c, "weights", (void *)dp, bytes,
										  CREST_MEM_DEVICE, &r)) < 0)
			return fail("opening and registering", rc);
		struct crest_result res[2];
		for (int k = 0; k < 2; k++) {
			if (k == 1) {
				changed = chg;
				device_run(dp, bytes, pin, true);
			}
			crest_ckpt_t h;
			if ((rc = crest_checkpoint(c, NULL, &h)) < 0 || (rc = crest_wait(c, h, &res[k])) < 0)
				return fail("checkpoint", rc);
		}
		printf("save: %zu GiB; checkpoint 1 stall %.3f s, ingest %.2f s; checkpoint 2 (%zu of %zu chunks "
		       "rewritten) stall %.4f s, ingest %.3f s; snapshot %.12s; ending without crest_close\n",
		       bytes / GiB, res[0].stall_ns / 1e9, res[0].ingest_ns / 1e9, nchg, nch, res[1].stall_ns / 1e9,
		       res[1].ingest_ns / 1e9, res[1].snapshot);
		_exit(0);   /* a crash: the cache file is what outlives it */
	}
	changed = chg;
	if (tampered && tamper(dir) < 0)
		return fail("flipping a byte of the cache", -1);
	double t[2];
	uint64_t from_cache[2];
	size_t bad[2];
	for (int k = 0; k < 2; k++) {
		if (d->MemsetD8(dp, 0, bytes) || d->CtxSynchronize())
			return fail("wiping the region", -1);
		o.host_cache = k == 0 ? dir : NULL;
		struct crest_restore_result rr;
		if ((rc = crest_open(store, &o, &c)) < 0 ||
		    (rc = crest_register(c, "weights", (void *)dp, bytes, CREST_MEM_DEVICE, &r)) < 0)
			return fail("opening and registering", rc);
		const double t0 = now();
		if ((rc = crest_restore(c, NULL, &rr)) < 0)
			return fail(k == 0 ? "restore with the host cache" : "restore from the store", rc);
		t[k] = now() - t0;
		from_cache[k] = rr.cache_bytes;
		if ((rc = crest_close(c)) < 0)
			return fail("close", rc);
		bad[k] = device_run(dp, bytes, pin, false);
	}
	const bool want_cache = !tampered && !full;
	const bool ok = bad[0] == 0 && bad[1] == 0 && (from_cache[0] == (want_cache ? bytes : 0)) && from_cache[1] == 0;
	printf("restore after a crash, %zu GiB%s: host cache %.3f s (%.1f GB/s, %.2f GB from the cache, %zu words "
	       "wrong), store %.3f s (%.1f GB/s, %zu words wrong): %s\n", bytes / GiB,
	       tampered ? ", one byte of the cache flipped" : full ? ", the cache's tmpfs too small" : "", t[0], bytes / t[0] / 1e9, from_cache[0] / 1e9,
	       bad[0], t[1], bytes / t[1] / 1e9, bad[1], ok ? "ok" : "FAILED");
	printf("RESULT cache_restore_s=%.3f store_restore_s=%.3f ratio=%.2f cache_bytes=%llu tampered=%d ok=%d\n", t[0],
	       t[1], t[1] / t[0], (unsigned long long)from_cache[0], tampered, ok);
	return ok ? 0 : 1;
}
