/*
 * thp.c - the machine's huge page setting raised for crest's window; see
 * thp.h.
 */
#include "os/thp.h"

#include "util/err.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MODE_MAX 32

static const char *thp_file(void)
{
	const char *p = getenv("CREST_THP_FILE");
	return p && *p ? p : "/sys/kernel/mm/transparent_hugepage/enabled";
}

static const char *state_dir(void)
{
	const char *p = getenv("CREST_THP_STATE");
	return p && *p ? p : "/run/crest/thp";
}

/* The setting in force: the bracketed word of "always [madvise] never",
 * or the file's first word when there are no brackets. */
static int mode_read(const char *path, char mode[MODE_MAX])
{
	char buf[256];
	const int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return crest_errf(-errno, "reading the huge page setting %s", path);
	const ssize_t n = read(fd, buf, sizeof(buf) - 1);
	const int err = errno;
	close(fd);
	if (n < 0)
		return crest_errf(-err, "reading the huge page setting %s", path);
	buf[n] = 0;
	const char *s = strchr(buf, '[');
	s = s ? s + 1 : buf;
	while (*s == ' ')
		s++;
	size_t k = 0;
	while (s[k] && s[k] != ']' && !isspace((unsigned char)s[k]) && k + 1 < MODE_MAX)
		k++;
	if (k == 0)
		return crest_errx(-EINVAL, "the huge page setting %s says nothing crest understands", path);
	memcpy(mode, s, k);
	mode[k] = 0;
	return 0;
}

static int mode_write(const char *path, const char *mode)
{
	const int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return crest_errf(-errno, "setting huge pages to %s in %s", mode, path);
	char line[MODE_MAX + 2];
	const int len = snprintf(line, sizeof(line), "%s\n", mode);
	const ssize_t w = write(fd, line, (size_t)len);
	const int err = errno;
	struct stat st;
	/* A plain file standing in for the setting (tests) is cut to the
	 * word; sysfs takes the write as the whole value. */
	if (w == len && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > len)
		(void)!ftruncate(fd, len);
	close(fd);
	if (w != len)
		return crest_errf(w < 0 ? -err : -EIO, "setting huge pages to %s in %s", mode, path);
	return 0;
}

/* A process's start time from /proc/PID/stat; -ESRCH when it is gone or a
 * zombie (it will never lower what it raised). */
static int start_time(pid_t pid, unsigned long long *st)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	const int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -ESRCH;
	const ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -ESRCH;
	buf[n] = 0;
	const char *p = strrchr(buf, ')');
	char state = 0;
	/* After the command: state (field 3) ... starttime (field 22). */
	if (!p || sscanf(p + 1, " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
			 &state, st) != 2 || state == 'Z' || state == 'X')
		return -ESRCH;
	return 0;
}

/* STATE/lock taken (the directory made if missing when make is set):
 * its descriptor, or -errno with a message; -ENOENT without one when the
 * directory is missing and make is not set. */
static int state_lock(bool make)
{
	const char *dir = state_dir();
	if (make) {
		/* With its parents (/run/crest), which nothing else makes. */
		char part[4096];
		snprintf(part, sizeof(part), "%s", dir);
		for (char *p = part + 1;; p++) {
			const char c = *p;
			if (c && c != '/')
				continue;
			*p = 0;
			if (mkdir(part, 0700) < 0 && errno != EEXIST)
				return crest_errf(-errno, "making %s for the huge page setting", part);
			*p = c;
			if (!c)
				break;
		}
	}
	char path[4200];
	snprintf(path, sizeof(path), "%s/lock", dir);
	const int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return errno == ENOENT && !make ? -ENOENT : crest_errf(-errno, "opening %s", path);
	while (flock(fd, LOCK_EX) < 0)
		if (errno != EINTR) {
			const int err = -errno;
			close(fd);
			return crest_errf(err, "locking %s", path);
		}
	return fd;
}

/* Drops the holders that died; returns how many are alive. */
static unsigned holders_live(void)
{
	const char *dir = state_dir();
	DIR *d = opendir(dir);
	unsigned live = 0;
	for (struct dirent *e; d && (e = readdir(d));) {
		char *end;
		const long pid = strtol(e->d_name, &end, 10);
		if (!isdigit((unsigned char)e->d_name[0]) || *end || pid <= 0)
			continue;
		char path[4400], buf[64] = "";
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		FILE *f = fopen(path, "re");
		unsigned long long want = 0, have = 0;
		const bool read_ok = f && fgets(buf, sizeof(buf), f) && sscanf(buf, "%llu", &want) == 1;
		if (f)
			fclose(f);
		if (read_ok && start_time((pid_t)pid, &have) == 0 && have == want)
			live++;
		else
			unlink(path);
	}
	if (d)
		closedir(d);
	return live;
}

