/*
 * copy.c - a snapshot copied between stores (copy.h): chunks the
 * destination lacks, record by record into one lane of its packs, then the
 * manifest and its pieces as encoded, committed as any snapshot is.
 *
 * Order, which is what keeps the destination whole: the records are written
 * and synced (cas_pack_sync) before the commit names them, and a job's
 * members are committed before the job snapshot that names them. A copy
 * killed midway leaves records past the destination's last commit, which
 * its next writer cuts (cas.h), and members committed without their job
 * snapshot: whole snapshots, listed, which a second copy finds present.
 */
#include "cas/copy.h"
#include "cas/cas_int.h"
#include "util/err.h"
#include "util/fault.h"
#include "util/idset.h"
#include "util/par.h"
#include "util/sha256.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define BATCH_IDS 4096          /* ids looked up at once */
#define WRITE_CAP (32u << 20)   /* records gathered before one cas_pack_write */

struct copy {
	struct cas_store *src, *dst;
	void (*progress)(uint64_t, void *);
	void *arg;
	struct cas_copy_stats *st;
	/* Two buffers of WRITE_CAP + one largest record: one fills while
	 * the other is written (struct wjob). */
	uint8_t *buf[2];
	uint8_t *wbuf;              /* the one being filled */
};

/* The distinct chunks of m's extents, sealed (sorted, no duplicates). */
static int chunks_of(const struct cas_manifest *m, struct idset *out)
{
	for (size_t i = 0; i < m->nstreams; i++)
		for (uint64_t j = 0; j < m->streams[i].nextents; j++)
			if (!m->streams[i].ext[j].hole && idset_add(out, m->streams[i].ext[j].sha) < 0)
				return crest_errf(-ENOMEM, "listing a snapshot's chunks");
	idset_seal(out);
	return 0;
}

/* A chunk of a batch: whether dst lacks it, where src has it, and where
 * its record goes. */
struct item {
	const uint8_t *sha;
	bool need;
	struct cas_loc src, dst;
	size_t boff;                /* its record's place in wbuf */
};

struct xfer {
	struct copy *c;
	struct item *it;
	size_t base;                /* read_one: item i is it[base + i] */
};

struct xtls {
	struct sha256_hasher *h;
	uint8_t *raw;               /* an LZ4 chunk unpacked */
	size_t cap;
};

static int xtls_new(struct par *p, void **out)
{
	(void)p;
	struct xtls *t = calloc(1, sizeof(*t));
	if (!t || sha256_hasher_new(&t->h) < 0) {
		free(t);
		return crest_errf(-ENOMEM, "copying chunks");
	}
	*out = t;
	return 0;
}

static void xtls_free(void *v)
{
	struct xtls *t = v;
	sha256_hasher_free(t->h);
	free(t->raw);
	free(t);
}

/* Whether dst lacks item i, and if so where src has it. */
static int look_one(struct par *p, void *tls, size_t i)
{
	(void)tls;
	const struct xfer *x = p->arg;
	struct item *it = &x->it[i];
	char hex[65];
	struct cas_loc loc;
	int rc = cas_chunk_lookup(x->c->dst, it->sha, &loc);
	it->need = rc == -ENOENT;
	if (!it->need)
		return rc;
	rc = cas_chunk_lookup(x->c->src, it->sha, &it->src);
	if (rc == -ENOENT) {
		hex_encode(it->sha, 32, hex);
		return crest_errx(-EBADMSG, "chunk %.16s is missing from %s", hex, cas_dir(x->c->src));
	}
	if (rc == 0 && (it->src.stored > CAS_CHUNK_MAX || it->src.raw > CAS_CHUNK_MAX)) {
		hex_encode(it->sha, 32, hex);
		rc = crest_errx(-EBADMSG, "index entry of chunk %.16s in %s is damaged", hex, cas_dir(x->c->src));
	}
	return rc;
}

