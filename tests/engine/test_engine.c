/*
 * test_engine.c - the ingest engine driven directly, with faults injected.
 *
 *   test_engine CASE STORE_DIR [SEED]
 *
 * Cases:
 *   deadlock  many workers, many snapshots whose segments hold the same few
 *             chunks in random orders, and a writer that has failed: every
 *             batch is dropped, and the workers that waited for its chunks
 *             store them themselves. No two of them may end up waiting for
 *             each other: each round must finish within a time bound.
 *
 *   chunks    engine_stream_add_chunks against a model: a region of random
 *             size is checkpointed round after round, some chunks changed
 *             (new bytes, zeros, copies of other chunks) and given as the
 *             only chunks in data, the rest named from the parent, in
 *             appends of random sizes, with ids or without. Every round's
 *             snapshot must restore to the model's bytes and name the same
 *             chunks as the same bytes put whole with engine_stream_add_memory
 *             (the path that hashes every chunk). Chunks given as unchanged
 *             past the parent's end, or with no parent, must fail the
 *             snapshot (or the call) and commit nothing.
 *
 *   lz4       which new chunks are stored compressed, against a model of
 *             engine.h's rule (ENGINE_LZ4_PROBE, _UPTO): distinct chunks of random
 *             kinds (random bytes; a repeated pattern; a pattern after a
 *             random head longer than the probe; a pattern head and random
 *             rest) and random lengths, put whole; each chunk's codec in the
 *             index must be the model's (liblz4 asked here), and the
 *             snapshot must restore to the model's bytes. Fails if the
 *             engine compresses fewer chunks than the rule says
 *             (compressible data stored raw) or more (the rule not applied).
 *
 *   once      every distinct chunk stored once, with snapshots in flight
 *             while the ones before them commit: rounds of snapshots, each
 *             begun before the last commits, whose chunks are mostly the
 *             last one's (written, not yet committed), with new and repeated
 *             ones among them, while CREST_TEST_LOOKUP_SLEEP_US holds each
 *             worker between its index look-up and its visit to the table
 *             of uncommitted chunks. The new chunks the snapshots report
 *             must sum to the distinct chunks put (a commit taking a chunk
 *             from that table to the index in the gap must not make it
 *             stored twice), and every snapshot must restore to its bytes.
 *
 *   guided    a file stream (cdc, random average size and segment size) put
 *             round after round, each a random edit of the last (bytes
 *             overwritten, inserted, deleted, zeroed, appended, cut off),
 *             in appends of random sizes, with the last as its parent: the
 *             cuts the engine takes from the parent without a scan must be
 *             exactly the cuts of the same bytes put with no parent, every
 *             snapshot must restore to the model's bytes, and some cuts
 *             must have been taken (or the case tested nothing). Then the
 *             same bytes from an engine whose chunker differs (another
 *             average size): none of the parent's cuts may be taken.
 *
 * Exits 0 on success, 1 on failure (a hang included: waits are bounded).
 * SEED (else $CREST_TEST_SEED, else the clock) is printed; pass it to replay.
 */
#include "cas/cas.h"
#include "engine/engine.h"
#include "util/err.h"
#include "util/sha256.h"
#include "tests/check.h"

#include <lz4.h>

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHUNK 4096u
#define SEG (8 * CHUNK)          /* the engine's segment: 8 chunks */

static uint64_t rng_state;

static uint64_t rng(void)
{
	return check_rnd(&rng_state);
}

static void fill(uint8_t *p, size_t n)
{
	for (size_t i = 0; i + 8 <= n; i += 8) {
		uint64_t v = rng();
		memcpy(p + i, &v, 8);
	}
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static struct cas_store *fresh_store(const char *dir)
{
	char cmd[4200];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0) {
		fprintf(stderr, "FAIL: cannot clear %s\n", dir);
		exit(1);
	}
	struct cas_store *s;
	OK(cas_init(dir));
	OK(cas_open(dir, CAS_WRITE, &s));
	return s;
}

static void opts(struct engine_opts *o, unsigned workers)
{
	engine_opts_default(o);
	o->workers = workers;
	o->segment_bytes = SEG;
	dedup_params_init(&o->memory_chunking, DEDUP_FIXED, CHUNK);
	dedup_params_init(&o->file_chunking, DEDUP_FIXED, CHUNK);
}

/* One memory stream of len bytes at p. */
/* Waits for s until deadline; a snapshot still not done then means the
 * engine hung: report and exit (its threads cannot be stopped). */
