/*
 * gc.c - retention, mark and sweep, pack rewrite; see gc.h for the order
 * of the steps and what a kill at each leaves.
 */
#include "cas/gc.h"

#include "cas/cas_int.h"
#include "cas/history.h"
#include "util/crc32c.h"
#include "util/err.h"
#include "util/sha256.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HOUR_NS (3600ull * 1000000000ull)
#define DAY_NS (24 * HOUR_NS)
#define BATCH_OPS 100000              /* deletions per index batch */
#define GROUP_BYTES (512ull << 20)    /* bytes moved per rewrite commit */
#define WBUF_BYTES (8u << 20)         /* records written per cas_pack_write */

int cas_gc_policy_check(const struct cas_gc_policy *p)
{
	if (!p->keep_last && !p->keep_hourly && !p->keep_daily && !p->keep_within_ns && !p->keep_tagged)
		return crest_errx(-EINVAL, "gc needs a rule for what to keep (--keep-last, --keep-hourly, "
				  "--keep-daily, --keep-within or --keep-tagged): without one it would delete "
				  "every snapshot but the branches' heads");
	if (p->rewrite_below < 0 || p->rewrite_below > 1)
		return crest_errx(-EINVAL, "gc: the rewrite threshold %.3f is not a fraction from 0 to 1",
				  p->rewrite_below);
	return 0;
}

void cas_gc_result_free(struct cas_gc_result *r)
{
	free(r->kept);
	free(r->expired);
	r->kept = r->expired = NULL;
}

/* ---- sets of SHA-256 ids: sorted arrays ---- */

struct idset {
	uint8_t (*v)[32];
	size_t n, cap;
};

static int idset_add(struct idset *s, const uint8_t id[32])
{
	if (s->n == s->cap) {
		const size_t cap = s->cap ? 2 * s->cap : 1024;
		uint8_t (*nv)[32] = realloc(s->v, cap * 32);
		if (!nv)
			return -ENOMEM;
		s->v = nv;
		s->cap = cap;
	}
	memcpy(s->v[s->n++], id, 32);
	return 0;
}

static int id_cmp(const void *a, const void *b)
{
	return memcmp(a, b, 32);
}

/* Sorts and drops duplicates. */
static void idset_seal(struct idset *s)
{
	if (s->n < 2)
		return;
	qsort(s->v, s->n, 32, id_cmp);
	size_t k = 1;
	for (size_t i = 1; i < s->n; i++)
		if (memcmp(s->v[i], s->v[k - 1], 32))
			memcpy(s->v[k++], s->v[i], 32);
	s->n = k;
}

static bool idset_has(const struct idset *s, const uint8_t id[32])
{
	return s->n && bsearch(id, s->v, s->n, 32, id_cmp) != NULL;
}

/* ---- retention ---- */

struct snap {
	const uint8_t *id;
	uint64_t t, bytes;
	const char *branch;
	bool tagged, keep;
};

static int snap_cmp(const void *a, const void *b)
{
	const struct snap *x = a, *y = b;
	const int c = strcmp(x->branch, y->branch);
	if (c)
		return c;
	if (x->t != y->t)
		return x->t > y->t ? -1 : 1;   /* newest first */
	return memcmp(y->id, x->id, 32);
}

/* One branch's snapshots, newest first: marks the kept ones. */
static void keep_branch(struct snap *v, size_t n, const struct cas_gc_policy *p)
{
	uint64_t hb = UINT64_MAX, db = UINT64_MAX;
	unsigned nh = 0, nd = 0;
	for (size_t i = 0; i < n; i++) {
		bool k = i == 0 || i < p->keep_last;   /* the head, always */
		const uint64_t h = v[i].t / HOUR_NS, d = v[i].t / DAY_NS;
		if (nh < p->keep_hourly && h != hb) {
			k = true;
			hb = h;
			nh++;
		}
		if (nd < p->keep_daily && d != db) {
			k = true;
			db = d;
			nd++;
		}
		if (p->keep_within_ns && v[i].t + p->keep_within_ns >= v[0].t)
			k = true;
		if (p->keep_tagged && v[i].tagged)
			k = true;
		v[i].keep = k;
	}
}

