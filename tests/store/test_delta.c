/*
 * test_delta.c - extent-list pieces stored as deltas (cas/manifest.h).
 * Chains of random versions of one region (or, every other chain, of up to
 * three streams, some sharing a name), each encoded with the version
 * before it (decoded from its own encoding) as its base, now and then with
 * no base or a base without pieces, and with the cut moved
 * (CREST_PIECE_SPAN), must decode back to exactly what was encoded, from
 * the pieces the chain stored, and encode to the same bytes against
 * themselves (as a branch start and a repair encode them); and some
 * pieces must be deltas. Also a
 * region that grew past CREST_PIECE_MIN_EXTENTS, encoded against a parent
 * whose list was short enough to be inline (a base with no pieces at all):
 * that once offset the base's NULL pieces array, undefined behaviour that
 * clang's UBSan (build-fuzz) stops crest put at. And a region that
 * shrank below the length of an extent its delta's base holds. The seed is
 * printed;
 * CREST_TEST_SEED replays it.
 */
#include "cas/manifest.h"
#include "tests/check.h"

#include <stdbool.h>
#include <time.h>

#define MAX_EXT 200

static uint64_t rs;

/* The pieces a chain stored, by id (few: a linear search will do). */
struct piece {
	uint8_t sha[32];
	uint8_t *b;
	size_t len;
};
static struct piece pieces[4096];
static size_t npieces;

static const struct piece *piece_find(const uint8_t sha[32])
{
	for (size_t i = 0; i < npieces; i++)
		if (!memcmp(pieces[i].sha, sha, 32))
			return &pieces[i];
	return NULL;
}

static void pieces_clear(void)
{
	for (size_t i = 0; i < npieces; i++)
		free(pieces[i].b);
	npieces = 0;
}

/* A 4 KiB extent: a hole now and then, else one of 16 chunks, so that a
 * change may put back what an earlier version held. Holes may be long (up
 * to 256 KiB), longer than a whole later version of a short region: a
 * delta's base may hold an extent the stream has since lost. */
static void ext_random(struct cas_extent *e)
{
	memset(e, 0, sizeof(*e));
	e->len = 4096;
	e->hole = check_rnd(&rs) % 8 == 0;
	if (e->hole && check_rnd(&rs) % 2)
		e->len *= 1 + check_rnd(&rs) % 64;
	if (!e->hole) {
		e->sha[0] = (uint8_t)(check_rnd(&rs) % 16);
		e->sha[1] = 1;
	}
}

/* A manifest of the n extents at ext: one stream "region", or (multi) one
 * to three streams named "x" or "y", the later ones shortened or rotated
 * copies. Two streams may share a name: no writer makes such a manifest,
 * but one encoded against itself must still keep its bytes (it once did
 * not: each stream was paired with the first of its name). */
static struct cas_manifest *region(const struct cas_extent *ext, uint64_t n, bool multi)
{
	struct cas_manifest *m = cas_manifest_new("library");
	const unsigned ns = multi ? 1 + (unsigned)(check_rnd(&rs) % 3) : 1;
	for (unsigned k = 0; m && k < ns; k++) {
		const char *name = !multi ? "region" : check_rnd(&rs) % 2 ? "x" : "y";
		const uint64_t nn = n - (k ? check_rnd(&rs) % (n / 2 + 1) : 0);
		const uint64_t rot = k && check_rnd(&rs) % 2 ? check_rnd(&rs) % n : 0;
		struct cas_stream *s = cas_manifest_add_stream(m, name, CAS_STREAM_REGION);
		if (!s || !(s->ext = malloc(n * sizeof(*s->ext)))) {
			fprintf(stderr, "FAIL: out of memory\n");
			exit(1);
		}
		s->nextents = nn;
		s->size = 0;
		for (uint64_t j = 0; j < nn; j++) {
			s->ext[j] = ext[(j + rot) % n];
			s->size += s->ext[j].len;
		}
		m->logical_bytes += s->size;
	}
	if (!m) {
		fprintf(stderr, "FAIL: out of memory\n");
		exit(1);
	}
	return m;
}

