/* common.c - shared CLI plumbing; see common.h. */
#include "cli/common.h"
#include "cli/help.h"
#include "capture/transparent.h"
#include "cas/jobs.h"
#include "gpu/gpuckpt.h"
#include "gpu/shim.h"
#include "os/proc.h"
#include "util/err.h"
#include "util/json.h"
#include "util/parse.h"
#include "util/progress.h"
#include "util/sha256.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* stdout on a terminal, through a filter: listings print what snapshots
 * say (tags, labels, stream and branch names, kinds), and a control
 * character there could drive the terminal (an escape sequence that sets
 * its title, hides text, or answers back) or forge lines. Each becomes '?'
 * but newline and tab, as ls does on a terminal; so does a C1 control in
 * UTF-8 (0xc2 0x80-0x9f), its second byte. Output to a file or a pipe is
 * left exact: a script reads the names as they are (and --json escapes
 * them). crest never writes its own escapes to stdout. */
static ssize_t tty_write(void *cookie, const char *buf, size_t n)
{
	unsigned char *prev = cookie;   /* the last byte written, across calls */
	char out[4096];
	for (size_t done = 0; done < n;) {
		const size_t k = n - done < sizeof(out) ? n - done : sizeof(out);
		for (size_t i = 0; i < k; i++) {
			const unsigned char ch = (unsigned char)buf[done + i];
			const bool ctl = (ch < 0x20 && ch != '\n' && ch != '\t') || ch == 0x7f ||
					 (*prev == 0xc2 && ch >= 0x80 && ch <= 0x9f);
			out[i] = ctl ? '?' : (char)ch;
			*prev = ch;
		}
		for (size_t w = 0; w < k;) {
			const ssize_t r = write(1, out + w, k - w);
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				return done ? (ssize_t)done : -1;
			w += (size_t)r;
		}
		done += k;
	}
	return (ssize_t)n;
}

static void guard_stdout(void)
{
	static unsigned char prev;
	if (!isatty(1))
		return;
	const cookie_io_functions_t io = { .write = tty_write };
	FILE *f = fopencookie(&prev, "w", io);
	if (!f)
		return;   /* unfiltered, as before */
	setvbuf(f, NULL, _IOLBF, 0);
	fflush(stdout);
	stdout = f;
}

int cli_parse_globals(struct cli *c, int argc, char **argv)
{
	guard_stdout();
	c->store = cas_default_path();
	const char *init = getenv("CREST_INIT");
	c->init = init && !strcmp(init, "1");
	bool store_set = false, workers_set = false;
	int out = 1;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--json")) {
			c->json = true;
		} else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
			c->quiet = true;
		} else if (!strcmp(a, "--init")) {
			c->init = true;
		} else if (!strcmp(a, "--store") || !strcmp(a, "--workers")) {
			if (i + 1 >= argc) {
				fprintf(stderr, "%s: %s needs a value\n", c->prog, a);
				return -1;
			}
			const char *v = argv[++i];
			bool *set = !strcmp(a, "--store") ? &store_set : &workers_set;
			if (*set) {
				fprintf(stderr, "%s: %s given twice: give it once (%s help)\n", c->prog, a, c->prog);
				return -1;
			}
			*set = true;
			if (!strcmp(a, "--store")) {
				c->store = v;
			} else {
				uint64_t n;
				if (cli_parse_uint(v, 1, 1024, &n) < 0) {
					fprintf(stderr, "%s: --workers %s: give a number from 1 to 1024\n", c->prog, v);
					return -1;
				}
				c->workers = (unsigned)n;
			}
		} else if (!strncmp(a, "--store=", 8)) {
			if (store_set) {
				fprintf(stderr, "%s: --store given twice: give it once (%s help)\n", c->prog, c->prog);
				return -1;
			}
			store_set = true;
			c->store = a + 8;
		} else if (!strcmp(a, "--")) {
			while (i < argc)
				argv[out++] = argv[i++];
			break;
		} else {
			argv[out++] = argv[i];
		}
	}
	argv[out] = NULL;
	/* The store's lock wait (cas/store.c) falls back to its default on a
	 * bad value, for libcrest; a command line says so first, as a usage
	 * error, before anything runs. Same parser and bounds. */
	const char *lt = getenv("CREST_LOCK_TIMEOUT");
	uint64_t ns;
	if (lt && *lt && parse_duration(lt, PARSE_NS_S, 0, 366 * PARSE_NS_DAY, &ns) < 0) {
		fprintf(stderr, "%s: CREST_LOCK_TIMEOUT=%s: not a duration from 0 to 366 days (seconds, or 30s, "
			"5m, 1h)\n", c->prog, lt);
		return -1;
	}
	/* A JSON consumer reads stdout; keep the terminal line off as well. */
	if (c->json)
		c->quiet = true;
	return out;
}