/* ---- the mark ---- */

static int mark_manifest(struct cas_store *s, const uint8_t id[32], struct idset *chunks, struct idset *pieces)
{
	struct cas_manifest *m;
	int rc = cas_manifest_load(s, id, &m);
	if (rc < 0)
		return rc;
	for (size_t i = 0; rc == 0 && i < m->nstreams; i++) {
		const struct cas_stream *st = &m->streams[i];
		for (uint64_t e = 0; rc == 0 && e < st->nextents; e++)
			if (!st->ext[e].hole)
				rc = idset_add(chunks, st->ext[e].sha);
	}
	for (size_t i = 0; rc == 0 && i < m->npieces; i++)
		rc = idset_add(pieces, m->pieces[i].sha);
	cas_manifest_free(m);
	return rc < 0 ? crest_errf(rc, "marking the chunks of a kept snapshot") : 0;
}

/* Live and dead bytes of each pack (record headers included). */
struct packstat {
	uint64_t live, dead;
};

struct scan {
	struct cas_store *s;
	const struct idset *live;
	struct idset dead;
	struct packstat *ps;
	uint32_t nps;
	struct cas_gc_result *r;
	int err;
};

static int chunk_cb(const char *k, size_t kl, const char *v, size_t vl, void *arg)
{
	struct scan *c = arg;
	struct cas_loc loc;
	if (kl != 32 || cas_loc_decode((const uint8_t *)v, vl, &loc) < 0)
		return 0;   /* damage: verify's to report, not gc's to act on */
	const uint8_t *sha = (const uint8_t *)k;
	const uint64_t rec = CAS_REC_HEADER + (uint64_t)loc.stored;
	if (loc.pack >= c->nps) {
		const uint32_t n = loc.pack + 1024;
		struct packstat *np = realloc(c->ps, n * sizeof(*np));
		if (!np) {
			c->err = -ENOMEM;
			return 1;
		}
		memset(np + c->nps, 0, (n - c->nps) * sizeof(*np));
		c->ps = np;
		c->nps = n;
	}
	c->r->chunks++;
	if (idset_has(c->live, sha)) {
		c->ps[loc.pack].live += rec;
		return 0;
	}
	c->ps[loc.pack].dead += rec;
	c->r->dead_chunks++;
	c->r->dead_bytes += rec;
	if (idset_add(&c->dead, sha) < 0) {
		c->err = -ENOMEM;
		return 1;
	}
	return 0;
}

struct piece_scan {
	const struct idset *live;
	struct idset dead;
	struct cas_gc_result *r;
	int err;
};

static int piece_cb(const char *k, size_t kl, const char *v, size_t vl, void *arg)
{
	(void)v;
	(void)vl;
	struct piece_scan *c = arg;
	if (kl != 32)
		return 0;
	c->r->pieces++;
	if (idset_has(c->live, (const uint8_t *)k))
		return 0;
	c->r->dead_pieces++;
	if (idset_add(&c->dead, (const uint8_t *)k) < 0) {
		c->err = -ENOMEM;
		return 1;
	}
	return 0;
}

/* ---- the sweep ---- */

static void key_num(char k[5], char type, uint32_t num)
{
	k[0] = type;
	for (int i = 0; i < 4; i++)
		k[1 + i] = (char)(num >> (8 * (3 - i)));
}

struct tag_scan {
	const struct idset *expired;
	rocksdb_writebatch_t *b;
};

static int tag_cb(const char *k, size_t kl, const char *v, size_t vl, void *arg)
{
	const struct tag_scan *c = arg;
	if (vl == 32 && kl <= 128 && idset_has(c->expired, (const uint8_t *)v)) {
		char key[129];
		key[0] = 't';
		memcpy(key + 1, k, kl);
		rocksdb_writebatch_delete(c->b, key, kl + 1);
	}
	return 0;
}

