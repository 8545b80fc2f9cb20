/*
 * gpu_multi.c - many snapshots of several device regions, every one restored.
 *
 *   gpu_multi [--host] STORE [MIB]
 *
 * Five device regions of odd sizes (the largest MIB MiB + 4093 bytes, default
 * 32; one of a single byte; one never changed after the first snapshot) and a
 * host region go through six checkpoints with random changes in between:
 * scattered writes of random bytes at odd offsets and lengths, zeroed
 * stretches (holes), rounds where a region is left alone. Before each
 * checkpoint the device is read back and compared with a host mirror, whose
 * SHA-256 per region is then that snapshot's expected contents. Some
 * checkpoints are waited for at once and some only after the next one was
 * taken, so ingest overlaps the next copy. Two steps are the same for every
 * seed: the first checkpoint is waited for at once, and before the second
 * only a few bytes of dev/big change. So the second copies changed chunks
 * only, as scripts/gpu-check.sh's gpu_multi check wants of one checkpoint:
 * a region's digests on the GPU are kept for the next checkpoint only when
 * its own was waited for before the next was taken, and with every wait
 * left to the coin, one seed in 32 put off all the first five, leaving no
 * checkpoint a parent's digests to compare with. Then the handle is closed, a
 * fresh one opened, and every snapshot restored in random order (by tag or by
 * id prefix, into regions scribbled with a non-zero byte so that holes must
 * come back as zeros) and compared by SHA-256, with its blob; last the newest
 * snapshot by default. The staging pool is smaller than the state, so each
 * full copy goes in rounds.
 *
 * Extent-list pieces are made tiny (CREST_PIECE_MIN_EXTENTS=4,
 * CREST_PIECE_SPAN=65536 unless set), so each snapshot's lists are hundreds
 * of pieces that the snapshots partly share: a piece lost at commit shows up
 * as a restore that fails or differs.
 *
 * On a machine with several GPUs the device regions are spread over them
 * (issue 34: one handle, regions on any number of devices): dev/big and
 * dev/mid go to two different GPUs drawn from the seed, so at least two
 * are used, and every other device region to one drawn at random. Each
 * region is allocated in its GPU's primary context, and every access the
 * test makes of it (writes, memsets, read-backs, the scribble before a
 * restore, the free) runs with that context current: cuMemAlloc,
 * cuMemsetD8 and copies on the NULL stream act in the current context, so
 * a region touched from another would test nothing of crest's handling of
 * contexts. The placement is printed, and the ok line says on how many
 * GPUs. GPU_MULTI_DEVICES=N uses at most N GPUs (1: all on GPU 0, as on a
 * machine with one). A seed replays only on as many GPUs as it ran on: the
 * placement is drawn from it first.
 *
 * Without a GPU it skips (77, "SKIP: no GPU here (...)"). --host runs the
 * same sequence with host memory standing in for the device regions, so the
 * sequence itself is tested everywhere. The seed is printed;
 * CREST_TEST_SEED=N replays it; GPU_MULTI_STAGING_MIB sets the staging pool
 * (16 MiB). Exit 0 when every snapshot came back
 * bit-exact, 1 otherwise.
 */
#include "crest.h"
#include "gpu/cudrv.h"
#include "util/sha256.h"
#include "tests/check.h"
#include "tests/gpu_here.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)
#define NSNAP 6
#define NREG 6
#define MAXDEV 64

static const struct cudrv *d;
static bool host_mode;
static CUcontext dev_ctx[MAXDEV];   /* primary contexts of the GPUs used */

static uint64_t rng;

static size_t rnd_below(size_t n)
{
	return n ? (size_t)(check_rnd(&rng) % n) : 0;
}

static void rnd_fill(uint8_t *p, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t x = check_rnd(&rng);
		memcpy(p + i, &x, 8);
	}
	for (; i < n; i++)
		p[i] = (uint8_t)check_rnd(&rng);
}

struct region {
	const char *name;
	size_t size;
	bool device;       /* a device region (host memory in --host mode) */
	bool frozen;       /* never changed after the first snapshot */
	int dev;           /* the GPU a device region lives on */
	CUdeviceptr dp;
	uint8_t *host;     /* the host region, or the stand-in in --host mode */
	uint8_t *mirror;   /* what the region holds, kept on the host */
	uint8_t sha[NSNAP][SHA256_LEN];
	crest_region_t h;
};

