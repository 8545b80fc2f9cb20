/*
 * transparent.c - checkpoint of an unmodified process tree; see
 * transparent.h.
 *
 * Why the job files are copied from criu's post-dump hook: that is the one
 * moment when the tree is frozen and criu has recorded the sizes it will
 * check on restore, so the copy matches the memory image exactly. The hook
 * is crest itself (`crest __criu-hook`), run by criu through a tiny sh script; it only
 * reads the listed files and writes into the capture's tmpfs directory.
 */
#include "capture/transparent.h"
#include "gpu/shim.h"
#include "cas/history.h"
#include "gpu/gpuckpt.h"
#include "gpu/gpumap.h"
#include "os/pidns.h"
#include "os/sock.h"
#include "os/thp.h"
#include "os/uring.h"
#include "util/err.h"
#include "util/fault.h"
#include "util/fs.h"
#include "util/progress.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static bool held_before(const struct tp_capture *c, pid_t p)
{
	for (size_t i = 0; i < c->nheld; i++)
		if (c->held[i] == p)
			return true;
	return false;
}

/* Sends sig to every process of the tree as it is now. A stopped tree
 * cannot fork, so a fresh listing is exact; the listing taken before the
 * freeze is the fallback if the root itself is gone. A SIGCONT skips the
 * processes that were stopped before the freeze: their stop is the job's
 * (job control, a scheduler's SIGSTOP), not CRIU's, and stays. */
static void signal_tree(struct tp_capture *c, int sig)
{
	struct proc_tree now;
	const struct proc_tree *t = proc_tree_get(c->tree.pids[0], &now) == 0 ? &now : &c->tree;
	crest_errset_str("");
	for (size_t i = 0; i < t->n; i++)
		if (sig != SIGCONT || !held_before(c, t->pids[i]))
			kill(t->pids[i], sig);
	if (t == &now)
		proc_tree_free(&now);
}

/* For a capture taken with --kill, once its snapshot is committed: ends
 * the stopped tree (SIGKILL to each process of it) and waits a moment for
 * it to be gone, so that a restore can have its pids. */
static int tp_capture_kill(struct tp_capture *c)
{
	if (!c->stopped)
		return 0;
	c->stopped = false;
	c->shim_released = false;   /* nothing left to make NCCL again for */
	signal_tree(c, SIGKILL);
	tp_guard_disarm(&c->guard);
	/* Gone or a zombie: its parent reaps it; crest restore waits for that. */
	const uint64_t deadline = time_now_ns() + 5000000000ull;
	for (size_t i = 0; i < c->tree.n; i++) {
		char st;
		while ((st = proc_state(c->tree.pids[i])) && st != 'Z' && st != 'X') {
			if (time_now_ns() >= deadline)
				return crest_errx(-ETIMEDOUT, "pid %d did not end within 5 s of SIGKILL (--kill)",
						  (int)c->tree.pids[i]);
			struct timespec ts = { 0, 10 * 1000 * 1000 };
			nanosleep(&ts, NULL);
		}
	}
	return 0;
}

/* For a capture taken with --kill whose snapshot was not stored: lets the
 * stopped tree run on as if there had been no --kill (SIGCONT, then the
 * driver's restore + unlock for CUDA processes). */
static int tp_capture_resume(struct tp_capture *c)
{
	if (!c->stopped)
		return 0;
	c->stopped = false;
	signal_tree(c, SIGCONT);
	/* The driver works on a thread inside each process: they run first. */
	int rc = c->ncuda ? gpuckpt_resume(c->drv, c->cuda, c->ncuda, NULL, 0) : 0;
	if (rc == 0 && c->shim_released) {
		c->shim_released = false;
		rc = shimctl_rebuild(&c->shim, 0, &c->shim_rebuild_ns);
		if (rc < 0) {
			c->stranded_nccl = true;
			rc = crest_errctx(rc, "pid %d's NCCL communicators could not be made again",
					  (int)c->tree.pids[0]);
		}
	}
	tp_guard_disarm(&c->guard);
	if (rc < 0)
		return c->stranded_nccl ? rc : crest_errctx(rc, "pid %d's GPU state could not be brought back",
							     (int)c->tree.pids[0]);
	return 0;
}

/* For a job the driver could not give back (c->stranded): keeps the
 * images where they are, under a name no sweep removes, and ends the
 * tree. The kept directory's path goes to kept ("" if the rename
 * failed: the images then go with tp_capture_free). */
static void tp_capture_strand(struct tp_capture *c, bool keep, char *kept, size_t cap)
{
	kept[0] = 0;
	const char *base = strrchr(c->dir, '/');
	if (keep && base && !strncmp(base + 1, "crest-ckpt-", 11)) {
		char to[PATH_MAX + 16], fto[PATH_MAX + 32];
		snprintf(to, sizeof(to), "%.*s/crest-kept-%s", (int)(base - c->dir), c->dir, base + 12);
		snprintf(fto, sizeof(fto), "%s.files", to);
		if (rename(c->dir, to) == 0) {
			snprintf(kept, cap, "%s", to);
			rename(c->files_dir, fto);
		}
	}
	/* Stopped first, so that no process of it forks past the listing
	 * that tp_capture_kill's SIGKILLs go by. */
	c->stopped = true;   /* tp_capture_kill ends only a tree it holds */
	signal_tree(c, SIGSTOP);
	tp_capture_kill(c);
}

/* The huge page setting put back, once the job runs again (or is left
 * stopped by --kill): what cannot be put back is said loudly, since other
 * processes of the machine see it. */
static void thp_lower(struct tp_capture *c)
{
	if (!c->thp)
		return;
	c->thp = false;
	os_thp_lower_loud();
}

/* Removes the images and frees c. A tree still stopped is resumed first:
 * the job is never left stopped, nor ended without a stored snapshot. */
static void tp_capture_free(struct tp_capture *c)
{
	if (c->stream) {
		char msg[1024];
		crest_errcpy(msg, sizeof(msg));
		imgstream_finish(c->stream, NULL);   /* CRIU has exited, or never ran */
		c->stream = NULL;
		crest_errset_str(msg);
	}
	if (c->stopped) {
		char msg[1024];
		crest_errcpy(msg, sizeof(msg));
		tp_capture_resume(c);
		crest_errset_str(msg);
	}
	/* Given up after the release (a lock or a dump that failed): the
	 * job runs on, and its NCCL with it. */
	if (c->shim_released) {
		char msg[1024];
		crest_errcpy(msg, sizeof(msg));
		c->shim_released = false;
		if (shimctl_rebuild(&c->shim, 0, NULL) < 0)
			fprintf(stderr, "crest: pid %d runs on, but its NCCL communicators could not be made again "
				"(%s): its NCCL calls now fail\n", (int)c->tree.pids[0], crest_errmsg());
		crest_errset_str(msg);
	}
	thp_lower(c);
	tp_guard_disarm(&c->guard);
	shimctl_free(&c->shim);
	free(c->shim_inner);
	if (c->dir[0] && c->locked)
		fs_workdir_release(c->dir, c->lock_fd);   /* files_dir too: a dir.SUFFIX */
	else if (c->files_dir[0])
		fs_rm_tree(c->files_dir);
	proc_tree_free(&c->tree);
	proc_files_free(&c->files);
	proc_extfds_free(&c->ext);
	free(c->cuda);
	free(c->cuda_inner);
	free(c->tcp_ports);
	free(c->gpus);
	free(c->held);
	memset(c, 0, sizeof(*c));
}

/* The pids of the processes that run the shim, malloc'ed; NULL when
 * none (or out of memory). */
static pid_t *shim_pids(const struct tp_capture *c)
{
	pid_t *p = c->shim.n ? calloc(c->shim.n, sizeof(pid_t)) : NULL;
	for (size_t i = 0; p && i < c->shim.n; i++)
		p[i] = c->shim.v[i].pid;
	return p;
}

/* The GPUs the job saw, for a restore onto others (gpumap.h): those its
 * first CUDA process was allowed (CUDA_VISIBLE_DEVICES), else all. */
static int record_gpus(const struct cudrv *d, struct tp_capture *c)
{
	struct gpu_info *host = NULL, *seen = NULL;
	size_t nhost = 0, nseen = 0;
	int rc = gpumap_host(d, &host, &nhost);
	if (rc == 0)
		rc = gpumap_seen(c->cuda[0], host, nhost, &seen, &nseen);
	if (rc == 0)   /* while the job still holds its device memory */
		gpumap_used(c->cuda, c->ncuda, seen, nseen);
	if (rc == 0)
		rc = gpumap_format(seen, nseen, &c->gpus);
	free(host);
	free(seen);
	return rc;
}

/* A process with CUDA state on more than one GPU: the driver checkpoints
 * it, and then, with peer access between those GPUs, cannot restore it
 * (cuCheckpointProcessRestore: CUDA_ERROR_INVALID_VALUE, whatever the GPU
 * pairs; shared notes): a checkpoint would leave it checkpointed for
 * good. So it is refused before anything is locked, unless the user
 * accepts the risk (--multi-gpu-process). Which GPUs a process holds
 * state on is gpumap_held's rule. */
