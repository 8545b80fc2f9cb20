/*
 * jobsnap.h - job snapshots: the N rank snapshots of one step of a job of N
 * processes, named together by one record committed after all of them.
 *
 * Each rank checkpoints as an ordinary snapshot (libcrest labels it
 * crest.job=NAME, crest.job.step=S, crest.job.rank=R). Once every rank's
 * snapshot is committed, one process gathers their ids and commits the job
 * snapshot: a manifest of kind CAS_JOBSNAP_KIND with no chunks, labels
 * crest.job=NAME, crest.job.step=S, crest.job.world=N and crest.branch=
 * job/NAME, and one stream "rank/R" of type CAS_STREAM_MEMBER per rank
 * (target: the member's 64-hex id; meta: "gpu=UUID" or ""). FORMAT.md has
 * the encoding, docs/JOBS.md the protocol and what a crash leaves.
 *
 * Invariants:
 *  - All or nothing: a job snapshot is committed only once every member is
 *    a committed snapshot of the store, checked under the writer lock in
 *    the same handle that commits it (cas_commit's one synced batch is the
 *    commit point). A job whose commit never came has no job snapshot; its
 *    rank snapshots are partial ones (below).
 *  - GC safety: gc holds the writer lock for its whole run, and
 *    cas_jobsnap_commit checks its members under the writer lock, so a job
 *    commit racing gc either sees every member (and gc, running after it,
 *    sees the job snapshot and keeps them with it) or fails cleanly with
 *    -ENOENT and commits nothing. gc keeps a member exactly when a kept job
 *    snapshot names it, deletes an expired job snapshot's delete record
 *    before its members' (so a torn gc log never leaves a job snapshot
 *    whose member is deleted), and counts a job snapshot as one snapshot of
 *    its branch job/NAME for retention (cas/gc.h).
 *  - A partial rank snapshot (labelled crest.job.rank, named by no job
 *    snapshot) is kept by gc while younger than keep_partial_ns.
 *  - The encoding is a function of (name, step, members, gpus) and the
 *    previous job snapshot of the name (the parent): time_ns is the newest
 *    member's time, not the clock's.
 */
#ifndef CREST_CAS_JOBSNAP_H
#define CREST_CAS_JOBSNAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cas/cas.h"

#define CAS_JOBSNAP_KIND "job"          /* the manifest kind of a job snapshot */
#define CAS_JOBSNAP_NAME_MAX 96         /* job names: letters, digits, '-', '_', '.'; not starting with '.' */
#define CAS_JOBSNAP_WORLD_MAX 65536     /* ranks of one job snapshot */
#define CAS_JOBSNAP_GPU_MAX 95          /* bytes of a rank's GPU name */
/* Labels: of a job snapshot (job, step, world) and of a rank snapshot
 * (job, step, rank; set by libcrest or crest put --label). */
#define CAS_JOBSNAP_LABEL "crest.job"
#define CAS_JOBSNAP_LABEL_STEP "crest.job.step"
#define CAS_JOBSNAP_LABEL_WORLD "crest.job.world"
#define CAS_JOBSNAP_LABEL_RANK "crest.job.rank"
#define CAS_JOBSNAP_LABEL_ATTEMPT "crest.job.attempt"   /* libcrest: the launch (crest.h) */
/* A job snapshot's branch: job/NAME, so that retention counts job
 * snapshots per job, and `crest log job/NAME` shows a job's steps. */
#define CAS_JOBSNAP_BRANCH_PREFIX "job/"
/* cas_snapshot_resolve: job:NAME is the newest job snapshot of job NAME. */
#define CAS_JOBSNAP_NAME_PREFIX "job:"

struct cas_jobsnap_member {
	uint8_t id[32];      /* the rank's snapshot */
	char gpu[96];        /* the rank's GPU (a UUID, or "" for none) */
};
struct cas_jobsnap {
	char name[CAS_JOBSNAP_NAME_MAX + 1];
	uint64_t step;
	uint32_t world;
	uint64_t time_ns;
	struct cas_jobsnap_member *members;  /* world of them, by rank */
};

/* -EINVAL with a message if name cannot be a job's name. */
int cas_jobsnap_name_check(const char *name);
/* The rule itself, for a job's name and a launch's attempt (jobjoin.h):
 * 1 to max of [A-Za-z0-9._-], not beginning with '.' (a path component
 * under STORE/jobs, never hidden, never '.' or '..'). */
bool cas_jobsnap_name_ok(const char *str, size_t max);
/* -EINVAL with a message if gpu cannot name a rank's GPU: at most
 * CAS_JOBSNAP_GPU_MAX bytes of letters, digits and -_.: ("" is none). */
int cas_jobsnap_gpu_check(const char *gpu);

/* Commits the job snapshot of step `step` of job `name`: world rank snapshots,
 * ids[r] and gpus[r] (gpus may be NULL, or an entry NULL/""). A writer handle.
 * Under the writer lock every member must be a committed snapshot of this store
 * (not hidden, not deleted by gc): otherwise -ENOENT, "job NAME step S: rank R's
 * snapshot HEX is not in STORE", and nothing is committed. The same
 * (name, step, members, gpus) committed twice gives the same id and commits
 * nothing the second time (return 0): time_ns is the newest member's time, so
 * the encoding is a function of the inputs. tag may be NULL. The job snapshot's
 * parent is the previous job snapshot of the same name, if any (the newest of
 * an earlier step). A member that is itself a job snapshot is refused
 * (-EINVAL), as are a bad name, world 0 or above CAS_JOBSNAP_WORLD_MAX, and a
 * bad GPU name. */
int cas_jobsnap_commit(struct cas_store *s, const char *name, uint64_t step, uint32_t world,
		       const uint8_t (*ids)[32], const char *const *gpus, const char *tag, uint8_t out[32]);
/* Loads job snapshot id: -EINVAL "snapshot HEX is not a job snapshot" when its kind is not job. */
int cas_jobsnap_load(struct cas_store *s, const uint8_t id[32], struct cas_jobsnap **out);
void cas_jobsnap_free(struct cas_jobsnap *j);
/* The newest job snapshot of job `name` (by step, then time): 0, or -ENOENT with a message. */
int cas_jobsnap_latest(struct cas_store *s, const char *name, uint8_t out[32]);

/* Whether a manifest (or summary) is a job snapshot, or a rank snapshot
 * (it carries CAS_JOBSNAP_LABEL_RANK). */
bool cas_jobsnap_is(const struct cas_manifest *m);
bool cas_jobsnap_is_rank(const struct cas_manifest *m);

/* Every job snapshot of the store (of job name only, unless NULL), newest
 * first (by time, then step, then id descending), each loaded. */
struct cas_jobsnap_entry {
	uint8_t id[32];
	struct cas_jobsnap *j;
};
int cas_jobsnap_list(struct cas_store *s, const char *name, struct cas_jobsnap_entry **out, size_t *n);
void cas_jobsnap_list_free(struct cas_jobsnap_entry *v, size_t n);

/* The rank snapshot of job snapshot id that crest get --rank R restores:
 * -EINVAL when id is no job snapshot or has no rank R, -ENOENT naming the
 * rank when its snapshot is not in the store. */
int cas_jobsnap_member(struct cas_store *s, const uint8_t id[32], uint32_t rank, uint8_t out[32]);
/* The same for j, job snapshot id already loaded (cas_jobsnap_load). */
int cas_jobsnap_rank(struct cas_store *s, const struct cas_jobsnap *j, const uint8_t id[32], uint32_t rank,
		     uint8_t out[32]);

#endif
