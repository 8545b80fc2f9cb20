/*
 * locks_flock.c - the locks of locks.h as flock(2) on files of the store's
 * directory: STORE/lock (the writer's, exclusive; its holder writes "PID
 * COMMAND" into it), STORE/lock.wants (held shared by each waiting writer)
 * and STORE/readers (shared by readers, exclusive for gc). A lock goes
 * when its descriptor closes, so a killed holder loses it at once; the
 * name it wrote stays, and is shown only while its pid lives.
 */
#include "cas/locks.h"
#include "util/err.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct flock_locks {
	struct cas_locks base;
	char *dir;
	int lock_fd;          /* STORE/lock, once writer_try opened it */
	bool locked;          /* lock_fd holds the lock (and names this process) */
	int want_fd;          /* STORE/lock.wants, held shared while waiting */
	int wants_fd;         /* the holder's look at STORE/lock.wants */
	int readers_fd;       /* a reader's shared hold of STORE/readers */
	int gc_fd;            /* readers_none's exclusive hold of it */
};

static void path_of(const struct flock_locks *f, const char *name, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s/%s", f->dir, name);
}

static int fl_open(const char *dir, struct cas_locks **out)
{
	struct flock_locks *f = calloc(1, sizeof(*f));
	if (!f || !(f->dir = strdup(dir))) {
		free(f);
		return crest_errf(-ENOMEM, "opening the locks of store %s", dir);
	}
	f->base.ops = &cas_locks_flock;
	f->lock_fd = f->want_fd = f->wants_fd = f->readers_fd = f->gc_fd = -1;
	*out = &f->base;
	return 0;
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static void fl_close(struct cas_locks *l)
{
	struct flock_locks *f = (struct flock_locks *)l;
	if (!f)
		return;
	close_fd(&f->wants_fd);
	close_fd(&f->want_fd);
	/* The holder's name goes before the lock does: left behind, it would
	 * name this process to a writer that waits on a holder that never
	 * says who it is (flock(1)), and "this process" when that writer is
	 * this process again (a libcrest session opening its store anew). A
	 * crash leaves the name of a pid that is gone, which writer_holder
	 * does not show. */
	if (f->lock_fd >= 0 && f->locked && ftruncate(f->lock_fd, 0) < 0) {
		/* Only a message for others, as say_holder's. */
	}
	close_fd(&f->lock_fd);
	close_fd(&f->readers_fd);
	close_fd(&f->gc_fd);
	free(f->dir);
	free(f);
}

void cas_locks_command(char *buf, size_t cap)
{
	buf[0] = 0;
	const int cfd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
	if (cfd < 0 || cap < 2) {
		if (cfd >= 0)
			close(cfd);
		return;
	}
	const ssize_t n = read(cfd, buf, cap - 1);
	close(cfd);
	for (ssize_t i = 0; i < n; i++)
		if (buf[i] == 0 || buf[i] == '\n')
			buf[i] = ' ';
	buf[n > 0 ? n : 0] = 0;
	for (ssize_t i = n - 1; i >= 0 && buf[i] == ' '; i--)
		buf[i] = 0;
}

/* Writes "PID COMMAND" into the lock file, for writers that wait on it. */
static void say_holder(int fd)
{
	char text[320], cmd[256];
	cas_locks_command(cmd, sizeof(cmd));
	int n = snprintf(text, sizeof(text), "%d %s\n", (int)getpid(), cmd);
	if (n > (int)sizeof(text) - 1)
		n = (int)sizeof(text) - 1;
	/* Only a message for others: a failure here costs nothing else. */
	if (ftruncate(fd, 0) == 0 && pwrite(fd, text, (size_t)n, 0) < 0)
		return;
}

static int fl_writer_try(struct cas_locks *l)
{
	struct flock_locks *f = (struct flock_locks *)l;
	char path[4096];
	path_of(f, "lock", path, sizeof(path));
	if (f->lock_fd < 0) {
		const int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0)
			return crest_errf(-errno, "cannot open %s", path);
		struct stat st;
		if (fstat(fd, &st) < 0) {
			const int err = -errno;
			close(fd);
			return crest_errf(err, "cannot stat %s", path);
		}
		if (!S_ISREG(st.st_mode)) {
			close(fd);
			return crest_errx(-EPERM, "store %s: %s is not a regular file (remove it)", f->dir, path);
		}
		f->lock_fd = fd;
	}
	if (flock(f->lock_fd, LOCK_EX | LOCK_NB) == 0) {
		say_holder(f->lock_fd);
		f->locked = true;
		return 0;
	}
	if (errno == EWOULDBLOCK || errno == EINTR)
		return -EWOULDBLOCK;
	return crest_errf(-errno, "cannot lock %s", path);
}

/* Says who holds the lock: the holder writes "PID COMMAND" into the lock
 * file once it has it. The text may belong to an earlier holder (the new
 * one locks, then writes): the pid is shown only while it lives. */