/* Item i's record read from src into its place in wbuf, checked. The
 * stored bytes land in the record as read (cas_chunk_read checks them
 * against the header and its CRC32C); the unpacked bytes are checked
 * against the id, which no copy of a damaged pack passes. */
static int read_one(struct par *p, void *tls, size_t i)
{
	const struct xfer *x = p->arg;
	struct xtls *t = tls;
	const struct item *it = &x->it[x->base + i];
	if (!it->need)
		return 0;
	const struct cas_loc *loc = &it->src;
	uint8_t *rec = x->c->wbuf + it->boff;
	const bool raw = loc->codec == CAS_CODEC_RAW;
	if (!raw && t->cap < loc->raw) {
		uint8_t *nb = realloc(t->raw, loc->raw);
		if (!nb)
			return crest_errf(-ENOMEM, "copying chunks");
		t->raw = nb;
		t->cap = loc->raw;
	}
	uint8_t *data = raw ? rec + CAS_REC_HEADER : t->raw;
	/* (It returns the bytes unpacked.) */
	int rc = cas_chunk_read(x->c->src, it->sha, loc, data, loc->raw, raw ? NULL : rec + CAS_REC_HEADER);
	uint8_t got[32];
	if (rc >= 0)
		rc = sha256_hash(t->h, data, loc->raw, got);
	if (rc == 0 && memcmp(got, it->sha, 32)) {
		char hex[65];
		hex_encode(it->sha, 32, hex);
		rc = crest_errx(-EBADMSG, "chunk %.16s in %s does not match its SHA-256 (damaged pack)", hex,
				cas_dir(x->c->src));
	}
	if (rc == 0)
		cas_rec_build(rec, it->sha, loc->codec, loc->raw, loc->stored);
	p->bytes += loc->raw;
	return rc;
}

/* Items [a, b)'s records as writes to where they were reserved, in runs
 * that lie back to back in a pack (records reserved one after another in
 * a lane do, unless it rolled to a new pack); how many in w. */
static unsigned runs_of(const struct copy *c, const struct item *it, size_t a, size_t b, struct cas_write *w)
{
	unsigned nw = 0;
	for (size_t i = a; i < b; i++) {
		if (!it[i].need)
			continue;
		const size_t len = CAS_REC_HEADER + (size_t)it[i].src.stored;
		struct cas_write *l = nw ? &w[nw - 1] : NULL;
		if (l && l->pack == it[i].dst.pack && l->off + l->len == it[i].dst.off) {
			l->len += len;
		} else {
			w[nw++] = (struct cas_write){ .pack = it[i].dst.pack, .off = it[i].dst.off,
						      .data = c->wbuf + it[i].boff, .len = len };
		}
	}
	return nw;
}

/* One buffer's records written by a thread of their own while the next
 * buffer fills: at most one at a time (a lane has one writer), started in
 * reservation order, so each lands where it was reserved. */
struct wjob {
	struct cas_store *dst;
	struct cas_write *w;
	unsigned nw;
	int rc;
	char msg[1024];
	pthread_t t;
	bool running;
};

static void *wjob_main(void *arg)
{
	struct wjob *j = arg;
	j->rc = cas_pack_write(j->dst, 0, j->w, j->nw);
	if (j->rc < 0)
		crest_errcpy(j->msg, sizeof(j->msg));
	return NULL;
}

/* Waits for j's write; its result, its message made the caller's. */
static int wjob_join(struct wjob *j)
{
	if (!j->running)
		return 0;
	pthread_join(j->t, NULL);
	j->running = false;
	if (j->rc < 0)
		crest_errset_str(j->msg);
	return j->rc;
}

static int wjob_start(struct wjob *j)
{
	j->rc = 0;
	if (!j->nw)
		return 0;
	if (pthread_create(&j->t, NULL, wjob_main, j) != 0) {
		wjob_main(j);   /* no thread to be had: here */
		if (j->rc < 0)
			crest_errset_str(j->msg);
		return j->rc;
	}
	j->running = true;
	return 0;
}

