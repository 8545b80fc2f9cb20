/*
 * objects.h - the store's numbered files as an operation table, in the way
 * restic's Backend and RocksDB's FileSystem put storage behind a table of
 * operations, so that one commit / recover / verify / gc core can sit on a
 * directory today and on RADOS next (issue 35). The directory
 * (objects_dir.c: STORE/packs/NNNNNNNN.pack, STORE/meta/NNNNNNNN.log) is the
 * first implementation.
 *
 * What it owns: the objects of each kind, named by kind and number, each a
 * byte array that is created once, written at offsets, synced, read, cut,
 * listed and removed. What it does not know: what the bytes say (headers,
 * records and their checks stay with pack.c and meta.c, above it).
 *
 * What it promises (meta.c's and store.c's commit notes rely on each):
 *  - create is exclusive: -EEXIST when the object exists, and then nothing
 *    is changed. A new object's name is durable once sync_names(kind)
 *    returns 0 after the create; until then a crash may lose the object.
 *  - Bytes written are durable once sync(obj) returns 0. Of bytes written
 *    and not synced, a crash may keep any part or none; a read after a
 *    write (through any handle) sees it.
 *  - truncate cuts (or extends with zeros) to a size; durable after sync.
 *  - A removal is durable once sync_names(kind) returns 0 after it; a
 *    crash before may leave the object as it was.
 *  - list gives each number of a kind once, in no order, and ignores what
 *    is not one of its objects.
 *  - A write queue (queue_open) starts many writes and syncs at once and
 *    gives each one's result back by its tag, in any order: the pack
 *    writer's lanes keep the disk (or the OSDs) busy with it. A write
 *    completes whole or fails; a sync covers the writes to its object whose
 *    completions were taken (queue_wait) before it was queued, and not
 *    those still in flight. A queue has room for depth requests: queued,
 *    in flight, or completed and not yet taken; past that a request is
 *    refused with -EAGAIN (no message) and nothing is queued.
 *  - A blob (a small named object: a store's FORMAT, its head) is
 *    written whole: blob_put replaces it atomically (a read sees the old
 *    bytes or the new, never a mix) and durably before it returns; with
 *    excl it refuses with -EEXIST (no message), changing nothing, when
 *    the blob exists. Puts of one name are kept apart by the caller (the
 *    store's locks). A blob's name is 1-64 of [A-Za-z0-9_.-], not
 *    beginning with '.'.
 * Errors: 0 or a negative errno; the function that fails says why in one
 * line (util/err.h), naming the object (its path, for a directory). Three
 * say nothing: -ENOENT of stat and of remove, which callers expect, and a
 * full queue's -EAGAIN.
 * Handles may be used by several threads at once, each open object by one
 * at a time (reads of one object by several), each queue by one.
 */
#ifndef CREST_CAS_OBJECTS_H
#define CREST_CAS_OBJECTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

enum cas_obj_kind {
	CAS_OBJ_PACK,         /* chunk records (pack.c) */
	CAS_OBJ_META,         /* a writer session's meta log (meta.c) */
	CAS_OBJ_KINDS
};

struct cas_objects;
struct cas_obj;
struct cas_obj_queue;

/* advise's hints. */
enum cas_obj_advice {
	CAS_OBJ_WILLNEED,     /* the bytes will be read soon: start reading them */
	CAS_OBJ_DONTNEED      /* they will not be read again soon: drop cached copies */
};

/* list's callback: non-zero stops the listing, which returns it. */
typedef int (*cas_obj_list_fn)(uint32_t num, void *arg);

struct cas_objects_ops {
	const char *name;
	/* The objects of the store at dir (nothing is created until an object
	 * is); store names the store in messages. */
	int (*open)(const char *dir, const char *store, struct cas_objects **out);
	void (*close)(struct cas_objects *o);
	/* The object's name in messages, as its kind's callers put it after
	 * "meta log" or "pack": a directory's is its path. */
	void (*name_of)(const struct cas_objects *o, enum cas_obj_kind k, uint32_t num, char *buf, size_t cap);

