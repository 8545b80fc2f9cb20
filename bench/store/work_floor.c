/*
 * work_floor.c - the least CPU work that crest put and crest get do on a
 * file's bytes, measured stage by stage on this machine, and the fastest
 * that any program doing that work on its cores could run: the floor that
 * issue 14's put and get targets are set against.
 *
 *   work_floor FILE [THREADS]     (THREADS: the machine's cores)
 *
 * FILE is cut into ENGINE_SEGMENT_BYTES segments as crest put cuts it; each
 * of THREADS threads takes an equal run of segments and, one segment at a
 * time, does what a worker does to it, each stage a pass over the segment
 * timed on its own:
 *
 *   read     pread of the segment (out of the page cache: cat it first)
 *   chunk    dedup_next with crest put's default chunking (cdc, 8 KiB)
 *   hash     dedup_is_zero, and SHA-256 of every chunk that is not zero
 *   record   each such chunk LZ4-compressed as the engine does it (the same
 *            probe of its first ENGINE_LZ4_PROBE bytes, the same LZ4 calls,
 *            kept raw when LZ4 does not shrink it) and laid out as a record
 *            with its header and CRC32C (cas_rec_build)
 *
 * and then what crest get does to those records:
 *
 *   copy     the records copied into another buffer: less than a pread of
 *            them out of a pack costs, so a floor for it
 *   check    CRC32C of every record's stored bytes
 *   decode   LZ4_decompress_safe (raw records: memcpy) into a window
 *   verify   SHA-256 of every chunk decoded
 *
 * Nothing else is counted: no index, no pending table, no pack writes, no
 * commit, no output file (bench/store/tmpfs_fill measures what the kernel
 * takes to fill one), no hand-offs between threads, and no imbalance beyond
 * the slowest thread's. So the figures are lower bounds on any program's
 * time for the same work, crest's included: a target above
 * FILE bytes / (floor seconds) cannot be met on this machine by doing it.
 *
 * Output: one line per stage (the slowest thread's seconds, GB/s of FILE's
 * bytes), then the floors of a put of new data (read+chunk+hash+record),
 * of an unchanged put (read+chunk+hash: its chunks are all known; read+hash
 * where the parent's cuts are taken without a scan, as crest does for a
 * parent cut by the same chunker) and of a get (copy+check+decode+verify),
 * each as seconds and GB/s, and a line
 * starting with RESULT for bench/RESULTS.md. The sum is taken per thread,
 * then the slowest thread's: stages of one thread run one after another.
 */
#include "cas/cas.h"
#include "cas/format.h"
#include "dedup/chunker.h"
#include "engine/engine.h"
#include "util/crc32c.h"
#include "util/endian.h"
#include "util/sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <lz4.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { S_READ, S_CHUNK, S_HASH, S_RECORD, S_COPY, S_CHECK, S_DECODE, S_VERIFY, S_N };
static const char *const stage_name[S_N] = { "read", "chunk", "hash", "record", "copy", "check", "decode", "verify" };

struct thr {
	int fd;
	const struct dedup_params *dp;
	uint64_t first, end;   /* its byte range of FILE */
	double t[S_N];         /* seconds in each stage */
	uint64_t chunks, zero, stored;
	int err;               /* 0, or what failed (negative errno) */
	const char *what;
};

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The engine's per-chunk compression (engine/workers.c, lz_block and
 * batch_record): each chunk a block of its own after a fast reset. */
static int lz_block(LZ4_stream_t *lz, const uint8_t *p, size_t n, char *dst, size_t room)
{
	LZ4_resetStream_fast(lz);
	return LZ4_compress_fast_continue(lz, (const char *)p, dst, (int)n, (int)room, 1);
}

static size_t record(LZ4_stream_t *lz, const uint8_t sha[32], const uint8_t *p, size_t n, uint8_t *rec)
{
	char *dst = (char *)rec + CAS_REC_HEADER;
	const size_t bound = (size_t)LZ4_compressBound((int)n);
	int c = 0;
	if (n <= ENGINE_LZ4_PROBE || n > ENGINE_LZ4_PROBE_UPTO) {
		c = lz_block(lz, p, n, dst, bound);
	} else {
		const int probe = lz_block(lz, p, ENGINE_LZ4_PROBE, dst, bound);
		if (probe > 0 && probe < ENGINE_LZ4_PROBE)
			c = lz_block(lz, p, n, dst, bound);
	}
	uint8_t codec = CAS_CODEC_LZ4;
	if (c <= 0 || (size_t)c >= n) {
		memcpy(dst, p, n);
		codec = CAS_CODEC_RAW;
		c = (int)n;
	}
	cas_rec_build(rec, sha, codec, (uint32_t)n, (uint32_t)c);
	return CAS_REC_HEADER + (size_t)c;
}

