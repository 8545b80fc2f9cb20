/* criu.c - CRIU's command line; see criu.h. */
#include "os/criu.h"
#include "util/err.h"
#include "util/fault.h"
#include "util/progress.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/user.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <dirent.h>
#include <unistd.h>

extern char **environ;

#ifndef CREST_SOURCE_DIR
#define CREST_SOURCE_DIR "."
#endif

/* How long criu may go on after the process it dumps has ended. criu 4.1.1
 * was seen (transparent.exit_during, now and then) to report the task
 * "killed by 9 unexpectedly" and then wait on a futex for ever: crest, and
 * the job's supervisor behind it, must not hang with it. */
#define CRIU_GRACE_MS 10000

static int pidfd_of(pid_t pid)
{
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

/* The key a tree's own network namespace is dumped under and handed back. */
#define CRIU_NET_KEY "crest-net"

/* In a network namespace just made: its loopback up, as a host's is. */
static int loopback_up(void)
{
	const int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -1;
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	int rc = ioctl(s, SIOCGIFFLAGS, &ifr);
	if (rc == 0) {
		ifr.ifr_flags |= IFF_UP;
		rc = ioctl(s, SIOCSIFFLAGS, &ifr);
	}
	close(s);
	return rc;
}

/* fd as target, open across an exec: dup3 refuses fd == target. */
static void fd_onto(long fd, int target)
{
	if (fd == target)
		syscall(SYS_fcntl, fd, F_SETFD, 0);
	else
		syscall(SYS_dup3, fd, target, 0);
}

/* The child of run_wait, up to the exec of argv. crest has other threads
 * at the fork (RocksDB's, the engine's), and a lock one of them held then
 * is held for ever in the child: an interposed libc call (a sanitizer's, a
 * preloaded library's) that takes such a lock would wait for good, and
 * crest in its wait for criu with it. So only system calls, made raw. */
static void __attribute__((noreturn)) child_exec(char *const argv[], char *const envp[], const char *out_path,
						  const int *keep, size_t nkeep, int net_fd)
{
	const long fd = syscall(SYS_openat, AT_FDCWD, out_path ? out_path : "/dev/null",
				O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	const long nul = syscall(SYS_openat, AT_FDCWD, "/dev/null", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		fd_onto(fd, 1);
		fd_onto(fd, 2);
	}
	if (nul >= 0)
		fd_onto(nul, 0);
	/* Descriptors criu is to hand on (--inherit-fd): open across the
	 * exec, in this child only. */
	for (size_t i = 0; i < nkeep; i++)
		syscall(SYS_fcntl, keep[i], F_SETFD, 0);
	if (net_fd >= 0 && syscall(SYS_setns, net_fd, CLONE_NEWNET) < 0)
		syscall(SYS_exit_group, 126);
	syscall(SYS_execve, argv[0], argv, envp);
	syscall(SYS_exit_group, 127);
	__builtin_unreachable();
}

/* Runs argv; stdout+stderr to out_path (or /dev/null). Returns the exit
 * status, or a negative code when it could not run or died by a signal.
 * With watch > 0, criu is stopped CRIU_GRACE_MS after process watch has
 * ended, if it has not finished by then (-ESRCH). Where pidfds are missing
 * (Linux < 5.3) it is simply waited for. net_fd >= 0: argv runs in that
 * network namespace (exit 126 when it cannot join it). */
static int run_wait(char *const argv[], char *const envp[], const char *out_path, pid_t watch, const int *keep,
		    size_t nkeep, int net_fd, void (*started)(void *, pid_t), void *started_arg)
{
	const int wfd = watch > 0 ? pidfd_of(watch) : -1;
	pid_t pid = fork();
	if (pid < 0) {
		const int err = -errno;
		if (wfd >= 0)
			close(wfd);
		return crest_errf(err, "cannot start %s", argv[0]);
	}
	if (pid == 0)
		child_exec(argv, envp, out_path, keep, nkeep, net_fd);
	if (started)
		started(started_arg, pid);
	const int cfd = wfd >= 0 ? pidfd_of(pid) : -1;
	bool stopped = false, reaped = false;
	int st;
	if (cfd >= 0) {
		/* Both ends watched: criu finishing, or the process ending.
		 * criu is also asked after it every poll: once, under a fault
		 * test with heavy forking, crest was seen in this poll for
		 * good with criu gone, its pidfd never ready. Whatever the
		 * cause, an exit waitpid can see is never missed. */
		bool gone = false;
		uint64_t grace_end = 0;
		for (;;) {
			struct pollfd p[2] = { { .fd = cfd, .events = POLLIN }, { .fd = wfd, .events = POLLIN } };
			const uint64_t now = time_now_ns();
			int ms = 500;
			if (gone && grace_end > now && (grace_end - now) / 1000000 < (uint64_t)ms)
				ms = (int)((grace_end - now) / 1000000) + 1;
			const int n = poll(p, gone ? 1 : 2, ms);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 || p[0].revents)
				break;   /* criu is done (or poll failed: wait below) */
			if (n == 0) {
				const pid_t w = waitpid(pid, &st, WNOHANG);
				if (w == pid) {
					reaped = true;
					break;
				}
				if (w < 0 && errno != EINTR)
					break;   /* no longer a child: the wait below says so */
			}
			if (gone && time_now_ns() >= grace_end) {
				kill(pid, SIGKILL);
				stopped = true;
				break;
			}
			if (!gone && p[1].revents) {
				gone = true;
				grace_end = time_now_ns() + (uint64_t)CRIU_GRACE_MS * 1000000;
			}
		}
		close(cfd);
	}
	if (wfd >= 0)
		close(wfd);
	while (!reaped && waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return crest_errf(-errno, "waiting for %s", argv[0]);
	if (stopped)
		return crest_errx(-ESRCH, "%s had not finished %d s after process %d ended: stopped it",
				  argv[0], CRIU_GRACE_MS / 1000, (int)watch);
	if (WIFSIGNALED(st))
		return crest_errx(-EINTR, "%s was killed by signal %d (%s)", argv[0], WTERMSIG(st),
				  strsignal(WTERMSIG(st)));
	return WEXITSTATUS(st);
}

static int criu_probe(struct criu *c, const char *path)
{
	if (access(path, X_OK) < 0)
		return -ENOENT;
	char out[] = "/tmp/crest-criu-version-XXXXXX";
	int fd = mkstemp(out);
	if (fd < 0)
		return crest_errf(-errno, "cannot create a temporary file");
	close(fd);
	char *argv[] = { (char *)path, "--version", NULL };
	int rc = run_wait(argv, environ, out, 0, NULL, 0, -1, NULL, NULL);
	char buf[256] = "";
	FILE *f = fopen(out, "re");
	if (f) {
		size_t n = fread(buf, 1, sizeof(buf) - 1, f);
		buf[n] = 0;
		fclose(f);
	}
	unlink(out);
	if (rc != 0)
		return crest_errx(-ENOEXEC, "%s does not run (criu --version exited %d)", path, rc);
	const char *v = strstr(buf, "Version:");
	c->major = c->minor = c->sub = 0;
	if (!v || sscanf(v, "Version: %d.%d.%d", &c->major, &c->minor, &c->sub) < 2)
		return crest_errx(-ENOEXEC, "%s did not say its version", path);
	if (c->major < 4)
		return crest_errx(-ENOEXEC, "%s is criu %d.%d; crest needs criu 4 or later "
				  "(scripts/install-criu.sh installs it, CREST_CRIU names another)",
				  path, c->major, c->minor);
	snprintf(c->path, sizeof(c->path), "%s", path);
	/* Asked now, while crest has few threads, rather than at the dump. */
	(void)criu_breakpoints_fire();
	return 0;
}

/* Whether a hardware breakpoint set through ptrace stops a process here.
 *
 * compel, CRIU's code for running its parasite in a task, ends that work
 * (the parasite's cure after a dump; the restorer's last sigreturn after a
 * restore) by setting an execute breakpoint where the task returns and
 * waiting for the trap, with no time limit. Some virtual machines take the
 * debug registers (PTRACE_POKEUSER succeeds) but never raise the trap. Seen
 * on the development VM at kernel 6.18.44-fc-v782: every criu dump and
 * restore, of `sleep` too, then waited in wait4 for good, the task running
 * on under criu's ptrace (os/CRIU-NOTES.md). criu has a switch for that
 * case, the fault code FI_NO_BREAKPOINTS (CRIU_FAULT=130): compel then
 * steps the task to its rt_sigreturn with PTRACE_SYSCALL instead, a few
 * more stops for the same result. Nothing in criu 4.1.1 finds out by
 * itself that the trap never comes, so crest asks the kernel once, in a
 * child it traces: a breakpoint on a function the child then calls must
 * stop it before it exits. A failure anywhere in the probe counts as "no":
 * the way without breakpoints works wherever ptrace does. */
static void __attribute__((noinline)) bp_target(void)
{
	__asm__ volatile("" ::: "memory");
}

static bool hw_breakpoints_fire(void)
{
#if defined(__x86_64__)
	/* Called through this pointer, so that the address that runs is the
	 * one the breakpoint is set on, whatever the compiler makes of it. */
	void (*volatile target)(void) = bp_target;
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return false;
	const pid_t pid = fork();
	if (pid == 0) {
		/* Raw system calls only: see child_exec. Its own copy of the
		 * write end goes first: a crest that dies before it writes
		 * (killed, say) then leaves it an end of file to read, not a
		 * wait for good with crest's descriptors held. */
		syscall(SYS_close, p[1]);
		char go;
		long r;
		while ((r = syscall(SYS_read, p[0], &go, 1)) < 0)
			;
		if (r == 1)
			target();
		syscall(SYS_exit_group, 0);
	}
	close(p[0]);
	if (pid < 0) {
		close(p[1]);
		return false;
	}
	crest_fault_pause("criu.probe");   /* tests only: util/fault.h */
	bool fired = false, reaped = false;
	int st;
	if (ptrace(PTRACE_SEIZE, pid, NULL, NULL) == 0 && ptrace(PTRACE_INTERRUPT, pid, NULL, NULL) == 0 &&
	    waitpid(pid, &st, __WALL) == pid && WIFSTOPPED(st) &&
	    ptrace(PTRACE_POKEUSER, pid, (void *)offsetof(struct user, u_debugreg), (void *)target) == 0 &&
	    ptrace(PTRACE_POKEUSER, pid, (void *)(offsetof(struct user, u_debugreg) + 7 * sizeof(long)),
		   (void *)1L) == 0 &&   /* DR7: L0, an execute breakpoint of DR0 */
	    ptrace(PTRACE_CONT, pid, NULL, NULL) == 0 && write(p[1], "g", 1) == 1 &&
	    waitpid(pid, &st, __WALL) == pid) {
		fired = WIFSTOPPED(st) && WSTOPSIG(st) == SIGTRAP;
		reaped = WIFEXITED(st) || WIFSIGNALED(st);
	}
	close(p[1]);
	/* Not once it is reaped: its pid may be another process's by then. */
	if (!reaped)
		kill(pid, SIGKILL);
	while (!reaped && waitpid(pid, &st, __WALL) < 0 && errno == EINTR)
		;
	return fired;
#else
	return false;   /* elsewhere criu goes without: that way works wherever ptrace does */
#endif
}

bool criu_breakpoints_fire(void)
{
	static atomic_int known;   /* 0: not asked yet, 1: they fire, 2: they do not */
	int k = atomic_load(&known);
	if (k == 0) {
		k = hw_breakpoints_fire() ? 1 : 2;
		atomic_store(&known, k);
	}
	return k == 1;
}

/* criu's environment: crest's, and CRIU_FAULT=130 where breakpoints do not
 * fire (hw_breakpoints_fire), unless the caller set CRIU_FAULT. Made before
 * the fork (child_exec may not allocate). *env is environ itself, or an
 * array to free. */
static int criu_env(char ***env)
{
	*env = environ;
	if (getenv("CRIU_FAULT") || criu_breakpoints_fire())
		return 0;
	size_t n = 0;
	while (environ && environ[n])
		n++;
	char **e = malloc((n + 2) * sizeof(*e));
	if (!e)
		return crest_errf(-ENOMEM, "cannot build criu's environment");
	for (size_t i = 0; i < n; i++)
		e[i] = environ[i];
	e[n] = (char *)"CRIU_FAULT=130";
	e[n + 1] = NULL;
	*env = e;
	return 0;
}

static void criu_env_free(char **env)
{
	if (env != environ)
		free(env);
}

int criu_find(struct criu *c)
{
	const char *env = getenv("CREST_CRIU");
	if (env && *env) {
		int rc = criu_probe(c, env);
		return rc == -ENOENT ? crest_errx(rc, "CREST_CRIU=%s: no such program", env) : rc;
	}
	/* Beside the tree crest runs from: build/cli/crest and .gpu/bin/crest
	 * both sit two levels below the checkout. */
	char exe[PATH_MAX], cand[PATH_MAX + 64];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		exe[n] = 0;
		char *slash = strrchr(exe, '/');
		if (slash) {
			*slash = 0;
			snprintf(cand, sizeof(cand), "%s/../../.deps/criu/criu", exe);
			int rc = criu_probe(c, cand);
			if (rc != -ENOENT)
				return rc;
		}
	}
	snprintf(cand, sizeof(cand), "%s/.deps/criu/criu", CREST_SOURCE_DIR);
	int rc = criu_probe(c, cand);
	if (rc != -ENOENT)
		return rc;
	return crest_errx(-ENOENT, "criu 4 not found: run scripts/install-criu.sh, or set CREST_CRIU "
			  "to a criu 4 program");
}

bool criu_nftables(const struct criu *c)
{
	static char asked[4096];
	static bool known;
	if (strcmp(asked, c->path)) {
		char **env;
		known = false;
		if (criu_env(&env) == 0) {
			char *argv[] = { (char *)c->path, "check", "--feature", "network_lock_nftables", NULL };
			known = run_wait(argv, env, NULL, 0, NULL, 0, -1, NULL, NULL) == 0;
			criu_env_free(env);
		}
		snprintf(asked, sizeof(asked), "%s", c->path);
	}
	return known;
}

bool criu_net_lockable(const struct criu *c)
{
	if (criu_nftables(c))
		return true;
	const char *path = getenv("PATH");
	char dir[PATH_MAX + 32];
	for (const char *p = path ? path : "/usr/sbin:/usr/bin:/sbin:/bin"; *p;) {
		const size_t n = strcspn(p, ":");
		if (n && n < PATH_MAX) {
			snprintf(dir, sizeof(dir), "%.*s/iptables-restore", (int)n, p);
			if (access(dir, X_OK) == 0)
				return true;
		}
		p += n + (p[n] == ':');
	}
	return false;
}

bool criu_dumps_inet(const struct criu *c)
{
	if (c->major > 4 || (c->major == 4 && c->minor >= 2))
		return true;
	struct utsname u;
	int kmaj = 0, kmin = 0;
	if (uname(&u) < 0 || sscanf(u.release, "%d.%d", &kmaj, &kmin) != 2)
		return true;   /* unknown: let criu say */
	return kmaj < 6 || (kmaj == 6 && kmin < 16);
}

/* The lock for a TCP dump or restore: nothing else in a namespace of the
 * tree's own, else nftables where criu has it (else criu's default,
 * iptables, which fails where the host has none: the message says so). */
static const char *net_lock(const struct criu *c, bool own_net)
{
	return own_net ? "skip" : criu_nftables(c) ? "nftables" : NULL;
}

/* The error lines of a criu log, joined, for a message. */
static void log_errors(const char *log, char *buf, size_t cap)
{
	buf[0] = 0;
	FILE *f = fopen(log, "re");
	if (!f)
		return;
	char line[1024];
	size_t used = 0;
	while (fgets(line, sizeof(line), f)) {
		if (!strstr(line, "Error") || strstr(line, "RLIMIT_NOFILE"))
			continue;
		line[strcspn(line, "\n")] = 0;
		const char *msg = strstr(line, "): ");
		msg = msg ? msg + 3 : line;
		int w = snprintf(buf + used, cap - used, "%s%s", used ? "; " : "", msg);
		if (w < 0 || (size_t)w >= cap - used)
			break;
		used += (size_t)w;
	}
	fclose(f);
}

/*
 * What crest can tell from a failed criu's log: a line of it that names a
 * cause, and what to do about it. The first pattern found in the log wins;
 * the table is in the order of how sure a pattern is. CRIU's own lines
 * follow the cause in the message, for the details.
 */
enum { CAUSE_TEXT, CAUSE_NOSPACE };
static const struct criu_cause {
	const char *pattern;
	int err;
	int kind;
	/* When crest itself lacks capability cap (>= 0), nocap is the cause;
	 * else text. */
	int cap;
	const char *nocap, *text;
} criu_causes[] = {
	{ "No space left on device", -ENOSPC, CAUSE_NOSPACE, -1, NULL, NULL },
	/* A client connected to a listening socket of the job after crest
	 * looked at its sockets (capture/transparent.c, check_sockets). */
	{ "Connected TCP socket, consider using", -EAGAIN, CAUSE_TEXT, -1, NULL,
	  "a TCP connection the job did not hold when crest looked at its sockets was there at the freeze "
	  "(a client of a socket it listens on, most likely); the job runs on. --tcp-close takes such "
	  "connections (a restored server finds them closed, and its clients reconnect)" },
	/* criu_dump_opts.ghost_limit: crest passes --file-limit. */
	{ "increase limit", -EFBIG, CAUSE_TEXT, -1, NULL,
	  "the job holds a deleted file (a \"ghost\": NCCL keeps its buffers in one under /dev/shm) larger "
	  "than --file-limit, which bounds what crest stores of such a file too; the job runs on. Raise "
	  "--file-limit above the size criu names" },
	{ "PR_SET_MM", -EPERM, CAUSE_TEXT, 24 /* CAP_SYS_RESOURCE */,
	  "crest runs without CAP_SYS_RESOURCE, and criu needs it to give the restored tasks their memory "
	  "layout (prctl PR_SET_MM); run crest as root with its capabilities (a container: --cap-add "
	  "SYS_RESOURCE)",
	  "criu could not give the restored tasks their memory layout (prctl PR_SET_MM): the kernel "
	  "refused it" },
	{ "CAP_SYS_RESOURCE", -EPERM, CAUSE_TEXT, -1, NULL,
	  "crest runs without CAP_SYS_RESOURCE, which criu needs; run it as root with its capabilities "
	  "(a container: --cap-add SYS_RESOURCE)" },
	{ "CAP_CHECKPOINT_RESTORE", -EPERM, CAUSE_TEXT, -1, NULL,
	  "crest runs without CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE, which criu needs; run it as root "
	  "with its capabilities" },
	/* Without CAP_SYS_ADMIN criu 4.1 fails first probing the kernel. */
	{ "Unable create a network namespace: Operation not permitted", -EPERM, CAUSE_TEXT, 21 /* CAP_SYS_ADMIN */,
	  "crest runs without CAP_SYS_ADMIN, which criu needs (it could not even make a network namespace "
	  "to probe the kernel); run crest as root with its capabilities (a container: --privileged)",
	  "criu could not make a network namespace to probe the kernel (a container or seccomp policy "
	  "forbids it)" },
	{ "Unable to interrupt task", -EPERM, CAUSE_TEXT, 19 /* CAP_SYS_PTRACE */,
	  "crest runs without CAP_SYS_PTRACE, so criu could not stop the job's tasks; run crest as root "
	  "with its capabilities (a container: --cap-add SYS_PTRACE)",
	  "criu could not stop a task of the tree: a kernel thread, or a task another tracer holds "
	  "(a debugger, strace) or that ptrace may not touch (kernel.yama.ptrace_scope)" },
};

/* Whether crest's effective capabilities hold cap (CapEff in
 * /proc/self/status); true when unknown. */
static bool own_cap(int cap)
{
	FILE *f = fopen("/proc/self/status", "re");
	if (!f)
		return true;
	char line[256];
	unsigned long long eff = ~0ull;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "CapEff: %llx", &eff) == 1)
			break;
	fclose(f);
	return (eff >> cap) & 1;
}

