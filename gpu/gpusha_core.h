/*
 * gpusha_core.h - SHA-256 (FIPS 180-4) of one chunk of a buffer, and the wide
 * hash that finds changed chunks, written once
 * for the GPU kernel (gpu/gpusha.cu, compiled by nvcc) and for the host (C):
 * the same text runs in both, so tests/gpu/test_gpusha_core.c proves the
 * kernel's logic - block loads, the padding of short tails, the length
 * field - against OpenSSL on every machine, GPU or not.
 *
 * The few operations that differ (rotation, byte swap, the 16-byte loads
 * and stores, unrolling) are the GS_* macros below; everything else is
 * plain C that nvcc and cc compile alike. No dynamic index into the message
 * schedule w[]: on the GPU that would push it from registers to local memory.
 */
#ifndef CREST_GPU_GPUSHA_CORE_H
#define CREST_GPU_GPUSHA_CORE_H

#ifdef __CUDACC__
#define GS_FN static __device__ __forceinline__
#define GS_CONST static __constant__ const
#define GS_UNROLL _Pragma("unroll")
typedef unsigned int gs_u32;
typedef unsigned long long gs_u64;
typedef unsigned char gs_u8;
#else
#include <stdint.h>
#include <string.h>
#define GS_FN static inline
#define GS_CONST static const
#define GS_UNROLL
typedef uint32_t gs_u32;
typedef uint64_t gs_u64;
typedef uint8_t gs_u8;
#endif

/* FIPS 180-4 4.2.2: the first 32 bits of the fractional parts of the cube
 * roots of the first 64 primes. In __constant__ memory on the GPU: every
 * thread of a warp reads the same K[t] in the same round, which the
 * constant cache serves as one broadcast (once unrolled, nvcc folds them
 * into the instructions' operands anyway). */
