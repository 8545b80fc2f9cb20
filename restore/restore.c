/*
 * restore.c - parallel, verified chunk streaming out of the store; see
 * restore.h.
 *
 * Threads take batches of extents from a shared counter, so the reads of
 * neighbouring chunks stay close together on disk while several are in
 * flight. The first error stops every thread; its message wins.
 */
#include "restore/restore.h"
#include "engine/engine.h"
#include "restore/gpu.h"
#include "cas/jobsnap.h"
#include "util/err.h"
#include "util/fs.h"
#include "util/par.h"
#include "util/sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <lz4.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define BATCH 16   /* extents a thread takes at a time: neighbours are read together */
#define FILE_WINDOW (16u << 20)   /* a file's window, at most: one thread's buffer */

const char *const restore_phase_names[RESTORE_PH_N] = { "lookup", "read", "check", "decompress", "copy",
							 "device" };

/* ---- streaming one stream to a sink ---- */

struct stream_job {
	const struct restore_ctx *c;
	const struct cas_stream *st;
	uint64_t *off;           /* off[i]: where extent i starts */
	uint32_t maxlen;
	restore_sink_fn sink;
	void *arg;
};

struct chunk_bufs {
	struct sha256_hasher *h;
	uint8_t *raw, *scratch;
	uint32_t cap;
};

static int bufs_new(uint32_t maxlen, struct chunk_bufs **out)
{
	struct chunk_bufs *b = calloc(1, sizeof(*b));
	if (!b)
		return crest_errf(-ENOMEM, "allocating restore buffers");
	b->cap = maxlen ? maxlen : 1;
	b->raw = malloc(b->cap);
	b->scratch = malloc((size_t)LZ4_compressBound((int)b->cap) + 64);
	int rc = b->raw && b->scratch ? sha256_hasher_new(&b->h) : -ENOMEM;
	if (rc < 0) {
		free(b->raw);
		free(b->scratch);
		free(b);
		return rc == -ENOMEM ? crest_errf(rc, "allocating restore buffers") : rc;
	}
	*out = b;
	return 0;
}

static void bufs_free(void *p)
{
	struct chunk_bufs *b = p;
	if (!b)
		return;
	sha256_hasher_free(b->h);
	free(b->raw);
	free(b->scratch);
	free(b);
}

void restore_phase_add(struct restore_phases *ph, enum restore_phase i, uint64_t ns, uint64_t bytes)
{
	atomic_fetch_add_explicit(&ph->ns[i], ns, memory_order_relaxed);
	atomic_fetch_add_explicit(&ph->bytes[i], bytes, memory_order_relaxed);
	if (ph->event)
		ph->event(ph->event_arg, i, time_now_ns(), ns, bytes);
}

/* Reads and checks one chunk into b->raw. what/off only name it in errors.
 * ph: timers, or NULL. */
static int chunk_fetch(struct cas_store *s, struct chunk_bufs *b, const struct cas_extent *x,
		       const char *snap, const char *stream, uint64_t off, struct restore_phases *ph)
{
	char hex[65];
	struct cas_loc loc;
	struct cas_read_times t = { 0 };
	uint64_t t0 = ph ? time_now_ns() : 0;
	int rc = cas_chunk_lookup(s, x->sha, &loc);
	if (ph) {
		const uint64_t t1 = time_now_ns();
		restore_phase_add(ph, RESTORE_PH_LOOKUP, t1 - t0, 0);
		t0 = t1;
	}
	if (rc == -ENOENT) {
		hex_encode(x->sha, 32, hex);
		return crest_errx(-EBADMSG, "snapshot %s, stream %s, offset %llu: chunk %.16s is missing "
				  "from the store", snap, stream, (unsigned long long)off, hex);
	}
	if (rc == 0 && loc.raw != x->len) {
		hex_encode(x->sha, 32, hex);
		rc = crest_errx(-EBADMSG, "chunk %.16s has %u bytes in the index, %llu in the manifest",
				hex, loc.raw, (unsigned long long)x->len);
	}
	if (rc == 0)
		rc = cas_chunk_read_timed(s, x->sha, &loc, b->raw, b->cap, b->scratch, ph ? &t : NULL);
	uint64_t th = ph ? time_now_ns() : 0;
	uint8_t sum[32];
	if (rc >= 0)
		rc = sha256_hash(b->h, b->raw, x->len, sum);
	if (ph && rc >= 0) {
		restore_phase_add(ph, RESTORE_PH_READ, t.read_ns, CAS_REC_HEADER + (uint64_t)loc.stored);
		restore_phase_add(ph, RESTORE_PH_CHECK, t.check_ns + time_now_ns() - th, x->len);
		restore_phase_add(ph, RESTORE_PH_DECOMP, t.decomp_ns, loc.codec == CAS_CODEC_LZ4 ? x->len : 0);
	}
	if (rc == 0 && memcmp(sum, x->sha, 32)) {
		hex_encode(x->sha, 32, hex);
		rc = crest_errx(-EBADMSG, "chunk %.16s is damaged: its bytes do not hash to its name", hex);
	}
	if (rc < 0)
		return crest_errctx(rc, "snapshot %s, stream %s, offset %llu", snap, stream,
				    (unsigned long long)off);
	return 0;
}

