/*
 * jobjoin.h - where the ranks of a job meet in the store, so that the job
 * snapshot of a step (jobsnap.h) is committed once every rank's own
 * snapshot of it is, without any rank waiting for another.
 *
 * Each rank, once its snapshot of a step is committed, leaves the id in
 * STORE/jobs/.ranks/NAME/ATTEMPT.STEP/RANK (written whole: a temporary
 * file renamed over), then lists the directory. The rank that finds every
 * rank there is the one that completes the set, and commits the job
 * snapshot; the others go on at once. Two ranks may both find the set
 * complete (each arrived before the other listed): both commit the same
 * job snapshot, which is committed once (cas_jobsnap_commit is
 * idempotent). Since every rank writes before it lists, the last one to
 * write always finds the set.
 *
 * ATTEMPT keeps the launches of one job apart: ranks of a job restarted
 * after a crash reach the same steps again, and must never meet the files
 * of ranks of the launch that crashed. A rank that never arrives (killed)
 * leaves its step's directory incomplete: no job snapshot names its
 * siblings' snapshots, which gc treats as partial (gc.h).
 *
 * The files are a meeting place, not a record: the job snapshot's commit
 * checks its members under the writer lock, so a lost or stale file can
 * only keep a job snapshot from being committed, never make a wrong one.
 * jobs/ is the store's (jobs.h); keys there never begin with '.'.
 */
#ifndef CREST_CAS_JOBJOIN_H
#define CREST_CAS_JOBJOIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cas/cas.h"

#define CAS_JOBJOIN_ATTEMPT_MAX 96

/* What the ranks of one step left, by rank (world of each). */
struct cas_jobjoin_set {
	uint32_t world;
	uint8_t (*ids)[32];
	char (*gpus)[96];             /* CAS_JOBSNAP_GPU_MAX + 1 */
};

/* Rank `rank` of `world` arrives at step `step` of job `name`, launch
 * `attempt`, with its committed snapshot id and its GPU (NULL or "": none).
 * 1 when the set is complete (*set filled: the caller commits the job
 * snapshot, then calls cas_jobjoin_done), 0 when not yet, or a negative
 * errno with a message: a name or attempt crest does not take (-EINVAL),
 * another rank that names another world size (-EINVAL), the file system. */
int cas_jobjoin_arrive(struct cas_store *s, const char *name, const char *attempt, uint64_t step,
		       uint32_t rank, uint32_t world, const uint8_t id[32], const char *gpu,
		       struct cas_jobjoin_set *set);
void cas_jobjoin_set_free(struct cas_jobjoin_set *set);

/* Removes the meeting place of the step (its job snapshot is committed).
 * Best effort: a directory left behind costs a few bytes. */
void cas_jobjoin_done(struct cas_store *s, const char *name, const char *attempt, uint64_t step);

#endif
