/*
 * objects_dir.c - the objects of objects.h as files of the store's
 * directory: kind k's object N is STORE/SUB/NNNNNNNN.EXT (packs/ .pack,
 * meta/ .log), made with O_EXCL, never followed through a symbolic link.
 * A name is made durable by an fsync of its directory, bytes by
 * fdatasync of the file.
 */
#include "cas/objects.h"
#include "util/err.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct {
	const char *sub, *ext, *what;
} kinds[CAS_OBJ_KINDS] = {
	[CAS_OBJ_PACK] = { "packs", "pack", "pack" },
	[CAS_OBJ_META] = { "meta", "log", "meta log" },
};

struct dir_objects {
	struct cas_objects base;
	char *dir;
};

struct dir_obj {
	struct cas_obj base;
	int fd;
	enum cas_obj_kind k;
	uint32_t num;
};

static const struct dir_objects *dirs(const struct cas_objects *o)
{
	return (const struct dir_objects *)o;
}

static void obj_path(const struct cas_objects *o, enum cas_obj_kind k, uint32_t num, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s/%s/%08u.%s", dirs(o)->dir, kinds[k].sub, num, kinds[k].ext);
}

/* "what failed on which object": the message every failure below leaves. */
static int obj_err(const struct dir_obj *f, int err, const char *what)
{
	char path[4096];
	obj_path(f->base.o, f->k, f->num, path, sizeof(path));
	return crest_errf(err, "cannot %s %s %s", what, kinds[f->k].what, path);
}

static int dir_open(const char *dir, const char *store, struct cas_objects **out)
{
	(void)store;   /* the directory is the store's: paths name it */
	struct dir_objects *d = calloc(1, sizeof(*d));
	if (!d || !(d->dir = strdup(dir))) {
		free(d);
		return crest_errf(-ENOMEM, "opening the objects of store %s", dir);
	}
	d->base.ops = &cas_objects_dir;
	*out = &d->base;
	return 0;
}

static void dir_close(struct cas_objects *o)
{
	struct dir_objects *d = (struct dir_objects *)o;
	free(d->dir);
	free(d);
}

static int obj_new(struct cas_objects *o, enum cas_obj_kind k, uint32_t num, int fd, struct cas_obj **out)
{
	struct dir_obj *f = malloc(sizeof(*f));
	if (!f) {
		close(fd);
		return crest_errf(-ENOMEM, "opening an object of store %s", dirs(o)->dir);
	}
	*f = (struct dir_obj){ .base = { .o = o }, .fd = fd, .k = k, .num = num };
	*out = &f->base;
	return 0;
}

static int dir_create(struct cas_objects *o, enum cas_obj_kind k, uint32_t num, struct cas_obj **out)
{
	char sub[4096], path[4096];
	snprintf(sub, sizeof(sub), "%s/%s", dirs(o)->dir, kinds[k].sub);
	if (mkdir(sub, 0700) < 0 && errno != EEXIST)
		return crest_errf(-errno, "cannot create %s", sub);
	obj_path(o, k, num, path, sizeof(path));
	const int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return crest_errf(-errno, "cannot create %s %s", kinds[k].what, path);
	return obj_new(o, k, num, fd, out);
}