/* The bytes the files directly in dir take on disk (criu's images are
 * flat), and its file system's size and free space. */
static void dir_space(const char *dir, uint64_t *used, uint64_t *size, uint64_t *avail)
{
	*used = *size = *avail = 0;
	struct statvfs v;
	if (statvfs(dir, &v) == 0) {
		*size = (uint64_t)v.f_blocks * v.f_frsize;
		*avail = (uint64_t)v.f_bavail * v.f_frsize;
	}
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d))) {
		struct stat sb;
		if (fstatat(dirfd(d), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode))
			*used += (uint64_t)sb.st_blocks * 512;
	}
	closedir(d);
}

/* The resident memory of pid, 0 when unknown: what a dump of it needs at
 * the least. */
static uint64_t resident_bytes(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/statm", (int)pid);
	FILE *f = fopen(path, "re");
	unsigned long long size = 0, res = 0;
	const bool ok = f && fscanf(f, "%llu %llu", &size, &res) == 2;
	if (f)
		fclose(f);
	return ok ? res * (uint64_t)sysconf(_SC_PAGESIZE) : 0;
}

/* Fills buf with a known cause of a failed criu (dir: its images'
 * directory; pid: the job dumped, or 0) and seen with the log's line that
 * told it; returns its errno, or 0 with buf empty when the log names none. */
