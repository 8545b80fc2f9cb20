/*
 * multidev_bench.c - one crest handle on one GPU beside one handle on
 * several GPUs of the same process (issue 34), in one run.
 *
 *   multidev_bench STORE [GIB [NGPU]]
 *
 * GIB GiB (default 8) of device memory on each of NGPU GPUs (default: all
 * the driver sees; fewer than 2 is refused with exit 2), each GPU's memory
 * allocated in its primary context and filled with the benches' pattern
 * (pattern.h), every GPU's words numbered on from the last GPU's, so that
 * nothing compresses or dedups, not even across GPUs. Then, side by side:
 *
 *   1 GPU   GPU 0's memory alone, one region in a handle of its own;
 *   N GPUs  every GPU's memory, one region a GPU, all in one handle;
 *
 * each checkpointed once (the stall: the time in crest_checkpoint, as
 * crest_result.stall_ns says; then crest_wait), then wiped on the GPU,
 * restored $MULTIDEV_RESTORES times (2; the page cache warm: just written)
 * and checked word for word after each. The ratios are the targets:
 * the stall of N GPUs over that of 1 (at most 1.1: the GPUs copied at once,
 * not one after the other) and the restore rate of N over that of 1 (at
 * least 1.8), the best restore of each. Both cases run twice: first with a
 * staging pool that holds the whole state of N GPUs (its bytes + 256 MiB,
 * as gpu_bench sizes its own), then with the default pool of 1 GiB, where
 * the copies go in rounds through the pool and it matters how crest
 * interleaves the GPUs. Both cases of a pass get the same pool: its size
 * sets crest's slices and restore windows, so the ratio is of the GPUs
 * alone. For reference, the ceilings: plain cuMemcpyDtoHAsync into pinned
 * memory (4 streams a GPU, as crest's default copy_streams) from GPU 0
 * alone and from all N at once; and, for each case's restore, its store's
 * pack files read from the page cache into pinned windows and copied to
 * the case's GPUs, by as many threads as crest restores with (one a CPU):
 * what the machine allows a restore that reads those files.
 *
 * Every case gets a fresh store, STORE/full-1gpu, STORE/full-<N>gpu,
 * STORE/pool1g-1gpu, STORE/pool1g-<N>gpu, removed once measured unless
 * MULTIDEV_KEEP=1 (scripts/gpu-check.sh keeps them to verify them). Lines
 * that start with RESULT are the figures for bench/RESULTS.md (multidev.sh
 * collects them, as gpu_bench.sh does gpu_bench's). Exit 0 when every restore was
 * bit-exact, whatever the ratios (a bench reports them; it does not judge
 * them), 1 when one was not or a call failed, 2 on a bad command line or
 * fewer than 2 GPUs, 77 with "SKIP: no GPU here (...)" where there is no
 * GPU (tests/gpu_here.h).
 */
#include "crest.h"
#include "gpu/cudrv.h"
#include "pattern.h"
#define BENCH_NAME "multidev_bench"
#include "fail.h"
#include "tests/gpu_here.h"
#include "util/progress.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GiB ((size_t)1 << 30)
#define MiB ((size_t)1 << 20)
#define MAXGPU 64
#define STREAMS 4

static const struct cudrv *d;

static int ngpu;                   /* GPUs of the N-GPU case */
static size_t bytes;               /* per GPU */
static CUcontext ctx[MAXGPU];      /* primary contexts */
static CUdeviceptr dp[MAXGPU];     /* GIB GiB on each */
static uint64_t *pin[MAXGPU];      /* 1 GiB pinned a GPU: fill, check, ceiling */
static CUstream st[MAXGPU][STREAMS];

static double now(void)
{
	return time_now_ns() / 1e9;
}

/* GPU g's context current: cuMemAlloc, cuMemsetD8 and copies on the NULL
 * stream act on the current context's memory. */
static void on(int g)
{
	CU(d->CtxSetCurrent(ctx[g]));
}

/* The index of GPU g's first word: the GPUs' words follow each other, so no
 * GPU's chunks are another's. */
static uint64_t first_word(int g)
{
	return (uint64_t)g * (bytes / 8);
}

static void device_fill(int g)
{
	on(g);
	for (size_t off = 0; off < bytes; off += GiB) {
		bench_pattern_run(pin[g], GiB, first_word(g) + off / 8, false, NULL);
		CU(d->MemcpyHtoDAsync(dp[g] + off, pin[g], GiB, NULL));
		CU(d->CtxSynchronize());
	}
}

