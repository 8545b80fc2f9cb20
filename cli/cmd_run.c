/*
 * cmd_run.c - crest run and crest clone: a job started by crest in a pid
 * namespace of its own (os/pidns.h), checkpointed while it runs, and
 * copies of its snapshots run beside it.
 *
 * crest run's own lines go to stderr: stdout is the job's.
 */
#include "cas/history.h"
#include "cli/commands.h"
#include "cli/metrics.h"
#include "os/pidns.h"
#include "os/proc.h"
#include "restore/process.h"
#include "util/err.h"
#include "util/json.h"
#include "util/progress.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct pidns_job run_job = { -1, -1 };

/* Ctrl-C, kill, a closed terminal, SIGUSR1...: meant for the job, which
 * its init passes on; crest goes on until the job has ended. */
static void run_forward(int sig)
{
	pidns_signal(&run_job, sig);
}

struct run_view {
	const struct cli *c;
	uint64_t n;
};

static void run_resumed(void *arg, const struct tp_opts *o, const struct tp_capture *cap)
{
	const struct run_view *v = arg;
	if (!v->c->quiet && !v->c->json)
		fprintf(stderr, "crest: checkpoint %llu of pid %d: resumed after a %.3f s stall\n",
			(unsigned long long)v->n, (int)o->pid, cli_secs(cap->stall_ns));
	cli_shim_note(v->c, o, cap);
}

/* One checkpoint of the running job onto o->branch, after *parent (or the
 * branch's head). The store is opened for it alone, so that other crests
 * (clone, checkpoint of a clone, tag) can write between checkpoints. */
static int run_checkpoint(const struct cli *c, const struct tp_opts *o, const char *push_to, uint8_t parent[32],
			  bool *has_parent, uint64_t n, struct cli_metrics *mx)
{
	struct cas_store *store;
	struct engine *e;
	int rc = cli_writer_open(c, NULL, &store, &e);
	if (rc < 0)
		return rc;
	if (!*has_parent)
		*has_parent = cas_branch_head(store, o->branch, parent) == 0;
	crest_errset_str("");
	struct run_view v = { .c = c, .n = n };
	const struct tp_hooks h = { .resumed = run_resumed, .arg = &v };
	struct tp_result st = { 0 };
	rc = tp_checkpoint(store, e, o, NULL, *has_parent ? parent : NULL, &h, &st);
	engine_close(e);
	if (rc < 0) {
		cas_close(store);
		return rc;
	}
	cli_metrics_round(mx, 0, &st);
	memcpy(parent, st.id, 32);
	*has_parent = true;
	char hex[65], b1[32], b2[32];
	cli_print_id(hex, st.id);
	if (c->json) {
		fprintf(stderr, "{\"checkpoint\": %llu, \"pid\": %d, \"branch\": ", (unsigned long long)n, (int)o->pid);
		json_str(stderr, o->branch);
		fprintf(stderr, ", \"snapshot\": \"%s\", \"stall_seconds\": %.4f, \"logical_bytes\": %llu, "
			"\"new_bytes\": %llu}\n", hex, cli_secs(st.stall_ns), (unsigned long long)st.r.logical_bytes,
			(unsigned long long)st.r.new_bytes);
	} else if (!c->quiet) {
		fprintf(stderr, "crest: snapshot %s on %s: %s logical, %s new\n", hex, o->branch,
			fmt_bytes(st.r.logical_bytes, b1, sizeof(b1)), fmt_bytes(st.r.new_bytes, b2, sizeof(b2)));
	}
	/* The job runs on while its snapshot goes to the other store; the
	 * push failing fails this round, the snapshot staying here. */
	rc = push_to ? cli_push(c, store, push_to, st.id, stderr) : 0;
	cas_close(store);
	return rc;
}

