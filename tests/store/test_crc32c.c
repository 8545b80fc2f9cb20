/*
 * test_crc32c.c - every CRC32C variant this CPU has (util/crc32c.h) against
 * a bit-at-a-time reference, the check value of "123456789" (0xE3069283),
 * and each other: random lengths from 0 to 70 KiB around the folding
 * variant's edges (512 bytes, multiples of 16, 64 and 256, one off either
 * way), at every alignment up to 64, over random bytes, zeros and all ones.
 * A pack record's CRC is written by one machine and checked by another, so
 * every variant must give the same value for every input.
 *
 *   test_crc32c [SEED]     (else $CREST_TEST_SEED, else the clock; printed)
 */
#include "util/crc32c.h"
#include "tests/check.h"

#include <inttypes.h>
#include <stdbool.h>
#include <time.h>
#include <unistd.h>

static uint32_t ref(const uint8_t *p, size_t n)
{
	uint32_t c = ~0u;
	for (size_t i = 0; i < n; i++) {
		c ^= p[i];
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
	}
	return ~c;
}

static size_t pick_len(uint64_t *st)
{
	static const size_t edge[] = { 0, 1, 15, 16, 17, 63, 64, 65, 255, 256, 257, 511, 512, 513, 767, 768, 769,
				       1023, 1024, 1025, 4095, 4096, 4097, 4128, 8192 + 48, 65536 + 80 };
	const uint64_t r = check_rnd(st);
	switch (r % 4) {
	case 0: return edge[(r >> 8) % (sizeof(edge) / sizeof(edge[0]))];
	case 1: return 512 + (r >> 8) % 4096;
	case 2: return ((r >> 8) % 1100 + 1) * 64 + (r >> 40) % 3 - 1;   /* 64 k - 1, 64 k, 64 k + 1 */
	default: return (r >> 8) % (70 * 1024);
	}
}

int main(int argc, char **argv)
{
	const uint64_t seed = check_seed(argc, argv, 1);
	printf("crc32c: seed %" PRIu64 " (replay: test_crc32c %" PRIu64 ")\n", seed, seed);
	uint64_t st = check_state(seed);
	enum { MAX = 70 * 1024 + 128 };
	uint8_t *buf = malloc(MAX + 64);
	CHECK(crc32c("123456789", 9) == 0xE3069283u, "crc32c(\"123456789\") = %08x, want e3069283",
	      crc32c("123456789", 9));
	int have = 0;
	for (int v = 0;; v++) {
		uint32_t out;
		const char *name;
		if (!crc32c_variant(v, "123456789", 9, &out, &name))
			break;
		if (!name) {
			printf("crc32c: variant %d: not on this CPU\n", v);
			continue;
		}
		have++;
		CHECK(out == 0xE3069283u, "%s: check value %08x, want e3069283", name, out);
	}
	long cases = 0;
	for (int i = 0; i < 6000 && failures < 10; i++) {
		const size_t n = pick_len(&st), al = check_rnd(&st) % 64;
		uint8_t *p = buf + al;
		const int kind = (int)(check_rnd(&st) % 8);
		if (kind == 0)
			memset(p, 0, n);
		else if (kind == 1)
			memset(p, 0xff, n);
		else
			check_fill(p, n, check_rnd(&st));
		const uint32_t want = ref(p, n);
		CHECK(crc32c(p, n) == want, "crc32c of %zu bytes at alignment %zu (kind %d): %08x, want %08x "
		      "(seed %" PRIu64 ")", n, al, kind, crc32c(p, n), want, seed);
		for (int v = 0;; v++) {
			uint32_t out;
			const char *name;
			if (!crc32c_variant(v, p, n, &out, &name))
				break;
			if (!name)
				continue;
			CHECK(out == want, "%s: %zu bytes at alignment %zu (kind %d): %08x, want %08x (seed %" PRIu64
			      ")", name, n, al, kind, out, want, seed);
			cases++;
		}
	}
	printf("crc32c: %d variants here, %ld cases against the reference\n", have, cases);
	free(buf);
	if (failures)
		fprintf(stderr, "%d check(s) failed\n", failures);
	return failures ? 1 : 0;
}
