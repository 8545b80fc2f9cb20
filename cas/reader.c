/*
 * reader.c - sequential chunk reads for restores of large streams, through
 * mapped packs, checked by the record header's SHA-256 and CRC32C; see
 * cas_reader_get in cas.h for why that check suffices and how the walk is
 * kept to committed records.
 */
#include "cas/cas_int.h"
#include "util/crc32c.h"
#include "util/err.h"
#include "util/sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <lz4.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Records walked over before asking the index: the engine interleaves one
 * run per ingest worker, so the next chunk is usually within that many; past
 * about this many header reads a look-up (a few µs) is cheaper. */
#define WALK_MAX 96

struct rpack {
	_Atomic(const uint8_t *) map;   /* NULL: not mapped yet */
	size_t len;                     /* bytes mapped; set before map */
	atomic_uint_fast64_t safe;      /* end of the furthest record known committed */
	bool failed;                    /* could not map: read through cas_chunk_read */
};

struct cas_reader {
	struct cas_store *s;
	pthread_mutex_t lock;           /* only for mapping a pack */
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
		const uint8_t *m = atomic_load(&r->p[i].map);
		if (m)
			munmap((void *)m, r->p[i].len);
	}
	pthread_mutex_destroy(&r->lock);
	free(r->p);
	free(r);
}

/* The pack's mapping, or NULL when it cannot be mapped (the caller then
 * reads through cas_chunk_read, which reports what is wrong). Mapped once,
 * as long as the file is when first asked for: records appended later are
 * read through cas_chunk_read too. */
static const uint8_t *pack_map(struct cas_reader *r, uint32_t pack, size_t *len)
{
	if (pack >= r->npacks)
		return NULL;
	struct rpack *p = &r->p[pack];
	const uint8_t *m = atomic_load_explicit(&p->map, memory_order_acquire);
	if (m || p->failed) {
		*len = p->len;
		return m;
	}
	pthread_mutex_lock(&r->lock);
	m = atomic_load(&p->map);
	if (!m && !p->failed) {
		char path[4096];
		cas_pack_path(r->s, pack, path, sizeof(path));
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		struct stat st;
		if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size > CAS_PACK_HEADER) {
			void *v = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
			if (v != MAP_FAILED) {
				p->len = (size_t)st.st_size;
				atomic_store_explicit(&p->map, (const uint8_t *)v, memory_order_release);
				m = v;
			}
		}
		if (fd >= 0)
			close(fd);
		p->failed = !m;
	}
	pthread_mutex_unlock(&r->lock);
	*len = p->len;
	return m;
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

int cas_reader_hint(struct cas_reader *r, const uint8_t sha[32])
{
	struct cas_loc loc;
	int rc = cas_chunk_lookup(r->s, sha, &loc);
	if (rc == -ENOENT)
		return 0;
	if (rc == 0)
		safe_raise(r, loc.pack, loc.off + CAS_REC_HEADER + loc.stored);
	return rc;
}

struct rec {
	uint8_t codec;
	uint32_t raw, stored, crc;
};

static void rec_parse(const uint8_t *h, struct rec *x)
{
	x->codec = h[4];
	memcpy(&x->raw, h + 8, 4);
	memcpy(&x->stored, h + 12, 4);
	memcpy(&x->crc, h + CAS_REC_CRC, 4);
}

/* Walks from *cur for the record of sha; its offset, or 0 when not found
 * within WALK_MAX records, the safe bound or the mapping. Never reports
 * errors: whatever looks wrong is left to the index path, which names it. */
static uint64_t walk(struct cas_reader *r, const struct cas_cursor *cur, const uint8_t sha[32],
		     const uint8_t **map, size_t *maplen)
{
	if (!cur->valid || cur->pack >= r->npacks)
		return 0;
	size_t len;
	const uint8_t *m = pack_map(r, cur->pack, &len);
	if (!m)
		return 0;
	uint64_t bound = atomic_load_explicit(&r->p[cur->pack].safe, memory_order_relaxed);
	if (bound > len)
		bound = len;
	uint64_t off = cur->off;
	for (int k = 0; k < WALK_MAX && off + CAS_REC_HEADER <= bound; k++) {
		const uint8_t *h = m + off;
		if (memcmp(h, CAS_REC_MAGIC, 4))
			return 0;
		uint32_t stored;
		memcpy(&stored, h + 12, 4);
		if (stored > CAS_CHUNK_MAX)
			return 0;
		const uint64_t next = off + CAS_REC_HEADER + stored;
		/* Most records are the same size (4 KiB pages): fetch the
		 * headers a few records on before they are needed. A wrong
		 * guess costs nothing but the fetch. */
		__builtin_prefetch(m + next + 4 * (CAS_REC_HEADER + (uint64_t)stored));
		if (!memcmp(h + CAS_REC_SHA, sha, 32)) {
			if (next > bound)
				return 0;
			*map = m;
			*maplen = len;
			return off;
		}
		off = next;
	}
	return 0;
}