static int stream_tls_new(struct par *p, void **tls)
{
	const struct stream_job *j = p->arg;
	return bufs_new(j->maxlen, (struct chunk_bufs **)tls);
}

static int stream_one(struct par *p, void *tls, size_t i)
{
	const struct stream_job *j = p->arg;
	const struct cas_extent *x = &j->st->ext[i];
	if (x->hole) {
		atomic_fetch_add(&p->bytes, x->len);
		return 0;
	}
	struct chunk_bufs *b = tls;
	struct restore_phases *ph = j->c->phases;
	int rc = chunk_fetch(j->c->store, b, x, j->c->snapshot, j->st->name, j->off[i], ph);
	const uint64_t t0 = ph ? time_now_ns() : 0;
	if (rc == 0)
		rc = j->sink(j->arg, j->off[i], b->raw, (uint32_t)x->len);
	if (ph && rc == 0)
		restore_phase_add(ph, RESTORE_PH_COPY, time_now_ns() - t0, x->len);
	atomic_fetch_add(&p->bytes, x->len);
	return rc;
}

int restore_stream(const struct restore_ctx *c, const struct cas_stream *st, restore_sink_fn sink, void *arg)
{
	if (!st->nextents)
		return 0;
	struct stream_job j = { .c = c, .st = st, .sink = sink, .arg = arg };
	j.off = malloc(st->nextents * sizeof(*j.off));
	if (!j.off)
		return crest_errf(-ENOMEM, "restoring stream %s", st->name);
	uint64_t o = 0;
	for (uint64_t i = 0; i < st->nextents; i++) {
		j.off[i] = o;
		o += st->ext[i].len;
		if (!st->ext[i].hole && st->ext[i].len > j.maxlen)
			j.maxlen = (uint32_t)st->ext[i].len;
	}
	if (j.maxlen > CAS_CHUNK_MAX) {
		free(j.off);
		return crest_errx(-EBADMSG, "snapshot %s, stream %s: a chunk is larger than any crest writes",
				  c->snapshot, st->name);
	}
	struct par p = { .n = st->nextents, .batch = BATCH, .fn = stream_one, .tls_new = stream_tls_new,
			 .tls_free = bufs_free, .arg = &j };
	int rc = par_run(&p, c->threads, c->progress, c->progress_base);
	free(j.off);
	return rc;
}

int restore_sink_fd(void *arg, uint64_t off, const void *data, uint32_t len)
{
	const struct restore_fd_sink *s = arg;
	uint32_t done = 0;
	while (done < len) {
		ssize_t w = pwrite(s->fd, (const uint8_t *)data + done, len - done, (off_t)(off + done));
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return crest_errf(w < 0 ? -errno : -EIO, "cannot write %s", s->what);
		done += (uint32_t)w;
	}
	return 0;
}

