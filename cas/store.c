/*
 * store.c - opening a store, the RocksDB index, commits, snapshot names and
 * tags; see cas.h.
 *
 * Keys in the index (one byte of type, then the key):
 *   'c' sha[32]  -> chunk location (21 bytes: pack u32, off u64, stored u32,
 *                   raw u32, codec u8)
 *   'm' id[32]   -> manifest encoding; id = SHA-256 of it
 *   'l' sha[32]  -> a piece of a long extent list (manifest.h), named by
 *                   manifests; sha = SHA-256 of it
 *   'i' id[32]   -> the manifest's summary (its header), for listings
 *   't' name     -> id[32] of the tagged snapshot
 */
#include "cas/cas_int.h"
#include "util/err.h"
#include "util/par.h"
#include "util/sha256.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define FORMAT_NAME "FORMAT"
#define FORMAT_TEXT "crest-store %d\n"

const char *cas_default_path(void)
{
	const char *env = getenv("CREST_STORE");
	return env && *env ? env : "crest-store";
}

const char *cas_dir(const struct cas_store *s)
{
	return s->dir;
}

static int dir_is_empty(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return -errno;
	struct dirent *e;
	int empty = 1;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
			empty = 0;
			break;
		}
	closedir(d);
	return empty;
}

static int fsync_path(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = fsync(fd) < 0 ? -errno : 0;
	close(fd);
	return rc;
}

/* FORMAT is written before anything else, through a rename, so a store is
 * recognisable from its first durable byte on. */
static int format_write(const char *dir)
{
	char tmp[4096], dst[4096], text[64];
	snprintf(tmp, sizeof(tmp), "%s/.FORMAT.tmp", dir);
	snprintf(dst, sizeof(dst), "%s/" FORMAT_NAME, dir);
	int n = snprintf(text, sizeof(text), FORMAT_TEXT, CAS_FORMAT_VERSION);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return crest_errf(-errno, "cannot create %s", tmp);
	if (write(fd, text, (size_t)n) != n || fsync(fd) < 0) {
		int err = -errno;
		close(fd);
		return crest_errf(err ? err : -EIO, "cannot write %s", tmp);
	}
	close(fd);
	if (rename(tmp, dst) < 0)
		return crest_errf(-errno, "cannot rename %s to %s", tmp, dst);
	fsync_path(dir);
	return 0;
}

static int format_check(const char *dir)
{
	char path[4096], text[64] = "";
	snprintf(path, sizeof(path), "%s/" FORMAT_NAME, dir);
	FILE *f = fopen(path, "re");
	if (!f)
		return -errno;
	size_t n = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	text[n] = 0;
	int version = 0;
	if (sscanf(text, "crest-store %d", &version) != 1)
		return crest_errx(-EINVAL, "%s is not a crest store: its FORMAT file is not crest's", dir);
	if (version != CAS_FORMAT_VERSION)
		return crest_errx(-EPROTONOSUPPORT,
				  "store %s has format %d; this crest reads format %d only", dir, version,
				  CAS_FORMAT_VERSION);
	return 0;
}

/* Makes dir a store or checks that it is one. */
static int store_prepare(const char *dir, enum cas_mode mode)
{
	struct stat st;
	if (stat(dir, &st) < 0) {
		if (errno != ENOENT)
			return crest_errf(-errno, "cannot use store %s", dir);
		if (mode == CAS_READ)
			return crest_errx(-ENOENT, "no crest store at %s (crest put creates one; "
					  "--store or CREST_STORE names another)", dir);
		if (mkdir(dir, 0700) < 0)
			return crest_errf(-errno, "cannot create store directory %s", dir);
		return format_write(dir);
	}
	if (!S_ISDIR(st.st_mode))
		return crest_errx(-ENOTDIR, "store %s is not a directory", dir);
	int rc = format_check(dir);
	if (rc != -ENOENT)
		return rc < 0 && !crest_errmsg()[0] ? crest_errf(rc, "cannot read %s/FORMAT", dir) : rc;
	int empty = dir_is_empty(dir);
	if (empty < 0)
		return crest_errf(empty, "cannot read store directory %s", dir);
	if (!empty)
		return crest_errx(-EINVAL, "%s is not a crest store (it has files but no FORMAT); "
				  "refusing to use it", dir);
	if (mode == CAS_READ)
		return crest_errx(-ENOENT, "%s is an empty directory, not a crest store yet", dir);
	chmod(dir, 0700);
	return format_write(dir);
}