	/* A new, empty object, open for reading and writing. */
	int (*create)(struct cas_objects *o, enum cas_obj_kind k, uint32_t num, struct cas_obj **out);
	/* An existing object, for reading (write false) or both. */
	int (*open_obj)(struct cas_objects *o, enum cas_obj_kind k, uint32_t num, bool write,
			struct cas_obj **out);
	/* All n bytes at off, or an error (-EIO for bytes past the end). */
	int (*read)(struct cas_obj *f, void *p, size_t n, uint64_t off);
	/* All bytes of the n iovecs (1..IOV_MAX), in order from off, or an
	 * error (-EIO for bytes past the end). */
	int (*readv)(struct cas_obj *f, const struct iovec *iov, int n, uint64_t off);
	/* A hint about bytes [off, off + len), len 0 meaning to the end: it
	 * may do nothing, and says nothing. */
	void (*advise)(struct cas_obj *f, uint64_t off, uint64_t len, enum cas_obj_advice a);
	/* All n bytes at off, or an error. */
	int (*write)(struct cas_obj *f, const void *p, size_t n, uint64_t off);
	int (*size)(struct cas_obj *f, uint64_t *size);
	int (*truncate)(struct cas_obj *f, uint64_t size);
	int (*sync)(struct cas_obj *f);
	void (*close_obj)(struct cas_obj *f);

	/* The size of an object, or -ENOENT (no message) when there is none. */
	int (*stat)(struct cas_objects *o, enum cas_obj_kind k, uint32_t num, uint64_t *size);
	int (*list)(struct cas_objects *o, enum cas_obj_kind k, cas_obj_list_fn cb, void *arg);
	/* -ENOENT (no message) when there is none. */
	int (*remove)(struct cas_objects *o, enum cas_obj_kind k, uint32_t num);
	/* Makes the creates and removals of kind k so far durable. */
	int (*sync_names)(struct cas_objects *o, enum cas_obj_kind k);

	/* Blobs (see the promises): n bytes put whole; up to cap bytes read
	 * into p, *n their length (-ENOENT without a message when there is
	 * none, -EFBIG when it holds more than cap). */
	int (*blob_put)(struct cas_objects *o, const char *name, const void *p, size_t n, bool excl);
	int (*blob_get)(struct cas_objects *o, const char *name, void *p, size_t cap, size_t *n);

	/* A write queue with room for depth requests (see the promises). */
	int (*queue_open)(struct cas_objects *o, unsigned depth, struct cas_obj_queue **out);
	/* Waits for what is in flight, then frees the queue; results not
	 * taken are dropped. */
	void (*queue_close)(struct cas_obj_queue *q);
	/* Queue n bytes at off to f (p stays valid until its completion is
	 * taken); a data sync of f; a hint to start writing back bytes
	 * [off, off + len) of f, which may complete at once with 0. Nothing
	 * starts before queue_submit. 0, or -EAGAIN when the queue is full. */
	int (*queue_write)(struct cas_obj_queue *q, struct cas_obj *f, const void *p, size_t n, uint64_t off,
			   uint64_t tag);
	int (*queue_sync)(struct cas_obj_queue *q, struct cas_obj *f, uint64_t tag);
	int (*queue_writeback)(struct cas_obj_queue *q, struct cas_obj *f, uint64_t off, uint64_t len,
			       uint64_t tag);
	/* Starts what is queued; then waits until at least wait requests
	 * have completed and not been taken (fewer when fewer are out). */
	int (*queue_submit)(struct cas_obj_queue *q, unsigned wait);
	/* Takes the next completion, waiting for one if none is there: its
	 * tag and result (0, or a negative errno, without a message: the
	 * caller knows what it asked for). -ENOENT when nothing is out. */
	int (*queue_wait)(struct cas_obj_queue *q, uint64_t *tag, int *res);
};

/* The part of a handle every implementation shares (its first member). */
struct cas_objects {
	const struct cas_objects_ops *ops;
};

/* The part of an open object every implementation shares (its first member). */
struct cas_obj {
	struct cas_objects *o;
};

/* The part of a queue every implementation shares (its first member). */
struct cas_obj_queue {
	struct cas_objects *o;
};

extern const struct cas_objects_ops cas_objects_dir;
/* Objects in a RADOS pool: open's dir is "POOL[/NAMESPACE]", the cluster
 * CEPH_CONF's (objects_rados.c); -ENOTSUP in a build without librados. */
extern const struct cas_objects_ops cas_objects_rados;

static inline void cas_objects_close(struct cas_objects *o)
{
	if (o)
		o->ops->close(o);
}

static inline void cas_obj_name(const struct cas_objects *o, enum cas_obj_kind k, uint32_t num, char *buf,
				size_t cap)
{
	o->ops->name_of(o, k, num, buf, cap);
}

