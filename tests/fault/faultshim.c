/*
 * faultshim.c - an LD_PRELOAD library that makes chosen file-system calls of
 * a process fail, or kills the process at one of them, so that tests can
 * try every place where a store write can go wrong (issue 9).
 *
 * Configuration (read once, at load):
 *
 *   CREST_FAULT="FUNCS:path=SUB:nth=N:errno=E[:sticky]"
 *       FUNCS   one or more of the names below, joined by ',' ("any": all)
 *       path    only calls on a file whose path contains SUB (fd calls: the
 *               path the fd was opened with, made absolute through
 *               /proc/self/fd; path calls: either path); absent: all files
 *       nth     the Nth matching call (counted over FUNCS together, from 1)
 *       errno   EIO, ENOSPC, EDQUOT, EROFS, or a number: the call returns
 *               -1 with that errno and does nothing; or "kill": SIGKILL the
 *               process before the call; "killafter": make the call, then
 *               SIGKILL (what reached the page cache survives, as in a crash
 *               of the process, not of the machine)
 *       sticky  every matching call from the Nth fails, not only the Nth
 *   CREST_FAULT_TRACE=FILE
 *       one line per matching call, appended with O_APPEND as it happens (so
 *       a killed process leaves its trace): "FUNC N PATH", where N is the
 *       call's index among matching calls of FUNC, i.e. the nth to give for
 *       "FUNC:...:nth=N". In this mode CREST_FAULT's path= still filters,
 *       but nothing fails unless nth is given too.
 *   CREST_FAULT_HOLD=SUB:FILE
 *       the first open of a file whose path contains SUB creates FILE and
 *       waits (60 s at most) until FILE is gone, then opens: a test holds a
 *       process between two steps of a library it cannot otherwise pause
 *       (a RocksDB read-only open, between sizing a WAL and replaying it)
 *   CREST_FAULT_PROG=NAME[,NAME...]
 *       act only in processes with one of these program names (crest spawns
 *       criu; the shim is inherited but should leave criu's files alone).
 *
 * Interposed: open, open64, openat, openat64, creat, creat64, close (to track
 * fd -> path), and write, writev, pwrite, pwrite64, pwritev, pwritev64,
 * pwritev2, fsync, fdatasync, sync_file_range, ftruncate, ftruncate64,
 * truncate, truncate64, fallocate, fallocate64, posix_fallocate,
 * posix_fallocate64, rename, renameat, renameat2, unlink, unlinkat.
 * RocksDB (librocksdb.so, dynamically linked) and crest both reach these
 * through libc's PLT (nm -D shows them as undefined symbols), so they are all
 * seen. io_uring requests are not: crest's pack writes and early syncs go
 * through util/fault.h's hook instead (CREST_FAULT_SITE), which writes its
 * trace lines to the same CREST_FAULT_TRACE file.
 */
/* Built without _FILE_OFFSET_BITS=64: every name below must define the
 * symbol it names, not its 64-bit alias. */
#undef _FILE_OFFSET_BITS
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

enum fn {
	F_WRITE, F_WRITEV, F_PWRITE, F_PWRITEV, F_FSYNC, F_FDATASYNC, F_SYNC_FILE_RANGE,
	F_FTRUNCATE, F_TRUNCATE, F_FALLOCATE, F_RENAME, F_UNLINK, NFN
};
static const char *const fn_name[NFN] = {
	"write", "writev", "pwrite", "pwritev", "fsync", "fdatasync", "sync_file_range",
	"ftruncate", "truncate", "fallocate", "rename", "unlink",
};

#define MAXFD 65536
static char *fd_path[MAXFD];            /* guarded by fd_lock */
static pthread_mutex_t fd_lock = PTHREAD_MUTEX_INITIALIZER;

static int active;                      /* this process is a target */
static unsigned want_mask;              /* functions the fault applies to */
static char *want_path;                 /* substring, or NULL */
static long want_nth;                   /* 0: no fault */
static int want_errno;                  /* > 0 errno, or the kill modes */
static int want_sticky;
static atomic_long hits;                /* matching calls so far, for nth */
static atomic_long fn_hits[NFN];        /* per function, for the trace */
static int trace_fd = -1;
static char *hold_sub, *hold_file;      /* CREST_FAULT_HOLD */
static atomic_int held;

#define KILL_BEFORE (-1)
#define KILL_AFTER (-2)

/* The real functions, resolved lazily (the constructor of another library
 * may call in before ours ran). */
