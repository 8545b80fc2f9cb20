/*
 * manifest.c - manifest encoding, decoding and building; see manifest.h.
 *
 * Layout (little-endian; str = u32 length + bytes):
 *   "CRMF" u16 version u16 0 | u64 time_ns | str kind | u8 has_parent [32 parent]
 *   u64 logical_bytes | u32 nlabels (str key, str value)* | u32 nstreams
 *   -- the summary ends here --
 *   per stream: str name, u8 type, u32 mode, i64 mtime_ns, u64 size,
 *               str target, str meta, u64 nextents, u32 npieces (version 2),
 *               then either (npieces 0) the extents inline, or per piece:
 *               u64 n, u64 bytes, sha[32]
 *   extent: u8 hole, u64 len, [32 sha unless hole]
 * A piece's encoding is its n extents back to back, or (version 3) a delta:
 *   u8 2 | base sha[32] | u32 k | k times: u32 index, extent
 * with indices ascending and below n: the full piece base, with those of
 * its extents replaced. Version 3 is written only by a manifest that names
 * a delta, so every other manifest keeps the bytes (and id) of version 2.
 * Version 1 (no npieces, every list inline) is still read.
 * The decoder checks every length against what is left: a manifest comes off
 * a disk and is not trusted until it decodes.
 */
#include "cas/manifest.h"
#include "cas/format.h"
#include "util/par.h"
#include "util/sha256.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MF_MAGIC "CRMF"
#define MF_VERSION 3         /* the newest read */
#define MF_VERSION_PLAIN 2   /* written when no piece is a delta */
#define MF_VERSION_DELTA 3   /* the first whose pieces may be deltas */

/* Pieces. A stream of PIECE_MIN_EXTENTS extents or more is cut where its
 * offset enters the next PIECE_SPAN bytes, so an unchanged stretch of a
 * region (same extents, same place) gives the same piece as last time and
 * is stored once; a piece never holds more than PIECE_MAX_EXTENTS, which
 * also bounds what a damaged count can make the decoder allocate. With
 * 4 KiB chunks a piece is 16K extents, 672 KB. */
#define PIECE_MIN_EXTENTS 1024
#define PIECE_SPAN ((uint64_t)64 << 20)
#define PIECE_MAX_EXTENTS ((uint64_t)1 << 20)
#define PIECE_REF_BYTES 48

/* Extents as encoded: a hole, or data with its SHA-256. */
#define EXT_HOLE_BYTES 9
#define EXT_DATA_BYTES 41

/* Deltas (manifest.h). The first byte tells them from a full piece, whose
 * first byte is a hole flag, 0 or 1. A delta is written only while it
 * replaces at most a quarter of its base's extents: past that, a full piece
 * costs little more, and a reader's work for a place stays within 1.25
 * pieces' worth. */
#define PIECE_DELTA 2
#define DELTA_HEAD (1 + 32 + 4)
#define DELTA_MAX_SHARE 4     /* at most n / DELTA_MAX_SHARE changes */

struct wbuf {
	uint8_t *p;
	size_t len, cap;
	int err;
};

static void w_bytes(struct wbuf *w, const void *src, size_t n)
{
	if (w->err)
		return;
	if (w->len + n > w->cap) {
		size_t cap = w->cap ? w->cap : 4096;
		while (cap < w->len + n)
			cap *= 2;
		uint8_t *np = realloc(w->p, cap);
		if (!np) {
			w->err = -ENOMEM;
			return;
		}
		w->p = np;
		w->cap = cap;
	}
	memcpy(w->p + w->len, src, n);
	w->len += n;
}

static void w_u8(struct wbuf *w, uint8_t v) { w_bytes(w, &v, 1); }
static void w_u16(struct wbuf *w, uint16_t v) { uint8_t b[2] = { (uint8_t)v, (uint8_t)(v >> 8) }; w_bytes(w, b, 2); }
static void w_u32(struct wbuf *w, uint32_t v)
{
	uint8_t b[4];
	le32_put(b, v);
	w_bytes(w, b, 4);
}
static void w_u64(struct wbuf *w, uint64_t v)
{
	uint8_t b[8];
	le64_put(b, v);
	w_bytes(w, b, 8);
}
static void w_str(struct wbuf *w, const char *s)
{
	size_t n = s ? strlen(s) : 0;
	w_u32(w, (uint32_t)n);
	w_bytes(w, s, n);
}

