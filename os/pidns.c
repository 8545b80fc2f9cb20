/* pidns.c - a job in a pid namespace of its own; see pidns.h. */
#include "os/pidns.h"
#include "os/proc.h"
#include "util/err.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const int forwarded[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 };
#define NFORWARDED (sizeof(forwarded) / sizeof(forwarded[0]))

/* The init's job, as the namespace sees it (2). Restored with the init's
 * memory by CRIU, and the same in a copy, since pids inside are kept. */
static volatile pid_t init_job;

static void init_forward(int sig)
{
	if (init_job > 0)
		kill(init_job, sig);
}

static int status_code(int st)
{
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int pidns_init_main(char *const argv[])
{
	if (getpid() != 1 || !argv[0]) {
		dprintf(2, "crest: __pidns-init is crest run's own, not a command\n");
		return 2;
	}
	/* CRIU wants the root of a tree it dumps to lead its own session; and
	 * the job is then out of the caller's terminal job control. */
	setsid();
	prctl(PR_SET_NAME, "crest-init", 0, 0, 0);   /* in ps, and the snapshot's comm */
	sigset_t all, none;
	sigfillset(&all);
	sigemptyset(&none);
	sigprocmask(SIG_BLOCK, &all, NULL);
	const pid_t job = fork();
	if (job < 0) {
		dprintf(2, "crest: cannot start %s: %s\n", argv[0], strerror(errno));
		_exit(126);
	}
	if (job == 0) {
		for (size_t i = 0; i < NFORWARDED; i++)
			signal(forwarded[i], SIG_DFL);
		sigprocmask(SIG_SETMASK, &none, NULL);
		execvp(argv[0], argv);
		const int err = errno;
		dprintf(2, "crest: cannot run %s: %s\n", argv[0], strerror(err));
		_exit(err == ENOENT ? 127 : 126);
	}
	init_job = job;
	struct sigaction sa = { .sa_handler = init_forward, .sa_flags = SA_RESTART };
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < NFORWARDED; i++)
		sigaction(forwarded[i], &sa, NULL);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (;;) {
		int st;
		const pid_t p = waitpid(-1, &st, 0);
		if (p < 0 && errno == EINTR)
			continue;
		if (p < 0)
			_exit(126);   /* no child left: cannot happen while the job runs */
		if (p == job)
			_exit(status_code(st));
	}
}

/* In the new namespaces, as their pid 1: their own /proc, then the init
 * (pidns_init_main) by exec of the caller's program, found by name here.
 * Exec, because what a fork maps (crest and its libraries) lies on the
 * host's mounts, which CRIU cannot find in this namespace; found here,
 * its copy lies on this namespace's. Never returns. */
static void init_exec(const char *self, char *const argv[])
{
	/* The namespace's own /proc, for what looks itself up there by the pid
	 * it has inside (the CUDA driver does). Mounts made here stay here
	 * (private), and the host's /proc goes with its submounts, so that
	 * CRIU finds one plain proc mount over the host's file systems. */
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 || umount2("/proc", MNT_DETACH) < 0 ||
	    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0) {
		dprintf(2, "crest: cannot give %s a /proc of its own: %s\n", argv[0], strerror(errno));
		_exit(126);
	}
	size_t n = 0;
	while (argv[n])
		n++;
	char **v = calloc(n + 3, sizeof(*v));
	if (v) {
		v[0] = (char *)self;
		v[1] = "__pidns-init";
		memcpy(v + 2, argv, (n + 1) * sizeof(*v));
		execv(self, v);
	}
	dprintf(2, "crest: cannot start the init of %s (%s): %s\n", argv[0], self, strerror(errno));
	_exit(126);
}

int pidns_spawn(char *const argv[], mode_t job_umask, struct pidns_job *j)
{
	j->init = j->helper = -1;
	char self[PATH_MAX];
	const ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (sl <= 0 || (size_t)sl >= sizeof(self) - 1)
		return crest_errf(-errno, "cannot start %s: crest cannot find its own program", argv[0]);
	self[sl] = 0;
	int pfd[2];
	if (pipe2(pfd, O_CLOEXEC) < 0)
		return crest_errf(-errno, "cannot start %s", argv[0]);
	fflush(NULL);   /* nothing buffered is written twice by the children */
	const pid_t h = fork();
	if (h < 0) {
		const int err = -errno;
		close(pfd[0]);
		close(pfd[1]);
		return crest_errf(err, "cannot start %s", argv[0]);
	}
	if (h == 0) {
		/* The helper: the new namespaces are for its children (the
		 * pid one) and itself (the mount one), so crest and the criu
		 * it runs stay in the host's. */
		close(pfd[0]);
		pid_t init = -errno;
		if (unshare(CLONE_NEWPID | CLONE_NEWNS) < 0) {
			init = -errno;
		} else {
			init = fork();
			if (init == 0) {
				close(pfd[1]);
				/* Only the job's stdio goes into the namespace:
				 * whatever else crest holds would be dumped too. */
				close_range(3, ~0u, 0);
				umask(job_umask);
				init_exec(self, argv);
			}
			if (init < 0)
				init = -errno;
		}
		if (write(pfd[1], &init, sizeof(init)) != (ssize_t)sizeof(init) || init < 0)
			_exit(126);
		close(pfd[1]);
		int st;
		while (waitpid(init, &st, 0) < 0)
			if (errno != EINTR)
				_exit(126);
		_exit(status_code(st));
	}
	close(pfd[1]);
	pid_t init = 0;
	ssize_t r;
	while ((r = read(pfd[0], &init, sizeof(init))) < 0 && errno == EINTR)
		;
	close(pfd[0]);
	if (r != (ssize_t)sizeof(init) || init <= 0) {
		waitpid(h, NULL, 0);
		const int err = r == (ssize_t)sizeof(init) && init < 0 ? init : -EIO;
		return crest_errf(err, "cannot start %s in a pid namespace of its own%s", argv[0],
				  err == -EPERM ? " (it needs root: CAP_SYS_ADMIN)" : "");
	}
	j->helper = h;
	j->init = init;
	return 0;
}

