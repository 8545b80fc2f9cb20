/*
 * cmd_bench.c - crest bench restore: how fast a snapshot comes back on this
 * machine, to which target, where the time goes, and how close that is to
 * what the machine can do with the same bytes.
 *
 * Nothing is harmed: the store is opened read-only; files go into a fresh
 * temporary directory, removed after; host and device targets are scratch
 * memory. The restore runs the real paths (restore_tree / restore_stream
 * for null and files, restore_streams_to_device, libcrest's region path,
 * for host and gpu) with restore/'s phase timers on. The ceiling is a plain
 * parallel read of exactly the pack bytes the snapshot's chunks occupy, with
 * as many threads (plus, for gpu, pinned host-to-device copies of the same
 * bytes), measured in the same run right after each restore.
 */
#include "capture/regions.h"
#include "cas/history.h"
#include "cli/commands.h"
#include "cli/help.h"
#include "engine/engine.h"
#include "gpu/cudrv.h"
#include "restore/gpu.h"
#include "restore/restore.h"
#include "util/err.h"
#include "util/json.h"
#include "util/par.h"
#include "util/progress.h"

#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum target { TO_NULL, TO_FILES, TO_HOST, TO_GPU };
static const char *const target_names[] = { "null", "files", "host", "gpu" };

#define CEIL_PIECE (4u << 20)       /* bytes a ceiling read takes at a time */
#define GPU_STAGING ((size_t)1 << 30)   /* as libcrest's default pool */
#define GPU_WINDOW (64u << 20)


/* ---- what the plot is drawn from: every addition to a phase ---- */

struct event {
	uint64_t end, ns, bytes;   /* end: ns since the restore started */
	uint8_t phase;
};

struct evlog {
	pthread_mutex_t lock;
	uint64_t t0, t_end;
	struct event *v;
	size_t n, cap;
	bool lost;   /* out of memory: the picture is incomplete */
};

static void ev_add(void *arg, enum restore_phase i, uint64_t end_ns, uint64_t ns, uint64_t bytes)
{
	struct evlog *l = arg;
	pthread_mutex_lock(&l->lock);
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 4096;
		struct event *nv = realloc(l->v, cap * sizeof(*nv));
		if (!nv) {
			l->lost = true;
			pthread_mutex_unlock(&l->lock);
			return;
		}
		l->v = nv;
		l->cap = cap;
	}
	l->v[l->n++] = (struct event){ end_ns > l->t0 ? end_ns - l->t0 : 0, ns, bytes, (uint8_t)i };
	pthread_mutex_unlock(&l->lock);
}

/* ---- the ceiling: a plain parallel read of the same pack bytes ---- */

struct range {
	uint32_t pack;
	uint64_t off, end;
};

static int range_cmp(const void *a, const void *b)
{
	const struct range *x = a, *y = b;
	if (x->pack != y->pack)
		return x->pack < y->pack ? -1 : 1;
	return x->off < y->off ? -1 : x->off > y->off;
}

struct ceil_job {
	struct cas_reader *rd;
	struct range *piece;
};

static int ceil_tls_new(struct par *p, void **tls)
{
	(void)p;
	*tls = malloc(CEIL_PIECE);
	return *tls ? 0 : crest_errf(-ENOMEM, "allocating a read buffer");
}

static int ceil_one(struct par *p, void *tls, size_t i)
{
	const struct ceil_job *j = p->arg;
	const struct range *r = &j->piece[i];
	struct iovec iov = { tls, r->end - r->off };
	ssize_t got = cas_reader_readv(j->rd, r->pack, r->off, &iov, 1);
	if (got < 0)
		return crest_errf((int)got, "reading pack %u at %llu for the ceiling", r->pack,
				  (unsigned long long)r->off);
	atomic_fetch_add(&p->bytes, (uint64_t)got);
	return 0;
}

/* The pack stretches the snapshot's chunks occupy, cut into pieces of at
 * most CEIL_PIECE: *out, *n, their bytes in *bytes. rd's bounds are raised
 * over them on the way (cas_reader_locate). */
static int ceil_plan(struct cas_reader *rd, const struct cas_manifest *m, struct range **out, size_t *n,
		     uint64_t *bytes)
{
	struct range *r = NULL;
	size_t nr = 0, cap = 0;
	int rc = 0;
	for (size_t s = 0; rc == 0 && s < m->nstreams; s++)
		for (uint64_t e = 0; rc == 0 && e < m->streams[s].nextents; e++) {
			const struct cas_extent *x = &m->streams[s].ext[e];
			if (x->hole)
				continue;
			struct cas_cursor cur;
			rc = cas_reader_locate(rd, x->sha, &cur);
			if (rc < 0) {
				rc = crest_errx(-EBADMSG, "a chunk of stream %s is not in the index",
						m->streams[s].name);
				break;
			}
			if (nr == cap) {
				cap = cap ? 2 * cap : 1024;
				struct range *nn = realloc(r, cap * sizeof(*nn));
				if (!nn) {
					rc = crest_errf(-ENOMEM, "planning the ceiling read");
					break;
				}
				r = nn;
			}
			r[nr++] = (struct range){ cur.pack, cur.off, cur.end };
		}
	if (rc < 0) {
		free(r);
		return rc;
	}
	qsort(r, nr, sizeof(*r), range_cmp);
	/* Merge stretches that touch; a chunk used twice is read twice, as
	 * the restore reads it. */
	size_t k = 0;
	for (size_t i = 0; i < nr; i++) {
		if (k && r[k - 1].pack == r[i].pack && r[i].off == r[k - 1].end)
			r[k - 1].end = r[i].end;
		else
			r[k++] = r[i];
	}
	size_t np = 0;
	uint64_t total = 0;
	for (size_t i = 0; i < k; i++) {
		np += (size_t)((r[i].end - r[i].off + CEIL_PIECE - 1) / CEIL_PIECE);
		total += r[i].end - r[i].off;
	}
	struct range *p = malloc((np ? np : 1) * sizeof(*p));
	if (!p) {
		free(r);
		return crest_errf(-ENOMEM, "planning the ceiling read");
	}
	np = 0;
	for (size_t i = 0; i < k; i++)
		for (uint64_t o = r[i].off; o < r[i].end; o += CEIL_PIECE)
			p[np++] = (struct range){ r[i].pack, o,
						  o + CEIL_PIECE < r[i].end ? o + CEIL_PIECE : r[i].end };
	free(r);
	*out = p;
	*n = np;
	*bytes = total;
	return 0;
}

/* ---- one run ---- */

struct bench {
	const struct cli *c;
	const char *name;
	enum target to;
	bool cold, keep;
	unsigned threads, repeat;
	const char *dir, *plot;
	/* the GPU, when --to gpu */
	const struct cudrv *d;
	CUcontext ctx;
	CUdevice dev;
	uint8_t **pinned;
	unsigned npinned;
	size_t win;
};

