/*
 * gpu_bench.c - libcrest on device memory, against the driver's own
 * checkpoint of the same amount.
 *
 *   gpu_bench STORE [GIB]
 *
 * GIB GiB (default 8) of device memory, filled with a deterministic pattern
 * that neither compresses nor dedups, is registered as one region and
 * checkpointed: the stall is the time in crest_checkpoint. A second,
 * unchanged checkpoint shows the incremental cost, and a third after
 * $GPU_BENCH_CHANGE_PCT percent (2) of the 4 KiB chunks, picked at random,
 * were rewritten. Then the device memory is wiped, restored from the store
 * (page cache warm: just written) and checked bit for bit, from the first
 * snapshot twice and from the third once. Last, a child process holding GIB GiB is checkpointed and
 * restored by the driver (cuCheckpointProcessLock/Checkpoint/Restore/Unlock)
 * and checks its memory afterwards. Lines starting with RESULT are the
 * figures for bench/RESULTS.md. GPU_BENCH_RESTORES=N restores the first
 * snapshot N times (2), or the third with GPU_BENCH_RESTORE_TAG=bench-3;
 * GPU_BENCH_DRIVER=0 leaves the driver's out.
 */
#include "crest.h"
#include "gpu/cudrv.h"
#include "pattern.h"
#define BENCH_NAME "gpu_bench"
#include "fail.h"
#include "util/progress.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define GiB ((size_t)1 << 30)

static const struct cudrv *d;

static double now(void)
{
	return time_now_ns() / 1e9;
}

/* Chunks changed for the third checkpoint (pattern.h), or NULL. */
static const uint8_t *changed;

static size_t pattern_run(uint64_t *buf, size_t bytes, uint64_t first, bool check)
{
	return bench_pattern_run(buf, bytes, first, check, changed);
}

/* The pattern into device memory, through a pinned buffer of one GiB. */
static void device_fill(CUdeviceptr dp, size_t bytes, uint64_t *pin)
{
	for (size_t off = 0; off < bytes; off += GiB) {
		pattern_run(pin, GiB, off / 8, false);
		CU(d->MemcpyHtoDAsync(dp + off, pin, GiB, NULL));
		CU(d->CtxSynchronize());
	}
}

static size_t device_check(CUdeviceptr dp, size_t bytes, uint64_t *pin)
{
	size_t bad = 0;
	for (size_t off = 0; off < bytes; off += GiB) {
		CU(d->MemcpyDtoHAsync(pin, dp + off, GiB, NULL));
		CU(d->CtxSynchronize());
		bad += pattern_run(pin, GiB, off / 8, true);
	}
	return bad;
}

static CUcontext setup(void)
{
	OK(cudrv_load(&d));
	CUdevice dev;
	CUcontext ctx;
	CU(d->DeviceGet(&dev, 0));
	CU(d->DevicePrimaryCtxRetain(&ctx, dev));
	CU(d->CtxSetCurrent(ctx));
	return ctx;
}

/* The child the driver checkpoints: holds the memory, checks it on request. */
static int child(size_t bytes)
{
	setup();
	CUdeviceptr dp;
	void *pin;
	CU(d->MemAlloc(&dp, bytes));
	CU(d->MemHostAlloc(&pin, GiB, 0));
	device_fill(dp, bytes, pin);
	printf("ready\n");
	fflush(stdout);
	char line[64];
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	size_t bad = device_check(dp, bytes, pin);
	printf("%s %zu\n", bad ? "bad" : "ok", bad);
	fflush(stdout);
	return bad ? 1 : 0;
}