/* Words of GPU g's memory that differ from the pattern. */
static size_t device_check(int g)
{
	size_t bad = 0;
	on(g);
	for (size_t off = 0; off < bytes; off += GiB) {
		CU(d->MemcpyDtoHAsync(pin[g], dp[g] + off, GiB, NULL));
		CU(d->CtxSynchronize());
		bad += bench_pattern_run(pin[g], GiB, first_word(g) + off / 8, true, NULL);
	}
	return bad;
}

/* GB/s of plain device-to-pinned copies of GPUs 0..n-1's whole memory, all
 * GPUs at once, best of three: what the machine allows a checkpoint. The
 * copies of all GPUs are issued in turn, a quarter GiB each, before any is
 * waited for. */
static double dtoh_ceiling(int n)
{
	const size_t slice = GiB / STREAMS;
	double best = 0;
	for (int rep = 0; rep < 3; rep++) {
		const double t = now();
		for (size_t s = 0; s < bytes / slice; s++)
			for (int g = 0; g < n; g++) {
				on(g);
				CU(d->MemcpyDtoHAsync((uint8_t *)pin[g] + (s % STREAMS) * slice, dp[g] + s * slice, slice,
						      st[g][s % STREAMS]));
			}
		for (int g = 0; g < n; g++) {
			on(g);
			for (int k = 0; k < STREAMS; k++)
				CU(d->StreamSynchronize(st[g][k]));
		}
		const double r = n * bytes / (now() - t) / 1e9;
		best = r > best ? r : best;
	}
	return best;
}

/* The restore's ceiling: a store's pack files, in 8 MiB pieces handed out
 * in turn, each pread into a pinned window of its thread and copied to the
 * thread's GPU (thread t: GPU t mod n), two windows a thread so that a read
 * goes beside the last copy. The device memory written is the case's own,
 * filled again afterwards. */
#define PIECE (8 * MiB)
struct ceil_run {
	int *fds;
	size_t nfiles, *sizes;
	atomic_size_t next;        /* piece number over all files */
	pthread_barrier_t ready;   /* windows pinned: the clock starts after */
	size_t npieces_max;        /* pieces a file at most */
	int n;
	size_t moved[256];
	double end[256];           /* when each thread's last copy was done */
};

static void *ceil_thread(void *arg_)
{
	struct ceil_run *cr = ((void **)arg_)[0];
	const int t = (int)(intptr_t)((void **)arg_)[1];
	const int g = t % cr->n;
	on(g);
	uint8_t *win[2];
	CUstream s[2];
	for (int w = 0; w < 2; w++) {
		CU(d->MemHostAlloc((void **)&win[w], PIECE, CU_MEMHOSTALLOC_PORTABLE));
		CU(d->StreamCreate(&s[w], CU_STREAM_NON_BLOCKING));
	}
	pthread_barrier_wait(&cr->ready);
	size_t moved = 0, k = 0;
	for (;; k++) {
		const size_t i = atomic_fetch_add(&cr->next, 1);
		const size_t f = i / cr->npieces_max, off = (i % cr->npieces_max) * PIECE;
		if (f >= cr->nfiles)
			break;
		if (off >= cr->sizes[f])
			continue;
		const int w = k & 1;
		CU(d->StreamSynchronize(s[w]));
		const ssize_t got = pread(cr->fds[f], win[w], PIECE, (off_t)off);
		if (got <= 0)
			continue;
		CU(d->MemcpyHtoDAsync(dp[g] + (moved % (bytes - PIECE + 1)) / PIECE * PIECE, win[w], (size_t)got, s[w]));
		moved += (size_t)got;
	}
	for (int w = 0; w < 2; w++)
		CU(d->StreamSynchronize(s[w]));
	cr->end[t] = now();
	for (int w = 0; w < 2; w++) {
		d->StreamDestroy(s[w]);
		d->MemFreeHost(win[w]);
	}
	cr->moved[t] = moved;
	return NULL;
}

/* GB/s of that, best of two passes (the page cache warm from the
 * checkpoint); 0 when the store has no packs where expected. */
