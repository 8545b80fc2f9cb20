/* proc.c - reading /proc for checkpoints; see proc.h. */
#include "os/proc.h"
#include "util/err.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <inttypes.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

char proc_state(pid_t pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	const char *p = strrchr(buf, ')');  /* comm may hold spaces and parens */
	return p && p[1] == ' ' ? p[2] : 0;
}

/* PF_EXITING from the kernel's sched.h: set when do_exit starts, long before
 * the task is a zombie when it has much memory to unmap. Stable ABI as seen
 * in /proc/PID/stat's flags field since 2.6. */
#define PROC_PF_EXITING 0x4u
#define PROC_PF_KTHREAD 0x00200000u

/* Field 9 of /proc/PID/stat, the task's flags; 0 when unreadable. */
static unsigned long proc_flags(pid_t pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	const size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	const char *p = strrchr(buf, ')');
	unsigned long flags = 0;
	/* After ')': state ppid pgrp session tty_nr tpgid flags. */
	if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %lu", &flags) != 1)
		return 0;
	return flags;
}

/* Whether SIGKILL is pending for the thread or its whole group. */
static bool proc_kill_pending(pid_t pid)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return false;
	bool pending = false;
	unsigned long long mask;
	while (fgets(line, sizeof(line), f)) {
		if ((sscanf(line, "SigPnd: %llx", &mask) == 1 || sscanf(line, "ShdPnd: %llx", &mask) == 1) &&
		    (mask & (1ull << (SIGKILL - 1))))
			pending = true;
	}
	fclose(f);
	return pending;
}

bool proc_gone(pid_t pid)
{
	const char st = proc_state(pid);
	if (!st || st == 'Z' || st == 'X')
		return true;
	return (proc_flags(pid) & PROC_PF_EXITING) || proc_kill_pending(pid);
}

bool proc_is_kthread(pid_t pid)
{
	return (proc_flags(pid) & PROC_PF_KTHREAD) != 0;
}

int proc_job_key(pid_t pid, char *key, size_t cap)
{
	char path[64], buf[1024], boot[64] = "";
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
	if (f) {
		if (!fgets(boot, sizeof(boot), f))
			boot[0] = 0;
		fclose(f);
	}
	boot[strcspn(boot, "\n")] = 0;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (!(f = fopen(path, "re")))
		return -ESRCH;
	const size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	/* Field 22, starttime, counted from the state (field 3) after comm. */
	const char *p = strrchr(buf, ')');
	unsigned long long start = 0;
	int field = 2;
	for (; p && *p && field < 22; p++)
		if (*p == ' ')
			field++;
	if (!p || field != 22 || sscanf(p, "%llu", &start) != 1)
		return -ESRCH;
	snprintf(key, cap, "%s-%d-%llu", boot[0] ? boot : "noboot", (int)pid, start);
	return 0;
}

static pid_t proc_ppid(pid_t pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	const char *p = strrchr(buf, ')');
	int ppid;
	char st;
	if (!p || sscanf(p + 1, " %c %d", &st, &ppid) != 2)
		return -1;
	return ppid;
}

void proc_comm(pid_t pid, char *buf, size_t cap)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f || !fgets(buf, (int)cap, f)) {
		snprintf(buf, cap, "?");
	} else {
		buf[strcspn(buf, "\n")] = 0;
	}
	if (f)
		fclose(f);
}

char *proc_pids_format(const pid_t *v, size_t n)
{
	char *s = calloc(n + 1, 12);   /* "," and up to 10 digits each */
	for (size_t i = 0, used = 0; s && i < n; i++)
		used += (size_t)snprintf(s + used, 12, "%s%d", i ? "," : "", (int)v[i]);
	return s;
}

