/* process.c - restore of a checkpointed process tree; see process.h. */
#include "restore/process.h"
#include "capture/proc.h"
#include "util/err.h"
#include "util/fs.h"
#include "util/progress.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int parse_pids(const char *s, pid_t **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	if (!s || !*s)
		return 0;
	size_t cap = 1;
	for (const char *p = s; *p; p++)
		cap += *p == ',';
	*out = calloc(cap, sizeof(pid_t));
	if (!*out)
		return crest_errf(-ENOMEM, "restore");
	for (const char *p = s; *p;) {
		char *end;
		long v = strtol(p, &end, 10);
		if (end == p || v <= 0)
			return crest_errx(-EBADMSG, "the snapshot's pid list '%s' is damaged", s);
		(*out)[(*n)++] = (pid_t)v;
		p = *end == ',' ? end + 1 : end;
	}
	return 0;
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

/* Opens the job file at path (absolute, as the capture read it from
 * /proc, so free of symlinks) for writing, as root, in a directory its
 * user may change: no symlink anywhere on the way is followed, a missing
 * file is created only where nothing is, and an existing one must be a
 * regular file owned by whoever owned it at the snapshot (meta uid=;
 * older snapshots: its directory's owner or root): a symlink, or a hard
 * link to another user's file, is refused, not written.
 * Returns the fd, or a negative code with a message. */
