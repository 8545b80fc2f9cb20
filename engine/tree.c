/* tree.c - a tree of files into a snapshot; see engine.h (engine_put_tree). */
#include "engine/engine.h"
#include "util/err.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

static int64_t stat_mtime_ns(const struct stat *sb)
{
	return (int64_t)sb->st_mtim.tv_sec * 1000000000 + sb->st_mtim.tv_nsec;
}

static int names_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

void engine_links_free(struct engine_links *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i].name);
	free(l->v);
}

/* The stream name of an earlier path of sb's inode, or NULL after noting
 * this one as the first. */
static int put_link_seen(struct engine_links *l, const struct stat *sb, const char *name, const char **first)
{
	*first = NULL;
	for (size_t i = 0; i < l->n; i++)
		if (l->v[i].dev == sb->st_dev && l->v[i].ino == sb->st_ino) {
			*first = l->v[i].name;
			return 0;
		}
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		struct engine_link *nv = realloc(l->v, cap * sizeof(*nv));
		if (!nv)
			return crest_errf(-ENOMEM, "noting the hard links of %s", name);
		l->v = nv;
		l->cap = cap;
	}
	if (!(l->v[l->n].name = strdup(name)))
		return crest_errf(-ENOMEM, "noting the hard links of %s", name);
	l->v[l->n].dev = sb->st_dev;
	l->v[l->n].ino = sb->st_ino;
	l->n++;
	return 0;
}

/* A file whose st_size is not what a read gives: procfs, sysfs and their
 * kind report 0 or 4096 whatever the content, so reading st_size bytes
 * would store nothing (or fail). Any other file of size 0 that still reads
 * bytes is one too. */
static bool size_lies(int fd, const struct stat *sb)
{
	struct statfs fs;
	if (fstatfs(fd, &fs) == 0)
		switch ((unsigned long)fs.f_type) {
		case PROC_SUPER_MAGIC: case SYSFS_MAGIC: case DEBUGFS_MAGIC: case TRACEFS_MAGIC:
		case SECURITYFS_MAGIC: case CGROUP_SUPER_MAGIC: case CGROUP2_SUPER_MAGIC:
			return true;
		}
	char b;
	return sb->st_size == 0 && pread(fd, &b, 1, 0) == 1;
}

#define PSEUDO_MAX (64u << 20)   /* the largest such file read whole */

/* Stores what reading fd to EOF gives, once: the kernel makes these
 * contents as they are read, and a read is what a user of the file sees. */
static int put_read_to_eof(struct engine_stream *st, int fd, const char *path)
{
	size_t len = 0, cap = 1 << 16;
	uint8_t *buf = malloc(cap);
	if (!buf)
		return crest_errf(-ENOMEM, "reading %s", path);
	for (;;) {
		if (len == cap) {
			uint8_t *nb = cap < PSEUDO_MAX ? realloc(buf, cap * 2) : NULL;
			if (!nb) {
				free(buf);
				return cap < PSEUDO_MAX ? crest_errf(-ENOMEM, "reading %s", path)
					: crest_errx(-EFBIG, "%s reports no true size and reads more than %u MiB; "
						     "not stored", path, PSEUDO_MAX >> 20);
			}
			buf = nb;
			cap *= 2;
		}
		ssize_t r = pread(fd, buf + len, cap - len, (off_t)len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int e = -errno;
			free(buf);
			return crest_errf(e, "cannot read %s", path);
		}
		if (r == 0)
			break;
		len += (size_t)r;
	}
	fprintf(stderr, "crest: warning: %s does not report its true size (procfs, sysfs or alike): "
		"stored the %zu bytes a read gave now\n", path, len);
	return engine_stream_add_memory(st, buf, len, free, buf);
}

