/*
 * test_objects.c - the objects table (cas/objects.h) against a model: what
 * every implementation must do, the same steps on the directory one and,
 * given rados:POOL, on RADOS (the suite's own cluster: ceph.objects).
 *
 * With a printed, replayable seed: random creates, writes at random offsets
 * (holes included), truncates, reads, stats, lists, removes, syncs and
 * reopens over a few numbers of both kinds; after each step the bytes, the
 * sizes and the list are compared with an in-memory model. Reads are also
 * made as vectors of random pieces (empty ones among them), and whole
 * objects are read back after every kind of change (on RADOS through its
 * read cache of packs, which a missed invalidation fails), and writes also
 * go through a write queue, in batches of non-overlapping writes with syncs and writeback
 * hints among them, each completion taken once by its tag. Then what the
 * table promises outright: create is exclusive (-EEXIST, the object left as
 * it was), stat and remove of a missing object say -ENOENT and leave no
 * message, a read past the end fails, a full queue refuses (-EAGAIN) and
 * queues nothing, and list ignores names that are not its objects (a stray
 * file, another kind's, a directory). Last, blobs against a model: whole
 * puts, exclusive ones refused over an existing blob, gets of missing
 * blobs (-ENOENT, no message) and of blobs larger than the room (-EFBIG).
 *
 * usage: test_objects [rados:POOL[/NAMESPACE]] [SEED]
 *        (RADOS: the namespace test-objects-SEED unless one is named, emptied after)
 */
#include "cas/objects.h"
#include "tests/check.h"
#include "util/err.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "tests/store/rados_test.h"

#define NUMS 6
#define CAP (256 * 1024)
#define QDEPTH 8

struct model {
	bool exists;
	uint8_t *bytes;   /* CAP bytes */
	uint64_t size;
};

static struct model m[CAS_OBJ_KINDS][NUMS + 1];
static struct cas_obj *open_[CAS_OBJ_KINDS][NUMS + 1];

static int list_cb(uint32_t num, void *arg)
{
	unsigned *seen = arg;
	if (num <= NUMS)
		seen[num]++;
	else
		seen[0] += 100;   /* a number the model never made */
	return 0;
}

static int gather_cb(uint32_t num, void *arg)
{
	uint32_t *v = arg;
	if (v[0] < 64)
		v[++v[0]] = num;
	return 0;
}

/* Removes every object of the table (the end of a RADOS run). */
static void empty(struct cas_objects *o)
{
	for (int k = 0; k < CAS_OBJ_KINDS; k++) {
		uint32_t v[65] = { 0 };
		OK(cas_obj_list(o, (enum cas_obj_kind)k, gather_cb, v));
		for (uint32_t i = 1; i <= v[0]; i++)
			OK(cas_obj_remove(o, (enum cas_obj_kind)k, v[i]));
	}
}


/* Puts a stray name beside the objects: a file in the directory (in
 * SUB/, made if missing; dir_too makes it a directory), or a RADOS
 * object of the namespace. */
static void stray(const char *where, bool rados, const char *sub, const char *name, bool dir_too)
{
	char path[4200];
	if (rados) {
#ifdef CREST_HAVE_RADOS
		rados_t cl;
		rados_ioctx_t io;
		snprintf(path, sizeof(path), "%s.%s", !strcmp(sub, "meta") ? "meta" : "pack", name);
		if (!test_rados(where, &cl, &io)) {
			fprintf(stderr, "FAIL: cannot reach the cluster to put a stray object\n");
			exit(1);
		}
		CHECK(rados_write_full(io, path, "x", 1) == 0, "putting stray object %s", path);
		rados_ioctx_destroy(io);
		rados_shutdown(cl);
#endif
		return;
	}
	snprintf(path, sizeof(path), "%s/%s", where, sub);
	mkdir(path, 0700);
	snprintf(path, sizeof(path), "%s/%s/%s", where, sub, name);
	if (dir_too) {
		mkdir(path, 0700);
		return;
	}
	FILE *fp = fopen(path, "w");
	if (fp)
		fclose(fp);
}

