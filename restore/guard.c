/* guard.c - the job's files given back if crest restore dies; see guard.h. */
#include "restore/guard.h"
#include "gpu/gpuckpt.h"
#include "gpu/shimctl.h"
#include "os/criu.h"
#include "os/pidns.h"
#include "os/proc.h"
#include "os/spawn.h"
#include "os/thp.h"
#include "util/err.h"
#include "util/fault.h"
#include "util/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define GUARD_FD SPAWN_FD          /* the socket to crest */
#define LOCK_FD (SPAWN_FD + 1)     /* DIR's lock */
/* How long the guard waits for a CRIU crest left running. */
#define CRIU_WAIT_S 600
/* The most CUDA processes, tree processes and GPU pairs the guard takes. */
#define MAX_CUDA 65536u
#define MAX_PAIRS 256u
/* How long the guard waits for a tree it ended to be gone. */
#define END_WAIT_MS 10000

struct msg {
	char kind;   /* 'F' file (with its directory), 'C' criu's pid, 'P' a CUDA
		      * process, 'S' a process of the NCCL shim, 'T' a process of
		      * the tree, 'M' a GPU pair of the map, 'D' disarm */
	bool inner;  /* 'P', 'S': pid is inside the job's pid namespace; 'T': the
		      * tree is its own pid namespace (no pid: its init ends it) */
	pid_t pid;
	struct gpuckpt_map map;
	struct rp_guard_file f;
};

int rp_guard_start(struct rp_guard *g, const char *dir, int lock_fd)
{
	g->pid = 0;
	g->fd = -1;
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return crest_errf(-errno, "cannot start the guard of the job's files");
	char *args[] = { "__restore-guard", (char *)dir, NULL };
	const int fds[] = { sv[1], lock_fd };   /* GUARD_FD, LOCK_FD */
	pid_t pid;
	const int rc = spawn_self(args, fds, 2, &pid);
	close(sv[1]);
	if (rc < 0) {
		close(sv[0]);
		return crest_errctx(rc, "cannot start the guard of the job's files");
	}
	g->pid = pid;
	g->fd = sv[0];
	return 0;
}

static int send_msg(struct rp_guard *g, const struct msg *m, int dfd)
{
	struct iovec iov = { (void *)m, sizeof(*m) };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr h = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (dfd >= 0) {
		memset(&u, 0, sizeof(u));
		h.msg_control = u.buf;
		h.msg_controllen = sizeof(u.buf);
		struct cmsghdr *c = CMSG_FIRSTHDR(&h);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &dfd, sizeof(int));
	}
	ssize_t w;
	do
		w = sendmsg(g->fd, &h, MSG_NOSIGNAL);
	while (w < 0 && errno == EINTR);
	return w == (ssize_t)sizeof(*m) ? 0 : -(errno ? errno : EIO);
}

int rp_guard_file(struct rp_guard *g, const struct rp_guard_file *f, int dfd)
{
	if (!g->pid)
		return 0;
	struct msg m = { .kind = 'F', .f = *f };
	const int rc = send_msg(g, &m, dfd);
	return rc < 0 ? crest_errf(rc, "cannot tell the guard of the job's files about %s", f->base) : 0;
}

int rp_guard_cuda(struct rp_guard *g, const pid_t *pids, size_t n, bool inner, const struct gpuckpt_map *map,
		  size_t nmap)
{
	if (!g->pid)
		return 0;
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < n; i++)
		rc = send_msg(g, &(struct msg){ .kind = 'P', .inner = inner, .pid = pids[i] }, -1);
	for (size_t i = 0; rc == 0 && i < nmap; i++)
		rc = send_msg(g, &(struct msg){ .kind = 'M', .map = map[i] }, -1);
	return rc < 0 ? crest_errf(rc, "cannot tell the restore's guard of its %zu CUDA processes", n) : 0;
}

int rp_guard_shim(struct rp_guard *g, const pid_t *pids, size_t n, bool inner)
{
	if (!g->pid)
		return 0;
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < n; i++)
		rc = send_msg(g, &(struct msg){ .kind = 'S', .inner = inner, .pid = pids[i] }, -1);
	return rc < 0 ? crest_errf(rc, "cannot tell the restore's guard of its %zu NCCL shim processes", n) : 0;
}

int rp_guard_tree(struct rp_guard *g, const pid_t *pids, size_t n, bool pidns)
{
	if (!g->pid)
		return 0;
	int rc = pidns ? send_msg(g, &(struct msg){ .kind = 'T', .inner = true }, -1) : 0;
	for (size_t i = 0; rc == 0 && !pidns && i < n; i++)
		rc = send_msg(g, &(struct msg){ .kind = 'T', .pid = pids[i] }, -1);
	return rc < 0 ? crest_errf(rc, "cannot tell the restore's guard of the job's %zu processes", n) : 0;
}

