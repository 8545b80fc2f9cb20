/*
 * cache.c - the node-local index of a store on RADOS (rados:POOL[/NS]).
 *
 * A shared store's packs, meta logs, FORMAT and head are objects of the
 * pool; its index is a RocksDB on each node that uses the store, a cache
 * of what the packs and meta logs hold (docs/SCALE.md says why the index
 * is not in RADOS). The head (FORMAT.md, "A store on RADOS") holds a
 * generation, a base and a state, open or sealed:
 *  - a writer session, once its cache is trusted, caught up or rebuilt,
 *    draws a new generation, records it in its cache (the 'h' key,
 *    synced) and then puts it as the head, open, before it changes
 *    anything in RADOS. Every other node's cache then differs from the
 *    head: it is behind.
 *  - a writer that closes cleanly, once it has cut what it wrote past its
 *    last commit (pack.c's rollback), puts a new generation, sealed: every
 *    byte of the packs and logs is then committed, and stays (only gc and
 *    repair remove or cut what a commit made, and they draw a new base
 *    first).
 *  - a cache whose 'h' equals the head's generation is trusted.
 *  - a cache marked at a sealed head whose base is the head's, when the
 *    head is sealed too, catches up: cas_recover_catch_up indexes what
 *    lies past its own ends, which is all committed and none of it cut
 *    since its mark, from the chunk entries each commit logged beside its
 *    manifest (store.c's chunks_recs) rather than the packs' bytes.
 *    Anything else that differs (an open head: a writer runs, or one died
 *    and left bytes the next may cut; another base; a cache from before
 *    version 2) is rebuilt from the packs and meta logs (cas_recover,
 *    full).
 *  - both happen under the store's writer lock, so that nothing changes
 *    in RADOS meanwhile, and record the head they reached.
 * What a crash may leave: a generation recorded in the cache but not put
 * as the head (the cache then differs and is rebuilt, never wrongly
 * trusted: an open head is never caught up to), or a rebuild or catch-up
 * cut short (its 'h' is written last, and a catch-up first marks the
 * cache as trusted at nothing).
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
#define HEAD_VERSION 2

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

/* "crest-head 2 GEN BASE sealed|open", or version 1's "crest-head 1 GEN"
 * (read as open, base zero: a cache catches up from neither). */
int cas_head_get(struct cas_store *s, struct cas_head *h)
{
	char text[160];
	size_t n;
	const int rc = cas_blob_get(s->objs, HEAD_NAME, text, sizeof(text) - 1, &n);
	if (rc < 0)
		return rc;   /* -ENOENT: no writer has opened the store yet */
	text[n] = 0;
	int version;
	char gen[2 * CAS_GEN_LEN + 2], base[2 * CAS_GEN_LEN + 2] = "", state[8] = "";
	const int got = sscanf(text, "crest-head %d %33s %33s %7s", &version, gen, base, state);
	if (got < 2)
		return crest_errx(-EBADMSG, "store %s: its head object is not crest's", s->dir);
	if (version < 1 || version > HEAD_VERSION)
		return crest_errx(-EPROTONOSUPPORT, "store %s: its head has version %d, this crest reads 1 to %d: "
				  "use a newer crest", s->dir, version, HEAD_VERSION);
	memset(h, 0, sizeof(*h));
	bool ok = strlen(gen) == 2 * CAS_GEN_LEN && hex_decode(gen, h->gen, CAS_GEN_LEN) >= 0;
	if (version >= 2) {
		ok = ok && got == 4 && strlen(base) == 2 * CAS_GEN_LEN && hex_decode(base, h->base, CAS_GEN_LEN) >= 0 &&
		     (!strcmp(state, "sealed") || !strcmp(state, "open"));
		h->sealed = !strcmp(state, "sealed");
	}
	if (!ok)
		return crest_errx(-EBADMSG, "store %s: its head object is damaged", s->dir);
	return 0;
}

/* The cache's 'h' value: the generation, then (since heads of version 2)
 * the base and a byte whose bit 0 says the head was sealed. A 16-byte
 * value, from a crest before catch-up, is trusted at its generation and
 * caught up from never. */
#define MARK_LEN (2 * CAS_GEN_LEN + 1)