static void w_extent(struct wbuf *w, const struct cas_extent *e)
{
	w_u8(w, e->hole);
	w_u64(w, e->len);
	if (!e->hole)
		w_bytes(w, e->sha, 32);
}

static int piece_push(struct cas_encoded *out, size_t *cap, const struct cas_piece *p)
{
	if (out->npieces == *cap) {
		const size_t nc = *cap ? *cap * 2 : 16;
		struct cas_piece *np = realloc(out->pieces, nc * sizeof(*np));
		if (!np)
			return -ENOMEM;
		out->pieces = np;
		*cap = nc;
	}
	out->pieces[out->npieces++] = *p;
	return 0;
}

/* The cut rules, with test knobs: CREST_PIECE_MIN_EXTENTS and
 * CREST_PIECE_SPAN make pieces tiny, so that tests cross every piece
 * boundary with little data. Decoding does not depend on them. */
static uint64_t knob(const char *name, uint64_t dflt)
{
	const char *v = getenv(name);
	const unsigned long long n = v && *v ? strtoull(v, NULL, 10) : 0;
	return n ? (uint64_t)n : dflt;
}

static bool ext_eq(const struct cas_extent *a, const struct cas_extent *b)
{
	return a->len == b->len && a->hole == b->hole && (a->hole || !memcmp(a->sha, b->sha, 32));
}

static size_t ext_size(const struct cas_extent *e)
{
	return e->hole ? EXT_HOLE_BYTES : EXT_DATA_BYTES;
}

static uint8_t *put_extent(uint8_t *p, const struct cas_extent *e)
{
	*p++ = e->hole;
	le64_put(p, e->len);
	p += 8;
	if (!e->hole) {
		memcpy(p, e->sha, 32);
		p += 32;
	}
	return p;
}

/* How each piece is encoded. The pieces are planned (delta or whole, and
 * the size) and then written and hashed on one thread each: 2M extents
 * compared with the base's and 86 MB written took 65 ms on one core. */
struct plan {
	const struct cas_stream *bs;   /* the base's stream of the same name */
	const struct cas_piece *bp;    /* its pieces, nbp of them */
	size_t nbp;
	uint32_t *idx;                 /* a delta's changed indices, cnt */
	uint64_t cnt;
};

struct cut_job {
	const struct cas_manifest *m;
	struct cas_encoded *out;
	struct plan *plan;
};

/* Where stream si of m can find a base for its pieces: the base
 * manifest's stream of the same name, and its pieces (a range of
 * base->pieces). The stream at the same index comes first: a manifest
 * encoded against itself (a branch start, a repair) must pair each stream
 * with itself to keep its bytes, even were a name ever there twice (no
 * writer makes one; a name lookup would give the first of the two). */
static void plan_base(const struct cas_manifest *base, const struct cas_manifest *m, size_t si, struct plan *pl)
{
	if (!base || base->header_only)
		return;
	const struct cas_stream *s = &m->streams[si];
	const struct cas_stream *bs = si < base->nstreams && !strcmp(base->streams[si].name, s->name)
					      ? &base->streams[si] : cas_manifest_find(base, s->name);
	if (!bs || !bs->ext || !base->npieces)
		return;   /* pieces NULL: no offset from it, not even 0 */
	const size_t bsi = (size_t)(bs - base->streams);
	size_t lo = 0, hi = base->npieces;   /* pieces are in stream order */
	while (lo < hi) {
		const size_t mid = lo + (hi - lo) / 2;
		if (base->pieces[mid].stream < bsi)
			lo = mid + 1;
		else
			hi = mid;
	}
	size_t e = lo;
	while (e < base->npieces && base->pieces[e].stream == bsi)
		e++;
	pl->bs = bs;
	pl->bp = base->pieces + lo;
	pl->nbp = e - lo;
}

