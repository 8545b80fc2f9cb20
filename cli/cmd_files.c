/*
 * cmd_files.c - crest put, get, ls, show, tag: files and trees in and out of
 * the store, and the listings.
 */
#include "cas/history.h"
#include "cas/jobsnap.h"
#include "cli/commands.h"
#include "restore/restore.h"
#include "util/err.h"
#include "util/json.h"
#include "util/progress.h"
#include "util/sha256.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- put ---- */

int cli_put_path(struct engine_snap *s, const char *path, const char *name, const struct cli *c)
{
	(void)c;
	struct engine_links links = { 0 };
	int rc = engine_put_tree(s, path, name, &links);
	engine_links_free(&links);
	return rc;
}

#define PUT_LABELS_MAX 64

/* Whether put --label may set key: a user's key, or one of the labels
 * libcrest puts on a job's rank snapshot, so that scripts and tests can
 * make rank snapshots with crest put. cas_label_check is the one rule. */
static int put_label_check(const char *kv, const char **eq)
{
	*eq = strchr(kv, '=');
	if (!*eq || *eq == kv)
		return crest_errx(-EINVAL, "--label %s: want KEY=VALUE", kv);
	const size_t kl = (size_t)(*eq - kv);
	if (kl > 128)
		return crest_errx(-EINVAL, "--label %.40s...: a key has at most 128 characters", kv);
	char key[129];
	memcpy(key, kv, kl);
	key[kl] = 0;
	const int rc = cas_label_check(key);
	return rc < 0 ? crest_errctx(rc, "--label %s", kv) : 0;
}

/* The name a path is stored under: its last component. */
static const char *put_name(char *path)
{
	size_t n = strlen(path);
	while (n > 1 && path[n - 1] == '/')
		path[--n] = 0;
	const char *slash = strrchr(path, '/');
	const char *base = slash ? slash + 1 : path;
	return (!*base || !strcmp(base, ".") || !strcmp(base, "..")) ? NULL : base;
}

/* Ctrl-C or SIGTERM during a put: the snapshot is cancelled (nothing of it
 * is committed unless its commit had begun) and crest put says so, then
 * closes the store, which cuts the packs back to their commit marks
 * (cas_pack_close_writer): without this the default action killed crest
 * silently and left the uncommitted tail (146 MiB seen) until the next
 * writer.
 *
 * The handler may run on any thread (the engine's workers and RocksDB's
 * take signals too). put_busy keeps s alive under it: the handler counts
 * itself in before it reads put_snap, and put_snap_drop clears put_snap
 * and then waits for the count to be 0 before s may be freed. Both are
 * sequentially consistent, so a handler either sees NULL or is counted.
 * Lock-free atomics: safe in a handler. */
static _Atomic(struct engine_snap *) put_snap;
static atomic_int put_busy;
static volatile sig_atomic_t put_sig;

static void put_on_signal(int sig)
{
	atomic_fetch_add(&put_busy, 1);
	put_sig = sig;
	struct engine_snap *s = atomic_load(&put_snap);
	if (s)
		engine_snapshot_cancel(s);
	atomic_fetch_sub(&put_busy, 1);
}

static void put_snap_drop(void)
{
	atomic_store(&put_snap, NULL);
	while (atomic_load(&put_busy))
		sched_yield();
}

/* From here a signal cancels s. Only once the store is open and the
 * snapshot begun: until then Ctrl-C ends crest at once (nothing is written
 * yet, and a put waiting for another writer's lock must not wait on). A
 * signal crest was started ignoring stays ignored (nohup, or a
 * non-interactive shell's `crest put &`, which ignores SIGINT): the
 * caller asked for the put to outlive it. */
