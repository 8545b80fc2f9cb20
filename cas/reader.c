/*
 * reader.c - sequential chunk reads for restores of large streams: spans of
 * packs read with one pread each, or runs of raw records read straight to
 * their destinations with one preadv; records checked by the header's
 * SHA-256 and CRC32C. See cas.h for why that check suffices.
 */
#include "cas/cas_int.h"
#include "util/crc32c.h"
#include "util/err.h"
#include "util/sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <lz4.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* What rpack.f holds for a pack that cannot be opened. */
static struct cas_obj no_pack;

struct rpack {
	struct cas_obj *_Atomic f;      /* NULL: not opened yet, &no_pack: cannot be */
	atomic_uint_fast64_t safe;      /* end of the furthest record known committed */
};

/* Packs are read into the caller's span buffer, not mapped: on
 * the 16-core machine, 16 threads faulting in and unmapping gigabytes of
 * shared mappings scaled worse than copies out of the page cache, and a
 * short read is an answer where a cut-off mapping is a SIGBUS. */
struct cas_reader {
	struct cas_store *s;
	pthread_mutex_t lock;           /* only for opening a pack */
	uint32_t npacks;                /* packs 0..npacks-1 existed at open */
	struct rpack *p;
};

int cas_reader_open(struct cas_store *s, struct cas_reader **out)
{
	uint32_t max = 0;
	int rc = cas_pack_max_on_disk(s, &max);
	if (rc < 0)
		return rc;
	struct cas_reader *r = calloc(1, sizeof(*r));
	if (r)
		r->p = calloc((size_t)max + 1, sizeof(*r->p));
	if (!r || !r->p) {
		free(r);
		return crest_errf(-ENOMEM, "opening a reader on %s", s->dir);
	}
	r->s = s;
	r->npacks = max + 1;
	pthread_mutex_init(&r->lock, NULL);
	*out = r;
	return 0;
}

void cas_reader_close(struct cas_reader *r)
{
	if (!r)
		return;
	for (uint32_t i = 0; i < r->npacks; i++) {
		struct cas_obj *f = atomic_load(&r->p[i].f);
		if (f && f != &no_pack)
			cas_obj_close(f);
	}
	pthread_mutex_destroy(&r->lock);
	free(r->p);
	free(r);
}

/* The pack's handle, opened once per reader: no lock once open. NULL
 * when it cannot be opened (the caller falls back to cas_chunk_read, which
 * says why). */
static struct cas_obj *pack_obj(struct cas_reader *r, uint32_t pack)
{
	if (pack >= r->npacks)
		return NULL;
	struct rpack *p = &r->p[pack];
	struct cas_obj *f = atomic_load_explicit(&p->f, memory_order_acquire);
	if (f)
		return f == &no_pack ? NULL : f;
	pthread_mutex_lock(&r->lock);
	f = atomic_load(&p->f);
	if (!f) {
		if (cas_pack_open_read(r->s, pack, &f) < 0)
			f = &no_pack;   /* cas_chunk_read says why, where it matters */
		atomic_store_explicit(&p->f, f, memory_order_release);
	}
	pthread_mutex_unlock(&r->lock);
	return f == &no_pack ? NULL : f;
}

static void safe_raise(struct cas_reader *r, uint32_t pack, uint64_t end)
{
	if (pack >= r->npacks)
		return;
	atomic_uint_fast64_t *a = &r->p[pack].safe;
	uint_fast64_t cur = atomic_load_explicit(a, memory_order_relaxed);
	while (cur < end && !atomic_compare_exchange_weak(a, &cur, end))
		;
}

struct rec {
	uint8_t codec;
	uint32_t raw, stored, crc;
};

static void rec_parse(const uint8_t *h, struct rec *x)
{
	x->codec = h[4];
	x->raw = le32_get(h + 8);
	x->stored = le32_get(h + 12);
	x->crc = le32_get(h + CAS_REC_CRC);
}

static bool rec_fits(const struct rec *x, uint32_t len)
{
	return x->raw == len && x->codec <= CAS_CODEC_LZ4 && x->stored <= CAS_CHUNK_MAX &&
	       (x->codec != CAS_CODEC_RAW || x->stored == len);
}

/* The record's stored bytes (data) checked and unpacked into dst. */
static int rec_take(const struct rec *x, const uint8_t *data, void *dst, uint32_t len, void *bounce)
{
	if (crc32c(data, x->stored) != x->crc)
		return -EBADMSG;
	if (x->codec == CAS_CODEC_RAW) {
		memcpy(dst, data, len);
		return 0;
	}
	void *to = bounce ? bounce : dst;
	int n = LZ4_decompress_safe((const char *)data, to, (int)x->stored, (int)len);
	if (n < 0 || (uint32_t)n != len)
		return -EBADMSG;
	if (bounce)
		memcpy(dst, bounce, len);
	return 0;
}

