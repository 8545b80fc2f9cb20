/*
 * history.c - branches derived from the snapshots' summaries; see history.h.
 */
#include "cas/history.h"

#include "cas/cas_int.h"
#include "cas/jobsnap.h"
#include "util/err.h"
#include "util/progress.h"
#include "util/sha256.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *cas_manifest_branch(const struct cas_manifest *m)
{
	const char *b = cas_manifest_get_label(m, CAS_BRANCH_LABEL);
	return b && *b ? b : CAS_BRANCH_DEFAULT;
}

int cas_branch_check(const char *name)
{
	const size_t n = name ? strlen(name) : 0;
	if (n == 0 || n > 128)
		return crest_errx(-EINVAL, "branch '%s': must be 1 to 128 characters", name ? name : "");
	for (size_t i = 0; i < n; i++) {
		const char ch = name[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
		      strchr("-_./@+", ch)))
			return crest_errx(-EINVAL, "branch '%s': only letters, digits and -_./@+ are allowed", name);
	}
	if (!strcmp(name, CAS_NAME_LATEST))
		return crest_errx(-EINVAL, "branch '%s': '%s' names the store's newest snapshot", name,
				  CAS_NAME_LATEST);
	return 0;
}

int cas_label_check(const char *key)
{
	/* A rank snapshot's labels (jobsnap.h) are crest's keys that a caller
	 * sets on purpose: libcrest's crest_job_checkpoint marks each rank's
	 * snapshot with them, and gc then keeps it only through a job
	 * snapshot that names it (or while it is young: gc.h). */
	static const char *const rank_keys[] = { CAS_JOBSNAP_LABEL, CAS_JOBSNAP_LABEL_STEP, CAS_JOBSNAP_LABEL_RANK,
						  CAS_JOBSNAP_LABEL_WORLD, CAS_JOBSNAP_LABEL_ATTEMPT };
	for (size_t i = 0; key && i < sizeof(rank_keys) / sizeof(rank_keys[0]); i++)
		if (!strcmp(key, rank_keys[i]))
			return 0;
	if (key && !strncmp(key, CAS_LABEL_RESERVED, strlen(CAS_LABEL_RESERVED)))
		return crest_errx(-EINVAL, "label key '%s': keys that start with '%s' are crest's own", key,
				  CAS_LABEL_RESERVED);
	return 0;
}

void cas_branch_list_free(struct cas_branch *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i].name);
	free(v);
}

static int branch_cmp(const void *a, const void *b)
{
	return strcmp(((const struct cas_branch *)a)->name, ((const struct cas_branch *)b)->name);
}

struct ref_ctx {
	const struct cas_snapinfo *v;
	size_t n;
	struct cas_branch *b;
	size_t nb;
};

static int ref_cb(const char *k, size_t kl, const char *val, size_t vl, void *arg)
{
	struct ref_ctx *c = arg;
	const size_t pl = strlen(CAS_BRANCH_REF_PREFIX);
	if (vl != 32 || kl <= pl || kl > pl + 128 || memcmp(k, CAS_BRANCH_REF_PREFIX, pl))
		return 0;
	const char *name = k + pl;
	const size_t len = kl - pl;
	for (size_t i = 0; i < c->nb; i++)
		if (strlen(c->b[i].name) == len && !memcmp(c->b[i].name, name, len))
			return 0;   /* snapshots on it: its head is the newest */
	const struct cas_snapinfo *t = NULL;
	for (size_t i = 0; i < c->n && !t; i++)
		if (!memcmp(c->v[i].id, val, 32))
			t = &c->v[i];
	if (!t)
		return 0;
	struct cas_branch *nbv = realloc(c->b, (c->nb + 1) * sizeof(*nbv));
	if (!nbv)
		return -ENOMEM;
	c->b = nbv;
	char *dup = strndup(name, len);
	if (!dup)
		return -ENOMEM;
	c->b[c->nb] = (struct cas_branch){ .name = dup, .head_time_ns = t->head->time_ns };
	memcpy(c->b[c->nb].head, t->id, 32);
	c->nb++;
	return 0;
}