static void put_catch(struct engine_snap *s)
{
	atomic_store(&put_snap, s);
	/* SA_RESTART: any thread may take it, and the engine's reads and
	 * RocksDB's calls go on rather than fail with EINTR. */
	struct sigaction sa = { .sa_handler = put_on_signal, .sa_flags = SA_RESTART }, old;
	sigemptyset(&sa.sa_mask);
	static const int sigs[] = { SIGINT, SIGTERM };
	for (size_t k = 0; k < 2; k++)
		if (sigaction(sigs[k], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
			sigaction(sigs[k], &sa, NULL);
}

/* Bytes of the store's pack files: what an interrupted put gave back is
 * the difference across cas_close. */
static uint64_t packs_bytes(const char *store)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/packs", store);
	DIR *d = opendir(path);
	if (!d)
		return 0;
	uint64_t sum = 0;
	struct dirent *de;
	struct stat sb;
	while ((de = readdir(d)))
		if (strstr(de->d_name, ".pack") && fstatat(dirfd(d), de->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISREG(sb.st_mode))
			sum += (uint64_t)sb.st_size;
	closedir(d);
	return sum;
}

/* An interrupted put's line and exit status (128 + the signal, as shells
 * give a command killed by it: 130 for Ctrl-C). */
static int put_interrupted(const struct cli *c, struct engine *e, struct cas_store *store)
{
	engine_close(e);
	const uint64_t before = packs_bytes(c->store);
	cas_close(store);
	const uint64_t after = packs_bytes(c->store);
	const int sig = put_sig;
	fprintf(stderr, "%s: put interrupted (%s): nothing committed; %llu bytes of pack space reclaimed\n",
		c->prog, sig == SIGINT ? "SIGINT" : "SIGTERM",
		(unsigned long long)(before > after ? before - after : 0));
	return 128 + sig;
}

int cmd_put(struct cli *c, int argc, char **argv)
{
	const char *tag = NULL, *branch = CAS_BRANCH_DEFAULT;
	struct engine_opts o;
	engine_opts_default(&o);
	o.workers = c->workers;
	const char *chunker = NULL;
	uint64_t chunk_size = 0;
	/* --label's values, pointing into argv. */
	const char *labels[PUT_LABELS_MAX];
	size_t nlabels = 0;
	/* Options anywhere, as git's; the paths are gathered at argv[1..]
	 * in their order. After "--" every word is a path. */
	int i = 1, npath = 1;
	bool opts_end = false;
	for (; i < argc; i++) {
		if (opts_end || argv[i][0] != '-' || !argv[i][1]) {
			argv[npath++] = argv[i];
			continue;
		}
		if (!strcmp(argv[i], "--")) {
			opts_end = true;
			continue;
		}
		if (i + 1 >= argc)
			return cli_usage(c, "put", "%s needs a value", argv[i]);
		if (!strcmp(argv[i], "--tag"))
			tag = argv[++i];
		else if (!strcmp(argv[i], "--branch"))
			branch = argv[++i];
		else if (!strcmp(argv[i], "--label")) {
			const char *eq;
			if (nlabels == PUT_LABELS_MAX)
				return cli_usage(c, "put", "at most %d labels", PUT_LABELS_MAX);
			if (put_label_check(argv[++i], &eq) < 0)
				return cli_usage_fail(c, -EINVAL);
			for (size_t l = 0; l < nlabels; l++)
				if (!strncmp(labels[l], argv[i], (size_t)(eq - argv[i]) + 1))
					return cli_usage(c, "put", "--label %.*s given twice", (int)(eq - argv[i]),
							 argv[i]);
			labels[nlabels++] = argv[i];
		} else if (!strcmp(argv[i], "--chunker"))
			chunker = argv[++i];
		else if (!strcmp(argv[i], "--chunk-size")) {
			if (cli_parse_size(argv[++i], &chunk_size) < 0 || chunk_size > UINT32_MAX)
				return cli_usage(c, "put", "--chunk-size %s: not a size (4096, 64K, 1M)", argv[i]);
			/* 0 below means "not given": a 0 typed here must not
			 * quietly become the default. */
			if (chunk_size == 0)
				return cli_usage(c, "put", "--chunk-size %s: must be more than 0 "
						 "(leave it out for the default, %u bytes)", argv[i], o.file_chunking.avg);
		} else {
			return cli_usage(c, "put", "unknown option %s", argv[i]);
		}
	}
	i = 1;
	argc = npath;
	if (i >= argc)
		return cli_usage(c, "put", "no PATH given");
	if (tag && cas_tag_check(tag) < 0)
		return cli_usage_fail(c, -EINVAL);
	if (cas_branch_check(branch) < 0)
		return cli_usage_fail(c, -EINVAL);
	if (chunker || chunk_size) {
		enum dedup_kind k = o.file_chunking.kind;
		if (chunker && dedup_kind_parse(chunker, &k) < 0)
			return cli_usage(c, "put", "--chunker %s: fixed or cdc", chunker);
		uint32_t avg = chunk_size ? (uint32_t)chunk_size : o.file_chunking.avg;
		if (dedup_params_init(&o.file_chunking, k, avg) < 0)
			return cli_usage_fail(c, -EINVAL);
	}
	/* Every path is checked before the store is touched. */
	const char **names = calloc((size_t)argc, sizeof(*names));
	if (!names)
		return cli_fail(c, crest_errf(-ENOMEM, "put"));
	for (int k = i; k < argc; k++) {
		struct stat sb;
		if (lstat(argv[k], &sb) < 0) {
			free(names);
			return cli_fail(c, crest_errf(-errno, "cannot read %s", argv[k]));
		}
		names[k] = put_name(argv[k]);
		if (!names[k]) {
			free(names);
			return cli_usage_fail(c, crest_errx(-EINVAL, "%s: name a file or directory by its name, "
							     "not . or ..", argv[k]));
		}
		for (int j = i; j < k; j++)
			if (!strcmp(names[j], names[k])) {
				crest_errx(-EINVAL, "%s and %s would both be stored as '%s'", argv[j], argv[k],
					   names[k]);
				free(names);
				return cli_usage_fail(c, -EINVAL);
			}
	}

	struct cas_store *store;
	struct engine *e;
	int rc = cli_writer_open(c, &o, &store, &e);
	if (rc < 0) {
		free(names);
		return cli_fail(c, rc);
	}
	struct engine_snap *s;
	rc = engine_snapshot_begin(e, "files", &s);
	if (rc == 0 && tag)
		rc = engine_snapshot_set_tag(s, tag);
	if (rc == 0 && cas_manifest_set_branch(engine_snapshot_manifest(s), branch) < 0)
		rc = crest_errf(-ENOMEM, "put");
	for (size_t l = 0; rc == 0 && l < nlabels; l++) {
		const char *eq = strchr(labels[l], '=');
		char key[256];
		snprintf(key, sizeof(key), "%.*s", (int)(eq - labels[l]), labels[l]);
		if (cas_manifest_label(engine_snapshot_manifest(s), key, eq + 1) < 0)
			rc = crest_errf(-ENOMEM, "put");
	}
	if (rc == 0) {
		/* The branch's head is the new snapshot's parent: putting on one
		 * branch again and again builds its history (cas/history.h). */
		uint8_t pid[32];
		struct cas_manifest *pm;
		if (cas_branch_head(store, branch, pid) == 0 && cas_manifest_load(store, pid, &pm) == 0)
			engine_snapshot_set_parent(s, pid, pm);
		crest_errset_str("");
	}
	if (rc < 0) {
		engine_close(e);
		cas_close(store);
		free(names);
		return cli_fail(c, rc);
	}
	struct cli_progress *pr = cli_progress_start(c, s, "put");
	put_catch(s);
	struct engine_links links = { 0 };   /* across the paths: a link may join two of them */
	for (int k = i; rc == 0 && k < argc && !put_sig; k++)
		rc = engine_put_tree(s, argv[k], names[k], &links);
	engine_links_free(&links);
	free(names);
	struct engine_result r;
	if (rc < 0 || put_sig) {
		char msg[1024];
		crest_errcpy(msg, sizeof(msg));
		put_snap_drop();
		cli_progress_stop(pr);
		engine_snapshot_abort(s);
		if (put_sig)
			return put_interrupted(c, e, store);
		engine_close(e);
		cas_close(store);
		crest_errset_str(msg);
		return cli_fail(c, rc);
	}
	engine_snapshot_seal(s);
	while (!engine_snapshot_timedwait(s, 100000000ull))
		;
	cli_progress_stop(pr);
	put_snap_drop();   /* the wait frees s */
	rc = engine_snapshot_wait(s, &r);
	if (rc == -EINTR && put_sig)
		return put_interrupted(c, e, store);
	if (rc == 0 && put_sig)
		fprintf(stderr, "%s: put: %s came once the commit had begun: the snapshot is stored\n", c->prog,
			put_sig == SIGINT ? "SIGINT" : "SIGTERM");
	char msg[1024];
	crest_errcpy(msg, sizeof(msg));
	engine_close(e);
	cas_close(store);
	if (rc < 0) {
		crest_errset_str(msg);
		return cli_fail(c, rc);
	}
	char hex[65];
	cli_print_id(hex, r.id);
	double secs = cli_secs(r.ingest_ns);
	if (c->json) {
		printf("{\"snapshot\": \"%s\", \"logical_bytes\": %llu, \"new_bytes\": %llu, "
		       "\"stored_bytes\": %llu, \"zero_bytes\": %llu, \"chunks\": %llu, \"new_chunks\": %llu, "
		       "\"seconds\": %.3f",
		       hex, (unsigned long long)r.logical_bytes, (unsigned long long)r.new_bytes,
		       (unsigned long long)r.stored_bytes, (unsigned long long)r.zero_bytes,
		       (unsigned long long)r.chunks, (unsigned long long)r.new_chunks, secs);
		if (tag) {
			printf(", \"tag\": ");
			json_str(stdout, tag);
		}
		printf("}\n");
	} else {
		char b1[32], b2[32], b3[32], b4[32];
		printf("snapshot %s%s%s\n", hex, tag ? "  tag " : "", tag ? tag : "");
		printf("  %s logical, %s new, %s stored, in %.2f s (%s/s)\n",
		       fmt_bytes(r.logical_bytes, b1, sizeof(b1)), fmt_bytes(r.new_bytes, b2, sizeof(b2)),
		       fmt_bytes(r.stored_bytes, b3, sizeof(b3)), secs,
		       fmt_bytes(cli_rate(r.logical_bytes, secs), b4, sizeof(b4)));
	}
	return 0;
}

/* ---- get ---- */

int cmd_get(struct cli *c, int argc, char **argv)
{
	/* --allow-damaged: a snapshot a repair kept without chunks it lost
	 * is restored all the same, zeros where bytes are lost (restic's
	 * repair snapshots, borg's check --repair). */
	bool allow = false;
	/* --rank R: rank R's snapshot of a job snapshot (cas/jobsnap.h). */
	const char *rank_s = NULL;
	uint64_t rank = 0;
	int k = 1;
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], CLI_ALLOW_DAMAGED)) {
			allow = true;
		} else if (!strcmp(argv[i], "--rank")) {
			if (i + 1 >= argc)
				return cli_usage(c, "get", "--rank needs a value");
			rank_s = argv[++i];
			if (cli_parse_uint(rank_s, 0, CAS_JOBSNAP_WORLD_MAX - 1, &rank) < 0)
				return cli_usage(c, "get", "--rank %s: not a rank from 0 to %d", rank_s,
						 CAS_JOBSNAP_WORLD_MAX - 1);
		} else {
			argv[k++] = argv[i];
		}
	argc = k;
	if (argc != 3)
		return cli_usage(c, "get", "wants SNAPSHOT DEST, %s", argc < 3 ? "not fewer" : "no more");
	struct cas_store *store;
	uint8_t id[32];
	struct cas_manifest *m;
	int rc = cli_snapshot_open(c, argv[1], &store, id, &m);
	if (rc < 0)
		return cli_fail(c, rc);
	if (rank_s) {
		uint8_t mid[32];
		rc = cas_jobsnap_is(m) ? cas_jobsnap_member(store, id, (uint32_t)rank, mid)
				       : crest_errx(-EINVAL, "%s is a '%s' snapshot, not a job snapshot: --rank picks "
						    "a rank of a job snapshot", argv[1], m->kind);
		cas_manifest_free(m);
		m = NULL;
		if (rc == 0) {
			memcpy(id, mid, 32);
			rc = cas_manifest_load(store, id, &m);
		}
		if (rc < 0) {
			cas_close(store);
			return cli_fail(c, rc);
		}
	}
	struct cas_lost *lost = NULL;
	size_t nlost = 0;
	rc = cli_snapshot_damage(store, id, m, allow, &lost, &nlost);
	if (rc < 0) {
		cas_manifest_free(m);
		cas_close(store);
		return cli_fail(c, rc);
	}
	char hex[65];
	cli_print_id(hex, id);
	char shortid[13];
	snprintf(shortid, sizeof(shortid), "%.12s", hex);
	struct progress prog;
	progress_begin(&prog, "get", m->logical_bytes, c->quiet);
	struct restore_ctx rc_ = { .store = store, .snapshot = shortid, .threads = c->workers,
				   .progress = &prog };
	uint64_t t0 = time_now_ns(), bytes = 0;
	rc = restore_tree(&rc_, m, argv[2], &bytes);
	progress_end(&prog);
	double secs = cli_secs(time_now_ns() - t0);
	cas_close(store);
	if (rc < 0) {
		cas_manifest_free(m);
		free(lost);
		return cli_fail(c, rc);
	}
	if (c->json) {
		printf("{\"snapshot\": \"%s\", \"dest\": ", hex);
		json_str(stdout, argv[2]);
		printf(", \"bytes\": %llu, \"seconds\": %.3f", (unsigned long long)bytes, secs);
		cli_lost_print(c, id, m, lost, nlost);
		printf("}\n");
	} else {
		cli_lost_print(c, id, m, lost, nlost);
		char b1[32], b2[32];
		if (!c->quiet)
			printf("restored %.12s into %s: %s in %.2f s (%s/s)\n", hex, argv[2],
			       fmt_bytes(bytes, b1, sizeof(b1)), secs,
			       fmt_bytes(cli_rate(bytes, secs), b2, sizeof(b2)));
	}
	cas_manifest_free(m);
	free(lost);
	return 0;
}

