/*
 * test_gpusha.c - SHA-256 of device chunks on the GPU (gpu/gpusha.h)
 * against OpenSSL on the host, and the changed-chunk list against a model.
 *
 * Skips (77, "SKIP: no GPU here (...)") only where there is no NVIDIA GPU
 * (tests/gpu_here.h), or with "SKIP: no GPU hashing in this build" where
 * crest was configured without nvcc; a GPU whose driver or whose module
 * load fails is a failure.
 *
 * With a printed, replayable seed: device buffers of every size class (1,
 * 63, 64, 65, 4095, 4096, 4097 bytes, chunk multiples and one off, a few
 * MiB, 256 MiB and a page), chunk sizes 4096, 64 and random multiples of 64
 * up to 1 MiB, starts aligned, 16-aligned and odd; every digest is compared
 * with EVP SHA-256 of the same bytes. Then random bytes are flipped and
 * gpusha_changed must list exactly the chunks the model says changed, in
 * order, with the same flags; none after flipping them back; all against
 * a zeroed digest array. The changed chunks listed are packed with
 * gpusha_gather (from a random list entry on) and compared with the bytes
 * and their digests. The wide hash (gpusha_wide) likewise: every digest
 * against the host's reference with the handle's keys, on every size class
 * and alignment; the changed list from wide digests against the model; the
 * listed chunks' SHA-256 (gpusha_hash_list) against EVP, each at its
 * chunk's place, the others untouched. Last, both kernels' rates on 1 GiB.
 *
 * usage: test_gpusha [SEED]      the test
 *        test_gpusha --bench     GB/s for 4 KiB chunks over 1, 4 and 8 GiB,
 *                                SHA-256 and the wide hash
 */
#include "gpu/cudrv.h"
#include "gpu/gpusha.h"
#include "tests/check.h"
#include "tests/gpu_here.h"

#include <errno.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <time.h>

#define MiB (1024ull * 1024ull)
#define GiB (1024ull * MiB)
#define MAX_DIGESTS (2ull * MiB)   /* room in the device digest arrays */

static const struct cudrv *d;
static CUstream s;
static struct gpusha *g;
static CUdeviceptr ddig, ddig2, ddig3, dflags, dlist, dcount;
static uint8_t *hdig;

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void evp_sha256(const uint8_t *p, size_t n, uint8_t out[32])
{
	unsigned len = 0;
	if (!EVP_Digest(p, n, out, &len, EVP_sha256(), NULL) || len != 32) {
		fprintf(stderr, "FAIL: EVP_Digest\n");
		exit(1);
	}
}

/* cuMemsetD8 runs on the legacy stream and may return before it is done:
 * wait for it before the test's stream reads what it set. */
static void memset_sync(CUdeviceptr p, uint8_t v, size_t n)
{
	CU(d->MemsetD8(p, v, n));
	CU(d->CtxSynchronize());
}

/* Hashes dbuf[off, off + len) on the GPU into ddig and compares every
 * digest with OpenSSL's of hbuf[off, off + len). */
static void gpu_check(CUdeviceptr dbuf, const uint8_t *hbuf, uint64_t off, uint64_t len, uint32_t chunk,
		      const char *what)
{
	const uint64_t n = gpusha_nchunks(len, chunk);
	if (n > MAX_DIGESTS) {
		fprintf(stderr, "FAIL: test bug: %" PRIu64 " digests\n", n);
		exit(1);
	}
	OK(gpusha_hash(g, dbuf + off, len, chunk, ddig, s));
	CU(d->MemcpyDtoHAsync(hdig, ddig, n * 32, s));
	CU(d->StreamSynchronize(s));
	int bad = 0;
	for (uint64_t i = 0; i < n; i++) {
		const uint64_t o = i * chunk, m = len - o < chunk ? len - o : chunk;
		uint8_t want[32];
		evp_sha256(hbuf + off + o, m, want);
		if (memcmp(want, hdig + 32 * i, 32) && bad++ < 3)
			CHECK(0, "%s: %" PRIu64 " bytes at +%" PRIu64 " in %u-byte chunks: chunk %" PRIu64
				 " (%" PRIu64 " bytes) differs from OpenSSL's SHA-256",
			      what, len, off, chunk, i, m);
	}
	if (bad > 3)
		failures += bad - 3;
}

