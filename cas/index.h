/*
 * index.h - the store's index as an operation table: an ordered map of
 * byte keys to byte values, in the way SQLite's VFS, RocksDB's FileSystem
 * and restic's Backend put their storage behind a table of operations.
 * RocksDB (index_rocks.c) is the first and, for now, only implementation.
 *
 * What the index owns: its directory (STORE/index) and every file in it,
 * and the durability of what it was given. What it does not know: crest's
 * keys. Their encoding (a type byte, 'c' chunk, 'l' piece, 'm' manifest,
 * 'i' summary, 't' tag, 'p'/'q' pack and meta log ends, 'd' damage, 'r'
 * rewritten packs; then the id or name) stays in store.c and its callers,
 * above this table: the table moves bytes.
 *
 * What it promises (store.c's commit notes rely on each):
 *  - A committed batch is atomic and synced: after commit returns 0, every
 *    put and delete of it survives a crash; after any crash, either all of
 *    them are in the index or none is. A commit that fails may still have
 *    landed (it may reappear at the next open), and the index then refuses
 *    further writes through this handle.
 *  - An ingest of table files is atomic and synced the same way, and takes
 *    the files into the index (they are moved or linked, not copied: they
 *    must lie in the index's directory). A failed ingest may have landed,
 *    and may even leave an index that does not open (ingest.c says how).
 *  - A read-only open beside a writer sees one state of the index, as of
 *    some moment during the open: every batch committed before it, or
 *    none of a batch; it does not change afterwards (reopen to see more).
 *  - Scans return keys in increasing memcmp order.
 * Errors: 0 or a negative errno; the function that fails says why in one
 * line (util/err.h), naming the store; -ENOENT of a look-up says nothing.
 */
#ifndef CREST_CAS_INDEX_H
#define CREST_CAS_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cas_index;
struct cas_index_batch;
struct cas_index_val;
struct cas_index_table;

enum cas_index_mode {
	CAS_INDEX_WRITE,      /* the one writer (under the store's lock): created if missing */
	CAS_INDEX_READ,       /* a reader, perhaps beside a writer: one state, no writes */
};

/* A scan's callback: non-zero stops the scan, which returns it. */
typedef int (*cas_index_scan_fn)(const char *k, size_t kl, const char *v, size_t vl, void *arg);

struct cas_index_ops {
	const char *name;
	/* Opens the index in dir (created for CAS_INDEX_WRITE); store names
	 * the store in messages. */
	int (*open)(const char *dir, enum cas_index_mode mode, const char *store, struct cas_index **out);
	/* Writes held in memory (and replayed from a log by every later open)
	 * go into the index's files when they hold min bytes or more, so that
	 * later opens need not replay them. Best effort: failing, they stay
	 * in the log, as durable as before. */
	void (*flush)(struct cas_index *ix, uint64_t min);
	void (*close)(struct cas_index *ix);

	/* The value of k, malloc'd (free it), in *v and *vl. */
	int (*get)(struct cas_index *ix, const void *k, size_t kl, char **v, size_t *vl);
	/* The value of k without a copy: *v is valid until release(*out). */
	int (*pin)(struct cas_index *ix, const void *k, size_t kl, struct cas_index_val **out,
		   const char **v, size_t *vl);
	void (*release)(struct cas_index_val *val);
	/* 1 when k is in the index, 0 when not, or an error. A look-up that
	 * does not fill the cache: for keys asked once and not read after. */
	int (*has)(struct cas_index *ix, const void *k, size_t kl);
	/* Every key from `from` on, in order, while its first plen bytes are
	 * from's (plen 0: to the end): cb's non-zero stops it and is returned. */
	int (*scan)(struct cas_index *ix, const void *from, size_t fromlen, size_t plen, cas_index_scan_fn cb,
		    void *arg);

	/* A batch: puts and deletes applied in order, atomically, by commit
	 * (synced; `what` says in a message what it was doing). A batch may
	 * be committed, cleared and filled again; batch_free drops what was
	 * not committed (the abort). begin fails only for want of memory. */
	struct cas_index_batch *(*batch_begin)(struct cas_index *ix);
	void (*batch_put)(struct cas_index_batch *b, const void *k, size_t kl, const void *v, size_t vl);
	void (*batch_delete)(struct cas_index_batch *b, const void *k, size_t kl);
	size_t (*batch_count)(const struct cas_index_batch *b);
	void (*batch_clear)(struct cas_index_batch *b);
	int (*batch_commit)(struct cas_index_batch *b, const char *what);
	void (*batch_free)(struct cas_index_batch *b);

