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
 *   'h'          -> a store on RADOS: the head (generation, base, sealed)
 *                   this node's index was last brought up to date at (cache.c)
 */
#include "cas/cas_int.h"
#include "cas/format.h"
#include "util/err.h"
#include "util/fault.h"
#include "util/par.h"
#include "util/parse.h"
#include "util/progress.h"
#include "util/sha256.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
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

const char *cas_local_dir(const struct cas_store *s)
{
	return s->local;
}

/* Whether dir names a store on RADOS, and then its "POOL[/NS]". */
static const char *rados_spec(const char *dir)
{
	return !strncmp(dir, "rados:", 6) ? dir + 6 : NULL;
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

int cas_fsync_path(const char *path)
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
	cas_fsync_path(dir);
	return 0;
}

/* The version FORMAT's text (store's, whichever kind) says, checked. */
static int format_parse(const char *store, const char *text, int *out)
{
	int version = 0;
	if (sscanf(text, "crest-store %d", &version) != 1)
		return crest_errx(-EINVAL, "%s is not a crest store: its FORMAT is not crest's", store);
	if (version > CAS_FORMAT_VERSION)
		return crest_errx(-EPROTONOSUPPORT,
				  "store %s has format %d, newer than this crest (it reads formats %d to %d): "
				  "use a newer crest", store, version, CAS_FORMAT_OLDEST, CAS_FORMAT_VERSION);
	if (version < CAS_FORMAT_OLDEST)
		return crest_errx(-EPROTONOSUPPORT, "store %s has format %d, which no crest reads", store, version);
	*out = version;
	return 0;
}

static int format_check(const char *dir, int *out)
{
	char path[4096], text[64] = "";
	snprintf(path, sizeof(path), "%s/" FORMAT_NAME, dir);
	FILE *f = fopen(path, "re");
	if (!f)
		return -errno;
	size_t n = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	text[n] = 0;
	return format_parse(dir, text, out);
}

/* Whether dir holds nothing but, maybe, the temporary file of a FORMAT
 * write that was killed before its rename. */
static int dir_is_blank(const char *dir)
{
	char tmp[4096];
	snprintf(tmp, sizeof(tmp), "%s/.FORMAT.tmp", dir);
	if (unlink(tmp) < 0 && errno != ENOENT)
		return -errno;
	return dir_is_empty(dir);
}

/* Whether dir, which has no FORMAT, is plainly a crest store whose FORMAT
 * was lost, so that casctl repair may write it again. The rule, strict so
 * that repair never claims a directory that is someone else's:
 *   - every entry of dir is one a store has (FORMAT, lock, lock.wants,
 *     packs, meta, index, index.damaged-*, jobs, readers, gc, .FORMAT.tmp);
 *   - meta/ holds at least one meta log (NNNNNNNN.log) whose header is a
 *     crest meta log's, its number that of its name.
 * Meta logs exist from format 2 on, and the format they carry is read by
 * this crest, so FORMAT is written as this crest's version (a format 2
 * store is read the same as 3; a writer would rewrite 2 to 3 anyway). A
 * format 1 store has no meta log and is not taken: its FORMAT is "crest-
 * store 1", which its owner can write back by hand. 1 when it is, 0 when
 * not, or a negative errno. */