static double h2d_ceiling(const char *store, int n)
{
	char dir[4096];
	if (snprintf(dir, sizeof(dir), "%s/packs", store) >= (int)sizeof(dir))
		return 0;
	DIR *dh = opendir(dir);
	if (!dh)
		return 0;
	struct ceil_run cr = { .n = n };
	size_t cap = 0;
	for (struct dirent *e; (e = readdir(dh));) {
		const size_t len = strlen(e->d_name);
		if (len < 6 || strcmp(e->d_name + len - 5, ".pack"))
			continue;
		if (cr.nfiles == cap) {
			cap = cap ? 2 * cap : 64;
			cr.fds = realloc(cr.fds, cap * sizeof(*cr.fds));
			cr.sizes = realloc(cr.sizes, cap * sizeof(*cr.sizes));
			if (!cr.fds || !cr.sizes) {
				printf("FAIL: out of memory\n");
				exit(1);
			}
		}
		const int fd = openat(dirfd(dh), e->d_name, O_RDONLY | O_CLOEXEC);
		struct stat stt;
		if (fd < 0 || fstat(fd, &stt) < 0) {
			printf("FAIL: cannot open %s/%s\n", dir, e->d_name);
			exit(1);
		}
		cr.fds[cr.nfiles] = fd;
		cr.sizes[cr.nfiles] = (size_t)stt.st_size;
		if (cr.sizes[cr.nfiles] / PIECE + 1 > cr.npieces_max)
			cr.npieces_max = cr.sizes[cr.nfiles] / PIECE + 1;
		cr.nfiles++;
	}
	closedir(dh);
	long nth = sysconf(_SC_NPROCESSORS_ONLN);
	nth = nth < 1 ? 1 : nth > 256 ? 256 : nth;
	double best = 0;
	for (int rep = 0; rep < 2 && cr.nfiles; rep++) {
		atomic_store(&cr.next, 0);
		pthread_t th[256];
		void *args[256][2];
		pthread_barrier_init(&cr.ready, NULL, (unsigned)nth + 1);
		for (long t = 0; t < nth; t++) {
			args[t][0] = &cr;
			args[t][1] = (void *)(intptr_t)t;
			if (pthread_create(&th[t], NULL, ceil_thread, args[t])) {
				printf("FAIL: cannot start a thread\n");
				exit(1);
			}
		}
		pthread_barrier_wait(&cr.ready);
		const double t0 = now();
		size_t moved = 0;
		double end = t0;
		for (long t = 0; t < nth; t++) {
			pthread_join(th[t], NULL);
			moved += cr.moved[t];
			end = cr.end[t] > end ? cr.end[t] : end;
		}
		const double r = moved / (end - t0) / 1e9;
		best = r > best ? r : best;
		pthread_barrier_destroy(&cr.ready);
	}
	for (size_t i = 0; i < cr.nfiles; i++)
		close(cr.fds[i]);
	free(cr.fds);
	free(cr.sizes);
	return best;
}

struct figures {
	double ceiling_GBps;         /* h2d_ceiling of the case's store */
	double stall_s, restore_s;   /* the restore: the best of the case's */
	size_t bad;                  /* words that came back wrong, all restores */
};

/* One case: GPUs 0..n-1 in one handle on a fresh store, pool bytes of
 * staging (0: crest's default). */
static struct figures run_case(const char *root, const char *pool_name, size_t pool, int n)
{
	struct figures f = { 0 };
	char store[4096], cmd[4200];
	snprintf(store, sizeof(store), "%s/%s-%dgpu", root, pool_name, n);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", store);
	if (system(cmd) != 0) {
		printf("FAIL: could not remove %s\n", store);
		exit(1);
	}
	const size_t total = n * bytes;

	struct crest_options o;
	crest_options_init(&o);
	if (pool)
		o.staging_bytes = pool;
	crest_t *c;
	double t = now();
	OK(crest_open(store, &o, &c));
	const double open_s = now() - t;
	for (int g = 0; g < n; g++) {
		char name[32];
		crest_region_t h;
		snprintf(name, sizeof(name), "gpu%d/state", g);
		OK(crest_register(c, name, (void *)(uintptr_t)dp[g], bytes, CREST_MEM_DEVICE, &h));
	}
	/* As a job would be after its step: on GPU 0. crest must find every
	 * region's context itself. */
	on(0);
	crest_ckpt_t ck;
	struct crest_result r;
	OK(crest_checkpoint(c, &(struct crest_checkpoint_opts){ .tag = "multidev" }, &ck));
	OK(crest_wait(c, ck, &r));
	f.stall_s = r.stall_ns / 1e9;
	printf("%s pool, %d GPU%s (%zu GiB): crest_open %.2f s; checkpoint stall %.3f s = %.1f GB/s (%u staging "
	       "waits, %.3f s of the stall); ingest %.2f s = %.2f GB/s\n", pool_name, n, n == 1 ? "" : "s",
	       total / GiB, open_s, f.stall_s, total / f.stall_s / 1e9, r.rounds, r.staging_wait_ns / 1e9,
	       r.ingest_ns / 1e9, total / (r.ingest_ns / 1e9) / 1e9);