/* The stored bytes at m+off checked and unpacked into dst. */
static int rec_take(struct cas_reader *r, uint32_t pack, const uint8_t *m, uint64_t off, const struct rec *x,
		    const uint8_t sha[32], void *dst, uint32_t len, void *bounce, bool *crc_bad)
{
	const uint8_t *data = m + off + CAS_REC_HEADER;
	*crc_bad = false;
	if (crc32c(data, x->stored) != x->crc) {
		*crc_bad = true;
		return -EBADMSG;
	}
	if (x->codec == CAS_CODEC_RAW) {
		memcpy(dst, data, len);
		return 0;
	}
	void *to = bounce ? bounce : dst;
	int n = LZ4_decompress_safe((const char *)data, to, (int)x->stored, (int)len);
	if (n < 0 || (uint32_t)n != len) {
		char path[4096], hex[65];
		cas_pack_path(r->s, pack, path, sizeof(path));
		hex_encode(sha, 32, hex);
		return crest_errx(-EBADMSG, "chunk %.16s at %s offset %llu does not decompress (damaged pack)",
				  hex, path, (unsigned long long)off);
	}
	if (bounce)
		memcpy(dst, bounce, len);
	return 0;
}

static bool rec_fits(const struct rec *x, uint32_t len)
{
	return x->raw == len && x->codec <= CAS_CODEC_LZ4 && x->stored <= CAS_CHUNK_MAX &&
	       (x->codec != CAS_CODEC_RAW || x->stored == len);
}

int cas_reader_get(struct cas_reader *r, struct cas_cursor *cur, const uint8_t sha[32], void *dst,
		   uint32_t len, void *bounce)
{
	char hex[65], path[4096];
	const uint8_t *m;
	size_t mlen;
	struct rec x;
	bool crc_bad;
	uint64_t off = walk(r, cur, sha, &m, &mlen);
	if (off) {
		rec_parse(m + off, &x);
		if (rec_fits(&x, len) && rec_take(r, cur->pack, m, off, &x, sha, dst, len, bounce, &crc_bad) == 0) {
			cur->off = off + CAS_REC_HEADER + x.stored;
			return 0;
		}
		/* Anything amiss: the index path below decides and names it. */
	}

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
	const uint64_t end = loc.off + CAS_REC_HEADER + loc.stored;
	safe_raise(r, loc.pack, end);
	m = pack_map(r, loc.pack, &mlen);
	if (!m || end > mlen || loc.stored > CAS_CHUNK_MAX) {
		/* Not mapped (appended since, or unreadable): the plain read,
		 * which checks the same and says what is wrong. */
		void *scratch = NULL;
		if (loc.codec != CAS_CODEC_RAW && !(scratch = malloc(loc.stored ? loc.stored : 1)))
			return crest_errf(-ENOMEM, "reading a chunk");
		void *to = bounce ? bounce : dst;
		rc = cas_chunk_read(r->s, sha, &loc, to, len, scratch);
		free(scratch);
		if (rc < 0)
			return rc;
		if (bounce)
			memcpy(dst, bounce, len);
	} else {
		rec_parse(m + loc.off, &x);
		if (memcmp(m + loc.off, CAS_REC_MAGIC, 4) || x.codec != loc.codec || x.raw != loc.raw ||
		    x.stored != loc.stored || memcmp(m + loc.off + CAS_REC_SHA, sha, 32)) {
			cas_pack_path(r->s, loc.pack, path, sizeof(path));
			hex_encode(sha, 32, hex);
			return crest_errx(-EBADMSG, "chunk %.16s: record header at %s offset %llu does not match "
					  "the index (damaged pack)", hex, path, (unsigned long long)loc.off);
		}
		rc = rec_take(r, loc.pack, m, loc.off, &x, sha, dst, len, bounce, &crc_bad);
		if (rc < 0 && crc_bad) {
			cas_pack_path(r->s, loc.pack, path, sizeof(path));
			hex_encode(sha, 32, hex);
			return crest_errx(-EBADMSG, "chunk %.16s at %s offset %llu fails its CRC32C check "
					  "(damaged pack)", hex, path, (unsigned long long)loc.off);
		}
		if (rc < 0)
			return rc;
	}
	*cur = (struct cas_cursor){ .pack = loc.pack, .off = end, .valid = true };
	return 0;
}