static int refuse_multi_gpu(const struct cudrv *d, const struct tp_capture *c)
{
	struct gpu_info *host = NULL;
	size_t nhost = 0;
	if (gpumap_host(d, &host, &nhost) < 0) {
		host = NULL;   /* the GPUs are then named by UUID alone */
		nhost = 0;
	}
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < c->ncuda; i++) {
		/* Under the shim, with the job's CUDA runtime a shared library
		 * it stands in front of, every peer access the process enabled is
		 * known, and disabled before the freeze (gpu/shim.h). */
		bool shim = false;
		for (size_t s = 0; s < c->shim.n && !shim; s++)
			shim = c->shim.v[s].pid == c->cuda[i] && (c->shim.v[s].ctl->flags & SHIM_SEES_RUNTIME);
		if (shim)
			continue;
		char what[512];
		const size_t k = gpumap_held(c->cuda[i], host, nhost, what, sizeof(what));
		if (k > 1)
			rc = crest_errx(-EOPNOTSUPP, "pid %d holds CUDA state on %zu GPUs (%s): the driver checkpoints "
					"such a process but cannot restore it when it moves data between its GPUs (peer "
					"access: cuCheckpointProcessRestore answers CUDA_ERROR_INVALID_VALUE and the process "
					"never runs again), so nothing was frozen and the job runs on. Keep one GPU per "
					"process (one rank per GPU), or move tensors between GPUs through host memory and "
					"pass --multi-gpu-process to accept the risk, or start it under crest run --cuda-shim "
					"(crest's shim disables its peer access around the checkpoint), or save it through "
					"crest's library (crest_checkpoint) instead", (int)c->cuda[i], k, what);
	}
	free(host);
	return rc;
}

/* NCCL between the job's CUDA processes with its P2P transport on (its
 * default between GPUs of one node): each rank maps its peers' device
 * memory through CUDA IPC, the driver checkpoints the ranks, and its
 * restore then answers CUDA_ERROR_NOT_SUPPORTED for every one of them
 * (seen with NCCL 2.28.9 and driver 580 on 2 H200s over NVLink, 2026-11-28),
 * so a checkpoint would end the job. It is refused before anything is
 * frozen. What can be seen from outside is that a CUDA process maps
 * libnccl and has a communicator: NCCL's shared proxy state (an unlinked
 * /dev/shm/nccl-* file, mapped with P2P and SHM off), or PyTorch's NCCL
 * watchdog thread ("pt_nccl_watchdg", alive while a NCCL process group
 * is; NCCL names none of its own threads). With NCCL's defaults a rank
 * maps nothing of NCCL's from /dev/shm, so the thread is what tells
 * (both seen, 2026-11-28). PyTorch loads libnccl into every CUDA process,
 * so libnccl alone says nothing: a gloo DDP rank maps it too (seen), with
 * no communicator; and a rank whose process group was destroyed has
 * neither, and restores (seen: the driver's round trip of two P2P ranks
 * after destroy_process_group, then a new group, losses as uninterrupted).
 * Taken is what was seen to restore: P2P off (NCCL_P2P_DISABLE=1, or
 * NCCL_P2P_LEVEL=LOC) and SHM off (NCCL_SHM_DISABLE=1) in the environment
 * the rank started with. SHM alone on is refused too: NCCL then shares
 * host memory between the ranks through the driver (cuMem host memory),
 * a restore not seen to work. A rank that set the variables in itself
 * later is not seen as having done so, and is refused (the message says
 * to set them at launch). A job of one CUDA process never reaches a
 * peer; NCCL outside PyTorch with neither sign goes unseen, and its
 * restore would then fail as above, ending in the defined state of a
 * failed driver restore. A rank running crest's NCCL shim is not refused:
 * its communicators are ended before the freeze (gpu/shim.h). */
static bool env_is(pid_t p, const char *key, const char *a, const char *b)
{
	char v[64];
	return proc_env_get(p, key, v, sizeof(v)) == 0 && (!strcasecmp(v, a) || !strcasecmp(v, b));
}

static int refuse_nccl_p2p(const struct tp_capture *c)
{
	if (c->ncuda < 2)
		return 0;
	for (size_t i = 0; i < c->ncuda; i++) {
		const pid_t p = c->cuda[i];
		bool shim = false;   /* released before the freeze (tp_capture_run) */
		for (size_t k = 0; k < c->shim.n && !shim; k++)
			shim = c->shim.v[k].pid == p;
		if (shim || !proc_maps_has(p, "/libnccl") ||
		    (!proc_maps_has(p, "/dev/shm/nccl-") && !proc_has_thread(p, "pt_nccl_watchdg")))
			continue;
		const bool p2p = !env_is(p, "NCCL_P2P_DISABLE", "1", "true") && !env_is(p, "NCCL_P2P_LEVEL", "LOC", "0");
		const bool shm = !env_is(p, "NCCL_SHM_DISABLE", "1", "true");
		if (!p2p && !shm)
			continue;
		return crest_errx(-EOPNOTSUPP, "pid %d has a NCCL communicator beside %zu other CUDA process%s, "
				  "with NCCL's %s on (no %s in the environment it started with): its ranks map "
				  "each other's memory through the driver, which checkpoints them but cannot "
				  "restore them (cuCheckpointProcessRestore: CUDA_ERROR_NOT_SUPPORTED, seen with "
				  "driver 580), so nothing was frozen and the job runs on. Start the job with "
				  "NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 (NCCL then connects the ranks over "
				  "sockets, which crest saves), or run it under crest run --cuda-shim (crest's "
				  "NCCL shim ends and remakes the communicators around the checkpoint), or save "
				  "it through crest's library (crest_job_checkpoint)",
				  (int)p, c->ncuda - 1, c->ncuda > 2 ? "es" : "",
				  p2p && shm ? "P2P and SHM transports" : p2p ? "P2P transport" : "SHM transport",
				  p2p && shm ? "NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1" : p2p ? "NCCL_P2P_DISABLE=1" : "NCCL_SHM_DISABLE=1");
	}
	return 0;
}

static int write_list(const char *path, const struct proc_files *f)
{
	FILE *out = fopen(path, "we");
	if (!out)
		return crest_errf(-errno, "cannot create %s", path);
	for (size_t i = 0; i < f->n; i++)
		fprintf(out, "%llu %llu %s\n", (unsigned long long)f->v[i].dev, (unsigned long long)f->v[i].ino,
			f->v[i].path);
	if (fclose(out) != 0)
		return crest_errf(-errno, "cannot write %s", path);
	return 0;
}

/* Reads back the sizes the hook saw; a file the hook could not read keeps
 * the size listed before the freeze. */
static void read_sizes(struct tp_capture *c)
{
	char path[PATH_MAX + 16];
	snprintf(path, sizeof(path), "%s/sizes", c->files_dir);
	FILE *f = fopen(path, "re");
	if (!f)
		return;
	unsigned long idx;
	unsigned long long size;
	while (fscanf(f, "%lu %llu", &idx, &size) == 2)
		if (idx < c->files.n)
			c->files.v[idx].size = size;
	fclose(f);
}

/* What the tree's TCP sockets ask of the dump (os/sock.h), or a refusal,
 * before anything is frozen: CRIU would fail on them, or restore a job
 * that holds half a connection nobody answers. */
