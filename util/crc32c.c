/* crc32c.c - CRC32C by carry-less multiplication (AVX-512 VPCLMULQDQ), or
 * the SSE4.2 instruction, or a table; see crc32c.h. */
#include "util/crc32c.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

static uint32_t table[8][256];

static void table_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
		table[0][i] = c;
	}
	for (uint32_t i = 0; i < 256; i++)
		for (int t = 1; t < 8; t++)
			table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
}

/* Slicing-by-8: the fallback for CPUs without the instruction. */
static uint32_t crc_table(uint32_t c, const uint8_t *p, size_t n)
{
	while (n >= 8) {
		uint64_t v;
		memcpy(&v, p, 8);
		v ^= c;   /* little-endian: the CRC folds into the first four bytes */
		c = table[7][v & 0xff] ^ table[6][(v >> 8) & 0xff] ^ table[5][(v >> 16) & 0xff] ^
		    table[4][(v >> 24) & 0xff] ^ table[3][(v >> 32) & 0xff] ^ table[2][(v >> 40) & 0xff] ^
		    table[1][(v >> 48) & 0xff] ^ table[0][v >> 56];
		p += 8;
		n -= 8;
	}
	while (n--)
		c = (c >> 8) ^ table[0][(c ^ *p++) & 0xff];
	return c;
}

#if defined(__x86_64__)
/* The crc32 instruction has a latency of 3 cycles and a throughput of 1:
 * three independent streams over consecutive blocks run about three times
 * as fast as one. The streams are joined with shift(r) = r * x^(8*BLOCK),
 * the register after BLOCK zero bytes, which is linear in r: four tables of
 * 256 entries, one per byte of r. */
#define BLOCK 256
static uint32_t shift_tab[4][256];

__attribute__((target("sse4.2"))) static uint32_t crc_hw1(uint32_t c, const uint8_t *p, size_t n)
{
	uint64_t c64 = c;
	while (n >= 8) {
		uint64_t v;
		memcpy(&v, p, 8);
		c64 = __builtin_ia32_crc32di(c64, v);
		p += 8;
		n -= 8;
	}
	c = (uint32_t)c64;
	while (n--)
		c = __builtin_ia32_crc32qi(c, *p++);
	return c;
}

static uint32_t shift_block(uint32_t r)
{
	return shift_tab[0][r & 0xff] ^ shift_tab[1][(r >> 8) & 0xff] ^ shift_tab[2][(r >> 16) & 0xff] ^
	       shift_tab[3][r >> 24];
}

static void shift_init(void)
{
	static const uint8_t zeros[BLOCK];
	for (int k = 0; k < 4; k++)
		for (uint32_t b = 0; b < 256; b++)
			shift_tab[k][b] = crc_hw1(b << (8 * k), zeros, BLOCK);
}

/* Built for SSE4.2 alone, called only after the CPU said it has it, so the
 * rest of crest still runs on any x86-64. */
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t c, const uint8_t *p, size_t n)
{
	while (n >= 3 * BLOCK) {
		uint64_t a = c, b = 0, d = 0;
		for (size_t i = 0; i < BLOCK; i += 8) {
			uint64_t va, vb, vd;
			memcpy(&va, p + i, 8);
			memcpy(&vb, p + BLOCK + i, 8);
			memcpy(&vd, p + 2 * BLOCK + i, 8);
			a = __builtin_ia32_crc32di(a, va);
			b = __builtin_ia32_crc32di(b, vb);
			d = __builtin_ia32_crc32di(d, vd);
		}
		c = shift_block(shift_block((uint32_t)a) ^ (uint32_t)b) ^ (uint32_t)d;
		p += 3 * BLOCK;
		n -= 3 * BLOCK;
	}
	return crc_hw1(c, p, n);
}

/* Folding by carry-less multiplication (Intel's "Fast CRC Computation for
 * Generic Polynomials Using PCLMULQDQ", with 512-bit registers). The
 * crc32 instruction does 8 bytes a cycle at best, however many streams:
 * its port takes one a cycle. VPCLMULQDQ multiplies four 128-bit lanes at
 * once on another port, and four registers in flight fold 256 bytes every
 * 8 multiplies. Measured on the H100 host's CPU and on the development
 * machine: bench/store/crc_bench.
 *
 * The algebra, for this reflected CRC (bit 0 of byte 0 is the message's
 * highest coefficient). A 16-byte block X at a place followed by D more
 * bits of message has the same CRC contribution as X * x^D mod P placed D
 * bits later, and any 128-bit Y congruent to it will do. Loaded as two
 * 64-bit words, X = Xlo x^64 + Xhi, and a carry-less product of reflected
 * 64-bit words a, b is x * A * B as a reflected 128-bit value (one degree
 * short of 128). So Y = clmul(Xlo, K1) ^ clmul(Xhi, K2) with K1 the
 * reflection of x^(D+63) mod P and K2 of x^(D-1) mod P, both made at
 * start (fold_init), not copied in. The CRC's starting value is XORed
 * into the first four bytes; what is left at the end, one 16-byte block
 * and a tail of less than 16 bytes, goes through the crc32 instruction
 * from 0, which gives the same remainder. */
#define FOLD_MIN 512            /* shorter input: crc_hw */
static __attribute__((aligned(64))) uint64_t fold_k[5][8];   /* D = 2048, 512, 384, 256, 128 bits */

