/* uring.c - the io_uring instances a process tree holds; see uring.h. */
#include "os/uring.h"
#include "util/err.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <linux/kcmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* What the kernel names a ring's file, in a descriptor's link and in maps. */
#define URING_NAME "anon_inode:[io_uring]"

/* Whether pid maps a ring (*ring) and libcrest (*libcrest), from the path
 * field of /proc/PID/maps. A process gone meanwhile maps nothing. */
static void maps_scan(pid_t pid, bool *ring, bool *libcrest)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	*ring = *libcrest = false;
	FILE *f = fopen(path, "re");
	if (!f)
		return;
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	while ((len = getline(&line, &cap, f)) > 0) {
		if (line[len - 1] == '\n')
			line[--len] = 0;
		/* address perms offset dev inode path: the path is what follows
		 * the fifth field's blanks. A file that calls itself so has a
		 * '/' in front. */
		int at = -1;
		if (sscanf(line, "%*s %*s %*s %*s %*s %n", &at) < 0 || at < 0 || at > len)
			continue;
		const char *name = line + at;
		if (!strcmp(name, URING_NAME))
			*ring = true;
		const char *base = strrchr(name, '/');
		if (base && !strncmp(base + 1, "libcrest.so", 11))
			*libcrest = true;
	}
	free(line);
	fclose(f);
}

/* The lowest descriptor of /proc/PID/task/TID/fd that is a ring, or -1. */
static int fd_scan(pid_t pid, pid_t tid)
{
	char dpath[80];
	snprintf(dpath, sizeof(dpath), "/proc/%d/task/%d/fd", (int)pid, (int)tid);
	DIR *d = opendir(dpath);
	if (!d)
		return -1;   /* gone meanwhile, or a zombie leader: no table */
	int found = -1;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		char lpath[PATH_MAX], target[sizeof(URING_NAME) + 1];
		snprintf(lpath, sizeof(lpath), "%s/%s", dpath, e->d_name);
		const ssize_t len = readlink(lpath, target, sizeof(target) - 1);
		if (len <= 0)
			continue;
		target[len] = 0;
		const int fd = atoi(e->d_name);
		if (!strcmp(target, URING_NAME) && (found < 0 || fd < found))
			found = fd;
	}
	closedir(d);
	return found;
}

/* A ring among the descriptors of pid's threads: the descriptor into *fd
 * and the thread whose table holds it into *tid, or *fd = -1. Threads
 * mostly share one table, looked at once: a thread's is read only when
 * kcmp does not say it is one already read (it cannot say when the kernel
 * lacks CONFIG_KCMP: every thread's is read then). */
static int fds_scan(pid_t pid, pid_t *tid, int *fd)
{
	*fd = -1;
	char tpath[64];
	snprintf(tpath, sizeof(tpath), "/proc/%d/task", (int)pid);
	DIR *d = opendir(tpath);
	if (!d)
		return 0;   /* gone meanwhile: CRIU will say so */
	pid_t *seen = NULL;
	size_t nseen = 0, cap = 0;
	int rc = 0;
	struct dirent *e;
	while (*fd < 0 && (e = readdir(d))) {
		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		const pid_t t = (pid_t)atoi(e->d_name);
		bool shared = false;
		for (size_t i = 0; i < nseen && !shared; i++)
			shared = syscall(SYS_kcmp, seen[i], t, KCMP_FILES, 0, 0) == 0;
		if (shared)
			continue;
		if (nseen == cap) {
			pid_t *ns = realloc(seen, (cap = cap ? 2 * cap : 8) * sizeof(*ns));
			if (!ns) {
				rc = crest_errf(-ENOMEM, "listing the descriptors of pid %d", (int)pid);
				break;
			}
			seen = ns;
		}
		seen[nseen++] = t;
		if ((*fd = fd_scan(pid, t)) >= 0)
			*tid = t;
	}
	closedir(d);
	free(seen);
	return rc;
}

int uring_find_tree(const struct proc_tree *t, struct uring_found *out)
{
	memset(out, 0, sizeof(*out));
	out->fd = -1;
	for (size_t i = 0; i < t->n; i++) {
		const pid_t pid = t->pids[i];
		bool mapped, libcrest;
		pid_t tid = pid;
		int fd;
		const int rc = fds_scan(pid, &tid, &fd);
		if (rc < 0)
			return rc;
		maps_scan(pid, &mapped, &libcrest);
		if (fd < 0 && !mapped)
			continue;
		if (!out->nproc++) {
			out->pid = pid;
			out->tid = fd >= 0 ? tid : pid;
			out->fd = fd;
			out->libcrest = libcrest;
			proc_comm(pid, out->comm, sizeof(out->comm));
		}
	}
	return out->nproc > 0;
}
