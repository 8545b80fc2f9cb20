/*
 * recover.c - putting the index right with what the packs and meta logs
 * hold: at every writer's open (the tails past what the index records) and
 * for `casctl repair` (everything, into an empty index). The rules are in
 * store.c's design notes; in short:
 *   - a manifest in a meta log that the index lacks, and that no revoke
 *     record names, is committed again if every chunk and piece it needs
 *     is there, else reported and left out;
 *   - a revoke record undoes its commit, if RocksDB brought it back;
 *   - pack bytes past each pack's committed end, and packs past the last
 *     one the index records, are cut (never in repair, which deletes
 *     nothing).
 * Nothing here trusts a byte that does not check out: records are taken
 * up to the first one whose header or CRC32C is wrong, manifests and
 * pieces by their SHA-256.
 */
#include "cas/cas_int.h"
#include "util/err.h"
#include "util/sha256.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A meta record kept for later: its kind, name and a copy of its payload. */
struct item {
	uint8_t kind;
	uint8_t sha[32];
	uint8_t *p;
	size_t len;
	uint32_t log;             /* where it is: log number, record offset */
	uint64_t off;
};

struct rec_ctx {
	struct cas_store *s;
	struct item *v;           /* in log order: tags apply in it */
	size_t n, cap;
	const struct item **by;   /* the same, by kind then SHA-256 (items_index) */
	int err;
	bool chunks;              /* keep CAS_META_CHUNKS records (a catch-up only:
				   * a rebuild reads the packs, and would hold
				   * every entry of the store here) */
};

static int item_cb(const struct cas_meta_item *it, void *arg)
{
	struct rec_ctx *c = arg;
	if (it->kind < CAS_META_MANIFEST || it->kind > CAS_META_CHUNKS || (it->kind == CAS_META_CHUNKS && !c->chunks))
		return 0;   /* a kind from a newer crest: not ours to act on */
	if (c->n == c->cap) {
		const size_t cap = c->cap ? c->cap * 2 : 16;
		struct item *nv = realloc(c->v, cap * sizeof(*nv));
		if (!nv)
			return crest_errf(-ENOMEM, "reading the meta logs of %s", c->s->dir);
		c->v = nv;
		c->cap = cap;
	}
	struct item *x = &c->v[c->n];
	x->kind = it->kind;
	memcpy(x->sha, it->sha, 32);
	/* A manifest is named by its SHA-256, which no checksum in its
	 * record's header covers: one that checks out (CRC32C) goes by its
	 * hash, so a damaged id field costs nothing. One that does not
	 * keeps the id its header says, for the message that it is lost. */
	if (it->kind == CAS_META_MANIFEST && !it->damaged && sha256_once(it->p, it->len, x->sha) < 0)
		return crest_errf(-EIO, "hashing a manifest of %s", c->s->dir);
	x->len = it->len;
	x->log = it->log;
	x->off = it->off;
	x->p = malloc(it->len ? it->len : 1);
	if (!x->p)
		return crest_errf(-ENOMEM, "reading the meta logs of %s", c->s->dir);
	memcpy(x->p, it->p, it->len);
	c->n++;
	return 0;
}

static void items_free(struct rec_ctx *c)
{
	for (size_t i = 0; i < c->n; i++)
		free(c->v[i].p);
	free(c->v);
	free(c->by);
}

static uint64_t end_of(const struct cas_pack_end *v, size_t n, uint32_t num, bool *found)
{
	for (size_t i = 0; i < n; i++)
		if (v[i].pack == num) {
			*found = true;
			return v[i].end;
		}
	*found = false;
	return 0;
}

/* The meta records of every log past its committed end (q), and the new
 * ends in *qn (one per log walked). */
static int meta_tails(struct cas_store *s, const struct cas_pack_end *q, size_t nq, bool resync,
		      struct rec_ctx *c, struct cas_pack_end **qn, size_t *nqn)
{
	uint32_t max;
	int rc = cas_meta_max_on_disk(s, &max);
	*qn = NULL;
	*nqn = 0;
	if (rc < 0 || max == 0)
		return rc;
	*qn = calloc(max, sizeof(**qn));
	if (!*qn)
		return crest_errf(-ENOMEM, "reading the meta logs of %s", s->dir);
	for (uint32_t num = 1; rc == 0 && num <= max; num++) {
		uint64_t size;
		if (cas_obj_stat(s->objs, CAS_OBJ_META, num, &size) < 0)
			continue;
		bool found;
		const uint64_t from = end_of(q, nq, num, &found);
		/* A log that ends at its committed end has no tail: one stat,
		 * not an open and a read of its header. Every open, a reader's
		 * included, comes here for every log, and gc leaves them until
		 * they total 64 MiB (1,327 logs in issue 32's store). */
		if (found && size == from)
			continue;
		uint64_t end;
		rc = cas_meta_walk(s, num, found ? from : 0, resync, item_cb, c, &end);
		if (rc == -ENOENT) {   /* gc's compaction removed it meanwhile (a reader's open) */
			rc = 0;
			continue;
		}
		if (rc == 0 && (!found || end != from))
			(*qn)[(*nqn)++] = (struct cas_pack_end){ num, end };
	}
	return rc;
}

/* An index value, or NULL with *rc 0 when there is none. */
static char *db_value(struct cas_store *s, char type, const void *key, size_t klen, size_t *vl, int *rc)
{
	char *v = cas_db_get(s, type, key, klen, vl, rc);
	if (*rc == -ENOENT)
		*rc = 0;
	return v;
}