/* Encodes m against base, stores its pieces, decodes it back (pieces and
 * deltas' bases from the store) and compares. The decoded manifest, or
 * NULL on a failure (counted). *deltas counts its delta pieces. */
static struct cas_manifest *roundtrip(const struct cas_manifest *m, const struct cas_manifest *base,
				      uint64_t *deltas)
{
	struct cas_encoded enc;
	OK(cas_manifest_encode(m, base, &enc));
	for (size_t i = 0; i < enc.npieces; i++) {
		const struct cas_piece *p = &enc.pieces[i];
		if (piece_find(p->sha))
			continue;
		if (npieces == sizeof(pieces) / sizeof(pieces[0])) {
			fprintf(stderr, "FAIL: more pieces than the test keeps\n");
			exit(1);
		}
		struct piece *q = &pieces[npieces++];
		memcpy(q->sha, p->sha, 32);
		q->len = p->len;
		q->b = malloc(p->len);
		memcpy(q->b, enc.pbuf + p->off, p->len);
	}
	struct cas_manifest *d = NULL;
	const int rc = cas_manifest_decode(enc.buf, enc.len, false, &d);
	const size_t len = enc.len;
	uint8_t *buf = malloc(len);
	memcpy(buf, enc.buf, len);
	cas_encoded_free(&enc);
	CHECK(rc == 0, "an encoded manifest does not decode: %d", rc);
	if (rc < 0) {
		free(buf);
		return NULL;
	}
	bool ok = true;
	for (size_t i = 0; ok && i < d->npieces; i++) {
		const struct piece *p = piece_find(d->pieces[i].sha), *b = NULL;
		uint8_t bsha[32];
		if (p && cas_piece_base(p->b, p->len, bsha) == 1)
			b = piece_find(bsha);
		ok = p && cas_manifest_piece_decode(d, i, p->b, p->len, b ? b->b : NULL, b ? b->len : 0) == 0;
		CHECK(ok, "piece %zu does not decode (%s)", i, !p ? "not stored" : "bad, or its base not stored");
		*deltas += d->pieces[i].delta;
	}
	/* Encoded again with itself as its base, as a branch start and a
	 * repair do, it keeps its bytes (so its id), deltas and all. */
	if (ok) {
		struct cas_encoded again;
		OK(cas_manifest_encode(d, d, &again));
		ok = again.len == len && !memcmp(again.buf, buf, len);
		CHECK(ok, "a decoded manifest encoded against itself changes");
		cas_encoded_free(&again);
	}
	free(buf);
	ok = ok && m->nstreams == d->nstreams;
	for (size_t si = 0; ok && si < m->nstreams; si++) {
		const struct cas_stream *x = &m->streams[si], *y = &d->streams[si];
		ok = x->nextents == y->nextents;
		for (uint64_t j = 0; ok && j < x->nextents; j++) {
			const struct cas_extent *a = &x->ext[j], *b = &y->ext[j];
			ok = a->len == b->len && a->hole == b->hole && (a->hole || !memcmp(a->sha, b->sha, 32));
			CHECK(ok, "stream %zu, extent %llu decodes different", si, (unsigned long long)j);
		}
	}
	if (!ok) {
		cas_manifest_free(d);
		return NULL;
	}
	return d;
}

static void span_random(void)
{
	char v[32];
	snprintf(v, sizeof(v), "%llu", (unsigned long long)(4096 * (1 + check_rnd(&rs) % 20)));
	setenv("CREST_PIECE_SPAN", v, 1);
}