int cli_store_open(const struct cli *c, enum cas_mode mode, struct cas_store **out)
{
	int rc = c->init ? cas_init(c->store) : 0;
	if (rc < 0 && rc != -EEXIST)
		return rc;
	return cas_open(c->store, mode, out);
}

int cli_usage(const struct cli *c, const char *cmd, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (cmd)
		fprintf(stderr, "%s: %s: %s (%s help %s)\n", c->prog, cmd, msg, c->prog, cmd);
	else
		fprintf(stderr, "%s: %s (%s help)\n", c->prog, msg, c->prog);
	return CLI_EXIT_USAGE;
}

int cli_usage_fail(const struct cli *c, int rc)
{
	cli_fail(c, rc);
	return CLI_EXIT_USAGE;
}

/* Options that mean nothing without another, or that contradict one. */
static const struct cli_opt_rule {
	const char *prog, *cmd, *opt;
	const char *needs;      /* given without this: refused */
	const char *excludes;   /* given with this: refused */
	const char *why;        /* the end of the line, or NULL */
} opt_rules[] = {
	{ "crest", "checkpoint", "--count", "--every", NULL, "it counts the rounds of --every" },
	{ "crest", "checkpoint", "--metrics", "--every", NULL, "the metrics are of the rounds of --every" },
	{ "crest", "checkpoint", "--metrics-file", "--every", NULL, "the metrics are of the rounds of --every" },
	{ "crest", "checkpoint", "--tag", NULL, "--every", "a tag names one snapshot and does not move; "
	  "tag a round afterwards with crest tag" },
	{ "crest", "checkpoint", "--kill", NULL, "--every", "--kill ends the job after one checkpoint" },
	{ "crest", "run", "--metrics", "--every", NULL, "the metrics are of the rounds of --every" },
	{ "crest", "run", "--branch", "--every", NULL, "without it crest run takes no checkpoints" },
	{ "crest", "run", "--file-limit", "--every", NULL, "without it crest run takes no checkpoints" },
	{ "crest", "run", "--tmpdir", "--every", NULL, "without it crest run takes no checkpoints" },
	{ "crest", "run", "--tcp-close", "--every", NULL, "without it crest run takes no checkpoints" },
	{ "crest", "run", "--huge-pages", "--every", NULL, "without it crest run takes no checkpoints" },
	{ "crest", "run", "--metrics-file", "--every", NULL, "the metrics are of the rounds of --every" },
	{ "crest", "run", "--push-to", "--every", NULL, "without it crest run takes no checkpoints" },
	{ "crest", "run", "--workdir", "--every", NULL, "without it crest run takes no checkpoints (crest checkpoint "
	  "--pid takes --workdir too)" },
	{ "crest", "run", "--workdir-limit", "--workdir", NULL, "it limits --workdir" },
	{ "crest", "checkpoint", "--workdir-limit", "--workdir", NULL, "it limits --workdir" },
	{ "crest", "restore", "--gpu", NULL, "--gpu-map", "give one" },
	{ "crest", "clone", "--gpu", NULL, "--gpu-map", "give one" },
	{ "crest", "demo", "--cpu", NULL, "--gpu", "give one" },
	{ "crest", "log", "--plot", NULL, "--graph", "the picture has no graph" },
};

/* The value options that add up rather than contradict one another. */
static const struct {
	const char *prog, *cmd, *opt;
} opt_repeatable[] = {
	{ "casctl", "gc", "--keep-tag" },
	{ "crest", "put", "--label" },
	{ "crest", "job", "--gpu" },
};

