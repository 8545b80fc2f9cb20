/* fs.c - file-system helpers; see fs.h. */
#include "util/fs.h"
#include "util/err.h"
#include "util/fault.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

int fs_rm_tree(const char *path)
{
	DIR *d = opendir(path);
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	struct dirent *e;
	char p[PATH_MAX + 256];
	int rc = 0;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(p, sizeof(p), "%s/%s", path, e->d_name);
		struct stat sb;
		int r = lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode) ? fs_rm_tree(p) : (unlink(p) < 0 ? -errno : 0);
		if (r < 0)
			rc = r;
	}
	closedir(d);
	if (rmdir(path) < 0)
		rc = -errno;
	return rc;
}

/* Whether fd (locked) is still the file at path: a sweeper that took the
 * lock first, found it free and removed the set, unlinks the lock file
 * before letting go of it. */
static int still_linked(int fd, const char *path)
{
	struct stat a, b;
	return fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

int fs_workdir_make(const char *parent, const char *prefix, char *dir, unsigned long cap, int *lock_fd)
{
	char lock[PATH_MAX];
	for (int tries = 0; tries < 100; tries++) {
		int n = snprintf(lock, sizeof(lock), "%s/%sXXXXXX.lock", parent, prefix);
		if (n < 0 || (unsigned long)n >= sizeof(lock) || (unsigned long)n - 5 >= cap)
			return crest_errx(-ENAMETOOLONG, "a working directory under %s: path too long", parent);
		int fd = mkostemps(lock, 5, O_CLOEXEC);
		if (fd < 0)
			return crest_errf(-errno, "cannot create a working directory's lock under %s", parent);
		while (flock(fd, LOCK_EX) < 0)
			if (errno != EINTR) {
				int rc = crest_errf(-errno, "cannot lock %s", lock);
				unlink(lock);
				close(fd);
				return rc;
			}
		if (!still_linked(fd, lock)) {   /* swept before we locked it */
			close(fd);
			continue;
		}
		memcpy(dir, lock, (size_t)n - 5);
		dir[n - 5] = 0;
		if (mkdir(dir, 0700) < 0) {
			int rc = crest_errf(-errno, "cannot create %s", dir);
			unlink(lock);
			close(fd);
			dir[0] = 0;
			return rc;
		}
		*lock_fd = fd;
		return 0;
	}
	return crest_errx(-EAGAIN, "cannot create a working directory under %s: its lock kept being "
			  "swept away", parent);
}

/* Removes base and every entry base + ".SUFFIX" in parent except the lock;
 * 0 when all are gone. */
static int workdir_remove(const char *parent, const char *base)
{
	char p[PATH_MAX + 256];
	snprintf(p, sizeof(p), "%s/%s", parent, base);
	int rc = fs_rm_tree(p);
	size_t bl = strlen(base);
	DIR *d = opendir(parent);
	if (!d)
		return -errno;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, base, bl) || e->d_name[bl] != '.' || !strcmp(e->d_name + bl, ".lock"))
			continue;
		snprintf(p, sizeof(p), "%s/%s", parent, e->d_name);
		struct stat sb;
		int r = lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode) ? fs_rm_tree(p) : (unlink(p) < 0 ? -errno : 0);
		if (r < 0 && r != -ENOENT)
			rc = r;
	}
	closedir(d);
	return rc;
}

void fs_workdir_release(const char *dir, int lock_fd)
{
	const char *slash = strrchr(dir, '/');
	if (!slash || lock_fd < 0)
		return;
	char parent[PATH_MAX], lock[PATH_MAX + 8];
	snprintf(parent, sizeof(parent), "%.*s", (int)(slash - dir), dir);
	snprintf(lock, sizeof(lock), "%s.lock", dir);
	/* The lock goes last, and only when all else went: a set left half
	 * removed stays sweepable. */
	if (workdir_remove(parent, slash + 1) == 0)
		unlink(lock);
	close(lock_fd);
}

