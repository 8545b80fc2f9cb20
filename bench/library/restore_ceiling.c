/*
 * restore_ceiling.c - what this machine allows a restore into the GPU, step
 * by step, on the same pack files: reading them from the page cache, copying
 * into pinned memory, checking with CRC32C, and copying to the device. Each
 * figure is a ceiling for crest_restore, which does all of them; run on the
 * store gpu_bench just wrote (page cache warm).
 *
 *   restore_ceiling DIR [THREADS...]     (default threads: 1 4 8 16)
 *
 * Every regular file in DIR is read in 2 MiB pieces, handed out in order to
 * the threads. Modes:
 *   read         pread into a private 2 MiB buffer (the page cache's rate)
 *   read+copy    the same, then memcpy into a pinned 64 MiB window
 *   read+crc+copy  also CRC32C of the piece (crest's per-record check)
 *   pinned       pread straight into the pinned window
 *   pinned+h2d   pread into the pinned window, host-to-device copy of each
 *                full window, two windows per thread (no device: skipped)
 *   split+h2d    as crest reads raw records lying back to back: preadv
 *                with each record's header into a side buffer and its
 *                4 KiB of data into the window, so that the data lie
 *                together for one copy to the device (the records' places
 *                are made up: every 4152 bytes from the piece's start)
 *   pitched+h2d  the same records read whole into the window with pread,
 *                headers and all, and copied to the device with one
 *                pitched copy (source rows 4152 bytes apart, 4096 wide)
 * Lines starting with RESULT carry the figures.
 */
#include "gpu/cudrv.h"
#include "util/crc32c.h"
#include "util/progress.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define PIECE (2u << 20)
#define WINDOW (64u << 20)
#define MAXFILES 4096

enum mode { M_READ, M_COPY, M_CRC, M_PINNED, M_H2D, M_SPLIT, M_PITCHED, M_COUNT };
static const char *mode_name[M_COUNT] = { "read", "read+copy", "read+crc+copy", "pinned", "pinned+h2d",
					  "split+h2d", "pitched+h2d" };

/* A raw 4 KiB chunk's record: cas/format.h's header, then the data. */
#define REC_HDR 56u
#define REC_DATA 4096u
#define REC (REC_HDR + REC_DATA)
#define RECS_PER_PIECE (PIECE / REC)

struct file { int fd; uint64_t size; };
static struct file files[MAXFILES];
static unsigned nfiles;
static uint64_t npieces_total;
static atomic_uint_fast64_t next_piece;
static const struct cudrv *d;
/* cuMemcpy2DAsync, which crest itself does not use (gpu/cudrv.h has no slot
 * for it): taken from the same libcuda here. */
static CUresult (*memcpy2d)(const CUDA_MEMCPY2D *, CUstream);
static CUcontext ctx;
static CUdeviceptr dev;
static size_t dev_bytes;
static enum mode mode;
static atomic_uint_fast32_t sink;

struct worker {
	uint8_t *priv;
	uint8_t *win[2];   /* pinned */
	CUstream stream;
	CUevent ev[2];
	uint64_t bytes;
	int err;
};

static double now(void)
{
	return time_now_ns() / 1e9;
}

/* Piece k: file and offset, pieces numbered through the files in order. */
static int piece_at(uint64_t k, unsigned *f, uint64_t *off)
{
	for (unsigned i = 0; i < nfiles; i++) {
		const uint64_t n = (files[i].size + PIECE - 1) / PIECE;
		if (k < n) {
			*f = i;
			*off = k * PIECE;
			return 0;
		}
		k -= n;
	}
	return -1;
}

