/*
 * gc.c - retention, mark and sweep, pack rewrite; see gc.h for the order
 * of the steps and what a kill at each leaves.
 */
#include "cas/gc.h"

#include "cas/cas_int.h"
#include "cas/history.h"
#include "cas/jobsnap.h"
#include "util/crc32c.h"
#include "util/err.h"
#include "util/idset.h"
#include "util/par.h"
#include "util/sha256.h"

#include <dirent.h>
#include <pthread.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define HOUR_NS (3600ull * 1000000000ull)
#define DAY_NS (24 * HOUR_NS)
#define BATCH_OPS 25000               /* deletions per index batch */
#define GROUP_BYTES (512ull << 20)    /* bytes moved per rewrite commit */
#define WBUF_BYTES (8u << 20)         /* records written per cas_pack_write */
#define RUN_IDS (1u << 20)
#define MARK_THREADS 0                /* par_run's default: one per core */            /* live ids sorted in memory at once: 32 MiB */

/* CREST_GC_TIMES=1 prints each step's wall time to stderr: where gc's
 * time goes, for benchmarks. */
static void gc_time(const char *what)
{
	static int on = -1;
	static struct timespec last;
	if (on < 0)
		on = getenv("CREST_GC_TIMES") != NULL;
	if (!on)
		return;
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	if (what)
		fprintf(stderr, "gc: %-24s %8.3f s\n", what,
			(double)(t.tv_sec - last.tv_sec) + (double)(t.tv_nsec - last.tv_nsec) / 1e9);
	last = t;
}

int cas_gc_policy_check(const struct cas_gc_policy *p)
{
	if (!p->keep_last && !p->keep_hourly && !p->keep_daily && !p->keep_weekly && !p->keep_monthly &&
	    !p->keep_yearly && !p->keep_within_ns && !p->keep_tagged && !p->nkeep_tags)
		return crest_errx(-EINVAL, "gc needs a rule for what to keep (--keep-last, --keep-hourly, "
				  "--keep-daily, --keep-weekly, --keep-monthly, --keep-yearly, --keep-within, "
				  "--keep-tagged or --keep-tag): without one it would delete "
				  "every snapshot but the branches' heads");
	if (p->rewrite_below < 0 || p->rewrite_below > 1)
		return crest_errx(-EINVAL, "gc: the rewrite threshold %.3f is not a fraction from 0 to 1",
				  p->rewrite_below);
	return 0;
}

void cas_gc_result_free(struct cas_gc_result *r)
{
	free(r->kept);
	free(r->expired);
	free(r->kept_what);
	free(r->expired_what);
	r->kept = r->expired = NULL;
	r->kept_what = r->expired_what = NULL;
}

/* ---- retention ---- */

struct snap {
	const uint8_t *id;
	uint64_t t, bytes;
	const char *branch;
	char **tags;
	size_t ntags;
	bool head, keep;
	uint8_t what;              /* enum cas_gc_what */
	struct cas_jobsnap *job;   /* a job snapshot's members */
};

/* Whether the retention rules count s (gc.h): rank snapshots are kept by
 * their job snapshots, or by age. */
static bool snap_counted(const struct snap *s)
{
	return s->what == CAS_GC_PLAIN || s->what == CAS_GC_JOB;
}

static int snap_cmp(const void *a, const void *b)
{
	const struct snap *x = a, *y = b;
	if (snap_counted(x) != snap_counted(y))
		return snap_counted(x) ? -1 : 1;   /* the counted ones first, by branch */
	const int c = strcmp(x->branch, y->branch);
	if (c)
		return c;
	if (x->t != y->t)
		return x->t > y->t ? -1 : 1;   /* newest first */
	return memcmp(y->id, x->id, 32);
}

/* The buckets of restic's --keep-hourly ... --keep-yearly, in UTC. A week
 * runs Monday to Sunday (ISO 8601's weeks: 1970-01-01 was a Thursday, so
 * day d is in week (d + 3) / 7); a month and a year are the calendar's. */
enum { B_HOUR, B_DAY, B_WEEK, B_MONTH, B_YEAR, B_N };

static uint64_t bucket_of(int kind, uint64_t t_ns)
{
	const uint64_t day = t_ns / DAY_NS;
	switch (kind) {
	case B_HOUR: return t_ns / HOUR_NS;
	case B_DAY: return day;
	case B_WEEK: return (day + 3) / 7;
	default: break;
	}
	const time_t secs = (time_t)(t_ns / 1000000000ull);
	struct tm tm;
	if (!gmtime_r(&secs, &tm))
		return day;   /* out of gmtime's range: no calendar, a day is a bucket */
	const uint64_t year = (uint64_t)((int64_t)tm.tm_year + 1900);
	return kind == B_YEAR ? year : year * 12 + (uint64_t)tm.tm_mon;
}

void cas_gc_keep(const struct cas_gc_policy *p, struct cas_gc_snap *v, size_t n)
{
	const unsigned want[B_N] = { p->keep_hourly, p->keep_daily, p->keep_weekly, p->keep_monthly,
				     p->keep_yearly };
	uint64_t last[B_N] = { 0 };   /* read only where seen[b]; the optimizer cannot tell */
	unsigned got[B_N] = { 0 };
	bool seen[B_N] = { false };
	/* restic's walk: newest first, a snapshot is kept for a bucket rule
	 * when it is the first (newest) seen in its bucket, until N buckets
	 * have had one. Buckets with no snapshot never count. */
	for (size_t i = 0; i < n; i++) {
		bool k = i == 0 || v[i].head || i < p->keep_last;   /* the head, always */
		for (int b = 0; b < B_N; b++) {
			if (got[b] >= want[b])
				continue;
			const uint64_t bk = bucket_of(b, v[i].time_ns);
			if (seen[b] && bk == last[b])
				continue;
			k = true;
			last[b] = bk;
			seen[b] = true;
			got[b]++;
		}
		if (p->keep_within_ns && v[i].time_ns + p->keep_within_ns >= v[0].time_ns)
			k = true;
		if (p->keep_tagged && v[i].ntags)
			k = true;
		for (size_t t = 0; !k && t < v[i].ntags; t++)
			for (size_t w = 0; !k && w < p->nkeep_tags; w++)
				k = !strcmp(v[i].tags[t], p->keep_tags[w]);
		v[i].keep = k;
	}
}

/* One branch's snapshots, newest first: marks the kept ones. */
static int keep_branch(struct snap *v, size_t n, const struct cas_gc_policy *p)
{
	struct cas_gc_snap *g = calloc(n ? n : 1, sizeof(*g));
	if (!g)
		return crest_errf(-ENOMEM, "gc");
	for (size_t i = 0; i < n; i++) {
		g[i] = (struct cas_gc_snap){ .time_ns = v[i].t, .tags = (const char *const *)v[i].tags,
					     .ntags = v[i].ntags, .head = v[i].head };
		memcpy(g[i].id, v[i].id, 32);
	}
	cas_gc_keep(p, g, n);
	for (size_t i = 0; i < n; i++)
		v[i].keep = g[i].keep;
	free(g);
	return 0;
}

/* ---- the mark, in bounded memory ----
 *
 * The live chunk ids go into sorted runs of at most RUN_IDS: each full run
 * is written to STORE/gc/run-N, the last stays in memory. The chunk index
 * is then read in key order (SHA-256 order) beside a merge of the runs, so
 * a chunk is live when the merge holds its id: memory is one run and a
 * read buffer per spilled run, however many chunks the store holds.
 * (Pieces are one per thousands of extents: they stay in memory.)
 */

struct runs {
	char dir[4096];
	unsigned nfiles;
	struct idset mem;
	size_t cap;
	/* Open addressing over mem's ids (index + 1; 0: empty), 2 slots per
	 * id: successive snapshots name mostly the same chunks, and an id
	 * already in the run is not added again (measured: 6.5 M extents of
	 * 50 kept snapshots were 0.57 M distinct chunks). */
	uint32_t *slot;
	size_t nslot;
	int err;
};