	/* Bulk ingest: table files written in key order, each by one thread
	 * (table_put's keys must rise strictly; a file must not be empty),
	 * then added in one ingest. A table's first error is kept: later puts
	 * do nothing and table_finish reports it (`what` it held). table_open
	 * fails only for want of memory. */
	struct cas_index_table *(*table_open)(struct cas_index *ix, const char *path);
	void (*table_put)(struct cas_index_table *t, const void *k, size_t kl, const void *v, size_t vl);
	int (*table_finish)(struct cas_index_table *t, const char *what);
	/* Adds the files at paths[0..n) (in the index's directory, key ranges
	 * apart) in one atomic, synced ingest; they are moved in. `what` says
	 * in a message what was being added. */
	int (*ingest)(struct cas_index *ix, const char *const *paths, size_t n, const char *what);
};

/* The part of a handle every implementation shares (its first member). */
struct cas_index {
	const struct cas_index_ops *ops;
};

/* The part of a batch every implementation shares (its first member). */
struct cas_index_batch {
	struct cas_index *ix;
};

/* The part of a table file every implementation shares (its first member). */
struct cas_index_table {
	struct cas_index *ix;
};

extern const struct cas_index_ops cas_index_rocks;

static inline void cas_index_flush(struct cas_index *ix, uint64_t min)
{
	ix->ops->flush(ix, min);
}

static inline void cas_index_close(struct cas_index *ix)
{
	if (ix)
		ix->ops->close(ix);
}

static inline int cas_index_get(struct cas_index *ix, const void *k, size_t kl, char **v, size_t *vl)
{
	return ix->ops->get(ix, k, kl, v, vl);
}

static inline int cas_index_pin(struct cas_index *ix, const void *k, size_t kl, struct cas_index_val **out,
				const char **v, size_t *vl)
{
	return ix->ops->pin(ix, k, kl, out, v, vl);
}

static inline void cas_index_release(struct cas_index *ix, struct cas_index_val *val)
{
	if (val)
		ix->ops->release(val);
}

static inline int cas_index_has(struct cas_index *ix, const void *k, size_t kl)
{
	return ix->ops->has(ix, k, kl);
}

static inline int cas_index_scan(struct cas_index *ix, const void *from, size_t fromlen, size_t plen,
				 cas_index_scan_fn cb, void *arg)
{
	return ix->ops->scan(ix, from, fromlen, plen, cb, arg);
}

static inline struct cas_index_batch *cas_index_batch_begin(struct cas_index *ix)
{
	return ix->ops->batch_begin(ix);
}

static inline void cas_index_batch_put(struct cas_index_batch *b, const void *k, size_t kl, const void *v,
				       size_t vl)
{
	b->ix->ops->batch_put(b, k, kl, v, vl);
}

static inline void cas_index_batch_delete(struct cas_index_batch *b, const void *k, size_t kl)
{
	b->ix->ops->batch_delete(b, k, kl);
}

static inline size_t cas_index_batch_count(const struct cas_index_batch *b)
{
	return b->ix->ops->batch_count(b);
}

static inline void cas_index_batch_clear(struct cas_index_batch *b)
{
	b->ix->ops->batch_clear(b);
}

static inline int cas_index_batch_commit(struct cas_index_batch *b, const char *what)
{
	return b->ix->ops->batch_commit(b, what);
}

static inline void cas_index_batch_free(struct cas_index_batch *b)
{
	if (b)
		b->ix->ops->batch_free(b);
}

static inline struct cas_index_table *cas_index_table_open(struct cas_index *ix, const char *path)
{
	return ix->ops->table_open(ix, path);
}

static inline void cas_index_table_put(struct cas_index_table *t, const void *k, size_t kl, const void *v,
				       size_t vl)
{
	t->ix->ops->table_put(t, k, kl, v, vl);
}

static inline int cas_index_table_finish(struct cas_index_table *t, const char *what)
{
	return t->ix->ops->table_finish(t, what);
}

static inline int cas_index_ingest(struct cas_index *ix, const char *const *paths, size_t n, const char *what)
{
	return ix->ops->ingest(ix, paths, n, what);
}

#endif