int cmd_run(struct cli *c, int argc, char **argv)
{
	struct tp_opts o = { 0 };
	struct cli_every ev = { 0 };
	bool shim = false;
	int i = 1;
	for (; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--")) {
			i++;
			break;
		}
		if (a[0] != '-')
			break;
		if (!strcmp(a, "--tcp-close")) {
			o.tcp_close = true;
			continue;
		}
		if (!strcmp(a, "--cuda-shim")) {
			shim = true;
			continue;
		}
		if (!strcmp(a, "--stage-images")) {
			o.stage_images = true;
			continue;
		}
		if (!strcmp(a, "--huge-pages")) {
			o.huge_pages = true;
			continue;
		}
		if (i + 1 >= argc)
			return cli_usage(c, "run", "%s needs a value", a);
		const int took = cli_every_opt(a, argv[++i], &o, &ev);
		if (took < 0)
			return CLI_EXIT_USAGE;
		if (!took)
			return cli_usage(c, "run", "unknown option %s", a);
	}
	if (i >= argc)
		return cli_usage(c, "run", "no COMMAND given");
	if (!o.branch)
		o.branch = CAS_BRANCH_DEFAULT;
	if (cas_branch_check(o.branch) < 0)
		return cli_usage_fail(c, -EINVAL);
	if (cli_workdir_check(c, &o) < 0)
		return cli_usage_fail(c, -EINVAL);
	const int pushable = ev.push_to ? cli_push_check(c, ev.push_to) : 0;
	if (pushable < 0)
		return cli_fail(c, pushable);
	if (geteuid() != 0)
		return cli_fail(c, crest_errx(-EPERM, "not permitted: crest run needs root (a pid namespace, "
					       "and CRIU for its checkpoints)"));
	/* criu is looked for before the job starts: a job that cannot be
	 * checkpointed is better not started under --every. */
	struct criu criu;
	if (ev.every_ns) {
		int rc = criu_find(&criu);
		if (rc < 0)
			return cli_fail(c, rc);
		o.criu = &criu;
	}
	/* Its socket before the job starts (pidns_spawn closes it in the
	 * job), its thread after. */
	struct cli_metrics *mx = NULL;
	if ((ev.maddr || ev.mfile) && cli_metrics_open(ev.maddr, ev.mfile, &mx) < 0) {
		fprintf(stderr, "crest: %s\n", crest_errmsg());
		return 2;
	}
	/* Every signal the init forwards: crest dying of SIGUSR1 or SIGQUIT
	 * would leave the job running orphaned, its exit status lost and
	 * its --every checkpoints stopped. Blocked across the spawn, with the
	 * handlers in place before it: one sent as soon as the job runs (it
	 * may say it is ready before pidns_spawn returns here) waits, and is
	 * forwarded once the init's pid is known, rather than killing crest
	 * (seen under load: SIGUSR2, exit 140). The helper keeps them
	 * blocked (it only waits for the init), the init blocks everything
	 * until its own handlers are set, and the job starts with none
	 * blocked. */
	size_t nfwd;
	const int *fwd = pidns_forwarded(&nfwd);
	struct sigaction sa = { .sa_handler = run_forward };
	sigemptyset(&sa.sa_mask);
	sigset_t fwdset, oldset;
	sigemptyset(&fwdset);
	for (size_t k = 0; k < nfwd; k++) {
		sigaddset(&fwdset, fwd[k]);
		sigaction(fwd[k], &sa, NULL);
	}
	sigprocmask(SIG_BLOCK, &fwdset, &oldset);
	/* --cuda-shim: the job's environment alone gets the preload (crest
	 * itself runs CRIU, which must not load it); the spawn's fork copies
	 * it, and crest's own is put back at once. */
	char *old_preload = NULL, shim_env[2 * PATH_MAX + 2];
	if (shim) {
		char path[PATH_MAX];
		int src = cli_shim_path(path, sizeof(path));
		const char *prev = getenv("LD_PRELOAD");
		if (src == 0 && prev && !(old_preload = strdup(prev)))
			src = crest_errf(-ENOMEM, "--cuda-shim");
		if (src < 0) {
			sigprocmask(SIG_SETMASK, &oldset, NULL);
			cli_metrics_close(mx);
			return cli_fail(c, src);
		}
		snprintf(shim_env, sizeof(shim_env), "%s%s%s", path, prev && prev[0] ? ":" : "", prev ? prev : "");
		setenv("LD_PRELOAD", shim_env, 1);
	}
	/* Before any thread or store: the init is a fork of this process. */
	int rc = pidns_spawn(argv + i, c->umask, &run_job);
	if (shim && old_preload)
		setenv("LD_PRELOAD", old_preload, 1);
	else if (shim)
		unsetenv("LD_PRELOAD");
	free(old_preload);
	o.pid = run_job.init;
	sigprocmask(SIG_SETMASK, &oldset, NULL);
	if (rc < 0) {
		cli_metrics_close(mx);
		return cli_fail(c, rc);
	}
	if (!c->quiet && !c->json)
		fprintf(stderr, "crest: %s runs as pid %d (pid 1 of its namespace: crest's init, the job is "
			"pid 2)\n", argv[i], (int)o.pid);
	/* Without its metrics the job runs on: they are not worth ending it. */
	if (mx && cli_metrics_start(mx, c, o.branch, o.pid, ev.every_ns) < 0) {
		cli_fail(c, -EIO);
		cli_metrics_close(mx);
		mx = NULL;
	}
	uint8_t parent[32];
	bool has_parent = false;
	uint64_t n = 0, failures = 0;
	int status = 0;
	for (;;) {
		/* every_ns is at most 366 days (cli_parse_duration), far inside
		 * int64_t: never narrowed to an int of milliseconds, which
		 * wrapped past 2^31 ms (to no checkpoint ever) and 2^32. */
		rc = pidns_wait(&run_job, ev.every_ns ? (int64_t)ev.every_ns : -1, &status);
		if (rc < 0) {
			/* Cannot wait: the job goes on without crest. */
			cli_metrics_close(mx);
			return cli_fail(c, rc);
		}
		if (rc == 1)
			break;
		rc = run_checkpoint(c, &o, ev.push_to, parent, &has_parent, ++n, mx);
		if (rc < 0) {
			/* A job that ended during its checkpoint is no failure of
			 * crest's: its status is what counts. */
			if (pidns_wait(&run_job, 0, &status) == 1)
				break;
			failures++;
			cli_fail(c, rc);
			cli_metrics_round(mx, rc, NULL);
		}
	}
	cli_metrics_close(mx);
	if (failures && !c->quiet)
		fprintf(stderr, "crest: %llu of %llu checkpoints failed\n", (unsigned long long)failures,
			(unsigned long long)n);
	if (!c->quiet && !c->json)
		fprintf(stderr, "crest: the job ended with status %d after %llu checkpoints\n", status,
			(unsigned long long)n);
	return status;
}

