/*
 * gpusha.cu - the kernels of gpu/gpusha.h, compiled to PTX at build time
 * (when nvcc is found) and loaded through the driver API at run time.
 *
 * gpusha_hash: one thread per chunk. SHA-256 is a chain within a chunk, so
 * a chunk cannot be split between threads; a 4 KiB-chunked GiB is 262144
 * independent chains, about one full wave of an H100's 132 SMs. Each thread
 * reads its chunk 64 bytes at a time with four 16-byte loads, whole 32-byte
 * sectors, so no byte crosses the bus twice even though a warp's 32 loads
 * land 4 KiB apart. The arithmetic (gpusha_core.h) bounds the speed, not the
 * memory: about 2,500 integer operations per 64-byte block.
 *
 * The changed kernels turn two digest arrays into the ordered list of the
 * chunks whose digests differ: count per block (cmp), exclusive scan of the
 * counts (scan, one block), write each changed index at its rank (emit).
 * Ordered, so the caller copies changed chunks front to back and can merge
 * neighbours into one copy.
 *
 * The gather kernel packs the changed chunks (and their digests) back to
 * back, so that one device-to-host copy moves them all: tens of thousands
 * of 4 KiB copies would cost more in calls than in bytes.
 *
 * gpusha_wide: one warp per chunk (the wide hash of gpusha_core.h). Lane l
 * reads 16-byte pieces l, l + 32, ... of its chunk, so each of the warp's
 * loads is 512 contiguous bytes and the kernel reads at memory speed; the
 * 16 KiB of keys stay in L1. The lanes' sums are added by shuffles.
 *
 * gpusha_hash_list: gpusha_hash for the chunks a list names, one thread a
 * chunk, each digest at its chunk's place: SHA-256 of only what changed.
 *
 * Entry points are extern "C" so gpusha.c finds them by their plain names.
 */
#include "gpu/gpusha_core.h"

/* gpusha.c launches with these; they must agree. */
#define GS_HASH_THREADS 128
#define GS_CMP_THREADS 256
#define GS_SCAN_THREADS 1024
#define GS_GATHER_THREADS 256
#define GS_WIDE_THREADS 256

extern "C" __global__ void __launch_bounds__(GS_HASH_THREADS)
gpusha_hash_k(const gs_u8 *src, gs_u64 len, gs_u32 chunk, gs_u64 nchunks, int vec, gs_u8 *out)
{
	const gs_u64 i = (gs_u64)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < nchunks)
		gs_hash_chunk(src, len, chunk, i, vec, out);
}

/* The wide digest of chunk i = warp w of the grid at out + 32 * i. vec:
 * src 16-byte aligned (a full chunk then has 16-byte pieces; chunk sizes
 * are multiples of 64). The whole warp returns together (i is the warp's),
 * so the shuffles below see every lane. */
extern "C" __global__ void __launch_bounds__(GS_WIDE_THREADS)
gpusha_wide_k(const gs_u8 *src, gs_u64 len, gs_u32 chunk, gs_u64 nchunks, int vec, const gs_u32 *key, gs_u8 *out)
{
	const gs_u64 i = ((gs_u64)blockIdx.x * blockDim.x + threadIdx.x) / 32;
	const gs_u32 lane = threadIdx.x & 31;
	if (i >= nchunks)
		return;
	const gs_u64 off = i * chunk;
	const gs_u32 n = len - off < chunk ? (gs_u32)(len - off) : chunk;
	gs_u64 a[GS_WIDE_KEYS] = { 0, 0, 0, 0 };
	gs_nh_part(src + off, n, vec && n % 16 == 0, key, lane, 32, a);
#pragma unroll
	for (int o = 16; o; o >>= 1)
#pragma unroll
		for (int j = 0; j < GS_WIDE_KEYS; j++)
			a[j] += __shfl_xor_sync(0xffffffffu, a[j], o);
	if (lane == 0)
		gs_nh_store(a, out + 32 * i);
}

/* SHA-256 of chunk list[j] of src[0..len) at out + 32 * list[j]. */
extern "C" __global__ void __launch_bounds__(GS_HASH_THREADS)
gpusha_hash_list_k(const gs_u8 *src, gs_u64 len, gs_u32 chunk, const gs_u32 *list, gs_u32 count, int vec,
		   gs_u8 *out)
{
	const gs_u64 j = (gs_u64)blockIdx.x * blockDim.x + threadIdx.x;
	if (j < count)
		gs_hash_chunk(src, len, chunk, list[j], vec, out);
}

