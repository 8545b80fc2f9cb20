/*
 * history.c - branches derived from the snapshots' summaries; see history.h.
 */
#include "cas/history.h"

#include "util/err.h"
#include "util/progress.h"
#include "util/sha256.h"

#include <errno.h>
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
	return 0;
}

int cas_label_check(const char *key)
{
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
	cas_snapshot_list_free(v, n);
	if (rc < 0) {
		cas_branch_list_free(b, nb);
		return rc;
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
	struct cas_manifest *m;
	rc = cas_manifest_load(s, from, &m);
	if (rc < 0)
		return rc;
	m->has_parent = true;
	memcpy(m->parent, from, 32);
	m->time_ns = time_wall_ns();
	rc = cas_manifest_set_branch(m, name);
	if (rc < 0)
		rc = crest_errf(rc, "starting branch %s", name);
	/* Every chunk and piece is the parent's, already in the store: the
	 * commit adds the manifest alone (cas_commit skips pieces it has).
	 * With m as its own base, its deltas encode as they were. */
	struct cas_index_entry none[1];
	if (rc == 0)
		rc = cas_commit(s, none, 0, m, m, NULL, id);
	cas_manifest_free(m);
	return rc;
}