int proc_pids_parse(const char *s, pid_t **out, size_t *n)
{
	size_t cap = 1;
	for (const char *p = s; *p; p++)
		cap += *p == ',';
	*n = 0;
	*out = calloc(cap, sizeof(pid_t));
	if (!*out)
		return -ENOMEM;
	if (!*s)
		return 0;
	for (const char *p = s;;) {
		if (*p < '0' || *p > '9')   /* strtoul would take " -1" */
			return -EINVAL;
		char *end;
		errno = 0;
		const unsigned long v = strtoul(p, &end, 10);
		if (errno || v == 0 || v > PROC_PID_MAX || (*end && *end != ','))
			return -EINVAL;
		(*out)[(*n)++] = (pid_t)v;
		if (!*end)
			return 0;
		p = end + 1;
	}
}

int proc_tree_get(pid_t root, struct proc_tree *t)
{
	memset(t, 0, sizeof(*t));
	char st = proc_state(root);
	if (!st)
		return crest_errx(-ESRCH, "no process with pid %d", (int)root);
	if (st == 'Z')
		return crest_errx(-ESRCH, "process %d has exited (it is a zombie)", (int)root);
	/* All (pid, ppid) pairs once, then a breadth-first walk from root. */
	DIR *d = opendir("/proc");
	if (!d)
		return crest_errf(-errno, "cannot read /proc");
	pid_t *all = NULL, *par = NULL;
	size_t n = 0, cap = 0;
	struct dirent *e;
	int rc = 0;
	while ((e = readdir(d))) {
		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 1024;
			pid_t *na = realloc(all, cap * sizeof(*na)), *np = na ? realloc(par, cap * sizeof(*np)) : NULL;
			if (na)
				all = na;
			if (!na || !np) {
				rc = -ENOMEM;
				break;
			}
			par = np;
		}
		all[n] = (pid_t)atoi(e->d_name);
		par[n] = proc_ppid(all[n]);
		n++;
	}
	closedir(d);
	t->pids = rc == 0 ? malloc((n + 1) * sizeof(pid_t)) : NULL;
	if (!t->pids) {
		free(all);
		free(par);
		return crest_errf(-ENOMEM, "listing processes");
	}
	t->pids[t->n++] = root;
	for (size_t head = 0; head < t->n; head++)
		for (size_t i = 0; i < n; i++)
			if (par[i] == t->pids[head] && all[i] != root)
				t->pids[t->n++] = all[i];
	free(all);
	free(par);
	return 0;
}

void proc_tree_free(struct proc_tree *t)
{
	free(t->pids);
	t->pids = NULL;
	t->n = 0;
}

bool proc_maps_has(pid_t pid, const char *name)
{
	char path[64], line[4096];
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return false;
	bool found = false;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, name) != NULL;
	fclose(f);
	return found;
}

bool proc_uses_cuda(pid_t pid)
{
	return proc_maps_has(pid, "/libcuda.so");
}

int proc_env_get(pid_t pid, const char *key, char *buf, size_t cap)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return -errno;
	const size_t klen = strlen(key);
	char *var = NULL;
	size_t vcap = 0;
	int rc = -ENOENT;
	ssize_t len;
	while (rc == -ENOENT && (len = getdelim(&var, &vcap, '\0', f)) > 0)
		if ((size_t)len > klen && !strncmp(var, key, klen) && var[klen] == '=') {
			snprintf(buf, cap, "%s", var + klen + 1);
			rc = 0;
		}
	free(var);
	fclose(f);
	return rc;
}

bool proc_has_thread(pid_t pid, const char *name)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return false;
	bool found = false;
	const struct dirent *e;
	while (!found && (e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		char cpath[96], comm[32];
		snprintf(cpath, sizeof(cpath), "/proc/%d/task/%.16s/comm", (int)pid, e->d_name);
		FILE *f = fopen(cpath, "re");
		if (!f)
			continue;	/* the thread ended meanwhile */
		if (fgets(comm, sizeof(comm), f)) {
			comm[strcspn(comm, "\n")] = 0;
			found = strcmp(comm, name) == 0;
		}
		fclose(f);
	}
	closedir(d);
	return found;
}