	const char *re = getenv("MULTIDEV_RESTORES");
	const int restores = re && atoi(re) > 0 ? atoi(re) : 2;
	for (int rep = 1; rep <= restores; rep++) {
		for (int g = 0; g < n; g++) {
			on(g);
			CU(d->MemsetD8(dp[g], 0, bytes));
			CU(d->CtxSynchronize());
		}
		on(0);
		struct crest_restore_result rr;
		OK(crest_restore(c, "multidev", &rr));
		size_t bad = 0;
		for (int g = 0; g < n; g++) {
			const size_t b = device_check(g);
			if (b) {
				printf("FAIL: %s pool, %d GPUs, restore %d: %zu words of GPU %d differ\n", pool_name, n,
				       rep, b, g);
				device_fill(g);   /* the next case starts from the pattern again */
			}
			bad += b;
		}
		f.bad += bad;
		const double s = rr.ns / 1e9;
		if (rep == 1 || s < f.restore_s)
			f.restore_s = s;
		printf("%s pool, %d GPU%s: restore %d: %.3f s = %.1f GB/s into the GPU%s; %s\n", pool_name, n,
		       n == 1 ? "" : "s", rep, s, total / s / 1e9, n == 1 ? "" : "s",
		       bad ? "DIFFERS" : "bit-exact");
	}
	/* After the restores, so that the page cache holds what they read; it
	 * writes over the GPUs' memory, filled again for the next case. */
	f.ceiling_GBps = h2d_ceiling(store, n);
	printf("%s pool, %d GPU%s: restore ceiling (the store's packs read from the page cache into pinned windows, "
	       "copied to the GPU%s): %.1f GB/s\n", pool_name, n, n == 1 ? "" : "s", n == 1 ? "" : "s", f.ceiling_GBps);
	for (int g = 0; g < n; g++)
		device_fill(g);
	OK(crest_close(c));
	const char *keep = getenv("MULTIDEV_KEEP");
	if (!keep || strcmp(keep, "1")) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", store);
		if (system(cmd) != 0) {
			printf("FAIL: could not remove %s\n", store);
			exit(1);
		}
	}
	return f;
}