GS_CONST gs_u32 gs_k[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
	0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
	0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
	0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

/* FIPS 180-4 5.3.3: the initial hash value H(0). */
GS_CONST gs_u32 gs_h0[8] = {
	0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
};

#ifdef __CUDACC__
GS_FN gs_u32 gs_rotr(gs_u32 x, int n) { return __funnelshift_r(x, x, n); }
/* Bytes 0123 -> 3210: a little-endian load becomes the big-endian word. */
GS_FN gs_u32 gs_bswap(gs_u32 x) { return __byte_perm(x, 0, 0x0123); }
/* 16 bytes at p (16-byte aligned) as four little-endian words, through the
 * read-only path: the buffer does not change while the kernel runs. */
GS_FN void gs_load16(const gs_u8 *p, gs_u32 v[4])
{
	const uint4 q = __ldg((const uint4 *)p);
	v[0] = q.x; v[1] = q.y; v[2] = q.z; v[3] = q.w;
}
GS_FN void gs_store16(gs_u8 *p, const gs_u32 v[4])
{
	*(uint4 *)p = make_uint4(v[0], v[1], v[2], v[3]);
}
#else
GS_FN gs_u32 gs_rotr(gs_u32 x, int n) { return (x >> n) | (x << (32 - n)); }
GS_FN gs_u32 gs_bswap(gs_u32 x) { return __builtin_bswap32(x); }
/* The host stands in for the GPU's loads: both are little-endian. */
GS_FN void gs_load16(const gs_u8 *p, gs_u32 v[4]) { memcpy(v, p, 16); }
GS_FN void gs_store16(gs_u8 *p, const gs_u32 v[4]) { memcpy(p, v, 16); }
#endif

/* FIPS 180-4 4.1.2 */
#define GS_CH(x, y, z) (((x) & (y)) ^ (~(x) & (z)))
#define GS_MAJ(x, y, z) (((x) & (y)) ^ ((x) & (z)) ^ ((y) & (z)))
#define GS_BS0(x) (gs_rotr(x, 2) ^ gs_rotr(x, 13) ^ gs_rotr(x, 22))
#define GS_BS1(x) (gs_rotr(x, 6) ^ gs_rotr(x, 11) ^ gs_rotr(x, 25))
#define GS_SS0(x) (gs_rotr(x, 7) ^ gs_rotr(x, 18) ^ ((x) >> 3))
#define GS_SS1(x) (gs_rotr(x, 17) ^ gs_rotr(x, 19) ^ ((x) >> 10))

/* FIPS 180-4 6.2.2: one block, w[0..15] its big-endian words. The schedule
 * W[t] (t >= 16) is kept in a ring of 16: w[t & 15] holds W[t-16] until it
 * is overwritten with W[t]. */
GS_FN void gs_compress(gs_u32 h[8], gs_u32 w[16])
{
	gs_u32 a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
	GS_UNROLL
	for (int t = 0; t < 64; t++) {
		gs_u32 wt;
		if (t < 16) {
			wt = w[t];
		} else {
			const gs_u32 w15 = w[(t - 15) & 15], w2 = w[(t - 2) & 15];
			wt = GS_SS1(w2) + w[(t - 7) & 15] + GS_SS0(w15) + w[t & 15];
			w[t & 15] = wt;
		}
		const gs_u32 t1 = k + GS_BS1(e) + GS_CH(e, f, g) + gs_k[t] + wt;
		const gs_u32 t2 = GS_BS0(a) + GS_MAJ(a, b, c);
		k = g;
		g = f;
		f = e;
		e = d + t1;
		d = c;
		c = b;
		b = a;
		a = t1 + t2;
	}
	h[0] += a; h[1] += b; h[2] += c; h[3] += d;
	h[4] += e; h[5] += f; h[6] += g; h[7] += k;
}

/* A block past the chunk's whole 64-byte blocks (FIPS 180-4 5.1.1): in the
 * first one, the r (< 64) bytes left at q, then the bit 1 (0x80), then
 * zeros; in the last one, the chunk's length in bits as a 64-bit big-endian
 * number in words 14 and 15. With r <= 55 they are one block; with r >= 56
 * the length needs a second, all-zero one. Byte loads: the tail is short and
 * may end anywhere. */
GS_FN void gs_tail_block(const gs_u8 *q, gs_u32 r, int first, int last, gs_u64 bits, gs_u32 w[16])
{
	GS_UNROLL
	for (int i = 0; i < 16; i++) {
		gs_u32 x = 0;
		GS_UNROLL
		for (int j = 0; j < 4; j++) {
			const gs_u32 at = (gs_u32)(4 * i + j);
			const gs_u32 byte = !first ? 0 : at < r ? q[at] : at == r ? 0x80 : 0;
			x = x << 8 | byte;
		}
		w[i] = x;
	}
	if (last) {
		w[14] = (gs_u32)(bits >> 32);
		w[15] = (gs_u32)bits;
	}
}

/* A whole block at p: 16-byte loads where p is 16-byte aligned (vec), else
 * one byte at a time (a caller's buffer that starts off alignment). */
GS_FN void gs_data_block(const gs_u8 *p, int vec, gs_u32 w[16])
{
	if (vec) {
		GS_UNROLL
		for (int i = 0; i < 4; i++) {
			gs_u32 v[4];
			gs_load16(p + 16 * i, v);
			w[4 * i + 0] = gs_bswap(v[0]);
			w[4 * i + 1] = gs_bswap(v[1]);
			w[4 * i + 2] = gs_bswap(v[2]);
			w[4 * i + 3] = gs_bswap(v[3]);
		}
	} else {
		GS_UNROLL
		for (int i = 0; i < 16; i++)
			w[i] = (gs_u32)p[4 * i] << 24 | (gs_u32)p[4 * i + 1] << 16 |
			       (gs_u32)p[4 * i + 2] << 8 | (gs_u32)p[4 * i + 3];
	}
}

/* SHA-256 of the n bytes at p into h (the digest's eight words). One loop
 * over every block, padding ones included, so the compression function is
 * inlined once: (n + 8) / 64 + 1 blocks hold n bytes, the 0x80 and the
 * 8-byte length. */
GS_FN void gs_sha256(const gs_u8 *p, gs_u32 n, int vec, gs_u32 h[8])
{
	const gs_u32 full = n / 64, r = n % 64, total = (n + 8) / 64 + 1;
	for (int i = 0; i < 8; i++)
		h[i] = gs_h0[i];
	for (gs_u32 b = 0; b < total; b++) {
		gs_u32 w[16];
		if (b < full)
			gs_data_block(p + (gs_u64)b * 64, vec, w);
		else
			gs_tail_block(p + (gs_u64)full * 64, r, b == full, b == total - 1, (gs_u64)n * 8, w);
		gs_compress(h, w);
	}
}

/* The work of one GPU thread: chunk i of src[0..len), cut in chunk-byte
 * pieces (the last one may be short), its digest's 32 bytes at out + 32 * i.
 * out must be 16-byte aligned. */
GS_FN void gs_hash_chunk(const gs_u8 *src, gs_u64 len, gs_u32 chunk, gs_u64 i, int vec, gs_u8 *out)
{
	const gs_u64 off = i * chunk;
	const gs_u64 left = len - off;
	const gs_u32 n = left < chunk ? (gs_u32)left : chunk;
	gs_u32 h[8];
	gs_sha256(src + off, n, vec, h);
	/* The digest is H0..H7 big-endian: swap, then store little-endian. */
	gs_u32 v[4] = { gs_bswap(h[0]), gs_bswap(h[1]), gs_bswap(h[2]), gs_bswap(h[3]) };
	gs_store16(out + 32 * i, v);
	v[0] = gs_bswap(h[4]); v[1] = gs_bswap(h[5]); v[2] = gs_bswap(h[6]); v[3] = gs_bswap(h[7]);
	gs_store16(out + 32 * i + 16, v);
}

/*
 * The wide hash: which chunks changed, at memory speed (issue 36, item 5).
 *
 * NH (Black, Halevi, Krawczyk, Krovetz and Rogaway, "UMAC: Fast and Secure
 * Message Authentication", CRYPTO 1999) with 32-bit words, four times with
 * four independent random keys. Of a chunk of n bytes (n <= GS_WIDE_MAX),
 * read as little-endian 32-bit words m[0..W) (zero past byte n, W even):
 *
 *   A_j = sum over p < W/2 of (m[2p] + K_j[2p] mod 2^32) * (m[2p+1] + K_j[2p+1] mod 2^32)  mod 2^64
 *
 * and the digest is A_0..A_3, each little-endian: 32 bytes, the size of a
 * SHA-256 digest, so gs_differs compares either. For two chunks of the same
 * length that differ, and keys drawn uniformly and independently of them,
 * one A_j is equal with probability at most 2^-32 (NH is 2^-32-almost-
 * universal; UMAC's Theorem 1), all four with at most 2^-128. Not a
 * cryptographic hash: it names nothing. It only says a chunk is unchanged,
 * and then the chunk keeps the SHA-256 id it had. One 32x32->64 multiply and
 * two adds per 8 bytes per key: below HBM's bandwidth on the GPUs crest
 * runs on, where SHA-256 needs ~2,500 operations per 64 bytes.
 *
 * The sum is over pairs in any order, so a warp splits a chunk among its
 * lanes (lane l takes pairs l, l + 32, ...) and adds their sums: the GPU
 * and the host (lanes = 1) compute the same digest.
 */
#define GS_WIDE_MAX 4096u                       /* the longest chunk the keys cover, in bytes */
#define GS_WIDE_KEYS 4                          /* independent keys, 2^-32 each */
#define GS_WIDE_KEY_WORDS (GS_WIDE_MAX / 4)     /* 32-bit words of one key */

/* Little-endian word w of the n bytes at p, zero past them. */
GS_FN gs_u32 gs_word_le(const gs_u8 *p, gs_u32 n, gs_u32 w)
{
	gs_u32 x = 0;
	GS_UNROLL
	for (int b = 3; b >= 0; b--) {
		const gs_u32 at = 4 * w + (gs_u32)b;
		x = x << 8 | (at < n ? p[at] : 0u);
	}
	return x;
}

/* Adds one pair of words, m[2p] = w0 and m[2p+1] = w1, to the four sums. */
GS_FN void gs_nh_pair(gs_u64 a[GS_WIDE_KEYS], gs_u32 w0, gs_u32 w1, const gs_u32 *key, gs_u32 p)
{
	GS_UNROLL
	for (int j = 0; j < GS_WIDE_KEYS; j++) {
		const gs_u32 *k = key + j * GS_WIDE_KEY_WORDS + 2 * p;
		a[j] += (gs_u64)(gs_u32)(w0 + k[0]) * (gs_u32)(w1 + k[1]);
	}
}

/* The part of the four sums of the n bytes at p that lane of lanes takes.
 * vec: p 16-byte aligned and n a multiple of 16 (16-byte loads of data and
 * keys, four words a load); else words one byte at a time. key 16-byte
 * aligned, GS_WIDE_KEYS * GS_WIDE_KEY_WORDS words. */
GS_FN void gs_nh_part(const gs_u8 *p, gs_u32 n, int vec, const gs_u32 *key, gs_u32 lane, gs_u32 lanes,
		      gs_u64 a[GS_WIDE_KEYS])
{
	if (vec) {
		for (gs_u32 q = lane; q < n / 16; q += lanes) {
			gs_u32 v[4];
			gs_load16(p + 16 * q, v);
			GS_UNROLL
			for (int j = 0; j < GS_WIDE_KEYS; j++) {
				gs_u32 k[4];
				gs_load16((const gs_u8 *)(key + j * GS_WIDE_KEY_WORDS + 4 * q), k);
				a[j] += (gs_u64)(gs_u32)(v[0] + k[0]) * (gs_u32)(v[1] + k[1]) +
					(gs_u64)(gs_u32)(v[2] + k[2]) * (gs_u32)(v[3] + k[3]);
			}
		}
		return;
	}
	for (gs_u32 q = lane; q < (n + 7) / 8; q += lanes)
		gs_nh_pair(a, gs_word_le(p, n, 2 * q), gs_word_le(p, n, 2 * q + 1), key, q);
}

/* The four sums as the digest's 32 bytes at out (16-byte aligned). */
GS_FN void gs_nh_store(const gs_u64 a[GS_WIDE_KEYS], gs_u8 *out)
{
	GS_UNROLL
	for (int h = 0; h < 2; h++) {
		const gs_u32 v[4] = { (gs_u32)a[2 * h], (gs_u32)(a[2 * h] >> 32), (gs_u32)a[2 * h + 1],
				      (gs_u32)(a[2 * h + 1] >> 32) };
		gs_store16(out + 16 * h, v);
	}
}

/* Whether digest i differs between cur and prev (the changed kernels'
 * per-chunk test; 32-byte digests, SHA-256 or wide, 16-byte aligned arrays). */
GS_FN int gs_differs(const gs_u8 *cur, const gs_u8 *prev, gs_u64 i)
{
	gs_u32 a[4], b[4], x = 0;
	for (int half = 0; half < 2; half++) {
		gs_load16(cur + 32 * i + 16 * half, a);
		gs_load16(prev + 32 * i + 16 * half, b);
		x |= (a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3]);
	}
	return x != 0;
}

#endif
