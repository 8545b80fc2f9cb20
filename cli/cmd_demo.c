/*
 * cmd_demo.c - crest demo: the whole story on one screen.
 *
 * Starts a sample job (CUDA when a GPU and the CUDA workload are here, CPU
 * otherwise) that mutates a large state deterministically and prints a
 * checksum each step; checkpoints it several times while it runs; kills it;
 * restores it from a middle snapshot; checks that its output from there on
 * equals an uninterrupted run; prints per checkpoint the stall, sizes, new
 * bytes, dedup and ingest time, then the restore time.
 */
#include "cli/commands.h"
#include "restore/process.h"
#include "util/err.h"
#include "util/progress.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DEMO_MAX_CKPT 32

struct demo {
	char dir[PATH_MAX];
	char out[PATH_MAX + 16];
	char exe[PATH_MAX + 64];
	bool gpu;
	unsigned mib, change_pct, interval_ms;
};

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

static uint64_t count_lines(const char *path, uint64_t limit)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	uint64_t n = 0, pos = 0;
	int ch;
	while (pos < limit && (ch = fgetc(f)) != EOF) {
		pos++;
		n += ch == '\n';
	}
	fclose(f);
	return n;
}

/* Waits until path holds at least `lines` lines; false after timeout_ms. */
static bool wait_lines(const char *path, uint64_t lines, unsigned timeout_ms)
{
	uint64_t deadline = time_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	while (time_now_ns() < deadline) {
		if (count_lines(path, UINT64_MAX) >= lines)
			return true;
		sleep_ms(20);
	}
	return false;
}