static int check_sockets(const struct tp_opts *o, struct tp_capture *c)
{
	struct sock_list l;
	int rc = sock_list_tree(&c->tree, &l);
	if (rc < 0)
		return rc;
	const struct sock_tcp *out = sock_first_outside(&l);
	if (l.ninet && !criu_dumps_inet(o->criu))
		rc = crest_errx(-ENOTSUP, "cannot checkpoint pid %d: pid %d holds an internet socket (inode %llu), "
				"and criu %d.%d.%d cannot dump one on this kernel (Linux >= 6.16); nothing was "
				"frozen. scripts/install-criu.sh installs criu 4.2, which can", (int)o->pid,
				(int)l.inet_pid, (unsigned long long)l.inet_ino, o->criu->major, o->criu->minor,
				o->criu->sub);
	else if (l.nunix_outside)
		rc = crest_errx(-EOPNOTSUPP, "cannot checkpoint pid %d: pid %d holds a unix socket (inode %llu) "
				"connected to %s%s, a peer outside the job, and CRIU cannot save half of a "
				"connection; nothing was frozen. The job must close it first, or be started with "
				"that peer inside it (a job whose output goes to a socket can write to a file "
				"instead)", (int)o->pid, (int)l.unix_pid, (unsigned long long)l.unix_ino,
				l.unix_peer[0] ? l.unix_peer : "an unnamed socket", l.nunix_outside > 1 ? " (and more)" : "");
	else if (out && !o->tcp_close)
		rc = crest_errx(-EOPNOTSUPP, "cannot checkpoint pid %d: pid %d holds a TCP connection from %s to "
				"%s, a peer outside the job%s, and a restored job could not use it (CRIU saves "
				"only this end); nothing was frozen. --tcp-close checkpoints it anyway: the "
				"restored job finds its TCP connections closed (for a server whose clients "
				"reconnect)", (int)o->pid, (int)out->pid, out->local, out->remote,
				l.noutside > 1 ? " (and more)" : "");
	/* With --tcp-close, criu is told so whenever the tree holds a TCP
	 * socket at all: a listening one may accept a client between this
	 * look and the freeze (an inference server under traffic, seen on
	 * the GPU machine), and criu refuses a connection it was not told
	 * what to do with. */
	c->tcp_close = rc == 0 && o->tcp_close && l.n;
	c->tcp_established = rc == 0 && !c->tcp_close && l.ninside;
	/* Saved connections are locked while CRIU works (a tree in a
	 * namespace of its own needs no lock); which lock is asked now, a run
	 * of criu, and not inside the stall. */
	if (c->tcp_established && !c->netns && !criu_net_lockable(o->criu)) {
		const struct sock_tcp *in = NULL;
		for (size_t i = 0; i < l.n && !in; i++)
			if (l.v[i].state != SOCK_TCP_LISTEN && !l.v[i].outside)
				in = &l.v[i];
		rc = crest_errx(-ENOTSUP, "cannot checkpoint pid %d: pid %d holds a TCP connection from %s to %s, "
				"and CRIU must lock the network to save it, but this criu has no nftables lock and "
				"there is no iptables-restore on PATH; nothing was frozen. Install iptables, or "
				"criu 4.2 (scripts/install-criu.sh)", (int)o->pid, in ? (int)in->pid : 0,
				in ? in->local : "?", in ? in->remote : "?");
	}
	/* A restore in place ends what the killed job left in TIME_WAIT on
	 * these ports (os/sock.h: sock_tw_end). */
	if (rc == 0 && l.n && !(c->tcp_ports = calloc(l.n, 6)))
		rc = crest_errf(-ENOMEM, "checkpoint");
	for (size_t i = 0, used = 0; rc == 0 && i < l.n; i++)
		used += (size_t)snprintf(c->tcp_ports + used, 6 * l.n - used, "%s%u", i ? "," : "",
					 (unsigned)l.v[i].port);
	sock_list_free(&l);
	return rc;
}

/* An io_uring anywhere in the tree (os/uring.h), refused before anything
 * is frozen: CRIU would seize and freeze the tree and only then fail on it.
 * crest's own process in a tree, crest run's init (os/pidns.h), never
 * holds one: it is crest exec'd anew, which goes to pidns_init_main before
 * anything else, and a ring's descriptor is always close-on-exec and its
 * mappings end at the exec, so no ring of the crest run that started it
 * (the store's writer, cas/pack.c) comes along. It is looked at like the
 * rest all the same: CRIU would fail on its ring as on any other. A job
 * that links libcrest is the job's own use of io_uring (its handle's store
 * writer keeps a ring while it holds the store) and is refused likewise;
 * the message says how such a handle lets go of it. */
static int check_io_uring(const struct tp_opts *o, const struct proc_tree *t)
{
	struct uring_found u;
	const int rc = uring_find_tree(t, &u);
	if (rc <= 0)
		return rc;
	char what[160], more[64] = "", lib[256] = "";
	if (u.fd >= 0 && u.tid != u.pid)
		snprintf(what, sizeof(what), "descriptor %d of its thread %d is anon_inode:[io_uring]", u.fd, (int)u.tid);
	else if (u.fd >= 0)
		snprintf(what, sizeof(what), "descriptor %d is anon_inode:[io_uring]", u.fd);
	else
		snprintf(what, sizeof(what), "/proc/%d/maps has an anon_inode:[io_uring] mapping", (int)u.pid);
	if (u.nproc > 1)
		snprintf(more, sizeof(more), " (and %zu more process%s)", u.nproc - 1, u.nproc > 2 ? "es" : "");
	if (u.libcrest)
		snprintf(lib, sizeof(lib), " (pid %d maps libcrest, whose open handle holds an io_uring while it "
			 "holds its store: CREST_STORE_IDLE_MS=N in the job's environment makes it let go when idle)",
			 (int)u.pid);
	return crest_errx(-EOPNOTSUPP, "cannot checkpoint pid %d: pid %d (%s) holds an io_uring (%s)%s, and "
			  "criu %d.%d.%d cannot dump one (it would fail with the job frozen); nothing was frozen. "
			  "A PyTorch job: start it with USE_LIBUV=0 (PyTorch >= 2.4 runs its TCPStore on libuv, "
			  "whose ring UV_USE_IO_URING=0 does not remove); another libuv program: UV_USE_IO_URING=0; "
			  "else stop using io_uring in the job%s",
			  (int)o->pid, (int)u.pid, u.comm, what, more, o->criu->major, o->criu->minor, o->criu->sub, lib);
}

/* --workdir before the freeze: a directory (not a symlink), whose regular
 * files add up to at most limit bytes. */
static int wd_measure(const char *dir, const char *name, uint64_t limit, uint64_t *bytes);

/* Every check that can fail without harm comes first: the pid exists, we
 * are root, no process of the tree holds an io_uring, the driver has the
 * checkpoint API when CUDA is in use, CRIU can dump the tree's sockets. */