/* The wide digests of dbuf[off, off + len) on the GPU against the host's
 * reference (gpusha_wide_ref, the same keys) of hbuf's same bytes. */
static void wide_check(CUdeviceptr dbuf, const uint8_t *hbuf, uint64_t off, uint64_t len, uint32_t chunk,
		       const char *what)
{
	const uint64_t n = gpusha_nchunks(len, chunk);
	OK(gpusha_wide(g, dbuf + off, len, chunk, ddig, s));
	CU(d->MemcpyDtoHAsync(hdig, ddig, n * 32, s));
	CU(d->StreamSynchronize(s));
	int bad = 0;
	for (uint64_t i = 0; i < n; i++) {
		const uint64_t o = i * chunk, m = len - o < chunk ? len - o : chunk;
		uint8_t want[32];
		gpusha_wide_ref(g, hbuf + off + o, (uint32_t)m, want);
		if (memcmp(want, hdig + 32 * i, 32) && bad++ < 3)
			CHECK(0, "%s: wide hash of %" PRIu64 " bytes at +%" PRIu64 " in %u-byte chunks: chunk %" PRIu64
				 " differs from the host's", what, len, off, chunk, i);
	}
	if (bad > 3)
		failures += bad - 3;
}

/* gpusha_hash_list of the count chunks dlist names into ddig3, which holds
 * a sentinel elsewhere: each listed chunk's digest is EVP's, at its place;
 * every other digest is the sentinel still. */
static void hash_list_check(CUdeviceptr dbuf, const uint8_t *hbuf, uint64_t len, uint32_t chunk, uint32_t count,
			    const char *what)
{
	const uint64_t n = gpusha_nchunks(len, chunk);
	memset_sync(ddig3, 0x5a, n * 32);
	if (count)
		OK(gpusha_hash_list(g, dbuf, len, chunk, dlist, count, ddig3, s));
	uint32_t *list = malloc((size_t)count * 4 + 4);
	uint8_t *listed = calloc(n, 1), sentinel[32];
	memset(sentinel, 0x5a, 32);
	if (count)
		CU(d->MemcpyDtoHAsync(list, dlist, (size_t)count * 4, s));
	CU(d->MemcpyDtoHAsync(hdig, ddig3, n * 32, s));
	CU(d->StreamSynchronize(s));
	for (uint32_t j = 0; j < count; j++)
		listed[list[j]] = 1;
	int bad = 0;
	for (uint64_t i = 0; i < n && bad < 3; i++) {
		const uint64_t o = i * chunk, m = len - o < chunk ? len - o : chunk;
		uint8_t want[32];
		if (listed[i])
			evp_sha256(hbuf + o, m, want);
		else
			memcpy(want, sentinel, 32);
		if (memcmp(want, hdig + 32 * i, 32)) {
			bad++;
			CHECK(0, "%s: listed SHA-256: digest of chunk %" PRIu64 " (%s) is wrong", what, i,
			      listed[i] ? "listed" : "not listed, must be untouched");
		}
	}
	printf("%s: %u listed chunks hashed\n", what, count);
	free(list);
	free(listed);
}