int cas_branch_list(struct cas_store *s, struct cas_branch **out, size_t *nout)
{
	*out = NULL;
	*nout = 0;
	struct cas_snapinfo *v;
	size_t n;
	int rc = cas_snapshot_list(s, &v, &n);
	if (rc < 0)
		return rc;
	struct cas_branch *b = NULL;
	size_t nb = 0;
	/* The list is oldest first: a later snapshot of a branch is its head.
	 * Branches are few; a linear search per snapshot is enough. */
	for (size_t i = 0; rc == 0 && i < n; i++) {
		const char *name = cas_manifest_branch(v[i].head);
		size_t k = 0;
		while (k < nb && strcmp(b[k].name, name))
			k++;
		if (k == nb) {
			struct cas_branch *nbv = realloc(b, (nb + 1) * sizeof(*nbv));
			char *dup = nbv ? strdup(name) : NULL;
			if (nbv)
				b = nbv;
			if (!dup) {
				rc = crest_errf(-ENOMEM, "listing branches");
				break;
			}
			b[nb++] = (struct cas_branch){ .name = dup };
		}
		memcpy(b[k].head, v[i].id, 32);
		b[k].head_time_ns = v[i].head->time_ns;
		b[k].snapshots++;
	}
	/* Refs: a branch with no snapshot of its own has its ref's target for
	 * head, while that snapshot is listed (one gc expired is nothing). */
	struct ref_ctx rc_ = { .v = v, .n = n, .b = b, .nb = nb };
	if (rc == 0)
		rc = cas_db_scan(s, 't', ref_cb, &rc_);
	b = rc_.b;
	nb = rc_.nb;
	cas_snapshot_list_free(v, n);
	if (rc < 0) {
		cas_branch_list_free(b, nb);
		return rc == -ENOMEM ? crest_errf(rc, "listing branches") : rc;
	}
	if (nb > 1)
		qsort(b, nb, sizeof(*b), branch_cmp);
	*out = b;
	*nout = nb;
	return 0;
}

int cas_branch_head(struct cas_store *s, const char *name, uint8_t id[32])
{
	struct cas_branch *b;
	size_t n;
	int rc = cas_branch_list(s, &b, &n);
	if (rc < 0)
		return rc;
	rc = crest_errx(-ENOENT, "store %s has no snapshot on branch %s", cas_dir(s), name);
	for (size_t i = 0; i < n; i++)
		if (!strcmp(b[i].name, name)) {
			memcpy(id, b[i].head, 32);
			rc = 0;
			break;
		}
	cas_branch_list_free(b, n);
	return rc;
}

int cas_manifest_set_branch(struct cas_manifest *m, const char *name)
{
	for (size_t i = 0; i < m->nlabels; i++)
		if (!strcmp(m->labels[i].key, CAS_BRANCH_LABEL)) {
			char *v = strdup(name);
			if (!v)
				return -ENOMEM;
			free(m->labels[i].value);
			m->labels[i].value = v;
			return 0;
		}
	return cas_manifest_label(m, CAS_BRANCH_LABEL, name);
}

int cas_branch_fork(struct cas_store *s, const uint8_t from[32], const char *name, uint8_t id[32])
{
	int rc = cas_branch_check(name);
	if (rc < 0)
		return rc;
	uint8_t head[32];
	if (cas_branch_head(s, name, head) == 0) {
		char hex[65];
		hex_encode(head, 32, hex);
		return crest_errx(-EEXIST, "branch %s exists already (its head is %.12s)", name, hex);
	}
	/* The ref is a tag, whose name has at most 128 bytes (FORMAT.md;
	 * recovery and repair skip longer ones, cas_tag_put's key holds no
	 * more). */
	struct cas_manifest *m;
	if (strlen(CAS_BRANCH_REF_PREFIX) + strlen(name) > 128)
		return crest_errx(-EINVAL, "branch '%s': a branch started at a snapshot has at most %zu characters",
				  name, 128 - strlen(CAS_BRANCH_REF_PREFIX));
	rc = cas_manifest_load(s, from, &m);   /* from is there, and whole */
	if (rc < 0)
		return rc;
	cas_manifest_free(m);
	char ref[sizeof(CAS_BRANCH_REF_PREFIX) + 128];
	snprintf(ref, sizeof(ref), "%s%s", CAS_BRANCH_REF_PREFIX, name);
	/* move false: a ref left by a branch whose snapshots all went (none
	 * can: gc keeps heads) or by a racing writer is refused, not moved. */
	rc = cas_tag_put(s, ref, from, false);
	if (rc == -EEXIST)
		rc = crest_errx(-EEXIST, "branch %s exists already", name);
	if (rc == 0)
		memcpy(id, from, 32);
	return rc;
}