static bool opt_repeats(const char *prog, const char *cmd, const char *opt)
{
	for (size_t r = 0; r < sizeof(opt_repeatable) / sizeof(opt_repeatable[0]); r++)
		if (!strcmp(opt_repeatable[r].prog, prog) && !strcmp(opt_repeatable[r].cmd, cmd) &&
		    !strcmp(opt_repeatable[r].opt, opt))
			return true;
	return false;
}

int cli_check_opts(const struct cli *c, int argc, char **argv)
{
	if (argc < 2)
		return 0;
	const struct cli_cmd_doc *d = cli_doc_find(c->prog, argv[1]);
	if (!d)
		return 0;
	/* How often each of the command's options came, by its place in the
	 * table (an alias counts as its option). */
	unsigned seen[CLI_DOC_MAX_OPTS] = { 0 };
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--"))
			break;
		if (a[0] != '-' || !a[1]) {
			if (d->operand_ends_opts)
				break;
			continue;
		}
		const struct cli_opt_doc *o = cli_doc_opt(d, a);
		if (!o)
			continue;   /* cli_help_dispatch has refused it already */
		if (o->arg)
			i++;
		const ptrdiff_t k = o - d->opts;
		if (k < 0 || k >= CLI_DOC_MAX_OPTS)
			continue;
		/* A flag twice is the flag; a value twice is a contradiction
		 * that the last one would settle without a word, unless the
		 * option adds up (gc --keep-tag). */
		if (seen[k]++ && o->arg && !opt_repeats(c->prog, d->name, o->name))
			return cli_usage(c, d->name, "%s given twice: give it once", o->name);
	}
	for (size_t r = 0; r < sizeof(opt_rules) / sizeof(opt_rules[0]); r++) {
		const struct cli_opt_rule *ru = &opt_rules[r];
		if (strcmp(ru->prog, c->prog) || strcmp(ru->cmd, d->name))
			continue;
		const struct cli_opt_doc *o = cli_doc_opt(d, ru->opt);
		const struct cli_opt_doc *n = cli_doc_opt(d, ru->needs ? ru->needs : ru->excludes);
		if (!o || !n || !seen[o - d->opts])
			continue;
		const bool has = seen[n - d->opts] != 0;
		if (ru->needs && !has)
			return cli_usage(c, d->name, "%s can only go with %s%s%s", ru->opt, ru->needs, ru->why ? ": " : "",
					 ru->why ? ru->why : "");
		if (ru->excludes && has)
			return cli_usage(c, d->name, "%s does not go with %s%s%s", ru->opt, ru->excludes,
					 ru->why ? ": " : "", ru->why ? ru->why : "");
	}
	return 0;
}

int cli_parse_uint(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	uint64_t v = 0;
	if (!s[0])
		return -EINVAL;
	for (const char *p = s; *p; p++)
		if (*p < '0' || *p > '9' || __builtin_mul_overflow(v, 10, &v) ||
		    __builtin_add_overflow(v, (uint64_t)(*p - '0'), &v))
			return -EINVAL;
	if (v < lo || v > hi)
		return -EINVAL;
	*out = v;
	return 0;
}

int cli_parse_size(const char *s, uint64_t *out)
{
	char *end;
	/* strtoull alone would take " -1" (spaces, then a sign it negates). */
	if (s[0] < '0' || s[0] > '9')
		return -EINVAL;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno)
		return -EINVAL;
	uint64_t mul = 1;
	switch (*end) {
	case 0: break;
	case 'k': case 'K': mul = 1ull << 10; end++; break;
	case 'm': case 'M': mul = 1ull << 20; end++; break;
	case 'g': case 'G': mul = 1ull << 30; end++; break;
	case 't': case 'T': mul = 1ull << 40; end++; break;
	default: return -EINVAL;
	}
	if (*end == 'i' && end[1] == 'B')
		end += 2;
	else if (*end == 'B')
		end++;
	if (*end || v > UINT64_MAX / mul)
		return -EINVAL;
	*out = v * mul;
	return 0;
}

