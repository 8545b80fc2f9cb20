/*
 * chunker.c - fixed and content-defined chunk boundaries; see chunker.h.
 *
 * FastCDC (Xia et al., USENIX ATC 2016): a gear rolling hash
 * fp = (fp << 1) + gear[byte] looks at the last 64 bytes; a cut falls where
 * the masked bits of fp are zero. Normalized chunking uses a mask with two
 * more bits before the average size and two fewer after it, which narrows the
 * size distribution around avg. No cut is looked for in the first `min`
 * bytes: that is both the speed trick and the minimum size.
 */
#include "dedup/chunker.h"
#include "util/err.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static uint64_t gear[256];
static pthread_once_t gear_once = PTHREAD_ONCE_INIT;

static void gear_init(void)
{
	/* splitmix64 from a fixed seed: reproducible, well mixed. */
	uint64_t s = 0x6372657374434443ull; /* "crestCDC" */
	for (int i = 0; i < 256; i++) {
		uint64_t z = (s += 0x9e3779b97f4a7c15ull);
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		gear[i] = z ^ (z >> 31);
	}
}

/* The top `bits` bits set: with the left-shifting gear hash the high bits
 * depend on the most bytes. */
static uint64_t mask_top(unsigned bits)
{
	return bits >= 64 ? ~0ull : ~0ull << (64 - bits);
}

int dedup_params_init(struct dedup_params *p, enum dedup_kind kind, uint32_t avg)
{
	if (avg < DEDUP_SIZE_MIN || avg > DEDUP_SIZE_MAX || (avg & (avg - 1)))
		return crest_errx(-EINVAL, "chunk size %u: must be a power of two from %u to %u",
				  avg, DEDUP_SIZE_MIN, DEDUP_SIZE_MAX);
	memset(p, 0, sizeof(*p));
	p->kind = kind;
	p->avg = avg;
	if (kind == DEDUP_FIXED) {
		p->min = p->max = avg;
		return 0;
	}
	pthread_once(&gear_once, gear_init);
	unsigned bits = 0;
	while ((1u << bits) < avg)
		bits++;
	p->min = avg / 4;
	p->max = avg * 8;
	p->mask_s = mask_top(bits + 2);
	p->mask_l = mask_top(bits - 2);
	return 0;
}

int dedup_kind_parse(const char *s, enum dedup_kind *out)
{
	if (!strcmp(s, "fixed"))
		*out = DEDUP_FIXED;
	else if (!strcmp(s, "cdc"))
		*out = DEDUP_CDC;
	else
		return crest_errx(-EINVAL, "unknown chunker '%s' (use fixed or cdc)", s);
	return 0;
}

const char *dedup_kind_name(enum dedup_kind k)
{
	return k == DEDUP_FIXED ? "fixed" : "cdc";
}

/*
 * Byte by byte, fp = (fp << 1) + gear[b] is one dependent shift-and-add per
 * byte (a LEA: 1 cycle on Zen 3, 2 on recent Xeons), and that chain, not the
 * loads or the tests, is what bounds the scan. Three bytes at a time the same
 * hash is
 *	fp3 = (fp << 3) + (((g0 << 1) + g1) << 1) + g2
 * where the part after fp << 3 (the hash of those three bytes alone) does not
 * depend on fp and is ready early: the chain carried from step to step is one
 * LEA per three bytes (three because LEA scales by at most 8). The hashes after
 * the first and second byte,
 *	fp1 = (fp << 1) + g0,  fp2 = (fp1 << 1) + g1,
 * still need their mask tests, but no later step reads them, so they are
 * computed beside the chain, not on it. This is exact arithmetic mod 2^64, so
 * fp1, fp2 and fp3 are bit for bit the values of the byte-by-byte loop, and
 * they are tested in byte order: every cut falls exactly where it always did,
 * which stored snapshots depend on. About twice as fast on an Emerald Rapids
 * Xeon.
 */

/* Hides x from the optimizer, which would otherwise fold (fp << 3) + x back
 * into (fp2 << 1) + g2 and so put the chain back at a step per byte. It emits
 * no instruction. */
#define GEAR_OPAQUE(x) __asm__("" : "+r"(x))

