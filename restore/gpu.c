/* gpu.c - restoring region streams into device memory; see gpu.h. */
#include "restore/gpu.h"
#include "util/err.h"
#include "util/mem.h"
#include "util/par.h"
#include "util/progress.h"
#include "util/sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <lz4.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/vfs.h>
#include <unistd.h>

struct window {
	size_t dst;        /* index into the job's dst */
	uint64_t ext, in;  /* starts `in` bytes into extent ext (only a hole is split) */
	uint64_t off, len; /* where in the stream, how many bytes */
};

/* Where the windows of one group of destinations stand: those of one
 * device context, or every host and file destination (key NULL). dst is
 * the group's current destination (n once all are handed out). */
struct cursor {
	const void *key;
	size_t dst;
	uint64_t ext, in, off;
};

struct job {
	const struct restore_ctx *c;
	const struct restore_gpu_dst *dst;
	size_t n;
	uint8_t **map;               /* files written by several threads: dst[i]'s mapping, or NULL */
	const struct restore_gpu_opts *o;
	struct cas_reader *rd;
	size_t buf_cap;              /* bytes of each window's buffer (a chunk larger than win goes alone) */
	size_t win;                  /* bytes per window, at most */
	bool pitch;                  /* device windows may be pitched (window_fill) */
	size_t win_step;             /* windows are multiples of it (0: any size) */
	unsigned threads;
	/* cursors, under lock: one a group of destinations (see job_next) */
	pthread_mutex_t lock;
	struct cursor *cur;
	unsigned ncur;
	uint64_t left;               /* bytes not yet handed out */
	atomic_uint_fast64_t done;   /* bytes restored, for the progress line */
	/* a pipe destination: the next offset to write, under lock; a thread
	 * waits on turn for its window's */
	uint64_t emit_off;
	pthread_cond_t turn;
	bool splice;                 /* the pipe takes the windows' pages (vmsplice) */
	/* first error wins */
	atomic_bool stop;
	int err;
	char msg[1024];
};

struct want {
	uint64_t ext;       /* extent index in the stream */
	uint64_t at;        /* offset in the window */
	uint32_t len;
	uint32_t next;      /* next wanted chunk with the same id + 1, 0: none */
	bool dup;           /* an earlier one has the same id: filled from it */
	bool done;
};

struct winstate {
	bool pitched;       /* this window's layout in buf is pitched (window_fill) */
	struct want *w;
	size_t n, cap;
	uint32_t *slot;     /* hash of id -> index + 1 */
	size_t nslot;
	struct cas_cursor *starts;
};

struct worker {
	struct job *j;
	unsigned home;               /* the group of destinations it starts at */
	uint8_t *buf[2];
	uint8_t *scratch;            /* bounce buffer for host regions: scratch_cap bytes */
	size_t scratch_cap;
	uint8_t *wbuf;               /* files: the window, checked before it is written */
	struct sha256_hasher *h;     /* files: each chunk's SHA-256 */
	struct winstate ws;
	struct cas_span span;        /* its buffer: SPAN_BYTES */
	struct iovec *iov;           /* direct reads: 2 * DIRECT_RECS */
	uint8_t *hdr;                /* the record headers they read: DIRECT_RECS */
	CUcontext ctx;               /* the context stream and events belong to */
	CUstream stream;
	CUevent ev[2];
	bool inflight[2];
	/* Where the time goes, printed with CREST_TRACE set: nanoseconds
	 * building window tables, looking up run starts, reading runs
	 * straight to their place, walking the packs (reading and unpacking),
	 * reading missed chunks one by one, waiting for copies to the device,
	 * hashing and writing a file's windows;
	 * chunks read direct and the preadvs and bytes that took, records
	 * walked, chunks missed, windows. */
	uint64_t t_table, t_locate, t_direct, t_walk, t_miss, t_wait, t_hash, t_write;
	uint64_t direct, skipped, direct_reads, direct_bytes, walked, missed, windows, pitched;
	uint64_t inflight_len[2];    /* bytes of each buffer's copy, for c->phases */
	uint64_t t_begin, t_filled, t_end; /* when it began, filled its last window, ended */
	uint64_t spliced_end;        /* the pipe may still hold wbuf's pages up to here */
};

static void job_fail(struct job *j, int err)
{
	pthread_mutex_lock(&j->lock);
	if (!j->err) {
		j->err = err;
		crest_errcpy(j->msg, sizeof(j->msg));
	}
	atomic_store(&j->stop, true);
	pthread_cond_broadcast(&j->turn);
	pthread_mutex_unlock(&j->lock);
}

static const void *dst_key(const struct restore_gpu_dst *t)
{
	return t->host || t->file ? NULL : (const void *)t->ctx;
}

/* The group's cursor moved to its next destination with windows left. */
static void cursor_settle(const struct job *j, struct cursor *g)
{
	while (g->dst < j->n && (dst_key(&j->dst[g->dst]) != g->key || g->ext >= j->dst[g->dst].st->nextents)) {
		g->dst++;
		g->ext = g->in = g->off = 0;
	}
}

/* The next window, or false when all are handed out: from the group
 * `home` while it has any, else from any other. Each group is a device
 * (one context) or the host, and each thread starts at a group of its
 * own (worker i at group i % ncur): regions on several GPUs are then
 * restored at once, each over its own link, where one cursor over all
 * destinations would fill one GPU after another. Data extents are never
 * split; holes (which may be far larger than a buffer) are. */
static int job_next(struct job *j, unsigned home, struct window *w, bool *got)
{
	int rc = 0;
	*got = false;
	pthread_mutex_lock(&j->lock);
	struct cursor *g = NULL;
	for (unsigned k = 0; k < j->ncur && !g; k++) {
		struct cursor *x = &j->cur[(home + k) % j->ncur];
		cursor_settle(j, x);
		g = x->dst < j->n ? x : NULL;
	}
	if (g) {
		const struct cas_stream *st = j->dst[g->dst].st;
		/* Guided: a window is at most 1/(2 threads) of what is left,
		 * so the last ones are small and the threads finish together.
		 * With 16 threads and 64 MiB windows only, the slowest thread
		 * ran ~40 ms after the others (one window at ~1.5 GB/s). Steps
		 * of the engine's segment keep windows starting where its runs
		 * of records do. */
		uint64_t cap = j->win;
		if (j->win_step) {
			uint64_t fair = j->left / (2 * (uint64_t)j->threads);
			fair -= fair % j->win_step;
			fair = fair < j->win_step ? j->win_step : fair;
			cap = fair < cap ? fair : cap;
		}
		*w = (struct window){ .dst = g->dst, .ext = g->ext, .in = g->in, .off = g->off };
		/* A hole of a file (not a pipe) is left as the truncation made
		 * it: nothing is filled or written, so it is one window however
		 * long. Cut into windows, a sparse file of 8 EiB (a stream's size
		 * is the snapshot's word) would take 2^39 turns: a day of CPU. */
		const struct restore_gpu_dst *t = &j->dst[g->dst];
		const bool whole = t->file && !t->pipe && st->ext[g->ext].hole && st->ext[g->ext].len > cap;
		if (whole) {
			w->len = st->ext[g->ext].len - g->in;
			g->ext++;
			g->in = 0;
		}
		while (!whole && g->ext < st->nextents && w->len < cap) {
			const struct cas_extent *x = &st->ext[g->ext];
			const uint64_t left = x->len - g->in;
			if (x->hole) {
				const uint64_t take = left < cap - w->len ? left : cap - w->len;
				w->len += take;
				g->in += take;
				if (g->in == x->len) {
					g->ext++;
					g->in = 0;
				}
			} else if (x->len <= cap - w->len || (w->len == 0 && x->len <= j->buf_cap)) {
				/* (A chunk larger than a guided window: alone.) */
				w->len += x->len;
				g->ext++;
			} else {
				break;
			}
		}
		if (w->len == 0) {
			rc = crest_errx(-EINVAL, "snapshot %s, stream %s: a %llu-byte chunk does not fit "
					"a %zu-byte restore buffer", j->c->snapshot, st->name,
					(unsigned long long)st->ext[g->ext].len, j->win);
		} else {
			g->off += w->len;
			j->left -= w->len < j->left ? w->len : j->left;
			*got = true;
		}
	}
	pthread_mutex_unlock(&j->lock);
	return rc;
}

