/*
 * engine_int.h - the engine's private state, shared by its four parts only;
 * the public API is engine.h.
 *
 * Parts, each calling only the ones below it:
 *   engine.c   the API: producers, snapshots, the committer, open/close;
 *   workers.c  the worker threads and the staging buffers;
 *   writer.c   the writer thread, its queue and the pending index entries;
 *   pending.c  the table of chunks written but not committed.
 * writer.c and pending.c call neither each other nor anything above them.
 * Every part sees struct engine; each file's header says which of it that
 * part owns. engine.c creates it, starts and stops the threads, and frees
 * what is left at close.
 *
 * Threads and what they own:
 *   producers (callers)  cut streams into segments and queue them (jobs);
 *   workers (N)          chunk a segment, hash each chunk, decide whether the
 *                        store has it, compress new ones into the worker's
 *                        arena as finished pack records, and queue the
 *                        segment's new records as one job (wq);
 *   writers (1 a lane)   write queued jobs to their lane's packs, sync on
 *                        request;
 *   committer (1)        commits snapshots in begin order.
 *
 * Dedup of a chunk, in order: all zeros (a hole, no hash needed beyond the
 * zero test), the parent snapshot's chunk at the same offset (a memory
 * compare), the RocksDB index, then the table of chunks written but not
 * yet committed, visited once under its stripe lock to find the chunk or
 * enter it (forget_gen, below, says why that order loses nothing).
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
 * Write ordering. Every job queued for the writers gets a sequence number
 * (seq) under wlock, and goes to one lane (cas.h), in whose pack its
 * records are reserved under the same lock; each lane's writer writes its
 * jobs in seq order, so a lane has written every job up to n when the
 * first it has not written is past n. A snapshot remembers the highest seq
 * it references (max_seq), whether it queued that chunk or found it in the
 * table. Before committing, the committer asks for a sync up to max_seq;
 * each lane syncs once it has written its jobs up to that, and synced_seq
 * is the lowest of the lanes' synced seqs. Only then are index entries
 * (all pending up to synced_seq) and the manifest written in one synced
 * batch.
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
#ifndef CREST_ENGINE_INT_H
#define CREST_ENGINE_INT_H

#include "engine/engine.h"

#include <lz4.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/resource.h>

/* Stripes of the pending table. Each is locked for every look-up and
 * doubles under its lock. Entering a first 8 GiB checkpoint's 2 M chunks
 * on the H100 host, 16 workers spent 13.4-15.4 s summed before the index
 * (hashing and this table) and 2.1-2.5 s flushing with 64 stripes, and
 * 11.6-11.9 s and 1.3 s with 1024; the chunks were done 10-17% sooner. */
#define NSTRIPES 1024
/* What a worker's time is traced as: all of it on segments; the zero
 * check and hashing; the parent's manifest; index look-ups; the pending
 * table's visits of new chunks; compressing them into the arena; flushing
 * a segment's batch to the writers. */
enum { ENG_WT_ALL, ENG_WT_HASH, ENG_WT_KNOWN, ENG_WT_LOOKUP, ENG_WT_TABLE, ENG_WT_NEW, ENG_WT_FLUSH, ENG_WT_N };
#define PENDING UINT64_MAX      /* a table node's seq until its job is queued */

struct release_ref {
	void (*release)(void *arg);
	void *arg;
	atomic_size_t refs;
};

/* A file the workers read (engine_stream_add_fd): a dup of the caller's fd,
 * closed with the last segment's release_ref, and its name for errors. */
struct fd_source {
	int fd;
	char what[];
};