/* The base's piece at p's place (same first extent and count), or NULL. */
static const struct cas_piece *plan_match(const struct plan *pl, const struct cas_piece *p)
{
	size_t lo = 0, hi = pl->nbp;   /* a stream's pieces are in order */
	while (lo < hi) {
		const size_t mid = lo + (hi - lo) / 2;
		if (pl->bp[mid].first < p->first)
			lo = mid + 1;
		else
			hi = mid;
	}
	const struct cas_piece *bp = lo < pl->nbp ? &pl->bp[lo] : NULL;
	/* A delta's changes come with it only when it was decoded (an encoded
	 * piece has none listed, whatever it changes). */
	if (!bp || bp->first != p->first || bp->n != p->n || pl->bs->nextents < p->first + p->n ||
	    (bp->delta && !bp->chg))
		return NULL;
	return bp;
}

/* Plans piece i: a delta against the base's piece at the same place when
 * there is one and the delta is small enough (manifest.h), else whole; and
 * its size. The delta names the base's own base when that is a delta, with
 * the base's changes and this piece's together: an index changed in
 * neither holds the same extent in all three. */
static int piece_plan(struct par *par, void *tls, size_t i)
{
	(void)tls;
	const struct cut_job *j = par->arg;
	struct cas_piece *p = &j->out->pieces[i];
	struct plan *pl = &j->plan[i];
	const struct cas_extent *e = j->m->streams[p->stream].ext + p->first;
	const struct cas_piece *bp = pl->bs ? plan_match(pl, p) : NULL;
	pl->cnt = 0;
	if (bp) {
		const struct cas_extent *be = pl->bs->ext + p->first;
		const uint64_t limit = p->n / DELTA_MAX_SHARE;
		uint64_t k = 0;
		bool fits = true;
		if (limit && !(pl->idx = malloc(limit * sizeof(*pl->idx))))
			return -ENOMEM;
		for (uint64_t x = 0; fits && x < p->n; x++) {
			const bool was = bp->delta && k < bp->nchg && bp->chg[k] == x;
			k += was;
			if (was || !ext_eq(&e[x], &be[x])) {
				if (pl->cnt == limit)
					fits = false;
				else
					pl->idx[pl->cnt++] = (uint32_t)x;
			}
		}
		if (fits && (bp->delta || pl->cnt)) {
			p->delta = true;
			memcpy(p->base, bp->delta ? bp->base : bp->sha, 32);
			p->len = DELTA_HEAD;
			for (uint64_t c = 0; c < pl->cnt; c++)
				p->len += 4 + ext_size(&e[pl->idx[c]]);
			return 0;
		}
	}
	p->len = 0;
	for (uint64_t x = 0; x < p->n; x++)
		p->len += ext_size(&e[x]);
	return 0;
}

/* Writes piece i at its place in pbuf, and hashes it. */
static int piece_put(struct par *par, void *tls, size_t i)
{
	(void)tls;
	const struct cut_job *j = par->arg;
	struct cas_piece *p = &j->out->pieces[i];
	const struct plan *pl = &j->plan[i];
	const struct cas_extent *e = j->m->streams[p->stream].ext + p->first;
	uint8_t *w = j->out->pbuf + p->off;
	if (p->delta) {
		*w++ = PIECE_DELTA;
		memcpy(w, p->base, 32);
		le32_put(w + 32, (uint32_t)pl->cnt);
		w += 36;
		for (uint64_t c = 0; c < pl->cnt; c++) {
			le32_put(w, pl->idx[c]);
			w = put_extent(w + 4, &e[pl->idx[c]]);
		}
	} else {
		for (uint64_t x = 0; x < p->n; x++)
			w = put_extent(w, &e[x]);
	}
	assert((size_t)(w - (j->out->pbuf + p->off)) == p->len);
	return sha256_once(j->out->pbuf + p->off, p->len, p->sha);
}

/* Cuts the long extent lists into pieces, and encodes and hashes them
 * into pbuf. */
