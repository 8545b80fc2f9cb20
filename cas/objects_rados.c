/*
 * objects_rados.c - the objects of objects.h in a Ceph RADOS pool (issue
 * 35), through librados: kind k's object N is the RADOS object "SUB.NNNNNNNN"
 * (pack., meta.) in the store's pool and namespace, the store named
 * "POOL[/NAMESPACE]" and the cluster by CEPH_CONF (rados.h: librados is
 * loaded at run time). Built where librados' headers are found
 * (CREST_HAVE_RADOS); elsewhere open says -ENOTSUP.
 *
 * How it keeps objects.h's promises:
 *  - create is one write op with an exclusive create: -EEXIST, and the
 *    object untouched, when it exists;
 *  - RADOS acknowledges a write (and a create, a truncate, a remove) once
 *    the object's acting set has it durably, so sync and sync_names have
 *    nothing left to do;
 *  - a write is sent in pieces of at most WRITE_MAX, under Ceph's
 *    osd_max_write_size (90 MiB); an object cannot pass osd_max_object_size
 *    (128 MiB by default; -EFBIG past it): the store rolls its packs and
 *    logs over at 64 MiB (cas_int.h);
 *  - a vectored read is one read op, one round trip for all its pieces;
 *  - small reads of packs opened for reading (a restore's chunk reads,
 *    a header and a payload each) come from a cache of RA_WINDOWS windows
 *    of RA_BYTES, one round trip a window instead of one a read. A
 *    window is dropped when this handle writes, cuts or removes its pack.
 *    What another process writes it does not see, and need not: a pack's
 *    bytes below its committed end never change, a reader reads none past
 *    the ends its index view had at its open, and a writer, which writes
 *    past them, holds the store's lock: no other process writes meanwhile.
 *  - a write queue sends its writes with rados_aio_write, all at once, and
 *    hands their results back in the order they were queued (a valid
 *    "any order"); its syncs and writeback hints complete at once with 0,
 *    RADOS having nothing left to do for them;
 *  - list walks the namespace's objects (one pass over the pool's listing
 *    of that namespace): fine for the tests and a first store, not for a
 *    thousand nodes' packs (docs/SCALE.md).
 */
#include "cas/objects.h"
#include "util/err.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef CREST_HAVE_RADOS

static int rados_open(const char *dir, const char *store, struct cas_objects **out)
{
	(void)store;
	(void)out;
	return crest_errx(-ENOTSUP, "store %s: this crest was built without librados (librados-dev)", dir);
}

const struct cas_objects_ops cas_objects_rados = { .name = "rados", .open = rados_open };

#else

#include "cas/rados.h"

#define R cas_R

#define WRITE_MAX ((size_t)64 << 20)   /* bytes a write op, under osd_max_write_size */
#define READ_MAX ((size_t)64 << 20)

static const char *const prefix[CAS_OBJ_KINDS] = { [CAS_OBJ_PACK] = "pack", [CAS_OBJ_META] = "meta" };
static const char *const what[CAS_OBJ_KINDS] = { [CAS_OBJ_PACK] = "pack", [CAS_OBJ_META] = "meta log" };

#define RA_WINDOWS 16
#define RA_BYTES ((size_t)4 << 20)
#define RA_ALIGN ((uint64_t)64 << 10)

/* A window of the read cache: bytes [off, off + len) of pack num. */
struct ra_win {
	uint8_t *buf;          /* RA_BYTES, allocated at first use */
	uint32_t num;          /* 0: empty (packs are numbered from 1) */
	uint64_t off;
	size_t len;
	uint64_t used;         /* the clock at its last hit, for LRU */
};

struct rados_objects {
	struct cas_objects base;
	rados_t cluster;
	rados_ioctx_t io;
	char *spec;            /* "POOL[/NAMESPACE]", for messages */
	/* The read cache. ra_mu is held across a window's fetch: misses go one
	 * at a time, each bringing RA_BYTES (the OSD's rate, not its latency,
	 * is then the bound). */
	pthread_mutex_t ra_mu;
	struct ra_win ra[RA_WINDOWS];
	uint64_t ra_clock;
};

struct rados_obj {
	struct cas_obj base;
	enum cas_obj_kind k;
	uint32_t num;
	bool write;            /* opened for writing (or created): no read cache */
	uint64_t last_end;     /* where the last small read ended (under ra_mu) */
	char oid[32];
};