static int log_cause(const char *log, const char *dir, pid_t pid, char *buf, size_t cap, char *seen,
		     size_t seen_cap)
{
	buf[0] = seen[0] = 0;
	FILE *f = fopen(log, "re");
	if (!f)
		return 0;
	const struct criu_cause *best = NULL;
	char line[1024];
	while (fgets(line, sizeof(line), f))
		for (const struct criu_cause *k = criu_causes; k < criu_causes + sizeof(criu_causes) / sizeof(*k); k++)
			if (strstr(line, k->pattern) && (!best || k < best)) {
				best = k;
				line[strcspn(line, "\n")] = 0;
				const char *msg = strstr(line, "): ");
				snprintf(seen, seen_cap, "%s", msg ? msg + 3 : line);
			}
	fclose(f);
	if (!best)
		return 0;
	if (best->kind == CAUSE_TEXT) {
		snprintf(buf, cap, "%s", best->cap >= 0 && !own_cap(best->cap) ? best->nocap : best->text);
		return best->err;
	}
	uint64_t used, size, avail;
	dir_space(dir, &used, &size, &avail);
	char b1[32], b2[32], b3[32], b4[32];
	const uint64_t need = pid > 0 ? resident_bytes(pid) : 0;
	int w = snprintf(buf, cap, "no space left in %s, the images' directory: its file system holds %s "
			 "(%s free now), and the images had taken %s when it filled", dir,
			 fmt_bytes(size, b1, sizeof(b1)), fmt_bytes(avail, b2, sizeof(b2)),
			 fmt_bytes(used, b3, sizeof(b3)));
	if (w > 0 && (size_t)w < cap && need)
		w += snprintf(buf + w, cap - (size_t)w, "; they need at least the job's resident memory, %s",
			      fmt_bytes(need, b4, sizeof(b4)));
	if (w > 0 && (size_t)w < cap)
		snprintf(buf + w, cap - (size_t)w, "; give --tmpdir a directory with more room");
	return best->err;
}