int restore_stream_to_fd(const struct restore_ctx *c, const struct cas_stream *st, int fd)
{
	if (ftruncate(fd, (off_t)st->size) < 0)
		return crest_errf(-errno, "cannot size %s to %llu bytes", st->name,
				  (unsigned long long)st->size);
	/* Windows of consecutive chunks, read in long runs (gpu.c) rather
	 * than looked up, read and written one chunk at a time: several
	 * times faster, and every chunk's SHA-256 still checked before the
	 * window is written. Guided windows in steps of the engine's segment
	 * split a large file across the threads. */
	const struct restore_gpu_dst d = { .st = st, .file = true, .fd = fd };
	const struct restore_gpu_opts o = { .buf_bytes = FILE_WINDOW, .win_step = ENGINE_SEGMENT_BYTES };
	return restore_streams_to_device(c, &d, 1, &o);
}

int restore_stream_to_pipe(const struct restore_ctx *c, const struct cas_stream *st, int fd)
{
	/* As for a file, with the windows sent in order. A bigger pipe means
	 * fewer turns between this side and the reader; where the limit
	 * (/proc/sys/fs/pipe-max-size, unless root) refuses, the default does. */
	if (fcntl(fd, F_SETPIPE_SZ, 4 << 20) < 0)
		(void)fcntl(fd, F_SETPIPE_SZ, 1 << 20);
	const struct restore_gpu_dst d = { .st = st, .file = true, .pipe = true, .fd = fd };
	struct restore_gpu_opts o = { .buf_bytes = FILE_WINDOW, .win_step = ENGINE_SEGMENT_BYTES };
	/* For tests (tests/store/pipe.sh): windows smaller than the pipe, where
	 * a thread's buffer and the next thread's send share the pipe. */
	const char *env = getenv("CREST_PIPE_WINDOW");
	const unsigned long long win = env ? strtoull(env, NULL, 10) : 0;
	if (win >= 4096 && win < FILE_WINDOW)
		o.buf_bytes = o.win_step = (size_t)win;
	return restore_streams_to_device(c, &d, 1, &o);
}

struct mem_sink {
	uint8_t *dst;
};

static int mem_sink(void *arg, uint64_t off, const void *data, uint32_t len)
{
	const struct mem_sink *s = arg;
	memcpy(s->dst + off, data, len);
	return 0;
}

int restore_stream_to_memory(const struct restore_ctx *c, const struct cas_stream *st, void *dst,
			     uint64_t cap)
{
	if (cap < st->size)
		return crest_errx(-EINVAL, "stream %s has %llu bytes; the destination holds %llu",
				  st->name, (unsigned long long)st->size, (unsigned long long)cap);
	uint64_t o = 0;
	for (uint64_t i = 0; i < st->nextents; i++) {
		if (st->ext[i].hole)
			memset((uint8_t *)dst + o, 0, st->ext[i].len);
		o += st->ext[i].len;
	}
	struct mem_sink s = { dst };
	return restore_stream(c, st, mem_sink, &s);
}

/* ---- trees ---- */

/* A stream name must stay inside dest: relative, no "." or ".." parts. */
static int name_safe(const char *name)
{
	if (!*name || name[0] == '/')
		return 0;
	for (const char *p = name; *p;) {
		const char *e = strchr(p, '/');
		size_t n = e ? (size_t)(e - p) : strlen(p);
		if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
			return 0;
		p += n;
		if (*p)
			p++;
	}
	return 1;
}

static void ns_times(int64_t ns, struct timespec ts[2])
{
	ts[0].tv_sec = ts[1].tv_sec = (time_t)(ns / 1000000000);
	ts[0].tv_nsec = ts[1].tv_nsec = (long)(ns % 1000000000);
}

static int str_cmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A snapshot that holds the symlink "a" and the entry "a/x" would write x
 * wherever a points: refused before anything is written. symlinks: the
 * snapshot's symlink names, sorted. */
static const char *below_symlink(const char *name, const char **symlinks, size_t n, char *buf, size_t cap)
{
	for (const char *p = strchr(name, '/'); n && p; p = strchr(p + 1, '/')) {
		snprintf(buf, cap, "%.*s", (int)(p - name), name);
		const char *key = buf;
		if (bsearch(&key, symlinks, n, sizeof(*symlinks), str_cmp))
			return buf;
	}
	return NULL;
}

/* The directory that holds name inside dest, opened without following any
 * symlink and without leaving dest; the open one is kept in *cur (its
 * relative path in cur_path) for the next entry, which is usually its
 * sibling. A negative result carries a message. */
