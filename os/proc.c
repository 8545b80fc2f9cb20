/* proc.c - reading /proc for checkpoints; see proc.h. */
#include "os/proc.h"
#include "util/err.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

bool proc_gone(pid_t pid)
{
	const char st = proc_state(pid);
	return !st || st == 'Z' || st == 'X';
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

bool proc_uses_cuda(pid_t pid)
{
	char path[64], line[4096];
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return false;
	bool found = false;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, "/libcuda.so") != NULL;
	fclose(f);
	return found;
}

/* The open flags of pid's fd, from fdinfo; -1 when unknown. */
static long fd_flags(pid_t pid, const char *fd)
{
	char path[320], line[256];
	snprintf(path, sizeof(path), "/proc/%d/fdinfo/%s", (int)pid, fd);
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	long flags = -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "flags:", 6)) {
			flags = strtol(line + 6, NULL, 8);
			break;
		}
	fclose(f);
	return flags;
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

void proc_files_free(struct proc_files *f)
{
	for (size_t i = 0; i < f->n; i++)
		free(f->v[i].path);
	free(f->v);
	f->v = NULL;
	f->n = 0;
}