static int item_cmp(const void *a, const void *b)
{
	const struct item *x = *(const struct item *const *)a, *y = *(const struct item *const *)b;
	return x->kind != y->kind ? (x->kind < y->kind ? -1 : 1) : memcmp(x->sha, y->sha, 32);
}

/* Sorts the items for item_find: a repair reads every log, and looks up
 * each manifest's revoke and each piece it names, which a scan of all
 * items per look-up would make quadratic. */
static int items_index(struct rec_ctx *c)
{
	c->by = malloc((c->n ? c->n : 1) * sizeof(*c->by));
	if (!c->by)
		return crest_errf(-ENOMEM, "reading the meta logs of %s", c->s->dir);
	for (size_t i = 0; i < c->n; i++)
		c->by[i] = &c->v[i];
	qsort(c->by, c->n, sizeof(*c->by), item_cmp);
	return 0;
}

/* An item of this kind and SHA-256, or NULL. */
static const struct item *item_find(const struct rec_ctx *c, uint8_t kind, const uint8_t sha[32])
{
	struct item key = { .kind = kind };
	memcpy(key.sha, sha, 32);
	const struct item *kp = &key;
	const struct item **hit = c->by ? bsearch(&kp, c->by, c->n, sizeof(*c->by), item_cmp) : NULL;
	return hit ? *hit : NULL;
}

/* Revoked (a failed commit) or deleted by gc: never to be in the index. */
static bool revoked(const struct rec_ctx *c, const uint8_t id[32])
{
	return item_find(c, CAS_META_REVOKE, id) != NULL || item_find(c, CAS_META_DELETE, id) != NULL;
}

/* Undoes the commit of id, if the index has it (see the notes in store.c). */
static int apply_revoke(struct cas_store *s, const struct item *x, struct cas_index_batch *b, unsigned *undone)
{
	size_t vl;
	int rc;
	char *v = db_value(s, 'm', x->sha, 32, &vl, &rc);
	if (rc < 0)
		return rc;
	if (!v)
		return 0;
	free(v);
	char k[1 + 128 + 1];
	k[0] = 'm';
	memcpy(k + 1, x->sha, 32);
	cas_index_batch_delete(b, k, 33);
	k[0] = 'i';
	cas_index_batch_delete(b, k, 33);
	if (x->len > 33 && x->len - 33 <= 128) {
		const size_t tl = x->len - 33;
		char *t = db_value(s, 't', x->p + 33, tl, &vl, &rc);
		if (rc < 0)
			return rc;
		const bool points_here = t && vl == 32 && !memcmp(t, x->sha, 32);
		free(t);
		if (points_here) {
			k[0] = 't';
			memcpy(k + 1, x->p + 33, tl);
			if (x->p[0])
				cas_index_batch_put(b, k, tl + 1, x->p + 1, 32);
			else
				cas_index_batch_delete(b, k, tl + 1);
		}
	}
	char hex[65];
	hex_encode(x->sha, 32, hex);
	fprintf(stderr, "crest: snapshot %.12s in %s: its commit had failed; removed it from the index\n", hex,
		s->dir);
	(*undone)++;
	return 0;
}

/* Finishes gc's deletion of id, if a kill left it in the index (gc.h,
 * step 1): its manifest, summary and the tags naming it go. */
static int apply_delete(struct cas_store *s, const struct item *x, struct cas_index_batch *b, unsigned *undone)
{
	size_t vl;
	int rc;
	char *v = db_value(s, 'm', x->sha, 32, &vl, &rc);
	if (rc < 0)
		return rc;
	if (!v)
		return 0;
	free(v);
	rc = cas_batch_forget(s, b, (const uint8_t (*)[32])x->sha, 1);
	char hex[65];
	hex_encode(x->sha, 32, hex);
	fprintf(stderr, "crest: snapshot %.12s in %s: gc had deleted it; removed it from the index\n", hex, s->dir);
	(*undone)++;
	return rc;
}

struct scan_ctx {
	struct cas_store *s;
	struct cas_index_batch *b;
	uint64_t records;
};

/* A catch-up's chunk entries from the meta logs (CAS_META_CHUNKS), when
 * every commit past the index's ends that it recovers has them: indexed
 * (committed before the manifests are checked against the index), each
 * pack's end moved to the end of the last record they name (into b, and
 * into *pv, the ends packs_index then scans from: what lies past them, as
 * a commit too big for its entries to be logged, is read from the packs).
 * Without them all, *pv is NULL: the packs are read from p. */
