/*
 * gc.h - forgetting snapshots and reclaiming the space only they used.
 *
 * Which snapshots stay is a retention policy per branch, restic's rules:
 * the newest N (keep_last); the newest of each of the newest N hours,
 * days, weeks (Monday to Sunday), months and years that have snapshots
 * (UTC buckets: a bucket without a snapshot is not counted, so N buckets
 * reach back as far as it takes); everything within a duration of the
 * branch's newest snapshot; every tagged one, or every one with one of the
 * given tags; and always the head of every branch (a branch ref's target
 * too: history.h). The rest expire.
 *
 * Job snapshots (cas/jobsnap.h) count as one snapshot each, of their
 * branch job/NAME. The rank snapshots a job snapshot names are never
 * counted on their own, nor kept as a branch's head: they are kept exactly
 * when a kept job snapshot names them (a member shared by two job
 * snapshots, when either is kept). A rank snapshot no job snapshot names
 * (labelled crest.job.rank: its job's commit never came, or has not yet)
 * is partial: kept while younger than keep_partial_ns, expired after.
 * Safety: gc holds the writer lock from the listing to the end, and
 * cas_jobsnap_commit checks its members under the writer lock, so a job
 * commit racing gc either sees every member or fails cleanly; a job
 * snapshot gc sees names members gc keeps with it. The delete records of
 * expired job snapshots precede their members' in the meta log (step 1),
 * so a kill that tears the log never applies a member's delete without
 * its job snapshot's.
 *
 * Mark and sweep, never reference counts: the live chunks and pieces are
 * those the kept manifests name, marked afresh on every run, so no count
 * can drift. Everything else the index holds is dead: chunks and pieces of
 * expired snapshots, and records no committed snapshot names.
 *
 * Order (what a kill -9 may leave, and why each state is safe):
 *  1. A delete record per expired snapshot is appended to the meta log
 *     and synced. A kill here: the next writer's open applies them.
 *  2. One synced index batch removes the expired manifests, summaries and
 *     the tags that name them. From here no listed snapshot is expired.
 *  3. Batches remove the dead pieces and chunk entries. Only entries no
 *     listed snapshot names go: a kill leaves garbage, never a hole.
 *  4. Packs whose live fraction is under the threshold are rewritten: their
 *     live records are copied into new packs and synced, then one batch
 *     points the chunks at the copies, records the new packs' ends and
 *     retires the old packs ('r' keys, their 'p' ends removed). A kill
 *     before the batch leaves bytes past the recorded ends, which every
 *     writer's open cuts; after it, retired packs that nothing names.
 *  5. Retired packs are unlinked once no reader holds the store (readers
 *     hold STORE/readers shared while open: one that opened before step 4
 *     may still read an old pack). Otherwise the next run unlinks them.
 * The index never names a chunk in a deleted pack.
 *
 * Memory is bounded whatever the store holds: the live ids are sorted in
 * runs of at most 1M (32 MiB), spilled to STORE/gc/ and merged while the
 * chunk index is read in key order; packs are rewritten by walking their
 * records. STORE/gc/ is removed at the end, and by the next run after a
 * kill.
 *
 * gc holds the writer lock while it runs: writers wait for it, as they do
 * for each other (cas_open says who holds the store). `crest run --every`
 * and `crest checkpoint --every` let the store go between checkpoints, so
 * gc runs beside them; so does a libcrest job, which holds the store only
 * while a checkpoint is in flight (lib/crest.c's notes).
 */
#ifndef CREST_CAS_GC_H
#define CREST_CAS_GC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cas/cas.h"
#include "util/progress.h"

struct cas_gc_policy {
	unsigned keep_last, keep_hourly, keep_daily, keep_weekly, keep_monthly, keep_yearly;
	uint64_t keep_within_ns;
	bool keep_tagged;          /* any tag */
	const char *const *keep_tags;   /* or one of these */
	size_t nkeep_tags;
	double rewrite_below;      /* rewrite packs less live than this; 0: 0.5 */
	bool dry_run;              /* decide and report; change nothing: the store may be
				    * open read-only (CAS_READ), and nothing in it is written */
	uint64_t keep_partial_ns;  /* partial rank snapshots younger than this stay;
				    * 0: CAS_GC_KEEP_PARTIAL_DEFAULT */
	uint64_t now_ns;           /* the time partial ones are aged at; 0: the clock (tests set it) */
};
#define CAS_GC_KEEP_PARTIAL_DEFAULT (24ull * 3600 * 1000000000ull)

/* What each snapshot was to gc (cas_gc_result.expired_what, kept_what). */
enum cas_gc_what {
	CAS_GC_PLAIN = 0,          /* a snapshot counted by the rules */
	CAS_GC_JOB = 1,            /* a job snapshot: counted by the rules */
	CAS_GC_MEMBER = 2,         /* a rank snapshot a job snapshot names: kept with a kept one */
	CAS_GC_PARTIAL = 3,        /* a rank snapshot no job snapshot names: kept while young */
};

/* One snapshot of one branch, for cas_gc_keep. */
struct cas_gc_snap {
	uint8_t id[32];
	uint64_t time_ns;
	const char *const *tags;
	size_t ntags;
	bool head;                 /* a branch's head or a ref's target: always kept */
	bool keep;                 /* out */
};

/* The retention rules alone: v is one branch's snapshots, newest first (by
 * time, then id descending); sets each keep. v[0] is always kept. What
 * cas_gc decides with, exposed so that tests can hold it to a model. */
void cas_gc_keep(const struct cas_gc_policy *p, struct cas_gc_snap *v, size_t n);

struct cas_gc_result {
	size_t snapshots;          /* before */
	uint8_t (*kept)[32];
	size_t nkept;
	uint8_t (*expired)[32];
	size_t nexpired;
	uint8_t *kept_what, *expired_what;   /* enum cas_gc_what of each, in the same order */
	size_t jobs, jobs_kept;              /* job snapshots */
	size_t members, members_kept;        /* rank snapshots job snapshots name */
	size_t partial, partial_kept;        /* rank snapshots none names */
	uint64_t chunks, dead_chunks, dead_bytes;   /* index entries; dead stored bytes */
	uint64_t pieces, dead_pieces;
	uint64_t packs, packs_rewritten, bytes_moved;
	uint64_t bytes_before, bytes_after;          /* pack files on disk */
	uint64_t packs_retired;    /* rewritten but not yet unlinked (a reader was open) */
	uint64_t meta_before, meta_after;   /* meta log files on disk */
	uint32_t meta_logs_removed;         /* by the compaction (cas_meta_compact) */
};

/* -EINVAL with a message when the policy keeps nothing explicitly (every
 * keep_* is 0, keep_tagged false, no keep_tags): gc would expire all but
 * the heads. */
int cas_gc_policy_check(const struct cas_gc_policy *p);

/* Runs gc on a writer's store (CAS_WRITE), or a dry run on any (CAS_READ
 * is enough, and then not one file of the store changes). prog, when
 * non-NULL, follows the mark and the rewrite. */
int cas_gc(struct cas_store *s, const struct cas_gc_policy *p, struct cas_gc_result *r, struct progress *prog);
void cas_gc_result_free(struct cas_gc_result *r);

#endif