static void fl_writer_holder(struct cas_locks *l, char *buf, size_t cap)
{
	const struct flock_locks *f = (const struct flock_locks *)l;
	char text[320];
	const ssize_t n = f->lock_fd >= 0 ? pread(f->lock_fd, text, sizeof(text) - 1, 0) : -1;
	int pid = 0, used = 0;
	text[n > 0 ? n : 0] = 0;
	text[strcspn(text, "\n")] = 0;
	if (n <= 0 || sscanf(text, "%d %n", &pid, &used) != 1 || pid <= 0 ||
	    (kill(pid, 0) < 0 && errno == ESRCH)) {
		snprintf(buf, cap, "another crest (it has not said which)");
		return;
	}
	char path[64], stat[512] = "";
	const char *state = "";
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	FILE *fp = fopen(path, "re");
	if (fp) {
		size_t got = fread(stat, 1, sizeof(stat) - 1, fp);
		stat[got] = 0;
		fclose(fp);
		const char *p = strrchr(stat, ')');
		if (p && (p[2] == 'T' || p[2] == 't'))
			state = ", which is stopped";
	}
	if (pid == (int)getpid())
		snprintf(buf, cap, "this process (pid %d: a store handle it has not closed)", pid);
	else
		snprintf(buf, cap, "pid %d (%s)%s", pid, text + used, state);
}

/* The pid a holder wrote into STORE/lock lives (a writer names itself once
 * it has the lock, and takes its name out before it lets go; a killed one
 * leaves a pid that is gone). */
static bool fl_writer_live(const struct cas_locks *l)
{
	const struct flock_locks *f = (const struct flock_locks *)l;
	char path[4096], text[64];
	path_of(f, "lock", path, sizeof(path));
	const int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return false;
	const ssize_t n = pread(fd, text, sizeof(text) - 1, 0);
	close(fd);
	text[n > 0 ? n : 0] = 0;
	int pid = 0;
	return n > 0 && sscanf(text, "%d", &pid) == 1 && pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
}

static int fl_writer_check(struct cas_locks *l)
{
	(void)l;   /* held as long as the descriptor is open */
	return 0;
}

/* STORE/lock.wants held shared. The holder's check takes it exclusively for
 * a moment: retried, never blocked on. */
static bool fl_want(struct cas_locks *l)
{
	struct flock_locks *f = (struct flock_locks *)l;
	if (f->want_fd >= 0)
		return true;
	char path[4096];
	path_of(f, "lock.wants", path, sizeof(path));
	const int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return false;
	for (int i = 0; i < 100; i++) {
		if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
			f->want_fd = fd;
			return true;
		}
		struct timespec ts = { 0, 1000000L };
		nanosleep(&ts, NULL);
	}
	close(fd);
	return false;
}

static void fl_unwant(struct cas_locks *l)
{
	close_fd(&((struct flock_locks *)l)->want_fd);
}

/* Whether anyone holds lock.wants shared: it cannot be had exclusively. */
static bool fl_wanted(struct cas_locks *l)
{
	struct flock_locks *f = (struct flock_locks *)l;
	if (f->wants_fd < 0) {
		char path[4096];
		path_of(f, "lock.wants", path, sizeof(path));
		f->wants_fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		if (f->wants_fd < 0)
			return false;   /* no writer ever waited here */
	}
	if (flock(f->wants_fd, LOCK_EX | LOCK_NB) == 0) {
		flock(f->wants_fd, LOCK_UN);
		return false;
	}
	return errno == EWOULDBLOCK;
}

static void fl_readers_join(struct cas_locks *l)
{
	struct flock_locks *f = (struct flock_locks *)l;
	char path[4096];
	path_of(f, "readers", path, sizeof(path));
	int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return;
	if (flock(fd, LOCK_SH) < 0) {
		close(fd);
		return;
	}
	f->readers_fd = fd;
}

static int fl_readers_none(struct cas_locks *l)
{
	struct flock_locks *f = (struct flock_locks *)l;
	char path[4096];
	path_of(f, "readers", path, sizeof(path));
	const int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return crest_errf(-errno, "cannot open %s", path);
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		close(fd);
		return -EBUSY;
	}
	close_fd(&f->gc_fd);
	f->gc_fd = fd;
	return 0;
}

static void fl_readers_let_in(struct cas_locks *l)
{
	close_fd(&((struct flock_locks *)l)->gc_fd);
}

const struct cas_locks_ops cas_locks_flock = {
	.name = "flock",
	.open = fl_open,
	.close = fl_close,
	.writer_try = fl_writer_try,
	.writer_holder = fl_writer_holder,
	.writer_live = fl_writer_live,
	.writer_check = fl_writer_check,
	.want = fl_want,
	.unwant = fl_unwant,
	.wanted = fl_wanted,
	.readers_join = fl_readers_join,
	.readers_none = fl_readers_none,
	.readers_let_in = fl_readers_let_in,
};
