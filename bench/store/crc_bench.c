/*
 * crc_bench.c - CRC32C's variants (util/crc32c.h) on one core beside memcpy
 * of the same bytes, on pack records' sizes: what a worker pays per chunk
 * for its record's CRC, and what a restore pays to check one.
 *
 *   crc_bench [MIB]     (64: the bytes run through, per size, per variant)
 *
 * Prints one line per size and variant, GB/s (best of 5 passes) and the
 * ratio to memcpy of the same size in the same run. The buffer is larger
 * than L2 and smaller than L3, as a segment's chunks are when a worker
 * computes their records' CRCs.
 */
#include "util/crc32c.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	const size_t total = (size_t)(argc > 1 ? atoi(argv[1]) : 64) << 20;
	const size_t span = 4u << 20;   /* walked over and over */
	uint8_t *src = malloc(span + 65536), *dst = malloc(span + 65536);
	if (!src || !dst)
		return 1;
	for (size_t i = 0; i < span + 65536; i++)
		src[i] = (uint8_t)(i * 2654435761u >> 13);
	memset(dst, 1, span + 65536);
	static const size_t sizes[] = { 4096, 8192, 65536 };
	volatile uint32_t sink = 0;
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		const size_t n = sizes[s], per = span / n;
		double best_cp = 1e9;
		for (int pass = 0; pass < 5; pass++) {
			const double t0 = now();
			for (size_t done = 0; done < total; done += n)
				memcpy(dst + (done / n % per) * n, src + (done / n % per) * n, n);
			const double t = now() - t0;
			best_cp = t < best_cp ? t : best_cp;
		}
		sink += dst[7];
		printf("crc_bench: %6zu B  memcpy      %6.2f GB/s\n", n, total / best_cp / 1e9);
		for (int v = 0;; v++) {
			uint32_t out;
			const char *name;
			if (!crc32c_variant(v, src, 1, &out, &name))
				break;
			if (!name)
				continue;
			double best = 1e9;
			for (int pass = 0; pass < 5; pass++) {
				const double t0 = now();
				for (size_t done = 0; done < total; done += n) {
					crc32c_variant(v, src + (done / n % per) * n, n, &out, &name);
					sink += out;
				}
				const double t = now() - t0;
				best = t < best ? t : best;
			}
			printf("crc_bench: %6zu B  %-10s  %6.2f GB/s  %.2f x memcpy\n", n, name, total / best / 1e9,
			       best_cp / best);
		}
	}
	free(src);
	free(dst);
	return sink == 42 ? 2 : 0;
}