/* NAME without ~: job:JOB, a tag, latest, a branch, an id prefix (history.h). */
static int resolve_base(struct cas_store *s, const char *name, bool id_ok, uint8_t id[32])
{
	/* ':' is in no tag, branch or id, so job:JOB reads one way only. */
	const size_t jl = strlen(CAS_JOBSNAP_NAME_PREFIX);
	if (!strncmp(name, CAS_JOBSNAP_NAME_PREFIX, jl)) {
		int rc = cas_jobsnap_name_check(name + jl);
		return rc < 0 ? rc : cas_jobsnap_latest(s, name + jl, id);
	}
	int rc = cas_snapshot_lookup(s, name, CAS_NAME_TAG, id);
	if (rc != -ENOENT)
		return rc;
	if (!strcmp(name, CAS_NAME_LATEST)) {
		struct cas_snapinfo *v;
		size_t n;
		if ((rc = cas_snapshot_list(s, &v, &n)) < 0)
			return rc;
		if (n)
			memcpy(id, v[n - 1].id, 32);   /* oldest first: the last is the newest */
		cas_snapshot_list_free(v, n);
		return n ? 0 : crest_errx(-ENOENT, "store %s holds no snapshot: nothing is latest", cas_dir(s));
	}
	const bool hex = cas_snapshot_name_kind(name) & CAS_NAME_PREFIX;
	/* A full id is never a branch's name in practice: no look-up. */
	if (strlen(name) < 64 && cas_branch_check(name) == 0) {
		uint8_t head[32];
		char saved[1024];
		crest_errcpy(saved, sizeof(saved));
		rc = cas_branch_head(s, name, head);
		if (rc == 0) {
			uint8_t other[32];
			if (id_ok && hex && cas_snapshot_lookup(s, name, CAS_NAME_PREFIX, other) == 0)
				return crest_errx(-EINVAL, "'%s' is both a branch and a snapshot id prefix in %s: "
						  "say %s~0 for the branch, or more of the id", name, cas_dir(s), name);
			memcpy(id, head, 32);
			return 0;
		}
		if (rc != -ENOENT)
			return rc;
		crest_errset_str(saved);
	}
	if (!id_ok)
		return crest_errx(-ENOENT, "no tag or branch named '%s' in %s", name, cas_dir(s));
	return cas_snapshot_lookup(s, name, CAS_NAME_PREFIX | CAS_NAME_TAG, id);
}

int cas_snapshot_resolve(struct cas_store *s, const char *name, uint8_t id[32])
{
	const char *tilde = strchr(name, '~');
	if (!tilde)
		return resolve_base(s, name, true, id);
	const size_t bl = (size_t)(tilde - name);
	char base[130];
	if (bl == 0 || bl >= sizeof(base))
		return crest_errx(-EINVAL, "snapshot name '%s': want NAME~N", name);
	memcpy(base, name, bl);
	base[bl] = 0;
	/* NAME~N~M is NAME~(N+M), as in git. */
	unsigned long back = 0;
	for (const char *p = tilde; *p;) {
		if (*p++ != '~')
			return crest_errx(-EINVAL, "snapshot name '%s': want NAME~N", name);
		char *end;
		unsigned long k = 1;
		if (*p >= '0' && *p <= '9') {
			errno = 0;
			k = strtoul(p, &end, 10);
			if (errno || k > 1000000000ul)
				return crest_errx(-EINVAL, "snapshot name '%s': N is too large", name);
			p = end;
		}
		back += k;
	}
	int rc = resolve_base(s, base, back > 0, id);
	for (unsigned long i = 0; rc == 0 && i < back; i++) {
		struct cas_manifest *m;
		if ((rc = cas_manifest_load(s, id, &m)) < 0)
			break;
		const bool has = m->has_parent;
		if (has)
			memcpy(id, m->parent, 32);
		cas_manifest_free(m);
		if (!has) {
			char hex[65];
			hex_encode(id, 32, hex);
			rc = crest_errx(-ENOENT, "%s: snapshot %.12s, %lu back from %s, has no parent", name, hex, i,
					base);
		}
	}
	return rc;
}
