/*
 * writer.c - the writer threads, one per lane of the store (cas.h): each
 * writes its lane's jobs to packs in seq order (one cas_pack_write per
 * batch of runs, through the lane's io_uring) and syncs its lane on the
 * committer's request; together they keep the index entries of what was
 * written (pend) until a commit takes them.
 *
 * Owns: everything under e->wlock (the lanes' job queues and the byte
 * budget, the seqs, werr, pend, the spare arenas). Promises: a seq n is
 * written once every lane has written its jobs up to n (lane_done), and
 * synced_seq >= n means every job up to n is durable; after a failure,
 * werr stays set, and nothing is written, until eng_writer_recover.
 * Calls only the store (cas_pack_*), never the other parts.
 *
 * Why each lane's jobs are reserved and written in seq order: the store
 * requires a lane's records to be committed in the order they were
 * reserved (its rollback cuts each lane's packs at the last committed
 * record), and the committer commits the durable prefix of pend, which is
 * in seq order.
 */
#include "engine/engine_int.h"
#include "util/err.h"
#include "util/progress.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define WRITE_BATCH 64          /* runs per cas_pack_write */

/* An arena from the writer's leftovers, or a new one. */
void eng_writer_arena_get(struct engine *e, struct batch *b)
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
int eng_writer_enqueue(struct engine *e, struct batch *b, size_t from, size_t bytes, uint64_t *seq)
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
	if (e->wq_bytes > e->o.write_queue_bytes && !e->werr) {
		const uint64_t t = e->trace ? time_now_ns() : 0;
		while (e->wq_bytes > e->o.write_queue_bytes && !e->werr)
			pthread_cond_wait(&e->wcond, &e->wlock);
		if (e->trace)
			e->t_wfull += time_now_ns() - t;
	}
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
	/* The lane with the fewest bytes queued, the first of equals turning
	 * with the seq (seq 1: lane 0, whose pack the store made at open): a
	 * lane whose disk is slow gets less. */
	unsigned lane = (unsigned)((j->seq - 1) % e->nlanes);
	for (unsigned k = 1; k < e->nlanes; k++) {
		const unsigned c = (unsigned)((j->seq - 1 + k) % e->nlanes);
		if (e->lanes[c].bytes < e->lanes[lane].bytes)
			lane = c;
	}
	struct wlane *L = &e->lanes[lane];
	for (size_t i = from; i < b->n; i++) {
		const struct bitem *x = &b->it[i];
		if (x->state != B_NEW)
			continue;
		struct pend *p = &e->pend[e->npend];
		rc = cas_pack_reserve(e->store, lane, x->stored, x->raw, x->codec, &p->ie.loc);
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
	if (L->tail)
		L->tail->next = j;
	else
		L->head = j;
	L->tail = j;
	L->bytes += bytes;
	e->wq_bytes += bytes;
	/* The records' nodes get the seq here, under wlock, in the step that
	 * makes their entries a commit's to take: once wlock is let go, any
	 * snapshot's commit may take them (it takes every entry durable by
	 * then) and forget, and free, the nodes. The batch must not touch
	 * them after this (engine_int.h, struct node). Only on success: a
	 * failed enqueue leaves them PENDING for batch_drop to take out. */
	for (size_t i = from; i < b->n; i++)
		if (b->it[i].state == B_NEW)
			atomic_store(&b->it[i].nd->seq, j->seq);
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

/* Under wlock: every job of lane L up to this seq is written. */
static uint64_t lane_done(const struct engine *e, const struct wlane *L)
{
	if (L->busy_seq)
		return L->busy_seq - 1;
	return L->head ? L->head->seq - 1 : e->enq_seq;
}

/* Under wlock: the lowest of the lanes' synced seqs. */
static void synced_update(struct engine *e)
{
	uint64_t m = UINT64_MAX;
	for (unsigned i = 0; i < e->nlanes; i++)
		if (e->lanes[i].synced < m)
			m = e->lanes[i].synced;
	e->synced_seq = m;
}

/* Under wlock: keeps the first failure. */
static void writer_fail(struct engine *e, int rc)
{
	if (rc < 0 && !e->werr) {
		e->werr = rc;
		crest_errcpy(e->werrmsg, sizeof(e->werrmsg));
	}
}

/* Writes a batch of runs. For tests, CREST_FAULT_WRITE=N (read once per
 * engine) fails this engine's Nth batch, counted over all lanes, without
 * writing it, as a full or failing disk would: the places it reserved stay
 * holes in the pack. */
static int writer_write(struct engine *e, unsigned lane, bool inject, const struct cas_write *w, unsigned n)
{
	if (inject)
		return crest_errx(-EIO, "writing chunks to the store: failure injected by CREST_FAULT_WRITE=%llu",
				  (unsigned long long)e->fault_write);
	return cas_pack_write(e->store, lane, w, n);
}

/* One lane's thread: it syncs when the committer waits for a seq the lane
 * has written everything up to (before writing later jobs, which would
 * only make the commit wait longer), else writes the lane's jobs. */
void *eng_writer_main(void *arg)
{
	struct wlane *L = arg;
	struct engine *e = L->e;
	const unsigned lane = (unsigned)(L - e->lanes);
	struct wjob *batch[WRITE_BATCH];
	struct cas_write *w = NULL;
	unsigned capw = 0;
	pthread_mutex_lock(&e->wlock);
	for (;;) {
		const bool want_sync = e->sync_target > L->synced && (!L->head || L->head->seq > e->sync_target);
		if (!want_sync && !L->head && !e->wstop) {
			pthread_cond_wait(&e->wcond, &e->wlock);
			continue;
		}
		if (want_sync) {
			const uint64_t upto = lane_done(e, L);
			const bool failed = e->werr != 0;
			pthread_mutex_unlock(&e->wlock);
			const int rc = failed ? 0 : cas_pack_sync(e->store, lane);
			pthread_mutex_lock(&e->wlock);
			writer_fail(e, rc);
			L->synced = upto;
			synced_update(e);
			pthread_cond_broadcast(&e->wcond);
			continue;
		}
		if (!L->head)
			break;   /* wstop, and nothing left */
		unsigned n = 0, nw = 0;
		size_t bytes = 0;
		/* Up to WRITE_BATCH runs, or one job of more (tiny packs). */
		while (L->head && n < WRITE_BATCH && (n == 0 || nw + L->head->nruns <= WRITE_BATCH)) {
			struct wjob *j = L->head;
			if (nw + j->nruns > capw) {
				unsigned cap = nw + j->nruns > WRITE_BATCH ? nw + j->nruns : WRITE_BATCH;
				struct cas_write *nwp = realloc(w, cap * sizeof(*nwp));
				if (!nwp) {
					writer_fail(e, crest_errf(-ENOMEM, "writing chunks"));
					break;
				}
				w = nwp;
				capw = cap;
			}
			L->head = j->next;
			batch[n++] = j;
			for (unsigned r = 0; r < j->nruns; r++)
				w[nw++] = j->runs[r];
			bytes += j->bytes;
		}
		if (!L->head)
			L->tail = NULL;
		if (!n) {   /* no memory for the first job's runs: it fails unwritten */
			struct wjob *j = L->head;
			L->head = j->next;
			if (!L->head)
				L->tail = NULL;
			batch[n++] = j;
			bytes = j->bytes;
			nw = 0;
		}
		L->busy_seq = batch[0]->seq;
		const bool failed = e->werr != 0;
		const bool inject = !failed && nw && ++e->writes == e->fault_write;
		pthread_mutex_unlock(&e->wlock);
		const uint64_t t = e->trace ? time_now_ns() : 0;
		const int rc = failed || !nw ? 0 : writer_write(e, lane, inject, w, nw);
		pthread_mutex_lock(&e->wlock);
		if (e->trace) {
			e->t_wbusy += time_now_ns() - t;
			e->w_bytes += bytes;
		}
		writer_fail(e, rc);
		L->busy_seq = 0;
		for (unsigned i = 0; i < n; i++) {
			arena_put(e, batch[i]->arena, batch[i]->arena_cap);
			free(batch[i]->runs);
			free(batch[i]);
		}
		L->bytes -= bytes;
		e->wq_bytes -= bytes;
		pthread_cond_broadcast(&e->wcond);
	}
	pthread_mutex_unlock(&e->wlock);
	free(w);
	return NULL;
}

/* For the committer: asks for a sync up to need and waits for it, then
 * sets *ie (the caller frees it) to a copy of the first *n pending index
 * entries, every one durable. Fails with the writer's error, if it has one. */
int eng_writer_durable(struct engine *e, uint64_t need, struct cas_index_entry **out, size_t *nout)
{
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
	*out = ie;
	*nout = n;
	return 0;
}

/* The first n (> 0) pending entries are committed: the index has them. */
void eng_writer_committed(struct engine *e, size_t n)
{
	pthread_mutex_lock(&e->wlock);
	memmove(e->pend, e->pend + n, (e->npend - n) * sizeof(*e->pend));
	e->npend -= n;
	pthread_mutex_unlock(&e->wlock);
}

/* With no snapshot in flight (see engine_recover): once the writer is idle,
 * forgets everything written and not committed (the pending entries; the
 * store starts a fresh pack and cuts the old ones' unreferenced ends) and
 * clears werr. True when it did, so the caller forgets the pending table
 * too; false when there was no error, or the store could not do it yet
 * (werr then holds the new reason). */
bool eng_writer_recover(struct engine *e)
{
	pthread_mutex_lock(&e->wlock);
	if (!e->werr) {
		pthread_mutex_unlock(&e->wlock);
		return false;
	}
	/* Jobs of failed snapshots may still be queued (not written after a
	 * failure), or a write or sync begun before it still running. */
	for (;;) {
		bool busy = e->synced_seq < e->sync_target;
		for (unsigned i = 0; i < e->nlanes && !busy; i++)
			busy = e->lanes[i].head || e->lanes[i].busy_seq;
		if (!busy)
			break;
		pthread_cond_wait(&e->wcond, &e->wlock);
	}
	int rc = cas_pack_discard(e->store);
	if (rc < 0) {
		e->werr = rc;
		crest_errcpy(e->werrmsg, sizeof(e->werrmsg));
		pthread_mutex_unlock(&e->wlock);
		return false;
	}
	e->werr = 0;
	e->werrmsg[0] = 0;
	e->npend = 0;
	pthread_mutex_unlock(&e->wlock);
	return true;
}
