/* process.c - restore of a checkpointed process tree; see process.h. */
#include "restore/process.h"
#include "cas/jobsnap.h"
#include "restore/imgsrv.h"
#include "restore/guard.h"
#include "gpu/gpumap.h"
#include "gpu/shimctl.h"
#include "os/pidns.h"
#include "os/proc.h"
#include "os/sock.h"
#include "os/thp.h"
#include "util/err.h"
#include "util/fault.h"
#include "util/fs.h"
#include "util/progress.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The manifest's numbers (a namespace's inode, a file's owner and size;
 * pid lists: os/proc.h) are read strictly: digits only, at most max. A
 * store may be damaged or crafted, and a number strtoul would bend is
 * dangerous here: "4294967295" cast to pid_t is -1, and crest ends a
 * failed tree with kill(pid, SIGKILL) as root. */
static bool num_parse(const char *s, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;
	const char *p = s;
	for (; *p >= '0' && *p <= '9'; p++) {
		const unsigned d = (unsigned)(*p - '0');
		if (v > (max - d) / 10)
			return false;
		v = v * 10 + d;
	}
	if (p == s || *p)
		return false;
	*out = v;
	return true;
}

/* A pid list label (os/proc.h's format). */
static int parse_pids(const char *s, pid_t **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	if (!s || !*s)
		return 0;
	const int rc = proc_pids_parse(s, out, n);
	if (rc == -ENOMEM)
		return crest_errf(rc, "restore");
	return rc < 0 ? crest_errx(-EBADMSG, "the snapshot's pid list '%.64s' is damaged", s) : 0;
}

/* The ports label ("P,P,...", capture/transparent.c), read strictly like
 * every number of a manifest, into *ports (malloc'ed). */
static int parse_ports(const char *s, uint16_t **ports, size_t *n)
{
	*ports = NULL;
	*n = 0;
	if (!s || !*s)
		return 0;
	size_t cap = 1;
	for (const char *p = s; *p; p++)
		cap += *p == ',';
	if (!(*ports = calloc(cap, sizeof(**ports))))
		return crest_errf(-ENOMEM, "restore");
	char one[8];
	for (const char *p = s;;) {
		const size_t len = strcspn(p, ",");
		uint64_t v;
		if (len >= sizeof(one))
			break;
		memcpy(one, p, len);
		one[len] = 0;
		if (!num_parse(one, 65535, &v))
			break;
		(*ports)[(*n)++] = (uint16_t)v;
		if (!p[len])
			return 0;
		p += len + 1;
	}
	free(*ports);
	*ports = NULL;
	*n = 0;
	return crest_errx(-EBADMSG, "the snapshot's port list '%.64s' is damaged", s);
}

/* CRIU must create the job's processes with their old pids: each must be
 * free, and a killed job's zombies reaped. Zombies and exiting processes
 * get a moment; a live process is an error that names it. */
static int pids_free(const pid_t *p, size_t n, unsigned wait_ms)
{
	uint64_t deadline = time_now_ns() + (uint64_t)wait_ms * 1000000ull;
	for (size_t i = 0; i < n; i++) {
		for (;;) {
			char st = proc_state(p[i]);
			if (!st)
				break;
			if (st != 'Z' && st != 'X' && time_now_ns() >= deadline) {
				char comm[64];
				proc_comm(p[i], comm, sizeof(comm));
				return crest_errx(-EBUSY, "cannot restore: pid %d is in use by '%s' (the snapshot's "
						  "processes need their old pids; end it first)", (int)p[i], comm);
			}
			if (time_now_ns() >= deadline)
				return crest_errx(-EBUSY, "cannot restore: pid %d is still a zombie; its parent "
						  "has not reaped it", (int)p[i]);
			struct timespec ts = { 0, 20 * 1000 * 1000 };
			nanosleep(&ts, NULL);
		}
	}
	return 0;
}

static const char *meta_get(const char *meta, const char *key, char *buf, size_t cap)
{
	size_t kl = strlen(key);
	for (const char *p = meta; p && *p;) {
		if (!strncmp(p, key, kl) && p[kl] == '=') {
			/* path= is last and may hold ';', so it runs to the end */
			const char *v = p + kl + 1, *end = strcmp(key, "path") ? strchr(v, ';') : NULL;
			size_t n = end ? (size_t)(end - v) : strlen(v);
			if (n >= cap)
				n = cap - 1;
			memcpy(buf, v, n);
			buf[n] = 0;
			return buf;
		}
		p = strchr(p, ';');
		if (p)
			p++;
	}
	return NULL;
}

/*
 * The job's files are put back in stages, so that a restore that fails
 * leaves them byte for byte as they were (the job's output after the
 * snapshot is the user's work): each is first written whole to a temporary
 * beside it, from chunks verified on the way; only once every image and
 * every file is ready are they swapped in, right before CRIU runs, by an
 * atomic exchange of names; if CRIU fails they are swapped back. Nothing
 * of a live file is cut or written in place.
 */
struct staged {
	char path[PATH_MAX];       /* for messages; the file is dfd + base */
	int dfd;                   /* its directory, resolved once, never through a symlink */
	char base[NAME_MAX + 1];
	char tmp[NAME_MAX + 1];    /* in dfd: the new content; after the swap, the original */
	bool existed;              /* path was there: a swap, else a plain rename */
	bool swapped;
	uint64_t now, size;        /* bytes in the file now, at the snapshot */
	int fd;                    /* beside: the copy's file, handed to CRIU; else -1 */
	bool created;              /* beside: base was made by this restore */
	struct rp_guard_file g;    /* in place: as the guard knows it (restore/guard.h) */
	struct rp_guard *guard;
};

/* Tells the guard of f as it is now, before anything is renamed. */
static int staged_tell(struct staged *f)
{
	snprintf(f->g.base, sizeof(f->g.base), "%s", f->base);
	snprintf(f->g.tmp, sizeof(f->g.tmp), "%s", f->tmp);
	f->g.existed = f->existed;
	return f->guard ? rp_guard_file(f->guard, &f->g, f->dfd) : 0;
}

/* A new file ".BASE.crest-TAG-XXXXXX" in dfd, made with O_EXCL|O_NOFOLLOW
 * (nothing planted there can be a target); its name goes to out. */
static int temp_at(int dfd, const char *base, const char *tag, char *out, size_t cap)
{
	static const char digits[] = "abcdefghijklmnopqrstuvwxyz0123456789";
	for (int tries = 0; tries < 100; tries++) {
		uint64_t r = (uint64_t)time_now_ns() * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid() << 32 ^ (uint64_t)tries;
		char x[7];
		for (int i = 0; i < 6; i++, r /= 36)
			x[i] = digits[r % 36];
		x[6] = 0;
		/* The base cut to fit NAME_MAX with the suffix. */
		snprintf(out, cap, ".%.200s.crest-%s-%s", base, tag, x);
		const int fd = openat(dfd, out, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd >= 0 || errno != EEXIST)
			return fd >= 0 ? fd : crest_errf(-errno, "cannot create a temporary file beside %s", base);
	}
	return crest_errx(-EEXIST, "cannot create a temporary file beside %s", base);
}

/* name in dfd, opened for reading where it is a regular file and only
 * then: the path is the snapshot's word, and opening a device acts (a
 * watchdog starts its countdown, a tape rewinds). Looked at through
 * O_PATH first, then opened again through that descriptor, the same
 * inode. -ELOOP for a symlink, -EMEDIUMTYPE for anything else not a regular
 * file, else -errno. */