static struct rados_objects *ro(const struct cas_objects *o)
{
	return (struct rados_objects *)o;
}

static void oid_of(enum cas_obj_kind k, uint32_t num, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s.%08u", prefix[k], num);
}

static void r_name(const struct cas_objects *o, enum cas_obj_kind k, uint32_t num, char *buf, size_t cap)
{
	char oid[32];
	oid_of(k, num, oid, sizeof(oid));
	snprintf(buf, cap, "rados:%s/%s", ro(o)->spec, oid);
}

static int r_err(const struct cas_objects *o, enum cas_obj_kind k, uint32_t num, int err, const char *verb)
{
	char name[512];
	r_name(o, k, num, name, sizeof(name));
	return crest_errf(err, "cannot %s %s %s", verb, what[k], name);
}

static int rados_open(const char *spec, const char *store, struct cas_objects **out)
{
	(void)store;
	struct rados_objects *r = calloc(1, sizeof(*r));
	if (!r || !(r->spec = strdup(spec))) {
		free(r);
		return crest_errf(-ENOMEM, "opening store rados:%s", spec);
	}
	r->base.ops = &cas_objects_rados;
	const int rc = cas_rados_connect(spec, &r->cluster, &r->io);
	if (rc < 0) {
		free(r->spec);
		free(r);
		return rc;
	}
	pthread_mutex_init(&r->ra_mu, NULL);
	*out = &r->base;
	return 0;
}

static void rados_close(struct cas_objects *o)
{
	struct rados_objects *r = ro(o);
	for (int i = 0; i < RA_WINDOWS; i++)
		free(r->ra[i].buf);
	pthread_mutex_destroy(&r->ra_mu);
	cas_rados_disconnect(r->cluster, r->io);
	free(r->spec);
	free(r);
}

/* Drops the cached windows of pack num (this handle changes it). */
static void ra_drop(struct cas_objects *o, enum cas_obj_kind k, uint32_t num)
{
	if (k != CAS_OBJ_PACK)
		return;
	struct rados_objects *r = ro(o);
	pthread_mutex_lock(&r->ra_mu);
	for (int i = 0; i < RA_WINDOWS; i++)
		if (r->ra[i].num == num)
			r->ra[i].num = 0;
	pthread_mutex_unlock(&r->ra_mu);
}

static int obj_new(struct cas_objects *o, enum cas_obj_kind k, uint32_t num, bool write, struct cas_obj **out)
{
	struct rados_obj *f = calloc(1, sizeof(*f));
	if (!f)
		return crest_errf(-ENOMEM, "opening an object of store rados:%s", ro(o)->spec);
	f->base.o = o;
	f->k = k;
	f->num = num;
	f->write = write;
	oid_of(k, num, f->oid, sizeof(f->oid));
	*out = &f->base;
	return 0;
}

static int r_create(struct cas_objects *o, enum cas_obj_kind k, uint32_t num, struct cas_obj **out)
{
	char oid[32];
	oid_of(k, num, oid, sizeof(oid));
	rados_write_op_t op = R.rados_create_write_op();
	if (!op)
		return crest_errf(-ENOMEM, "creating an object of store rados:%s", ro(o)->spec);
	R.rados_write_op_create(op, LIBRADOS_CREATE_EXCLUSIVE, NULL);
	const int rc = R.rados_write_op_operate(op, ro(o)->io, oid, NULL, 0);
	R.rados_release_write_op(op);
	if (rc < 0)
		return r_err(o, k, num, rc, "create");
	ra_drop(o, k, num);   /* a pack removed and made again */
	return obj_new(o, k, num, true, out);
}

static int r_stat(struct cas_objects *o, enum cas_obj_kind k, uint32_t num, uint64_t *size)
{
	char oid[32];
	time_t mtime;
	oid_of(k, num, oid, sizeof(oid));
	const int rc = R.rados_stat(ro(o)->io, oid, size, &mtime);
	return rc == -ENOENT ? -ENOENT : rc < 0 ? r_err(o, k, num, rc, "stat") : 0;
}

static int r_open_obj(struct cas_objects *o, enum cas_obj_kind k, uint32_t num, bool write, struct cas_obj **out)
{
	/* RADOS has no open: whether it is there is all */
	uint64_t size;
	const int rc = r_stat(o, k, num, &size);
	if (rc == -ENOENT)
		return r_err(o, k, num, rc, "open");
	return rc < 0 ? rc : obj_new(o, k, num, write, out);
}