/* The directory parent below destfd, made where it is missing (0700, as
 * restore_tree makes directories before their modes are set): a process
 * snapshot names its images criu/NAME without a directory entry for criu.
 * One component at a time, never through a symlink. The fd, or -errno. */
static int mkdirs_beneath(int destfd, const char *parent)
{
	char buf[4096];
	snprintf(buf, sizeof(buf), "%s", parent);
	int fd = fcntl(destfd, F_DUPFD_CLOEXEC, 0);
	char *save = NULL;
	for (char *comp = strtok_r(buf, "/", &save); fd >= 0 && comp; comp = strtok_r(NULL, "/", &save)) {
		if (!strcmp(comp, ".") || !strcmp(comp, "..")) {
			close(fd);
			return -EXDEV;
		}
		if (mkdirat(fd, comp, 0700) < 0 && errno != EEXIST) {
			const int err = -errno;
			close(fd);
			return err;
		}
		const int next = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		const int err = next < 0 ? -errno : 0;
		close(fd);
		if (next < 0)
			return err;
		fd = next;
	}
	return fd < 0 ? -errno : fd;
}

static int parent_fd(int destfd, const char *dest, const char *name, int *cur, char *cur_path, size_t cap,
		     const char **base)
{
	char parent[4096];
	*base = fs_split(name, parent, sizeof(parent));
	if (*cur >= 0 && !strcmp(parent, cur_path))
		return *cur;
	if (*cur >= 0)
		close(*cur);
	*cur = fs_openat_beneath(destfd, parent, O_RDONLY | O_DIRECTORY, 0);
	if (*cur == -ENOENT)
		*cur = mkdirs_beneath(destfd, parent);
	if (*cur >= 0) {
		snprintf(cur_path, cap, "%s", parent);
		return *cur;
	}
	int rc = *cur;
	*cur = -1;
	if (rc == -ELOOP || rc == -EXDEV)
		return crest_errx(rc, "%s/%s: a symlink on the way would take it out of %s; refusing to "
				  "restore through it", dest, name, dest);
	return crest_errf(rc, "cannot open directory %s/%s", dest, parent);
}

/* Stream i, a hard link of an earlier file of the snapshot (FORMAT.md),
 * made from both parents' fds, each resolved inside dest. */
static int tree_link(const struct restore_ctx *c, const struct cas_manifest *m, size_t i, int destfd,
		     const char *dest, int dfd, const char *base)
{
	const struct cas_stream *st = &m->streams[i];
	const char *first = st->meta + 5;
	size_t k = 0;
	while (k < i && strcmp(m->streams[k].name, first))
		k++;
	if (k == i || m->streams[k].type != CAS_STREAM_FILE || *m->streams[k].meta)
		return crest_errx(-EBADMSG, "snapshot %s: %s is a link to '%s', which is not an earlier file of it",
				  c->snapshot, st->name, first);
	char parent[4096];
	const char *fbase = fs_split(first, parent, sizeof(parent));
	const int ffd = fs_openat_beneath(destfd, parent, O_RDONLY | O_DIRECTORY, 0);
	if (ffd < 0)
		return crest_errf(ffd, "cannot open directory %s/%s", dest, parent);
	int rc = linkat(ffd, fbase, dfd, base, 0) < 0 ? crest_errf(-errno, "cannot link %s/%s to %s/%s", dest,
								    st->name, dest, first) : 0;
	close(ffd);
	return rc;
}

/* A file, through a temporary name beside it that nobody can have planted
 * (O_EXCL, O_NOFOLLOW: a symlink there is an error, not a target), short
 * enough that any legal name can be restored, and renamed into place only
 * where nothing is (RENAME_NOREPLACE). */
