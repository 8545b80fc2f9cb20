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
#include "restore/process.h"
#include "util/err.h"
#include "util/json.h"
#include "util/progress.h"

#include <errno.h>
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
}

static void usage_run(void)
{
	fprintf(stderr, "usage: crest run [--every DURATION] [--branch B] [--file-limit SIZE] [--tmpdir DIR] "
			"[--tcp-close] -- COMMAND [ARG...]\n"
			"                 [--metrics [HOST:]PORT] [--metrics-file PATH]   (with --every)\n");
}

/* One checkpoint of the running job onto o->branch, after *parent (or the
 * branch's head). The store is opened for it alone, so that other crests
 * (clone, checkpoint of a clone, tag) can write between checkpoints. */
static int run_checkpoint(const struct cli *c, const struct tp_opts *o, uint8_t parent[32], bool *has_parent,
			  uint64_t n, struct cli_metrics *mx)
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
	cas_close(store);
	if (rc < 0)
		return rc;
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
	return 0;
}

int cmd_run(struct cli *c, int argc, char **argv)
{
	struct tp_opts o = { 0 };
	struct cli_every ev = { 0 };
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
		if (i + 1 >= argc) {
			usage_run();
			return 2;
		}
		const int took = cli_every_opt(a, argv[++i], &o, &ev);
		if (took < 0)
			return 2;
		if (!took) {
			fprintf(stderr, "crest: run: unknown option %s\n", a);
			usage_run();
			return 2;
		}
	}
	if (i >= argc) {
		usage_run();
		return 2;
	}
	if (cli_every_check(&ev) < 0)
		return 2;
	if (!o.branch)
		o.branch = CAS_BRANCH_DEFAULT;
	if (cas_branch_check(o.branch) < 0)
		return cli_fail(c, -EINVAL);
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
	/* Before any thread or store: the init is a fork of this process. */
	int rc = pidns_spawn(argv + i, c->umask, &run_job);
	if (rc < 0) {
		cli_metrics_close(mx);
		return cli_fail(c, rc);
	}
	o.pid = run_job.init;
	struct sigaction sa = { .sa_handler = run_forward };
	sigemptyset(&sa.sa_mask);
	/* Every signal the init forwards: crest dying of SIGUSR1 or SIGQUIT
	 * would leave the job running orphaned, its exit status lost and
	 * its --every checkpoints stopped. */
	size_t nfwd;
	const int *fwd = pidns_forwarded(&nfwd);
	for (size_t k = 0; k < nfwd; k++)
		sigaction(fwd[k], &sa, NULL);
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
		rc = pidns_wait(&run_job, ev.every_ns ? (int)(ev.every_ns / 1000000ull) : -1, &status);
		if (rc < 0) {
			/* Cannot wait: the job goes on without crest. */
			cli_metrics_close(mx);
			return cli_fail(c, rc);
		}
		if (rc == 1)
			break;
		rc = run_checkpoint(c, &o, parent, &has_parent, ++n, mx);
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

static void usage_clone(void)
{
	fprintf(stderr, "usage: crest clone SNAPSHOT --branch NEW [--count N] [--workdir PATTERN] [--tmpdir DIR]\n"
			"                   [--gpu N | --gpu-map OLD=NEW,...]\n"
			"  PATTERN names each copy's directory for the job's files, %%d its number (1..N);\n"
			"  without it each file is copied beside itself as FILE.clone-N\n");
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

int cmd_clone(struct cli *c, int argc, char **argv)
{
	const char *name = NULL, *branch = NULL, *workdir = NULL, *tmpdir = NULL, *gpu = NULL, *gpu_map = NULL;
	unsigned long count = 1;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (a[0] != '-' && !name) {
			name = a;
			continue;
		}
		if (i + 1 >= argc) {
			usage_clone();
			return 2;
		}
		const char *v = argv[++i];
		char *end;
		if (!strcmp(a, "--branch")) {
			branch = v;
		} else if (!strcmp(a, "--count")) {
			count = strtoul(v, &end, 10);
			if (*end || !count || count > 1000) {
				fprintf(stderr, "crest: --count %s: a number from 1 to 1000\n", v);
				return 2;
			}
		} else if (!strcmp(a, "--workdir")) {
			workdir = v;
		} else if (!strcmp(a, "--tmpdir")) {
			tmpdir = v;
		} else if (!strcmp(a, "--gpu")) {
			gpu = v;
		} else if (!strcmp(a, "--gpu-map")) {
			gpu_map = v;
		} else {
			fprintf(stderr, "crest: clone: unknown option %s\n", a);
			usage_clone();
			return 2;
		}
	}
	if (!name || !branch) {
		usage_clone();
		return 2;
	}
	if (gpu && gpu_map) {
		fprintf(stderr, "crest: clone: --gpu and --gpu-map: give one\n");
		return 2;
	}
	/* A CUDA copy goes where it is told, else to the original's GPUs. */
	struct gpuckpt_map *map = NULL;
	size_t nmap = 0;
	if (gpu_map && cli_parse_gpu_map(gpu_map, &map, &nmap) < 0) {
		free(map);
		return cli_fail(c, -EINVAL);
	}
	if (workdir && count > 1 && !strstr(workdir, "%d")) {
		fprintf(stderr, "crest: --workdir %s: with --count %lu it needs %%d, or the copies would share files\n",
			workdir, count);
		free(map);
		return 2;
	}
	/* Each copy has a branch of its own for its later snapshots: NEW, or
	 * NEW-1 .. NEW-N for several (one branch would interleave them). */
	char (*names)[160] = calloc(count, sizeof(*names));
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
	char hex[65];
	cli_print_id(hex, id);
	pid_t *pids = calloc(count, sizeof(pid_t));
	if (rc == 0 && !pids)
		rc = crest_errf(-ENOMEM, "clone");
	unsigned long made = 0;
	for (; rc == 0 && made < count; made++) {
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
	}
	cas_manifest_free(m);
	if (store)
		cas_close(store);
	store = NULL;
	/* The branches: each starts at the snapshot (a manifest, no data). */
	int brc = 0;
	uint8_t *bids = calloc(made ? made : 1, 32);
	if (made && !bids)
		brc = crest_errf(-ENOMEM, "clone");
	if (made && brc == 0)
		brc = cli_store_open(c, CAS_WRITE, &store);
	for (unsigned long k = 0; brc == 0 && k < made; k++) {
		brc = cas_branch_fork(store, id, names[k], bids + 32 * k);
		/* Each copy's checkpoints continue its own branch. */
		if (brc == 0)
			cli_job_note(c, store, pids[k], bids + 32 * k, names[k]);
	}
	if (store)
		cas_close(store);
	if (rc == 0 && brc < 0)
		rc = crest_errctx(brc, "the copies run, but their branches could not be started");
	for (unsigned long k = 0; k < made; k++) {
		if (c->json) {
			char bh[65];
			cli_print_id(bh, bids + 32 * k);
			printf("{\"clone\": %lu, \"snapshot\": \"%s\", \"pid\": %d, \"branch\": ", k + 1, hex, (int)pids[k]);
			json_str(stdout, names[k]);
			printf(", \"branch_snapshot\": \"%s\"}\n", brc == 0 ? bh : "");
		} else if (!c->quiet) {
			printf("clone %lu of %.12s: pid %d, branch %s\n", k + 1, hex, (int)pids[k], names[k]);
		}
	}
	fflush(stdout);
	free(bids);
	free(pids);
	free(names);
	free(map);
	return rc < 0 ? cli_fail(c, rc) : 0;
}