static void wait_bounded(struct engine_snap *s, uint64_t deadline, const char *what, uint64_t seed)
{
	uint64_t now = now_ns();
	if (!engine_snapshot_timedwait(s, deadline > now ? deadline - now : 0)) {
		fprintf(stderr, "FAIL: %s did not finish in time: the engine hung (seed %" PRIu64 ")\n",
			what, seed);
		fflush(stderr);
		_exit(1);
	}
}

/* See the top of the file. A probe snapshot makes the writer fail (its
 * first write is the injected fault) while the round's snapshots, begun
 * before it finishes, keep the engine from recovering: every batch they
 * queue is then refused and dropped. */
static void t_deadlock(const char *dir, uint64_t seed)
{
	enum { ROUNDS = 40, NSNAP = 48, NSEG = 8, NBLOCKS = 8 };
	const uint64_t budget_ns = 10ull * 1000000000u;   /* per round; a round takes milliseconds */
	struct cas_store *store = fresh_store(dir);
	setenv("CREST_FAULT_WRITE", "1", 1);
	struct engine_opts o;
	opts(&o, 16);
	uint8_t *blocks = malloc(NBLOCKS * CHUNK), *probe = malloc(SEG);
	uint8_t *buf = malloc((size_t)NSNAP * NSEG * SEG);
	if (!blocks || !probe || !buf) {
		fprintf(stderr, "FAIL: out of memory\n");
		exit(1);
	}
	unsigned failed = 0;
	const uint64_t t0 = now_ns();
	for (unsigned r = 0; r < ROUNDS; r++) {
		fill(blocks, NBLOCKS * CHUNK);   /* new chunks every round */
		fill(probe, SEG);
		for (size_t g = 0; g < (size_t)NSNAP * NSEG; g++) {
			unsigned perm[NBLOCKS];
			for (unsigned i = 0; i < NBLOCKS; i++)
				perm[i] = i;
			for (unsigned i = NBLOCKS - 1; i > 0; i--) {
				unsigned j = (unsigned)(rng() % (i + 1)), t = perm[i];
				perm[i] = perm[j];
				perm[j] = t;
			}
			for (unsigned i = 0; i < NBLOCKS; i++)
				memcpy(buf + g * SEG + (size_t)i * CHUNK, blocks + (size_t)perm[i] * CHUNK, CHUNK);
		}
		struct engine *e;
		OK(engine_open(store, &o, &e));
		struct engine_snap *p, *s[NSNAP];
		struct engine_stream *st[NSNAP], *pst;
		/* The probe is begun first and given its data last: the snapshots
		 * begun behind it are in the commit queue when its write fails,
		 * so the engine cannot recover (it does once the queue is empty)
		 * before they are done, and every one of them must fail. */
		OK(engine_snapshot_begin(e, "test", &p));
		OK(engine_stream_open(p, "probe", CAS_STREAM_REGION, true, &pst));
		for (unsigned i = 0; i < NSNAP; i++) {
			OK(engine_snapshot_begin(e, "test", &s[i]));
			OK(engine_stream_open(s[i], "mem", CAS_STREAM_REGION, true, &st[i]));
		}
		OK(engine_stream_add_memory(pst, probe, SEG, NULL, NULL));
		OK(engine_stream_close(pst));
		OK(engine_snapshot_seal(p));
		const uint64_t deadline = now_ns() + budget_ns;
		wait_bounded(p, deadline, "the probe snapshot", seed);
		int rc = engine_snapshot_wait(p, NULL);
		CHECK(rc == -EIO, "round %u: the probe snapshot returned %d (%s), expected the injected -EIO",
		      r, rc, crest_errmsg());
		/* Segment g of every snapshot before segment g + 1 of any: the
		 * snapshots' segments are in flight together. */
		for (unsigned g = 0; g < NSEG; g++)
			for (unsigned i = 0; i < NSNAP; i++)
				OK(engine_stream_add_memory(st[i], buf + ((size_t)i * NSEG + g) * SEG, SEG, NULL, NULL));
		for (unsigned i = 0; i < NSNAP; i++) {
			OK(engine_stream_close(st[i]));
			OK(engine_snapshot_seal(s[i]));
		}
		for (unsigned i = 0; i < NSNAP; i++) {
			char what[64];
			snprintf(what, sizeof(what), "round %u, snapshot %u", r, i);
			wait_bounded(s[i], deadline, what, seed);
			rc = engine_snapshot_wait(s[i], NULL);
			/* The writer failed before any of their chunks was queued:
			 * none may commit. */
			CHECK(rc < 0, "round %u: snapshot %u committed although the writer had failed", r, i);
			failed += rc < 0;
		}
		engine_close(e);
	}
	printf("deadlock: %u rounds of %u snapshots x %u segments, 16 workers: %u failed as they must, "
	       "none hung (%.2f s)\n", ROUNDS, NSNAP, NSEG, failed, (now_ns() - t0) / 1e9);
	free(blocks);
	free(probe);
	free(buf);
	cas_close(store);
}

