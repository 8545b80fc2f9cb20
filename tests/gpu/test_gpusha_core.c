/*
 * test_gpusha_core.c - the GPU SHA-256 kernel's logic, run on the host.
 *
 * gpu/gpusha_core.h is the text the kernel is compiled from; here cc
 * compiles it and each chunk is hashed exactly as a GPU thread would hash
 * it (gs_hash_chunk, chunk index by chunk index), then compared with
 * OpenSSL's SHA-256 of the same bytes. Runs everywhere, GPU or not:
 *   - FIPS 180-2's known answers ("abc", the 448-bit message, a million 'a');
 *   - every length 1..1100 in one chunk of 1088 and of 1024 (every tail
 *     length mod 64, both the one-block and the two-block padding);
 *   - random buffers: lengths from 1 byte to a few MiB, chunk sizes 64,
 *     4096 and random multiples of 64 up to 1 MiB, starts at every
 *     alignment (the 16-byte load path and the byte path);
 *   - gs_differs against memcmp;
 *   - the wide hash (NH): gs_nh_part as a warp runs it (32 lanes, each its
 *     share, sums added) and as the host runs it (one lane), both load
 *     paths, against NH computed here from its definition with random
 *     keys; every length 1..GS_WIDE_MAX; and it tells apart what it must:
 *     one flipped bit anywhere, two chunks that swap words, zero bytes
 *     past the end against a short chunk's padding.
 * usage: test_gpusha_core [SEED]
 */
#include "gpu/gpusha.h"
#include "gpu/gpusha_core.h"
#include "tests/check.h"

#include <errno.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <time.h>

static void evp_sha256(const uint8_t *p, size_t n, uint8_t out[32])
{
	unsigned len = 0;
	if (!EVP_Digest(p, n, out, &len, EVP_sha256(), NULL) || len != 32) {
		fprintf(stderr, "FAIL: EVP_Digest\n");
		exit(1);
	}
}

/* NH of the n bytes at p from its definition (gpusha_core.h): words read
 * one byte at a time, zero past n, pairs in order. */
static void nh_def(const uint8_t *p, uint32_t n, const uint32_t *key, uint8_t out[32])
{
	const uint32_t words = (n + 7) / 8 * 2;
	for (int j = 0; j < GS_WIDE_KEYS; j++) {
		uint64_t a = 0;
		for (uint32_t w = 0; w < words; w += 2) {
			uint32_t m[2] = { 0, 0 };
			for (uint32_t b = 0; b < 8; b++)
				if (4 * w + b < n)
					m[b / 4] |= (uint32_t)p[4 * w + b] << (8 * (b % 4));
			const uint32_t *k = key + j * GS_WIDE_KEY_WORDS + w;
			a += (uint64_t)(uint32_t)(m[0] + k[0]) * (uint32_t)(m[1] + k[1]);
		}
		for (int b = 0; b < 8; b++)
			out[8 * j + b] = (uint8_t)(a >> (8 * b));
	}
}

/* The wide digest of the n bytes at p as a warp of lanes computes it. */
static void nh_lanes(const uint8_t *p, uint32_t n, int vec, const uint32_t *key, uint32_t lanes, uint8_t out[32])
{
	gs_u64 sum[GS_WIDE_KEYS] = { 0, 0, 0, 0 };
	for (uint32_t l = 0; l < lanes; l++) {
		gs_u64 a[GS_WIDE_KEYS] = { 0, 0, 0, 0 };
		gs_nh_part(p, n, vec, key, l, lanes, a);
		for (int j = 0; j < GS_WIDE_KEYS; j++)
			sum[j] += a[j];
	}
	_Alignas(16) uint8_t d[32];
	gs_nh_store(sum, d);
	memcpy(out, d, 32);
}