/* gpusha_changed(ddig, ddig2) against the model want[0..n). */
static void changed_check(uint64_t n, const uint8_t *want, const char *what)
{
	OK(gpusha_changed(g, ddig, ddig2, n, dflags, dlist, dcount, s));
	uint32_t count = 0;
	uint32_t *list = malloc(n * 4);
	uint8_t *flags = malloc(n);
	CU(d->MemcpyDtoHAsync(&count, dcount, 4, s));
	CU(d->MemcpyDtoHAsync(flags, dflags, n, s));
	CU(d->StreamSynchronize(s));
	uint64_t nwant = 0;
	for (uint64_t i = 0; i < n; i++)
		nwant += want[i];
	CHECK(count == nwant, "%s: %u chunks listed as changed, the model says %" PRIu64, what, count, nwant);
	if (count <= n) {
		CU(d->MemcpyDtoHAsync(list, dlist, (size_t)count * 4, s));
		CU(d->StreamSynchronize(s));
		uint64_t k = 0;
		int bad = 0;
		for (uint64_t i = 0; i < n && !bad; i++) {
			if (!want[i])
				continue;
			if (k >= count || list[k] != i) {
				CHECK(0, "%s: changed list entry %" PRIu64 " is %u, the model says %" PRIu64, what, k,
				      k < count ? list[k] : 0u, i);
				bad = 1;
			}
			k++;
		}
		const uint64_t fd = first_diff(flags, want, n);
		CHECK(fd == n, "%s: flag of chunk %" PRIu64 " is %u, the model says %u", what, fd,
		      fd < n ? flags[fd] : 0, fd < n ? want[fd] : 0);
	}
	printf("%s: %" PRIu64 " chunks, %u changed\n", what, n, count);
	free(list);
	free(flags);
}

/* gpusha_gather of the chunks that dlist names (count of them, from the
 * last changed_check), from a random place in the list on: each packed
 * chunk must equal its bytes in hbuf, each packed digest EVP's of them. */
static void gather_check(CUdeviceptr dbuf, const uint8_t *hbuf, uint64_t len, uint32_t chunk, uint32_t count,
			 CUdeviceptr digests, uint64_t *st, const char *what)
{
	if (!count)
		return;
	const uint32_t first = (uint32_t)(check_rnd(st) % count), cnt = count - first;
	uint32_t *list = malloc((size_t)count * 4);
	uint8_t *packed = malloc((size_t)cnt * chunk), *dig = malloc((size_t)cnt * 32);
	CUdeviceptr dpack, dpdig;
	CU(d->MemAlloc(&dpack, (size_t)cnt * chunk));
	CU(d->MemAlloc(&dpdig, (size_t)cnt * 32));
	CU(d->MemcpyDtoHAsync(list, dlist, (size_t)count * 4, s));
	OK(gpusha_gather(g, dbuf, len, chunk, dlist + (CUdeviceptr)first * 4, cnt, digests, dpack, dpdig, s));
	CU(d->MemcpyDtoHAsync(packed, dpack, (size_t)cnt * chunk, s));
	CU(d->MemcpyDtoHAsync(dig, dpdig, (size_t)cnt * 32, s));
	CU(d->StreamSynchronize(s));
	int bad = 0;
	for (uint32_t j = 0; j < cnt && !bad; j++) {
		const uint64_t i = list[first + j], o = i * chunk, m = len - o < chunk ? len - o : chunk;
		uint8_t want[32];
		evp_sha256(hbuf + o, m, want);
		bad = memcmp(packed + (uint64_t)j * chunk, hbuf + o, m) || memcmp(dig + (uint64_t)j * 32, want, 32);
		CHECK(!bad, "%s: gathered chunk %u (chunk %" PRIu64 ") or its digest differs", what, first + j, i);
	}
	printf("%s: %u chunks gathered from list entry %u\n", what, cnt, first);
	CU(d->MemFree(dpack));
	CU(d->MemFree(dpdig));
	free(list);
	free(packed);
	free(dig);
}

/* Flips k random bytes of dbuf/hbuf[0, len) (host and device alike) and
 * marks their chunks in want; flipping the same bytes again undoes it. */
static void flip(CUdeviceptr dbuf, uint8_t *hbuf, uint64_t len, uint32_t chunk, uint64_t *pos, uint8_t *val,
		 int k, uint8_t *want)
{
	for (int j = 0; j < k; j++) {
		hbuf[pos[j]] ^= val[j];
		CU(d->MemcpyHtoDAsync(dbuf + pos[j], hbuf + pos[j], 1, s));
		want[pos[j] / chunk] = 1;
	}
	CU(d->StreamSynchronize(s));
	(void)len;
}

