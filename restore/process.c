/* process.c - restore of a checkpointed process tree; see process.h. */
#include "restore/process.h"
#include "capture/gpumap.h"
#include "capture/proc.h"
#include "util/err.h"
#include "util/fs.h"
#include "util/progress.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
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

/* Puts a file the job held open back as it was at the snapshot. */
static int jobfile_restore(const struct restore_ctx *c, const struct cas_stream *st, FILE *notes)
{
	char path[PATH_MAX], sz[32];
	if (!meta_get(st->meta, "path", path, sizeof(path)) || !meta_get(st->meta, "size", sz, sizeof(sz)))
		return crest_errx(-EBADMSG, "snapshot %s: job file stream %s is damaged", c->snapshot, st->name);
	uint64_t size = strtoull(sz, NULL, 10);
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return crest_errf(-errno, "cannot open %s to put it back", path);
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
	struct gpuckpt_map *gmap = NULL;
	size_t ngmap = 0;
	if (rc == 0 && ncuda)
		rc = gpu_plan(d, m, o, &gmap, &ngmap);
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
		rc = gpuckpt_resume(d, cuda, ncuda, gmap, ngmap);
		/* A process whose GPU state did not come back holds its memory
		 * and cannot run: end the tree rather than leave it hanging.
		 * The snapshot is untouched; the restore can be tried again. */
		if (rc < 0) {
			for (size_t i = 0; i < npids; i++)
				kill(pids[i], SIGKILL);
			crest_errctx(rc, "the processes came back but their GPU state did not, so crest ended "
				     "them (pid %d and %zu more); the snapshot is as it was", (int)pids[0], npids - 1);
		}
	}
	r->gpu_ns = time_now_ns() - t2;
	if (dir[0])
		fs_rm_tree(dir);
	free(pids);
	free(cuda);
	free(gmap);
	r->total_ns = time_now_ns() - t0;
	return rc;
}
