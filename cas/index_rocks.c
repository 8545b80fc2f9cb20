/*
 * index_rocks.c - the index (index.h) in RocksDB: the one file of the tree
 * that speaks RocksDB's C API. Its options, its read-only open beside a
 * writer, the modes of its files, its write batches and its ingest of
 * table files live here; crest's keys do not.
 */
#include "cas/index.h"
#include "util/err.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <rocksdb/c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct rocks {
	struct cas_index base;
	char *store;          /* the store, for messages */
	char *dir;            /* STORE/index */
	enum cas_index_mode mode;
	rocksdb_t *db;
	rocksdb_options_t *opts;
	rocksdb_block_based_table_options_t *topts;
	rocksdb_filterpolicy_t *bloom;    /* owned by topts once set */
	rocksdb_cache_t *cache;
	rocksdb_readoptions_t *ropts;
	rocksdb_readoptions_t *ropts_nofill;   /* look-ups that should not evict (has) */
	rocksdb_writeoptions_t *wopts;
};

struct rocks_batch {
	struct cas_index_batch base;
	rocksdb_writebatch_t *wb;
};

struct rocks_table {
	struct cas_index_table base;
	rocksdb_envoptions_t *eo;
	rocksdb_sstfilewriter_t *w;
	char *path;
	char *err;
};

static struct rocks *rocks_of(struct cas_index *ix)
{
	return (struct rocks *)ix;
}

/* A summary of which files make up the index at path (tables, logs,
 * MANIFESTs; not the info LOG files, which every open rotates), equal for
 * equal sets of names whatever order readdir gives. */
static uint64_t index_files_sig(const char *path)
{
	DIR *d = opendir(path);
	if (!d)
		return 0;
	uint64_t sum = 0, x = 0, n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		const char *nm = e->d_name;
		size_t l = strlen(nm);
		if (!(l > 4 && (!strcmp(nm + l - 4, ".sst") || !strcmp(nm + l - 4, ".log"))) &&
		    strncmp(nm, "MANIFEST-", 9))
			continue;
		uint64_t h = 1469598103934665603ull;   /* FNV-1a */
		for (size_t i = 0; i < l; i++)
			h = (h ^ (uint8_t)nm[i]) * 1099511628211ull;
		sum += h;
		x ^= h * 0x9e3779b97f4a7c15ull;
		n++;
	}
	closedir(d);
	return sum ^ (x << 1) ^ n;
}

/* The index directory 0700 and its files 0600, as the CLI's umask makes
 * them (see rocks_open). Best effort: the store works either way. */
static void db_files_private(const char *path)
{
	int dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return;
	fchmod(dfd, 0700);
	DIR *d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return;
	}
	struct dirent *e;
	while ((e = readdir(d))) {
		struct stat st;
		if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
		    (st.st_mode & 077))
			fchmodat(dfd, e->d_name, st.st_mode & 0700, 0);
	}
	closedir(d);
}

/* What rocks_open made, undone (it may have failed half-way). */
static void rocks_close(struct cas_index *ix)
{
	struct rocks *r = rocks_of(ix);
	if (r->db)
		rocksdb_close(r->db);
	if (r->ropts)
		rocksdb_readoptions_destroy(r->ropts);
	if (r->ropts_nofill)
		rocksdb_readoptions_destroy(r->ropts_nofill);
	if (r->wopts)
		rocksdb_writeoptions_destroy(r->wopts);
	if (r->opts)
		rocksdb_options_destroy(r->opts);
	if (r->topts)
		rocksdb_block_based_options_destroy(r->topts);  /* frees the bloom policy */
	if (r->cache)
		rocksdb_cache_destroy(r->cache);
	free(r->store);
	free(r->dir);
	free(r);
}

/* A read-only open of the index's one column family (see rocks_open). The
 * handle is let go at once: the database keeps the default family's. */
static rocksdb_t *db_open_read_only(const rocksdb_options_t *opts, const char *path, char **err)
{
	const char *const names[1] = { "default" };
	const rocksdb_options_t *const cf_opts[1] = { opts };
	rocksdb_column_family_handle_t *cf[1] = { NULL };
	rocksdb_t *db = rocksdb_open_for_read_only_column_families(opts, path, 1, names, cf_opts, cf, 0, err);
	if (db && cf[0])
		rocksdb_column_family_handle_destroy(cf[0]);
	return db;
}