/* Removes what stray put in RADOS (the directory goes whole). */
static void stray_gone(const char *where, const char *const *names, size_t n)
{
#ifdef CREST_HAVE_RADOS
	rados_t cl;
	rados_ioctx_t io;
	if (!test_rados(where, &cl, &io))
		return;
	for (size_t i = 0; i < n; i++)
		rados_remove(io, names[i]);
	rados_ioctx_destroy(io);
	rados_shutdown(cl);
#else
	(void)where;
	(void)names;
	(void)n;
#endif
}

static void compare(struct cas_objects *o, enum cas_obj_kind k, uint32_t num, uint8_t *buf, const char *when)
{
	const struct model *x = &m[k][num];
	uint64_t size = 0;
	const int st = cas_obj_stat(o, k, num, &size);
	if (!x->exists) {
		CHECK(st == -ENOENT, "%s: kind %d object %u: stat %d, the model has none", when, k, num, st);
		return;
	}
	CHECK(st == 0 && size == x->size, "%s: kind %d object %u: stat %d size %" PRIu64 ", the model %" PRIu64,
	      when, k, num, st, size, x->size);
	if (st || size != x->size || !size)
		return;
	struct cas_obj *f;
	OK(cas_obj_open(o, k, num, false, &f));
	uint64_t fsize = 0;
	OK(cas_obj_size(f, &fsize));
	CHECK(fsize == x->size, "%s: kind %d object %u: size %" PRIu64 " through a handle", when, k, num, fsize);
	OK(cas_obj_read(f, buf, x->size, 0));
	const size_t d = first_diff(buf, x->bytes, x->size);
	CHECK(d == x->size, "%s: kind %d object %u differs from the model at byte %zu", when, k, num, d);
	cas_obj_close(f);
}

/* A batch of 1..QDEPTH requests through q: writes that overlap none
 * before them in the batch (their order in flight is not defined), syncs
 * and writeback hints; every completion is taken once, by its tag. */
static void queue_batch(struct cas_objects *o, struct cas_obj_queue *q, uint8_t *const bufs[QDEPTH], uint64_t *st,
			const char *when)
{
	struct req {
		enum cas_obj_kind k;
		uint32_t num;
		uint64_t off, n;
		int what;   /* 0 write, 1 sync, 2 writeback */
		bool done;
	} r[QDEPTH];
	const unsigned want = 1 + (unsigned)(check_rnd(st) % QDEPTH);
	unsigned nr = 0;
	for (unsigned t = 0; t < 4 * QDEPTH && nr < want; t++) {
		const enum cas_obj_kind k = (enum cas_obj_kind)(check_rnd(st) % CAS_OBJ_KINDS);
		const uint32_t num = 1 + (uint32_t)(check_rnd(st) % NUMS);
		if (!m[k][num].exists)
			continue;
		struct cas_obj **f = &open_[k][num];
		if (!*f)
			OK(cas_obj_open(o, k, num, true, f));
		struct req x = { .k = k, .num = num, .what = (int)(check_rnd(st) % 4) };
		if (x.what == 3)
			x.what = 0;
		x.off = check_rnd(st) % (CAP / 2);
		x.n = 1 + check_rnd(st) % (CAP / 4);
		bool clash = false;
		for (unsigned i = 0; x.what == 0 && i < nr; i++)
			clash |= r[i].what == 0 && r[i].k == k && r[i].num == num && x.off < r[i].off + r[i].n &&
				 r[i].off < x.off + x.n;
		if (clash)
			continue;
		int rc;
		if (x.what == 0) {
			check_fill64(bufs[nr], x.n, st);
			rc = cas_queue_write(q, *f, bufs[nr], x.n, x.off, 100 + nr);
		} else if (x.what == 1) {
			rc = cas_queue_sync(q, *f, 100 + nr);
		} else {
			rc = cas_queue_writeback(q, *f, x.off, x.n, 100 + nr);
		}
		CHECK(rc == 0, "%s: queueing request %u: %d (%s)", when, nr, rc, crest_errmsg());
		if (rc)
			return;
		r[nr++] = x;
	}
	if (nr == QDEPTH) {   /* full: refused, nothing queued */
		crest_errset_str("");
		const int rc = cas_queue_sync(q, open_[r[0].k][r[0].num], 999);
		CHECK(rc == -EAGAIN && !crest_errmsg()[0], "%s: a full queue took a request: %d (%s)", when, rc,
		      crest_errmsg());
	}
	OK(cas_queue_submit(q, (unsigned)(check_rnd(st) % (nr + 2))));
	for (unsigned got = 0; got < nr; got++) {
		uint64_t tag = 0;
		int res = -1;
		OK(cas_queue_wait(q, &tag, &res));
		const unsigned i = (unsigned)(tag - 100);
		CHECK(tag >= 100 && i < nr && !r[i].done, "%s: completion of tag %" PRIu64 " (asked %u)", when, tag, nr);
		if (tag < 100 || i >= nr || r[i].done)
			return;
		CHECK(res == 0, "%s: request %u (%d) failed: %d", when, i, r[i].what, res);
		r[i].done = true;
		if (r[i].what == 0) {
			struct model *x = &m[r[i].k][r[i].num];
			memcpy(x->bytes + r[i].off, bufs[i], r[i].n);
			if (r[i].off + r[i].n > x->size)
				x->size = r[i].off + r[i].n;
		}
	}
	uint64_t tag;
	int res;
	CHECK(cas_queue_wait(q, &tag, &res) == -ENOENT, "%s: a completion past those asked for", when);
}