/* A failed criu's message: the cause crest can tell, else criu's errors. */
/* criu did not exit: a signal ended it (its own abort on one of its BUG()
 * checks, the OOM killer) or crest stopped it. Its log's errors say why,
 * where it wrote any: a BUG names the check that failed. */
static int criu_died(const char *log, const char *what, int rc)
{
	char msg[1024], errs[2048];
	crest_errcpy(msg, sizeof(msg));
	log_errors(log, errs, sizeof(errs));
	if (!errs[0])
		return crest_errx(rc, "%s: %s", what, msg);
	return crest_errx(rc, "%s: %s (criu: %s)", what, msg, errs);
}

static int criu_failed(const char *log, const char *what, const char *dir, pid_t pid, int status)
{
	char errs[2048], cause[1024], seen[1024];
	log_errors(log, errs, sizeof(errs));
	const int err = log_cause(log, dir, pid, cause, sizeof(cause), seen, sizeof(seen));
	if (err)   /* criu's errors after the cause, for the details; else the line that told it */
		return crest_errx(err, "%s failed: %s (criu: %s)", what, cause, errs[0] ? errs : seen);
	return crest_errx(-EIO, "%s failed (exit %d): %s", what, status, errs[0] ? errs : "no error in its log");
}

int criu_dump(const struct criu *c, const struct criu_dump_opts *o)
{
	char pid[32], log[4096];
	snprintf(pid, sizeof(pid), "%d", (int)o->pid);
	if (o->nexternal > 64)
		return crest_errx(-E2BIG, "criu dump of pid %d: %zu external files, at most 64", (int)o->pid,
				  o->nexternal);
	const char *argv[29 + 2 * 64];
	int n = 0;
	argv[n++] = c->path;
	argv[n++] = "dump";
	argv[n++] = "-t";
	argv[n++] = pid;
	argv[n++] = "-D";
	argv[n++] = o->dir;
	argv[n++] = "-o";
	argv[n++] = "dump.log";
	argv[n++] = "--file-locks";
	if (o->stream)
		argv[n++] = "--stream";
	if (o->leave_running)
		argv[n++] = "--leave-running";
	else if (o->leave_stopped)
		argv[n++] = "--leave-stopped";
	if (o->shell_job)
		argv[n++] = "--shell-job";
	if (o->action_script) {
		argv[n++] = "--action-script";
		argv[n++] = o->action_script;
	}
	if (o->mntns) {
		argv[n++] = "--external";
		argv[n++] = "mnt[]";
	}
	char net[64];
	if (o->netns) {
		snprintf(net, sizeof(net), "net[%llu]:" CRIU_NET_KEY, (unsigned long long)o->netns);
		argv[n++] = "--external";
		argv[n++] = net;
		/* Its loopback only: nothing outside to keep out while it is
		 * dumped, and no iptables to ask. */
		argv[n++] = "--network-lock";
		argv[n++] = "skip";
	}
	if (o->tcp_established || o->tcp_close) {
		argv[n++] = o->tcp_close ? "--tcp-close" : "--tcp-established";
		const char *lock = o->netns ? NULL : net_lock(c, false);   /* a netns: skip, above */
		if (lock) {
			argv[n++] = "--network-lock";
			argv[n++] = lock;
		}
	}
	char ghost[32];
	if (o->ghost_limit) {
		snprintf(ghost, sizeof(ghost), "%llu", (unsigned long long)o->ghost_limit);
		argv[n++] = "--ghost-limit";
		argv[n++] = ghost;
	}
	for (size_t i = 0; i < o->nexternal; i++) {
		argv[n++] = "--external";
		argv[n++] = o->external[i];
	}
	argv[n] = NULL;
	char **env;
	int rc = criu_env(&env);
	if (rc < 0)
		return rc;
	rc = run_wait((char *const *)argv, env, NULL, o->pid, NULL, 0, -1, NULL, NULL);
	criu_env_free(env);
	if (rc == 0)
		return 0;
	char what[64];
	snprintf(log, sizeof(log), "%s/dump.log", o->dir);
	snprintf(what, sizeof(what), "criu dump of pid %d", (int)o->pid);
	if (rc < 0)
		return criu_died(log, what, rc);
	return criu_failed(log, what, o->dir, o->pid, rc);
}