/* With no holder left: the saved setting written back and forgotten. */
static int put_back(void)
{
	char saved[4200], mode[MODE_MAX];
	snprintf(saved, sizeof(saved), "%s/saved", state_dir());
	if (access(saved, F_OK) < 0)
		return 0;
	int rc = mode_read(saved, mode);
	if (rc == 0)
		rc = mode_write(thp_file(), mode);
	if (rc == 0)
		unlink(saved);
	return rc;
}

static void holder_path(char *path, size_t cap, pid_t pid)
{
	snprintf(path, cap, "%s/%d", state_dir(), (int)pid);
}

int os_thp_raise(void)
{
	const char *file = thp_file();
	char mode[MODE_MAX];
	int rc = mode_read(file, mode);   /* before anything is made: no THP, no state */
	if (rc < 0)
		return rc;
	const int lk = state_lock(true);
	if (lk < 0)
		return lk;
	const pid_t self = getpid();
	char saved[4200], own[4200], tmp[4300];
	snprintf(saved, sizeof(saved), "%s/saved", state_dir());
	holder_path(own, sizeof(own), self);
	unlink(own);   /* a holder of this pid's past life */
	bool made_saved = false;
	if (holders_live() == 0) {
		/* The first holder: what a dead one left is put back first, so
		 * that what is saved is the machine's own setting. */
		rc = put_back();
		if (rc == 0)
			rc = mode_read(file, mode);
		snprintf(tmp, sizeof(tmp), "%s.tmp", saved);
		FILE *f = rc == 0 ? fopen(tmp, "we") : NULL;
		if (rc == 0 && (!f || fprintf(f, "%s\n", mode) < 0 || fflush(f) || fsync(fileno(f)) ||
				rename(tmp, saved) < 0))
			rc = crest_errf(-errno, "saving the huge page setting in %s", saved);
		if (f)
			fclose(f);
		made_saved = rc == 0;
	}
	unsigned long long st = 0;
	if (rc == 0 && start_time(self, &st) < 0)
		rc = crest_errx(-ESRCH, "reading this process's start time");
	FILE *h = rc == 0 ? fopen(own, "we") : NULL;
	if (rc == 0 && (!h || fprintf(h, "%llu\n", st) < 0 || fflush(h)))
		rc = crest_errf(-errno, "recording this process as a holder of the huge page setting in %s", own);
	if (h)
		fclose(h);
	if (rc == 0 && strcmp(mode, "always"))
		rc = mode_write(file, "always");
	if (rc < 0) {
		char msg[1024];
		crest_errcpy(msg, sizeof(msg));
		unlink(own);
		if (made_saved && holders_live() == 0)
			put_back();
		crest_errset_str(msg);
	}
	close(lk);
	return rc;
}

int os_thp_lower(void)
{
	const int lk = state_lock(false);
	if (lk == -ENOENT)
		return crest_errx(-ENOENT, "lowering huge pages: %s is gone", state_dir());
	if (lk < 0)
		return lk;
	char own[4200];
	holder_path(own, sizeof(own), getpid());
	unlink(own);
	const int rc = holders_live() == 0 ? put_back() : 0;
	close(lk);
	return rc;
}

/* What other processes of the machine would see: said loudly. */
static void warn_not_back(void)
{
	fprintf(stderr, "crest: WARNING: the machine's huge page setting could not be put back: %s\n",
		crest_errmsg());
}

void os_thp_lower_loud(void)
{
	char msg[1024];
	crest_errcpy(msg, sizeof(msg));
	if (os_thp_lower() < 0)
		warn_not_back();
	crest_errset_str(msg);
}

void os_thp_repair_wait(void)
{
	const unsigned wait_ms = 5000;
	for (unsigned waited = 0;; waited += 50) {
		const int rc = os_thp_repair();
		if (rc < 0)
			warn_not_back();
		if (rc <= 0 || waited >= wait_ms)
			return;
		const struct timespec ms50 = { 0, 50 * 1000 * 1000 };
		nanosleep(&ms50, NULL);
	}
}

int os_thp_repair(void)
{
	const int lk = state_lock(false);
	if (lk == -ENOENT)
		return 0;
	if (lk < 0)
		return lk;
	const int rc = holders_live() == 0 ? put_back() : 1;
	close(lk);
	return rc;
}