struct seg {
	struct seg *next;
	struct engine_stream *st;
	uint64_t off;                /* where the segment starts in its stream */
	const uint8_t *data;         /* NULL: a hole of len bytes, unless src */
	size_t len;
	struct release_ref *rel;     /* memory owned by the caller, or */
	void *staging;               /* a staging buffer to give back */
	/* src: the worker reads len bytes at src_off of src into staging (then
	 * data points there). Reading on the workers, not on the producer,
	 * makes the copy out of the page cache parallel: one producer thread
	 * copying 8 GiB from tmpfs bounded a 16-worker put. */
	const struct fd_source *src;
	uint64_t src_off;
	/* engine_stream_add_chunks: ids, unless NULL, are the SHA-256 of the
	 * chunks in data, in order. sparse: only chunks idx[0..nidx) (numbered
	 * from the append's first chunk, of which this segment's first is
	 * idx_base) are in data, back to back; the rest are the parent's. */
	const uint8_t *ids;
	bool sparse;
	const uint32_t *idx;
	size_t nidx;
	uint64_t idx_base;
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
	/* hint_off[i]: where hint extent i starts. Made by the first worker
	 * that needs it (eng_hint_offsets), not in the producer's call: for
	 * an 8 GiB region that is 2 M extents, a good part of a library
	 * checkpoint's stall. hint_state: 0 not yet, 1 made, -1 no memory. */
	uint64_t *hint_off;
	pthread_mutex_t hint_lock;
	atomic_int hint_state;
	/* The hint's cuts were made by this stream's chunker (cdc, same
	 * parameters), so a chunk of the parent's that the stream has again
	 * at the same place can be cut without a scan (seg_process). */
	bool guided;
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
	/* engine_snapshot_cancel's, from a signal handler: read by the
	 * workers (skip), the producer (stop) and the committer (fail). */
	atomic_int cancelled;
	/* updated by workers */
	atomic_uint_fast64_t max_seq, bytes_done, expect;
	atomic_uint_fast64_t zero_bytes, new_bytes, stored_bytes, chunks, new_chunks, guided_chunks;
	uint64_t begin_ns;
	struct rusage ru0;           /* CREST_TRACE: the process's at begin */
	struct engine_result res;
};

/* A node is read under its stripe's lock. Its seq alone is also set
 * without it, once (PENDING -> the job's seq), by eng_writer_enqueue under
 * wlock: taking the lock and finding the node again for each of a first
 * checkpoint's 2 M chunks took 3.2-4.2 s of the workers' 17-20 s. The
 * owner keeps the node's address in its batch (bitem.nd) until then, which
 * is safe because nothing else removes a PENDING node before its entry is
 * queued (eng_pending_forget takes only ids whose entries a commit took,
 * and a commit takes entries only from the queue), and a stripe's growth
 * moves buckets, not nodes. After it, a commit of any snapshot may take
 * the entry and forget the node at once: the batch never touches it
 * again. (Setting the seq after enqueue returned did: store.model under
 * ASan found the write to a node already freed.) */
struct node {
	struct node *next;
	uint8_t sha[32];
	_Atomic uint64_t seq;        /* PENDING until owner's job is queued */
	const struct batch *owner;   /* the batch that holds it while PENDING (stale after) */
};

struct stripe {
	pthread_mutex_t lock;
	struct node **b;
	size_t nb, n;
};

/* A writer lane: its thread, its queue of jobs (in seq order) and the bytes
 * in it, the first seq of the batch it is writing (0: none), and the seq up
 * to which its jobs are durable. Under wlock, but the thread. */
struct wlane {
	struct engine *e;
	pthread_t thread;
	bool started;
	struct wjob *head, *tail;
	size_t bytes;
	uint64_t busy_seq, synced;
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
	struct node *nd;             /* B_NEW: its PENDING node in the table */
	size_t at;                   /* B_NEW: the record's place in the arena */
	uint32_t raw, stored;
	uint8_t codec;
	uint8_t state;
};
enum { B_NEW, B_WAIT };