static int chunks_apply(struct cas_store *s, const struct rec_ctx *c, const struct cas_pack_end *p, size_t np,
			struct cas_index_batch *b, struct cas_pack_end **pv, size_t *npv, uint64_t *listed)
{
	*pv = NULL;
	*npv = 0;
	*listed = 0;
	int rc = 0;
	bool all = true;
	for (size_t i = 0; i < c->n && all; i++) {
		const struct item *x = &c->v[i];
		if (x->kind != CAS_META_MANIFEST || revoked(c, x->sha))
			continue;
		size_t vl;
		char *v = db_value(s, 'm', x->sha, 32, &vl, &rc);
		free(v);
		if (rc < 0)
			return rc;
		all = v || item_find(c, CAS_META_CHUNKS, x->sha);
	}
	if (!all)
		return 0;
	struct cas_pack_end *v = malloc((np + 1) * sizeof(*v));
	if (!v)
		return crest_errf(-ENOMEM, "catching up the index of %s", s->dir);
	memcpy(v, p, np * sizeof(*v));
	size_t n = np, cap = np + 1, j = 0;
	struct cas_index_batch *cb = cas_batch_new(s, &rc);
	for (size_t i = 0; rc == 0 && i < c->n; i++) {
		const struct item *x = &c->v[i];
		if (x->kind != CAS_META_CHUNKS || revoked(c, x->sha))
			continue;
		if (x->len % CAS_META_CHUNK_ENTRY)
			rc = crest_errx(-ESTALE, "a chunk-entry record of the meta logs does not decode");
		for (size_t off = 0; rc == 0 && off < x->len; off += CAS_META_CHUNK_ENTRY) {
			struct cas_loc loc;
			if (cas_loc_decode(x->p + off + 32, CAS_LOC_BYTES, &loc) < 0) {
				rc = crest_errx(-ESTALE, "a chunk entry of the meta logs does not decode");
				break;
			}
			cas_batch_entry(cb, x->p + off, &loc);
			(*listed)++;
			const uint64_t end = loc.off + CAS_REC_HEADER + loc.stored;
			/* A commit's entries name a few new packs, appended
			 * last: the last one found, else from the end. */
			if (j >= n || v[j].pack != loc.pack) {
				size_t k = n;
				while (k > 0 && v[k - 1].pack != loc.pack)
					k--;
				j = k ? k - 1 : n;
			}
			if (j == n) {
				if (n == cap) {
					struct cas_pack_end *nv = realloc(v, (cap *= 2) * sizeof(*nv));
					if (!nv) {
						rc = crest_errf(-ENOMEM, "catching up the index of %s", s->dir);
						break;
					}
					v = nv;
				}
				v[n++] = (struct cas_pack_end){ loc.pack, 0 };
			}
			if (end > v[j].end) {
				v[j].end = end;
				cas_batch_end(b, 'p', loc.pack, end);
			}
			if (cas_index_batch_count(cb) >= 65536) {
				rc = cas_index_batch_commit(cb, "indexing chunk entries");
				cas_index_batch_clear(cb);
			}
		}
	}
	if (rc == 0)
		rc = cas_index_batch_commit(cb, "indexing chunk entries");
	cas_index_batch_free(cb);
	if (rc < 0) {
		free(v);
		return rc;
	}
	*pv = v;
	*npv = n;
	return 0;
}

static int scan_cb(const struct cas_scan_rec *r, void *arg)
{
	struct scan_ctx *c = arg;
	cas_batch_entry(c->b, r->sha, &r->loc);
	c->records++;
	if (cas_index_batch_count(c->b) >= 65536) {
		const int rc = cas_index_batch_commit(c->b, "indexing chunk records");
		cas_index_batch_clear(c->b);
		return rc;
	}
	return 0;
}

/* Indexes the chunk records past each pack's committed end (every record
 * of packs the index does not record, when they lie past the last it does,
 * or always when full). New ends go into b. */
static int packs_index(struct cas_store *s, const struct cas_pack_end *p, size_t np, uint32_t maxp, bool full,
		       struct cas_index_batch *b, uint64_t *records)
{
	uint32_t max;
	int rc = cas_pack_max_on_disk(s, &max);
	struct scan_ctx c = { .s = s, .b = rc == 0 ? cas_batch_new(s, &rc) : NULL };
	for (uint32_t pack = 1; rc == 0 && pack <= max; pack++) {
		uint64_t size;
		if (cas_obj_stat(s->objs, CAS_OBJ_PACK, pack, &size) < 0)
			continue;
		bool found;
		uint64_t from = end_of(p, np, pack, &found);
		if (!found && !full && pack < maxp)
			continue;   /* older than the index's records (format 1): as it was */
		if (found && size == from)
			continue;   /* no tail: nothing to read */
		uint64_t end;
		rc = cas_pack_scan(s, pack, found ? from : 0, full, scan_cb, &c, &end);
		if ((rc == -EBADMSG || rc == -EPROTONOSUPPORT) && full) {
			/* A damaged pack header (a newer version in a store
			 * of this format is damage too): readers cannot open
			 * the pack, so its chunks are lost; repair goes on
			 * without them. */
			fprintf(stderr, "crest: %s; its chunks are lost\n", crest_errmsg());
			rc = 0;
			continue;
		}
		if (rc == 0 && end > from)
			cas_batch_end(b, 'p', pack, end);
	}
	if (rc == 0)
		rc = cas_index_batch_commit(c.b, "indexing chunk records");
	cas_index_batch_free(c.b);
	*records = c.records;
	return rc;
}


/* Appends to what (cap bytes) as far as it fits. */
static void say(char *what, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *what, size_t cap, const char *fmt, ...)
{
	const size_t used = strlen(what);
	va_list ap;
	va_start(ap, fmt);
	if (used < cap)
		vsnprintf(what + used, cap - used, fmt, ap);
	va_end(ap);
}

/* The encoding of piece sha: from the logs (*logged) when a record there
 * has it, else from the index (*dbv, to free). With check, a log
 * record is taken only if it checks out against sha. NULL when neither has
 * it; *rc an error of the index. */
static const uint8_t *piece_bytes(struct cas_store *s, const struct rec_ctx *c, const uint8_t sha[32], bool check,
				  size_t *len, char **dbv, bool *logged, int *rc)
{
	const struct item *it = item_find(c, CAS_META_PIECE, sha);
	uint8_t sum[32];
	*dbv = NULL;
	*logged = it && (!check || (sha256_once(it->p, it->len, sum) == 0 && !memcmp(sum, sha, 32)));
	if (*logged) {
		*len = it->len;
		return it->p;
	}
	*dbv = db_value(s, 'l', sha, 32, len, rc);
	return (const uint8_t *)*dbv;
}

