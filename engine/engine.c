/*
 * engine.c - the ingest pipeline; see engine.h.
 *
 * Threads and what they own:
 *   producers (callers)  cut streams into segments and queue them (jobs);
 *   workers (N)          chunk a segment, hash each chunk, decide whether the
 *                        store has it, compress new ones into the worker's
 *                        arena as finished pack records, and queue the
 *                        segment's new records as one job (wq);
 *   writer (1)           writes queued jobs to packs, syncs on request;
 *   committer (1)        commits snapshots in begin order.
 *
 * Dedup of a chunk, in order of cost: all zeros (a hole, no hash needed
 * beyond the zero test), the parent snapshot's chunk at the same offset
 * (a memory compare), the table of chunks written but not yet committed,
 * then the RocksDB index.
 *
 * A segment's new records go to the pack back to back, in stream order: a
 * restore of the stream then reads each pack span once, instead of picking
 * its chunks out of N segments' interleaved records (measured on 16 cores:
 * every record read twice). It also makes one write per segment, not one
 * per chunk.
 *
 * A new chunk is entered in the table of uncommitted chunks as PENDING when
 * its worker finds it new and gets its seq when the segment's job is queued.
 * Another worker meeting a PENDING chunk waits for that seq, but only while
 * it holds no PENDING chunk itself (after queuing its own job), so no two
 * workers ever wait for each other. A waiter that takes over a chunk from a
 * failed batch holds it PENDING until its next job: until then it puts off
 * its other waits (item_resolve) rather than wait with that chunk in hand.
 *
 * Write ordering. Every job queued for the writer gets a sequence number
 * (seq) under wlock, in queue order; the writer completes them in that order,
 * so "completed_seq >= n" means every chunk up to n is written. A snapshot
 * remembers the highest seq it references (max_seq), whether it queued that
 * chunk or found it in the table. Before committing, the committer asks the
 * writer to sync up to max_seq; only then are index entries (all pending up
 * to synced_seq) and the manifest written in one synced batch.
 *
 * A failed write or sync (werr) fails every snapshot that commits after it:
 * any of them may reference a chunk it lost. Once none is left (the commit
 * queue is empty), engine_recover forgets everything written and not
 * committed, and the engine works again: a job checkpointed every few
 * minutes into a store that failed once loses one checkpoint, not all
 * later ones.
 *
 * Lock order: stripe lock, then wlock. e->lock is never held with either,
 * but by engine_recover, which takes them under it when no snapshot is in
 * flight (nothing takes e->lock under them).
 */
#include "engine/engine.h"
#include "util/err.h"
#include "util/par.h"
#include "util/progress.h"
#include "util/sha256.h"

#include <assert.h>
#include <errno.h>
#include <lz4.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define NSTRIPES 64
#define WRITE_BATCH 64          /* runs per cas_pack_write */
#define PENDING UINT64_MAX      /* a table node's seq until its job is queued */

struct release_ref {
	void (*release)(void *arg);
	void *arg;
	atomic_size_t refs;
};

struct seg {
	struct seg *next;
	struct engine_stream *st;
	uint64_t off;                /* where the segment starts in its stream */
	const uint8_t *data;         /* NULL: a hole of len bytes */
	size_t len;
	struct release_ref *rel;     /* memory owned by the caller, or */
	void *staging;               /* a staging buffer to give back */
	struct cas_extent *ext;
	size_t next_ext, cap_ext;
};

struct engine_stream {
	struct engine_snap *snap;
	struct cas_stream meta;      /* becomes the manifest's stream at commit */
	const struct dedup_params *dp;
	struct seg **segs;
	size_t nsegs, cap;
	uint64_t size;
	const struct cas_stream *hint;
	uint64_t *hint_off;          /* hint_off[i]: where hint extent i starts */
	bool closed;
};

struct engine_snap {
	struct engine *e;
	struct engine_snap *next;    /* commit queue */
	struct cas_manifest *m;
	char *tag;
	struct cas_manifest *parent;
	struct engine_stream **streams;
	size_t nstreams;
	/* under e->lock */
	uint64_t segs_total, segs_done;
	bool sealed, done, aborted, detached;
	int err;
	char errmsg[1024];
	/* updated by workers */
	atomic_uint_fast64_t max_seq, bytes_done, expect;
	atomic_uint_fast64_t zero_bytes, new_bytes, stored_bytes, chunks, new_chunks;
	uint64_t begin_ns;
	struct engine_result res;
};

struct node {
	struct node *next;
	uint8_t sha[32];
	uint64_t seq;                /* PENDING until owner's job is queued */
	const struct batch *owner;   /* the batch that holds it while PENDING */
};

struct stripe {
	pthread_mutex_t lock;
	struct node **b;
	size_t nb, n;
};

/* A segment's new records, back to back in arena, for the writer. */
struct wjob {
	struct wjob *next;
	uint8_t *arena;
	size_t arena_cap, bytes;
	struct cas_write *runs;      /* more than one only across a pack roll */
	unsigned nruns;
	uint64_t seq;
};

/* A chunk of the segment at hand that needs the writer: B_NEW, found new
 * and recorded in the arena; B_WAIT, found PENDING (entered by a batch not
 * yet queued, this one's included). */
struct bitem {
	uint8_t sha[32];
	const uint8_t *data;         /* the chunk (alive until the segment is done) */
	size_t at;                   /* B_NEW: the record's place in the arena */
	uint32_t raw, stored;
	uint8_t codec;
	uint8_t state;
};
enum { B_NEW, B_WAIT };

/* A worker's records for the segment at hand. */
struct batch {
	LZ4_stream_t *lz;            /* the worker's compression state, or NULL */
	uint8_t *arena;
	size_t len, cap;
	struct bitem *it;
	size_t n, cap_it;
	bool holds;                  /* has PENDING nodes: B_NEW items not yet queued */
};

struct pend {
	struct cas_index_entry ie;
	uint64_t seq;
};

struct engine {
	struct cas_store *store;
	struct engine_opts o;

	pthread_mutex_t lock;          /* jobs, snapshots, commit queue */
	pthread_cond_t job_cond, snap_cond;
	struct seg *jq_head, *jq_tail;
	struct engine_snap *cq_head, *cq_tail;
	bool stop_workers, stop_committer;
	pthread_t *workers;
	unsigned nworkers;
	pthread_t committer;
	bool committer_started;

	pthread_mutex_t stage_lock;
	pthread_cond_t stage_cond;
	void **free_bufs;
	size_t nfree, nbufs, maxbufs;

