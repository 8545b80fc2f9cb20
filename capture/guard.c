/* guard.c - a job given back if crest dies while it holds it; see guard.h. */
#include "capture/guard.h"
#include "gpu/gpuckpt.h"
#include "gpu/shimctl.h"
#include "os/proc.h"
#include "os/spawn.h"
#include "os/thp.h"
#include "util/err.h"
#include "util/fault.h"
#include "util/progress.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define GUARD_FD SPAWN_FD   /* the pipe's read end */
#define DISARM 'D'
/* How long the guard waits for CRIU to let go of the tree: a dump it was
 * left to finish alone, of a large job to a slow tmpfs. */
#define CRIU_WAIT_S 600
/* How long no CRIU may run, nor trace the tree, before the guard acts. */
#define QUIET_MS 1000

int tp_guard_start(struct tp_guard *g, pid_t root, bool stopped, const pid_t *cuda, size_t ncuda,
		   const pid_t *held, size_t nheld, const pid_t *shim, size_t nshim)
{
	memset(g, 0, sizeof(*g));
	g->fd = -1;
	char rootarg[24], *list = proc_pids_format(cuda, ncuda), *hlist = proc_pids_format(held, nheld);
	char *slist = proc_pids_format(shim, nshim);
	if (!list || !hlist || !slist) {
		free(list);
		free(hlist);
		free(slist);
		return crest_errf(-ENOMEM, "guarding pid %d", (int)root);
	}
	snprintf(rootarg, sizeof(rootarg), "%d", (int)root);
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0) {
		free(list);
		free(hlist);
		free(slist);
		return crest_errf(-errno, "cannot start the guard of pid %d", (int)root);
	}
	/* The read end becomes fd 3 (GUARD_FD); the write end stays crest's
	 * alone, so that it ends only with crest or at the disarm. */
	char *args[] = { "__capture-guard", rootarg, stopped ? "stopped" : "running", list, hlist, slist, NULL };
	pid_t pid;
	const int rc = spawn_self(args, &p[0], 1, &pid);
	free(list);
	free(hlist);
	free(slist);
	close(p[0]);
	if (rc < 0) {
		close(p[1]);
		return crest_errctx(rc, "cannot start the guard of pid %d", (int)root);
	}
	g->pid = pid;
	g->fd = p[1];
	return 0;
}

void tp_guard_disarm(struct tp_guard *g)
{
	if (!g->pid)
		return;
	const char d = DISARM;
	ssize_t w;
	do
		w = write(g->fd, &d, 1);
	while (w < 0 && errno == EINTR);
	close(g->fd);
	while (waitpid(g->pid, NULL, 0) < 0 && errno == EINTR)
		;
	g->pid = 0;
	g->fd = -1;
}

/* Whether a process of the tree is traced (CRIU still at it). */
static bool tree_traced(const struct proc_tree *t)
{
	for (size_t i = 0; i < t->n; i++) {
		char path[64], line[256];
		snprintf(path, sizeof(path), "/proc/%d/status", (int)t->pids[i]);
		FILE *f = fopen(path, "re");
		if (!f)
			continue;
		bool traced = false;
		while (fgets(line, sizeof(line), f))
			if (!strncmp(line, "TracerPid:", 10)) {
				traced = atoi(line + 10) != 0;
				break;
			}
		fclose(f);
		if (traced)
			return true;
	}
	return false;
}

/* Whether a CRIU dump of root runs: a process whose arguments hold "dump"
 * and "-t ROOT" (os/criu.c's criu_dump). */
static bool criu_dumping(pid_t root)
{
	char want[24];
	snprintf(want, sizeof(want), "%d", (int)root);
	DIR *d = opendir("/proc");
	if (!d)
		return false;
	bool found = false;
	struct dirent *e;
	while (!found && (e = readdir(d))) {
		if (e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		char path[sizeof(e->d_name) + 16], buf[4096];
		snprintf(path, sizeof(path), "/proc/%s/cmdline", e->d_name);
		const int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		const ssize_t n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n <= 0)
			continue;
		buf[n] = 0;
		bool dump = false;
		for (const char *a = buf, *prev = ""; a < buf + n; prev = a, a += strlen(a) + 1) {
			dump |= !strcmp(a, "dump");
			found |= dump && !strcmp(prev, "-t") && !strcmp(a, want);
		}
	}
	closedir(d);
	return found;
}