struct run {
	double secs, manifest_s, ceil_read_s, ceil_h2d_s;
	uint64_t ns[RESTORE_PH_N], pbytes[RESTORE_PH_N];
};

struct figures {
	uint8_t id[32];
	char kind[32];
	uint64_t logical, data, stored;   /* stream bytes, of them in chunks, pack bytes */
	size_t nstreams;
};

static int discard_sink(void *arg, uint64_t off, const void *data, uint32_t len)
{
	(void)arg, (void)off, (void)data, (void)len;
	return 0;
}

/* Streams that carry bytes (not directories, symlinks or hard links). */
static bool data_stream(const struct cas_stream *st)
{
	if (st->type == CAS_STREAM_DIR || st->type == CAS_STREAM_SYMLINK)
		return false;
	return !(st->type == CAS_STREAM_FILE && !strncmp(st->meta, "link=", 5));
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *f)
{
	(void)sb, (void)f;
	return (flag == FTW_DP ? rmdir(path) : unlink(path)) < 0 ? -1 : 0;
}

static int chmod_dirs(const char *path, const struct stat *sb, int flag, struct FTW *f)
{
	(void)f;
	if (flag == FTW_D)
		chmod(path, (sb->st_mode & 07777) | 0700);   /* a restored 0500 dir must empty */
	return 0;
}

static int rm_tree(const char *dir)
{
	nftw(dir, chmod_dirs, 16, FTW_PHYS);
	if (nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS) < 0)
		return crest_errf(-errno, "cannot remove %s", dir);
	return 0;
}

/* The restore itself, to b->to, timed into ph; *secs: its wall time, not
 * counting setting up the destination (scratch memory allocated and
 * touched, as a job's regions are) or removing it. */
struct timing {
	struct evlog *log;   /* NULL: no plot */
	uint64_t t0;
	double *secs;
};

static void timing_begin(struct timing *t, struct restore_phases *ph)
{
	t->t0 = time_now_ns();
	if (t->log) {
		t->log->n = 0;
		t->log->t0 = t->t0;
		ph->event = ev_add;
		ph->event_arg = t->log;
	}
}

static void timing_end(struct timing *t)
{
	const uint64_t now = time_now_ns();
	*t->secs = (now - t->t0) / 1e9;
	if (t->log)
		t->log->t_end = now - t->t0;
}

static int run_target(struct bench *b, struct restore_ctx *rc_ctx, const struct cas_manifest *m,
		      const struct figures *fg, struct timing *tm)
{
	int rc = 0;
	if (b->to == TO_NULL) {
		timing_begin(tm, rc_ctx->phases);
		for (size_t i = 0; rc == 0 && i < m->nstreams; i++)
			if (data_stream(&m->streams[i]))
				rc = restore_stream(rc_ctx, &m->streams[i], discard_sink, NULL);
		timing_end(tm);
		return rc;
	}
	if (b->to == TO_FILES) {
		const char *base = b->dir ? b->dir : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
		char tmp[4096], dest[4200];
		snprintf(tmp, sizeof(tmp), "%s/crest-bench-XXXXXX", base);
		if (!mkdtemp(tmp))
			return crest_errf(-errno, "cannot make a temporary directory in %s", base);
		snprintf(dest, sizeof(dest), "%s/restore", tmp);
		uint64_t bytes = 0;
		timing_begin(tm, rc_ctx->phases);
		rc = restore_tree(rc_ctx, m, dest, &bytes);
		timing_end(tm);
		if (b->keep)
			fprintf(stderr, "crest: bench: restored into %s (kept)\n", dest);
		else {
			int rrc = rm_tree(tmp);
			if (rc == 0)
				rc = rrc;
		}
		return rc;
	}
	/* host and gpu: every data stream at once, through the region path. */
	struct restore_gpu_dst *dst = calloc(fg->nstreams ? fg->nstreams : 1, sizeof(*dst));
	if (!dst)
		return crest_errf(-ENOMEM, "benchmarking a restore");
	size_t n = 0;
	for (size_t i = 0; i < m->nstreams; i++)
		if (data_stream(&m->streams[i]) && m->streams[i].size)
			dst[n++].st = &m->streams[i];
	uint64_t *ptrs = calloc(n ? n : 1, sizeof(*ptrs));
	rc = ptrs ? 0 : crest_errf(-ENOMEM, "benchmarking a restore");
	for (size_t i = 0; rc == 0 && i < n; i++) {
		const size_t sz = dst[i].st->size;
		if (b->to == TO_HOST) {
			dst[i].host = malloc(sz);
			if (!dst[i].host)
				rc = crest_errf(-ENOMEM, "allocating %zu bytes of scratch memory for %s", sz,
						dst[i].st->name);
			else
				memset(dst[i].host, 0xa5, sz);   /* a job's regions are touched already */
			ptrs[i] = (uint64_t)(uintptr_t)dst[i].host;
		} else {
			CUdeviceptr p = 0;
			rc = cudrv_check(b->d, b->d->MemAlloc(&p, sz), "allocating device memory (cuMemAlloc)");
			dst[i].dst = p;
			dst[i].ctx = b->ctx;
			ptrs[i] = p;
		}
	}
	if (rc == 0) {
		struct restore_gpu_opts go = { .d = b->to == TO_GPU ? b->d : NULL, .win_step = ENGINE_SEGMENT_BYTES,
					       .bufs = b->to == TO_GPU ? b->pinned : NULL,
					       .nbufs = b->to == TO_GPU ? b->npinned : 0,
					       .buf_bytes = b->to == TO_GPU ? b->win : GPU_WINDOW };
		timing_begin(tm, rc_ctx->phases);
		rc = restore_streams_to_device(rc_ctx, dst, n, &go);
		timing_end(tm);
	}
	for (size_t i = 0; ptrs && i < n; i++) {
		if (b->to == TO_HOST)
			free(dst[i].host);
		else if (ptrs[i])
			b->d->MemFree((CUdeviceptr)ptrs[i]);
	}
	free(ptrs);
	free(dst);
	return rc;
}

/* Pinned host-to-device copies of bytes, as the restore makes them: the
 * GPU half of the ceiling. */
static int ceil_h2d(struct bench *b, uint64_t bytes, double *secs)
{
	CUdeviceptr dp = 0;
	CUstream s = NULL;
	int rc = cudrv_check(b->d, b->d->MemAlloc(&dp, b->win), "allocating device memory (cuMemAlloc)");
	if (rc == 0)
		rc = cudrv_check(b->d, b->d->StreamCreate(&s, CU_STREAM_NON_BLOCKING), "creating a stream");
	const uint64_t t0 = time_now_ns();
	for (uint64_t o = 0, k = 0; rc == 0 && o < bytes; o += b->win, k++)
		rc = cudrv_check(b->d, b->d->MemcpyHtoDAsync(dp, b->pinned[k % b->npinned],
							     bytes - o < b->win ? bytes - o : b->win, s),
				 "copying to the device (cuMemcpyHtoDAsync)");
	if (rc == 0)
		rc = cudrv_check(b->d, b->d->StreamSynchronize(s), "waiting for copies (cuStreamSynchronize)");
	*secs = (time_now_ns() - t0) / 1e9;
	if (s)
		b->d->StreamDestroy(s);
	if (dp)
		b->d->MemFree(dp);
	return rc;
}

