/*
 * history.h - branches and parents over the store's immutable snapshots.
 *
 * A snapshot names its parent (the manifest's parent id) and its branch
 * (the reserved label CAS_BRANCH_LABEL; a snapshot without one, such as
 * every snapshot written before branches, is on CAS_BRANCH_DEFAULT).
 * Nothing else is stored: a branch's head is its newest committed snapshot
 * (by capture time, then id), derived from the summaries at each call. So
 * there is no mutable ref that a crash could tear, a revoke would have to
 * put back, or GC would have to trust: a commit that failed or was revoked
 * is simply not there, and the branch's head is what it was.
 *
 * A branch that starts at an older snapshot S (`crest branch NAME S`) is a
 * snapshot too: S's manifest again, with parent S and branch NAME. It
 * stores no chunk and no piece, only its manifest (cas_branch_fork).
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
 * [A-Za-z0-9-_./@+]. */
int cas_branch_check(const char *name);

/* -EINVAL with a message if key is reserved for crest (CAS_LABEL_RESERVED). */
int cas_label_check(const char *key);

struct cas_branch {
	char *name;
	uint8_t head[32];            /* its newest snapshot */
	uint64_t head_time_ns;
	size_t snapshots;            /* how many are on it */
};

/* Every branch with a snapshot, by name. */
int cas_branch_list(struct cas_store *s, struct cas_branch **out, size_t *n);
void cas_branch_list_free(struct cas_branch *v, size_t n);

/* The head of branch name: 0 and id, or -ENOENT with a message when no
 * snapshot is on it. */
int cas_branch_head(struct cas_store *s, const char *name, uint8_t id[32]);

/* Starts branch name at snapshot from (a writer's store): commits from's
 * manifest again with parent from and branch name, time now; id is the new
 * snapshot. -EEXIST with a message when the branch has snapshots already. */
int cas_branch_fork(struct cas_store *s, const uint8_t from[32], const char *name, uint8_t id[32]);

#endif
