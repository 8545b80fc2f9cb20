/*
 * cmd_process.c - crest checkpoint and crest restore: unmodified processes
 * (CPU and CUDA) in and out of the store.
 */
#include "cas/history.h"
#include "cas/jobs.h"
#include "os/proc.h"
#include "cli/commands.h"
#include "cli/metrics.h"
#include "restore/process.h"
#include "util/err.h"
#include "util/parse.h"
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

struct ckpt_view {
	const struct cli *c;
};

static void on_resumed(void *arg, const struct tp_opts *o, const struct tp_capture *cap)
{
	const struct cli *c = ((const struct ckpt_view *)arg)->c;
	if (!c->quiet && !c->json) {
		if (cap->stranded[0])
			printf("pid %d (%s) dumped in %.3f s, but its %s: it is ended once the snapshot is stored\n",
			       (int)o->pid, cap->comm, cli_secs(cap->stall_ns),
			       cap->stranded_nccl ? "NCCL communicators could not be made again"
						  : "GPU state could not be brought back");
		else if (o->kill)
			printf("pid %d (%s) dumped in %.3f s and stopped: it ends once the snapshot is "
			       "stored (--kill)\n", (int)o->pid, cap->comm, cli_secs(cap->stall_ns));
		else
			printf("pid %d (%s) resumed after a %.3f s stall\n", (int)o->pid, cap->comm,
			       cli_secs(cap->stall_ns));
	}
	fflush(stdout);
	cli_shim_note(c, o, cap);
}

static void on_ingesting(void *arg, struct engine_snap *s)
{
	struct cli_progress *pr = cli_progress_start(((const struct ckpt_view *)arg)->c, s, "ingest");
	while (!engine_snapshot_timedwait(s, 100000000ull))
		;
	cli_progress_stop(pr);
}

int ckpt_once(const struct cli *c, struct cas_store *store, struct engine *e, const struct tp_opts *o,
	      const char *tag, const uint8_t *parent, struct tp_result *st)
{
	struct ckpt_view v = { .c = c };
	const struct tp_hooks h = { .resumed = on_resumed, .ingesting = on_ingesting, .arg = &v };
	return tp_checkpoint(store, e, o, tag, parent, &h, st);
}

void ckpt_print_json_fields(const struct tp_result *st)
{
	char hex[65];
	cli_print_id(hex, st->id);
	const struct engine_result *r = &st->r;
	printf("\"snapshot\": \"%s\", \"stall_seconds\": %.4f, \"gpu_lock_seconds\": %.4f, "
	       "\"gpu_checkpoint_seconds\": %.4f, \"criu_dump_seconds\": %.4f, \"gpu_resume_seconds\": %.4f, "
	       "\"logical_bytes\": %llu, \"new_bytes\": %llu, \"stored_bytes\": %llu, \"zero_bytes\": %llu, "
	       "\"ingest_seconds\": %.4f",
	       hex, cli_secs(st->stall_ns), cli_secs(st->gpu_lock_ns), cli_secs(st->gpu_ckpt_ns),
	       cli_secs(st->dump_ns), cli_secs(st->gpu_resume_ns), (unsigned long long)r->logical_bytes,
	       (unsigned long long)r->new_bytes, (unsigned long long)r->stored_bytes,
	       (unsigned long long)r->zero_bytes, cli_secs(r->ingest_ns));
	if (st->shim_procs)
		printf(", \"shim\": {\"processes\": %zu, \"communicators\": %u, \"peer_pairs\": %u, "
		       "\"release_seconds\": %.4f, \"rebuild_seconds\": %.4f}", st->shim_procs, st->shim_comms,
		       st->shim_peers, cli_secs(st->shim_release_ns), cli_secs(st->shim_rebuild_ns));
}

static void print_ckpt(const struct cli *c, pid_t pid, const struct tp_result *st, const char *tag)
{
	if (c->json) {
		printf("{\"pid\": %d, ", (int)pid);
		ckpt_print_json_fields(st);
		if (tag) {
			printf(", \"tag\": ");
			json_str(stdout, tag);
		}
		printf("}\n");
	} else if (!c->quiet) {
		char hex[65], b1[32], b2[32], b3[32];
		cli_print_id(hex, st->id);
		const struct engine_result *r = &st->r;
		printf("snapshot %s%s%s\n  %s logical, %s new, %s stored, ingested in %.2f s\n", hex,
		       tag ? "  tag " : "", tag ? tag : "", fmt_bytes(r->logical_bytes, b1, sizeof(b1)),
		       fmt_bytes(r->new_bytes, b2, sizeof(b2)), fmt_bytes(r->stored_bytes, b3, sizeof(b3)),
		       cli_secs(r->ingest_ns));
	}
	fflush(stdout);
}

static volatile sig_atomic_t stop_requested;