int fs_workdir_sweep(const char *parent, const char *prefix)
{
	DIR *d = opendir(parent);
	if (!d)
		return -errno;
	/* The names first: removing while reading the same directory would
	 * leave readdir's order undefined. */
	char **locks = NULL;
	size_t n = 0, pl = strlen(prefix);
	struct dirent *e;
	while ((e = readdir(d))) {
		size_t l = strlen(e->d_name);
		if (l <= pl + 5 || strncmp(e->d_name, prefix, pl) || strcmp(e->d_name + l - 5, ".lock"))
			continue;
		char **nl = realloc(locks, (n + 1) * sizeof(*nl));
		if (!nl)
			break;
		locks = nl;
		if (!(locks[n] = strdup(e->d_name)))
			break;
		n++;
	}
	closedir(d);
	int removed = 0;
	for (size_t i = 0; i < n; i++) {
		char lock[PATH_MAX + 256];
		snprintf(lock, sizeof(lock), "%s/%s", parent, locks[i]);
		int fd = open(lock, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0 && still_linked(fd, lock)) {
			locks[i][strlen(locks[i]) - 5] = 0;
			if (workdir_remove(parent, locks[i]) == 0) {
				unlink(lock);
				removed++;
			}
		}
		if (fd >= 0)
			close(fd);
		free(locks[i]);
	}
	free(locks);
	return removed;
}

/* The same as openat2's RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, one
 * component at a time, for kernels before 5.6. */