/* flags, pos and mnt_id of one descriptor, from its fdinfo (all three are
 * there since Linux 3.15). */
static int fd_info(pid_t pid, const char *fd, int *flags, uint64_t *pos, int *mnt)
{
	char path[320], line[256];
	snprintf(path, sizeof(path), "/proc/%d/fdinfo/%s", (int)pid, fd);
	FILE *f = fopen(path, "re");
	if (!f)
		return -ENOENT;
	int got = 0;
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "flags:", 6)) {
			*flags = (int)strtol(line + 6, NULL, 8);
			got |= 1;
		} else if (!strncmp(line, "pos:", 4)) {
			*pos = strtoull(line + 4, NULL, 10);
			got |= 2;
		} else if (!strncmp(line, "mnt_id:", 7)) {
			*mnt = atoi(line + 7);
			got |= 4;
		}
	}
	fclose(f);
	return got == 7 ? 0 : -ENOENT;
}

/* The open flags of pid's fd; -1 when unknown. */
static long fd_flags(pid_t pid, const char *fd)
{
	int flags, mnt;
	uint64_t pos;
	return fd_info(pid, fd, &flags, &pos, &mnt) < 0 ? -1 : flags;
}

int proc_files_writable(const struct proc_tree *t, struct proc_files *out)
{
	memset(out, 0, sizeof(*out));
	for (size_t i = 0; i < t->n; i++) {
		char dpath[64];
		snprintf(dpath, sizeof(dpath), "/proc/%d/fd", (int)t->pids[i]);
		DIR *d = opendir(dpath);
		if (!d)
			continue;  /* gone meanwhile: CRIU will say so */
		struct dirent *e;
		while ((e = readdir(d))) {
			if (e->d_name[0] == '.')
				continue;
			long fl = fd_flags(t->pids[i], e->d_name);
			if (fl < 0 || (fl & O_ACCMODE) == O_RDONLY)
				continue;
			char lpath[PATH_MAX + 64], target[PATH_MAX];
			snprintf(lpath, sizeof(lpath), "%s/%s", dpath, e->d_name);
			ssize_t n = readlink(lpath, target, sizeof(target) - 1);
			if (n <= 0 || target[0] != '/')
				continue;
			target[n] = 0;
			if (n > 10 && !strcmp(target + n - 10, " (deleted)"))
				continue;
			struct stat sb;
			if (stat(lpath, &sb) < 0 || !S_ISREG(sb.st_mode))
				continue;
			bool dup = false;
			for (size_t k = 0; k < out->n && !dup; k++)
				dup = !strcmp(out->v[k].path, target);
			if (dup)
				continue;
			struct proc_file *nv = realloc(out->v, (out->n + 1) * sizeof(*nv));
			if (!nv) {
				closedir(d);
				proc_files_free(out);
				return crest_errf(-ENOMEM, "listing open files");
			}
			out->v = nv;
			out->v[out->n].path = strdup(target);
			out->v[out->n].size = (uint64_t)sb.st_size;
			out->v[out->n].dev = (uint64_t)sb.st_dev;
			out->v[out->n].ino = (uint64_t)sb.st_ino;
			out->v[out->n].uid = (uint32_t)sb.st_uid;
			if (!out->v[out->n].path) {
				closedir(d);
				proc_files_free(out);
				return crest_errf(-ENOMEM, "listing open files");
			}
			out->n++;
		}
		closedir(d);
	}
	return 0;
}