/* ---- ls ---- */

/* The job snapshots that name snapshot id (cas/jobsnap.h), at most cap
 * of them into out; returns how many name it. */
static size_t ls_named_by(const struct cas_jobsnap_entry *jv, size_t nj, const uint8_t id[32],
			  const struct cas_jobsnap_entry **out, size_t cap)
{
	size_t k = 0;
	for (size_t j = 0; j < nj; j++)
		for (uint32_t r = 0; r < jv[j].j->world; r++)
			if (!memcmp(jv[j].j->members[r].id, id, 32)) {
				if (k < cap)
					out[k] = &jv[j];
				k++;
				break;
			}
	return k;
}

/* A job snapshot's bytes: its members' logical bytes (it has none of its own). */
static uint64_t ls_job_bytes(const struct cas_jobsnap *j, const struct cas_snapinfo *v, size_t n)
{
	uint64_t b = 0;
	for (uint32_t r = 0; r < j->world; r++)
		for (size_t i = 0; i < n; i++)
			if (!memcmp(v[i].id, j->members[r].id, 32)) {
				b += v[i].head->logical_bytes;
				break;
			}
	return b;
}

static void ls_job_json(const struct cas_manifest *h, const struct cas_jobsnap *j,
			const struct cas_jobsnap_entry *const *in, size_t nin)
{
	char hex[65];
	if (j) {
		printf(", \"job\": {\"name\": ");
		json_str(stdout, j->name);
		printf(", \"step\": %llu, \"world\": %u, \"members\": [", (unsigned long long)j->step, j->world);
		for (uint32_t r = 0; r < j->world; r++) {
			cli_print_id(hex, j->members[r].id);
			printf("%s{\"rank\": %u, \"snapshot\": \"%s\", \"gpu\": ", r ? ", " : "", r, hex);
			json_str(stdout, j->members[r].gpu);
			printf("}");
		}
		printf("]}");
		return;
	}
	const char *name = cas_manifest_get_label(h, CAS_JOBSNAP_LABEL);
	if (!nin && !cas_jobsnap_is_rank(h))
		return;
	printf(", \"job\": {\"name\": ");
	if (name)
		json_str(stdout, name);
	else
		printf("null");
	const char *step = cas_manifest_get_label(h, CAS_JOBSNAP_LABEL_STEP);
	const char *rank = cas_manifest_get_label(h, CAS_JOBSNAP_LABEL_RANK);
	printf(", \"step\": ");
	if (step)
		json_str(stdout, step);
	else
		printf("null");
	printf(", \"rank\": ");
	if (rank)
		json_str(stdout, rank);
	else
		printf("null");
	printf(", \"partial\": %s, \"in\": [", nin ? "false" : "true");
	for (size_t k = 0; k < nin; k++) {
		cli_print_id(hex, in[k]->id);
		printf("%s\"%s\"", k ? ", " : "", hex);
	}
	printf("]}");
}