static int r_read_direct(struct cas_obj *of, void *p, size_t n, uint64_t off)
{
	const struct rados_obj *f = (const struct rados_obj *)of;
	size_t got = 0;
	while (got < n) {
		const size_t want = n - got < READ_MAX ? n - got : READ_MAX;
		const int r = R.rados_read(ro(of->o)->io, f->oid, (char *)p + got, want, off + got);
		if (r <= 0)
			return r_err(of->o, f->k, f->num, r < 0 ? r : -EIO, "read");
		got += (size_t)r;
	}
	return 0;
}

/* 1 and the bytes copied when the cache has [off, off + n) of the
 * object's pack, fetching a window when it does not; 0 when the read is
 * not the cache's (the caller reads directly), or a negative errno. */
static int ra_read(struct cas_obj *of, void *p, size_t n, uint64_t off)
{
	const struct rados_obj *f = (const struct rados_obj *)of;
	if (f->k != CAS_OBJ_PACK || f->write || n > RA_BYTES / 4)
		return 0;
	struct rados_objects *r = ro(of->o);
	struct rados_obj *fm = (struct rados_obj *)of;
	pthread_mutex_lock(&r->ra_mu);
	/* A window only for a read that follows the last one (a walk in
	 * pack order, as a restore's is): reads in random order (verify's
	 * threads, lookups) would fetch RA_BYTES for each. */
	const bool along = off >= fm->last_end && off - fm->last_end <= RA_ALIGN;
	fm->last_end = off + n;
	struct ra_win *w = NULL, *lru = &r->ra[0];
	for (int i = 0; i < RA_WINDOWS && !w; i++) {
		struct ra_win *x = &r->ra[i];
		if (x->num == f->num && off >= x->off && off + n <= x->off + x->len)
			w = x;
		else if (x->used < lru->used)
			lru = x;
	}
	int rc = 1;
	if (!w && !along) {
		rc = 0;
	} else if (!w) {
		w = lru;
		w->num = 0;
		if (!w->buf && !(w->buf = malloc(RA_BYTES)))
			rc = 0;   /* no memory for it: a direct read */
		const uint64_t at = off & ~(RA_ALIGN - 1);
		const int got = rc ? R.rados_read(r->io, f->oid, (char *)w->buf, RA_BYTES, at) : 0;
		if (got < 0)
			rc = got;   /* the direct read says what failed */
		else if (rc && off + n <= at + (uint64_t)got)
			*w = (struct ra_win){ .buf = w->buf, .num = f->num, .off = at, .len = (size_t)got };
		else
			rc = 0;   /* past the end: the direct read says so */
	}
	if (rc == 1) {
		memcpy(p, w->buf + (off - w->off), n);
		w->used = ++r->ra_clock;
	}
	pthread_mutex_unlock(&r->ra_mu);
	return rc < 0 ? 0 : rc;
}

static int r_read(struct cas_obj *of, void *p, size_t n, uint64_t off)
{
	return ra_read(of, p, n, off) == 1 ? 0 : r_read_direct(of, p, n, off);
}

/* One read op for the pieces (as many ops as READ_MAX makes it), or the
 * cache when all of it fits one of its windows. */