static void piece_put(struct cas_index_batch *b, const uint8_t sha[32], const uint8_t *v, size_t len)
{
	char k[33];
	k[0] = 'l';
	memcpy(k + 1, sha, 32);
	cas_index_batch_put(b, k, 33, v, len);
}

/* Piece i of m, with a delta's base, decoded and checked from the logs or
 * the index (piece_bytes); what came from the logs goes into b. 1 when it
 * checks out, 0 when not (*logged: a log record was used), or an index
 * error. The caller tries again with check only when a log record was
 * used and it failed: the decode hashes each piece, so a first try without
 * check hashes every record once, not twice. */
static int piece_try(struct cas_store *s, const struct rec_ctx *c, struct cas_manifest *m, size_t i, bool check,
		     struct cas_index_batch *b, bool *logged)
{
	char *dv = NULL, *bdv = NULL;
	size_t len = 0, blen = 0;
	bool pl = false, bl = false;
	int rc = 0;
	const uint8_t *v = piece_bytes(s, c, m->pieces[i].sha, check, &len, &dv, &pl, &rc), *bv = NULL;
	uint8_t base[32];
	if (v && cas_piece_base(v, len, base) == 1)
		bv = piece_bytes(s, c, base, check, &blen, &bdv, &bl, &rc);
	const bool ok = rc == 0 && v && cas_manifest_piece_decode(m, i, v, len, bv, blen) == 0;
	if (ok && pl)
		piece_put(b, m->pieces[i].sha, v, len);
	if (ok && bv && bl)
		piece_put(b, base, bv, blen);
	free(dv);
	free(bdv);
	*logged = pl || bl;
	return rc < 0 ? rc : ok;
}

/* Appends a lost range to *v, merged with the last when they touch. */
static int lost_push(struct cas_lost **v, size_t *n, uint32_t stream, uint64_t off, uint64_t len)
{
	if (*n && (*v)[*n - 1].stream == stream && (*v)[*n - 1].off + (*v)[*n - 1].len == off) {
		(*v)[*n - 1].len += len;
		return 0;
	}
	struct cas_lost *nv = realloc(*v, (*n + 1) * sizeof(*nv));
	if (!nv)
		return -ENOMEM;
	*v = nv;
	nv[(*n)++] = (struct cas_lost){ stream, off, len };
	return 0;
}

/* A 'd' key's value for v (format.h), into b. */
static int lost_put(struct cas_index_batch *b, const uint8_t id[32], const struct cas_lost *v, size_t n)
{
	uint8_t *e = malloc(5 + n * CAS_DAMAGE_RANGE);
	if (!e)
		return -ENOMEM;
	e[0] = CAS_DAMAGE_VERSION;
	le32_put(e + 1, (uint32_t)n);
	for (size_t i = 0; i < n; i++) {
		uint8_t *r = e + 5 + i * CAS_DAMAGE_RANGE;
		le32_put(r, v[i].stream);
		le64_put(r + 4, v[i].off);
		le64_put(r + 12, v[i].len);
	}
	char k[33];
	k[0] = 'd';
	memcpy(k + 1, id, 32);
	cas_index_batch_put(b, k, 33, e, 5 + n * CAS_DAMAGE_RANGE);
	free(e);
	return 0;
}

/* Whether every piece and chunk manifest x needs is there; its pieces and
 * manifest keys go into b if so. *missing counts what is not. With keep
 * (repair), a manifest that lacks chunks only goes into b all the same,
 * with the byte ranges it lost in *lost ('d', format.h): one bad chunk
 * costs that chunk, not the snapshot. */