	pthread_mutex_t wlock;
	pthread_cond_t wcond;
	struct wjob *wq_head, *wq_tail;
	size_t wq_bytes;
	uint64_t enq_seq, completed_seq, synced_seq, sync_target;
	bool wstop;
	int werr;
	char werrmsg[1024];
	struct pend *pend;
	size_t npend, cappend;
	void **arenas;                 /* arenas the writer is done with */
	size_t *arena_caps;
	size_t narenas, caparenas;
	pthread_t writer;
	bool writer_started;
	uint64_t writes, fault_write;  /* CREST_FAULT_WRITE: see writer_write */

	struct stripe stripes[NSTRIPES];
	/* seq_gen counts batches that left PENDING nodes (queued or dropped):
	 * a worker waiting for a PENDING node sleeps until it moves. */
	pthread_mutex_t seq_lock;
	pthread_cond_t seq_cond;
	uint64_t seq_gen;
};

void engine_opts_default(struct engine_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->workers = par_cores();
	o->staging_bytes = 256u << 20;
	o->segment_bytes = ENGINE_SEGMENT_BYTES;
	o->write_queue_bytes = 128u << 20;
	/* Chosen from bench/store/chunkers.sh (bench/RESULTS.md). Memory images
	 * change in place a page at a time: fixed 4 KiB chunks store exactly
	 * the changed pages (1% rewritten -> 1.00% new; 8 KiB: 1.99%, any CDC
	 * size: 3.5% or more). Files shift: fixed chunks lose everything after
	 * an insertion (99% new), CDC keeps it; 8 KiB gives 0.9% new for 100
	 * insertions in 256 MiB at half the chunks (and index entries) of
	 * 4 KiB's 0.5%, where 16 KiB already costs 1.6% and 64 KiB 6%. */
	dedup_params_init(&o->file_chunking, DEDUP_CDC, 8192);
	dedup_params_init(&o->memory_chunking, DEDUP_FIXED, 4096);
}

/* ---- the table of chunks written but not committed ---- */

static struct stripe *stripe_of(struct engine *e, const uint8_t sha[32])
{
	return &e->stripes[sha[0] % NSTRIPES];
}

static size_t bucket_of(const struct stripe *s, const uint8_t sha[32])
{
	uint64_t h;
	memcpy(&h, sha + 8, 8);
	return (size_t)(h & (s->nb - 1));
}

/* Under the stripe's lock. Returns the node or NULL. */
static struct node *table_find(struct stripe *s, const uint8_t sha[32])
{
	if (!s->nb)
		return NULL;
	for (struct node *n = s->b[bucket_of(s, sha)]; n; n = n->next)
		if (!memcmp(n->sha, sha, 32))
			return n;
	return NULL;
}

static int table_insert(struct stripe *s, const uint8_t sha[32], uint64_t seq, const struct batch *owner)
{
	if (s->n >= s->nb) {
		size_t nb = s->nb ? s->nb * 2 : 1024;
		struct node **b = calloc(nb, sizeof(*b));
		if (!b)
			return -ENOMEM;
		for (size_t i = 0; i < s->nb; i++) {
			struct node *n = s->b[i];
			while (n) {
				struct node *next = n->next;
				uint64_t h;
				memcpy(&h, n->sha + 8, 8);
				size_t k = (size_t)(h & (nb - 1));
				n->next = b[k];
				b[k] = n;
				n = next;
			}
		}
		free(s->b);
		s->b = b;
		s->nb = nb;
	}
	struct node *n = malloc(sizeof(*n));
	if (!n)
		return -ENOMEM;
	memcpy(n->sha, sha, 32);
	n->seq = seq;
	n->owner = owner;
	size_t k = bucket_of(s, sha);
	n->next = s->b[k];
	s->b[k] = n;
	s->n++;
	return 0;
}

/* Removes sha's node: any (owner NULL: its commit made it durable), or only
 * the PENDING node owner entered (its batch gave it up). */
static void table_remove(struct engine *e, const uint8_t sha[32], const struct batch *owner)
{
	struct stripe *s = stripe_of(e, sha);
	pthread_mutex_lock(&s->lock);
	if (s->nb) {
		for (struct node **pp = &s->b[bucket_of(s, sha)]; *pp; pp = &(*pp)->next) {
			struct node *n = *pp;
			if (!memcmp(n->sha, sha, 32)) {
				if (!owner || (n->owner == owner && n->seq == PENDING)) {
					*pp = n->next;
					free(n);
					s->n--;
				}
				break;
			}
		}
	}
	pthread_mutex_unlock(&s->lock);
}

static void atomic_max(atomic_uint_fast64_t *a, uint64_t v)
{
	uint64_t cur = atomic_load(a);
	while (cur < v && !atomic_compare_exchange_weak(a, &cur, v))
		;
}

/* ---- writer ---- */

/* An arena from the writer's leftovers, or a new one. */
static void arena_get(struct engine *e, struct batch *b)
{
	pthread_mutex_lock(&e->wlock);
	if (e->narenas) {
		e->narenas--;
		b->arena = e->arenas[e->narenas];
		b->cap = e->arena_caps[e->narenas];
	}
	pthread_mutex_unlock(&e->wlock);
}

/* Under wlock. Keeps as many arenas as fit the write queue's budget. */
static void arena_put(struct engine *e, uint8_t *arena, size_t cap)
{
	if ((e->narenas + 1) * e->o.segment_bytes > e->o.write_queue_bytes) {
		free(arena);
		return;
	}
	if (e->narenas == e->caparenas) {
		size_t n = e->caparenas ? 2 * e->caparenas : 16;
		void **a = realloc(e->arenas, n * sizeof(*a));
		if (a)
			e->arenas = a;
		size_t *c = realloc(e->arena_caps, n * sizeof(*c));
		if (c)
			e->arena_caps = c;
		if (!a || !c) {
			free(arena);
			return;
		}
		e->caparenas = n;
	}
	e->arenas[e->narenas] = arena;
	e->arena_caps[e->narenas++] = cap;
}

/* Queues the batch's B_NEW records from item `from` on as one job, handing
 * its arena over, and sets *seq to the job's seq (0, which no job has, when
 * it fails). Records are reserved back to back under wlock, so they form
 * one run (more only across a pack roll). */