static int format_lost(const char *dir)
{
	static const char *const names[] = { "FORMAT", "lock", "lock.wants", "packs", "meta", "index", "jobs",
					     "readers", "gc", ".FORMAT.tmp" };
	DIR *d = opendir(dir);
	if (!d)
		return -errno;
	struct dirent *e;
	int ok = 1;
	while (ok && (e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || !strncmp(e->d_name, "index.damaged-", 14))
			continue;
		bool known = false;
		for (size_t i = 0; i < sizeof(names) / sizeof(*names) && !known; i++)
			known = !strcmp(e->d_name, names[i]);
		ok = known;
	}
	closedir(d);
	if (!ok)
		return 0;
	char path[4096];
	snprintf(path, sizeof(path), "%s/meta", dir);
	d = opendir(path);
	if (!d)
		return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
	int found = 0;
	while (!found && (e = readdir(d))) {
		unsigned num;
		char tail[8];
		if (strlen(e->d_name) != 12 || sscanf(e->d_name, "%8u.%3s", &num, tail) != 2 || strcmp(tail, "log"))
			continue;
		char lp[4200];
		snprintf(lp, sizeof(lp), "%s/%s", path, e->d_name);
		const int fd = open(lp, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		uint8_t h[CAS_FILE_HEADER];
		uint32_t version, n;
		if (fd >= 0 && pread(fd, h, sizeof(h), 0) == (ssize_t)sizeof(h) &&
		    cas_file_header_check(h, CAS_META_MAGIC, &version, &n) == 0 && n == num)
			found = 1;
		if (fd >= 0)
			close(fd);
	}
	closedir(d);
	return found;
}

/* The refusal of a directory with files but no FORMAT: one that is
 * plainly a store that lost it (format_lost) is told its remedy. */
static int format_missing(const char *dir)
{
	if (format_lost(dir) == 1)
		return crest_errx(-EINVAL, "store %s has lost its FORMAT file (its packs/ and meta/ are a crest "
				  "store's): casctl repair writes it again", dir);
	return crest_errx(-EINVAL, "%s is not a crest store (it has files but no FORMAT); refusing to use it", dir);
}

/* Whether st (the store directory, or one of its own entries) is safe for
 * this user, as root above all, to trust: owned by this user or by root,
 * and writable by nobody else, or someone else could swap its files for
 * symlinks or their own. 0 or -EPERM with a message saying how to fix it. */
static int entry_trusted(const char *dir, const char *name, const struct stat *st)
{
	uid_t me = geteuid();
	const char *sep = name ? "/" : "";
	if (!name)
		name = "";
	if (st->st_uid != me && st->st_uid != 0)
		return crest_errx(-EPERM, "store %s%s%s belongs to uid %u, not to this user (uid %u) or root: "
				  "refusing to trust it (chown %u %s%s%s, or use a store of your own)", dir, sep,
				  name, (unsigned)st->st_uid, (unsigned)me, (unsigned)me, dir, sep, name);
	if ((S_ISDIR(st->st_mode) || S_ISREG(st->st_mode)) && (st->st_mode & 022))
		return crest_errx(-EPERM, "store %s%s%s is writable by %s (mode %03o): refusing to trust it "
				  "(chmod %s %s%s%s)", dir, sep, name, st->st_mode & 002 ? "everyone" : "its group",
				  st->st_mode & 0777, S_ISDIR(st->st_mode) ? "700" : "600", dir, sep, name);
	return 0;
}

/* The store directory and the entries crest keeps in it: none may be a
 * symlink (crest, as root, would follow it anywhere), and none may be
 * another user's or writable by others. Checked once, at open: an entry
 * cannot change afterwards unless its directory lets someone else write. */
static int store_trusted(const char *dir, const struct stat *st)
{
	static const char *const names[] = { FORMAT_NAME, "lock", "packs", "meta", "index", "jobs", "readers", "gc" };
	int rc = entry_trusted(dir, NULL, st);
	for (size_t i = 0; rc == 0 && i < sizeof(names) / sizeof(*names); i++) {
		char path[4096];
		struct stat es;
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		if (lstat(path, &es) < 0) {
			if (errno != ENOENT)
				rc = crest_errf(-errno, "cannot check %s", path);
			continue;
		}
		if (S_ISLNK(es.st_mode))
			rc = crest_errx(-EPERM, "store %s: %s is a symlink, which a store never holds: refusing "
					"to follow it (put the real %s in its place)", dir, path, names[i]);
		else
			rc = entry_trusted(dir, names[i], &es);
	}
	return rc;
}

/* The store directory opened and flock()ed exclusively: FORMAT is written
 * only under this lock (the descriptor; closing it drops the lock). */
static int dir_lock(const char *dir)
{
	const int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return crest_errf(-errno, "cannot open store directory %s", dir);
	while (flock(dfd, LOCK_EX) < 0)
		if (errno != EINTR) {
			const int rc = crest_errf(-errno, "cannot lock store directory %s", dir);
			close(dfd);
			return rc;
		}
	return dfd;
}

/* Checks that dir is a store, or (create: cas_init alone) makes it one.
 *
 * Only cas_init creates: a writer's open of a missing or empty directory
 * fails, so a mistyped --store is an error rather than a new store beside
 * the real one.
 *
 * Two callers may create the same new store at once (two `crest put
 * --init`s into a fresh --store). mkdir tolerates EEXIST, and the FORMAT of
 * a store that has none is written only under an flock held on the
 * directory itself, re-checked once the lock is held: the first to get it
 * writes FORMAT, the others then find a store and open it. *created says
 * which one this was. */
static int store_prepare(const char *dir, bool create, int *format, bool *created)
{
	*format = CAS_FORMAT_VERSION;
	*created = false;
	struct stat st;
	if (stat(dir, &st) < 0) {
		if (errno != ENOENT)
			return crest_errf(-errno, "cannot use store %s", dir);
		if (!create)
			return crest_errx(-ENOENT, "no crest store at %s (crest init makes one there, as "
					  "does --init; --store or CREST_STORE names another)", dir);
		if (mkdir(dir, 0700) < 0 && errno != EEXIST)
			return crest_errf(-errno, "cannot create store directory %s", dir);
		if (stat(dir, &st) < 0)
			return crest_errf(-errno, "cannot use store %s", dir);
	}
	if (!S_ISDIR(st.st_mode))
		return crest_errx(-ENOTDIR, "store %s is not a directory", dir);
	int rc = store_trusted(dir, &st);
	if (rc < 0)
		return rc;
	rc = format_check(dir, format);
	if (rc != -ENOENT)
		return rc < 0 && !crest_errmsg()[0] ? crest_errf(rc, "cannot read %s/FORMAT", dir) : rc;
	if (!create) {
		int empty = dir_is_empty(dir);
		if (empty < 0)
			return crest_errf(empty, "cannot read store directory %s", dir);
		if (!empty)
			return format_missing(dir);
		return crest_errx(-ENOENT, "%s is an empty directory, not a crest store yet (crest init "
				  "makes it one, as does --init)", dir);
	}
	const int dfd = dir_lock(dir);
	if (dfd < 0)
		return dfd;
	rc = format_check(dir, format);
	if (rc == -ENOENT) {
		int empty = dir_is_blank(dir);
		if (empty < 0)
			rc = crest_errf(empty, "cannot read store directory %s", dir);
		else if (!empty && format_lost(dir) == 1)   /* a store: not to be made again */
			rc = crest_errx(-EEXIST, "%s is a crest store already, which has lost its FORMAT "
					"file: casctl repair writes it again", dir);
		else if (!empty)
			rc = format_missing(dir);
		else {
			fchmod(dfd, 0700);
			rc = format_write(dir);
			*created = rc == 0;
		}
	} else if (rc < 0 && !crest_errmsg()[0]) {
		rc = crest_errf(rc, "cannot read %s/FORMAT", dir);
	}
	close(dfd);   /* drops the lock */
	return rc;
}

/* casctl repair of a store that lost its FORMAT (format_lost): FORMAT is
 * written again, under the directory's lock as a creation is, so that no
 * cas_init writes it meanwhile. Nothing when FORMAT is there or the
 * directory is not plainly a store (store_prepare then refuses it). */
static int format_restore(const char *dir)
{
	int format, rc = format_check(dir, &format);
	struct stat st;
	/* Only a directory this user may trust (store_prepare says why not). */
	if (rc != -ENOENT || stat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || store_trusted(dir, &st) < 0 ||
	    format_lost(dir) != 1) {
		crest_errset_str("");
		return 0;
	}
	crest_errset_str("");
	const int dfd = dir_lock(dir);
	if (dfd < 0)
		return dfd;
	rc = 0;
	if (format_check(dir, &format) == -ENOENT && format_lost(dir) == 1) {
		rc = format_write(dir);
		if (rc == 0)
			fprintf(stderr, "crest: store %s had lost its FORMAT file; its packs/ and meta/ are a "
				"crest store's: FORMAT written again (format %d)\n", dir, CAS_FORMAT_VERSION);
	}
	close(dfd);
	crest_errset_str("");
	return rc;
}

/* How long a writer waits for the store's lock: $CREST_LOCK_TIMEOUT seconds
 * (0: not at all), else 10 minutes. Long enough for the writers that take
 * the lock for a while on purpose to finish (a `crest put` or checkpoint
 * ingest of a few hundred GB at the measured ingest rates), short enough
 * that a writer held up by a stopped crest, or by a job that keeps a
 * libcrest handle open for hours, ends with a message instead of hanging
 * a script for good. Whoever expects longer waits sets the variable. */
#define LOCK_TIMEOUT_DEFAULT 600.0
#define LOCK_REPEAT_S 15     /* the waiting message, again every this often */

static double lock_timeout(void)
{
	const char *env = getenv("CREST_LOCK_TIMEOUT");
	if (!env || !*env)
		return LOCK_TIMEOUT_DEFAULT;
	/* The one duration parser (a bare number is seconds, "2m" works
	 * too), bounded to a year: "inf", "nan", "-1" and 1e400 are not
	 * waits. */
	uint64_t ns;
	if (parse_duration(env, PARSE_NS_S, 0, 366 * PARSE_NS_DAY, &ns) < 0) {
		fprintf(stderr, "crest: CREST_LOCK_TIMEOUT=%s is not a duration from 0 to 366 days (seconds, "
			"or 30s, 5m, 1h); using %.0f\n", env, LOCK_TIMEOUT_DEFAULT);
		return LOCK_TIMEOUT_DEFAULT;
	}
	return (double)ns / 1e9;
}

static double mono_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

bool cas_lock_wanted(struct cas_store *s)
{
	return s->mode != CAS_READ && s->locks && s->locks->ops->wanted(s->locks);
}

bool cas_lock_wanted_dir(const char *dir)
{
	struct cas_locks *l;
	const char *spec = rados_spec(dir);
	if ((spec ? cas_locks_rados.open(spec, &l) : cas_locks_flock.open(dir, &l)) < 0)
		return false;
	const bool wanted = l->ops->wanted(l);
	cas_locks_close(l);
	return wanted;
}

/* The one-writer lock. A writer that finds it taken says who holds it, says
 * so again every LOCK_REPEAT_S, and gives up after lock_timeout(); with
 * s->nowait it does not wait at all (-EWOULDBLOCK, no message). */
static int store_lock(struct cas_store *s)
{
	const struct cas_locks_ops *op = s->locks->ops;
	/* Silent for the first second: a libcrest session between checkpoints
	 * steps aside within a poll (cas_lock_wanted), and saying so every
	 * time would be noise. */
	const double limit = lock_timeout(), t0 = mono_s();
	double next_say = t0 + 1.0;
	bool said = false, want = false;
	long sleep_ms = 20;
	char who[400];
	int rc;
	for (;;) {
		rc = op->writer_try(s->locks);
		if (rc != -EWOULDBLOCK || s->nowait)
			break;
		if (!want)
			want = op->want(s->locks);
		const double now = mono_s();
		if (now - t0 >= limit) {
			op->writer_holder(s->locks, who, sizeof(who));
			rc = crest_errx(-ETIMEDOUT, "store %s is locked by %s: gave up after %.0f s "
					"(CREST_LOCK_TIMEOUT sets how long to wait)", s->dir, who, now - t0);
			break;
		}
		if (now >= next_say) {
			op->writer_holder(s->locks, who, sizeof(who));
			if (!said)
				fprintf(stderr, "crest: store %s is locked by %s; waiting up to %.0f s "
					"(CREST_LOCK_TIMEOUT)\n", s->dir, who, limit);
			else
				fprintf(stderr, "crest: still waiting for store %s, locked by %s: %.0f s of %.0f s\n",
					s->dir, who, now - t0, limit);
			next_say = said ? next_say + LOCK_REPEAT_S : t0 + LOCK_REPEAT_S;
			said = true;
		}
		struct timespec ts = { 0, sleep_ms * 1000000L };
		nanosleep(&ts, NULL);
		if (sleep_ms < 200)
			sleep_ms *= 2;
	}
	if (want)
		op->unwant(s->locks);
	return rc;
}

/* The index closed (if open). */
static void db_free(struct cas_store *s)
{
	cas_index_close(s->ix);
	s->ix = NULL;
}

/* Opens the index (index.h; RocksDB's options and its read-only open
 * beside a writer are index_rocks.c's). A writer removes the table files
 * a killed ingest left (ingest.c). */
static int db_open_as(struct cas_store *s, bool write)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/index", s->local);
	const int rc = cas_index_rocks.open(path, write ? CAS_INDEX_WRITE : CAS_INDEX_READ, s->dir, &s->ix);
	if (rc == 0 && write)
		cas_ingest_clean(path);
	return rc;
}

static int db_open(struct cas_store *s)
{
	return db_open_as(s, s->mode != CAS_READ);
}

int cas_db_reopen(struct cas_store *s)
{
	db_free(s);
	return db_open(s);
}

bool cas_writer_live(const struct cas_store *s)
{
	return s->locks->ops->writer_live(s->locks);
}

/* For repair: the index moves to index.damaged-TIME (-TIME.N when a repair
 * of the same second took that), kept for whoever wants to look at it;
 * repair never deletes. */
static int index_set_aside(struct cas_store *s)
{
	char from[4096], to[4096 + 64];
	snprintf(from, sizeof(from), "%s/index", s->local);
	const long long t = (long long)time(NULL);
	for (unsigned k = 0; k < 1000; k++) {
		if (k)
			snprintf(to, sizeof(to), "%s/index.damaged-%lld.%u", s->local, t, k);
		else
			snprintf(to, sizeof(to), "%s/index.damaged-%lld", s->local, t);
		if (rename(from, to) == 0) {
			fprintf(stderr, "crest: repair: the old index of %s is kept as %s\n", s->dir, to);
			return 0;
		}
		if (errno == ENOENT)
			return 0;   /* no index to keep */
		if (errno != EEXIST && errno != ENOTEMPTY)
			break;
	}
	return crest_errf(-errno, "cannot move %s aside to %s", from, to);
}

/* After db_open failed on an index that a failed ingest may have left
 * naming files RocksDB removed (ingest.c): the index is set aside and a
 * new one opened, for the caller to fill with cas_recover(full). */
static int index_rebuild_open(struct cas_store *s)
{
	char why[1024];
	crest_errcpy(why, sizeof(why));
	fprintf(stderr, "crest: %s\ncrest: a commit to %s failed while adding its index entries; rebuilding the "
		"index from the packs and meta logs (as casctl repair does)\n", why, s->dir);
	db_free(s);
	int rc = index_set_aside(s);
	if (rc == 0)
		rc = db_open(s);
	return rc;
}

/* A writer whose ingest failed leaves an index that opens: closed and
 * opened again here, under the writer lock, and rebuilt when it does not
 * open, so that readers (which cannot rebuild it) find it whole. Best
 * effort: the next writer's open does the same. */
static void index_after_failed_ingest(struct cas_store *s)
{
	char msg[1024];   /* the failure the caller reports stays its message */
	crest_errcpy(msg, sizeof(msg));
	db_free(s);
	int rc = db_open(s);
	if (rc < 0) {
		uint32_t floor;
		rc = index_rebuild_open(s);
		if (rc == 0)
			rc = cas_recover(s, true, &floor);
		if (rc < 0)
			fprintf(stderr, "crest: rebuilding the index of %s: %s (the next writer tries again)\n", s->dir,
				crest_errmsg());
	}
	/* An index that opened has lost the leftover files (db_open); a
	 * rebuilt one never had them. */
	crest_errset_str(msg);
}

bool cas_store_damaged(const struct cas_store *s)
{
	return s->nlost > 0 || s->marked;
}

bool cas_store_broken(const struct cas_store *s)
{
	return s->broken != 0;
}