static int r_readv(struct cas_obj *of, const struct iovec *iov, int n, uint64_t off)
{
	const struct rados_obj *f = (const struct rados_obj *)of;
	size_t total = 0;
	for (int i = 0; i < n; i++)
		total += iov[i].iov_len;
	if (total <= RA_BYTES / 4 && !f->write && f->k == CAS_OBJ_PACK) {
		uint8_t *tmp = malloc(total ? total : 1);
		const int hit = tmp ? ra_read(of, tmp, total, off) : 0;
		for (size_t i = 0, at = 0; hit == 1 && i < (size_t)n; at += iov[i].iov_len, i++)
			memcpy(iov[i].iov_base, tmp + at, iov[i].iov_len);
		free(tmp);
		if (hit == 1)
			return 0;
	}
	for (int i = 0; i < n;) {
		rados_read_op_t op = R.rados_create_read_op();
		if (!op)
			return crest_errf(-ENOMEM, "reading rados:%s/%s", ro(of->o)->spec, f->oid);
		enum { PIECES = 64 };
		size_t got[PIECES];
		int prv[PIECES], k = 0;
		size_t bytes = 0;
		int idx[PIECES];
		for (; i < n && k < PIECES && (k == 0 || bytes + iov[i].iov_len <= READ_MAX); i++) {
			if (!iov[i].iov_len)
				continue;   /* an empty extent is refused by the OSD (-ERANGE) */
			R.rados_read_op_read(op, off, iov[i].iov_len, iov[i].iov_base, &got[k], &prv[k]);
			idx[k++] = i;
			bytes += iov[i].iov_len;
			off += iov[i].iov_len;
		}
		int rc = k ? R.rados_read_op_operate(op, ro(of->o)->io, f->oid, 0) : 0;
		R.rados_release_read_op(op);
		for (int j = 0; rc == 0 && j < k; j++)
			if (prv[j] < 0)
				rc = prv[j];
			else if (got[j] != iov[idx[j]].iov_len)
				rc = -EIO;   /* past the object's end */
		if (rc < 0)
			return r_err(of->o, f->k, f->num, rc, "read");
	}
	return 0;
}

static void r_advise(struct cas_obj *of, uint64_t off, uint64_t len, enum cas_obj_advice a)
{
	(void)of, (void)off, (void)len, (void)a;   /* the OSDs cache as they see fit */
}

static int r_write(struct cas_obj *of, const void *p, size_t n, uint64_t off)
{
	const struct rados_obj *f = (const struct rados_obj *)of;
	ra_drop(of->o, f->k, f->num);
	for (size_t done = 0; done < n;) {
		const size_t len = n - done < WRITE_MAX ? n - done : WRITE_MAX;
		const int r = R.rados_write(ro(of->o)->io, f->oid, (const char *)p + done, len, off + done);
		if (r < 0)
			return r_err(of->o, f->k, f->num, r, "write");
		done += len;
	}
	return 0;
}

static int r_size(struct cas_obj *of, uint64_t *size)
{
	const struct rados_obj *f = (const struct rados_obj *)of;
	const int rc = r_stat(of->o, f->k, f->num, size);
	return rc == -ENOENT ? r_err(of->o, f->k, f->num, rc, "stat") : rc;
}

static int r_truncate(struct cas_obj *of, uint64_t size)
{
	const struct rados_obj *f = (const struct rados_obj *)of;
	ra_drop(of->o, f->k, f->num);
	const int r = R.rados_trunc(ro(of->o)->io, f->oid, size);
	return r < 0 ? r_err(of->o, f->k, f->num, r, "cut") : 0;
}

static int r_sync(struct cas_obj *of)
{
	(void)of;   /* acknowledged writes are durable already */
	return 0;
}

static void r_close_obj(struct cas_obj *of)
{
	free(of);
}

static int r_list(struct cas_objects *o, enum cas_obj_kind k, cas_obj_list_fn cb, void *arg)
{
	rados_list_ctx_t ctx;
	int rc = R.rados_nobjects_list_open(ro(o)->io, &ctx);
	if (rc < 0)
		return crest_errf(rc, "cannot list the objects of store rados:%s", ro(o)->spec);
	const size_t pl = strlen(prefix[k]);
	const char *entry;
	while (rc == 0) {
		const int r = R.rados_nobjects_list_next(ctx, &entry, NULL, NULL);
		if (r == -ENOENT)
			break;
		if (r < 0) {
			rc = crest_errf(r, "cannot list the objects of store rados:%s", ro(o)->spec);
			break;
		}
		unsigned n;
		char tail;
		if (!strncmp(entry, prefix[k], pl) && entry[pl] == '.' && strlen(entry + pl + 1) == 8 &&
		    sscanf(entry + pl + 1, "%8u%c", &n, &tail) == 1)
			rc = cb(n, arg);
	}
	R.rados_nobjects_list_close(ctx);
	return rc;
}

static int r_remove(struct cas_objects *o, enum cas_obj_kind k, uint32_t num)
{
	char oid[32];
	oid_of(k, num, oid, sizeof(oid));
	ra_drop(o, k, num);
	const int rc = R.rados_remove(ro(o)->io, oid);
	return rc == -ENOENT ? -ENOENT : rc < 0 ? r_err(o, k, num, rc, "remove") : 0;
}

static int r_sync_names(struct cas_objects *o, enum cas_obj_kind k)
{
	(void)o;
	(void)k;
	return 0;
}