/* Scans data[i..stop) with the hash carried in *fpp. Returns the index just
 * past the first byte where (fp & mask) == 0, or 0 if there is none (a cut is
 * never 0: i >= min), leaving the hash in *fpp. */
static size_t gear_scan(const uint8_t *data, size_t i, size_t stop, uint64_t mask,
			uint64_t *fpp)
{
	uint64_t fp = *fpp;
	const uint8_t *q = data + i, *qstop = data + stop;

	/* Eight steps of three bytes per iteration keep the loop control off
	 * most bytes; the rest goes byte by byte. */
	for (size_t n = stop > i ? (stop - i) / 24 : 0; n; n--, q += 24) {
#pragma GCC unroll 8
		for (size_t k = 0; k < 24; k += 3) {
			uint64_t g0 = gear[q[k]], g1 = gear[q[k + 1]], g2 = gear[q[k + 2]];
			uint64_t t = (((g0 << 1) + g1) << 1) + g2;
			GEAR_OPAQUE(t);
			uint64_t fp1 = (fp << 1) + g0;
			uint64_t fp2 = (fp1 << 1) + g1;
			fp = (fp << 3) + t;
			if (!(fp1 & mask))
				return (size_t)(q - data) + k + 1;
			if (!(fp2 & mask))
				return (size_t)(q - data) + k + 2;
			if (!(fp & mask))
				return (size_t)(q - data) + k + 3;
		}
	}
	for (; q < qstop; q++) {
		fp = (fp << 1) + gear[*q];
		if (!(fp & mask))
			return (size_t)(q - data) + 1;
	}
	*fpp = fp;
	return 0;
}

size_t dedup_next(const struct dedup_params *p, const uint8_t *data, size_t len)
{
	if (len <= p->min)
		return len;
	if (p->kind == DEDUP_FIXED)
		return len < p->avg ? len : p->avg;

	size_t end = len < p->max ? len : p->max;
	size_t normal = len < p->avg ? len : p->avg;
	uint64_t fp = 0;
	size_t i = p->min, cut;
	if (i < normal) {
		if ((cut = gear_scan(data, i, normal, p->mask_s, &fp)))
			return cut;
		i = normal;
	}
	if ((cut = gear_scan(data, i, end, p->mask_l, &fp)))
		return cut;
	return end;
}

bool dedup_cut_holds(const struct dedup_params *p, const uint8_t *data, size_t len, size_t cut)
{
	if (p->kind != DEDUP_CDC || cut > len)
		return false;
	if (len <= p->min)
		return cut == len;   /* too short to scan: all of it */
	if (cut <= p->min)
		return false;
	const size_t end = len < p->max ? len : p->max;
	if (cut > end)
		return false;
	if (cut == end)
		return true;
	/* The hash starts from zero at min, and each step shifts the oldest
	 * byte's part further left: after 64 steps it is gone. */
	const size_t normal = len < p->avg ? len : p->avg;
	const uint64_t mask = cut <= normal ? p->mask_s : p->mask_l;
	uint64_t fp = 0;
	for (size_t i = cut - p->min > 64 ? cut - 64 : p->min; i < cut; i++)
		fp = (fp << 1) + gear[data[i]];
	return !(fp & mask);
}

void dedup_params_name(const struct dedup_params *p, char buf[40])
{
	if (p->kind == DEDUP_CDC)
		snprintf(buf, 40, "cdc/%u/%u/%u", p->min, p->avg, p->max);
	else
		snprintf(buf, 40, "fixed/%u", p->avg);
}

int dedup_is_zero(const uint8_t *data, size_t len)
{
	/* Word-wise; the compiler vectorizes the OR-reduction. Most non-zero
	 * chunks are rejected within the first 64 bytes. */
	size_t i = 0;
	if (len >= 64) {
		uint64_t acc = 0;
		for (; i < 64; i += 8) {
			uint64_t w;
			memcpy(&w, data + i, 8);
			acc |= w;
		}
		if (acc)
			return 0;
		for (; i + 64 <= len; i += 64) {
			uint64_t v[8];
			memcpy(v, data + i, 64);
			if (v[0] | v[1] | v[2] | v[3] | v[4] | v[5] | v[6] | v[7])
				return 0;
		}
	}
	for (; i < len; i++)
		if (data[i])
			return 0;
	return 1;
}