/* A reader holds STORE/readers shared while it is open: gc unlinks the
 * packs it has rewritten only while no reader holds it (a reader that
 * opened before the rewrite may still look chunks up in the old packs). A
 * reader that cannot open the file (a read-only store) goes on without:
 * gc then never finds the store free of readers it could not see, so it
 * only ever errs towards keeping old packs.
 *
 * Invariant: a reader holds STORE/readers before it opens the index, and
 * until it closes it. Either gc's check (cas_readers_none, step 5 in gc.h)
 * comes first, and then the batch that retired the old packs was written
 * before this reader's open, whose index never names them; or the reader
 * holds the lock first, and gc keeps the packs. Joined after the open (as
 * it once was), a gc could check in between and unlink packs the index
 * the reader had just read still names: a healthy store read as damaged. */
static void readers_join(struct cas_store *s)
{
	s->locks->ops->readers_join(s->locks);
}

int cas_readers_none(struct cas_store *s)
{
	return s->locks->ops->readers_none(s->locks);
}

void cas_readers_let_in(struct cas_store *s)
{
	s->locks->ops->readers_let_in(s->locks);
}

static int any_cb(const char *k, size_t kl, const char *v, size_t vl, void *arg)
{
	(void)k;
	(void)kl;
	(void)v;
	(void)vl;
	(void)arg;
	return 1;
}

bool cas_db_any(struct cas_store *s, char type)
{
	return cas_index_scan(s->ix, &type, 1, 1, any_cb, NULL) == 1;
}

/* A store in a directory: its FORMAT checked (and written again by
 * repair), the writer's lock, the index opened and put right. */
static int dir_open(struct cas_store *s, uint32_t *floor)
{
	const char *dir = s->dir;
	const enum cas_mode mode = s->mode;
	int rc = cas_objects_dir.open(dir, dir, &s->objs);
	if (rc == 0)
		rc = cas_locks_flock.open(dir, &s->locks);
	bool created;
	if (rc == 0 && mode == CAS_REPAIR)
		rc = format_restore(dir);
	if (rc == 0)
		rc = store_prepare(dir, false, &s->format, &created);
	if (rc == 0 && mode != CAS_READ)
		rc = store_lock(s);
	if (rc == 0 && mode == CAS_REPAIR && s->format < 2)
		rc = crest_errx(-EPROTONOSUPPORT, "store %s has format 1: its snapshots are in its index alone, "
				"so a repair could not find them; any crest writer upgrades it (crest put), after "
				"which repair works", dir);
	if (rc == 0 && mode == CAS_REPAIR)
		rc = index_set_aside(s);
	if (rc == 0 && mode == CAS_READ)
		readers_join(s);   /* before the index: the invariant at readers_join */
	if (rc == 0)
		rc = db_open(s);
	if (rc == 0 && mode == CAS_READ)
		crest_fault_pause("store.read_open");   /* tests only: util/fault.h */
	/* An index that names table files it does not have, left so by an
	 * ingest that failed (ingest.c says how RocksDB can), is rebuilt from
	 * the packs and meta logs, as casctl repair would: they hold every
	 * commit. Only then: any other failure to open stays the user's to
	 * look at. */
	bool rebuild = false;
	if (rc < 0 && mode == CAS_WRITE && s->format >= 2 && cas_ingest_left(s->local)) {
		rc = index_rebuild_open(s);
		rebuild = rc == 0;
	}
	/* A writer puts the index right before it writes anything (recover.c;
	 * the notes at cas_commit). */
	if (rc == 0 && mode != CAS_READ)
		rc = cas_recover(s, mode == CAS_REPAIR || rebuild, floor);
	if (rc == 0 && mode != CAS_READ && s->format < CAS_FORMAT_VERSION) {
		if (s->format < 2)
			rc = cas_upgrade_from_1(s);
		if (rc == 0)
			rc = format_write(dir);
		s->format = CAS_FORMAT_VERSION;
	}
	return rc;
}

/* ---- a store on RADOS ----
 *
 * Its FORMAT is a blob, and its index this node's cache of what its packs
 * and meta logs hold, trusted only at the store's head (cache.c says the
 * rules and what a crash may leave). The order of a writer's open:
 *   1. the store's writer lock (leased: locks_rados.c);
 *   2. the cache shared; trusted when its generation is the head's;
 *   3. otherwise, with the cache exclusive, caught up when it was marked
 *      at a sealed head of the same base and the head is sealed
 *      (cas_recover_catch_up), else thrown away and rebuilt from the packs
 *      and meta logs (cas_recover, full); neither changes anything in
 *      RADOS;
 *   4. a new generation into the cache, then as the head, open
 *      (cas_head_bump): from here on every other node's cache is behind;
 *   5. only then the tails put right (cas_recover), which may cut packs.
 * Its clean close, once pack.c's rollback has cut what it wrote past its
 * commits, seals the head (cas_close). gc draws a new base before it
 * removes anything (gc.c), repair at step 4.
 * A reader takes no writer lock while its cache is trusted: the readers'
 * lock first (the invariant at readers_join), then the head, then the
 * cache. One that finds its cache behind catches it up or rebuilds it as
 * a writer would, without changing anything in RADOS (but a head, when
 * there is none), lets go of the writer's lock and starts again: a head
 * still the same after the readers' lock is taken again means nothing was
 * written since, so the index it opens names no pack that gc removed. */

/* Reading FORMAT, for shared_open. */
static int shared_format(struct cas_store *s)
{
	char text[64];
	size_t n;
	int rc = cas_blob_get(s->objs, FORMAT_NAME, text, sizeof(text) - 1, &n);
	if (rc == -ENOENT)
		return crest_errx(-ENOENT, "no crest store at %s (crest init --store %s makes one)", s->dir, s->dir);
	if (rc == -EFBIG)
		return crest_errx(-EINVAL, "%s is not a crest store: its FORMAT is not crest's", s->dir);
	if (rc < 0)
		return rc;
	text[n] = 0;
	return format_parse(s->dir, text, &s->format);
}

/* Whether this node has an index of the store: RocksDB's CURRENT, there
 * once one was made. (A read-only open of none would try for a while.) */
static bool cache_has_index(const struct cas_store *s)
{
	struct stat st;
	char path[4200];
	snprintf(path, sizeof(path), "%s/index/CURRENT", s->local);
	return stat(path, &st) == 0;
}

/* What shared_index found of this node's cache. */
enum cache_state { CACHE_TRUSTED, CACHE_CAUGHT_UP, CACHE_REBUILT };

/* Step 3's catch-up, under the exclusive cache lock: the cache marked at
 * nothing first, so that one cut short is rebuilt next time, then what lies
 * past its ends indexed. 1: caught up (or found trusted: another process of
 * this node caught it up meanwhile); 0: it must be rebuilt, said why. */
static int shared_catch_up(struct cas_store *s, const struct cas_head *head)
{
	int rc = db_open_as(s, true);
	int now = rc == 0 ? cas_cache_trusted(s, head) : rc;
	if (now == 0)
		now = cas_cache_can_catch_up(s, head) > 0 ? 2 : 0;
	const struct cas_head none = { .sealed = false };
	if (now == 2)
		rc = cas_cache_mark(s, &none);
	const uint64_t t0 = time_now_ns();
	if (now == 2 && rc == 0)
		rc = cas_recover_catch_up(s);
	if (now == 2 && rc == 0) {
		/* Said, as a rebuild is: a catch-up reads what other nodes wrote. */
		fprintf(stderr, "crest: store %s: this node's index caught up with what other nodes committed "
			"(%u snapshots: %llu chunk entries from the meta logs, %llu records read from packs; "
			"%.2f s)\n", s->dir, s->rec.recovered, (unsigned long long)s->rec.listed,
			(unsigned long long)s->rec.records, (double)(time_now_ns() - t0) / 1e9);
		return 1;
	}
	if (now == 1)
		return 1;
	if (now == 2 || now < 0)
		fprintf(stderr, "crest: store %s: this node's index could not catch up (%s)\n", s->dir,
			crest_errmsg());
	crest_errset_str("");
	db_free(s);
	return 0;
}

/* Steps 2 and 3: the cache opened (for writing when write), trusted,
 * caught up or rebuilt; *st says which. The cache lock is left shared
 * when trusted, exclusive otherwise (the caller converts it). */
static int shared_index(struct cas_store *s, bool write, enum cache_state *st, bool *have_head,
			struct cas_head *head)
{
	*st = CACHE_TRUSTED;
	const bool had = cache_has_index(s);   /* before the open below makes one */
	char path[4200];
	snprintf(path, sizeof(path), "%s/index", s->local);
	int rc = cas_cache_lock(s, false);
	if (rc == 0)
		rc = cas_head_get(s, head);
	*have_head = rc == 0;
	if (rc == -ENOENT)
		rc = 0;
	if (rc < 0)
		return rc;
	if (*have_head) {
		s->head = *head;
		s->head_known = true;
	}
	int trusted = 0, catch_up = 0;
	if (*have_head && s->mode != CAS_REPAIR && db_open_as(s, write) == 0) {
		trusted = cas_cache_trusted(s, head);
		if (trusted == 0)
			catch_up = cas_cache_can_catch_up(s, head);
	}
	crest_errset_str("");
	if (trusted < 0)
		return trusted;
	if (trusted)
		return 0;
	db_free(s);
	rc = cas_cache_lock(s, true);
	if (rc == 0 && catch_up > 0) {
		const int got = shared_catch_up(s, head);
		if (got == 1) {
			*st = CACHE_CAUGHT_UP;
			return 0;
		}
	}
	/* Said, as a rebuild of a big store takes a while; not for a store
	 * no writer has opened yet (nothing to build from). */
	if (rc == 0 && *have_head)
		fprintf(stderr, "crest: store %s: %s (%s); %s it from its packs and meta logs\n", s->dir,
			s->mode == CAS_REPAIR ? "repair of this node's index of it"
			: had ? "this node's index of it is behind the store (another node wrote to it, or a writer "
				"stopped short)"
			      : "this node has no index of it yet",
			path, had ? "rebuilding" : "building");
	if (rc == 0)
		rc = cas_cache_wipe(s);
	if (rc == 0)
		rc = db_open_as(s, true);
	uint32_t floor;
	if (rc == 0)
		rc = cas_recover(s, true, &floor);
	*st = CACHE_REBUILT;
	return rc;
}