static pid_t spawn_job(const struct demo *d, char *const argv[])
{
	pid_t pid = fork();
	if (pid != 0)
		return pid < 0 ? crest_errf(-errno, "cannot start %s", argv[0]) : pid;
	/* A session of its own (CRIU restores it as one), stdin from
	 * /dev/null, output to files, and no stray descriptors of ours. */
	setsid();
	int in = open("/dev/null", O_RDONLY);
	int out = open(d->out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (in < 0 || out < 0)
		_exit(127);
	dup2(in, 0);
	dup2(out, 1);
	dup2(out, 2);
	close_range(3, ~0u, 0);
	execv(argv[0], argv);
	_exit(127);
}

static void kill_reap(pid_t pid)
{
	if (pid <= 0)
		return;
	kill(pid, SIGKILL);
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
}

/* Runs the job uninterrupted for `steps` steps into ref; 0 when it did. */
static int run_reference(const struct demo *d, uint64_t steps, const char *ref)
{
	char mib[16], pct[16], st[32];
	snprintf(mib, sizeof(mib), "%u", d->mib);
	snprintf(pct, sizeof(pct), "%u", d->change_pct);
	snprintf(st, sizeof(st), "%llu", (unsigned long long)steps);
	char *argv[] = { (char *)d->exe, "--mib", mib, "--change-pct", pct, "--interval-ms", "0", "--steps", st, NULL };
	pid_t pid = fork();
	if (pid < 0)
		return crest_errf(-errno, "cannot start the reference run");
	if (pid == 0) {
		int out = open(ref, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (out < 0)
			_exit(127);
		dup2(out, 1);
		close_range(3, ~0u, 0);
		execv(argv[0], argv);
		_exit(127);
	}
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return crest_errf(-errno, "waiting for the reference run");
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0
	       : crest_errx(-EIO, "the reference run of %s failed", d->exe);
}

/* Compares the first `lines` lines of a and b. */
static bool same_lines(const char *a, const char *b, uint64_t lines)
{
	FILE *fa = fopen(a, "re"), *fb = fopen(b, "re");
	bool same = fa && fb;
	char la[512], lb[512];
	for (uint64_t i = 0; same && i < lines; i++) {
		char *ra = fgets(la, sizeof(la), fa), *rb = fgets(lb, sizeof(lb), fb);
		same = ra && rb && !strcmp(la, lb);
	}
	if (fa)
		fclose(fa);
	if (fb)
		fclose(fb);
	return same;
}

static int find_workload(struct demo *d, bool want_gpu, bool force)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return crest_errf(-errno, "cannot find crest's own program");
	self[n] = 0;
	*strrchr(self, '/') = 0;
	const char *env = getenv(want_gpu ? "CREST_WORKLOAD_GPU" : "CREST_WORKLOAD");
	if (env && *env)
		snprintf(d->exe, sizeof(d->exe), "%s", env);
	else
		snprintf(d->exe, sizeof(d->exe), "%s/%s", self, want_gpu ? "crest-workload-gpu" : "crest-workload");
	if (access(d->exe, X_OK) == 0)
		return 0;
	if (want_gpu && !force)
		return -ENOENT;
	return crest_errx(-ENOENT, "the sample workload %s is missing (build it with the project)", d->exe);
}

int cmd_demo(struct cli *c, int argc, char **argv)
{
	struct demo d = { .change_pct = 2, .interval_ms = 1500 };
	unsigned nckpt = 5, from = 3;
	int want = 0;  /* 0 auto, 1 cpu, 2 gpu */
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--cpu")) {
			want = 1;
			continue;
		}
		if (!strcmp(a, "--gpu")) {
			want = 2;
			continue;
		}
		if (a[0] != '-')
			return cli_usage(c, "demo", "takes no operands: %s", a);
		/* Each a whole number from 1 to its most. */
		uint64_t most = !strcmp(a, "--mib") ? 1u << 20 : !strcmp(a, "--checkpoints") ? DEMO_MAX_CKPT :
			!strcmp(a, "--restore-from") ? DEMO_MAX_CKPT : !strcmp(a, "--change-pct") ? 100 :
			!strcmp(a, "--interval-ms") ? 86400000 : 0;
		if (!most)
			return cli_usage(c, "demo", "unknown option %s", a);
		if (i + 1 >= argc)
			return cli_usage(c, "demo", "%s needs a value", a);
		uint64_t v;
		if (cli_parse_uint(argv[++i], 1, most, &v) < 0)
			return cli_usage(c, "demo", "%s %s: a number from 1 to %llu", a, argv[i], (unsigned long long)most);
		if (!strcmp(a, "--mib"))
			d.mib = (unsigned)v;
		else if (!strcmp(a, "--checkpoints"))
			nckpt = (unsigned)v;
		else if (!strcmp(a, "--restore-from"))
			from = (unsigned)v;
		else if (!strcmp(a, "--change-pct"))
			d.change_pct = (unsigned)v;
		else
			d.interval_ms = (unsigned)v;
	}
	if (from > nckpt)
		return cli_usage(c, "demo", "--restore-from %u: must name one of the %u checkpoints", from, nckpt);
	if (geteuid() != 0)
		return cli_fail(c, crest_errx(-EPERM, "crest demo checkpoints a process with CRIU, which needs "
					       "root: run it as root"));
	struct criu criu;
	int rc = criu_find(&criu);
	if (rc < 0)
		return cli_fail(c, rc);

	/* The GPU job when a GPU and the CUDA workload are here. */
	const struct cudrv *drv;
	int ngpu = 0;
	if (want != 1 && cudrv_load(&drv) == 0)
		drv->DeviceGetCount(&ngpu);
	crest_errset_str("");
	d.gpu = want == 2 || (want == 0 && ngpu > 0);
	if (d.gpu && want == 2 && ngpu == 0)
		return cli_fail(c, crest_errx(-ENODEV, "--gpu: no NVIDIA GPU here"));
	rc = find_workload(&d, d.gpu, want != 0);
	if (rc == -ENOENT && d.gpu && want == 0) {
		d.gpu = false;
		rc = find_workload(&d, false, true);
	}
	if (rc < 0)
		return cli_fail(c, rc);
	if (!d.mib)
		d.mib = d.gpu ? 8192 : 512;

	snprintf(d.dir, sizeof(d.dir), "/tmp/crest-demo-XXXXXX");
	if (!mkdtemp(d.dir))
		return cli_fail(c, crest_errf(-errno, "cannot create a directory under /tmp"));
	snprintf(d.out, sizeof(d.out), "%s/job.out", d.dir);

	struct cas_store *store;
	struct engine *e;
	/* The demo makes its store if there is none: ./crest-store, the README says. */
	rc = cas_init(c->store);
	if (rc == 0 || rc == -EEXIST)
		rc = cli_writer_open(c, NULL, &store, &e);
	if (rc < 0)
		return cli_fail(c, rc);
	/* The job and, later, the restored job become our children: we can
	 * reap them, which CRIU needs before it can reuse their pids. */
	prctl(PR_SET_CHILD_SUBREAPER, 1);

	if (!c->json)
		printf("crest demo: %s job, %u MiB of state, %u%% changed per step; store %s\n",
		       d.gpu ? "CUDA" : "CPU", d.mib, d.change_pct, c->store);
	fflush(stdout);
	char mib[16], pct[16], ivl[16];
	snprintf(mib, sizeof(mib), "%u", d.mib);
	snprintf(pct, sizeof(pct), "%u", d.change_pct);
	snprintf(ivl, sizeof(ivl), "%u", d.interval_ms);
	char *jargv[] = { d.exe, "--mib", mib, "--change-pct", pct, "--interval-ms", ivl, NULL };
	pid_t job = spawn_job(&d, jargv);
	if (job < 0) {
		engine_close(e);
		cas_close(store);
		return cli_fail(c, job);
	}
	struct tp_result st[DEMO_MAX_CKPT];
	uint64_t lines[DEMO_MAX_CKPT];
	struct tp_opts o = { .pid = job, .criu = &criu };
	uint8_t parent[32];
	bool has_parent = false;
	uint64_t seen = 0;
	for (unsigned k = 0; rc == 0 && k < nckpt; k++) {
		/* Checkpoint right after a step, so one step lies between two. */
		seen = count_lines(d.out, UINT64_MAX);
		if (!wait_lines(d.out, seen + 1, 120000)) {
			rc = crest_errx(-ETIMEDOUT, "the sample job printed nothing for two minutes (see %s)", d.out);
			break;
		}
		memset(&st[k], 0, sizeof(st[k]));
		st[k].watch_path = d.out;
		struct cli quiet = *c;
		quiet.quiet = true;
		rc = ckpt_once(&quiet, store, e, &o, NULL, has_parent ? parent : NULL, &st[k]);
		if (rc < 0)
			break;
		memcpy(parent, st[k].id, 32);
		has_parent = true;
		lines[k] = count_lines(d.out, st[k].watch_size);
		if (!c->json)
			printf("  checkpoint %u at step %llu: stall %.3f s, stored in the background in %.2f s\n", k + 1,
			       (unsigned long long)lines[k], cli_secs(st[k].stall_ns), cli_secs(st[k].r.ingest_ns));
		fflush(stdout);
	}
	kill_reap(job);
	engine_close(e);
	cas_close(store);
	if (rc < 0)
		return cli_fail(c, rc);
	if (!c->json)
		printf("  killed the job (pid %d) at step %llu\n", (int)job,
		       (unsigned long long)count_lines(d.out, UINT64_MAX));

	/* Restore from checkpoint `from`, let it run a few steps, compare. */
	rc = cli_store_open(c, CAS_READ, &store);
	struct cas_manifest *m = NULL;
	if (rc == 0)
		rc = cas_manifest_load(store, st[from - 1].id, &m);
	struct rp_result rr = { 0 };
	char hex[65], shortid[13];
	cli_print_id(hex, st[from - 1].id);
	snprintf(shortid, sizeof(shortid), "%.12s", hex);
	if (rc == 0) {
		struct restore_ctx rctx = { .store = store, .snapshot = shortid, .threads = c->workers };
		struct rp_opts ro = { .notes = c->json ? NULL : stdout };
		rc = restore_process(&rctx, m, &criu, &ro, &rr);
	}
	cas_manifest_free(m);
	if (store)
		cas_close(store);
	if (rc < 0)
		return cli_fail(c, rc);
	const uint64_t base = lines[from - 1], more = 4, want_lines = base + more;
	bool ran = wait_lines(d.out, want_lines, 120000);
	kill_reap(rr.pid);
	char ref[PATH_MAX + 16];
	snprintf(ref, sizeof(ref), "%s/reference.out", d.dir);
	rc = run_reference(&d, want_lines, ref);
	if (rc < 0)
		return cli_fail(c, rc);
	bool same = ran && same_lines(d.out, ref, want_lines);

	const double state = (double)d.mib * 1048576.0;
	if (c->json) {
		printf("{\"mode\": \"%s\", \"state_mib\": %u, \"change_pct\": %u, \"checkpoints\": [", d.gpu ? "cuda" : "cpu",
		       d.mib, d.change_pct);
		for (unsigned k = 0; k < nckpt; k++) {
			uint64_t changed = k ? (uint64_t)((double)(lines[k] - lines[k - 1]) * state * d.change_pct / 100.0) : 0;
			printf("%s\n {\"step\": %llu, \"changed_bytes_max\": %llu, ", k ? "," : "",
			       (unsigned long long)lines[k], (unsigned long long)changed);
			ckpt_print_json_fields(&st[k]);
			printf("}");
		}
		printf("\n], \"restore\": {\"from\": %u, \"step\": %llu, \"pid\": %d, \"seconds\": %.4f, "
		       "\"stream_seconds\": %.4f, \"criu_seconds\": %.4f, \"gpu_seconds\": %.4f}, "
		       "\"lines_compared\": %llu, \"identical\": %s}\n",
		       from, (unsigned long long)base, (int)rr.pid, cli_secs(rr.total_ns), cli_secs(rr.stream_ns),
		       cli_secs(rr.criu_ns), cli_secs(rr.gpu_ns), (unsigned long long)want_lines, same ? "true" : "false");
	} else {
		printf("\n  %-3s %6s %9s %11s %11s %8s %9s\n", "#", "step", "stall", "logical", "new", "dedup", "ingest");
		for (unsigned k = 0; k < nckpt; k++) {
			char b1[32], b2[32];
			double dd = st[k].r.new_bytes ? (double)st[k].r.logical_bytes / (double)st[k].r.new_bytes : 0;
			printf("  %-3u %6llu %7.3f s %11s %11s %7.1fx %7.2f s\n", k + 1, (unsigned long long)lines[k],
			       cli_secs(st[k].stall_ns), fmt_bytes(st[k].r.logical_bytes, b1, sizeof(b1)),
			       fmt_bytes(st[k].r.new_bytes, b2, sizeof(b2)), dd, cli_secs(st[k].r.ingest_ns));
		}
		printf("\n  restored checkpoint %u (step %llu) in %.2f s (images %.2f s, criu %.2f s, gpu %.2f s)\n", from,
		       (unsigned long long)base, cli_secs(rr.total_ns), cli_secs(rr.stream_ns), cli_secs(rr.criu_ns),
		       cli_secs(rr.gpu_ns));
		printf("  output after restore (%llu steps) equals an uninterrupted run: %s\n",
		       (unsigned long long)more, same ? "yes" : "NO");
		if (!same)
			printf("  compare %s with %s\n", d.out, ref);
	}
	if (same) {
		unlink(d.out);
		unlink(ref);
		rmdir(d.dir);
	}
	return same ? 0 : 1;
}