static int writer_enqueue(struct engine *e, struct batch *b, size_t from, size_t bytes, uint64_t *seq)
{
	*seq = 0;   /* on every path: the failure paths return e->werr, a sign the compiler cannot see */
	struct wjob *j = calloc(1, sizeof(*j));
	struct cas_write *runs = malloc(2 * sizeof(*runs));
	if (!j || !runs) {
		free(j);
		free(runs);
		return crest_errf(-ENOMEM, "queueing chunks");
	}
	unsigned maxruns = 2;
	pthread_mutex_lock(&e->wlock);
	while (e->wq_bytes > e->o.write_queue_bytes && !e->werr)
		pthread_cond_wait(&e->wcond, &e->wlock);
	int rc = e->werr;
	if (rc) {
		crest_errset_str(e->werrmsg);
		goto fail;
	}
	if (e->npend + b->n > e->cappend) {
		size_t cap = e->cappend ? e->cappend : 4096;
		while (cap < e->npend + b->n)
			cap *= 2;
		struct pend *np = realloc(e->pend, cap * sizeof(*np));
		if (!np) {
			rc = crest_errf(-ENOMEM, "queueing chunks");
			goto fail;
		}
		e->pend = np;
		e->cappend = cap;
	}
	j->seq = *seq = ++e->enq_seq;
	for (size_t i = from; i < b->n; i++) {
		const struct bitem *x = &b->it[i];
		if (x->state != B_NEW)
			continue;
		struct pend *p = &e->pend[e->npend];
		rc = cas_pack_reserve(e->store, x->stored, x->raw, x->codec, &p->ie.loc);
		if (rc < 0)
			goto fail;   /* the pend entries so far are harmless: never synced, never committed */
		memcpy(p->ie.sha, x->sha, 32);
		p->seq = j->seq;
		e->npend++;
		const size_t len = CAS_REC_HEADER + (size_t)x->stored;
		struct cas_write *last = j->nruns ? &runs[j->nruns - 1] : NULL;
		if (last && last->pack == p->ie.loc.pack && last->off + last->len == p->ie.loc.off) {
			last->len += len;
			continue;
		}
		if (j->nruns == maxruns) {
			struct cas_write *nr = realloc(runs, 2 * maxruns * sizeof(*nr));
			if (!nr) {
				rc = crest_errf(-ENOMEM, "queueing chunks");
				goto fail;
			}
			runs = nr;
			maxruns *= 2;
		}
		runs[j->nruns++] = (struct cas_write){ .pack = p->ie.loc.pack, .off = p->ie.loc.off,
						       .data = b->arena + x->at, .len = len };
	}
	j->arena = b->arena;
	j->arena_cap = b->cap;
	j->bytes = bytes;
	j->runs = runs;
	if (e->wq_tail)
		e->wq_tail->next = j;
	else
		e->wq_head = j;
	e->wq_tail = j;
	e->wq_bytes += bytes;
	pthread_cond_broadcast(&e->wcond);
	pthread_mutex_unlock(&e->wlock);
	b->arena = NULL;
	b->cap = b->len = 0;
	return 0;
fail:
	if (!e->werr) {
		/* A reservation failed after others were made: stop everything
		 * rather than leave a gap in the pack that nothing will fill. */
		e->werr = rc;
		crest_errcpy(e->werrmsg, sizeof(e->werrmsg));
	}
	pthread_cond_broadcast(&e->wcond);
	pthread_mutex_unlock(&e->wlock);
	free(j);
	free(runs);
	return rc;
}

/* Writes a batch of runs. For tests, CREST_FAULT_WRITE=N (read once per
 * engine) fails this engine's Nth batch without writing it, as a full or
 * failing disk would: the places it reserved stay holes in the pack. */
static int writer_write(struct engine *e, const struct cas_write *w, unsigned n)
{
	if (++e->writes == e->fault_write)
		return crest_errx(-EIO, "writing chunks to the store: failure injected by CREST_FAULT_WRITE=%llu",
				  (unsigned long long)e->fault_write);
	return cas_pack_write(e->store, w, n);
}

static void *writer_main(void *arg)
{
	struct engine *e = arg;
	struct wjob *batch[WRITE_BATCH];
	struct cas_write *w = NULL;
	unsigned capw = 0;
	pthread_mutex_lock(&e->wlock);
	for (;;) {
		while (!e->wq_head && !(e->sync_target > e->synced_seq) && !e->wstop)
			pthread_cond_wait(&e->wcond, &e->wlock);
		unsigned n = 0, nw = 0;
		size_t bytes = 0;
		/* Up to WRITE_BATCH runs, or one job of more (tiny packs). */
		while (e->wq_head && n < WRITE_BATCH && (n == 0 || nw + e->wq_head->nruns <= WRITE_BATCH)) {
			struct wjob *j = e->wq_head;
			if (nw + j->nruns > capw) {
				unsigned cap = nw + j->nruns > WRITE_BATCH ? nw + j->nruns : WRITE_BATCH;
				struct cas_write *nwp = realloc(w, cap * sizeof(*nwp));
				if (!nwp) {
					if (!e->werr) {
						e->werr = crest_errf(-ENOMEM, "writing chunks");
						crest_errcpy(e->werrmsg, sizeof(e->werrmsg));
					}
					break;
				}
				w = nwp;
				capw = cap;
			}
			e->wq_head = j->next;
			batch[n++] = j;
			for (unsigned r = 0; r < j->nruns; r++)
				w[nw++] = j->runs[r];
			bytes += j->bytes;
		}
		if (!e->wq_head)
			e->wq_tail = NULL;
		if (n) {
			bool failed = e->werr != 0;
			pthread_mutex_unlock(&e->wlock);
			int rc = failed ? 0 : writer_write(e, w, nw);
			pthread_mutex_lock(&e->wlock);
			if (rc < 0 && !e->werr) {
				e->werr = rc;
				crest_errcpy(e->werrmsg, sizeof(e->werrmsg));
			}
			e->completed_seq = batch[n - 1]->seq;
			for (unsigned i = 0; i < n; i++) {
				arena_put(e, batch[i]->arena, batch[i]->arena_cap);
				free(batch[i]->runs);
				free(batch[i]);
			}
			e->wq_bytes -= bytes;
			pthread_cond_broadcast(&e->wcond);
			continue;
		}
		if (e->sync_target > e->synced_seq) {
			uint64_t upto = e->completed_seq;
			bool failed = e->werr != 0;
			pthread_mutex_unlock(&e->wlock);
			int rc = failed ? 0 : cas_pack_sync(e->store);
			pthread_mutex_lock(&e->wlock);
			if (rc < 0 && !e->werr) {
				e->werr = rc;
				crest_errcpy(e->werrmsg, sizeof(e->werrmsg));
			}
			e->synced_seq = upto;
			pthread_cond_broadcast(&e->wcond);
			continue;
		}
		if (e->wstop)
			break;
	}
	pthread_mutex_unlock(&e->wlock);
	free(w);
	return NULL;
}

/* ---- workers ---- */

struct worker_ctx {
	struct sha256_hasher *h;
	struct batch b;
};

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