/* A new network namespace, loopback up, as a descriptor: made by a child
 * that lives until the namespace is opened (the descriptor keeps it). */
static int net_new(void)
{
	int pfd[2];
	if (pipe2(pfd, O_CLOEXEC) < 0)
		return crest_errf(-errno, "cannot make a network namespace for the restore");
	const pid_t p = fork();
	if (p == 0) {
		char ok = unshare(CLONE_NEWNET) == 0 && loopback_up() == 0;
		if (write(pfd[1], &ok, 1) != 1 || !ok)
			_exit(1);
		for (;;)
			pause();   /* until the parent has the namespace and kills it */
	}
	if (p < 0) {
		const int rc = crest_errf(-errno, "cannot make a network namespace for the restore");
		close(pfd[0]);
		close(pfd[1]);
		return rc;
	}
	char ok = 0, path[64];
	int fd = -1;
	if (read(pfd[0], &ok, 1) == 1 && ok) {
		snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)p);
		fd = open(path, O_RDONLY | O_CLOEXEC);
	}
	const int err = errno;
	close(pfd[1]);
	close(pfd[0]);
	kill(p, SIGKILL);
	waitpid(p, NULL, 0);
	if (fd < 0)
		return crest_errx(ok ? -err : -EPERM, "cannot make a network namespace for the restore%s",
				  ok ? "" : " (it needs root: CAP_SYS_ADMIN)");
	return fd;
}