#define BLOBS 3
#define BLOB_CAP 512

/* Blobs against a model: random puts (whole replacements, exclusive or
 * not) and gets of a few names; then what get promises outright. */
static void blobs(struct cas_objects *o, uint64_t *st)
{
	static const char *const names[BLOBS] = { "FORMAT", "head", "x-1.b" };
	uint8_t have[BLOBS][BLOB_CAP], in[BLOB_CAP], out[BLOB_CAP + 8];
	size_t len[BLOBS];
	bool exists[BLOBS] = { false };
	for (int b = 0; b < BLOBS; b++) {
		crest_errset_str("");
		size_t n = 99;
		const int rc = cas_blob_get(o, names[b], out, BLOB_CAP, &n);
		CHECK(rc == -ENOENT && !crest_errmsg()[0], "get of no blob %s: %d (%s)", names[b], rc, crest_errmsg());
	}
	for (int i = 0; i < 300 && !failures; i++) {
		const int b = (int)(check_rnd(st) % BLOBS);
		if (check_rnd(st) % 2) {
			const bool excl = check_rnd(st) % 3 == 0;
			const size_t n = check_rnd(st) % (BLOB_CAP + 1);   /* 0 bytes included */
			check_fill64(in, n, st);
			crest_errset_str("");
			const int rc = cas_blob_put(o, names[b], in, n, excl);
			if (excl && exists[b]) {
				CHECK(rc == -EEXIST && !crest_errmsg()[0], "blob step %d: exclusive put over %s: %d (%s)", i,
				      names[b], rc, crest_errmsg());
				continue;
			}
			CHECK(rc == 0, "blob step %d: put of %zu bytes to %s: %d (%s)", i, n, names[b], rc,
			      crest_errmsg());
			memcpy(have[b], in, n);
			len[b] = n;
			exists[b] = true;
		} else {
			size_t n = 0;
			const int rc = cas_blob_get(o, names[b], out, BLOB_CAP, &n);
			if (!exists[b]) {
				CHECK(rc == -ENOENT, "blob step %d: get of no blob %s: %d", i, names[b], rc);
				continue;
			}
			CHECK(rc == 0 && n == len[b] && !memcmp(out, have[b], n), "blob step %d: get of %s: %d, %zu "
			      "bytes, the model %zu", i, names[b], rc, n, len[b]);
		}
	}
	/* A blob larger than the room given: -EFBIG, however close. */
	uint8_t big[BLOB_CAP];
	check_fill64(big, sizeof(big), st);
	OK(cas_blob_put(o, "head", big, sizeof(big), false));
	size_t n;
	CHECK(cas_blob_get(o, "head", out, sizeof(big) - 1, &n) == -EFBIG, "get of a blob one byte too large");
	CHECK(cas_blob_get(o, "head", out, sizeof(big), &n) == 0 && n == sizeof(big) && !memcmp(out, big, n),
	      "get of a blob exactly the room given");
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	const bool rados = argc > 1 && !strncmp(argv[1], "rados:", 6);
	const uint64_t seed = check_seed(argc, argv, rados ? 2 : 1);
	uint64_t st = check_state(seed);
	printf("seed %" PRIu64 " (replay: test_objects %s%s%" PRIu64 ")\n", seed, rados ? argv[1] : "",
	       rados ? " " : "", seed);
	char dir[512] = "/tmp/crest-objects-XXXXXX";
	struct cas_objects *o;
	if (rados) {
		/* A namespace of this run's own: the pool may hold others. */
		if (!strchr(argv[1] + 6, '/'))
			snprintf(dir, sizeof(dir), "%s/test-objects-%" PRIu64, argv[1] + 6, seed);
		else
			snprintf(dir, sizeof(dir), "%s", argv[1] + 6);
		printf("on RADOS: rados:%s\n", dir);
		OK(cas_objects_rados.open(dir, dir, &o));
		empty(o);
	} else {
		if (!mkdtemp(dir)) {
			perror("mkdtemp");
			return 1;
		}
		OK(cas_objects_dir.open(dir, dir, &o));
	}
	uint8_t *buf = malloc(CAP), *data = malloc(CAP), *qbufs[QDEPTH];
	for (int i = 0; i < QDEPTH; i++)
		qbufs[i] = malloc(CAP / 4);
	struct cas_obj_queue *q;
	OK(cas_queue_open(o, QDEPTH, &q));
	for (int k = 0; k < CAS_OBJ_KINDS; k++)
		for (int n = 0; n <= NUMS; n++)
			m[k][n].bytes = calloc(1, CAP);

	/* Nothing yet: an empty list, -ENOENT without a message. */
	unsigned seen[NUMS + 1] = { 0 };
	OK(cas_obj_list(o, CAS_OBJ_META, list_cb, seen));
	uint32_t max = 7;
	OK(cas_obj_max(o, CAS_OBJ_PACK, &max));
	CHECK(max == 0, "max of no packs: %u", max);
	crest_errset_str("");
	uint64_t size;
	CHECK(cas_obj_stat(o, CAS_OBJ_META, 1, &size) == -ENOENT && !crest_errmsg()[0], "stat of nothing: %s",
	      crest_errmsg());
	CHECK(cas_obj_remove(o, CAS_OBJ_PACK, 1) == -ENOENT && !crest_errmsg()[0], "remove of nothing: %s",
	      crest_errmsg());

	const int steps = 3000;
	for (int i = 0; i < steps; i++) {
		const enum cas_obj_kind k = (enum cas_obj_kind)(check_rnd(&st) % CAS_OBJ_KINDS);
		const uint32_t num = 1 + (uint32_t)(check_rnd(&st) % NUMS);
		struct model *x = &m[k][num];
		struct cas_obj **f = &open_[k][num];
		char when[64];
		snprintf(when, sizeof(when), "step %d", i);
		switch (check_rnd(&st) % 10) {
		case 0: {   /* create: exclusive */
			struct cas_obj *g = NULL;
			const int rc = cas_obj_create(o, k, num, &g);
			if (x->exists) {
				CHECK(rc == -EEXIST, "%s: create of an existing object: %d (%s)", when, rc, crest_errmsg());
				if (rc == 0)
					cas_obj_close(g);
			} else {
				CHECK(rc == 0, "%s: create: %d (%s)", when, rc, crest_errmsg());
				if (rc == 0) {
					x->exists = true;
					x->size = 0;
					cas_obj_close(*f);
					*f = g;
				}
			}
			break;
		}
		case 1:
		case 2: {   /* a write at a random offset, holes and growth included */
			if (!x->exists)
				break;
			if (!*f)
				OK(cas_obj_open(o, k, num, true, f));
			const uint64_t off = check_rnd(&st) % (CAP / 2), n = 1 + check_rnd(&st) % (CAP / 2 - 1);
			check_fill64(data, n, &st);
			OK(cas_obj_write(*f, data, n, off));
			memcpy(x->bytes + off, data, n);
			if (off + n > x->size)
				x->size = off + n;
			break;
		}
		case 3: {   /* truncate: shorter, or longer with zeros */
			if (!x->exists)
				break;
			if (!*f)
				OK(cas_obj_open(o, k, num, true, f));
			const uint64_t to = check_rnd(&st) % CAP;
			OK(cas_obj_truncate(*f, to));
			if (to < x->size)
				memset(x->bytes + to, 0, x->size - to);
			x->size = to;
			break;
		}
		case 4:   /* sync, and the names */
			if (*f)
				OK(cas_obj_sync(*f));
			OK(cas_obj_sync_names(o, k));
			break;
		case 5: {   /* remove */
			cas_obj_close(*f);
			*f = NULL;
			crest_errset_str("");
			const int rc = cas_obj_remove(o, k, num);
			CHECK(x->exists ? rc == 0 : rc == -ENOENT && !crest_errmsg()[0], "%s: remove: %d (%s)", when,
			      rc, crest_errmsg());
			x->exists = false;
			memset(x->bytes, 0, CAP);
			x->size = 0;
			break;
		}
		case 6: {   /* a read of a random range, and one past the end */
			if (!x->exists || !x->size)
				break;
			struct cas_obj *g;
			OK(cas_obj_open(o, k, num, false, &g));
			const uint64_t off = check_rnd(&st) % x->size, n = 1 + check_rnd(&st) % (x->size - off);
			OK(cas_obj_read(g, buf, n, off));
			CHECK(first_diff(buf, x->bytes + off, n) == n, "%s: read of %" PRIu64 " at %" PRIu64 " differs",
			      when, n, off);
			CHECK(cas_obj_read(g, buf, 2, x->size - 1) < 0, "%s: a read past the end succeeded", when);
			/* The same range as a vector of 1 to 4 random pieces. */
			struct iovec iov[4];
			const int ni = 1 + (int)(check_rnd(&st) % 4);
			memset(buf, 0xa5, n);
			uint64_t at = 0;
			for (int j = 0; j < ni; j++) {
				const uint64_t left = n - at;
				const uint64_t len = j == ni - 1 ? left : check_rnd(&st) % (left + 1);
				iov[j] = (struct iovec){ buf + at, len };
				at += len;
			}
			OK(cas_obj_readv(g, iov, ni, off));
			CHECK(first_diff(buf, x->bytes + off, n) == n, "%s: readv of %" PRIu64 " at %" PRIu64
			      " in %d pieces differs", when, n, off, ni);
			iov[0] = (struct iovec){ buf, 2 };
			CHECK(cas_obj_readv(g, iov, 1, x->size - 1) < 0, "%s: a readv past the end succeeded", when);
			cas_obj_close(g);
			break;
		}
		case 8:
			queue_batch(o, q, qbufs, &st, when);
			break;
		case 7:   /* closed, to be opened again */
			cas_obj_close(*f);
			*f = NULL;
			break;
		default:
			compare(o, k, num, buf, when);
		}
		if (failures)
			break;
	}
	/* Every object, and the list, against the model. */
	for (int k = 0; k < CAS_OBJ_KINDS; k++) {
		memset(seen, 0, sizeof(seen));
		OK(cas_obj_list(o, (enum cas_obj_kind)k, list_cb, seen));
		uint32_t want = 0;
		for (uint32_t n = 1; n <= NUMS; n++) {
			compare(o, (enum cas_obj_kind)k, n, buf, "at the end");
			CHECK(seen[n] == (m[k][n].exists ? 1u : 0u), "kind %d: list gave object %u %u times, the model has "
			      "%d", k, n, seen[n], m[k][n].exists);
			if (m[k][n].exists)
				want = n;
		}
		CHECK(seen[0] == 0, "kind %d: list gave a number the model never made", k);
		OK(cas_obj_max(o, (enum cas_obj_kind)k, &max));
		CHECK(max == want, "kind %d: max %u, the model %u", k, max, want);
	}
	/* What list ignores: a stray file, a name of the other kind's
	 * extension, a directory that looks like an object. */
	if (rados) {
		stray(dir, true, "meta", "notes", false);
		stray(dir, true, "meta", "0000004", false);
		stray(dir, true, "meta", "000000411", false);
		stray(dir, true, "meta", "00000042.log", false);
	} else {
		stray(dir, false, "meta", "notes.txt", false);
		stray(dir, false, "meta", "00000040.pack", false);
		stray(dir, false, "meta", "00000041.log", true);
	}
	memset(seen, 0, sizeof(seen));
	OK(cas_obj_list(o, CAS_OBJ_META, list_cb, seen));
	CHECK(seen[0] == 0, "list of meta logs took a stray file for one");

	/* create of an existing object changes nothing. */
	struct cas_obj *g;
	if (!m[CAS_OBJ_META][1].exists) {
		OK(cas_obj_create(o, CAS_OBJ_META, 1, &g));
		cas_obj_close(g);
		m[CAS_OBJ_META][1].exists = true;
		m[CAS_OBJ_META][1].size = 0;
	}
	CHECK(cas_obj_create(o, CAS_OBJ_META, 1, &g) == -EEXIST, "create of an existing log");
	compare(o, CAS_OBJ_META, 1, buf, "after a refused create");

	blobs(o, &st);
	if (!rados) {
		/* The temporary a put writes first is gone, even after a refused
		 * exclusive put. */
		char tmp[600];
		snprintf(tmp, sizeof(tmp), "%s/.head.tmp", dir);
		CHECK(cas_blob_put(o, "head", "x", 1, true) == -EEXIST && access(tmp, F_OK) < 0,
		      "a refused exclusive put left %s", tmp);
	}
	cas_queue_close(q);
	for (int i = 0; i < QDEPTH; i++)
		free(qbufs[i]);
	for (int k = 0; k < CAS_OBJ_KINDS; k++)
		for (int n = 0; n <= NUMS; n++) {
			cas_obj_close(open_[k][n]);
			free(m[k][n].bytes);
		}
	if (rados) {
		static const char *const strays[] = { "meta.notes", "meta.0000004", "meta.000000411",
						      "meta.00000042.log", "FORMAT", "head", "x-1.b" };
		empty(o);
		stray_gone(dir, strays, sizeof(strays) / sizeof(strays[0]));
	}
	cas_objects_close(o);
	free(buf);
	free(data);
	if (!rados) {
		char cmd[4200];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		if (system(cmd) != 0)
			fprintf(stderr, "test_objects: could not remove %s\n", dir);
	}
	if (failures) {
		printf("FAIL: %d check(s) failed (seed %" PRIu64 ")\n", failures, seed);
		return 1;
	}
	printf("ok: %d steps over %d objects of %d kinds against the model (%s)\n", steps, NUMS, CAS_OBJ_KINDS,
	       rados ? "rados" : "directory");
	return 0;
}