static int one_run(struct bench *b, struct figures *fg, struct run *out, struct evlog *log)
{
	struct cas_store *store = NULL;
	struct cas_manifest *m = NULL;
	struct cas_reader *rd = NULL;
	struct range *pieces = NULL;
	size_t npieces = 0;
	struct restore_phases ph;
	memset(&ph, 0, sizeof(ph));
	memset(out, 0, sizeof(*out));
	int rc = cli_store_open(b->c, CAS_READ, &store);
	if (rc == 0)
		rc = cas_snapshot_resolve(store, b->name, fg->id);
	if (rc == 0 && b->cold && cas_pack_drop_cache(store) < 0)
		rc = -EIO;
	uint64_t t0 = time_now_ns();
	if (rc == 0)
		rc = cas_manifest_load(store, fg->id, &m);
	const uint64_t t1 = time_now_ns();
	out->manifest_s = (t1 - t0) / 1e9;
	if (rc == 0) {
		snprintf(fg->kind, sizeof(fg->kind), "%s", m->kind);
		fg->logical = fg->data = 0;
		fg->nstreams = m->nstreams;
		for (size_t i = 0; i < m->nstreams; i++) {
			const struct cas_stream *st = &m->streams[i];
			if (!data_stream(st))
				continue;
			fg->logical += st->size;
			for (uint64_t e = 0; e < st->nextents; e++)
				fg->data += st->ext[e].hole ? 0 : st->ext[e].len;
		}
		char sid[13];
		char hex[65];
		cli_print_id(hex, fg->id);
		snprintf(sid, sizeof(sid), "%.12s", hex);
		struct restore_ctx ctx = { .store = store, .snapshot = sid, .threads = b->threads, .phases = &ph };
		struct timing tm = { log, 0, &out->secs };
		rc = run_target(b, &ctx, m, fg, &tm);
	}
	for (int i = 0; i < RESTORE_PH_N; i++) {
		out->ns[i] = atomic_load(&ph.ns[i]);
		out->pbytes[i] = atomic_load(&ph.bytes[i]);
	}
	/* The ceiling: the same pack bytes, read plainly, as cold as the restore. */
	if (rc == 0)
		rc = cas_reader_open(store, &rd);
	if (rc == 0)
		rc = ceil_plan(rd, m, &pieces, &npieces, &fg->stored);
	if (rc == 0 && b->cold && cas_pack_drop_cache(store) < 0)
		rc = -EIO;
	if (rc == 0) {
		struct ceil_job j = { rd, pieces };
		struct par p = { .n = npieces, .batch = 1, .fn = ceil_one, .tls_new = ceil_tls_new, .tls_free = free,
				 .arg = &j };
		t0 = time_now_ns();
		rc = par_run(&p, b->threads, NULL, 0);
		out->ceil_read_s = (time_now_ns() - t0) / 1e9;
	}
	if (rc == 0 && b->to == TO_GPU)
		rc = ceil_h2d(b, fg->data, &out->ceil_h2d_s);
	free(pieces);
	cas_reader_close(rd);
	cas_manifest_free(m);
	cas_close(store);
	return rc;
}

/* ---- the GPU, set up once ---- */

static int gpu_open(struct bench *b)
{
	int rc = cudrv_load(&b->d);
	if (rc < 0)
		return rc;
	int count = 0;
	rc = cudrv_check(b->d, b->d->DeviceGetCount(&count), "counting GPUs (cuDeviceGetCount)");
	if (rc == 0 && count < 1)
		rc = crest_errx(-ENODEV, "the driver sees no GPU");
	if (rc == 0)
		rc = cudrv_check(b->d, b->d->DeviceGet(&b->dev, 0), "opening GPU 0 (cuDeviceGet)");
	if (rc == 0)
		rc = cudrv_check(b->d, b->d->DevicePrimaryCtxRetain(&b->ctx, b->dev), "opening a context");
	if (rc == 0)
		rc = cudrv_check(b->d, b->d->CtxSetCurrent(b->ctx), "making the context current");
	if (rc < 0)
		return rc;
	/* As restore_regions lays out libcrest's 1 GiB pool: two windows per
	 * thread, each up to 64 MiB, whole segments. */
	const unsigned threads = b->threads ? b->threads : par_cores();
	size_t win = GPU_STAGING / (2 * (size_t)threads);
	win = win > GPU_WINDOW ? GPU_WINDOW : win;
	win -= win % ENGINE_SEGMENT_BYTES;
	b->win = win < ENGINE_SEGMENT_BYTES ? ENGINE_SEGMENT_BYTES : win;
	b->npinned = 2 * threads;
	b->pinned = calloc(b->npinned, sizeof(*b->pinned));
	if (!b->pinned)
		return crest_errf(-ENOMEM, "allocating staging");
	for (unsigned i = 0; rc == 0 && i < b->npinned; i++) {
		void *p = NULL;
		rc = cudrv_check(b->d, b->d->MemHostAlloc(&p, b->win, CU_MEMHOSTALLOC_PORTABLE),
				 "allocating pinned staging (cuMemHostAlloc)");
		b->pinned[i] = p;
	}
	return rc;
}

static void gpu_close(struct bench *b)
{
	for (unsigned i = 0; b->pinned && i < b->npinned; i++)
		if (b->pinned[i])
			b->d->MemFreeHost(b->pinned[i]);
	free(b->pinned);
	if (b->ctx)
		b->d->DevicePrimaryCtxRelease(b->dev);
}

/* ---- figures ---- */