static int open_regular(int dfd, const char *name)
{
	const int p = openat(dfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (p < 0)
		return -errno;
	struct stat sb;
	int rc = fstat(p, &sb) < 0 ? -errno : S_ISLNK(sb.st_mode) ? -ELOOP : !S_ISREG(sb.st_mode) ? -EMEDIUMTYPE : 0;
	if (rc == 0) {
		char self[64];
		snprintf(self, sizeof(self), "/proc/self/fd/%d", p);
		rc = open(self, O_RDONLY | O_NOCTTY | O_CLOEXEC);
		if (rc < 0)
			rc = -errno;
	}
	close(p);
	return rc;
}

/* The directory of path (absolute, as the capture read it from /proc, so
 * free of symlinks), opened without following any symlink on the way: as
 * root, in a directory its user may change, crest never writes through a
 * link that user planted. */
static int jobfile_dir(const struct staged *f, char *parent, size_t cap)
{
	const char *base = fs_split(f->path, parent, cap);
	if (f->path[0] != '/' || !*base || strlen(base) > NAME_MAX)
		return crest_errx(-EBADMSG, "job file path '%s' is damaged", f->path);
	const int root = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (root < 0)
		return crest_errf(-errno, "cannot open /");
	const int dfd = fs_openat_beneath(root, parent + 1, O_RDONLY | O_DIRECTORY, 0);
	close(root);
	if (dfd == -ELOOP)
		return crest_errx(dfd, "refusing to put back %s: a directory on its path is now a symlink", f->path);
	if (dfd < 0)
		return crest_errf(dfd, "cannot open %s to put %s back", parent[0] ? parent : "/", base);
	return dfd;
}

/* Bytes [from, to) of in to the same place in out. */
static int copy_range(int in, int out, uint64_t from, uint64_t to, const char *path)
{
	const size_t cap = 1 << 20;
	uint8_t *buf = from < to ? malloc(cap) : NULL;
	if (from < to && !buf)
		return crest_errf(-ENOMEM, "copying %s", path);
	int rc = 0;
	for (uint64_t off = from; off < to;) {
		const size_t want = to - off < cap ? (size_t)(to - off) : cap;
		const ssize_t r = pread(in, buf, want, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			rc = crest_errf(-errno, "cannot read %s", path);
			break;
		}
		if (r == 0)
			break;   /* shorter now: the rest stays zeros */
		if (pwrite(out, buf, (size_t)r, (off_t)off) != r) {
			rc = crest_errf(errno ? -errno : -EIO, "cannot write a temporary file beside %s", path);
			break;
		}
		off += (uint64_t)r;
	}
	free(buf);
	return rc;
}

/* A job file stream's meta: its path and size, and its owner (uid=, not
 * in older snapshots: *has_uid false). */
static int jobfile_meta(const struct restore_ctx *c, const struct cas_stream *st, struct staged *f,
			uid_t *uid, bool *has_uid)
{
	char sz[32], ub[16];
	uint64_t v = 0;
	*has_uid = meta_get(st->meta, "uid", ub, sizeof(ub)) != NULL;
	if (!meta_get(st->meta, "path", f->path, sizeof(f->path)) || !meta_get(st->meta, "size", sz, sizeof(sz)) ||
	    !num_parse(sz, INT64_MAX, &f->size) || (*has_uid && !num_parse(ub, UINT32_MAX - 1, &v)))
		return crest_errx(-EBADMSG, "snapshot %s: job file stream %s is damaged", c->snapshot, st->name);
	*uid = (uid_t)v;
	return 0;
}

/* Writes the file as it was at the snapshot into a temporary beside it. */
static int jobfile_stage(const struct restore_ctx *c, const struct cas_stream *st, struct staged *f)
{
	uid_t uid;
	bool has_uid;
	int rc = jobfile_meta(c, st, f, &uid, &has_uid);
	if (rc < 0)
		return rc;
	char parent[PATH_MAX];
	f->dfd = jobfile_dir(f, parent, sizeof(parent));
	if (f->dfd < 0)
		return f->dfd;
	snprintf(f->base, sizeof(f->base), "%s", fs_split(f->path, parent, sizeof(parent)));
	struct stat sb, ds;
	int in = open_regular(f->dfd, f->base);
	if (in == -ELOOP)
		return crest_errx(-ELOOP, "refusing to put back %s: it is now a symlink", f->path);
	if (in == -EMEDIUMTYPE)
		return crest_errx(-EPERM, "refusing to put back %s: it is no longer a regular file", f->path);
	if (in < 0 && in != -ENOENT)
		return crest_errf(in, "cannot open %s to put it back", f->path);
	/* An existing file must be a regular file of the owner it had at the
	 * snapshot (meta uid=; older snapshots: its directory's owner or
	 * root): a hard link to another user's file is refused, not written. */
	if (in >= 0 && (fstat(in, &sb) < 0 || fstat(f->dfd, &ds) < 0))
		rc = crest_errf(-errno, "cannot stat %s", f->path);
	else if (in >= 0 && (has_uid ? sb.st_uid != uid : sb.st_uid != ds.st_uid && sb.st_uid != geteuid()))
		rc = crest_errx(-EPERM, "refusing to put back %s: it now belongs to uid %u, not to the job's "
				"file owner", f->path, (unsigned)sb.st_uid);
	if (rc < 0) {
		close(in);
		return rc;
	}
	f->existed = in >= 0;
	f->now = f->existed ? (uint64_t)sb.st_size : 0;
	const int fd = temp_at(f->dfd, f->base, "restore", f->tmp, sizeof(f->tmp));
	if (fd < 0) {
		f->tmp[0] = 0;
		if (in >= 0)
			close(in);
		return fd;
	}
	/* The guard knows the temporary before it holds a byte: a crest
	 * killed from here on leaves neither it nor a swapped file behind. */
	struct stat ts;
	f->g.orig_ino = f->existed ? (uint64_t)sb.st_ino : 0;
	rc = fstat(fd, &ts) < 0 ? crest_errf(-errno, "cannot stat %s", f->tmp) : 0;
	f->g.new_ino = rc == 0 ? (uint64_t)ts.st_ino : 0;
	if (rc == 0)
		rc = staged_tell(f);
	if (f->existed && (fchown(fd, sb.st_uid, sb.st_gid) < 0 || fchmod(fd, sb.st_mode & 07777) < 0))
		rc = crest_errf(-errno, "cannot give %s the owner and mode of %s", f->tmp, f->path);
	/* The snapshot's size; its kept prefix over the file's own bytes: a
	 * file larger than the capture limit keeps its tail (for an
	 * append-only log, the same bytes it had). Holes in the prefix are
	 * zeros in the fresh file already. */
	if (rc == 0 && ftruncate(fd, (off_t)f->size) < 0)
		rc = crest_errf(-errno, "cannot size %s to %llu bytes", f->tmp, (unsigned long long)f->size);
	if (rc == 0 && f->existed && st->size < f->size)
		rc = copy_range(in, fd, st->size, f->now < f->size ? f->now : f->size, f->path);
	if (in >= 0)
		close(in);
	struct restore_ctx quiet = *c;
	quiet.progress = NULL;
	struct restore_fd_sink sink = { fd, f->tmp };
	if (rc == 0)
		rc = restore_stream(&quiet, st, restore_sink_fd, &sink);
	if (rc == 0 && fsync(fd) < 0)
		rc = crest_errf(-errno, "cannot write %s", f->tmp);
	if (close(fd) < 0 && rc == 0)
		rc = crest_errf(-errno, "cannot write %s", f->tmp);
	if (rc < 0)
		crest_errctx(rc, "putting back %s", f->path);
	return rc;
}

/* A descriptor handed to CRIU (--inherit-fd) is the restored job's, with
 * its flags: CRIU reopens it through /proc/self/fd with them when it is
 * dumped again as external, and O_NOFOLLOW there fails (ELOOP). So the
 * file, opened safely (O_NOFOLLOW: no planted link), is opened again
 * through its descriptor, with `flags` (access mode, O_APPEND) only, at
 * offset pos; *fd is replaced. */
static int fd_plain(int *fd, int flags, uint64_t pos, const char *what)
{
	char self[64];
	snprintf(self, sizeof(self), "/proc/self/fd/%d", *fd);
	/* O_NONBLOCK to open (a FIFO without a writer would hold crest in
	 * open() for good), then off: the job's descriptor blocks. */
	const int nfd = open(self, (flags & (O_ACCMODE | O_APPEND)) | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (nfd < 0)
		return crest_errf(-errno, "cannot open %s again for the restored job", what);
	const int fl = fcntl(nfd, F_GETFL);
	if (fl < 0 || fcntl(nfd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
		const int rc = crest_errf(-errno, "cannot open %s again for the restored job", what);
		close(nfd);
		return rc;
	}
	struct stat sb;
	if (!(flags & O_APPEND) && fstat(nfd, &sb) == 0 && S_ISREG(sb.st_mode) && lseek(nfd, (off_t)pos, SEEK_SET) < 0) {
		const int rc = crest_errf(-errno, "cannot seek in %s for the restored job", what);
		close(nfd);
		return rc;
	}
	close(*fd);
	*fd = nfd;
	return 0;
}

/* For a copy beside the original (rp_opts.beside): the file as it was at
 * the snapshot, at a new path (workdir/BASENAME or FILE.clone-N), never
 * over an existing file, left open at the snapshot's size for the copy to
 * write on from there (CRIU gets the descriptor, so it checks no size and
 * seeks nowhere; the job's own offset in a file it did not append to is
 * taken to be its end, which it is for a log or an output file). */
static int jobfile_clone(const struct restore_ctx *c, const struct cas_stream *st, const struct rp_opts *o,
			 struct staged *f)
{
	uid_t muid;
	bool has_uid;
	const int mrc = jobfile_meta(c, st, f, &muid, &has_uid);
	if (mrc < 0)
		return mrc;
	char parent[PATH_MAX];
	const char *base = fs_split(f->path, parent, sizeof(parent));
	if (f->path[0] != '/' || !*base || strlen(base) > NAME_MAX)
		return crest_errx(-EBADMSG, "job file path '%s' is damaged", f->path);
	/* The original, if it is still there: its owner and mode for the copy,
	 * and the bytes past the capture limit. */
	int in = -1;
	struct stat sb;
	const int odfd = jobfile_dir(f, parent, sizeof(parent));
	if (odfd >= 0) {
		in = open_regular(odfd, base);
		if (in < 0)
			in = -1;
		if (in >= 0 && fstat(in, &sb) < 0) {
			close(in);
			in = -1;
		}
	}
	crest_errset_str("");
	if (o->workdir) {
		/* Made and opened following only root's and the caller's
		 * symlinks, as crest get's DEST: a --workdir in a user's
		 * directory that the user turned into a link elsewhere does
		 * not take root's copies there. */
		f->dfd = fs_open_dir_owned(o->workdir, 1, 0755, NULL);
		if (f->dfd < 0) {
			const int rc = f->dfd;
			f->dfd = -1;
			if (in >= 0)
				close(in);
			if (odfd >= 0)
				close(odfd);
			return rc;
		}
		if (odfd >= 0)
			close(odfd);
		snprintf(f->base, sizeof(f->base), "%s", base);
	} else {
		if (odfd < 0) {
			if (in >= 0)
				close(in);
			return crest_errf(odfd, "cannot open the directory of %s for its copy", f->path);
		}
		f->dfd = odfd;
		if (snprintf(f->base, sizeof(f->base), "%s.clone-%u", base, o->clone) >= (int)sizeof(f->base)) {
			if (in >= 0)
				close(in);
			return crest_errx(-ENAMETOOLONG, "%s.clone-%u: name too long", f->path, o->clone);
		}
	}
	const mode_t mode = in >= 0 ? sb.st_mode & 0777 : 0600;
	f->fd = openat(f->dfd, f->base, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
	if (f->fd < 0) {
		const int rc = crest_errf(-errno, "cannot create %s for the copy of %s%s", f->base, f->path,
					  errno == EEXIST ? " (it would be overwritten: remove it or choose another --workdir)"
							  : "");
		if (in >= 0)
			close(in);
		return rc;
	}
	f->created = true;
	f->now = in >= 0 ? (uint64_t)sb.st_size : 0;
	int rc = 0;
	const uid_t uid = in >= 0 ? sb.st_uid : has_uid ? muid : geteuid();
	if (fchown(f->fd, uid, in >= 0 ? sb.st_gid : (gid_t)-1) < 0 || fchmod(f->fd, mode) < 0)
		rc = crest_errf(-errno, "cannot give the copy of %s its owner and mode", f->path);
	if (rc == 0 && ftruncate(f->fd, (off_t)f->size) < 0)
		rc = crest_errf(-errno, "cannot size the copy of %s to %llu bytes", f->path, (unsigned long long)f->size);
	if (rc == 0 && in >= 0 && st->size < f->size)
		rc = copy_range(in, f->fd, st->size, f->now < f->size ? f->now : f->size, f->path);
	if (in >= 0)
		close(in);
	struct restore_ctx quiet = *c;
	quiet.progress = NULL;
	struct restore_fd_sink sink = { f->fd, f->base };
	if (rc == 0)
		rc = restore_stream(&quiet, st, restore_sink_fd, &sink);
	if (rc == 0)
		rc = fd_plain(&f->fd, O_RDWR, f->size, f->path);
	if (rc < 0)
		crest_errctx(rc, "copying %s", f->path);
	return rc;
}

/*
 * --workdir (capture/transparent.h): DIR as the snapshot holds it, streams
 * "workdir/...". In place it is rebuilt whole in a new directory beside DIR,
 * ".BASE.crest-restore-XXXXXX", and swapped in (RENAME_EXCHANGE) right
 * before CRIU runs, with the job's files: files made after the snapshot
 * are gone, changed ones are as they were. A failed restore swaps it back;
 * a restore that worked removes the old DIR, under the temporary name by
 * then. A crest killed between the swap and CRIU's outcome is covered by the
 * restore guard, told of DIR as of a job file: it swaps the old DIR back
 * (the staged tree is then left beside it under the temporary name), or
 * after a restore that came up leaves the old one there. The job's own
 * files below DIR are not staged apart: the tree holds them, copied in the
 * same freeze.
 * For a copy beside (clone) DIR is rebuilt as DIR.clone-N beside DIR (or
 * WORKDIR/BASE with clone --workdir), never over an existing path, and
 * bound over DIR in the copy's mount namespace by CRIU's post-restore step,
 * before the copy resumes (capture/transparent.c's bind_hook): whatever
 * the copy opens below DIR from then on is its own. Not earlier: at
 * post-setup-namespaces CRIU's tasks are still in a namespace of its own
 * making, not the one they run in. So what CRIU opens below DIR itself, the
 * files the job holds open there, is handed to it from the copy's tree
 * (--inherit-fd), and a job whose working directory is below DIR cannot be
 * copied (capture's label workdir_cwd): its relative paths would resolve in
 * the original's DIR.
 * Nothing is followed through a symlink: DIR's parent is opened from / one
 * component at a time, and the tree is written below it by restore_tree.
 * Owners are not kept: the files come back the restorer's (root's), DIR
 * itself keeps its owner in place.
 */
struct wdir {
	const char *path;          /* the label: DIR, absolute */
	int pfd;                   /* the directory the new tree is made in */
	char base[NAME_MAX + 1];   /* DIR's name in pfd (in place) */
	char tmp[NAME_MAX + 1];    /* in pfd: the new tree; after the swap, the old DIR */
	char copy[PATH_MAX];       /* beside: the copy's real path */
	bool existed, swapped, made;
	uint64_t orig_ino, new_ino; /* in place: DIR's and the new tree's, for the guard */
	size_t nfiles;
};

/* Whether path lies below DIR. */
static bool wd_holds(const char *dir, const char *path)
{
	const size_t l = dir ? strlen(dir) : 0;
	return l && !strncmp(path, dir, l) && path[l] == '/';
}

static int wd_check(const struct restore_ctx *c, const char *dir)
{
	bool ok = dir[0] == '/' && dir[1] && strlen(dir) < PATH_MAX - 64 && dir[strlen(dir) - 1] != '/';
	for (const char *p = dir; ok && *p; p++)
		if (p[0] == '/' && (p[1] == '/' || (p[1] == '.' && (p[2] == '/' || !p[2] || (p[2] == '.' && (p[3] == '/' || !p[3]))))))
			ok = false;
	return ok ? 0 : crest_errx(-EBADMSG, "snapshot %s: its workdir label '%.64s' is damaged", c->snapshot, dir);
}

/* Removes name in dfd and all below it, never through a symlink. */
static void wd_rm(int dfd, const char *name, int depth)
{
	struct stat sb;
	if (depth > 80 || fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0)
		return;
	if (!S_ISDIR(sb.st_mode)) {
		unlinkat(dfd, name, 0);
		return;
	}
	const int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			close(fd);
		return;
	}
	struct dirent *e;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			wd_rm(fd, e->d_name, depth + 1);
	closedir(d);
	unlinkat(dfd, name, AT_REMOVEDIR);
}

/* A new directory ".BASE.crest-TAG-XXXXXX" in dfd (mkdirat: nothing
 * planted there is taken). */
static int wd_tempdir(int dfd, const char *base, char *out, size_t cap)
{
	for (int tries = 0; tries < 100; tries++) {
		uint64_t r = (uint64_t)time_now_ns() * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid() << 32 ^ (uint64_t)tries;
		snprintf(out, cap, ".%.200s.crest-restore-%06llx", base, (unsigned long long)(r % 0xffffff));
		if (mkdirat(dfd, out, 0700) == 0)
			return 0;
		if (errno != EEXIST)
			break;
	}
	return crest_errf(-errno, "cannot create a directory beside %s", base);
}

/* Rebuilds DIR from the snapshot: in place as w->tmp beside it, for a copy
 * at its own path (see the top). */
static int wd_stage(const struct restore_ctx *c, const struct cas_manifest *m, const struct rp_opts *o,
		    struct wdir *w)
{
	char parent[PATH_MAX], name[NAME_MAX + 1];
	const char *base = fs_split(w->path, parent, sizeof(parent));
	if (!*base || strlen(base) > NAME_MAX - 40)
		return crest_errx(-EBADMSG, "snapshot %s: its workdir '%s' is damaged", c->snapshot, w->path);
	snprintf(w->base, sizeof(w->base), "%s", base);
	int rc = 0;
	if (o->beside && o->workdir) {
		/* As the job files' copies there (jobfile_clone): through no
		 * link of another user's. */
		w->pfd = fs_open_dir_owned(o->workdir, 1, 0755, NULL);
		if (w->pfd < 0)
			return w->pfd;
	} else {
		const int root = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (root < 0)
			return crest_errf(-errno, "cannot open /");
		w->pfd = fs_openat_beneath(root, parent + 1, O_RDONLY | O_DIRECTORY, 0);
		close(root);
		if (w->pfd < 0)
			return crest_errf(w->pfd, "cannot open %s to put %s back%s", parent[0] ? parent : "/", base,
					  w->pfd == -ELOOP ? " (a directory on its path is now a symlink)" : "");
	}
	struct stat sb;
	if (!o->beside) {
		if (fstatat(w->pfd, base, &sb, AT_SYMLINK_NOFOLLOW) == 0) {
			if (!S_ISDIR(sb.st_mode))
				return crest_errx(-EPERM, "refusing to put back --workdir %s: it is now %s", w->path,
						  S_ISLNK(sb.st_mode) ? "a symlink" : "not a directory");
			w->existed = true;
			w->orig_ino = (uint64_t)sb.st_ino;
		} else if (errno != ENOENT) {
			return crest_errf(-errno, "cannot stat %s", w->path);
		}
		rc = wd_tempdir(w->pfd, base, w->tmp, sizeof(w->tmp));
		if (rc < 0) {
			w->tmp[0] = 0;
			return rc;
		}
		snprintf(name, sizeof(name), "%s", w->tmp);
	} else {
		if (o->workdir)
			snprintf(name, sizeof(name), "%s", base);
		else
			snprintf(name, sizeof(name), "%s.clone-%u", base, o->clone);
		if (mkdirat(w->pfd, name, 0700) < 0)
			return crest_errf(-errno, "cannot create %s%s%s for the copy's --workdir%s",
					  o->workdir ? o->workdir : parent, "/", name,
					  errno == EEXIST ? " (it would be overwritten: remove it or choose another "
							    "clone --workdir)" : "");
		w->made = true;
		snprintf(w->tmp, sizeof(w->tmp), "%s", name);
	}
	/* The snapshot's workdir/... streams, named below the new directory. */
	struct cas_manifest fm = *m;
	fm.streams = calloc(m->nstreams + 1, sizeof(*fm.streams));
	fm.nstreams = 0;
	fm.npieces = 0;
	fm.pieces = NULL;
	if (!fm.streams)
		return crest_errf(-ENOMEM, "restoring --workdir %s", w->path);
	uint32_t mode = 0755;
	for (size_t i = 0; i < m->nstreams; i++) {
		const struct cas_stream *st = &m->streams[i];
		if (!strcmp(st->name, "workdir") && st->type == CAS_STREAM_DIR)
			mode = st->mode;
		if (strncmp(st->name, "workdir/", 8) || st->type == CAS_STREAM_JOBFILE || st->type == CAS_STREAM_IMAGE)
			continue;
		fm.streams[fm.nstreams] = *st;
		fm.streams[fm.nstreams].name = st->name + 8;
		fm.nstreams++;
		w->nfiles += st->type != CAS_STREAM_DIR;
	}
	/* The new directory by descriptor (whoever may write DIR's parent can
	 * rename or replace the name meanwhile), and restore_tree given that
	 * very directory through /proc/self/fd. */
	const int nfd = openat(w->pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct stat ns;
	if (nfd < 0 || fstat(nfd, &ns) < 0)
		rc = crest_errf(-errno, "cannot open the new %s", w->path);
	char dest[64];
	snprintf(dest, sizeof(dest), "/proc/self/fd/%d", nfd);
	struct restore_ctx quiet = *c;
	quiet.progress = NULL;
	if (rc == 0)
		rc = restore_tree(&quiet, &fm, dest, NULL);
	free(fm.streams);
	if (rc == 0 && fchmod(nfd, mode & 07777) < 0)
		rc = crest_errf(-errno, "cannot set the mode of %s", w->path);
	if (rc == 0 && w->existed && fchown(nfd, sb.st_uid, sb.st_gid) < 0)
		rc = crest_errf(-errno, "cannot give the new %s its owner", w->path);
	if (rc == 0)
		w->new_ino = (uint64_t)ns.st_ino;
	if (rc == 0 && o->beside && !realpath(dest, w->copy))
		rc = crest_errf(-errno, "cannot find the copy of %s", w->path);
	if (nfd >= 0)
		close(nfd);
	if (rc < 0)
		crest_errctx(rc, "putting back --workdir %s", w->path);
	return rc;
}

static int wd_swap(struct wdir *w)
{
	if (w->existed ? renameat2(w->pfd, w->tmp, w->pfd, w->base, RENAME_EXCHANGE) < 0
		       : renameat2(w->pfd, w->tmp, w->pfd, w->base, RENAME_NOREPLACE) < 0)
		return crest_errf(-errno, "cannot swap the staged --workdir %s in", w->path);
	w->swapped = true;
	if (!w->existed)
		w->tmp[0] = 0;   /* nothing left under it */
	return 0;
}

static int wd_unswap(struct wdir *w)
{
	if (!w->swapped)
		return 0;
	w->swapped = false;
	if (!w->existed) {
		wd_rm(w->pfd, w->base, 0);
		return 0;
	}
	if (renameat2(w->pfd, w->tmp, w->pfd, w->base, RENAME_EXCHANGE) < 0) {
		const int rc = crest_errf(-errno, "the old --workdir %s is kept as %s beside it: cannot swap it back",
					  w->path, w->tmp);
		w->tmp[0] = 0;   /* not to be removed */
		return rc;
	}
	return 0;
}

/* After a restore: the old DIR goes (in place); after a failure: what was
 * made for nothing (the staged tree, a copy's). */
static void wd_free(struct wdir *w, bool failed)
{
	if (w->pfd < 0)
		return;
	if (w->tmp[0] && (!w->made || failed))
		wd_rm(w->pfd, w->tmp, 0);
	close(w->pfd);
	w->pfd = -1;
}

/* For a copy: CRIU's post-restore step binds the copy of DIR over
 * DIR (capture/transparent.c: bind_hook), through an action script in the
 * restore's directory that runs crest itself. */
static int wd_bind_script(const struct wdir *w, const char *dir, char *script, size_t cap)
{
	char exe[PATH_MAX], path[PATH_MAX + 16];
	const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return crest_errf(-errno, "cannot find crest's own program");
	exe[n] = 0;
	if (strchr(exe, '\'') || strchr(dir, '\'') || strchr(w->copy, '\n') || strchr(w->path, '\n'))
		return crest_errx(-EINVAL, "crest's path, the images path or --workdir holds a quote or a newline");
	snprintf(path, sizeof(path), "%s/bind", dir);
	FILE *f = fopen(path, "we");
	if (!f || fprintf(f, "%s\n%s\n", w->copy, w->path) < 0 || fclose(f) != 0) {
		const int rc = crest_errf(-errno, "cannot write %s", path);
		return rc;
	}
	snprintf(script, cap, "%s/bind.sh", dir);
	f = fopen(script, "we");
	if (!f || fprintf(f, "#!/bin/sh\nexec '%s' __criu-hook '%s' 0\n", exe, dir) < 0 || fchmod(fileno(f), 0700) < 0 ||
	    fclose(f) != 0)
		return crest_errf(-errno, "cannot write %s", script);
	return 0;
}

/* Where the job's GPUs go: what the user asked for, completed into the
 * whole map the driver wants and checked against this machine's GPUs, all
 * before anything is restored (gpumap.h). Snapshots of older crests do not
 * say which GPUs their job saw: their map goes to the driver as given. */
static int gpu_plan(const struct cudrv *d, const struct cas_manifest *m, const struct rp_opts *o,
		    struct gpuckpt_map **map, size_t *n)
{
	const char *label = cas_manifest_get_label(m, "gpus");
	*map = NULL;
	*n = 0;
	if (!label) {
		if (o->gpu)
			return crest_errx(-EINVAL, "this snapshot does not record which GPUs its job saw (an older "
					  "crest took it): name each with --gpu-map OLD=NEW");
		if (!o->nmap)
			return 0;
		*map = malloc(o->nmap * sizeof(**map));
		if (!*map)
			return crest_errf(-ENOMEM, "mapping GPUs");
		memcpy(*map, o->map, o->nmap * sizeof(**map));
		*n = o->nmap;
		return 0;
	}
	struct gpu_info *seen = NULL, *host = NULL;
	size_t nseen = 0, nhost = 0;
	int rc = gpumap_parse(label, &seen, &nseen);
	if (rc == 0)
		rc = gpumap_host(d, &host, &nhost);
	if (rc == 0)
		gpumap_free_mem(host, nhost);
	if (rc == 0)
		rc = gpumap_complete(seen, nseen, host, nhost, o->map, o->nmap, o->gpu, map, n);
	for (size_t i = 0; rc == 0 && o->notes && i < *n; i++) {
		char a[41], b[41];
		gpumap_uuid_str(&(*map)[i].from, a);
		gpumap_uuid_str(&(*map)[i].to, b);
		fprintf(o->notes, "GPU %s -> %s\n", a, b);
	}
	free(seen);
	free(host);
	return rc;
}

/* Puts the staged file in place; its original goes under f->tmp. All of
 * it relative to f->dfd: nothing on the path is looked up again. */
static int jobfile_swap(struct staged *f)
{
	if (!f->existed) {
		if (renameat2(f->dfd, f->tmp, f->dfd, f->base, RENAME_NOREPLACE) < 0 &&
		    (errno != EINVAL || renameat(f->dfd, f->tmp, f->dfd, f->base) < 0))
			return crest_errf(-errno, "cannot put %s in place", f->path);
		f->swapped = true;
		return 0;
	}
	if (renameat2(f->dfd, f->tmp, f->dfd, f->base, RENAME_EXCHANGE) == 0) {
		f->swapped = true;
		return 0;
	}
	if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)
		return crest_errf(-errno, "cannot swap the staged %s in", f->path);
	/* No exchange on this file system (NFS, some FUSE): the original to a
	 * name of its own, then the staged file in its place. */
	char orig[NAME_MAX + 1];
	const int fd = temp_at(f->dfd, f->base, "orig", orig, sizeof(orig));
	if (fd < 0)
		return fd;
	close(fd);
	snprintf(f->g.aside, sizeof(f->g.aside), "%s", orig);
	const int grc = staged_tell(f);
	if (grc < 0) {
		unlinkat(f->dfd, orig, 0);
		return grc;
	}
	if (renameat(f->dfd, f->base, f->dfd, orig) < 0) {
		const int rc = crest_errf(-errno, "cannot move %s aside", f->path);
		unlinkat(f->dfd, orig, 0);
		return rc;
	}
	if (renameat(f->dfd, f->tmp, f->dfd, f->base) < 0) {
		const int rc = crest_errf(-errno, "cannot put the staged %s in place", f->path);
		if (renameat(f->dfd, orig, f->dfd, f->base) < 0)
			return crest_errf(-errno, "%s was moved to %s beside it and could not be put back", f->path,
					  orig);
		return rc;
	}
	unlinkat(f->dfd, f->tmp, 0);
	memcpy(f->tmp, orig, sizeof(orig));
	f->swapped = true;
	return 0;
}

/* Undoes jobfile_swap: the original back under its name. */
static int jobfile_unswap(struct staged *f)
{
	if (!f->swapped)
		return 0;
	int rc = 0;
	if (!f->existed) {
		rc = unlinkat(f->dfd, f->base, 0) < 0 && errno != ENOENT ? -errno : 0;
	} else if (renameat2(f->dfd, f->tmp, f->dfd, f->base, RENAME_EXCHANGE) < 0 &&
		   renameat(f->dfd, f->tmp, f->dfd, f->base) < 0) {
		rc = crest_errf(-errno, "the original of %s is kept as %s beside it: cannot rename it back",
				f->path, f->tmp);
		f->tmp[0] = 0;   /* not to be removed */
	}
	f->swapped = false;
	return rc;
}

/* failed: a copy's files (rp_opts.beside) were made for nothing and go. */
static void staged_free(struct staged *v, size_t n, bool failed)
{
	for (size_t i = 0; v && i < n; i++) {
		if (v[i].fd >= 0)
			close(v[i].fd);
		if (failed && v[i].created && v[i].dfd >= 0)
			unlinkat(v[i].dfd, v[i].base, 0);
		if (v[i].dfd >= 0 && v[i].tmp[0])
			unlinkat(v[i].dfd, v[i].tmp, 0);
		if (v[i].dfd >= 0)
			close(v[i].dfd);
	}
	free(v);
}

struct wdir;
static bool wd_holds(const char *dir, const char *path);

/* A descriptor the job held on a mount of the host's (its stdio, under
 * crest run), dumped as external: the restore hands CRIU one for it, under
 * the same key (os/proc.h: proc_extfds_get). */
struct extfd {
	char key[64];
	int flags;                 /* O_ACCMODE | O_APPEND, as the job had it */
	uint64_t pos;
	char path[PATH_MAX];
	int fd;                    /* opened here, or a staged file's (not closed here) */
	bool own;
};

/* The capture's "ext_fds" label: "KEY FLAGS POS PATH" a line. */
static int extfds_parse(const struct restore_ctx *c, const char *s, struct extfd **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	if (!s || !*s)
		return 0;
	size_t cap = 1;
	for (const char *p = s; *p; p++)
		cap += *p == '\n';
	struct extfd *v = calloc(cap, sizeof(*v));
	if (!v)
		return crest_errf(-ENOMEM, "restore");
	for (const char *p = s; *p;) {
		const char *end = strchr(p, '\n');
		const size_t len = end ? (size_t)(end - p) : strlen(p);
		char line[PATH_MAX + 128];
		unsigned flags = 0;
		unsigned long long pos = 0;
		int off = 0;
		struct extfd *x = &v[*n];
		if (len >= sizeof(line) || (memcpy(line, p, len), line[len] = 0,
					    sscanf(line, "%63s %o %llu %n", x->key, &flags, &pos, &off) != 3) ||
		    !off || line[off] != '/' || strlen(line + off) >= sizeof(x->path)) {
			free(v);
			return crest_errx(-EBADMSG, "snapshot %s: its list of external files is damaged", c->snapshot);
		}
		snprintf(x->path, sizeof(x->path), "%s", line + off);
		x->flags = (int)flags;
		x->pos = pos;
		x->fd = -1;
		++*n;
		p += len;
		if (*p)
			p++;
	}
	*out = v;
	return 0;
}

static const struct staged *staged_by_path(const struct staged *v, size_t n, const char *path)
{
	for (size_t i = 0; v && i < n; i++)
		if (!strcmp(v[i].path, path))
			return &v[i];
	return NULL;
}

/* A descriptor for each external file, where the job is to go on: a copy
 * beside gets its own copy of a file it wrote (never the original's); in
 * place, a file the restore put back is opened in its directory (never
 * through a symlink planted since), anything else (/dev/null, a terminal,
 * a file read) by its path, at the offset the job had. */
static int extfds_open(struct extfd *v, size_t n, const struct staged *files, size_t nfiles, bool beside,
		       const struct wdir *w)
{
	for (size_t i = 0; i < n; i++) {
		struct extfd *x = &v[i];
		const struct staged *f = staged_by_path(files, nfiles, x->path);
		char inwd[2 * PATH_MAX];
		const char *at = x->path;
		/* Below a copy's --workdir: the copy's own file (in place, DIR
		 * is the snapshot's already). */
		if (beside && w && w->copy[0] && wd_holds(w->path, x->path)) {
			snprintf(inwd, sizeof(inwd), "%s%s", w->copy, x->path + strlen(w->path));
			at = inwd;
		}
		/* O_NONBLOCK: the path is the snapshot's word, and a FIFO there
		 * (or a serial line waiting for its carrier) would block open()
		 * for good, with the job's files swapped in; fd_plain clears it. */
		const int how = (x->flags & (O_ACCMODE | O_APPEND)) | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
		if (f && beside) {
			x->fd = f->fd;
			continue;
		}
		if (beside && at == x->path && (x->flags & O_ACCMODE) != O_RDONLY) {
			struct stat sb;
			if (stat(x->path, &sb) == 0 && S_ISREG(sb.st_mode))
				return crest_errx(-ENOENT, "the snapshot holds no copy of %s, which the job wrote: "
						  "a copy beside it would write into the original's", x->path);
		}
		x->fd = f ? openat(f->dfd, f->base, how) : open(at, how);
		if (x->fd < 0)
			return crest_errf(-errno, "cannot open %s again for the restored job", x->path);
		x->own = true;
		const int rc = fd_plain(&x->fd, x->flags, x->pos, x->path);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static void extfds_free(struct extfd *v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		if (v[i].own && v[i].fd >= 0)
			close(v[i].fd);
	free(v);
}

/* Every image into dir, each byte checked before it is written. */
static int images_write(const struct restore_ctx *c, const struct cas_manifest *m, const char *dir,
			uint64_t *bytes)
{
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < m->nstreams; i++) {
		const struct cas_stream *st = &m->streams[i];
		if (st->type != CAS_STREAM_IMAGE)
			continue;
		const char *base = strrchr(st->name, '/');
		base = base ? base + 1 : st->name;
		if (!*base || !strcmp(base, "..") || !strcmp(base, ".")) {
			rc = crest_errx(-EBADMSG, "snapshot %s: image name '%s' is damaged", c->snapshot, st->name);
			break;
		}
		char path[PATH_MAX + 256];
		snprintf(path, sizeof(path), "%s/%s", dir, base);
		int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd < 0) {
			rc = crest_errf(-errno, "cannot create %s", path);
			break;
		}
		struct restore_ctx sc = *c;
		sc.progress_base = *bytes;
		rc = restore_stream_to_fd(&sc, st, fd);
		close(fd);
		*bytes += st->size;
	}
	return rc;
}

static void rp_guard_started(void *arg, pid_t criu)
{
	rp_guard_criu(arg, criu);
}

/* Reaps what a failed restore left: CRIU kills a tree it gives up on, and
 * crest kills one whose GPU state or images failed, but nothing waits for
 * them; their zombies go to the nearest subreaper, which restore_process
 * makes crest (where init never reaps, in some containers, they would hold
 * the job's pids for good, and the next restore would find them in use).
 * The job's own pids; in a namespace of its own, whose host pids are not
 * known, any child of crest's that has died. At most about a second. */
static void reap_failed(const pid_t *pids, size_t npids, bool pidns)
{
	for (int round = 0; round < 100; round++) {
		bool left = false;
		if (pidns) {
			pid_t p;
			while ((p = waitpid(-1, NULL, WNOHANG)) > 0)
				;
			left = p == 0;   /* children still running: maybe the tree, dying */
		}
		for (size_t i = 0; !pidns && i < npids; i++)
			if (pids[i] > 0 && waitpid(pids[i], NULL, WNOHANG) == 0)
				left = true;
		if (!left)
			return;
		const struct timespec ten_ms = { 0, 10 * 1000 * 1000 };
		nanosleep(&ten_ms, NULL);
	}
}

/* Ends a tree that came back but must not run. In a namespace of its own
 * through its init, r->pid (the job's old pids may be the original's,
 * still running beside it); else each of the job's pids. */
static void tree_kill(const struct rp_result *r, const pid_t *pids, size_t npids, bool pidns)
{
	if (pidns) {
		if (r->pid > 0)   /* 0 (no pidfile) would be crest's own group */
			kill(r->pid, SIGKILL);
		return;
	}
	for (size_t i = 0; i < npids; i++)
		kill(pids[i], SIGKILL);
}

/* Makes the NCCL communicators of the processes that ran crest's shim
 * again (gpu/shim.h): they were released before the freeze, and every
 * rank must be back, running, before any can be. */
static int restore_shims(const struct rp_result *r, const struct cas_manifest *m, uint64_t pidns)
{
	pid_t *sp = NULL, *in = NULL;
	size_t n = 0, nin = 0;
	int rc = parse_pids(cas_manifest_get_label(m, "shim_pids"), &sp, &n);
	if (rc == 0 && pidns) {
		rc = parse_pids(cas_manifest_get_label(m, "shim_nspids"), &in, &nin);
		if (rc == 0 && nin != n)
			rc = crest_errx(-EBADMSG, "the snapshot's shim_nspids do not match its shim_pids");
		if (rc == 0)
			rc = pidns_host_pids(r->pid, in, n, sp);
	}
	if (rc == 0)
		rc = shimctl_rebuild_pids(sp, n);
	free(sp);
	free(in);
	return rc;
}

/*
 * In place, only one restore of a job may win: two at once both found the
 * job's pids free and its files unheld, both swapped the files, and the
 * loser, swapping "its originals" back, left the winner's job writing to
 * an unlinked file (issue 32); two restores of a crest run job, each in a
 * new pid namespace, both won. So an in-place restore holds the host's
 * restore lock (RUN_DIR/restore.lock, RUN_DIR: $CREST_RUN_DIR, else
 * /run/crest) from before its checks until it is done with CRIU's outcome
 * and the files, and checks under it, before any file is touched, that no
 * copy of the job runs (job_running). One lock for the host, not one per
 * job: no key names a job across its restores (pids are reused, a crest
 * run job gets a new namespace at each restore, its files can differ from
 * one snapshot to the next), and a key that differed for the same job
 * would let the race through; restores in place are rare and brief, so
 * another job's restore waits its turn. An flock: a crest that dies lets go of it
 * (CRIU, the guard and the restored tree never inherit it: O_CLOEXEC, and
 * CRIU makes the tree's processes itself). The holder's pid is in the file
 * for those that wait.
 */
#define RESTORE_LOCK_WAIT_S 600

static const char *run_dir(void)
{
	const char *env = getenv("CREST_RUN_DIR");
	return env && *env ? env : "/run/crest";
}

static int restore_lock(int *out)
{
	*out = -1;
	const char *dir = run_dir();
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return crest_errf(-errno, "cannot create %s for the restore lock", dir);
	/* Root's lock in a place nobody else may plant a link or a file. */
	struct stat ds;
	if (lstat(dir, &ds) < 0)
		return crest_errf(-errno, "cannot use %s for the restore lock", dir);
	if (!S_ISDIR(ds.st_mode) || (ds.st_uid != geteuid() && ds.st_uid != 0) || (ds.st_mode & 022))
		return crest_errx(-EPERM, "refusing %s for the restore lock: not a directory of this user's or "
				  "root's that only they may write (chmod 700 it, or set CREST_RUN_DIR)", dir);
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/restore.lock", dir);
	const int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return crest_errf(-errno, "cannot open the restore lock %s", path);
	const uint64_t t0 = time_now_ns();
	uint64_t said = t0;
	while (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		const int err = errno;
		if (err != EWOULDBLOCK && err != EINTR) {
			close(fd);
			return crest_errf(-err, "cannot lock %s", path);
		}
		const uint64_t now = time_now_ns();
		char holder[32] = "";
		const ssize_t n = pread(fd, holder, sizeof(holder) - 1, 0);
		holder[n > 0 ? n : 0] = 0;
		holder[strcspn(holder, "\n")] = 0;
		if (now - t0 >= (uint64_t)RESTORE_LOCK_WAIT_S * 1000000000ull) {
			close(fd);
			return crest_errx(-ETIMEDOUT, "another crest restore (pid %s) held %s for %d s: "
					  "try again once it is done", holder[0] ? holder : "unknown", path,
					  RESTORE_LOCK_WAIT_S);
		}
		if (now - said >= 15000000000ull) {
			fprintf(stderr, "crest: waiting for another crest restore (pid %s) to finish\n",
				holder[0] ? holder : "unknown");
			said = now;
		}
		const struct timespec ts = { 0, 20 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	char me[32];
	const int n = snprintf(me, sizeof(me), "%d\n", (int)getpid());
	if (ftruncate(fd, 0) < 0 || pwrite(fd, me, (size_t)n, 0) != n) {
		/* Only a name for those that wait. */
	}
	*out = fd;
	return 0;
}

static void restore_unlock(int fd)
{
	if (fd < 0)
		return;
	if (ftruncate(fd, 0) < 0) {
		/* as above */
	}
	close(fd);
}

/* Under the restore lock, before any file is touched: whether a copy of
 * the job runs. Its processes, whatever their pids or namespace, hold the
 * job's files open for writing (the ones the snapshot would put back, and
 * the regular files among its external ones: a crest run job's log), so a
 * process that holds one is taken for a copy that runs, and the restore is
 * refused: it would swap the file from under it. A reader (tail -f) does
 * not count. Files that are gone are not looked for. */
static int job_running(const struct restore_ctx *c, const struct cas_manifest *m, const char *extl)
{
	struct proc_file *v = calloc(m->nstreams + 1, sizeof(*v));
	char (*paths)[PATH_MAX] = calloc(m->nstreams + 1, sizeof(*paths));
	size_t n = 0;
	int rc = v && paths ? 0 : crest_errf(-ENOMEM, "restore");
	for (size_t i = 0; rc == 0 && i < m->nstreams; i++) {
		struct stat sb;
		if (m->streams[i].type != CAS_STREAM_JOBFILE ||
		    !meta_get(m->streams[i].meta, "path", paths[n], sizeof(paths[n])) || stat(paths[n], &sb) < 0 ||
		    !S_ISREG(sb.st_mode))
			continue;
		v[n] = (struct proc_file){ .path = paths[n], .dev = (uint64_t)sb.st_dev, .ino = (uint64_t)sb.st_ino };
		n++;
	}
	struct extfd *ext = NULL;
	size_t next = 0;
	if (rc == 0)
		rc = extfds_parse(c, extl, &ext, &next);
	struct proc_file *ev = rc == 0 ? calloc(next + 1, sizeof(*ev)) : NULL;
	size_t nev = 0;
	if (rc == 0 && !ev)
		rc = crest_errf(-ENOMEM, "restore");
	for (size_t i = 0; rc == 0 && i < next; i++) {
		struct stat sb;
		if ((ext[i].flags & O_ACCMODE) == O_RDONLY || stat(ext[i].path, &sb) < 0 || !S_ISREG(sb.st_mode))
			continue;
		ev[nev++] = (struct proc_file){ .path = ext[i].path, .dev = (uint64_t)sb.st_dev,
						.ino = (uint64_t)sb.st_ino };
	}
	pid_t who = 0;
	size_t which = 0;
	const struct proc_file *hit = NULL;
	int f = rc == 0 ? proc_file_writer(v, n, &who, &which) : 0;
	if (f == 1)
		hit = &v[which];
	if (rc == 0 && f == 0)
		f = proc_file_writer(ev, nev, &who, &which);
	if (f == 1 && !hit)
		hit = &ev[which];
	if (rc == 0 && f < 0)
		rc = f;
	if (rc == 0 && hit) {
		char comm[64];
		proc_comm(who, comm, sizeof(comm));
		rc = crest_errx(-EBUSY, "cannot restore %s in place: pid %d ('%s') has %s open for writing, so "
				"the job runs already (restored by another crest restore, or never ended); end it "
				"first", c->snapshot, (int)who, comm, hit->path);
	}
	free(ev);
	free(ext);
	free(v);
	free(paths);
	return rc;
}

/* A copy of a crest run job restored in place comes back in a new pid
 * namespace, which the snapshot's own check (pidns_holds, on the
 * original's) cannot see, and a job that writes no file of its own leaves
 * job_running nothing to find. So each such restore records its copy's
 * init under the restore lock, RUN_DIR/pidns-N for the snapshot's
 * namespace N, as "PID KEY" (KEY: os/proc.h's proc_job_key, which a
 * reused pid cannot repeat), and the next restore of a snapshot of that
 * namespace refuses while that init lives. A copy's own snapshots name its
 * namespace, whose init pidns_holds finds. A record whose init is gone is
 * removed; a crash leaves at most a record of an init that is gone. */
#define COPY_KEY_MAX 128   /* proc_job_key's: a boot id, a pid, a start time */

static void copy_path(uint64_t pidns, char *path, size_t cap)
{
	snprintf(path, cap, "%s/pidns-%llu", run_dir(), (unsigned long long)pidns);
}

static int copy_running(const struct restore_ctx *c, uint64_t pidns)
{
	char path[PATH_MAX], buf[COPY_KEY_MAX + 32] = "", key[COPY_KEY_MAX + 1], now[COPY_KEY_MAX + 1];
	copy_path(pidns, path, sizeof(path));
	const int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : crest_errf(-errno, "cannot read %s", path);
	const ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = 0;
	int pid = 0;
	char st = 0;   /* a zombie init is a copy that ended: its namespace went with it */
	if (sscanf(buf, "%d %127s", &pid, key) == 2 && pid > 0 && proc_job_key(pid, now, sizeof(now)) == 0 &&
	    !strcmp(now, key) && (st = proc_state(pid)) && st != 'Z' && st != 'X')
		return crest_errx(-EBUSY, "cannot restore %s in place: a copy of its job restored before still "
				  "runs (pid %d) and would lose its files; end it first, or run a copy beside it "
				  "with crest clone", c->snapshot, pid);
	unlink(path);
	return 0;
}

static void copy_record(uint64_t pidns, pid_t init)
{
	char path[PATH_MAX], tmp[PATH_MAX + 8], key[COPY_KEY_MAX + 1], line[COPY_KEY_MAX + 32];
	copy_path(pidns, path, sizeof(path));
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	int rc = proc_job_key(init, key, sizeof(key));
	const int n = rc == 0 ? snprintf(line, sizeof(line), "%d %s\n", (int)init, key) : 0;
	const int fd = rc == 0 ? open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600) : -1;
	if (rc == 0 && fd < 0)
		rc = -errno;
	if (fd >= 0 && write(fd, line, (size_t)n) != n)
		rc = -EIO;
	if (fd >= 0 && close(fd) < 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, path) < 0)
		rc = -errno;
	if (rc < 0) {
		unlink(tmp);
		fprintf(stderr, "crest: warning: cannot record the restored copy (pid %d) in %s: %s (another "
			"restore of this snapshot would not see it run)\n", (int)init, path, strerror(-rc));
	}
}

/* A job file below --workdir: the tree holds it (copied in the same
 * freeze), so it is not staged apart. */
static bool jobfile_in(const struct cas_stream *st, const char *wdl)
{
	char path[PATH_MAX];
	return wdl && meta_get(st->meta, "path", path, sizeof(path)) && wd_holds(wdl, path);
}

/* restore_attempt's answer when CRIU failed on streamed images that were
 * all whole: the attempt has undone everything (restore_process). */
#define RP_AGAIN_FROM_FILES 1

/* One restore of the snapshot, from streamed images or (from_files) from image
 * files written out first. *job_lock: the restore lock, taken here where
 * in place and not yet held, and left held for the caller. */
static int restore_attempt(const struct restore_ctx *c, const struct cas_manifest *m, const struct criu *criu,
			   const struct rp_opts *o, struct rp_result *r, bool from_files, int *job_lock, char *why,
			   size_t whycap)
{
	memset(r, 0, sizeof(*r));
	uint64_t t0 = time_now_ns();
	if (cas_jobsnap_is(m))
		return crest_errx(-EINVAL, "snapshot %s is a job snapshot of %zu ranks: restore one rank's snapshot "
				  "(crest show %s lists them), or crest get --rank R", c->snapshot, m->nstreams,
				  c->snapshot);
	if (strcmp(m->kind, "process"))
		return crest_errx(-EINVAL, "snapshot %s is a '%s' snapshot, not a process: use crest get",
				  c->snapshot, m->kind);
	pid_t *pids = NULL, *cuda = NULL;
	size_t npids = 0, ncuda = 0;
	int rc = parse_pids(cas_manifest_get_label(m, "pids"), &pids, &npids);
	if (rc == 0)
		rc = parse_pids(cas_manifest_get_label(m, "cuda_pids"), &cuda, &ncuda);
	if (rc == 0 && !npids)
		rc = crest_errx(-EBADMSG, "snapshot %s names no processes", c->snapshot);
	const struct cudrv *d = NULL;
	if (rc == 0 && ncuda) {
		rc = cudrv_load(&d);
		if (rc == 0)
			rc = cudrv_need_checkpoint(d);
		if (rc < 0)
			crest_errctx(rc, "snapshot %s holds CUDA processes", c->snapshot);
	}
	struct gpuckpt_map *gmap = NULL;
	size_t ngmap = 0;
	if (rc == 0 && ncuda)
		rc = gpu_plan(d, m, o, &gmap, &ngmap);
	/* A job in a pid namespace of its own comes back in a new one: the
	 * host pids it had do not matter. In place, its files are swapped
	 * back, which must not happen under a live original. */
	const char *nslabel = cas_manifest_get_label(m, "pidns");
	uint64_t pidns = 0;
	if (rc == 0 && nslabel && !num_parse(nslabel, UINT64_MAX, &pidns))
		rc = crest_errx(-EBADMSG, "snapshot %s: its pid namespace label '%.32s' is damaged", c->snapshot,
				nslabel);
	if (rc == 0 && o->beside && !pidns)
		rc = crest_errx(-EINVAL, "snapshot %s is of a job that was not started by crest run: a copy "
				"beside it would need the pids the original holds", c->snapshot);
	/* --workdir: put back with the job's files, unless those stay. */
	const char *wdl = o->keep_files ? NULL : cas_manifest_get_label(m, "workdir");
	struct wdir wd = { .path = wdl, .pfd = -1 };
	if (rc == 0 && wdl)
		rc = wd_check(c, wdl);
	/* A copy's DIR is its own copy, bound over DIR where only it sees it:
	 * put back in place it would replace the original's DIR. */
	if (rc == 0 && wdl && !o->beside && cas_manifest_get_label(m, "workdir_bound"))
		rc = crest_errx(-EPERM, "cannot restore %s in place: it is of a copy (crest clone) whose --workdir "
				"%s was its own copy, and in place it would replace the original's %s; run it as "
				"a copy with crest clone", c->snapshot, wdl, wdl);
	if (rc == 0 && wdl && o->beside && cas_manifest_get_label(m, "workdir_cwd"))
		rc = crest_errx(-EINVAL, "snapshot %s: the job's working directory is below --workdir %s, where a "
				"copy would find the original's files by relative paths: start the job outside %s "
				"(a copy gets its own %s for absolute paths)", c->snapshot, wdl, wdl, wdl);
	if (rc == 0 && wdl && o->beside && !cas_manifest_get_label(m, "mntns"))
		rc = crest_errx(-EINVAL, "snapshot %s holds --workdir %s but its job has no mount namespace of its "
				"own (not started by crest run): a copy could not get its own %s", c->snapshot, wdl, wdl);
	/* The driver is reached by host pid: a copy in a new namespace has
	 * new ones, found after CRIU by the pids inside (cuda_nspids). */
	pid_t *cuda_in = NULL;
	size_t ncuda_in = 0;
	if (rc == 0 && pidns && ncuda) {
		rc = parse_pids(cas_manifest_get_label(m, "cuda_nspids"), &cuda_in, &ncuda_in);
		if (rc == 0 && ncuda_in != ncuda)
			rc = crest_errx(-EOPNOTSUPP, "snapshot %s holds CUDA processes in a pid namespace but not "
					"their pids inside it (taken by an older crest): restore it in a new "
					"namespace is not possible", c->snapshot);
	}
	/* In place: the lock, then the checks under it (restore_lock). */
	if (rc == 0 && !o->beside && *job_lock < 0) {
		rc = restore_lock(job_lock);
		if (rc == 0)
			crest_fault_pause("restore.lock");   /* tests only: util/fault.h */
	}
	if (rc == 0 && pidns && !o->beside && pidns_holds(pids[0], pidns))
		rc = crest_errx(-EBUSY, "cannot restore %s in place: the job it was taken from still runs "
				"(pid %d) and would lose its files; end it first, or run a copy beside it "
				"with crest clone", c->snapshot, (int)pids[0]);
	if (rc == 0 && pidns && !o->beside)
		rc = copy_running(c, pidns);
	if (rc == 0 && !o->beside)
		rc = job_running(c, m, cas_manifest_get_label(m, "ext_fds"));
	if (rc == 0 && !pidns)
		rc = pids_free(pids, npids, o->wait_pids_ms ? o->wait_pids_ms : 5000);
	/* The images take as much RAM on tmpfs as the job has state, and a
	 * crest killed with -9 removes nothing: the directory is held by an
	 * flock while this crest lives, and every restore first removes those
	 * of crests that are gone (the same protocol as a checkpoint's). */
	char dir[PATH_MAX];
	int dir_lock = -1;
	dir[0] = 0;
	if (rc == 0) {
		const char *tmp = o->tmpdir ? o->tmpdir : "/dev/shm";
		char prefix[64];
		fs_workdir_sweep(tmp, "crest-restore-");
		snprintf(prefix, sizeof(prefix), "crest-restore-%d-", (int)getpid());
		rc = fs_workdir_make(tmp, prefix, dir, sizeof(dir), &dir_lock);
		if (rc < 0)
			dir[0] = 0;
	}
	/* The images: served to CRIU as it reads them (imgsrv.h), or with
	 * CREST_RESTORE_IMAGES=files written out first (every byte verified
	 * before it is written either way). Served, CRIU's reading overlaps
	 * the store's, and tmpfs holds no copy of the job's memory. */
	const char *how = from_files ? "files" : getenv("CREST_RESTORE_IMAGES");
	bool serve = !how || !*how || !strcmp(how, "stream");
	if (rc == 0 && !serve && strcmp(how, "files"))
		rc = crest_errx(-EINVAL, "CREST_RESTORE_IMAGES is '%s': it must be 'stream' (the default) or 'files'",
				how);
	if (rc == 0 && !serve)
		rc = images_write(c, m, dir, &r->bytes);
	/* The job's files staged beside them: the live ones are not touched. */
	struct staged *files = NULL;
	size_t nfiles = 0;
	for (size_t i = 0; !o->keep_files && i < m->nstreams; i++)
		nfiles += m->streams[i].type == CAS_STREAM_JOBFILE && !jobfile_in(&m->streams[i], wdl);
	if (rc == 0 && nfiles && !(files = calloc(nfiles, sizeof(*files))))
		rc = crest_errf(-ENOMEM, "restore");
	for (size_t i = 0; files && i < nfiles; i++) {
		files[i].dfd = files[i].fd = -1;
		files[i].g.idx = (uint32_t)i;
	}
	/* A guard puts the job's files back (in place) and brings back the
	 * GPU state of its CUDA processes if crest dies before it has dealt
	 * with CRIU's outcome (restore/guard.h). */
	struct rp_guard guard = { 0, -1 };
	/* The shim's processes, as the snapshot names them (inside its pid
	 * namespace when it has one): the guard makes their NCCL again. */
	pid_t *shim = NULL;
	size_t nshim = 0;
	const bool shim_ns = pidns && cas_manifest_get_label(m, "shim_nspids");
	if (rc == 0)
		rc = parse_pids(cas_manifest_get_label(m, shim_ns ? "shim_nspids" : "shim_pids"), &shim, &nshim);
	if (rc == 0 && (((files || wdl) && !o->beside) || ncuda || nshim || o->huge_pages))
		rc = rp_guard_start(&guard, dir, dir_lock);
	/* Under the guard, which puts the setting back if crest dies with it
	 * raised; CRIU then writes the job's pages into memory faulted in
	 * huge pages, and the driver stages device memory in it. */
	bool thp = false;
	if (rc == 0 && o->huge_pages) {
		rc = os_thp_raise();
		thp = rc == 0;
		if (thp)
			crest_fault_pause("restore.thp");   /* tests only: util/fault.h */
		else
			rc = crest_errctx(rc, "--huge-pages: nothing was restored");
	}
	if (rc == 0 && ncuda)
		rc = rp_guard_cuda(&guard, cuda_in ? cuda_in : cuda, ncuda, cuda_in != NULL, gmap, ngmap);
	if (rc == 0 && nshim)
		rc = rp_guard_shim(&guard, shim, nshim, shim_ns);
	if (rc == 0 && (ncuda || nshim))
		rc = rp_guard_tree(&guard, pids, npids, pidns != 0);
	free(shim);
	for (size_t i = 0; files && i < nfiles && !o->beside; i++)
		files[i].guard = guard.pid ? &guard : NULL;
	for (size_t i = 0, k = 0; rc == 0 && files && i < m->nstreams; i++)
		if (m->streams[i].type == CAS_STREAM_JOBFILE && !jobfile_in(&m->streams[i], wdl))
			rc = o->beside ? jobfile_clone(c, &m->streams[i], o, &files[k++])
				       : jobfile_stage(c, &m->streams[i], &files[k++]);
	if (rc == 0 && wdl)
		rc = wd_stage(c, m, o, &wd);
	/* The guard swaps DIR back, as a job file, if crest dies once it is in. */
	if (rc == 0 && wdl && !o->beside) {
		struct rp_guard_file g = { .idx = (uint32_t)nfiles, .existed = wd.existed, .orig_ino = wd.orig_ino,
					   .new_ino = wd.new_ino };
		snprintf(g.base, sizeof(g.base), "%s", wd.base);
		snprintf(g.tmp, sizeof(g.tmp), "%s", wd.tmp);
		rc = rp_guard_file(&guard, &g, wd.pfd);
	}
	char bind_sh[PATH_MAX + 16];
	if (rc == 0 && wdl && o->beside)
		rc = wd_bind_script(&wd, dir, bind_sh, sizeof(bind_sh));
	/* Files the job had on the host's mounts (under crest run: its stdio). */
	struct extfd *ext = NULL;
	size_t next = 0;
	const char *mnl = cas_manifest_get_label(m, "mntns"), *netl = cas_manifest_get_label(m, "netns");
	if (rc == 0)
		rc = extfds_parse(c, cas_manifest_get_label(m, "ext_fds"), &ext, &next);
	struct criu_inherit *inh = calloc(nfiles + next + m->nstreams + 1, sizeof(*inh));
	size_t ninh = 0;
	if (rc == 0 && !inh)
		rc = crest_errf(-ENOMEM, "restore");
	/* A copy's files below DIR: its own copy's, opened here (CRIU would
	 * open the original's: the bind comes after). */
	int *wdfds = NULL;
	size_t nwdfds = 0;
	if (rc == 0 && wdl && o->beside && inh && !(wdfds = calloc(m->nstreams + 1, sizeof(int))))
		rc = crest_errf(-ENOMEM, "restore");
	for (size_t i = 0; rc == 0 && wdfds && i < m->nstreams; i++) {
		char path[PATH_MAX], at[2 * PATH_MAX];
		if (m->streams[i].type != CAS_STREAM_JOBFILE || !jobfile_in(&m->streams[i], wdl) ||
		    !meta_get(m->streams[i].meta, "path", path, sizeof(path)))
			continue;
		bool external = false;
		for (size_t k = 0; k < next && !external; k++)
			external = !strcmp(ext[k].path, path);
		if (external)
			continue;   /* extfds_open opens the copy's */
		snprintf(at, sizeof(at), "%s%s", wd.copy, path + strlen(wdl));
		const int fd = open(at, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0) {
			rc = crest_errf(-errno, "cannot open %s for the copy", at);
			break;
		}
		wdfds[nwdfds++] = fd;
		/* path= is the meta's last field: the stream's own string from there */
		inh[ninh++] = (struct criu_inherit){ .fd = fd, .path = strstr(m->streams[i].meta, "path=") + 5 };
	}
	/* A copy's own files, by path; one dumped as external goes by its key. */
	for (size_t i = 0; rc == 0 && o->beside && i < nfiles; i++) {
		bool external = false;
		for (size_t k = 0; k < next && !external; k++)
			external = !strcmp(ext[k].path, files[i].path);
		if (!external)
			inh[ninh++] = (struct criu_inherit){ .fd = files[i].fd, .path = files[i].path };
	}
	r->stream_ns = time_now_ns() - t0;
	/* Everything is ready: the files go in, and CRIU runs at once. */
	for (size_t i = 0; rc == 0 && !o->beside && i < nfiles; i++)
		rc = jobfile_swap(&files[i]);
	if (rc == 0 && wdl && !o->beside)
		rc = wd_swap(&wd);
	if (rc == 0 && wdl && !o->beside)
		crest_fault_die("restore.workdir");   /* tests only: util/fault.h */
	if (rc == 0)
		rc = extfds_open(ext, next, files, nfiles, o->beside, wdl ? &wd : NULL);
	for (size_t i = 0; rc == 0 && i < next; i++)
		inh[ninh++] = (struct criu_inherit){ .fd = ext[i].fd, .key = ext[i].key };
	const char *sj = cas_manifest_get_label(m, "shell_job");
	const char *tcp = cas_manifest_get_label(m, "tcp");
	/* In the host's network namespace, the killed job's connections may
	 * sit in TIME_WAIT on the ports its sockets bind again (os/sock.h). */
	uint16_t *ports = NULL;
	size_t nports = 0, ended = 0;
	if (rc == 0 && !o->beside && !(netl && !strcmp(netl, "1")))
		rc = parse_ports(cas_manifest_get_label(m, "tcp_ports"), &ports, &nports);
	if (rc == 0 && nports)
		rc = sock_tw_end(ports, nports, &ended);
	free(ports);
	if (rc == 0 && ended && o->notes)
		fprintf(o->notes, "ended %zu TIME_WAIT socket%s the killed job left on its ports\n", ended,
			ended == 1 ? "" : "s");
	uint64_t t1 = time_now_ns();
	struct imgsrv *srv = NULL;
	if (rc == 0 && serve) {
		rc = imgsrv_start(c, m, dir, &srv);
		if (rc == -ENAMETOOLONG) {   /* a --tmpdir too deep for a socket's path */
			serve = false;
			rc = images_write(c, m, dir, &r->bytes);
		}
	}
	/* See reap_failed. A restored tree that runs becomes crest's child
	 * too, which changes nothing for it: crest does not wait for it. */
	int subreaper = 0;
	prctl(PR_GET_CHILD_SUBREAPER, &subreaper);
	if (!subreaper)
		prctl(PR_SET_CHILD_SUBREAPER, 1);
	struct criu_restore_opts ro = { .dir = dir, .shell_job = sj && !strcmp(sj, "1"), .pid_out = &r->pid,
					.mntns = mnl && !strcmp(mnl, "1"), .new_net = o->beside,
					.net_external = netl && !strcmp(netl, "1"), .stream = serve,
					.tcp_established = tcp && !strcmp(tcp, "established"),
					.tcp_close = tcp && !strcmp(tcp, "close"),
					.inherit = inh, .ninherit = ninh,
					.action_script = wdl && o->beside ? bind_sh : NULL,
					.started = guard.pid ? rp_guard_started : NULL, .started_arg = &guard };
	bool ran_criu = false, again = false;
	if (rc == 0) {
		ran_criu = true;
		rc = criu_restore(criu, &ro);
	}
	if (srv) {
		/* CRIU has exited. A damaged image ends its pipe early and CRIU
		 * fails on it: the damage is the news, not CRIU's complaint. A
		 * tree that came back although an image failed (past what CRIU
		 * read) is ended: nothing runs from a snapshot found damaged. */
		char cmsg[1024];
		crest_errcpy(cmsg, sizeof(cmsg));
		uint64_t sent = 0;
		const int src = imgsrv_finish(srv, &sent);
		r->bytes += sent;
		if (src < 0 && rc == 0) {
			tree_kill(r, pids, npids, pidns != 0);
			rc = crest_errctx(src, "the processes came back (pid %d), but crest ended them", (int)r->pid);
		} else if (src < 0) {
			rc = crest_errctx(src, "snapshot %s", c->snapshot);
		} else if (rc < 0 && !criu_restored(dir)) {
			/* Every image was whole, and CRIU failed anyway, with no
			 * tree fully up (one that is must not get a second). Its
			 * --stream restore is less trodden than its restore from
			 * files: a process built with AddressSanitizer (its shadow
			 * mappings) dies in it of SIGSEGV with CRIU 4.1.1, and
			 * comes back from files. It can fail after the tree has
			 * resumed, too (in CI, a copy's log held a line its tree
			 * wrote before CRIU ended it), so the attempt is undone
			 * whole below, and restore_process makes a new one. */
			snprintf(why, whycap, "%s", cmsg);
			again = true;
		}
	}
	uint64_t t2 = time_now_ns();
	r->criu_ns = t2 - t1;
	if (rc == 0 && ncuda) {
		crest_fault_die("restore.cuda");   /* tests only: util/fault.h */
		rc = cuda_in ? pidns_host_pids(r->pid, cuda_in, ncuda, cuda) : 0;
		if (rc == 0)
			rc = gpuckpt_resume(d, cuda, ncuda, gmap, ngmap);
		/* A process whose GPU state did not come back holds its memory
		 * and cannot run: end the tree rather than leave it hanging, and
		 * put its files back below. The snapshot is untouched; the
		 * restore can be tried again. */
		if (rc < 0) {
			tree_kill(r, pids, npids, pidns != 0);
			if (pidns)
				crest_errctx(rc, "the copy came back but its GPU state did not, so crest ended it "
					     "(pid %d); the snapshot is as it was", (int)r->pid);
			else
				crest_errctx(rc, "the processes came back but their GPU state did not, so crest "
					     "ended them (pid %d and %zu more); the snapshot is as it was",
					     (int)pids[0], npids - 1);
		}
	}
	if (rc == 0 && cas_manifest_get_label(m, "shim_pids")) {
		crest_fault_die("restore.shim");   /* tests only: util/fault.h */
		rc = restore_shims(r, m, pidns);
		/* Ranks whose NCCL is not back would wait at their next
		 * collective for ever: ended, like a GPU state not back. */
		if (rc < 0) {
			tree_kill(r, pids, npids, pidns != 0);
			crest_errctx(rc, "the processes came back but their NCCL communicators could not be made "
				     "again, so crest ended them (pid %d); the snapshot is as it was", (int)r->pid);
		}
	}
	if (rc < 0 && ran_criu)
		reap_failed(pids, npids, pidns != 0);
	if (!subreaper)
		prctl(PR_SET_CHILD_SUBREAPER, 0);
	r->gpu_ns = time_now_ns() - t2;
	if (rc < 0 && (nfiles || wd.swapped) && !o->beside) {
		/* The processes are not back: the originals go back in place. */
		char msg[1024];
		crest_errcpy(msg, sizeof(msg));
		int urc = wd_unswap(&wd);
		for (size_t i = nfiles; files && i-- > 0;) {
			const int u = jobfile_unswap(&files[i]);
			urc = urc ? urc : u;
		}
		if (urc < 0)
			crest_errctx(rc, "%s; and then", msg);
		else
			crest_errx(rc, "%s; the job's files were left untouched", msg);
	}
	for (size_t i = 0; rc == 0 && files && o->notes && i < nfiles; i++) {
		const struct staged *f = &files[i];
		if (o->beside)
			fprintf(o->notes, "copied %s as it was at the snapshot (%llu bytes) to %s%s%s\n", f->path,
				(unsigned long long)f->size, o->workdir ? o->workdir : "", o->workdir ? "/" : "", f->base);
		else if (f->now > f->size)
			fprintf(o->notes, "restored %s to its size at the snapshot: %llu bytes (%llu bytes written "
				"after it discarded)\n", f->path, (unsigned long long)f->size,
				(unsigned long long)(f->now - f->size));
		else
			fprintf(o->notes, "restored %s as it was at the snapshot (%llu bytes)\n", f->path,
				(unsigned long long)f->size);
	}
	if (rc == 0 && wdl && o->notes) {
		if (o->beside)
			fprintf(o->notes, "copied --workdir %s as it was at the snapshot (%zu files) to %s, mounted over "
				"%s for the copy\n", wdl, wd.nfiles, wd.copy, wdl);
		else
			fprintf(o->notes, "restored --workdir %s as it was at the snapshot (%zu files; what was "
				"made or changed after it is gone)\n", wdl, wd.nfiles);
	}
	if (rc == 0 && pidns && !o->beside && r->pid > 0)
		copy_record(pidns, r->pid);   /* under the lock still */
	/* After a restore: the originals; after a failure: the staged files. */
	staged_free(files, nfiles, rc < 0);
	wd_free(&wd, rc < 0);
	for (size_t i = 0; i < nwdfds; i++)
		close(wdfds[i]);
	free(wdfds);
	if (thp)
		os_thp_lower_loud();   /* the restore is done, or failed */
	rp_guard_disarm(&guard);
	if (dir[0])
		fs_workdir_release(dir, dir_lock);
	free(pids);
	free(cuda);
	free(cuda_in);
	free(gmap);
	free(inh);
	extfds_free(ext, next);
	r->total_ns = time_now_ns() - t0;
	return again ? RP_AGAIN_FROM_FILES : rc;
}

/*
 * A restore from streamed images that CRIU failed on, every image whole,
 * is made again from image files (restore_attempt). Not by running CRIU
 * once more on what the first attempt set up: CRIU can fail after the
 * tree has resumed, and the tree may then have written to the job's files
 * (a line appended to a log by path, seen in CI) before CRIU ended it, so
 * a second CRIU on the same files would go on from the snapshot over
 * files already past it. The failed attempt undoes itself as any failed
 * restore does (the tree reaped, the job's files put back as they were,
 * a copy's files removed), and the new one stages every file from the
 * snapshot again: as if the job had died just after its restore and were
 * restored once more. The restore lock is held across both.
 */
int restore_process(const struct restore_ctx *c, const struct cas_manifest *m, const struct criu *criu,
		    const struct rp_opts *o, struct rp_result *r)
{
	const uint64_t t0 = time_now_ns();
	int job_lock = -1;
	char why[1024] = "";
	int rc = restore_attempt(c, m, criu, o, r, false, &job_lock, why, sizeof(why));
	if (rc == RP_AGAIN_FROM_FILES) {
		if (o->notes)
			fprintf(o->notes, "criu could not restore from streamed images (%s); restoring from image "
				"files instead\n", why);
		rc = restore_attempt(c, m, criu, o, r, true, &job_lock, why, sizeof(why));
		if (rc < 0) {
			char msg[1024];
			crest_errcpy(msg, sizeof(msg));
			crest_errx(rc, "%s (and from streamed images before: %s)", msg, why);
		}
		assert(rc <= 0);   /* from files, nothing is tried again */
	}
	restore_unlock(job_lock);
	r->total_ns = time_now_ns() - t0;
	return rc;
}
