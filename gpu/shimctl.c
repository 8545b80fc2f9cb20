/*
 * shimctl.c - requests to the NCCL shims of a job, all processes at once.
 */
#include "gpu/shimctl.h"
#include "gpu/shim.h"
#include "util/err.h"
#include "util/progress.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* The memfd named SHIM_MEMFD_NAME that pid holds, opened O_RDWR: a
 * descriptor, -ENOENT when it holds none or is gone, or -errno. */
static int memfd_open(pid_t pid)
{
	char path[64], lpath[96], link[256];
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return errno == ESRCH ? -ENOENT : -errno;
	int fd = -ENOENT;
	const struct dirent *e;
	while (fd == -ENOENT && (e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(lpath, sizeof(lpath), "/proc/%d/fd/%.16s", (int)pid, e->d_name);
		const ssize_t n = readlink(lpath, link, sizeof(link) - 1);
		if (n <= 0)
			continue;
		link[n] = 0;
		if (strcmp(link, "/memfd:" SHIM_MEMFD_NAME " (deleted)") == 0) {
			fd = open(lpath, O_RDWR | O_CLOEXEC);
			if (fd < 0)
				fd = -errno;
		}
	}
	closedir(d);
	return fd;
}

int shimctl_open(struct shimctl *s, pid_t pid)
{
	const int fd = memfd_open(pid);
	if (fd == -ENOENT)
		return fd;
	if (fd < 0)
		return crest_errf(fd, "cannot open the NCCL shim of pid %d", (int)pid);
	void *p = mmap(NULL, sizeof(struct shim_ctl), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		const int err = -errno;
		close(fd);
		return crest_errf(err, "cannot map the NCCL shim's control block of pid %d", (int)pid);
	}
	const struct shim_ctl *c = p;
	if (c->magic != SHIM_MAGIC || c->version != SHIM_VERSION) {
		munmap(p, sizeof(struct shim_ctl));
		close(fd);
		return crest_errx(-EPROTO, "pid %d runs a NCCL shim of another version (%u; this crest speaks %u): "
				  "start the job with this crest's --cuda-shim", (int)pid,
				  c->magic == SHIM_MAGIC ? c->version : 0, SHIM_VERSION);
	}
	struct shimctl_proc *v = realloc(s->v, (s->n + 1) * sizeof(*v));
	if (!v) {
		munmap(p, sizeof(struct shim_ctl));
		close(fd);
		return crest_errf(-ENOMEM, "shim of pid %d", (int)pid);
	}
	s->v = v;
	s->v[s->n++] = (struct shimctl_proc){ .pid = pid, .fd = fd, .ctl = p };
	return 0;
}

void shimctl_free(struct shimctl *s)
{
	for (size_t i = 0; i < s->n; i++) {
		munmap(s->v[i].ctl, sizeof(struct shim_ctl));
		close(s->v[i].fd);
	}
	free(s->v);
	s->v = NULL;
	s->n = 0;
}

static _Atomic uint32_t *seq(uint32_t *p)
{
	return (_Atomic uint32_t *)p;
}

/* Sends op to every process, then waits for every answer (the shims work
 * at once). 0, or the first failure with its message. */
static int request(struct shimctl *s, uint32_t op, unsigned timeout_ms, const char *what)
{
	for (size_t i = 0; i < s->n; i++) {
		struct shim_ctl *c = s->v[i].ctl;
		c->req_op = op;
		c->req_timeout_ms = timeout_ms;
		atomic_store(seq(&c->req_seq), atomic_load(seq(&c->rep_seq)) + 1);
		syscall(SYS_futex, &c->req_seq, FUTEX_WAKE, 1, NULL, NULL, 0);
	}
	/* The shim bounds its own wait by timeout_ms; a second more for it to
	 * answer, then it is taken for dead (a process stopped, or gone). */
	const uint64_t end = time_now_ns() + ((uint64_t)timeout_ms + 1000) * 1000000ull;
	int rc = 0;
	for (size_t i = 0; i < s->n; i++) {
		struct shim_ctl *c = s->v[i].ctl;
		const uint32_t want = atomic_load(seq(&c->req_seq));
		uint32_t got;
		while ((got = atomic_load(seq(&c->rep_seq))) != want) {
			const uint64_t now = time_now_ns();
			if (now >= end)
				break;
			const uint64_t left = end - now > 20000000ull ? 20000000ull : end - now;
			const struct timespec ts = { 0, (long)left };
			syscall(SYS_futex, &c->rep_seq, FUTEX_WAIT, got, &ts, NULL, 0);
		}
		if (got != want) {
			if (rc == 0)
				rc = crest_errx(-ETIMEDOUT, "the NCCL shim of pid %d did not answer within %u ms when asked "
						"to %s (is the process stopped?)", (int)s->v[i].pid, timeout_ms + 1000,
						what);
		} else if (c->rep_rc < 0 && rc == 0) {
			char msg[sizeof(c->rep_msg) + 1];
			memcpy(msg, c->rep_msg, sizeof(c->rep_msg));
			msg[sizeof(c->rep_msg)] = 0;
			rc = crest_errx(c->rep_rc, "the NCCL shim of pid %d could not %s: %s", (int)s->v[i].pid, what,
					msg[0] ? msg : strerror(-c->rep_rc));
		}
	}
	return rc;
}

/* The communicators of s, by key: every rank seen, and the largest count. */
struct commset {
	uint8_t key[16];
	int nranks, seen;
	uint64_t max;
	size_t owner, owner_slot;   /* the rank 0: process and slot */
	bool has_owner;
};

static struct commset *find(struct commset *cs, size_t n, const uint8_t key[16])
{
	for (size_t i = 0; i < n; i++)
		if (!memcmp(cs[i].key, key, 16))
			return &cs[i];
	return NULL;
}

/* Groups the communicators every process reported; -EOPNOTSUPP for one
 * with ranks outside s. *out is malloc'ed. */
static int gather(struct shimctl *s, struct commset **out, size_t *nout)
{
	size_t cap = 0;
	for (size_t i = 0; i < s->n; i++)
		cap += s->v[i].ctl->ncomm <= SHIM_MAX_COMMS ? s->v[i].ctl->ncomm : SHIM_MAX_COMMS;
	struct commset *cs = calloc(cap ? cap : 1, sizeof(*cs));
	if (!cs)
		return crest_errf(-ENOMEM, "NCCL shim");
	size_t n = 0;
	for (size_t i = 0; i < s->n; i++) {
		const struct shim_ctl *c = s->v[i].ctl;
		const uint32_t nc = c->ncomm <= SHIM_MAX_COMMS ? c->ncomm : SHIM_MAX_COMMS;
		for (uint32_t k = 0; k < nc; k++) {
			const struct shim_comm *sc = &c->comm[k];
			struct commset *e = find(cs, n, sc->key);
			if (!e) {
				e = &cs[n++];
				memcpy(e->key, sc->key, 16);
				e->nranks = sc->nranks;
			}
			e->seen++;
			if (sc->count > e->max)
				e->max = sc->count;
			if (sc->rank == 0) {
				e->owner = i;
				e->owner_slot = k;
				e->has_owner = true;
			}
		}
	}
	for (size_t k = 0; k < n; k++)
		if (cs[k].seen != cs[k].nranks || !cs[k].has_owner) {
			const int nranks = cs[k].nranks, seen = cs[k].seen;
			free(cs);
			return crest_errx(-EOPNOTSUPP, "a NCCL communicator of %d ranks has %d in this job: its other "
					  "ranks run outside the process tree (on another node, or under another "
					  "launcher), and crest can only checkpoint a communicator whole", nranks, seen);
		}
	*out = cs;
	*nout = n;
	return 0;
}

int shimctl_release(struct shimctl *s, unsigned timeout_ms, struct shimctl_stats *st)
{
	const uint64_t t0 = time_now_ns();
	memset(st, 0, sizeof(*st));
	if (!timeout_ms)
		timeout_ms = SHIMCTL_TIMEOUT_MS;
	struct commset *cs = NULL;
	size_t ncs = 0;
	int rc = request(s, SHIM_OP_PAUSE, timeout_ms, "pause the job's NCCL calls");
	uint64_t before = 0;
	for (size_t i = 0; i < s->n; i++)
		for (uint32_t k = 0; k < s->v[i].ctl->ncomm && k < SHIM_MAX_COMMS; k++)
			before += s->v[i].ctl->comm[k].count;
	if (rc == 0)
		rc = gather(s, &cs, &ncs);
	/* The cut: each communicator's count brought up to its largest in
	 * any rank. A group across communicators can overshoot one: then the
	 * targets are raised and the ranks drained again. */
	for (unsigned round = 0; rc == 0; round++) {
		if (round == 8) {
			rc = crest_errx(-ETIMEDOUT, "the job's NCCL ranks did not come to the same count of calls on "
					"each communicator in 8 rounds");
			break;
		}
		st->rounds++;
		for (size_t i = 0; i < s->n; i++) {
			struct shim_ctl *c = s->v[i].ctl;
			for (uint32_t k = 0; k < c->ncomm && k < SHIM_MAX_COMMS; k++)
				c->comm[k].target = find(cs, ncs, c->comm[k].key)->max;
		}
		rc = request(s, SHIM_OP_DRAIN, timeout_ms, "bring the job's NCCL ranks to a consistent cut");
		if (rc != -EAGAIN)
			break;
		free(cs);
		cs = NULL;
		rc = gather(s, &cs, &ncs);
	}
	free(cs);
	uint64_t after = 0;
	for (size_t i = 0; i < s->n; i++)
		for (uint32_t k = 0; k < s->v[i].ctl->ncomm && k < SHIM_MAX_COMMS; k++)
			after += s->v[i].ctl->comm[k].count;
	st->drained = after - before;
	st->ncomm = (unsigned)ncs;
	if (rc == 0)
		rc = request(s, SHIM_OP_RELEASE, timeout_ms, "end the job's NCCL communicators");
	if (rc < 0) {
		/* Given up before any communicator ended: the job runs on as it
		 * was. Past RELEASE (one shim ended some, another failed) only a
		 * rebuild brings it back. */
		char msg[1024];
		crest_errcpy(msg, sizeof(msg));
		bool released = false;
		for (size_t i = 0; i < s->n; i++)
			released |= s->v[i].ctl->state == SHIM_RELEASED;
		const int orc = released ? shimctl_rebuild(s, timeout_ms, NULL)
					 : request(s, SHIM_OP_OPEN, timeout_ms, "let the job's NCCL calls go on");
		/* A shim that did not answer acts on the last request it finds
		 * once its process runs: this OPEN, not the PAUSE before it. */
		if (orc == -ETIMEDOUT && !released)
			crest_errx(rc, "%s; the other ranks' NCCL calls go on, and that process's once it runs", msg);
		else if (orc < 0)
			crest_errctx(orc, "%s; and then", msg);
		else
			crest_errset_str(msg);
	}
	st->ns = time_now_ns() - t0;
	return rc;
}

int shimctl_rebuild(struct shimctl *s, unsigned timeout_ms, uint64_t *ns)
{
	const uint64_t t0 = time_now_ns();
	if (!timeout_ms)
		timeout_ms = SHIMCTL_TIMEOUT_MS;
	struct commset *cs = NULL;
	size_t ncs = 0;
	int rc = request(s, SHIM_OP_IDS, timeout_ms, "make new NCCL unique ids");
	if (rc == 0)
		rc = gather(s, &cs, &ncs);
	for (size_t i = 0; rc == 0 && i < s->n; i++) {
		struct shim_ctl *c = s->v[i].ctl;
		for (uint32_t k = 0; k < c->ncomm && k < SHIM_MAX_COMMS; k++) {
			const struct commset *e = find(cs, ncs, c->comm[k].key);
			memcpy(c->comm[k].newid, s->v[e->owner].ctl->comm[e->owner_slot].newid, SHIM_ID_BYTES);
		}
	}
	free(cs);
	if (rc == 0)
		rc = request(s, SHIM_OP_REBUILD, timeout_ms, "make the job's NCCL communicators again");
	if (rc < 0) {
		/* A shim that could not rebuild is BROKEN with its gate open; one
		 * still released (the ids failed) is told to go so too: its NCCL
		 * calls then fail, and nothing waits for ever. */
		char msg[1024];
		crest_errcpy(msg, sizeof(msg));
		request(s, SHIM_OP_OPEN, timeout_ms, "let the job's NCCL calls fail");
		crest_errset_str(msg);
	}
	if (ns)
		*ns = time_now_ns() - t0;
	return rc;
}

int shimctl_rebuild_pids(const pid_t *pids, size_t n)
{
	struct shimctl s = { 0 };
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		rc = shimctl_open(&s, pids[i]);
		if (rc == -ENOENT)
			rc = crest_errx(rc, "pid %d runs no NCCL shim any more (is it gone?)", (int)pids[i]);
	}
	if (rc == 0)
		rc = shimctl_rebuild(&s, 0, NULL);
	shimctl_free(&s);
	return rc;
}