/* The two cases through one kind of pool, and their ratios. */
static size_t run_pass(const char *root, const char *pool_name, size_t pool)
{
	if (pool)
		printf("== %s pool: %zu MiB of pinned staging, the whole state of %d GPUs and 256 MiB\n", pool_name,
		       pool / MiB, ngpu);
	else
		printf("== %s pool: crest's default staging pool (1 GiB), smaller than the state: copies in rounds\n",
		       pool_name);
	const struct figures one = run_case(root, pool_name, pool, 1);
	const struct figures all = run_case(root, pool_name, pool, ngpu);
	const double stall_ratio = all.stall_s / one.stall_s;
	const double rate1 = bytes / one.restore_s, rate_all = ngpu * bytes / all.restore_s;
	const double restore_ratio = rate_all / rate1;
	printf("%s pool: stall of %d GPUs over 1: %.2f (target <= 1.1: %s); restore rate of %d GPUs over 1: "
	       "%.2f (target >= 1.8: %s)\n", pool_name, ngpu, stall_ratio, stall_ratio <= 1.1 ? "met" : "MISSED",
	       ngpu, restore_ratio, restore_ratio >= 1.8 ? "met" : "MISSED");
	printf("RESULT %s_stall_1gpu_s=%.3f %s_stall_all_s=%.3f %s_stall_ratio=%.2f %s_stall_met=%s\n", pool_name,
	       one.stall_s, pool_name, all.stall_s, pool_name, stall_ratio, pool_name,
	       stall_ratio <= 1.1 ? "yes" : "NO");
	printf("RESULT %s_restore_1gpu_GBps=%.1f %s_restore_all_GBps=%.1f %s_restore_ratio=%.2f %s_restore_met=%s "
	       "%s_bitexact=%s\n", pool_name, rate1 / 1e9, pool_name, rate_all / 1e9, pool_name, restore_ratio,
	       pool_name, restore_ratio >= 1.8 ? "yes" : "NO", pool_name, one.bad + all.bad ? "NO" : "yes");
	if (one.ceiling_GBps > 0 && all.ceiling_GBps > 0) {
		printf("%s pool: restore ceiling of %d GPUs over 1: %.2f (%.1f over %.1f GB/s); crest's restore at "
		       "%.2f and %.2f of its ceiling\n", pool_name, ngpu, all.ceiling_GBps / one.ceiling_GBps,
		       all.ceiling_GBps, one.ceiling_GBps, rate1 / 1e9 / one.ceiling_GBps,
		       rate_all / 1e9 / all.ceiling_GBps);
		printf("RESULT %s_ceiling_1gpu_GBps=%.1f %s_ceiling_all_GBps=%.1f %s_ceiling_ratio=%.2f\n", pool_name,
		       one.ceiling_GBps, pool_name, all.ceiling_GBps, pool_name, all.ceiling_GBps / one.ceiling_GBps);
	}
	return one.bad + all.bad;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2 || argc > 4) {
		fprintf(stderr, "usage: multidev_bench STORE [GIB [NGPU]]\n");
		return 2;
	}
	const char *root = argv[1];
	const long gib = argc > 2 ? atol(argv[2]) : 8;
	const long want = argc > 3 ? atol(argv[3]) : 0;
	if (gib < 1 || gib > 1024 || (argc > 3 && want < 2)) {
		fprintf(stderr, "multidev_bench: GIB must be 1 to 1024, NGPU 2 or more\n");
		return 2;
	}
	bytes = (size_t)gib * GiB;
	const int start = gpu_test_start(&d);
	if (start)
		return start;
	int here = 0;
	if (d->DeviceGetCount(&here) != CUDA_SUCCESS || here == 0) {
		printf("FAIL: a GPU device node is here but the driver sees no GPU\n");
		return 1;
	}
	if (here < 2 || want > here) {
		printf("multidev_bench: needs %ld GPUs, this machine has %d\n", want > 2 ? want : 2, here);
		return 2;
	}
	ngpu = want ? (int)want : here;
	ngpu = ngpu > MAXGPU ? MAXGPU : ngpu;
	if (mkdir(root, 0755) < 0 && access(root, W_OK) < 0) {
		printf("multidev_bench: cannot make or write %s\n", root);
		return 1;
	}

	char names[512] = "";
	for (int g = 0; g < ngpu; g++) {
		CUdevice dev;
		char name[128] = "?";
		CU(d->DeviceGet(&dev, g));
		d->DeviceGetName(name, sizeof(name), dev);
		const size_t at = strlen(names);
		snprintf(names + at, sizeof(names) - at, "%s%s", g ? ", " : "", name);
		CU(d->DevicePrimaryCtxRetain(&ctx[g], dev));
		on(g);
		CU(d->MemAlloc(&dp[g], bytes));
		/* Portable: pinned for every context, though only g's uses it. */
		CU(d->MemHostAlloc((void **)&pin[g], GiB, CU_MEMHOSTALLOC_PORTABLE));
		for (int k = 0; k < STREAMS; k++)
			CU(d->StreamCreate(&st[g][k], CU_STREAM_NON_BLOCKING));
	}
	printf("multidev_bench: %d GPUs of %d (%s), driver %d, %zu GiB on each, stores under %s\n", ngpu, here,
	       names, d->driver_version, bytes / GiB, root);
	double t = now();
	for (int g = 0; g < ngpu; g++)
		device_fill(g);
	printf("filled %zu GiB on each of %d GPUs in %.2f s\n", bytes / GiB, ngpu, now() - t);
	printf("RESULT ngpu=%d gib_per_gpu=%zu\n", ngpu, bytes / GiB);

	const double c1 = dtoh_ceiling(1), cn = dtoh_ceiling(ngpu);
	printf("ceiling: cuMemcpyDtoHAsync into pinned memory, %d streams a GPU: GPU 0 alone %.1f GB/s, %d GPUs at "
	       "once %.1f GB/s (%.2fx)\n", STREAMS, c1, ngpu, cn, cn / c1);
	printf("RESULT ceiling_dtoh_1gpu_GBps=%.1f ceiling_dtoh_all_GBps=%.1f ceiling_ratio=%.2f\n", c1, cn, cn / c1);

	size_t bad = run_pass(root, "full", ngpu * bytes + 256 * MiB);
	bad += run_pass(root, "pool1g", 0);

	for (int g = 0; g < ngpu; g++) {
		on(g);
		for (int k = 0; k < STREAMS; k++)
			d->StreamDestroy(st[g][k]);
		d->MemFree(dp[g]);
		d->MemFreeHost(pin[g]);
	}
	if (bad) {
		printf("multidev_bench: FAILED: %zu words came back wrong\n", bad);
		return 1;
	}
	printf("multidev_bench: ok: %zu GiB on 1 GPU and on each of %d GPUs checkpointed and restored through both "
	       "pools, bit-exact every time\n", bytes / GiB, ngpu);
	return 0;
}