static int pieces_cut(const struct cas_manifest *m, const struct cas_manifest *base, struct cas_encoded *out)
{
	const uint64_t min_extents = knob("CREST_PIECE_MIN_EXTENTS", PIECE_MIN_EXTENTS);
	const uint64_t piece_span = knob("CREST_PIECE_SPAN", PIECE_SPAN);
	size_t cap = 0;
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < m->nstreams; i++) {
		const struct cas_stream *s = &m->streams[i];
		if (s->nextents < min_extents)
			continue;
		uint64_t o = 0, span = 0;
		struct cas_piece *cur = NULL;
		for (uint64_t j = 0; rc == 0 && j < s->nextents; j++) {
			if (!cur || o / piece_span != span || cur->n == PIECE_MAX_EXTENTS) {
				const struct cas_piece p = { .stream = i, .first = j };
				rc = piece_push(out, &cap, &p);
				cur = rc == 0 ? &out->pieces[out->npieces - 1] : NULL;
				span = o / piece_span;
			}
			if (rc == 0) {
				cur->n++;
				cur->bytes += s->ext[j].len;
				o += s->ext[j].len;
			}
		}
	}
	if (rc < 0 || out->npieces == 0)
		return rc;
	struct plan *plan = calloc(out->npieces, sizeof(*plan));
	if (!plan)
		return -ENOMEM;
	for (size_t k = 0; k < out->npieces; k++)
		if (k == 0 || out->pieces[k].stream != out->pieces[k - 1].stream)
			plan_base(base, m, out->pieces[k].stream, &plan[k]);
		else
			plan[k] = plan[k - 1];
	struct cut_job j = { .m = m, .out = out, .plan = plan };
	struct par p1 = { .n = out->npieces, .fn = piece_plan, .arg = &j };
	rc = par_run(&p1, 0, NULL, 0);
	size_t total = 0;
	for (size_t k = 0; rc == 0 && k < out->npieces; k++) {
		out->pieces[k].off = total;
		total += out->pieces[k].len;
	}
	if (rc == 0 && !(out->pbuf = malloc(total ? total : 1)))
		rc = -ENOMEM;
	if (rc == 0) {
		struct par p2 = { .n = out->npieces, .fn = piece_put, .arg = &j };
		rc = par_run(&p2, 0, NULL, 0);
	}
	for (size_t k = 0; k < out->npieces; k++)
		free(plan[k].idx);
	free(plan);
	return rc;
}

int cas_manifest_encode(const struct cas_manifest *m, const struct cas_manifest *base, struct cas_encoded *out)
{
	memset(out, 0, sizeof(*out));
	int rc = pieces_cut(m, base, out);
	if (rc < 0) {
		cas_encoded_free(out);
		return rc;
	}
	bool delta = false;
	for (size_t i = 0; i < out->npieces; i++)
		delta |= out->pieces[i].delta;
	struct wbuf w = { 0 };
	w_bytes(&w, MF_MAGIC, 4);
	w_u16(&w, delta ? MF_VERSION_DELTA : MF_VERSION_PLAIN);
	w_u16(&w, 0);
	w_u64(&w, m->time_ns);
	w_str(&w, m->kind);
	w_u8(&w, m->has_parent);
	if (m->has_parent)
		w_bytes(&w, m->parent, 32);
	w_u64(&w, m->logical_bytes);
	w_u32(&w, (uint32_t)m->nlabels);
	for (size_t i = 0; i < m->nlabels; i++) {
		w_str(&w, m->labels[i].key);
		w_str(&w, m->labels[i].value);
	}
	w_u32(&w, (uint32_t)m->nstreams);
	out->head_len = w.len;
	size_t pi = 0;   /* pieces are in stream order */
	for (size_t i = 0; i < m->nstreams; i++) {
		const struct cas_stream *s = &m->streams[i];
		w_str(&w, s->name);
		w_u8(&w, s->type);
		w_u32(&w, s->mode);
		w_u64(&w, (uint64_t)s->mtime_ns);
		w_u64(&w, s->size);
		w_str(&w, s->target);
		w_str(&w, s->meta);
		w_u64(&w, s->nextents);
		size_t np = 0;
		while (pi + np < out->npieces && out->pieces[pi + np].stream == i)
			np++;
		w_u32(&w, (uint32_t)np);
		const bool inline_list = np == 0;
		for (; np; np--, pi++) {
			const struct cas_piece *p = &out->pieces[pi];
			w_u64(&w, p->n);
			w_u64(&w, p->bytes);
			w_bytes(&w, p->sha, 32);
		}
		if (inline_list)
			for (uint64_t j = 0; j < s->nextents; j++)
				w_extent(&w, &s->ext[j]);
	}
	if (w.err) {
		free(w.p);
		cas_encoded_free(out);
		return w.err;
	}
	out->buf = w.p;
	out->len = w.len;
	return 0;
}