int main(void)
{
	const char *env = getenv("CREST_TEST_SEED");
	const uint64_t seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL);
	rs = seed | 1;
	printf("seed %llu (CREST_TEST_SEED replays it)\n", (unsigned long long)seed);
	setenv("CREST_PIECE_MIN_EXTENTS", "4", 1);
	static struct cas_extent ext[MAX_EXT];

	/* Grown past the inline limit: the base has no pieces. */
	setenv("CREST_PIECE_SPAN", "16384", 1);
	for (int i = 0; i < 8; i++) {
		ext_random(&ext[i]);
		ext[i].len = 4096;   /* 2 to a span */
	}
	uint64_t deltas = 0;
	struct cas_manifest *small = region(ext, 3, false), *grown = region(ext, 8, false);
	struct cas_manifest *base = roundtrip(small, NULL, &deltas);
	CHECK(base && base->npieces == 0, "a list of 3 extents is not inline");
	struct cas_manifest *d = base ? roundtrip(grown, base, &deltas) : NULL;
	CHECK(d && d->npieces == 2, "a list of 8 extents is not 2 pieces");
	cas_manifest_free(d);
	cas_manifest_free(base);
	cas_manifest_free(small);
	cas_manifest_free(grown);
	pieces_clear();

	/* Shrunk: a long hole (1 MiB) replaced by one chunk. The delta's base
	 * holds an extent longer than the whole region now is; the reader
	 * once bounded the base's extents by the new size and called such a
	 * snapshot damaged (CI, seed 255990143 of store.model). */
	setenv("CREST_PIECE_SPAN", "1073741824", 1);
	for (int i = 0; i < 4; i++)
		ext_random(&ext[i]);
	memset(&ext[0], 0, sizeof(ext[0]));
	ext[0].hole = true;
	ext[0].len = 1 << 20;
	struct cas_manifest *longer = region(ext, 4, false);
	memset(&ext[0], 0, sizeof(ext[0]));
	ext[0].len = 4096;
	ext[0].sha[0] = 99;
	struct cas_manifest *shorter = region(ext, 4, false);
	deltas = 0;
	base = roundtrip(longer, NULL, &deltas);
	d = base ? roundtrip(shorter, base, &deltas) : NULL;
	CHECK(d && d->npieces == 1 && d->pieces[0].delta,
	      "a region that lost a long hole does not decode as a delta of its longer version");
	cas_manifest_free(d);
	cas_manifest_free(base);
	cas_manifest_free(longer);
	cas_manifest_free(shorter);
	pieces_clear();

	/* Chains. */
	deltas = 0;
	unsigned steps = 0;
	for (int chain = 0; chain < 300; chain++) {
		uint64_t n = 4 + check_rnd(&rs) % 120;
		for (uint64_t j = 0; j < n; j++)
			ext_random(&ext[j]);
		span_random();
		struct cas_manifest *prev = NULL;
		for (int step = 0; step < 12; step++, steps++) {
			if (check_rnd(&rs) % 6 == 0)
				span_random();
			if (step) {
				for (uint64_t c = check_rnd(&rs) % 4; c; c--)
					ext_random(&ext[check_rnd(&rs) % n]);
				if (check_rnd(&rs) % 10 == 0 && n < MAX_EXT)
					ext_random(&ext[n++]);
			}
			struct cas_manifest *m = region(ext, n, chain % 2);
			const uint64_t how = check_rnd(&rs) % 16;
			/* how 1: m itself, built, has no pieces (a parent's short list) */
			struct cas_manifest *r = roundtrip(m, how == 0 ? NULL : how == 1 ? m : prev, &deltas);
			cas_manifest_free(m);
			cas_manifest_free(prev);
			prev = r;
			if (!r)
				break;
		}
		cas_manifest_free(prev);
		pieces_clear();
		if (failures)
			break;
	}
	CHECK(deltas > 100, "only %llu delta pieces in %u versions", (unsigned long long)deltas, steps);
	if (failures)
		return 1;
	printf("ok: %u versions decode as encoded, %llu delta pieces\n", steps, (unsigned long long)deltas);
	return 0;
}