void rp_guard_criu(struct rp_guard *g, pid_t pid)
{
	if (!g->pid)
		return;
	struct msg m = { .kind = 'C', .pid = pid };
	send_msg(g, &m, -1);
}

void rp_guard_disarm(struct rp_guard *g)
{
	if (!g->pid)
		return;
	struct msg m = { .kind = 'D' };
	send_msg(g, &m, -1);
	close(g->fd);
	while (waitpid(g->pid, NULL, 0) < 0 && errno == EINTR)
		;
	g->pid = 0;
	g->fd = -1;
}

/* ---- the guard ---- */

struct rec {
	struct rp_guard_file f;
	int dfd;   /* -1: no such file told */
};

static uint64_t ino_at(int dfd, const char *name)
{
	struct stat sb;
	if (!name[0] || fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0)
		return 0;
	return (uint64_t)sb.st_ino;
}

/* Unlinks name only while it is still the file of that inode. */
static void unlink_ino(int dfd, const char *name, uint64_t ino)
{
	if (ino && ino_at(dfd, name) == ino)
		unlinkat(dfd, name, 0);
}

/* The file as after a restore that failed: the original under its name,
 * the staged copy gone. Returns 1 where something could not be. */
static int put_back(const struct rp_guard_file *f, int dfd)
{
	const uint64_t b = ino_at(dfd, f->base);
	if (!f->existed) {
		unlink_ino(dfd, f->base, f->new_ino);
		unlink_ino(dfd, f->tmp, f->new_ino);
		return 0;
	}
	const char *orig = ino_at(dfd, f->tmp) == f->orig_ino ? f->tmp
			   : f->aside[0] && ino_at(dfd, f->aside) == f->orig_ino ? f->aside : NULL;
	if (orig && (b == f->new_ino || b == 0)) {
		/* Over the staged copy, in one step; a directory (--workdir)
		 * does not replace a full one, and is exchanged with it: the
		 * staged tree is then left under orig's name (a directory is
		 * not unlinked below). */
		if (renameat(dfd, orig, dfd, f->base) < 0 &&
		    ((errno != ENOTEMPTY && errno != EEXIST) ||
		     renameat2(dfd, orig, dfd, f->base, RENAME_EXCHANGE) < 0)) {
			fprintf(stderr, "crest: restore guard: the original of %s is kept as %s beside it: %s\n", f->base,
				orig, strerror(errno));
			return 1;
		}
	}
	unlink_ino(dfd, f->tmp, f->new_ino);
	/* The fallback's placeholder, made empty and never filled. */
	struct stat sb;
	if (f->aside[0] && fstatat(dfd, f->aside, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode) &&
	    sb.st_size == 0 && (uint64_t)sb.st_ino != f->orig_ino)
		unlinkat(dfd, f->aside, 0);
	if (ino_at(dfd, f->base) != f->orig_ino) {
		fprintf(stderr, "crest: restore guard: %s is no longer the file it was; left as it is\n", f->base);
		return 1;
	}
	return 0;
}

/* The file as after a restore that finished: the original, set aside, goes. */
static void keep_restored(const struct rp_guard_file *f, int dfd)
{
	if (!f->existed || ino_at(dfd, f->base) != f->new_ino)
		return;
	unlink_ino(dfd, f->tmp, f->orig_ino);
	unlink_ino(dfd, f->aside, f->orig_ino);
}

static void recs_free(struct rec *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (v[i].dfd >= 0)
			close(v[i].dfd);
	free(v);
}

/* The host pids of n processes of the restored tree: pids as they are,
 * or, when inner, translated from inside its pid namespace (the init's
 * host pid is in dir's CRIU pidfile). malloc'ed into *out. */
static int host_pids(const char *dir, const pid_t *pids, size_t n, bool inner, pid_t **out)
{
	pid_t *host = malloc(n * sizeof(*host));
	if (!host)
		return crest_errf(-ENOMEM, "the restored processes");
	int rc = 0;
	if (inner) {
		pid_t root;
		rc = criu_restored_pid(dir, &root);
		if (rc == 0)
			rc = pidns_host_pids(root, pids, n, host);
	} else {
		memcpy(host, pids, n * sizeof(*host));
	}
	if (rc < 0)
		free(host);
	else
		*out = host;
	return rc;
}

/* Restores and unlocks the GPU state of the restored tree's CUDA
 * processes. */