static void driver_checkpoint(size_t bytes, const char *self)
{
	int rc = cudrv_need_checkpoint(d);
	if (rc < 0) {
		printf("RESULT driver_checkpoint=unavailable (%s)\n", crest_errmsg());
		return;
	}
	int to[2], from[2];
	if (pipe(to) < 0 || pipe(from) < 0)
		die("pipe", -errno);
	pid_t pid = fork();
	if (pid == 0) {
		dup2(to[0], 0);
		dup2(from[1], 1);
		close(to[1]);
		close(from[0]);
		char gib[32];
		snprintf(gib, sizeof(gib), "%zu", bytes / GiB);
		execl(self, self, "--child", gib, (char *)NULL);
		_exit(127);
	}
	close(to[0]);
	close(from[1]);
	FILE *in = fdopen(from[0], "r"), *out = fdopen(to[1], "w");
	char line[64] = "";
	if (!fgets(line, sizeof(line), in) || strncmp(line, "ready", 5)) {
		printf("RESULT driver_checkpoint=child failed to start\n");
		return;
	}
	CUcheckpointLockArgs la = { .timeoutMs = 0 };
	CUcheckpointCheckpointArgs ca;
	CUcheckpointRestoreArgs ra;
	CUcheckpointUnlockArgs ua;
	memset(&ca, 0, sizeof(ca));
	memset(&ra, 0, sizeof(ra));
	memset(&ua, 0, sizeof(ua));
	double t0 = now();
	CU(d->CheckpointProcessLock(pid, &la));
	double t1 = now();
	CU(d->CheckpointProcessCheckpoint(pid, &ca));
	double t2 = now();
	CU(d->CheckpointProcessRestore(pid, &ra));
	double t3 = now();
	CU(d->CheckpointProcessUnlock(pid, &ua));
	double t4 = now();
	fprintf(out, "check\n");
	fflush(out);
	if (!fgets(line, sizeof(line), in))
		snprintf(line, sizeof(line), "no answer");
	line[strcspn(line, "\n")] = 0;
	int st;
	waitpid(pid, &st, 0);
	printf("driver: lock %.3f s, checkpoint %.3f s (%.2f GB/s), restore %.3f s (%.2f GB/s), unlock %.3f s; "
	       "child's memory afterwards: %s\n", t1 - t0, t2 - t1, bytes / (t2 - t1) / 1e9, t3 - t2,
	       bytes / (t3 - t2) / 1e9, t4 - t3, line);
	printf("RESULT driver_checkpoint_s=%.3f driver_restore_s=%.3f driver_lock_unlock_s=%.4f driver_bitexact=%s\n",
	       t2 - t1, t3 - t2, (t1 - t0) + (t4 - t3), strncmp(line, "ok", 2) ? "NO" : "yes");
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 3 && !strcmp(argv[1], "--child"))
		return child((size_t)atoi(argv[2]) * GiB);
	if (argc < 2) {
		fprintf(stderr, "usage: gpu_bench STORE [GIB]\n");
		return 2;
	}
	const char *store = argv[1];
	const size_t bytes = (argc > 2 ? (size_t)atoi(argv[2]) : 8) * GiB;
	if (cudrv_load(&d) < 0) {
		printf("SKIP: %s\n", crest_errmsg());
		return 77;
	}
	CUcontext ctx = setup();
	char name[128] = "?";
	CUdevice dev;
	d->DeviceGet(&dev, 0);
	d->DeviceGetName(name, sizeof(name), dev);
	printf("gpu_bench: %s, driver %d, %zu GiB, store %s\n", name, d->driver_version, bytes / GiB, store);

	CUdeviceptr dp;
	uint64_t *pin;
	CU(d->MemAlloc(&dp, bytes));
	CU(d->MemHostAlloc((void **)&pin, GiB, 0));
	double t = now();
	device_fill(dp, bytes, pin);
	printf("filled %zu GiB in %.2f s\n", bytes / GiB, now() - t);

	/* The PCIe rate for reference: device to pinned host, one and four streams. */
	CUstream s[4];
	for (int i = 0; i < 4; i++)
		CU(d->StreamCreate(&s[i], CU_STREAM_NON_BLOCKING));
	double best1 = 0, best4 = 0;
	for (int rep = 0; rep < 3; rep++) {
		t = now();
		CU(d->MemcpyDtoHAsync(pin, dp, GiB, s[0]));
		CU(d->StreamSynchronize(s[0]));
		double r1 = GiB / (now() - t) / 1e9;
		t = now();
		for (int i = 0; i < 4; i++)
			CU(d->MemcpyDtoHAsync((uint8_t *)pin + i * (GiB / 4), dp + i * (GiB / 4), GiB / 4, s[i]));
		for (int i = 0; i < 4; i++)
			CU(d->StreamSynchronize(s[i]));
		double r4 = GiB / (now() - t) / 1e9;
		best1 = r1 > best1 ? r1 : best1;
		best4 = r4 > best4 ? r4 : best4;
	}
	printf("RESULT pcie_dtoh_1stream_GBps=%.1f pcie_dtoh_4streams_GBps=%.1f\n", best1, best4);

	struct crest_options o;
	crest_options_init(&o);
	o.staging_bytes = bytes + GiB / 4;
	crest_t *c;
	t = now();
	OK(crest_open(store, &o, &c));
	printf("crest_open with %zu MiB pinned staging: %.2f s (once per process)\n", o.staging_bytes >> 20, now() - t);
	crest_region_t h;
	OK(crest_register(c, "gpu/state", (void *)(uintptr_t)dp, bytes, CREST_MEM_DEVICE, &h));

	crest_ckpt_t ck;
	struct crest_result r1, r2;
	OK(crest_checkpoint(c, &(struct crest_checkpoint_opts){ .tag = "bench-1" }, &ck));
	const int running = crest_poll(c, ck) == 0;
	OK(crest_wait(c, ck, &r1));
	printf("checkpoint 1: stall %.3f s = %.1f GB/s (ingest %s at return); ingest %.2f s = %.2f GB/s; "
	       "%llu new bytes\n", r1.stall_ns / 1e9, bytes / (double)r1.stall_ns, running ? "running" : "done",
	       r1.ingest_ns / 1e9, bytes / (double)r1.ingest_ns, (unsigned long long)r1.new_bytes);
	OK(crest_checkpoint(c, &(struct crest_checkpoint_opts){ .tag = "bench-2" }, &ck));
	OK(crest_wait(c, ck, &r2));
	printf("checkpoint 2 (unchanged): stall %.3f s = %.1f GB/s; ingest %.2f s; %llu new bytes\n",
	       r2.stall_ns / 1e9, bytes / (double)r2.stall_ns, r2.ingest_ns / 1e9, (unsigned long long)r2.new_bytes);
	printf("RESULT stall_s=%.3f stall_GBps=%.1f ingest_s=%.2f ingest2_s=%.2f new2_bytes=%llu\n", r1.stall_ns / 1e9,
	       bytes / (double)r1.stall_ns, r1.ingest_ns / 1e9, r2.ingest_ns / 1e9, (unsigned long long)r2.new_bytes);
	/* its own line: scripts that read the one above keep their fields */
	printf("RESULT stall2_s=%.3f stall2_GBps=%.1f\n", r2.stall_ns / 1e9, bytes / (double)r2.stall_ns);

	/* Checkpoint 3: pct% of the chunks rewritten, one at a time. */
	const char *pe = getenv("GPU_BENCH_CHANGE_PCT");
	const double pct = pe ? atof(pe) : 2.0;
	const size_t nch = bytes / 4096;
	uint8_t *chg = calloc(nch, 1);
	uint64_t x = 0x243f6a8885a308d3ull;
	size_t nchg = 0;
	for (size_t i = 0; i < nch; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		if ((double)(x % 1000000) < pct * 10000.0)
			chg[i] = 1, nchg++;
	}
	changed = chg;
	for (size_t i = 0, j = 0; i < nch; i++) {
		if (!chg[i])
			continue;
		uint64_t *w = pin + (j % (GiB / 4096)) * BENCH_CHUNK_WORDS;
		for (size_t k = 0; k < BENCH_CHUNK_WORDS; k++)
			w[k] = bench_mix(i * BENCH_CHUNK_WORDS + k + BENCH_CHANGED_OFF);
		CU(d->MemcpyHtoDAsync(dp + i * 4096, w, 4096, NULL));
		if (++j % (GiB / 4096) == 0)
			CU(d->CtxSynchronize());
	}
	CU(d->CtxSynchronize());
	struct crest_result r3;
	OK(crest_checkpoint(c, &(struct crest_checkpoint_opts){ .tag = "bench-3" }, &ck));
	OK(crest_wait(c, ck, &r3));
	printf("checkpoint 3 (%zu of %zu chunks rewritten, %.2f%%): stall %.4f s = %.1f%% of the first's; "
	       "ingest %.3f s; %llu new bytes\n", nchg, nch, 100.0 * nchg / nch, r3.stall_ns / 1e9,
	       100.0 * r3.stall_ns / r1.stall_ns, r3.ingest_ns / 1e9, (unsigned long long)r3.new_bytes);
	printf("RESULT stall3_s=%.4f stall3_over_stall=%.3f ingest3_s=%.3f new3_bytes=%llu changed3_pct=%.2f\n",
	       r3.stall_ns / 1e9, (double)r3.stall_ns / r1.stall_ns, r3.ingest_ns / 1e9,
	       (unsigned long long)r3.new_bytes, 100.0 * nchg / nch);
	{
		CU(d->MemsetD8(dp, 0, bytes));
		CU(d->CtxSynchronize());
		struct crest_restore_result rr;
		OK(crest_restore(c, "bench-3", &rr));
		const size_t bad = device_check(dp, bytes, pin);
		printf("restore of checkpoint 3: %.3f s; %zu bad words\n", rr.ns / 1e9, bad);
		printf("RESULT restore3_bitexact=%s\n", bad ? "NO" : "yes");
	}
	/* GPU_BENCH_RESTORE_TAG=bench-3: the timed restores below are of the
	 * 2%-changed checkpoint (the usual one after a crash: the newest)
	 * rather than of the first. */
	const char *rt = getenv("GPU_BENCH_RESTORE_TAG");
	const bool third = rt && !strcmp(rt, "bench-3");
	if (!third)
		changed = NULL;

	const char *re = getenv("GPU_BENCH_RESTORES");
	const int restores = re && atoi(re) > 0 ? atoi(re) : 2;
	for (int rep = 1; rep <= restores; rep++) {
		CU(d->MemsetD8(dp, 0, bytes));
		CU(d->CtxSynchronize());
		struct crest_restore_result rr;
		OK(crest_restore(c, third ? "bench-3" : "bench-1", &rr));
		const size_t bad = device_check(dp, bytes, pin);
		printf("restore %d: %.3f s = %.1f GB/s into the GPU; %zu bad words\n", rep, rr.ns / 1e9,
		       bytes / (double)rr.ns, bad);
		printf("RESULT restore%d_s=%.3f restore%d_GBps=%.1f restore%d_bitexact=%s\n", rep, rr.ns / 1e9, rep,
		       bytes / (double)rr.ns, rep, bad ? "NO" : "yes");
	}
	changed = NULL;
	free(chg);
	OK(crest_close(c));
	CU(d->CtxSetCurrent(ctx));
	d->MemFree(dp);
	d->MemFreeHost(pin);
	const char *de = getenv("GPU_BENCH_DRIVER");
	if (!de || strcmp(de, "0"))
		driver_checkpoint(bytes, "/proc/self/exe");
	return 0;
}