static ssize_t read_piece(unsigned f, uint64_t off, uint8_t *buf)
{
	const uint64_t left = files[f].size - off;
	const size_t want = left < PIECE ? (size_t)left : PIECE;
	size_t got = 0;
	while (got < want) {
		ssize_t n = pread(files[f].fd, buf + got, want - got, (off_t)(off + got));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

/* RECS_PER_PIECE records at off: headers to hdr, data to buf, back to back. */
static ssize_t read_split(unsigned f, uint64_t off, uint8_t *buf, uint8_t *hdr)
{
	struct iovec iov[2 * RECS_PER_PIECE];
	for (unsigned i = 0; i < RECS_PER_PIECE; i++) {
		iov[2 * i] = (struct iovec){ hdr + i * REC_HDR, REC_HDR };
		iov[2 * i + 1] = (struct iovec){ buf + i * REC_DATA, REC_DATA };
	}
	if (off + (uint64_t)RECS_PER_PIECE * REC > files[f].size)
		return 0;   /* a file's tail: left out of these two modes */
	ssize_t n;
	do
		n = preadv(files[f].fd, iov, 2 * RECS_PER_PIECE, (off_t)off);
	while (n < 0 && errno == EINTR);
	return n == (ssize_t)(RECS_PER_PIECE * REC) ? (ssize_t)(RECS_PER_PIECE * REC_DATA) : -1;
}

/* The window's at bytes to the device: whole, or (pitched) its records'
 * data only, one pitched copy. Returns the bytes that reach the device. */
static size_t to_device(struct worker *w, int b, size_t at, CUdeviceptr to)
{
	if (mode != M_PITCHED) {
		d->MemcpyHtoDAsync(to, w->win[b], at, w->stream);
		return at;
	}
	const CUDA_MEMCPY2D c = {
		.srcXInBytes = REC_HDR, .srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = w->win[b], .srcPitch = REC,
		.dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = to, .dstPitch = REC_DATA,
		.WidthInBytes = REC_DATA, .Height = at / REC,
	};
	memcpy2d(&c, w->stream);
	return at / REC * REC_DATA;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	size_t at = 0;       /* fill of the current window */
	int b = 0;
	bool inflight[2] = { false, false };
	size_t dev_off = 0;
	const bool h2d = mode == M_H2D || mode == M_SPLIT || mode == M_PITCHED;
	if (h2d)
		d->CtxSetCurrent(ctx);
	for (;;) {
		const uint64_t k = atomic_fetch_add(&next_piece, 1);
		unsigned f;
		uint64_t off;
		if (k >= npieces_total || piece_at(k, &f, &off) < 0)
			break;
		if (at + PIECE > WINDOW) {
			if (h2d) {
				/* The window goes to the device; the other must be free. */
				to_device(w, b, at, dev + dev_off % (dev_bytes - WINDOW));
				d->EventRecord(w->ev[b], w->stream);
				inflight[b] = true;
				dev_off += WINDOW;
				b ^= 1;
				if (inflight[b])
					d->EventSynchronize(w->ev[b]);
				inflight[b] = false;
			}
			at = 0;
		}
		uint8_t *dst = mode >= M_PINNED ? w->win[b] + at : w->priv;
		ssize_t n;
		if (mode == M_SPLIT) {
			n = read_split(f, off, dst, w->priv);
		} else if (mode == M_PITCHED) {
			n = off + (uint64_t)RECS_PER_PIECE * REC > files[f].size ? 0 : read_piece(f, off, dst);
			n = n > 0 ? (ssize_t)(RECS_PER_PIECE * REC) : n;
		} else {
			n = read_piece(f, off, dst);
		}
		if (n < 0) {
			w->err = errno ? errno : EIO;
			break;
		}
		if (mode == M_CRC)
			atomic_fetch_add_explicit(&sink, crc32c(w->priv, (size_t)n), memory_order_relaxed);
		if (mode == M_COPY || mode == M_CRC)
			memcpy(w->win[0] + at, w->priv, (size_t)n);
		at += (size_t)n;
		/* Bytes that reach the device (pitched: data, not headers). */
		w->bytes += mode == M_PITCHED ? (uint64_t)n / REC * REC_DATA : (uint64_t)n;
	}
	if (h2d) {
		if (at)
			to_device(w, b, at, dev);
		d->StreamSynchronize(w->stream);
	}
	return NULL;
}

static int load_dir(const char *dir)
{
	DIR *dd = opendir(dir);
	if (!dd) {
		fprintf(stderr, "restore_ceiling: cannot open %s: %s\n", dir, strerror(errno));
		return -1;
	}
	struct dirent *e;
	char path[4096];
	while ((e = readdir(dd)) && nfiles < MAXFILES) {
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		struct stat st;
		if (stat(path, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size == 0)
			continue;
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		files[nfiles++] = (struct file){ fd, (uint64_t)st.st_size };
		npieces_total += ((uint64_t)st.st_size + PIECE - 1) / PIECE;
	}
	closedir(dd);
	return nfiles ? 0 : -1;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2) {
		fprintf(stderr, "usage: restore_ceiling DIR [THREADS...]\n");
		return 2;
	}
	if (load_dir(argv[1]) < 0) {
		fprintf(stderr, "restore_ceiling: no files to read in %s\n", argv[1]);
		return 1;
	}
	uint64_t total = 0;
	for (unsigned i = 0; i < nfiles; i++)
		total += files[i].size;
	unsigned tl[16] = { 1, 4, 8, 16 }, ntl = 4;
	if (argc > 2) {
		ntl = 0;
		for (int i = 2; i < argc && ntl < 16; i++)
			tl[ntl++] = (unsigned)atoi(argv[i]);
	}
	unsigned maxt = 0;
	for (unsigned i = 0; i < ntl; i++)
		maxt = tl[i] > maxt ? tl[i] : maxt;

	const bool gpu = cudrv_load(&d) == 0;
	if (gpu) {
		CUdevice cd;
		d->DeviceGet(&cd, 0);
		d->DevicePrimaryCtxRetain(&ctx, cd);
		d->CtxSetCurrent(ctx);
		dev_bytes = (size_t)1 << 30;
		void *lib = dlopen(getenv("CREST_LIBCUDA") ? getenv("CREST_LIBCUDA") : "libcuda.so.1", RTLD_NOW);
		memcpy2d = lib ? (CUresult(*)(const CUDA_MEMCPY2D *, CUstream))dlsym(lib, "cuMemcpy2DAsync_v2") : NULL;
		if (d->MemAlloc(&dev, dev_bytes) != CUDA_SUCCESS) {
			fprintf(stderr, "restore_ceiling: cuMemAlloc failed\n");
			return 1;
		}
	} else {
		printf("no GPU: %s; pinned windows are plain memory, pinned+h2d skipped\n", "driver not loaded");
	}
	struct worker *w = calloc(maxt, sizeof(*w));
	for (unsigned i = 0; i < maxt; i++) {
		w[i].priv = aligned_alloc(4096, PIECE);
		for (int b = 0; b < 2; b++) {
			if (gpu) {
				if (d->MemHostAlloc((void **)&w[i].win[b], WINDOW, CU_MEMHOSTALLOC_PORTABLE) != CUDA_SUCCESS) {
					fprintf(stderr, "restore_ceiling: cuMemHostAlloc failed\n");
					return 1;
				}
				d->EventCreate(&w[i].ev[b], CU_EVENT_DISABLE_TIMING);
			} else {
				w[i].win[b] = aligned_alloc(4096, WINDOW);
				memset(w[i].win[b], 0, WINDOW);
			}
		}
		if (gpu)
			d->StreamCreate(&w[i].stream, CU_STREAM_NON_BLOCKING);
	}
	printf("restore_ceiling: %u files, %.2f GB in %s\n", nfiles, total / 1e9, argv[1]);
	pthread_t *t = calloc(maxt, sizeof(*t));
	for (int m = 0; m < M_COUNT; m++) {
		if (((m == M_H2D || m == M_SPLIT) && !gpu) || (m == M_PITCHED && !memcpy2d))
			continue;
		mode = (enum mode)m;
		for (unsigned ti = 0; ti < ntl; ti++) {
			const unsigned nt = tl[ti];
			atomic_store(&next_piece, 0);
			for (unsigned i = 0; i < nt; i++)
				w[i].bytes = 0, w[i].err = 0;
			const double t0 = now();
			for (unsigned i = 0; i < nt; i++)
				pthread_create(&t[i], NULL, worker_main, &w[i]);
			for (unsigned i = 0; i < nt; i++)
				pthread_join(t[i], NULL);
			const double s = now() - t0;
			uint64_t bytes = 0;
			int err = 0;
			for (unsigned i = 0; i < nt; i++) {
				bytes += w[i].bytes;
				err |= w[i].err;
			}
			printf("%-14s %2u threads: %.3f s, %.1f GB/s%s\n", mode_name[m], nt, s, bytes / s / 1e9,
			       err ? " (read errors)" : "");
			printf("RESULT ceiling mode=%s threads=%u GBps=%.1f\n", mode_name[m], nt, bytes / s / 1e9);
		}
	}
	return 0;
}
