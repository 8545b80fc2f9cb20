/*
 * jobsnap.c - job snapshots: one commit naming the rank snapshots of one
 * step of a job; see jobsnap.h for the invariants, FORMAT.md for the
 * encoding.
 */
#include "cas/jobsnap.h"

#include "cas/cas_int.h"
#include "cas/history.h"
#include "util/err.h"
#include "util/sha256.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool cas_jobsnap_name_ok(const char *str, size_t max)
{
	const size_t n = str ? strlen(str) : 0;
	if (n == 0 || n > max || str[0] == '.')
		return false;
	for (size_t i = 0; i < n; i++) {
		const char ch = str[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
		      strchr("-_.", ch)))
			return false;
	}
	return true;
}

int cas_jobsnap_name_check(const char *name)
{
	if (cas_jobsnap_name_ok(name, CAS_JOBSNAP_NAME_MAX))
		return 0;
	const size_t n = name ? strlen(name) : 0;
	if (n == 0 || n > CAS_JOBSNAP_NAME_MAX)
		return crest_errx(-EINVAL, "job name '%s': must be 1 to %d characters", name ? name : "",
				  CAS_JOBSNAP_NAME_MAX);
	if (name[0] == '.')
		return crest_errx(-EINVAL, "job name '%s': may not start with '.'", name);
	return crest_errx(-EINVAL, "job name '%s': only letters, digits and -_. are allowed", name);
}

int cas_jobsnap_gpu_check(const char *gpu)
{
	const size_t n = gpu ? strlen(gpu) : 0;
	if (n > CAS_JOBSNAP_GPU_MAX)
		return crest_errx(-EINVAL, "GPU '%.40s...': at most %d characters", gpu, CAS_JOBSNAP_GPU_MAX);
	for (size_t i = 0; i < n; i++) {
		const char ch = gpu[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
		      strchr("-_.:", ch)))
			return crest_errx(-EINVAL, "GPU '%s': only letters, digits and -_.: are allowed", gpu);
	}
	return 0;
}

bool cas_jobsnap_is(const struct cas_manifest *m)
{
	return m && m->kind && !strcmp(m->kind, CAS_JOBSNAP_KIND);
}

bool cas_jobsnap_is_rank(const struct cas_manifest *m)
{
	return m && !cas_jobsnap_is(m) && cas_manifest_get_label(m, CAS_JOBSNAP_LABEL_RANK) != NULL;
}

void cas_jobsnap_free(struct cas_jobsnap *j)
{
	if (!j)
		return;
	free(j->members);
	free(j);
}

static int parse_u64(const char *v, uint64_t max, uint64_t *out)
{
	if (!v || !*v || *v < '0' || *v > '9')
		return -1;
	char *end;
	errno = 0;
	const unsigned long long x = strtoull(v, &end, 10);
	if (errno || *end || x > max)
		return -1;
	*out = x;
	return 0;
}

/* A decoded job manifest into j: -EBADMSG with a message when it is not
 * one this crest wrote (labels, one member stream per rank in order). */