int cmd_ls(struct cli *c, int argc, char **argv)
{
	/* --all: also the rank snapshots job snapshots name (a job snapshot
	 * is listed as one line, and its ranks are in crest show). */
	bool all = false;
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--all"))
			all = true;
		else if (argv[i][0] == '-' && argv[i][1])
			return cli_usage(c, "ls", "unknown option %s", argv[i]);
		else
			return cli_usage(c, "ls", "takes no operands: %s", argv[i]);
	struct cas_store *store;
	int rc = cli_store_open(c, CAS_READ, &store);
	if (rc < 0)
		return cli_fail(c, rc);
	if (cli_check_index(c, store) < 0)   /* listed all the same: say what is missing */
		fprintf(stderr, "%s: warning: %s\n", c->prog, crest_errmsg());
	struct cas_snapinfo *v;
	size_t n;
	rc = cas_snapshot_list(store, &v, &n);
	struct cas_jobsnap_entry *jv = NULL;
	size_t nj = 0;
	if (rc == 0 && (rc = cas_jobsnap_list(store, NULL, &jv, &nj)) < 0)
		cas_snapshot_list_free(v, n);
	cas_close(store);
	if (rc < 0)
		return cli_fail(c, rc);
	if (c->json)
		printf("[");
	else
		printf("%-12s  %-19s  %-8s  %10s  %s\n", "SNAPSHOT", "TIME", "KIND", "LOGICAL", "TAGS");
	size_t shown = 0;
	for (size_t i = 0; i < n; i++) {
		char hex[65], tbuf[32], b1[32];
		cli_print_id(hex, v[i].id);
		const struct cas_manifest *h = v[i].head;
		const struct cas_jobsnap *job = NULL;
		for (size_t j = 0; j < nj && !job && cas_jobsnap_is(h); j++)
			if (!memcmp(jv[j].id, v[i].id, 32))
				job = jv[j].j;
		const struct cas_jobsnap_entry *in[4];
		const size_t nin = job ? 0 : ls_named_by(jv, nj, v[i].id, in, 4);
		if (nin && !all)
			continue;   /* a whole job's rank: its job snapshot's line stands for it */
		const uint64_t bytes = job ? ls_job_bytes(job, v, n) : h->logical_bytes;
		if (c->json) {
			printf("%s\n {\"snapshot\": \"%s\", \"time_ns\": %llu, \"kind\": ", shown++ ? "," : "", hex,
			       (unsigned long long)h->time_ns);
			json_str(stdout, h->kind);
			printf(", \"logical_bytes\": %llu, \"streams\": %zu, \"parent\": ",
			       (unsigned long long)bytes, h->nstreams);
			if (h->has_parent) {
				char ph[65];
				cli_print_id(ph, h->parent);
				printf("\"%s\"", ph);
			} else {
				printf("null");
			}
			printf(", \"tags\": [");
			for (size_t t = 0; t < v[i].ntags; t++) {
				if (t)
					printf(", ");
				json_str(stdout, v[i].tags[t]);
			}
			printf("], \"labels\": {");
			for (size_t l = 0; l < h->nlabels; l++) {
				if (l)
					printf(", ");
				json_str(stdout, h->labels[l].key);
				printf(": ");
				json_str(stdout, h->labels[l].value);
			}
			printf("}, \"damaged\": %s", v[i].damaged ? "true" : "false");
			ls_job_json(h, job, in, nin < 4 ? nin : 4);
			printf("}");
		} else {
			cli_fmt_time(h->time_ns, tbuf, sizeof(tbuf));
			printf("%.12s  %-19s  %-8s  %10s  ", hex, tbuf, h->kind, fmt_bytes(bytes, b1, sizeof(b1)));
			for (size_t t = 0; t < v[i].ntags; t++)
				printf("%s%s", t ? "," : "", v[i].tags[t]);
			/* After the tags: a snapshot casctl repair kept
			 * without chunks it lost (crest show says which);
			 * what a job snapshot is, and a rank snapshot. */
			const char *sep = v[i].ntags ? "  " : "";
			if (v[i].damaged) {
				printf("%sDAMAGED", sep);
				sep = "  ";
			}
			const char *jn = cas_manifest_get_label(h, CAS_JOBSNAP_LABEL);
			const char *js = cas_manifest_get_label(h, CAS_JOBSNAP_LABEL_STEP);
			const char *jr = cas_manifest_get_label(h, CAS_JOBSNAP_LABEL_RANK);
			if (job)
				printf("%sjob %s step %llu, world %u", sep, job->name, (unsigned long long)job->step,
				       job->world);
			else if (nin) {
				char jh[65];
				cli_print_id(jh, in[0]->id);
				printf("%srank %s of job snapshot %.12s", sep, jr ? jr : "?", jh);
				if (nin > 1)
					printf(" and %zu more", nin - 1);
			} else if (cas_jobsnap_is_rank(h)) {
				printf("%spartial: rank %s of job %s step %s, in no job snapshot", sep, jr,
				       jn ? jn : "?", js ? js : "?");
			}
			printf("\n");
		}
	}
	if (c->json)
		printf("%s]\n", shown ? "\n" : "");
	cas_snapshot_list_free(v, n);
	cas_jobsnap_list_free(jv, nj);
	return 0;
}