static struct region regs[NREG];
static uint8_t *scratch;   /* device read-back */

static void *reg_ptr(const struct region *r)
{
	return r->device && !host_mode ? (void *)(uintptr_t)r->dp : r->host;
}

/* Makes r's GPU's context current: the driver calls below act on the
 * current context's memory and NULL stream. True for a device region. */
static bool reg_enter(const struct region *r)
{
	if (!r->device || host_mode)
		return false;
	CU(d->CtxSetCurrent(dev_ctx[r->dev]));
	return true;
}

/* Waits for every GPU used: a memset on one context's NULL stream is not
 * ordered before crest's copies on its own streams. */
static void sync_all(void)
{
	if (host_mode)
		return;
	for (int g = 0; g < MAXDEV; g++)
		if (dev_ctx[g]) {
			CU(d->CtxSetCurrent(dev_ctx[g]));
			CU(d->CtxSynchronize());
		}
}

static void reg_write(struct region *r, size_t off, const void *src, size_t n)
{
	memcpy(r->mirror + off, src, n);
	if (reg_enter(r))
		CU(d->MemcpyHtoDAsync(r->dp + off, src, n, NULL));
	else
		memcpy(r->host + off, src, n);
}

static void reg_set(struct region *r, size_t off, uint8_t v, size_t n, bool mirror)
{
	if (mirror)
		memset(r->mirror + off, v, n);
	if (reg_enter(r))
		CU(d->MemsetD8(r->dp + off, v, n));
	else
		memset(r->host + off, v, n);
}

/* The region's current contents, read back from where they live. */
static const uint8_t *reg_read(struct region *r)
{
	if (!reg_enter(r))
		return r->host;
	CU(d->CtxSynchronize());
	CU(d->MemcpyDtoHAsync(scratch, r->dp, r->size, NULL));
	CU(d->CtxSynchronize());
	return scratch;
}

/* Random changes: scattered writes of odd offsets and lengths, a few whole
 * pages, now and then a zeroed stretch. A region is left alone one round in
 * four, and always when frozen. */
static void mutate(struct region *r, uint8_t *buf)
{
	if (r->frozen || rnd_below(4) == 0)
		return;
	const unsigned writes = 1 + (unsigned)rnd_below(r->size / (256 * 1024) + 8);
	for (unsigned i = 0; i < writes; i++) {
		size_t off, n;
		if (rnd_below(3) == 0 && r->size >= 8192) {
			off = rnd_below(r->size / 4096) * 4096;
			n = 4096 * (1 + rnd_below(4));
		} else {
			off = rnd_below(r->size);
			n = 1 + rnd_below(65536);
		}
		if (off + n > r->size)
			n = r->size - off;
		rnd_fill(buf, n);
		reg_write(r, off, buf, n);
	}
	if (rnd_below(3) == 0) {
		size_t off = rnd_below(r->size), n = 1 + rnd_below(MiB + 333);
		if (off + n > r->size)
			n = r->size - off;
		reg_set(r, off, 0, n, true);
	}
}

/* Three short writes of random bytes into r: a few of its chunks changed,
 * a small part of any region of a MiB or more. */
static void mutate_few(struct region *r, uint8_t *buf)
{
	for (int i = 0; i < 3; i++) {
		size_t off = rnd_below(r->size), n = 16 + rnd_below(48);
		if (off + n > r->size)
			n = r->size - off;
		rnd_fill(buf, n);
		reg_write(r, off, buf, n);
	}
}

/* Restores snapshot `name` into regions scribbled with a non-zero byte and
 * compares every region, and the blob, with what snapshot k held. */