static inline int cas_obj_create(struct cas_objects *o, enum cas_obj_kind k, uint32_t num, struct cas_obj **out)
{
	return o->ops->create(o, k, num, out);
}

static inline int cas_obj_open(struct cas_objects *o, enum cas_obj_kind k, uint32_t num, bool write,
			       struct cas_obj **out)
{
	return o->ops->open_obj(o, k, num, write, out);
}

static inline int cas_obj_read(struct cas_obj *f, void *p, size_t n, uint64_t off)
{
	return f->o->ops->read(f, p, n, off);
}

static inline int cas_obj_readv(struct cas_obj *f, const struct iovec *iov, int n, uint64_t off)
{
	return f->o->ops->readv(f, iov, n, off);
}

static inline void cas_obj_advise(struct cas_obj *f, uint64_t off, uint64_t len, enum cas_obj_advice a)
{
	f->o->ops->advise(f, off, len, a);
}

static inline int cas_obj_write(struct cas_obj *f, const void *p, size_t n, uint64_t off)
{
	return f->o->ops->write(f, p, n, off);
}

static inline int cas_obj_size(struct cas_obj *f, uint64_t *size)
{
	return f->o->ops->size(f, size);
}

static inline int cas_obj_truncate(struct cas_obj *f, uint64_t size)
{
	return f->o->ops->truncate(f, size);
}

static inline int cas_obj_sync(struct cas_obj *f)
{
	return f->o->ops->sync(f);
}

static inline void cas_obj_close(struct cas_obj *f)
{
	if (f)
		f->o->ops->close_obj(f);
}

static inline int cas_obj_stat(struct cas_objects *o, enum cas_obj_kind k, uint32_t num, uint64_t *size)
{
	return o->ops->stat(o, k, num, size);
}

static inline int cas_obj_list(struct cas_objects *o, enum cas_obj_kind k, cas_obj_list_fn cb, void *arg)
{
	return o->ops->list(o, k, cb, arg);
}

static inline int cas_obj_remove(struct cas_objects *o, enum cas_obj_kind k, uint32_t num)
{
	return o->ops->remove(o, k, num);
}

static inline int cas_blob_put(struct cas_objects *o, const char *name, const void *p, size_t n, bool excl)
{
	return o->ops->blob_put(o, name, p, n, excl);
}

static inline int cas_blob_get(struct cas_objects *o, const char *name, void *p, size_t cap, size_t *n)
{
	return o->ops->blob_get(o, name, p, cap, n);
}

static inline int cas_obj_sync_names(struct cas_objects *o, enum cas_obj_kind k)
{
	return o->ops->sync_names(o, k);
}

static inline int cas_queue_open(struct cas_objects *o, unsigned depth, struct cas_obj_queue **out)
{
	return o->ops->queue_open(o, depth, out);
}

static inline void cas_queue_close(struct cas_obj_queue *q)
{
	if (q)
		q->o->ops->queue_close(q);
}

static inline int cas_queue_write(struct cas_obj_queue *q, struct cas_obj *f, const void *p, size_t n,
				  uint64_t off, uint64_t tag)
{
	return q->o->ops->queue_write(q, f, p, n, off, tag);
}

static inline int cas_queue_sync(struct cas_obj_queue *q, struct cas_obj *f, uint64_t tag)
{
	return q->o->ops->queue_sync(q, f, tag);
}

static inline int cas_queue_writeback(struct cas_obj_queue *q, struct cas_obj *f, uint64_t off, uint64_t len,
				      uint64_t tag)
{
	return q->o->ops->queue_writeback(q, f, off, len, tag);
}

static inline int cas_queue_submit(struct cas_obj_queue *q, unsigned wait)
{
	return q->o->ops->queue_submit(q, wait);
}

static inline int cas_queue_wait(struct cas_obj_queue *q, uint64_t *tag, int *res)
{
	return q->o->ops->queue_wait(q, tag, res);
}

static inline int cas_obj_max_cb(uint32_t num, void *arg)
{
	uint32_t *max = (uint32_t *)arg;
	if (num > *max)
		*max = num;
	return 0;
}

/* The highest number of kind k (0: none). */
static inline int cas_obj_max(struct cas_objects *o, enum cas_obj_kind k, uint32_t *max)
{
	*max = 0;
	return cas_obj_list(o, k, cas_obj_max_cb, max);
}

#endif