/* ---- chunks ---- */

/* Reads stream name of snapshot id back from the store into out (len bytes):
 * holes as zeros, every chunk through the index, checked. */
static int read_stream(struct cas_store *s, const uint8_t id[32], const char *name, uint8_t *out, uint64_t len,
		       struct cas_manifest **mout)
{
	struct cas_manifest *m;
	int rc = cas_manifest_load(s, id, &m);
	if (rc < 0)
		return rc;
	const struct cas_stream *st = cas_manifest_find(m, name);
	if (!st || st->size != len) {
		cas_manifest_free(m);
		return crest_errx(-EINVAL, "stream %s missing or of the wrong size", name);
	}
	struct cas_reader *r;
	rc = cas_reader_open(s, &r);
	uint64_t off = 0;
	for (uint64_t i = 0; rc == 0 && i < st->nextents; i++) {
		const struct cas_extent *x = &st->ext[i];
		if (x->hole)
			memset(out + off, 0, x->len);
		else
			rc = cas_reader_get(r, x->sha, out + off, (uint32_t)x->len, NULL);
		off += x->len;
	}
	if (rc == 0)
		cas_reader_close(r);
	if (rc == 0 && off != len)
		rc = crest_errx(-EINVAL, "extents cover %" PRIu64 " of %" PRIu64 " bytes", off, len);
	if (rc == 0 && mout)
		*mout = m;
	else
		cas_manifest_free(m);
	return rc;
}

static int same_extents(const struct cas_manifest *a, const struct cas_manifest *b, const char *name)
{
	const struct cas_stream *x = cas_manifest_find(a, name), *y = cas_manifest_find(b, name);
	if (!x || !y || x->nextents != y->nextents)
		return 0;
	for (uint64_t i = 0; i < x->nextents; i++)
		if (x->ext[i].len != y->ext[i].len || x->ext[i].hole != y->ext[i].hole ||
		    (!x->ext[i].hole && memcmp(x->ext[i].sha, y->ext[i].sha, 32)))
			return 0;
	return 1;
}

static void free_cb(void *arg)
{
	free(arg);
}

struct three {
	void *p[3];
};

static void free_three(void *arg)
{
	struct three *t = arg;
	for (int i = 0; i < 3; i++)
		free(t->p[i]);
	free(t);
}

/* Closes st and seals snap (aborts it when rc < 0), waits for its commit:
 * its id in id, and what the engine said of it in *res unless res is NULL. */
static int snap_end(struct engine_snap *snap, struct engine_stream *st, int rc, uint8_t id[32],
		    struct engine_result *res)
{
	if (rc == 0)
		rc = engine_stream_close(st);
	if (rc < 0) {
		engine_snapshot_abort(snap);
		return rc;
	}
	engine_snapshot_seal(snap);
	struct engine_result own;
	if (!res)
		res = &own;
	rc = engine_snapshot_wait(snap, res);
	if (rc == 0)
		memcpy(id, res->id, 32);
	return rc;
}

/* One snapshot of the region model[0..len) with parent (pid, pm: taken),
 * given through engine_stream_add_chunks: changed[] marks the chunks put in
 * data (the rest the parent's), ids with them when with_ids. Fills id. */
static int snap_chunks(struct engine *e, const uint8_t *pid, struct cas_manifest *pm, const uint8_t *model,
		       uint64_t len, const uint8_t *changed, bool sparse, bool with_ids, uint8_t id[32])
{
	const uint64_t nch = (len + CHUNK - 1) / CHUNK;
	struct engine_snap *snap;
	int rc = engine_snapshot_begin(e, "library", &snap);
	if (rc < 0)
		return rc;
	if (pid)
		engine_snapshot_set_parent(snap, pid, pm);
	struct engine_stream *st;
	rc = engine_stream_open(snap, "r", CAS_STREAM_REGION, true, &st);
	uint64_t c0 = 0;
	while (rc == 0 && c0 < nch) {
		/* An append of 1 to nch chunks, cut anywhere. */
		uint64_t c1 = c0 + 1 + rng() % (nch - c0);
		const uint64_t blen = (c1 == nch ? len : c1 * CHUNK) - c0 * CHUNK;
		uint32_t *idx = sparse ? malloc((c1 - c0) * sizeof(*idx)) : NULL;
		uint8_t *data = malloc(blen + 1), *ids = with_ids ? malloc((c1 - c0) * 32 + 1) : NULL;
		size_t k = 0;
		uint64_t at = 0;
		for (uint64_t c = c0; c < c1; c++) {
			if (sparse && !changed[c])
				continue;
			const uint64_t n = c == nch - 1 ? len - c * CHUNK : CHUNK;
			memcpy(data + at, model + c * CHUNK, n);
			if (ids)
				sha256_once(model + c * CHUNK, n, ids + k * 32);
			if (idx)
				idx[k] = (uint32_t)(c - c0);
			k++;
			at += n;
		}
		/* The engine reads them until it releases them. */
		struct three *hold = malloc(sizeof(*hold));
		hold->p[0] = data, hold->p[1] = idx, hold->p[2] = ids;
		rc = engine_stream_add_chunks(st, blen, idx, k, data, ids, free_three, hold);
		c0 = c1;
	}
	return snap_end(snap, st, rc, id, NULL);
}

