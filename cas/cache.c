/*
 * cache.c - the node-local index of a store on RADOS (rados:POOL[/NS]).
 *
 * A shared store's packs, meta logs, FORMAT and head are objects of the
 * pool; its index is a RocksDB on each node that uses the store, a cache
 * of what the packs and meta logs hold (docs/SCALE.md says why the index
 * is not in RADOS). The cache is trusted only when it was last brought up
 * to date at the store's current head, a random generation token:
 *  - a writer session, once its cache is trusted or rebuilt, draws a new
 *    generation, records it in its cache (the 'h' key, synced) and then
 *    puts it as the head, before it changes anything in RADOS. Every other
 *    node's cache then differs from the head: it is behind.
 *  - a cache whose 'h' differs from the head, or that does not open, is
 *    rebuilt from the packs and meta logs (cas_recover, full) under the
 *    store's writer lock, so that nothing changes in RADOS meanwhile, and
 *    records the head it was rebuilt at.
 * What a crash may leave: a generation recorded in the cache but not put
 * as the head (the cache then differs and is rebuilt, never wrongly
 * trusted), or a rebuild cut short (its 'h' is written last, so the cache
 * is not trusted either).
 *
 * The processes of one node share its cache under an flock of
 * CACHE/cache.lock: shared while a session is open, exclusive while a
 * cache is thrown away and rebuilt (store.c's shared_open).
 */
#include "cas/cas_int.h"
#include "util/err.h"
#include "util/fault.h"
#include "util/sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define HEAD_NAME "head"
#define HEAD_VERSION 1

/* mkdir -p of path, each new directory 0700. */
static int mkdirs(char *path)
{
	for (char *p = path + 1;; p++) {
		if (*p && *p != '/')
			continue;
		const char c = *p;
		*p = 0;
		const int rc = mkdir(path, 0700) < 0 && errno != EEXIST ? -errno : 0;
		*p = c;
		if (rc < 0)
			return crest_errf(rc, "cannot create the index cache directory %.*s", (int)(p - path), path);
		if (!c)
			return 0;
	}
}