/* ---- show ---- */

/* A job snapshot's members: rank, snapshot, GPU, and what the store has
 * of it (kind and bytes, or that it is missing). */
static void show_job(const struct cli *c, const struct cas_jobsnap *j, const struct cas_snapinfo *v, size_t n)
{
	char hex[65], b[32];
	if (c->json) {
		printf(", \"job\": {\"name\": ");
		json_str(stdout, j->name);
		printf(", \"step\": %llu, \"world\": %u, \"members\": [", (unsigned long long)j->step, j->world);
	} else {
		printf("job      %s step %llu, world %u\n", j->name, (unsigned long long)j->step, j->world);
		printf("%-6s %-64s  %-8s %10s  %s\n", "RANK", "SNAPSHOT", "KIND", "LOGICAL", "GPU");
	}
	for (uint32_t r = 0; r < j->world; r++) {
		const struct cas_snapinfo *s = NULL;
		for (size_t i = 0; i < n && !s; i++)
			if (!memcmp(v[i].id, j->members[r].id, 32))
				s = &v[i];
		cli_print_id(hex, j->members[r].id);
		if (c->json) {
			printf("%s\n  {\"rank\": %u, \"snapshot\": \"%s\", \"gpu\": ", r ? "," : "", r, hex);
			json_str(stdout, j->members[r].gpu);
			printf(", \"present\": %s, \"kind\": ", s ? "true" : "false");
			if (s)
				json_str(stdout, s->head->kind);
			else
				printf("null");
			printf(", \"logical_bytes\": %llu}", s ? (unsigned long long)s->head->logical_bytes : 0ull);
		} else {
			printf("%-6u %-64s  %-8s %10s  %s\n", r, hex, s ? s->head->kind : "MISSING",
			       s ? fmt_bytes(s->head->logical_bytes, b, sizeof(b)) : "-",
			       j->members[r].gpu[0] ? j->members[r].gpu : "-");
		}
	}
	if (c->json)
		printf("%s]}", j->world ? "\n" : "");
}