static int store_lock(struct cas_store *s)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/lock", s->dir);
	s->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (s->lock_fd < 0)
		return crest_errf(-errno, "cannot open %s", path);
	if (flock(s->lock_fd, LOCK_EX | LOCK_NB) == 0)
		return 0;
	if (errno != EWOULDBLOCK)
		return crest_errf(-errno, "cannot lock %s", path);
	fprintf(stderr, "crest: waiting for another crest writing to %s\n", s->dir);
	while (flock(s->lock_fd, LOCK_EX) < 0)
		if (errno != EINTR)
			return crest_errf(-errno, "cannot lock %s", path);
	return 0;
}

static int db_open(struct cas_store *s)
{
	char path[4096], *err = NULL;
	snprintf(path, sizeof(path), "%s/index", s->dir);
	if (s->mode == CAS_WRITE && mkdir(path, 0700) < 0 && errno != EEXIST)
		return crest_errf(-errno, "cannot create %s", path);
	s->opts = rocksdb_options_create();
	s->topts = rocksdb_block_based_options_create();
	s->cache = rocksdb_cache_create_lru(64u << 20);
	s->bloom = rocksdb_filterpolicy_create_bloom(10);
	rocksdb_block_based_options_set_filter_policy(s->topts, s->bloom);
	rocksdb_block_based_options_set_block_cache(s->topts, s->cache);
	rocksdb_block_based_options_set_cache_index_and_filter_blocks(s->topts, 0);
	rocksdb_options_set_block_based_table_factory(s->opts, s->topts);
	/* Keys are hashes and values hash lists: nothing to gain from compression. */
	rocksdb_options_set_compression(s->opts, rocksdb_no_compression);
	rocksdb_options_set_create_if_missing(s->opts, s->mode == CAS_WRITE);
	rocksdb_options_set_max_open_files(s->opts, 256);
	rocksdb_options_set_info_log_level(s->opts, 4 /* HEADER: keep LOG small */);
	rocksdb_options_set_keep_log_file_num(s->opts, 2);
	if (s->mode == CAS_WRITE)
		s->db = rocksdb_open(s->opts, path, &err);
	else
		s->db = rocksdb_open_for_read_only(s->opts, path, 0, &err);
	if (!s->db) {
		int rc = crest_errx(-EIO, "cannot open the index of store %s: %s", s->dir,
				    err ? err : "unknown RocksDB error");
		free(err);
		return rc;
	}
	s->ropts = rocksdb_readoptions_create();
	s->ropts_nofill = rocksdb_readoptions_create();
	rocksdb_readoptions_set_fill_cache(s->ropts_nofill, 0);
	s->wopts = rocksdb_writeoptions_create();
	rocksdb_writeoptions_set_sync(s->wopts, 1);
	return 0;
}

int cas_open(const char *dir, enum cas_mode mode, struct cas_store **out)
{
	crest_errset_str("");
	struct cas_store *s = calloc(1, sizeof(*s));
	if (!s)
		return crest_errf(-ENOMEM, "opening store %s", dir);
	s->dir = strdup(dir);
	s->mode = mode;
	s->lock_fd = -1;
	s->wfd = -1;
	s->pack_limit = CAS_PACK_LIMIT_DEFAULT;
	/* CREST_PACK_LIMIT is a test knob: tests/store/model.c sets 64 KiB so a
	 * few hundred KiB of data roll over many packs and every read and
	 * commit crosses pack boundaries. The floor only keeps typos (a limit
	 * of a few bytes, one record per pack) from flooding a store with files;
	 * a record larger than the limit still goes into a pack of its own. */
	const char *lim = getenv("CREST_PACK_LIMIT");
	if (lim && atoll(lim) >= (64 << 10))
		s->pack_limit = (uint64_t)atoll(lim);
	pthread_mutex_init(&s->rfd_lock, NULL);
	pthread_mutex_init(&s->reserve_lock, NULL);
	int rc = s->dir ? 0 : -ENOMEM;
	if (rc == 0)
		rc = store_prepare(dir, mode);
	if (rc == 0 && mode == CAS_WRITE)
		rc = store_lock(s);
	if (rc == 0)
		rc = db_open(s);
	if (rc == 0 && mode == CAS_WRITE)
		rc = cas_pack_open_writer(s);
	if (rc < 0) {
		cas_close(s);
		return rc;
	}
	*out = s;
	return 0;
}