static int rocks_open(const char *path, enum cas_index_mode mode, const char *store, struct cas_index **out)
{
	char *err = NULL;
	*out = NULL;
	if (mode != CAS_INDEX_READ && mkdir(path, 0700) < 0 && errno != EEXIST)
		return crest_errf(-errno, "cannot create %s", path);
	struct rocks *r = calloc(1, sizeof(*r));
	if (r) {
		r->store = strdup(store);
		r->dir = strdup(path);
	}
	if (!r || !r->store || !r->dir) {
		if (r)
			rocks_close(&r->base);
		return crest_errf(-ENOMEM, "opening the index of store %s", store);
	}
	r->base.ops = &cas_index_rocks;
	r->mode = mode;
	r->opts = rocksdb_options_create();
	r->topts = rocksdb_block_based_options_create();
	r->cache = rocksdb_cache_create_lru(64u << 20);
	r->bloom = rocksdb_filterpolicy_create_bloom(10);
	rocksdb_block_based_options_set_filter_policy(r->topts, r->bloom);
	rocksdb_block_based_options_set_block_cache(r->topts, r->cache);
	rocksdb_block_based_options_set_cache_index_and_filter_blocks(r->topts, 0);
	rocksdb_options_set_block_based_table_factory(r->opts, r->topts);
	/* Keys are hashes and values hash lists: nothing to gain from compression. */
	rocksdb_options_set_compression(r->opts, rocksdb_no_compression);
	rocksdb_options_set_create_if_missing(r->opts, mode != CAS_INDEX_READ);
	/* Damage RocksDB can see in its own files stops the open; a WAL cut
	 * short or damaged is replayed up to the damage (point in time), and
	 * what it dropped comes back from the meta logs (recover.c). */
	rocksdb_options_set_paranoid_checks(r->opts, 1);
	rocksdb_options_set_wal_recovery_mode(r->opts, 2 /* kPointInTimeRecovery */);
	rocksdb_options_set_max_open_files(r->opts, 256);
	rocksdb_options_set_info_log_level(r->opts, 4 /* HEADER: keep LOG small */);
	rocksdb_options_set_keep_log_file_num(r->opts, 2);
	if (mode != CAS_INDEX_READ) {
		r->db = rocksdb_open(r->opts, path, &err);
	} else {
		/* A reader beside a writer. A read-only open reads the version
		 * in the MANIFEST, opens the table files it lists, then replays
		 * the write-ahead logs it finds in the directory. Meanwhile a
		 * writer that opens the index (every `crest put` does) flushes
		 * its logs into a new table and deletes them, and its
		 * compactions delete tables. Caught between, the open either
		 * fails ("Can't access ...sst": a listed table was deleted) or,
		 * worse, succeeds without the commits of a log deleted after
		 * the MANIFEST was read: a snapshot or tag seems not to exist.
		 * So the open counts as good only when the index's files (names
		 * of tables, logs, MANIFESTs) were the same before and after
		 * it: nothing was added or removed, so what it read is one
		 * state. Otherwise it is tried again, pausing 5 ms and doubling,
		 * about 2.5 s in all: a writer's flush or compaction of crest's
		 * index takes far less. Every table is opened during the open
		 * (no limit on open files), so the descriptors the reader holds
		 * keep working when a table is deleted later.
		 *
		 * The open goes through the column-family form on purpose. With
		 * max_open_files = -1, RocksDB's plain read-only open first
		 * tries a "fully compacted" mode, taken when the tables sit in
		 * one level and the write-ahead logs are empty as it sizes
		 * them; it replays the logs all the same, but its point
		 * look-ups then read the tables alone while iterators read the
		 * logs too. A commit landing between the sizing and the replay
		 * gave a reader that listed a snapshot and could not find it
		 * (CI: "snapshot X is not in STORE" from casctl verify beside a
		 * writer; tests/store/read_view.sh). The column-family form
		 * never takes that mode. */
		rocksdb_options_set_max_open_files(r->opts, -1);
		for (int i = 0;; i++) {
			uint64_t before = index_files_sig(path), after;
			r->db = db_open_read_only(r->opts, path, &err);
			after = index_files_sig(path);
			if (r->db && before == after)
				break;
			if (!r->db && err && !strstr(err, "Can't access") && !strstr(err, "No such file"))
				break;
			if (i == 9) {
				if (r->db) {
					rocksdb_close(r->db);
					r->db = NULL;
					err = strdup("it kept changing while it was opened (a busy writer); try again");
				}
				break;
			}
			if (r->db)
				rocksdb_close(r->db);
			r->db = NULL;
			free(err);
			err = NULL;
			struct timespec ts = { 0, (5L << i) * 1000000L };
			nanosleep(&ts, NULL);
		}
	}
	if (!r->db) {
		int rc = crest_errx(-EIO, "cannot open the index of store %s: %s (casctl repair rebuilds it "
				    "from the packs)", store, err ? err : "unknown RocksDB error");
		free(err);
		rocks_close(&r->base);
		return rc;
	}
	r->ropts = rocksdb_readoptions_create();
	r->ropts_nofill = rocksdb_readoptions_create();
	rocksdb_readoptions_set_fill_cache(r->ropts_nofill, 0);
	r->wopts = rocksdb_writeoptions_create();
	rocksdb_writeoptions_set_sync(r->wopts, 1);
	/* RocksDB creates its files 0644 less the caller's umask, and its C
	 * API has no way to ask for less: a libcrest caller's umask 022 left
	 * them readable by all, where the CLI (umask 077) makes 0600. The
	 * directory, 0700 whatever the umask, keeps them from others; their
	 * own modes are brought to the CLI's here. */
	if (mode != CAS_INDEX_READ)
		db_files_private(path);
	*out = &r->base;
	return 0;
}