void cas_encoded_free(struct cas_encoded *e)
{
	free(e->buf);
	free(e->pbuf);
	free(e->pieces);
	memset(e, 0, sizeof(*e));
}

struct rbuf {
	const uint8_t *p;
	size_t left;
	int bad;
};

static const uint8_t *r_take(struct rbuf *r, size_t n)
{
	if (r->bad || r->left < n) {
		r->bad = 1;
		return NULL;
	}
	const uint8_t *p = r->p;
	r->p += n;
	r->left -= n;
	return p;
}
static uint64_t r_uint(struct rbuf *r, int n)
{
	const uint8_t *p = r_take(r, (size_t)n);
	uint64_t v = 0;
	if (!p)
		return 0;
	for (int i = 0; i < n; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}
static char *r_str(struct rbuf *r)
{
	uint32_t n = (uint32_t)r_uint(r, 4);
	const uint8_t *p = r_take(r, n);
	if (!p)
		return NULL;
	if (memchr(p, 0, n)) {  /* strings are C strings: no NUL inside */
		r->bad = 1;
		return NULL;
	}
	char *s = malloc((size_t)n + 1);
	if (!s) {
		r->bad = 1;
		return NULL;
	}
	memcpy(s, p, n);
	s[n] = 0;
	return s;
}

/* ---- extent lists ----
 * A region of 8 GiB in 4 KiB chunks has 2M extents (86 MB encoded): decoded
 * and checked on one thread they took a good part of a restore that should
 * last 0.4 s. Such lists are pieces (see the top), each decoded and checked
 * on a thread of its own by cas_manifest_piece_decode; what is inline is
 * short (under PIECE_MIN_EXTENTS), or comes from a version 1 manifest. */
/* Decodes n extents from the len bytes at p into ext; *used is what they
 * took, *sum their lengths. No extent may be longer than limit. */
static int ext_run_decode(const uint8_t *p, size_t len, struct cas_extent *ext, uint64_t n, uint64_t limit,
			  size_t *used, uint64_t *sum)
{
	const uint8_t *const start = p;
	uint64_t total = 0;
	for (uint64_t i = 0; i < n; i++) {
		struct cas_extent *e = &ext[i];
		const size_t left = len - (size_t)(p - start);
		if (left < EXT_HOLE_BYTES)
			return -EBADMSG;
		if (p[0] > 1)
			return -EBADMSG;
		e->hole = p[0] != 0;
		e->len = le64_get(p + 1);
		if (e->hole) {
			memset(e->sha, 0, 32);
			p += EXT_HOLE_BYTES;
		} else {
			if (left < EXT_DATA_BYTES)
				return -EBADMSG;
			memcpy(e->sha, p + 9, 32);
			p += EXT_DATA_BYTES;
		}
		if (e->len > limit || __builtin_add_overflow(total, e->len, &total))
			return -EBADMSG;
	}
	*used = (size_t)(p - start);
	*sum = total;
	return 0;
}

/* Decodes ne inline extents of s from r; the lengths must add up to s->size. */
static int ext_decode(struct rbuf *r, struct cas_stream *s, uint64_t ne)
{
	size_t used;
	uint64_t sum;
	if (ext_run_decode(r->p, r->left, s->ext, ne, s->size, &used, &sum) < 0 || sum != s->size)
		return -EBADMSG;
	s->nextents = ne;
	r->p += used;
	r->left -= used;
	return 0;
}

/* Reads the np piece references of stream si (ne extents) into m->pieces
 * (the caller has bounded np and ne). The extents themselves come later,
 * from cas_manifest_piece_decode. */
static int pieces_read(struct rbuf *r, struct cas_manifest *m, size_t si, uint64_t ne, uint32_t np)
{
	struct cas_stream *s = &m->streams[si];
	struct cas_piece *nv = realloc(m->pieces, (m->npieces + np) * sizeof(*nv));
	if (!nv)
		return -ENOMEM;
	m->pieces = nv;
	uint64_t first = 0, bytes = 0;
	for (uint32_t i = 0; i < np; i++) {
		struct cas_piece *p = &m->pieces[m->npieces];
		*p = (struct cas_piece){ .stream = si, .first = first };
		p->n = r_uint(r, 8);
		p->bytes = r_uint(r, 8);
		const uint8_t *sha = r_take(r, 32);
		if (!sha || p->n == 0 || p->n > PIECE_MAX_EXTENTS || p->n > ne - first ||
		    __builtin_add_overflow(bytes, p->bytes, &bytes))
			return -EBADMSG;
		memcpy(p->sha, sha, 32);
		first += p->n;
		m->npieces++;
	}
	if (first != ne || bytes != s->size)
		return -EBADMSG;
	s->nextents = ne;
	return 0;
}

int cas_piece_base(const uint8_t *buf, size_t len, uint8_t base[32])
{
	if (len == 0)
		return -EBADMSG;
	if (buf[0] != PIECE_DELTA)
		return 0;
	if (len < DELTA_HEAD)
		return -EBADMSG;
	if (base)
		memcpy(base, buf + 1, 32);
	return 1;
}

static int sha_check(const uint8_t *buf, size_t len, const uint8_t want[32])
{
	uint8_t sum[32];
	const int rc = sha256_once(buf, len, sum);
	if (rc < 0)
		return rc;
	return memcmp(sum, want, 32) ? -EBADMSG : 0;
}

/* The changes of a delta (after its head) over the n extents at ext, which
 * hold its base already; their indices into chg. */
static int delta_apply(const uint8_t *p, size_t len, struct cas_extent *ext, uint64_t n, uint64_t limit,
		       uint32_t k, uint32_t *chg)
{
	size_t pos = 0;
	for (uint32_t c = 0; c < k; c++) {
		if (len - pos < 4)
			return -EBADMSG;
		const uint32_t idx = le32_get(p + pos);
		pos += 4;
		if (idx >= n || (c && idx <= chg[c - 1]))
			return -EBADMSG;
		size_t used;
		uint64_t sum;
		if (ext_run_decode(p + pos, len - pos, &ext[idx], 1, limit, &used, &sum) < 0)
			return -EBADMSG;
		pos += used;
		chg[c] = idx;
	}
	return pos == len ? 0 : -EBADMSG;
}

int cas_manifest_piece_decode(struct cas_manifest *m, size_t i, const uint8_t *buf, size_t len,
			      const uint8_t *bbuf, size_t blen)
{
	struct cas_piece *p = &m->pieces[i];
	int rc = sha_check(buf, len, p->sha);
	if (rc < 0)
		return rc;
	const struct cas_stream *s = &m->streams[p->stream];
	struct cas_extent *ext = s->ext + p->first;
	uint8_t base[32];
	const int delta = cas_piece_base(buf, len, base);
	if (delta < 0)
		return delta;
	size_t used;
	uint64_t bytes;
	if (!delta) {
		rc = ext_run_decode(buf, len, ext, p->n, s->size, &used, &bytes);
		p->delta = false;
		return rc < 0 || used != len || bytes != p->bytes ? -EBADMSG : 0;
	}
	/* A delta: its base first, whole and checked, then the changes. The
	 * base was written for an older version of the stream, which may have
	 * been longer: an extent of it may exceed this stream's size (a hole
	 * the file has since lost) as long as a change replaces it. So the
	 * base's extents are bounded only once the changes are in, below. */
	if (m->version < MF_VERSION_DELTA || !bbuf || cas_piece_base(bbuf, blen, NULL) != 0)
		return -EBADMSG;
	if ((rc = sha_check(bbuf, blen, base)) < 0)
		return rc;
	rc = ext_run_decode(bbuf, blen, ext, p->n, UINT64_MAX, &used, &bytes);
	if (rc < 0 || used != blen)
		return -EBADMSG;
	const uint32_t k = le32_get(buf + 33);
	if (k > p->n || k > (len - DELTA_HEAD) / (4 + EXT_HOLE_BYTES))
		return -EBADMSG;   /* before the allocation a bad count would size */
	uint32_t *chg = malloc((k ? k : 1) * sizeof(*chg));
	if (!chg)
		return -ENOMEM;
	rc = delta_apply(buf + DELTA_HEAD, len - DELTA_HEAD, ext, p->n, s->size, k, chg);
	bytes = 0;
	for (uint64_t j = 0; rc == 0 && j < p->n; j++)
		if (ext[j].len > s->size || __builtin_add_overflow(bytes, ext[j].len, &bytes))
			rc = -EBADMSG;
	if (rc == 0 && bytes != p->bytes)
		rc = -EBADMSG;
	if (rc < 0) {
		free(chg);
		return rc;
	}
	free(p->chg);   /* a piece decoded twice (recover tries two sources) */
	p->chg = chg;
	p->nchg = k;
	p->delta = true;
	memcpy(p->base, base, 32);
	return 0;
}

int cas_manifest_decode(const uint8_t *buf, size_t len, bool header_only, struct cas_manifest **out)
{
	struct rbuf r = { buf, len, 0 };
	struct cas_manifest *m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	const uint8_t *magic = r_take(&r, 4);
	const unsigned version = (unsigned)r_uint(&r, 2);
	if (!magic || memcmp(magic, MF_MAGIC, 4) || version < 1 || version > MF_VERSION)
		goto bad;
	m->version = version;
	r_uint(&r, 2);
	m->time_ns = r_uint(&r, 8);
	m->kind = r_str(&r);
	m->has_parent = r_uint(&r, 1) != 0;
	if (m->has_parent) {
		const uint8_t *p = r_take(&r, 32);
		if (p)
			memcpy(m->parent, p, 32);
	}
	m->logical_bytes = r_uint(&r, 8);
	uint32_t nl = (uint32_t)r_uint(&r, 4);
	if (r.bad || nl > r.left / 8)
		goto bad;
	m->labels = calloc(nl ? nl : 1, sizeof(*m->labels));
	if (!m->labels)
		goto bad;
	for (; m->nlabels < nl && !r.bad; m->nlabels++) {
		m->labels[m->nlabels].key = r_str(&r);
		m->labels[m->nlabels].value = r_str(&r);
	}
	uint32_t ns = (uint32_t)r_uint(&r, 4);
	if (r.bad)
		goto bad;
	m->header_only = header_only;
	if (header_only) {
		m->nstreams = ns;  /* the count, with no streams behind it */
		*out = m;
		return 0;
	}
	if (ns > r.left / 41)  /* a stream takes at least 41 bytes */
		goto bad;
	m->streams = calloc(ns ? ns : 1, sizeof(*m->streams));
	if (!m->streams)
		goto bad;
	while (m->nstreams < ns) {
		/* Counted before it is filled: a failure frees what it got. */
		const size_t si = m->nstreams++;
		struct cas_stream *s = &m->streams[si];
		s->name = r_str(&r);
		s->type = (uint8_t)r_uint(&r, 1);
		s->mode = (uint32_t)r_uint(&r, 4);
		s->mtime_ns = (int64_t)r_uint(&r, 8);
		s->size = r_uint(&r, 8);
		s->target = r_str(&r);
		s->meta = r_str(&r);
		const uint64_t ne = r_uint(&r, 8);
		const uint32_t np = version >= 2 ? (uint32_t)r_uint(&r, 4) : 0;
		if (r.bad || (np == 0 && ne > r.left / EXT_HOLE_BYTES))
			goto bad;
		if (np && (np > r.left / PIECE_REF_BYTES || ne > (uint64_t)np * PIECE_MAX_EXTENTS))
			goto bad;   /* before the allocation a bad count would size */
		s->ext = malloc((ne ? ne : 1) * sizeof(*s->ext));
		if (!s->ext)
			goto bad;
		if ((np ? pieces_read(&r, m, si, ne, np) : ext_decode(&r, s, ne)) < 0)
			goto bad;
	}
	if (r.bad || r.left)
		goto bad;
	*out = m;
	return 0;
bad:
	cas_manifest_free(m);
	return -EBADMSG;
}

void cas_manifest_free(struct cas_manifest *m)
{
	if (!m)
		return;
	free(m->kind);
	for (size_t i = 0; i < m->nlabels; i++) {
		free(m->labels[i].key);
		free(m->labels[i].value);
	}
	free(m->labels);
	if (!m->header_only) {
		for (size_t i = 0; i < m->nstreams; i++) {
			free(m->streams[i].name);
			free(m->streams[i].target);
			free(m->streams[i].meta);
			free(m->streams[i].ext);
		}
	}
	free(m->streams);
	for (size_t i = 0; i < m->npieces; i++)
		free(m->pieces[i].chg);
	free(m->pieces);
	free(m);
}

int cas_stream_set_str(char **field, const char *value)
{
	char *s = strdup(value ? value : "");
	if (!s)
		return -ENOMEM;
	free(*field);
	*field = s;
	return 0;
}

struct cas_manifest *cas_manifest_new(const char *kind)
{
	struct cas_manifest *m = calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	if (cas_stream_set_str(&m->kind, kind) < 0) {
		free(m);
		return NULL;
	}
	return m;
}

int cas_manifest_label(struct cas_manifest *m, const char *key, const char *value)
{
	struct cas_label *nl = realloc(m->labels, (m->nlabels + 1) * sizeof(*nl));
	if (!nl)
		return -ENOMEM;
	m->labels = nl;
	struct cas_label *l = &m->labels[m->nlabels];
	l->key = strdup(key);
	l->value = strdup(value);
	if (!l->key || !l->value) {
		free(l->key);
		free(l->value);
		return -ENOMEM;
	}
	m->nlabels++;
	return 0;
}

const char *cas_manifest_get_label(const struct cas_manifest *m, const char *key)
{
	for (size_t i = 0; i < m->nlabels; i++)
		if (!strcmp(m->labels[i].key, key))
			return m->labels[i].value;
	return NULL;
}

struct cas_stream *cas_manifest_add_stream(struct cas_manifest *m, const char *name, uint8_t type)
{
	struct cas_stream *ns = realloc(m->streams, (m->nstreams + 1) * sizeof(*ns));
	if (!ns)
		return NULL;
	m->streams = ns;
	struct cas_stream *s = &m->streams[m->nstreams];
	memset(s, 0, sizeof(*s));
	if (cas_stream_set_str(&s->name, name) < 0 || cas_stream_set_str(&s->target, "") < 0 ||
	    cas_stream_set_str(&s->meta, "") < 0) {
		free(s->name);
		free(s->target);
		return NULL;
	}
	s->type = type;
	m->nstreams++;
	return s;
}

const struct cas_stream *cas_manifest_find(const struct cas_manifest *m, const char *name)
{
	for (size_t i = 0; i < m->nstreams; i++)
		if (!strcmp(m->streams[i].name, name))
			return &m->streams[i];
	return NULL;
}

const char *cas_stream_type_name(uint8_t type)
{
	switch (type) {
	case CAS_STREAM_FILE: return "file";
	case CAS_STREAM_DIR: return "dir";
	case CAS_STREAM_SYMLINK: return "symlink";
	case CAS_STREAM_REGION: return "region";
	case CAS_STREAM_IMAGE: return "image";
	case CAS_STREAM_JOBFILE: return "jobfile";
	case CAS_STREAM_BLOB: return "blob";
	case CAS_STREAM_MEMBER: return "member";
	default: return "unknown";
	}
}