/* The same bytes whole, hashed by the workers: the reference. */
static int snap_whole(struct engine *e, const uint8_t *model, uint64_t len, uint8_t id[32])
{
	struct engine_snap *snap;
	int rc = engine_snapshot_begin(e, "library", &snap);
	if (rc < 0)
		return rc;
	struct engine_stream *st;
	rc = engine_stream_open(snap, "r", CAS_STREAM_REGION, true, &st);
	uint8_t *copy = malloc(len + 1);
	memcpy(copy, model, len);
	if (rc == 0)
		rc = engine_stream_add_memory(st, copy, len, free_cb, copy);
	else
		free(copy);
	return snap_end(snap, st, rc, id, NULL);
}

static void t_chunks(const char *dir, uint64_t seed)
{
	struct cas_store *store = fresh_store(dir);
	struct engine_opts o;
	opts(&o, 1 + (unsigned)(rng() % 4));
	struct engine *e;
	OK(engine_open(store, &o, &e));
	const uint64_t nfull = 1 + rng() % 80, tail = rng() % 3 ? 0 : 1 + rng() % (CHUNK - 1);
	const uint64_t len = nfull * CHUNK + tail, nch = (len + CHUNK - 1) / CHUNK;
	uint8_t *model = malloc(len), *back = malloc(len), *changed = calloc(nch, 1);
	fill(model, len);
	for (uint64_t c = 0; c < nch; c += 1 + rng() % 5)   /* some zero chunks from the start */
		memset(model + c * CHUNK, 0, c == nch - 1 ? len - c * CHUNK : CHUNK);
	printf("chunks: %" PRIu64 " bytes (%" PRIu64 " chunks), %u workers\n", len, nch, o.workers);
	uint8_t pid[32], ref[32];
	OK(snap_whole(e, model, len, pid));
	const int rounds = 12;
	for (int r = 0; r < rounds; r++) {
		memset(changed, 0, nch);
		const uint64_t nchg = rng() % (nch + 1);
		for (uint64_t i = 0; i < nchg; i++) {
			const uint64_t c = rng() % nch, n = c == nch - 1 ? len - c * CHUNK : CHUNK;
			uint8_t *p = model + c * CHUNK;
			switch (rng() % 4) {
			case 0: memset(p, 0, n); break;                            /* to zeros */
			case 1: {                                                  /* a copy of another chunk */
				const uint64_t d = rng() % nfull;
				memmove(p, model + d * CHUNK, n);
				break;
			}
			default: fill(p, n & ~(uint64_t)7); break;                 /* new bytes */
			}
			changed[c] = 1;
		}
		for (uint64_t i = rng() % 3; i; i--)   /* a chunk given that did not change */
			changed[rng() % nch] = 1;
		const bool sparse = rng() % 4 != 0, with_ids = rng() % 2;
		struct cas_manifest *pm = NULL;
		OK(cas_manifest_load(store, pid, &pm));
		uint8_t id[32];
		int rc = snap_chunks(e, pid, pm, model, len, changed, sparse, with_ids, id);
		CHECK(rc == 0, "round %d (%s, %s ids): the snapshot failed: %s (seed %" PRIu64 ")", r,
		      sparse ? "sparse" : "whole", with_ids ? "with" : "no", crest_errmsg(), seed);
		if (rc < 0)
			break;
		struct cas_manifest *m = NULL, *mref = NULL;
		rc = read_stream(store, id, "r", back, len, &m);
		CHECK(rc == 0 && !memcmp(back, model, len), "round %d: the snapshot does not restore to the "
		      "model's bytes (%s; seed %" PRIu64 ")", r, rc ? crest_errmsg() : "bytes differ", seed);
		OK(snap_whole(e, model, len, ref));
		OK(read_stream(store, ref, "r", back, len, &mref));
		CHECK(m && same_extents(m, mref, "r"), "round %d: the chunks given differ from the same bytes "
		      "hashed whole (seed %" PRIu64 ")", r, seed);
		CHECK(m && m->has_parent && !memcmp(m->parent, pid, 32), "round %d: wrong parent", r);
		cas_manifest_free(m);
		cas_manifest_free(mref);
		memcpy(pid, id, 32);
	}
	/* Unchanged chunks past the parent's end: the snapshot fails. */
	uint8_t *big = calloc(len + 2 * CHUNK, 1);
	memcpy(big, model, len);
	fill(big + len, 2 * CHUNK);
	uint8_t *none = calloc((len + 2 * CHUNK) / CHUNK + 1, 1);
	struct cas_manifest *pm = NULL;
	OK(cas_manifest_load(store, pid, &pm));
	uint8_t id[32];
	int rc = snap_chunks(e, pid, pm, big, len + 2 * CHUNK - (tail ? CHUNK - tail : 0), none, true, false, id);
	CHECK(rc == -EINVAL, "chunks past the parent's end given as unchanged: rc %d, want -EINVAL (%s)", rc,
	      rc ? crest_errmsg() : "it committed");
	/* No parent at all: the call itself refuses. */
	rc = snap_chunks(e, NULL, NULL, model, len, none, true, false, id);
	CHECK(rc == -EINVAL, "chunks given as unchanged with no parent: rc %d, want -EINVAL", rc);
	engine_close(e);
	/* Only the snapshots that succeeded are in the store: 1 + 2 per round. */
	struct cas_manifest *head = NULL;
	OK(cas_manifest_load(store, pid, &head));
	cas_manifest_free(head);
	free(big);
	free(none);
	free(model);
	free(back);
	free(changed);
	cas_close(store);
}