static void restore_check(crest_t *c, const char *name, int k, const char *how)
{
	const uint8_t scrib = (uint8_t)(1 + rnd_below(255));
	for (int i = 0; i < NREG; i++)
		reg_set(&regs[i], 0, scrib, regs[i].size, false);
	sync_all();
	struct crest_restore_result rr;
	int rc = crest_restore(c, name, &rr);
	if (rc < 0) {
		printf("FAIL: restore of snapshot %d (%s %s) -> %d: %s\n", k + 1, how, name ? name : "newest", rc,
		       crest_errmsg());
		failures++;
		return;
	}
	int bad = 0;
	for (int i = 0; i < NREG; i++) {
		struct region *r = &regs[i];
		const uint8_t *now = reg_read(r);
		uint8_t sha[SHA256_LEN];
		OK(sha256_once(now, r->size, sha));
		if (memcmp(sha, r->sha[k], SHA256_LEN)) {
			printf("FAIL: snapshot %d (%s %s): region %s (%zu bytes) differs after restore\n", k + 1, how,
			       name ? name : "newest", r->name, r->size);
			if (k == NSNAP - 1)   /* the mirror holds the newest contents only */
				printf("  first difference at byte %zu\n", first_diff(now, r->mirror, r->size));
			bad++;
		}
	}
	void *blob = NULL;
	size_t blen = 0;
	char want[32];
	snprintf(want, sizeof(want), "snapshot %d", k + 1);
	rc = crest_read_blob(c, name, "round", &blob, &blen);
	if (rc < 0 || blen != strlen(want) || memcmp(blob, want, blen)) {
		printf("FAIL: snapshot %d: blob \"round\" -> %d (%zu bytes): %s\n", k + 1, rc, blen,
		       rc < 0 ? crest_errmsg() : "wrong contents");
		bad++;
	}
	crest_free(blob);
	failures += bad;
	printf("gpu_multi: restore of snapshot %d by %s %s: %.1f MB in %.1f ms: %s\n", k + 1, how,
	       name ? name : "(newest)", rr.bytes / 1e6, rr.ns / 1e6, bad ? "DIFFERS" : "bit-exact");
}