int proc_file_writer(const struct proc_file *files, size_t n, pid_t *who, size_t *which)
{
	DIR *pd = n ? opendir("/proc") : NULL;
	if (!pd)
		return n ? crest_errf(-errno, "cannot list /proc") : 0;
	const pid_t self = getpid();
	int found = 0;
	struct dirent *pe;
	while (!found && (pe = readdir(pd))) {
		char *end;
		const long pid = strtol(pe->d_name, &end, 10);
		if (*end || pid <= 0 || pid == self)
			continue;
		char dpath[64];
		snprintf(dpath, sizeof(dpath), "/proc/%ld/fd", pid);
		DIR *d = opendir(dpath);
		if (!d)
			continue;   /* gone, or a kernel thread */
		struct dirent *e;
		while (!found && (e = readdir(d))) {
			if (e->d_name[0] == '.')
				continue;
			char lpath[64 + 256];
			struct stat sb;
			snprintf(lpath, sizeof(lpath), "%s/%s", dpath, e->d_name);
			if (stat(lpath, &sb) < 0 || !S_ISREG(sb.st_mode))
				continue;
			for (size_t k = 0; k < n; k++) {
				if (files[k].dev != (uint64_t)sb.st_dev || files[k].ino != (uint64_t)sb.st_ino)
					continue;
				/* Read-only (a tail -f) harms nothing and does not count. */
				const long fl = fd_flags((pid_t)pid, e->d_name);
				if (fl >= 0 && (fl & O_ACCMODE) != O_RDONLY) {
					*who = (pid_t)pid;
					*which = k;
					found = 1;
				}
				break;
			}
		}
		closedir(d);
	}
	closedir(pd);
	return found;
}

void proc_files_free(struct proc_files *f)
{
	for (size_t i = 0; i < f->n; i++)
		free(f->v[i].path);
	free(f->v);
	f->v = NULL;
	f->n = 0;
}

static int own_ns(pid_t pid, const char *ns)
{
	char path[64], self[64];
	struct stat mine, theirs;
	snprintf(path, sizeof(path), "/proc/%d/ns/%s", (int)pid, ns);
	snprintf(self, sizeof(self), "/proc/self/ns/%s", ns);
	if (stat(path, &theirs) < 0)
		return -ESRCH;
	if (stat(self, &mine) < 0)
		return 0;
	return mine.st_ino != theirs.st_ino || mine.st_dev != theirs.st_dev;
}

uint64_t proc_ns_ino(pid_t pid, const char *ns)
{
	char path[64];
	struct stat sb;
	snprintf(path, sizeof(path), "/proc/%d/ns/%s", (int)pid, ns);
	return stat(path, &sb) == 0 ? (uint64_t)sb.st_ino : 0;
}

int proc_own_mntns(pid_t pid)
{
	return own_ns(pid, "mnt");
}

int proc_own_netns(pid_t pid)
{
	return own_ns(pid, "net");
}

/* The mount ids of pid's namespace (the first field of each line of its
 * mountinfo) into *ids. */