static int tree_file(const struct restore_ctx *c, const struct cas_stream *st, int dfd, const char *base,
		     const char *dest, uint64_t done)
{
	char tmp[32];
	int fd = -1;
	for (int tries = 0; fd < 0 && tries < 100; tries++) {
		unsigned r = 0;
		if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != sizeof(r))
			r = (unsigned)time_now_ns() ^ ((unsigned)getpid() << 16);
		snprintf(tmp, sizeof(tmp), ".crest-%08x", r);
		fd = openat(dfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0 && errno != EEXIST)
			break;
	}
	if (fd < 0)
		return crest_errf(-errno, "cannot create a temporary file for %s/%s", dest, st->name);
	struct restore_ctx sc = *c;
	sc.progress_base = done;
	int rc = restore_stream_to_fd(&sc, st, fd);
	/* A file's mode is exact, 0000 too; other streams have none. But
	 * owners are not restored: the file is the restorer's, and its
	 * set-user-ID and set-group-ID bits would name the restorer, not the
	 * file's owner at the snapshot. As root that makes a set-ID root
	 * program of bytes any user could have put, so root clears them (as
	 * cp does where it cannot keep the owner). */
	mode_t mode = st->type == CAS_STREAM_FILE || st->mode ? st->mode & 07777 : 0600;
	if (geteuid() == 0)
		mode &= ~(mode_t)(S_ISUID | S_ISGID);
	if (rc == 0 && fchmod(fd, mode) < 0)
		rc = crest_errf(-errno, "cannot set the mode of %s/%s", dest, st->name);
	struct timespec ts[2];
	ns_times(st->mtime_ns, ts);
	if (rc == 0)
		futimens(fd, ts);
	if (close(fd) < 0 && rc == 0)
		rc = crest_errf(-errno, "cannot write %s/%s", dest, st->name);
	if (rc == 0 && renameat2(dfd, tmp, dfd, base, RENAME_NOREPLACE) < 0) {
		/* A file system without RENAME_NOREPLACE: a hard link also
		 * refuses an existing name. */
		if (errno == EINVAL && linkat(dfd, tmp, dfd, base, 0) == 0)
			errno = 0;
		if (errno)
			rc = crest_errf(-errno, "cannot rename a temporary file to %s/%s", dest, st->name);
	}
	unlinkat(dfd, tmp, 0);   /* after a rename: gone already */
	return rc;
}