/* True when the parent has this very chunk at this very place. */
static bool hint_match(const struct engine_stream *st, uint64_t off, uint64_t len, const uint8_t sha[32])
{
	const struct cas_stream *h = st->hint;
	if (!h || !h->nextents)
		return false;
	uint64_t lo = 0, hi = h->nextents;
	while (lo < hi) {  /* first extent starting at or after off */
		uint64_t mid = lo + (hi - lo) / 2;
		if (st->hint_off[mid] < off)
			lo = mid + 1;
		else
			hi = mid;
	}
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
	x->raw = (uint32_t)n;
	x->state = state;
	return 0;
}

/* Compresses a new chunk into the arena as a finished record (kept raw when
 * LZ4 does not shrink it) and records it B_NEW. */
static int batch_record(struct engine *e, struct batch *b, const uint8_t sha[32], const uint8_t *p, size_t n)
{
	const size_t bound = (size_t)LZ4_compressBound((int)n);
	if (!b->arena)
		arena_get(e, b);
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
	/* LZ4_compress_default clears a 16 KiB table for every chunk, as much
	 * memory as a 4-8 KiB chunk itself; a fast reset of the worker's own
	 * state only moves its offsets. Each chunk is still a block of its own
	 * (no dictionary), as LZ4_decompress_safe reads it. */
	char *dst = (char *)rec + CAS_REC_HEADER;
	int c;
	if (b->lz) {
		LZ4_resetStream_fast(b->lz);
		c = LZ4_compress_fast_continue(b->lz, (const char *)p, dst, (int)n, (int)bound, 1);
	} else {
		c = LZ4_compress_default((const char *)p, dst, (int)n, (int)bound);
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

/* A chunk neither the table nor the index has: entered PENDING under this
 * batch and recorded, unless another worker entered it meanwhile. */
static int chunk_new(struct engine *e, struct worker_ctx *w, struct engine_snap *snap, const uint8_t *p,
		     size_t n, const uint8_t sha[32])
{
	struct stripe *s = stripe_of(e, sha);
	pthread_mutex_lock(&s->lock);
	struct node *nd = table_find(s, sha);
	if (nd) {
		const uint64_t seq = nd->seq;
		pthread_mutex_unlock(&s->lock);
		if (seq != PENDING) {
			atomic_max(&snap->max_seq, seq);
			return 0;
		}
		return batch_push(&w->b, sha, p, n, B_WAIT);
	}
	int rc = table_insert(s, sha, PENDING, &w->b);
	pthread_mutex_unlock(&s->lock);
	if (rc < 0)
		return crest_errf(rc, "recording a new chunk");
	rc = batch_record(e, &w->b, sha, p, n);
	if (rc < 0)
		table_remove(e, sha, &w->b);   /* a waiter finds it gone and stores it */
	return rc;
}

static int chunk_ingest(struct engine *e, struct worker_ctx *w, struct seg *sg, const uint8_t *p,
			size_t n, uint64_t off)
{
	struct engine_snap *snap = sg->st->snap;
	if (dedup_is_zero(p, n)) {
		atomic_fetch_add(&snap->zero_bytes, n);
		return seg_push_extent(sg, n, NULL);
	}
	uint8_t sha[32];
	int rc = sha256_hash(w->h, p, n, sha);
	if (rc < 0)
		return rc;
	atomic_fetch_add(&snap->chunks, 1);
	if (hint_match(sg->st, off, n, sha))
		return seg_push_extent(sg, n, sha);

	struct stripe *s = stripe_of(e, sha);
	pthread_mutex_lock(&s->lock);
	struct node *nd = table_find(s, sha);
	const uint64_t seq = nd ? nd->seq : 0;
	pthread_mutex_unlock(&s->lock);
	if (nd && seq != PENDING)
		atomic_max(&snap->max_seq, seq);
	else if (nd)
		rc = batch_push(&w->b, sha, p, n, B_WAIT);
	else {
		struct cas_loc loc;
		rc = cas_chunk_lookup(e->store, sha, &loc);
		if (rc == -ENOENT)
			rc = chunk_new(e, w, snap, p, n, sha);
	}
	if (rc < 0)
		return rc;
	return seg_push_extent(sg, n, sha);
}

static void seq_moved(struct engine *e)
{
	pthread_mutex_lock(&e->seq_lock);
	e->seq_gen++;
	pthread_cond_broadcast(&e->seq_cond);
	pthread_mutex_unlock(&e->seq_lock);
}

/* Gives up the batch's records (the segment failed): their PENDING nodes go,
 * and whoever waits for one stores the chunk itself. */
static void batch_drop(struct engine *e, struct batch *b, size_t from)
{
	for (size_t i = from; i < b->n; i++)
		if (b->it[i].state == B_NEW)
			table_remove(e, b->it[i].sha, b);
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
	struct stripe *s = stripe_of(e, x.sha);
	for (;;) {
		pthread_mutex_lock(&e->seq_lock);
		const uint64_t gen = e->seq_gen;
		pthread_mutex_unlock(&e->seq_lock);
		pthread_mutex_lock(&s->lock);
		const struct node *nd = table_find(s, x.sha);
		const uint64_t seq = nd ? nd->seq : 0;
		pthread_mutex_unlock(&s->lock);
		if (nd && seq != PENDING) {
			atomic_max(&snap->max_seq, seq);
			return 0;
		}
		if (nd && w->b.holds)   /* mine included: only the holder sets owner */
			return batch_push(&w->b, x.sha, x.data, x.raw, B_WAIT);
		if (!nd) {
			struct cas_loc loc;
			int rc = cas_chunk_lookup(e->store, x.sha, &loc);
			return rc == -ENOENT ? chunk_new(e, w, snap, x.data, x.raw, x.sha) : rc;
		}
		pthread_mutex_lock(&e->seq_lock);
		while (e->seq_gen == gen)
			pthread_cond_wait(&e->seq_cond, &e->seq_lock);
		pthread_mutex_unlock(&e->seq_lock);
	}
}

/* Ends the segment: queues its new records as one job, gives their nodes
 * the job's seq, then waits for the chunks it found PENDING elsewhere (only
 * now, with nothing of its own PENDING: see the top of the file). */
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
			rc = writer_enqueue(e, b, from, bytes, &seq);
			if (rc < 0)
				break;
			for (size_t i = from; i < end; i++) {
				const struct bitem *x = &b->it[i];
				if (x->state != B_NEW)
					continue;
				struct stripe *s = stripe_of(e, x->sha);
				pthread_mutex_lock(&s->lock);
				struct node *nd = table_find(s, x->sha);
				if (nd && nd->owner == b && nd->seq == PENDING) {
					nd->seq = seq;
					nd->owner = NULL;
				}
				pthread_mutex_unlock(&s->lock);
			}
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

static int seg_process(struct engine *e, struct worker_ctx *w, struct seg *sg)
{
	if (!sg->data) {
		/* A hole found with SEEK_HOLE: stored as a hole like a zero chunk,
		 * so it counts in zero_bytes too. */
		atomic_fetch_add(&sg->st->snap->zero_bytes, sg->len);
		return seg_push_extent(sg, sg->len, NULL);
	}
	const struct dedup_params *dp = sg->st->dp;
	size_t off = 0;
	while (off < sg->len) {
		size_t n = dedup_next(dp, sg->data + off, sg->len - off);
		int rc = chunk_ingest(e, w, sg, sg->data + off, n, sg->off + off);
		if (rc < 0) {
			batch_drop(e, &w->b, 0);
			return rc;
		}
		off += n;
	}
	return batch_flush(e, w, sg->st->snap);
}

static void staging_put(struct engine *e, void *buf)
{
	pthread_mutex_lock(&e->stage_lock);
	e->free_bufs[e->nfree++] = buf;
	pthread_cond_signal(&e->stage_cond);
	pthread_mutex_unlock(&e->stage_lock);
}

static void seg_release(struct engine *e, struct seg *sg)
{
	if (sg->staging) {
		staging_put(e, sg->staging);
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

static void snap_fail(struct engine_snap *snap, int err, const char *msg)
{
	/* under e->lock */
	if (!snap->err) {
		snap->err = err;
		snprintf(snap->errmsg, sizeof(snap->errmsg), "%s", msg);
	}
}

static void *worker_main(void *arg)
{
	struct engine *e = arg;
	struct worker_ctx w = { 0 };
	int hrc = sha256_hasher_new(&w.h);
	w.b.lz = LZ4_createStream();   /* NULL: LZ4_compress_default instead */
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
		bool skip = snap->err || snap->aborted;
		pthread_mutex_unlock(&e->lock);

		int rc = skip ? 0 : hrc < 0 ? hrc : seg_process(e, &w, sg);
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
			snap_fail(snap, rc, msg);
		snap->segs_done++;
		if (snap->sealed && snap->segs_done == snap->segs_total)
			pthread_cond_broadcast(&e->snap_cond);
	}
	pthread_mutex_unlock(&e->lock);
	sha256_hasher_free(w.h);
	free(w.b.arena);
	free(w.b.it);
	if (w.b.lz)
		LZ4_freeStream(w.b.lz);
	return NULL;
}

/* ---- producers ---- */

static int seg_submit(struct engine_stream *st, const uint8_t *data, size_t len, void *staging,
		      struct release_ref *rel)
{
	struct engine *e = st->snap->e;
	struct seg *sg = calloc(1, sizeof(*sg));
	if (!sg)
		return crest_errf(-ENOMEM, "queueing a segment");
	if (st->nsegs == st->cap) {
		size_t cap = st->cap ? st->cap * 2 : 64;
		struct seg **ns = realloc(st->segs, cap * sizeof(*ns));
		if (!ns) {
			free(sg);
			return crest_errf(-ENOMEM, "queueing a segment");
		}
		st->segs = ns;
		st->cap = cap;
	}
	st->segs[st->nsegs++] = sg;
	sg->st = st;
	sg->off = st->size;
	sg->data = data;
	sg->len = len;
	sg->staging = staging;
	sg->rel = rel;
	st->size += len;
	pthread_mutex_lock(&e->lock);
	st->snap->segs_total++;
	if (e->jq_tail)
		e->jq_tail->next = sg;
	else
		e->jq_head = sg;
	e->jq_tail = sg;
	pthread_cond_signal(&e->job_cond);
	pthread_mutex_unlock(&e->lock);
	return 0;
}

static int staging_get(struct engine *e, void **out)
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
	*out = malloc(e->o.segment_bytes);
	if (!*out) {
		pthread_mutex_lock(&e->stage_lock);
		e->nbufs--;
		pthread_mutex_unlock(&e->stage_lock);
		return crest_errf(-ENOMEM, "allocating %zu bytes of staging", e->o.segment_bytes);
	}
	return 0;
}

int engine_snapshot_begin(struct engine *e, const char *kind, struct engine_snap **out)
{
	struct engine_snap *s = calloc(1, sizeof(*s));
	if (!s)
		return crest_errf(-ENOMEM, "starting a snapshot");
	s->e = e;
	s->m = cas_manifest_new(kind);
	if (!s->m) {
		free(s);
		return crest_errf(-ENOMEM, "starting a snapshot");
	}
	s->m->time_ns = time_wall_ns();
	s->begin_ns = time_now_ns();
	pthread_mutex_lock(&e->lock);
	if (e->cq_tail)
		e->cq_tail->next = s;
	else
		e->cq_head = s;
	e->cq_tail = s;
	pthread_mutex_unlock(&e->lock);
	*out = s;
	return 0;
}

struct cas_manifest *engine_snapshot_manifest(struct engine_snap *s)
{
	return s->m;
}

int engine_snapshot_set_tag(struct engine_snap *s, const char *tag)
{
	int rc = cas_tag_check(tag);
	if (rc < 0)
		return rc;
	free(s->tag);
	s->tag = strdup(tag);
	return s->tag ? 0 : crest_errf(-ENOMEM, "setting a tag");
}

void engine_snapshot_set_parent(struct engine_snap *s, const uint8_t id[32], struct cas_manifest *parent)
{
	s->m->has_parent = true;
	memcpy(s->m->parent, id, 32);
	cas_manifest_free(s->parent);
	s->parent = parent;
}

void engine_snapshot_expect(struct engine_snap *s, uint64_t bytes)
{
	atomic_fetch_add(&s->expect, bytes);
}

void engine_snapshot_progress(struct engine_snap *s, uint64_t *done, uint64_t *total)
{
	*done = atomic_load(&s->bytes_done);
	*total = atomic_load(&s->expect);
}

static int stream_new(struct engine_snap *s, const char *name, uint8_t type, bool memory,
		      struct engine_stream **out)
{
	struct engine_stream *st = calloc(1, sizeof(*st));
	struct engine_stream **ns = realloc(s->streams, (s->nstreams + 1) * sizeof(*ns));
	if (!st || !ns) {
		free(st);
		if (ns)
			s->streams = ns;
		return crest_errf(-ENOMEM, "adding stream %s", name);
	}
	s->streams = ns;
	st->snap = s;
	st->dp = memory ? &s->e->o.memory_chunking : &s->e->o.file_chunking;
	st->meta.type = type;
	if (cas_stream_set_str(&st->meta.name, name) < 0 || cas_stream_set_str(&st->meta.target, "") < 0 ||
	    cas_stream_set_str(&st->meta.meta, "") < 0) {
		free(st->meta.name);
		free(st->meta.target);
		free(st);
		return crest_errf(-ENOMEM, "adding stream %s", name);
	}
	s->streams[s->nstreams++] = st;
	/* A parent's chunk list stands in for index look-ups only while every
	 * pack the index names is there (cas_store_damaged). */
	if (s->parent && !cas_store_damaged(s->e->store)) {
		const struct cas_stream *h = cas_manifest_find(s->parent, name);
		if (h && h->nextents) {
			st->hint_off = malloc(h->nextents * sizeof(*st->hint_off));
			if (st->hint_off) {
				uint64_t o = 0;
				for (uint64_t i = 0; i < h->nextents; i++) {
					st->hint_off[i] = o;
					o += h->ext[i].len;
				}
				st->hint = h;
			}
		}
	}
	*out = st;
	return 0;
}

int engine_add_entry(struct engine_snap *s, const char *name, uint8_t type, uint32_t mode,
		     int64_t mtime_ns, const char *target)
{
	struct engine_stream *st = NULL;
	int rc = stream_new(s, name, type, false, &st);
	if (rc < 0)
		return rc;
	st->meta.mode = mode;
	st->meta.mtime_ns = mtime_ns;
	st->closed = true;
	if (target && cas_stream_set_str(&st->meta.target, target) < 0)
		return crest_errf(-ENOMEM, "adding %s", name);
	return 0;
}

int engine_stream_open(struct engine_snap *s, const char *name, uint8_t type, bool memory,
		       struct engine_stream **out)
{
	return stream_new(s, name, type, memory, out);
}

struct cas_stream *engine_stream_meta(struct engine_stream *st)
{
	return &st->meta;
}

/* Reads exactly len bytes at off, or fails naming what changed. */
static int read_full(int fd, uint8_t *buf, size_t len, uint64_t off, const char *what)
{
	size_t got = 0;
	while (got < len) {
		ssize_t r = pread(fd, buf + got, len - got, (off_t)(off + got));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return crest_errf(-errno, "cannot read %s", what);
		if (r == 0)
			return crest_errx(-EIO, "%s shrank while crest read it", what);
		got += (size_t)r;
	}
	return 0;
}

int engine_stream_add_fd(struct engine_stream *st, int fd, const char *what)
{
	struct engine *e = st->snap->e;
	struct stat sb;
	if (fstat(fd, &sb) < 0)
		return crest_errf(-errno, "cannot stat %s", what);
	const uint64_t size = (uint64_t)sb.st_size, seg = e->o.segment_bytes;
	uint64_t pos = st->size;  /* a stream read from one fd starts at 0 */
	while (pos < size) {
		off_t data = lseek(fd, (off_t)pos, SEEK_DATA);
		if (data < 0)
			data = errno == ENXIO ? (off_t)size : (off_t)pos;  /* ENXIO: only a hole is left */
		if ((uint64_t)data > pos) {
			int rc = seg_submit(st, NULL, (uint64_t)data - pos, NULL, NULL);
			if (rc < 0)
				return rc;
			pos = (uint64_t)data;
		}
		if (pos >= size)
			break;
		off_t hole = lseek(fd, (off_t)pos, SEEK_HOLE);
		uint64_t end = hole < 0 || (uint64_t)hole > size ? size : (uint64_t)hole;
		while (pos < end) {
			/* Cut at multiples of the segment size: the same bytes give
			 * the same segments, so CDC cuts stay put between snapshots. */
			uint64_t next = (pos / seg + 1) * seg;
			size_t len = (size_t)((next < end ? next : end) - pos);
			void *buf;
			int rc = staging_get(e, &buf);
			if (rc < 0)
				return rc;
			rc = read_full(fd, buf, len, pos, what);
			if (rc == 0)
				rc = seg_submit(st, buf, len, buf, NULL);
			if (rc < 0) {
				staging_put(e, buf);
				return rc;
			}
			pos += len;
		}
	}
	return 0;
}

int engine_stream_add_memory(struct engine_stream *st, const void *p, size_t len,
			     void (*release)(void *arg), void *arg)
{
	struct engine *e = st->snap->e;
	if (len == 0) {
		if (release)
			release(arg);
		return 0;
	}
	struct release_ref *rel = malloc(sizeof(*rel));
	if (!rel)
		return crest_errf(-ENOMEM, "adding memory to stream %s", st->meta.name);
	rel->release = release;
	rel->arg = arg;
	/* The producer holds one reference until every segment is queued, so
	 * the callback cannot run while segments are still being added. */
	atomic_init(&rel->refs, 1);
	const uint8_t *base = p;
	const uint64_t seg = e->o.segment_bytes;
	int rc = 0;
	for (size_t off = 0; off < len;) {
		/* Cut at multiples of the segment size in the stream, as for files. */
		size_t n = (size_t)((st->size / seg + 1) * seg - st->size);
		if (n > len - off)
			n = len - off;
		atomic_fetch_add(&rel->refs, 1);
		rc = seg_submit(st, base + off, n, NULL, rel);
		if (rc < 0) {
			atomic_fetch_sub(&rel->refs, 1);
			break;
		}
		off += n;
	}
	if (atomic_fetch_sub(&rel->refs, 1) == 1) {
		if (release)
			release(arg);
		free(rel);
	}
	return rc;
}

int engine_stream_close(struct engine_stream *st)
{
	st->closed = true;
	return 0;
}

int engine_snapshot_seal(struct engine_snap *s)
{
	struct engine *e = s->e;
	uint64_t logical = 0;
	for (size_t i = 0; i < s->nstreams; i++)
		logical += s->streams[i]->size;
	pthread_mutex_lock(&e->lock);
	s->sealed = true;
	s->m->logical_bytes = logical;
	pthread_cond_broadcast(&e->snap_cond);
	pthread_mutex_unlock(&e->lock);
	return 0;
}

/* ---- commit ---- */

static void snap_free(struct engine_snap *s)
{
	for (size_t i = 0; i < s->nstreams; i++) {
		struct engine_stream *st = s->streams[i];
		for (size_t j = 0; j < st->nsegs; j++) {
			free(st->segs[j]->ext);
			free(st->segs[j]);
		}
		free(st->segs);
		free(st->hint_off);
		free(st->meta.name);
		free(st->meta.target);
		free(st->meta.meta);
		free(st->meta.ext);
		free(st);
	}
	free(s->streams);
	cas_manifest_free(s->m);
	cas_manifest_free(s->parent);
	free(s->tag);
	free(s);
}

/* Moves each stream's extents, segment by segment, into the manifest. */
static int snap_build_manifest(struct engine_snap *s)
{
	for (size_t i = 0; i < s->nstreams; i++) {
		struct engine_stream *st = s->streams[i];
		uint64_t n = 0;
		for (size_t j = 0; j < st->nsegs; j++)
			n += st->segs[j]->next_ext;
		struct cas_extent *ext = malloc((n ? n : 1) * sizeof(*ext));
		if (!ext)
			return crest_errf(-ENOMEM, "building the manifest");
		uint64_t k = 0;
		for (size_t j = 0; j < st->nsegs; j++) {
			const struct seg *sg = st->segs[j];
			for (size_t x = 0; x < sg->next_ext; x++) {
				if (sg->ext[x].hole && k && ext[k - 1].hole)
					ext[k - 1].len += sg->ext[x].len;
				else
					ext[k++] = sg->ext[x];
			}
		}
		struct cas_stream *ms = cas_manifest_add_stream(s->m, st->meta.name, st->meta.type);
		if (!ms) {
			free(ext);
			return crest_errf(-ENOMEM, "building the manifest");
		}
		ms->mode = st->meta.mode;
		ms->mtime_ns = st->meta.mtime_ns;
		ms->size = st->size;
		if (cas_stream_set_str(&ms->target, st->meta.target) < 0 ||
		    cas_stream_set_str(&ms->meta, st->meta.meta) < 0) {
			free(ext);
			return crest_errf(-ENOMEM, "building the manifest");
		}
		ms->ext = ext;
		ms->nextents = k;
	}
	return 0;
}

static int snap_commit(struct engine *e, struct engine_snap *s)
{
	uint64_t need = atomic_load(&s->max_seq);
	pthread_mutex_lock(&e->wlock);
	if (need > e->synced_seq) {
		if (need > e->sync_target)
			e->sync_target = need;
		pthread_cond_broadcast(&e->wcond);
		while (e->synced_seq < need && !e->werr)
			pthread_cond_wait(&e->wcond, &e->wlock);
	}
	if (e->werr) {
		int err = e->werr;
		crest_errset_str(e->werrmsg);
		pthread_mutex_unlock(&e->wlock);
		return err;
	}
	/* pend is in seq order, so the durable entries are a prefix of it. */
	size_t n = 0;
	while (n < e->npend && e->pend[n].seq <= e->synced_seq)
		n++;
	struct cas_index_entry *ie = malloc((n ? n : 1) * sizeof(*ie));
	if (ie)
		for (size_t i = 0; i < n; i++)
			ie[i] = e->pend[i].ie;
	pthread_mutex_unlock(&e->wlock);
	if (!ie)
		return crest_errf(-ENOMEM, "committing a snapshot");

	int rc = snap_build_manifest(s);
	if (rc == 0)
		rc = cas_commit(e->store, ie, n, s->m, s->tag, s->res.id);
	if (rc == 0 && n) {
		/* n == 0 when the snapshot added no chunk: pend may then still be
		 * NULL, and memmove(NULL, ...) is undefined even for 0 bytes. */
		pthread_mutex_lock(&e->wlock);
		memmove(e->pend, e->pend + n, (e->npend - n) * sizeof(*e->pend));
		e->npend -= n;
		pthread_mutex_unlock(&e->wlock);
		for (size_t i = 0; i < n; i++)
			table_remove(e, ie[i].sha, NULL);
	}
	free(ie);
	return rc;
}

/* Under e->lock, with the commit queue empty: no snapshot is in flight
 * that could reference a write the writer failed, and none can begin.
 * Once the writer is idle, everything written and not committed is
 * forgotten (the table, the pending index entries; the store starts a fresh
 * pack and cuts the old ones' unreferenced ends), and werr is cleared. When
 * the store cannot do that yet, werr stays, with the new reason, and the
 * next snapshot to fail tries again. */
static void engine_recover(struct engine *e)
{
	pthread_mutex_lock(&e->wlock);
	if (!e->werr) {
		pthread_mutex_unlock(&e->wlock);
		return;
	}
	/* Jobs of failed snapshots may still be queued (not written after a
	 * failure), or a write or sync begun before it still running. */
	while (e->wq_head || e->completed_seq != e->enq_seq || e->synced_seq < e->sync_target)
		pthread_cond_wait(&e->wcond, &e->wlock);
	int rc = cas_pack_discard(e->store);
	if (rc < 0) {
		e->werr = rc;
		crest_errcpy(e->werrmsg, sizeof(e->werrmsg));
		pthread_mutex_unlock(&e->wlock);
		return;
	}
	e->werr = 0;
	e->werrmsg[0] = 0;
	e->npend = 0;
	pthread_mutex_unlock(&e->wlock);
	/* No worker is busy: every node has a seq, none is PENDING. */
	for (int i = 0; i < NSTRIPES; i++) {
		struct stripe *st = &e->stripes[i];
		pthread_mutex_lock(&st->lock);
		for (size_t b = 0; b < st->nb; b++) {
			for (struct node *n = st->b[b], *next; n; n = next) {
				next = n->next;
				free(n);
			}
			st->b[b] = NULL;
		}
		st->n = 0;
		pthread_mutex_unlock(&st->lock);
	}
}

static void *committer_main(void *arg)
{
	struct engine *e = arg;
	pthread_mutex_lock(&e->lock);
	for (;;) {
		struct engine_snap *s = e->cq_head;
		while (!(s && s->sealed && s->segs_done == s->segs_total)) {
			if (!s && e->stop_committer)
				goto out;
			pthread_cond_wait(&e->snap_cond, &e->lock);
			s = e->cq_head;
		}
		e->cq_head = s->next;
		if (!e->cq_head)
			e->cq_tail = NULL;
		int err = s->err;
		bool aborted = s->aborted;
		pthread_mutex_unlock(&e->lock);

		int rc = err || aborted ? 0 : snap_commit(e, s);
		char msg[1024];
		if (rc < 0)
			crest_errcpy(msg, sizeof(msg));

		pthread_mutex_lock(&e->lock);
		if (rc < 0)
			snap_fail(s, rc, msg);
		struct engine_result *r = &s->res;
		r->logical_bytes = s->m->logical_bytes;
		r->zero_bytes = atomic_load(&s->zero_bytes);
		r->new_bytes = atomic_load(&s->new_bytes);
		r->stored_bytes = atomic_load(&s->stored_bytes);
		r->chunks = atomic_load(&s->chunks);
		r->new_chunks = atomic_load(&s->new_chunks);
		r->ingest_ns = time_now_ns() - s->begin_ns;
		/* Before s is done: whoever waits for it may begin the next one
		 * at once, and it should find the engine working again. */
		if (!e->cq_head)
			engine_recover(e);
		s->done = true;
		if (s->detached) {
			pthread_mutex_unlock(&e->lock);
			snap_free(s);
			pthread_mutex_lock(&e->lock);
		}
		pthread_cond_broadcast(&e->snap_cond);
	}
out:
	pthread_mutex_unlock(&e->lock);
	return NULL;
}

bool engine_snapshot_timedwait(struct engine_snap *s, uint64_t timeout_ns)
{
	struct engine *e = s->e;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t t = (uint64_t)ts.tv_nsec + timeout_ns;
	ts.tv_sec += (time_t)(t / 1000000000);
	ts.tv_nsec = (long)(t % 1000000000);
	pthread_mutex_lock(&e->lock);
	while (!s->done && pthread_cond_timedwait(&e->snap_cond, &e->lock, &ts) == 0)
		;
	bool done = s->done;
	pthread_mutex_unlock(&e->lock);
	return done;
}

int engine_snapshot_wait(struct engine_snap *s, struct engine_result *r)
{
	struct engine *e = s->e;
	pthread_mutex_lock(&e->lock);
	while (!s->done)
		pthread_cond_wait(&e->snap_cond, &e->lock);
	pthread_mutex_unlock(&e->lock);
	int rc = s->err;
	if (rc < 0)
		crest_errset_str(s->errmsg);
	if (r)
		*r = s->res;
	snap_free(s);
	return rc;
}

void engine_snapshot_abort(struct engine_snap *s)
{
	struct engine *e = s->e;
	pthread_mutex_lock(&e->lock);
	s->aborted = true;
	s->sealed = true;
	s->detached = true;
	bool done = s->done;
	pthread_cond_broadcast(&e->snap_cond);
	pthread_mutex_unlock(&e->lock);
	if (done)
		snap_free(s);
}

/* ---- open and close ---- */

int engine_open(struct cas_store *store, const struct engine_opts *o, struct engine **out)
{
	struct engine *e = calloc(1, sizeof(*e));
	if (!e)
		return crest_errf(-ENOMEM, "starting the engine");
	engine_opts_default(&e->o);
	if (o) {
		if (o->workers)
			e->o.workers = o->workers;
		if (o->staging_bytes)
			e->o.staging_bytes = o->staging_bytes;
		if (o->segment_bytes)
			e->o.segment_bytes = o->segment_bytes;
		if (o->write_queue_bytes)
			e->o.write_queue_bytes = o->write_queue_bytes;
		if (o->file_chunking.avg)
			e->o.file_chunking = o->file_chunking;
		if (o->memory_chunking.avg)
			e->o.memory_chunking = o->memory_chunking;
	}
	if (e->o.segment_bytes < e->o.file_chunking.max || e->o.segment_bytes < e->o.memory_chunking.max)
		e->o.segment_bytes = e->o.file_chunking.max > e->o.memory_chunking.max
					     ? e->o.file_chunking.max : e->o.memory_chunking.max;
	e->store = store;
	const char *fault = getenv("CREST_FAULT_WRITE");
	if (fault)
		e->fault_write = strtoull(fault, NULL, 10);
	e->maxbufs = e->o.staging_bytes / e->o.segment_bytes;
	if (e->maxbufs < 2)
		e->maxbufs = 2;
	e->free_bufs = calloc(e->maxbufs, sizeof(void *));
	e->workers = calloc(e->o.workers, sizeof(pthread_t));
	if (!e->free_bufs || !e->workers) {
		free(e->free_bufs);
		free(e->workers);
		free(e);
		return crest_errf(-ENOMEM, "starting the engine");
	}
	pthread_mutex_init(&e->lock, NULL);
	pthread_cond_init(&e->job_cond, NULL);
	pthread_cond_init(&e->snap_cond, NULL);
	pthread_mutex_init(&e->stage_lock, NULL);
	pthread_cond_init(&e->stage_cond, NULL);
	pthread_mutex_init(&e->wlock, NULL);
	pthread_cond_init(&e->wcond, NULL);
	pthread_mutex_init(&e->seq_lock, NULL);
	pthread_cond_init(&e->seq_cond, NULL);
	for (int i = 0; i < NSTRIPES; i++)
		pthread_mutex_init(&e->stripes[i].lock, NULL);

	int rc = pthread_create(&e->writer, NULL, writer_main, e);
	e->writer_started = rc == 0;
	if (rc == 0) {
		rc = pthread_create(&e->committer, NULL, committer_main, e);
		e->committer_started = rc == 0;
	}
	for (unsigned i = 0; rc == 0 && i < e->o.workers; i++) {
		rc = pthread_create(&e->workers[i], NULL, worker_main, e);
		if (rc == 0)
			e->nworkers++;
	}
	if (rc != 0) {
		engine_close(e);
		return crest_errf(-rc, "starting engine threads");
	}
	*out = e;
	return 0;
}

void engine_close(struct engine *e)
{
	if (!e)
		return;
	/* Snapshots never sealed are dropped, not committed. */
	pthread_mutex_lock(&e->lock);
	for (struct engine_snap *s = e->cq_head; s; s = s->next)
		if (!s->sealed) {
			s->sealed = s->aborted = s->detached = true;
		}
	e->stop_committer = true;
	pthread_cond_broadcast(&e->snap_cond);
	pthread_mutex_unlock(&e->lock);
	if (e->committer_started)
		pthread_join(e->committer, NULL);

	pthread_mutex_lock(&e->lock);
	e->stop_workers = true;
	pthread_cond_broadcast(&e->job_cond);
	pthread_mutex_unlock(&e->lock);
	for (unsigned i = 0; i < e->nworkers; i++)
		pthread_join(e->workers[i], NULL);

	pthread_mutex_lock(&e->wlock);
	e->wstop = true;
	pthread_cond_broadcast(&e->wcond);
	pthread_mutex_unlock(&e->wlock);
	if (e->writer_started)
		pthread_join(e->writer, NULL);

	for (size_t i = 0; i < e->nfree; i++)
		free(e->free_bufs[i]);
	free(e->free_bufs);
	free(e->workers);
	free(e->pend);
	for (size_t i = 0; i < e->narenas; i++)
		free(e->arenas[i]);
	free(e->arenas);
	free(e->arena_caps);
	for (int i = 0; i < NSTRIPES; i++) {
		struct stripe *s = &e->stripes[i];
		for (size_t b = 0; b < s->nb; b++)
			for (struct node *n = s->b[b], *next; n; n = next) {
				next = n->next;
				free(n);
			}
		free(s->b);
		pthread_mutex_destroy(&s->lock);
	}
	free(e);
}