static int dir_open_obj(struct cas_objects *o, enum cas_obj_kind k, uint32_t num, bool write, struct cas_obj **out)
{
	char path[4096];
	obj_path(o, k, num, path, sizeof(path));
	const int fd = open(path, (write ? O_RDWR : O_RDONLY) | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return crest_errf(-errno, "cannot open %s %s", kinds[k].what, path);
	return obj_new(o, k, num, fd, out);
}

static int dir_read(struct cas_obj *o, void *p, size_t n, uint64_t off)
{
	const struct dir_obj *f = (const struct dir_obj *)o;
	size_t got = 0;
	while (got < n) {
		const ssize_t r = pread(f->fd, (char *)p + got, n - got, (off_t)(off + got));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return obj_err(f, r < 0 ? -errno : -EIO, "read");
		got += (size_t)r;
	}
	return 0;
}

static int dir_write(struct cas_obj *o, const void *p, size_t n, uint64_t off)
{
	const struct dir_obj *f = (const struct dir_obj *)o;
	size_t done = 0;
	while (done < n) {
		const ssize_t r = pwrite(f->fd, (const char *)p + done, n - done, (off_t)(off + done));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return obj_err(f, r < 0 ? -errno : -EIO, "write");
		done += (size_t)r;
	}
	return 0;
}

static int dir_size(struct cas_obj *o, uint64_t *size)
{
	const struct dir_obj *f = (const struct dir_obj *)o;
	struct stat st;
	if (fstat(f->fd, &st) < 0)
		return obj_err(f, -errno, "stat");
	*size = (uint64_t)st.st_size;
	return 0;
}

static int dir_truncate(struct cas_obj *o, uint64_t size)
{
	const struct dir_obj *f = (const struct dir_obj *)o;
	return ftruncate(f->fd, (off_t)size) < 0 ? obj_err(f, -errno, "cut") : 0;
}

static int dir_sync(struct cas_obj *o)
{
	const struct dir_obj *f = (const struct dir_obj *)o;
	return fdatasync(f->fd) < 0 ? obj_err(f, -errno, "sync") : 0;
}

static void dir_close_obj(struct cas_obj *o)
{
	struct dir_obj *f = (struct dir_obj *)o;
	close(f->fd);
	free(f);
}

static int dir_stat(struct cas_objects *o, enum cas_obj_kind k, uint32_t num, uint64_t *size)
{
	char path[4096];
	struct stat st;
	obj_path(o, k, num, path, sizeof(path));
	if (stat(path, &st) < 0)
		return errno == ENOENT ? -ENOENT : crest_errf(-errno, "cannot stat %s %s", kinds[k].what, path);
	*size = (uint64_t)st.st_size;
	return 0;
}

static int dir_list(struct cas_objects *o, enum cas_obj_kind k, cas_obj_list_fn cb, void *arg)
{
	char sub[4096];
	snprintf(sub, sizeof(sub), "%s/%s", dirs(o)->dir, kinds[k].sub);
	DIR *d = opendir(sub);
	if (!d)
		return errno == ENOENT ? 0 : crest_errf(-errno, "cannot read %s", sub);
	struct dirent *e;
	int rc = 0;
	while (rc == 0 && (e = readdir(d))) {
		unsigned n;
		char tail[8];
		if (sscanf(e->d_name, "%8u.%7s", &n, tail) != 2 || strcmp(tail, kinds[k].ext))
			continue;
		/* Only files are objects: a directory or a link of the name is not. */
		struct stat st;
		if (e->d_type == DT_REG ||
		    (e->d_type == DT_UNKNOWN && fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		     S_ISREG(st.st_mode)))
			rc = cb(n, arg);
	}
	closedir(d);
	return rc;
}

static int dir_remove(struct cas_objects *o, enum cas_obj_kind k, uint32_t num)
{
	char path[4096];
	obj_path(o, k, num, path, sizeof(path));
	if (unlink(path) == 0)
		return 0;
	return errno == ENOENT ? -ENOENT : crest_errf(-errno, "cannot remove %s %s", kinds[k].what, path);
}

static int dir_sync_names(struct cas_objects *o, enum cas_obj_kind k)
{
	char sub[4096];
	snprintf(sub, sizeof(sub), "%s/%s", dirs(o)->dir, kinds[k].sub);
	const int fd = open(sub, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT)
		return 0;   /* no object of kind k was ever made */
	if (fd < 0)
		return crest_errf(-errno, "cannot open %s to sync it", sub);
	const int rc = fsync(fd) < 0 ? crest_errf(-errno, "cannot sync %s", sub) : 0;
	close(fd);
	return rc;
}

const struct cas_objects_ops cas_objects_dir = {
	.name = "directory",
	.open = dir_open,
	.close = dir_close,
	.name_of = obj_path,
	.create = dir_create,
	.open_obj = dir_open_obj,
	.read = dir_read,
	.write = dir_write,
	.size = dir_size,
	.truncate = dir_truncate,
	.sync = dir_sync,
	.close_obj = dir_close_obj,
	.stat = dir_stat,
	.list = dir_list,
	.remove = dir_remove,
	.sync_names = dir_sync_names,
};