static void pidfile_path(const char *dir, char *out, size_t cap)
{
	snprintf(out, cap, "%s/restored.pid", dir);
}

bool criu_restored(const char *dir)
{
	char path[PATH_MAX + 32];
	pidfile_path(dir, path, sizeof(path));
	return access(path, F_OK) == 0;
}

int criu_restored_pid(const char *dir, pid_t *out)
{
	char path[PATH_MAX + 32];
	pidfile_path(dir, path, sizeof(path));
	FILE *f = fopen(path, "re");
	long p = 0;
	const bool ok = f && fscanf(f, "%ld", &p) == 1 && p > 0 && p <= INT32_MAX;
	if (f)
		fclose(f);
	*out = ok ? (pid_t)p : 0;
	return ok ? 0 : crest_errx(-EINVAL, "no pid in %s", path);
}

int criu_restore(const struct criu *c, const struct criu_restore_opts *o)
{
	char log[4096], pidfile[PATH_MAX + 32];
	pidfile_path(o->dir, pidfile, sizeof(pidfile));
	unlink(pidfile);
	if (o->ninherit > 64)
		return crest_errx(-E2BIG, "criu restore: %zu files to hand on, at most 64", o->ninherit);
	const char *argv[28 + 2 * 65];
	char inh[65][PATH_MAX + 32];
	int keep[65];
	size_t nkeep = 0;
	int n = 0;
	argv[n++] = c->path;
	argv[n++] = "restore";
	argv[n++] = "-D";
	argv[n++] = o->dir;
	argv[n++] = "-d";
	argv[n++] = "-o";
	argv[n++] = "restore.log";
	argv[n++] = "--file-locks";
	argv[n++] = "--pidfile";
	argv[n++] = pidfile;
	if (o->shell_job)
		argv[n++] = "--shell-job";
	if (o->stream)
		argv[n++] = "--stream";
	if (o->tcp_established || o->tcp_close) {
		argv[n++] = o->tcp_close ? "--tcp-close" : "--tcp-established";
		const char *lock = net_lock(c, o->new_net || o->net_external);
		if (lock) {
			argv[n++] = "--network-lock";
			argv[n++] = lock;
		}
	}
	if (o->action_script) {
		argv[n++] = "--action-script";
		argv[n++] = o->action_script;
	}
	if (o->mntns) {
		/* The mounts dumped as external are the host's own: bound back
		 * from where they are, under the host's root. */
		argv[n++] = "--ext-mount-map";
		argv[n++] = "auto";
		argv[n++] = "--root";
		argv[n++] = "/";
	}
	for (size_t i = 0; i < o->ninherit; i++) {
		const char *p = o->inherit[i].key ? o->inherit[i].key : o->inherit[i].path;
		while (*p == '/')
			p++;
		if (snprintf(inh[i], sizeof(inh[i]), "fd[%d]:%s", o->inherit[i].fd, p) >= (int)sizeof(inh[i]))
			return crest_errx(-ENAMETOOLONG, "criu restore: path too long: %s", p);
		keep[nkeep++] = o->inherit[i].fd;
		argv[n++] = "--inherit-fd";
		argv[n++] = inh[i];
	}
	char **env;
	int rc = criu_env(&env);
	if (rc < 0)
		return rc;
	/* A namespace of its own: CRIU runs in it, and a tree dumped with one
	 * named external joins it by key; either way the tree comes back in it. */
	const int net_fd = o->new_net || o->net_external ? net_new() : -1;
	if ((o->new_net || o->net_external) && net_fd < 0) {
		criu_env_free(env);
		return net_fd;
	}
	if (o->net_external) {
		snprintf(inh[nkeep], sizeof(inh[nkeep]), "fd[%d]:" CRIU_NET_KEY, net_fd);
		argv[n++] = "--inherit-fd";
		argv[n++] = inh[nkeep];
		keep[nkeep++] = net_fd;
	}
	argv[n] = NULL;
	rc = run_wait((char *const *)argv, env, NULL, 0, keep, nkeep, net_fd, o->started, o->started_arg);
	criu_env_free(env);
	if (net_fd >= 0)
		close(net_fd);
	if (rc != 0) {
		snprintf(log, sizeof(log), "%s/restore.log", o->dir);
		if (rc < 0)
			return criu_died(log, "criu restore", rc);
		return criu_failed(log, "criu restore", o->dir, 0, rc);
	}
	if (o->pid_out)
		criu_restored_pid(o->dir, o->pid_out);   /* 0 where it holds no pid: callers check */
	return 0;
}