/* A blob is the RADOS object NAME, written whole by one write op: RADOS
 * applies an op atomically and acknowledges it durable. */
static int r_blob_put(struct cas_objects *o, const char *name, const void *p, size_t n, bool excl)
{
	if (n > WRITE_MAX)
		return crest_errx(-EFBIG, "cannot write rados:%s/%s: %zu bytes is more than one write", ro(o)->spec,
				  name, n);
	rados_write_op_t op = R.rados_create_write_op();
	if (!op)
		return crest_errf(-ENOMEM, "writing rados:%s/%s", ro(o)->spec, name);
	if (excl)
		R.rados_write_op_create(op, LIBRADOS_CREATE_EXCLUSIVE, NULL);
	R.rados_write_op_write_full(op, p, n);
	const int rc = R.rados_write_op_operate(op, ro(o)->io, name, NULL, 0);
	R.rados_release_write_op(op);
	if (rc == -EEXIST && excl)
		return rc;
	return rc < 0 ? crest_errf(rc, "cannot write rados:%s/%s", ro(o)->spec, name) : 0;
}

static int r_blob_get(struct cas_objects *o, const char *name, void *p, size_t cap, size_t *n)
{
	/* One read of one byte more than cap: RADOS replaces a blob whole,
	 * so what comes is one version of it, and a longer one says so. */
	char *buf = malloc(cap + 1);
	if (!buf)
		return crest_errf(-ENOMEM, "reading rados:%s/%s", ro(o)->spec, name);
	int rc = R.rados_read(ro(o)->io, name, buf, cap + 1, 0);
	if (rc == -ENOENT) {
		free(buf);
		return rc;
	}
	if (rc < 0)
		rc = crest_errf(rc, "cannot read rados:%s/%s", ro(o)->spec, name);
	else if ((size_t)rc > cap)
		rc = crest_errx(-EFBIG, "rados:%s/%s holds more than %zu bytes", ro(o)->spec, name, cap);
	else {
		memcpy(p, buf, (size_t)rc);
		*n = (size_t)rc;
		rc = 0;
	}
	free(buf);
	return rc;
}

/* A queued request. A write of more than WRITE_MAX bytes goes as several
 * aio writes, all of which must complete for it to. */
struct rq {
	uint64_t tag;
	struct cas_objects *o;    /* its object, for the read cache */
	enum cas_obj_kind k;
	uint32_t num;
	char oid[32];
	const char *p;
	size_t n;
	uint64_t off;
	bool write, started;
	int res;                  /* the first failure among its pieces */
	unsigned npieces;
	rados_completion_t *c;
};

struct rados_queue {
	struct cas_obj_queue base;
	unsigned depth, head, count;  /* a ring of depth requests, count of them out */
	struct rq *q;
};

static int r_queue_open(struct cas_objects *o, unsigned depth, struct cas_obj_queue **out)
{
	struct rados_queue *q = calloc(1, sizeof(*q));
	if (q)
		q->q = calloc(depth, sizeof(*q->q));
	if (!q || !q->q || !depth) {
		free(q ? q->q : NULL);
		free(q);
		return crest_errf(-ENOMEM, "setting up writes to store rados:%s", ro(o)->spec);
	}
	q->base.o = o;
	q->depth = depth;
	*out = &q->base;
	return 0;
}

static struct rq *rq_add(struct rados_queue *q, struct cas_obj *of, uint64_t tag)
{
	if (q->count == q->depth)
		return NULL;
	struct rq *r = &q->q[(q->head + q->count++) % q->depth];
	const struct rados_obj *f = (const struct rados_obj *)of;
	*r = (struct rq){ .tag = tag, .started = true, .o = of->o, .k = f->k, .num = f->num };
	snprintf(r->oid, sizeof(r->oid), "%s", f->oid);
	return r;
}

static int r_queue_write(struct cas_obj_queue *qb, struct cas_obj *of, const void *p, size_t n, uint64_t off,
			 uint64_t tag)
{
	struct rq *r = rq_add((struct rados_queue *)qb, of, tag);
	if (!r)
		return -EAGAIN;
	ra_drop(of->o, r->k, r->num);
	r->p = p;
	r->n = n;
	r->off = off;
	r->write = true;
	r->started = false;
	return 0;
}

