/*
 * history.h - branches and parents over the store's immutable snapshots.
 *
 * A snapshot names its parent (the manifest's parent id) and its branch
 * (the reserved label CAS_BRANCH_LABEL; a snapshot without one, such as
 * every snapshot written before branches, is on CAS_BRANCH_DEFAULT).
 * A branch's head is its newest committed snapshot (by capture time, then
 * id), derived from the summaries at each call. So a checkpoint moves no
 * ref that a crash could tear or a revoke would have to put back: a commit
 * that failed or was revoked is simply not there, and the branch's head is
 * what it was.
 *
 * A branch started at an older snapshot S (`crest branch NAME S`, as in
 * git) is a ref: the tag CAS_BRANCH_REF_PREFIX NAME naming S, written like
 * any tag (meta log, then index; recovered, revoked and compacted with
 * them), and no snapshot. While no snapshot is on NAME, its head is S; the
 * first checkpoint on NAME is a child of S, and from then on NAME's head is
 * derived as above (the ref, older than every snapshot on NAME, no longer
 * decides anything). gc keeps every branch's head, so a ref keeps S while
 * it is NAME's head (cas_gc), and once S expires the ref goes with S's
 * other tags. Stores written before refs (format 3) started a branch with
 * a copy of S's manifest on NAME: such a copy is a snapshot on NAME, and
 * reads as it always did.
 *
 * Snapshot names (cas_snapshot_resolve), tried in this order:
 *   job:JOB    the newest job snapshot of job JOB (cas/jobsnap.h: by step,
 *              then time); ':' is in no other name;
 *   TAG        a tag (tags are the user's exact names: they win);
 *   latest     the newest snapshot of the store, any branch;
 *   BRANCH     the branch's head, as in git; an error when the name is
 *              also an id prefix of a snapshot (say BRANCH~0, or more of
 *              the id);
 *   ID         a full id or a unique prefix of 4 or more hex digits;
 *   NAME~N     N parents back from NAME (NAME~ is NAME~1; NAME~0 is NAME
 *              taken as a tag, latest or a branch only, never an id).
 * '~' is in no tag or branch name, so NAME~N reads one way only.
 */
#ifndef CREST_CAS_HISTORY_H
#define CREST_CAS_HISTORY_H

#include <stddef.h>
#include <stdint.h>

#include "cas/cas.h"

#define CAS_BRANCH_LABEL "crest.branch"
#define CAS_BRANCH_DEFAULT "main"
/* Label keys that start with this are crest's (FORMAT.md): a user's
 * labels may not use them. */
#define CAS_LABEL_RESERVED "crest."

/* The branch m is on (never NULL). */
const char *cas_manifest_branch(const struct cas_manifest *m);

/* Puts m on branch name (replacing the branch it was on). -ENOMEM, no
 * message. The caller checks name (cas_branch_check). */
int cas_manifest_set_branch(struct cas_manifest *m, const char *name);

/* -EINVAL with a message if name cannot be a branch: 1 to 128 characters of
 * [A-Za-z0-9-_./@+], and not latest (a snapshot name of its own). */
int cas_branch_check(const char *name);

/* -EINVAL with a message if key is reserved for crest (CAS_LABEL_RESERVED),
 * except the labels of a job's rank snapshot (jobsnap.h), which callers set. */
int cas_label_check(const char *key);

struct cas_branch {
	char *name;
	uint8_t head[32];            /* its newest snapshot, or its ref's */
	uint64_t head_time_ns;
	size_t snapshots;            /* how many are on it (0: a ref alone) */
};

/* Every branch with a snapshot or a ref, by name. */
int cas_branch_list(struct cas_store *s, struct cas_branch **out, size_t *n);
void cas_branch_list_free(struct cas_branch *v, size_t n);

/* The head of branch name: 0 and id, or -ENOENT with a message when no
 * snapshot is on it and no ref names it. */
int cas_branch_head(struct cas_store *s, const char *name, uint8_t id[32]);

/* Starts branch name at snapshot from (a writer's store): a ref, no
 * snapshot; id is from. -EEXIST with a message when the branch has a
 * snapshot or a ref already. */
int cas_branch_fork(struct cas_store *s, const uint8_t from[32], const char *name, uint8_t id[32]);

/* cas_snapshot_resolve (cas.h) is here too, in history.c: the names above. */

#endif