/* The digests that find changed chunks: SHA-256 or the wide hash. */
static void digests(int wide, CUdeviceptr dbuf, uint64_t len, uint32_t chunk, CUdeviceptr out)
{
	if (wide)
		OK(gpusha_wide(g, dbuf, len, chunk, out, s));
	else
		OK(gpusha_hash(g, dbuf, len, chunk, out, s));
}

static void changed_tests(CUdeviceptr dbuf, uint8_t *hbuf, uint64_t len, uint32_t chunk, int wide, uint64_t *st)
{
	const uint64_t n = gpusha_nchunks(len, chunk);
	char what[128];
	snprintf(what, sizeof(what), "changed (%s), %" PRIu64 " bytes in %u-byte chunks", wide ? "wide" : "sha", len,
		 chunk);
	uint8_t *want = calloc(n, 1);
	enum { K = 2000 };
	uint64_t pos[K];
	uint8_t val[K];
	const int k = 1 + (int)(check_rnd(st) % K);
	for (int j = 0; j < k; j++) {
		/* the first and the last byte always: the ends of the grid */
		pos[j] = j == 0 ? 0 : j == 1 ? len - 1 : check_rnd(st) % len;
		val[j] = (uint8_t)(1 + check_rnd(st) % 255);
	}
	/* Two flips of one byte may cancel: the model is the bytes, not the flips. */
	uint8_t *before = malloc(len);
	memcpy(before, hbuf, len);
	digests(wide, dbuf, len, chunk, ddig2);   /* prev */
	flip(dbuf, hbuf, len, chunk, pos, val, k, want);
	for (uint64_t i = 0; i < n; i++) {
		const uint64_t o = i * chunk, m = len - o < chunk ? len - o : chunk;
		want[i] = memcmp(before + o, hbuf + o, m) != 0;
	}
	digests(wide, dbuf, len, chunk, ddig);   /* cur */
	changed_check(n, want, what);
	uint32_t count = 0;
	CU(d->MemcpyDtoHAsync(&count, dcount, 4, s));
	CU(d->StreamSynchronize(s));
	if (wide) {
		/* As a sparse checkpoint does: SHA-256 of the listed chunks
		 * alone, then packed with those ids. */
		hash_list_check(dbuf, hbuf, len, chunk, count, what);
		gather_check(dbuf, hbuf, len, chunk, count, ddig3, st, what);
	} else {
		gather_check(dbuf, hbuf, len, chunk, count, ddig, st, what);
	}
	flip(dbuf, hbuf, len, chunk, pos, val, k, want);
	CHECK(memcmp(before, hbuf, len) == 0, "test bug: flipping back");
	memset(want, 0, n);
	digests(wide, dbuf, len, chunk, ddig);
	snprintf(what, sizeof(what), "changed back (%s), %" PRIu64 " bytes in %u-byte chunks", wide ? "wide" : "sha",
		 len, chunk);
	changed_check(n, want, what);
	memset_sync(ddig2, 0, n * 32);
	memset(want, 1, n);
	snprintf(what, sizeof(what), "changed from zeros (%s), %" PRIu64 " bytes in %u-byte chunks",
		 wide ? "wide" : "sha", len, chunk);
	changed_check(n, want, what);
	free(before);
	free(want);
}

/* Seconds of the hash kernel on len bytes in chunk-byte chunks: best of
 * reps, after one warm-up (launch to stream sync; the launch itself is
 * microseconds against tens of milliseconds). */