static int mark_get(struct cas_store *s, uint8_t v[MARK_LEN], size_t *len)
{
	size_t vl;
	int rc;
	char *p = cas_db_get(s, 'h', "", 0, &vl, &rc);
	*len = 0;
	if (!p)
		return rc == -ENOENT ? 0 : rc;
	if (vl == CAS_GEN_LEN || vl == MARK_LEN) {
		memcpy(v, p, vl);
		*len = vl;
	}
	free(p);
	return 0;
}

int cas_cache_trusted(struct cas_store *s, const struct cas_head *head)
{
	uint8_t v[MARK_LEN];
	size_t len;
	const int rc = mark_get(s, v, &len);
	if (rc < 0)
		return rc;
	return len >= CAS_GEN_LEN && !memcmp(v, head->gen, CAS_GEN_LEN);
}

int cas_cache_can_catch_up(struct cas_store *s, const struct cas_head *head)
{
	uint8_t v[MARK_LEN];
	size_t len;
	const int rc = mark_get(s, v, &len);
	if (rc < 0)
		return rc;
	return head->sealed && len == MARK_LEN && (v[2 * CAS_GEN_LEN] & 1) &&
	       !memcmp(v + CAS_GEN_LEN, head->base, CAS_GEN_LEN);
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

int cas_cache_mark(struct cas_store *s, const struct cas_head *head)
{
	uint8_t v[MARK_LEN];
	memcpy(v, head->gen, CAS_GEN_LEN);
	memcpy(v + CAS_GEN_LEN, head->base, CAS_GEN_LEN);
	v[2 * CAS_GEN_LEN] = head->sealed ? 1 : 0;
	int rc;
	struct cas_index_batch *b = cas_batch_new(s, &rc);
	if (!b)
		return rc;
	cas_index_batch_put(b, "h", 1, v, sizeof(v));
	rc = cas_index_batch_commit(b, "recording the generation of the index cache");
	cas_index_batch_free(b);
	return rc;
}

static int head_put(struct cas_store *s, const struct cas_head *h)
{
	char gen[2 * CAS_GEN_LEN + 1], base[2 * CAS_GEN_LEN + 1], text[160];
	hex_encode(h->gen, CAS_GEN_LEN, gen);
	hex_encode(h->base, CAS_GEN_LEN, base);
	const int n = snprintf(text, sizeof(text), "crest-head %d %s %s %s\n", HEAD_VERSION, gen, base,
			       h->sealed ? "sealed" : "open");
	return cas_blob_put(s->objs, HEAD_NAME, text, (size_t)n, false);
}

static int draw(struct cas_store *s, uint8_t *v, size_t n)
{
	const int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	const bool got = fd >= 0 && read(fd, v, n) == (ssize_t)n;
	if (fd >= 0)
		close(fd);
	return got ? 0 : crest_errf(-EIO, "store %s: cannot draw a generation from /dev/urandom", s->dir);
}

/* The cache first: a crash before the head is put leaves a cache that
 * differs from the head, and is rebuilt. And never a head put under a lost
 * lock: another writer may hold it now. */
static int head_move(struct cas_store *s, struct cas_head *h, const char *fault)
{
	int rc = cas_cache_mark(s, h);
	if (rc == 0)
		rc = cas_locks_writer_check(s->locks);
	if (rc == 0)
		crest_fault_die(fault);   /* tests only: util/fault.h */
	if (rc == 0)
		rc = head_put(s, h);
	if (rc == 0)
		s->head = *h;
	return rc;
}

int cas_head_bump(struct cas_store *s, bool rebase)
{
	struct cas_head h = { .sealed = false };
	memcpy(h.base, s->head.base, CAS_GEN_LEN);
	int rc = draw(s, h.gen, CAS_GEN_LEN);
	if (rc == 0 && (rebase || !s->head_known))
		rc = draw(s, h.base, CAS_GEN_LEN);
	if (rc == 0)
		rc = head_move(s, &h, "store.head_bump");
	s->head_known |= rc == 0;
	s->head_bumped |= rc == 0;
	return rc;
}

int cas_head_seal(struct cas_store *s)
{
	if (!s->head_bumped)
		return 0;
	struct cas_head h = { .sealed = true };
	memcpy(h.base, s->head.base, CAS_GEN_LEN);
	int rc = draw(s, h.gen, CAS_GEN_LEN);
	if (rc == 0)
		rc = head_move(s, &h, "store.head_seal");
	return rc;
}
