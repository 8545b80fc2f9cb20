/*
 * manifest.c - manifest encoding, decoding and building; see manifest.h.
 *
 * Layout (little-endian; str = u32 length + bytes):
 *   "CRMF" u16 version u16 0 | u64 time_ns | str kind | u8 has_parent [32 parent]
 *   u64 logical_bytes | u32 nlabels (str key, str value)* | u32 nstreams
 *   -- the summary ends here --
 *   per stream: str name, u8 type, u32 mode, i64 mtime_ns, u64 size,
 *               str target, str meta, u64 nextents,
 *               per extent: u8 hole, u64 len, [32 sha unless hole]
 * The decoder checks every length against what is left: a manifest comes off
 * a disk and is not trusted until it decodes.
 */
#include "cas/manifest.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MF_MAGIC "CRMF"
#define MF_VERSION 1

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
	for (int i = 0; i < 4; i++)
		b[i] = (uint8_t)(v >> (8 * i));
	w_bytes(w, b, 4);
}
static void w_u64(struct wbuf *w, uint64_t v)
{
	uint8_t b[8];
	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)(v >> (8 * i));
	w_bytes(w, b, 8);
}
static void w_str(struct wbuf *w, const char *s)
{
	size_t n = s ? strlen(s) : 0;
	w_u32(w, (uint32_t)n);
	w_bytes(w, s, n);
}

int cas_manifest_encode(const struct cas_manifest *m, uint8_t **buf, size_t *len, size_t *head_len)
{
	struct wbuf w = { 0 };
	w_bytes(&w, MF_MAGIC, 4);
	w_u16(&w, MF_VERSION);
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
	*head_len = w.len;
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
		for (uint64_t j = 0; j < s->nextents; j++) {
			const struct cas_extent *e = &s->ext[j];
			w_u8(&w, e->hole);
			w_u64(&w, e->len);
			if (!e->hole)
				w_bytes(&w, e->sha, 32);
		}
	}
	if (w.err) {
		free(w.p);
		return w.err;
	}
	*buf = w.p;
	*len = w.len;
	return 0;
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
 * A region of 8 GiB in 4 KiB chunks has 2M extents (86 MB encoded): decoding
 * them one field at a time on one thread took a good part of a restore that
 * should last 0.4 s. Extents are variable-length (a hole has no SHA-256), so
 * one cheap pass finds where every PIECE-th extent starts; threads then
 * decode pieces into their places in the array. */
#define PIECE ((uint64_t)1 << 16)
#define EXT_HOLE_BYTES 9
#define EXT_DATA_BYTES 41

struct piece {
	const uint8_t *p;   /* encoded extents of this piece */
	uint64_t first, n;  /* their indexes */
	uint64_t sum;       /* their lengths added up */
	int bad;
};

struct ext_job {
	struct cas_extent *ext;
	uint64_t limit;     /* no single extent may be longer (the stream's size) */
	struct piece *pc;
	size_t npc;
	atomic_size_t next;
};

static uint64_t le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static void piece_decode(const struct ext_job *j, struct piece *pc)
{
	const uint8_t *p = pc->p;
	uint64_t sum = 0;
	for (uint64_t i = 0; i < pc->n; i++) {
		struct cas_extent *e = &j->ext[pc->first + i];
		e->hole = p[0] != 0;
		e->len = le64(p + 1);
		if (e->hole) {
			memset(e->sha, 0, 32);
			p += EXT_HOLE_BYTES;
		} else {
			memcpy(e->sha, p + 9, 32);
			p += EXT_DATA_BYTES;
		}
		if (e->len > j->limit || __builtin_add_overflow(sum, e->len, &sum)) {
			pc->bad = 1;
			return;
		}
	}
	pc->sum = sum;
}

static void *piece_worker(void *arg)
{
	struct ext_job *j = arg;
	for (size_t i; (i = atomic_fetch_add(&j->next, 1)) < j->npc;)
		piece_decode(j, &j->pc[i]);
	return NULL;
}

/* Decodes ne extents of s from r; the lengths must add up to s->size. */
static int ext_decode(struct rbuf *r, struct cas_stream *s, uint64_t ne)
{
	const size_t npc = (size_t)((ne + PIECE - 1) / PIECE);
	struct piece one, *pc = npc > 1 ? calloc(npc, sizeof(*pc)) : &one;
	if (!pc)
		return -ENOMEM;
	/* The pass that bounds everything: each extent's size from its flag. */
	const uint8_t *p = r->p;
	size_t left = r->left;
	for (uint64_t i = 0; i < ne; i++) {
		if (i % PIECE == 0)
			pc[i / PIECE] = (struct piece){ .p = p, .first = i,
							.n = ne - i < PIECE ? ne - i : PIECE };
		const size_t k = left && p[0] ? EXT_HOLE_BYTES : EXT_DATA_BYTES;
		if (left < k) {
			if (pc != &one)
				free(pc);
			return -EBADMSG;
		}
		p += k;
		left -= k;
	}
	struct ext_job j = { .ext = s->ext, .limit = s->size, .pc = pc, .npc = npc };
	pthread_t t[16];
	unsigned nt = 0;
	if (npc > 1) {
		long nc = sysconf(_SC_NPROCESSORS_ONLN);
		unsigned want = nc > 1 ? (unsigned)nc - 1 : 0;
		want = want > 16 ? 16 : want;
		want = want > npc - 1 ? (unsigned)(npc - 1) : want;
		while (nt < want && pthread_create(&t[nt], NULL, piece_worker, &j) == 0)
			nt++;
	}
	piece_worker(&j);
	for (unsigned i = 0; i < nt; i++)
		pthread_join(t[i], NULL);
	uint64_t total = 0;
	int bad = 0;
	for (size_t i = 0; i < npc; i++)
		bad |= pc[i].bad || __builtin_add_overflow(total, pc[i].sum, &total);
	if (pc != &one)
		free(pc);
	if (bad || total != s->size)
		return -EBADMSG;
	s->nextents = ne;
	r->p = p;
	r->left = left;
	return 0;
}

int cas_manifest_decode(const uint8_t *buf, size_t len, bool header_only, struct cas_manifest **out)
{
	struct rbuf r = { buf, len, 0 };
	struct cas_manifest *m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	const uint8_t *magic = r_take(&r, 4);
	if (!magic || memcmp(magic, MF_MAGIC, 4) || r_uint(&r, 2) != MF_VERSION)
		goto bad;
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
	for (; m->nstreams < ns; m->nstreams++) {
		struct cas_stream *s = &m->streams[m->nstreams];
		s->name = r_str(&r);
		s->type = (uint8_t)r_uint(&r, 1);
		s->mode = (uint32_t)r_uint(&r, 4);
		s->mtime_ns = (int64_t)r_uint(&r, 8);
		s->size = r_uint(&r, 8);
		s->target = r_str(&r);
		s->meta = r_str(&r);
		uint64_t ne = r_uint(&r, 8);
		if (r.bad || ne > r.left / 9)
			goto bad;
		s->ext = malloc((ne ? ne : 1) * sizeof(*s->ext));
		if (!s->ext)
			goto bad;
		if (ext_decode(&r, s, ne) < 0)
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
	default: return "unknown";
	}
}