static void wide_tests(uint64_t *st)
{
	uint32_t *key = aligned_alloc(16, GS_WIDE_KEYS * GS_WIDE_KEY_WORDS * 4);
	uint8_t *buf = aligned_alloc(16, 2 * GS_WIDE_MAX + 64);
	check_fill64((uint8_t *)key, GS_WIDE_KEYS * GS_WIDE_KEY_WORDS * 4, st);
	check_fill64(buf, 2 * GS_WIDE_MAX + 64, st);
	int bad = 0, cases = 0;
	for (uint32_t n = 1; n <= GS_WIDE_MAX; n++) {
		uint8_t want[32], one[32], warp[32], vec[32];
		const uint32_t off = n % 3 == 0 ? 16 * (n % 5) : n % 7;
		nh_def(buf + off, n, key, want);
		nh_lanes(buf + off, n, 0, key, 1, one);
		nh_lanes(buf + off, n, 0, key, 32, warp);
		int ok = !memcmp(want, one, 32) && !memcmp(want, warp, 32);
		if (off % 16 == 0 && n % 16 == 0) {
			nh_lanes(buf + off, n, 1, key, 32, vec);
			ok = ok && !memcmp(want, vec, 32);
		}
		cases++;
		if (!ok && bad++ < 3)
			CHECK(0, "wide hash of %u bytes at +%u differs from NH's definition", n, off);
	}
	if (bad > 3)
		failures += bad - 3;
	/* What it must tell apart, with these random keys: each case's two
	 * chunks are equal with probability 2^-128 at most. */
	uint8_t *a = buf, *b = buf + GS_WIDE_MAX + 32;
	for (int r = 0; r < 200; r++, cases++) {
		const uint32_t n = r % 4 == 0 ? GS_WIDE_MAX : 1 + (uint32_t)(check_rnd(st) % GS_WIDE_MAX);
		check_fill64(a, n, st);
		memcpy(b, a, n);
		const char *what;
		switch (r % 3) {
		case 0:
			b[check_rnd(st) % n] ^= (uint8_t)(1u << (check_rnd(st) % 8));
			what = "one flipped bit";
			break;
		case 1:
			if (n < 16) {
				b[0] ^= 1;
				what = "one flipped bit";
				break;
			}
			/* words 0 and 2 swapped: the same words, other places */
			memcpy(b, a + 8, 4);
			memcpy(b + 8, a, 4);
			if (!memcmp(a, b, n))
				b[1] ^= 1;
			what = "two words swapped";
			break;
		default:
			b[check_rnd(st) % n] += (uint8_t)(1 + check_rnd(st) % 255);
			what = "one byte changed";
			break;
		}
		uint8_t da[32], db[32];
		nh_lanes(a, n, 0, key, 32, da);
		nh_lanes(b, n, 0, key, 32, db);
		CHECK(memcmp(da, db, 32) != 0, "wide hash: %u bytes with %s hash alike", n, what);
	}
	free(key);
	free(buf);
	printf("wide hash: %d cases against NH's definition and its promises\n", cases);
}

static void hex(const uint8_t *d, char *s)
{
	for (int i = 0; i < 32; i++)
		sprintf(s + 2 * i, "%02x", d[i]);
}

/* Hashes src[0..len) in chunks as the kernel's grid would and compares every
 * digest with OpenSSL's; returns the number of wrong digests. */
static int check_buffer(const uint8_t *src, uint64_t len, uint32_t chunk, const char *what)
{
	const uint64_t n = gpusha_nchunks(len, chunk);
	uint8_t *dig = malloc(n * 32);
	if (!dig) {
		fprintf(stderr, "FAIL: malloc\n");
		exit(1);
	}
	const int vec = (uintptr_t)src % 16 == 0;   /* as gpusha_hash decides */
	for (uint64_t i = 0; i < n; i++)
		gs_hash_chunk(src, len, chunk, i, vec, dig);
	int bad = 0;
	for (uint64_t i = 0; i < n; i++) {
		const uint64_t off = i * chunk, m = len - off < chunk ? len - off : chunk;
		uint8_t want[32];
		evp_sha256(src + off, m, want);
		if (memcmp(want, dig + 32 * i, 32)) {
			if (bad++ < 3) {
				char a[65], b[65];
				hex(dig + 32 * i, a);
				hex(want, b);
				CHECK(0, "%s: len %" PRIu64 " chunk %u (vec %d): chunk %" PRIu64 " (%" PRIu64
					 " bytes) hashed %s, OpenSSL says %s", what, len, chunk, vec, i, m, a, b);
			} else {
				failures++;
			}
		}
	}
	free(dig);
	return bad;
}