int cas_cache_path(const char *spec, char **out)
{
	/* CREST_CACHE_DIR, else the XDG cache, else ~/.cache: the tests give
	 * each "node" a directory of its own. */
	const char *base = getenv("CREST_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
	char root[4096];
	if (base && *base)
		snprintf(root, sizeof(root), "%s", base);
	else if (xdg && *xdg == '/')
		snprintf(root, sizeof(root), "%s/crest", xdg);
	else if (home && *home == '/')
		snprintf(root, sizeof(root), "%s/.cache/crest", home);
	else
		return crest_errx(-EINVAL, "store rados:%s: no place for this node's index cache: set "
				  "CREST_CACHE_DIR (or HOME)", spec);
	/* POOL/NS as two directories; the default namespace is "-", which
	 * no namespace of crest's is (rados.c refuses an empty one). */
	const char *slash = strchr(spec, '/');
	char path[4096];
	const int n = slash ? snprintf(path, sizeof(path), "%s/rados/%.*s/ns-%s", root, (int)(slash - spec), spec,
				       slash + 1)
			    : snprintf(path, sizeof(path), "%s/rados/%s/-", root, spec);
	if (n < 0 || (size_t)n >= sizeof(path))
		return crest_errx(-ENAMETOOLONG, "store rados:%s: its index cache's path is too long", spec);
	if (strstr(spec, "..") || strchr(slash ? slash + 1 : spec, '/'))
		return crest_errx(-EINVAL, "store rados:%s: a pool or namespace name with '..' or a second '/' is "
				  "not taken", spec);
	const int rc = mkdirs(path);
	if (rc < 0)
		return rc;
	*out = strdup(path);
	return *out ? 0 : crest_errf(-ENOMEM, "opening store rados:%s", spec);
}

int cas_cache_lock(struct cas_store *s, bool excl)
{
	if (s->cache_fd < 0) {
		char path[4200];
		snprintf(path, sizeof(path), "%s/cache.lock", s->local);
		s->cache_fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (s->cache_fd < 0)
			return crest_errf(-errno, "cannot open %s", path);
	}
	while (flock(s->cache_fd, excl ? LOCK_EX : LOCK_SH) < 0)
		if (errno != EINTR)
			return crest_errf(-errno, "cannot lock %s/cache.lock", s->local);
	return 0;
}

void cas_cache_unlock(struct cas_store *s)
{
	if (s->cache_fd >= 0)
		close(s->cache_fd);
	s->cache_fd = -1;
}

int cas_head_get(struct cas_store *s, uint8_t gen[CAS_GEN_LEN])
{
	char text[128];
	size_t n;
	const int rc = cas_blob_get(s->objs, HEAD_NAME, text, sizeof(text) - 1, &n);
	if (rc < 0)
		return rc;   /* -ENOENT: no writer has opened the store yet */
	text[n] = 0;
	int version;
	char hex[2 * CAS_GEN_LEN + 2];
	if (sscanf(text, "crest-head %d %33s", &version, hex) != 2)
		return crest_errx(-EBADMSG, "store %s: its head object is not crest's", s->dir);
	if (version != HEAD_VERSION)
		return crest_errx(-EPROTONOSUPPORT, "store %s: its head has version %d, this crest reads %d: use "
				  "a newer crest", s->dir, version, HEAD_VERSION);
	if (strlen(hex) != 2 * CAS_GEN_LEN || hex_decode(hex, gen, CAS_GEN_LEN) < 0)
		return crest_errx(-EBADMSG, "store %s: its head object is damaged", s->dir);
	return 0;
}

int cas_cache_trusted(struct cas_store *s, const uint8_t head[CAS_GEN_LEN])
{
	size_t vl;
	int rc;
	char *v = cas_db_get(s, 'h', "", 0, &vl, &rc);
	if (!v)
		return rc == -ENOENT ? 0 : rc;
	const int same = vl == CAS_GEN_LEN && !memcmp(v, head, CAS_GEN_LEN);
	free(v);
	return same;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	return (flag == FTW_DP ? rmdir(path) : unlink(path)) < 0 && errno != ENOENT ? -1 : 0;
}

int cas_cache_wipe(struct cas_store *s)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/index", s->local);
	if (nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS) < 0 && errno != ENOENT)
		return crest_errf(-errno, "cannot remove the index cache %s", path);
	return 0;
}

int cas_cache_mark(struct cas_store *s, const uint8_t gen[CAS_GEN_LEN])
{
	int rc;
	struct cas_index_batch *b = cas_batch_new(s, &rc);
	if (!b)
		return rc;
	cas_index_batch_put(b, "h", 1, gen, CAS_GEN_LEN);
	rc = cas_index_batch_commit(b, "recording the generation of the index cache");
	cas_index_batch_free(b);
	return rc;
}

static int head_put(struct cas_store *s, const uint8_t gen[CAS_GEN_LEN])
{
	char hex[2 * CAS_GEN_LEN + 1], text[128];
	hex_encode(gen, CAS_GEN_LEN, hex);
	const int n = snprintf(text, sizeof(text), "crest-head %d %s\n", HEAD_VERSION, hex);
	return cas_blob_put(s->objs, HEAD_NAME, text, (size_t)n, false);
}

int cas_head_bump(struct cas_store *s)
{
	uint8_t gen[CAS_GEN_LEN];
	const int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	const bool got = fd >= 0 && read(fd, gen, sizeof(gen)) == (ssize_t)sizeof(gen);
	if (fd >= 0)
		close(fd);
	if (!got)
		return crest_errf(-EIO, "store %s: cannot draw a generation from /dev/urandom", s->dir);
	/* The cache first: a crash before the head is put leaves a cache
	 * that differs from the head, and is rebuilt. */
	int rc = cas_cache_mark(s, gen);
	if (rc == 0)
		rc = cas_locks_writer_check(s->locks);   /* never a head put under a lost lock */
	if (rc == 0)
		crest_fault_die("store.head_bump");   /* tests only: util/fault.h */
	if (rc == 0)
		rc = head_put(s, gen);
	return rc;
}