/* A worker's records for the segment at hand. */
struct batch {
	LZ4_stream_t *lz;            /* the worker's compression state */
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
	struct wlane lanes[CAS_LANES_MAX];
	unsigned nlanes;
	size_t wq_bytes;               /* in all the lanes' queues */
	uint64_t enq_seq, synced_seq, sync_target;
	bool wstop;
	int werr;
	char werrmsg[1024];
	struct pend *pend;
	size_t npend, cappend;
	void **arenas;                 /* arenas the writer is done with */
	size_t *arena_caps;
	size_t narenas, caparenas;
	uint64_t writes, fault_write;  /* CREST_FAULT_WRITE: see writer_write (writer.c) */
	bool trace;                    /* CREST_TRACE: each commit's phases on stderr */
	/* For tests, CREST_TEST_LOOKUP_SLEEP_US (read at open): a worker sleeps
	 * this long between a chunk's index look-up and its table visit,
	 * widening the window forget_gen covers (test_engine once). */
	unsigned lookup_sleep_us;
	/* CREST_TRACE, under wlock, since the last commit's trace line: the
	 * writers' time in cas_pack_write and the bytes they wrote, summed
	 * over the lanes; the workers' time blocked on a full write queue,
	 * summed over them. */
	uint64_t t_wbusy, w_bytes, t_wfull;
	/* CREST_TRACE: the workers' time, by ENG_WT_*,
	 * summed over them, added once a segment. */
	atomic_uint_fast64_t t_work[ENG_WT_N];

	struct stripe stripes[NSTRIPES];
	/* seq_gen counts batches that left PENDING nodes (queued or dropped):
	 * a worker waiting for a PENDING node sleeps until it moves. */
	pthread_mutex_t seq_lock;
	pthread_cond_t seq_cond;
	uint64_t seq_gen;
	/* Counts the removals of committed ids from the table (forget, clear),
	 * bumped before the first node goes. A worker looks a chunk up in the
	 * index first and in the table after: when this moved in between, the
	 * chunk may have left the table for the index unseen, and it looks in
	 * the index again (chunk_new). */
	atomic_uint_fast64_t forget_gen;
};

/* Keeps a snapshot's first error: workers and the committer both fail
 * snapshots. */
static inline void eng_snap_fail(struct engine_snap *snap, int err, const char *msg)
{
	/* under e->lock */
	if (!snap->err) {
		snap->err = err;
		snprintf(snap->errmsg, sizeof(snap->errmsg), "%s", msg);
	}
}

/* pending.c: the table of chunks written but not committed. */
struct stripe *eng_pending_stripe(struct engine *e, const uint8_t sha[32]);
struct node *eng_pending_find(struct stripe *s, const uint8_t sha[32]);
/* Enters sha (under s's lock): the new node in *out, or -ENOMEM. */
int eng_pending_insert(struct stripe *s, const uint8_t sha[32], uint64_t seq, const struct batch *owner,
		       struct node **out);
void eng_pending_remove(struct engine *e, const uint8_t sha[32], const struct batch *owner);
/* eng_pending_remove(e, ie[i].sha, NULL) for every i, a big commit's on
 * several threads (each stripe on one). */
void eng_pending_forget(struct engine *e, const struct cas_index_entry *ie, size_t n);
void eng_pending_clear(struct engine *e);

/* writer.c: the writer threads and what they own (wlock).
 * eng_writer_main's argument is its struct wlane. */
void eng_writer_arena_get(struct engine *e, struct batch *b);
int eng_writer_enqueue(struct engine *e, struct batch *b, size_t from, size_t bytes, uint64_t *seq);
void *eng_writer_main(void *arg);
int eng_writer_durable(struct engine *e, uint64_t need, struct cas_index_entry **ie, size_t *n);
void eng_writer_committed(struct engine *e, size_t n);
bool eng_writer_recover(struct engine *e);

/* engine.c: st->hint_off, made once; false when there is no hint or no
 * memory for it. */
bool eng_hint_offsets(struct engine_stream *st);

/* workers.c: the worker threads and the staging buffers. */
void *eng_worker_main(void *arg);
int eng_worker_staging_get(struct engine *e, void **out);
void eng_worker_staging_put(struct engine *e, void *buf);

#endif