static int shared_writer(struct cas_store *s, uint32_t *floor)
{
	enum cache_state st;
	bool have_head;
	struct cas_head head;
	int rc = store_lock(s);
	if (rc == 0)
		rc = shared_index(s, true, &st, &have_head, &head);
	/* Repair draws a new base: it may drop what commits made, so no
	 * cache catches up across it (cache.c). */
	if (rc == 0)
		rc = cas_head_bump(s, s->mode == CAS_REPAIR);
	if (rc == 0)
		rc = cas_cache_lock(s, false);
	if (rc == 0 && st != CACHE_REBUILT)
		rc = cas_recover(s, false, floor);
	return rc;
}

static int shared_reader(struct cas_store *s)
{
	for (int attempt = 0;; attempt++) {
		readers_join(s);
		enum cache_state st;
		bool have_head;
		struct cas_head head;
		int rc = cas_cache_lock(s, false);
		if (rc == 0)
			rc = cas_head_get(s, &head);
		have_head = rc == 0;
		if (rc == -ENOENT)
			rc = 0;
		int trusted = 0;
		if (rc == 0 && have_head && cache_has_index(s) && db_open(s) == 0)
			trusted = cas_cache_trusted(s, &head);
		crest_errset_str("");
		if (rc < 0 || trusted < 0)
			return rc < 0 ? rc : trusted;
		if (trusted)
			return 0;
		db_free(s);
		if (attempt == 3)
			return crest_errx(-EAGAIN, "store %s: writers on other nodes changed it during each of %d "
					  "rebuilds of this node's index; try again", s->dir, attempt);
		/* Rebuilt under the writer's lock, then all let go of (a new
		 * locks handle: the old one's readers' hold goes with it). */
		rc = store_lock(s);
		if (rc == 0)
			rc = shared_index(s, true, &st, &have_head, &head);
		if (rc == 0 && !have_head)
			rc = cas_head_bump(s, false);
		else if (rc == 0 && st != CACHE_TRUSTED)
			rc = cas_cache_mark(s, &head);
		db_free(s);
		cas_cache_unlock(s);
		cas_locks_close(s->locks);
		s->locks = NULL;
		const int rc2 = rc < 0 ? rc : cas_locks_rados.open(s->dir + 6, &s->locks);
		if (rc2 < 0)
			return rc2;
	}
}

static int shared_open(struct cas_store *s, const char *spec, uint32_t *floor)
{
	s->local = NULL;
	s->shared = true;
	int rc = cas_objects_rados.open(spec, s->dir, &s->objs);
	if (rc == 0)
		rc = cas_locks_rados.open(spec, &s->locks);
	if (rc == 0)
		rc = shared_format(s);
	if (rc == 0)
		rc = cas_cache_path(spec, &s->local);
	if (rc == 0)
		rc = s->mode == CAS_READ ? shared_reader(s) : shared_writer(s, floor);
	if (rc == 0 && s->mode == CAS_READ)
		crest_fault_pause("store.read_open");   /* tests only: util/fault.h */
	return rc;
}

static int store_open(const char *dir, enum cas_mode mode, bool nowait, struct cas_store **out)
{
	crest_errset_str("");
	struct cas_store *s = calloc(1, sizeof(*s));
	if (!s)
		return crest_errf(-ENOMEM, "opening store %s", dir);
	s->dir = strdup(dir);
	s->local = s->dir;
	s->cache_fd = -1;
	s->mode = mode;
	s->nowait = nowait;
	const char *spec = s->dir ? rados_spec(dir) : NULL;
	s->pack_limit = spec ? CAS_PACK_LIMIT_RADOS : CAS_PACK_LIMIT_DEFAULT;
	/* CREST_PACK_LIMIT is a test knob: tests/store/model.c sets 64 KiB so a
	 * few hundred KiB of data roll over many packs and every read and
	 * commit crosses pack boundaries. The floor only keeps typos (a limit
	 * of a few bytes, one record per pack) from flooding a store with files;
	 * a record larger than the limit still goes into a pack of its own. On
	 * RADOS the knob only lowers the limit: a larger object is refused. */
	const char *lim = getenv("CREST_PACK_LIMIT");
	if (lim && atoll(lim) >= (64 << 10) && (!spec || (uint64_t)atoll(lim) <= CAS_PACK_LIMIT_RADOS))
		s->pack_limit = (uint64_t)atoll(lim);
	/* CREST_META_LIMIT, the same for meta logs (meta.c's rollover):
	 * tests/store/model.c makes logs roll over often. */
	s->meta_limit = CAS_META_LIMIT_DEFAULT;
	lim = getenv("CREST_META_LIMIT");
	if (lim && atoll(lim) >= (64 << 10))
		s->meta_limit = (uint64_t)atoll(lim);
	pthread_mutex_init(&s->rfd_lock, NULL);
	pthread_mutex_init(&s->reserve_lock, NULL);
	uint32_t floor = 1;
	int rc = !s->dir ? crest_errf(-ENOMEM, "opening store %s", dir) : spec ? shared_open(s, spec, &floor)
									       : dir_open(s, &floor);
	if (rc == 0 && mode != CAS_READ)
		rc = cas_pack_open_writer(s, floor);
	if (rc == 0 && mode == CAS_WRITE)
		crest_fault_pause("store.write_open");   /* tests only: util/fault.h */
	if (rc == 0)
		s->marked = cas_db_any(s, 'd');
	if (rc == 0 && mode == CAS_READ)
		rc = cas_hidden_load(s);
	if (rc < 0) {
		cas_close(s);
		return rc;
	}
	*out = s;
	return 0;
}

/* A store on RADOS is made by its FORMAT, put exclusively: of two inits
 * at once, one makes it and the other is told it exists. */
static int shared_init(const char *dir, const char *spec)
{
	/* A name the store's cache could not take is refused before the
	 * store is made. */
	char *local;
	int rc = cas_cache_path(spec, &local);
	if (rc < 0)
		return rc;
	free(local);
	struct cas_objects *o;
	rc = cas_objects_rados.open(spec, dir, &o);
	if (rc < 0)
		return rc;
	char text[64];
	const int n = snprintf(text, sizeof(text), FORMAT_TEXT, CAS_FORMAT_VERSION);
	rc = cas_blob_put(o, FORMAT_NAME, text, (size_t)n, true);
	if (rc == -EEXIST)
		rc = crest_errx(-EEXIST, "%s is a crest store already", dir);
	cas_objects_close(o);
	return rc;
}

int cas_init(const char *dir)
{
	int format;
	bool created;
	crest_errset_str("");
	if (rados_spec(dir))
		return shared_init(dir, rados_spec(dir));
	int rc = store_prepare(dir, true, &format, &created);
	if (rc == 0 && !created)
		rc = crest_errx(-EEXIST, "%s is a crest store already", dir);
	return rc;
}

int cas_open(const char *dir, enum cas_mode mode, struct cas_store **out)
{
	return store_open(dir, mode, false, out);
}

int cas_open_nowait(const char *dir, struct cas_store **out)
{
	return store_open(dir, CAS_WRITE, true, out);
}

/* The memtable a writer flushes at close, at least (below): 8 MiB, or
 * CREST_CLOSE_FLUSH_MIN bytes (a test knob). */
static uint64_t close_flush_min(void)
{
	const char *v = getenv("CREST_CLOSE_FLUSH_MIN");
	return v && *v ? strtoull(v, NULL, 10) : (uint64_t)8 << 20;
}

void cas_close(struct cas_store *s)
{
	if (!s)
		return;
	const bool opened = s->writer_ready;   /* the writer's open went through: its tails were put right */
	cas_pack_close_writer(s);
	if (s->mode == CAS_WRITE && s->broken && cas_ingest_left(s->local))
		index_after_failed_ingest(s);
	cas_pack_close_readers(s);
	cas_meta_close(s);
	/* A shared store's writer that leaves nothing past its commits seals
	 * the head, so that other nodes' caches catch up instead of being
	 * rebuilt (cache.c): one whose open failed part way (its tails maybe
	 * not cut), whose commit broke, or whose cuts failed does not. Not
	 * sealed, they are rebuilt: slower, never wrong. */
	if (s->shared && s->mode != CAS_READ && opened && s->head_bumped && !s->broken && !s->uncut && s->ix &&
	    cas_head_seal(s) < 0)
		fprintf(stderr, "crest: store %s: could not seal its head (%s); other nodes rebuild their index "
			"of it at their next open\n", s->dir, crest_errmsg());
	free(s->ends);
	free(s->lost);
	free(s->hidden);
	free(s->unidx);
	/* A writer's commits leave the index's log behind it, which every
	 * later open replays (index_rocks.c's flush says the cost): a writer
	 * that leaves close_flush_min() bytes of it or more has it flushed. */
	if (s->ix && s->mode != CAS_READ)
		cas_index_flush(s->ix, close_flush_min());
	db_free(s);
	cas_locks_close(s->locks);   /* the writer's lock, its name first (locks_flock.c) */
	cas_objects_close(s->objs);
	cas_cache_unlock(s);
	pthread_mutex_destroy(&s->rfd_lock);
	pthread_mutex_destroy(&s->reserve_lock);
	if (s->local != s->dir)
		free(s->local);
	free(s->dir);
	free(s);
}

/* ---- chunk index ---- */

/* A value from the index, or NULL with *rc = -ENOENT or an error. */
char *cas_db_get(struct cas_store *s, char type, const void *key, size_t klen, size_t *vlen, int *rc)
{
	char k[1 + 256], *v;
	if (klen > 256) {
		*rc = -ENAMETOOLONG;
		return NULL;
	}
	k[0] = type;
	memcpy(k + 1, key, klen);
	*rc = cas_index_get(s->ix, k, klen + 1, &v, vlen);
	return *rc == 0 ? v : NULL;
}