static int gpu_back(const char *dir, const pid_t *cuda, size_t n, bool inner, const struct gpuckpt_map *map,
		    size_t nmap)
{
	pid_t *host = NULL;
	int rc = host_pids(dir, cuda, n, inner, &host);
	if (rc < 0)
		return rc;
	if ((rc = crest_fault_res("guard.gpu", 0)) < 0)   /* tests only: util/fault.h */
		crest_errx(rc, "the fault hook failed it");
	if (rc == 0)
		rc = gpuckpt_guard_settle(host, n, map, nmap, proc_gone);
	free(host);
	return rc;
}

/* Makes the NCCL communicators of the restored tree's shim processes
 * again. */
static int shim_back(const char *dir, const pid_t *pids, size_t n, bool inner)
{
	pid_t *host = NULL;
	int rc = host_pids(dir, pids, n, inner, &host);
	if (rc < 0)
		return rc;
	rc = shimctl_rebuild_pids(host, n);
	free(host);
	return rc;
}

/* Ends a tree that came back but cannot run, as crest itself would
 * (restore/process.c's tree_kill): in a pid namespace of its own through
 * its init (dir's CRIU pidfile), else each of its processes. Then waits
 * for them to be on their way out (proc_gone: a zombie whose new parent
 * does not reap it counts), so the job's files go back under no process
 * that can still write them. 0, or 1 where some were still running. */
static int tree_end(const char *dir, const pid_t *tree, size_t n, bool ns)
{
	pid_t root = 0;
	if (ns && criu_restored_pid(dir, &root) < 0)
		return 1;
	const pid_t *v = ns ? &root : tree;
	const size_t k = ns ? 1 : n;
	for (size_t i = 0; i < k; i++)
		if (v[i] > 0)
			kill(v[i], SIGKILL);
	for (int t = 0; t < END_WAIT_MS / 10; t++) {
		bool left = false;
		for (size_t i = 0; !left && i < k; i++)
			left = v[i] > 0 && !proc_gone(v[i]);
		if (!left)
			return 0;
		const struct timespec ten_ms = { 0, 10 * 1000 * 1000 };
		nanosleep(&ten_ms, NULL);
	}
	return 1;
}