/* A window's chunks are found by walking the packs, not by looking each up:
 * the engine writes each segment's new chunks back to back, in order, so a
 * pass over the records from the first chunk of each run up to its last
 * meets the window's chunks, and few others (those of an earlier snapshot
 * are elsewhere: one run then becomes several walks, or look-ups).
 * Each record met is matched against a table of the window's chunk ids; the
 * wanted ones are checked (header SHA-256 is the id, CRC32C of the stored
 * bytes: see cas.h for why that suffices) and unpacked to their offsets.
 * Walking every run separately would read each header once per run that
 * passes it, a dozen times over with 16 ingest workers. What the walk misses
 * (runs not started, chunks elsewhere) is read with cas_reader_get, which
 * names a missing or damaged chunk.
 * Before a run is walked it is tried as a direct read (run_direct): a first
 * snapshot of data that does not compress stores each run as raw records
 * back to back, and then the data can go from the page cache straight to
 * its place in the window with preadv, where the walk copies it twice
 * (into the span buffer, then out). On the H100 machine pread into pinned
 * memory ran at 47.5 GB/s, pread and a copy at 37 GB/s. */
#define RUN_CHUNKS 1024     /* a run is started (looked up) every this many chunks */
#define MISS_MAX 512        /* records in a row not in the window: the run ended early */
#define SPAN_BYTES (2u << 20) /* one pread: fits the L2 cache, so the copy out stays cheap */
/* One direct read: up to DIRECT_RECS records (two iovecs each, well within
 * IOV_MAX) and about DIRECT_BYTES of data, so that the CRC32C pass right
 * after it finds the data still in the L2 cache. */
#define DIRECT_RECS 256
#define DIRECT_BYTES (1u << 20)
_Static_assert(2 * DIRECT_RECS <= IOV_MAX, "a direct read's iovecs exceed IOV_MAX");

static uint64_t id_key(const uint8_t *sha)
{
	uint64_t k;
	memcpy(&k, sha, 8);   /* a SHA-256: its bytes are already uniform */
	return k;
}

static int ws_reserve(struct winstate *ws, size_t n)
{
	if (n <= ws->cap)
		return 0;
	size_t nslot = 1;
	while (nslot < 2 * n)
		nslot <<= 1;
	struct want *w = realloc(ws->w, n * sizeof(*w));
	if (w)
		ws->w = w;
	uint32_t *sl = realloc(ws->slot, nslot * sizeof(*sl));
	if (sl)
		ws->slot = sl;
	/* Two starts a run at most: what its direct read left, and where
	 * the chunks it skipped lie (skipped_start). */
	struct cas_cursor *st = realloc(ws->starts, 2 * (n / RUN_CHUNKS + 2) * sizeof(*st));
	if (st)
		ws->starts = st;
	if (!w || !sl || !st)
		return crest_errf(-ENOMEM, "allocating restore tables");
	ws->cap = n;
	ws->nslot = nslot;
	return 0;
}

static void ws_free(struct winstate *ws)
{
	free(ws->w);
	free(ws->slot);
	free(ws->starts);
}

static int cursor_cmp(const void *a, const void *b)
{
	const struct cas_cursor *x = a, *y = b;
	if (x->pack != y->pack)
		return x->pack < y->pack ? -1 : 1;
	return x->off < y->off ? -1 : x->off > y->off;
}

/* The wanted chunk with this id, or NULL. */
static struct want *ws_find(struct winstate *ws, const struct cas_stream *st, const uint8_t *sha)
{
	const size_t mask = ws->nslot - 1;
	for (size_t i = id_key(sha) & mask;; i = (i + 1) & mask) {
		uint32_t v = ws->slot[i];
		if (!v)
			return NULL;
		struct want *w = &ws->w[v - 1];
		if (!memcmp(st->ext[w->ext].sha, sha, 32))
			return w;
	}
}

/* A device window of 4 KiB chunks is pitched: slot k of buf holds the
 * record of the window's k-th 4 KiB, header and all, PITCH_REC bytes from
 * the slot before, so that a run of raw records lying back to back in a
 * pack is read with one iovec, not two a record, and reaches the device by
 * one pitched copy that leaves the headers behind. A copy by the kernel
 * into a destination 56 bytes off its source's alignment, record after
 * record, cost restore_ceiling 4-17% against whole records (split+h2d
 * against pitched+h2d on the H100 host). Chunks that are walked or looked
 * up go to their slot's data, holes zero whole slots. */
#define PITCH_DATA 4096u
#define PITCH_REC (CAS_REC_HEADER + PITCH_DATA)

/* Where the byte `at` of the window lies in buf. */
static inline uint8_t *win_at(const struct winstate *ws, uint8_t *buf, uint64_t at)
{
	return ws->pitched ? buf + at / PITCH_DATA * PITCH_REC + CAS_REC_HEADER : buf + at;
}

/* Marks x, now in buf, done, and copies it to the later places in the
 * window that want the same chunk. Returns the wanted chunks it filled. */
static size_t want_done(struct winstate *ws, struct want *x, uint8_t *buf)
{
	size_t filled = 1;
	x->done = true;
	for (uint32_t d = x->next; d; d = ws->w[d - 1].next) {
		memcpy(win_at(ws, buf, ws->w[d - 1].at), win_at(ws, buf, x->at), x->len);
		ws->w[d - 1].done = true;
		filled++;
	}
	return filled;
}

/* Reads the run ws->w[first..last] straight into buf when its records lie
 * as the engine writes new chunks: raw, back to back, in window order, from
 * run->off (the first chunk's record) to run->end (the end of the last
 * one's). The sizes only say the layout may hold; it is trusted one record
 * at a time, so that no header is believed but at a record's start: the
 * first record is where the index says, and each one that checks out (raw,
 * len bytes, its data match the CRC32C) ends where the next begins.
 * One that names another chunk is what a later snapshot leaves where it
 * changed a chunk in place: the records around it are still the run's, so
 * its wanted chunk is only skipped, for cas_reader_get to fetch from where
 * the change put it. (Without this, a snapshot with 2% of its chunks
 * changed was walked almost whole: 0.58 s to restore 8 GiB against 0.36
 * s for its parent.) The first that does not check out (damaged,
 * compressed, another length, a short read) ends the direct read with
 * run->off at it: the walk and cas_reader_get go on from there, name what
 * is wrong and fill again what was read into buf for it and after it, as
 * they fill the skipped ones (skip[0] and skip[1]: the first and last,
 * left SIZE_MAX when none). A run holding a
 * chunk seen earlier in the window is left to the walk: that chunk has no
 * record of its own there, so the layout does not hold, and its place,
 * filled by a copy, must not be read over. Returns the wanted chunks
 * filled, copies included. */
