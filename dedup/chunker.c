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

size_t dedup_next(const struct dedup_params *p, const uint8_t *data, size_t len)
{
	if (len <= p->min)
		return len;
	if (p->kind == DEDUP_FIXED)
		return len < p->avg ? len : p->avg;

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