int cli_parse_duration(const char *s, uint64_t *ns)
{
	return parse_duration(s, PARSE_NS_S, CLI_DURATION_MIN_NS, CLI_DURATION_MAX_NS, ns);
}

int cli_fail(const struct cli *c, int rc)
{
	const char *msg = crest_errmsg();
	if (!msg[0])
		msg = strerror(rc < 0 ? -rc : EIO);
	fprintf(stderr, "%s: %s\n", c->prog, msg);
	return 1;
}

struct cli_progress {
	struct engine_snap *snap;
	struct progress p;
	pthread_t t;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stop, started;
};

static void *progress_main(void *arg)
{
	struct cli_progress *cp = arg;
	pthread_mutex_lock(&cp->lock);
	while (!cp->stop) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 250 * 1000 * 1000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&cp->cond, &cp->lock, &ts);
		if (cp->stop)
			break;
		uint64_t done, total;
		engine_snapshot_progress(cp->snap, &done, &total);
		cp->p.total = total;
		progress_update(&cp->p, done);
	}
	pthread_mutex_unlock(&cp->lock);
	return NULL;
}

struct cli_progress *cli_progress_start(const struct cli *c, struct engine_snap *s, const char *label)
{
	struct cli_progress *cp = calloc(1, sizeof(*cp));
	if (!cp)
		return NULL;
	cp->snap = s;
	progress_begin(&cp->p, label, 0, c->quiet);
	if (!cp->p.enabled)
		return cp;
	pthread_mutex_init(&cp->lock, NULL);
	pthread_cond_init(&cp->cond, NULL);
	cp->started = pthread_create(&cp->t, NULL, progress_main, cp) == 0;
	return cp;
}

void cli_progress_stop(struct cli_progress *cp)
{
	if (!cp)
		return;
	if (cp->started) {
		pthread_mutex_lock(&cp->lock);
		cp->stop = true;
		pthread_cond_signal(&cp->cond);
		pthread_mutex_unlock(&cp->lock);
		pthread_join(cp->t, NULL);
		pthread_mutex_destroy(&cp->lock);
		pthread_cond_destroy(&cp->cond);
	}
	progress_end(&cp->p);
	free(cp);
}

int cli_snapshot_open(const struct cli *c, const char *name, struct cas_store **store, uint8_t id[32],
		      struct cas_manifest **m)
{
	*m = NULL;
	int rc = cli_store_open(c, CAS_READ, store);
	if (rc < 0) {
		*store = NULL;
		return rc;
	}
	rc = cas_snapshot_resolve(*store, name, id);
	if (rc == 0)
		rc = cas_manifest_load(*store, id, m);
	if (rc < 0) {
		cas_close(*store);
		*store = NULL;
	}
	return rc;
}

/* "NAME bytes A to B, ..." for the first few ranges of v, then a count. */
static void lost_text(const struct cas_manifest *m, const struct cas_lost *v, size_t n, char *buf, size_t cap)
{
	size_t used = 0;
	buf[0] = 0;
	for (size_t i = 0; i < n && used < cap; i++) {
		if (i == 4) {
			snprintf(buf + used, cap - used, " and %zu more range%s", n - i, n - i == 1 ? "" : "s");
			break;
		}
		const char *name = v[i].stream < m->nstreams ? m->streams[v[i].stream].name : "?";
		int w = snprintf(buf + used, cap - used, "%s%s bytes %llu to %llu", i ? ", " : "", name,
				 (unsigned long long)v[i].off, (unsigned long long)(v[i].off + v[i].len));
		used += w > 0 ? (size_t)w : 0;
	}
}

int cli_snapshot_damage(struct cas_store *s, const uint8_t id[32], struct cas_manifest *m, bool allow,
			struct cas_lost **lost, size_t *nlost)
{
	int rc = cas_snapshot_lost(s, id, lost, nlost);
	if (rc < 0 || !*nlost)
		return rc;
	uint64_t bytes = 0;
	size_t streams = 0;
	for (size_t i = 0; i < *nlost; i++) {
		bytes += (*lost)[i].len;
		streams += i == 0 || (*lost)[i].stream != (*lost)[i - 1].stream;
	}
	char hex[65], what[1024];
	cli_print_id(hex, id);
	if (!allow) {
		lost_text(m, *lost, *nlost, what, sizeof(what));
		rc = crest_errx(-EBADMSG, "snapshot %.12s is damaged: casctl repair found %llu bytes of %zu stream%s "
				"lost (%s); " CLI_ALLOW_DAMAGED " restores the rest, with zeros there", hex,
				(unsigned long long)bytes, streams, streams == 1 ? "" : "s", what);
	} else {
		rc = cas_manifest_holes(m, *lost, *nlost);
	}
	if (rc < 0) {
		free(*lost);
		*lost = NULL;
		*nlost = 0;
	}
	return rc;
}

