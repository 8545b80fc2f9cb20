/*
 * workers.c - the worker threads: each takes a segment from the job queue,
 * chunks it, hashes each chunk, decides whether the store has it (zeros, the
 * parent's chunk at the same place, the pending table, the index), and
 * queues the segment's new chunks, compressed, as one job for the writer.
 * Also the staging buffers that producers read files into and workers give
 * back.
 *
 * Owns: each worker's batch and arena while it works; the segment it
 * took (its extents); e->stage_lock's buffers; e->seq_lock. Promises: a
 * worker waits for another's PENDING chunk only while it holds none itself
 * (see engine_int.h), and a failed segment leaves no PENDING node behind.
 * Calls pending.c and writer.c, never engine.c.
 */
#include "engine/engine_int.h"
#include "util/err.h"
#include "util/mem.h"
#include "util/progress.h"
#include "util/sha256.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void atomic_max(atomic_uint_fast64_t *a, uint64_t v)
{
	uint64_t cur = atomic_load(a);
	while (cur < v && !atomic_compare_exchange_weak(a, &cur, v))
		;
}

struct worker_ctx {
	struct sha256_hasher *h;
	struct batch b;
	LZ4_stream_t lzs;       /* b.lz */
	bool trace;
	uint64_t t[ENG_WT_N];   /* CREST_TRACE: this segment's, in ns */
	/* This segment's chunks and zero bytes, added to its snapshot's
	 * counters once at its end, not one atomic add a chunk on the
	 * snapshot's cache line from every worker at once. */
	uint64_t chunks, zero;
};

static uint64_t wt_now(const struct worker_ctx *w)
{
	return w->trace ? time_now_ns() : 0;
}

static int seg_push_extent(struct seg *sg, uint64_t len, const uint8_t *sha)
{
	if (!sha && sg->next_ext && sg->ext[sg->next_ext - 1].hole) {
		sg->ext[sg->next_ext - 1].len += len;
		return 0;
	}
	if (sg->next_ext == sg->cap_ext) {
		size_t cap = sg->cap_ext ? sg->cap_ext * 2 : 64;
		struct cas_extent *ne = realloc(sg->ext, cap * sizeof(*ne));
		if (!ne)
			return crest_errf(-ENOMEM, "recording chunks");
		sg->ext = ne;
		sg->cap_ext = cap;
	}
	struct cas_extent *x = &sg->ext[sg->next_ext++];
	x->len = len;
	x->hole = !sha;
	if (sha)
		memcpy(x->sha, sha, 32);
	else
		memset(x->sha, 0, 32);
	return 0;
}

/* The first of the parent's extents that starts at or after off (its
 * offsets made: eng_hint_offsets). */