static int jobsnap_decode(const struct cas_manifest *m, const char *hex, struct cas_jobsnap **out)
{
	*out = NULL;
	const char *name = cas_manifest_get_label(m, CAS_JOBSNAP_LABEL);
	uint64_t step, world;
	if (!name || cas_jobsnap_name_check(name) < 0 ||
	    parse_u64(cas_manifest_get_label(m, CAS_JOBSNAP_LABEL_STEP), UINT64_MAX, &step) < 0 ||
	    parse_u64(cas_manifest_get_label(m, CAS_JOBSNAP_LABEL_WORLD), CAS_JOBSNAP_WORLD_MAX, &world) < 0 ||
	    world == 0 || m->nstreams != world)
		return crest_errx(-EBADMSG, "job snapshot %.12s: its job, step or world size is malformed", hex);
	struct cas_jobsnap *j = calloc(1, sizeof(*j));
	struct cas_jobsnap_member *mv = calloc(world, sizeof(*mv));
	if (!j || !mv) {
		free(j);
		free(mv);
		return crest_errf(-ENOMEM, "loading job snapshot %.12s", hex);
	}
	snprintf(j->name, sizeof(j->name), "%s", name);
	j->step = step;
	j->world = (uint32_t)world;
	j->time_ns = m->time_ns;
	j->members = mv;
	for (uint32_t r = 0; r < j->world; r++) {
		const struct cas_stream *st = &m->streams[r];
		char want[32];
		snprintf(want, sizeof(want), "rank/%" PRIu32, r);
		const char *gpu = !strncmp(st->meta, "gpu=", 4) ? st->meta + 4 : NULL;
		if (st->type != CAS_STREAM_MEMBER || strcmp(st->name, want) || strlen(st->target) != 64 ||
		    hex_decode(st->target, mv[r].id, 32) != 32 || (st->meta[0] && !gpu) ||
		    (gpu && strlen(gpu) > CAS_JOBSNAP_GPU_MAX)) {
			cas_jobsnap_free(j);
			return crest_errx(-EBADMSG, "job snapshot %.12s: its stream %zu is not rank %" PRIu32
					  "'s member", hex, (size_t)r, r);
		}
		snprintf(mv[r].gpu, sizeof(mv[r].gpu), "%s", gpu ? gpu : "");
	}
	*out = j;
	return 0;
}

int cas_jobsnap_load(struct cas_store *s, const uint8_t id[32], struct cas_jobsnap **out)
{
	*out = NULL;
	char hex[65];
	hex_encode(id, 32, hex);
	struct cas_manifest *m;
	int rc = cas_manifest_load(s, id, &m);
	if (rc < 0)
		return rc;
	if (!cas_jobsnap_is(m))
		rc = crest_errx(-EINVAL, "snapshot %s is not a job snapshot", hex);
	else
		rc = jobsnap_decode(m, hex, out);
	cas_manifest_free(m);
	return rc;
}

void cas_jobsnap_list_free(struct cas_jobsnap_entry *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		cas_jobsnap_free(v[i].j);
	free(v);
}

static int entry_cmp(const void *a, const void *b)
{
	const struct cas_jobsnap_entry *x = a, *y = b;
	if (x->j->time_ns != y->j->time_ns)
		return x->j->time_ns > y->j->time_ns ? -1 : 1;
	if (x->j->step != y->j->step)
		return x->j->step > y->j->step ? -1 : 1;
	return memcmp(y->id, x->id, 32);
}

int cas_jobsnap_list(struct cas_store *s, const char *name, struct cas_jobsnap_entry **out, size_t *nout)
{
	*out = NULL;
	*nout = 0;
	struct cas_snapinfo *v;
	size_t n;
	int rc = cas_snapshot_list(s, &v, &n);
	if (rc < 0)
		return rc;
	struct cas_jobsnap_entry *e = NULL;
	size_t ne = 0;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		if (!cas_jobsnap_is(v[i].head))
			continue;
		const char *jn = cas_manifest_get_label(v[i].head, CAS_JOBSNAP_LABEL);
		if (name && (!jn || strcmp(jn, name)))
			continue;
		struct cas_jobsnap_entry *ne_ = realloc(e, (ne + 1) * sizeof(*e));
		if (!ne_) {
			rc = crest_errf(-ENOMEM, "listing job snapshots");
			break;
		}
		e = ne_;
		memcpy(e[ne].id, v[i].id, 32);
		rc = cas_jobsnap_load(s, v[i].id, &e[ne].j);
		if (rc == 0)
			ne++;
	}
	cas_snapshot_list_free(v, n);
	if (rc < 0) {
		cas_jobsnap_list_free(e, ne);
		return rc;
	}
	if (ne > 1)
		qsort(e, ne, sizeof(*e), entry_cmp);
	*out = e;
	*nout = ne;
	return 0;
}

int cas_jobsnap_latest(struct cas_store *s, const char *name, uint8_t out[32])
{
	struct cas_jobsnap_entry *v;
	size_t n;
	int rc = cas_jobsnap_list(s, name, &v, &n);
	if (rc < 0)
		return rc;
	const struct cas_jobsnap_entry *best = NULL;
	for (size_t i = 0; i < n; i++)   /* newest first by time: a later step wins over it */
		if (!best || v[i].j->step > best->j->step)
			best = &v[i];
	if (best)
		memcpy(out, best->id, 32);
	else
		rc = crest_errx(-ENOENT, "store %s has no job snapshot of job %s", cas_dir(s), name);
	cas_jobsnap_list_free(v, n);
	return rc;
}