void cli_lost_print(const struct cli *c, const uint8_t id[32], const struct cas_manifest *m,
		    const struct cas_lost *v, size_t n)
{
	char hex[65];
	cli_print_id(hex, id);
	if (c->json) {
		printf(", \"lost\": [");
		for (size_t i = 0; i < n; i++) {
			printf("%s{\"stream\": ", i ? ", " : "");
			json_str(stdout, v[i].stream < m->nstreams ? m->streams[v[i].stream].name : "?");
			printf(", \"offset\": %llu, \"length\": %llu}", (unsigned long long)v[i].off,
			       (unsigned long long)v[i].len);
		}
		printf("]");
		return;
	}
	/* Even with --quiet: what was restored is not what was saved. */
	for (size_t i = 0; i < n; i++)
		fprintf(stderr, "%s: warning: snapshot %.12s is damaged: zeros stand for %s bytes %llu to %llu "
			"(lost)\n", c->prog, hex, v[i].stream < m->nstreams ? m->streams[v[i].stream].name : "?",
			(unsigned long long)v[i].off, (unsigned long long)(v[i].off + v[i].len));
}

int cli_writer_open(const struct cli *c, const struct engine_opts *o, struct cas_store **store,
		    struct engine **e)
{
	struct engine_opts def;
	if (!o) {
		engine_opts_default(&def);
		def.workers = c->workers;
		o = &def;
	}
	int rc = cli_store_open(c, CAS_WRITE, store);
	if (rc < 0)
		return rc;
	rc = engine_open(*store, o, e);
	if (rc < 0) {
		cas_close(*store);
		*store = NULL;
	}
	return rc;
}

void cli_print_id(char out[65], const uint8_t id[32])
{
	hex_encode(id, 32, out);
}

double cli_secs(uint64_t ns)
{
	return (double)ns / 1e9;
}

uint64_t cli_rate(uint64_t bytes, double secs)
{
	const double r = secs > 0 ? (double)bytes / secs : 0;
	return r >= 18446744073709551615.0 ? UINT64_MAX : (uint64_t)r;
}

int cli_check_index(const struct cli *c, const struct cas_store *s)
{
	struct cas_recovery r;
	cas_recovery_get(s, &r);
	if (!r.unindexed)
		return 0;
	return crest_errx(-EBADMSG, "%s: %u snapshot%s in the meta log %s not in the index (a damaged index, "
			  "or a commit interrupted or in progress): the next writer, or casctl repair, "
			  "recovers %s", c->store, r.unindexed, r.unindexed == 1 ? "" : "s",
			  r.unindexed == 1 ? "is" : "are", r.unindexed == 1 ? "it" : "them");
}

void cli_fmt_time(uint64_t ns, char *buf, size_t cap)
{
	const time_t t = (time_t)(ns / 1000000000);
	struct tm tm;
	localtime_r(&t, &tm);
	strftime(buf, cap, "%Y-%m-%d %H:%M:%S", &tm);
}