/* x^n mod P, P = 0x11EDC6F41 (CRC32C, not reflected). */
static uint32_t xpow_mod(unsigned n)
{
	uint64_t r = 1;
	while (n--) {
		r <<= 1;
		if (r & (1ull << 32))
			r ^= 0x11EDC6F41ull;
	}
	return (uint32_t)r;
}

static uint64_t reflect64(uint64_t v)
{
	uint64_t r = 0;
	for (int i = 0; i < 64; i++)
		if (v >> i & 1)
			r |= 1ull << (63 - i);
	return r;
}

static void fold_init(void)
{
	static const unsigned d[5] = { 2048, 512, 384, 256, 128 };
	for (int i = 0; i < 5; i++) {
		const uint64_t k1 = reflect64(xpow_mod(d[i] + 63)), k2 = reflect64(xpow_mod(d[i] - 1));
		for (int l = 0; l < 4; l++) {
			fold_k[i][2 * l] = k1;
			fold_k[i][2 * l + 1] = k2;
		}
	}
}

#define FOLD_TARGET __attribute__((target("avx512f,avx512vl,vpclmulqdq,pclmul,sse4.2")))

FOLD_TARGET static inline __m512i fold512(__m512i x, __m512i k, __m512i next)
{
	return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00), _mm512_clmulepi64_epi128(x, k, 0x11),
					 next, 0x96);
}

FOLD_TARGET static inline __m128i fold128(__m128i x, __m128i k, __m128i next)
{
	return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11)), next);
}

FOLD_TARGET static uint32_t crc_fold(uint32_t c, const uint8_t *p, size_t n)
{
	if (n < FOLD_MIN)
		return crc_hw(c, p, n);
	__m512i a0 = _mm512_loadu_si512(p), a1 = _mm512_loadu_si512(p + 64);
	__m512i a2 = _mm512_loadu_si512(p + 128), a3 = _mm512_loadu_si512(p + 192);
	a0 = _mm512_xor_si512(a0, _mm512_castsi128_si512(_mm_cvtsi32_si128((int)c)));
	p += 256;
	n -= 256;
	const __m512i k2048 = _mm512_load_si512(fold_k[0]), k512 = _mm512_load_si512(fold_k[1]);
	while (n >= 256) {
		a0 = fold512(a0, k2048, _mm512_loadu_si512(p));
		a1 = fold512(a1, k2048, _mm512_loadu_si512(p + 64));
		a2 = fold512(a2, k2048, _mm512_loadu_si512(p + 128));
		a3 = fold512(a3, k2048, _mm512_loadu_si512(p + 192));
		p += 256;
		n -= 256;
	}
	/* Four registers, 64 bytes apart, into the last; then whole 64-byte
	 * blocks left. */
	a1 = fold512(a0, k512, a1);
	a2 = fold512(a1, k512, a2);
	a3 = fold512(a2, k512, a3);
	while (n >= 64) {
		a3 = fold512(a3, k512, _mm512_loadu_si512(p));
		p += 64;
		n -= 64;
	}
	/* Its four lanes, 16 bytes apart, into the last; then whole 16-byte
	 * blocks left. */
	const __m128i k384 = _mm_load_si128((const __m128i *)fold_k[2]);
	const __m128i k256 = _mm_load_si128((const __m128i *)fold_k[3]);
	const __m128i k128 = _mm_load_si128((const __m128i *)fold_k[4]);
	__m128i x = _mm512_extracti32x4_epi32(a3, 3);
	x = fold128(_mm512_extracti32x4_epi32(a3, 0), k384, x);
	x = fold128(_mm512_extracti32x4_epi32(a3, 1), k256, x);
	x = fold128(_mm512_extracti32x4_epi32(a3, 2), k128, x);
	while (n >= 16) {
		x = fold128(x, k128, _mm_loadu_si128((const __m128i *)p));
		p += 16;
		n -= 16;
	}
	uint64_t r = _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(x));
	r = _mm_crc32_u64(r, (uint64_t)_mm_extract_epi64(x, 1));
	return crc_hw1((uint32_t)r, p, n);
}
#endif

static uint32_t (*impl)(uint32_t, const uint8_t *, size_t);
static pthread_once_t once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__)
static bool has_fold(void)
{
	return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
	       __builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("pclmul") &&
	       __builtin_cpu_supports("sse4.2");
}
#endif

static void choose(void)
{
	table_init();   /* crc32c_variant's fallback too */
#if defined(__x86_64__)
	__builtin_cpu_init();
	if (__builtin_cpu_supports("sse4.2")) {
		shift_init();
		impl = crc_hw;
		if (has_fold()) {
			fold_init();
			impl = crc_fold;
		}
		return;
	}
#endif
	impl = crc_table;
}

uint32_t crc32c(const void *data, size_t len)
{
	pthread_once(&once, choose);
	return ~impl(~0u, data, len);
}

bool crc32c_variant(int i, const void *data, size_t len, uint32_t *out, const char **name)
{
	pthread_once(&once, choose);
	uint32_t (*f)(uint32_t, const uint8_t *, size_t) = NULL;
	switch (i) {
	case 0:
		f = crc_table, *name = "table";
		break;
#if defined(__x86_64__)
	case 1:
		f = __builtin_cpu_supports("sse4.2") ? crc_hw : NULL, *name = "sse4.2";
		break;
	case 2:
		f = impl == crc_fold ? crc_fold : NULL, *name = "vpclmulqdq";
		break;
#endif
	default:
		return false;
	}
	if (f)
		*out = ~f(~0u, data, len);
	else
		*name = NULL;
	return true;
}