int restore_tree(const struct restore_ctx *c, const struct cas_manifest *m, const char *dest,
		 uint64_t *bytes_out)
{
	char buf[4096], cur_path[4096] = "";
	const char *base;
	uint64_t done = 0;
	int rc = 0, cur = -1;
	/* A job snapshot's streams name other snapshots: written out as files
	 * they would be empty files, which is nothing the job had. */
	if (cas_jobsnap_is(m))
		return crest_errx(-EINVAL, "snapshot %s is a job snapshot of %zu ranks: get one rank's snapshot "
				  "with --rank R (crest show %s lists them)", c->snapshot, m->nstreams, c->snapshot);
	/* Check everything before touching anything: a bad name, an entry
	 * below one of the snapshot's own symlinks, or an existing target
	 * stops the restore with dest unchanged. */
	const char **symlinks = calloc(m->nstreams ? m->nstreams : 1, sizeof(*symlinks));
	size_t nsym = 0;
	if (!symlinks)
		return crest_errf(-ENOMEM, "restoring snapshot %s", c->snapshot);
	for (size_t i = 0; i < m->nstreams; i++)
		if (m->streams[i].type == CAS_STREAM_SYMLINK)
			symlinks[nsym++] = m->streams[i].name;
	qsort(symlinks, nsym, sizeof(*symlinks), str_cmp);
	for (size_t i = 0; rc == 0 && i < m->nstreams; i++) {
		const char *name = m->streams[i].name, *link;
		if (!name_safe(name))
			rc = crest_errx(-EBADMSG, "snapshot %s holds the name '%s', which would leave %s; "
					"refusing to restore it", c->snapshot, name, dest);
		else if ((link = below_symlink(name, symlinks, nsym, buf, sizeof(buf))))
			rc = crest_errx(-EBADMSG, "snapshot %s holds '%s' below its own symlink '%s', which "
					"would take it out of %s; refusing to restore it", c->snapshot, name, link,
					dest);
	}
	free(symlinks);
	if (rc < 0)
		return rc;
	/* dest itself is the caller's to name, but the way to it follows
	 * only root's and the caller's symlinks (fs_open_dir_owned): as
	 * root, a `dest` another user made a link to a root-only directory
	 * would otherwise put root's files there. Below it nothing is
	 * followed. */
	int destfd = fs_open_dir_owned(dest, 0, 0, NULL);
	if (destfd < 0 && destfd != -ENOENT)
		return destfd;
	for (size_t i = 0; destfd >= 0 && i < m->nstreams; i++) {
		const char *name = m->streams[i].name;
		char parent[4096];
		base = fs_split(name, parent, sizeof(parent));
		int pfd = fs_openat_beneath(destfd, parent, O_RDONLY | O_DIRECTORY, 0);
		struct stat sb;
		if (pfd == -ENOENT)
			continue;   /* a directory the restore creates */
		if (pfd < 0) {
			rc = parent_fd(destfd, dest, name, &cur, cur_path, sizeof(cur_path), &base);
			break;
		}
		int there = fstatat(pfd, base, &sb, AT_SYMLINK_NOFOLLOW) == 0;
		close(pfd);
		if (there) {
			rc = crest_errx(-EEXIST, "%s/%s already exists; crest get does not overwrite", dest, name);
			break;
		}
	}
	if (rc < 0) {
		close(destfd);
		return rc;
	}
	if (destfd < 0) {
		crest_errset_str("");   /* -ENOENT above: made now */
		destfd = fs_open_dir_owned(dest, 1, 0700, NULL);
		if (destfd < 0)
			return destfd;
	}
	/* One reader for every file: a tree of many small files would
	 * otherwise list and open the packs once per file. */
	struct restore_ctx tc = *c;
	const bool own_reader = !tc.reader;
	if (own_reader) {
		rc = cas_reader_open(c->store, &tc.reader);
		if (rc < 0) {
			close(destfd);
			return rc;
		}
	}
	c = &tc;
	/* Every entry is made relative to its parent's fd, resolved again
	 * inside dest: whoever else can write in dest may rename things
	 * meanwhile, but cannot make root write outside it. */
	for (size_t i = 0; rc == 0 && i < m->nstreams; i++) {
		const struct cas_stream *st = &m->streams[i];
		int dfd = parent_fd(destfd, dest, st->name, &cur, cur_path, sizeof(cur_path), &base);
		if (dfd < 0) {
			rc = dfd;
			break;
		}
		struct timespec ts[2];
		ns_times(st->mtime_ns, ts);
		if (st->type == CAS_STREAM_DIR) {
			if (mkdirat(dfd, base, 0700) < 0)
				rc = crest_errf(-errno, "cannot create directory %s/%s", dest, st->name);
		} else if (st->type == CAS_STREAM_SYMLINK) {
			if (symlinkat(st->target, dfd, base) < 0)
				rc = crest_errf(-errno, "cannot create symlink %s/%s", dest, st->name);
			else
				utimensat(dfd, base, ts, AT_SYMLINK_NOFOLLOW);
		} else if (st->type == CAS_STREAM_FILE && !strncmp(st->meta, "link=", 5)) {
			rc = tree_link(c, m, i, destfd, dest, dfd, base);
		} else {
			/* Files, and every other stream (regions, images) as a file. */
			rc = tree_file(c, st, dfd, base, dest, done);
			done += st->size;
		}
	}
	if (cur >= 0)
		close(cur);
	/* Directory modes and times last, deepest first: a read-only directory
	 * must not stop its own children being written. */
	for (size_t i = m->nstreams; rc == 0 && i-- > 0;) {
		const struct cas_stream *st = &m->streams[i];
		if (st->type != CAS_STREAM_DIR)
			continue;
		int fd = fs_openat_beneath(destfd, st->name, O_RDONLY | O_DIRECTORY, 0);
		if (fd < 0)
			continue;   /* renamed away meanwhile by whoever owns dest */
		struct timespec ts[2];
		ns_times(st->mtime_ns, ts);
		fchmod(fd, st->mode & 07777);
		futimens(fd, ts);
		close(fd);
	}
	close(destfd);
	if (own_reader)
		cas_reader_close(tc.reader);
	if (rc == 0 && bytes_out)
		*bytes_out = done;
	return rc;
}

/* ---- verify ---- */

static size_t verify_unloaded(const struct verify_result *r)
{
	size_t n = 0;
	for (size_t k = 0; k < r->nsnaps; k++)
		n += r->snaps[k].error != NULL;
	return n;
}

/* One use of a chunk: by stream st of snapshot k, at off. */
struct vitem {
	uint8_t sha[32];
	uint64_t len, off;
	uint32_t k, st;
};