/* The chunks of ids dst lacks, from src into dst's lane 0, checked; their
 * new places appended to e (*ne of them). Batches of ids are looked up,
 * and their records read and hashed, on every core; the records are
 * reserved and written in order. */
static int send_chunks(struct copy *c, const struct idset *ids, struct cas_index_entry *e, size_t *ne)
{
	struct item *it = calloc(BATCH_IDS, sizeof(*it));
	struct wjob wj[2] = { { .dst = c->dst }, { .dst = c->dst } };
	wj[0].w = calloc(BATCH_IDS, sizeof(struct cas_write));
	wj[1].w = calloc(BATCH_IDS, sizeof(struct cas_write));
	int rc = it && wj[0].w && wj[1].w ? 0 : crest_errf(-ENOMEM, "copying chunks");
	struct xfer x = { .c = c, .it = it };
	unsigned cur = 0;           /* the buffer being filled */
	c->wbuf = c->buf[cur];
	for (size_t s = 0; rc == 0 && s < ids->n; s += BATCH_IDS) {
		const size_t n = ids->n - s < BATCH_IDS ? ids->n - s : BATCH_IDS;
		for (size_t i = 0; i < n; i++)
			it[i] = (struct item){ .sha = ids->v[s + i] };
		struct par p = { .n = n, .batch = 64, .fn = look_one, .arg = &x };
		rc = par_run(&p, 0, NULL, 0);
		for (size_t a = 0; rc == 0 && a < n;) {
			/* As many records as wbuf holds (one at least), reserved
			 * in order. */
			size_t b = a, used = 0;
			for (; rc == 0 && b < n; b++) {
				if (!it[b].need)
					continue;
				const size_t len = CAS_REC_HEADER + (size_t)it[b].src.stored;
				if (used && used + len > WRITE_CAP)
					break;
				rc = cas_pack_reserve(c->dst, 0, it[b].src.stored, it[b].src.raw, it[b].src.codec,
						      &it[b].dst);
				it[b].boff = used;
				used += len;
			}
			x.base = a;
			struct par q = { .n = b - a, .batch = 8, .fn = read_one, .tls_new = xtls_new,
					 .tls_free = xtls_free, .arg = &x };
			if (rc == 0)
				rc = par_run(&q, 0, NULL, 0);
			/* The other buffer's write done, this one's starts, and the
			 * other fills meanwhile. */
			const int wrc = wjob_join(&wj[cur ^ 1]);
			if (rc == 0)
				rc = wrc;
			if (rc == 0) {
				wj[cur].nw = runs_of(c, it, a, b, wj[cur].w);
				rc = wjob_start(&wj[cur]);
				cur ^= 1;
				c->wbuf = c->buf[cur];
			}
			for (size_t i = a; rc == 0 && i < b; i++) {
				if (!it[i].need)
					continue;
				e[*ne] = (struct cas_index_entry){ .loc = it[i].dst };
				memcpy(e[*ne].sha, it[i].sha, 32);
				++*ne;
				c->st->chunks_sent++;
				c->st->bytes_sent += CAS_REC_HEADER + (uint64_t)it[i].src.stored;
				c->st->raw_sent += it[i].src.raw;
			}
			if (c->progress)
				c->progress(c->st->bytes_sent, c->arg);
			a = b;
		}
	}
	for (unsigned k = 0; k < 2; k++) {
		const int wrc = wjob_join(&wj[k]);
		if (rc == 0)
			rc = wrc;
	}
	free(it);
	free(wj[0].w);
	free(wj[1].w);
	return rc;
}

/* Appends the encoding of piece sha (from src, checked) to enc's pieces,
 * unless dst or enc has it already. */