int cas_chunk_lookup(struct cas_store *s, const uint8_t sha[32], struct cas_loc *loc)
{
	size_t n;
	int rc;
	char *v = cas_db_get(s, 'c', sha, 32, &n, &rc);
	if (!v)
		return rc;
	rc = cas_loc_decode((const uint8_t *)v, n, loc);
	free(v);
	if (rc < 0) {
		char hex[65];
		hex_encode(sha, 32, hex);
		return crest_errx(-EBADMSG, "index entry of chunk %s in %s is damaged", hex, s->dir);
	}
	/* A chunk in a pack that is gone is as good as absent: a writer
	 * stores it again, and its new entry replaces this one. */
	return s->nlost && cas_pack_lost(s, loc->pack) ? -ENOENT : 0;
}

static int entry_cmp(const void *a, const void *b)
{
	return memcmp(((const struct cas_index_entry *)a)->sha, ((const struct cas_index_entry *)b)->sha, 32);
}

/* Sorts e by id. A first ingest of 8 GiB in 4 KiB chunks commits 2 M
 * entries, and qsort's 40 M comparisons took most of a second of the
 * commit: ids are SHA-256, so a counting pass on their first two bytes
 * leaves buckets of a few entries each, which qsort finishes. Crafted ids
 * sharing a prefix only make one bucket large: qsort, not worse. Without
 * memory for the copy, qsort alone. */
void cas_entries_sort(struct cas_index_entry *e, size_t n)
{
	if (n < 2)
		return;   /* sorted; and e may be NULL (a job snapshot commits no chunk) */
	struct cas_index_entry *t = n >= 4096 ? malloc(n * sizeof(*t)) : NULL;
	size_t *start = t ? calloc(65536 + 1, sizeof(*start)) : NULL;
	if (!start) {
		free(t);
		qsort(e, n, sizeof(*e), entry_cmp);
		return;
	}
	for (size_t i = 0; i < n; i++)
		start[((size_t)e[i].sha[0] << 8 | e[i].sha[1]) + 1]++;
	for (size_t b = 0; b < 65536; b++)
		start[b + 1] += start[b];
	for (size_t i = 0; i < n; i++)
		t[start[(size_t)e[i].sha[0] << 8 | e[i].sha[1]]++] = e[i];
	/* start[b] is now where bucket b + 1 begins. */
	memcpy(e, t, n * sizeof(*e));
	for (size_t b = 0, from = 0; b < 65536; from = start[b++])
		if (start[b] - from > 1)
			qsort(e + from, start[b] - from, sizeof(*e), entry_cmp);
	free(start);
	free(t);
}

/* Whether the index has key k. For pieces, which are written once and then
 * named by every later snapshot whose region did not change there: reading
 * a 672 KB value to learn that costs far less than writing it again. */
static int db_has(struct cas_store *s, const char *k, size_t kl)
{
	return cas_index_has(s->ix, k, kl);
}

/* ---- commits ----
 *
 * NOTES ON THE DESIGN: what is durable when, and what a reader may trust.
 *
 * A snapshot is committed by up to four writes, each made durable before
 * the next begins:
 *   1. its new chunk records, in packs (the engine; cas_pack_sync);
 *   2. for a commit of cas_ingest_min() chunks or more: their 'c' entries,
 *      the pieces the index lacks ('l') and the new pack ends ('p'), as
 *      table files added by one RocksDB ingest (ingest.c), all or none,
 *      synced when it returns. RocksDB
 *      inserting 2 M entries into its memtable took 2 s on one thread;
 *      files built by 8 threads and ingested take a tenth of that;
 *   3. its manifest, the extent-list pieces the index lacks, and its tag, as
 *      records of this writer's meta log (cas_meta_append, one fdatasync);
 *   4. one synced RocksDB batch: the 'c' entries and 'l' pieces step 2 did
 *      not add, 'm' and 'i' for the manifest, 't' for the tag, and the
 *      new committed ends of the packs ('p') and of the meta log ('q') it
 *      wrote to. This batch is the commit point: cas_commit returns 0 only
 *      once it is durable.
 * So everything the index names lies below a committed end it also records,
 * in files whose data was synced before it: a reader that trusts the index
 * reads only durable bytes. Step 2 keeps that: the ingest adds entries and
 * the ends covering them at once. Entries it added without their commit
 * (a kill or failure after it) are like a revoked commit's (below): sound
 * for dedup, and gc's to remove. A commit killed after step 3 is in doubt
 * as below, and finds its chunks indexed by step 2 or past the ends.
 *
 * What a crash or a failure may leave, and what the next writer does about
 * it (recover.c, run by every writer open before it writes anything):
 *  - Bytes past a pack's committed end, or whole packs past the last one the
 *    index records: a killed or failed ingest. Nothing names them; the next
 *    writer cuts them off (their pack numbers may then be used again, since
 *    nothing can refer to them). A writer with several lanes (cas.h) leaves
 *    such a tail in the last pack of each lane, which may lie below the last
 *    pack recorded; but no pack below that lacks a recorded end, so none is
 *    mistaken for a format 1 pack and kept whole: a writer numbers its packs
 *    in the order of the reservations that open them, across lanes, and
 *    commits a prefix of its reservations, so a pack none of whose records
 *    is committed was opened after every committed record was reserved, and
 *    is numbered above every pack holding one.
 *  - Meta records past a log's committed end: a commit killed between steps
 *    3 and 4, or a batch RocksDB lost (a damaged WAL drops the batches after
 *    the damage). Their data is durable, so the next writer finds the chunk
 *    records past the packs' ends, checks that every chunk each manifest
 *    needs is there, and commits the snapshot again, saying so; one that is
 *    not whole is reported and left out. Until a writer has done that,
 *    readers do not list such a commit, and `crest ls` and `casctl verify`
 *    say that the index lacks it (verify fails): a store in that state is
 *    not reported whole.
 *  - An ingest that failed in step 2. It may have landed, so the handle is
 *    broken as below and its packs stay whole; nothing is in the meta log
 *    to revoke. RocksDB 7.8 can leave the index unable to open then (a
 *    MANIFEST record naming files it removed: ingest.c), so the handle
 *    reopens the index before it closes, and the index is rebuilt from the
 *    packs and meta logs if it does not open (index_after_failed_ingest);
 *    a writer killed before that leaves it to the next writer's open.
 *  - A batch that failed in step 4 (an error from the WAL's write or sync).
 *    It may be in RocksDB's memtable and WAL nonetheless, and reappear at
 *    the next open. The commit then appends a revoke record for the id to
 *    the meta log (synced) and marks the handle broken: RocksDB refuses
 *    writes after such an error, and the handle's packs are left whole,
 *    since the batch that names their bytes may come back. The caller
 *    reports the failure and opens the store again: that writer applies the
 *    revoke (removes 'm', 'i' and the tag, or puts the tag back where it
 *    was), so a failed snapshot is never listed. Its chunk entries may stay:
 *    their bytes were synced in step 1 and are never cut while an entry
 *    names them, so dedup against them is sound.
 *  - If the revoke itself cannot be written, the snapshot is in doubt: its
 *    data is all durable, and if the batch reappears it is listed, whole
 *    and verified; the message said so.
 * Pack numbers are never taken from below the highest the index records,
 * so an entry can never come to name another pack's bytes.
 */

/* Index keys with a number: type, then the number big-endian (key order is
 * numeric order). */
void cas_key_num(char k[5], char type, uint32_t num)
{
	k[0] = type;
	be32_put((uint8_t *)k + 1, num);
}

struct ends_ctx {
	const struct cas_store *s;
	struct cas_pack_end *v;
	size_t n, cap;
};

static int ends_cb(const char *k, size_t kl, const char *v, size_t vl, void *arg)
{
	struct ends_ctx *c = arg;
	if (kl != 5 || vl != 8 || be32_get((const uint8_t *)k + 1) >= CAS_FILE_NUM_MAX)
		return crest_errx(-EBADMSG, "index of %s: a '%c' entry is damaged", c->s->dir, k[0]);
	if (c->n == c->cap) {
		const size_t cap = c->cap ? c->cap * 2 : 16;
		struct cas_pack_end *nv = realloc(c->v, cap * sizeof(*nv));
		if (!nv)
			return crest_errf(-ENOMEM, "reading the index of %s", c->s->dir);
		c->v = nv;
		c->cap = cap;
	}
	c->v[c->n++] = (struct cas_pack_end){ be32_get((const uint8_t *)k + 1), le64_get((const uint8_t *)v) };
	return 0;
}

int cas_ends_load(struct cas_store *s, char type, struct cas_pack_end **out, size_t *n)
{
	struct ends_ctx c = { .s = s };
	const int rc = cas_index_scan(s->ix, &type, 1, 1, ends_cb, &c);
	if (rc < 0) {
		free(c.v);
		c.v = NULL;
		c.n = 0;
	}
	*out = c.v;
	*n = c.n;
	return rc;
}

void cas_batch_end(struct cas_index_batch *b, char type, uint32_t num, uint64_t end)
{
	char k[5];
	uint8_t v[8];
	cas_key_num(k, type, num);
	le64_put(v, end);
	cas_index_batch_put(b, k, sizeof(k), v, sizeof(v));
}

void cas_batch_entry(struct cas_index_batch *b, const uint8_t sha[32], const struct cas_loc *loc)
{
	char k[33];
	uint8_t v[CAS_LOC_BYTES];
	k[0] = 'c';
	memcpy(k + 1, sha, 32);
	cas_loc_encode(loc, v);
	cas_index_batch_put(b, k, sizeof(k), v, sizeof(v));
}

struct cas_index_batch *cas_batch_new(struct cas_store *s, int *rc)
{
	struct cas_index_batch *b = cas_index_batch_begin(s->ix);
	*rc = b ? 0 : crest_errf(-ENOMEM, "writing to the index of %s", s->dir);
	return b;
}