int cmd_show(struct cli *c, int argc, char **argv)
{
	if (argc != 2)
		return cli_usage(c, "show", "wants one SNAPSHOT, %s", argc < 2 ? "none given" : "no more");
	struct cas_store *store;
	uint8_t id[32];
	struct cas_manifest *m;
	int rc = cli_snapshot_open(c, argv[1], &store, id, &m);
	if (rc < 0)
		return cli_fail(c, rc);
	struct cas_lost *lost = NULL;
	size_t nlost = 0;
	rc = cas_snapshot_lost(store, id, &lost, &nlost);
	char **tags = NULL;
	size_t ntags = 0;
	if (rc == 0)
		rc = cas_snapshot_tags(store, id, &tags, &ntags);
	/* A job snapshot: its members, each as the store has it (or not). */
	struct cas_jobsnap *job = NULL;
	struct cas_snapinfo *sv = NULL;
	size_t nsv = 0;
	if (rc == 0 && cas_jobsnap_is(m) && (rc = cas_jobsnap_load(store, id, &job)) == 0)
		rc = cas_snapshot_list(store, &sv, &nsv);
	cas_close(store);
	if (rc < 0) {
		free(lost);
		cas_manifest_free(m);
		cas_jobsnap_free(job);
		cas_snapshot_tags_free(tags, ntags);
		return cli_fail(c, rc);
	}
	char hex[65], tbuf[32], b1[32];
	cli_print_id(hex, id);
	if (c->json) {
		printf("{\"snapshot\": \"%s\", \"time_ns\": %llu, \"kind\": ", hex, (unsigned long long)m->time_ns);
		json_str(stdout, m->kind);
		printf(", \"logical_bytes\": %llu, \"parent\": ", (unsigned long long)m->logical_bytes);
		if (m->has_parent) {
			char ph[65];
			cli_print_id(ph, m->parent);
			printf("\"%s\"", ph);
		} else {
			printf("null");
		}
		printf(", \"damaged\": %s", nlost ? "true" : "false");
		cli_lost_print(c, id, m, lost, nlost);
		printf(", \"labels\": {");
		for (size_t l = 0; l < m->nlabels; l++) {
			printf("%s", l ? ", " : "");
			json_str(stdout, m->labels[l].key);
			printf(": ");
			json_str(stdout, m->labels[l].value);
		}
		printf("}, \"tags\": [");
		for (size_t t = 0; t < ntags; t++) {
			printf("%s", t ? ", " : "");
			json_str(stdout, tags[t]);
		}
		printf("]");
		if (job)
			show_job(c, job, sv, nsv);
		printf(", \"streams\": [");
	} else {
		cli_fmt_time(m->time_ns, tbuf, sizeof(tbuf));
		printf("snapshot %s\nkind     %s\ntime     %s\nlogical  %s\n", hex, m->kind, tbuf,
		       fmt_bytes(m->logical_bytes, b1, sizeof(b1)));
		if (m->has_parent) {
			char ph[65];
			cli_print_id(ph, m->parent);
			printf("parent   %s\n", ph);
		}
		printf("branch   %s\n", cas_manifest_branch(m));
		for (size_t t = 0; t < ntags; t++)
			printf("tag      %s\n", tags[t]);
		for (size_t i = 0; i < nlost; i++)
			printf("DAMAGED  %s: bytes %llu to %llu lost (crest get " CLI_ALLOW_DAMAGED
			       " restores zeros there)\n", lost[i].stream < m->nstreams ? m->streams[lost[i].stream].name
			       : "?", (unsigned long long)lost[i].off, (unsigned long long)(lost[i].off + lost[i].len));
		for (size_t l = 0; l < m->nlabels; l++)
			if (strcmp(m->labels[l].key, CAS_BRANCH_LABEL))
				printf("label    %s=%s\n", m->labels[l].key, m->labels[l].value);
		if (job)
			show_job(c, job, sv, nsv);
		printf("%-8s %12s %8s  %s\n", "TYPE", "SIZE", "CHUNKS", "NAME");
	}
	for (size_t i = 0; i < m->nstreams; i++) {
		const struct cas_stream *st = &m->streams[i];
		uint64_t chunks = 0, holes = 0;
		for (uint64_t k = 0; k < st->nextents; k++)
			if (st->ext[k].hole)
				holes += st->ext[k].len;
			else
				chunks++;
		if (c->json) {
			printf("%s\n {\"name\": ", i ? "," : "");
			json_str(stdout, st->name);
			printf(", \"type\": \"%s\", \"mode\": %u, \"size\": %llu, \"chunks\": %llu, "
			       "\"hole_bytes\": %llu, \"target\": ", cas_stream_type_name(st->type), st->mode,
			       (unsigned long long)st->size, (unsigned long long)chunks, (unsigned long long)holes);
			json_str(stdout, st->target);
			printf(", \"meta\": ");
			json_str(stdout, st->meta);
			printf("}");
		} else {
			printf("%-8s %12llu %8llu  %s%s%s\n", cas_stream_type_name(st->type),
			       (unsigned long long)st->size, (unsigned long long)chunks, st->name,
			       st->target[0] ? " -> " : "", st->target);
		}
	}
	if (c->json)
		printf("%s]}\n", m->nstreams ? "\n" : "");
	cas_snapshot_tags_free(tags, ntags);
	cas_manifest_free(m);
	cas_jobsnap_free(job);
	cas_snapshot_list_free(sv, nsv);
	free(lost);
	return 0;
}