static double time_hash(CUdeviceptr dbuf, uint64_t len, uint32_t chunk, CUdeviceptr out, int reps, int wide)
{
	double best = 1e30;
	for (int r = -1; r < reps; r++) {
		CU(d->StreamSynchronize(s));
		const double t0 = now();
		digests(wide, dbuf, len, chunk, out);
		CU(d->StreamSynchronize(s));
		const double t = now() - t0;
		if (r >= 0 && t < best)
			best = t;
	}
	return best;
}

/* 4 KiB chunks of a buffer of one repeated byte: every full chunk's digest
 * is OpenSSL's of 4096 such bytes. */
static void rate(uint64_t len, int verify)
{
	CUdeviceptr dbuf, out;
	const uint64_t n = gpusha_nchunks(len, GPUSHA_CHUNK);
	CU(d->MemAlloc(&dbuf, len));
	CU(d->MemAlloc(&out, n * 32));
	memset_sync(dbuf, 0xa5, len);
	const double tw = time_hash(dbuf, len, GPUSHA_CHUNK, out, 5, 1);
	printf("wide: %5.1f GiB in 4 KiB chunks: %.2f ms, %.1f GB/s\n", (double)len / GiB, tw * 1e3,
	       (double)len / tw / 1e9);
	const double t = time_hash(dbuf, len, GPUSHA_CHUNK, out, 5, 0);
	printf("hash: %5.1f GiB in 4 KiB chunks: %.2f ms, %.1f GB/s (%.1fx the wide hash's time)\n",
	       (double)len / GiB, t * 1e3, (double)len / t / 1e9, t / tw);
	if (verify) {
		uint8_t *all = malloc(n * 32), one[GPUSHA_CHUNK], want[32];
		memset(one, 0xa5, sizeof(one));
		evp_sha256(one, sizeof(one), want);
		CU(d->MemcpyDtoHAsync(all, out, n * 32, s));
		CU(d->StreamSynchronize(s));
		uint64_t bad = 0;
		for (uint64_t i = 0; i < n; i++)
			bad += memcmp(all + 32 * i, want, 32) != 0;
		CHECK(bad == 0, "hash of %" PRIu64 " bytes: %" PRIu64 " of %" PRIu64 " digests wrong", len, bad, n);
		free(all);
	}
	/* The changed kernels on these digests against zeros: all listed. */
	memset_sync(ddig2, 0, (n < MAX_DIGESTS ? n : MAX_DIGESTS) * 32);
	if (n <= MAX_DIGESTS) {
		double best = 1e30;
		for (int r = -1; r < 5; r++) {
			const double t0 = now();
			OK(gpusha_changed(g, out, ddig2, n, 0, dlist, dcount, s));
			CU(d->StreamSynchronize(s));
			if (r >= 0 && now() - t0 < best)
				best = now() - t0;
		}
		uint32_t count = 0;
		CU(d->MemcpyDtoHAsync(&count, dcount, 4, s));
		CU(d->StreamSynchronize(s));
		CHECK(count == n, "changed against zeros: %u of %" PRIu64, count, n);
		printf("changed: %" PRIu64 " digests: %.3f ms\n", n, best * 1e3);
	}
	CU(d->MemFree(out));
	CU(d->MemFree(dbuf));
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	const int bench = argc > 1 && strcmp(argv[1], "--bench") == 0;
	uint64_t seed = !bench && argc > 1 ? strtoull(argv[1], NULL, 0)
					    : (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
	if (!seed)
		seed = 1;
	const int start = gpu_test_start(&d);
	if (start)
		return start;
	if (!gpusha_built()) {
		printf("SKIP: no GPU hashing in this build (configured without nvcc)\n");
		return 77;
	}
	int ndev = 0;
	if (d->DeviceGetCount(&ndev) != CUDA_SUCCESS || ndev == 0) {
		fprintf(stderr, "FAIL: a GPU device node is here but the driver sees no GPU\n");
		return 1;
	}
	CUdevice dev;
	CUcontext ctx;
	char name[256] = "";
	CU(d->DeviceGet(&dev, 0));
	CU(d->DeviceGetName(name, sizeof(name), dev));
	CU(d->DevicePrimaryCtxRetain(&ctx, dev));
	CU(d->CtxSetCurrent(ctx));
	CU(d->StreamCreate(&s, CU_STREAM_DEFAULT));
	double t0 = now();
	OK(gpusha_open(d, &g));
	printf("%s: gpusha_open (PTX compiled by the driver) took %.1f ms\n", name, (now() - t0) * 1e3);
	CU(d->MemAlloc(&ddig, MAX_DIGESTS * 32));
	CU(d->MemAlloc(&ddig2, MAX_DIGESTS * 32));
	CU(d->MemAlloc(&ddig3, MAX_DIGESTS * 32));
	CU(d->MemAlloc(&dflags, MAX_DIGESTS));
	CU(d->MemAlloc(&dlist, MAX_DIGESTS * 4));
	CU(d->MemAlloc(&dcount, 4));
	hdig = malloc(MAX_DIGESTS * 32);
	/* Arguments the kernels cannot take are refused before any launch. */
	EXPECT_ERR(gpusha_hash(g, ddig2, 0, 4096, ddig, s), -EINVAL, "at least 1");
	EXPECT_ERR(gpusha_hash(g, ddig2, 100, 100, ddig, s), -EINVAL, "multiple of 64");
	EXPECT_ERR(gpusha_hash(g, ddig2, 100, 2 * GPUSHA_CHUNK_MAX, ddig, s), -EINVAL, "multiple of 64");
	EXPECT_ERR(gpusha_hash(g, ddig2, 100, 64, ddig + 4, s), -EINVAL, "16-byte aligned");
	EXPECT_ERR(gpusha_changed(g, ddig, ddig2 + 8, 10, 0, dlist, dcount, s), -EINVAL, "16-byte aligned");
	EXPECT_ERR(gpusha_changed(g, ddig, ddig2, 0, 0, dlist, dcount, s), -EINVAL, "1 to 2^32-1");
	EXPECT_ERR(gpusha_wide(g, ddig2, 100, 2 * GPUSHA_WIDE_MAX, ddig, s), -EINVAL, "up to 4096");
	EXPECT_ERR(gpusha_wide(g, ddig2, 100, 64, ddig + 4, s), -EINVAL, "16-byte aligned");
	EXPECT_ERR(gpusha_hash_list(g, ddig2, 100, 64, dlist, 0, ddig, s), -EINVAL, "at least 1");
	{
		/* Two handles draw their own keys. */
		struct gpusha *g2 = NULL;
		OK(gpusha_open(d, &g2));
		CHECK(gpusha_key_id(g2) != gpusha_key_id(g) &&
			      memcmp(gpusha_wide_key(g2), gpusha_wide_key(g), GPUSHA_WIDE_KEY_WORDS * 4),
		      "two gpusha handles have the same keys");
		gpusha_close(g2);
	}

	if (bench) {
		for (int i = 0; i < 3; i++)
			rate((uint64_t[]){ GiB, 4 * GiB, 8 * GiB }[i], 0);
		goto out;
	}
	printf("seed %" PRIu64 " (replay: test_gpusha %" PRIu64 ")\n", seed, seed);
	uint64_t st = seed;

	/* One buffer, host and device alike, that every case cuts from. */
	const uint64_t big = 256 * MiB + 4097, cap = big + 64 * 1024;
	uint8_t *hbuf = malloc(cap);
	CUdeviceptr dbuf;
	CU(d->MemAlloc(&dbuf, cap));
	check_fill64(hbuf, cap, &st);
	CU(d->MemcpyHtoDAsync(dbuf, hbuf, cap, s));
	CU(d->StreamSynchronize(s));

	static const uint64_t sizes[] = { 1, 55, 56, 63, 64, 65, 119, 120, 127, 128, 4095, 4096, 4097,
					  8192, 8193, 3 * MiB + 5 };
	static const uint32_t chunks[] = { 4096, 64, 128, 1088 };
	const uint64_t offs[3] = { 0, 16 * (1 + check_rnd(&st) % 1000), 1 + 2 * (check_rnd(&st) % 1000) };
	int cases = 0;
	const int before = failures;
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++)
			for (int o = 0; o < 3; o++, cases++)
				gpu_check(dbuf, hbuf, offs[o], sizes[i], chunks[c], "size class");
	for (int r = 0; r < 60; r++, cases++) {
		uint32_t chunk = r % 3 == 0 ? 4096 : 64 * (uint32_t)(1 + check_rnd(&st) % (GPUSHA_CHUNK_MAX / 64));
		uint64_t len;
		switch (check_rnd(&st) % 3) {
		case 0: len = (uint64_t)chunk * (1 + check_rnd(&st) % 8) + check_rnd(&st) % 3 - 1; break;
		case 1: len = 1 + check_rnd(&st) % 100000; break;
		default: len = 1 + check_rnd(&st) % (8 * MiB); break;
		}
		const uint64_t off = check_rnd(&st) % 2 ? 16 * (check_rnd(&st) % 4096) : check_rnd(&st) % 64;
		gpu_check(dbuf, hbuf, off, len, chunk, "random");
	}
	gpu_check(dbuf, hbuf, 0, big, 4096, "256 MiB and a page");
	gpu_check(dbuf, hbuf, 3, big, GPUSHA_CHUNK_MAX, "256 MiB and a page, 1 MiB chunks, odd start");
	gpu_check(dbuf, hbuf, 0, 32 * MiB + 1, 64, "32 MiB and a byte, 64-byte chunks");
	cases += 3;
	printf("hash: %d cases, %d failed checks\n", cases, failures - before);
	const int wbefore = failures;
	static const uint32_t wchunks[] = { 4096, 64, 1088, 2112 };
	cases = 0;
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		for (size_t c = 0; c < sizeof(wchunks) / sizeof(wchunks[0]); c++)
			for (int o = 0; o < 3; o++, cases++)
				wide_check(dbuf, hbuf, offs[o], sizes[i], wchunks[c], "size class");
	for (int r = 0; r < 30; r++, cases++) {
		const uint32_t chunk = r % 3 == 0 ? 4096 : 64 * (uint32_t)(1 + check_rnd(&st) % (GPUSHA_WIDE_MAX / 64));
		const uint64_t len = 1 + check_rnd(&st) % (8 * MiB);
		const uint64_t off = check_rnd(&st) % 2 ? 16 * (check_rnd(&st) % 4096) : check_rnd(&st) % 64;
		wide_check(dbuf, hbuf, off, len, chunk, "random");
	}
	wide_check(dbuf, hbuf, 0, big, 4096, "256 MiB and a page");
	cases++;
	printf("wide: %d cases, %d failed checks\n", cases, failures - wbefore);

	/* 32 MiB in 64-byte chunks: 2048 blocks of counts, two tiles of the scan. */
	for (int wide = 0; wide < 2; wide++) {
		changed_tests(dbuf, hbuf, 32 * MiB, 64, wide, &st);
		changed_tests(dbuf, hbuf, 64 * MiB + 100, 4096, wide, &st);
		changed_tests(dbuf, hbuf, 1 + check_rnd(&st) % (8 * MiB), 64 * (uint32_t)(1 + check_rnd(&st) % 64),
			      wide, &st);
	}

	rate(GiB, 1);
	CU(d->MemFree(dbuf));
	free(hbuf);
out:
	gpusha_close(g);
	CU(d->MemFree(ddig));
	CU(d->MemFree(ddig2));
	CU(d->MemFree(ddig3));
	CU(d->MemFree(dflags));
	CU(d->MemFree(dlist));
	CU(d->MemFree(dcount));
	CU(d->StreamDestroy(s));
	free(hdig);
	if (failures) {
		printf("FAIL: %d check(s) failed (seed %" PRIu64 ")\n", failures, seed);
		return 1;
	}
	printf("ok\n");
	return 0;
}