int cas_reader_get(struct cas_reader *r, const uint8_t sha[32], void *dst, uint32_t len, void *bounce)
{
	char hex[65];
	struct cas_loc loc;
	int rc = cas_chunk_lookup(r->s, sha, &loc);
	if (rc == -ENOENT) {
		hex_encode(sha, 32, hex);
		return crest_errx(-EBADMSG, "chunk %.16s is missing from the store", hex);
	}
	if (rc < 0)
		return rc;
	if (loc.raw != len) {
		hex_encode(sha, 32, hex);
		return crest_errx(-EBADMSG, "chunk %.16s has %u bytes in the index, %u in the manifest", hex,
				  loc.raw, len);
	}
	/* cas_chunk_read checks the header against the index and the CRC32C,
	 * and names what is wrong. */
	void *scratch = NULL;
	if (loc.codec != CAS_CODEC_RAW && !(scratch = malloc(loc.stored ? loc.stored : 1)))
		return crest_errf(-ENOMEM, "reading a chunk");
	rc = cas_chunk_read(r->s, sha, &loc, bounce ? bounce : dst, len, scratch);
	free(scratch);
	if (rc < 0)
		return rc;
	if (bounce)
		memcpy(dst, bounce, len);
	return 0;
}

int cas_reader_locate(struct cas_reader *r, const uint8_t sha[32], struct cas_cursor *cur)
{
	struct cas_loc loc;
	int rc = cas_chunk_lookup(r->s, sha, &loc);
	if (rc < 0)
		return rc;
	const uint64_t end = loc.off + CAS_REC_HEADER + loc.stored;
	safe_raise(r, loc.pack, end);
	*cur = (struct cas_cursor){ .pack = loc.pack, .off = loc.off, .end = end, .valid = true };
	return 0;
}

/* Fills the span's buffer from off: as much as it holds, never past the
 * walk bound. */
static int span_fill(struct cas_reader *r, struct cas_span *sp, uint32_t pack, uint64_t off, uint64_t bound)
{
	struct cas_obj *f = pack_obj(r, pack);
	if (!f)
		return -ENOENT;
	/* Below the bound every byte is committed: all of them are there. */
	const size_t want = bound - off < sp->cap ? (size_t)(bound - off) : sp->cap;
	const size_t got = cas_obj_read(f, sp->buf, want, off) == 0 ? want : 0;  /* the index path says why */
	sp->pack = pack;
	sp->base = off;
	sp->len = got;
	sp->nreads++;
	sp->read_bytes += got;
	return 0;
}

int cas_reader_next(struct cas_reader *r, struct cas_span *sp, struct cas_rec *rec)
{
	struct cas_cursor *cur = &sp->cur;
	if (!cur->valid || cur->pack >= r->npacks)
		return -ENOENT;
	uint64_t bound = atomic_load_explicit(&r->p[cur->pack].safe, memory_order_relaxed);
	if (cur->end && cur->end < bound)
		bound = cur->end;
	const uint64_t off = cur->off;
	if (off + CAS_REC_HEADER > bound)
		return -ENOENT;
	for (int pass = 0; pass < 2; pass++) {
		if (sp->len && sp->pack == cur->pack && off >= sp->base && off + CAS_REC_HEADER <= sp->base + sp->len) {
			const uint8_t *h = sp->buf + (off - sp->base);
			if (memcmp(h, CAS_REC_MAGIC, 4))
				return -ENOENT;
			struct rec x;
			rec_parse(h, &x);
			const uint64_t next = off + CAS_REC_HEADER + x.stored;
			if (x.stored > CAS_CHUNK_MAX || next > bound)
				return -ENOENT;
			if (next <= sp->base + sp->len) {
				*rec = (struct cas_rec){ .sha = h + CAS_REC_SHA, .hdr = h, .pack = cur->pack,
							 .off = off, .codec = x.codec, .raw = x.raw,
							 .stored = x.stored, .crc = x.crc };
				cur->off = next;
				return 0;
			}
		}
		if (pass == 0 && span_fill(r, sp, cur->pack, off, bound) < 0)
			return -ENOENT;
	}
	return -ENOENT;   /* a record larger than the buffer: read on its own */
}

int cas_reader_take(struct cas_reader *r, const struct cas_rec *rec, void *dst, uint32_t len, void *bounce)
{
	(void)r;
	struct rec x = { .codec = rec->codec, .raw = rec->raw, .stored = rec->stored, .crc = rec->crc };
	if (!rec_fits(&x, len))
		return -EBADMSG;
	return rec_take(&x, rec->hdr + CAS_REC_HEADER, dst, len, bounce);
}

ssize_t cas_reader_readv(struct cas_reader *r, uint32_t pack, uint64_t off, const struct iovec *iov, int n)
{
	if (pack >= r->npacks || n < 1 || n > IOV_MAX)
		return -EINVAL;
	uint64_t len = 0;
	for (int i = 0; i < n; i++)
		len += iov[i].iov_len;
	/* Past the bound a writer may still be cutting or rewriting. */
	if (off + len > atomic_load_explicit(&r->p[pack].safe, memory_order_relaxed))
		return -ENOENT;
	struct cas_obj *f = pack_obj(r, pack);
	if (!f)
		return -ENOENT;
	const int rc = cas_obj_readv(f, iov, n, off);
	return rc < 0 ? rc : (ssize_t)len;
}

int cas_reader_check_raw(const uint8_t *hdr, const uint8_t sha[32], const void *data, uint32_t len)
{
	struct rec x;
	rec_parse(hdr, &x);
	if (memcmp(hdr, CAS_REC_MAGIC, 4) || x.codec != CAS_CODEC_RAW || !rec_fits(&x, len) ||
	    crc32c(data, len) != x.crc)
		return -EBADMSG;
	return memcmp(hdr + CAS_REC_SHA, sha, 32) ? 1 : 0;
}