static int add_piece(struct copy *c, struct cas_encoded *enc, size_t *pcap, const uint8_t sha[32])
{
	char hex[65];
	for (size_t i = 0; i < enc->npieces; i++)
		if (!memcmp(enc->pieces[i].sha, sha, 32))
			return 0;
	size_t len = 0;
	int rc = 0;
	char *v = cas_db_get(c->dst, 'l', sha, 32, &len, &rc);
	if (v || rc != -ENOENT) {
		free(v);
		return rc;
	}
	v = cas_db_get(c->src, 'l', sha, 32, &len, &rc);
	if (!v) {
		hex_encode(sha, 32, hex);
		return rc != -ENOENT ? rc : crest_errx(-EBADMSG, "piece %.16s is missing from %s", hex, cas_dir(c->src));
	}
	uint8_t got[32];
	rc = sha256_once(v, len, got);
	if (rc == 0 && memcmp(got, sha, 32)) {
		hex_encode(sha, 32, hex);
		rc = crest_errx(-EBADMSG, "piece %.16s in %s does not match its SHA-256", hex, cas_dir(c->src));
	}
	size_t off = 0;
	for (size_t i = 0; i < enc->npieces; i++)
		off += enc->pieces[i].len;
	uint8_t *nb = rc == 0 ? realloc(enc->pbuf, off + len) : NULL;
	if (rc == 0 && nb)
		enc->pbuf = nb;
	if (rc == 0 && nb && enc->npieces == *pcap) {
		*pcap = *pcap ? 2 * *pcap : 16;
		struct cas_piece *np = realloc(enc->pieces, *pcap * sizeof(*np));
		if (np)
			enc->pieces = np;
		else
			nb = NULL;
	}
	if (rc == 0 && !nb)
		rc = crest_errf(-ENOMEM, "copying a snapshot's pieces");
	if (rc == 0) {
		memcpy(enc->pbuf + off, v, len);
		enc->pieces[enc->npieces++] = (struct cas_piece){ .off = off, .len = len };
		memcpy(enc->pieces[enc->npieces - 1].sha, sha, 32);
		c->st->pieces_sent++;
	}
	free(v);
	return rc;
}