static int dbl_cmp(const void *a, const void *b)
{
	const double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

struct stat3 {
	double min, med, max;
};

static struct stat3 stat3_of(const double *v, unsigned n)
{
	double *s = malloc(n * sizeof(*s));
	struct stat3 r = { 0, 0, 0 };
	if (!s || !n) {
		free(s);
		return r;
	}
	memcpy(s, v, n * sizeof(*s));
	qsort(s, n, sizeof(*s), dbl_cmp);
	r.min = s[0];
	r.max = s[n - 1];
	r.med = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
	free(s);
	return r;
}

/* "KEY": {min, median, max}, after sep. */
static void json_stat3_sep(const char *sep, const char *key, struct stat3 s)
{
	printf("%s\"%s\": {\"min\": %.6g, \"median\": %.6g, \"max\": %.6g}", sep, key, s.min, s.med, s.max);
}

static void json_stat3(const char *key, struct stat3 s)
{
	json_stat3_sep(", ", key, s);
}

/* The ceiling's time for a run: reading the pack bytes and, for gpu, the
 * copies, which a restore overlaps: the slower of the two. */
static double ceil_secs(const struct run *r)
{
	return r->ceil_h2d_s > r->ceil_read_s ? r->ceil_h2d_s : r->ceil_read_s;
}

/* The figures the table prints as medians, printed the same way: the
 * plot's title repeats them, so the two cannot disagree. */
struct shown {
	char gbps[32], ceil[32], ratio[32];
};

static void print_figures(const struct bench *b, const struct figures *fg, const struct run *runs, unsigned n,
			  unsigned threads, struct shown *sh)
{
	memset(sh, 0, sizeof(*sh));
	double *gbps = calloc(n, sizeof(double)), *secs = calloc(n, sizeof(double));
	double *cgbps = calloc(n, sizeof(double)), *ratio = calloc(n, sizeof(double));
	double *man = calloc(n, sizeof(double)), *ph = calloc((size_t)n * RESTORE_PH_N, sizeof(double));
	if (!gbps || !secs || !cgbps || !ratio || !man || !ph)
		goto out;
	for (unsigned k = 0; k < n; k++) {
		const double total = runs[k].manifest_s + runs[k].secs;
		secs[k] = total;
		gbps[k] = total > 0 ? fg->logical / total / 1e9 : 0;
		const double cs = ceil_secs(&runs[k]);
		cgbps[k] = cs > 0 ? fg->logical / cs / 1e9 : 0;
		ratio[k] = total > 0 ? cs / total : 0;
		man[k] = runs[k].manifest_s;
		for (int i = 0; i < RESTORE_PH_N; i++)
			ph[(size_t)i * n + k] = runs[k].ns[i] / 1e9;
	}
	char hex[65];
	cli_print_id(hex, fg->id);
	const struct stat3 g = stat3_of(gbps, n), s = stat3_of(secs, n), cg = stat3_of(cgbps, n),
			   r = stat3_of(ratio, n), mf = stat3_of(man, n);
	snprintf(sh->gbps, sizeof(sh->gbps), "%.3f", g.med);
	snprintf(sh->ceil, sizeof(sh->ceil), "%.3f", cg.med);
	snprintf(sh->ratio, sizeof(sh->ratio), "%.2f", r.med);
	if (b->c->json) {
		printf("{\"snapshot\": \"%s\", \"kind\": ", hex);
		json_str(stdout, fg->kind);
		printf(", \"target\": \"%s\", \"cold\": %s, \"threads\": %u, \"repeat\": %u, "
		       "\"logical_bytes\": %llu, \"data_bytes\": %llu, \"pack_bytes\": %llu",
		       target_names[b->to], b->cold ? "true" : "false", threads, n, (unsigned long long)fg->logical,
		       (unsigned long long)fg->data, (unsigned long long)fg->stored);
		json_stat3("seconds", s);
		json_stat3("gbps", g);
		json_stat3("ceiling_gbps", cg);
		json_stat3("ratio", r);
		printf(", \"phases\": {");
		json_stat3_sep("", "manifest", mf);
		for (int i = 0; i < RESTORE_PH_N; i++)
			json_stat3(restore_phase_names[i], stat3_of(ph + (size_t)i * n, n));
		printf("}, \"runs\": [");
		for (unsigned k = 0; k < n; k++) {
			printf("%s{\"seconds\": %.6g, \"manifest_s\": %.6g, \"restore_s\": %.6g, \"gbps\": %.6g, "
			       "\"ceiling_read_s\": %.6g, \"ceiling_h2d_s\": %.6g, \"ceiling_gbps\": %.6g, \"ratio\": %.6g, "
			       "\"phase_thread_s\": {", k ? ", " : "", secs[k], runs[k].manifest_s, runs[k].secs,
			       gbps[k], runs[k].ceil_read_s, runs[k].ceil_h2d_s, cgbps[k], ratio[k]);
			for (int i = 0; i < RESTORE_PH_N; i++)
				printf("%s\"%s\": %.6g", i ? ", " : "", restore_phase_names[i], runs[k].ns[i] / 1e9);
			printf("}, \"phase_bytes\": {");
			for (int i = 0; i < RESTORE_PH_N; i++)
				printf("%s\"%s\": %llu", i ? ", " : "", restore_phase_names[i],
				       (unsigned long long)runs[k].pbytes[i]);
			printf("}}");
		}
		printf("]}\n");
		goto out;
	}
	char lb[32], pb[32];
	printf("bench restore %.12s (%s) to %s%s: %s logical, %s of packs, %u threads, %u runs\n", hex, fg->kind,
	       target_names[b->to], b->cold ? ", cold" : "", fmt_bytes(fg->logical, lb, sizeof(lb)),
	       fmt_bytes(fg->stored, pb, sizeof(pb)), threads, n);
	printf("  %-22s %10s %10s %10s\n", "", "min", "median", "max");
	printf("  %-22s %10.3f %10s %10.3f\n", "restore GB/s", g.min, sh->gbps, g.max);
	printf("  %-22s %10.4f %10.4f %10.4f\n", "seconds", s.min, s.med, s.max);
	printf("  %-22s %10.3f %10s %10.3f\n", b->to == TO_GPU ? "ceiling GB/s (read,H2D)" : "ceiling GB/s (read)",
	       cg.min, sh->ceil, cg.max);
	printf("  %-22s %10.2f %10s %10.2f\n", "ratio to ceiling", r.min, sh->ratio, r.max);
	printf("  time per phase, seconds (manifest: wall; the rest: summed over threads)\n");
	printf("  %-22s %10.4f %10.4f %10.4f\n", "manifest", mf.min, mf.med, mf.max);
	for (int i = 0; i < RESTORE_PH_N; i++) {
		const struct stat3 x = stat3_of(ph + (size_t)i * n, n);
		if (x.max == 0 && !runs[n - 1].pbytes[i])
			continue;
		printf("  %-22s %10.4f %10.4f %10.4f\n", restore_phase_names[i], x.min, x.med, x.max);
	}
	if (b->to == TO_HOST || b->to == TO_GPU)
		printf("  (this path reads, checks and decompresses in one pass: all of it is 'read')\n");
	if (b->to == TO_FILES)
		printf("  (copy: writing the files; the ceiling reads only)\n");
out:
	free(gbps);
	free(secs);
	free(cgbps);
	free(ratio);
	free(man);
	free(ph);
}

/* ---- the picture ---- */

/* Runs gnuplot on script (its stdin). 0, or -ENOENT when gnuplot is not
 * installed (with a message saying so), or another failure. */
int cli_gnuplot(const char *script, const char *png)
{
	const char *path = getenv("PATH");
	char buf[4096];
	bool found = false;
	for (const char *p = path ? path : "/usr/bin:/bin"; !found && *p;) {
		const char *e = strchr(p, ':');
		const size_t n = e ? (size_t)(e - p) : strlen(p);
		snprintf(buf, sizeof(buf), "%.*s/gnuplot", (int)n, p);
		found = n && access(buf, X_OK) == 0;
		p += n + (e != NULL);
	}
	if (!found)
		return crest_errx(-ENOENT, "cannot draw %s: gnuplot is not installed (Debian: apt-get install "
				  "gnuplot-nox)", png);
	FILE *f = popen("gnuplot", "w");
	if (!f)
		return crest_errf(-errno, "cannot run gnuplot");
	fputs(script, f);
	const int st = pclose(f);
	if (st != 0)
		return crest_errx(-EIO, "gnuplot failed drawing %s (exit status %d)", png, st);
	return 0;
}

/* gnuplot takes a file name in single quotes: refuse names it would read
 * otherwise. */
static int plot_name_ok(const char *png)
{
	if (strchr(png, '\'') || strchr(png, '\n'))
		return crest_errx(-EINVAL, "%s: a plot's file name may not hold a quote or a newline", png);
	return 0;
}
int cli_plot_name_ok(const char *png)
{
	return plot_name_ok(png);
}

/* The last run over time, two panels: above, throughput (the bytes the
 * target received, the pack bytes read) against the ceiling; below, how
 * many threads were busy in each phase, which says where the time went.
 * Each addition to a phase (a chunk, or a whole window of the region path)
 * is spread evenly over the time it took, in PLOT_BINS bins. */
#define PLOT_BINS 60
static int draw_restore(const struct bench *b, const struct figures *fg, const struct evlog *log,
			const struct run *last, const struct shown *sh)
{
	/* What the target received: the last phase that moved bytes. */
	const int out = b->to == TO_GPU ? RESTORE_PH_DEVICE : b->to == TO_HOST ? RESTORE_PH_READ : RESTORE_PH_COPY;
	double *bytes = calloc((size_t)PLOT_BINS * RESTORE_PH_N, sizeof(double));
	double *busy = calloc((size_t)PLOT_BINS * RESTORE_PH_N, sizeof(double));
	if (!bytes || !busy) {
		free(bytes);
		free(busy);
		return crest_errf(-ENOMEM, "drawing %s", b->plot);
	}
	const double span = log->t_end ? (double)log->t_end : 1, bin = span / PLOT_BINS;
	bool used[RESTORE_PH_N] = { false };
	for (size_t k = 0; k < log->n; k++) {
		const struct event *e = &log->v[k];
		const double end = (double)e->end, start = e->ns < e->end ? (double)(e->end - e->ns) : 0;
		used[e->phase] |= e->ns > 0;
		for (size_t i = (size_t)(start / bin); i < PLOT_BINS && i * bin < end; i++) {
			const double lo = i * bin > start ? i * bin : start;
			const double hi = (i + 1) * bin < end ? (i + 1) * bin : end;
			const double part = end > start ? (hi - lo) / (end - start) : 1;
			if (part <= 0)
				continue;
			bytes[(size_t)e->phase * PLOT_BINS + i] += e->bytes * part;
			busy[(size_t)e->phase * PLOT_BINS + i] += hi - lo;
		}
	}
	/* The throughput (bytes per ns: GB/s) and busy threads per bin, and
	 * the ranges that hold them. */
	const unsigned threads = b->threads ? b->threads : par_cores();
	const double cs = ceil_secs(last), ceil = cs > 0 ? fg->logical / cs / 1e9 : 0;
	double data_top = 0, data_low = 0, busy_top = 0;
	for (size_t i = 0; i < PLOT_BINS; i++) {
		const double got = bytes[(size_t)out * PLOT_BINS + i] / bin;
		const double rd = bytes[(size_t)RESTORE_PH_READ * PLOT_BINS + i] / bin;
		data_top = got > data_top ? got : data_top;
		data_top = rd > data_top ? rd : data_top;
		if (got > 0 && (!data_low || got < data_low))
			data_low = got;
		if (out != RESTORE_PH_READ && rd > 0 && (!data_low || rd < data_low))
			data_low = rd;
		for (int p = 0; p < RESTORE_PH_N; p++)
			if (used[p] && busy[(size_t)p * PLOT_BINS + i] / bin > busy_top)
				busy_top = busy[(size_t)p * PLOT_BINS + i] / bin;
	}
	/* A restore below half its ceiling would leave the upper half of a
	 * linear axis empty but for the ceiling's line: then the axis is
	 * logarithmic, from the lowest point drawn to the highest (a bin that
	 * received nothing has no place on it: it is left out, not drawn
	 * below the axis). */
	const double top = ceil > data_top ? ceil : data_top, ytop = top > 0 ? top * 1.08 : 1;
	const bool logy = data_top > 0 && data_top < ytop / 2;
	const double btop = busy_top > threads ? busy_top : threads;
	/* CREST_PLOT_SCRIPT=PATH keeps what gnuplot was given: the script at
	 * PATH, its data at PATH.dat (tests/store/bench_plot.sh reads them). */
	const char *keep = getenv("CREST_PLOT_SCRIPT");
	char dat[4096];
	FILE *f = NULL;
	int fd = -1;
	if (keep && *keep) {
		snprintf(dat, sizeof(dat), "%s.dat", keep);
		f = strchr(dat, '\'') ? NULL : fopen(dat, "we");
	} else {
		snprintf(dat, sizeof(dat), "/tmp/crest-plot-XXXXXX");
		fd = mkstemp(dat);
		f = fd >= 0 ? fdopen(fd, "w") : NULL;
	}
	if (!f) {
		const int e = errno ? errno : EINVAL;
		if (fd >= 0) {
			close(fd);
			unlink(dat);
		}
		free(bytes);
		free(busy);
		return crest_errf(-e, "cannot write the plot's data %s", dat);
	}
	for (size_t i = 0; i < PLOT_BINS; i++) {
		const double got = bytes[(size_t)out * PLOT_BINS + i] / bin;
		const double rd = bytes[(size_t)RESTORE_PH_READ * PLOT_BINS + i] / bin;
		fprintf(f, "%.5f", (i + 0.5) * bin / 1e9);
		/* On a log axis a bin that got nothing is left out (NaN). */
		for (int k = 0; k < 2; k++) {
			const double v = k ? rd : got;
			if (logy && !(v > 0))
				fprintf(f, " NaN");
			else
				fprintf(f, " %.6g", v);
		}
		for (int p = 0; p < RESTORE_PH_N; p++)
			fprintf(f, " %.6g", busy[(size_t)p * PLOT_BINS + i] / bin);
		fprintf(f, "\n");
	}
	fclose(f);
	free(bytes);
	free(busy);
	char hex[65], lb[32], when[32];
	cli_print_id(hex, fg->id);
	const time_t now = time(NULL);
	struct tm tm;
	gmtime_r(&now, &tm);
	strftime(when, sizeof(when), "%Y-%m-%d %H:%M UTC", &tm);
	char *script = NULL;
	size_t len = 0;
	FILE *s = open_memstream(&script, &len);
	if (!s) {
		if (!keep)
			unlink(dat);
		return crest_errf(-ENOMEM, "writing the plot's script");
	}
	const char *git = cli_version_git();
	/* The title: the table's medians, as printed; under it, which run this
	 * is, of what, where to, by which crest, when. */
	fprintf(s, "set terminal pngcairo size 1100,840 font 'sans,11'\nset output '%s'\n", b->plot);
	fprintf(s, "set multiplot layout 2,1 title \"crest bench restore %.12s to %s: %s GB/s, %s of the ceiling "
		"(%s GB/s), medians of %u run%s%s\\n%s (%s, %s), --to %s%s, %u threads; drawn: the last run and its "
		"ceiling\\n%s, crest %s%s%s%s\"\n", hex, target_names[b->to], sh->gbps, sh->ratio, sh->ceil, b->repeat,
		b->repeat == 1 ? "" : "s", log->lost ? " (drawing incomplete: out of memory)" : "", b->name, fg->kind,
		fmt_bytes(fg->logical, lb, sizeof(lb)), target_names[b->to], b->cold ? ", cold" : "", threads, when,
		cli_version(), git[0] ? " (git " : "", git, git[0] ? ")" : "");
	/* Both panels: the same time axis, the same margins. */
	fprintf(s, "set grid\nset key outside right top\nset lmargin 10\nset rmargin 26\n");
	fprintf(s, "set xrange [0:%.5f]\n", span / 1e9);
	if (logy)
		fprintf(s, "set ylabel 'GB/s (log scale)'\nset logscale y\nset yrange [%.6g:%.6g]\n", data_low / 1.25,
			top * 1.25);
	else
		fprintf(s, "set ylabel 'GB/s'\nset yrange [0:%.6g]\n", ytop);
	fprintf(s, "plot '%s' using 1:2 with lines lw 3 lc rgb '#d62728' title 'into %s'", dat, target_names[b->to]);
	if (out != RESTORE_PH_READ)
		fprintf(s, ", '' using 1:3 with lines lw 1.5 lc rgb '#1f77b4' title 'read (pack bytes)'");
	if (ceil > 0)
		fprintf(s, ", %.6g with lines dt 2 lw 1.5 lc rgb 'gray30' title 'ceiling%s: %.3f'",
			ceil, b->to == TO_GPU ? " (H2D)" : "", ceil);
	fprintf(s, "\nunset logscale y\nset xlabel 'seconds since the restore started'\n"
		"set xrange [0:%.5f]\nset ylabel 'threads busy (of %u)'\nset yrange [0:%.6g]\nplot", span / 1e9,
		threads, btop * 1.05);
	static const char *const colors[RESTORE_PH_N] = { "#7f7f7f", "#1f77b4", "#2ca02c", "#ff7f0e", "#d62728",
							  "#9467bd" };
	bool any = false;
	for (int i = 0; i < RESTORE_PH_N; i++) {
		if (!used[i])
			continue;
		fprintf(s, "%s '%s' using 1:%d with lines lw 2 lc rgb '%s' title '%s%s'", any ? "," : "", dat, i + 4,
			colors[i], restore_phase_names[i],
			i == RESTORE_PH_READ && (b->to == TO_HOST || b->to == TO_GPU) ? " (+check, decompress)" :
			i == RESTORE_PH_DEVICE ? " (waits)" : "");
		any = true;
	}
	if (!any)
		fprintf(s, " 0 with lines title 'no phase timed'");
	fprintf(s, "\nunset multiplot\n");
	fclose(s);
	int rc = cli_gnuplot(script, b->plot);
	if (keep && *keep) {
		FILE *k = fopen(keep, "we");
		if (!k || fputs(script, k) < 0)
			rc = rc < 0 ? rc : crest_errf(-errno, "cannot keep the plot's script in %s", keep);
		if (k)
			fclose(k);
	} else {
		unlink(dat);
	}
	free(script);
	return rc;
}

/* ---- crest bench restore ---- */

static int parse_uint(const char *s, unsigned lo, unsigned hi, unsigned *out)
{
	uint64_t v;
	if (cli_parse_uint(s, lo, hi, &v) < 0)
		return -1;
	*out = (unsigned)v;
	return 0;
}

static int bench_restore(struct cli *c, int argc, char **argv)
{
	struct bench b = { .c = c, .to = TO_NULL, .repeat = 3, .threads = c->workers };
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const bool more = i + 1 < argc;
		if (!strcmp(a, "--to") && more) {
			const char *t = argv[++i];
			unsigned k = 0;
			while (k < 4 && strcmp(t, target_names[k]))
				k++;
			if (k == 4)
				return cli_usage(c, "bench", "restore --to %s: null, files, host or gpu", t);
			b.to = (enum target)k;
		} else if (!strcmp(a, "--cold")) {
			b.cold = true;
		} else if (!strcmp(a, "--keep")) {
			b.keep = true;
		} else if (!strcmp(a, "--threads") && more) {
			if (parse_uint(argv[++i], 1, 1024, &b.threads) < 0)
				return cli_usage(c, "bench", "restore --threads %s: 1 to 1024", argv[i]);
		} else if (!strcmp(a, "--repeat") && more) {
			if (parse_uint(argv[++i], 1, 1000, &b.repeat) < 0)
				return cli_usage(c, "bench", "restore --repeat %s: 1 to 1000", argv[i]);
		} else if (!strcmp(a, "--dir") && more) {
			b.dir = argv[++i];
		} else if (!strcmp(a, "--plot") && more) {
			b.plot = argv[++i];
		} else if (a[0] == '-' && a[1]) {
			const bool valued = !strcmp(a, "--to") || !strcmp(a, "--threads") || !strcmp(a, "--repeat") ||
					    !strcmp(a, "--dir") || !strcmp(a, "--plot");
			return cli_usage(c, "bench", valued ? "restore: %s needs a value" :
					 "restore: %s is not one of its options", a);
		} else if (b.name) {
			return cli_usage(c, "bench", "restore wants one SNAPSHOT, no more: %s", a);
		} else
			b.name = a;
	}
	if (!b.name)
		return cli_usage(c, "bench", "restore wants a SNAPSHOT");
	if (b.keep && b.to != TO_FILES)
		return cli_usage(c, "bench", "restore --keep can only go with --to files: nothing else is kept");
	if (b.plot && plot_name_ok(b.plot) < 0)
		return cli_usage_fail(c, -EINVAL);
	const unsigned threads = b.threads ? b.threads : par_cores();
	if (b.to == TO_GPU && gpu_open(&b) < 0) {
		/* Not a failure of the bench: this machine has nothing to measure. */
		char why[1024];
		snprintf(why, sizeof(why), "%s", crest_errmsg());
		if (b.d)
			gpu_close(&b);
		if (c->json) {
			printf("{\"target\": \"gpu\", \"skipped\": ");
			json_str(stdout, why);
			printf("}\n");
		}
		fprintf(stderr, "crest: bench restore --to gpu: skipped: %s\n", why);
		return 0;
	}
	struct run *runs = calloc(b.repeat, sizeof(*runs));
	struct figures fg = { 0 };
	struct shown shown;
	memset(&shown, 0, sizeof(shown));
	struct evlog log = { .lock = PTHREAD_MUTEX_INITIALIZER };
	int rc = runs ? 0 : crest_errf(-ENOMEM, "benchmarking");
	for (unsigned k = 0; rc == 0 && k < b.repeat; k++)
		rc = one_run(&b, &fg, &runs[k], b.plot && k + 1 == b.repeat ? &log : NULL);
	if (rc == 0)
		print_figures(&b, &fg, runs, b.repeat, threads, &shown);
	if (rc == 0 && b.plot) {
		fflush(stdout);
		rc = draw_restore(&b, &fg, &log, &runs[b.repeat - 1], &shown);
		if (rc == 0 && !c->json)
			printf("plot: %s\n", b.plot);
	}
	if (b.to == TO_GPU)
		gpu_close(&b);
	free(log.v);
	free(runs);
	return rc < 0 ? cli_fail(c, rc) : 0;
}