#define REAL(name) \
	static __typeof__(name) *real_##name; \
	if (!real_##name) \
		real_##name = (__typeof__(name) *)dlsym(RTLD_NEXT, #name)

static void say(const char *msg)
{
	syscall(SYS_write, 2, msg, strlen(msg));
}

static int parse_errno(const char *v)
{
	static const struct { const char *n; int e; } t[] = {
		{ "EIO", EIO }, { "ENOSPC", ENOSPC }, { "EDQUOT", EDQUOT }, { "EROFS", EROFS },
		{ "EINTR", EINTR }, { "kill", KILL_BEFORE }, { "killafter", KILL_AFTER },
	};
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		if (!strcmp(v, t[i].n))
			return t[i].e;
	int n = atoi(v);
	return n > 0 ? n : EIO;
}

static void parse(const char *spec)
{
	char *dup = strdup(spec), *save = NULL;
	if (!dup)
		return;
	char *funcs = strtok_r(dup, ":", &save);
	for (char *f = funcs ? strtok(funcs, ",") : NULL; f; f = strtok(NULL, ",")) {
		if (!strcmp(f, "any")) {
			want_mask = ~0u;
			continue;
		}
		int found = 0;
		for (int i = 0; i < NFN; i++)
			if (!strcmp(f, fn_name[i])) {
				want_mask |= 1u << i;
				found = 1;
			}
		if (!found) {
			say("faultshim: unknown function in CREST_FAULT: ");
			say(f);
			say("\n");
		}
	}
	want_errno = EIO;
	for (char *kv; (kv = strtok_r(NULL, ":", &save));) {
		if (!strncmp(kv, "path=", 5))
			want_path = strdup(kv + 5);
		else if (!strncmp(kv, "nth=", 4))
			want_nth = atol(kv + 4);
		else if (!strncmp(kv, "errno=", 6))
			want_errno = parse_errno(kv + 6);
		else if (!strcmp(kv, "sticky"))
			want_sticky = 1;
	}
	free(dup);
}

__attribute__((constructor)) static void shim_init(void)
{
	const char *prog = getenv("CREST_FAULT_PROG");
	if (prog && *prog) {
		const char *me = program_invocation_short_name, *p = prog;
		const size_t n = strlen(me);
		while (p && !(!strncmp(p, me, n) && (p[n] == ',' || !p[n])))
			p = (p = strchr(p, ',')) ? p + 1 : NULL;
		if (!p)
			return;
	}
	const char *spec = getenv("CREST_FAULT");
	const char *trace = getenv("CREST_FAULT_TRACE");
	if (spec && *spec)
		parse(spec);
	if (trace && *trace)
		trace_fd = (int)syscall(SYS_open, trace, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	const char *hold = getenv("CREST_FAULT_HOLD");
	const char *colon = hold ? strchr(hold, ':') : NULL;
	if (colon && colon > hold && colon[1]) {
		hold_sub = strndup(hold, (size_t)(colon - hold));
		hold_file = strdup(colon + 1);
	}
	active = want_mask || trace_fd >= 0;
}

static void fd_note(int fd)
{
	if (!active || fd < 0 || fd >= MAXFD)
		return;
	char link[64], buf[4096];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, buf, sizeof(buf) - 1);
	char *p = n > 0 ? strndup(buf, (size_t)n) : NULL;
	pthread_mutex_lock(&fd_lock);
	free(fd_path[fd]);
	fd_path[fd] = p;
	pthread_mutex_unlock(&fd_lock);
}

static void fd_forget(int fd)
{
	if (!active || fd < 0 || fd >= MAXFD)
		return;
	pthread_mutex_lock(&fd_lock);
	free(fd_path[fd]);
	fd_path[fd] = NULL;
	pthread_mutex_unlock(&fd_lock);
}

/* Decides the fate of one call: 0 to make it, -1 to fail it (errno set), 1
 * to make it and then die. The path is copied out under the lock. */
static int decide(enum fn f, int fd, const char *p1, const char *p2)
{
	if (!active)
		return 0;
	char buf[4096];
	const char *path = NULL;
	if (fd >= 0 && fd < MAXFD) {
		pthread_mutex_lock(&fd_lock);
		if (fd_path[fd]) {
			snprintf(buf, sizeof(buf), "%s", fd_path[fd]);
			path = buf;
		}
		pthread_mutex_unlock(&fd_lock);
	} else if (p1) {
		path = p1;
		if (want_path && p2 && !strstr(p1, want_path) && strstr(p2, want_path))
			path = p2;
	}
	if (!path || (want_path && !strstr(path, want_path)))
		return 0;
	if (trace_fd >= 0) {
		char line[4200];
		int n = snprintf(line, sizeof(line), "%s %ld %s\n", fn_name[f],
				 atomic_fetch_add(&fn_hits[f], 1) + 1, path);
		syscall(SYS_write, trace_fd, line, (size_t)(n < (int)sizeof(line) ? n : (int)sizeof(line) - 1));
	}
	if (!want_nth || !(want_mask & (1u << f)))
		return 0;
	const long n = atomic_fetch_add(&hits, 1) + 1;
	if (n < want_nth || (n > want_nth && !want_sticky))
		return 0;
	char msg[4300];
	snprintf(msg, sizeof(msg), "faultshim: %s #%ld on %s: %s\n", fn_name[f], n, path,
		 want_errno == KILL_BEFORE ? "kill before" : want_errno == KILL_AFTER ? "kill after"
		 : strerror(want_errno));
	say(msg);
	if (want_errno == KILL_BEFORE)
		raise(SIGKILL);
	if (want_errno == KILL_AFTER)
		return 1;
	errno = want_errno;
	return -1;
}

/* Runs CALL unless the fault says otherwise; ERRV is the failure value. */
#define GUARD(f, fd, p1, p2, errv, call) \
	do { \
		int d_ = decide(f, fd, p1, p2); \
		if (d_ < 0) \
			return errv; \
		__typeof__(call) r_ = call; \
		if (d_ > 0) \
			raise(SIGKILL); \
		return r_; \
	} while (0)

/* ---- fd tracking ---- */

/* CREST_FAULT_HOLD: the first matching open waits for the test. */
static void hold_maybe(const char *path)
{
	if (!hold_sub || !hold_file || !path || !strstr(path, hold_sub) || atomic_exchange(&held, 1))
		return;
	const int fd = (int)syscall(SYS_open, hold_file, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	if (fd >= 0)
		syscall(SYS_close, fd);
	say("faultshim: holding at the open of ");
	say(path);
	say("\n");
	for (int i = 0; i < 6000 && access(hold_file, F_OK) == 0; i++) {
		const struct timespec ts = { 0, 10 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
}

static int open_common(int dirfd, const char *path, int flags, mode_t mode, int at, int is64)
{
	int fd;
	hold_maybe(path);
	if (at) {
		if (is64) {
			REAL(openat64);
			fd = real_openat64(dirfd, path, flags, mode);
		} else {
			REAL(openat);
			fd = real_openat(dirfd, path, flags, mode);
		}
	} else if (is64) {
		REAL(open64);
		fd = real_open64(path, flags, mode);
	} else {
		REAL(open);
		fd = real_open(path, flags, mode);
	}
	if (fd >= 0) {
		const int e = errno;
		fd_note(fd);
		errno = e;
	}
	return fd;
}

static mode_t mode_arg(int flags, va_list ap)
{
	return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? (mode_t)va_arg(ap, int) : 0;
}

int open(const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t m = mode_arg(flags, ap);
	va_end(ap);
	return open_common(AT_FDCWD, path, flags, m, 0, 0);
}

int open64(const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t m = mode_arg(flags, ap);
	va_end(ap);
	return open_common(AT_FDCWD, path, flags, m, 0, 1);
}

int openat(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t m = mode_arg(flags, ap);
	va_end(ap);
	return open_common(dirfd, path, flags, m, 1, 0);
}

int openat64(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t m = mode_arg(flags, ap);
	va_end(ap);
	return open_common(dirfd, path, flags, m, 1, 1);
}

int creat(const char *path, mode_t mode)
{
	return open_common(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode, 0, 0);
}

int creat64(const char *path, mode_t mode)
{
	return open_common(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode, 0, 1);
}

int close(int fd)
{
	REAL(close);
	fd_forget(fd);
	return real_close(fd);
}

/* ---- the calls that can fail ---- */

ssize_t write(int fd, const void *b, size_t n)
{
	REAL(write);
	GUARD(F_WRITE, fd, NULL, NULL, -1, real_write(fd, b, n));
}

ssize_t writev(int fd, const struct iovec *v, int n)
{
	REAL(writev);
	GUARD(F_WRITEV, fd, NULL, NULL, -1, real_writev(fd, v, n));
}

ssize_t pwrite(int fd, const void *b, size_t n, off_t off)
{
	REAL(pwrite);
	GUARD(F_PWRITE, fd, NULL, NULL, -1, real_pwrite(fd, b, n, off));
}

ssize_t pwrite64(int fd, const void *b, size_t n, off64_t off)
{
	REAL(pwrite64);
	GUARD(F_PWRITE, fd, NULL, NULL, -1, real_pwrite64(fd, b, n, off));
}

ssize_t pwritev(int fd, const struct iovec *v, int n, off_t off)
{
	REAL(pwritev);
	GUARD(F_PWRITEV, fd, NULL, NULL, -1, real_pwritev(fd, v, n, off));
}

ssize_t pwritev64(int fd, const struct iovec *v, int n, off64_t off)
{
	REAL(pwritev64);
	GUARD(F_PWRITEV, fd, NULL, NULL, -1, real_pwritev64(fd, v, n, off));
}

ssize_t pwritev2(int fd, const struct iovec *v, int n, off_t off, int flags)
{
	REAL(pwritev2);
	GUARD(F_PWRITEV, fd, NULL, NULL, -1, real_pwritev2(fd, v, n, off, flags));
}

int fsync(int fd)
{
	REAL(fsync);
	GUARD(F_FSYNC, fd, NULL, NULL, -1, real_fsync(fd));
}

int fdatasync(int fd)
{
	REAL(fdatasync);
	GUARD(F_FDATASYNC, fd, NULL, NULL, -1, real_fdatasync(fd));
}

int sync_file_range(int fd, off64_t off, off64_t n, unsigned int flags)
{
	REAL(sync_file_range);
	GUARD(F_SYNC_FILE_RANGE, fd, NULL, NULL, -1, real_sync_file_range(fd, off, n, flags));
}

int ftruncate(int fd, off_t len)
{
	REAL(ftruncate);
	GUARD(F_FTRUNCATE, fd, NULL, NULL, -1, real_ftruncate(fd, len));
}

int ftruncate64(int fd, off64_t len)
{
	REAL(ftruncate64);
	GUARD(F_FTRUNCATE, fd, NULL, NULL, -1, real_ftruncate64(fd, len));
}

int truncate(const char *path, off_t len)
{
	REAL(truncate);
	GUARD(F_TRUNCATE, -1, path, NULL, -1, real_truncate(path, len));
}

int truncate64(const char *path, off64_t len)
{
	REAL(truncate64);
	GUARD(F_TRUNCATE, -1, path, NULL, -1, real_truncate64(path, len));
}

int fallocate(int fd, int mode, off_t off, off_t len)
{
	REAL(fallocate);
	GUARD(F_FALLOCATE, fd, NULL, NULL, -1, real_fallocate(fd, mode, off, len));
}

int fallocate64(int fd, int mode, off64_t off, off64_t len)
{
	REAL(fallocate64);
	GUARD(F_FALLOCATE, fd, NULL, NULL, -1, real_fallocate64(fd, mode, off, len));
}

/* posix_fallocate returns the error instead of setting errno. */
int posix_fallocate(int fd, off_t off, off_t len)
{
	REAL(posix_fallocate);
	int d = decide(F_FALLOCATE, fd, NULL, NULL);
	if (d < 0)
		return errno;
	int r = real_posix_fallocate(fd, off, len);
	if (d > 0)
		raise(SIGKILL);
	return r;
}

int posix_fallocate64(int fd, off64_t off, off64_t len)
{
	REAL(posix_fallocate64);
	int d = decide(F_FALLOCATE, fd, NULL, NULL);
	if (d < 0)
		return errno;
	int r = real_posix_fallocate64(fd, off, len);
	if (d > 0)
		raise(SIGKILL);
	return r;
}

int rename(const char *a, const char *b)
{
	REAL(rename);
	GUARD(F_RENAME, -1, a, b, -1, real_rename(a, b));
}

int renameat(int da, const char *a, int db, const char *b)
{
	REAL(renameat);
	GUARD(F_RENAME, -1, a, b, -1, real_renameat(da, a, db, b));
}

int renameat2(int da, const char *a, int db, const char *b, unsigned int flags)
{
	REAL(renameat2);
	GUARD(F_RENAME, -1, a, b, -1, real_renameat2(da, a, db, b, flags));
}

int unlink(const char *path)
{
	REAL(unlink);
	GUARD(F_UNLINK, -1, path, NULL, -1, real_unlink(path));
}

int unlinkat(int dfd, const char *path, int flags)
{
	REAL(unlinkat);
	GUARD(F_UNLINK, -1, path, NULL, -1, real_unlinkat(dfd, path, flags));
}