static void on_stop(int sig)
{
	(void)sig;
	stop_requested = 1;
}

int cmd_checkpoint(struct cli *c, int argc, char **argv)
{
	struct tp_opts o = { 0 };
	const char *tag = NULL;
	struct cli_every ev = { 0 };
	uint64_t count = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--kill")) {
			o.kill = true;
			continue;
		}
		if (!strcmp(a, "--tcp-close")) {
			o.tcp_close = true;
			continue;
		}
		if (!strcmp(a, "--multi-gpu-process")) {
			o.multi_gpu = true;
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
		if (a[0] != '-')
			return cli_usage(c, "checkpoint", "takes no operands: %s (the process is --pid PID)", a);
		if (i + 1 >= argc)
			return cli_usage(c, "checkpoint", "%s needs a value", a);
		const char *v = argv[++i];
		const int took = cli_every_opt(a, v, &o, &ev);
		if (took < 0)
			return CLI_EXIT_USAGE;
		if (took)
			continue;
		uint64_t n;
		if (!strcmp(a, "--pid")) {
			if (cli_parse_uint(v, 1, 0x7fffffff, &n) < 0)
				return cli_usage(c, "checkpoint", "--pid %s: not a process id", v);
			o.pid = (pid_t)n;
		} else if (!strcmp(a, "--tag")) {
			tag = v;
		} else if (!strcmp(a, "--count")) {
			if (cli_parse_uint(v, 1, UINT64_MAX, &count) < 0)
				return cli_usage(c, "checkpoint", "--count %s: not a positive number", v);
		} else if (!strcmp(a, "--lock-timeout")) {
			/* A bare number is milliseconds, as it always was; the
			 * driver takes an unsigned int of them, so the bound
			 * (an hour) keeps the value from wrapping to 0, which
			 * would mean the 10 s default. */
			uint64_t ns;
			if (parse_duration(v, PARSE_NS_MS, PARSE_NS_MS, 3600 * PARSE_NS_S, &ns) < 0)
				return cli_usage(c, "checkpoint", "--lock-timeout %s: not a duration from 1ms to 1h "
						 "(a bare number is milliseconds)", v);
			o.lock_timeout_ms = (unsigned)(ns / PARSE_NS_MS);
		} else if (!strcmp(a, "--lock-within")) {
			uint64_t ns;
			if (parse_duration(v, PARSE_NS_S, PARSE_NS_MS, 24 * 3600 * PARSE_NS_S, &ns) < 0)
				return cli_usage(c, "checkpoint", "--lock-within %s: not a duration from 1ms to 24h "
						 "(30s, 2m, 500ms)", v);
			o.lock_within_ms = (unsigned)(ns / PARSE_NS_MS);
		} else {
			return cli_usage(c, "checkpoint", "unknown option %s", a);
		}
	}
	if (!o.pid)
		return cli_usage(c, "checkpoint", "--pid PID is required");
	if (tag && cas_tag_check(tag) < 0)
		return cli_usage_fail(c, -EINVAL);
	if (o.branch && cas_branch_check(o.branch) < 0)
		return cli_usage_fail(c, -EINVAL);
	/* Cheap checks first: nothing is frozen or written until they pass
	 * (--workdir again below once the store says whether the job had one). */
	if (cli_workdir_check(c, &o) < 0)
		return cli_usage_fail(c, -EINVAL);
	const int pushable = ev.push_to ? cli_push_check(c, ev.push_to) : 0;
	if (pushable < 0)
		return cli_fail(c, pushable);
	if (!proc_state(o.pid))
		return cli_fail(c, crest_errx(-ESRCH, "no process with pid %d", (int)o.pid));
	if (geteuid() != 0)
		return cli_fail(c, crest_errx(-EPERM, "not permitted: checkpointing pid %d needs root "
					       "(CRIU ptraces and restores whole process trees)", (int)o.pid));
	struct criu criu;
	int rc = criu_find(&criu);
	if (rc < 0)
		return cli_fail(c, rc);
	o.criu = &criu;
	struct cli_metrics *mx = NULL;
	if ((ev.maddr || ev.mfile) && cli_metrics_open(ev.maddr, ev.mfile, &mx) < 0) {
		fprintf(stderr, "crest: %s\n", crest_errmsg());
		return 2;
	}

	struct cas_store *store;
	struct engine *e;
	rc = cli_writer_open(c, NULL, &store, &e);
	if (rc < 0) {
		cli_metrics_close(mx);
		return cli_fail(c, rc);
	}
	/* A taken tag is refused before the job is stalled for nothing. */
	if (tag && (rc = cas_tag_free(store, tag)) < 0) {
		cli_metrics_close(mx);
		engine_close(e);
		cas_close(store);
		return cli_fail(c, rc);
	}
	/* A job crest restored or checkpointed before continues from that
	 * snapshot, on its branch unless --branch names another; any other
	 * job continues the head of its branch (main by default). Each later
	 * checkpoint of this loop follows the one before it. */
	uint8_t parent[32];
	char job_branch[256], key[CAS_JOB_KEY_MAX + 1];
	const bool has_key = proc_job_key(o.pid, key, sizeof(key)) == 0;
	bool has_parent = has_key && cas_job_find(store, key, parent, job_branch, sizeof(job_branch)) == 0;
	if (!o.branch)
		o.branch = has_parent ? job_branch : CAS_BRANCH_DEFAULT;
	/* A job restored or cloned from a snapshot taken with --workdir keeps
	 * it: its later snapshots hold DIR too (a clone's, its own copy). */
	static char job_wd[PATH_MAX];
	struct cas_manifest *pm = NULL;
	if (has_parent && !o.workdir && cas_manifest_load(store, parent, &pm) == 0) {
		const char *wd = cas_manifest_get_label(pm, "workdir");
		if (wd && snprintf(job_wd, sizeof(job_wd), "%s", wd) < (int)sizeof(job_wd) && job_wd[0] == '/') {
			o.workdir = job_wd;
			if (!c->quiet && !c->json)
				printf("--workdir %s, as in the snapshot pid %d came from\n", job_wd, (int)o.pid);
		}
		cas_manifest_free(pm);
	}
	if (!has_parent)
		has_parent = cas_branch_head(store, o.branch, parent) == 0;
	crest_errset_str("");
	if ((rc = cli_workdir_check(c, &o)) < 0) {
		engine_close(e);
		cas_close(store);
		cli_metrics_close(mx);
		return cli_usage_fail(c, rc);
	}
	if (mx && (rc = cli_metrics_start(mx, c, o.branch, o.pid, ev.every_ns)) < 0) {
		engine_close(e);
		cas_close(store);
		cli_metrics_close(mx);
		return cli_fail(c, rc);
	}

	struct sigaction sa = { .sa_handler = on_stop };
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	uint64_t n = 0, failures = 0;
	for (;;) {
		uint64_t t0 = time_now_ns();
		struct tp_result st = { 0 };
		if (!store)
			rc = cli_writer_open(c, NULL, &store, &e);
		if (store)
			rc = ckpt_once(c, store, e, &o, tag, has_parent ? parent : NULL, &st);
		n++;
		if (rc == 0) {
			cli_metrics_round(mx, 0, &st);
			print_ckpt(c, o.pid, &st, tag);
			memcpy(parent, st.id, 32);
			has_parent = true;
			if (!o.kill)
				cli_job_note(c, store, o.pid, st.id, o.branch);
			/* The job runs on meanwhile; a push that fails is
			 * reported and counted, and the snapshot stays here. */
			const int prc = ev.push_to ? cli_push(c, store, ev.push_to, st.id, stdout) : 0;
			if (prc < 0) {
				failures++;
				cli_fail(c, prc);
			}
		} else if (ev.every_ns && n > 1 && proc_gone(o.pid)) {
			/* The job ended between two checkpoints, or during this
			 * one: its end, not a failed checkpoint. */
			if (!c->quiet && !c->json)
				printf("pid %d has exited: no more checkpoints\n", (int)o.pid);
			crest_errset_str("");
			break;
		} else {
			failures++;
			/* With --every the job keeps running whatever the store
			 * says: report, and try again next time. */
			cli_fail(c, rc);
			cli_metrics_round(mx, rc, &st);
		}
		/* With --every the store is let go between checkpoints (closing
		 * also cuts a failed snapshot's data, and the next round gets a
		 * fresh engine: a failed write leaves the old one refusing work):
		 * casctl gc, or another writer, gets its turn while the job runs,
		 * and only the next checkpoint waits for them, never the job. */
		if (ev.every_ns) {
			engine_close(e);
			e = NULL;
			cas_close(store);
			store = NULL;
		}
		if (!ev.every_ns || stop_requested || (count && n >= count))
			break;
		if (proc_gone(o.pid)) {
			if (!c->quiet && !c->json)
				printf("pid %d has exited: no more checkpoints\n", (int)o.pid);
			break;
		}
		while (!stop_requested && time_now_ns() - t0 < ev.every_ns) {
			uint64_t left = ev.every_ns - (time_now_ns() - t0);
			struct timespec ts = { 0, (long)(left < 100000000ull ? left : 100000000ull) };
			nanosleep(&ts, NULL);
		}
		if (stop_requested)
			break;
	}
	if (e)
		engine_close(e);
	if (store)
		cas_close(store);
	cli_metrics_close(mx);
	if (failures && ev.every_ns && !c->quiet)
		fprintf(stderr, "crest: %llu of %llu checkpoints failed\n", (unsigned long long)failures,
			(unsigned long long)n);
	return failures ? 1 : 0;
}