void cas_close(struct cas_store *s)
{
	if (!s)
		return;
	cas_pack_close_writer(s);
	cas_pack_close_readers(s);
	if (s->db)
		rocksdb_close(s->db);
	if (s->ropts)
		rocksdb_readoptions_destroy(s->ropts);
	if (s->ropts_nofill)
		rocksdb_readoptions_destroy(s->ropts_nofill);
	if (s->wopts)
		rocksdb_writeoptions_destroy(s->wopts);
	if (s->opts)
		rocksdb_options_destroy(s->opts);
	if (s->topts)
		rocksdb_block_based_options_destroy(s->topts);  /* frees the bloom policy */
	if (s->cache)
		rocksdb_cache_destroy(s->cache);
	if (s->lock_fd >= 0)
		close(s->lock_fd);
	pthread_mutex_destroy(&s->rfd_lock);
	pthread_mutex_destroy(&s->reserve_lock);
	free(s->dir);
	free(s);
}

/* ---- chunk index ---- */

static void loc_encode(const struct cas_loc *l, uint8_t b[21])
{
	for (int i = 0; i < 4; i++)
		b[i] = (uint8_t)(l->pack >> (8 * i));
	for (int i = 0; i < 8; i++)
		b[4 + i] = (uint8_t)(l->off >> (8 * i));
	for (int i = 0; i < 4; i++)
		b[12 + i] = (uint8_t)(l->stored >> (8 * i));
	for (int i = 0; i < 4; i++)
		b[16 + i] = (uint8_t)(l->raw >> (8 * i));
	b[20] = l->codec;
}

static int loc_decode(const uint8_t *b, size_t n, struct cas_loc *l)
{
	if (n != 21)
		return -EBADMSG;
	memset(l, 0, sizeof(*l));
	for (int i = 0; i < 4; i++)
		l->pack |= (uint32_t)b[i] << (8 * i);
	for (int i = 0; i < 8; i++)
		l->off |= (uint64_t)b[4 + i] << (8 * i);
	for (int i = 0; i < 4; i++)
		l->stored |= (uint32_t)b[12 + i] << (8 * i);
	for (int i = 0; i < 4; i++)
		l->raw |= (uint32_t)b[16 + i] << (8 * i);
	l->codec = b[20];
	return 0;
}

/* A value from the index, or NULL with *rc = -ENOENT or an error. */
static char *db_get(struct cas_store *s, char type, const void *key, size_t klen, size_t *vlen, int *rc)
{
	char k[1 + 256], *err = NULL;
	if (klen > 256) {
		*rc = -ENAMETOOLONG;
		return NULL;
	}
	k[0] = type;
	memcpy(k + 1, key, klen);
	char *v = rocksdb_get(s->db, s->ropts, k, klen + 1, vlen, &err);
	if (err) {
		*rc = crest_errx(-EIO, "reading the index of %s: %s", s->dir, err);
		free(err);
		return NULL;
	}
	*rc = v ? 0 : -ENOENT;
	return v;
}

int cas_chunk_lookup(struct cas_store *s, const uint8_t sha[32], struct cas_loc *loc)
{
	size_t n;
	int rc;
	char *v = db_get(s, 'c', sha, 32, &n, &rc);
	if (!v)
		return rc;
	rc = loc_decode((const uint8_t *)v, n, loc);
	rocksdb_free(v);
	if (rc < 0) {
		char hex[65];
		hex_encode(sha, 32, hex);
		return crest_errx(-EBADMSG, "index entry of chunk %s in %s is damaged", hex, s->dir);
	}
	return 0;
}

