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
 *    (128 MiB by default; -EFBIG past it). A meta log that would is not
 *    rolled over yet: the store's use of this table does not depend on it
 *    until its packs and logs are sized for RADOS (issue 35).
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

struct rados_objects {
	struct cas_objects base;
	rados_t cluster;
	rados_ioctx_t io;
	char *spec;            /* "POOL[/NAMESPACE]", for messages */
};

struct rados_obj {
	struct cas_obj base;
	enum cas_obj_kind k;
	uint32_t num;
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
	*out = &r->base;
	return 0;
}

static void rados_close(struct cas_objects *o)
{
	struct rados_objects *r = ro(o);
	cas_rados_disconnect(r->cluster, r->io);
	free(r->spec);
	free(r);
}

static int obj_new(struct cas_objects *o, enum cas_obj_kind k, uint32_t num, struct cas_obj **out)
{
	struct rados_obj *f = calloc(1, sizeof(*f));
	if (!f)
		return crest_errf(-ENOMEM, "opening an object of store rados:%s", ro(o)->spec);
	f->base.o = o;
	f->k = k;
	f->num = num;
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
	return obj_new(o, k, num, out);
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
	(void)write;   /* RADOS has no open: whether it is there is all */
	uint64_t size;
	const int rc = r_stat(o, k, num, &size);
	if (rc == -ENOENT)
		return r_err(o, k, num, rc, "open");
	return rc < 0 ? rc : obj_new(o, k, num, out);
}

static int r_read(struct cas_obj *of, void *p, size_t n, uint64_t off)
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

static int r_readv(struct cas_obj *of, const struct iovec *iov, int n, uint64_t off)
{
	for (int i = 0; i < n; i++) {
		const int rc = r_read(of, iov[i].iov_base, iov[i].iov_len, off);
		if (rc < 0)
			return rc;
		off += iov[i].iov_len;
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
	*r = (struct rq){ .tag = tag, .started = true };
	snprintf(r->oid, sizeof(r->oid), "%s", ((const struct rados_obj *)of)->oid);
	return r;
}

static int r_queue_write(struct cas_obj_queue *qb, struct cas_obj *of, const void *p, size_t n, uint64_t off,
			 uint64_t tag)
{
	struct rq *r = rq_add((struct rados_queue *)qb, of, tag);
	if (!r)
		return -EAGAIN;
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