static int openat_walk(int dirfd, const char *rel, int flags, unsigned mode)
{
	int cur = dirfd;
	const char *p = rel;
	for (;;) {
		const char *e = strchr(p, '/');
		size_t n = e ? (size_t)(e - p) : strlen(p);
		char comp[NAME_MAX + 1];
		if (n > NAME_MAX) {
			if (cur != dirfd)
				close(cur);
			return -ENAMETOOLONG;
		}
		memcpy(comp, p, n);
		comp[n] = 0;
		if (!strcmp(comp, "..")) {
			if (cur != dirfd)
				close(cur);
			return -EXDEV;
		}
		while (e && e[1] == '/')
			e++;
		bool last = !e || !e[1];
		int fd = openat(cur, n ? comp : ".", last ? flags : O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC,
				(mode_t)mode);
		int err = errno;
		struct stat sb;
		/* O_DIRECTORY | O_NOFOLLOW on a symlink says ENOTDIR: say ELOOP,
		 * as openat2 does. */
		if (fd < 0 && err == ENOTDIR && fstatat(cur, comp, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISLNK(sb.st_mode))
			err = ELOOP;
		if (cur != dirfd)
			close(cur);
		if (fd < 0)
			return -err;
		if (last)
			return fd;
		cur = fd;
		p = e + 1;
	}
}

/* Whether openat2 works here: -1 not known yet. */
static atomic_int have_openat2 = -1;

int fs_openat_beneath(int dirfd, const char *rel, int flags, unsigned mode)
{
	flags |= O_NOFOLLOW | O_CLOEXEC;
	if (!*rel)
		rel = ".";
	if (rel[0] == '/')
		return -EXDEV;
	/* The fault site "fs.openat2" (ENOSYS on its first call) lets a test
	 * take the other way on a kernel that has openat2. */
	if (atomic_load(&have_openat2) < 0)
		atomic_store(&have_openat2, crest_fault_res("fs.openat2", 0) != -ENOSYS);
	if (atomic_load(&have_openat2)) {
		/* Without O_NOFOLLOW, RESOLVE_NO_SYMLINKS also refuses a last
		 * component that is a symlink, with ELOOP (O_NOFOLLOW |
		 * O_DIRECTORY would say ENOTDIR). */
		struct open_how how = { .flags = (uint64_t)(flags & ~O_NOFOLLOW),
					.mode = flags & (O_CREAT | __O_TMPFILE) ? mode : 0,
					.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS };
		long fd = syscall(SYS_openat2, dirfd, rel, &how, sizeof(how));
		if (fd >= 0)
			return (int)fd;
		/* EPERM: a seccomp filter that denies the call it does not know */
		if (errno != ENOSYS && errno != EPERM)
			return -errno;
		atomic_store(&have_openat2, 0);
	}
	return openat_walk(dirfd, rel, flags, mode);
}

const char *fs_split(const char *rel, char *parent, unsigned long cap)
{
	const char *slash = strrchr(rel, '/');
	if (!slash) {
		parent[0] = 0;
		return rel;
	}
	snprintf(parent, cap, "%.*s", (int)(slash - rel), rel);
	return slash + 1;
}

/* The rest of the path still to walk lives in one buffer: a link's target
 * replaces the component that named it, ahead of what followed. */
int fs_open_dir_owned(const char *path, int create, unsigned mode, int *created)
{
	if (created)
		*created = 0;
	if (!*path)
		return crest_errx(-ENOENT, "an empty path is no directory");
	char *rem = malloc(2 * PATH_MAX + 2), *tmp = malloc(2 * PATH_MAX + 2);
	if (!rem || !tmp) {
		free(rem);
		free(tmp);
		return crest_errf(-ENOMEM, "opening %s", path);
	}
	if (strlen(path) > PATH_MAX) {
		free(rem);
		free(tmp);
		return crest_errx(-ENAMETOOLONG, "%s: path too long", path);
	}
	strcpy(rem, path);
	int cur = open(path[0] == '/' ? "/" : ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	int rc = cur < 0 ? crest_errf(-errno, "cannot open %s", path[0] == '/' ? "/" : ".") : 0;
	unsigned links = 0;
	char *p = rem;
	while (rc == 0) {
		while (*p == '/')
			p++;
		if (!*p)
			break;
		char *end = strchr(p, '/');
		if (end)
			*end++ = 0;
		else
			end = p + strlen(p);
		const char *comp = p;
		p = end;
		const char *q = p;
		while (*q == '/')
			q++;
		const bool last = !*q;
		if (!strcmp(comp, "."))
			continue;
		int fd = openat(cur, comp, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0 && errno == ENOENT && last && create) {
			if (mkdirat(cur, comp, (mode_t)mode) == 0) {
				if (created)
					*created = 1;
			} else if (errno != EEXIST) {
				rc = crest_errf(-errno, "cannot create %s", path);
				break;
			}
			fd = openat(cur, comp, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		}
		if (fd < 0) {
			rc = crest_errf(-errno, "cannot open %s (at '%s')", path, comp);
			break;
		}
		struct stat sb;
		if (fstat(fd, &sb) < 0) {
			rc = crest_errf(-errno, "cannot open %s (at '%s')", path, comp);
			close(fd);
			break;
		}
		if (S_ISLNK(sb.st_mode)) {
			if (sb.st_uid != 0 && sb.st_uid != geteuid()) {
				rc = crest_errx(-ELOOP, "refusing %s: '%s' on its path is a symlink owned by uid %u, "
						"neither root nor the caller; crest does not follow another user's "
						"symlink (docs/SECURITY.md)", path, comp, (unsigned)sb.st_uid);
				close(fd);
				break;
			}
			char target[PATH_MAX + 1];
			/* "" with an O_PATH fd of the link: that very link. */
			const ssize_t n = readlinkat(fd, "", target, PATH_MAX);
			close(fd);
			if (n <= 0 || ++links > 40) {
				rc = n < 0 ? crest_errf(-errno, "cannot read the symlink '%s' in %s", comp, path)
					   : crest_errx(-ELOOP, "%s: too many symlinks (or an empty one) on the way", path);
				break;
			}
			target[n] = 0;
			if (strlen(p) + (size_t)n + 2 > 2 * PATH_MAX) {
				rc = crest_errx(-ENAMETOOLONG, "%s: path too long through its symlinks", path);
				break;
			}
			const size_t rl = strlen(p);
			memcpy(tmp, target, (size_t)n);
			tmp[n] = '/';
			memcpy(tmp + n + 1, p, rl + 1);
			memcpy(rem, tmp, (size_t)n + rl + 2);
			p = rem;
			if (target[0] == '/') {
				close(cur);
				cur = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
				if (cur < 0)
					rc = crest_errf(-errno, "cannot open /");
			}
			continue;
		}
		if (!S_ISDIR(sb.st_mode)) {
			rc = crest_errx(-ENOTDIR, "%s: '%s' on its path is not a directory", path, comp);
			close(fd);
			break;
		}
		close(cur);
		cur = fd;
	}
	free(rem);
	free(tmp);
	if (rc < 0) {
		if (cur >= 0)
			close(cur);
		return rc;
	}
	const int dfd = openat(cur, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	close(cur);
	return dfd < 0 ? crest_errf(-errno, "cannot open %s", path) : dfd;
}

bool fs_same_path(const char *a, const char *b)
{
	char ra[PATH_MAX], rb[PATH_MAX];
	return realpath(a, ra) && realpath(b, rb) && !strcmp(ra, rb);
}