/* pattern with each "%d" replaced by k; never a printf format. */
static int expand(const char *pattern, unsigned k, char *out, size_t cap)
{
	size_t used = 0;
	for (const char *p = pattern; *p; p++) {
		char num[16];
		const char *piece = num;
		if (p[0] == '%' && p[1] == 'd') {
			snprintf(num, sizeof(num), "%u", k);
			p++;
		} else {
			num[0] = *p;
			num[1] = 0;
		}
		const size_t l = strlen(piece);
		if (used + l >= cap)
			return crest_errx(-ENAMETOOLONG, "--workdir %s: too long", pattern);
		memcpy(out + used, piece, l);
		used += l;
	}
	out[used] = 0;
	return 0;
}

/* Set by SIGINT or SIGTERM during a clone: no copy starts after it. */
static volatile sig_atomic_t clone_sig;

static void clone_on_signal(int sig)
{
	clone_sig = sig;
}

/* A signal crest was started ignoring stays ignored (nohup, `cmd &`). */
static void clone_signals(void)
{
	struct sigaction sa = { .sa_handler = clone_on_signal, .sa_flags = SA_RESTART }, old;
	sigemptyset(&sa.sa_mask);
	static const int sigs[] = { SIGINT, SIGTERM };
	for (size_t k = 0; k < 2; k++)
		if (sigaction(sigs[k], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
			sigaction(sigs[k], &sa, NULL);
}

/* What one copy needs of the machine, from its snapshot: memory, the bytes
 * of CRIU's page images (what the copy maps back in); tasks, one a thread
 * (CRIU's core-TID images) or process, and crest's init of its pid
 * namespace. count copies must fit in what the machine has left
 * (proc_room), or none starts: a clone of 1000 copies once ran 781 before
 * it was stopped, the machine swapping. */
static int clone_fits(const char *name, const struct cas_manifest *m, unsigned long count)
{
	uint64_t mem = 0, cores = 0;
	for (size_t i = 0; i < m->nstreams; i++) {
		const struct cas_stream *st = &m->streams[i];
		if (st->type != CAS_STREAM_IMAGE)
			continue;
		const char *base = strrchr(st->name, '/');
		base = base ? base + 1 : st->name;
		if (!strncmp(base, "pages-", 6))
			mem += st->size;
		else if (!strncmp(base, "core-", 5))
			cores++;
	}
	pid_t *pv = NULL;
	size_t np = 0;
	const char *pl = cas_manifest_get_label(m, "pids");
	if (!pl || proc_pids_parse(pl, &pv, &np) < 0)
		np = 0;
	free(pv);
	const uint64_t tasks = (cores > np ? cores : np) + 1;
	uint64_t mem_room, task_room;
	const int rc = proc_room(&mem_room, &task_room);
	if (rc < 0)
		return crest_errctx(rc, "clone: cannot tell what the machine can hold");
	char b1[32], b2[32], b3[32];
	if (mem && count > mem_room / mem)
		return crest_errx(-ENOMEM, "clone --count %lu: each copy of %s needs about %s of memory (its pages), "
				  "%s in all, and %s is available (MemAvailable, or what crest's cgroup allows): at most %llu "
				  "copies fit; none started", count, name, fmt_bytes(mem, b1, sizeof(b1)),
				  fmt_bytes(mem * count, b2, sizeof(b2)), fmt_bytes(mem_room, b3, sizeof(b3)),
				  (unsigned long long)(mem_room / mem));
	if (count > task_room / tasks)
		return crest_errx(-EAGAIN, "clone --count %lu: each copy of %s needs %llu tasks, %llu in all, and "
				  "the kernel allows %llu more (pid_max, threads-max): at most %llu copies fit; "
				  "none started", count, name, (unsigned long long)tasks,
				  (unsigned long long)(tasks * count), (unsigned long long)task_room,
				  (unsigned long long)(task_room / tasks));
	return 0;
}

/* Starts copy pid's branch at the snapshot (a ref, no data: history.h) and
 * notes the job, so that its checkpoints continue that branch. The store
 * is opened for writing for this alone: between copies, other crests
 * (the original's checkpoints) get their turn. */
static int clone_record(const struct cli *c, const uint8_t id[32], const char *branch, pid_t pid,
			uint8_t bid[32])
{
	struct cas_store *w;
	int rc = cli_store_open(c, CAS_WRITE, &w);
	if (rc < 0)
		return rc;
	rc = cas_branch_fork(w, id, branch, bid);
	if (rc == 0)
		cli_job_note(c, w, pid, bid, branch);
	cas_close(w);
	return rc;
}

/* A copy's line, printed as soon as it runs. */
static void clone_say(const struct cli *c, unsigned long k, const char *hex, pid_t pid, const char *branch,
		      const uint8_t *bid)
{
	if (c->json) {
		char bh[65] = "";
		if (bid)
			cli_print_id(bh, bid);
		printf("{\"clone\": %lu, \"snapshot\": \"%s\", \"pid\": %d, \"branch\": ", k, hex, (int)pid);
		json_str(stdout, branch);
		printf(", \"branch_snapshot\": \"%s\"}\n", bh);
	} else if (!c->quiet) {
		printf("clone %lu of %.12s: pid %d, branch %s\n", k, hex, (int)pid, branch);
	}
	fflush(stdout);
}

int cmd_clone(struct cli *c, int argc, char **argv)
{
	const char *name = NULL, *branch = NULL, *workdir = NULL, *tmpdir = NULL, *gpu = NULL, *gpu_map = NULL;
	unsigned long count = 1;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (a[0] != '-' || !a[1]) {
			if (name)
				return cli_usage(c, "clone", "wants one SNAPSHOT, no more: %s", a);
			name = a;
			continue;
		}
		if (i + 1 >= argc)
			return cli_usage(c, "clone", "%s needs a value", a);
		const char *v = argv[++i];
		if (!strcmp(a, "--branch")) {
			branch = v;
		} else if (!strcmp(a, "--count")) {
			uint64_t n;
			if (cli_parse_uint(v, 1, 1000, &n) < 0)
				return cli_usage(c, "clone", "--count %s: a number from 1 to 1000", v);
			count = (unsigned long)n;
		} else if (!strcmp(a, "--workdir")) {
			workdir = v;
		} else if (!strcmp(a, "--tmpdir")) {
			tmpdir = v;
		} else if (!strcmp(a, "--gpu")) {
			gpu = v;
		} else if (!strcmp(a, "--gpu-map")) {
			gpu_map = v;
		} else {
			return cli_usage(c, "clone", "unknown option %s", a);
		}
	}
	if (!name)
		return cli_usage(c, "clone", "wants a SNAPSHOT");
	if (!branch)
		return cli_usage(c, "clone", "--branch NEW is required (the copies' branch)");
	if (gpu && cli_check_gpu(gpu) < 0)
		return cli_usage_fail(c, -EINVAL);
	/* A CUDA copy goes where it is told, else to the original's GPUs. */
	struct gpuckpt_map *map = NULL;
	size_t nmap = 0;
	if (gpu_map && cli_parse_gpu_map(gpu_map, &map, &nmap) < 0) {
		free(map);
		return cli_usage_fail(c, -EINVAL);
	}
	if (workdir && count > 1 && !strstr(workdir, "%d")) {
		free(map);
		return cli_usage(c, "clone", "--workdir %s: with --count %lu it needs %%d, or the copies would "
				 "share files", workdir, count);
	}
	/* Each copy has a branch of its own for its later snapshots: NEW, or
	 * NEW-1 .. NEW-N for several (one branch would interleave them). */
	/* A branch name, or up to 140 of its bytes, "-" and a copy's number. */
	char (*names)[168] = calloc(count, sizeof(*names));
	if (!names) {
		free(map);
		return cli_fail(c, crest_errf(-ENOMEM, "clone"));
	}
	int rc = 0;
	for (unsigned long k = 0; rc == 0 && k < count; k++) {
		if (count == 1)
			snprintf(names[k], sizeof(names[k]), "%s", branch);
		else
			snprintf(names[k], sizeof(names[k]), "%.140s-%lu", branch, k + 1);
		rc = cas_branch_check(names[k]);
	}
	if (rc < 0) {
		free(names);
		free(map);
		return cli_usage_fail(c, rc);
	}
	if (rc == 0 && geteuid() != 0)
		rc = crest_errx(-EPERM, "not permitted: restoring a process needs root (CRIU)");
	struct criu criu;
	if (rc == 0)
		rc = criu_find(&criu);
	struct cas_store *store = NULL;
	struct cas_manifest *m = NULL;
	uint8_t id[32];
	if (rc == 0)
		rc = cli_snapshot_open(c, name, &store, id, &m);
	if (rc == 0 && !cas_manifest_get_label(m, "pidns"))
		rc = crest_errx(-EINVAL, "snapshot %s is of a job not started by crest run: its processes are not "
				"in a pid namespace of their own, and a copy would need the pids the original holds",
				name);
	/* Every branch is new: checked before anything runs. */
	for (unsigned long k = 0; rc == 0 && k < count; k++) {
		uint8_t head[32];
		if (cas_branch_head(store, names[k], head) == 0)
			rc = crest_errx(-EEXIST, "branch %s has snapshots already: choose another --branch", names[k]);
	}
	if (rc == 0)
		crest_errset_str("");   /* cas_branch_head's -ENOENT above is what was wanted */
	if (rc == 0)
		rc = clone_fits(name, m, count);
	char hex[65];
	cli_print_id(hex, id);
	pid_t *pids = calloc(count, sizeof(pid_t));
	if (rc == 0 && !pids)
		rc = crest_errf(-ENOMEM, "clone");
	/* From here Ctrl-C or SIGTERM stops the starting, not crest: the
	 * copies already running are said and kept. */
	clone_signals();
	unsigned long made = 0;
	int rrc = 0;
	for (; rc == 0 && made < count && !clone_sig; made++) {
		char wd[4096];
		if (workdir)
			rc = expand(workdir, (unsigned)(made + 1), wd, sizeof(wd));
		if (rc < 0)
			break;
		char shortid[13];
		snprintf(shortid, sizeof(shortid), "%.12s", hex);
		struct restore_ctx rctx = { .store = store, .snapshot = shortid, .threads = c->workers };
		struct rp_opts o = { .tmpdir = tmpdir, .beside = true, .workdir = workdir ? wd : NULL,
				     .clone = (unsigned)(made + 1), .notes = c->json || c->quiet ? NULL : stdout,
				     .gpu = gpu, .map = map, .nmap = nmap };
		struct rp_result r;
		rc = restore_process(&rctx, m, &criu, &o, &r);
		if (rc < 0) {
			crest_errctx(rc, "copy %lu of %lu", made + 1, count);
			break;
		}
		pids[made] = r.pid;
		/* Its branch and job note now, before the next copy starts: a
		 * clone stopped at any point leaves every running copy with
		 * both, and its line printed. */
		uint8_t bid[32];
		const int brc = clone_record(c, id, names[made], r.pid, bid);
		clone_say(c, made + 1, hex, r.pid, names[made], brc == 0 ? bid : NULL);
		if (brc < 0 && rrc == 0) {
			rrc = crest_errctx(brc, "copy %lu runs as pid %d, but its branch %s could not be started",
					   made + 1, (int)r.pid, names[made]);
			rc = rrc;
			made++;
			break;
		}
	}
	cas_manifest_free(m);
	if (store)
		cas_close(store);
	int ret = 0;
	if (clone_sig) {
		/* What ran, in one line on stderr (each copy's own line is on
		 * stdout already). */
		fprintf(stderr, "%s: clone interrupted (%s) after %lu of %lu copies", c->prog,
			clone_sig == SIGINT ? "SIGINT" : "SIGTERM", made, count);
		if (made) {
			fprintf(stderr, "; running:");
			for (unsigned long k = 0; k < made; k++)
				fprintf(stderr, "%s pid %d branch %s", k ? "," : "", (int)pids[k], names[k]);
		}
		fprintf(stderr, "\n");
		ret = 128 + clone_sig;
	} else if (rc < 0) {
		ret = cli_fail(c, rc);
		if (made)
			fprintf(stderr, "%s: %lu cop%s of %lu run%s, each with its branch (listed above)\n", c->prog,
				made, made == 1 ? "y" : "ies", count, made == 1 ? "s" : "");
	}
	free(pids);
	free(names);
	free(map);
	return ret;
}