/* A writer's commits leave RocksDB's memtable and write-ahead log behind
 * it, and every later open, readers' included (crest get, ls, restore),
 * replays that log into a memtable of its own: 0.5 s for a 2 GiB put of
 * 4 KiB chunks here, each time, until a writer flushed. So a writer that
 * leaves min bytes of memtable or more flushes it (store.c's cas_close
 * says how much), and the log goes. Failing, the log still holds it all,
 * as before. The flush's new files get the modes of the rest. */
static void rocks_flush(struct cas_index *ix, uint64_t min)
{
	struct rocks *r = rocks_of(ix);
	uint64_t mem = 0;
	if (r->mode == CAS_INDEX_READ ||
	    rocksdb_property_int(r->db, "rocksdb.cur-size-all-mem-tables", &mem) != 0 || mem < min)
		return;
	rocksdb_flushoptions_t *fo = rocksdb_flushoptions_create();
	char *err = NULL;
	rocksdb_flushoptions_set_wait(fo, 1);
	rocksdb_flush(r->db, fo, &err);
	free(err);
	rocksdb_flushoptions_destroy(fo);
	db_files_private(r->dir);
}

static int rocks_get(struct cas_index *ix, const void *k, size_t kl, char **v, size_t *vl)
{
	struct rocks *r = rocks_of(ix);
	char *err = NULL;
	*v = rocksdb_get(r->db, r->ropts, k, kl, vl, &err);
	if (err) {
		const int rc = crest_errx(-EIO, "reading the index of %s: %s", r->store, err);
		free(err);
		return rc;
	}
	return *v ? 0 : -ENOENT;
}

/* A value read pinned (no copy out of RocksDB): 0 with *out set, -ENOENT
 * (no message) when there is none, or -EIO with a message. */
static int db_pin(struct rocks *r, const rocksdb_readoptions_t *ro, const void *k, size_t kl,
		  rocksdb_pinnableslice_t **out)
{
	char *err = NULL;
	*out = rocksdb_get_pinned(r->db, ro, k, kl, &err);
	if (err) {
		const int rc = crest_errx(-EIO, "reading the index of %s: %s", r->store, err);
		free(err);
		return rc;
	}
	return *out ? 0 : -ENOENT;
}

static int rocks_pin(struct cas_index *ix, const void *k, size_t kl, struct cas_index_val **out,
		     const char **v, size_t *vl)
{
	struct rocks *r = rocks_of(ix);
	rocksdb_pinnableslice_t *ps;
	*out = NULL;
	const int rc = db_pin(r, r->ropts, k, kl, &ps);
	if (rc < 0)
		return rc;
	*v = rocksdb_pinnableslice_value(ps, vl);
	*out = (struct cas_index_val *)ps;
	return 0;
}

static void rocks_release(struct cas_index_val *val)
{
	rocksdb_pinnableslice_destroy((rocksdb_pinnableslice_t *)val);
}

static int rocks_has(struct cas_index *ix, const void *k, size_t kl)
{
	struct rocks *r = rocks_of(ix);
	rocksdb_pinnableslice_t *ps;
	const int rc = db_pin(r, r->ropts_nofill, k, kl, &ps);
	if (rc == 0)
		rocksdb_pinnableslice_destroy(ps);
	return rc == 0 ? 1 : rc == -ENOENT ? 0 : rc;
}

static int rocks_scan(struct cas_index *ix, const void *from, size_t fromlen, size_t plen, cas_index_scan_fn cb,
		      void *arg)
{
	struct rocks *r = rocks_of(ix);
	rocksdb_iterator_t *it = rocksdb_create_iterator(r->db, r->ropts);
	int rc = 0;
	if (plen > fromlen)
		plen = fromlen;
	for (rocksdb_iter_seek(it, from, fromlen); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
		size_t kl, vl;
		const char *k = rocksdb_iter_key(it, &kl);
		if (kl < plen || memcmp(k, from, plen))
			break;
		const char *v = rocksdb_iter_value(it, &vl);
		rc = cb(k, kl, v, vl, arg);
		if (rc)
			break;
	}
	char *err = NULL;
	rocksdb_iter_get_error(it, &err);
	rocksdb_iter_destroy(it);
	if (err) {
		if (rc >= 0)
			rc = crest_errx(-EIO, "scanning the index of %s: %s", r->store, err);
		free(err);
	}
	return rc;
}