static int entry_cmp(const void *a, const void *b)
{
	return memcmp(((const struct cas_index_entry *)a)->sha, ((const struct cas_index_entry *)b)->sha, 32);
}

/* A value read pinned (no copy out of RocksDB): 0 with *out set, -ENOENT
 * (no message) when there is none, or -EIO with a message. */
static int db_pin(struct cas_store *s, const rocksdb_readoptions_t *ro, const char *k, size_t kl,
		  rocksdb_pinnableslice_t **out)
{
	char *err = NULL;
	*out = rocksdb_get_pinned(s->db, ro, k, kl, &err);
	if (err) {
		const int rc = crest_errx(-EIO, "reading the index of %s: %s", s->dir, err);
		free(err);
		return rc;
	}
	return *out ? 0 : -ENOENT;
}

/* Whether the index has key k. For pieces, which are written once and then
 * named by every later snapshot whose region did not change there: reading
 * a 672 KB value to learn that costs far less than writing it again. */
static int db_has(struct cas_store *s, const char *k, size_t kl)
{
	rocksdb_pinnableslice_t *ps;
	const int rc = db_pin(s, s->ropts_nofill, k, kl, &ps);
	if (rc == 0)
		rocksdb_pinnableslice_destroy(ps);
	return rc == 0 ? 1 : rc == -ENOENT ? 0 : rc;
}

int cas_commit(struct cas_store *s, struct cas_index_entry *e, size_t n,
	       const struct cas_manifest *m, const char *tag, uint8_t id[32])
{
	struct cas_encoded enc;
	int rc = cas_manifest_encode(m, &enc);
	if (rc < 0)
		return crest_errf(rc, "encoding a manifest");
	rc = sha256_once(enc.buf, enc.len, id);
	if (rc < 0) {
		cas_encoded_free(&enc);
		return rc;
	}
	/* In key order: RocksDB's memtable inserts a batch's keys in order
	 * cheaply (its skip list resumes from the last place), random SHA-256
	 * keys each from the top. Measured, 400K entries: 1.31 s unsorted,
	 * 0.38 s sorted, sort included. */
	qsort(e, n, sizeof(*e), entry_cmp);
	rocksdb_writebatch_t *b = rocksdb_writebatch_create();
	for (size_t i = 0; i < n; i++) {
		char k[33];
		uint8_t v[21];
		k[0] = 'c';
		memcpy(k + 1, e[i].sha, 32);
		loc_encode(&e[i].loc, v);
		rocksdb_writebatch_put(b, k, 33, (const char *)v, 21);
	}
	char k[1 + 256];
	/* Pieces go in the same batch as the manifest that names them: a
	 * manifest is never visible without its pieces. */
	k[0] = 'l';
	for (size_t i = 0; rc == 0 && i < enc.npieces; i++) {
		const struct cas_piece *p = &enc.pieces[i];
		memcpy(k + 1, p->sha, 32);
		const int has = db_has(s, k, 33);
		if (has < 0)
			rc = has;
		else if (!has)   /* a piece already stored is skipped, never the rest */
			rocksdb_writebatch_put(b, k, 33, (const char *)enc.pbuf + p->off, p->len);
	}
	if (rc < 0) {
		rocksdb_writebatch_destroy(b);
		cas_encoded_free(&enc);
		return rc;
	}
	k[0] = 'm';
	memcpy(k + 1, id, 32);
	rocksdb_writebatch_put(b, k, 33, (const char *)enc.buf, enc.len);
	k[0] = 'i';
	rocksdb_writebatch_put(b, k, 33, (const char *)enc.buf, enc.head_len);
	if (tag) {
		size_t tl = strlen(tag);
		k[0] = 't';
		memcpy(k + 1, tag, tl);
		rocksdb_writebatch_put(b, k, tl + 1, (const char *)id, 32);
	}
	char *err = NULL;
	rocksdb_write(s->db, s->wopts, b, &err);
	rocksdb_writebatch_destroy(b);
	cas_encoded_free(&enc);
	if (err) {
		rc = crest_errx(-EIO, "committing a snapshot to %s: %s", s->dir, err);
		free(err);
		return rc;
	}
	cas_pack_mark(s, e, n);
	return 0;
}

/* ---- snapshots and tags ---- */