static int copy_one(struct copy *c, const uint8_t id[32], unsigned depth)
{
	char hex[65];
	hex_encode(id, 32, hex);
	size_t vl = 0, hl = 0;
	int rc = 0;
	char *have = cas_db_get(c->dst, 'm', id, 32, &vl, &rc);
	if (have || rc != -ENOENT) {
		free(have);
		if (rc == 0) {
			c->st->snapshots++;
			c->st->present++;
		}
		return rc;
	}
	struct cas_manifest *m = NULL;
	rc = cas_manifest_load(c->src, id, &m);
	if (rc < 0)
		return rc;
	/* The bytes that go over: the manifest as the source holds it (the
	 * load above checked them against the id), and its summary, which
	 * must be the manifest's head. */
	char *v = cas_db_get(c->src, 'm', id, 32, &vl, &rc);
	char *h = v ? cas_db_get(c->src, 'i', id, 32, &hl, &rc) : NULL;
	uint8_t got[32];
	if (rc == -ENOENT)
		rc = 0;
	if (rc == 0 && (!v || !h))
		rc = crest_errx(-EBADMSG, "snapshot %.12s: its manifest or summary is missing from %s", hex,
				cas_dir(c->src));
	if (rc == 0 && (hl > vl || memcmp(h, v, hl)))
		rc = crest_errx(-EBADMSG, "snapshot %.12s: its summary in %s is not its manifest's head", hex,
				cas_dir(c->src));
	if (rc == 0)
		rc = sha256_once(v, vl, got);
	if (rc == 0 && memcmp(got, id, 32))
		rc = crest_errx(-EBADMSG, "snapshot %.12s: its manifest in %s does not match its id", hex,
				cas_dir(c->src));
	free(h);
	/* A job snapshot's members first (they name no members themselves). */
	for (size_t i = 0; rc == 0 && i < m->nstreams; i++) {
		const struct cas_stream *st = &m->streams[i];
		if (st->type != CAS_STREAM_MEMBER)
			continue;
		uint8_t mid[32];
		if (depth > 0 || strlen(st->target) != 64 || hex_decode(st->target, mid, 32) != 32)
			rc = crest_errx(-EBADMSG, "snapshot %.12s: member %s does not name a snapshot", hex, st->name);
		else
			rc = copy_one(c, mid, depth + 1);
	}
	struct idset ids = { 0 };
	if (rc == 0)
		rc = chunks_of(m, &ids);
	const size_t n = ids.n;
	struct cas_index_entry *e = rc == 0 ? malloc((n ? n : 1) * sizeof(*e)) : NULL;
	if (rc == 0 && !e)
		rc = crest_errf(-ENOMEM, "copying snapshot %.12s", hex);
	size_t ne = 0;
	if (rc == 0)
		rc = send_chunks(c, &ids, e, &ne);
	c->st->chunks += n;
	const bool wrote = ne > 0;
	if (rc == 0 && wrote)
		rc = cas_pack_sync(c->dst, 0);
	struct cas_encoded enc = { 0 };
	size_t pcap = 0;
	/* A delta's base before the delta: both are stored if missing. */
	for (size_t i = 0; rc == 0 && i < m->npieces; i++) {
		if (m->pieces[i].delta)
			rc = add_piece(c, &enc, &pcap, m->pieces[i].base);
		if (rc == 0)
			rc = add_piece(c, &enc, &pcap, m->pieces[i].sha);
	}
	if (rc == 0) {
		crest_fault_pause("copy.commit");   /* tests only: util/fault.h */
		enc.buf = (uint8_t *)v;
		enc.len = vl;
		enc.head_len = hl;
		v = NULL;
		rc = cas_commit_encoded(c->dst, e, ne, &enc, NULL, id);
		if (rc == 0)
			c->st->snapshots++;
	} else {
		cas_encoded_free(&enc);
	}
	/* Records written for a copy that did not commit are cut, and the
	 * lane goes on in a fresh pack (cas_pack_discard). */
	if (rc < 0)
		(void)cas_pack_discard(c->dst);
	free(v);
	free(e);
	idset_free(&ids);
	cas_manifest_free(m);
	return rc;
}

int cas_snapshot_copy(struct cas_store *src, struct cas_store *dst, const uint8_t id[32],
		      void (*progress)(uint64_t sent, void *arg), void *arg, struct cas_copy_stats *st)
{
	memset(st, 0, sizeof(*st));
	struct copy c = { .src = src, .dst = dst, .progress = progress, .arg = arg, .st = st };
	c.buf[0] = malloc(WRITE_CAP + CAS_REC_HEADER + CAS_CHUNK_MAX);
	c.buf[1] = malloc(WRITE_CAP + CAS_REC_HEADER + CAS_CHUNK_MAX);
	const int rc = c.buf[0] && c.buf[1] ? copy_one(&c, id, 0) : crest_errf(-ENOMEM, "copying a snapshot");
	free(c.buf[0]);
	free(c.buf[1]);
	return rc;
}

int cas_snapshot_copy_tags(struct cas_store *src, struct cas_store *dst, const uint8_t id[32], size_t *given,
			   void (*taken)(const char *tag, const uint8_t other[32], void *arg), void *arg)
{
	char **tags = NULL;
	size_t n = 0;
	*given = 0;
	int rc = cas_snapshot_tags(src, id, &tags, &n);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		uint8_t other[32];
		rc = cas_tag_get(dst, tags[i], other);
		if (rc == -ENOENT) {
			rc = cas_tag_set(dst, tags[i], id, false);
			*given += rc == 0;
		} else if (rc == 0 && memcmp(other, id, 32) && taken) {
			taken(tags[i], other, arg);
		}
	}
	cas_snapshot_tags_free(tags, n);
	return rc;
}