/* STORE/gc for a run; for a dry run, a folder of its own under $TMPDIR
 * (made when a run spills): a dry run writes nothing in the store, and
 * may run beside a gc that holds the writer lock and uses STORE/gc. */
static void runs_dir(struct cas_store *s, bool dry, char *buf, size_t cap)
{
	const char *tmp = getenv("TMPDIR");
	if (dry)
		snprintf(buf, cap, "%s/crest-gc-dry.%d", tmp && *tmp ? tmp : "/tmp", (int)getpid());
	else
		snprintf(buf, cap, "%s/gc", cas_local_dir(s));
}

/* Removes the runs' folder and what a killed run left in it. */
static void runs_clear(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d)))
		if (!strncmp(e->d_name, "run-", 4)) {
			char path[4096 + 300];
			snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
			unlink(path);
		}
	closedir(d);
	rmdir(dir);
}

static int runs_spill(struct runs *r)
{
	idset_seal(&r->mem);
	if (!r->nfiles && mkdir(r->dir, 0700) < 0 && errno != EEXIST)
		return crest_errf(-errno, "gc: cannot create %s", r->dir);
	char path[4096 + 32];
	snprintf(path, sizeof(path), "%s/run-%u", r->dir, r->nfiles);
	const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return crest_errf(-errno, "gc: cannot write %s", path);
	const size_t len = r->mem.n * 32;
	size_t done = 0;
	while (done < len) {
		const ssize_t w = write(fd, (const uint8_t *)r->mem.v + done, len - done);
		if (w <= 0) {
			close(fd);
			return crest_errf(w < 0 ? -errno : -EIO, "gc: cannot write %s", path);
		}
		done += (size_t)w;
	}
	close(fd);
	r->nfiles++;
	r->mem.n = 0;
	memset(r->slot, 0, r->nslot * sizeof(*r->slot));
	return 0;
}

static int runs_add(struct runs *r, const uint8_t id[32])
{
	if (!r->slot) {
		r->nslot = 1024;
		while (r->nslot < 2 * r->cap)
			r->nslot *= 2;
		if (!(r->slot = calloc(r->nslot, sizeof(*r->slot))))
			return crest_errf(-ENOMEM, "gc: marking");
	}
	/* Ids are SHA-256: any 8 of their bytes hash well. */
	uint64_t h;
	memcpy(&h, id, 8);
	size_t i = (size_t)h & (r->nslot - 1);
	for (; r->slot[i]; i = (i + 1) & (r->nslot - 1))
		if (!memcmp(r->mem.v[r->slot[i] - 1], id, 32))
			return 0;
	if (r->mem.n == r->cap) {
		const int rc = runs_spill(r);   /* empties the table too */
		if (rc < 0)
			return rc;
		return runs_add(r, id);
	}
	if (idset_add(&r->mem, id) < 0)
		return crest_errf(-ENOMEM, "gc: marking");
	r->slot[i] = (uint32_t)r->mem.n;
	return 0;
}

/* A merge of the runs: ids in order, each once. */
struct run_reader {
	int fd;
	uint8_t buf[2048 * 32];
	size_t n, at;
	bool failed;   /* a read error: the merge cannot be trusted */
};

struct merge {
	struct run_reader *rd;
	unsigned nrd;
	const struct idset *mem;
	size_t mem_at;
	uint8_t cur[32];
	bool has;     /* cur is valid */
	int err;
};

static bool reader_peek(struct run_reader *r, const uint8_t **id)
{
	if (r->at == r->n) {
		const ssize_t got = read(r->fd, r->buf, sizeof(r->buf));
		if (got < 0 || got % 32)
			r->failed = true;
		if (got <= 0 || got % 32)
			return false;
		r->n = (size_t)got / 32;
		r->at = 0;
	}
	*id = r->buf + 32 * r->at;
	return r->n > 0;
}

/* Steps the merge to its next id, above the current one. */
static void merge_next(struct merge *m)
{
	const bool had = m->has;
	uint8_t prev[32];
	memcpy(prev, m->cur, 32);
	m->has = false;
	/* Drop every head not above the previous id, then take the least. */
	for (unsigned i = 0; i < m->nrd; i++) {
		const uint8_t *id;
		while (had && reader_peek(&m->rd[i], &id) && memcmp(id, prev, 32) <= 0)
			m->rd[i].at++;
	}
	while (had && m->mem_at < m->mem->n && memcmp(m->mem->v[m->mem_at], prev, 32) <= 0)
		m->mem_at++;
	for (unsigned i = 0; i < m->nrd; i++) {
		const uint8_t *id;
		if (reader_peek(&m->rd[i], &id) && (!m->has || memcmp(id, m->cur, 32) < 0)) {
			memcpy(m->cur, id, 32);
			m->has = true;
		}
	}
	if (m->mem_at < m->mem->n && (!m->has || memcmp(m->mem->v[m->mem_at], m->cur, 32) < 0)) {
		memcpy(m->cur, m->mem->v[m->mem_at], 32);
		m->has = true;
	}
}

static int merge_open(struct runs *r, struct merge *m)
{
	memset(m, 0, sizeof(*m));
	idset_seal(&r->mem);
	m->mem = &r->mem;
	m->rd = calloc(r->nfiles ? r->nfiles : 1, sizeof(*m->rd));
	if (!m->rd)
		return crest_errf(-ENOMEM, "gc: merging %u runs", r->nfiles);
	for (unsigned i = 0; i < r->nfiles; i++) {
		char path[4096 + 32];
		snprintf(path, sizeof(path), "%s/run-%u", r->dir, i);
		m->rd[i].fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		if (m->rd[i].fd < 0) {
			const int e = -errno;
			for (unsigned k = 0; k < i; k++)
				close(m->rd[k].fd);
			free(m->rd);
			m->rd = NULL;
			return crest_errf(e, "gc: cannot read %s", path);
		}
		m->nrd++;
	}
	merge_next(m);
	return 0;
}

static void merge_close(struct merge *m)
{
	for (unsigned i = 0; i < m->nrd; i++)
		close(m->rd[i].fd);
	free(m->rd);
}

/* Whether id is live: ids are asked in increasing order. A run that
 * could not be read sets m->err: the caller must stop before acting. */
static bool merge_has(struct merge *m, const uint8_t id[32])
{
	while (m->has && memcmp(m->cur, id, 32) < 0)
		merge_next(m);
	for (unsigned i = 0; i < m->nrd; i++)
		if (m->rd[i].failed)
			m->err = -EIO;
	return m->has && !memcmp(m->cur, id, 32);
}

/* The pieces marked so far: their ids (pieces->set, unsorted until the
 * mark ends) with an open-addressing table over them (index + 1; 0:
 * empty), at most half full. */
struct pieceset {
	struct idset set;
	uint32_t *slot;
	size_t nslot;
};

static int pieceset_grow(struct pieceset *p)
{
	const size_t n = p->nslot ? 2 * p->nslot : 1024;
	uint32_t *slot = calloc(n, sizeof(*slot));
	if (!slot)
		return -ENOMEM;
	for (size_t k = 0; k < p->set.n; k++) {
		uint64_t h;
		memcpy(&h, p->set.v[k], 8);
		size_t i = (size_t)h & (n - 1);
		while (slot[i])
			i = (i + 1) & (n - 1);
		slot[i] = (uint32_t)(k + 1);
	}
	free(p->slot);
	p->slot = slot;
	p->nslot = n;
	return 0;
}

/* 1 when id is new (and now added), 0 when it was there, or -ENOMEM. */
static int pieceset_add(struct pieceset *p, const uint8_t id[32])
{
	if (2 * (p->set.n + 1) > p->nslot && pieceset_grow(p) < 0)
		return -ENOMEM;
	uint64_t h;
	memcpy(&h, id, 8);
	size_t i = (size_t)h & (p->nslot - 1);
	for (; p->slot[i]; i = (i + 1) & (p->nslot - 1))
		if (!memcmp(p->set.v[p->slot[i] - 1], id, 32))
			return 0;
	if (idset_add(&p->set, id) < 0)
		return -ENOMEM;
	p->slot[i] = (uint32_t)p->set.n;
	return 1;
}