/* ---- lz4 ---- */

/* Whether LZ4 shrinks p[0..n), asked here as the engine asks it: a block
 * of its own from a stream state reset fast (whose output does not depend
 * on what the state compressed before; LZ4_compress_default's, which picks
 * a smaller table for small input, can differ by a few bytes). */
static bool lz_shrinks(LZ4_stream_t *lz, const uint8_t *p, size_t n)
{
	char *out = malloc((size_t)LZ4_compressBound((int)n));
	LZ4_resetStream_fast(lz);
	const int c = LZ4_compress_fast_continue(lz, (const char *)p, out, (int)n, LZ4_compressBound((int)n), 1);
	free(out);
	return c > 0 && (size_t)c < n;
}

static void t_lz4(const char *dir, uint64_t seed)
{
	struct cas_store *store = fresh_store(dir);
	struct engine_opts o;
	opts(&o, 1 + (unsigned)(rng() % 4));
	/* Chunked by content (avg CHUNK), so that chunks of many lengths,
	 * below the probe and far above it, meet the rule. */
	dedup_params_init(&o.memory_chunking, DEDUP_CDC, CHUNK);
	struct engine *e;
	OK(engine_open(store, &o, &e));
	const uint64_t len = 64 * CHUNK + rng() % (192 * CHUNK);
	uint8_t *model = malloc(len), *back = malloc(len);
	fill(model, len & ~(uint64_t)7);
	memset(model + (len & ~(uint64_t)7), 0x5a, len & 7);
	/* Stretches of random kinds and lengths over random bytes: left
	 * random; a 16-byte pattern repeated; a random head longer than the
	 * probe, then the pattern; the pattern for as long, then random. A
	 * counter every 512 bytes keeps chunks distinct. */
	for (uint64_t at = 0; at < len;) {
		const uint64_t n = 64 + rng() % (3 * CHUNK), end = at + n < len ? at + n : len;
		const uint64_t head = at + ENGINE_LZ4_PROBE + rng() % 512;
		uint64_t from = end, to = end;   /* [from, to): the pattern */
		switch (rng() % 4) {
		case 1: from = at + 16, to = end; break;
		case 2: from = head + 16, to = end; break;
		case 3: from = at + 16, to = head < end ? head : end; break;
		}
		for (uint64_t i = from; i < to; i++)
			model[i] = model[i - 16];
		for (uint64_t i = at; i + 8 <= end; i += 512)
			memcpy(model + i, &i, 8);
		at = end;
	}
	uint8_t id[32];
	OK(snap_whole(e, model, len, id));
	engine_close(e);
	struct cas_manifest *m = NULL;
	OK(read_stream(store, id, "r", back, len, &m));
	CHECK(!memcmp(back, model, len), "the snapshot does not restore to the model's bytes (seed %" PRIu64 ")",
	      seed);
	const struct cas_stream *st = m ? cas_manifest_find(m, "r") : NULL;
	LZ4_stream_t *lz = LZ4_createStream();
	uint64_t bad = 0, nlz = 0, want_lz = 0, n = 0, off = 0, nprobed = 0;
	for (uint64_t i = 0; st && i < st->nextents; off += st->ext[i].len, i++) {
		const struct cas_extent *x = &st->ext[i];
		if (x->hole)
			continue;
		const uint8_t *p = model + off;
		const bool probed = x->len > ENGINE_LZ4_PROBE && x->len <= ENGINE_LZ4_PROBE_UPTO;
		const bool want = (!probed || lz_shrinks(lz, p, ENGINE_LZ4_PROBE)) && lz_shrinks(lz, p, x->len);
		nprobed += probed;
		struct cas_loc loc;
		const int rc = cas_chunk_lookup(store, x->sha, &loc);
		CHECK(rc == 0, "chunk at %" PRIu64 " is not in the index (seed %" PRIu64 ")", off, seed);
		const bool got = rc == 0 && loc.codec == CAS_CODEC_LZ4;
		if (rc == 0 && got != want && !bad++)
			fprintf(stderr, "lz4: the %" PRIu64 "-byte chunk at %" PRIu64 " is stored %s, the model "
				"says %s\n", (uint64_t)x->len, off, got ? "LZ4" : "raw", want ? "LZ4" : "raw");
		nlz += got;
		want_lz += want;
		n++;
	}
	printf("lz4: %" PRIu64 " bytes, %" PRIu64 " chunks (%" PRIu64 " probed), %u workers: %" PRIu64 " stored LZ4, "
	       "the model %" PRIu64 "\n", len, n, nprobed, o.workers, nlz, want_lz);
	CHECK(nprobed > 0 && nprobed < n, "%" PRIu64 " of %" PRIu64 " chunks in the probe's range: the data should "
	      "hold some of each kind (seed %" PRIu64 ")", nprobed, n, seed);
	CHECK(st && bad == 0, "%" PRIu64 " chunks stored otherwise than the model says (seed %" PRIu64 ")", bad,
	      seed);
	LZ4_freeStream(lz);
	cas_manifest_free(m);
	free(model);
	free(back);
	cas_close(store);
}