static int mount_ids(pid_t pid, int **ids, size_t *n)
{
	char path[64], line[4096];
	*ids = NULL;
	*n = 0;
	snprintf(path, sizeof(path), "/proc/%d/mountinfo", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return -ESRCH;
	size_t cap = 0;
	int rc = 0;
	while (fgets(line, sizeof(line), f)) {
		if (!strchr(line, '\n')) {    /* a line longer than the buffer: skip its rest */
			int ch;
			while ((ch = fgetc(f)) != EOF && ch != '\n')
				;
		}
		if (*n == cap) {
			int *nv = realloc(*ids, (cap = cap ? 2 * cap : 64) * sizeof(int));
			if (!nv) {
				rc = crest_errf(-ENOMEM, "reading %s", path);
				break;
			}
			*ids = nv;
		}
		(*ids)[(*n)++] = atoi(line);
	}
	fclose(f);
	return rc;
}

static bool has_id(const int *ids, size_t n, int id)
{
	for (size_t i = 0; i < n; i++)
		if (ids[i] == id)
			return true;
	return false;
}

/* The tty majors of the kernel's pty and console drivers: CRIU keys a
 * terminal by its device numbers, not by a file. */
static bool is_tty(const struct stat *sb)
{
	if (!S_ISCHR(sb->st_mode))
		return false;
	const unsigned ma = major(sb->st_rdev);
	return ma == 4 || ma == 5 || (ma >= 136 && ma <= 143);
}

int proc_extfds_get(const struct proc_tree *t, struct proc_extfds *out)
{
	memset(out, 0, sizeof(*out));
	int *host = NULL, *own = NULL;
	size_t nhost = 0, nown = 0;
	int rc = mount_ids(getpid(), &host, &nhost);
	pid_t own_of = 0;
	for (size_t i = 0; rc == 0 && i < t->n; i++) {
		const pid_t pid = t->pids[i];
		/* The tree's processes share one namespace as crest run makes
		 * them; read it again only for one that does not. */
		if (!own_of || proc_own_mntns(pid) != proc_own_mntns(own_of)) {
			free(own);
			own = NULL;
			if (mount_ids(pid, &own, &nown) < 0)
				continue;   /* gone meanwhile: CRIU will say so */
			own_of = pid;
		}
		char dpath[64];
		snprintf(dpath, sizeof(dpath), "/proc/%d/fd", (int)pid);
		DIR *d = opendir(dpath);
		if (!d)
			continue;
		struct dirent *e;
		while (rc == 0 && (e = readdir(d))) {
			if (e->d_name[0] == '.')
				continue;
			int flags = 0, mnt = 0;
			uint64_t pos = 0;
			if (fd_info(pid, e->d_name, &flags, &pos, &mnt) < 0 || has_id(own, nown, mnt) ||
			    !has_id(host, nhost, mnt))
				continue;
			char lpath[PATH_MAX + 64], target[PATH_MAX];
			snprintf(lpath, sizeof(lpath), "%s/%s", dpath, e->d_name);
			const ssize_t n = readlink(lpath, target, sizeof(target) - 1);
			struct stat sb;
			if (n <= 0 || target[0] != '/' || stat(lpath, &sb) < 0)
				continue;
			target[n] = 0;
			char key[64];
			if (is_tty(&sb))
				snprintf(key, sizeof(key), "tty[%" PRIx64 ":%" PRIx64 "]", (uint64_t)sb.st_rdev,
					 (uint64_t)sb.st_dev);
			else
				snprintf(key, sizeof(key), "file[%x:%" PRIx64 "]", (unsigned)mnt, (uint64_t)sb.st_ino);
			bool dup = false;
			for (size_t k = 0; k < out->n && !dup; k++)
				dup = !strcmp(out->v[k].key, key);
			if (dup)
				continue;
			if (strchr(target, '\n')) {
				rc = crest_errx(-EINVAL, "pid %d holds %s, whose name has a newline: crest cannot "
						"hand it back on restore", (int)pid, target);
				break;
			}
			struct proc_extfd *nv = realloc(out->v, (out->n + 1) * sizeof(*nv));
			if (nv)
				out->v = nv;
			if (!nv || !(out->v[out->n].path = strdup(target))) {
				rc = crest_errf(-ENOMEM, "listing open files");
				break;
			}
			snprintf(out->v[out->n].key, sizeof(out->v[out->n].key), "%s", key);
			out->v[out->n].flags = flags & (O_ACCMODE | O_APPEND);
			out->v[out->n].pos = pos;
			out->n++;
		}
		closedir(d);
	}
	free(host);
	free(own);
	if (rc < 0)
		proc_extfds_free(out);
	return rc;
}

void proc_extfds_free(struct proc_extfds *f)
{
	for (size_t i = 0; i < f->n; i++)
		free(f->v[i].path);
	free(f->v);
	f->v = NULL;
	f->n = 0;
}

/* One unsigned number from a /proc file, after prefix on a line of it
 * (NULL: the file's first number). */
static int proc_number(const char *path, const char *prefix, uint64_t *v)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return crest_errf(-errno, "cannot read %s", path);
	char line[256];
	int rc = crest_errx(-ENODATA, "%s: no %s in it", path, prefix ? prefix : "number");
	while (fgets(line, sizeof(line), f)) {
		const char *p = line;
		if (prefix) {
			if (strncmp(line, prefix, strlen(prefix)))
				continue;
			p += strlen(prefix);
		}
		unsigned long long n;
		if (sscanf(p, " %llu", &n) == 1) {
			*v = n;
			crest_errset_str("");
			rc = 0;
		}
		break;
	}
	fclose(f);
	return rc;
}