/* "OLD=NEW[,OLD=NEW]" with nvidia-smi's GPU-... UUIDs. */
int cli_parse_gpu_map(const char *s, struct gpuckpt_map **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	char *dup = strdup(s), *save = NULL;
	if (!dup)
		return -ENOMEM;
	int rc = 0;
	for (char *tok = strtok_r(dup, ",", &save); tok && rc == 0; tok = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(tok, '=');
		if (!eq) {
			rc = crest_errx(-EINVAL, "--gpu-map %s: want OLD_UUID=NEW_UUID[,...]", s);
			break;
		}
		*eq = 0;
		struct gpuckpt_map *nm = realloc(*out, (*n + 1) * sizeof(*nm));
		if (!nm) {
			rc = -ENOMEM;
			break;
		}
		*out = nm;
		const char *bad = gpuckpt_parse_uuid(tok, &nm[*n].from) < 0 ? tok :
				  gpuckpt_parse_uuid(eq + 1, &nm[*n].to) < 0 ? eq + 1 : NULL;
		if (bad)
			rc = crest_errx(-EINVAL, "--gpu-map %s: '%s' is not a GPU UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-"
					"xxxxxxxxxxxx, as nvidia-smi -L prints)", s, bad);
		(*n)++;
	}
	free(dup);
	return rc;
}

int cli_check_gpu(const char *v)
{
	uint64_t n;
	CUuuid u;
	if (cli_parse_uint(v, 0, 1023, &n) == 0 || gpuckpt_parse_uuid(v, &u) == 0)
		return 0;
	return crest_errx(-EINVAL, "--gpu %s: a GPU's index (0, 1, ...) or its UUID (GPU-...)", v);
}

/* Records that the job at pid last came from snapshot id on branch. Only
 * a warning if it cannot: the job runs either way, and its next
 * checkpoint then continues its branch's head instead. */
void cli_job_note(const struct cli *c, struct cas_store *store, pid_t pid, const uint8_t id[32],
		  const char *branch)
{
	char key[CAS_JOB_KEY_MAX + 1];
	if (proc_job_key(pid, key, sizeof(key)) < 0)
		return;
	if (cas_job_note(store, key, id, branch) < 0 && !c->quiet)
		fprintf(stderr, "%s: warning: %s (pid %d's next checkpoint will follow its branch's head)\n",
			c->prog, crest_errmsg(), (int)pid);
}

/* path resolved (its parent where it does not exist yet). */
static bool real_or_parent(const char *path, char *out)
{
	if (realpath(path, out))
		return true;
	char tmp[PATH_MAX], parent[PATH_MAX];
	snprintf(tmp, sizeof(tmp), "%s", path);
	char *slash = strrchr(tmp, '/');
	const char *base = slash ? slash + 1 : tmp;
	if (slash)
		*slash = 0;
	if (!realpath(slash ? (tmp[0] ? tmp : "/") : ".", parent))
		return false;
	return snprintf(out, PATH_MAX, "%s/%s", strcmp(parent, "/") ? parent : "", base) < PATH_MAX;
}

static bool path_within(const char *a, const char *b)
{
	const size_t l = strlen(b);
	return !strncmp(a, b, l) && (a[l] == '/' || !a[l]);
}

int cli_workdir_check(const struct cli *c, const struct tp_opts *o)
{
	if (!o->workdir)
		return 0;
	const char *what[2] = { c->store, o->tmpdir ? o->tmpdir : "/dev/shm" };
	const char *name[2] = { "the store", "the images directory (--tmpdir)" };
	for (int k = 0; k < 2; k++) {
		char r[PATH_MAX];
		if (what[k] && real_or_parent(what[k], r) && (path_within(r, o->workdir) || path_within(o->workdir, r)))
			return crest_errx(-EINVAL, "--workdir %s and %s %s lie one inside the other: each checkpoint "
					  "would copy %s into itself; keep them apart", o->workdir, name[k], r, name[k]);
	}
	return 0;
}

