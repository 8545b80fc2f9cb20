/*
 * fuzz_piece.c - the extent-list pieces of a manifest: the piece references
 * a manifest holds (cas_manifest_decode) and the pieces' own encodings
 * (cas_manifest_piece_decode), both read from the index.
 *
 * A piece is checked against its SHA-256 before it is decoded, which random
 * bytes never pass: this target names each piece by the SHA-256 of the
 * bytes it feeds, so the decoder behind the check gets the fuzzed bytes,
 * as it would get a forged or unluckily damaged piece.
 *
 * Input:  u8 np (1 + np % 4 pieces), u64 stream size, u64 extent count,
 *         then per piece: u32 n, u64 bytes, u16 len, len bytes of encoding;
 *         then u16 blen, blen bytes: the base that every delta among them
 *         is given (little-endian; a short input ends the list).
 * The manifest around them is built here, one stream, version 3. A delta's
 * base id is overwritten with the SHA-256 of the base bytes given, so that
 * the decoder goes past that check too.
 */
#include "cas/manifest.h"
#include "util/sha256.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "fuzz_piece: %s fails\n", #c); abort(); } } while (0)
#define NP_MAX 4

struct in {
	const uint8_t *p;
	size_t left;
};

static uint64_t take(struct in *in, int n)
{
	uint64_t v = 0;
	for (int i = 0; i < n && in->left; i++, in->p++, in->left--)
		v |= (uint64_t)in->p[0] << (8 * i);
	return v;
}

static void put(uint8_t **w, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		*(*w)++ = (uint8_t)(v >> (8 * i));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct in in = { data, size };
	const unsigned np = 1 + (unsigned)(take(&in, 1) % NP_MAX);
	const uint64_t ssize = take(&in, 8), ne = take(&in, 8);
	struct { uint32_t n; uint64_t bytes; uint8_t *enc; size_t len; } pc[NP_MAX];
	for (unsigned i = 0; i < np; i++) {
		pc[i].n = (uint32_t)take(&in, 4);
		pc[i].bytes = take(&in, 8);
		size_t len = (size_t)take(&in, 2);
		if (len > in.left)
			len = in.left;
		pc[i].enc = malloc(len ? len : 1);
		CHECK(pc[i].enc);
		memcpy(pc[i].enc, in.p, len);
		pc[i].len = len;
		in.p += len;
		in.left -= len;
	}
	size_t blen = (size_t)take(&in, 2);
	if (blen > in.left)
		blen = in.left;
	const uint8_t *base = in.p;
	uint8_t bsha[32];
	CHECK(sha256_once(base, blen, bsha) == 0);
	for (unsigned i = 0; i < np; i++)
		if (pc[i].len >= 33 && pc[i].enc[0] == 2)
			memcpy(pc[i].enc + 1, bsha, 32);

	/* The manifest: header, one stream named "s", its piece references. */
	uint8_t buf[128 + NP_MAX * 48], *w = buf;
	memcpy(w, "CRMF", 4);
	w += 4;
	put(&w, 3, 2);
	put(&w, 0, 2);
	put(&w, 1, 8);           /* time */
	put(&w, 5, 4);
	memcpy(w, "files", 5);
	w += 5;
	put(&w, 0, 1);           /* no parent */
	put(&w, ssize, 8);
	put(&w, 0, 4);           /* no labels */
	put(&w, 1, 4);           /* one stream */
	put(&w, 1, 4);
	*w++ = 's';
	put(&w, 4, 1);           /* a region */
	put(&w, 0600, 4);
	put(&w, 0, 8);
	put(&w, ssize, 8);
	put(&w, 0, 4);           /* target */
	put(&w, 0, 4);           /* meta */
	put(&w, ne, 8);
	put(&w, np, 4);
	for (unsigned i = 0; i < np; i++) {
		put(&w, pc[i].n, 8);
		put(&w, pc[i].bytes, 8);
		CHECK(sha256_once(pc[i].enc, pc[i].len, w) == 0);
		w += 32;
	}

	struct cas_manifest *m = NULL;
	int rc = cas_manifest_decode(buf, (size_t)(w - buf), false, &m);
	CHECK(rc == 0 || rc == -EBADMSG);
	if (rc < 0)
		goto out;
	CHECK(m->nstreams == 1 && m->npieces == np && m->streams[0].nextents == ne);
	bool all = true;
	for (unsigned i = 0; i < np; i++) {
		rc = cas_manifest_piece_decode(m, i, pc[i].enc, pc[i].len, base, blen);
		CHECK(rc == 0 || rc == -EBADMSG);
		all = all && rc == 0;
	}
	/* A decoded list is whole: its extents add up to the stream's size. */
	if (all) {
		const struct cas_stream *s = &m->streams[0];
		uint64_t sum = 0;
		for (uint64_t j = 0; j < s->nextents; j++)
			sum += s->ext[j].len;
		CHECK(sum == s->size);
	}
	/* And a piece that does not match its SHA-256 is refused. */
	if (pc[0].len) {
		uint8_t *copy = malloc(pc[0].len);
		CHECK(copy);
		memcpy(copy, pc[0].enc, pc[0].len);
		copy[0] ^= 1;
		CHECK(cas_manifest_piece_decode(m, 0, copy, pc[0].len, base, blen) == -EBADMSG);
		free(copy);
	}
	cas_manifest_free(m);
out:
	for (unsigned i = 0; i < np; i++)
		free(pc[i].enc);
	return 0;
}