static void *thr_main(void *arg)
{
	struct thr *t = arg;
	const size_t seg = ENGINE_SEGMENT_BYTES;
	const size_t maxc = seg / DEDUP_SIZE_MIN + 1;   /* chunks a segment can have */
	uint8_t *in = malloc(seg), *win = malloc(seg);
	uint8_t *recs = malloc(seg + maxc * (CAS_REC_HEADER + 16) + (size_t)LZ4_compressBound((int)seg));
	uint8_t *recs2 = malloc(seg + maxc * (CAS_REC_HEADER + 16) + (size_t)LZ4_compressBound((int)seg));
	size_t *len = malloc(maxc * sizeof(*len)), *at = malloc(maxc * sizeof(*at));
	uint8_t (*sha)[32] = malloc(maxc * 32);
	LZ4_stream_t *lz = LZ4_createStream();
	struct sha256_hasher *h = NULL;
	if (!in || !win || !recs || !recs2 || !len || !at || !sha || !lz || sha256_hasher_new(&h) < 0) {
		t->err = -ENOMEM, t->what = "allocating buffers";
		goto out;
	}
	/* Every buffer touched before the clock runs: crest's are reused. */
	memset(in, 1, seg);
	memset(win, 1, seg);
	for (uint64_t off = t->first; off < t->end; off += seg) {
		const size_t n = t->end - off < seg ? (size_t)(t->end - off) : seg;
		double a = now(), b;
		size_t got = 0;
		while (got < n) {
			const ssize_t r = pread(t->fd, in + got, n - got, (off_t)(off + got));
			if (r <= 0) {
				t->err = r < 0 ? -errno : -EIO, t->what = "reading FILE";
				goto out;
			}
			got += (size_t)r;
		}
		b = now(), t->t[S_READ] += b - a, a = b;

		size_t nc = 0;
		for (size_t o = 0; o < n; nc++) {
			len[nc] = dedup_next(t->dp, in + o, n - o);
			at[nc] = o;
			o += len[nc];
		}
		b = now(), t->t[S_CHUNK] += b - a, a = b;

		/* len[i] = 0 marks a zero chunk from here on (a hole: no record). */
		for (size_t i = 0; i < nc; i++) {
			if (dedup_is_zero(in + at[i], len[i])) {
				t->zero += len[i];
				len[i] = 0;
			} else if (sha256_hash(h, in + at[i], len[i], sha[i]) < 0) {
				t->err = -EIO, t->what = "SHA-256";
				goto out;
			}
		}
		t->chunks += nc;
		b = now(), t->t[S_HASH] += b - a, a = b;

		size_t rl = 0;
		for (size_t i = 0; i < nc; i++)
			if (len[i])
				rl += record(lz, sha[i], in + at[i], len[i], recs + rl);
		t->stored += rl;
		b = now(), t->t[S_RECORD] += b - a, a = b;

		memcpy(recs2, recs, rl);
		b = now(), t->t[S_COPY] += b - a, a = b;

		uint32_t x = 0;   /* kept, so the loop is not optimized away */
		for (size_t r = 0; r < rl;) {
			const uint32_t stored = le32_get(recs2 + r + CAS_REC_STORED);
			x ^= crc32c(recs2 + r + CAS_REC_HEADER, stored) ^ le32_get(recs2 + r + CAS_REC_CRC);
			r += CAS_REC_HEADER + stored;
		}
		if (x == 0xdeadbeef)
			fputc(' ', stderr);
		b = now(), t->t[S_CHECK] += b - a, a = b;

		size_t r = 0;
		for (size_t i = 0; i < nc; i++) {
			if (!len[i])
				continue;
			const uint8_t *rec = recs2 + r;
			const uint32_t stored = le32_get(rec + CAS_REC_STORED);
			if (rec[CAS_REC_CODEC] == CAS_CODEC_RAW)
				memcpy(win + at[i], rec + CAS_REC_HEADER, stored);
			else if (LZ4_decompress_safe((const char *)rec + CAS_REC_HEADER, (char *)win + at[i], (int)stored,
						     (int)len[i]) != (int)len[i]) {
				t->err = -EBADMSG, t->what = "LZ4 decompression";
				goto out;
			}
			r += CAS_REC_HEADER + stored;
		}
		b = now(), t->t[S_DECODE] += b - a, a = b;

		for (size_t i = 0; i < nc; i++) {
			uint8_t sum[32];
			if (len[i] && (sha256_hash(h, win + at[i], len[i], sum) < 0 || memcmp(sum, sha[i], 32))) {
				t->err = -EBADMSG, t->what = "a decoded chunk's SHA-256";
				goto out;
			}
		}
		b = now(), t->t[S_VERIFY] += b - a;
	}
out:
	sha256_hasher_free(h);
	LZ4_freeStream(lz);
	free(in), free(win), free(recs), free(recs2), free(len), free(at), free(sha);
	return NULL;
}

/* The slowest thread's sum over the nst stages st[]: stages of one thread
 * run one after another, and the threads side by side. */
