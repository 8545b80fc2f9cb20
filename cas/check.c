/*
 * check.c - cas_check: every durable byte a restore or a repair depends on,
 * besides the chunks the snapshots use (restore_verify reads those), and
 * the index against the meta logs both ways (casctl verify; issue 32).
 *
 * What a restore depends on: the index's manifests ('m'), summaries ('i',
 * without which ls, show and get by id do not see a snapshot), pieces
 * ('l'), tags ('t') and chunk locations ('c'). What a repair depends on:
 * every meta log record up to its committed end, and the pack records up
 * to theirs (a repair rebuilds the index from nothing else). So:
 *  - every meta log is read whole: its header, then each record's header
 *    (magic, kind, the bytes that must be zero), payload CRC32C, and the
 *    SHA-256 that names a manifest or a piece; a record that does not
 *    check out below the log's committed end ('q') is damage, and the
 *    walk resyncs at the next record that checks out. Past the end it is
 *    a torn append (a writer killed mid-commit), not damage;
 *  - every pack is read up to its committed end ('p') record by record,
 *    the same way: bytes there that are no record are damage (the chunks
 *    the index names in them are reported, for the caller to cost);
 *  - the index against the logs: a snapshot the index has but no log
 *    holds (a repair would lose it), a summary without its manifest or a
 *    manifest without its summary, a summary that is not its manifest's,
 *    a piece a manifest names that is missing or damaged, a tag naming
 *    no snapshot, and a commit the logs hold that the index lost
 *    (cas_hidden_load decides which are lost rather than in progress).
 * The index is a view opened before the walk: a writer may commit, and
 * gc delete or compact, meanwhile. Records past the view's ends are
 * judged only through cas_hidden_load's verdict, deletes found in the
 * logs excuse what the view still has, and a walk that saw a log vanish
 * or appear is done again.
 */
#include "cas/cas_int.h"
#include "util/crc32c.h"
#include "util/err.h"
#include "util/idset.h"
#include "util/sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Whether id is in s, sorted first if an add unsorted it (duplicates
 * stay: counts below are of what was added). */
static bool ids_has(struct idset *s, const uint8_t id[32])
{
	idset_sort(s);
	return idset_has(s, id);
}

/* A manifest record found intact in a meta log. */
struct lman {
	uint8_t id[32];
	uint32_t log;
	uint64_t off;
	bool past;    /* past its log's committed end in this view */
};

/* A tag record found intact in a meta log: name, target, where. */
struct ltag {
	char name[129];
	uint8_t id[32];
	uint32_t log;
	uint64_t off;
	bool past;
};

/* Bytes of a meta log or pack below its committed end that hold no
 * record that checks out. */
struct span {
	bool pack;
	uint32_t num;
	uint64_t off, end;
	char why[160];
};

struct chk {
	struct cas_store *s;
	int (*cb)(const struct cas_fault *f, void *arg);
	void *arg;
	int faults;
	struct lman *man;
	size_t nman;
	struct idset lpieces, gone;   /* in the logs: pieces; revoked or deleted ids */
	struct lman *lpv;             /* the pieces again, with where they are */
	struct ltag *tags;            /* tag records, in log order */
	size_t ntags;
	size_t nlpv;
	struct span *spans;
	size_t nspans;
	bool changed;                 /* a log vanished or appeared during the walk */
};