struct verify_job {
	struct cas_store *s;
	struct vitem *items;
	size_t *first;               /* per distinct chunk: its first use in items */
	uint8_t *bad;                /* per distinct chunk */
	char (*names)[13];           /* snapshot ids, short, for messages */
	struct verify_snap *snaps;
	uint32_t maxlen;
	atomic_uint_fast64_t bad_n;
};

static int vitem_cmp(const void *a, const void *b)
{
	return memcmp(((const struct vitem *)a)->sha, ((const struct vitem *)b)->sha, 32);
}

static int verify_tls_new(struct par *p, void **tls)
{
	const struct verify_job *j = p->arg;
	return bufs_new(j->maxlen, (struct chunk_bufs **)tls);
}

static int verify_one(struct par *p, void *tls, size_t i)
{
	struct verify_job *j = p->arg;
	const struct vitem *v = &j->items[j->first[i]];
	struct cas_extent x = { .len = v->len };
	memcpy(x.sha, v->sha, 32);
	int rc = chunk_fetch(j->s, tls, &x, j->names[v->k], j->snaps[v->k].m->streams[v->st].name, v->off,
			     NULL);
	atomic_fetch_add(&p->bytes, v->len);
	if (rc == -ENOMEM)
		return rc;
	if (rc < 0) {
		char hex[65];
		hex_encode(v->sha, 32, hex);
		fprintf(stderr, "casctl: bad chunk %s: %s\n", hex, crest_errmsg());
		j->bad[i] = 1;
		atomic_fetch_add(&j->bad_n, 1);
	}
	return 0;
}

/* Counts one use of a bad chunk against its snapshot and stream. Uses come
 * sorted by chunk, so a chunk is listed once per stream however often it
 * repeats there. */
static int loss_add(struct verify_snap *vs, const struct vitem *v)
{
	const char *name = vs->m->streams[v->st].name;
	struct verify_loss *l = NULL;
	for (size_t i = 0; i < vs->nloss && !l; i++)
		if (vs->loss[i].stream_index == v->st)
			l = &vs->loss[i];
	if (!l) {
		struct verify_loss *nl = realloc(vs->loss, (vs->nloss + 1) * sizeof(*nl));
		if (!nl)
			return -ENOMEM;
		vs->loss = nl;
		l = &vs->loss[vs->nloss++];
		memset(l, 0, sizeof(*l));
		l->stream = name;
		l->stream_index = v->st;
	}
	l->chunks++;
	l->bytes += v->len;
	vs->bad_chunks++;
	vs->bad_bytes += v->len;
	if (!l->nshas || memcmp(l->shas[l->nshas - 1], v->sha, 32)) {
		uint8_t (*ns)[32] = realloc(l->shas, (l->nshas + 1) * 32);
		if (!ns)
			return -ENOMEM;
		l->shas = ns;
		memcpy(l->shas[l->nshas++], v->sha, 32);
	}
	return 0;
}