static int tp_capture_run(const struct tp_opts *o, struct engine_snap *snap, struct tp_capture *c)
{
	memset(c, 0, sizeof(*c));
	int rc = proc_tree_get(o->pid, &c->tree);
	if (rc < 0)
		return rc;
	proc_comm(o->pid, c->comm, sizeof(c->comm));
	/* Refused before anything is frozen: CRIU would stop the tree, fail
	 * to seize the thread and say only that it could not interrupt it. */
	for (size_t i = 0; i < c->tree.n; i++)
		if (proc_is_kthread(c->tree.pids[i])) {
			char comm[64];
			proc_comm(c->tree.pids[i], comm, sizeof(comm));
			const int k = (int)c->tree.pids[i];
			proc_tree_free(&c->tree);
			if (k == (int)o->pid)
				return crest_errx(-EINVAL, "pid %d (%s) is a kernel thread: CRIU checkpoints user "
						  "processes, and a kernel thread has no memory of its own to save", k, comm);
			return crest_errx(-EINVAL, "pid %d (%s), in pid %d's tree, is a kernel thread: CRIU "
					  "checkpoints user processes only", k, comm, (int)o->pid);
		}
	if (geteuid() != 0) {
		proc_tree_free(&c->tree);
		return crest_errx(-EPERM, "not permitted: checkpointing pid %d needs root (CRIU ptraces "
				  "and restores whole process trees)", (int)o->pid);
	}
	rc = check_io_uring(o, &c->tree);
	if (rc < 0) {
		proc_tree_free(&c->tree);
		return rc;
	}
	c->shell_job = getsid(o->pid) != o->pid;
	/* A tree in a pid namespace of its own (crest run) can be restored
	 * beside the original: restore/ needs to know, and the namespace's
	 * inode tells it whether the original still runs. */
	if (pidns_init_of(o->pid, &c->pidns) != 1)
		c->pidns = 0;

	/* Which processes hold a CUDA context: those that map libcuda and
	 * for which the driver knows a state. One that maps it without a
	 * context (a launcher, a data-loader worker) is a CPU process: the
	 * driver's lock would refuse it (CUDA_ERROR_NOT_INITIALIZED), so it is
	 * left out before anything is locked. */
	c->cuda = calloc(c->tree.n, sizeof(pid_t));
	if (!c->cuda) {
		tp_capture_free(c);
		return crest_errf(-ENOMEM, "checkpoint");
	}
	for (size_t i = 0; i < c->tree.n; i++)
		if (proc_uses_cuda(c->tree.pids[i]))
			c->cuda[c->ncuda++] = c->tree.pids[i];
	const struct cudrv *d = NULL;
	if (c->ncuda) {
		rc = cudrv_load(&d);
		if (rc == 0)
			rc = cudrv_need_checkpoint(d);
		size_t kept = 0;
		for (size_t i = 0; rc == 0 && i < c->ncuda; i++) {
			CUresult why;
			if (gpuckpt_has_state(d, c->cuda[i], &why))
				c->cuda[kept++] = c->cuda[i];
		}
		if (rc == 0)
			c->ncuda = kept;
		if (rc == 0 && c->ncuda)
			rc = record_gpus(d, c);
		if (rc < 0) {
			crest_errctx(rc, "pid %d uses CUDA", (int)c->cuda[0]);
			tp_capture_free(c);
			return rc;
		}
	}
	/* The driver is reached by host pid, and a copy restored in a new
	 * namespace gets new ones: it finds its CUDA processes by the pids
	 * they have inside (the same in every copy). */
	if (c->pidns && c->ncuda) {
		c->cuda_inner = calloc(c->ncuda, sizeof(pid_t));
		rc = c->cuda_inner ? 0 : crest_errf(-ENOMEM, "checkpoint");
		for (size_t i = 0; rc == 0 && i < c->ncuda; i++)
			if (pidns_inner_pid(c->cuda[i], &c->cuda_inner[i]) < 0)
				rc = crest_errx(-ESRCH, "pid %d is gone", (int)c->cuda[i]);
		if (rc < 0) {
			tp_capture_free(c);
			return rc;
		}
	}
	/* The processes running crest's NCCL shim (gpu/shim.h): any of the
	 * tree, CUDA or not, that made a communicator under it. */
	for (size_t i = 0; rc == 0 && i < c->tree.n; i++) {
		rc = shimctl_open(&c->shim, c->tree.pids[i]);
		rc = rc == -ENOENT ? 0 : rc;
	}
	if (rc == 0 && c->pidns && c->shim.n) {
		c->shim_inner = calloc(c->shim.n, sizeof(pid_t));
		rc = c->shim_inner ? 0 : crest_errf(-ENOMEM, "checkpoint");
		for (size_t i = 0; rc == 0 && i < c->shim.n; i++)
			if (pidns_inner_pid(c->shim.v[i].pid, &c->shim_inner[i]) < 0)
				rc = crest_errx(-ESRCH, "pid %d is gone", (int)c->shim.v[i].pid);
	}
	if (rc < 0) {
		tp_capture_free(c);
		return rc;
	}
	/* What the driver could not give back is refused before anything
	 * is frozen (gpu/gpuckpt.h). */
	if (c->ncuda && !o->multi_gpu)
		rc = refuse_multi_gpu(d, c);
	if (rc == 0)
		rc = refuse_nccl_p2p(c);
	if (rc < 0) {
		tp_capture_free(c);
		return rc;
	}
	rc = proc_files_writable(&c->tree, &c->files);
	/* In a mount namespace of its own, what the job holds on the host's
	 * mounts (its stdio) is dumped as external and handed back on restore. */
	if (rc == 0 && proc_own_mntns(o->pid) == 1) {
		c->mntns = true;
		rc = proc_extfds_get(&c->tree, &c->ext);
	}
	/* A copy's network namespace (restore/process.c gives each one its
	 * own): named external, and a fresh one on restore. */
	if (rc == 0 && proc_own_netns(o->pid) == 1)
		c->netns = proc_ns_ino(o->pid, "net");
	if (rc == 0)
		rc = check_sockets(o, c);
	if (rc < 0) {
		tp_capture_free(c);
		return rc;
	}
	crest_fault_pause("capture.sockets");

	/* Images take as much RAM on tmpfs as the job has state. A crest killed
	 * mid-checkpoint cannot remove its own: every checkpoint removes those
	 * of crests that are gone, told by the flock each holds while alive. */
	const char *tmp = o->tmpdir ? o->tmpdir : "/dev/shm";
	fs_workdir_sweep(tmp, "crest-ckpt-");
	char prefix[64];
	snprintf(prefix, sizeof(prefix), "crest-ckpt-%d-", (int)o->pid);
	rc = fs_workdir_make(tmp, prefix, c->dir, sizeof(c->dir), &c->lock_fd);
	if (rc < 0) {
		c->dir[0] = 0;
		tp_capture_free(c);
		return rc;
	}
	c->locked = true;
	/* Streamed, CRIU's images go into snap while it dumps (imgstream.h);
	 * the directory holds only its socket and CRIU's log. */
	if (snap) {
		rc = imgstream_start(snap, c->dir, &c->stream);
		if (rc < 0) {
			crest_errctx(rc, "nothing was frozen, and pid %d runs on", (int)o->pid);
			tp_capture_free(c);
			return rc;
		}
		c->streamed = true;
	}
	snprintf(c->files_dir, sizeof(c->files_dir), "%s.files", c->dir);
	if (mkdir(c->files_dir, 0700) < 0) {
		rc = crest_errf(-errno, "cannot create %s", c->files_dir);
		c->files_dir[0] = 0;
		tp_capture_free(c);
		return rc;
	}
	char list[PATH_MAX + 16];
	snprintf(list, sizeof(list), "%s/list", c->files_dir);
	rc = write_list(list, &c->files);
	char exe[PATH_MAX], hook[3 * PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (rc == 0 && n <= 0)
		rc = crest_errf(-errno, "cannot find crest's own program");
	if (rc < 0) {
		tp_capture_free(c);
		return rc;
	}
	exe[n] = 0;
	/* criu execs the action script itself: a two-line sh script that runs
	 * crest. Quotes in either path would break its quoting. */
	if (strchr(exe, '\'') || strchr(c->files_dir, '\'')) {
		rc = crest_errx(-EINVAL, "crest's path or the images path holds a quote (')");
		tp_capture_free(c);
		return rc;
	}
	snprintf(hook, sizeof(hook), "%s/hook.sh", c->files_dir);
	FILE *hf = fopen(hook, "we");
	if (!hf || fprintf(hf, "#!/bin/sh\nexec '%s' __criu-hook '%s' %llu\n", exe, c->files_dir,
			   (unsigned long long)(o->file_limit ? o->file_limit : TP_FILE_LIMIT_DEFAULT)) < 0 ||
	    fchmod(fileno(hf), 0700) < 0) {
		rc = crest_errf(-errno, "cannot write %s", hook);
		if (hf)
			fclose(hf);
		tp_capture_free(c);
		return rc;
	}
	if (fclose(hf) != 0) {
		rc = crest_errf(-errno, "cannot write %s", hook);
		tp_capture_free(c);
		return rc;
	}

	/* --workdir: its size is checked now, before the job is frozen for a
	 * tree that would be refused; the hook finds the path in files_dir. */
	if (o->workdir) {
		const uint64_t limit = o->workdir_limit ? o->workdir_limit : TP_WORKDIR_LIMIT_DEFAULT;
		/* Through the job's root: a job in a mount namespace of its own
		 * (a clone, with its copy of DIR mounted over DIR) is captured as
		 * it sees DIR, not as the host does. */
		char seen[PATH_MAX + 32];
		snprintf(seen, sizeof(seen), "/proc/%d/root%s", (int)o->pid, o->workdir);
		rc = wd_measure(seen, o->workdir, limit, &c->workdir_bytes);
		char wpath[PATH_MAX + 16];
		snprintf(wpath, sizeof(wpath), "%s/workdir", c->files_dir);
		FILE *wf = rc == 0 ? fopen(wpath, "we") : NULL;
		if (rc == 0 && (!wf || fprintf(wf, "%llu %s", (unsigned long long)limit, seen) < 0))
			rc = crest_errf(-errno, "cannot write %s", wpath);
		if (wf && fclose(wf) != 0 && rc == 0)
			rc = crest_errf(-errno, "cannot write %s", wpath);
		if (rc < 0) {
			tp_capture_free(c);
			return rc;
		}
		c->workdir = o->workdir;
		struct stat hs, js;
		c->workdir_bound = stat(seen, &js) == 0 && (stat(o->workdir, &hs) < 0 || hs.st_dev != js.st_dev ||
							     hs.st_ino != js.st_ino);
		/* A copy gets its own DIR by a bind over it, which a working
		 * directory inside DIR does not follow (restore/process.c). */
		const size_t wl = strlen(o->workdir);
		for (size_t i = 0; i < c->tree.n && !c->workdir_cwd; i++) {
			char link[64], cwd[PATH_MAX];
			snprintf(link, sizeof(link), "/proc/%d/cwd", (int)c->tree.pids[i]);
			const ssize_t l = readlink(link, cwd, sizeof(cwd) - 1);
			if (l > 0) {
				cwd[l] = 0;
				c->workdir_cwd = !strncmp(cwd, o->workdir, wl) && (cwd[wl] == '/' || !cwd[wl]);
			}
		}
	}

	/* The processes stopped already (SIGSTOP, job control): left stopped
	 * by whoever gives the job back after a --kill that stored nothing. */
	c->held = calloc(c->tree.n, sizeof(pid_t));
	if (!c->held) {
		tp_capture_free(c);
		return crest_errf(-ENOMEM, "checkpoint");
	}
	for (size_t i = 0; i < c->tree.n; i++)
		if (proc_state(c->tree.pids[i]) == 'T')
			c->held[c->nheld++] = c->tree.pids[i];
	/* A guard gives the job back if crest dies from here on (guard.h). */
	pid_t *spids = shim_pids(c);
	rc = c->shim.n && !spids ? crest_errf(-ENOMEM, "checkpoint")
				 : tp_guard_start(&c->guard, o->pid, o->kill, c->cuda, c->ncuda, c->held, c->nheld,
						  spids, spids ? c->shim.n : 0);
	free(spids);
	if (rc < 0) {
		tp_capture_free(c);
		return rc;
	}
	/* Under the guard, which puts the setting back if crest dies with it
	 * raised (os/thp.h); outside the stall. */
	if (o->huge_pages) {
		rc = os_thp_raise();
		if (rc < 0) {
			crest_errctx(rc, "--huge-pages: nothing was frozen, and pid %d runs on", (int)o->pid);
			tp_capture_free(c);
			return rc;
		}
		c->thp = true;
		crest_fault_pause("capture.thp");   /* tests only: util/fault.h */
	}
	/* The stall starts here: from the shim's pause, the job's NCCL calls
	 * wait; from the lock, the job does not run. */
	uint64_t t0 = time_now_ns();
	if (c->shim.n) {
		rc = shimctl_release(&c->shim, o->lock_timeout_ms ? o->lock_timeout_ms : TP_LOCK_TIMEOUT_MS,
				     &c->shim_st);
		if (rc < 0) {
			crest_errctx(rc, "nothing was frozen, and pid %d runs on", (int)o->pid);
			tp_capture_free(c);
			return rc;
		}
		c->shim_released = true;
		crest_fault_die("capture.shim");   /* tests only: util/fault.h */
	}
	if (c->ncuda) {
		rc = gpuckpt_suspend(d, c->cuda, c->ncuda, o->lock_timeout_ms ? o->lock_timeout_ms : TP_LOCK_TIMEOUT_MS,
				     o->lock_within_ms ? o->lock_within_ms : TP_LOCK_WITHIN_MS, &c->gpu_lock_ns,
				     &c->gpu_ckpt_ns);
		if (rc < 0) {
			tp_capture_free(c);
			return rc;
		}
	}
	uint64_t t1 = time_now_ns();
	/* --kill leaves the tree stopped, not killed: the images on tmpfs are
	 * the job's only copy until the store has committed them, and a store
	 * that fails (full, damaged, locked) must not take the job with it.
	 * Stopped, the job changes nothing (memory, files) that the snapshot
	 * holds; tp_capture_kill ends it after the commit. */
	const char *ext[64];
	const size_t next = c->ext.n < 64 ? c->ext.n : 65;
	for (size_t i = 0; i < c->ext.n && i < 64; i++)
		ext[i] = c->ext.v[i].key;
	struct criu_dump_opts dopts = { .pid = o->pid, .dir = c->dir, .leave_running = !o->kill,
					.leave_stopped = o->kill, .shell_job = c->shell_job,
					.action_script = hook, .mntns = c->mntns, .external = ext,
					.nexternal = next, .netns = c->netns,
					.tcp_established = c->tcp_established, .tcp_close = c->tcp_close,
					.stream = c->streamed,
					.ghost_limit = o->file_limit ? o->file_limit : TP_FILE_LIMIT_DEFAULT };
	rc = criu_dump(o->criu, &dopts);
	uint64_t t2 = time_now_ns();
	c->dump_ns = t2 - t1;
	c->drv = d;
	if (rc == 0 && o->kill)
		c->stopped = true;
	int rrc = 0;
	if (c->ncuda && (rc < 0 || !o->kill)) {
		char msg[1024];
		crest_errcpy(msg, sizeof(msg));
		rrc = gpuckpt_resume(d, c->cuda, c->ncuda, NULL, 0);
		if (rc < 0)
			crest_errset_str(msg);
	}
	c->gpu_resume_ns = time_now_ns() - t2;
	/* The job runs again: its NCCL is made again now (a failed dump's
	 * too: tp_capture_free). One that cannot be would wait at its next
	 * collective, or fail it: it is stored and ended like a process the
	 * driver did not give back. */
	if (c->shim_released && rc == 0 && rrc == 0 && !o->kill) {
		c->shim_released = false;
		rrc = shimctl_rebuild(&c->shim, o->lock_timeout_ms ? o->lock_timeout_ms : TP_LOCK_TIMEOUT_MS,
				      &c->shim_rebuild_ns);
		c->stranded_nccl = rrc < 0;
	}
	c->stall_ns = time_now_ns() - t0;
	thp_lower(c);
	/* CRIU has exited: the last images are read (the engine may still be
	 * working on them). A failure here is the snapshot's, not the job's:
	 * tp_capture_ingest fails it, and the job is treated as after any
	 * store that failed (runs on; --kill: resumed). */
	if (c->stream) {
		const int src = imgstream_finish(c->stream, &c->image_bytes);
		c->stream = NULL;
		if (src < 0 && rc == 0) {
			c->stream_rc = src;
			crest_errcpy(c->stream_msg, sizeof(c->stream_msg));
		}
	}
	/* The dump is whole but a process stays in the driver's hands: its
	 * images are stored (tp_checkpoint), then the job is ended. The guard
	 * stays armed until then: crest dying meanwhile leaves it to the
	 * guard, which says what it could not bring back. */
	if (rc == 0 && rrc < 0) {
		crest_fault_die("capture.stranded");   /* tests only: util/fault.h */
		crest_errcpy(c->stranded, sizeof(c->stranded));
		read_sizes(c);
		return 0;
	}
	if (!c->stopped)
		tp_guard_disarm(&c->guard);   /* running again, or failed: no longer held */
	if (rc < 0) {
		/* CRIU fails as soon as the tracee vanishes from ptrace, which can
		 * be before the kill that caused it shows in /proc: give the kernel
		 * a moment to mark it before the error is named. */
		bool gone = proc_gone(o->pid);
		for (int i = 0; !gone && i < 20; i++) {
			usleep(10000);
			gone = proc_gone(o->pid);
		}
		if (gone)
			crest_errctx(rc, "process %d exited during its checkpoint", (int)o->pid);
		char why[1024] = "", wpath[PATH_MAX + 16];
		snprintf(wpath, sizeof(wpath), "%s/wd.err", c->files_dir);
		FILE *wf = c->workdir ? fopen(wpath, "re") : NULL;
		if (wf && fgets(why, sizeof(why), wf) && why[0])
			rc = crest_errx(rc, "%s; pid %d was not stopped for nothing: it runs on", why, (int)o->pid);
		if (wf)
			fclose(wf);
		tp_capture_free(c);
		return rc;
	}
	read_sizes(c);
	return 0;
}

struct mapping {
	void *p;
	size_t len;
};

static void mapping_release(void *arg)
{
	struct mapping *m = arg;
	munmap(m->p, m->len);
	free(m);
}

/* Adds one file of the capture as a memory stream: mmap'ed, so tmpfs pages
 * go to the workers with no copy. */
static int add_file(struct engine_snap *s, const char *name, uint8_t type, const char *path,
		    const char *meta, uint64_t *bytes)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return crest_errf(-errno, "cannot open %s", path);
	struct stat sb;
	if (fstat(fd, &sb) < 0) {
		int err = -errno;
		close(fd);
		return crest_errf(err, "cannot stat %s", path);
	}
	struct engine_stream *st;
	int rc = engine_stream_open(s, name, type, true, &st);
	if (rc < 0) {
		close(fd);
		return rc;
	}
	engine_stream_meta(st)->mode = sb.st_mode & 07777;
	if (meta)
		cas_stream_set_str(&engine_stream_meta(st)->meta, meta);
	if (sb.st_size > 0) {
		struct mapping *m = malloc(sizeof(*m));
		void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (!m || p == MAP_FAILED) {
			rc = p == MAP_FAILED ? crest_errf(-errno, "cannot map %s", path)
					     : crest_errf(-ENOMEM, "mapping %s", path);
			if (p != MAP_FAILED)
				munmap(p, (size_t)sb.st_size);
			free(m);
		} else {
			const size_t len = (size_t)sb.st_size;
			m->p = p;
			m->len = len;
			engine_snapshot_expect(s, len);
			/* m may be released (freed) before this returns. */
			rc = engine_stream_add_memory(st, p, len, mapping_release, m);
			*bytes += len;
		}
	}
	close(fd);
	engine_stream_close(st);
	return rc;
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int label_u64(struct cas_manifest *m, const char *k, uint64_t v)
{
	char b[32];
	snprintf(b, sizeof(b), "%llu", (unsigned long long)v);
	return cas_manifest_label(m, k, b);
}

static int label_pids(struct cas_manifest *m, const char *k, const pid_t *p, size_t n)
{
	char *b = proc_pids_format(p, n);
	const int rc = b ? cas_manifest_label(m, k, b) : -ENOMEM;
	free(b);
	return rc;
}

/* The external descriptors, one a line: "KEY FLAGS POS PATH", flags in
 * octal (restore/process.c reads them). Paths hold no newline
 * (proc_extfds_get). */
static int label_extfds(struct cas_manifest *m, const struct proc_extfds *x)
{
	size_t cap = 1;
	for (size_t i = 0; i < x->n; i++)
		cap += strlen(x->v[i].key) + strlen(x->v[i].path) + 48;
	char *b = malloc(cap);
	if (!b)
		return -ENOMEM;
	size_t used = 0;
	b[0] = 0;
	for (size_t i = 0; i < x->n; i++)
		used += (size_t)snprintf(b + used, cap - used, "%s%s %o %llu %s", i ? "\n" : "", x->v[i].key,
					 (unsigned)x->v[i].flags, (unsigned long long)x->v[i].pos, x->v[i].path);
	const int rc = cas_manifest_label(m, "ext_fds", b);
	free(b);
	return rc;
}

/* Begins the snapshot of kind "process" a capture goes into: before the
 * freeze when its images are streamed into it, after it otherwise. Takes
 * parent (a manifest, or NULL). */
static int snap_begin(struct engine *e, const char *tag, const uint8_t *parent_id, struct cas_manifest *parent,
		      struct engine_snap **out)
{
	struct engine_snap *s;
	int rc = engine_snapshot_begin(e, "process", &s);
	if (rc < 0) {
		cas_manifest_free(parent);
		return rc;
	}
	if (parent_id)
		engine_snapshot_set_parent(s, parent_id, parent);
	else
		cas_manifest_free(parent);
	if (tag && (rc = engine_snapshot_set_tag(s, tag)) < 0) {
		engine_snapshot_abort(s);
		return rc;
	}
	*out = s;
	return 0;
}

/* Adds the rest of the capture to s (its labels; its images, unless they
 * were streamed in already; its files) and seals it; on failure s is
 * aborted. The images stay on tmpfs until tp_capture_free. */
static int tp_capture_ingest(struct engine_snap *s, const struct tp_capture *c, const char *branch)
{
	int rc = 0;
	if (c->stream_rc < 0)
		rc = crest_errx(c->stream_rc, "%s", c->stream_msg);
	struct cas_manifest *m = engine_snapshot_manifest(s);
	if (rc == 0 && cas_manifest_set_branch(m, branch ? branch : CAS_BRANCH_DEFAULT) < 0)
		rc = crest_errf(-ENOMEM, "labelling the snapshot");
	char host[256] = "";
	gethostname(host, sizeof(host) - 1);
	if (rc == 0)
		rc = label_u64(m, "pid", (uint64_t)c->tree.pids[0]);
	if (rc == 0)
		rc = cas_manifest_label(m, "comm", c->comm);
	if (rc == 0)
		rc = label_pids(m, "pids", c->tree.pids, c->tree.n);
	if (rc == 0)
		rc = label_pids(m, "cuda_pids", c->cuda, c->ncuda);
	if (rc == 0)
		rc = cas_manifest_label(m, "shell_job", c->shell_job ? "1" : "0");
	if (rc == 0 && c->pidns)
		rc = label_u64(m, "pidns", c->pidns);
	if (rc == 0 && c->cuda_inner)
		rc = label_pids(m, "cuda_nspids", c->cuda_inner, c->ncuda);
	/* The restore makes their NCCL again (restore/process.c). */
	if (rc == 0 && c->shim.n) {
		pid_t *sp = shim_pids(c);
		rc = sp ? label_pids(m, "shim_pids", sp, c->shim.n) : -ENOMEM;
		free(sp);
	}
	if (rc == 0 && c->shim_inner)
		rc = label_pids(m, "shim_nspids", c->shim_inner, c->shim.n);
	if (rc == 0 && c->mntns)
		rc = cas_manifest_label(m, "mntns", "1");
	if (rc == 0 && c->netns)
		rc = cas_manifest_label(m, "netns", "1");
	/* The restore must tell CRIU the same (restore/process.c). */
	if (rc == 0 && (c->tcp_established || c->tcp_close))
		rc = cas_manifest_label(m, "tcp", c->tcp_close ? "close" : "established");
	if (rc == 0 && c->tcp_ports)
		rc = cas_manifest_label(m, "tcp_ports", c->tcp_ports);
	if (rc == 0 && c->ext.n)
		rc = label_extfds(m, &c->ext);
	if (rc == 0)
		rc = label_u64(m, "stall_ns", c->stall_ns);
	if (rc == 0)
		rc = cas_manifest_label(m, "host", host);
	if (rc == 0 && c->gpus)
		rc = cas_manifest_label(m, "gpus", c->gpus);

	/* CRIU's images, in name order so manifests of the same job line up
	 * (streamed, they are in the order CRIU wrote them, the same for the
	 * same job). */
	DIR *d = rc == 0 && !c->streamed ? opendir(c->dir) : NULL;
	if (rc == 0 && !c->streamed && !d)
		rc = crest_errf(-errno, "cannot read %s", c->dir);
	char **names = NULL;
	size_t n = 0;
	struct dirent *de;
	while (rc == 0 && d && (de = readdir(d))) {
		size_t l = strlen(de->d_name);
		if (de->d_name[0] == '.' || (l > 4 && !strcmp(de->d_name + l - 4, ".log")))
			continue;
		char **nn = realloc(names, (n + 1) * sizeof(*nn));
		if (!nn || !(nn[n] = strdup(de->d_name))) {
			names = nn ? nn : names;
			rc = crest_errf(-ENOMEM, "listing %s", c->dir);
			break;
		}
		names = nn;
		n++;
	}
	if (d)
		closedir(d);
	if (rc == 0 && n)
		qsort(names, n, sizeof(*names), name_cmp);
	uint64_t bytes = 0;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		char path[PATH_MAX + 256], sname[512];
		snprintf(path, sizeof(path), "%s/%s", c->dir, names[i]);
		snprintf(sname, sizeof(sname), "criu/%s", names[i]);
		rc = add_file(s, sname, CAS_STREAM_IMAGE, path, NULL, &bytes);
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);

	/* --workdir, as the freeze saw it (the hook's copy). */
	if (rc == 0 && c->workdir) {
		char wd[PATH_MAX + 16];
		snprintf(wd, sizeof(wd), "%s/wd", c->files_dir);
		struct engine_links links = { 0 };
		rc = cas_manifest_label(m, "workdir", c->workdir);
		if (rc == 0 && c->workdir_cwd)
			rc = cas_manifest_label(m, "workdir_cwd", "1");
		if (rc == 0 && c->workdir_bound)
			rc = cas_manifest_label(m, "workdir_bound", "1");
		if (rc == 0)
			rc = engine_put_tree(s, wd, "workdir", &links);
		engine_links_free(&links);
		if (rc < 0)
			crest_errctx(rc, "storing --workdir %s", c->workdir);
	}

	/* The job's files, as the freeze saw them. */
	for (size_t i = 0; rc == 0 && i < c->files.n; i++) {
		char path[PATH_MAX + 64], sname[64], meta[PATH_MAX + 64];
		snprintf(path, sizeof(path), "%s/%zu.data", c->files_dir, i);
		if (access(path, F_OK) < 0)
			continue;  /* the hook could not read it: nothing to put back */
		snprintf(sname, sizeof(sname), "jobfiles/%zu", i);
		snprintf(meta, sizeof(meta), "size=%llu;uid=%u;path=%s", (unsigned long long)c->files.v[i].size,
			 (unsigned)c->files.v[i].uid, c->files.v[i].path);
		rc = add_file(s, sname, CAS_STREAM_JOBFILE, path, meta, &bytes);
	}
	if (rc < 0) {
		engine_snapshot_abort(s);
		return rc;
	}
	engine_snapshot_seal(s);
	return 0;
}