int rp_guard_main(int argc, char **argv)
{
	spawn_quiet_signals();
	prctl(PR_SET_NAME, "crest-rguard", 0, 0, 0);
	if (argc != 2 || argv[1][0] != '/') {
		fprintf(stderr, "crest: __restore-guard is crest restore's own, not a command\n");
		return 2;
	}
	struct rec *v = NULL;
	size_t n = 0;
	int criu = -1;
	pid_t *cuda = NULL, *tree = NULL, *shim = NULL;
	size_t ncuda = 0, ntree = 0, nshim = 0;
	bool inner = false, tree_ns = false, shim_inner = false;
	struct gpuckpt_map *map = NULL;
	size_t nmap = 0;
	for (;;) {
		struct msg m;
		union {
			char buf[CMSG_SPACE(sizeof(int))];
			struct cmsghdr align;
		} u;
		struct iovec iov = { &m, sizeof(m) };
		struct msghdr h = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
				    .msg_controllen = sizeof(u.buf) };
		const ssize_t r = recvmsg(GUARD_FD, &h, MSG_CMSG_CLOEXEC);
		if (r < 0 && errno == EINTR)
			continue;
		if (r != (ssize_t)sizeof(m))
			break;   /* crest is gone */
		int fd = -1;
		struct cmsghdr *c = CMSG_FIRSTHDR(&h);
		if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
			memcpy(&fd, CMSG_DATA(c), sizeof(int));
		if (m.kind == 'D') {
			/* crest has dealt with the outcome. (Its lock fd's copy
			 * closes with us; crest releases the dir.) */
			if (fd >= 0)
				close(fd);
			if (criu >= 0)
				close(criu);
			recs_free(v, n);
			free(cuda);
			free(tree);
			free(shim);
			free(map);
			return 0;
		}
		if (m.kind == 'P' && m.pid > 0 && ncuda < MAX_CUDA) {
			pid_t *nc = realloc(cuda, (ncuda + 1) * sizeof(*cuda));
			if (nc) {
				cuda = nc;
				cuda[ncuda++] = m.pid;
				inner = m.inner;
			}
		} else if (m.kind == 'S' && m.pid > 0 && nshim < MAX_CUDA) {
			pid_t *ns = realloc(shim, (nshim + 1) * sizeof(*shim));
			if (ns) {
				shim = ns;
				shim[nshim++] = m.pid;
				shim_inner = m.inner;
			}
		} else if (m.kind == 'T' && m.inner) {
			tree_ns = true;
		} else if (m.kind == 'T' && m.pid > 0 && ntree < MAX_CUDA) {
			pid_t *nt = realloc(tree, (ntree + 1) * sizeof(*tree));
			if (nt) {
				tree = nt;
				tree[ntree++] = m.pid;
			}
		} else if (m.kind == 'M' && nmap < MAX_PAIRS) {
			struct gpuckpt_map *nm = realloc(map, (nmap + 1) * sizeof(*map));
			if (nm) {
				map = nm;
				map[nmap++] = m.map;
			}
		}
		if (m.kind == 'C') {
			if (criu >= 0)
				close(criu);
			criu = (int)syscall(SYS_pidfd_open, m.pid, 0);
		} else if (m.kind == 'F' && fd >= 0 && m.f.idx < 1u << 20) {
			if (m.f.idx >= n) {
				struct rec *nv = realloc(v, (m.f.idx + 1) * sizeof(*v));
				if (!nv) {
					close(fd);
					continue;
				}
				v = nv;
				for (; n <= m.f.idx; n++)
					v[n].dfd = -1;
			}
			if (v[m.f.idx].dfd >= 0)
				close(v[m.f.idx].dfd);
			m.f.base[sizeof(m.f.base) - 1] = m.f.tmp[sizeof(m.f.tmp) - 1] = m.f.aside[sizeof(m.f.aside) - 1] = 0;
			v[m.f.idx].f = m.f;
			v[m.f.idx].dfd = fd;
			fd = -1;
		}
		if (fd >= 0)
			close(fd);
	}
	/* crest is gone. The CRIU it ran, if any, is let finish: only then
	 * is it known whether the tree came back. */
	bool waited = true;
	if (criu >= 0) {
		struct pollfd p = { .fd = criu, .events = POLLIN };
		int pr;
		do
			pr = poll(&p, 1, CRIU_WAIT_S * 1000);
		while (pr < 0 && errno == EINTR);
		waited = pr > 0;
	}
	const bool restored = criu_restored(argv[1]);
	/* The tree came back: its CUDA processes' GPU state too, first. One
	 * whose state cannot come back holds its memory and cannot run: it is
	 * ended, and its files go back, as crest does when the driver fails it. */
	char gpu[1200] = "";
	bool ended = false;
	int bad = 0;
	if (waited && restored && ncuda) {
		const int rc = gpu_back(argv[1], cuda, ncuda, inner, map, nmap);
		if (rc < 0) {
			ended = true;
			const int left = tree_end(argv[1], tree, ntree, tree_ns);
			snprintf(gpu, sizeof(gpu), "the processes came back, but their GPU state could not be brought "
				 "back (%s), so the guard ended them%s", crest_errmsg(),
				 left ? " (some still there after 10 s)" : "");
			bad |= left;
		}
	}
	/* Then their NCCL, which the shim ended before the freeze. */
	if (waited && restored && !ended && nshim) {
		const int rc = shim_back(argv[1], shim, nshim, shim_inner);
		if (rc < 0) {
			ended = true;
			const int left = tree_end(argv[1], tree, ntree, tree_ns);
			snprintf(gpu, sizeof(gpu), "the processes came back, but their NCCL communicators could not be "
				 "made again (%s), so the guard ended them%s", crest_errmsg(),
				 left ? " (some still there after 10 s)" : "");
			bad |= left;
		}
	}
	int files_bad = 0;
	bool files_told = false;
	for (size_t i = n; i-- > 0;) {
		if (v[i].dfd < 0)
			continue;
		files_told = true;
		if (!waited)
			continue;   /* CRIU still runs: touch nothing */
		if (restored && !ended)
			keep_restored(&v[i].f, v[i].dfd);
		else
			files_bad |= put_back(&v[i].f, v[i].dfd);
		close(v[i].dfd);
	}
	free(v);
	bad |= files_bad;
	free(cuda);
	free(tree);
	free(shim);
	free(map);
	if (waited)
		fs_workdir_release(argv[1], LOCK_FD);
	const char *files = files_bad ? "the job's files were put back, but not all of them"
				      : "the job's files were put back as they were";
	if (ended)
		fprintf(stderr, "crest: the restore ended without crest (was it killed?): %s%s%s\n", gpu,
			files_told ? "; " : "", files_told ? files : "");
	else
		fprintf(stderr, "crest: the restore ended without crest (was it killed?): %s%s%s\n",
			!waited ? "CRIU still runs; the job's files were left as they are"
			: restored ? "the processes came back on the snapshot's files"
			: files_told ? files : "nothing had been restored",
			waited && restored && ncuda ? "; their GPU state was brought back" : "",
			waited && restored && nshim ? "; their NCCL communicators were made again" : "");
	os_thp_repair_wait();   /* --huge-pages: os/thp.h */
	return bad;
}