static double floor_of(const struct thr *t, unsigned n, const int *st, int nst)
{
	double worst = 0;
	for (unsigned i = 0; i < n; i++) {
		double s = 0;
		for (int k = 0; k < nst; k++)
			s += t[i].t[st[k]];
		if (s > worst)
			worst = s;
	}
	return worst;
}

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: work_floor FILE [THREADS]\n");
		return 2;
	}
	long nt = argc > 2 ? strtol(argv[2], NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
	if (nt < 1 || nt > 1024) {
		fprintf(stderr, "work_floor: THREADS must be 1 to 1024, not %s\n", argv[2]);
		return 2;
	}
	const int fd = open(argv[1], O_RDONLY);
	struct stat sb;
	if (fd < 0 || fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) || sb.st_size == 0) {
		fprintf(stderr, "work_floor: %s: %s\n", argv[1], fd < 0 ? strerror(errno) : "not a non-empty file");
		return 1;
	}
	struct dedup_params dp;
	dedup_params_init(&dp, DEDUP_CDC, 8192);   /* crest put's default (engine.c) */
	const uint64_t size = (uint64_t)sb.st_size, seg = ENGINE_SEGMENT_BYTES;
	const uint64_t segs = (size + seg - 1) / seg;
	if ((uint64_t)nt > segs)
		nt = (long)segs;
	struct thr *t = calloc((size_t)nt, sizeof(*t));
	pthread_t *id = calloc((size_t)nt, sizeof(*id));
	if (!t || !id) {
		fprintf(stderr, "work_floor: out of memory\n");
		return 1;
	}
	for (long i = 0; i < nt; i++) {
		t[i].fd = fd;
		t[i].dp = &dp;
		t[i].first = segs * (uint64_t)i / (uint64_t)nt * seg;
		t[i].end = segs * (uint64_t)(i + 1) / (uint64_t)nt * seg;
		if (t[i].end > size)
			t[i].end = size;
	}
	const double t0 = now();
	for (long i = 0; i < nt; i++)
		if (pthread_create(&id[i], NULL, thr_main, &t[i]) != 0) {
			fprintf(stderr, "work_floor: starting threads failed\n");
			return 1;
		}
	for (long i = 0; i < nt; i++)
		pthread_join(id[i], NULL);
	const double wall = now() - t0;
	uint64_t chunks = 0, zero = 0, stored = 0;
	for (long i = 0; i < nt; i++) {
		if (t[i].err) {
			fprintf(stderr, "work_floor: %s failed: %s\n", t[i].what, strerror(-t[i].err));
			return 1;
		}
		chunks += t[i].chunks, zero += t[i].zero, stored += t[i].stored;
	}
	printf("work_floor: %s, %.2f GB, %ld threads, %llu chunks (cdc, 8 KiB), %.1f%% of the bytes in zero chunks, "
	       "records %.1f%% of the bytes; %.2f s in all\n",
	       argv[1], size / 1e9, nt, (unsigned long long)chunks, 100.0 * zero / size, 100.0 * stored / size, wall);
	printf("%-8s %9s %9s\n", "stage", "s", "GB/s");
	for (int k = 0; k < S_N; k++) {
		const int one[1] = { k };
		const double s = floor_of(t, (unsigned)nt, one, 1);
		printf("%-8s %9.3f %9.2f\n", stage_name[k], s, size / s / 1e9);
	}
	static const int put_new[] = { S_READ, S_CHUNK, S_HASH, S_RECORD };
	static const int put_same[] = { S_READ, S_CHUNK, S_HASH };
	static const int put_cuts[] = { S_READ, S_HASH };
	static const int get[] = { S_COPY, S_CHECK, S_DECODE, S_VERIFY };
	static const int sha[] = { S_VERIFY };
	const double fn = floor_of(t, (unsigned)nt, put_new, 4), fs = floor_of(t, (unsigned)nt, put_same, 3);
	const double fg = floor_of(t, (unsigned)nt, get, 4), fh = floor_of(t, (unsigned)nt, sha, 1);
	const double fc = floor_of(t, (unsigned)nt, put_cuts, 2);
	printf("floor of a put of new data (read+chunk+hash+record): %.3f s, %.2f GB/s\n", fn, size / fn / 1e9);
	printf("floor of an unchanged put (read+chunk+hash):        %.3f s, %.2f GB/s\n", fs, size / fs / 1e9);
	printf("  with the parent's cuts, unscanned (read+hash):    %.3f s, %.2f GB/s\n", fc, size / fc / 1e9);
	printf("floor of a get (copy+check+decode+verify):          %.3f s, %.2f GB/s\n", fg, size / fg / 1e9);
	printf("SHA-256 of every chunk alone (verify):              %.3f s, %.2f GB/s\n", fh, size / fh / 1e9);
	printf("RESULT threads=%ld bytes=%llu put_new_floor_GBps=%.2f put_unchanged_floor_GBps=%.2f "
	       "put_cuts_floor_GBps=%.2f get_floor_GBps=%.2f sha_GBps=%.2f put_new_floor_s=%.3f "
	       "put_unchanged_floor_s=%.3f get_floor_s=%.3f\n",
	       nt, (unsigned long long)size, size / fn / 1e9, size / fs / 1e9, size / fc / 1e9, size / fg / 1e9,
	       size / fh / 1e9, fn, fs, fg);
	free(t);
	free(id);
	close(fd);
	return 0;
}