int cli_every_opt(const char *a, const char *v, struct tp_opts *o, struct cli_every *ev)
{
	if (!strcmp(a, "--every")) {
		if (cli_parse_duration(v, &ev->every_ns) < 0) {
			fprintf(stderr, "crest: --every %s: not a duration from 1ms to 366 days (30s, 5m, 1h, 7d)\n", v);
			return -1;
		}
	} else if (!strcmp(a, "--branch")) {
		o->branch = v;
	} else if (!strcmp(a, "--file-limit")) {
		if (cli_parse_size(v, &o->file_limit) < 0) {
			fprintf(stderr, "crest: --file-limit %s: not a size\n", v);
			return -1;
		}
	} else if (!strcmp(a, "--tmpdir")) {
		o->tmpdir = v;
	} else if (!strcmp(a, "--workdir")) {
		/* Resolved once, here: the snapshot names it by its real path,
		 * and the capture then follows no symlink in it. */
		static char wd[PATH_MAX];
		struct stat sb;
		errno = 0;
		if (!realpath(v, wd) || stat(wd, &sb) < 0 || !S_ISDIR(sb.st_mode)) {
			fprintf(stderr, "crest: --workdir %s: %s\n", v, errno ? strerror(errno) : "not a directory");
			return -1;
		}
		if (!strcmp(wd, "/")) {
			fprintf(stderr, "crest: --workdir %s: not the root directory: name the job's own directory\n", v);
			return -1;
		}
		o->workdir = wd;
	} else if (!strcmp(a, "--workdir-limit")) {
		if (cli_parse_size(v, &o->workdir_limit) < 0 || !o->workdir_limit) {
			fprintf(stderr, "crest: --workdir-limit %s: not a size\n", v);
			return -1;
		}
	} else if (!strcmp(a, "--metrics")) {
		ev->maddr = v;
	} else if (!strcmp(a, "--metrics-file")) {
		ev->mfile = v;
	} else if (!strcmp(a, "--push-to")) {
		ev->push_to = v;
	} else {
		return 0;
	}
	return 1;
}

int cli_shim_path(char *buf, size_t cap)
{
	const char *env = getenv("CREST_SHIM");
	if (env && env[0]) {
		if (access(env, R_OK) < 0)
			return crest_errf(-errno, "CREST_SHIM=%s", env);
		snprintf(buf, cap, "%s", env);
		return 0;
	}
	char exe[PATH_MAX];
	const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		exe[n] = 0;
		char *slash = strrchr(exe, '/');
		if (slash)
			*slash = 0;
		/* build/cli/crest -> build/gpu; a bundle's bin/crest -> lib. */
		static const char *const rel[] = { "../gpu/libcrest-shim.so", "../lib/libcrest-shim.so" };
		for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
			snprintf(buf, cap, "%s/%s", exe, rel[i]);
			char real[PATH_MAX];
			if (realpath(buf, real) && access(real, R_OK) == 0) {
				snprintf(buf, cap, "%s", real);
				return 0;
			}
		}
	}
	snprintf(buf, cap, "%s", CREST_SHIM_INSTALLED);
	if (access(buf, R_OK) == 0)
		return 0;
	return crest_errx(-ENOENT, "--cuda-shim: libcrest-shim.so is neither beside crest's program nor at %s "
			  "(set CREST_SHIM to its path)", CREST_SHIM_INSTALLED);
}

void cli_shim_note(const struct cli *c, const struct tp_opts *o, const struct tp_capture *cap)
{
	if (!cap->shim.n || c->quiet || c->json)
		return;
	const struct shimctl_stats *st = &cap->shim_st;
	char again[96];
	if (o->kill)
		snprintf(again, sizeof(again), "made again by the restore");
	else if (cap->stranded_nccl)
		snprintf(again, sizeof(again), "NOT made again");
	else if (cap->stranded[0])
		snprintf(again, sizeof(again), "not made again: the driver did not give the job back");
	else
		snprintf(again, sizeof(again), "made again in %.3f s", cli_secs(cap->shim_rebuild_ns));
	unsigned peers = 0;
	for (size_t i = 0; i < cap->shim.n; i++)
		peers += cap->shim.v[i].ctl->npeer;
	char pw[64] = "";
	if (peers)
		snprintf(pw, sizeof(pw), "; %u peer access pair(s) disabled", peers);
	if (st->ncomm)
		fprintf(stderr, "crest: NCCL shim: %u communicator(s) of %zu process(es) ended at a cut all ranks agree "
			"on (%llu call(s) let through to reach it, %u round(s))%s, in %.3f s before the freeze; %s\n",
			st->ncomm, cap->shim.n, (unsigned long long)st->drained, st->rounds, pw, cli_secs(st->ns), again);
	else
		fprintf(stderr, "crest: CUDA shim: %u peer access pair(s) of %zu process(es) disabled in %.3f s before the "
			"freeze; %s\n", peers, cap->shim.n, cli_secs(st->ns), again);
}