/* Steps 1 and 2: the delete records, then the manifests out of the index. */
static int forget(struct cas_store *s, const struct idset *expired)
{
	struct cas_meta_buf mb = { 0 };
	for (size_t i = 0; i < expired->n; i++)
		cas_meta_rec(&mb, CAS_META_DELETE, expired->v[i], NULL, 0);
	int rc = cas_meta_append(s, &mb);
	free(mb.p);
	if (rc < 0)
		return rc;
	rocksdb_writebatch_t *b = rocksdb_writebatch_create();
	char k[33];
	for (size_t i = 0; i < expired->n; i++) {
		memcpy(k + 1, expired->v[i], 32);
		k[0] = 'm';
		rocksdb_writebatch_delete(b, k, 33);
		k[0] = 'i';
		rocksdb_writebatch_delete(b, k, 33);
	}
	struct tag_scan ts = { expired, b };
	rc = cas_db_scan(s, 't', tag_cb, &ts);
	cas_batch_end(b, 'q', s->meta_num, s->meta_end);
	if (rc == 0)
		rc = cas_batch_write(s, b, "deleting expired snapshots");
	rocksdb_writebatch_destroy(b);
	return rc;
}

/* Step 3: index entries of type whose keys are in dead, in bounded batches. */
static int sweep(struct cas_store *s, char type, const struct idset *dead)
{
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < dead->n;) {
		rocksdb_writebatch_t *b = rocksdb_writebatch_create();
		char k[33];
		k[0] = type;
		for (size_t n = 0; i < dead->n && n < BATCH_OPS; i++, n++) {
			memcpy(k + 1, dead->v[i], 32);
			rocksdb_writebatch_delete(b, k, 33);
		}
		rc = cas_batch_write(s, b, type == 'c' ? "deleting dead chunks" : "deleting dead pieces");
		rocksdb_writebatch_destroy(b);
	}
	return rc;
}

/* ---- pack rewrite (step 4) ---- */

struct moved {
	struct cas_index_entry *v;   /* sha, then the OLD location until copied */
	size_t n, cap;
};

struct collect {
	const bool *rewrite;
	uint32_t nps;
	struct moved *m;
	int err;
};

static int collect_cb(const char *k, size_t kl, const char *v, size_t vl, void *arg)
{
	struct collect *c = arg;
	struct cas_loc loc;
	if (kl != 32 || cas_loc_decode((const uint8_t *)v, vl, &loc) < 0)
		return 0;
	if (loc.pack >= c->nps || !c->rewrite[loc.pack])
		return 0;
	struct moved *m = c->m;
	if (m->n == m->cap) {
		const size_t cap = m->cap ? 2 * m->cap : 4096;
		struct cas_index_entry *nv = realloc(m->v, cap * sizeof(*nv));
		if (!nv) {
			c->err = -ENOMEM;
			return 1;
		}
		m->v = nv;
		m->cap = cap;
	}
	memcpy(m->v[m->n].sha, k, 32);
	m->v[m->n].loc = loc;
	m->n++;
	return 0;
}

static int loc_cmp(const void *a, const void *b)
{
	const struct cas_loc *x = &((const struct cas_index_entry *)a)->loc;
	const struct cas_loc *y = &((const struct cas_index_entry *)b)->loc;
	if (x->pack != y->pack)
		return x->pack < y->pack ? -1 : 1;
	return x->off < y->off ? -1 : x->off > y->off;
}

/* The record at e->loc in fd, whole and checked (magic, sizes, the id,
 * the CRC32C of its stored bytes), into buf. */