/* blk[b] = how many chunks of block b changed; flags[i] = 0/1 unless NULL. */
extern "C" __global__ void __launch_bounds__(GS_CMP_THREADS)
gpusha_cmp_k(const gs_u8 *cur, const gs_u8 *prev, gs_u64 n, gs_u8 *flags, gs_u32 *blk)
{
	const gs_u64 i = (gs_u64)blockIdx.x * blockDim.x + threadIdx.x;
	int ch = 0;
	if (i < n) {
		ch = gs_differs(cur, prev, i);
		if (flags)
			flags[i] = (gs_u8)ch;
	}
	const int cnt = __syncthreads_count(ch);   /* every thread reaches it */
	if (threadIdx.x == 0)
		blk[blockIdx.x] = (gs_u32)cnt;
}

/* Inclusive sum over a warp's lanes. */
static __device__ __forceinline__ gs_u32 gs_warp_scan(gs_u32 x, int lane)
{
#pragma unroll
	for (int o = 1; o < 32; o <<= 1) {
		const gs_u32 y = __shfl_up_sync(0xffffffffu, x, o);
		if (lane >= o)
			x += y;
	}
	return x;
}

/* One block of GS_SCAN_THREADS: blk[0..nblk) becomes its exclusive prefix
 * sum, in tiles of 1024 with a running carry; *count gets the total. */
extern "C" __global__ void __launch_bounds__(GS_SCAN_THREADS)
gpusha_scan_k(gs_u32 *blk, gs_u32 nblk, gs_u32 *count)
{
	__shared__ gs_u32 warp_sum[GS_SCAN_THREADS / 32];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	gs_u32 carry = 0;
	for (gs_u32 base = 0; base < nblk; base += GS_SCAN_THREADS) {
		const gs_u32 i = base + threadIdx.x;
		const gs_u32 v = i < nblk ? blk[i] : 0;
		const gs_u32 x = gs_warp_scan(v, lane);
		if (lane == 31)
			warp_sum[warp] = x;
		__syncthreads();
		if (warp == 0)
			warp_sum[lane] = gs_warp_scan(warp_sum[lane], lane);
		__syncthreads();
		if (i < nblk)
			blk[i] = carry + (warp ? warp_sum[warp - 1] : 0) + x - v;
		carry += warp_sum[GS_SCAN_THREADS / 32 - 1];
		__syncthreads();   /* warp_sum is rewritten by the next tile */
	}
	if (threadIdx.x == 0)
		*count = carry;
}

/* list[blk[b] + rank] = i for each changed chunk i of block b, in order:
 * warps in order within the block, lanes in order within a warp. */
extern "C" __global__ void __launch_bounds__(GS_CMP_THREADS)
gpusha_emit_k(const gs_u8 *cur, const gs_u8 *prev, gs_u64 n, const gs_u32 *blk, gs_u32 *list)
{
	__shared__ gs_u32 warp_cnt[GS_CMP_THREADS / 32];
	const gs_u64 i = (gs_u64)blockIdx.x * blockDim.x + threadIdx.x;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int ch = i < n ? gs_differs(cur, prev, i) : 0;
	const gs_u32 mask = __ballot_sync(0xffffffffu, ch);
	if (lane == 0)
		warp_cnt[warp] = __popc(mask);
	__syncthreads();
	gs_u32 before = blk[blockIdx.x];
	for (int k = 0; k < warp; k++)
		before += warp_cnt[k];
	if (ch)
		list[before + __popc(mask & ((1u << lane) - 1))] = (gs_u32)i;
}

/* Block j copies chunk list[j] of src[0..len) to dst + j * chunk (the last
 * chunk of src may be short) and, unless dig_out is NULL, its digest from
 * dig to dig_out + 32 * j. vec: src 16-byte aligned (dst always is). */
extern "C" __global__ void __launch_bounds__(GS_GATHER_THREADS)
gpusha_gather_k(const gs_u8 *src, gs_u64 len, gs_u32 chunk, const gs_u32 *list, const gs_u8 *dig, gs_u8 *dst,
		gs_u8 *dig_out, int vec)
{
	const gs_u64 i = list[blockIdx.x];
	const gs_u64 off = i * chunk;
	const gs_u64 n = len - off < chunk ? len - off : chunk;
	const gs_u8 *s = src + off;
	gs_u8 *d = dst + (gs_u64)blockIdx.x * chunk;
	gs_u64 k = 0;
	if (vec) {
		const gs_u64 nv = n / 16;
		for (gs_u64 v = threadIdx.x; v < nv; v += blockDim.x)
			((uint4 *)d)[v] = ((const uint4 *)s)[v];
		k = nv * 16;
	}
	for (gs_u64 b = k + threadIdx.x; b < n; b += blockDim.x)
		d[b] = s[b];
	if (dig_out && threadIdx.x < 32)
		dig_out[(gs_u64)blockIdx.x * 32 + threadIdx.x] = dig[i * 32 + threadIdx.x];
}