int cas_tag_check(const char *tag)
{
	size_t n = strlen(tag);
	if (n == 0 || n > 128)
		return crest_errx(-EINVAL, "tag '%s': must be 1 to 128 characters", tag);
	for (size_t i = 0; i < n; i++) {
		char c = tag[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '-' || c == '_' || c == '.' || c == '/' || c == '@' || c == '+'))
			return crest_errx(-EINVAL, "tag '%s': only letters, digits and -_./@+ are allowed", tag);
	}
	return 0;
}

int cas_tag_set(struct cas_store *s, const char *tag, const uint8_t id[32])
{
	int rc = cas_tag_check(tag);
	if (rc < 0)
		return rc;
	char k[1 + 128], *err = NULL;
	size_t tl = strlen(tag);
	k[0] = 't';
	memcpy(k + 1, tag, tl);
	rocksdb_put(s->db, s->wopts, k, tl + 1, (const char *)id, 32, &err);
	if (err) {
		rc = crest_errx(-EIO, "setting tag %s in %s: %s", tag, s->dir, err);
		free(err);
		return rc;
	}
	return 0;
}

/* Calls cb for each key of the given type, in order; stops on non-zero. */
static int db_scan(struct cas_store *s, char type,
		   int (*cb)(const char *k, size_t kl, const char *v, size_t vl, void *arg), void *arg)
{
	rocksdb_iterator_t *it = rocksdb_create_iterator(s->db, s->ropts);
	int rc = 0;
	for (rocksdb_iter_seek(it, &type, 1); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
		size_t kl, vl;
		const char *k = rocksdb_iter_key(it, &kl);
		if (kl < 1 || k[0] != type)
			break;
		const char *v = rocksdb_iter_value(it, &vl);
		rc = cb(k + 1, kl - 1, v, vl, arg);
		if (rc)
			break;
	}
	char *err = NULL;
	rocksdb_iter_get_error(it, &err);
	rocksdb_iter_destroy(it);
	if (err) {
		rc = crest_errx(-EIO, "scanning the index of %s: %s", s->dir, err);
		free(err);
	}
	return rc;
}

struct resolve_ctx {
	const char *prefix;
	size_t plen;
	uint8_t id[32];
	int matches;
};

static int resolve_cb(const char *k, size_t kl, const char *v, size_t vl, void *arg)
{
	(void)v;
	(void)vl;
	struct resolve_ctx *c = arg;
	if (kl != 32)
		return 0;
	char hex[65];
	hex_encode((const uint8_t *)k, 32, hex);
	if (!strncasecmp(hex, c->prefix, c->plen)) {
		memcpy(c->id, k, 32);
		c->matches++;
	}
	return 0;
}