/* ---- the hook ---- */

/* The hook runs as root after the listing, and whoever owns the job's
 * directory may have put a symlink (to a root-only file) or another file
 * at the listed path meanwhile: only the very file the job held, by device
 * and inode, is copied, or the snapshot (and a restore the user runs)
 * would hand them what root read. */
static int copy_prefix(const char *src, uint64_t dev, uint64_t ino, const char *dst, uint64_t limit,
		       uint64_t *size)
{
	int in = open(src, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (in < 0)
		return -errno;
	struct stat sb;
	if (fstat(in, &sb) < 0) {
		close(in);
		return -errno;
	}
	if (!S_ISREG(sb.st_mode) || (uint64_t)sb.st_dev != dev || (uint64_t)sb.st_ino != ino) {
		close(in);
		return -ESTALE;
	}
	*size = (uint64_t)sb.st_size;
	int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (out < 0) {
		close(in);
		return -errno;
	}
	uint64_t left = *size < limit ? *size : limit;
	char buf[1 << 16];
	int rc = 0;
	while (left > 0) {
		ssize_t r = read(in, buf, left < sizeof(buf) ? left : sizeof(buf));
		if (r <= 0) {
			rc = r < 0 ? -errno : 0;
			break;
		}
		if (write(out, buf, (size_t)r) != r) {
			rc = -EIO;
			break;
		}
		left -= (uint64_t)r;
	}
	close(in);
	if (close(out) < 0 && rc == 0)
		rc = -errno;
	return rc;
}

struct wd_copy {
	uint64_t left;             /* bytes still allowed */
	const char *top;           /* for messages */
	char err[2 * PATH_MAX + 128]; /* why the copy failed, for crest's message */
};

static int wd_fail(struct wd_copy *w, int err, const char *what, const char *rel)
{
	if (!w->err[0])
		snprintf(w->err, sizeof(w->err), "--workdir %.4000s: %s %.4000s%s%s", w->top, what, rel,
			 err ? ": " : "", err ? strerror(-err) : "");
	return err ? err : -EFBIG;
}

/* One regular file's bytes, holes kept as holes (SEEK_DATA). */
static int wd_copy_data(int in, int out, uint64_t size)
{
	char buf[1 << 16];
	off_t pos = 0;
	while ((uint64_t)pos < size) {
		off_t data = lseek(in, pos, SEEK_DATA);
		if (data < 0)
			break;   /* ENXIO: a hole to the end */
		off_t hole = lseek(in, data, SEEK_HOLE);
		if (hole < 0)
			hole = (off_t)size;
		for (off_t off = data; off < hole;) {
			const size_t want = (size_t)(hole - off) < sizeof(buf) ? (size_t)(hole - off) : sizeof(buf);
			const ssize_t r = pread(in, buf, want, off);
			if (r < 0 && errno == EINTR)
				continue;
			if (r < 0)
				return -errno;
			if (r == 0)
				break;
			if (pwrite(out, buf, (size_t)r, off) != r)
				return errno ? -errno : -EIO;
			off += r;
		}
		pos = hole;
	}
	return ftruncate(out, (off_t)size) < 0 ? -errno : 0;
}

/* The tree under sfd into dfd (empty), never following a symlink: each
 * entry is opened relative to its parent with O_NOFOLLOW, symlinks are
 * copied as symlinks, devices, FIFOs and sockets are left out. rel names
 * the directory for messages. */
static int wd_copy_dir(struct wd_copy *w, int sfd, int dfd, const char *rel, int depth)
{
	if (depth > 64)
		return wd_fail(w, -ELOOP, "nests deeper than 64 directories at", rel);
	const int lfd = dup(sfd);
	DIR *d = lfd >= 0 ? fdopendir(lfd) : NULL;
	if (!d) {
		if (lfd >= 0)
			close(lfd);
		return wd_fail(w, -errno, "cannot read", rel);
	}
	int rc = 0;
	struct dirent *e;
	while (rc == 0 && (e = readdir(d))) {
		const char *n = e->d_name;
		if (!strcmp(n, ".") || !strcmp(n, ".."))
			continue;
		char sub[PATH_MAX];
		snprintf(sub, sizeof(sub), "%s/%s", rel, n);
		struct stat sb;
		if (fstatat(sfd, n, &sb, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno != ENOENT)   /* removed meanwhile: by a process outside the job */
				rc = wd_fail(w, -errno, "cannot stat", sub);
			continue;
		}
		struct timespec ts[2] = { sb.st_atim, sb.st_mtim };
		if (S_ISLNK(sb.st_mode)) {
			char target[PATH_MAX];
			const ssize_t l = readlinkat(sfd, n, target, sizeof(target) - 1);
			if (l < 0) {
				rc = wd_fail(w, -errno, "cannot read the symlink", sub);
				continue;
			}
			target[l] = 0;
			if (symlinkat(target, dfd, n) < 0)
				rc = wd_fail(w, -errno, "cannot copy the symlink", sub);
			else
				utimensat(dfd, n, ts, AT_SYMLINK_NOFOLLOW);
		} else if (S_ISDIR(sb.st_mode)) {
			const int s2 = openat(sfd, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			const int m = s2 >= 0 && mkdirat(dfd, n, 0700) == 0 ? 0 : -errno;
			const int d2 = m == 0 ? openat(dfd, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
			if (d2 < 0)
				rc = wd_fail(w, m ? m : -errno, "cannot copy the directory", sub);
			else
				rc = wd_copy_dir(w, s2, d2, sub, depth + 1);
			if (rc == 0 && (fchmod(d2, sb.st_mode & 07777) < 0 || futimens(d2, ts) < 0))
				rc = wd_fail(w, -errno, "cannot copy the mode of", sub);
			if (s2 >= 0)
				close(s2);
			if (d2 >= 0)
				close(d2);
		} else if (S_ISREG(sb.st_mode)) {
			if ((uint64_t)sb.st_size > w->left) {
				rc = wd_fail(w, 0, "grew past --workdir-limit at", sub);
				continue;
			}
			w->left -= (uint64_t)sb.st_size;
			const int in = openat(sfd, n, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
			const int out = in >= 0 ? openat(dfd, n, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)
						: -1;
			struct stat ib;
			if (in < 0 || out < 0)
				rc = wd_fail(w, -errno, "cannot copy", sub);
			else if (fstat(in, &ib) < 0 || !S_ISREG(ib.st_mode))
				rc = wd_fail(w, -EAGAIN, "changed while it was copied:", sub);
			else if ((rc = wd_copy_data(in, out, (uint64_t)ib.st_size)) < 0)
				rc = wd_fail(w, rc, "cannot copy", sub);
			else if (fchmod(out, sb.st_mode & 07777) < 0 || futimens(out, ts) < 0)
				rc = wd_fail(w, -errno, "cannot copy the mode of", sub);
			if (in >= 0)
				close(in);
			if (out >= 0 && close(out) < 0 && rc == 0)
				rc = wd_fail(w, -errno, "cannot copy", sub);
		}
	}
	closedir(d);
	return rc;
}

static int wd_measure_dir(int fd, uint64_t limit, uint64_t *bytes, const char *top, int depth)
{
	if (depth > 64)
		return crest_errx(-ELOOP, "--workdir %s nests deeper than 64 directories", top);
	const int lfd = dup(fd);
	DIR *d = lfd >= 0 ? fdopendir(lfd) : NULL;
	if (!d) {
		if (lfd >= 0)
			close(lfd);
		return crest_errf(-errno, "cannot read --workdir %s", top);
	}
	int rc = 0;
	struct dirent *e;
	while (rc == 0 && (e = readdir(d))) {
		struct stat sb;
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
		    fstatat(fd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (S_ISREG(sb.st_mode))
			*bytes += (uint64_t)sb.st_size;
		if (*bytes > limit) {
			char b1[32], b2[32];
			rc = crest_errx(-EFBIG, "--workdir %s holds more than %s (at least %s): over "
					"--workdir-limit; nothing was frozen", top, fmt_bytes(limit, b1, sizeof(b1)),
					fmt_bytes(*bytes, b2, sizeof(b2)));
		} else if (S_ISDIR(sb.st_mode)) {
			const int sub = openat(fd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub >= 0) {
				rc = wd_measure_dir(sub, limit, bytes, top, depth + 1);
				close(sub);
			}
		}
	}
	closedir(d);
	return rc;
}

/* dir as the job sees it (through /proc/PID/root); name: DIR, for messages. */
static int wd_measure(const char *dir, const char *name, uint64_t limit, uint64_t *bytes)
{
	*bytes = 0;
	const int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return crest_errf(-errno, "cannot open --workdir %s%s", name,
				  errno == ELOOP || errno == ENOTDIR ? " (it must be a directory, not a symlink)" : "");
	const int rc = wd_measure_dir(fd, limit, bytes, name, 0);
	close(fd);
	return rc;
}

/* In the hook: files_dir/workdir ("LIMIT PATH") copied into files_dir/wd.
 * A failure writes its reason to files_dir/wd.err and fails the dump: the
 * job runs on (--leave-running), and crest says why. */
static int wd_hook(const char *files_dir)
{
	char path[PATH_MAX + 32], line[PATH_MAX + 32];
	snprintf(path, sizeof(path), "%s/workdir", files_dir);
	FILE *f = fopen(path, "re");
	if (!f)
		return errno == ENOENT ? 0 : 1;
	const bool ok = fgets(line, sizeof(line), f) != NULL;
	fclose(f);
	unsigned long long limit = 0;
	int at = 0;
	if (!ok || sscanf(line, "%llu %n", &limit, &at) != 1 || !at)
		return 1;
	struct wd_copy w = { .left = limit, .top = line + at };
	snprintf(path, sizeof(path), "%s/wd", files_dir);
	const int sfd = open(w.top, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int rc = sfd < 0 ? wd_fail(&w, -errno, "cannot open", "") : 0;
	struct stat sb;
	if (rc == 0 && (fstat(sfd, &sb) < 0 || mkdir(path, 0700) < 0))
		rc = wd_fail(&w, -errno, "cannot copy", "");
	const int dfd = rc == 0 ? open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
	if (rc == 0 && dfd < 0)
		rc = wd_fail(&w, -errno, "cannot copy", "");
	if (rc == 0)
		rc = wd_copy_dir(&w, sfd, dfd, "", 0);
	if (rc == 0) {
		struct timespec ts[2] = { sb.st_atim, sb.st_mtim };
		fchmod(dfd, sb.st_mode & 07777);
		futimens(dfd, ts);
	}
	if (sfd >= 0)
		close(sfd);
	if (dfd >= 0)
		close(dfd);
	if (rc < 0) {
		snprintf(path, sizeof(path), "%s/wd.err", files_dir);
		FILE *e = fopen(path, "we");
		if (e) {
			fputs(w.err, e);
			fclose(e);
		}
		return 1;
	}
	return 0;
}

/* A restore's: DIR/bind ("SRC\nDST\n", restore/process.c) bound over DST in
 * the restored tree's mount namespace (its init: CRTOOLS_INIT_PID), once
 * CRIU has restored the tree and before it resumes. No file: nothing
 * to do. A failure fails the restore (and says why on stderr, which goes
 * to CRIU's log). */
static int bind_hook(const char *dir)
{
	char path[PATH_MAX + 16], src[PATH_MAX + 2], dst[PATH_MAX + 2];
	snprintf(path, sizeof(path), "%s/bind", dir);
	FILE *f = fopen(path, "re");
	if (!f)
		return errno == ENOENT ? 0 : 1;
	const bool ok = fgets(src, sizeof(src), f) && fgets(dst, sizeof(dst), f);
	fclose(f);
	const char *init = getenv("CRTOOLS_INIT_PID");
	long pid = init ? strtol(init, NULL, 10) : 0;
	if (!ok || pid <= 0)
		return 1;
	src[strcspn(src, "\n")] = 0;
	dst[strcspn(dst, "\n")] = 0;
	if (pidns_bind_over((pid_t)pid, src, dst) < 0) {
		fprintf(stderr, "crest: %s\n", crest_errmsg());
		return 1;
	}
	return 0;
}

int tp_hook_main(int argc, char **argv)
{
	const char *action = getenv("CRTOOLS_SCRIPT_ACTION");
	if (argc != 3 || !action)
		return 2;
	if (!strcmp(action, "post-restore"))
		return bind_hook(argv[1]);
	if (strcmp(action, "post-dump"))
		return 0;
	unsigned long long limit = strtoull(argv[2], NULL, 10);
	char path[PATH_MAX + 32], line[PATH_MAX + 2], dst[PATH_MAX + 32];
	snprintf(path, sizeof(path), "%s/list", argv[1]);
	FILE *list = fopen(path, "re");
	if (!list)
		return 1;
	snprintf(path, sizeof(path), "%s/sizes", argv[1]);
	FILE *sizes = fopen(path, "we");
	if (!sizes) {
		fclose(list);
		return 1;
	}
	for (size_t i = 0; fgets(line, sizeof(line), list); i++) {
		line[strcspn(line, "\n")] = 0;
		snprintf(dst, sizeof(dst), "%s/%zu.data", argv[1], i);
		uint64_t size = 0;
		unsigned long long dev, ino;
		int at = 0;
		/* A file the hook cannot read, or that is no longer the job's,
		 * is left out, not a failed dump: crest restore then leaves that
		 * file alone. */
		if (sscanf(line, "%llu %llu %n", &dev, &ino, &at) == 2 && at &&
		    copy_prefix(line + at, dev, ino, dst, limit, &size) == 0)
			fprintf(sizes, "%zu %llu\n", i, (unsigned long long)size);
		else
			unlink(dst);
	}
	fclose(list);
	if (fclose(sizes) != 0)
		return 1;
	return wd_hook(argv[1]);
}

int tp_checkpoint(struct cas_store *store, struct engine *e, const struct tp_opts *o, const char *tag,
		  const uint8_t *parent, const struct tp_hooks *h, struct tp_result *st)
{
	static const struct tp_hooks none;
	if (!h)
		h = &none;
	const char *watch = st->watch_path;
	memset(st, 0, sizeof(*st));
	st->watch_path = watch;
	/* The parent's chunk lists let unchanged pages skip the index. */
	struct cas_manifest *pm = NULL;
	if (parent && cas_manifest_load(store, parent, &pm) < 0)
		pm = NULL;
	crest_errset_str("");
	/* Streamed, the snapshot takes the images as CRIU dumps: begun first.
	 * CREST_CHECKPOINT_IMAGES=stream|files sets the default, as
	 * CREST_RESTORE_IMAGES does a restore's; --stage-images is files. */
	struct engine_snap *s = NULL;
	int rc = 0;
	const char *how = getenv("CREST_CHECKPOINT_IMAGES");
	const bool stream = !o->stage_images && !(how && !strcmp(how, "files"));
	if (how && *how && strcmp(how, "stream") && strcmp(how, "files")) {
		cas_manifest_free(pm);
		return crest_errx(-EINVAL, "CREST_CHECKPOINT_IMAGES is '%s': it must be 'stream' (the default) or "
				  "'files'; nothing was frozen, and pid %d runs on", how, (int)o->pid);
	}
	if (stream) {
		rc = snap_begin(e, tag, pm ? parent : NULL, pm, &s);
		pm = NULL;
		if (rc < 0) {
			crest_errctx(rc, "nothing was frozen, and pid %d runs on", (int)o->pid);
			return rc;
		}
	}
	struct tp_capture cap;
	rc = tp_capture_run(o, s, &cap);
	if (rc < 0) {
		if (s)
			engine_snapshot_abort(s);
		cas_manifest_free(pm);
		return rc;
	}
	st->stall_ns = cap.stall_ns;
	st->gpu_lock_ns = cap.gpu_lock_ns;
	st->gpu_ckpt_ns = cap.gpu_ckpt_ns;
	st->dump_ns = cap.dump_ns;
	st->gpu_resume_ns = cap.gpu_resume_ns;
	st->shim_procs = cap.shim.n;
	st->shim_comms = cap.shim_st.ncomm;
	for (size_t i = 0; i < cap.shim.n; i++)
		st->shim_peers += cap.shim.v[i].ctl->npeer;
	st->shim_release_ns = cap.shim_st.ns;
	st->shim_rebuild_ns = cap.shim_rebuild_ns;
	for (size_t i = 0; watch && i < cap.files.n; i++)
		if (!strcmp(cap.files.v[i].path, watch))
			st->watch_size = cap.files.v[i].size;
	if (h->resumed)
		h->resumed(h->arg, o, &cap);

	if (!s) {
		rc = snap_begin(e, tag, pm ? parent : NULL, pm, &s);
		pm = NULL;
	}
	if (rc == 0)
		rc = tp_capture_ingest(s, &cap, o->branch);
	if (rc == 0) {
		if (h->ingesting)
			h->ingesting(h->arg, s);
		rc = engine_snapshot_wait(s, &st->r);
		memcpy(st->id, st->r.id, 32);
	}
	/* A job the driver did not give back after the dump (cap.stranded)
	 * can never run again: it is ended once its snapshot is committed, or
	 * at once, its images kept on tmpfs, when the store failed. */
	if (cap.stranded[0]) {
		char why[1024], kept[PATH_MAX + 16], hex[65];
		crest_errcpy(why, sizeof(why));
		tp_capture_strand(&cap, rc < 0 && !cap.streamed, kept, sizeof(kept));
		for (int i = 0; i < 32; i++)
			snprintf(hex + 2 * i, 3, "%02x", st->id[i]);
		const char *what = cap.stranded_nccl ? "NCCL communicators could not be made again"
						     : "GPU state could not be brought back";
		if (rc == 0)
			rc = crest_errx(-EIO, "%s: the job's %s after its dump, so it could never run again: crest "
					"ended the job (pid %d) once its snapshot %.12s was stored, which keeps its images "
					"(crest restore %.12s%s)", cap.stranded, what, (int)o->pid, hex, hex,
					cap.stranded_nccl ? "" : "; the driver may refuse that restore too, as it does for "
								 "a process on several GPUs with peer access");
		else
			rc = crest_errx(rc, "%s: the job's %s after its dump, so it could never run again: crest "
					"ended the job (pid %d); its snapshot was not stored (%s), and its images are %s%s",
					cap.stranded, what, (int)o->pid, why, kept[0] ? "kept in " : "lost",
					kept[0] ? kept : "");
		tp_capture_free(&cap);
		return rc;
	}
	/* --kill: the job ends only now that its snapshot is committed; if it
	 * was not, the job runs on (its images alone would be lost with the
	 * tmpfs, and a job to restore by hand helps nobody). */
	if (o->kill && rc == 0) {
		rc = tp_capture_kill(&cap);
		if (rc < 0)
			crest_errctx(rc, "snapshot stored, but the job was not ended");
	} else if (o->kill) {
		char why[1024];
		crest_errcpy(why, sizeof(why));
		const int rrc = tp_capture_resume(&cap);
		if (rrc < 0) {
			/* The driver did not give the job back: it can never run
			 * again. Ended, its images kept (the only copy). */
			char msg[1024], kept[PATH_MAX + 16];
			crest_errcpy(msg, sizeof(msg));
			tp_capture_strand(&cap, !cap.streamed, kept, sizeof(kept));
			crest_errx(rc, "nothing stored (%s), and then %s: the job could never run again, so crest ended "
				   "it (pid %d); its images are %s%s", why, msg, (int)o->pid, kept[0] ? "kept in " : "lost",
				   kept);
		} else
			crest_errx(rc, "%s; nothing was stored, so pid %d was not ended (--kill): it runs on",
				   why, (int)o->pid);
	}
	tp_capture_free(&cap);
	return rc;
}