int pidns_wait(struct pidns_job *j, int64_t timeout_ns, int *status)
{
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int st;
		const pid_t p = waitpid(j->helper, &st, WNOHANG);
		if (p == j->helper) {
			*status = status_code(st);
			j->helper = j->init = -1;
			return 1;
		}
		if (p < 0 && errno != EINTR)
			return crest_errf(-errno, "waiting for the job (pid %d)", (int)j->init);
		struct timespec now;
		clock_gettime(CLOCK_MONOTONIC, &now);
		const int64_t ns = (int64_t)(now.tv_sec - t0.tv_sec) * 1000000000 + (now.tv_nsec - t0.tv_nsec);
		if (timeout_ns >= 0 && ns >= timeout_ns)
			return 0;
		struct timespec ts = { 0, 20 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
}

const int *pidns_forwarded(size_t *n)
{
	*n = NFORWARDED;
	return forwarded;
}

void pidns_signal(const struct pidns_job *j, int sig)
{
	if (j->init > 0)
		kill(j->init, sig);
}

static int ns_ino(const char *path, uint64_t *ino)
{
	struct stat sb;
	if (stat(path, &sb) < 0)
		return -errno;
	*ino = (uint64_t)sb.st_ino;
	return 0;
}

/* The NSpid line of pid's status: its pid in each namespace, outermost
 * first. *last is the innermost; *levels how many namespaces it is in.
 * -ESRCH when pid is gone, -ENOENT when the line is not there. */
static int nspid(pid_t pid, pid_t *last, int *levels)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return -ESRCH;
	int rc = -ENOENT;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "NSpid:", 6))
			continue;
		*levels = 0;
		for (const char *p = strchr(line, '\t'); p; p = strchr(p + 1, '\t')) {
			*last = (pid_t)atoi(p + 1);
			++*levels;
		}
		rc = *levels && *last > 0 ? 0 : -ENOENT;
		break;
	}
	fclose(f);
	return rc;
}

int pidns_init_of(pid_t pid, uint64_t *ino)
{
	char path[64];
	pid_t last = 0;
	int levels = 0;
	/* The init of the innermost of two or more namespaces: "... 1". */
	const int rc = nspid(pid, &last, &levels);
	if (rc == -ESRCH)
		return rc;
	uint64_t mine = 0, theirs = 0;
	snprintf(path, sizeof(path), "/proc/%d/ns/pid", (int)pid);
	if (levels < 2 || last != 1 || ns_ino("/proc/self/ns/pid", &mine) < 0)
		return 0;
	if (ns_ino(path, &theirs) < 0)
		return -ESRCH;
	if (theirs == mine)
		return 0;
	*ino = theirs;
	return 1;
}

bool pidns_holds(pid_t pid, uint64_t ino)
{
	char path[64];
	uint64_t have = 0;
	snprintf(path, sizeof(path), "/proc/%d/ns/pid", (int)pid);
	return ns_ino(path, &have) == 0 && have == ino;
}

int pidns_inner_pid(pid_t pid, pid_t *inner)
{
	int levels;
	return nspid(pid, inner, &levels) < 0 ? -ESRCH : 0;
}

int pidns_host_pids(pid_t init, const pid_t *inner, size_t n, pid_t *host)
{
	char path[64];
	uint64_t ns = 0;
	snprintf(path, sizeof(path), "/proc/%d/ns/pid", (int)init);
	if (ns_ino(path, &ns) < 0)
		return crest_errx(-ESRCH, "no process with pid %d", (int)init);
	struct proc_tree t;
	int rc = proc_tree_get(init, &t);
	if (rc < 0)
		return rc;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		host[i] = 0;
		for (size_t k = 0; k < t.n && !host[i]; k++) {
			pid_t in;
			if (pidns_holds(t.pids[k], ns) && pidns_inner_pid(t.pids[k], &in) == 0 && in == inner[i])
				host[i] = t.pids[k];
		}
		if (!host[i])
			rc = crest_errx(-ESRCH, "no process is pid %d in the pid namespace of pid %d", (int)inner[i],
					(int)init);
	}
	proc_tree_free(&t);
	return rc;
}

int pidns_bind_over(pid_t pid, const char *src, const char *dst)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/ns/mnt", (int)pid);
	const int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return crest_errf(-errno, "cannot open the mount namespace of pid %d", (int)pid);
	const int rc = setns(fd, CLONE_NEWNS) < 0 ? -errno : 0;
	close(fd);
	if (rc < 0)
		return crest_errf(rc, "cannot enter the mount namespace of pid %d", (int)pid);
	if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) < 0)
		return crest_errf(-errno, "cannot mount %s over %s for pid %d", src, dst, (int)pid);
	return 0;
}
