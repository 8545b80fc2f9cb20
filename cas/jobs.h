/*
 * jobs.h - where each running job's history goes on: STORE/jobs/KEY, one
 * small file per job that crest restored or checkpointed by pid.
 *
 * A job's next checkpoint is a child of the snapshot the job last came
 * from: the one it was restored (or cloned) from, or its own previous
 * checkpoint; and it stays on that snapshot's branch unless told
 * otherwise. The pid alone cannot say which job it is (pids are reused), so
 * the caller names a job by a KEY that a reused pid cannot repeat (boot id,
 * pid and start time: os/proc.h). The files are advisory: not part of any
 * snapshot, never read by GC or verify; a missing or unreadable one only
 * means the job's next checkpoint continues its branch's head instead.
 * Written whole (a temporary file renamed over), 0600, in a 0700 directory.
 */
#ifndef CREST_CAS_JOBS_H
#define CREST_CAS_JOBS_H

#include <stddef.h>
#include <stdint.h>

#include "cas/cas.h"

#define CAS_JOB_KEY_MAX 96

/* Records that job key last came from snapshot id, on branch. Any store
 * handle (readers too: a restore opens the store read-only). */
int cas_job_note(struct cas_store *s, const char *key, const uint8_t id[32], const char *branch);

/* What cas_job_note recorded for key: 0, id and branch (cap bytes), or
 * -ENOENT (no message) when nothing usable is recorded. */
int cas_job_find(struct cas_store *s, const char *key, uint8_t id[32], char *branch, size_t cap);

#endif