/* The new pieces of one manifest, fetched, checked against their SHA-256
 * and decoded in parallel, as cas_manifest_load does; each piece's chunks
 * are then marked under a lock, so that one thread marks while another
 * fetches and decodes. */
struct mark_job {
	struct cas_store *s;
	struct cas_manifest *m;
	const size_t *idx;           /* pieces to fetch: indices into m->pieces */
	const char *hex;             /* the snapshot, for messages */
	struct runs *chunks;
	struct idset *bases;         /* the delta pieces' bases, kept */
	pthread_mutex_t *lock;       /* over chunks and bases */
};

static int mark_extents(struct runs *chunks, const struct cas_extent *e, uint64_t n);

static int mark_fetch(struct par *p, void *tls, size_t i)
{
	(void)tls;
	const struct mark_job *j = p->arg;
	const struct cas_piece *pc = &j->m->pieces[j->idx[i]];
	int rc = cas_piece_load(j->s, j->m, j->idx[i], j->hex);
	if (rc < 0)
		return rc;
	/* A delta's chunks are its expansion's; its base stays as a record
	 * (a delta is nothing without it), but the base's own chunks that the
	 * delta replaced are not marked for it. */
	pthread_mutex_lock(j->lock);
	rc = mark_extents(j->chunks, j->m->streams[pc->stream].ext + pc->first, pc->n);
	if (rc == 0 && pc->delta && idset_add(j->bases, pc->base) < 0)
		rc = crest_errf(-ENOMEM, "gc: marking");
	pthread_mutex_unlock(j->lock);
	return rc;
}

static int mark_extents(struct runs *chunks, const struct cas_extent *e, uint64_t n)
{
	int rc = 0;
	for (uint64_t i = 0; rc == 0 && i < n; i++)
		if (!e[i].hole)
			rc = runs_add(chunks, e[i].sha);
	return rc;
}

/* Marks the chunks and pieces of one kept manifest, and adds what its
 * meta log record takes to *meta_bytes. A piece an earlier
 * manifest of this run named is not fetched again: a piece is named by
 * the SHA-256 of its encoding, so the same id is the same extents, whose
 * chunks are marked already (successive snapshots of a region share most
 * of their pieces). Every piece that is fetched is checked as
 * cas_manifest_load checks it, and the manifest itself against its id. */
static int mark_manifest(struct cas_store *s, const uint8_t id[32], struct runs *chunks, struct pieceset *pieces,
			 struct idset *bases, uint64_t *meta_bytes)
{
	char hex[65];
	hex_encode(id, 32, hex);
	size_t n;
	int rc;
	char *v = cas_db_get(s, 'm', id, 32, &n, &rc);
	if (rc == -ENOENT)
		return crest_errx(rc, "gc: snapshot %s is not in %s", hex, s->dir);
	if (!v)
		return rc;
	struct cas_manifest *m = NULL;
	rc = cas_manifest_check(s, id, v, n, &m);
	free(v);
	if (rc < 0)
		return rc;
	*meta_bytes += CAS_REC_HEADER + n;
	size_t *idx = calloc(m->npieces ? m->npieces : 1, sizeof(*idx));
	bool *pieced = calloc(m->nstreams ? m->nstreams : 1, sizeof(*pieced));
	size_t nidx = 0;
	if (!idx || !pieced)
		rc = crest_errf(-ENOMEM, "gc: marking");
	for (size_t i = 0; rc == 0 && i < m->npieces; i++) {
		pieced[m->pieces[i].stream] = true;
		const int added = pieceset_add(pieces, m->pieces[i].sha);
		if (added < 0)
			rc = crest_errf(-ENOMEM, "gc: marking");
		else if (added)
			idx[nidx++] = i;
	}
	/* Inline lists whole; of pieced streams, only the new pieces. */
	for (size_t i = 0; rc == 0 && i < m->nstreams; i++)
		if (!pieced[i])
			rc = mark_extents(chunks, m->streams[i].ext, m->streams[i].nextents);
	if (rc == 0 && nidx) {
		pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
		struct mark_job j = { .s = s, .m = m, .idx = idx, .hex = hex, .chunks = chunks, .bases = bases,
				      .lock = &lock };
		struct par p = { .n = nidx, .fn = mark_fetch, .arg = &j };
		rc = par_run(&p, MARK_THREADS, NULL, 0);
	}
	free(idx);
	free(pieced);
	cas_manifest_free(m);
	return rc;
}

/* ---- the live entries, kept for the rewrite ----
 *
 * The chunk scan writes every live entry (id and place) to STORE/gc/run-live
 * as it goes, so that the rewrite lists each group's live records from this
 * file instead of scanning the whole index again (measured: 0.5-0.7 s of a
 * 3.6 s gc of 1 M chunks). Nothing changes the chunk entries in between:
 * gc holds the writer lock, and its own deletions removed only dead ones.
 * Memory: one buffer; the file is read back one buffer at a time.
 */
#define LIVE_BUF (1u << 20)

struct livelog {
	int fd;
	uint8_t *buf;
	size_t len;
};