static uint64_t hint_lower(const struct engine_stream *st, uint64_t off)
{
	uint64_t lo = 0, hi = st->hint->nextents;
	while (lo < hi) {
		const uint64_t mid = lo + (hi - lo) / 2;
		if (st->hint_off[mid] < off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* True when the parent has this very chunk at this very place. */
static bool hint_match(struct engine_stream *st, uint64_t off, uint64_t len, const uint8_t sha[32])
{
	const struct cas_stream *h = st->hint;
	if (!h || !h->nextents || !eng_hint_offsets(st))
		return false;
	const uint64_t lo = hint_lower(st, off);
	if (lo >= h->nextents || st->hint_off[lo] != off)
		return false;
	const struct cas_extent *x = &h->ext[lo];
	return !x->hole && x->len == len && !memcmp(x->sha, sha, 32);
}

static int batch_push(struct batch *b, const uint8_t sha[32], const uint8_t *p, size_t n, uint8_t state)
{
	if (b->n == b->cap_it) {
		size_t cap = b->cap_it ? 2 * b->cap_it : 1024;
		struct bitem *it = realloc(b->it, cap * sizeof(*it));
		if (!it)
			return crest_errf(-ENOMEM, "recording new chunks");
		b->it = it;
		b->cap_it = cap;
	}
	struct bitem *x = &b->it[b->n++];
	memcpy(x->sha, sha, 32);
	x->data = p;
	x->nd = NULL;   /* chunk_new sets a B_NEW item's */
	x->raw = (uint32_t)n;
	x->state = state;
	return 0;
}

/* p[0..n) LZ4-compressed into dst (room for LZ4_compressBound(n)): the
 * compressed length, or 0 when LZ4 fails. LZ4_compress_default clears a
 * 16 KiB table for every chunk, as much memory as a 4-8 KiB chunk itself;
 * a fast reset of the worker's own state only moves its offsets, and the
 * output does not depend on what it compressed before. Each chunk is still
 * a block of its own (no dictionary), as LZ4_decompress_safe reads it. */
static int lz_block(struct batch *b, const uint8_t *p, size_t n, char *dst, size_t room)
{
	LZ4_resetStream_fast(b->lz);
	return LZ4_compress_fast_continue(b->lz, (const char *)p, dst, (int)n, (int)room, 1);
}

/* Compresses a new chunk into the arena as a finished record (kept raw when
 * LZ4 does not shrink it, or, for a chunk of a page or two, its first
 * ENGINE_LZ4_PROBE bytes: engine.h) and records it B_NEW. */
static int batch_record(struct engine *e, struct batch *b, const uint8_t sha[32], const uint8_t *p, size_t n)
{
	const size_t bound = (size_t)LZ4_compressBound((int)n);
	if (!b->arena)
		eng_writer_arena_get(e, b);
	if (b->len + CAS_REC_HEADER + bound > b->cap) {
		size_t cap = b->cap ? 2 * b->cap : e->o.segment_bytes + e->o.segment_bytes / 16;
		while (cap < b->len + CAS_REC_HEADER + bound)
			cap *= 2;
		uint8_t *a = realloc(b->arena, cap);
		if (!a)
			return crest_errf(-ENOMEM, "compressing a chunk");
		b->arena = a;
		b->cap = cap;
	}
	int rc = batch_push(b, sha, p, n, B_NEW);
	if (rc < 0)
		return rc;
	b->holds = true;
	uint8_t *rec = b->arena + b->len;
	char *dst = (char *)rec + CAS_REC_HEADER;
	int c = 0;
	if (n <= ENGINE_LZ4_PROBE || n > ENGINE_LZ4_PROBE_UPTO) {
		c = lz_block(b, p, n, dst, bound);
	} else {
		const int probe = lz_block(b, p, ENGINE_LZ4_PROBE, dst, bound);   /* dst is overwritten below */
		if (probe > 0 && probe < ENGINE_LZ4_PROBE)
			c = lz_block(b, p, n, dst, bound);
	}
	struct bitem *x = &b->it[b->n - 1];
	x->at = b->len;
	x->codec = CAS_CODEC_LZ4;
	x->stored = (uint32_t)c;
	if (c <= 0 || (size_t)c >= n) {
		memcpy(rec + CAS_REC_HEADER, p, n);
		x->codec = CAS_CODEC_RAW;
		x->stored = (uint32_t)n;
	}
	cas_rec_build(rec, sha, x->codec, x->raw, x->stored);
	b->len += CAS_REC_HEADER + x->stored;
	return 0;
}

/* Wakes the workers waiting for a PENDING node to move (item_resolve). */
static void seq_moved(struct engine *e)
{
	pthread_mutex_lock(&e->seq_lock);
	e->seq_gen++;
	pthread_cond_broadcast(&e->seq_cond);
	pthread_mutex_unlock(&e->seq_lock);
}

/* A chunk the index did not have when looked up (gen: e->forget_gen read
 * before that look-up): found in the table, or entered PENDING under this
 * batch and recorded. One locked visit of the table a new chunk: the index
 * first, then the table (engine_int.h, forget_gen, says why that order
 * misses nothing). */
static int chunk_new(struct engine *e, struct worker_ctx *w, struct engine_snap *snap, const uint8_t *p,
		     size_t n, const uint8_t sha[32], uint64_t gen)
{
	const uint64_t t0 = wt_now(w);
	struct stripe *s = eng_pending_stripe(e, sha);
	pthread_mutex_lock(&s->lock);
	struct node *nd = eng_pending_find(s, sha);
	if (nd) {
		const uint64_t seq = atomic_load(&nd->seq);
		pthread_mutex_unlock(&s->lock);
		w->t[ENG_WT_TABLE] += wt_now(w) - t0;
		if (seq != PENDING) {
			atomic_max(&snap->max_seq, seq);
			return 0;
		}
		return batch_push(&w->b, sha, p, n, B_WAIT);
	}
	int rc = eng_pending_insert(s, sha, PENDING, &w->b, &nd);
	pthread_mutex_unlock(&s->lock);
	if (rc < 0)
		return crest_errf(rc, "recording a new chunk");
	const uint64_t t = wt_now(w);
	w->t[ENG_WT_TABLE] += t - t0;
	if (atomic_load(&e->forget_gen) != gen) {
		/* A commit took ids out of the table since the look-up: this
		 * one may be among them, in the index now. Rare (a commit
		 * between two steps of one chunk), so the node is entered and
		 * taken out again rather than the look-up done under the lock. */
		struct cas_loc loc;
		rc = cas_chunk_lookup(e->store, sha, &loc);
		if (rc != -ENOENT) {
			eng_pending_remove(e, sha, &w->b);
			seq_moved(e);   /* whoever found the node waits for it to move */
			return rc;      /* 0: it is in the index */
		}
	}
	rc = batch_record(e, &w->b, sha, p, n);
	w->t[ENG_WT_NEW] += wt_now(w) - t;
	if (rc < 0) {
		eng_pending_remove(e, sha, &w->b);   /* a waiter finds it gone and stores it */
		return rc;
	}
	w->b.it[w->b.n - 1].nd = nd;
	return 0;
}

/* One chunk of data at stream offset off; id, unless NULL, its SHA-256
 * computed elsewhere (engine_stream_add_chunks). */
static int chunk_ingest(struct engine *e, struct worker_ctx *w, struct seg *sg, const uint8_t *p,
			size_t n, uint64_t off, const uint8_t *id)
{
	struct engine_snap *snap = sg->st->snap;
	const uint64_t t0 = wt_now(w);
	if (dedup_is_zero(p, n)) {
		w->zero += n;
		w->t[ENG_WT_HASH] += wt_now(w) - t0;
		return seg_push_extent(sg, n, NULL);
	}
	uint8_t sha[32];
	int rc = 0;
	if (id)
		memcpy(sha, id, 32);
	else
		rc = sha256_hash(w->h, p, n, sha);
	const uint64_t t1 = wt_now(w);
	w->t[ENG_WT_HASH] += t1 - t0;
	if (rc < 0)
		return rc;
	w->chunks++;
	if (hint_match(sg->st, off, n, sha)) {
		w->t[ENG_WT_KNOWN] += wt_now(w) - t1;
		return seg_push_extent(sg, n, sha);
	}

	const uint64_t t2 = wt_now(w);
	w->t[ENG_WT_KNOWN] += t2 - t1;
	const uint64_t gen = atomic_load(&e->forget_gen);
	struct cas_loc loc;
	rc = cas_chunk_lookup(e->store, sha, &loc);
	w->t[ENG_WT_LOOKUP] += wt_now(w) - t2;
	if (rc == -ENOENT) {
		if (e->lookup_sleep_us)
			usleep(e->lookup_sleep_us);
		rc = chunk_new(e, w, snap, p, n, sha, gen);
	}
	if (rc < 0)
		return rc;
	return seg_push_extent(sg, n, sha);
}

/* Gives up the batch's records (the segment failed): their PENDING nodes go,
 * and whoever waits for one stores the chunk itself. */
static void batch_drop(struct engine *e, struct batch *b, size_t from)
{
	for (size_t i = from; i < b->n; i++)
		if (b->it[i].state == B_NEW)
			eng_pending_remove(e, b->it[i].sha, b);
	b->n = b->len = 0;
	b->holds = false;
	seq_moved(e);
}

/* Waits until the PENDING chunk x gets its seq. When its node is gone the
 * chunk was committed, or its batch failed and was dropped: then this
 * worker stores it (chunk_new; flushed by the caller's next round), and so
 * holds a PENDING node itself. While it does, it must not wait: another
 * worker may be waiting for that node while holding the one x waits for
 * (two workers that took over chunks of dropped batches, each waiting for
 * the other's). x then waits for the next round, after the batch's records
 * are queued; so does x when the node is this worker's own. x points into
 * the batch, which both of those may move: it is copied first. */
static int item_resolve(struct engine *e, struct worker_ctx *w, struct engine_snap *snap, const struct bitem *xp)
{
	const struct bitem x = *xp;
	struct stripe *s = eng_pending_stripe(e, x.sha);
	for (;;) {
		pthread_mutex_lock(&e->seq_lock);
		const uint64_t gen = e->seq_gen;
		pthread_mutex_unlock(&e->seq_lock);
		const uint64_t fgen = atomic_load(&e->forget_gen);
		pthread_mutex_lock(&s->lock);
		const struct node *nd = eng_pending_find(s, x.sha);
		const uint64_t seq = nd ? atomic_load(&nd->seq) : 0;
		pthread_mutex_unlock(&s->lock);
		if (nd && seq != PENDING) {
			atomic_max(&snap->max_seq, seq);
			return 0;
		}
		if (nd && w->b.holds)   /* mine included: only the holder sets owner */
			return batch_push(&w->b, x.sha, x.data, x.raw, B_WAIT);
		if (!nd) {
			/* Committed, or its batch dropped it: the index, then
			 * the table again (chunk_new). */
			struct cas_loc loc;
			int rc = cas_chunk_lookup(e->store, x.sha, &loc);
			return rc == -ENOENT ? chunk_new(e, w, snap, x.data, x.raw, x.sha, fgen) : rc;
		}
		pthread_mutex_lock(&e->seq_lock);
		while (e->seq_gen == gen)
			pthread_cond_wait(&e->seq_cond, &e->seq_lock);
		pthread_mutex_unlock(&e->seq_lock);
	}
}

/* Ends the segment: queues its new records as one job, gives their nodes
 * the job's seq, then waits for the chunks it found PENDING elsewhere (only
 * now, with nothing of its own PENDING: see engine_int.h). */
static int batch_flush(struct engine *e, struct worker_ctx *w, struct engine_snap *snap)
{
	struct batch *b = &w->b;
	size_t from = 0;
	int rc = 0;
	while (rc == 0 && from < b->n) {
		const size_t end = b->n;
		size_t bytes = 0, raw = 0, nnew = 0;
		for (size_t i = from; i < end; i++)
			if (b->it[i].state == B_NEW) {
				bytes += CAS_REC_HEADER + b->it[i].stored;
				raw += b->it[i].raw;
				nnew++;
			}
		if (nnew) {
			uint64_t seq;
			rc = eng_writer_enqueue(e, b, from, bytes, &seq);
			if (rc < 0)
				break;
			/* The nodes have their seq (eng_writer_enqueue set it):
			 * waiters read it after seq_moved below. */
			b->holds = false;   /* every B_NEW item so far is queued */
			seq_moved(e);
			atomic_max(&snap->max_seq, seq);
			atomic_fetch_add(&snap->new_chunks, nnew);
			atomic_fetch_add(&snap->new_bytes, raw);
			atomic_fetch_add(&snap->stored_bytes, bytes);
		}
		/* Resolving may record chunks anew and put waits off (after
		 * end): another round. The first B_WAIT item is resolved, as
		 * nothing is held then, so every round gets further. */
		for (size_t i = from; rc == 0 && i < end; i++)
			if (b->it[i].state == B_WAIT)
				rc = item_resolve(e, w, snap, &b->it[i]);
		from = end;
	}
	if (rc < 0) {
		batch_drop(e, b, from);
		return rc;
	}
	b->n = b->len = 0;
	return 0;
}

static int batch_flush_timed(struct engine *e, struct worker_ctx *w, struct engine_snap *snap)
{
	const uint64_t t0 = wt_now(w);
	const int rc = batch_flush(e, w, snap);
	w->t[ENG_WT_FLUSH] += wt_now(w) - t0;
	return rc;
}

/* The parent's chunk that covers [off, off + n) of the stream, into the
 * segment's extents: a hole that covers it, or a chunk of exactly that
 * place and length. *x is a cursor over the parent's extents, moved
 * forward only. The snapshot's counters are added to once per segment
 * (*chunks, *zero): 2M atomic adds on one cache line, from 16 workers,
 * were much of an incremental checkpoint's worker time. */
static int chunk_from_parent(struct seg *sg, uint64_t off, size_t n, uint64_t *x, uint64_t *chunks, uint64_t *zero)
{
	const struct engine_stream *st = sg->st;
	const struct cas_stream *h = st->hint;
	while (*x < h->nextents && st->hint_off[*x] + h->ext[*x].len <= off)
		(*x)++;
	const struct cas_extent *px = *x < h->nextents ? &h->ext[*x] : NULL;
	if (px && px->hole && st->hint_off[*x] <= off && off + n <= st->hint_off[*x] + px->len) {
		*zero += n;
		return seg_push_extent(sg, n, NULL);
	}
	if (px && !px->hole && st->hint_off[*x] == off && px->len == n) {
		(*chunks)++;
		return seg_push_extent(sg, n, px->sha);
	}
	return crest_errx(-EINVAL, "stream %s: the %zu bytes at offset %llu were given as unchanged since "
			  "the parent, but the parent has no chunk of that place and length", st->meta.name, n,
			  (unsigned long long)off);
}

/* A segment of engine_stream_add_chunks with chunks left out: those in
 * data are ingested as usual (without hashing when their ids came with
 * them), the others are the parent's, named from its manifest. */
static int seg_sparse(struct engine *e, struct worker_ctx *w, struct seg *sg)
{
	struct engine_stream *st = sg->st;
	const uint32_t c = st->dp->avg;
	if (st->hint && !eng_hint_offsets(st))
		return crest_errf(-ENOMEM, "stream %s: listing the parent's chunks", st->meta.name);
	/* The cursor starts at the last parent extent that starts at or
	 * before the segment. */
	uint64_t x = st->hint ? hint_lower(st, sg->off + 1) : 0;
	x = x ? x - 1 : 0;
	size_t j = 0;
	uint64_t chunks = 0, zero = 0;
	int rc = 0;
	/* Its extents at once, not by doubling: at most one a chunk. */
	const size_t want = (size_t)((sg->len + c - 1) / c);
	if (sg->cap_ext < want) {
		struct cas_extent *ne = realloc(sg->ext, want * sizeof(*ne));
		if (!ne)
			return crest_errf(-ENOMEM, "recording chunks");
		sg->ext = ne;
		sg->cap_ext = want;
	}
	for (uint64_t pos = 0; rc == 0 && pos < sg->len; pos += c) {
		const size_t n = sg->len - pos < c ? (size_t)(sg->len - pos) : c;
		if (j < sg->nidx && sg->idx[j] == sg->idx_base + pos / c) {
			rc = chunk_ingest(e, w, sg, sg->data + (uint64_t)j * c, n, sg->off + pos,
					  sg->ids ? sg->ids + (uint64_t)j * 32 : NULL);
			j++;
		} else if (!st->hint) {
			rc = crest_errx(-EINVAL, "stream %s: chunks given as unchanged, but the parent has none",
					st->meta.name);
		} else {
			rc = chunk_from_parent(sg, sg->off + pos, n, &x, &chunks, &zero);
		}
	}
	atomic_fetch_add(&st->snap->chunks, chunks);
	atomic_fetch_add(&st->snap->zero_bytes, zero);
	if (rc < 0) {
		batch_drop(e, &w->b, 0);
		return rc;
	}
	return batch_flush_timed(e, w, st->snap);
}

/* A file segment's bytes into its staging buffer. */
static int seg_read(struct seg *sg)
{
	uint8_t *buf = sg->staging;
	size_t got = 0;
	while (got < sg->len) {
		const ssize_t r = pread(sg->src->fd, buf + got, sg->len - got, (off_t)(sg->src_off + got));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return crest_errf(-errno, "cannot read %s", sg->src->what);
		if (r == 0)
			return crest_errx(-EIO, "%s shrank while crest read it", sg->src->what);
		got += (size_t)r;
	}
	sg->data = buf;
	return 0;
}

/*
 * Cuts taken from the parent (engine_stream.guided). Where the stream has,
 * at a cut, the parent's chunk of length L that starts at the same offset,
 * the cut dedup_next would make is L: the parent's chunker scanned those
 * bytes from the same place with the same parameters and found no earlier
 * cut, and dedup_cut_holds checks that L is a cut for what is left of this
 * segment. The bytes are the parent's when their SHA-256 is the parent's
 * chunk's id, which the worker needs anyway: an unchanged chunk costs its
 * hash, as before, and no scan. A guess that fails (the chunk changed)
 * costs a hash of L bytes on top of the scan, unless the scan cuts at L
 * too (the hash is then this chunk's). Guesses stop for the rest of the
 * segment once they fail more than one time in sixteen, plus four: a
 * rewritten file pays at most that much extra hashing.
 */
struct guide {
	const struct engine_stream *st;   /* NULL: no guesses */
	uint64_t x;                       /* the first parent extent not before the cut */
	size_t hashed;                    /* the last guess's length, hashed into sha; 0: none */
	uint64_t hits, misses;
};

static void guide_start(struct guide *g, const struct seg *sg)
{
	struct engine_stream *st = sg->st;
	*g = (struct guide){ .st = NULL };
	if (st->guided && !sg->ids && eng_hint_offsets(st)) {
		g->st = st;
		g->x = hint_lower(st, sg->off);
	}
}

/* 0 with *n the cut and sha its chunk's id when the parent's cut is taken;
 * 0 with *n == 0 otherwise (g->hashed says whether sha holds a guess's
 * hash); < 0 when hashing failed. */
static int guide_cut(struct guide *g, struct worker_ctx *w, const struct dedup_params *dp, const uint8_t *p,
		     size_t left, uint64_t at, size_t *n, uint8_t sha[32])
{
	g->hashed = 0;
	*n = 0;
	if (!g->st)
		return 0;
	const struct cas_stream *h = g->st->hint;
	while (g->x < h->nextents && g->st->hint_off[g->x] < at)
		g->x++;
	if (g->x >= h->nextents || g->st->hint_off[g->x] != at)
		return 0;
	const struct cas_extent *x = &h->ext[g->x];
	if (x->hole || x->len > left || !dedup_cut_holds(dp, p, left, (size_t)x->len))
		return 0;
	const uint64_t t0 = wt_now(w);
	const int rc = sha256_hash(w->h, p, (size_t)x->len, sha);
	w->t[ENG_WT_HASH] += wt_now(w) - t0;
	if (rc < 0)
		return rc;
	g->hashed = (size_t)x->len;
	if (!memcmp(sha, x->sha, 32)) {
		g->hits++;
		*n = (size_t)x->len;
	} else if (++g->misses > g->hits / 16 + 4) {
		g->st = NULL;
	}
	return 0;
}

static int seg_process(struct engine *e, struct worker_ctx *w, struct seg *sg)
{
	if (sg->src) {
		const int rc = seg_read(sg);
		if (rc < 0)
			return rc;
	}
	if (sg->sparse)
		return seg_sparse(e, w, sg);
	if (!sg->data) {
		/* A hole found with SEEK_HOLE: stored as a hole like a zero chunk,
		 * so it counts in zero_bytes too. */
		atomic_fetch_add(&sg->st->snap->zero_bytes, sg->len);
		return seg_push_extent(sg, sg->len, NULL);
	}
	const struct dedup_params *dp = sg->st->dp;
	struct guide g;
	guide_start(&g, sg);
	size_t off = 0;
	while (off < sg->len) {
		const uint8_t *p = sg->data + off;
		const size_t left = sg->len - off;
		uint8_t sha[32];
		const uint8_t *id = NULL;
		size_t n = 0;
		int rc = guide_cut(&g, w, dp, p, left, sg->off + off, &n, sha);
		if (rc == 0 && !n)
			n = dedup_next(dp, p, left);
		/* sha holds the hash of the guess's bytes: this chunk's id when
		 * the cut fell there, taken from the parent or scanned. */
		if (rc == 0 && g.hashed == n)
			id = sha;
		/* Given ids are per chunk of fixed chunking, which cuts at
		 * multiples of its size from the segment's start. */
		if (sg->ids)
			id = sg->ids + (off / dp->avg) * 32;
		if (rc == 0)
			rc = chunk_ingest(e, w, sg, p, n, sg->off + off, id);
		if (rc < 0) {
			batch_drop(e, &w->b, 0);
			return rc;
		}
		off += n;
	}
	if (g.hits)
		atomic_fetch_add(&sg->st->snap->guided_chunks, g.hits);
	return batch_flush_timed(e, w, sg->st->snap);
}

void eng_worker_staging_put(struct engine *e, void *buf)
{
	pthread_mutex_lock(&e->stage_lock);
	e->free_bufs[e->nfree++] = buf;
	pthread_cond_signal(&e->stage_cond);
	pthread_mutex_unlock(&e->stage_lock);
}

int eng_worker_staging_get(struct engine *e, void **out)
{
	pthread_mutex_lock(&e->stage_lock);
	while (!e->nfree && e->nbufs >= e->maxbufs)
		pthread_cond_wait(&e->stage_cond, &e->stage_lock);
	if (e->nfree) {
		*out = e->free_bufs[--e->nfree];
		pthread_mutex_unlock(&e->stage_lock);
		return 0;
	}
	e->nbufs++;
	pthread_mutex_unlock(&e->stage_lock);
	*out = mem_big_alloc(e->o.segment_bytes);
	if (!*out) {
		pthread_mutex_lock(&e->stage_lock);
		e->nbufs--;
		pthread_mutex_unlock(&e->stage_lock);
		return crest_errf(-ENOMEM, "allocating %zu bytes of staging", e->o.segment_bytes);
	}
	return 0;
}

static void seg_release(struct engine *e, struct seg *sg)
{
	if (sg->staging) {
		eng_worker_staging_put(e, sg->staging);
		sg->staging = NULL;
	}
	if (sg->rel) {
		if (atomic_fetch_sub(&sg->rel->refs, 1) == 1) {
			if (sg->rel->release)
				sg->rel->release(sg->rel->arg);
			free(sg->rel);
		}
		sg->rel = NULL;
	}
	sg->data = NULL;
}

void *eng_worker_main(void *arg)
{
	struct engine *e = arg;
	struct worker_ctx w = { .trace = e->trace };
	int hrc = sha256_hasher_new(&w.h);
	w.b.lz = LZ4_initStream(&w.lzs, sizeof(w.lzs));   /* never NULL: in place, aligned */
	assert(w.b.lz);
	char hmsg[1024];
	crest_errcpy(hmsg, sizeof(hmsg));
	pthread_mutex_lock(&e->lock);
	for (;;) {
		while (!e->jq_head && !e->stop_workers)
			pthread_cond_wait(&e->job_cond, &e->lock);
		if (!e->jq_head)
			break;
		struct seg *sg = e->jq_head;
		e->jq_head = sg->next;
		if (!e->jq_head)
			e->jq_tail = NULL;
		struct engine_snap *snap = sg->st->snap;
		bool skip = snap->err || snap->aborted || atomic_load(&snap->cancelled);
		pthread_mutex_unlock(&e->lock);

		const uint64_t tw = wt_now(&w);
		int rc = skip ? 0 : hrc < 0 ? hrc : seg_process(e, &w, sg);
		atomic_fetch_add(&snap->chunks, w.chunks);
		atomic_fetch_add(&snap->zero_bytes, w.zero);
		w.chunks = w.zero = 0;
		if (w.trace) {
			w.t[ENG_WT_ALL] = time_now_ns() - tw;
			for (int i = 0; i < ENG_WT_N; i++) {
				atomic_fetch_add_explicit(&e->t_work[i], w.t[i], memory_order_relaxed);
				w.t[i] = 0;
			}
		}
		char msg[1024];
		if (rc < 0)
			crest_errcpy(msg, sizeof(msg));
		if (hrc < 0)
			snprintf(msg, sizeof(msg), "%s", hmsg);
		uint64_t len = sg->len;
		seg_release(e, sg);
		atomic_fetch_add(&snap->bytes_done, len);

		pthread_mutex_lock(&e->lock);
		if (rc < 0)
			eng_snap_fail(snap, rc, msg);
		snap->segs_done++;
		if (snap->sealed && snap->segs_done == snap->segs_total)
			pthread_cond_broadcast(&e->snap_cond);
	}
	pthread_mutex_unlock(&e->lock);
	sha256_hasher_free(w.h);
	free(w.b.arena);
	free(w.b.it);
	return NULL;
}