int cas_snapshot_resolve(struct cas_store *s, const char *name, uint8_t id[32])
{
	size_t n = strlen(name), vl;
	int rc;
	if (n == 0)
		return crest_errx(-EINVAL, "empty snapshot name");
	if (n <= 128 && cas_tag_check(name) == 0) {
		char *v = db_get(s, 't', name, n, &vl, &rc);
		if (v) {
			if (vl == 32)
				memcpy(id, v, 32);
			rocksdb_free(v);
			if (vl != 32)
				return crest_errx(-EBADMSG, "tag %s in %s is damaged", name, s->dir);
			return 0;
		}
		if (rc != -ENOENT)
			return rc;
	}
	crest_errset_str("");
	int hexlike = n >= 4 && n <= 64;
	for (size_t i = 0; i < n && hexlike; i++)
		hexlike = (name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f') ||
			  (name[i] >= 'A' && name[i] <= 'F');
	if (!hexlike)
		return crest_errx(-ENOENT, "no snapshot named '%s' in %s (not a tag, not an id prefix)",
				  name, s->dir);
	struct resolve_ctx c = { .prefix = name, .plen = n };
	rc = db_scan(s, 'i', resolve_cb, &c);
	if (rc < 0)
		return rc;
	if (c.matches == 0)
		return crest_errx(-ENOENT, "no snapshot named '%s' in %s", name, s->dir);
	if (c.matches > 1)
		return crest_errx(-EINVAL, "snapshot prefix '%s' is ambiguous in %s (%d snapshots match)",
				  name, s->dir, c.matches);
	memcpy(id, c.id, 32);
	return 0;
}

/* A manifest's pieces are fetched, checked and decoded one to a thread. */
struct fetch_job {
	struct cas_store *s;
	struct cas_manifest *m;
	const char *hex;             /* the snapshot, for messages */
};

static int piece_fetch(struct par *p, void *tls, size_t i)
{
	(void)tls;
	const struct fetch_job *f = p->arg;
	const struct cas_piece *pc = &f->m->pieces[i];
	char k[33], ph[65];
	k[0] = 'l';
	memcpy(k + 1, pc->sha, 32);
	hex_encode(pc->sha, 32, ph);
	const char *name = f->m->streams[pc->stream].name;
	rocksdb_pinnableslice_t *ps;
	int rc = db_pin(f->s, f->s->ropts, k, sizeof(k), &ps);
	if (rc == -ENOENT)
		return crest_errx(-EBADMSG, "snapshot %.12s in %s is damaged: piece %.12s of the extent list "
				  "of %s is missing from the index", f->hex, f->s->dir, ph, name);
	if (rc < 0)
		return rc;
	size_t n;
	const char *v = rocksdb_pinnableslice_value(ps, &n);
	rc = cas_manifest_piece_decode(f->m, i, (const uint8_t *)v, n);
	rocksdb_pinnableslice_destroy(ps);
	if (rc == -EBADMSG)
		return crest_errx(rc, "snapshot %.12s in %s is damaged: piece %.12s of the extent list of %s "
				  "does not match its SHA-256 or does not decode", f->hex, f->s->dir, ph, name);
	if (rc < 0)
		return crest_errf(rc, "checking the extent list of %s in snapshot %.12s", name, f->hex);
	return 0;
}

int cas_manifest_load(struct cas_store *s, const uint8_t id[32], struct cas_manifest **out)
{
	char hex[65];
	hex_encode(id, 32, hex);
	char k[33];
	k[0] = 'm';
	memcpy(k + 1, id, 32);
	rocksdb_pinnableslice_t *ps;
	int rc = db_pin(s, s->ropts, k, sizeof(k), &ps);
	if (rc == -ENOENT)
		return crest_errx(rc, "snapshot %s is not in %s", hex, s->dir);
	if (rc < 0)
		return rc;
	size_t n;
	const char *v = rocksdb_pinnableslice_value(ps, &n);
	/* Long extent lists are pieces (manifest.h), fetched and checked after
	 * the manifest that names them, so this hash is short. Nothing
	 * decoded is returned unless every byte of it checks out. */
	uint8_t sum[32];
	rc = sha256_once(v, n, sum);
	struct cas_manifest *m = NULL;
	if (rc == 0 && memcmp(sum, id, 32))
		rc = crest_errx(-EBADMSG, "manifest of snapshot %.12s in %s is damaged "
				"(its SHA-256 does not match its id)", hex, s->dir);
	if (rc == 0) {
		rc = cas_manifest_decode((const uint8_t *)v, n, false, &m);
		if (rc == -EBADMSG)
			crest_errx(rc, "manifest of snapshot %.12s in %s is damaged (it does not decode)", hex, s->dir);
		else if (rc < 0)
			crest_errf(rc, "decoding manifest of snapshot %.12s", hex);
	}
	rocksdb_pinnableslice_destroy(ps);
	if (rc == 0 && m->npieces) {
		struct fetch_job f = { .s = s, .m = m, .hex = hex };
		struct par p = { .n = m->npieces, .fn = piece_fetch, .arg = &f };
		rc = par_run(&p, 0, NULL, 0);
	}
	if (rc < 0) {
		cas_manifest_free(m);
		return rc;
	}
	*out = m;
	return 0;
}

static int count_cb(const char *k, size_t kl, const char *v, size_t vl, void *arg)
{
	(void)k;
	(void)kl;
	(void)v;
	uint64_t *c = arg;
	c[0]++;
	c[1] += vl;
	return 0;
}

int cas_index_stats(struct cas_store *s, struct cas_index_stats *st)
{
	uint64_t m[2] = { 0 }, l[2] = { 0 };
	int rc = db_scan(s, 'm', count_cb, m);
	if (rc == 0)
		rc = db_scan(s, 'l', count_cb, l);
	*st = (struct cas_index_stats){ .manifests = m[0], .manifest_bytes = m[1], .pieces = l[0],
					.piece_bytes = l[1] };
	return rc;
}

struct list_ctx {
	struct cas_store *s;
	struct cas_snapinfo *v;
	size_t n, cap;
	int err;
};

static int list_cb(const char *k, size_t kl, const char *v, size_t vl, void *arg)
{
	struct list_ctx *c = arg;
	if (kl != 32)
		return 0;
	struct cas_manifest *m;
	if (cas_manifest_decode((const uint8_t *)v, vl, true, &m) < 0) {
		char hex[65];
		hex_encode((const uint8_t *)k, 32, hex);
		return crest_errx(-EBADMSG, "summary of snapshot %.12s in %s is damaged", hex, c->s->dir);
	}
	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 16;
		struct cas_snapinfo *nv = realloc(c->v, cap * sizeof(*nv));
		if (!nv) {
			cas_manifest_free(m);
			return -ENOMEM;
		}
		c->v = nv;
		c->cap = cap;
	}
	struct cas_snapinfo *si = &c->v[c->n++];
	memset(si, 0, sizeof(*si));
	memcpy(si->id, k, 32);
	si->head = m;
	return 0;
}