static int jobfile_open(const struct restore_ctx *c, const struct cas_stream *st, const char *path)
{
	char parent[PATH_MAX], uidbuf[16];
	const char *base = fs_split(path, parent, sizeof(parent));
	if (path[0] != '/' || !*base)
		return crest_errx(-EBADMSG, "snapshot %s: job file path '%s' is damaged", c->snapshot, path);
	int root = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (root < 0)
		return crest_errf(-errno, "cannot open /");
	int dfd = fs_openat_beneath(root, parent + 1, O_RDONLY | O_DIRECTORY, 0);
	close(root);
	if (dfd == -ELOOP)
		return crest_errx(dfd, "refusing to put back %s: a directory on its path is now a symlink", path);
	if (dfd < 0)
		return crest_errf(dfd, "cannot open %s to put %s back", parent[0] ? parent : "/", base);
	struct stat ds, fs;
	int fd = openat(dfd, base, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT)
		fd = openat(dfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	int err = errno, rc = 0;
	if (fd < 0)
		rc = err == ELOOP ? crest_errx(-ELOOP, "refusing to put back %s: it is now a symlink", path)
				  : crest_errf(-err, "cannot open %s to put it back", path);
	else if (fstat(fd, &fs) < 0 || fstat(dfd, &ds) < 0)
		rc = crest_errf(-errno, "cannot stat %s", path);
	else if (!S_ISREG(fs.st_mode))
		rc = crest_errx(-EPERM, "refusing to put back %s: it is no longer a regular file", path);
	else if (meta_get(st->meta, "uid", uidbuf, sizeof(uidbuf)) ? fs.st_uid != (uid_t)strtoul(uidbuf, NULL, 10)
								  : fs.st_uid != ds.st_uid && fs.st_uid != geteuid())
		rc = crest_errx(-EPERM, "refusing to put back %s: it now belongs to uid %u, not to the job's "
				"file owner", path, (unsigned)fs.st_uid);
	close(dfd);
	if (rc < 0) {
		if (fd >= 0)
			close(fd);
		return rc;
	}
	return fd;
}

/* Puts a file the job held open back as it was at the snapshot. */
static int jobfile_restore(const struct restore_ctx *c, const struct cas_stream *st, FILE *notes)
{
	char path[PATH_MAX], sz[32];
	if (!meta_get(st->meta, "path", path, sizeof(path)) || !meta_get(st->meta, "size", sz, sizeof(sz)))
		return crest_errx(-EBADMSG, "snapshot %s: job file stream %s is damaged", c->snapshot, st->name);
	uint64_t size = strtoull(sz, NULL, 10);
	int fd = jobfile_open(c, st, path);
	if (fd < 0)
		return fd;
	struct stat sb;
	uint64_t now = fstat(fd, &sb) == 0 ? (uint64_t)sb.st_size : 0;
	/* Cut or extend to the snapshot's size first, then write the kept
	 * prefix over it: a file larger than the capture limit keeps its tail
	 * (for an append-only log, the same bytes it had). Holes in the prefix
	 * were zeros: write them as such. */
	struct restore_ctx quiet = *c;
	quiet.progress = NULL;
	int rc = ftruncate(fd, (off_t)size) < 0 ? crest_errf(-errno, "cannot cut %s back to %llu bytes", path,
							     (unsigned long long)size) : 0;
	uint64_t off = 0;
	static const uint8_t zeros[4096];
	for (uint64_t i = 0; rc == 0 && i < st->nextents; off += st->ext[i].len, i++) {
		for (uint64_t z = 0; st->ext[i].hole && z < st->ext[i].len && rc == 0;) {
			uint64_t n = st->ext[i].len - z < sizeof(zeros) ? st->ext[i].len - z : sizeof(zeros);
			if (pwrite(fd, zeros, n, (off_t)(off + z)) != (ssize_t)n)
				rc = crest_errf(-errno, "cannot write %s", path);
			z += n;
		}
	}
	struct restore_fd_sink sink = { fd, path };
	if (rc == 0)
		rc = restore_stream(&quiet, st, restore_sink_fd, &sink);
	close(fd);
	if (rc == 0 && notes) {
		if (now > size)
			fprintf(notes, "restored %s to its size at the snapshot: %llu bytes (%llu bytes written "
				"after it discarded)\n", path, (unsigned long long)size,
				(unsigned long long)(now - size));
		else
			fprintf(notes, "restored %s as it was at the snapshot (%llu bytes)\n", path,
				(unsigned long long)size);
	}
	return rc;
}

int restore_process(const struct restore_ctx *c, const struct cas_manifest *m, const struct criu *criu,
		    const struct rp_opts *o, struct rp_result *r)
{
	memset(r, 0, sizeof(*r));
	uint64_t t0 = time_now_ns();
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
	if (rc == 0)
		rc = pids_free(pids, npids, o->wait_pids_ms ? o->wait_pids_ms : 5000);
	char dir[PATH_MAX];
	dir[0] = 0;
	if (rc == 0) {
		snprintf(dir, sizeof(dir), "%s/crest-restore-XXXXXX", o->tmpdir ? o->tmpdir : "/dev/shm");
		if (!mkdtemp(dir)) {
			rc = crest_errf(-errno, "cannot create a directory under %s", o->tmpdir ? o->tmpdir : "/dev/shm");
			dir[0] = 0;
		}
	}
	/* Images out of the store: every byte verified before it is written. */
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
		int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd < 0) {
			rc = crest_errf(-errno, "cannot create %s", path);
			break;
		}
		struct restore_ctx sc = *c;
		sc.progress_base = r->bytes;
		rc = restore_stream_to_fd(&sc, st, fd);
		close(fd);
		r->bytes += st->size;
	}
	r->stream_ns = time_now_ns() - t0;
	for (size_t i = 0; rc == 0 && !o->keep_files && i < m->nstreams; i++)
		if (m->streams[i].type == CAS_STREAM_JOBFILE)
			rc = jobfile_restore(c, &m->streams[i], o->notes);
	const char *sj = cas_manifest_get_label(m, "shell_job");
	uint64_t t1 = time_now_ns();
	if (rc == 0) {
		struct criu_restore_opts ro = { .dir = dir, .shell_job = sj && !strcmp(sj, "1"), .pid_out = &r->pid };
		rc = criu_restore(criu, &ro);
	}
	uint64_t t2 = time_now_ns();
	r->criu_ns = t2 - t1;
	if (rc == 0 && ncuda) {
		rc = gpuckpt_resume(d, cuda, ncuda, o->map, o->nmap);
		if (rc < 0)
			crest_errctx(rc, "the processes are back but their GPU state is not");
	}
	r->gpu_ns = time_now_ns() - t2;
	if (dir[0])
		fs_rm_tree(dir);
	free(pids);
	free(cuda);
	r->total_ns = time_now_ns() - t0;
	return rc;
}
