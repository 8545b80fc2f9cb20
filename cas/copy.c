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
#include "util/sha256.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define WRITE_CAP (8u << 20)    /* records gathered before one cas_pack_write */

struct copy {
	struct cas_store *src, *dst;
	void (*progress)(uint64_t, void *);
	void *arg;
	struct cas_copy_stats *st;
	uint8_t *wbuf;              /* WRITE_CAP + one largest record */
	size_t wlen;
	uint32_t wpack;
	uint64_t woff;
	uint8_t *raw;               /* one chunk unpacked, CAS_CHUNK_MAX */
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

static int flush(struct copy *c)
{
	if (!c->wlen)
		return 0;
	const struct cas_write w = { .pack = c->wpack, .off = c->woff, .data = c->wbuf, .len = c->wlen };
	const int rc = cas_pack_write(c->dst, 0, &w, 1);
	c->wlen = 0;
	return rc;
}

/* Chunk sha from src into dst's lane 0, checked; its new place in *e. */
static int send_chunk(struct copy *c, const uint8_t sha[32], struct cas_index_entry *e)
{
	char hex[65];
	struct cas_loc loc;
	int rc = cas_chunk_lookup(c->src, sha, &loc);
	if (rc == -ENOENT) {
		hex_encode(sha, 32, hex);
		return crest_errx(-EBADMSG, "chunk %.16s is missing from %s", hex, cas_dir(c->src));
	}
	if (rc < 0)
		return rc;
	if (loc.stored > CAS_CHUNK_MAX || loc.raw > CAS_CHUNK_MAX) {
		hex_encode(sha, 32, hex);
		return crest_errx(-EBADMSG, "index entry of chunk %.16s in %s is damaged", hex, cas_dir(c->src));
	}
	memcpy(e->sha, sha, 32);
	rc = cas_pack_reserve(c->dst, 0, loc.stored, loc.raw, loc.codec, &e->loc);
	if (rc < 0)
		return rc;
	const size_t len = CAS_REC_HEADER + (size_t)loc.stored;
	/* Records reserved one after another in a lane lie back to back
	 * unless it rolled to a new pack: one write covers a run of them. */
	if (c->wlen && (e->loc.pack != c->wpack || e->loc.off != c->woff + c->wlen || c->wlen + len > WRITE_CAP))
		rc = flush(c);
	if (rc < 0)
		return rc;
	if (!c->wlen) {
		c->wpack = e->loc.pack;
		c->woff = e->loc.off;
	}
	uint8_t *rec = c->wbuf + c->wlen;
	/* The stored bytes land in the record as read (cas_chunk_read checks
	 * them against the header and its CRC32C); the unpacked bytes are
	 * checked against the id, which no copy of a damaged pack passes. */
	const bool raw = loc.codec == CAS_CODEC_RAW;
	uint8_t *data = raw ? rec + CAS_REC_HEADER : c->raw;
	rc = cas_chunk_read(c->src, sha, &loc, data, loc.raw, raw ? NULL : rec + CAS_REC_HEADER);
	if (rc < 0)
		return rc;
	uint8_t got[32];
	rc = sha256_once(data, loc.raw, got);
	if (rc < 0)
		return rc;
	if (memcmp(got, sha, 32)) {
		hex_encode(sha, 32, hex);
		return crest_errx(-EBADMSG, "chunk %.16s in %s does not match its SHA-256 (damaged pack)", hex,
				  cas_dir(c->src));
	}
	cas_rec_build(rec, sha, loc.codec, loc.raw, loc.stored);
	c->wlen += len;
	c->st->chunks_sent++;
	c->st->bytes_sent += len;
	c->st->raw_sent += loc.raw;
	return 0;
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
	bool wrote = false;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		struct cas_loc loc;
		rc = cas_chunk_lookup(c->dst, ids.v[i], &loc);
		if (rc == -ENOENT) {
			wrote = true;
			rc = send_chunk(c, ids.v[i], &e[ne]);
			ne += rc == 0;
		}
		if (c->progress && i % 64 == 63)
			c->progress(c->st->bytes_sent, c->arg);
	}
	c->st->chunks += n;
	if (rc == 0)
		rc = flush(c);
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
	if (rc < 0 && wrote)
		(void)cas_pack_discard(c->dst);
	c->wlen = 0;
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
	c.wbuf = malloc(WRITE_CAP + CAS_REC_HEADER + CAS_CHUNK_MAX);
	c.raw = malloc(CAS_CHUNK_MAX);
	int rc = c.wbuf && c.raw ? copy_one(&c, id, 0) : crest_errf(-ENOMEM, "copying a snapshot");
	free(c.wbuf);
	free(c.raw);
	return rc;
}