static int r_queue_none(struct cas_obj_queue *qb, struct cas_obj *of, uint64_t tag)
{
	return rq_add((struct rados_queue *)qb, of, tag) ? 0 : -EAGAIN;
}

static int r_queue_writeback(struct cas_obj_queue *qb, struct cas_obj *of, uint64_t off, uint64_t len,
			     uint64_t tag)
{
	(void)off, (void)len;
	return r_queue_none(qb, of, tag);
}

/* Sends r's pieces; one that cannot be sent fails r, and the rest of it is
 * not sent. */
static void rq_start(struct rados_queue *q, struct rq *r)
{
	r->started = true;
	const unsigned want = r->n ? (unsigned)((r->n + WRITE_MAX - 1) / WRITE_MAX) : 1;
	if (!(r->c = calloc(want, sizeof(*r->c)))) {
		r->res = -ENOMEM;
		return;
	}
	for (size_t done = 0; r->npieces < want; done += WRITE_MAX) {
		const size_t len = r->n - done < WRITE_MAX ? r->n - done : WRITE_MAX;
		rados_completion_t c;
		int rc = R.rados_aio_create_completion2(NULL, NULL, &c);
		if (rc == 0) {
			rc = R.rados_aio_write(ro(q->base.o)->io, r->oid, c, r->p + done, len, r->off + done);
			if (rc < 0)
				R.rados_aio_release(c);
		}
		if (rc < 0) {
			r->res = rc;
			return;
		}
		r->c[r->npieces++] = c;
	}
}

/* Waits for r's pieces: its result is then final. */
static void rq_finish(struct rq *r)
{
	for (unsigned i = 0; i < r->npieces; i++) {
		R.rados_aio_wait_for_complete(r->c[i]);
		const int rc = R.rados_aio_get_return_value(r->c[i]);
		if (rc < 0 && r->res == 0)
			r->res = rc;
		R.rados_aio_release(r->c[i]);
	}
	free(r->c);
	r->c = NULL;
	r->npieces = 0;
	/* Again at its end: a window read while it was in flight may hold
	 * the bytes from before it. */
	if (r->write)
		ra_drop(r->o, r->k, r->num);
}

static int r_queue_submit(struct cas_obj_queue *qb, unsigned wait)
{
	struct rados_queue *q = (struct rados_queue *)qb;
	for (unsigned i = 0; i < q->count; i++) {
		struct rq *r = &q->q[(q->head + i) % q->depth];
		if (!r->started)
			rq_start(q, r);
	}
	for (unsigned i = 0; i < wait && i < q->count; i++)
		rq_finish(&q->q[(q->head + i) % q->depth]);
	return 0;
}

static int r_queue_wait(struct cas_obj_queue *qb, uint64_t *tag, int *res)
{
	struct rados_queue *q = (struct rados_queue *)qb;
	if (!q->count)
		return -ENOENT;
	struct rq *r = &q->q[q->head];
	if (!r->started)
		rq_start(q, r);
	rq_finish(r);
	*tag = r->tag;
	*res = r->res;
	q->head = (q->head + 1) % q->depth;
	q->count--;
	return 0;
}

static void r_queue_close(struct cas_obj_queue *qb)
{
	struct rados_queue *q = (struct rados_queue *)qb;
	if (!q)
		return;
	/* What was never sent is not sent now; what was is waited for. */
	for (unsigned i = 0; i < q->count; i++)
		rq_finish(&q->q[(q->head + i) % q->depth]);
	free(q->q);
	free(q);
}

const struct cas_objects_ops cas_objects_rados = {
	.name = "rados",
	.open = rados_open,
	.close = rados_close,
	.name_of = r_name,
	.create = r_create,
	.open_obj = r_open_obj,
	.read = r_read,
	.readv = r_readv,
	.advise = r_advise,
	.write = r_write,
	.size = r_size,
	.truncate = r_truncate,
	.sync = r_sync,
	.close_obj = r_close_obj,
	.stat = r_stat,
	.list = r_list,
	.remove = r_remove,
	.sync_names = r_sync_names,
	.blob_put = r_blob_put,
	.blob_get = r_blob_get,
	.queue_open = r_queue_open,
	.queue_close = r_queue_close,
	.queue_write = r_queue_write,
	.queue_sync = r_queue_none,
	.queue_writeback = r_queue_writeback,
	.queue_submit = r_queue_submit,
	.queue_wait = r_queue_wait,
};

#endif
