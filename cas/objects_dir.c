/*
 * objects_dir.c - the objects of objects.h as files of the store's
 * directory: kind k's object N is STORE/SUB/NNNNNNNN.EXT (packs/ .pack,
 * meta/ .log), made with O_EXCL, never followed through a symbolic link.
 * A name is made durable by an fsync of its directory, bytes by
 * fdatasync of the file. A write queue is an io_uring: its writes,
 * fdatasyncs and sync_file_range writeback starts run in the kernel's
 * async workers, so its caller never blocks on the disk to start one.
 */
#include "cas/objects.h"
#include "util/err.h"

#include <assert.h>
#include <dirent.h>
#include <limits.h>
#include <liburing.h>
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

/* A read that met the object's end at off. */
static int obj_short(const struct dir_obj *f, uint64_t off)
{
	char path[4096];
	obj_path(f->base.o, f->k, f->num, path, sizeof(path));
	return crest_errx(-EIO, "cannot read %s %s: it ends at byte %llu", kinds[f->k].what, path,
			  (unsigned long long)off);
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

static int dir_readv(struct cas_obj *o, const struct iovec *iov0, int n, uint64_t off)
{
	const struct dir_obj *f = (const struct dir_obj *)o;
	if (n < 1 || n > IOV_MAX)
		return crest_errx(-EINVAL, "reading %d pieces at once", n);
	struct iovec iov[n];
	memcpy(iov, iov0, (size_t)n * sizeof(*iov));
	int i = 0;
	for (;;) {
		while (i < n && !iov[i].iov_len)
			i++;   /* empty pieces, and those read whole */
		if (i == n)
			return 0;
		const ssize_t r = preadv(f->fd, iov + i, n - i, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? obj_err(f, -errno, "read") : obj_short(f, off);
		off += (uint64_t)r;
		/* Step past what was read: whole pieces, then into one. */
		for (size_t adv = (size_t)r; i < n && adv;) {
			const size_t take = adv < iov[i].iov_len ? adv : iov[i].iov_len;
			iov[i].iov_base = (char *)iov[i].iov_base + take;
			iov[i].iov_len -= take;
			adv -= take;
			if (!iov[i].iov_len)
				i++;
		}
	}
}

static int dir_read(struct cas_obj *o, void *p, size_t n, uint64_t off)
{
	const struct iovec one = { p, n };
	return dir_readv(o, &one, 1, off);
}

static void dir_advise(struct cas_obj *o, uint64_t off, uint64_t len, enum cas_obj_advice a)
{
	const struct dir_obj *f = (const struct dir_obj *)o;
	posix_fadvise(f->fd, (off_t)off, (off_t)len, a == CAS_OBJ_WILLNEED ? POSIX_FADV_WILLNEED
									     : POSIX_FADV_DONTNEED);
}

/* All of p[done..n) at off + done: what a short write left. */
static int write_all(int fd, const void *p, size_t n, size_t done, uint64_t off)
{
	while (done < n) {
		const ssize_t r = pwrite(fd, (const char *)p + done, n - done, (off_t)(off + done));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -EIO;
		done += (size_t)r;
	}
	return 0;
}

static int dir_write(struct cas_obj *o, const void *p, size_t n, uint64_t off)
{
	const struct dir_obj *f = (const struct dir_obj *)o;
	const int rc = write_all(f->fd, p, n, 0, off);
	return rc < 0 ? obj_err(f, rc, "write") : 0;
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
	if (lstat(path, &st) < 0)
		return errno == ENOENT ? -ENOENT : crest_errf(-errno, "cannot stat %s %s", kinds[k].what, path);
	if (!S_ISREG(st.st_mode))
		return -ENOENT;   /* as list: only files are objects */
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

/* A request in the ring: the slot's index is its io_uring user data, and
 * a write's slot keeps what a short write needs to be finished. */
struct qslot {
	uint64_t tag;
	const void *p;
	size_t n;
	uint64_t off;
	int fd;
	bool write;
	uint32_t next_free;
};

struct dir_queue {
	struct cas_obj_queue base;
	struct io_uring ring;
	unsigned depth, out;      /* out: requests queued or in flight, not yet taken */
	uint32_t free;            /* first free slot; depth: none */
	struct qslot *slot;
};

static int dir_queue_open(struct cas_objects *o, unsigned depth, struct cas_obj_queue **out)
{
	struct dir_queue *q = calloc(1, sizeof(*q));
	if (q)
		q->slot = calloc(depth, sizeof(*q->slot));
	if (!q || !q->slot || !depth) {
		free(q ? q->slot : NULL);
		free(q);
		return crest_errf(-ENOMEM, "setting up writes to store %s", dirs(o)->dir);
	}
	/* Every request has a place in the submission queue, so a queued one
	 * is never left unsent, and twice that in the completion queue. */
	const int rc = io_uring_queue_init(depth, &q->ring, 0);
	if (rc < 0) {
		free(q->slot);
		free(q);
		return crest_errf(rc, "cannot set up io_uring for %s", dirs(o)->dir);
	}
	for (unsigned i = 0; i < depth; i++)
		q->slot[i].next_free = i + 1;
	q->base.o = o;
	q->depth = depth;
	*out = &q->base;
	return 0;
}

static struct io_uring_sqe *slot_take(struct dir_queue *q, const struct dir_obj *f, uint64_t tag, uint32_t *i)
{
	if (q->free >= q->depth)
		return NULL;
	struct io_uring_sqe *sqe = io_uring_get_sqe(&q->ring);
	assert(sqe);   /* depth slots, depth entries: a free slot has one */
	if (!sqe)
		return NULL;
	*i = q->free;
	struct qslot *s = &q->slot[*i];
	q->free = s->next_free;
	*s = (struct qslot){ .tag = tag, .fd = f->fd };
	io_uring_sqe_set_data64(sqe, *i);
	q->out++;
	return sqe;
}

static int dir_queue_write(struct cas_obj_queue *qb, struct cas_obj *fb, const void *p, size_t n, uint64_t off,
			   uint64_t tag)
{
	struct dir_queue *q = (struct dir_queue *)qb;
	const struct dir_obj *f = (const struct dir_obj *)fb;
	uint32_t i;
	struct io_uring_sqe *sqe = slot_take(q, f, tag, &i);
	if (!sqe)
		return -EAGAIN;
	/* One request writes at most UINT_MAX bytes; write_all does the rest. */
	io_uring_prep_write(sqe, f->fd, p, n < UINT_MAX ? (unsigned)n : UINT_MAX, off);
	q->slot[i].p = p;
	q->slot[i].n = n;
	q->slot[i].off = off;
	q->slot[i].write = true;
	return 0;
}

static int dir_queue_sync(struct cas_obj_queue *qb, struct cas_obj *fb, uint64_t tag)
{
	struct dir_queue *q = (struct dir_queue *)qb;
	uint32_t i;
	struct io_uring_sqe *sqe = slot_take(q, (const struct dir_obj *)fb, tag, &i);
	if (!sqe)
		return -EAGAIN;
	io_uring_prep_fsync(sqe, q->slot[i].fd, IORING_FSYNC_DATASYNC);
	return 0;
}

static int dir_queue_writeback(struct cas_obj_queue *qb, struct cas_obj *fb, uint64_t off, uint64_t len,
			       uint64_t tag)
{
	struct dir_queue *q = (struct dir_queue *)qb;
	uint32_t i;
	struct io_uring_sqe *sqe = slot_take(q, (const struct dir_obj *)fb, tag, &i);
	if (!sqe)
		return -EAGAIN;
	io_uring_prep_sync_file_range(sqe, q->slot[i].fd, len < UINT_MAX ? (unsigned)len : UINT_MAX, off,
				      SYNC_FILE_RANGE_WRITE);
	return 0;
}

static int dir_queue_submit(struct cas_obj_queue *qb, unsigned wait)
{
	struct dir_queue *q = (struct dir_queue *)qb;
	if (wait > q->out)
		wait = q->out;
	const int rc = io_uring_submit_and_wait(&q->ring, wait);
	return rc < 0 ? crest_errf(rc, "submitting writes to store %s", dirs(q->base.o)->dir) : 0;
}

static int dir_queue_wait(struct cas_obj_queue *qb, uint64_t *tag, int *res)
{
	struct dir_queue *q = (struct dir_queue *)qb;
	if (!q->out)
		return -ENOENT;
	struct io_uring_cqe *cqe;
	int rc;
	do
		rc = io_uring_wait_cqe(&q->ring, &cqe);
	while (rc == -EINTR);
	if (rc < 0)
		return crest_errf(rc, "waiting for writes to store %s", dirs(q->base.o)->dir);
	const uint32_t i = (uint32_t)io_uring_cqe_get_data64(cqe);
	int r = cqe->res;
	io_uring_cqe_seen(&q->ring, cqe);
	assert(i < q->depth);
	struct qslot *s = &q->slot[i];
	/* A short write (a signal, a full disk) is finished here, in the
	 * caller's thread: rare, so the simple path is fine. */
	if (s->write && r >= 0)
		r = write_all(s->fd, s->p, s->n, (size_t)r, s->off);
	else if (r > 0)
		r = 0;
	*tag = s->tag;
	*res = r;
	s->next_free = q->free;
	q->free = i;
	q->out--;
	return 0;
}

static void dir_queue_close(struct cas_obj_queue *qb)
{
	struct dir_queue *q = (struct dir_queue *)qb;
	if (!q)
		return;
	/* Nothing may be in flight once the buffers it points at are freed. */
	io_uring_submit(&q->ring);
	uint64_t tag;
	int res;
	while (q->out && dir_queue_wait(qb, &tag, &res) == 0)
		;
	io_uring_queue_exit(&q->ring);
	free(q->slot);
	free(q);
}

/* A blob is the file STORE/NAME, written to STORE/.NAME.tmp and renamed
 * (linked, for excl) over it: a store's FORMAT has been written so from
 * the first format on, and store.c knows the temporary's name. */
static int dir_blob_put(struct cas_objects *o, const char *name, const void *p, size_t n, bool excl)
{
	char tmp[4096], dst[4096];
	snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", dirs(o)->dir, name);
	snprintf(dst, sizeof(dst), "%s/%s", dirs(o)->dir, name);
	const int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return crest_errf(-errno, "cannot create %s", tmp);
	int rc = write_all(fd, p, n, 0, 0);
	if (rc == 0 && fsync(fd) < 0)
		rc = -errno;
	close(fd);
	if (rc < 0) {
		unlink(tmp);
		return crest_errf(rc, "cannot write %s", tmp);
	}
	if (excl) {
		rc = link(tmp, dst) < 0 ? -errno : 0;
		unlink(tmp);
		if (rc == -EEXIST)
			return rc;
		if (rc < 0)
			return crest_errf(rc, "cannot link %s to %s", tmp, dst);
	} else if (rename(tmp, dst) < 0) {
		rc = crest_errf(-errno, "cannot rename %s to %s", tmp, dst);
		unlink(tmp);
		return rc;
	}
	const int dfd = open(dirs(o)->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || fsync(dfd) < 0)
		rc = crest_errf(-errno, "cannot sync the directory %s", dirs(o)->dir);
	if (dfd >= 0)
		close(dfd);
	return rc;
}

static int dir_blob_get(struct cas_objects *o, const char *name, void *p, size_t cap, size_t *n)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", dirs(o)->dir, name);
	const int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ENOENT : crest_errf(-errno, "cannot open %s", path);
	size_t got = 0;
	char extra;
	int rc = 0;
	for (;;) {
		/* One byte past cap tells a blob that is too large. */
		const bool over = got == cap;
		const ssize_t r = over ? read(fd, &extra, 1) : read(fd, (char *)p + got, cap - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			rc = crest_errf(-errno, "cannot read %s", path);
			break;
		}
		if (r == 0)
			break;
		if (over) {
			rc = crest_errx(-EFBIG, "%s holds more than %zu bytes", path, cap);
			break;
		}
		got += (size_t)r;
	}
	close(fd);
	*n = got;
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
	.readv = dir_readv,
	.advise = dir_advise,
	.write = dir_write,
	.size = dir_size,
	.truncate = dir_truncate,
	.sync = dir_sync,
	.close_obj = dir_close_obj,
	.stat = dir_stat,
	.list = dir_list,
	.remove = dir_remove,
	.sync_names = dir_sync_names,
	.blob_put = dir_blob_put,
	.blob_get = dir_blob_get,
	.queue_open = dir_queue_open,
	.queue_close = dir_queue_close,
	.queue_write = dir_queue_write,
	.queue_sync = dir_queue_sync,
	.queue_writeback = dir_queue_writeback,
	.queue_submit = dir_queue_submit,
	.queue_wait = dir_queue_wait,
};