int restore_verify(struct cas_store *s, const uint8_t (*ids)[32], size_t nids, unsigned threads,
		   bool quiet, struct verify_result *r)
{
	memset(r, 0, sizeof(*r));
	r->snaps = calloc(nids ? nids : 1, sizeof(*r->snaps));
	r->nsnaps = r->snaps ? nids : 0;
	char (*names)[13] = calloc(nids ? nids : 1, 13);
	struct vitem *items = NULL;
	size_t n = 0, cap = 0;
	int rc = r->snaps && names ? 0 : crest_errf(-ENOMEM, "verifying");
	uint32_t maxlen = 0;
	/* Every snapshot whose manifest loads contributes its chunks; one that
	 * does not (manifest or extent-list piece damaged or missing) is
	 * reported as such, and the others are still checked. */
	for (size_t k = 0; rc == 0 && k < nids; k++) {
		struct verify_snap *vs = &r->snaps[k];
		char hex[65];
		hex_encode(ids[k], 32, hex);
		snprintf(names[k], 13, "%.12s", hex);
		memcpy(vs->id, ids[k], 32);
		crest_errset_str("");
		int lrc = cas_manifest_load(s, ids[k], &vs->m);
		if (lrc == -ENOMEM) {
			rc = lrc;
			break;
		}
		if (lrc < 0) {
			vs->m = NULL;
			vs->error = strdup(crest_errmsg()[0] ? crest_errmsg() : "its manifest cannot be loaded");
			if (!vs->error)
				rc = crest_errf(-ENOMEM, "verifying");
			continue;
		}
		crest_errset_str("");
		for (uint32_t i = 0; rc == 0 && i < vs->m->nstreams; i++) {
			const struct cas_stream *st = &vs->m->streams[i];
			uint64_t off = 0;
			for (uint64_t e = 0; e < st->nextents; off += st->ext[e].len, e++) {
				if (st->ext[e].hole)
					continue;
				if (n == cap) {
					cap = cap ? cap * 2 : 4096;
					struct vitem *ni = realloc(items, cap * sizeof(*ni));
					if (!ni) {
						rc = crest_errf(-ENOMEM, "verifying");
						break;
					}
					items = ni;
				}
				struct vitem *v = &items[n++];
				memcpy(v->sha, st->ext[e].sha, 32);
				v->len = st->ext[e].len;
				v->off = off;
				v->k = (uint32_t)k;
				v->st = i;
				if (v->len > maxlen)
					maxlen = (uint32_t)v->len;
			}
		}
	}
	if (rc == 0 && maxlen > CAS_CHUNK_MAX)
		rc = crest_errx(-EBADMSG, "a manifest names a chunk larger than any crest writes");
	size_t uniq = 0;
	size_t *first = NULL;
	uint8_t *bad = NULL;
	if (rc == 0 && n) {
		qsort(items, n, sizeof(*items), vitem_cmp);
		first = malloc(n * sizeof(*first));
		bad = calloc(n, 1);
		if (!first || !bad)
			rc = crest_errf(-ENOMEM, "verifying");
		for (size_t i = 0; rc == 0 && i < n; i++)
			if (!i || memcmp(items[i - 1].sha, items[i].sha, 32))
				first[uniq++] = i;
	}
	struct verify_job j = { .s = s, .items = items, .first = first, .bad = bad, .names = names,
				.snaps = r->snaps, .maxlen = maxlen };
	if (rc == 0 && uniq) {
		struct progress prog;
		uint64_t total = 0;
		for (size_t i = 0; i < uniq; i++)
			total += items[first[i]].len;
		progress_begin(&prog, "verify", total, quiet);
		struct par p = { .n = uniq, .batch = BATCH, .fn = verify_one, .tls_new = verify_tls_new,
				 .tls_free = bufs_free, .arg = &j };
		rc = par_run(&p, threads, &prog, 0);
		progress_end(&prog);
		r->bytes = atomic_load(&p.bytes);
	}
	/* A bad chunk is lost to every snapshot, and stream, that uses it. */
	for (size_t u = 0; rc == 0 && u < uniq; u++) {
		if (!bad[u])
			continue;
		size_t end = u + 1 < uniq ? first[u + 1] : n;
		for (size_t i = first[u]; rc == 0 && i < end; i++)
			if (loss_add(&r->snaps[items[i].k], &items[i]) < 0)
				rc = crest_errf(-ENOMEM, "verifying");
	}
	r->chunks = uniq;
	r->bad = atomic_load(&j.bad_n);
	for (size_t k = 0; k < r->nsnaps; k++)
		if (r->snaps[k].error || r->snaps[k].nloss)
			r->damaged++;
	free(names);
	free(items);
	free(first);
	free(bad);
	if (rc == 0 && r->damaged)
		rc = crest_errx(-EBADMSG, "%zu of %zu snapshots are damaged (%llu of %zu chunks bad, "
				"%zu manifests or extent lists unreadable)", r->damaged, r->nsnaps,
				(unsigned long long)r->bad, uniq, verify_unloaded(r));
	return rc;
}

void restore_verify_free(struct verify_result *r)
{
	for (size_t k = 0; k < r->nsnaps; k++) {
		struct verify_snap *vs = &r->snaps[k];
		for (size_t i = 0; i < vs->nloss; i++)
			free(vs->loss[i].shas);
		free(vs->loss);
		free(vs->error);
		cas_manifest_free(vs->m);
	}
	free(r->snaps);
	memset(r, 0, sizeof(*r));
}