static int record_read(int fd, const struct cas_index_entry *e, uint8_t *buf)
{
	if (e->loc.stored > CAS_CHUNK_MAX + CAS_CHUNK_MAX / 64 + 64)   /* LZ4's worst case, with room */
		return -EBADMSG;
	const size_t len = CAS_REC_HEADER + (size_t)e->loc.stored;
	if (pread(fd, buf, len, (off_t)e->loc.off) != (ssize_t)len)
		return -EIO;
	if (memcmp(buf, CAS_REC_MAGIC, 4) || buf[CAS_REC_CODEC] != e->loc.codec ||
	    cas_le32_get(buf + CAS_REC_RAW) != e->loc.raw || cas_le32_get(buf + CAS_REC_STORED) != e->loc.stored ||
	    memcmp(buf + CAS_REC_SHA, e->sha, 32) ||
	    crc32c(buf + CAS_REC_HEADER, e->loc.stored) != cas_le32_get(buf + CAS_REC_CRC))
		return -EBADMSG;
	return 0;
}

struct writer {
	uint8_t *buf;
	size_t len;
	struct cas_write w;
};

static int writer_flush(struct cas_store *s, struct writer *w)
{
	if (!w->len)
		return 0;
	w->w.data = w->buf;
	w->w.len = w->len;
	const int rc = cas_pack_write(s, &w->w, 1);
	w->len = 0;
	return rc;
}

/* Commits one group: the copies point the index at the new records, the
 * new packs' ends recorded and the old packs retired, in one batch. */
static int group_commit(struct cas_store *s, struct cas_index_entry *e, size_t n, const uint32_t *old, size_t nold)
{
	int rc = cas_pack_sync(s);
	struct cas_pack_end *ends = NULL;
	size_t nends = 0;
	if (rc == 0 && n)
		rc = cas_ends_merge(s, e, n, &ends, &nends);
	if (rc < 0)
		return rc;
	rocksdb_writebatch_t *b = rocksdb_writebatch_create();
	for (size_t i = 0; i < n; i++)
		cas_batch_entry(b, e[i].sha, &e[i].loc);
	for (size_t i = 0; i < nends; i++)
		cas_batch_end(b, 'p', ends[i].pack, ends[i].end);
	for (size_t i = 0; i < nold; i++) {
		char k[5];
		key_num(k, 'p', old[i]);
		rocksdb_writebatch_delete(b, k, 5);
		cas_batch_end(b, 'r', old[i], 0);
	}
	rc = cas_batch_write(s, b, "pointing the index at rewritten packs");
	rocksdb_writebatch_destroy(b);
	if (rc < 0) {
		free(ends);
		return rc;
	}
	if (n) {
		free(s->ends);
		s->ends = ends;
		s->nends = nends;
		cas_pack_mark(s, e, n);
	}
	return 0;
}