/* ---- crest bench checkpoint ---- */

/* xorshift64*: fast incompressible bytes (a model's weights do not
 * compress either); a fixed seed, so runs compare. */
static void fill_random(uint8_t *p, size_t n, uint64_t *state)
{
	uint64_t x = *state;
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		x ^= x >> 12;
		x ^= x << 25;
		x ^= x >> 27;
		const uint64_t v = x * 0x2545F4914F6CDD1Dull;
		memcpy(p + i, &v, 8);
	}
	for (; i < n; i++)
		p[i] = (uint8_t)(x >> (8 * (i % 8)));
	*state = x;
}

static size_t ckpt_slice(size_t pool)   /* as libcrest cuts its pool */
{
	size_t sl = pool / 16;
	sl = sl > (64u << 20) ? 64u << 20 : sl;
	sl -= sl % ENGINE_SEGMENT_BYTES;
	return sl < ENGINE_SEGMENT_BYTES ? ENGINE_SEGMENT_BYTES : sl;
}

struct ckpt_fig {
	double stall_s, wait_s, ingest_s;
	unsigned rounds;
	uint64_t logical, new_bytes, stored;
};

static int bench_checkpoint(struct cli *c, int argc, char **argv)
{
	uint64_t size = 256ull << 20, staging = 1ull << 30;
	unsigned nreg = 4, repeat = 5, change = 10;
	const char *dir = NULL;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const bool more = i + 1 < argc;
		int bad = 0;
		if (!strcmp(a, "--size") && more)
			bad = cli_parse_size(argv[++i], &size) < 0 || !size || size > (1ull << 40);
		else if (!strcmp(a, "--staging") && more)
			bad = cli_parse_size(argv[++i], &staging) < 0 || staging < 2 * ENGINE_SEGMENT_BYTES;
		else if (!strcmp(a, "--regions") && more)
			bad = parse_uint(argv[++i], 1, 4096, &nreg) < 0;
		else if (!strcmp(a, "--repeat") && more)
			bad = parse_uint(argv[++i], 1, 1000, &repeat) < 0;
		else if (!strcmp(a, "--change") && more)
			bad = parse_uint(argv[++i], 0, 100, &change) < 0;
		else if (!strcmp(a, "--dir") && more)
			dir = argv[++i];
		else if (a[0] == '-' && a[1] && (more || (strcmp(a, "--size") && strcmp(a, "--staging") &&
			 strcmp(a, "--regions") && strcmp(a, "--repeat") && strcmp(a, "--change") && strcmp(a, "--dir"))))
			return cli_usage(c, "bench", "checkpoint: %s is not one of its options", a);
		else if (a[0] == '-' && a[1])
			return cli_usage(c, "bench", "checkpoint: %s needs a value", a);
		else
			return cli_usage(c, "bench", "checkpoint takes no operands: %s", a);
		if (bad)
			return cli_usage(c, "bench", "checkpoint: %s %s: out of range", a, argv[i]);
	}
	/* --store given: c->store points into argv, not at the default (which
	 * $CREST_STORE may set: a real store is used only when named here). */
	const bool tmp_store = c->store == cas_default_path();
	char tmp[4096] = "", sdir[4200];
	const char *store_dir = c->store;
	if (tmp_store) {
		const char *base = dir ? dir : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
		snprintf(tmp, sizeof(tmp), "%s/crest-bench-XXXXXX", base);
		if (!mkdtemp(tmp))
			return cli_fail(c, crest_errf(-errno, "cannot make a temporary directory in %s", base));
		snprintf(sdir, sizeof(sdir), "%s/store", tmp);
		store_dir = sdir;
	}
	const size_t per = (size_t)(size / nreg);
	uint8_t **mem = calloc(nreg, sizeof(*mem));
	char (*names)[32] = calloc(nreg, 32);
	struct capture_region *regs = calloc(nreg, sizeof(*regs));
	const char **dnames = calloc(nreg, sizeof(*dnames));
	struct ckpt_fig *fig = calloc(repeat, sizeof(*fig));
	int rc = mem && names && regs && dnames && fig ? 0 : crest_errf(-ENOMEM, "benchmarking checkpoints");
	uint64_t rs = 0x9E3779B97F4A7C15ull;
	for (unsigned i = 0; rc == 0 && i < nreg; i++) {
		if (!(mem[i] = malloc(per ? per : 1))) {
			rc = crest_errf(-ENOMEM, "allocating %zu bytes for region %u", per, i);
			break;
		}
		fill_random(mem[i], per, &rs);
		snprintf(names[i], 32, "region%u", i);
		regs[i] = (struct capture_region){ .name = names[i], .ptr = mem[i], .size = per };
		dnames[i] = names[i];
	}
	struct cas_store *store = NULL;
	struct engine *eng = NULL;
	struct pool *pool = NULL;
	struct capture_copier *cp = NULL;
	struct cli wc = *c;
	wc.store = store_dir;
	wc.init = wc.init || tmp_store;
	if (rc == 0)
		rc = cli_writer_open(&wc, NULL, &store, &eng);
	if (rc == 0)
		rc = pool_open(NULL, staging, ckpt_slice(staging), &pool);
	if (rc == 0)
		rc = capture_copier_open(NULL, pool, 4, false, &cp);
	uint8_t parent[32];
	bool has_parent = false;
	struct cas_manifest *pm = NULL;
	/* A store of the user's: the branch goes on from its head. */
	if (rc == 0 && !tmp_store && cas_branch_head(store, "crest-bench", parent) == 0) {
		has_parent = true;
		if (cas_manifest_load(store, parent, &pm) < 0)
			pm = NULL;   /* the parent still, without hints */
	}
	crest_errset_str("");
	for (unsigned k = 0; rc == 0 && k < repeat; k++) {
		/* A training step between checkpoints: change% of each region
		 * rewritten, in 1 MiB blocks at random places. Not timed. */
		for (unsigned i = 0; k && i < nreg; i++) {
			const size_t blk = 1u << 20, nblk = (per + blk - 1) / blk;
			for (size_t b = 0; b < (nblk * change + 99) / 100; b++) {
				const size_t at = (size_t)((rs = rs * 6364136223846793005ull + 1442695040888963407ull) >> 33) %
						  nblk * blk;
				fill_random(mem[i] + at, per - at < blk ? per - at : blk, &rs);
			}
		}
		struct engine_snap *snap = NULL;
		struct capture_stats cs = { 0 };
		const uint64_t t0 = time_now_ns();
		rc = engine_snapshot_begin(eng, "library", &snap);
		if (rc == 0 && cas_manifest_set_branch(engine_snapshot_manifest(snap), "crest-bench") < 0)
			rc = crest_errf(-ENOMEM, "benchmarking checkpoints");
		if (rc == 0)
			rc = capture_dirs(snap, dnames, nreg);
		if (rc == 0 && has_parent) {
			engine_snapshot_set_parent(snap, parent, pm);   /* takes pm */
			pm = NULL;
		}
		if (rc == 0)
			engine_snapshot_expect(snap, (uint64_t)per * nreg);
		if (rc == 0)
			rc = capture_regions(cp, snap, regs, nreg, 1, &cs);
		if (rc == 0)
			rc = engine_snapshot_seal(snap);
		const uint64_t t1 = time_now_ns();
		if (rc < 0) {
			if (snap)
				engine_snapshot_abort(snap);
			break;
		}
		struct engine_result er;
		rc = engine_snapshot_wait(snap, &er);
		if (rc < 0)
			break;
		fig[k] = (struct ckpt_fig){ (t1 - t0) / 1e9, cs.wait_ns / 1e9, er.ingest_ns / 1e9, cs.rounds,
					    er.logical_bytes, er.new_bytes, er.stored_bytes };
		/* The next one's parent, with its chunk lists as hints, as
		 * libcrest's crest_wait sets it. */
		memcpy(parent, er.id, 32);
		has_parent = true;
		if (cas_manifest_load(store, er.id, &pm) < 0)
			pm = NULL;
		crest_errset_str("");
	}
	cas_manifest_free(pm);
	if (eng)
		engine_close(eng);
	capture_copier_close(cp);
	pool_close(pool);
	cas_close(store);
	for (unsigned i = 0; mem && i < nreg; i++)
		free(mem[i]);
	if (rc == 0) {
		/* The first checkpoint stores everything; the others show the
		 * steady state: their min/median/max. */
		const unsigned from = repeat > 1 ? 1 : 0, n = repeat - from;
		double *st = calloc(n, sizeof(double)), *in = calloc(n, sizeof(double));
		for (unsigned k = 0; st && in && k < n; k++) {
			st[k] = fig[from + k].stall_s;
			in[k] = fig[from + k].ingest_s;
		}
		const struct stat3 s3 = stat3_of(st, n), i3 = stat3_of(in, n);
		if (c->json) {
			printf("{\"size\": %llu, \"regions\": %u, \"change_pct\": %u, \"repeat\": %u, \"staging\": %llu, "
			       "\"store\": ", (unsigned long long)per * nreg, nreg, change, repeat,
			       (unsigned long long)staging);
			if (tmp_store)
				printf("null");
			else
				json_str(stdout, store_dir);
			json_stat3("stall_s", s3);
			json_stat3("ingest_s", i3);
			printf(", \"checkpoints\": [");
			for (unsigned k = 0; k < repeat; k++)
				printf("%s{\"stall_s\": %.6g, \"staging_wait_s\": %.6g, \"rounds\": %u, \"ingest_s\": %.6g, "
				       "\"logical_bytes\": %llu, \"new_bytes\": %llu, \"stored_bytes\": %llu}", k ? ", " : "",
				       fig[k].stall_s, fig[k].wait_s, fig[k].rounds, fig[k].ingest_s,
				       (unsigned long long)fig[k].logical, (unsigned long long)fig[k].new_bytes,
				       (unsigned long long)fig[k].stored);
			printf("]}\n");
		} else {
			char b1[32], b2[32], b3[32];
			printf("bench checkpoint: %u host regions, %s in all, %u%% changed between checkpoints, "
			       "%s staging\n", nreg, fmt_bytes((uint64_t)per * nreg, b1, sizeof(b1)), change,
			       fmt_bytes(staging, b2, sizeof(b2)));
			printf("  %-4s %10s %10s %10s %12s %12s\n", "#", "stall s", "GB/s", "ingest s", "new", "stored");
			for (unsigned k = 0; k < repeat; k++)
				printf("  %-4u %10.4f %10.2f %10.3f %12s %12s\n", k + 1, fig[k].stall_s,
				       fig[k].stall_s > 0 ? fig[k].logical / fig[k].stall_s / 1e9 : 0, fig[k].ingest_s,
				       fmt_bytes(fig[k].new_bytes, b1, sizeof(b1)), fmt_bytes(fig[k].stored, b3, sizeof(b3)));
			printf("  %s: stall %.4f / %.4f / %.4f s, ingest %.3f / %.3f / %.3f s (min / median / max)\n",
			       from ? "checkpoints 2.." : "checkpoint", s3.min, s3.med, s3.max, i3.min, i3.med, i3.max);
		}
		free(st);
		free(in);
	}
	if (tmp_store) {
		int rrc = rm_tree(tmp);
		if (rc == 0)
			rc = rrc;
	}
	free(mem);
	free(names);
	free(regs);
	free(dnames);
	free(fig);
	return rc < 0 ? cli_fail(c, rc) : 0;
}

int cmd_bench(struct cli *c, int argc, char **argv)
{
	if (argc >= 2 && !strcmp(argv[1], "restore"))
		return bench_restore(c, argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "checkpoint"))
		return bench_checkpoint(c, argc - 1, argv + 1);
	return cli_usage(c, "bench", argc < 2 ? "restore or checkpoint?" : "%s: restore or checkpoint",
			 argc < 2 ? "" : argv[1]);
}