/* ---- tag ---- */

int cmd_tag(struct cli *c, int argc, char **argv)
{
	/* Tags are fixed names; --force moves one on purpose (git tag -f). */
	bool force = false;
	const char *op[2] = { NULL, NULL };
	int nop = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--force") || !strcmp(argv[i], "-f"))
			force = true;
		else if (argv[i][0] == '-' && argv[i][1])
			return cli_usage(c, "tag", "unknown option %s", argv[i]);
		else if (nop == 2)
			return cli_usage(c, "tag", "wants SNAPSHOT TAG, no more: %s", argv[i]);
		else
			op[nop++] = argv[i];
	}
	if (nop != 2)
		return cli_usage(c, "tag", "wants SNAPSHOT TAG");
	const char *snap = op[0], *tag = op[1];
	if (cas_tag_check(tag) < 0)
		return cli_usage_fail(c, -EINVAL);
	struct cas_store *store;
	int rc = cli_store_open(c, CAS_WRITE, &store);
	if (rc < 0)
		return cli_fail(c, rc);
	uint8_t id[32];
	rc = cas_snapshot_resolve(store, snap, id);
	if (rc == 0)
		rc = cas_tag_set(store, tag, id, force);
	cas_close(store);
	if (rc < 0)
		return cli_fail(c, rc);
	char hex[65];
	cli_print_id(hex, id);
	if (c->json)
		printf("{\"snapshot\": \"%s\", \"tag\": \"%s\"}\n", hex, tag);
	else if (!c->quiet)
		printf("tagged %.12s as %s\n", hex, tag);
	return 0;
}