static size_t run_direct(struct worker *wk, const struct cas_stream *st, size_t first, size_t last,
			 uint8_t *buf, struct cas_cursor *run, size_t skip[2])
{
	struct winstate *ws = &wk->ws;
	uint64_t span = 0;
	for (size_t k = first; k <= last; k++) {
		if (ws->w[k].dup)
			return 0;
		span += CAS_REC_HEADER + (uint64_t)ws->w[k].len;
	}
	if (span != run->end - run->off)
		return 0;
	size_t filled = 0;
	for (size_t k = first; k <= last;) {
		int n = 0, niov = 0;
		uint64_t bytes = 0;
		for (; k + n <= last && n < DIRECT_RECS; n++) {
			const struct want *x = &ws->w[k + n];
			if (n && bytes + x->len > DIRECT_BYTES)
				break;
			if (ws->pitched) {
				/* Records whole into their slots: one iovec for
				 * slots in a row (a hole between starts another). */
				uint8_t *rec = win_at(ws, buf, x->at) - CAS_REC_HEADER;
				if (niov && (uint8_t *)wk->iov[niov - 1].iov_base + wk->iov[niov - 1].iov_len == rec)
					wk->iov[niov - 1].iov_len += PITCH_REC;
				else
					wk->iov[niov++] = (struct iovec){ rec, PITCH_REC };
			} else {
				wk->iov[niov++] = (struct iovec){ wk->hdr + (size_t)n * CAS_REC_HEADER, CAS_REC_HEADER };
				wk->iov[niov++] = (struct iovec){ buf + x->at, x->len };
			}
			bytes += x->len;
		}
		const ssize_t got = cas_reader_readv(wk->j->rd, run->pack, run->off, wk->iov, niov);
		wk->direct_reads++;
		wk->direct_bytes += got > 0 ? (uint64_t)got : 0;
		uint64_t pos = 0;   /* bytes of the batch checked */
		for (int b = 0; b < n; b++, k++) {
			struct want *x = &ws->w[k];
			const int ck = got < 0 || pos + CAS_REC_HEADER + x->len > (uint64_t)got
					       ? -EIO
					       : cas_reader_check_raw(ws->pitched ? win_at(ws, buf, x->at) - CAS_REC_HEADER
										  : wk->hdr + (size_t)b * CAS_REC_HEADER,
								      st->ext[x->ext].sha, win_at(ws, buf, x->at), x->len);
			if (ck < 0) {
				run->off += pos;
				return filled;
			}
			pos += CAS_REC_HEADER + x->len;
			if (ck == 0) {
				filled += want_done(ws, x, buf);
			} else {   /* changed in place: found by look-up */
				if (skip[0] == SIZE_MAX)
					skip[0] = k;
				skip[1] = k;
				wk->skipped++;
			}
		}
		run->off += pos;
	}
	return filled;
}

/* The chunks a later snapshot changed in a run were stored together, in
 * the run's order (one ingest job per segment): when the first and last
 * that the direct read skipped (skip[0], skip[1]) lie in one pack with
 * little else between, *sc is a walk over just that stretch (*n counts
 * it), and the chunks are found by two look-ups rather than one each.
 * 0 also when they do not lie so (then each is looked up); a negative
 * errno when the index cannot be read. */
static int skipped_start(struct worker *wk, const struct cas_stream *st, const size_t skip[2], struct cas_cursor *sc,
			 size_t *n)
{
	const struct winstate *ws = &wk->ws;
	struct cas_cursor l;
	int rc = cas_reader_locate(wk->j->rd, st->ext[ws->w[skip[1]].ext].sha, &l);
	if (rc == 0)
		rc = cas_reader_locate(wk->j->rd, st->ext[ws->w[skip[0]].ext].sha, sc);
	if (rc == -ENOENT)
		return 0;
	if (rc < 0)
		return rc;
	/* Records between them beyond twice what the skipped ones would fill:
	 * the changes were not stored together; reading that stretch would
	 * cost more than the look-ups. */
	uint64_t bytes = 0;
	for (size_t k = skip[0]; k <= skip[1]; k++)
		if (!ws->w[k].done)   /* between the two, only the skipped are not */
			bytes += CAS_REC_HEADER + (uint64_t)ws->w[k].len;
	if (l.pack != sc->pack || l.off < sc->off || l.end - sc->off > 2 * bytes)
		return 0;
	sc->end = l.end;
	(*n)++;
	return 0;
}

/* How far in from a run's ends run_anchors looks for chunks to anchor it. */
#define ANCHOR_TRIES 3

/* Where the run ws->w[first..last] can be read direct: 0 with *a..*b (at
 * most ANCHOR_TRIES - 1 chunks in from either end) and *fc from the record
 * of *a to the end of that of *b (fc->end), when those two lie in one pack
 * exactly as far apart as the records of *a..*b would. Only the run's ends
 * are looked up, so a later snapshot that changed its first or last chunk
 * (now in another pack) left the whole run to the walk; the next chunks in
 * are tried instead, and what lies outside *a..*b is fetched by look-up.
 * 1 with *fc at the first chunk's record, to be walked, when no pair fits
 * (fc->end the last one's end, when it lies after it in the same pack, as
 * the walk's bound; else 0); -ENOENT when the first chunk is not found
 * either; another negative errno when the index cannot be read. */
static int run_anchors(struct worker *wk, const struct cas_stream *st, size_t first, size_t last, size_t *a,
		       size_t *b, struct cas_cursor *fc)
{
	const struct winstate *ws = &wk->ws;
	struct cas_cursor at[2][ANCHOR_TRIES];
	int got[2][ANCHOR_TRIES] = { { 1, 1, 1 }, { 1, 1, 1 } };   /* 1: not looked up yet */
	_Static_assert(ANCHOR_TRIES == 3, "got[][] is initialized for 3 tries");
	uint64_t span = 0;
	for (size_t k = first; k <= last; k++)
		span += CAS_REC_HEADER + (uint64_t)ws->w[k].len;
	for (size_t skip = 0; skip <= 2 * (ANCHOR_TRIES - 1); skip++) {
		for (size_t da = 0; da <= skip; da++) {
			const size_t db = skip - da;
			if (da >= ANCHOR_TRIES || db >= ANCHOR_TRIES || first + da > last - db || last - first < db)
				continue;
			const size_t x = first + da, y = last - db;
			for (int e = 0; e < 2; e++) {
				const size_t d = e ? db : da, k = e ? y : x;
				if (got[e][d] == 1) {
					got[e][d] = cas_reader_locate(wk->j->rd, st->ext[ws->w[k].ext].sha, &at[e][d]);
					if (got[e][d] < 0 && got[e][d] != -ENOENT)
						return got[e][d];
				}
			}
			if (got[0][da] || got[1][db] || at[0][da].pack != at[1][db].pack || at[1][db].off < at[0][da].off)
				continue;
			uint64_t want = span;
			for (size_t k = first; k < x; k++)
				want -= CAS_REC_HEADER + (uint64_t)ws->w[k].len;
			for (size_t k = y + 1; k <= last; k++)
				want -= CAS_REC_HEADER + (uint64_t)ws->w[k].len;
			if (at[1][db].end - at[0][da].off != want)
				continue;
			*a = x;
			*b = y;
			*fc = at[0][da];
			fc->end = at[1][db].end;
			return 0;
		}
	}
	if (got[0][0] != 0)
		return -ENOENT;
	/* The walk goes up to the last chunk's record where that lies after
	 * the first's in the same pack (a run of compressed records, whose
	 * sizes the manifest does not give), else MISS_MAX records past. */
	*fc = at[0][0];
	fc->end = got[1][0] == 0 && at[1][0].pack == fc->pack && at[1][0].off >= fc->off ? at[1][0].end : 0;
	return 1;
}