static struct cas_index_batch *rocks_batch_begin(struct cas_index *ix)
{
	struct rocks_batch *b = malloc(sizeof(*b));
	if (!b)
		return NULL;
	b->base.ix = ix;
	b->wb = rocksdb_writebatch_create();
	return &b->base;
}

static rocksdb_writebatch_t *wb_of(const struct cas_index_batch *b)
{
	return ((const struct rocks_batch *)b)->wb;
}

static void rocks_batch_put(struct cas_index_batch *b, const void *k, size_t kl, const void *v, size_t vl)
{
	rocksdb_writebatch_put(wb_of(b), k, kl, v, vl);
}

static void rocks_batch_delete(struct cas_index_batch *b, const void *k, size_t kl)
{
	rocksdb_writebatch_delete(wb_of(b), k, kl);
}

static size_t rocks_batch_count(const struct cas_index_batch *b)
{
	return (size_t)rocksdb_writebatch_count(wb_of(b));
}

static void rocks_batch_clear(struct cas_index_batch *b)
{
	rocksdb_writebatch_clear(wb_of(b));
}

static int rocks_batch_commit(struct cas_index_batch *b, const char *what)
{
	struct rocks *r = rocks_of(b->ix);
	char *err = NULL;
	rocksdb_write(r->db, r->wopts, wb_of(b), &err);
	if (!err)
		return 0;
	const int rc = crest_errx(-EIO, "%s in %s: %s", what, r->store, err);
	free(err);
	return rc;
}

static void rocks_batch_free(struct cas_index_batch *b)
{
	rocksdb_writebatch_destroy(wb_of(b));
	free(b);
}

static struct cas_index_table *rocks_table_open(struct cas_index *ix, const char *path)
{
	struct rocks_table *t = malloc(sizeof(*t));
	char *p = strdup(path);
	if (!t || !p) {
		free(t);
		free(p);
		return NULL;
	}
	t->base.ix = ix;
	t->eo = rocksdb_envoptions_create();
	t->w = rocksdb_sstfilewriter_create(t->eo, rocks_of(ix)->opts);
	t->path = p;
	t->err = NULL;
	rocksdb_sstfilewriter_open(t->w, path, &t->err);
	return &t->base;
}

static void rocks_table_put(struct cas_index_table *tb, const void *k, size_t kl, const void *v, size_t vl)
{
	struct rocks_table *t = (struct rocks_table *)tb;
	if (!t->err)
		rocksdb_sstfilewriter_put(t->w, k, kl, v, vl, &t->err);
}

/* Finishes the file: 0, or -EIO with a message saying what it held. */
static int rocks_table_finish(struct cas_index_table *tb, const char *what)
{
	struct rocks_table *t = (struct rocks_table *)tb;
	if (!t->err)
		rocksdb_sstfilewriter_finish(t->w, &t->err);
	rocksdb_sstfilewriter_destroy(t->w);
	rocksdb_envoptions_destroy(t->eo);
	int rc = 0;
	if (t->err) {
		rc = crest_errx(-EIO, "writing %s to %s: %s", what, t->path, t->err);
		free(t->err);
	} else {
		chmod(t->path, 0600);   /* as db_files_private makes the index's files */
	}
	free(t->path);
	free(t);
	return rc;
}

static int rocks_ingest(struct cas_index *ix, const char *const *paths, size_t n, const char *what)
{
	struct rocks *r = rocks_of(ix);
	rocksdb_ingestexternalfileoptions_t *io = rocksdb_ingestexternalfileoptions_create();
	rocksdb_ingestexternalfileoptions_set_move_files(io, 1);
	char *err = NULL;
	rocksdb_ingest_external_file(r->db, paths, n, io, &err);
	rocksdb_ingestexternalfileoptions_destroy(io);
	if (!err)
		return 0;
	const int rc = crest_errx(-EIO, "%s to the index of %s: %s", what, r->store, err);
	free(err);
	return rc;
}

const struct cas_index_ops cas_index_rocks = {
	.name = "rocksdb",
	.open = rocks_open,
	.flush = rocks_flush,
	.close = rocks_close,
	.get = rocks_get,
	.pin = rocks_pin,
	.release = rocks_release,
	.has = rocks_has,
	.scan = rocks_scan,
	.batch_begin = rocks_batch_begin,
	.batch_put = rocks_batch_put,
	.batch_delete = rocks_batch_delete,
	.batch_count = rocks_batch_count,
	.batch_clear = rocks_batch_clear,
	.batch_commit = rocks_batch_commit,
	.batch_free = rocks_batch_free,
	.table_open = rocks_table_open,
	.table_put = rocks_table_put,
	.table_finish = rocks_table_finish,
	.ingest = rocks_ingest,
};