int cas_jobsnap_member(struct cas_store *s, const uint8_t id[32], uint32_t rank, uint8_t out[32])
{
	struct cas_jobsnap *j;
	int rc = cas_jobsnap_load(s, id, &j);
	if (rc == 0)
		rc = cas_jobsnap_rank(s, j, id, rank, out);
	cas_jobsnap_free(j);
	return rc;
}

int cas_jobsnap_rank(struct cas_store *s, const struct cas_jobsnap *j, const uint8_t id[32], uint32_t rank,
		     uint8_t out[32])
{
	int rc = 0;
	char hex[65], mhex[65];
	hex_encode(id, 32, hex);
	if (rank >= j->world) {
		rc = crest_errx(-EINVAL, "job snapshot %.12s (job %s step %" PRIu64 ") has ranks 0 to %" PRIu32
				", no rank %" PRIu32, hex, j->name, j->step, j->world - 1, rank);
	} else {
		memcpy(out, j->members[rank].id, 32);
		hex_encode(out, 32, mhex);
		size_t vl;
		char *v = cas_db_get(s, 'i', out, 32, &vl, &rc);
		if (v)
			free(v);
		if (v && cas_hidden(s, out))
			rc = -ENOENT;
		if (rc == -ENOENT)
			rc = crest_errx(-ENOENT, "job snapshot %.12s (job %s step %" PRIu64 "): rank %" PRIu32
					"'s snapshot %s is not in %s", hex, j->name, j->step, rank, mhex, cas_dir(s));
	}
	return rc;
}

/* Whether job snapshot j names exactly members ids and GPUs gpus. */
static bool same_members(const struct cas_jobsnap *j, uint32_t world, const uint8_t (*ids)[32],
			 const char *const *gpus)
{
	if (j->world != world)
		return false;
	for (uint32_t r = 0; r < world; r++) {
		const char *g = gpus && gpus[r] ? gpus[r] : "";
		if (memcmp(j->members[r].id, ids[r], 32) || strcmp(j->members[r].gpu, g))
			return false;
	}
	return true;
}