static int full_write(int fd, const uint8_t *p, size_t len)
{
	while (len) {
		const ssize_t w = write(fd, p, len);
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

static int livelog_open(struct livelog *l, const char *dir)
{
	char path[4096 + 32];
	snprintf(path, sizeof(path), "%s/run-live", dir);
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return crest_errf(-errno, "gc: cannot create %s", dir);
	l->fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (l->fd < 0)
		return crest_errf(-errno, "gc: cannot write %s", path);
	if (!(l->buf = malloc(LIVE_BUF)))
		return crest_errf(-ENOMEM, "gc: listing live entries");
	return 0;
}

static int livelog_flush(struct livelog *l)
{
	const int rc = full_write(l->fd, l->buf, l->len);
	l->len = 0;
	return rc < 0 ? crest_errf(rc, "gc: writing the live entries to its scratch file") : 0;
}

static int livelog_add(struct livelog *l, const uint8_t sha[32], const struct cas_loc *loc)
{
	struct cas_index_entry e;
	memset(&e, 0, sizeof(e));   /* no stray padding bytes in the file */
	memcpy(e.sha, sha, 32);
	e.loc = *loc;
	if (l->len + sizeof(e) > LIVE_BUF) {
		const int rc = livelog_flush(l);
		if (rc < 0)
			return rc;
	}
	memcpy(l->buf + l->len, &e, sizeof(e));
	l->len += sizeof(e);
	return 0;
}

static void livelog_close(struct livelog *l)
{
	if (l->fd >= 0)
		close(l->fd);
	free(l->buf);
}

/* Live and dead bytes of each pack (record headers included). */
struct packstat {
	uint64_t live, dead;
	uint64_t nlive;              /* live records */
};

/* The deletes of dead chunks are written by a thread of their own while
 * the scan goes on: RocksDB's memtable inserts of 456 K deletes were a
 * quarter of gc's CPU time on the benchmark store, behind the scan rather
 * than beside it. Two batches take turns: the scan fills one while the
 * thread writes the other. Each is written, synced, in the order handed
 * over, as before. */
struct bgwrite {
	struct cas_store *s;
	pthread_t t;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct cas_index_batch *pending;   /* handed over, not yet written */
	bool started, quit;
	int rc;
	char msg[1024];
};

static void *bg_run(void *arg)
{
	struct bgwrite *w = arg;
	pthread_mutex_lock(&w->mu);
	for (;;) {
		while (!w->pending && !w->quit)
			pthread_cond_wait(&w->cv, &w->mu);
		if (!w->pending)
			break;
		struct cas_index_batch *b = w->pending;
		const bool skip = w->rc < 0;
		pthread_mutex_unlock(&w->mu);
		const int rc = skip ? 0 : cas_index_batch_commit(b, "deleting dead chunks");
		cas_index_batch_clear(b);
		pthread_mutex_lock(&w->mu);
		if (rc < 0 && w->rc == 0) {
			w->rc = rc;
			crest_errcpy(w->msg, sizeof(w->msg));
		}
		w->pending = NULL;
		pthread_cond_broadcast(&w->cv);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

static void bg_start(struct bgwrite *w, struct cas_store *s)
{
	w->s = s;
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, NULL);
	w->started = pthread_create(&w->t, NULL, bg_run, w) == 0;
}

/* Hands *b over (or, without the thread, writes it here); *b becomes the
 * spare, written and empty, to fill next. 0, or an earlier write's error. */
static int bg_submit(struct bgwrite *w, struct cas_index_batch **b, struct cas_index_batch **spare)
{
	if (!w->started) {
		const int rc = cas_index_batch_commit(*b, "deleting dead chunks");
		cas_index_batch_clear(*b);
		return rc;
	}
	pthread_mutex_lock(&w->mu);
	while (w->pending)
		pthread_cond_wait(&w->cv, &w->mu);
	const int rc = w->rc;
	if (rc == 0) {
		w->pending = *b;
		*b = *spare;
		*spare = w->pending;
		pthread_cond_broadcast(&w->cv);
	}
	pthread_mutex_unlock(&w->mu);
	if (rc < 0)
		crest_errset_str(w->msg);
	return rc;
}

/* Waits for what was handed over, stops the thread: 0 or the first
 * write's error, with its message. */
static int bg_finish(struct bgwrite *w)
{
	if (!w->s)
		return 0;
	if (w->started) {
		pthread_mutex_lock(&w->mu);
		w->quit = true;
		pthread_cond_broadcast(&w->cv);
		pthread_mutex_unlock(&w->mu);
		pthread_join(w->t, NULL);
		w->started = false;
	}
	pthread_mutex_destroy(&w->mu);
	pthread_cond_destroy(&w->cv);
	w->s = NULL;
	if (w->rc < 0)
		crest_errset_str(w->msg);
	return w->rc;
}

/* The chunk pass: live bytes per pack; dead entries counted and, unless
 * dry, deleted in batches of BATCH_OPS as the scan goes (the iterator
 * reads a snapshot of the index: its own deletions do not disturb it). */
struct scan {
	struct cas_store *s;
	struct merge *live;
	struct packstat *ps;
	uint32_t nps;
	struct cas_gc_result *r;
	bool dry;
	struct cas_index_batch *b, *spare;
	struct bgwrite *bg;
	size_t nb;
	struct livelog *ll;   /* live entries go here, unless dry */
	int err;
};

static int scan_flush(struct scan *c)
{
	if (!c->nb)
		return 0;
	c->nb = 0;
	return bg_submit(c->bg, &c->b, &c->spare);
}

static int chunk_cb(const char *k, size_t kl, const char *v, size_t vl, void *arg)
{
	struct scan *c = arg;
	struct cas_loc loc;
	if (kl != 32 || cas_loc_decode((const uint8_t *)v, vl, &loc) < 0)
		return 0;   /* damage: verify's to report, not gc's to act on */
	const uint8_t *sha = (const uint8_t *)k;
	const uint64_t rec = CAS_REC_HEADER + (uint64_t)loc.stored;
	if (loc.pack >= c->nps) {
		const uint32_t n = loc.pack + 1024;
		struct packstat *np = realloc(c->ps, n * sizeof(*np));
		if (!np) {
			c->err = crest_errf(-ENOMEM, "gc");
			return 1;
		}
		memset(np + c->nps, 0, (n - c->nps) * sizeof(*np));
		c->ps = np;
		c->nps = n;
	}
	c->r->chunks++;
	const bool live = merge_has(c->live, sha);
	if (c->live->err) {
		c->err = crest_errx(-EIO, "gc: a run of live ids in %s/gc could not be read back", cas_dir(c->s));
		return 1;
	}
	if (live) {
		c->ps[loc.pack].live += rec;
		c->ps[loc.pack].nlive++;
		if (c->ll && (c->err = livelog_add(c->ll, sha, &loc)) < 0)
			return 1;
		return 0;
	}
	c->r->dead_chunks++;
	if (c->dry)
		return 0;
	char key[33];
	key[0] = 'c';
	memcpy(key + 1, sha, 32);
	cas_index_batch_delete(c->b, key, 33);
	if (++c->nb == BATCH_OPS && (c->err = scan_flush(c)) < 0)
		return 1;
	return 0;
}

/* The piece keys, listed by a thread of their own while the chunk scan
 * runs: the 'l' values are the extent lists themselves (368 MB for 101
 * snapshots of 512 MiB in 4 KiB chunks), so reading past them costs about
 * half what the chunk scan does, and the two overlap on two cores. Only
 * the keys are kept: one id per piece, as for the live pieces; of the live
 * ones (live, sealed before the listing starts) the meta log records'
 * bytes are added up for the compaction, which need not read them again. */
struct piece_lister {
	struct cas_store *s;
	const struct idset *live;
	uint64_t live_bytes;
	struct idset all;
	pthread_t t;
	bool started;
	int rc;
	char msg[1024];
};

static int piece_key_cb(const char *k, size_t kl, const char *v, size_t vl, void *arg)
{
	(void)v;
	struct piece_lister *l = arg;
	if (kl == 32 && idset_has(l->live, (const uint8_t *)k))
		l->live_bytes += CAS_REC_HEADER + vl;
	if (kl == 32 && idset_add(&l->all, (const uint8_t *)k) < 0) {
		l->rc = crest_errf(-ENOMEM, "gc: listing the pieces");
		return 1;
	}
	return 0;
}

static void *piece_lister_run(void *arg)
{
	struct piece_lister *l = arg;
	const int rc = cas_db_scan(l->s, 'l', piece_key_cb, l);
	if (rc < 0 && l->rc == 0)
		l->rc = rc;
	if (l->rc < 0)
		crest_errcpy(l->msg, sizeof(l->msg));
	return NULL;
}

/* Starts the listing; without a thread it runs here and now. */
static void piece_lister_start(struct piece_lister *l)
{
	l->started = pthread_create(&l->t, NULL, piece_lister_run, l) == 0;
	if (!l->started)
		piece_lister_run(l);
}

/* Waits for the listing, if one was started: 0, or its error with its
 * message. */
static int piece_lister_join(struct piece_lister *l)
{
	if (l->started)
		pthread_join(l->t, NULL);
	l->started = false;
	if (l->rc < 0)
		crest_errset_str(l->msg);
	return l->rc;
}

/* ---- the sweep ---- */

/* Steps 1 and 2: the delete records, then the manifests out of the index.
 * Expired job snapshots' records come first (what[i] is r->expired_what):
 * a log torn by a kill keeps a prefix of them, so no recovery applies a
 * member's delete and leaves the job snapshot naming it (gc.h). */
static int forget(struct cas_store *s, const struct idset *expired, const uint8_t (*ids)[32], const uint8_t *what,
		  size_t n)
{
	struct cas_meta_buf mb = { 0 };
	for (int pass = 0; pass < 2; pass++)
		for (size_t i = 0; i < n; i++)
			if ((what[i] == CAS_GC_JOB) == (pass == 0))
				cas_meta_rec(&mb, CAS_META_DELETE, ids[i], NULL, 0);
	int rc = cas_meta_append(s, &mb);
	free(mb.p);
	if (rc < 0)
		return rc;
	struct cas_index_batch *b = cas_batch_new(s, &rc);
	if (!b)
		return rc;
	rc = cas_batch_forget(s, b, (const uint8_t (*)[32])expired->v, expired->n);
	cas_batch_end(b, 'q', s->meta_num, s->meta_end);
	if (rc == 0)
		rc = cas_index_batch_commit(b, "deleting expired snapshots");
	cas_index_batch_free(b);
	return rc;
}

/* Step 3: index entries of type whose keys are in dead, in bounded batches. */
static int sweep(struct cas_store *s, char type, const struct idset *dead)
{
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < dead->n;) {
		struct cas_index_batch *b = cas_batch_new(s, &rc);
		if (!b)
			break;
		char k[33];
		k[0] = type;
		for (size_t n = 0; i < dead->n && n < BATCH_OPS; i++, n++) {
			memcpy(k + 1, dead->v[i], 32);
			cas_index_batch_delete(b, k, 33);
		}
		rc = cas_index_batch_commit(b, type == 'c' ? "deleting dead chunks" : "deleting dead pieces");
		cas_index_batch_free(b);
	}
	return rc;
}

/* ---- pack rewrite (step 4) ----
 *
 * The packs to rewrite go in groups of at most GROUP_BYTES live bytes and
 * GROUP_RECORDS live records. For each group one scan of the index lists
 * the live records in its packs (memory: that group's list); they are read
 * in pack order, each checked (magic, sizes, id, CRC32C), and copied
 * verbatim into this session's packs; one commit per group. Only live
 * bytes are read: a mostly dead pack costs its live records, not its size.
 */
#define GROUP_RECORDS (1u << 20)

/* The test knob CREST_GC_GROUP_BYTES makes groups small, so that tests
 * commit (and kill) many of them; never below 64 KiB. */
static uint64_t group_bytes(void)
{
	const char *v = getenv("CREST_GC_GROUP_BYTES");
	const long long n = v ? atoll(v) : 0;
	return n >= (64 << 10) && n <= (long long)GROUP_BYTES ? (uint64_t)n : GROUP_BYTES;
}

struct writer {
	uint8_t *buf;
	size_t len;
	struct cas_write w;
};

static int writer_flush(struct cas_store *s, struct writer *w)
{
	if (!w->len)
		return 0;
	w->w.data = w->buf;
	w->w.len = w->len;
	const int rc = cas_pack_write(s, 0, &w->w, 1);
	w->len = 0;
	return rc;
}

/* Commits one group: the copies point the index at the new records, the
 * new packs' ends recorded and the old packs retired, in one batch. */
static int group_commit(struct cas_store *s, struct cas_index_entry *e, size_t n, const uint32_t *old, size_t nold)
{
	int rc = cas_pack_sync(s, 0);
	struct cas_pack_end *ends = NULL;
	size_t nends = 0;
	if (rc == 0 && n)
		rc = cas_ends_merge(s, e, n, &ends, &nends);
	if (rc < 0)
		return rc;
	struct cas_index_batch *b = cas_batch_new(s, &rc);
	if (!b) {
		free(ends);
		return rc;
	}
	for (size_t i = 0; i < n; i++)
		cas_batch_entry(b, e[i].sha, &e[i].loc);
	for (size_t i = 0; i < nends; i++)
		cas_batch_end(b, 'p', ends[i].pack, ends[i].end);
	for (size_t i = 0; i < nold; i++) {
		char k[5];
		cas_key_num(k, 'p', old[i]);
		cas_index_batch_delete(b, k, 5);
		cas_batch_end(b, 'r', old[i], 0);
	}
	rc = cas_index_batch_commit(b, "pointing the index at rewritten packs");
	cas_index_batch_free(b);
	if (rc < 0) {
		free(ends);
		return rc;
	}
	if (n) {
		free(s->ends);
		s->ends = ends;
		s->nends = nends;
		cas_pack_mark(s, e, n);
	}
	return 0;
}

/* The record at e->loc in f, whole and checked (magic, sizes, the id,
 * the CRC32C of its stored bytes), into buf (CAS_REC_HEADER +
 * CAS_CHUNK_MAX bytes). */
static int record_read(struct cas_obj *f, const struct cas_index_entry *e, uint8_t *buf)
{
	if (e->loc.stored > CAS_CHUNK_MAX)
		return -EBADMSG;
	const size_t len = CAS_REC_HEADER + (size_t)e->loc.stored;
	if (cas_obj_read(f, buf, len, e->loc.off) < 0)
		return -EIO;
	if (memcmp(buf, CAS_REC_MAGIC, 4) || buf[CAS_REC_CODEC] != e->loc.codec ||
	    le32_get(buf + CAS_REC_RAW) != e->loc.raw || le32_get(buf + CAS_REC_STORED) != e->loc.stored ||
	    memcmp(buf + CAS_REC_SHA, e->sha, 32) ||
	    crc32c(buf + CAS_REC_HEADER, e->loc.stored) != le32_get(buf + CAS_REC_CRC))
		return -EBADMSG;
	return 0;
}

struct collect {
	const uint8_t *in;           /* in[p]: pack p is in this group */
	uint32_t nps;
	struct cas_index_entry *v;
	size_t n, cap;
	int err;
};

/* Adds e when its pack is in the group. */
static int collect_add(struct collect *c, const struct cas_index_entry *e)
{
	if (e->loc.pack >= c->nps || !c->in[e->loc.pack])
		return 0;
	if (c->n == c->cap) {
		const size_t cap = c->cap ? 2 * c->cap : 4096;
		struct cas_index_entry *nv = realloc(c->v, cap * sizeof(*nv));
		if (!nv) {
			c->err = crest_errf(-ENOMEM, "gc: listing live records");
			return 1;
		}
		c->v = nv;
		c->cap = cap;
	}
	c->v[c->n++] = *e;
	return 0;
}

/* Lists the group's live entries from the chunk scan's file. */
static int collect_group(struct collect *c, struct livelog *l)
{
	if (lseek(l->fd, 0, SEEK_SET) < 0)
		return crest_errf(-errno, "gc: reading back the live entries");
	const size_t esz = sizeof(struct cas_index_entry);
	for (;;) {
		const ssize_t got = read(l->fd, l->buf, LIVE_BUF / esz * esz);
		if (got < 0 || got % (ssize_t)esz)
			return crest_errx(-EIO, "gc: reading back the live entries: %s",
					  got < 0 ? strerror(errno) : "a short record");
		if (got == 0)
			return 0;
		for (size_t i = 0; i < (size_t)got / esz; i++) {
			struct cas_index_entry e;
			memcpy(&e, l->buf + i * esz, esz);
			if (collect_add(c, &e))
				return c->err;
		}
	}
}

static int loc_cmp(const void *a, const void *b)
{
	const struct cas_loc *x = &((const struct cas_index_entry *)a)->loc;
	const struct cas_loc *y = &((const struct cas_index_entry *)b)->loc;
	if (x->pack != y->pack)
		return x->pack < y->pack ? -1 : 1;
	return x->off < y->off ? -1 : x->off > y->off;
}

/* Copies the records of one pack, v[0..n) (sorted by offset), and points
 * each entry at its copy. -EBADMSG (no message) when the pack does not
 * read back whole: the caller leaves it as it is. */
static int copy_pack(struct cas_store *s, uint32_t p, struct cas_index_entry *v, size_t n, struct writer *w,
		     uint8_t *rec, struct cas_gc_result *r, struct progress *prog)
{
	struct cas_obj *f = NULL;
	if (n && cas_pack_open_read(s, p, &f) < 0)
		return -EBADMSG;
	int rc = 0;
	for (size_t j = 0; rc == 0 && j < n; j++) {
		struct cas_index_entry *e = &v[j];
		const size_t len = CAS_REC_HEADER + (size_t)e->loc.stored;
		if (record_read(f, e, rec) < 0) {
			rc = -EBADMSG;
			break;
		}
		struct cas_loc nl;
		rc = cas_pack_reserve(s, 0, e->loc.stored, e->loc.raw, e->loc.codec, &nl);
		if (rc == 0 && w->len && (nl.pack != w->w.pack || nl.off != w->w.off + w->len || w->len + len > WBUF_BYTES))
			rc = writer_flush(s, w);
		if (rc == 0 && len > WBUF_BYTES) {   /* larger than the buffer: alone */
			const struct cas_write big = { .pack = nl.pack, .off = nl.off, .data = rec, .len = len };
			rc = cas_pack_write(s, 0, &big, 1);
		} else if (rc == 0) {
			if (!w->len)
				w->w = (struct cas_write){ .pack = nl.pack, .off = nl.off };
			memcpy(w->buf + w->len, rec, len);
			w->len += len;
		}
		if (rc == 0) {
			e->loc = nl;   /* from here on the entry names the copy */
			r->bytes_moved += len;
			if (prog)
				progress_update(prog, r->bytes_moved);
		}
	}
	cas_obj_close(f);
	return rc;
}

/* Read-ahead of the records to copy: the kernel is asked for the next
 * PREFETCH_BYTES of them (spans of records at most PREFETCH_GAP apart, so
 * dead stretches are not read) while the current pack is copied, so that
 * the disk works while the copy does. Advice only: nothing depends on it. */
#define PREFETCH_BYTES (32ull << 20)
#define PREFETCH_GAP (64u << 10)

static uint64_t rec_end(const struct cas_index_entry *e)
{
	return e->loc.off + CAS_REC_HEADER + e->loc.stored;
}

/* Advises v[from, to), sorted by pack and offset. */
static void prefetch(struct cas_store *s, const struct cas_index_entry *v, size_t from, size_t to)
{
	struct cas_obj *f = NULL;
	uint32_t pack = 0;
	uint64_t a = 0, b = 0;
	for (size_t i = from; i <= to; i++) {
		if (i < to && f && v[i].loc.pack == pack && v[i].loc.off <= b + PREFETCH_GAP) {
			if (rec_end(&v[i]) > b)
				b = rec_end(&v[i]);
			continue;
		}
		if (f && b > a)
			cas_obj_advise(f, a, b - a, CAS_OBJ_WILLNEED);
		if (i == to)
			break;
		if (!f || v[i].loc.pack != pack) {
			cas_obj_close(f);
			pack = v[i].loc.pack;
			if (cas_obj_open(s->objs, CAS_OBJ_PACK, pack, false, &f) < 0)
				f = NULL;
		}
		a = v[i].loc.off;
		b = rec_end(&v[i]);
	}
	cas_obj_close(f);
}

/* want[p]: rewrite pack p; ps[p]: its live bytes and records. */
static int rewrite(struct cas_store *s, const bool *want, const struct packstat *ps, uint32_t nps,
		   struct livelog *ll, struct cas_gc_result *r, struct progress *prog)
{
	struct writer w = { .buf = malloc(WBUF_BYTES) };
	uint8_t *rec = malloc(CAS_REC_HEADER + CAS_CHUNK_MAX);
	uint8_t *in = calloc(nps ? nps : 1, 1);
	uint32_t *old = calloc(nps ? nps : 1, sizeof(*old));
	struct collect cc = { .in = in, .nps = nps };
	int rc = w.buf && rec && in && old ? 0 : crest_errf(-ENOMEM, "gc: rewriting packs");
	const uint64_t gmax = group_bytes();
	for (uint32_t first = 1; rc == 0 && first < nps;) {
		/* The next group: wanted packs from first on, within the bounds. */
		uint64_t bytes = 0, recs = 0;
		uint32_t p = first;
		memset(in, 0, nps);
		for (; p < nps; p++) {
			if (!want[p])
				continue;
			if (bytes && (bytes + ps[p].live > gmax || recs + ps[p].nlive > GROUP_RECORDS))
				break;
			in[p] = 1;
			bytes += ps[p].live;
			recs += ps[p].nlive;
		}
		first = p;
		cc.n = 0;
		gc_time(NULL);
		rc = collect_group(&cc, ll);
		if (rc == 0 && cc.n > 1)
			qsort(cc.v, cc.n, sizeof(*cc.v), loc_cmp);
		gc_time("  group: list live");
		size_t nold = 0, i = 0, keep = 0, pf = 0;
		uint64_t issued = 0, copied = 0;
		for (uint32_t q = 1; rc == 0 && q < first; q++) {
			if (!in[q])
				continue;
			size_t end = i;
			uint64_t bytes = 0;
			while (end < cc.n && cc.v[end].loc.pack == q)
				bytes += CAS_REC_HEADER + cc.v[end++].loc.stored;
			/* This pack and what follows it, up to the window. */
			const size_t pf0 = pf;
			while (pf < cc.n && (pf < end || issued - copied < PREFETCH_BYTES))
				issued += CAS_REC_HEADER + cc.v[pf++].loc.stored;
			if (pf > pf0)
				prefetch(s, cc.v, pf0, pf);
			copied += bytes;
			rc = copy_pack(s, q, cc.v + i, end - i, &w, rec, r, prog);
			if (rc == -EBADMSG) {
				/* The pack keeps what it holds; copies made so far stay
				 * unnamed, and its entries keep their old places. */
				fprintf(stderr, "crest: gc: pack %u of %s does not read back whole; it is left as "
					"it is (casctl verify names the snapshots that need it)\n", q, cas_dir(s));
				crest_errset_str("");
				rc = 0;
				i = end;
				continue;
			}
			if (rc < 0)
				break;
			/* Kept entries move to the front: only they are committed.
			 * (A pack with no live record has none: cc.v may be NULL.) */
			if (end > i)
				memmove(cc.v + keep, cc.v + i, (end - i) * sizeof(*cc.v));
			keep += end - i;
			i = end;
			old[nold++] = q;
			r->packs_rewritten++;
		}
		if (rc == 0)
			rc = writer_flush(s, &w);
		gc_time("  group: copy");
		if (rc == 0 && (keep || nold))
			rc = group_commit(s, cc.v, keep, old, nold);
		gc_time("  group: commit");
	}
	free(w.buf);
	free(rec);
	free(in);
	free(old);
	free(cc.v);
	return rc;
}

/* Unlinks are done on several threads: ext4 frees a large file's blocks
 * inside unlink, mostly waiting (measured: 8.5 ms for each 41 MB pack, one
 * after another; a quarter of that, four at a time). ok[i]: pack i's file
 * is gone. */
#define UNLINK_THREADS 8

struct unlink_job {
	struct cas_store *s;
	const struct cas_pack_end *v;
	bool *ok;
};

static int unlink_one(struct par *p, void *tls, size_t i)
{
	(void)tls;
	const struct unlink_job *j = p->arg;
	const int rc = cas_obj_remove(j->s->objs, CAS_OBJ_PACK, j->v[i].pack);
	j->ok[i] = rc == 0 || rc == -ENOENT;
	return 0;
}

/* Step 5: unlinks the retired packs, if no reader holds the store. */
static int retire(struct cas_store *s, struct cas_gc_result *r)
{
	struct cas_pack_end *v = NULL;
	size_t n = 0;
	int rc = cas_ends_load(s, 'r', &v, &n);
	if (rc < 0 || n == 0) {
		free(v);
		return rc;
	}
	if (cas_readers_none(s) < 0) {
		r->packs_retired = n;
		free(v);
		return 0;
	}
	bool *ok = calloc(n, sizeof(*ok));
	struct cas_index_batch *b = ok ? cas_batch_new(s, &rc) : NULL;
	if (!b) {
		cas_readers_let_in(s);
		free(ok);
		free(v);
		return ok ? rc : crest_errf(-ENOMEM, "gc: unlinking retired packs");
	}
	struct unlink_job j = { .s = s, .v = v, .ok = ok };
	struct par p = { .n = n, .fn = unlink_one, .arg = &j };
	par_run(&p, UNLINK_THREADS, NULL, 0);   /* unlink_one never fails */
	for (size_t i = 0; i < n; i++) {
		char k[5];
		if (!ok[i]) {
			r->packs_retired++;
			continue;
		}
		cas_key_num(k, 'r', v[i].pack);
		cas_index_batch_delete(b, k, 5);
	}
	/* Best effort, as before the index forgets them: a crash that brings
	 * a removed pack back leaves it to the next gc, as unreferenced. */
	cas_obj_sync_names(s->objs, CAS_OBJ_PACK);
	rc = cas_index_batch_commit(b, "forgetting unlinked packs");
	cas_index_batch_free(b);
	cas_readers_let_in(s);
	free(ok);
	free(v);
	return rc;
}

/* The pack files on disk, less this session's own while it is empty. */
static uint64_t packs_bytes(struct cas_store *s)
{
	uint32_t max = 0;
	uint64_t sum = 0;
	if (cas_pack_max_on_disk(s, &max) < 0)
		return 0;
	for (uint32_t p = 1; p <= max; p++) {
		uint64_t size;
		if (cas_obj_stat(s->objs, CAS_OBJ_PACK, p, &size) == 0 && !(p >= s->first_pack && size <= CAS_PACK_HEADER))
			sum += size;
	}
	return sum;
}

/* The test knob CREST_GC_RUN_IDS makes runs small, so that tests spill
 * and merge many of them; never below 1024. */
static size_t run_ids(void)
{
	const char *v = getenv("CREST_GC_RUN_IDS");
	const long long n = v ? atoll(v) : 0;
	return n >= 1024 && n <= (long long)RUN_IDS ? (size_t)n : RUN_IDS;
}

/* The old logs' size below which gc leaves them (cas_meta_compact): 64 MiB,
 * or CREST_META_COMPACT_MIN bytes (a test knob). */
static uint64_t meta_compact_min(void)
{
	const char *v = getenv("CREST_META_COMPACT_MIN");
	return v && *v ? strtoull(v, NULL, 10) : (uint64_t)64 << 20;
}

int cas_gc(struct cas_store *s, const struct cas_gc_policy *pol, struct cas_gc_result *r, struct progress *prog)
{
	memset(r, 0, sizeof(*r));
	int rc = cas_gc_policy_check(pol);
	if (rc < 0)
		return rc;
	if (s->mode != CAS_WRITE && !pol->dry_run)
		return crest_errx(-EROFS, "gc needs store %s open for writing", s->dir);
	/* On RADOS, a new base before anything is removed or rewritten: no
	 * node's cache may catch up across a gc, since what it indexed may be
	 * gone (cache.c). */
	if (!pol->dry_run && s->shared && (rc = cas_head_bump(s, true)) < 0)
		return rc;
	const double below = pol->rewrite_below > 0 ? pol->rewrite_below : 0.5;
	/* What a killed run left: its runs, and packs it retired but could not
	 * unlink. */
	gc_time(NULL);
	struct runs live = { .cap = run_ids() };
	runs_dir(s, pol->dry_run, live.dir, sizeof(live.dir));
	runs_clear(live.dir);
	if (!pol->dry_run && (rc = retire(s, r)) < 0)
		return rc;
	r->bytes_before = packs_bytes(s);
	gc_time("pack sizes");
	struct cas_snapinfo *v = NULL;
	size_t n = 0;
	rc = cas_snapshot_list(s, &v, &n);
	if (rc < 0)
		return rc;
	gc_time("snapshot list");
	struct snap *sv = calloc(n ? n : 1, sizeof(*sv));
	struct pieceset pieces = { 0 };
	struct idset bases = { 0 };      /* kept for the deltas that name them */
	struct idset expired = { 0 };
	struct merge mg;
	bool merging = false;
	struct scan sc = { .s = s, .live = &mg, .r = r, .dry = pol->dry_run };
	struct piece_lister pl = { .s = s, .live = &pieces.set };
	uint64_t meta_live = 0;   /* the kept manifests' meta log records, bytes */
	struct idset dead_pieces = { 0 };
	bool *want = NULL;
	uint64_t *pend = NULL;
	if (!sv)
		rc = crest_errf(-ENOMEM, "gc");
	/* Job snapshots first, and every rank snapshot they name (gc.h). */
	struct idset named = { 0 }, kept_named = { 0 };
	for (size_t i = 0; rc == 0 && i < n; i++) {
		sv[i] = (struct snap){ .id = v[i].id, .t = v[i].head->time_ns, .branch = cas_manifest_branch(v[i].head),
				       .tags = v[i].tags, .ntags = v[i].ntags, .bytes = v[i].head->logical_bytes };
		if (!cas_jobsnap_is(v[i].head))
			continue;
		sv[i].what = CAS_GC_JOB;
		rc = cas_jobsnap_load(s, v[i].id, &sv[i].job);
		for (uint32_t k = 0; rc == 0 && k < sv[i].job->world; k++)
			if (idset_add(&named, sv[i].job->members[k].id) < 0)
				rc = crest_errf(-ENOMEM, "gc");
	}
	idset_seal(&named);
	for (size_t i = 0; rc == 0 && i < n; i++)
		if (sv[i].what != CAS_GC_JOB && idset_has(&named, sv[i].id))
			sv[i].what = CAS_GC_MEMBER;
		else if (cas_jobsnap_is_rank(v[i].head))
			sv[i].what = CAS_GC_PARTIAL;
	/* Every branch's head stays, whatever the policy: a branch's newest
	 * snapshot (keep_branch's v[0]), and the target of a ref on a branch
	 * with no snapshot yet (history.h), which is a snapshot of another
	 * branch and would otherwise expire by that branch's rules. */
	struct cas_branch *heads = NULL;
	size_t nheads = 0;
	if (rc == 0)
		rc = cas_branch_list(s, &heads, &nheads);
	/* A rank snapshot is never kept as a head: only as its job's. */
	for (size_t i = 0; rc == 0 && i < n; i++)
		for (size_t h = 0; h < nheads && !sv[i].head && snap_counted(&sv[i]); h++)
			sv[i].head = !memcmp(heads[h].head, sv[i].id, 32);
	cas_branch_list_free(heads, nheads);
	if (rc == 0 && n > 1)
		qsort(sv, n, sizeof(*sv), snap_cmp);
	for (size_t i = 0; rc == 0 && i < n && snap_counted(&sv[i]);) {
		size_t j = i;
		while (j < n && snap_counted(&sv[j]) && !strcmp(sv[j].branch, sv[i].branch))
			j++;
		rc = keep_branch(sv + i, j - i, pol);
		i = j;
	}
	/* The rank snapshots: a member with a kept job snapshot that names it,
	 * a partial one while young. */
	for (size_t i = 0; rc == 0 && i < n; i++)
		for (uint32_t k = 0; sv[i].what == CAS_GC_JOB && sv[i].keep && k < sv[i].job->world && rc == 0; k++)
			if (idset_add(&kept_named, sv[i].job->members[k].id) < 0)
				rc = crest_errf(-ENOMEM, "gc");
	idset_seal(&kept_named);
	const uint64_t now = pol->now_ns ? pol->now_ns : time_wall_ns();
	const uint64_t young = pol->keep_partial_ns ? pol->keep_partial_ns : CAS_GC_KEEP_PARTIAL_DEFAULT;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		if (sv[i].what == CAS_GC_MEMBER)
			sv[i].keep = idset_has(&kept_named, sv[i].id);
		else if (sv[i].what == CAS_GC_PARTIAL)
			sv[i].keep = sv[i].t > now || now - sv[i].t < young;
		r->jobs += sv[i].what == CAS_GC_JOB;
		r->jobs_kept += sv[i].what == CAS_GC_JOB && sv[i].keep;
		r->members += sv[i].what == CAS_GC_MEMBER;
		r->members_kept += sv[i].what == CAS_GC_MEMBER && sv[i].keep;
		r->partial += sv[i].what == CAS_GC_PARTIAL;
		r->partial_kept += sv[i].what == CAS_GC_PARTIAL && sv[i].keep;
	}
	free(named.v);
	free(kept_named.v);
	r->snapshots = n;
	r->kept = calloc(n ? n : 1, 32);
	r->expired = calloc(n ? n : 1, 32);
	r->kept_what = calloc(n ? n : 1, 1);
	r->expired_what = calloc(n ? n : 1, 1);
	if (rc == 0 && (!r->kept || !r->expired || !r->kept_what || !r->expired_what))
		rc = crest_errf(-ENOMEM, "gc");
	/* The mark: every chunk and piece a kept snapshot names. */
	uint64_t total = 0, done = 0;
	for (size_t i = 0; i < n; i++)
		total += v[i].head->logical_bytes;
	if (prog)
		progress_begin(prog, "gc mark", total, false);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		if (sv[i].keep) {
			r->kept_what[r->nkept] = sv[i].what;
			memcpy(r->kept[r->nkept++], sv[i].id, 32);
			rc = mark_manifest(s, sv[i].id, &live, &pieces, &bases, &meta_live);
		} else {
			r->expired_what[r->nexpired] = sv[i].what;
			memcpy(r->expired[r->nexpired++], sv[i].id, 32);
			if (idset_add(&expired, sv[i].id) < 0)
				rc = crest_errf(-ENOMEM, "gc");
		}
		done += sv[i].bytes;
		if (prog)
			progress_update(prog, done);
	}
	if (prog)
		progress_end(prog);
	/* The bases join the live pieces only now: a piece in pieces.set has
	 * had its chunks marked, and a base's were not (the mark skips a
	 * piece it finds there). */
	for (size_t i = 0; rc == 0 && i < bases.n; i++)
		if (idset_add(&pieces.set, bases.v[i]) < 0)
			rc = crest_errf(-ENOMEM, "gc: marking");
	free(bases.v);
	idset_seal(&pieces.set);
	idset_seal(&expired);
	if (rc == 0) {
		rc = merge_open(&live, &mg);
		merging = rc == 0;
	}
	gc_time("mark");
	/* Steps 1 and 2 before any entry goes: from here no listed snapshot
	 * is expired, so whatever the sweeps remove, nothing listed needs. */
	if (rc == 0 && !pol->dry_run && expired.n)
		rc = forget(s, &expired, (const uint8_t (*)[32])r->expired, r->expired_what, r->nexpired);
	gc_time("forget");
	struct livelog ll = { .fd = -1 };
	struct bgwrite bg = { 0 };
	if (rc == 0 && !pol->dry_run) {
		sc.b = cas_batch_new(s, &rc);
		sc.spare = sc.b ? cas_batch_new(s, &rc) : NULL;
		sc.bg = &bg;
		bg_start(&bg, s);
		if (rc == 0)
			rc = livelog_open(&ll, live.dir);
		sc.ll = &ll;
	}
	if (rc == 0)
		piece_lister_start(&pl);
	if (rc == 0)
		rc = cas_db_scan(s, 'c', chunk_cb, &sc);
	if (rc == 0 && sc.err)
		rc = sc.err;
	if (rc == 0 && sc.b)
		rc = scan_flush(&sc);
	if (rc == 0 && sc.ll)
		rc = livelog_flush(&ll);
	/* Every delete written (or the thread stopped) before anything else
	 * writes the index; an earlier error keeps its own message. */
	if (rc < 0) {
		char msg[1024];
		crest_errcpy(msg, sizeof(msg));
		bg_finish(&bg);
		crest_errset_str(msg);
	} else {
		rc = bg_finish(&bg);
	}
	gc_time("chunk scan + deletes");
	/* Joined on every path: the thread reads the store. An error of the
	 * chunk scan keeps its own message. */
	if (rc < 0) {
		char msg[1024];
		crest_errcpy(msg, sizeof(msg));
		piece_lister_join(&pl);
		crest_errset_str(msg);
	} else {
		rc = piece_lister_join(&pl);
	}
	for (size_t i = 0; rc == 0 && i < pl.all.n; i++) {
		r->pieces++;
		if (idset_has(&pieces.set, pl.all.v[i]))
			continue;
		r->dead_pieces++;
		if (idset_add(&dead_pieces, pl.all.v[i]) < 0)
			rc = crest_errf(-ENOMEM, "gc: listing the dead pieces");
	}
	if (rc == 0 && !pol->dry_run)
		rc = sweep(s, 'l', &dead_pieces);
	gc_time("pieces");
	/* A pack's dead space is all it holds below its committed end that no
	 * live entry covers: the records of chunks dead in this run, and those
	 * an earlier run (or a killed put) left without an index entry, which
	 * no chunk scan can see. */
	struct cas_pack_end *ends = NULL;
	size_t nends = 0;
	if (rc == 0)
		rc = cas_ends_load(s, 'p', &ends, &nends);
	for (size_t i = 0; rc == 0 && i < nends; i++) {
		const uint32_t p = ends[i].pack;
		if (p >= sc.nps) {
			struct packstat *np = realloc(sc.ps, (p + 1) * sizeof(*np));
			if (!np) {
				rc = crest_errf(-ENOMEM, "gc");
				break;
			}
			memset(np + sc.nps, 0, (p + 1 - sc.nps) * sizeof(*np));
			sc.ps = np;
			sc.nps = p + 1;
		}
	}
	if (rc == 0 && !(pend = calloc(sc.nps ? sc.nps : 1, sizeof(*pend))))
		rc = crest_errf(-ENOMEM, "gc");
	for (size_t i = 0; rc == 0 && i < nends; i++) {
		const uint32_t p = ends[i].pack;
		const uint64_t held = ends[i].end > CAS_PACK_HEADER ? ends[i].end - CAS_PACK_HEADER : 0;
		sc.ps[p].dead = held > sc.ps[p].live ? held - sc.ps[p].live : 0;
		pend[p] = ends[i].end;
	}
	free(ends);
	for (uint32_t p = 1; rc == 0 && p < sc.nps; p++)
		r->dead_bytes += sc.ps[p].dead;
	/* Packs to rewrite: some dead, less live than the threshold, their
	 * committed end known ('p') and their file there (not lost). */
	uint64_t freed = 0;
	if (rc == 0 && !(want = calloc(sc.nps ? sc.nps : 1, sizeof(*want))))
		rc = crest_errf(-ENOMEM, "gc");
	for (uint32_t p = 1; rc == 0 && p < sc.nps; p++) {
		const struct packstat *ps = &sc.ps[p];
		r->packs += ps->live + ps->dead > 0;
		if (!ps->dead || !pend[p] || cas_pack_lost(s, p))
			continue;
		want[p] = (double)ps->live < below * (double)(ps->live + ps->dead);
		if (want[p]) {
			freed += ps->dead;
			r->packs_rewritten += pol->dry_run;
		}
	}
	if (rc == 0 && pol->dry_run) {
		r->bytes_after = r->bytes_before > freed ? r->bytes_before - freed : 0;
	} else if (rc == 0) {
		if (prog)
			progress_begin(prog, "gc rewrite", 0, false);
		rc = rewrite(s, want, sc.ps, sc.nps, &ll, r, prog);
		if (prog)
			progress_end(prog);
		gc_time("rewrite");
		if (rc == 0)
			rc = retire(s, r);
		gc_time("retire");
		/* Last: the meta logs still hold what this run expired. */
		struct cas_meta_compaction mc = { 0 };
		if (rc == 0)
			rc = cas_meta_compact(s, meta_compact_min(), meta_live + pl.live_bytes, &mc);
		r->meta_before = mc.bytes_before;
		r->meta_after = mc.bytes_after;
		r->meta_logs_removed = mc.logs_removed;
		gc_time("meta logs");
		r->bytes_after = packs_bytes(s);
		gc_time("pack sizes");
	}
	if (merging)
		merge_close(&mg);
	livelog_close(&ll);
	runs_clear(live.dir);
	if (sc.b)
		cas_index_batch_free(sc.b);
	if (sc.spare)
		cas_index_batch_free(sc.spare);
	free(want);
	free(pend);
	free(sc.ps);
	free(pl.all.v);
	free(dead_pieces.v);
	free(live.mem.v);
	free(live.slot);
	free(pieces.set.v);
	free(pieces.slot);
	free(expired.v);
	for (size_t i = 0; sv && i < n; i++)
		cas_jobsnap_free(sv[i].job);
	free(sv);
	cas_snapshot_list_free(v, n);
	if (rc < 0)
		cas_gc_result_free(r);
	return rc;
}