int cmd_restore(struct cli *c, int argc, char **argv)
{
	struct rp_opts o = { .notes = stdout };
	const char *name = NULL, *gpu_map = NULL, *branch = NULL;
	bool allow = false;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--keep-files")) {
			o.keep_files = true;
			continue;
		}
		if (!strcmp(a, "--huge-pages")) {
			o.huge_pages = true;
			continue;
		}
		if (!strcmp(a, CLI_ALLOW_DAMAGED)) {
			allow = true;
			continue;
		}
		if (a[0] != '-' || !a[1]) {
			if (name)
				return cli_usage(c, "restore", "wants one SNAPSHOT, no more: %s", a);
			name = a;
			continue;
		}
		if (i + 1 >= argc)
			return cli_usage(c, "restore", "%s needs a value", a);
		const char *v = argv[++i];
		if (!strcmp(a, "--gpu-map"))
			gpu_map = v;
		else if (!strcmp(a, "--gpu"))
			o.gpu = v;
		else if (!strcmp(a, "--tmpdir"))
			o.tmpdir = v;
		else if (!strcmp(a, "--branch"))
			branch = v;
		else
			return cli_usage(c, "restore", "unknown option %s", a);
	}
	if (!name)
		return cli_usage(c, "restore", "wants a SNAPSHOT");
	if (o.gpu && cli_check_gpu(o.gpu) < 0)
		return cli_usage_fail(c, -EINVAL);
	struct gpuckpt_map *map = NULL;
	if (gpu_map) {
		int rc = cli_parse_gpu_map(gpu_map, &map, &o.nmap);
		if (rc < 0) {
			free(map);
			return cli_usage_fail(c, rc);
		}
		o.map = map;
	}
	if (branch && cas_branch_check(branch) < 0) {
		free(map);
		return cli_usage_fail(c, -EINVAL);
	}
	if (c->json || c->quiet)
		o.notes = NULL;
	struct cas_store *store;
	uint8_t id[32];
	struct cas_manifest *m;
	int rc = cli_snapshot_open(c, name, &store, id, &m);
	if (rc == 0 && strcmp(m->kind, "process"))
		rc = crest_errx(-EINVAL, "snapshot %s is a '%s' snapshot, not a process: use crest get", name, m->kind);
	struct cas_lost *lost = NULL;
	size_t nlost = 0;
	if (rc == 0)
		rc = cli_snapshot_damage(store, id, m, allow, &lost, &nlost);
	if (rc == 0 && geteuid() != 0)
		rc = crest_errx(-EPERM, "not permitted: restoring a process needs root (CRIU)");
	struct criu criu;
	if (rc == 0)
		rc = criu_find(&criu);
	struct rp_result r = { 0 };
	if (rc == 0) {
		char hex[65], shortid[13];
		cli_print_id(hex, id);
		snprintf(shortid, sizeof(shortid), "%.12s", hex);
		struct progress prog;
		progress_begin(&prog, "restore", m->logical_bytes, c->quiet);
		struct restore_ctx rctx = { .store = store, .snapshot = shortid, .threads = c->workers, .progress = &prog };
		rc = restore_process(&rctx, m, &criu, &o, &r);
		progress_end(&prog);
		/* The job's next checkpoint is a child of this snapshot, on its
		 * branch or the one given (cas/jobs.h). */
		if (rc == 0)
			cli_job_note(c, store, r.pid, id, branch ? branch : cas_manifest_branch(m));
	}
	if (store)
		cas_close(store);
	free(map);
	if (rc < 0) {
		cas_manifest_free(m);
		free(lost);
		return cli_fail(c, rc);
	}
	char hex[65];
	cli_print_id(hex, id);
	if (c->json) {
		printf("{\"snapshot\": \"%s\", \"pid\": %d, \"bytes\": %llu, \"stream_seconds\": %.4f, "
		       "\"criu_seconds\": %.4f, \"gpu_seconds\": %.4f, \"seconds\": %.4f",
		       hex, (int)r.pid, (unsigned long long)r.bytes, cli_secs(r.stream_ns), cli_secs(r.criu_ns),
		       cli_secs(r.gpu_ns), cli_secs(r.total_ns));
		cli_lost_print(c, id, m, lost, nlost);
		printf("}\n");
	} else {
		cli_lost_print(c, id, m, lost, nlost);
	}
	cas_manifest_free(m);
	free(lost);
	if (!c->json && !c->quiet)
		printf("restored %.12s: pid %d running again after %.2f s (images %.2f s, criu %.2f s, gpu %.2f s)\n",
		       hex, (int)r.pid, cli_secs(r.total_ns), cli_secs(r.stream_ns), cli_secs(r.criu_ns),
		       cli_secs(r.gpu_ns));
	return 0;
}