static int manifest_check(struct cas_store *s, const struct rec_ctx *c, const struct item *x, bool keep,
			  bool chunks, struct cas_index_batch *b, uint64_t *missing, struct cas_lost **lost,
			  size_t *nlost, char *what, size_t cap)
{
	uint8_t sum[32];
	struct cas_manifest *m = NULL;
	*missing = 0;
	*lost = NULL;
	*nlost = 0;
	what[0] = 0;
	int rc = sha256_once(x->p, x->len, sum);
	if (rc < 0)
		return rc;
	if (memcmp(sum, x->sha, 32) || cas_manifest_decode(x->p, x->len, false, &m) < 0) {
		*missing = 1;
		say(what, cap, "its manifest does not check out");
		return 0;
	}
	/* Each piece, and a delta's base, from the logs or the index; what
	 * came from the logs goes into the index with the manifest. */
	for (size_t i = 0; rc == 0 && i < m->npieces; i++) {
		bool logged;
		int ok = piece_try(s, c, m, i, false, b, &logged);
		if (ok == 0 && logged)
			ok = piece_try(s, c, m, i, true, b, &logged);
		if (ok < 0)
			rc = ok;
		else if (!ok)
			(*missing)++;
	}
	if (*missing)
		say(what, cap, "%llu extent-list piece%s", (unsigned long long)*missing, *missing == 1 ? "" : "s");
	unsigned named = 0, unnamed = 0;
	uint64_t lost_bytes = 0;
	char names[512] = "";
	const bool pieces_ok = !*missing;
	for (size_t i = 0; rc == 0 && chunks && pieces_ok && i < m->nstreams; i++) {
		const struct cas_stream *st = &m->streams[i];
		uint64_t n = 0, off = 0;
		for (uint64_t j = 0; rc == 0 && j < st->nextents; off += st->ext[j++].len) {
			if (st->ext[j].hole)
				continue;
			struct cas_loc loc;
			const int lr = cas_chunk_lookup(s, st->ext[j].sha, &loc);
			if (lr == -ENOENT || (lr == 0 && cas_pack_lost(s, loc.pack))) {
				n++;
				lost_bytes += st->ext[j].len;
				if (keep && lost_push(lost, nlost, (uint32_t)i, off, st->ext[j].len) < 0)
					rc = crest_errf(-ENOMEM, "recovering %s", s->dir);
			} else if (lr < 0) {
				rc = lr;
			}
		}
		if (n && named < 4)
			say(names, sizeof(names), "%s%s", named++ ? ", " : "", st->name);
		else if (n)
			unnamed++;
		*missing += n;
	}
	if (rc == 0 && lost_bytes) {
		say(what, cap, "%llu chunk%s (%llu bytes) of %s", (unsigned long long)*missing,
		    *missing == 1 ? "" : "s", (unsigned long long)lost_bytes, names);
		if (unnamed)
			say(what, cap, " and %u more stream%s", unnamed, unnamed == 1 ? "" : "s");
	}
	if (rc == 0 && !pieces_ok) {
		free(*lost);
		*lost = NULL;
		*nlost = 0;
	}
	if (rc == 0 && (!*missing || *nlost)) {
		char k[33];
		k[0] = 'm';
		memcpy(k + 1, x->sha, 32);
		cas_index_batch_put(b, k, 33, x->p, x->len);
		/* The summary is the manifest's head: encode what was decoded
		 * and cut it, as cas_commit does. */
		struct cas_encoded enc;
		rc = cas_manifest_encode(m, m, &enc);
		if (rc == 0) {
			k[0] = 'i';
			cas_index_batch_put(b, k, 33, enc.buf, enc.head_len);
			cas_encoded_free(&enc);
		}
		if (rc == 0 && *nlost && lost_put(b, x->sha, *lost, *nlost) < 0)
			rc = crest_errf(-ENOMEM, "recovering %s", s->dir);
	}
	cas_manifest_free(m);
	return rc;
}

static int lost_add(struct cas_store *s, uint32_t pack)
{
	uint32_t *nv = realloc(s->lost, (s->nlost + 1) * sizeof(*nv));
	if (!nv)
		return -ENOMEM;
	s->lost = nv;
	size_t i = s->nlost++;
	while (i > 0 && s->lost[i - 1] > pack) {
		s->lost[i] = s->lost[i - 1];
		i--;
	}
	s->lost[i] = pack;
	return 0;
}