int tp_guard_main(int argc, char **argv)
{
	spawn_quiet_signals();
	prctl(PR_SET_NAME, "crest-guard", 0, 0, 0);
	char *end;
	const long root = argc == 6 ? strtol(argv[1], &end, 10) : 0;
	pid_t *cuda = NULL, *held = NULL, *shim = NULL;
	size_t ncuda = 0, nheld = 0, nshim = 0;
	if (root <= 0 || root > INT32_MAX || *end || (strcmp(argv[2], "stopped") && strcmp(argv[2], "running")) ||
	    proc_pids_parse(argv[3], &cuda, &ncuda) < 0 || proc_pids_parse(argv[4], &held, &nheld) < 0 ||
	    proc_pids_parse(argv[5], &shim, &nshim) < 0) {
		fprintf(stderr, "crest: __capture-guard is crest checkpoint's own, not a command\n");
		free(cuda);
		free(held);
		free(shim);
		return 2;
	}
	char b = 0;
	ssize_t r;
	do
		r = read(GUARD_FD, &b, 1);
	while (r < 0 && errno == EINTR);
	if (r == 1 && b == DISARM) {
		free(cuda);
		free(held);
		free(shim);
		return 0;
	}
	/* crest is gone with the job in its hands. CRIU, left alone, finishes
	 * or fails its dump and lets go of the tree: only then can the tree
	 * run, and the driver works on a thread inside each CUDA process. A
	 * tree not traced is not enough: crest may have died just after it
	 * started CRIU, which has yet to seize the tree (or even to exec, in
	 * the child crest forked). So the guard acts once, for QUIET_MS in a
	 * row, no CRIU dump of this root runs and no process of the tree is
	 * traced. */
	struct proc_tree t;
	const time_t deadline = time(NULL) + CRIU_WAIT_S;
	uint64_t quiet_since = 0;
	bool traced = false;
	while (proc_tree_get((pid_t)root, &t) == 0) {
		traced = tree_traced(&t) || criu_dumping((pid_t)root);
		const uint64_t now = time_now_ns() / 1000000;   /* ms */
		quiet_since = traced ? 0 : quiet_since ? quiet_since : now;
		if ((quiet_since && now - quiet_since >= QUIET_MS) || time(NULL) >= deadline) {
			/* Left stopped (--kill) by CRIU: continued. A job that
			 * was to run on is not sent a SIGCONT it never asked for,
			 * nor is a process that was stopped before the freeze. */
			for (size_t i = 0; !strcmp(argv[2], "stopped") && i < t.n; i++) {
				bool was = false;
				for (size_t k = 0; k < nheld && !was; k++)
					was = held[k] == t.pids[i];
				if (!was && proc_state(t.pids[i]) == 'T')
					kill(t.pids[i], SIGCONT);
			}
			int rc = crest_fault_res("capture.guard.gpu", 0);   /* tests only: util/fault.h */
			if (rc == 0)
				rc = gpuckpt_guard_settle(cuda, ncuda, NULL, 0, proc_gone);
			else
				crest_errf(rc, "bringing back the GPU state of %zu CUDA process(es)", ncuda);
			/* Then their NCCL, paused or released by the shim: a job
			 * whose communicators cannot be made again would wait at
			 * its next collective for ever, so it is ended below. */
			if (rc == 0 && nshim)
				rc = shimctl_rebuild_pids(shim, nshim);   /* rebuilt where released, opened where paused */
			/* A process the driver still holds can never run again, and
			 * nobody is left to store it: the job is ended (stopped
			 * first, so that nothing forks past the listing), never left
			 * frozen in silence. */
			if (rc < 0) {
				for (size_t i = 0; i < t.n; i++)
					kill(t.pids[i], SIGSTOP);
				struct proc_tree now;
				const struct proc_tree *k = proc_tree_get((pid_t)root, &now) == 0 ? &now : &t;
				for (size_t i = 0; i < k->n; i++)
					kill(k->pids[i], SIGKILL);
				if (k == &now)
					proc_tree_free(&now);
			}
			fprintf(stderr, "crest: the checkpoint of pid %ld ended without crest (was it killed?): %s%s%s%s\n",
				root, rc < 0 ? "its GPU state could not be brought back (" : "it runs again",
				rc < 0 ? crest_errmsg() : "",
				rc < 0 ? "), so the guard ended the job, which could never run again" : "",
				traced ? " (CRIU still held it)" : "");
			proc_tree_free(&t);
			free(cuda);
			free(held);
			free(shim);
			os_thp_repair_wait();   /* --huge-pages: os/thp.h */
			return rc < 0;
		}
		proc_tree_free(&t);
		const struct timespec ms50 = { 0, 50 * 1000 * 1000 };
		nanosleep(&ms50, NULL);
	}
	free(cuda);   /* the job is gone: nothing to give back */
	free(held);
	free(shim);
	os_thp_repair_wait();   /* --huge-pages: os/thp.h */
	return 0;
}