static int rewrite(struct cas_store *s, bool *want, uint32_t nps, struct cas_gc_result *r, struct progress *prog)
{
	struct moved m = { 0 };
	struct collect cc = { .rewrite = want, .nps = nps, .m = &m };
	int rc = cas_db_scan(s, 'c', collect_cb, &cc);
	if (rc == 0 && cc.err)
		rc = crest_errf(cc.err, "listing the live chunks of the packs to rewrite");
	if (rc == 0 && m.n)
		qsort(m.v, m.n, sizeof(*m.v), loc_cmp);
	struct writer w = { .buf = malloc(WBUF_BYTES) };
	uint8_t *rec = malloc(CAS_REC_HEADER + CAS_CHUNK_MAX + CAS_CHUNK_MAX / 64 + 64);
	uint32_t *old = calloc(nps ? nps : 1, sizeof(*old));
	if (rc == 0 && (!w.buf || !rec || !old))
		rc = crest_errf(-ENOMEM, "rewriting packs");
	/* Pack by pack: a pack's chunks are all copied, or none are pointed at
	 * their copies. A group commits once GROUP_BYTES have moved. */
	size_t i = 0, gfirst = 0, nold = 0;
	uint64_t gbytes = 0;
	for (uint32_t p = 1; rc == 0 && p < nps; p++) {
		if (!want[p])
			continue;
		/* m holds the live chunks of wanted packs only, in pack order. */
		size_t end = i;
		while (end < m.n && m.v[end].loc.pack == p)
			end++;
		int fd = end > i ? cas_pack_open_read(s, p) : -1;
		bool ok = true;
		if (end > i && fd < 0) {
			fprintf(stderr, "crest: gc: %s; pack %u is left as it is\n", crest_errmsg(), p);
			crest_errset_str("");
			ok = false;
		}
		for (size_t j = i; ok && rc == 0 && j < end; j++) {
			struct cas_index_entry *e = &m.v[j];
			const size_t len = CAS_REC_HEADER + (size_t)e->loc.stored;
			if (record_read(fd, e, rec) < 0) {
				char hex[65];
				hex_encode(e->sha, 32, hex);
				fprintf(stderr, "crest: gc: chunk %.12s in pack %u does not check out; the pack is left "
					"as it is (casctl verify names the snapshots that need it)\n", hex, p);
				ok = false;
				break;
			}
			struct cas_loc nl;
			rc = cas_pack_reserve(s, e->loc.stored, e->loc.raw, e->loc.codec, &nl);
			if (rc == 0 && w.len && (nl.pack != w.w.pack || nl.off != w.w.off + w.len || w.len + len > WBUF_BYTES))
				rc = writer_flush(s, &w);
			if (rc < 0)
				break;
			if (!w.len)
				w.w = (struct cas_write){ .pack = nl.pack, .off = nl.off };
			if (len > WBUF_BYTES) {   /* a record larger than the buffer: alone */
				struct cas_write big = { .pack = nl.pack, .off = nl.off, .data = rec, .len = len };
				rc = cas_pack_write(s, &big, 1);
			} else {
				memcpy(w.buf + w.len, rec, len);
				w.len += len;
			}
			e->loc = nl;   /* from here on the entry names the copy */
			gbytes += len;
			r->bytes_moved += len;
			if (prog)
				progress_update(prog, r->bytes_moved);
		}
		if (fd >= 0)
			close(fd);
		if (rc < 0)
			break;
		if (!ok) {
			/* Copies of this pack's chunks made so far stay unnamed: the
			 * index keeps pointing at the originals. */
			memmove(&m.v[i], &m.v[end], (m.n - end) * sizeof(*m.v));
			m.n -= end - i;
			continue;
		}
		old[nold++] = p;
		r->packs_rewritten++;
		i = end;
		if (gbytes >= GROUP_BYTES) {
			rc = writer_flush(s, &w);
			if (rc == 0)
				rc = group_commit(s, m.v + gfirst, i - gfirst, old, nold);
			gfirst = i;
			nold = 0;
			gbytes = 0;
		}
	}
	if (rc == 0)
		rc = writer_flush(s, &w);
	if (rc == 0 && (i > gfirst || nold))
		rc = group_commit(s, m.v + gfirst, i - gfirst, old, nold);
	free(w.buf);
	free(rec);
	free(old);
	free(m.v);
	return rc;
}

/* Step 5: unlinks the retired packs, if no reader holds the store. */
static int retire(struct cas_store *s, struct cas_gc_result *r)
{
	struct cas_pack_end *v = NULL;
	size_t n = 0;
	int rc = cas_ends_load(s, 'r', &v, &n);
	if (rc < 0 || n == 0) {
		free(v);
		return rc;
	}
	const int lfd = cas_readers_none(s);
	if (lfd < 0) {
		r->packs_retired = n;
		free(v);
		return 0;
	}
	rocksdb_writebatch_t *b = rocksdb_writebatch_create();
	for (size_t i = 0; i < n; i++) {
		char path[4096], k[5];
		cas_pack_path(s, v[i].pack, path, sizeof(path));
		if (unlink(path) < 0 && errno != ENOENT) {
			r->packs_retired++;
			continue;
		}
		key_num(k, 'r', v[i].pack);
		rocksdb_writebatch_delete(b, k, 5);
	}
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s/packs", cas_dir(s));
	cas_fsync_path(dir);
	rc = cas_batch_write(s, b, "forgetting unlinked packs");
	rocksdb_writebatch_destroy(b);
	close(lfd);
	free(v);
	return rc;
}