static void known_answer(const char *msg, size_t n, const char *want)
{
	uint8_t dig[32];
	char got[65];
	gs_u32 h[8];
	gs_sha256((const uint8_t *)msg, (gs_u32)n, 0, h);
	for (int i = 0; i < 8; i++) {
		const gs_u32 be = __builtin_bswap32(h[i]);
		memcpy(dig + 4 * i, &be, 4);
	}
	hex(dig, got);
	CHECK(strcmp(got, want) == 0, "SHA-256 of a %zu-byte message: %s, FIPS says %s", n, got, want);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
	if (!seed)
		seed = 1;
	printf("seed %" PRIu64 " (replay: test_gpusha_core %" PRIu64 ")\n", seed, seed);
	uint64_t st = seed;

	/* FIPS 180-2 appendix B */
	known_answer("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	known_answer("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56,
		     "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
	char *ma = malloc(1000000);
	memset(ma, 'a', 1000000);
	known_answer(ma, 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
	free(ma);

	/* Every tail length, in one chunk and across two. Offsets 0 and 1: the
	 * vector and the byte path. */
	enum { AL = 64 };
	uint8_t *buf = aligned_alloc(AL, 16u << 20);
	check_fill64(buf, 16u << 20, &st);
	int bad = 0;
	for (uint32_t len = 1; len <= 1100; len++)
		for (int off = 0; off < 2; off++) {
			bad += check_buffer(buf + off, len, 1088, "every length");
			bad += check_buffer(buf + off + 7, len, 1024, "every length, two chunks");
		}
	printf("every length 1..1100: %d wrong\n", bad);

	/* Random buffers in every size class. */
	static const uint64_t sizes[] = { 1, 55, 56, 63, 64, 65, 119, 120, 127, 128, 4095, 4096, 4097, 8192, 12345 };
	int cases = 0;
	bad = 0;
	for (int round = 0; round < 200; round++) {
		uint32_t chunk;
		switch (check_rnd(&st) % 4) {
		case 0: chunk = 4096; break;
		case 1: chunk = 64; break;
		case 2: chunk = 64 * (uint32_t)(1 + check_rnd(&st) % 64); break;
		default: chunk = 64 * (uint32_t)(1 + check_rnd(&st) % (GPUSHA_CHUNK_MAX / 64)); break;
		}
		uint64_t len;
		switch (check_rnd(&st) % 4) {
		case 0: len = sizes[check_rnd(&st) % (sizeof(sizes) / sizeof(sizes[0]))]; break;
		case 1: len = (uint64_t)chunk * (1 + check_rnd(&st) % 8) + (check_rnd(&st) % 3) - 1; break;
		case 2: len = 1 + check_rnd(&st) % 70000; break;
		default: len = 1 + check_rnd(&st) % (3u << 20); break;
		}
		const uint64_t off = check_rnd(&st) % 2 ? 16 * (check_rnd(&st) % 1024) : check_rnd(&st) % 64;
		check_fill64(buf, off + len, &st);
		bad += check_buffer(buf + off, len, chunk, "random");
		cases++;
	}
	/* The largest chunk, and a length one past it. */
	check_fill64(buf, (2u << 20) + 1, &st);
	bad += check_buffer(buf, GPUSHA_CHUNK_MAX, GPUSHA_CHUNK_MAX, "1 MiB chunk");
	bad += check_buffer(buf, GPUSHA_CHUNK_MAX * 2 + 1, GPUSHA_CHUNK_MAX, "1 MiB chunks and a byte");
	printf("%d random buffers and 2 of 1 MiB chunks: %d wrong\n", cases, bad);

	/* gs_differs: one flipped byte anywhere in a digest. */
	uint8_t *a = aligned_alloc(16, 32 * 64), *b = aligned_alloc(16, 32 * 64);
	check_fill64(a, 32 * 64, &st);
	memcpy(b, a, 32 * 64);
	for (int i = 0; i < 64; i++)
		if (i % 3 == 0)
			b[32 * i + check_rnd(&st) % 32] ^= (uint8_t)(1 + check_rnd(&st) % 255);
	for (int i = 0; i < 64; i++)
		CHECK(gs_differs(a, b, (uint64_t)i) == (memcmp(a + 32 * i, b + 32 * i, 32) != 0),
		      "gs_differs on digest %d", i);
	free(a);
	free(b);
	free(buf);
	wide_tests(&st);

	/* A build without nvcc says so, with -ENOTSUP, before touching the driver. */
	if (!gpusha_built()) {
		const char *nvcc = "";
		CHECK(gpusha_ptx_text(&nvcc) == NULL && nvcc == NULL, "a build without kernels has PTX");
		struct gpusha *g = NULL;
		const int rc = gpusha_open(NULL, &g);
		CHECK(rc == -ENOTSUP && strstr(crest_errmsg(), "no GPU hashing in this build"),
		      "gpusha_open without kernels: %d (%s)", rc, crest_errmsg());
		printf("this build has no GPU kernels: gpusha_open says \"%s\"\n", crest_errmsg());
	} else {
		/* The embedded text is nvcc's PTX with the four entry points that
		 * gpusha_open looks up (a broken embed step shows here, not only
		 * on a GPU machine). */
		const char *nvcc = NULL, *ptx = gpusha_ptx_text(&nvcc);
		static const char *const entry[6] = { ".entry gpusha_hash_k(", ".entry gpusha_cmp_k(",
						      ".entry gpusha_scan_k(", ".entry gpusha_emit_k(",
						      ".entry gpusha_wide_k(", ".entry gpusha_hash_list_k(" };
		CHECK(ptx && nvcc && strncmp(ptx, "//", 2) == 0 && strstr(ptx, ".version ") &&
			      strstr(ptx, ".target sm_75"),
		      "the embedded PTX does not start like nvcc's for compute_75");
		for (int i = 0; i < 6; i++)
			CHECK(ptx && strstr(ptx, entry[i]), "the embedded PTX lacks %s", entry[i]);
		printf("this build embeds the GPU kernels: %zu bytes of PTX by nvcc %s\n", ptx ? strlen(ptx) : 0,
		       nvcc ? nvcc : "?");
	}
	if (failures) {
		printf("FAIL: %d check(s) failed (seed %" PRIu64 ")\n", failures, seed);
		return 1;
	}
	printf("ok\n");
	return 0;
}
