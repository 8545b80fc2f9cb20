/* crc32c.c - CRC32C with the SSE4.2 instruction where there is one; see crc32c.h. */
#include "util/crc32c.h"

#include <pthread.h>
#include <string.h>

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
#endif

static uint32_t (*impl)(uint32_t, const uint8_t *, size_t);
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void choose(void)
{
#if defined(__x86_64__)
	__builtin_cpu_init();
	if (__builtin_cpu_supports("sse4.2")) {
		shift_init();
		impl = crc_hw;
		return;
	}
#endif
	table_init();
	impl = crc_table;
}

uint32_t crc32c(const void *data, size_t len)
{
	pthread_once(&once, choose);
	return ~impl(~0u, data, len);
}