static int say(struct chk *c, const char *where, const struct idset *ids, const uint8_t (*chunks)[32],
	       size_t nchunks, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static int say(struct chk *c, const char *where, const struct idset *ids, const uint8_t (*chunks)[32],
	       size_t nchunks, const char *fmt, ...)
{
	char what[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	const struct cas_fault f = { .where = where, .what = what, .ids = ids ? (const uint8_t (*)[32])ids->v : NULL,
				     .nids = ids ? ids->n : 0, .chunks = chunks, .nchunks = nchunks };
	c->faults++;
	return c->cb(&f, c->arg);
}

static int span_add(struct chk *c, bool pack, uint32_t num, uint64_t off, uint64_t end, const char *why)
{
	struct span *ns = realloc(c->spans, (c->nspans + 1) * sizeof(*ns));
	if (!ns)
		return crest_errf(-ENOMEM, "checking %s", c->s->dir);
	c->spans = ns;
	ns[c->nspans] = (struct span){ .pack = pack, .num = num, .off = off, .end = end };
	snprintf(ns[c->nspans++].why, sizeof(ns->why), "%s", why);
	return 0;
}

static bool zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

static bool tag_name_ok(const uint8_t *p, size_t n)
{
	if (n < 1 || n > 128)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_./@+", p[i]) || !p[i])
			return false;
	return true;
}

/* NULL when the meta record at r (avail bytes from it) checks out, with
 * its length in *len; else why not. Every byte of it is covered: the
 * header's fields and zeros, the payload by its CRC32C, and a manifest's
 * or piece's name by its SHA-256. A kind unknown to this crest is damage:
 * a newer kind comes with a newer store format, which this crest refuses. */
static const char *meta_rec_check(const uint8_t *r, uint64_t avail, uint64_t *len)
{
	if (avail < CAS_REC_HEADER)
		return "a record header cut short";
	if (memcmp(r, CAS_META_REC_MAGIC, 4))
		return "no record magic";
	const uint32_t n = le32_get(r + CAS_REC_RAW);
	if (!zero(r + 5, 3) || !zero(r + CAS_REC_STORED, 4) || !zero(r + 20, 4))
		return "a record header with bytes that must be zero set";
	if (n > avail - CAS_REC_HEADER)
		return "a record longer than the log";
	const uint8_t *p = r + CAS_REC_HEADER;
	if (crc32c(p, n) != le32_get(r + CAS_REC_CRC))
		return "a record whose CRC32C does not match";
	uint8_t sum[32];
	switch (r[4]) {
	case CAS_META_MANIFEST:
	case CAS_META_PIECE:
		if (sha256_once(p, n, sum) < 0 || memcmp(sum, r + CAS_REC_SHA, 32))
			return "a record whose SHA-256 does not match";
		break;
	case CAS_META_TAG:
		if (!tag_name_ok(p, n))
			return "a tag record whose name is no tag";
		break;
	case CAS_META_REVOKE:
		if (n && (n < 34 || p[0] > 1 || (!p[0] && !zero(p + 1, 32)) || !tag_name_ok(p + 33, n - 33)))
			return "a revoke record that does not decode";
		break;
	case CAS_META_DELETE:
		if (n)
			return "a delete record with a payload";
		break;
	case CAS_META_CHUNKS:
		if (n % CAS_META_CHUNK_ENTRY)
			return "a chunk-entry record that does not decode";
		for (uint32_t i = 0; i < n; i += CAS_META_CHUNK_ENTRY) {
			struct cas_loc loc;
			if (cas_loc_decode(p + i + 32, CAS_LOC_BYTES, &loc) < 0)
				return "a chunk-entry record that does not decode";
		}
		break;
	default:
		return "a record of a kind no crest writes";
	}
	*len = CAS_REC_HEADER + n;
	return NULL;
}

static int meta_take(struct chk *c, const uint8_t *r, uint32_t log, uint64_t off, bool past)
{
	const uint8_t *sha = r + CAS_REC_SHA;
	if (r[4] == CAS_META_PIECE) {
		struct lman *np = realloc(c->lpv, (c->nlpv + 1) * sizeof(*np));
		if (!np)
			return -ENOMEM;
		c->lpv = np;
		np[c->nlpv] = (struct lman){ .log = log, .off = off, .past = past };
		memcpy(np[c->nlpv++].id, sha, 32);
		return idset_add(&c->lpieces, sha);
	}
	if (r[4] == CAS_META_REVOKE || r[4] == CAS_META_DELETE)
		return idset_add(&c->gone, sha);
	if (r[4] == CAS_META_TAG) {
		struct ltag *nt = realloc(c->tags, (c->ntags + 1) * sizeof(*nt));
		if (!nt)
			return -ENOMEM;
		c->tags = nt;
		const uint32_t n = le32_get(r + CAS_REC_RAW);   /* 1 to 128: meta_rec_check */
		nt[c->ntags] = (struct ltag){ .log = log, .off = off, .past = past };
		memcpy(nt[c->ntags].name, r + CAS_REC_HEADER, n);
		nt[c->ntags].name[n] = 0;
		memcpy(nt[c->ntags++].id, sha, 32);
		return 0;
	}
	if (r[4] != CAS_META_MANIFEST)
		return 0;
	struct lman *nm = realloc(c->man, (c->nman + 1) * sizeof(*nm));
	if (!nm)
		return -ENOMEM;
	c->man = nm;
	nm[c->nman] = (struct lman){ .log = log, .off = off, .past = past };
	memcpy(nm[c->nman++].id, sha, 32);
	return 0;
}

/* Whether a meta log holds a manifest record of snapshot id. */
static bool logged(const struct chk *c, const uint8_t id[32])
{
	for (size_t j = 0; j < c->nman; j++)
		if (!memcmp(c->man[j].id, id, 32))
			return true;
	return false;
}

static uint64_t end_in(const struct cas_pack_end *v, size_t n, uint32_t num, bool *found)
{
	for (size_t i = 0; i < n; i++)
		if (v[i].pack == num) {
			*found = true;
			return v[i].end;
		}
	*found = false;
	return 0;
}

/* Meta log num whole, or -ENOENT (no message) when it is gone. */
static int read_all(struct cas_store *s, uint32_t num, uint8_t **buf, uint64_t *size)
{
	*buf = NULL;
	*size = 0;
	struct cas_obj *f;
	int rc = cas_obj_open(s->objs, CAS_OBJ_META, num, false, &f);
	if (rc == -ENOENT)
		crest_errset_str("");   /* gone meanwhile: the caller's case, not a fault */
	if (rc < 0)
		return rc;
	rc = cas_obj_size(f, size);
	if (rc == 0) {
		*buf = malloc(*size ? *size : 1);
		rc = *buf ? 0 : crest_errf(-ENOMEM, "reading a meta log of %s", s->dir);
	}
	if (rc == 0)
		rc = cas_obj_read(f, *buf, *size, 0);
	cas_obj_close(f);
	if (rc < 0) {
		free(*buf);
		*buf = NULL;
	}
	return rc;
}

/* One meta log, whole. */
static int meta_check(struct chk *c, uint32_t num, const struct cas_pack_end *q, size_t nq)
{
	char path[4096];
	cas_meta_path(c->s, num, path, sizeof(path));
	uint8_t *buf;
	uint64_t size;
	int rc = read_all(c->s, num, &buf, &size);
	if (rc == -ENOENT) {
		c->changed = true;   /* gc's compaction removed it meanwhile */
		return 0;
	}
	if (rc < 0)
		return rc;
	bool found;
	const uint64_t qend = end_in(q, nq, num, &found);
	uint32_t version = 0, n = 0;
	if (size < CAS_FILE_HEADER || cas_file_header_check(buf, CAS_META_MAGIC, &version, &n) < 0 || n != num ||
	    version < 1 || version > CAS_META_VERSION) {
		/* A log with nothing committed in it (a writer's open records
		 * the end of an empty one a killed writer left: no record past
		 * the header) costs nothing: not a fault. */
		if (found && qend > CAS_FILE_HEADER)
			rc = span_add(c, false, num, 0, qend, "its file header is not a crest meta log's");
		free(buf);
		return rc;
	}
	uint64_t off = CAS_FILE_HEADER;
	while (rc == 0 && off < size) {
		uint64_t len;
		const char *why = meta_rec_check(buf + off, size - off, &len);
		if (!why) {
			rc = meta_take(c, buf + off, num, off, !found || off >= qend);
			off += len;
			continue;
		}
		/* Past the committed end: an append that never committed. */
		if (!found || off >= qend)
			break;
		uint64_t next = off + 1;
		while (next + CAS_REC_HEADER <= size &&
		       (memcmp(buf + next, CAS_META_REC_MAGIC, 4) || meta_rec_check(buf + next, size - next, &len)))
			next++;
		if (next + CAS_REC_HEADER > size)
			next = size;
		/* No record after it, and the log ends below its committed end:
		 * one fault, the cut, from here on. */
		if (next >= size && size < qend) {
			char cut[96];
			snprintf(cut, sizeof(cut), "the log is cut short at %llu, below its committed end",
				 (unsigned long long)size);
			rc = span_add(c, false, num, off, qend, cut);
			off = qend;
			break;
		}
		rc = span_add(c, false, num, off, next < qend ? next : qend, why);
		off = next;
	}
	/* Cut short at a record's end: what was past it is gone. */
	if (rc == 0 && found && size < qend && off == size)
		rc = span_add(c, false, num, size, qend, "the log is cut short, below its committed end");
	free(buf);
	return rc < 0 && !crest_errmsg()[0] ? crest_errf(rc, "checking meta log %s", path) : rc;
}

static int meta_pass(struct chk *c)
{
	struct cas_pack_end *q = NULL;
	size_t nq = 0;
	uint32_t max = 0, max2 = 0;
	int rc = cas_ends_load(c->s, 'q', &q, &nq);
	if (rc == 0)
		rc = cas_meta_max_on_disk(c->s, &max);
	for (uint32_t num = 1; rc == 0 && num <= max; num++) {
		uint64_t size;
		if (cas_obj_stat(c->s->objs, CAS_OBJ_META, num, &size) == 0)
			rc = meta_check(c, num, q, nq);
	}
	if (rc == 0)
		rc = cas_meta_max_on_disk(c->s, &max2);
	c->changed |= max2 != max;
	free(q);
	return rc;
}

/* ---- packs ---- */

struct pscan {
	uint64_t first_end;   /* resync: where the first record found ends */
};

static int pscan_one(const struct cas_scan_rec *r, void *arg)
{
	((struct pscan *)arg)->first_end = r->loc.off + CAS_REC_HEADER + r->loc.stored;
	return 1;   /* one is enough */
}

static int pscan_none(const struct cas_scan_rec *r, void *arg)
{
	(void)r;
	(void)arg;
	return 0;
}

/* The first offset at or past from, below lim, where a chunk record's
 * magic is (lim when none): where a resync tries a record. */
static uint64_t magic_find(struct cas_obj *f, uint64_t from, uint64_t lim)
{
	static const size_t blk = 1 << 16;
	uint8_t *b = malloc(blk + 3);
	while (b && from < lim) {
		/* lim is at most the pack's size: every byte below it is there. */
		const size_t got = lim - from < blk + 3 ? (size_t)(lim - from) : blk + 3;
		if (got < 4 || cas_obj_read(f, b, got, from) < 0)
			break;
		const uint8_t *hit = memmem(b, (size_t)got, CAS_REC_MAGIC, 4);
		if (hit) {
			const uint64_t at = from + (uint64_t)(hit - b);
			free(b);
			return at;
		}
		from += (uint64_t)got - 3;
	}
	free(b);
	return lim;
}

/* Every pack the index records, up to its committed end. */
static int pack_pass(struct chk *c)
{
	struct cas_pack_end *p = NULL;
	size_t np = 0;
	int rc = cas_ends_load(c->s, 'p', &p, &np);
	for (size_t i = 0; rc == 0 && i < np; i++) {
		uint64_t size;
		if (p[i].end <= CAS_FILE_HEADER)
			continue;
		rc = cas_obj_stat(c->s->objs, CAS_OBJ_PACK, p[i].pack, &size);
		if (rc < 0) {
			if (rc == -ENOENT)
				rc = span_add(c, true, p[i].pack, 0, p[i].end, "the pack is missing");
			continue;
		}
		if (size < p[i].end) {
			rc = span_add(c, true, p[i].pack, size, p[i].end, "the pack is shorter than its committed end");
			if (rc < 0)
				break;
		}
		const uint64_t lim = size < p[i].end ? size : p[i].end;
		uint64_t off = CAS_FILE_HEADER;
		crest_errset_str("");
		struct cas_obj *f;
		if (cas_pack_open_read(c->s, p[i].pack, &f) < 0) {
			rc = span_add(c, true, p[i].pack, 0, p[i].end, crest_errmsg());
			continue;
		}
		while (rc == 0 && off < lim) {
			uint64_t end;
			rc = cas_pack_scan(c->s, p[i].pack, off, false, pscan_none, NULL, &end);
			if (rc < 0 || end >= lim)
				break;
			/* A record that does not check out below the committed end:
			 * resync at the next one that does. */
			uint64_t next = end + 1;
			while ((next = magic_find(f, next, lim)) < lim) {
				struct pscan ps = { 0 };
				uint64_t e2;
				if (cas_pack_scan(c->s, p[i].pack, next, false, pscan_one, &ps, &e2) == 1)
					break;
				next++;
			}
			rc = span_add(c, true, p[i].pack, end, next < lim ? next : lim,
				      "bytes that are no chunk record that checks out");
			off = next;
		}
		cas_obj_close(f);
	}
	free(p);
	return rc;
}

/* ---- the index ---- */

struct ixscan {
	struct chk *c;
	struct idset *set;
};

static int ids_cb(const char *k, size_t kl, const char *v, size_t vl, void *arg)
{
	(void)v;
	(void)vl;
	struct ixscan *x = arg;
	if (kl != 32)
		return 0;
	return idset_add(x->set, (const uint8_t *)k) < 0 ? crest_errf(-ENOMEM, "checking %s", x->c->s->dir) : 0;
}

/* A piece some manifest names, and the snapshots that name it. */
struct puse {
	uint8_t sha[32];
	uint8_t id[32];
	char stream[96];
};

static int puse_cmp(const void *a, const void *b)
{
	return memcmp(a, b, 64);
}

static void where_key(char *buf, size_t cap, const char *dir, char type, const uint8_t id[32])
{
	char hex[65];
	hex_encode(id, 32, hex);
	snprintf(buf, cap, "index %s/index, key '%c' %s", dir, type, hex);
}

struct tagscan {
	struct chk *c;
	struct idset *m, *i;
};

static int tag_cb(const char *k, size_t kl, const char *v, size_t vl, void *arg)
{
	struct tagscan *t = arg;
	char where[512];
	snprintf(where, sizeof(where), "index %s/index, tag %.*s", t->c->s->dir, (int)(kl < 128 ? kl : 128), k);
	if (vl != 32)
		return say(t->c, where, NULL, NULL, 0, "the tag's value is not a snapshot id");
	/* A tag of a snapshot whose keys another fault names is that fault's:
	 * only a tag naming a snapshot that is nowhere is a fault of its own. */
	if (ids_has(t->m, (const uint8_t *)v) || ids_has(t->i, (const uint8_t *)v) ||
	    cas_hidden(t->c->s, (const uint8_t *)v))
		return 0;
	if (logged(t->c, (const uint8_t *)v))
		return 0;
	char hex[65];
	hex_encode((const uint8_t *)v, 32, hex);
	return say(t->c, where, NULL, NULL, 0, "the tag names snapshot %s, which neither the index nor a meta "
		   "log has", hex);
}

static int index_pass(struct chk *c, struct idset *m, struct idset *orphans)
{
	struct idset iset = { 0 };
	struct puse *uses = NULL;
	size_t nuses = 0;
	int rc = cas_db_scan(c->s, 'm', ids_cb, &(struct ixscan){ c, m });
	if (rc == 0)
		rc = cas_db_scan(c->s, 'i', ids_cb, &(struct ixscan){ c, &iset });
	idset_sort(m);
	idset_sort(&iset);
	char where[512];
	/* Manifests: each checked, its summary beside it, its pieces noted. */
	for (size_t k = 0; rc == 0 && k < m->n; k++) {
		const uint8_t *id = m->v[k];
		if (cas_hidden(c->s, id))
			continue;
		struct idset one = { .v = (uint8_t (*)[32])id, .n = 1 };
		size_t vl, il;
		int grc;
		char *v = cas_db_get(c->s, 'm', id, 32, &vl, &grc);
		if (!v) {
			rc = grc == -ENOENT ? 0 : grc;
			continue;
		}
		struct cas_manifest *man = NULL;
		crest_errset_str("");
		int mrc = cas_manifest_check(c->s, id, v, vl, &man);
		where_key(where, sizeof(where), c->s->dir, 'm', id);
		if (mrc == -ENOMEM) {
			rc = mrc;
		} else if (mrc < 0) {
			rc = say(c, where, &one, NULL, 0, "%s: %s", crest_errmsg(), logged(c, id) ? "casctl repair puts it "
				 "back from the meta logs" : "no meta log holds it either: it is lost");
		} else if (!ids_has(&iset, id)) {
			where_key(where, sizeof(where), c->s->dir, 'i', id);
			rc = say(c, where, &one, NULL, 0, "the snapshot's summary is missing: ls, show and get by id "
				 "do not see it (casctl repair puts it back from the meta logs)");
		} else {
			char *iv = cas_db_get(c->s, 'i', id, 32, &il, &grc);
			where_key(where, sizeof(where), c->s->dir, 'i', id);
			if (iv && (il > vl || memcmp(iv, v, il)))
				rc = say(c, where, &one, NULL, 0, "the snapshot's summary is not its manifest's: "
					 "listings show what it is not (casctl repair puts it right)");
			free(iv);
		}
		for (size_t i = 0; rc == 0 && man && i < man->npieces; i++) {
			struct puse *nu = realloc(uses, (nuses + 1) * sizeof(*nu));
			if (!nu) {
				rc = crest_errf(-ENOMEM, "checking %s", c->s->dir);
				break;
			}
			uses = nu;
			memcpy(nu[nuses].sha, man->pieces[i].sha, 32);
			memcpy(nu[nuses].id, id, 32);
			snprintf(nu[nuses++].stream, sizeof(nu->stream), "%s", man->streams[man->pieces[i].stream].name);
		}
		cas_manifest_free(man);
		free(v);
	}
	/* Summaries without a manifest: listed, but nothing to restore. */
	for (size_t k = 0; rc == 0 && k < iset.n; k++) {
		if (ids_has(m, iset.v[k]) || cas_hidden(c->s, iset.v[k]))
			continue;
		struct idset one = { .v = &iset.v[k], .n = 1 };
		where_key(where, sizeof(where), c->s->dir, 'm', iset.v[k]);
		rc = say(c, where, &one, NULL, 0, "the snapshot's manifest is missing: it is listed, but crest get "
			 "of it fails (%s)", logged(c, iset.v[k]) ? "casctl repair puts it back from the meta logs"
						    : "and no meta log holds it: it is lost");
	}
	/* Pieces: each once, with every snapshot that names it. A delta's base
	 * is checked with it (cas_manifest_piece_decode checks both). */
	if (rc == 0 && nuses)
		qsort(uses, nuses, sizeof(*uses), puse_cmp);
	for (size_t i = 0; rc == 0 && i < nuses;) {
		size_t j = i;
		struct idset who = { 0 };
		while (rc == 0 && j < nuses && !memcmp(uses[j].sha, uses[i].sha, 32)) {
			if (!j || memcmp(uses[j].id, uses[j - 1].id, 32) || j == i)
				rc = idset_add(&who, uses[j].id) < 0 ? -ENOMEM : 0;
			j++;
		}
		if (!c->lpieces.n || !ids_has(&c->lpieces, uses[i].sha))
			for (size_t w = 0; rc == 0 && w < who.n; w++)
				if (!ids_has(orphans, who.v[w]))
					rc = idset_add(orphans, who.v[w]);
		size_t vl, bl = 0;
		int grc;
		uint8_t base[32], sum[32];
		const char *why = NULL;
		char *v = rc == 0 ? cas_db_get(c->s, 'l', uses[i].sha, 32, &vl, &grc) : NULL;
		char *bv = NULL;
		if (rc == 0 && !v && grc != -ENOENT)
			rc = grc;
		else if (rc == 0 && !v)
			why = "is missing";
		else if (rc == 0 && (sha256_once(v, vl, sum) < 0 || memcmp(sum, uses[i].sha, 32)))
			why = "does not match its SHA-256";
		else if (rc == 0 && cas_piece_base((const uint8_t *)v, vl, base) == 1) {
			bv = cas_db_get(c->s, 'l', base, 32, &bl, &grc);
			if (!bv && grc != -ENOENT)
				rc = grc;
			else if (!bv)
				why = "is a delta whose base is missing";
			else if (sha256_once(bv, bl, sum) < 0 || memcmp(sum, base, 32))
				why = "is a delta whose base does not match its SHA-256";
		}
		if (rc == 0 && why) {
			where_key(where, sizeof(where), c->s->dir, 'l', uses[i].sha);
			rc = say(c, where, &who, NULL, 0, "an extent-list piece (of stream %s) %s: every snapshot that "
				 "names it is unreadable%s", uses[i].stream, why, ids_has(&c->lpieces, uses[i].sha)
				 ? " (casctl repair puts it back from the meta logs)" : "");
		}
		free(v);
		free(bv);
		free(who.v);
		i = j;
	}
	/* Tags naming no snapshot. */
	struct tagscan ts = { c, m, &iset };
	if (rc == 0)
		rc = cas_db_scan(c->s, 't', tag_cb, &ts);
	/* Snapshots the index has that no meta log holds: a repair, which
	 * rebuilds the index from the logs, would lose them. */
	for (size_t k = 0; rc == 0 && k < m->n + iset.n; k++) {
		const uint8_t *id = k < m->n ? m->v[k] : iset.v[k - m->n];
		if (cas_hidden(c->s, id) || ids_has(&c->gone, id) || (k >= m->n && ids_has(m, id)))
			continue;
		if (!logged(c, id) && !ids_has(orphans, id))
			rc = idset_add(orphans, id);
	}
	free(iset.v);
	free(uses);
	return rc < 0 && !crest_errmsg()[0] ? crest_errf(rc, "checking the index of %s", c->s->dir) : rc;
}

/* The payload of the meta record at log, off (a malloc'd copy), or NULL. */
static uint8_t *rec_payload(const struct chk *c, uint32_t log, uint64_t off, size_t *len)
{
	uint8_t h[CAS_REC_HEADER], *p = NULL;
	struct cas_obj *f;
	if (cas_obj_open(c->s->objs, CAS_OBJ_META, log, false, &f) < 0)
		return NULL;
	if (cas_obj_read(f, h, sizeof(h), off) == 0) {
		*len = le32_get(h + CAS_REC_RAW);
		p = malloc(*len ? *len : 1);
		if (p && cas_obj_read(f, p, *len, off + CAS_REC_HEADER) < 0) {
			free(p);
			p = NULL;
		}
	}
	cas_obj_close(f);
	return p;
}

/* A piece's encoding, from the index or else from a meta log. */
static uint8_t *piece_get(struct chk *c, const uint8_t sha[32], size_t *len)
{
	int grc;
	char *v = cas_db_get(c->s, 'l', sha, 32, len, &grc);
	if (v) {
		uint8_t *p = malloc(*len ? *len : 1);
		if (p)
			memcpy(p, v, *len);
		free(v);
		return p;
	}
	for (size_t i = 0; i < c->nlpv; i++)
		if (!memcmp(c->lpv[i].id, sha, 32))
			return rec_payload(c, c->lpv[i].log, c->lpv[i].off, len);
	return NULL;
}

/* Whether the snapshot of manifest record x could be committed again:
 * its manifest decodes, and every piece and chunk it needs is there. A
 * committed snapshot the index lacks and that lacks data is one a repair
 * or a writer's open already named as lost and left out (recover.c): not
 * a fault of today's. -ENOMEM, or 1 or 0. */
static int recoverable(struct chk *c, const struct lman *x)
{
	size_t len;
	uint8_t *p = rec_payload(c, x->log, x->off, &len);
	struct cas_manifest *m = NULL;
	if (!p || cas_manifest_decode(p, len, false, &m) < 0) {
		free(p);
		return 0;
	}
	int ok = 1;
	for (size_t i = 0; ok == 1 && i < m->npieces; i++) {
		size_t pl, bl = 0;
		uint8_t *pp = piece_get(c, m->pieces[i].sha, &pl), *bp = NULL, base[32];
		if (pp && cas_piece_base(pp, pl, base) == 1)
			bp = piece_get(c, base, &bl);
		if (!pp || cas_manifest_piece_decode(m, i, pp, pl, bp, bl) < 0)
			ok = 0;
		free(pp);
		free(bp);
	}
	for (size_t st = 0; ok == 1 && st < m->nstreams; st++)
		for (uint64_t e = 0; ok == 1 && e < m->streams[st].nextents; e++) {
			const struct cas_extent *xe = &m->streams[st].ext[e];
			struct cas_loc loc;
			if (!xe->hole && (cas_chunk_lookup(c->s, xe->sha, &loc) < 0 || cas_pack_lost(c->s, loc.pack)))
				ok = 0;
		}
	cas_manifest_free(m);
	free(p);
	return ok;
}

/* Commits the logs hold that the index lacks. */
static int commits_pass(struct chk *c, struct idset *m)
{
	int rc = 0;
	char where[4200], path[4096];
	struct idset iset = { 0 };
	rc = cas_db_scan(c->s, 'i', ids_cb, &(struct ixscan){ c, &iset });
	for (size_t i = 0; rc == 0 && i < c->nman; i++) {
		const struct lman *x = &c->man[i];
		if (ids_has(&c->gone, x->id) || ids_has(m, x->id) || ids_has(&iset, x->id))
			continue;
		bool seen = false;   /* the same manifest twice: compaction, or a reconcile */
		for (size_t j = 0; j < i && !seen; j++)
			seen = !memcmp(c->man[j].id, x->id, 32);
		if (seen)
			continue;
		struct idset one = { .v = (uint8_t (*)[32])x->id, .n = 1 };
		cas_meta_path(c->s, x->log, path, sizeof(path));
		snprintf(where, sizeof(where), "meta log %s at %llu", path, (unsigned long long)x->off);
		if (!x->past) {
			const int ok = recoverable(c, x);
			if (ok == 1)
				rc = say(c, where, &one, NULL, 0, "a committed snapshot that the index lacks (its manifest "
					 "and summary are gone from it): casctl repair brings it back");
			continue;
		}
		bool lost = false;
		for (size_t j = 0; j < c->s->nunidx && !lost; j++)
			lost = !memcmp(c->s->unidx[j].id, x->id, 32);
		if (lost)   /* else in progress, or committed after this view */
			rc = say(c, where, &one, NULL, 0, "a commit the index lost: its write-ahead log in %s/index/ "
				 "was cut short or deleted, or its writer was killed before the index batch; the "
				 "snapshot is hidden until the next writer, or casctl repair, brings it back", c->s->dir);
	}
	/* Tags: the last record of each name, committed, must agree with the
	 * index, since a repair rebuilds the index's tags from these records.
	 * A last record whose snapshot is revoked or deleted is left alone: a
	 * revoke may have put an older target back, and gc removes the tags
	 * of what it deletes. Nothing else moves or drops a tag without a
	 * record (cas_tag_put logs first; compaction copies the index's), so:
	 *  - a record naming a snapshot that no log and no index has, while
	 *    not gone, has a damaged target (no checksum covers that field):
	 *    a repair would lose the tag;
	 *  - a record naming a snapshot the index has must be in the index
	 *    with that target (a deleted 't' key makes crest get of the tag
	 *    fail; one naming another snapshot would be moved by a repair). */
	for (size_t i = c->ntags; rc == 0 && i-- > 0;) {
		const struct ltag *t = &c->tags[i];
		bool later = false;
		for (size_t j = i + 1; j < c->ntags && !later; j++)
			later = !strcmp(c->tags[j].name, t->name);
		if (later || t->past || ids_has(&c->gone, t->id) || cas_hidden(c->s, t->id))
			continue;
		const bool indexed = ids_has(m, t->id);
		if (!indexed && logged(c, t->id))
			continue;   /* the manifest's own fault: the index lacks it */
		uint8_t id[32];
		const int trc = cas_tag_get(c->s, t->name, id);
		if (trc < 0 && trc != -ENOENT) {
			rc = trc;
			break;
		}
		if (indexed && trc == 0 && !memcmp(id, t->id, 32))
			continue;
		char want[65], have[65];
		hex_encode(t->id, 32, want);
		hex_encode(id, 32, have);
		/* The snapshot that would lose or change its tag: the index's. */
		struct idset one = { .v = (uint8_t (*)[32])(trc == 0 ? id : t->id), .n = 1 };
		cas_meta_path(c->s, t->log, path, sizeof(path));
		if (!indexed) {
			snprintf(where, sizeof(where), "meta log %s at %llu", path, (unsigned long long)t->off);
			rc = say(c, where, trc == 0 ? &one : NULL, NULL, 0, "the record of tag %s names snapshot %.12s, "
				 "which neither the index nor a meta log has: its target is damaged, and a repair, "
				 "which rebuilds the index from the meta logs, would lose the tag", t->name, want);
		} else if (trc == 0) {
			snprintf(where, sizeof(where), "index %s/index, tag %s", c->s->dir, t->name);
			rc = say(c, where, &one, NULL, 0, "the tag names snapshot %.12s, and its last record (meta log "
				 "%s at %llu) names %.12s: a repair would move it there", have, path,
				 (unsigned long long)t->off, want);
		} else {
			snprintf(where, sizeof(where), "index %s/index, tag %s", c->s->dir, t->name);
			rc = say(c, where, &one, NULL, 0, "the tag is missing from the index (meta log %s at %llu has "
				 "it): crest get %s fails; casctl repair puts it back", path,
				 (unsigned long long)t->off, t->name);
		}
	}
	free(iset.v);
	return rc;
}

/* Chunks the index locates inside the damaged pack spans. */
struct cspan {
	struct chk *c;
	const struct span *sp;
	uint8_t (*v)[32];
	size_t n;
};

static int cspan_cb(const uint8_t sha[32], const struct cas_loc *loc, void *arg)
{
	struct cspan *x = arg;
	const struct span *sp = x->sp;
	if (loc->pack != sp->num || loc->off + CAS_REC_HEADER + loc->stored <= sp->off || loc->off >= sp->end)
		return 0;
	uint8_t (*nv)[32] = realloc(x->v, (x->n + 1) * 32);
	if (!nv)
		return crest_errf(-ENOMEM, "checking %s", x->c->s->dir);
	x->v = nv;
	memcpy(x->v[x->n++], sha, 32);
	return 0;
}

static void chk_reset(struct chk *c)
{
	free(c->man);
	free(c->lpieces.v);
	free(c->lpv);
	c->lpv = NULL;
	c->nlpv = 0;
	free(c->tags);
	c->tags = NULL;
	c->ntags = 0;
	free(c->gone.v);
	free(c->spans);
	c->man = NULL;
	c->nman = 0;
	c->lpieces = (struct idset){ 0 };
	c->gone = (struct idset){ 0 };
	c->spans = NULL;
	c->nspans = 0;
	c->changed = false;
}

int cas_check(struct cas_store *s, int (*cb)(const struct cas_fault *f, void *arg), void *arg)
{
	struct chk c = { .s = s, .cb = cb, .arg = arg };
	struct idset m = { 0 }, orphans = { 0 };
	int rc = 0;
	/* gc may compact the logs while they are read: then read them again. */
	for (int tries = 0; rc == 0 && tries < 3; tries++) {
		chk_reset(&c);
		rc = meta_pass(&c);
		if (!c.changed)
			break;
	}
	if (rc == 0)
		rc = pack_pass(&c);
	if (rc == 0)
		rc = index_pass(&c, &m, &orphans);
	if (rc == 0)
		rc = commits_pass(&c, &m);
	char where[4200], path[4096];
	/* Damaged meta log bytes cost, at a repair, the snapshots the index
	 * has that no intact record holds: which span held which cannot be
	 * told, so each span names them all. Without damage, each such
	 * snapshot is a fault of its own (a log removed, say). */
	bool meta_damage = false;
	for (size_t i = 0; rc == 0 && i < c.nspans; i++) {
		const struct span *sp = &c.spans[i];
		if (sp->pack)
			continue;
		meta_damage = true;
		cas_meta_path(s, sp->num, path, sizeof(path));
		snprintf(where, sizeof(where), "meta log %s at %llu", path, (unsigned long long)sp->off);
		rc = say(&c, where, &orphans, NULL, 0, "%s; %llu bytes to %llu unreadable, below the log's committed "
			 "end: a repair, which rebuilds the index from the meta logs, loses what they held%s", sp->why,
			 (unsigned long long)(sp->end - sp->off), (unsigned long long)sp->end,
			 orphans.n ? " (the snapshots named, which no intact record holds)" : " (no snapshot: every one "
			 "the index has is in an intact record too)");
	}
	/* A format 1 store keeps its snapshots in its index alone (a writer
	 * copies them into a meta log when it upgrades it): no log is no fault. */
	for (size_t i = 0; rc == 0 && !meta_damage && s->format >= 2 && i < orphans.n; i++) {
		struct idset one = { .v = &orphans.v[i], .n = 1 };
		where_key(where, sizeof(where), s->dir, 'm', orphans.v[i]);
		rc = say(&c, where, &one, NULL, 0, "the snapshot (or a piece of its extent list) is in no meta log: "
			 "a repair, which rebuilds the index from the meta logs, would lose it");
	}
	for (size_t i = 0; rc == 0 && i < c.nspans; i++) {
		const struct span *sp = &c.spans[i];
		if (!sp->pack)
			continue;
		struct cspan x = { .c = &c, .sp = sp };
		rc = cas_index_foreach(s, cspan_cb, &x);
		cas_pack_name(s, sp->num, path, sizeof(path));
		snprintf(where, sizeof(where), "pack %s at %llu", path, (unsigned long long)sp->off);
		char names[128] = "", hex[65];
		for (size_t k = 0; k < x.n && k < 4; k++) {
			hex_encode(x.v[k], 32, hex);
			snprintf(names + strlen(names), sizeof(names) - strlen(names), " %.16s", hex);
		}
		if (x.n > 4)
			snprintf(names + strlen(names), sizeof(names) - strlen(names), " and %zu more", x.n - 4);
		if (rc == 0)
			rc = say(&c, where, NULL, (const uint8_t (*)[32])x.v, x.n, "%s; %llu bytes to %llu, below the "
				 "pack's committed end, with %zu chunk record%s the index names%s%s", sp->why,
				 (unsigned long long)(sp->end - sp->off), (unsigned long long)sp->end, x.n,
				 x.n == 1 ? "" : "s", x.n ? ":" : "", names);
		free(x.v);
	}
	chk_reset(&c);
	free(m.v);
	free(orphans.v);
	return rc < 0 ? rc : c.faults;
}