bool cas_pack_lost(const struct cas_store *s, uint32_t pack)
{
	size_t lo = 0, hi = s->nlost;
	while (lo < hi) {
		const size_t mid = (lo + hi) / 2;
		if (s->lost[mid] < pack)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < s->nlost && s->lost[lo] == pack;
}

/* Packs the index records that are gone or shorter than recorded. A
 * catch-up finds none, or is refused (-ESTALE). */
static int packs_check(struct cas_store *s, const struct cas_pack_end *p, size_t np, bool catch_up)
{
	unsigned n = 0;
	char first[4096] = "";
	for (size_t i = 0; i < np; i++) {
		char path[4096];
		uint64_t size;
		if (cas_obj_stat(s->objs, CAS_OBJ_PACK, p[i].pack, &size) == 0 && size >= p[i].end)
			continue;
		cas_pack_name(s, p[i].pack, path, sizeof(path));
		if (catch_up)
			return crest_errx(-ESTALE, "pack %s is gone or shorter than this node's index records", path);
		if (lost_add(s, p[i].pack) < 0)
			return crest_errf(-ENOMEM, "checking the packs of %s", s->dir);
		if (!n++)
			snprintf(first, sizeof(first), "%s", path);
	}
	if (n)
		fprintf(stderr, "crest: %u pack%s of %s %s missing or cut short (%s%s): snapshots that need %s "
			"are damaged (casctl verify lists them; casctl repair rebuilds the index without %s); new snapshots "
			"store those chunks again\n", n,
			n == 1 ? "" : "s", s->dir, n == 1 ? "is" : "are", first, n > 1 ? ", ..." : "",
			n == 1 ? "it" : "them", n == 1 ? "it" : "them");
	return 0;
}

/* Cuts what no committed snapshot can name: packs past the last one the
 * index records, and bytes past each recorded pack's end. A writer with
 * several lanes leaves an uncommitted tail in each lane's last pack, so
 * such tails may lie in packs below the last one recorded (store.c's
 * notes say why no pack below it can lack an end). Whatever it could not
 * cut sets s->uncut: the writer then does not seal a shared store's head. */
static void packs_reclaim(struct cas_store *s, const struct cas_pack_end *p, size_t np)
{
	uint32_t max, last = 0;
	for (size_t i = 0; i < np; i++)
		if (p[i].pack > last)
			last = p[i].pack;
	if (cas_pack_max_on_disk(s, &max) < 0) {
		s->uncut = true;
		return;
	}
	/* A pack gc retired ('r') may still be read by a reader that opened
	 * before gc rewrote it: gc alone unlinks it, once no reader is open. */
	struct cas_pack_end *r = NULL;
	size_t nr = 0;
	if (cas_ends_load(s, 'r', &r, &nr) < 0) {
		s->uncut = true;
		return;
	}
	for (uint32_t pack = last + 1; pack <= max; pack++) {
		bool retired = false;
		for (size_t i = 0; i < nr && !retired; i++)
			retired = r[i].pack == pack;
		if (retired)
			continue;
		const int rm = cas_obj_remove(s->objs, CAS_OBJ_PACK, pack);
		s->uncut |= rm < 0 && rm != -ENOENT;   /* left: this writer must not seal (cache.c) */
	}
	free(r);
	for (size_t i = 0; i < np; i++) {
		uint64_t size;
		struct cas_obj *f;
		if (cas_obj_stat(s->objs, CAS_OBJ_PACK, p[i].pack, &size) < 0 || size <= p[i].end)
			continue;
		const int rc = cas_obj_open(s->objs, CAS_OBJ_PACK, p[i].pack, true, &f);
		s->uncut |= rc < 0 || cas_obj_truncate(f, p[i].end) < 0;
		if (rc == 0)
			cas_obj_close(f);
	}
}

/* How recover runs: a writer's open (the tails put right, what no commit
 * names cut), a full rebuild (repair, a cache rebuilt), or a cache's
 * catch-up (the tails indexed, nothing cut or said). */
enum how { OPEN, FULL, CATCH_UP };

static int recover(struct cas_store *s, enum how how, uint32_t *floor)
{
	const bool full = how == FULL, catch_up = how == CATCH_UP;
	struct cas_pack_end *p = NULL, *q = NULL, *qn = NULL;
	size_t np = 0, nq = 0, nqn = 0;
	struct rec_ctx c = { .s = s, .chunks = catch_up };
	int rc = 0;
	struct cas_index_batch *b = cas_batch_new(s, &rc);
	if (!b)
		return rc;
	if (!full) {
		rc = cas_ends_load(s, 'p', &p, &np);
		if (rc == 0)
			rc = cas_ends_load(s, 'q', &q, &nq);
		if (rc == 0)
			rc = packs_check(s, p, np, catch_up);
	}
	if (rc == 0)
		rc = meta_tails(s, q, nq, full, &c, &qn, &nqn);
	if (rc == 0)
		rc = items_index(&c);
	uint32_t maxp = 0;
	for (size_t i = 0; i < np; i++)
		if (p[i].pack > maxp)
			maxp = p[i].pack;
	/* Revokes first: a revoked commit is never recovered. */
	unsigned undone = 0, recovered = 0, dropped = 0, damaged = 0;
	uint8_t (*ids)[32] = NULL;   /* the snapshots recovered */
	for (size_t i = 0; rc == 0 && i < c.n; i++)
		if (c.v[i].kind == CAS_META_REVOKE)
			rc = apply_revoke(s, &c.v[i], b, &undone);
		else if (c.v[i].kind == CAS_META_DELETE)
			rc = apply_delete(s, &c.v[i], b, &undone);
	/* A catch-up indexes every record past its ends, named or not: all of
	 * it is committed at a sealed head, and its ends then reach the
	 * packs' sizes, which no later cut goes below (cache.c). */
	bool want = catch_up;
	for (size_t i = 0; rc == 0 && i < c.n; i++) {
		size_t vl;
		if (c.v[i].kind != CAS_META_MANIFEST || revoked(&c, c.v[i].sha))
			continue;
		char *v = db_value(s, 'm', c.v[i].sha, 32, &vl, &rc);
		want |= rc == 0 && !v;
		free(v);
	}
	uint64_t records = 0, listed = 0;
	/* A catch-up's ends past the logged entries: set when every commit
	 * it recovers logged them. */
	struct cas_pack_end *pl = NULL;
	size_t npl = 0;
	if (rc == 0 && catch_up)
		rc = chunks_apply(s, &c, p, np, b, &pl, &npl, &listed);
	if (rc == 0 && want)
		rc = packs_index(s, pl ? pl : p, pl ? npl : np, maxp, full, b, &records);
	for (size_t i = 0; rc == 0 && want && i < c.n; i++) {
		const struct item *x = &c.v[i];
		size_t vl;
		if (x->kind != CAS_META_MANIFEST || revoked(&c, x->sha))
			continue;
		char *v = db_value(s, 'm', x->sha, 32, &vl, &rc);
		free(v);
		if (rc < 0 || v)
			continue;
		uint64_t missing;
		char what[1024];
		struct cas_lost *lost = NULL;
		size_t nlost = 0;
		/* A catch-up whose chunk entries all came from the logs does
		 * not look up each chunk a snapshot names: that costs what the
		 * snapshot holds, not what changed (0.5 s of a 1.3 s catch-up,
		 * 576 MiB named, 64 MiB new), and a sealed head's commits
		 * name only chunks committed before them. */
		rc = manifest_check(s, &c, x, full, !pl, b, &missing, &lost, &nlost, what, sizeof(what));
		free(lost);
		char hex[65];
		hex_encode(x->sha, 32, hex);
		char tags[512] = "";
		for (size_t j = 0; rc == 0 && missing && j < c.n; j++)
			if (c.v[j].kind == CAS_META_TAG && !memcmp(c.v[j].sha, x->sha, 32))
				say(tags, sizeof(tags), "%s%.*s", tags[0] ? ", " : " (tagged ", (int)c.v[j].len,
				    (const char *)c.v[j].p);
		if (tags[0])
			say(tags, sizeof(tags), ")");
		if (rc == 0 && missing && catch_up) {
			rc = crest_errx(-ESTALE, "snapshot %.12s, committed past this node's index, lacks %s", hex, what);
		} else if (rc == 0 && missing && !nlost) {
			dropped++;
			fprintf(stderr, "crest: snapshot %.12s%s cannot be recovered: it lacks %s\n", hex, tags, what);
		} else if (rc == 0) {
			if (nlost) {
				damaged++;
				fprintf(stderr, "crest: snapshot %.12s%s is damaged: it lacks %s; kept, marked damaged "
					"(crest get --allow-damaged restores the rest)\n", hex, tags, what);
			}
			uint8_t (*nv)[32] = realloc(ids, (recovered + 1) * 32);
			if (!nv) {
				rc = crest_errf(-ENOMEM, "recovering %s", s->dir);
				break;
			}
			ids = nv;
			memcpy(ids[recovered++], x->sha, 32);
			if (how == OPEN && !nlost)
				fprintf(stderr, "crest: recovered snapshot %.12s into the index of %s: its "
					"commit reached the meta log but not the index\n", hex, s->dir);
		}
	}
	/* Tags, in log order, for the snapshots now in the index. */
	for (size_t i = 0; rc == 0 && i < c.n; i++) {
		const struct item *x = &c.v[i];
		if (x->kind != CAS_META_TAG || x->len == 0 || x->len > 128 || revoked(&c, x->sha))
			continue;
		size_t vl;
		char *v = db_value(s, 'm', x->sha, 32, &vl, &rc);
		bool now = false;   /* recovered by this batch */
		for (unsigned j = 0; !v && j < recovered; j++)
			now |= !memcmp(ids[j], x->sha, 32);
		if (v || now) {
			char k[1 + 128];
			k[0] = 't';
			memcpy(k + 1, x->p, x->len);
			cas_index_batch_put(b, k, x->len + 1, x->sha, 32);
		}
		free(v);
	}
	free(pl);
	for (size_t i = 0; i < nqn; i++)
		cas_batch_end(b, 'q', qn[i].pack, qn[i].end);
	if (rc == 0 && cas_index_batch_count(b))
		rc = cas_index_batch_commit(b, "reconciling the index with the packs");
	cas_index_batch_free(b);
	if (rc == 0 && how != FULL) {
		free(p);
		p = NULL;
		rc = cas_ends_load(s, 'p', &p, &np);
		/* With no end recorded, only a store with no chunk entry at all
		 * (new, or every commit failed) can lose its packs: a format 1
		 * store records none and keeps them. */
		if (rc == 0 && how == OPEN && (np || !cas_db_any(s, 'c')))
			packs_reclaim(s, p, np);
	}
	*floor = 1;
	for (size_t i = 0; i < np; i++)
		if (p[i].pack >= *floor)
			*floor = p[i].pack + 1;
	s->rec = (struct cas_recovery){ .records = records, .listed = listed, .recovered = recovered - damaged, .dropped = dropped,
				       .damaged = damaged, .revoked = undone };
	free(p);
	free(q);
	free(qn);
	free(ids);
	items_free(&c);
	return rc;
}

int cas_recover(struct cas_store *s, bool full, uint32_t *floor)
{
	return recover(s, full ? FULL : OPEN, floor);
}

int cas_recover_catch_up(struct cas_store *s)
{
	uint32_t floor;
	return recover(s, CATCH_UP, &floor);
}

/* The commits past the committed ends of this reader's index view: the
 * ids revoked or deleted there (hidden) and the manifests the view lacks
 * (*cand, with where they are). */
static int tails_load(struct cas_store *s, struct cas_unindexed **cand, size_t *ncand)
{
	struct cas_pack_end *q = NULL, *qn = NULL;
	size_t nq = 0, nqn = 0;
	struct rec_ctx c = { .s = s };
	*cand = NULL;
	*ncand = 0;
	free(s->hidden);
	s->hidden = NULL;
	s->nhidden = 0;
	int rc = cas_ends_load(s, 'q', &q, &nq);
	if (rc == 0)
		rc = meta_tails(s, q, nq, false, &c, &qn, &nqn);
	if (rc == 0)
		rc = items_index(&c);
	for (size_t i = 0; rc == 0 && i < c.n; i++) {
		if (c.v[i].kind == CAS_META_MANIFEST && !revoked(&c, c.v[i].sha)) {
			size_t vl;
			char *v = db_value(s, 'm', c.v[i].sha, 32, &vl, &rc);
			free(v);
			if (rc == 0 && !v) {
				struct cas_unindexed *nc = realloc(*cand, (*ncand + 1) * sizeof(*nc));
				if (!nc) {
					rc = crest_errf(-ENOMEM, "opening %s", s->dir);
					break;
				}
				*cand = nc;
				nc[*ncand] = (struct cas_unindexed){ .log = c.v[i].log, .off = c.v[i].off };
				memcpy(nc[(*ncand)++].id, c.v[i].sha, 32);
			}
		}
		if (c.v[i].kind != CAS_META_REVOKE && c.v[i].kind != CAS_META_DELETE)
			continue;
		uint8_t (*nv)[32] = realloc(s->hidden, (s->nhidden + 1) * 32);
		if (!nv) {
			rc = crest_errf(-ENOMEM, "opening %s", s->dir);
			break;
		}
		s->hidden = nv;
		memcpy(s->hidden[s->nhidden++], c.v[i].sha, 32);
	}
	free(q);
	free(qn);
	items_free(&c);
	return rc;
}

static bool cand_has(const struct cas_unindexed *v, size_t n, const uint8_t id[32])
{
	for (size_t i = 0; i < n; i++)
		if (!memcmp(v[i].id, id, 32))
			return true;
	return false;
}

/* A reader's open: which commits are lost, as opposed to in progress.
 *
 * A manifest past its log's committed end that the index view lacks is
 * one of: (a) a commit in progress, its writer between syncing the meta
 * log and writing the index batch; (b) a commit made after this view was
 * taken; (c) a commit lost: its writer was killed between the two, or the
 * index lost the batch (a WAL in STORE/index/ cut short or deleted). Only
 * (c) is damage, and a reader that says so beside a busy writer is wrong
 * (issue 32 item 5: 16 of 603 verifies beside a writer failed).
 *
 * The rule: a candidate found at time t1 is lost only if no writer held
 * the lock at t2 > t1 (cas_writer_live) and a view of the index taken
 * after t2 still lacks it. With no writer at t2, every commit whose
 * records were in the log at t1 had either reached the index by t2 or
 * never will by that writer; a later writer can only add it (recover.c),
 * a later gc only delete it, and a delete record then hides it. So the
 * verdict "lost" is never wrong about the store as it was at t2. A
 * candidate that shows up only in the second walk (its records written
 * after t1) is given the benefit of the doubt: it is counted as in
 * progress, and the next reader judges it. The view a reader keeps is the
 * second one, when it took one: it sees the store as of a commit. */
int cas_hidden_load(struct cas_store *s)
{
	struct cas_unindexed *c1 = NULL, *c2 = NULL;
	size_t n1 = 0, n2 = 0;
	int rc = tails_load(s, &c1, &n1);
	s->rec.unindexed = 0;
	s->rec.in_progress = 0;
	if (rc == 0 && n1 && cas_writer_live(s)) {
		s->rec.in_progress = (unsigned)n1;
	} else if (rc == 0 && n1) {
		rc = cas_db_reopen(s);
		if (rc == 0)
			rc = tails_load(s, &c2, &n2);
		for (size_t i = 0; rc == 0 && i < n2; i++) {
			if (!cand_has(c1, n1, c2[i].id)) {
				s->rec.in_progress++;
				continue;
			}
			s->unidx = c2;   /* compacted in place: i only moves forward */
			c2[s->nunidx++] = c2[i];
		}
		if (s->unidx == c2)
			c2 = NULL;
		s->rec.unindexed = (unsigned)s->nunidx;
	}
	free(c1);
	free(c2);
	return rc;
}

bool cas_hidden(const struct cas_store *s, const uint8_t id[32])
{
	for (size_t i = 0; i < s->nhidden; i++)
		if (!memcmp(s->hidden[i], id, 32))
			return true;
	return false;
}

void cas_recovery_get(const struct cas_store *s, struct cas_recovery *r)
{
	*r = s->rec;
}

struct upgrade_ctx {
	struct cas_store *s;
	struct cas_meta_buf *mb;
	char type;
	uint8_t kind;
};

/* One 'l', 'm' or 't' entry of a format 1 index into the meta log. */
static int upgrade_cb(const char *k, size_t kl, const char *v, size_t vl, void *arg)
{
	const struct upgrade_ctx *u = arg;
	if (u->type == 't') {   /* name -> id */
		if (vl == 32 && kl > 1 && kl - 1 <= 128)
			cas_meta_rec(u->mb, u->kind, (const uint8_t *)v, k + 1, kl - 1);
	} else if (kl == 33) {
		cas_meta_rec(u->mb, u->kind, (const uint8_t *)k + 1, v, vl);
	}
	if (u->mb->len >= (64u << 20)) {
		const int rc = cas_meta_append(u->s, u->mb);
		u->mb->len = 0;
		return rc;
	}
	return 0;
}

/* Format 1 to 2. A format 1 store's snapshots live in its index alone; the
 * first writer of format 2 copies every manifest, piece and tag into a meta
 * log, and records every pack's end, before FORMAT says 2: from then on
 * repair can rebuild everything and lost packs are noticed. Run again after
 * a crash midway, it writes the same records again (harmless). */
int cas_upgrade_from_1(struct cas_store *s)
{
	static const char types[] = { 'l', 'm', 't' };
	static const uint8_t kinds[] = { CAS_META_PIECE, CAS_META_MANIFEST, CAS_META_TAG };
	struct cas_meta_buf mb = { 0 };
	int rc = 0;
	for (int t = 0; rc == 0 && t < 3; t++) {
		struct upgrade_ctx u = { s, &mb, types[t], kinds[t] };
		rc = cas_index_scan(s->ix, &types[t], 1, 1, upgrade_cb, &u);
	}
	if (rc == 0 && mb.len)
		rc = cas_meta_append(s, &mb);
	free(mb.p);
	uint32_t max = 0;
	if (rc == 0)
		rc = cas_pack_max_on_disk(s, &max);
	struct cas_index_batch *b = rc == 0 ? cas_batch_new(s, &rc) : NULL;
	for (uint32_t pack = 1; rc == 0 && pack <= max; pack++) {
		uint64_t size;
		if (cas_obj_stat(s->objs, CAS_OBJ_PACK, pack, &size) == 0)
			cas_batch_end(b, 'p', pack, size);
	}
	if (rc == 0 && s->meta)
		cas_batch_end(b, 'q', s->meta_num, s->meta_end);
	if (rc == 0)
		rc = cas_index_batch_commit(b, "upgrading the store to format 2");
	cas_index_batch_free(b);
	return rc < 0 ? crest_errctx(rc, "upgrading store %s from format 1", s->dir) : 0;
}