/* The pack files on disk, less this session's own while it is empty. */
static uint64_t packs_bytes(struct cas_store *s)
{
	uint32_t max = 0;
	uint64_t sum = 0;
	if (cas_pack_max_on_disk(s, &max) < 0)
		return 0;
	for (uint32_t p = 1; p <= max; p++) {
		char path[4096];
		struct stat st;
		cas_pack_path(s, p, path, sizeof(path));
		if (stat(path, &st) == 0 && !(p >= s->first_pack && (uint64_t)st.st_size <= CAS_PACK_HEADER))
			sum += (uint64_t)st.st_size;
	}
	return sum;
}

int cas_gc(struct cas_store *s, const struct cas_gc_policy *pol, struct cas_gc_result *r, struct progress *prog)
{
	memset(r, 0, sizeof(*r));
	int rc = cas_gc_policy_check(pol);
	if (rc < 0)
		return rc;
	if (s->mode != CAS_WRITE)
		return crest_errx(-EROFS, "gc needs store %s open for writing", s->dir);
	const double below = pol->rewrite_below > 0 ? pol->rewrite_below : 0.5;
	/* Packs a killed run retired but could not unlink. */
	if (!pol->dry_run && (rc = retire(s, r)) < 0)
		return rc;
	r->bytes_before = packs_bytes(s);
	struct cas_snapinfo *v = NULL;
	size_t n = 0;
	rc = cas_snapshot_list(s, &v, &n);
	if (rc < 0)
		return rc;
	struct snap *sv = calloc(n ? n : 1, sizeof(*sv));
	struct idset live = { 0 }, pieces = { 0 }, expired = { 0 };
	struct scan sc = { .s = s, .live = &live, .r = r };
	struct piece_scan pc = { .live = &pieces, .r = r };
	bool *want = NULL;
	if (!sv)
		rc = crest_errf(-ENOMEM, "gc");
	for (size_t i = 0; rc == 0 && i < n; i++)
		sv[i] = (struct snap){ .id = v[i].id, .t = v[i].head->time_ns, .branch = cas_manifest_branch(v[i].head),
				       .tagged = v[i].ntags > 0, .bytes = v[i].head->logical_bytes };
	if (rc == 0 && n > 1)
		qsort(sv, n, sizeof(*sv), snap_cmp);
	for (size_t i = 0; rc == 0 && i < n;) {
		size_t j = i;
		while (j < n && !strcmp(sv[j].branch, sv[i].branch))
			j++;
		keep_branch(sv + i, j - i, pol);
		i = j;
	}
	r->snapshots = n;
	r->kept = calloc(n ? n : 1, 32);
	r->expired = calloc(n ? n : 1, 32);
	if (rc == 0 && (!r->kept || !r->expired))
		rc = crest_errf(-ENOMEM, "gc");
	/* The mark: every chunk and piece a kept snapshot names. */
	uint64_t total = 0, done = 0;
	for (size_t i = 0; i < n; i++)
		total += v[i].head->logical_bytes;
	if (prog)
		progress_begin(prog, "gc mark", total, false);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		if (sv[i].keep) {
			memcpy(r->kept[r->nkept++], sv[i].id, 32);
			rc = mark_manifest(s, sv[i].id, &live, &pieces);
		} else {
			memcpy(r->expired[r->nexpired++], sv[i].id, 32);
			if (idset_add(&expired, sv[i].id) < 0)
				rc = crest_errf(-ENOMEM, "gc");
		}
		done += sv[i].bytes;
		if (prog)
			progress_update(prog, done);
	}
	if (prog)
		progress_end(prog);
	idset_seal(&live);
	idset_seal(&pieces);
	idset_seal(&expired);
	if (rc == 0)
		rc = cas_db_scan(s, 'c', chunk_cb, &sc);
	if (rc == 0 && sc.err)
		rc = crest_errf(sc.err, "gc: scanning the chunk index");
	if (rc == 0)
		rc = cas_db_scan(s, 'l', piece_cb, &pc);
	if (rc == 0 && pc.err)
		rc = crest_errf(pc.err, "gc: scanning the pieces");
	/* A pack's dead space is all it holds below its committed end that no
	 * live entry covers: the records of chunks dead in this run, and those
	 * an earlier run (or a killed put) left without an index entry, which
	 * no chunk scan can see. */
	struct cas_pack_end *ends = NULL;
	size_t nends = 0;
	if (rc == 0)
		rc = cas_ends_load(s, 'p', &ends, &nends);
	for (size_t i = 0; rc == 0 && i < nends; i++) {
		const uint32_t p = ends[i].pack;
		if (p >= sc.nps) {
			struct packstat *np = realloc(sc.ps, (p + 1) * sizeof(*np));
			if (!np) {
				rc = crest_errf(-ENOMEM, "gc");
				break;
			}
			memset(np + sc.nps, 0, (p + 1 - sc.nps) * sizeof(*np));
			sc.ps = np;
			sc.nps = p + 1;
		}
		const uint64_t held = ends[i].end > CAS_PACK_HEADER ? ends[i].end - CAS_PACK_HEADER : 0;
		sc.ps[p].dead = held > sc.ps[p].live ? held - sc.ps[p].live : 0;
	}
	free(ends);
	r->dead_bytes = 0;
	for (uint32_t p = 1; rc == 0 && p < sc.nps; p++)
		r->dead_bytes += sc.ps[p].dead;
	/* Packs to rewrite: some dead, less live than the threshold, readable. */
	uint64_t freed = 0;
	if (rc == 0 && !(want = calloc(sc.nps ? sc.nps : 1, sizeof(*want))))
		rc = crest_errf(-ENOMEM, "gc");
	for (uint32_t p = 1; rc == 0 && p < sc.nps; p++) {
		const struct packstat *ps = &sc.ps[p];
		if (!ps->dead || cas_pack_lost(s, p))
			continue;
		/* Only packs that are whole on disk: the index's ends are what
		 * the rewrite copies from. */
		want[p] = (double)ps->live < below * (double)(ps->live + ps->dead);
		if (want[p])
			freed += ps->dead;
	}
	for (uint32_t p = 1; rc == 0 && p < sc.nps; p++)
		r->packs += sc.ps[p].live + sc.ps[p].dead > 0;
	if (rc == 0 && pol->dry_run) {
		r->bytes_after = r->bytes_before > freed ? r->bytes_before - freed : 0;
		for (uint32_t p = 1; p < sc.nps; p++)
			r->packs_rewritten += want[p];
	} else if (rc == 0) {
		if (expired.n)
			rc = forget(s, &expired);
		if (rc == 0)
			rc = sweep(s, 'l', &pc.dead);
		if (rc == 0)
			rc = sweep(s, 'c', &sc.dead);
		if (prog && rc == 0)
			progress_begin(prog, "gc rewrite", freed, false);
		if (rc == 0)
			rc = rewrite(s, want, sc.nps, r, prog);
		if (prog && rc == 0)
			progress_end(prog);
		if (rc == 0)
			rc = retire(s, r);
		r->bytes_after = packs_bytes(s);
	}
	free(want);
	free(sc.ps);
	free(sc.dead.v);
	free(pc.dead.v);
	free(live.v);
	free(pieces.v);
	free(expired.v);
	free(sv);
	cas_snapshot_list_free(v, n);
	if (rc < 0)
		cas_gc_result_free(r);
	return rc;
}