/* ends with the committed ends of e merged in (a new array in *out). */
int cas_ends_merge(const struct cas_store *s, const struct cas_index_entry *e, size_t n,
		      struct cas_pack_end **out, size_t *nout)
{
	struct cas_pack_end *v = malloc((s->nends + 4) * sizeof(*v));
	size_t nv = s->nends, cap = s->nends + 4;
	if (!v)
		return -ENOMEM;
	if (s->nends)   /* s->ends is NULL before the first commit */
		memcpy(v, s->ends, s->nends * sizeof(*v));
	for (size_t i = 0; i < n; i++) {
		const uint64_t end = e[i].loc.off + CAS_REC_HEADER + e[i].loc.stored;
		size_t j = 0;
		while (j < nv && v[j].pack != e[i].loc.pack)
			j++;
		if (j == nv) {
			if (nv == cap) {
				cap *= 2;
				struct cas_pack_end *nn = realloc(v, cap * sizeof(*nn));
				if (!nn) {
					free(v);
					return -ENOMEM;
				}
				v = nn;
			}
			v[nv++] = (struct cas_pack_end){ e[i].loc.pack, end };
		} else if (end > v[j].end) {
			v[j].end = end;
		}
	}
	*out = v;
	*nout = nv;
	return 0;
}

/* After a failed batch: a durable revoke record for the id (with the tag's
 * previous target, to put back), and the handle broken. See the notes. */
static int tag_taken(const char *tag, const uint8_t id[32])
{
	char hex[65];
	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", id[i]);
	return crest_errx(-EEXIST, "tag %s already names snapshot %.12s, and tags do not move "
			  "(a branch does; `crest tag --force` moves a tag on purpose)", tag, hex);
}

static void commit_revoke(struct cas_store *s, const uint8_t id[32], const char *tag, const uint8_t *old_tag)
{
	struct cas_meta_buf mb = { 0 };
	uint8_t pl[1 + 32 + 128] = { 0 };
	size_t len = 0;
	if (tag) {
		pl[0] = old_tag ? 1 : 0;
		if (old_tag)
			memcpy(pl + 1, old_tag, 32);
		const size_t tl = strlen(tag);
		memcpy(pl + 33, tag, tl);
		len = 33 + tl;
	}
	cas_meta_rec(&mb, CAS_META_REVOKE, id, pl, len);
	char msg[1024];
	crest_errcpy(msg, sizeof(msg));
	const int rc = cas_meta_append(s, &mb);
	free(mb.p);
	crest_errset_str(msg);
	s->broken = rc < 0 ? rc : -EIO;
}

/* 1 when every delta of enc has its base in the index, 0 when one has not
 * (gc took it, with the snapshot that named it), or an error. Under the
 * writer lock no gc runs, so what is there stays until the batch. A delta
 * already stored is checked too: a killed gc may have left it without its
 * base, both dead. */
static int bases_present(struct cas_store *s, const struct cas_encoded *enc)
{
	char k[33];
	k[0] = 'l';
	for (size_t i = 0; i < enc->npieces; i++) {
		const struct cas_piece *p = &enc->pieces[i];
		if (!p->delta || (i && enc->pieces[i - 1].delta && !memcmp(enc->pieces[i - 1].base, p->base, 32)))
			continue;
		memcpy(k + 1, p->base, 32);
		const int has = db_has(s, k, 33);
		if (has <= 0)
			return has;
	}
	return 1;
}

/* What a handle whose commit could not be undone says to the next one. */
static int broken_refusal(const struct cas_store *s)
{
	return crest_errx(-EIO, "store %s: a commit failed earlier and could not be undone in this "
			  "process; open the store again (its next writer puts it right)", s->dir);
}

int cas_commit_encode(struct cas_store *s, const struct cas_manifest *m, const struct cas_manifest *base,
		      struct cas_encoded *enc, uint8_t id[32])
{
	if (s->broken)
		return broken_refusal(s);
	const uint64_t t0 = time_now_ns();
	int rc = cas_manifest_encode(m, base, enc);
	if (rc == 0 && base) {
		const int has = bases_present(s, enc);
		if (has <= 0) {
			cas_encoded_free(enc);
			rc = has < 0 ? has : cas_manifest_encode(m, NULL, enc);
		}
	}
	if (rc < 0)
		return crest_errf(rc, "encoding a manifest");
	rc = sha256_once(enc->buf, enc->len, id);
	if (rc < 0) {
		cas_encoded_free(enc);
		return rc;
	}
	enc->encode_ns = time_now_ns() - t0;
	return 0;
}

int cas_commit(struct cas_store *s, struct cas_index_entry *e, size_t n,
	       const struct cas_manifest *m, const struct cas_manifest *base, const char *tag, uint8_t id[32])
{
	struct cas_encoded enc;
	const int rc = cas_commit_encode(s, m, base, &enc, id);
	return rc < 0 ? rc : cas_commit_encoded(s, e, n, &enc, tag, id);
}

/* A store on RADOS: the commit's new chunk entries as CAS_META_CHUNKS
 * records, ahead of its manifest in the same append (so a torn append
 * that has the manifest has them whole), for other nodes' catch-up
 * (cache.c). A commit whose entries would take more than CHUNKS_MAX bytes
 * writes none, its append staying under RADOS's 90 MiB write: a catch-up
 * then reads those records from the packs. */
#define CHUNKS_REC_MAX 65536                          /* entries a record */
#define CHUNKS_MAX ((size_t)32 << 20)                  /* payload bytes a commit */

static int chunks_recs(struct cas_meta_buf *mb, const struct cas_index_entry *e, size_t n, const uint8_t id[32])
{
	if (n * CAS_META_CHUNK_ENTRY > CHUNKS_MAX)
		return 0;
	uint8_t *p = malloc((n < CHUNKS_REC_MAX ? n : CHUNKS_REC_MAX) * CAS_META_CHUNK_ENTRY + 1);
	if (!p)
		return crest_errf(-ENOMEM, "recording a commit's chunk entries");
	size_t i = 0;
	do {
		const size_t k = n - i < CHUNKS_REC_MAX ? n - i : CHUNKS_REC_MAX;
		for (size_t j = 0; j < k; j++) {
			memcpy(p + j * CAS_META_CHUNK_ENTRY, e[i + j].sha, 32);
			cas_loc_encode(&e[i + j].loc, p + j * CAS_META_CHUNK_ENTRY + 32);
		}
		cas_meta_rec(mb, CAS_META_CHUNKS, id, p, k * CAS_META_CHUNK_ENTRY);
		i += k;
	} while (i < n);
	free(p);
	return 0;
}

int cas_commit_encoded(struct cas_store *s, struct cas_index_entry *e, size_t n, struct cas_encoded *encp,
		       const char *tag, const uint8_t id[32])
{
	struct cas_encoded enc = *encp;   /* ours now */
	memset(encp, 0, sizeof(*encp));
	if (s->broken) {
		cas_encoded_free(&enc);
		return broken_refusal(s);
	}
	uint64_t tt[7];   /* CREST_TRACE: the phases below */
	tt[1] = time_now_ns();
	tt[0] = tt[1] - enc.encode_ns;
	int rc = 0;
	/* A big commit's entries go in as table files (step 2), a small
	 * one's in the batch, in key order: RocksDB's memtable inserts a
	 * batch's keys in order cheaply (its skip list resumes from the last
	 * place), random SHA-256 keys each from the top. Measured, 400K
	 * entries: 1.31 s unsorted, 0.38 s sorted, sort included. */
	const bool ingest = n && n >= cas_ingest_min();
	struct cas_index_batch *b = cas_batch_new(s, &rc);
	if (b && !ingest) {
		cas_entries_sort(e, n);
		for (size_t i = 0; i < n; i++)
			cas_batch_entry(b, e[i].sha, &e[i].loc);
	}
	size_t new_pieces = 0, new_piece_bytes = 0;
	struct cas_meta_buf mb = { 0 };
	if (rc == 0 && s->shared)
		rc = chunks_recs(&mb, e, n, id);
	cas_meta_rec(&mb, CAS_META_MANIFEST, id, enc.buf, enc.len);
	char k[1 + 256];
	/* Pieces go in the same batch as the manifest that names them, or
	 * before it in a big commit's ingest: a manifest is never visible
	 * without its pieces. (A first checkpoint of 8 GiB has 86 MB of them,
	 * which the batch took 0.28 s to log and insert.) */
	struct cas_ingest_piece *pv = ingest ? malloc((enc.npieces ? enc.npieces : 1) * sizeof(*pv)) : NULL;
	size_t npv = 0;
	if (rc == 0 && ingest && !pv)
		rc = crest_errf(-ENOMEM, "committing to %s", s->dir);
	k[0] = 'l';
	for (size_t i = 0; rc == 0 && i < enc.npieces; i++) {
		const struct cas_piece *p = &enc.pieces[i];
		memcpy(k + 1, p->sha, 32);
		const int has = db_has(s, k, 33);
		if (has < 0) {
			rc = has;
		} else if (!has) {   /* a piece already stored is skipped, never the rest */
			if (pv)
				pv[npv++] = (struct cas_ingest_piece){ p->sha, enc.pbuf + p->off, p->len };
			else
				cas_index_batch_put(b, k, 33, enc.pbuf + p->off, p->len);
			cas_meta_rec(&mb, CAS_META_PIECE, p->sha, enc.pbuf + p->off, p->len);
			new_pieces++;
			new_piece_bytes += p->len;
		}
	}
	uint8_t old_tag[32];
	bool had_tag = false;
	if (rc == 0 && tag) {
		/* Tags are fixed: one naming another snapshot refuses the
		 * commit (the writer checked before its ingest; this is the
		 * check under the writer lock). The same snapshot put again
		 * under its own tag is no move. */
		rc = cas_tag_get(s, tag, old_tag);
		had_tag = rc == 0;
		if (had_tag && memcmp(old_tag, id, 32) != 0)
			rc = tag_taken(tag, old_tag);
		else if (rc == -ENOENT)
			rc = 0;
		if (rc == 0)
			cas_meta_rec(&mb, CAS_META_TAG, id, tag, strlen(tag));
	}
	struct cas_pack_end *ends = NULL;
	size_t nends = 0;
	tt[2] = time_now_ns();
	if (rc == 0)
		rc = cas_ends_merge(s, e, n, &ends, &nends);
	tt[3] = time_now_ns();
	bool ingested = false;   /* the ingest was tried: it may have landed */
	if (rc == 0 && ingest) {
		ingested = true;
		rc = cas_entries_ingest(s, e, n, pv, npv, ends, nends);
		/* A failed ingest may have landed nonetheless (below). Nothing
		 * is in the meta log yet, so there is nothing to revoke. */
	}
	free(pv);
	tt[4] = time_now_ns();
	if (rc == 0)
		rc = cas_meta_append(s, &mb);
	tt[5] = time_now_ns();
	free(mb.p);
	if (rc < 0 && ingested)
		s->broken = rc;   /* entries ingested name the packs' bytes: keep them whole */
	if (rc < 0) {
		cas_index_batch_free(b);
		cas_encoded_free(&enc);
		free(ends);
		return rc;
	}
	k[0] = 'm';
	memcpy(k + 1, id, 32);
	cas_index_batch_put(b, k, 33, enc.buf, enc.len);
	k[0] = 'i';
	cas_index_batch_put(b, k, 33, enc.buf, enc.head_len);
	if (tag) {
		size_t tl = strlen(tag);
		k[0] = 't';
		memcpy(k + 1, tag, tl);
		cas_index_batch_put(b, k, tl + 1, id, 32);
	}
	for (size_t i = 0; i < nends; i++)
		cas_batch_end(b, 'p', ends[i].pack, ends[i].end);
	cas_batch_end(b, 'q', s->meta_num, s->meta_end);
	rc = cas_index_batch_commit(b, "committing a snapshot");
	tt[6] = time_now_ns();
	if (getenv("CREST_TRACE"))
		fprintf(stderr, "crest trace: cas_commit: encode %.3f s; %zu entries %s, %zu of %zu pieces new "
			"(%.1f MB) %.3f s; pack ends %.3f s; entries ingested %.3f s; meta log %.1f MB %.3f s; "
			"index batch %.3f s\n", (tt[1] - tt[0]) / 1e9, n, ingest ? "for table files" : "sorted",
			new_pieces, enc.npieces, new_piece_bytes / 1e6, (tt[2] - tt[1]) / 1e9, (tt[3] - tt[2]) / 1e9,
			(tt[4] - tt[3]) / 1e9, mb.len / 1e6, (tt[5] - tt[4]) / 1e9, (tt[6] - tt[5]) / 1e9);
	cas_index_batch_free(b);
	cas_encoded_free(&enc);
	if (rc < 0) {
		free(ends);
		commit_revoke(s, id, tag, had_tag ? old_tag : NULL);
		return rc;
	}
	free(s->ends);
	s->ends = ends;
	s->nends = nends;
	cas_pack_mark(s, e, n);
	return 0;
}