static int window_fill(struct worker *wk, const struct window *w, uint8_t *buf, bool host, bool pitch)
{
	const struct job *j = wk->j;
	const struct cas_stream *st = j->dst[w->dst].st;
	struct winstate *ws = &wk->ws;

	/* The window's chunks; pitched when all are 4 KiB, and so are its
	 * holes, and the slots fit the buffer. */
	size_t n = 0;
	uint64_t maxlen = 0;
	bool pitched = pitch && w->in % PITCH_DATA == 0 && w->len / PITCH_DATA * PITCH_REC <= j->buf_cap;
	uint64_t o = 0, in = w->in;
	for (uint64_t e = w->ext; o < w->len; e++, in = 0) {
		const struct cas_extent *x = &st->ext[e];
		if (x->hole) {
			const uint64_t k = x->len - in < w->len - o ? x->len - in : w->len - o;
			pitched = pitched && k % PITCH_DATA == 0;
			o += k;
			continue;
		}
		pitched = pitched && x->len == PITCH_DATA;
		if (x->len > maxlen)
			maxlen = x->len;
		n++;
		o += x->len;
	}
	if (maxlen > CAS_CHUNK_MAX)
		return crest_errx(-EBADMSG, "snapshot %s, stream %s: a chunk of %llu bytes is larger than any crest "
				  "writes", j->c->snapshot, st->name, (unsigned long long)maxlen);
	/* The bounce buffer, as large as the window's largest chunk. */
	if (host && maxlen > wk->scratch_cap) {
		void *sc = realloc(wk->scratch, maxlen);
		if (!sc)
			return crest_errf(-ENOMEM, "allocating a restore buffer");
		wk->scratch = sc;
		wk->scratch_cap = maxlen;
	}
	void *bounce = host ? wk->scratch : NULL;
	ws->pitched = pitched;
	wk->pitched += pitched;
	/* Holes zeroed (whole slots, when pitched). A file's holes are never
	 * written; a pipe sends them as zeros. */
	if (!j->dst[w->dst].file || j->dst[w->dst].pipe) {
		o = 0;
		in = w->in;
		for (uint64_t e = w->ext; o < w->len; e++, in = 0) {
			const struct cas_extent *x = &st->ext[e];
			if (!x->hole) {
				o += x->len;
				continue;
			}
			const uint64_t k = x->len - in < w->len - o ? x->len - in : w->len - o;
			if (pitched)
				memset(win_at(ws, buf, o) - CAS_REC_HEADER, 0, k / PITCH_DATA * PITCH_REC);
			else
				memset(buf + o, 0, k);
			o += k;
		}
	}
	if (n == 0) {   /* holes only: no tables (perhaps none allocated yet) */
		ws->n = 0;
		wk->windows++;
		return 0;
	}
	uint64_t t0 = time_now_ns();
	int rc = ws_reserve(ws, n);
	if (rc < 0)
		return rc;
	memset(ws->slot, 0, ws->nslot * sizeof(*ws->slot));
	ws->n = 0;
	o = 0;
	in = w->in;
	for (uint64_t e = w->ext; o < w->len; e++, in = 0) {
		const struct cas_extent *x = &st->ext[e];
		if (x->hole) {
			o += x->len - in < w->len - o ? x->len - in : w->len - o;
			continue;
		}
		struct want *nw = &ws->w[ws->n];
		*nw = (struct want){ .ext = e, .at = o, .len = (uint32_t)x->len };
		struct want *same = ws_find(ws, st, x->sha);
		if (same) {
			/* The same chunk twice in a window: filled from the first. */
			nw->dup = true;
			nw->next = same->next;
			same->next = (uint32_t)ws->n + 1;
		} else {
			const size_t mask = ws->nslot - 1;
			size_t i = id_key(x->sha) & mask;
			while (ws->slot[i])
				i = (i + 1) & mask;
			ws->slot[i] = (uint32_t)ws->n + 1;
		}
		ws->n++;
		o += x->len;
	}

	uint64_t t1 = time_now_ns();
	wk->t_table += t1 - t0;
	/* Where the runs start, and how far walks may go: the first and last
	 * chunk of every RUN_CHUNKS are looked up. Runs that can be are read
	 * direct on the way; what they leave is walked. */
	size_t nstart = 0, left = ws->n;
	uint64_t t_direct = 0;
	for (size_t i = 0; i < ws->n && !atomic_load(&j->stop); i += RUN_CHUNKS) {
		const size_t last = i + RUN_CHUNKS < ws->n ? i + RUN_CHUNKS - 1 : ws->n - 1;
		struct cas_cursor *fc = &ws->starts[nstart];
		size_t a, b;
		rc = run_anchors(wk, st, i, last, &a, &b, fc);
		if (rc == 0) {
			/* The run's records lie back to back (one ingest job
			 * per segment): what the direct read leaves is walked
			 * up to its last one and not, as it once was, MISS_MAX
			 * records past it. */
			const uint64_t td = time_now_ns();
			size_t skip[2] = { SIZE_MAX, SIZE_MAX };
			const size_t got = run_direct(wk, st, a, b, buf, fc, skip);
			left -= got;
			wk->direct += got;
			t_direct += time_now_ns() - td;
			if (fc->off < fc->end)
				nstart++;   /* not read whole: walked */
			if (skip[0] != SIZE_MAX)
				rc = skipped_start(wk, st, skip, &ws->starts[nstart], &nstart);
		} else if (rc == 1) {
			nstart++;
			rc = 0;
		}
		if (rc < 0 && rc != -ENOENT)
			return crest_errctx(rc, "snapshot %s, stream %s, offset %llu", j->c->snapshot, st->name,
					    (unsigned long long)(w->off + ws->w[i].at));
	}
	qsort(ws->starts, nstart, sizeof(*ws->starts), cursor_cmp);
	uint64_t t2 = time_now_ns();
	wk->t_locate += t2 - t1 - t_direct;
	wk->t_direct += t_direct;

	struct cas_cursor done = { .valid = false };   /* walked up to here */
	struct cas_span *sp = &wk->span;
	sp->len = 0;
	for (size_t s = 0; s < nstart && left && !atomic_load(&j->stop); s++) {
		sp->cur = ws->starts[s];
		if (done.valid && done.pack == sp->cur.pack && sp->cur.off < done.off)
			sp->cur.off = done.off;   /* a record boundary the last walk reached */
		unsigned miss = 0;
		struct cas_rec rec;
		while (left && miss < MISS_MAX && cas_reader_next(j->rd, sp, &rec) == 0) {
			wk->walked++;
			struct want *hit = ws_find(ws, st, rec.sha);
			if (!hit || hit->done) {
				miss++;
				continue;
			}
			miss = 0;
			if (cas_reader_take(j->rd, &rec, win_at(ws, buf, hit->at), hit->len, bounce) < 0)
				continue;   /* left for cas_reader_get, which names it */
			left -= want_done(ws, hit, buf);
		}
		done = sp->cur;
	}

	uint64_t t3 = time_now_ns();
	wk->t_walk += t3 - t2;
	wk->missed += left;
	wk->windows++;
	/* What the walks did not meet, one by one. */
	for (size_t i = 0; i < ws->n && left; i++) {
		struct want *x = &ws->w[i];
		if (x->done)
			continue;
		if (atomic_load(&j->stop))
			return 0;
		rc = cas_reader_get(j->rd, st->ext[x->ext].sha, win_at(ws, buf, x->at), x->len, bounce);
		if (rc < 0)
			return crest_errctx(rc, "snapshot %s, stream %s, offset %llu", j->c->snapshot, st->name,
					    (unsigned long long)(w->off + x->at));
		left -= want_done(ws, x, buf);
	}
	wk->t_miss += time_now_ns() - t3;
	return 0;
}

