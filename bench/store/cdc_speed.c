/*
 * cdc_speed.c - dedup_next against the byte-at-a-time FastCDC loop it
 * replaced, on the same random bytes in one run: scan rate of each, their
 * ratio, and a check that both cut at exactly the same places (stored
 * snapshots depend on the cuts).
 *
 *   cdc_speed [MIB [AVG]]     (defaults: 256 MiB, 8192)
 *
 * The line starting with RESULT carries the figures for bench/RESULTS.md.
 */
#include "dedup/chunker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The loop dedup_next had before it stepped three bytes at a time, with the
 * same gear table (rebuilt here from the same seed). */
static uint64_t gear[256];

static void gear_init(void)
{
	uint64_t s = 0x6372657374434443ull;
	for (int i = 0; i < 256; i++) {
		uint64_t z = (s += 0x9e3779b97f4a7c15ull);
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		gear[i] = z ^ (z >> 31);
	}
}

static size_t ref_next(const struct dedup_params *p, const uint8_t *data, size_t len)
{
	if (len <= p->min)
		return len;
	size_t end = len < p->max ? len : p->max;
	size_t normal = len < p->avg ? len : p->avg;
	uint64_t fp = 0;
	size_t i = p->min;
	for (; i < normal; i++) {
		fp = (fp << 1) + gear[data[i]];
		if (!(fp & p->mask_s))
			return i + 1;
	}
	for (; i < end; i++) {
		fp = (fp << 1) + gear[data[i]];
		if (!(fp & p->mask_l))
			return i + 1;
	}
	return end;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Best of five scans of the whole buffer; *cuts gets the chunk count. */
static double scan(size_t (*next)(const struct dedup_params *, const uint8_t *, size_t),
		   const struct dedup_params *p, const uint8_t *buf, size_t len, size_t *cuts)
{
	double best = 1e9;
	for (int rep = 0; rep < 5; rep++) {
		size_t n = 0;
		const double t = now();
		for (size_t off = 0; off < len; n++)
			off += next(p, buf + off, len - off);
		const double s = now() - t;
		best = s < best ? s : best;
		*cuts = n;
	}
	return best;
}

int main(int argc, char **argv)
{
	const size_t len = (argc > 1 ? (size_t)atol(argv[1]) : 256) << 20;
	const uint32_t avg = argc > 2 ? (uint32_t)atol(argv[2]) : 8192;
	struct dedup_params p;
	if (dedup_params_init(&p, DEDUP_CDC, avg) < 0) {
		fprintf(stderr, "cdc_speed: average %u: not a power of two from 1 KiB to 4 MiB\n", avg);
		return 2;
	}
	gear_init();
	uint8_t *buf = malloc(len);
	if (!buf) {
		fprintf(stderr, "cdc_speed: cannot allocate %zu bytes\n", len);
		return 1;
	}
	uint64_t x = 0x243f6a8885a308d3ull;
	for (size_t i = 0; i < len; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		buf[i] = (uint8_t)(x >> 24);
	}
	/* Same cuts first: chunk by chunk over the whole buffer. */
	for (size_t off = 0; off < len;) {
		const size_t a = ref_next(&p, buf + off, len - off), b = dedup_next(&p, buf + off, len - off);
		if (a != b) {
			fprintf(stderr, "cdc_speed: cuts differ at offset %zu: %zu against %zu\n", off, a, b);
			return 1;
		}
		off += a;
	}
	size_t n1, n2;
	const double t_ref = scan(ref_next, &p, buf, len, &n1);
	const double t_new = scan(dedup_next, &p, buf, len, &n2);
	printf("cdc_speed: %zu MiB random, avg %u: byte loop %.3f s (%.2f GB/s), dedup_next %.3f s "
	       "(%.2f GB/s), %zu chunks each, same cuts\n", len >> 20, avg, t_ref, len / t_ref / 1e9, t_new,
	       len / t_new / 1e9, n1);
	printf("RESULT cdc_byte_loop_GBps=%.2f cdc_dedup_next_GBps=%.2f speedup=%.2f same_cuts=%s\n",
	       len / t_ref / 1e9, len / t_new / 1e9, t_ref / t_new, n1 == n2 ? "yes" : "NO");
	free(buf);
	return 0;
}