int cas_jobsnap_commit(struct cas_store *s, const char *name, uint64_t step, uint32_t world,
		       const uint8_t (*ids)[32], const char *const *gpus, const char *tag, uint8_t out[32])
{
	int rc = cas_jobsnap_name_check(name);
	if (rc < 0)
		return rc;
	if (world == 0 || world > CAS_JOBSNAP_WORLD_MAX || !ids)
		return crest_errx(-EINVAL, "job %s step %" PRIu64 ": a job snapshot has 1 to %d ranks, not %" PRIu32,
				  name, step, CAS_JOBSNAP_WORLD_MAX, ids ? world : 0);
	for (uint32_t r = 0; gpus && r < world; r++)
		if (gpus[r] && (rc = cas_jobsnap_gpu_check(gpus[r])) < 0)
			return rc;
	if (tag && (rc = cas_tag_check(tag)) < 0)
		return rc;
	if (s->mode != CAS_WRITE)
		return crest_errx(-EROFS, "job %s step %" PRIu64 ": committing needs store %s open for writing",
				  name, step, s->dir);
	/* The members, under the writer lock this handle holds: gc (which
	 * holds it too) cannot delete one between this check and the commit
	 * below (jobsnap.h). */
	uint64_t time_ns = 0;
	for (uint32_t r = 0; r < world; r++) {
		char hex[65];
		hex_encode(ids[r], 32, hex);
		size_t vl;
		char *v = cas_db_get(s, 'i', ids[r], 32, &vl, &rc);
		if (v && cas_hidden(s, ids[r]))
			rc = -ENOENT;
		if (!v || rc < 0) {
			if (v)
				free(v);
			if (rc == -ENOENT)
				return crest_errx(-ENOENT, "job %s step %" PRIu64 ": rank %" PRIu32
						  "'s snapshot %s is not in %s", name, step, r, hex, s->dir);
			return rc;
		}
		struct cas_manifest *h;
		rc = cas_manifest_decode((const uint8_t *)v, vl, true, &h);
		free(v);
		if (rc < 0)
			return crest_errx(-EBADMSG, "job %s step %" PRIu64 ": rank %" PRIu32 "'s snapshot %s: its "
					  "summary in %s is damaged", name, step, r, hex, s->dir);
		const bool job = cas_jobsnap_is(h);
		if (h->time_ns > time_ns)
			time_ns = h->time_ns;
		cas_manifest_free(h);
		if (job)
			return crest_errx(-EINVAL, "job %s step %" PRIu64 ": rank %" PRIu32 "'s snapshot %s is a "
					  "job snapshot itself", name, step, r, hex);
	}
	/* The same job snapshot committed again (a retry whose first try
	 * committed after all): its id, nothing written. The parent: the
	 * newest job snapshot of an earlier step. */
	struct cas_jobsnap_entry *v;
	size_t n;
	if ((rc = cas_jobsnap_list(s, name, &v, &n)) < 0)
		return rc;
	const struct cas_jobsnap_entry *parent = NULL, *same = NULL;
	for (size_t i = 0; i < n; i++) {
		if (v[i].j->step == step && !same && same_members(v[i].j, world, ids, gpus))
			same = &v[i];
		if (v[i].j->step < step && (!parent || v[i].j->step > parent->j->step))
			parent = &v[i];   /* newest first: the first of a step is its newest */
	}
	if (same) {
		memcpy(out, same->id, 32);
		cas_jobsnap_list_free(v, n);
		uint8_t had[32];
		if (tag && (cas_tag_get(s, tag, had) < 0 || memcmp(had, out, 32)))
			return cas_tag_set(s, tag, out, false);
		return 0;
	}
	struct cas_manifest *m = cas_manifest_new(CAS_JOBSNAP_KIND);
	char buf[64], branch[sizeof(CAS_JOBSNAP_BRANCH_PREFIX) + CAS_JOBSNAP_NAME_MAX];
	snprintf(branch, sizeof(branch), "%s%s", CAS_JOBSNAP_BRANCH_PREFIX, name);
	rc = m ? 0 : -ENOMEM;
	if (rc == 0) {
		m->time_ns = time_ns;
		if (parent) {
			m->has_parent = true;
			memcpy(m->parent, parent->id, 32);
		}
		rc = cas_manifest_label(m, CAS_BRANCH_LABEL, branch);
	}
	if (rc == 0)
		rc = cas_manifest_label(m, CAS_JOBSNAP_LABEL, name);
	snprintf(buf, sizeof(buf), "%" PRIu64, step);
	if (rc == 0)
		rc = cas_manifest_label(m, CAS_JOBSNAP_LABEL_STEP, buf);
	snprintf(buf, sizeof(buf), "%" PRIu32, world);
	if (rc == 0)
		rc = cas_manifest_label(m, CAS_JOBSNAP_LABEL_WORLD, buf);
	cas_jobsnap_list_free(v, n);
	for (uint32_t r = 0; rc == 0 && r < world; r++) {
		char sname[32], hex[65], meta[4 + CAS_JOBSNAP_GPU_MAX + 1];
		snprintf(sname, sizeof(sname), "rank/%" PRIu32, r);
		hex_encode(ids[r], 32, hex);
		const char *g = gpus && gpus[r] ? gpus[r] : "";
		snprintf(meta, sizeof(meta), "%s%s", *g ? "gpu=" : "", g);
		struct cas_stream *st = cas_manifest_add_stream(m, sname, CAS_STREAM_MEMBER);
		if (!st || cas_stream_set_str(&st->target, hex) < 0 || cas_stream_set_str(&st->meta, meta) < 0)
			rc = -ENOMEM;
	}
	if (rc < 0) {
		cas_manifest_free(m);
		return crest_errf(rc, "job %s step %" PRIu64, name, step);
	}
	rc = cas_commit(s, NULL, 0, m, NULL, tag, out);
	cas_manifest_free(m);
	return rc;
}