/* ---- snapshots and tags ---- */

int cas_tag_get(struct cas_store *s, const char *tag, uint8_t id[32])
{
	size_t vl;
	int rc = 0;
	char *v = cas_db_get(s, 't', tag, strlen(tag), &vl, &rc);
	if (!v)
		return rc < 0 ? rc : -ENOENT;
	if (vl == 32)
		memcpy(id, v, 32);
	else
		rc = crest_errx(-EUCLEAN, "store %s: tag %s has a value of %zu bytes, not an id", s->dir, tag, vl);
	free(v);
	return rc;
}

int cas_tag_free(struct cas_store *s, const char *tag)
{
	uint8_t id[32];
	int rc = cas_tag_get(s, tag, id);
	if (rc == 0)
		return tag_taken(tag, id);
	return rc == -ENOENT ? 0 : rc;
}

int cas_tag_set(struct cas_store *s, const char *tag, const uint8_t id[32], bool move)
{
	int rc = cas_tag_check(tag);
	if (rc < 0)
		return rc;
	return cas_tag_put(s, tag, id, move);
}

int cas_tag_put(struct cas_store *s, const char *tag, const uint8_t id[32], bool move)
{
	int rc;
	if (!*tag || strlen(tag) > 128)   /* the key below holds no more, nor does FORMAT.md */
		return crest_errx(-EINVAL, "tag '%s': must be 1 to 128 characters", tag);
	if (!move) {
		uint8_t old[32];
		rc = cas_tag_get(s, tag, old);
		if (rc == 0 && memcmp(old, id, 32) != 0)
			return tag_taken(tag, old);
		if (rc == 0)
			return 0;   /* already so */
		if (rc != -ENOENT)
			return rc;
	}
	if (s->broken)
		return crest_errx(-EIO, "store %s: a commit failed earlier in this process; open it again",
				  s->dir);
	/* Like a commit: the meta log first (so repair knows the tag), then
	 * the index. */
	struct cas_meta_buf mb = { 0 };
	size_t tl = strlen(tag);
	cas_meta_rec(&mb, CAS_META_TAG, id, tag, tl);
	rc = cas_meta_append(s, &mb);
	free(mb.p);
	if (rc < 0)
		return rc;
	char k[1 + 128];
	k[0] = 't';
	memcpy(k + 1, tag, tl);
	struct cas_index_batch *b = cas_batch_new(s, &rc);
	if (!b)
		return rc;
	cas_index_batch_put(b, k, tl + 1, id, 32);
	cas_batch_end(b, 'q', s->meta_num, s->meta_end);
	rc = cas_index_batch_commit(b, "setting a tag");
	cas_index_batch_free(b);
	if (rc < 0)
		s->broken = rc;
	return rc;
}

/* Calls cb for each key of the given type, in order, without the type
 * byte; stops on non-zero. */
struct type_scan {
	int (*cb)(const char *k, size_t kl, const char *v, size_t vl, void *arg);
	void *arg;
};

static int type_scan_cb(const char *k, size_t kl, const char *v, size_t vl, void *arg)
{
	const struct type_scan *t = arg;
	return t->cb(k + 1, kl - 1, v, vl, t->arg);
}

int cas_db_scan(struct cas_store *s, char type,
		   int (*cb)(const char *k, size_t kl, const char *v, size_t vl, void *arg), void *arg)
{
	struct type_scan t = { cb, arg };
	return cas_index_scan(s->ix, &type, 1, 1, type_scan_cb, &t);
}

struct forget_ctx {
	struct cas_index_batch *b;
	const uint8_t (*ids)[32];
	size_t n;
};

static int id_cmp(const void *a, const void *b)
{
	return memcmp(a, b, 32);
}

static int forget_tag_cb(const char *k, size_t kl, const char *v, size_t vl, void *arg)
{
	const struct forget_ctx *c = arg;
	if (vl == 32 && kl <= 128 && bsearch(v, c->ids, c->n, 32, id_cmp)) {
		char key[129];
		key[0] = 't';
		memcpy(key + 1, k, kl);
		cas_index_batch_delete(c->b, key, kl + 1);
	}
	return 0;
}

int cas_batch_forget(struct cas_store *s, struct cas_index_batch *b, const uint8_t (*ids)[32], size_t n)
{
	char k[33];
	for (size_t i = 0; i < n; i++) {
		memcpy(k + 1, ids[i], 32);
		k[0] = 'm';
		cas_index_batch_delete(b, k, 33);
		k[0] = 'i';
		cas_index_batch_delete(b, k, 33);
		k[0] = 'd';
		cas_index_batch_delete(b, k, 33);
	}
	struct forget_ctx c = { b, ids, n };
	return n ? cas_db_scan(s, 't', forget_tag_cb, &c) : 0;
}

struct resolve_ctx {
	const struct cas_store *s;
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
	if (!strncasecmp(hex, c->prefix, c->plen) && !cas_hidden(c->s, (const uint8_t *)k)) {
		memcpy(c->id, k, 32);
		c->matches++;
	}
	return 0;
}