static void register_all(crest_t *c)
{
	for (int i = 0; i < NREG; i++) {
		struct region *r = &regs[i];
		OK(crest_register(c, r->name, reg_ptr(r), r->size,
				  r->device && !host_mode ? CREST_MEM_DEVICE : CREST_MEM_HOST, &r->h));
	}
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	int a = 1;
	if (a < argc && !strcmp(argv[a], "--host")) {
		host_mode = true;
		a++;
	}
	if (a >= argc || argc - a > 2) {
		fprintf(stderr, "usage: gpu_multi [--host] STORE [MIB]\n");
		return 2;
	}
	const char *store = argv[a];
	const size_t mib = a + 1 < argc ? strtoul(argv[a + 1], NULL, 10) : 32;
	if (mib < 1 || mib > 65536) {
		fprintf(stderr, "gpu_multi: MIB must be 1 to 65536\n");
		return 2;
	}
	int ngpu = 0;   /* GPUs here */
	if (!host_mode) {
		const int start = gpu_test_start(&d);
		if (start)
			return start;
		if (d->DeviceGetCount(&ngpu) != CUDA_SUCCESS || ngpu == 0) {
			fprintf(stderr, "FAIL: a GPU device node is here but the driver sees no GPU\n");
			return 1;
		}
	}
	/* Tiny pieces, unless the caller chose: read by the store at commit. */
	setenv("CREST_PIECE_MIN_EXTENTS", "4", 0);
	setenv("CREST_PIECE_SPAN", "65536", 0);
	const char *env = getenv("CREST_TEST_SEED");
	uint64_t seed = env && *env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 16);
	seed %= 1000000007ull;
	rng = seed * 0x9e3779b97f4a7c15ull + 1;
	printf("gpu_multi: %s, seed %llu (CREST_TEST_SEED=%llu replays it), CREST_PIECE_MIN_EXTENTS=%s "
	       "CREST_PIECE_SPAN=%s\n", host_mode ? "host memory standing in for the GPU" : "device regions",
	       (unsigned long long)seed, (unsigned long long)seed, getenv("CREST_PIECE_MIN_EXTENTS"),
	       getenv("CREST_PIECE_SPAN"));

	char cmd[4200];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", store);
	if (system(cmd) != 0)
		return 1;
	if (!host_mode) {
		CUdevice dev;
		CUcontext ctx;
		CU(d->DeviceGet(&dev, 0));
		CU(d->DevicePrimaryCtxRetain(&ctx, dev));
		CU(d->CtxSetCurrent(ctx));
	}
	/* The GPUs the device regions are spread over. */
	int ndev = ngpu;
	const char *md = getenv("GPU_MULTI_DEVICES");
	if (md && atoi(md) > 0 && atoi(md) < ndev)
		ndev = atoi(md);
	ndev = ndev > MAXDEV ? MAXDEV : ndev;
	const struct region shape[NREG] = {
		{ .name = "dev/big", .size = mib * MiB + 4093, .device = true },
		{ .name = "dev/mid", .size = (mib * MiB) / 4 + 1, .device = true },
		{ .name = "dev/frozen", .size = 2 * MiB + 7, .device = true, .frozen = true },
		{ .name = "dev/small", .size = 12347, .device = true },
		{ .name = "dev/one", .size = 1, .device = true },
		{ .name = "host", .size = MiB + 333 },
	};
	for (int i = 0; i < NREG; i++)
		regs[i] = shape[i];
	/* Drawn before anything else, and only with several GPUs, so that
	 * on one the sequence is what it always was for a seed. */
	if (ndev > 1) {
		regs[0].dev = (int)rnd_below((size_t)ndev);
		regs[1].dev = (regs[0].dev + 1 + (int)rnd_below((size_t)ndev - 1)) % ndev;
		for (int i = 2; i < NREG; i++)
			if (regs[i].device)
				regs[i].dev = (int)rnd_below((size_t)ndev);
	}
	int used = 0;
	char placed[512] = "";
	for (int i = 0; i < NREG && !host_mode; i++) {
		struct region *r = &regs[i];
		if (!r->device)
			continue;
		if (!dev_ctx[r->dev]) {
			CUdevice dev;
			CU(d->DeviceGet(&dev, r->dev));
			CU(d->DevicePrimaryCtxRetain(&dev_ctx[r->dev], dev));
			used++;
		}
		const size_t at = strlen(placed);
		snprintf(placed + at, sizeof(placed) - at, "%s%s on %d", at ? ", " : "", r->name, r->dev);
	}
	if (ngpu > 1)
		printf("gpu_multi: regions on %d GPU%s (%d here%s): %s\n", used, used == 1 ? "" : "s", ngpu,
		       ndev < ngpu ? ", GPU_MULTI_DEVICES" : "", placed);
	size_t total = 0, largest = 0;
	for (int i = 0; i < NREG; i++) {
		struct region *r = &regs[i];
		total += r->size;
		largest = r->size > largest ? r->size : largest;
		r->mirror = malloc(r->size);
		if (!r->mirror)
			return 1;
		if (reg_enter(r)) {
			CU(d->MemAlloc(&r->dp, r->size));
		} else {
			r->host = malloc(r->size);
			if (!r->host)
				return 1;
		}
		rnd_fill(r->mirror, r->size);
		if (i == 0)   /* a zeroed stretch from the start: holes */
			memset(r->mirror + r->size / 3, 0, r->size / 8);
		reg_write(r, 0, r->mirror, r->size);
	}
	scratch = malloc(largest);
	uint8_t *buf = malloc(65536 * 2);
	if (!scratch || !buf)
		return 1;

	struct crest_options o;
	crest_options_init(&o);
	o.staging_bytes = 16 * MiB;   /* smaller than the state: rounds */
	/* GPU_MULTI_STAGING_MIB: a pool large enough for restore windows of
	 * whole segments' pitched slots (restore/gpu.c; scripts/gpu-check.sh's
	 * gpu_pitched), where 16 MiB gives each thread one-segment windows. */
	const char *sm = getenv("GPU_MULTI_STAGING_MIB");
	if (sm && atoi(sm) > 0)
		o.staging_bytes = (size_t)atoi(sm) * MiB;
	if (host_mode)
		o.flags = CREST_OPEN_NO_GPU;
	crest_t *c;
	OK(crest_open(store, &o, &c));
	register_all(c);

	char ids[NSNAP][65], tags[NSNAP][32], rounds[NSNAP][32];
	crest_ckpt_t pending[NSNAP];
	int npending = 0, pidx[NSNAP];
	for (int k = 0; k < NSNAP; k++) {
		if (k == 1)
			mutate_few(&regs[0], buf);   /* dev/big: see the top */
		else if (k > 0)
			for (int i = 0; i < NREG; i++)
				mutate(&regs[i], buf);
		/* The snapshot must hold what the device holds: the mirror is
		 * checked against it, then hashed. */
		for (int i = 0; i < NREG; i++) {
			struct region *r = &regs[i];
			const uint8_t *now = reg_read(r);
			if (memcmp(now, r->mirror, r->size)) {
				printf("FAIL: before snapshot %d, region %s differs from its mirror at byte %zu "
				       "(the test's own bookkeeping)\n", k + 1, r->name, first_diff(now, r->mirror, r->size));
				return 1;
			}
			OK(sha256_once(r->mirror, r->size, r->sha[k]));
		}
		snprintf(tags[k], sizeof(tags[k]), "multi-%d", k + 1);
		snprintf(rounds[k], sizeof(rounds[k]), "snapshot %d", k + 1);
		const struct crest_blob blob = { .name = "round", .data = rounds[k], .len = strlen(rounds[k]) };
		crest_ckpt_t h;
		OK(crest_checkpoint(c, &(struct crest_checkpoint_opts){ .tag = tags[k], .blobs = &blob, .nblobs = 1 },
				    &h));
		pending[npending] = h;
		pidx[npending++] = k;
		/* Wait now, or only after the next checkpoint (ingest overlaps);
		 * the first now, so that the second has a parent (see the top). */
		if (k == 0 || rnd_below(2) == 0 || k == NSNAP - 1) {
			for (int j = 0; j < npending; j++) {
				struct crest_result res;
				OK(crest_wait(c, pending[j], &res));
				memcpy(ids[pidx[j]], res.snapshot, sizeof(res.snapshot));
				printf("gpu_multi: checkpoint %d %.12s: %.1f MB, %.1f MB new, %.1f MB zero, stall %.1f ms "
				       "(%u staging waits), ingest %.1f ms\n", pidx[j] + 1, res.snapshot, res.bytes / 1e6,
				       res.new_bytes / 1e6, res.zero_bytes / 1e6, res.stall_ns / 1e6, res.rounds,
				       res.ingest_ns / 1e6);
				/* Unless the store was let go (CREST_STORE_IDLE_MS): a
				 * checkpoint is then held in host memory, not staged;
				 * or the pool was set larger than the state. */
				if (pidx[j] == 0 && res.rounds == 0 && !getenv("CREST_STORE_IDLE_MS") &&
				    o.staging_bytes == 16 * MiB) {
					printf("FAIL: the first checkpoint, larger than the pool, reported no staging waits\n");
					failures++;
				}
			}
			npending = 0;
		}
	}
	OK(crest_close(c));

	/* A fresh handle, as a restarted job would have. */
	OK(crest_open(store, &o, &c));
	register_all(c);
	int order[NSNAP];
	for (int k = 0; k < NSNAP; k++)
		order[k] = k;
	for (int k = NSNAP - 1; k > 0; k--) {
		int j = (int)rnd_below((size_t)k + 1), t = order[k];
		order[k] = order[j];
		order[j] = t;
	}
	for (int n = 0; n < NSNAP; n++) {
		const int k = order[n];
		char prefix[13];
		snprintf(prefix, sizeof(prefix), "%.12s", ids[k]);
		if (n % 2)
			restore_check(c, tags[k], k, "tag");
		else
			restore_check(c, prefix, k, "id");
	}
	restore_check(c, NULL, NSNAP - 1, "default");
	OK(crest_close(c));
	for (int i = 0; i < NREG; i++) {
		if (reg_enter(&regs[i]))
			d->MemFree(regs[i].dp);
		free(regs[i].host);
		free(regs[i].mirror);
	}
	free(scratch);
	free(buf);
	if (failures) {
		printf("gpu_multi: FAILED: %d difference(s); seed %llu; store kept in %s\n", failures,
		       (unsigned long long)seed, store);
		return 1;
	}
	char on[32] = "";
	if (!host_mode)
		snprintf(on, sizeof(on), " on %d GPU%s", used, used == 1 ? "" : "s");
	printf("gpu_multi: ok: %d snapshots of %d regions (%.1f MB)%s all restored bit-exact\n", NSNAP, NREG,
	       total / 1e6, on);
	return 0;
}