/* ---- once ---- */

static void t_once(const char *dir, uint64_t seed)
{
	enum { POOL = 192, ROUNDS = 8, MAXLEN = 160 };
	char us[32];
	snprintf(us, sizeof(us), "%u", 200 + (unsigned)(rng() % 1800));
	setenv("CREST_TEST_LOOKUP_SLEEP_US", us, 1);
	struct cas_store *store = fresh_store(dir);
	struct engine_opts o;
	opts(&o, 2 + (unsigned)(rng() % 3));
	struct engine *e;
	OK(engine_open(store, &o, &e));
	unsetenv("CREST_TEST_LOOKUP_SLEEP_US");
	printf("once: %u workers, %s us between look-up and table\n", o.workers, us);
	uint8_t *pool = malloc((size_t)POOL * CHUNK);
	fill(pool, (size_t)POOL * CHUNK);
	uint8_t used[POOL] = { 0 };
	uint32_t prev[MAXLEN], cur[MAXLEN];
	size_t nprev = 0;
	uint8_t *bytes[ROUNDS];
	size_t lens[ROUNDS];
	struct engine_snap *snaps[ROUNDS];
	for (int r = 0; r < ROUNDS; r++) {
		/* Mostly the last round's chunks, in another order; some new
		 * (possibly twice in this round), some from any earlier round. */
		const size_t n = 16 + rng() % (MAXLEN - 16);
		for (size_t i = 0; i < n; i++) {
			const unsigned k = (unsigned)(rng() % 10);
			cur[i] = nprev && k < 7 ? prev[rng() % nprev] : (uint32_t)(rng() % POOL);
		}
		uint8_t *b = malloc(n * CHUNK);
		for (size_t i = 0; i < n; i++) {
			memcpy(b + i * CHUNK, pool + (size_t)cur[i] * CHUNK, CHUNK);
			used[cur[i]] = 1;
		}
		uint8_t *copy = malloc(n * CHUNK);
		memcpy(copy, b, n * CHUNK);
		bytes[r] = b;
		lens[r] = n * CHUNK;
		struct engine_stream *st;
		OK(engine_snapshot_begin(e, "once", &snaps[r]));
		OK(engine_stream_open(snaps[r], "r", CAS_STREAM_REGION, true, &st));
		OK(engine_stream_add_memory(st, copy, n * CHUNK, free_cb, copy));
		OK(engine_stream_close(st));
		engine_snapshot_seal(snaps[r]);   /* the next begins before this commits */
		memcpy(prev, cur, n * sizeof(*cur));
		nprev = n;
	}
	uint64_t new_chunks = 0, distinct = 0;
	for (int i = 0; i < POOL; i++)
		distinct += used[i];
	for (int r = 0; r < ROUNDS; r++) {
		wait_bounded(snaps[r], now_ns() + 60ull * 1000000000u, "a snapshot", seed);
		struct engine_result res;
		const int rc = engine_snapshot_wait(snaps[r], &res);
		CHECK(rc == 0, "round %d: the snapshot failed: %s (seed %" PRIu64 ")", r, crest_errmsg(), seed);
		if (rc < 0)
			continue;
		new_chunks += res.new_chunks;
		uint8_t *back = malloc(lens[r]);
		struct cas_manifest *m = NULL;
		const int rrc = read_stream(store, res.id, "r", back, lens[r], &m);
		CHECK(rrc == 0 && !memcmp(back, bytes[r], lens[r]), "round %d: the snapshot does not restore to "
		      "its bytes (seed %" PRIu64 ")", r, seed);
		cas_manifest_free(m);
		free(back);
	}
	CHECK(new_chunks == distinct, "%" PRIu64 " distinct chunks put, but the snapshots stored %" PRIu64
	      " new chunks: a chunk was stored %s (seed %" PRIu64 ")", distinct, new_chunks,
	      new_chunks > distinct ? "twice" : "by none", seed);
	printf("once: %d snapshots, %" PRIu64 " distinct chunks stored once each\n", ROUNDS, distinct);
	engine_close(e);
	for (int r = 0; r < ROUNDS; r++)
		free(bytes[r]);
	free(pool);
	cas_close(store);
}