static int tag_cb(const char *k, size_t kl, const char *v, size_t vl, void *arg)
{
	struct list_ctx *c = arg;
	if (vl != 32)
		return 0;
	for (size_t i = 0; i < c->n; i++) {
		struct cas_snapinfo *si = &c->v[i];
		if (memcmp(si->id, v, 32))
			continue;
		char **nt = realloc(si->tags, (si->ntags + 1) * sizeof(*nt));
		if (!nt)
			return -ENOMEM;
		si->tags = nt;
		si->tags[si->ntags] = strndup(k, kl);
		if (!si->tags[si->ntags])
			return -ENOMEM;
		si->ntags++;
	}
	return 0;
}

static int snapinfo_cmp(const void *a, const void *b)
{
	const struct cas_snapinfo *x = a, *y = b;
	if (x->head->time_ns != y->head->time_ns)
		return x->head->time_ns < y->head->time_ns ? -1 : 1;
	return memcmp(x->id, y->id, 32);
}

int cas_snapshot_list(struct cas_store *s, struct cas_snapinfo **out, size_t *n)
{
	struct list_ctx c = { .s = s };
	int rc = db_scan(s, 'i', list_cb, &c);
	if (rc == 0)
		rc = db_scan(s, 't', tag_cb, &c);
	if (rc < 0) {
		cas_snapshot_list_free(c.v, c.n);
		return rc == -ENOMEM ? crest_errf(rc, "listing snapshots") : rc;
	}
	if (c.n)
		qsort(c.v, c.n, sizeof(*c.v), snapinfo_cmp);
	*out = c.v;
	*n = c.n;
	return 0;
}

void cas_snapshot_list_free(struct cas_snapinfo *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		cas_manifest_free(v[i].head);
		for (size_t j = 0; j < v[i].ntags; j++)
			free(v[i].tags[j]);
		free(v[i].tags);
	}
	free(v);
}

struct foreach_ctx {
	int (*cb)(const uint8_t sha[32], const struct cas_loc *loc, void *arg);
	void *arg;
};

static int foreach_cb(const char *k, size_t kl, const char *v, size_t vl, void *arg)
{
	struct foreach_ctx *c = arg;
	struct cas_loc loc;
	if (kl != 32 || loc_decode((const uint8_t *)v, vl, &loc) < 0)
		return crest_errx(-EBADMSG, "a chunk index entry is damaged");
	return c->cb((const uint8_t *)k, &loc, c->arg);
}

int cas_index_foreach(struct cas_store *s,
		      int (*cb)(const uint8_t sha[32], const struct cas_loc *loc, void *arg), void *arg)
{
	struct foreach_ctx c = { cb, arg };
	return db_scan(s, 'c', foreach_cb, &c);
}