int cas_snapshot_lookup(struct cas_store *s, const char *name, int what, uint8_t id[32])
{
	size_t n = strlen(name), vl;
	int rc;
	if (n == 0)
		return crest_errx(-EINVAL, "empty snapshot name");
	const int kind = cas_snapshot_name_kind(name) & what;
	/* crest's own tags (branch refs) are no snapshot's name. */
	if ((kind & CAS_NAME_TAG) && !cas_tag_reserved(name, n)) {
		char *v = cas_db_get(s, 't', name, n, &vl, &rc);
		if (v) {
			if (vl == 32)
				memcpy(id, v, 32);
			free(v);
			if (vl != 32)
				return crest_errx(-EBADMSG, "tag %s in %s is damaged", name, s->dir);
			if (!cas_hidden(s, id))
				return 0;
		}
		if (rc != -ENOENT)
			return rc;
	}
	if (!(kind & CAS_NAME_PREFIX))
		return crest_errx(-ENOENT, "no snapshot named '%s' in %s (not a tag, branch or id prefix, "
				  "nor latest)", name, s->dir);
	struct resolve_ctx c = { .s = s, .prefix = name, .plen = n };
	rc = cas_db_scan(s, 'i', resolve_cb, &c);
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

int cas_piece_load(struct cas_store *s, struct cas_manifest *m, size_t i, const char *hex)
{
	const struct cas_piece *pc = &m->pieces[i];
	const char *name = m->streams[pc->stream].name;
	char k[33], ph[65];
	k[0] = 'l';
	memcpy(k + 1, pc->sha, 32);
	hex_encode(pc->sha, 32, ph);
	struct cas_index_val *ps, *bps = NULL;
	size_t n, bn = 0;
	const char *v, *bv = NULL;
	int rc = cas_index_pin(s->ix, k, sizeof(k), &ps, &v, &n);
	if (rc == -ENOENT)
		return crest_errx(-EBADMSG, "snapshot %.12s in %s is damaged: piece %.12s of the extent list "
				  "of %s is missing from the index", hex, s->dir, ph, name);
	if (rc < 0)
		return rc;
	const int delta = cas_piece_base((const uint8_t *)v, n, (uint8_t *)k + 1);
	if (delta == 1) {
		rc = cas_index_pin(s->ix, k, sizeof(k), &bps, &bv, &bn);
		if (rc == -ENOENT) {
			char bh[65];
			hex_encode((const uint8_t *)k + 1, 32, bh);
			rc = crest_errx(-EBADMSG, "snapshot %.12s in %s is damaged: piece %.12s of the extent list "
					"of %s is a delta whose base %.12s is missing from the index", hex, s->dir, ph,
					name, bh);
		}
	}
	if (rc < 0) {   /* its message is said */
		cas_index_release(s->ix, ps);
		return rc;
	}
	rc = cas_manifest_piece_decode(m, i, (const uint8_t *)v, n, (const uint8_t *)bv, bn);
	cas_index_release(s->ix, ps);
	cas_index_release(s->ix, bps);
	if (rc == -EBADMSG)
		return crest_errx(rc, "snapshot %.12s in %s is damaged: piece %.12s of the extent list of %s "
				  "%s", hex, s->dir, ph, name, delta == 1 ? "or its base does not match its SHA-256 "
				  "or does not decode" : "does not match its SHA-256 or does not decode");
	if (rc < 0)
		return crest_errf(rc, "checking the extent list of %s in snapshot %.12s", name, hex);
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
	return cas_piece_load(f->s, f->m, i, f->hex);
}

int cas_manifest_check(const struct cas_store *s, const uint8_t id[32], const void *v, size_t n,
		       struct cas_manifest **out)
{
	char hex[65];
	hex_encode(id, 32, hex);
	uint8_t sum[32];
	*out = NULL;
	int rc = sha256_once(v, n, sum);
	if (rc == 0 && memcmp(sum, id, 32))
		rc = crest_errx(-EBADMSG, "manifest of snapshot %.12s in %s is damaged "
				"(its SHA-256 does not match its id)", hex, s->dir);
	if (rc == 0) {
		rc = cas_manifest_decode((const uint8_t *)v, n, false, out);
		if (rc == -EBADMSG)
			crest_errx(rc, "manifest of snapshot %.12s in %s is damaged (it does not decode)", hex, s->dir);
		else if (rc < 0)
			crest_errf(rc, "decoding manifest of snapshot %.12s", hex);
	}
	return rc;
}

int cas_manifest_load(struct cas_store *s, const uint8_t id[32], struct cas_manifest **out)
{
	char hex[65];
	hex_encode(id, 32, hex);
	char k[33];
	k[0] = 'm';
	memcpy(k + 1, id, 32);
	struct cas_index_val *ps;
	size_t n;
	const char *v;
	int rc = cas_hidden(s, id) ? -ENOENT : cas_index_pin(s->ix, k, sizeof(k), &ps, &v, &n);
	if (rc == -ENOENT)
		return crest_errx(rc, "snapshot %s is not in %s", hex, s->dir);
	if (rc < 0)
		return rc;
	/* Long extent lists are pieces (manifest.h), fetched and checked after
	 * the manifest that names them, so this hash is short. Nothing
	 * decoded is returned unless every byte of it checks out. */
	struct cas_manifest *m = NULL;
	rc = cas_manifest_check(s, id, v, n, &m);
	cas_index_release(s->ix, ps);
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
	int rc = cas_db_scan(s, 'm', count_cb, m);
	if (rc == 0)
		rc = cas_db_scan(s, 'l', count_cb, l);
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
	if (kl != 32 || cas_hidden(c->s, (const uint8_t *)k))
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

bool cas_tag_reserved(const char *k, size_t kl)
{
	const size_t n = strlen(CAS_TAG_RESERVED);
	return kl >= n && !memcmp(k, CAS_TAG_RESERVED, n);
}

static int tag_cb(const char *k, size_t kl, const char *v, size_t vl, void *arg)
{
	struct list_ctx *c = arg;
	if (vl != 32 || cas_tag_reserved(k, kl))
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

static int damaged_cb(const char *k, size_t kl, const char *v, size_t vl, void *arg)
{
	(void)v;
	(void)vl;
	struct list_ctx *c = arg;
	for (size_t i = 0; kl == 32 && i < c->n; i++)
		if (!memcmp(c->v[i].id, k, 32))
			c->v[i].damaged = true;
	return 0;
}

static int snapinfo_cmp(const void *a, const void *b)
{
	const struct cas_snapinfo *x = a, *y = b;
	if (x->head->time_ns != y->head->time_ns)
		return x->head->time_ns < y->head->time_ns ? -1 : 1;
	return memcmp(x->id, y->id, 32);
}

struct tags_of_ctx {
	const uint8_t *id;
	char **v;
	size_t n;
};

static int tags_of_cb(const char *k, size_t kl, const char *v, size_t vl, void *arg)
{
	struct tags_of_ctx *c = arg;
	if (vl != 32 || memcmp(v, c->id, 32) || cas_tag_reserved(k, kl))
		return 0;
	char **nv = realloc(c->v, (c->n + 1) * sizeof(*nv));
	if (!nv)
		return -ENOMEM;
	c->v = nv;
	if (!(c->v[c->n] = strndup(k, kl)))
		return -ENOMEM;
	c->n++;
	return 0;
}

int cas_snapshot_tags(struct cas_store *s, const uint8_t id[32], char ***tags, size_t *n)
{
	struct tags_of_ctx c = { .id = id };
	int rc = cas_db_scan(s, 't', tags_of_cb, &c);
	if (rc < 0) {
		cas_snapshot_tags_free(c.v, c.n);
		return rc == -ENOMEM ? crest_errf(rc, "listing tags") : rc;
	}
	*tags = c.v;
	*n = c.n;
	return 0;
}

void cas_snapshot_tags_free(char **tags, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(tags[i]);
	free(tags);
}

int cas_snapshot_list(struct cas_store *s, struct cas_snapinfo **out, size_t *n)
{
	struct list_ctx c = { .s = s };
	int rc = cas_db_scan(s, 'i', list_cb, &c);
	if (rc == 0)
		rc = cas_db_scan(s, 't', tag_cb, &c);
	if (rc == 0)
		rc = cas_db_scan(s, 'd', damaged_cb, &c);
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

int cas_snapshot_lost(struct cas_store *s, const uint8_t id[32], struct cas_lost **out, size_t *n)
{
	char hex[65];
	size_t vl;
	int rc;
	*out = NULL;
	*n = 0;
	char *v = cas_db_get(s, 'd', id, 32, &vl, &rc);
	if (!v)
		return rc == -ENOENT ? 0 : rc;
	const uint8_t *p = (const uint8_t *)v;
	hex_encode(id, 32, hex);
	if (vl >= 1 && p[0] > CAS_DAMAGE_VERSION)
		rc = crest_errx(-EBADMSG, "snapshot %.12s in %s is marked damaged by a newer crest (mark version "
				"%u; this crest reads up to %u)", hex, s->dir, p[0], CAS_DAMAGE_VERSION);
	else if (vl < 5 || p[0] != CAS_DAMAGE_VERSION || (vl - 5) / CAS_DAMAGE_RANGE != le32_get(p + 1) ||
		 (vl - 5) % CAS_DAMAGE_RANGE)
		rc = crest_errx(-EBADMSG, "the damage mark of snapshot %.12s in %s is itself damaged "
				"(casctl repair makes it anew)", hex, s->dir);
	const size_t cnt = rc == 0 ? le32_get(p + 1) : 0;
	struct cas_lost *r = rc == 0 ? calloc(cnt ? cnt : 1, sizeof(*r)) : NULL;
	if (rc == 0 && !r)
		rc = crest_errf(-ENOMEM, "reading the damage of snapshot %.12s", hex);
	for (size_t i = 0; rc == 0 && i < cnt; i++) {
		const uint8_t *e = p + 5 + i * CAS_DAMAGE_RANGE;
		r[i] = (struct cas_lost){ le32_get(e), le64_get(e + 4), le64_get(e + 12) };
	}
	free(v);
	if (rc < 0) {
		free(r);
		return rc;
	}
	*out = r;
	*n = cnt;
	return 0;
}

int cas_manifest_holes(struct cas_manifest *m, const struct cas_lost *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct cas_stream *st = v[i].stream < m->nstreams ? &m->streams[v[i].stream] : NULL;
		uint64_t off = 0, done = 0;
		for (uint64_t j = 0; st && j < st->nextents && off < v[i].off + v[i].len; off += st->ext[j++].len)
			if (off >= v[i].off) {
				st->ext[j].hole = true;
				done += st->ext[j].len;
			}
		/* The range must be whole extents: anything else is a mark
		 * that does not belong to this manifest. */
		if (!st || done != v[i].len || off != v[i].off + v[i].len)
			return crest_errx(-EBADMSG, "the damage mark of a snapshot does not fit its manifest "
					  "(range %zu: stream %u, bytes %llu to %llu)", i, v[i].stream,
					  (unsigned long long)v[i].off, (unsigned long long)(v[i].off + v[i].len));
	}
	return 0;
}

struct foreach_ctx {
	int (*cb)(const uint8_t sha[32], const struct cas_loc *loc, void *arg);
	void *arg;
};

static int foreach_cb(const char *k, size_t kl, const char *v, size_t vl, void *arg)
{
	struct foreach_ctx *c = arg;
	struct cas_loc loc;
	if (kl != 32 || cas_loc_decode((const uint8_t *)v, vl, &loc) < 0)
		return crest_errx(-EBADMSG, "a chunk index entry is damaged");
	return c->cb((const uint8_t *)k, &loc, c->arg);
}

int cas_index_foreach(struct cas_store *s,
		      int (*cb)(const uint8_t sha[32], const struct cas_loc *loc, void *arg), void *arg)
{
	struct foreach_ctx c = { cb, arg };
	return cas_db_scan(s, 'c', foreach_cb, &c);
}