/* A limit and a usage of crest's own cgroup (v2: "0::/PATH", files
 * v2max/v2cur; v1: the controller's own line, files v1max/v1cur), into
 * *room as the limit less the usage when that is lower. "max", a missing
 * file or no line leaves *room as it was: no limit to honour. */
static void cgroup_room(const char *ctl, const char *v2max, const char *v2cur, const char *v1max,
			const char *v1cur, uint64_t *room)
{
	FILE *f = fopen("/proc/self/cgroup", "re");
	if (!f)
		return;
	char line[1024], path[1400], dir[1100] = "";
	bool v2 = false;
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = 0;
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2)
			continue;
		*c2 = 0;
		if (!strcmp(c1 + 1, ctl)) {           /* v1: "N:memory:/PATH" */
			snprintf(dir, sizeof(dir), "/sys/fs/cgroup/%s%s", ctl, c2 + 1);
			v2 = false;
			break;
		}
		if (!c1[1] && !strncmp(line, "0", 2)) {   /* v2: "0::/PATH" */
			snprintf(dir, sizeof(dir), "/sys/fs/cgroup%s", c2 + 1);
			v2 = true;
		}
	}
	fclose(f);
	if (!dir[0])
		return;
	uint64_t max, cur;
	snprintf(path, sizeof(path), "%s/%s", dir, v2 ? v2max : v1max);
	if (proc_number(path, NULL, &max) < 0) {   /* "max", or not there */
		crest_errset_str("");
		return;
	}
	snprintf(path, sizeof(path), "%s/%s", dir, v2 ? v2cur : v1cur);
	if (proc_number(path, NULL, &cur) < 0) {
		crest_errset_str("");
		cur = 0;
	}
	const uint64_t left = max > cur ? max - cur : 0;
	if (left < *room)
		*room = left;
}

int proc_room(uint64_t *mem_bytes, uint64_t *tasks)
{
	uint64_t kib, pid_max, threads_max;
	int rc = proc_number("/proc/meminfo", "MemAvailable:", &kib);
	if (rc == 0)
		rc = proc_number("/proc/sys/kernel/pid_max", NULL, &pid_max);
	if (rc == 0)
		rc = proc_number("/proc/sys/kernel/threads-max", NULL, &threads_max);
	if (rc < 0)
		return rc;
	/* loadavg's fourth field: "running/total" tasks. */
	FILE *f = fopen("/proc/loadavg", "re");
	if (!f)
		return crest_errf(-errno, "cannot read /proc/loadavg");
	unsigned long long running, total;
	const int got = fscanf(f, "%*s %*s %*s %llu/%llu", &running, &total);
	fclose(f);
	if (got != 2)
		return crest_errx(-ENODATA, "/proc/loadavg: no task count in it");
	const uint64_t limit = pid_max < threads_max ? pid_max : threads_max;
	*mem_bytes = kib * 1024;
	*tasks = limit > total ? limit - total : 0;
	/* The copies start in crest's cgroup: its limits bound them too (a
	 * batch job's allocation, a container's). */
	cgroup_room("memory", "memory.max", "memory.current", "memory.limit_in_bytes", "memory.usage_in_bytes",
		    mem_bytes);
	cgroup_room("pids", "pids.max", "pids.current", "pids.max", "pids.current", tasks);
	return 0;
}