/* ---- guided ---- */

/* One "files" snapshot of model[0..len) as stream "f", with parent (pid, pm:
 * taken) unless pid is NULL, in appends of random sizes drawn from split:
 * the same split, the same appends. (Chunking starts again at every
 * segment, and an append starts a segment, so only the same appends give
 * the same cuts; the parent's may differ.) */
static int snap_file(struct engine *e, const uint8_t *pid, struct cas_manifest *pm, const uint8_t *model,
		     uint64_t len, uint64_t split, uint8_t id[32], struct engine_result *res)
{
	uint64_t saved = rng_state;
	rng_state = split | 1;
	struct engine_snap *snap;
	int rc = engine_snapshot_begin(e, "files", &snap);
	if (rc < 0) {
		cas_manifest_free(pm);
		return rc;
	}
	if (pid)
		engine_snapshot_set_parent(snap, pid, pm);
	struct engine_stream *st;
	rc = engine_stream_open(snap, "f", CAS_STREAM_FILE, false, &st);
	for (uint64_t at = 0; rc == 0 && at < len;) {
		const uint64_t n = rng() % 3 ? len - at : 1 + rng() % (len - at);
		uint8_t *copy = malloc(n);
		memcpy(copy, model + at, n);
		rc = engine_stream_add_memory(st, copy, n, free_cb, copy);
		at += n;
	}
	rng_state = saved;
	return snap_end(snap, st, rc, id, res);
}