static int worker_sync(struct worker *wk, int b)
{
	if (!wk->inflight[b])
		return 0;
	wk->inflight[b] = false;
	const uint64_t t0 = time_now_ns();
	int rc = cudrv_check(wk->j->o->d, wk->j->o->d->EventSynchronize(wk->ev[b]),
			     "waiting for a host-to-device copy (cuEventSynchronize)");
	const uint64_t dt = time_now_ns() - t0;
	wk->t_wait += dt;
	struct restore_phases *ph = wk->j->c->phases;
	if (ph && rc == 0) {
		restore_phase_add(ph, RESTORE_PH_DEVICE, dt, wk->inflight_len[b]);
	}
	return rc;
}

/* window_fill with its time and bytes added to c->phases when it is set:
 * the table and look-ups as lookup, the reads (checked and unpacked on the
 * way) as read. */
static int window_fill_timed(struct worker *wk, const struct window *w, uint8_t *buf, bool host, bool pitch)
{
	struct restore_phases *ph = wk->j->c->phases;
	if (!ph)
		return window_fill(wk, w, buf, host, pitch);
	const uint64_t lk = wk->t_table + wk->t_locate, rd = wk->t_direct + wk->t_walk + wk->t_miss;
	const int rc = window_fill(wk, w, buf, host, pitch);
	if (rc == 0) {
		restore_phase_add(ph, RESTORE_PH_LOOKUP, wk->t_table + wk->t_locate - lk, 0);
		restore_phase_add(ph, RESTORE_PH_READ, wk->t_direct + wk->t_walk + wk->t_miss - rd, w->len);
	}
	return rc;
}

/* A file's window, filled by window_fill: every chunk's SHA-256 against
 * the manifest, before any of it is written. The CRC32C that window_fill
 * checks only says the record is as it was written, the SHA-256 also that
 * what was written is the chunk the manifest names: a file restore keeps
 * the promise of restore.h. A chunk seen twice in the window was copied
 * from its first place, so that one is hashed alone. */
static int window_check(struct worker *wk, const struct window *w, const uint8_t *buf)
{
	const struct job *j = wk->j;
	const struct cas_stream *st = j->dst[w->dst].st;
	const struct winstate *ws = &wk->ws;
	for (size_t i = 0; i < ws->n; i++) {
		const struct want *x = &ws->w[i];
		if (x->dup)
			continue;
		const uint8_t *sha = st->ext[x->ext].sha;
		uint8_t sum[SHA256_LEN];
		int rc = sha256_hash(wk->h, buf + x->at, x->len, sum);
		if (rc == 0 && memcmp(sum, sha, SHA256_LEN)) {
			char hex[SHA256_HEX_LEN + 1];
			hex_encode(sha, SHA256_LEN, hex);
			rc = crest_errx(-EBADMSG, "chunk %.16s is damaged: its bytes do not hash to its name", hex);
		}
		if (rc < 0)
			return crest_errctx(rc, "snapshot %s, stream %s, offset %llu", j->c->snapshot, st->name,
					    (unsigned long long)(w->off + x->at));
	}
	return 0;
}

/* len bytes at off of file t, through its mapping where it has one: the
 * pages are made first with MADV_POPULATE_WRITE, which reports a file
 * system that cannot back them (full) as an error where a store into the
 * mapping would raise SIGBUS. */