int engine_put_tree(struct engine_snap *s, const char *path, const char *name, struct engine_links *links)
{
	struct stat sb;
	if (lstat(path, &sb) < 0)
		return crest_errf(-errno, "cannot read %s", path);
	int64_t mt = stat_mtime_ns(&sb);
	if (S_ISLNK(sb.st_mode)) {
		char target[PATH_MAX];
		ssize_t n = readlink(path, target, sizeof(target) - 1);
		if (n < 0)
			return crest_errf(-errno, "cannot read symlink %s", path);
		target[n] = 0;
		return engine_add_entry(s, name, CAS_STREAM_SYMLINK, sb.st_mode & 07777, mt, target);
	}
	if (S_ISREG(sb.st_mode)) {
		const char *first = NULL;
		int rc = sb.st_nlink > 1 ? put_link_seen(links, &sb, name, &first) : 0;
		if (rc < 0)
			return rc;
		struct engine_stream *st;
		if (first) {
			/* No data: the bytes are the first path's. */
			size_t ml = strlen(first) + 6;
			char *meta = malloc(ml);
			if (!meta)
				return crest_errf(-ENOMEM, "adding %s", name);
			snprintf(meta, ml, "link=%s", first);
			rc = engine_stream_open(s, name, CAS_STREAM_FILE, false, &st);
			if (rc == 0) {
				engine_stream_meta(st)->mode = sb.st_mode & 07777;
				engine_stream_meta(st)->mtime_ns = mt;
				rc = cas_stream_set_str(&engine_stream_meta(st)->meta, meta) < 0
					? crest_errf(-ENOMEM, "adding %s", name) : 0;
				engine_stream_close(st);
			}
			free(meta);
			return rc;
		}
		int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0)
			return crest_errf(-errno, "cannot open %s", path);
		rc = engine_stream_open(s, name, CAS_STREAM_FILE, false, &st);
		if (rc == 0) {
			engine_stream_meta(st)->mode = sb.st_mode & 07777;
			engine_stream_meta(st)->mtime_ns = mt;
			if (size_lies(fd, &sb)) {
				rc = put_read_to_eof(st, fd, path);
			} else {
				engine_snapshot_expect(s, (uint64_t)sb.st_size);
				rc = engine_stream_add_fd(st, fd, path);
			}
			engine_stream_close(st);
		}
		close(fd);
		return rc;
	}
	if (!S_ISDIR(sb.st_mode)) {
		/* Even with --quiet: the snapshot lacks it. */
		const char *kind = S_ISCHR(sb.st_mode) ? "a character device" : S_ISBLK(sb.st_mode) ?
			"a block device" : S_ISFIFO(sb.st_mode) ? "a FIFO" : S_ISSOCK(sb.st_mode) ?
			"a socket" : "a special file";
		fprintf(stderr, "crest: warning: skipping %s: %s (crest stores files, directories "
			"and symlinks)\n", path, kind);
		return 0;
	}
	int rc = engine_add_entry(s, name, CAS_STREAM_DIR, sb.st_mode & 07777, mt, NULL);
	if (rc < 0)
		return rc;
	DIR *d = opendir(path);
	if (!d)
		return crest_errf(-errno, "cannot read directory %s", path);
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 32;
			char **nn = realloc(names, cap * sizeof(*nn));
			if (!nn) {
				rc = -ENOMEM;
				break;
			}
			names = nn;
		}
		if (!(names[n] = strdup(e->d_name))) {
			rc = -ENOMEM;
			break;
		}
		n++;
	}
	closedir(d);
	if (rc == 0 && n)
		qsort(names, n, sizeof(*names), names_cmp);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		size_t pl = strlen(path) + strlen(names[i]) + 2, nl = strlen(name) + strlen(names[i]) + 2;
		char *cp = malloc(pl), *cn = malloc(nl);
		if (!cp || !cn) {
			rc = -ENOMEM;
		} else {
			snprintf(cp, pl, "%s/%s", path, names[i]);
			snprintf(cn, nl, "%s/%s", name, names[i]);
			rc = engine_put_tree(s, cp, cn, links);
		}
		free(cp);
		free(cn);
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return rc == -ENOMEM ? crest_errf(rc, "reading %s", path) : rc;
}