static void t_guided(const char *dir, uint64_t seed)
{
	struct cas_store *store = fresh_store(dir);
	struct engine_opts o;
	opts(&o, 1 + (unsigned)(rng() % 4));
	const uint32_t avg = 1024u << (rng() % 4);   /* 1-8 KiB: many chunks in little data */
	dedup_params_init(&o.file_chunking, DEDUP_CDC, avg);
	o.segment_bytes = (4 + rng() % 61) * CHUNK;   /* 16-256 KiB: many segment ends */
	struct engine *e;
	OK(engine_open(store, &o, &e));
	const uint64_t cap = 8u << 20;
	uint8_t *model = malloc(cap), *back = malloc(cap);
	uint64_t len = (64u << 10) + rng() % (3u << 20);
	for (uint64_t at = 0; at < len;) {
		const uint64_t n = 1 + rng() % (len - at < 65536 ? len - at : 65536);
		check_fill_kind(model, at, n, &rng_state);
		at += n;
	}
	printf("guided: cdc avg %u, segments of %zu bytes, %u workers, %" PRIu64 " bytes\n", avg,
	       o.segment_bytes, o.workers, len);
	uint8_t pid[32], id[32], ref[32];
	struct engine_result res;
	OK(snap_file(e, NULL, NULL, model, len, rng(), pid, &res));
	uint64_t guided = 0, chunks = 0;
	for (int r = 0; r < 10 && !failures; r++) {
		for (uint64_t k = 1 + rng() % 6; k; k--) {
			const uint64_t at = rng() % (len + 1), n = 1 + rng() % (rng() % 2 ? 64 : 40000);
			switch (rng() % 6) {
			case 0:   /* overwrite */
				if (at + n <= len)
					check_fill_kind(model, at, n, &rng_state);
				break;
			case 1:   /* insert */
				if (len + n <= cap) {
					memmove(model + at + n, model + at, len - at);
					len += n;
					check_fill_kind(model, at, n, &rng_state);
				}
				break;
			case 2:   /* delete */
				if (at + n <= len && len - n > 0) {
					memmove(model + at, model + at + n, len - at - n);
					len -= n;
				}
				break;
			case 3:   /* zeros */
				if (at + n <= len)
					memset(model + at, 0, n);
				break;
			case 4:   /* append */
				if (len + n <= cap) {
					check_fill_kind(model, len, n, &rng_state);
					len += n;
				}
				break;
			default:  /* cut off */
				if (n < len)
					len -= n;
			}
		}
		struct cas_manifest *pm = NULL, *m = NULL, *mref = NULL;
		OK(cas_manifest_load(store, pid, &pm));
		const uint64_t split = rng();
		int rc = snap_file(e, pid, pm, model, len, split, id, &res);
		CHECK(rc == 0, "round %d: the snapshot failed: %s (seed %" PRIu64 ")", r, crest_errmsg(), seed);
		if (rc < 0)
			break;
		guided += res.guided_chunks;
		chunks += res.chunks;
		OK(snap_file(e, NULL, NULL, model, len, split, ref, &res));
		CHECK(res.guided_chunks == 0, "round %d: %" PRIu64 " cuts taken with no parent", r, res.guided_chunks);
		rc = read_stream(store, id, "f", back, len, &m);
		CHECK(rc == 0 && !memcmp(back, model, len), "round %d: the snapshot does not restore to the model's "
		      "bytes (%s; seed %" PRIu64 ")", r, rc ? crest_errmsg() : "bytes differ", seed);
		OK(read_stream(store, ref, "f", back, len, &mref));
		CHECK(m && same_extents(m, mref, "f"), "round %d: the cuts taken from the parent differ from the "
		      "same bytes' own (seed %" PRIu64 ")", r, seed);
		cas_manifest_free(m);
		cas_manifest_free(mref);
		memcpy(pid, id, 32);
	}
	printf("guided: %" PRIu64 " of %" PRIu64 " chunks cut where the parent's ended\n", guided, chunks);
	CHECK(guided > 0, "no cut was taken from a parent: the case tested nothing (seed %" PRIu64 ")", seed);
	engine_close(e);

	/* Another chunker: the parent's label differs, so none of its cuts. */
	struct engine_opts o2 = o;
	dedup_params_init(&o2.file_chunking, DEDUP_CDC, avg * 2);
	OK(engine_open(store, &o2, &e));
	struct cas_manifest *pm = NULL, *m = NULL, *mref = NULL;
	OK(cas_manifest_load(store, pid, &pm));
	const uint64_t split = rng();
	OK(snap_file(e, pid, pm, model, len, split, id, &res));
	CHECK(res.guided_chunks == 0, "%" PRIu64 " cuts taken from a parent cut by another chunker (seed %" PRIu64
	      ")", res.guided_chunks, seed);
	OK(snap_file(e, NULL, NULL, model, len, split, ref, &res));
	OK(read_stream(store, id, "f", back, len, &m));
	OK(read_stream(store, ref, "f", back, len, &mref));
	CHECK(same_extents(m, mref, "f"), "a parent cut by another chunker changed the cuts (seed %" PRIu64 ")", seed);
	cas_manifest_free(m);
	cas_manifest_free(mref);
	engine_close(e);
	free(model);
	free(back);
	cas_close(store);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: test_engine CASE STORE_DIR [SEED]\n");
		return 2;
	}
	const uint64_t seed = check_seed(argc, argv, 3);
	printf("%s: seed %" PRIu64 " (replay: test_engine %s STORE_DIR %" PRIu64 ")\n", argv[1], seed, argv[1],
	       seed);
	rng_state = check_state(seed);
	if (!strcmp(argv[1], "deadlock"))
		t_deadlock(argv[2], seed);
	else if (!strcmp(argv[1], "chunks"))
		t_chunks(argv[2], seed);
	else if (!strcmp(argv[1], "lz4"))
		t_lz4(argv[2], seed);
	else if (!strcmp(argv[1], "once"))
		t_once(argv[2], seed);
	else if (!strcmp(argv[1], "guided"))
		t_guided(argv[2], seed);
	else {
		fprintf(stderr, "unknown case %s\n", argv[1]);
		return 2;
	}
	if (failures)
		fprintf(stderr, "%d check(s) failed\n", failures);
	return failures ? 1 : 0;
}