static int write_at(const struct restore_gpu_dst *t, uint8_t *map, const uint8_t *data, uint64_t len,
		    uint64_t off)
{
	const struct cas_stream *st = t->st;
	if (map) {
		const uint64_t ps = (uint64_t)sysconf(_SC_PAGESIZE);
		const uint64_t a = off - off % ps;
		if (madvise(map + a, len + off - a, MADV_POPULATE_WRITE) == 0) {
			memcpy(map + off, data, len);
			/* The whole pages written leave this mapping (the file keeps
			 * them), so each thread takes down its own page table
			 * entries, rather than one munmap at the end all 2 M of an
			 * 8 GiB file (0.5 s on the GPU host: bench/store/tmpfs_fill). */
			const uint64_t b = (off + ps - 1) / ps * ps, e = (off + len) / ps * ps;
			if (e > b)
				madvise(map + b, e - b, MADV_DONTNEED);
			return 0;
		}
		if (errno != EINVAL)   /* EINVAL: a kernel before 5.14; pwrite does */
			return crest_errf(errno == EFAULT ? -ENOSPC : -errno, "cannot write %s at offset %llu",
					  st->name, (unsigned long long)off);
	}
	for (uint64_t done = 0; done < len;) {
		const ssize_t n = pwrite(t->fd, data + done, len - done, (off_t)(off + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return crest_errf(n < 0 ? -errno : -EIO, "cannot write %s at offset %llu", st->name,
					  (unsigned long long)(off + done));
		done += (uint64_t)n;
	}
	return 0;
}

/* Waits until the reader has taken every byte of the pipe before end: what
 * was sent (emit_off) less what is still in the pipe (FIONREAD). emit_off
 * is read first, so that bytes another thread sends meanwhile can only make
 * the estimate low, never high; the pipe may then hold more than emit_off
 * says (a window being sent), which is not drained either. end UINT64_MAX:
 * until the pipe is empty (after a failed send, whose bytes emit_off does
 * not count). -EPIPE when the reader went away. */
static int pipe_drained(struct job *j, int fd, uint64_t end)
{
	for (;;) {
		pthread_mutex_lock(&j->lock);
		const uint64_t sent = j->emit_off;
		pthread_mutex_unlock(&j->lock);
		int queued = 0;
		if (ioctl(fd, FIONREAD, &queued) < 0)
			return crest_errf(-errno, "cannot see how much of a pipe was read (FIONREAD)");
		if (queued == 0 && end == UINT64_MAX)
			return 0;
		if (queued >= 0 && (uint64_t)queued <= sent && sent - (uint64_t)queued >= end)
			return 0;
		struct pollfd p = { .fd = fd, .events = 0 };
		if (poll(&p, 1, 0) == 1 && (p.revents & POLLERR))
			return crest_errx(-EPIPE, "the pipe's reader stopped reading");
		const struct timespec wait = { 0, 50 * 1000 };   /* 1 MiB of pipe drains in ~0.6 ms */
		nanosleep(&wait, NULL);
	}
}

/* A checked window into a pipe, once every window before it is written:
 * the whole window, holes as the zeros window_fill left there. A reader
 * gone (EPIPE: the calling thread keeps SIGPIPE blocked) is an error like
 * any other; it stops the other threads.
 * With j->splice the pipe takes the window's pages rather than a copy
 * (vmsplice: on the GPU host 1.9 GB/s into a 1 MiB pipe against write's
 * 1.0, the reader's page faults being the rest). The pages stay the pipe's
 * until the reader has read them: the thread must not touch its buffer again
 * before pipe_drained says so (wk->spliced_end). */
static int window_emit(struct worker *wk, const struct window *w, const uint8_t *buf)
{
	struct job *j = wk->j;
	const struct restore_gpu_dst *t = &j->dst[w->dst];
	pthread_mutex_lock(&j->lock);
	while (j->emit_off != w->off && !atomic_load(&j->stop))
		pthread_cond_wait(&j->turn, &j->lock);
	pthread_mutex_unlock(&j->lock);
	if (atomic_load(&j->stop))
		return 0;   /* another thread failed: its error is the job's */
	int rc = 0;
	/* What this window leaves in the pipe: all of it, or after a failed
	 * send an unknown part, which only an empty pipe says is read. */
	if (j->splice)
		wk->spliced_end = UINT64_MAX;
	for (uint64_t done = 0; done < w->len;) {
		struct iovec v = { (void *)(buf + done), w->len - done };
		const ssize_t n = j->splice ? vmsplice(t->fd, &v, 1, 0) : write(t->fd, buf + done, w->len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = errno == EPIPE ? crest_errx(-EPIPE, "cannot send %s: its reader stopped reading at offset %llu",
							 t->st->name, (unsigned long long)(w->off + done))
					    : crest_errf(n < 0 ? -errno : -EIO, "cannot send %s at offset %llu",
							 t->st->name, (unsigned long long)(w->off + done));
			break;
		}
		done += (uint64_t)n;
	}
	pthread_mutex_lock(&j->lock);
	if (rc == 0) {
		j->emit_off += w->len;
		pthread_cond_broadcast(&j->turn);
		if (j->splice)
			wk->spliced_end = w->off + w->len;
	}
	pthread_mutex_unlock(&j->lock);
	return rc;
}

/* A checked window into its file: one write per stretch of data between
 * holes, which are left as the file's truncation made them. */
static int window_write(struct worker *wk, const struct window *w, const uint8_t *buf)
{
	const struct restore_gpu_dst *t = &wk->j->dst[w->dst];
	if (t->pipe)
		return window_emit(wk, w, buf);
	uint8_t *map = wk->j->map ? wk->j->map[w->dst] : NULL;
	uint64_t o = 0, in = w->in, run = 0;   /* run: data bytes before o not yet written */
	int rc = 0;
	for (uint64_t e = w->ext; rc == 0 && o < w->len; e++, in = 0) {
		const struct cas_extent *x = &t->st->ext[e];
		const uint64_t k = x->len - in < w->len - o ? x->len - in : w->len - o;
		if (x->hole && run) {
			rc = write_at(t, map, buf + o - run, run, w->off + o - run);
			run = 0;
		} else if (!x->hole) {
			run += k;
		}
		o += k;
	}
	if (rc == 0 && run)
		rc = write_at(t, map, buf + o - run, run, w->off + o - run);
	return rc;
}

/* A window into a file: filled into the thread's own buffer, checked,
 * written; c->phases gets the hashing as check and the writes as copy. */
static int window_to_file(struct worker *wk, const struct window *w)
{
	int rc = 0;
	if (wk->spliced_end) {   /* the pipe must be done with the buffer first */
		rc = pipe_drained(wk->j, wk->j->dst[w->dst].fd, wk->spliced_end);
		wk->spliced_end = 0;
	}
	if (rc == 0)
		rc = window_fill_timed(wk, w, wk->wbuf, true, false);
	const uint64_t t0 = time_now_ns();
	if (rc == 0)
		rc = window_check(wk, w, wk->wbuf);
	const uint64_t t1 = time_now_ns();
	if (rc == 0)
		rc = window_write(wk, w, wk->wbuf);
	const uint64_t t2 = time_now_ns();
	wk->t_hash += t1 - t0;
	wk->t_write += t2 - t1;
	struct restore_phases *ph = wk->j->c->phases;
	if (ph && rc == 0) {
		uint64_t data = 0;   /* bytes checked and written: holes are neither */
		for (size_t i = 0; i < wk->ws.n; i++)
			data += wk->ws.w[i].len;
		restore_phase_add(ph, RESTORE_PH_CHECK, t1 - t0, data);
		restore_phase_add(ph, RESTORE_PH_COPY, t2 - t1, data);
	}
	return rc;
}

static void worker_drop_ctx(struct worker *wk)
{
	const struct cudrv *d = wk->j->o->d;
	if (!wk->ctx)
		return;
	d->CtxSetCurrent(wk->ctx);
	for (int b = 0; b < 2; b++) {
		worker_sync(wk, b);
		if (wk->ev[b])
			d->EventDestroy(wk->ev[b]);
		wk->ev[b] = NULL;
	}
	if (wk->stream)
		d->StreamDestroy(wk->stream);
	wk->stream = NULL;
	wk->ctx = NULL;
}

/* Makes ctx current, with a stream and events that belong to it. */
static int worker_use_ctx(struct worker *wk, CUcontext ctx)
{
	const struct cudrv *d = wk->j->o->d;
	if (wk->ctx == ctx)
		return 0;
	worker_drop_ctx(wk);
	int rc = cudrv_check(d, d->CtxSetCurrent(ctx), "entering the region's context (cuCtxSetCurrent)");
	if (rc == 0)
		rc = cudrv_check(d, d->StreamCreate(&wk->stream, CU_STREAM_NON_BLOCKING),
				 "creating a restore stream (cuStreamCreate)");
	for (int b = 0; rc == 0 && b < 2; b++)
		rc = cudrv_check(d, d->EventCreate(&wk->ev[b], CU_EVENT_DISABLE_TIMING),
				 "creating a restore event (cuEventCreate)");
	wk->ctx = ctx;   /* set even on failure: drop_ctx frees what was made */
	return rc;
}

static void *worker_main(void *arg)
{
	struct worker *wk = arg;
	struct job *j = wk->j;
	const struct cudrv *d = j->o->d;
	int rc = 0, b = 0;
	wk->t_begin = time_now_ns();
	while (!atomic_load(&j->stop)) {
		struct window w;
		bool got;
		rc = job_next(j, wk->home, &w, &got);
		if (rc < 0 || !got)
			break;
		const struct restore_gpu_dst *t = &j->dst[w.dst];
		if (t->file || t->host) {
			rc = t->file ? window_to_file(wk, &w) : window_fill_timed(wk, &w, t->host + w.off, true, false);
			if (rc < 0)
				break;
			atomic_fetch_add(&j->done, w.len);
			continue;
		}
		rc = worker_use_ctx(wk, t->ctx);
		if (rc == 0)
			rc = worker_sync(wk, b);  /* the buffer's previous copy must be done */
		if (rc == 0)
			rc = window_fill_timed(wk, &w, wk->buf[b], false, j->pitch);
		if (rc < 0 || atomic_load(&j->stop))
			break;
		if (wk->ws.pitched) {
			const CUDA_MEMCPY2D m = {
				.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = wk->buf[b] + CAS_REC_HEADER,
				.srcPitch = PITCH_REC, .dstMemoryType = CU_MEMORYTYPE_DEVICE,
				.dstDevice = t->dst + w.off, .dstPitch = PITCH_DATA, .WidthInBytes = PITCH_DATA,
				.Height = w.len / PITCH_DATA,
			};
			rc = cudrv_check(d, d->Memcpy2DAsync(&m, wk->stream), "copying to the device (cuMemcpy2DAsync)");
		} else {
			rc = cudrv_check(d, d->MemcpyHtoDAsync(t->dst + w.off, wk->buf[b], w.len, wk->stream),
					 "copying to the device (cuMemcpyHtoDAsync)");
		}
		if (rc == 0)
			rc = cudrv_check(d, d->EventRecord(wk->ev[b], wk->stream), "recording a copy (cuEventRecord)");
		if (rc < 0) {
			rc = crest_errctx(rc, "stream %s, offset %llu", t->st->name, (unsigned long long)w.off);
			break;
		}
		wk->inflight[b] = true;
		wk->inflight_len[b] = w.len;
		wk->t_filled = time_now_ns();
		atomic_fetch_add(&j->done, w.len);
		b ^= 1;
	}
	/* The buffer is freed after this: the pipe must be done with it. A
	 * reader that stops reading is gone (its end closed: EPIPE). */
	if (wk->spliced_end) {
		const int drc = pipe_drained(j, j->dst[0].fd, wk->spliced_end);
		rc = rc < 0 ? rc : drc;
		wk->spliced_end = 0;
	}
	if (rc < 0)
		job_fail(j, rc);
	for (int i = 0; i < 2 && wk->ctx; i++) {
		d->CtxSetCurrent(wk->ctx);
		int src = worker_sync(wk, i);
		if (src < 0)
			job_fail(j, src);
	}
	worker_drop_ctx(wk);
	wk->t_end = time_now_ns();
	return NULL;
}

/* One line per thread and a sum, on stderr: where a restore's time went. */
static void trace_workers(const struct worker *wk, unsigned n, uint64_t t_start, uint64_t wall_ns)
{
	struct worker sum = { 0 };
	uint64_t reads = 0, read_bytes = 0;
	for (unsigned i = 0; i < n; i++) {
		const struct worker *w = &wk[i];
		fprintf(stderr, "crest trace: restore thread %u: table %.3f locate %.3f direct %.3f walk %.3f "
			"miss %.3f wait %.3f hash %.3f write %.3f s; %llu windows, %llu chunks direct, "
			"%llu skipped there, %llu records walked, %llu missed, %llu preadvs and %llu preads, %.1f MB read; "
			"%llu windows pitched; "
			"began %.3f, last window filled %.3f, ended %.3f s after the start\n",
			i, w->t_table / 1e9, w->t_locate / 1e9, w->t_direct / 1e9, w->t_walk / 1e9, w->t_miss / 1e9,
			w->t_wait / 1e9, w->t_hash / 1e9, w->t_write / 1e9, (unsigned long long)w->windows,
			(unsigned long long)w->direct, (unsigned long long)w->skipped,
			(unsigned long long)w->walked, (unsigned long long)w->missed,
			(unsigned long long)w->direct_reads, (unsigned long long)w->span.nreads,
			(w->direct_bytes + w->span.read_bytes) / 1e6, (unsigned long long)w->pitched,
			w->t_begin ? (w->t_begin - t_start) / 1e9 : 0.0, w->t_filled ? (w->t_filled - t_start) / 1e9 : 0.0,
			w->t_end ? (w->t_end - t_start) / 1e9 : 0.0);
		sum.t_direct += w->t_direct;
		sum.t_walk += w->t_walk;
		sum.t_wait += w->t_wait;
		sum.direct += w->direct;
		sum.skipped += w->skipped;
		sum.walked += w->walked;
		sum.missed += w->missed;
		sum.direct_reads += w->direct_reads;
		sum.direct_bytes += w->direct_bytes;
		reads += w->span.nreads;
		read_bytes += w->span.read_bytes;
	}
	fprintf(stderr, "crest trace: restore: %u threads, %.3f s wall; direct %.3f s, walk %.3f s, wait %.3f s "
		"summed; %llu chunks direct, %llu records walked, %llu skipped in direct reads, %llu chunks "
		"looked up one by one; %.1f MB read: %.1f MB in %llu preadvs, "
		"%.1f MB in %llu preads\n", n, wall_ns / 1e9, sum.t_direct / 1e9, sum.t_walk / 1e9,
		sum.t_wait / 1e9, (unsigned long long)sum.direct, (unsigned long long)sum.walked,
		(unsigned long long)sum.skipped, (unsigned long long)sum.missed,
		(sum.direct_bytes + read_bytes) / 1e6, sum.direct_bytes / 1e6,
		(unsigned long long)sum.direct_reads, read_bytes / 1e6, (unsigned long long)reads);
}

static void unmap_files(struct job *j)
{
	for (size_t i = 0; j->map && i < j->n; i++)
		if (j->map[i])
			munmap(j->map[i], (size_t)j->dst[i].st->size);
	free(j->map);
	j->map = NULL;
}

int restore_streams_to_device(const struct restore_ctx *c, const struct restore_gpu_dst *dst, size_t n,
			      const struct restore_gpu_opts *o)
{
	const uint64_t t_entry = time_now_ns();
	bool device = false, file = false;
	for (size_t i = 0; i < n; i++) {
		device |= !dst[i].host && !dst[i].file;
		file |= dst[i].file;
	}
	for (size_t i = 0; i < n; i++)
		if (dst[i].pipe && (n != 1 || !dst[i].file))
			return crest_errx(-EINVAL, "a pipe is restored alone, as a file");
	if (device && (o->nbufs < 2 || !o->d))
		return crest_errx(-EINVAL, "restoring to the device needs the driver and two staging buffers");
	struct job j = { .c = c, .dst = dst, .n = n, .o = o, .win = o->buf_bytes ? o->buf_bytes : 8u << 20 };
	for (size_t i = 0; i < n; i++)
		j.left += dst[i].st->size;
	j.cur = calloc(n ? n : 1, sizeof(*j.cur));
	if (!j.cur)
		return crest_errf(-ENOMEM, "starting a restore of %zu streams", n);
	for (size_t i = 0; i < n; i++) {
		unsigned g = 0;
		while (g < j.ncur && j.cur[g].key != dst_key(&dst[i]))
			g++;
		if (g == j.ncur)
			j.cur[j.ncur++] = (struct cursor){ .key = dst_key(&dst[i]), .dst = i };
	}
	/* No pass over every extent here (2 M of them, 96 MB, took 10-13 ms
	 * of an 8 GiB restore's 0.33 s): each window's table is built from
	 * its own, and checks them. */
	j.buf_cap = j.win;
	if (device && o->d->Memcpy2DAsync) {
		/* Windows whose pitched slots (window_fill) fill a buffer, in
		 * whole segments: windows that begin where the engine's runs
		 * of records do are what lets them be read direct. Pitched
		 * only where that costs a quarter of the window at most: a
		 * 4 MiB buffer (one segment) would hold no whole segment's
		 * slots, and windows cut off segment bounds restored test_gpu
		 * three times slower; 8 MiB ones would hold half as much. */
		size_t win = j.win / PITCH_REC * PITCH_DATA;
		if (o->win_step)
			win -= win % o->win_step;
		if (win > 0 && win >= j.win / 4 * 3) {
			j.pitch = true;
			j.win = win;
		}
	}
	j.win_step = o->win_step && o->win_step < j.win ? o->win_step : 0;
	unsigned threads = c->threads;
	if (!threads)
		threads = par_cores();
	if (device && threads > o->nbufs / 2)
		threads = o->nbufs / 2;
	/* No more threads than windows of a step: a small file is restored by
	 * one, without a thread of its own (a tree of many small files would
	 * otherwise start and stop threads for each). */
	const uint64_t step = j.win_step ? j.win_step : j.win;
	if (threads > (j.left + step - 1) / step)
		threads = (unsigned)((j.left + step - 1) / step);
	threads = threads ? threads : 1;
	j.threads = threads;
	const size_t wbuf = j.left < j.win ? (size_t)j.left : j.win;
	/* Several threads write a tmpfs file through a shared mapping:
	 * pwrite()s to one file take its inode lock in turn, so they do not
	 * scale past about one thread's speed, where page faults do (8 GiB
	 * into /dev/shm from 16 threads on the GPU host, bench/store/tmpfs_fill:
	 * pwrite 0.83 GB/s, a mapping 3.6-4.9). On ext4 a mapping costs more
	 * per page than pwrite (page_mkwrite's block reservations: a 1 GiB
	 * crest get from 2 threads here took 1.2-1.7 s against 0.9-1.3), so
	 * other file systems, one thread alone, and files that cannot be
	 * mapped (opened write-only) take pwrite. */
	if (file && threads > 1)
		j.map = calloc(n, sizeof(*j.map));
	for (size_t i = 0; j.map && i < n; i++) {
		struct statfs sf;
		if (!dst[i].file || !dst[i].st->size || dst[i].st->size > SIZE_MAX || fstatfs(dst[i].fd, &sf) < 0 ||
		    sf.f_type != TMPFS_MAGIC)
			continue;
		void *p = mmap(NULL, (size_t)dst[i].st->size, PROT_READ | PROT_WRITE, MAP_SHARED, dst[i].fd, 0);
		j.map[i] = p == MAP_FAILED ? NULL : p;
	}
	const uint64_t t_start = time_now_ns();
	j.rd = c->reader;
	int rc = j.rd ? 0 : cas_reader_open(c->store, &j.rd);
	if (rc < 0) {
		unmap_files(&j);
		free(j.cur);
		return rc;
	}
	pthread_mutex_init(&j.lock, NULL);
	pthread_cond_init(&j.turn, NULL);
	struct stat pst;
	j.splice = n == 1 && dst[0].pipe && fstat(dst[0].fd, &pst) == 0 && S_ISFIFO(pst.st_mode);
	CUcontext saved = NULL;
	if (device)
		o->d->CtxGetCurrent(&saved);
	struct worker *wk = calloc(threads, sizeof(*wk));
	pthread_t *t = calloc(threads, sizeof(*t));
	rc = wk && t ? 0 : crest_errf(-ENOMEM, "starting restore threads");
	unsigned started = 0, ran = 0;   /* threads started; workers run, this thread's included */
	for (unsigned i = 0; rc == 0 && i < threads; i++) {
		wk[i].j = &j;
		wk[i].home = j.ncur ? i % j.ncur : 0;
		if (device) {
			wk[i].buf[0] = o->bufs[2 * i];
			wk[i].buf[1] = o->bufs[2 * i + 1];
		}
		wk[i].span.buf = mem_big_alloc(SPAN_BYTES);
		wk[i].span.cap = SPAN_BYTES;
		wk[i].iov = malloc(2 * DIRECT_RECS * sizeof(*wk[i].iov));
		wk[i].hdr = malloc(DIRECT_RECS * CAS_REC_HEADER);
		if (file) {
			wk[i].wbuf = mem_big_alloc(wbuf);
			rc = sha256_hasher_new(&wk[i].h);
		}
		if (rc < 0)
			break;
		if (!wk[i].span.buf || !wk[i].iov || !wk[i].hdr || (file && !wk[i].wbuf)) {
			rc = crest_errf(-ENOMEM, "allocating restore buffers");
			break;
		}
		if (threads == 1 && !device) {
			worker_main(&wk[i]);   /* the calling thread's own work */
			ran = 1;
			break;
		}
		int prc = pthread_create(&t[i], NULL, worker_main, &wk[i]);
		if (prc != 0) {
			rc = crest_errf(-prc, "starting restore threads");
			break;
		}
		started++;
	}
	if (rc < 0)
		job_fail(&j, rc);
	/* The progress line goes on while the threads run, from this thread. */
	for (unsigned i = 0; i < started;) {
		if (!c->progress) {
			pthread_join(t[i++], NULL);
			continue;
		}
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 100 * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		if (pthread_timedjoin_np(t[i], NULL, &ts) == 0)
			i++;
		progress_update(c->progress, c->progress_base + atomic_load(&j.done));
	}
	if (c->progress)
		progress_update(c->progress, c->progress_base + atomic_load(&j.done));
	const bool trace = getenv("CREST_TRACE") != NULL;
	const uint64_t t_joined = time_now_ns();
	if (trace)
		trace_workers(wk, started + ran, t_start, t_joined - t_start);
	for (unsigned i = 0; wk && i < threads; i++) {
		free(wk[i].scratch);
		free(wk[i].span.buf);
		free(wk[i].iov);
		free(wk[i].hdr);
		free(wk[i].wbuf);
		sha256_hasher_free(wk[i].h);
		ws_free(&wk[i].ws);
	}
	free(wk);
	free(t);
	if (device)
		o->d->CtxSetCurrent(saved);
	unmap_files(&j);
	if (j.rd != c->reader)
		cas_reader_close(j.rd);
	pthread_mutex_destroy(&j.lock);
	pthread_cond_destroy(&j.turn);
	free(j.cur);
	if (trace)
		fprintf(stderr, "crest trace: restore: %.3f s before the threads began, %.3f s after they ended\n",
			(t_start - t_entry) / 1e9, (time_now_ns() - t_joined) / 1e9);
	if (j.err) {
		crest_errset_str(j.msg);
		return j.err;
	}
	return 0;
}
