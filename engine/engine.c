/*
 * engine.c - the ingest pipeline's API (see engine.h): producers cut streams
 * into segments for the workers; the committer commits snapshots in begin
 * order once the writer has synced what they reference; open and close
 * create and stop every thread. The design, and the state shared by the
 * parts, are in engine_int.h.
 *
 * Owns: struct engine itself (its allocation, every lock's init), e->lock
 * (the job queue, the commit queue, snapshot states) and the snapshots.
 * Promises what engine.h does. Calls workers.c, writer.c and pending.c.
 */
#include "engine/engine_int.h"
#include "util/err.h"
#include "util/par.h"
#include "util/progress.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void engine_opts_default(struct engine_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->workers = par_cores();
	o->staging_bytes = 256u << 20;
	o->segment_bytes = ENGINE_SEGMENT_BYTES;
	o->write_queue_bytes = 128u << 20;
	/* Chosen from bench/store/chunkers.sh (bench/RESULTS.md). Memory images
	 * change in place a page at a time: fixed 4 KiB chunks store exactly
	 * the changed pages (1% rewritten -> 1.00% new; 8 KiB: 1.99%, any CDC
	 * size: 3.5% or more). Files shift: fixed chunks lose everything after
	 * an insertion (99% new), CDC keeps it; 8 KiB gives 0.9% new for 100
	 * insertions in 256 MiB at half the chunks (and index entries) of
	 * 4 KiB's 0.5%, where 16 KiB already costs 1.6% and 64 KiB 6%. */
	dedup_params_init(&o->file_chunking, DEDUP_CDC, 8192);
	dedup_params_init(&o->memory_chunking, DEDUP_FIXED, 4096);
}

/* ---- producers ---- */

/* Queues a segment of len bytes at the stream's end; how, unless NULL,
 * gives its other fields (a file's source, engine_stream_add_chunks'
 * ids): it is copied whole, then the fields above are set, all before
 * any worker can take it. */
static int seg_submit(struct engine_stream *st, const uint8_t *data, size_t len, void *staging,
		      struct release_ref *rel, const struct seg *how)
{
	struct engine *e = st->snap->e;
	struct seg *sg = calloc(1, sizeof(*sg));
	if (!sg)
		return crest_errf(-ENOMEM, "queueing a segment");
	if (st->nsegs == st->cap) {
		size_t cap = st->cap ? st->cap * 2 : 64;
		struct seg **ns = realloc(st->segs, cap * sizeof(*ns));
		if (!ns) {
			free(sg);
			return crest_errf(-ENOMEM, "queueing a segment");
		}
		st->segs = ns;
		st->cap = cap;
	}
	st->segs[st->nsegs++] = sg;
	if (how)
		*sg = *how;
	sg->st = st;
	sg->off = st->size;
	sg->data = data;
	sg->len = len;
	sg->staging = staging;
	sg->rel = rel;
	st->size += len;
	pthread_mutex_lock(&e->lock);
	st->snap->segs_total++;
	if (e->jq_tail)
		e->jq_tail->next = sg;
	else
		e->jq_head = sg;
	e->jq_tail = sg;
	pthread_cond_signal(&e->job_cond);
	pthread_mutex_unlock(&e->lock);
	return 0;
}

/* The label every snapshot carries: its chunkers, "files=cdc/2048/8192/65536
 * memory=fixed/4096" by default. */
static void engine_chunking_label(const struct engine_opts *o, char buf[96])
{
	char f[40], m[40];
	dedup_params_name(&o->file_chunking, f);
	dedup_params_name(&o->memory_chunking, m);
	snprintf(buf, 96, "files=%s memory=%s", f, m);
}

/* Whether stream `type` of s was cut, in s's parent, by the chunker s cuts
 * it with: both "files" snapshots (whose producer, crest put, opens every
 * file stream with file chunking: a manifest does not record which chunker
 * a stream had, only the label which ones the snapshot had), and the same
 * ENGINE_CHUNKING_LABEL. A parent written before that label existed has
 * none: its cuts are never taken on trust. */
static bool parent_chunked_alike(const struct engine_snap *s, uint8_t type)
{
	const char *mine = cas_manifest_get_label(s->m, ENGINE_CHUNKING_LABEL);
	const char *its = cas_manifest_get_label(s->parent, ENGINE_CHUNKING_LABEL);
	return type == CAS_STREAM_FILE && mine && its && !strcmp(mine, its) && s->parent->kind && s->m->kind &&
	       !strcmp(s->parent->kind, "files") && !strcmp(s->m->kind, "files");
}

int engine_snapshot_begin(struct engine *e, const char *kind, struct engine_snap **out)
{
	struct engine_snap *s = calloc(1, sizeof(*s));
	if (!s)
		return crest_errf(-ENOMEM, "starting a snapshot");
	s->e = e;
	s->m = cas_manifest_new(kind);
	if (!s->m) {
		free(s);
		return crest_errf(-ENOMEM, "starting a snapshot");
	}
	s->m->time_ns = time_wall_ns();
	char chunking[96];
	engine_chunking_label(&e->o, chunking);
	if (cas_manifest_label(s->m, ENGINE_CHUNKING_LABEL, chunking) < 0) {
		cas_manifest_free(s->m);
		free(s);
		return crest_errf(-ENOMEM, "starting a snapshot");
	}
	s->begin_ns = time_now_ns();
	if (e->trace)
		getrusage(RUSAGE_SELF, &s->ru0);
	pthread_mutex_lock(&e->lock);
	if (e->cq_tail)
		e->cq_tail->next = s;
	else
		e->cq_head = s;
	e->cq_tail = s;
	pthread_mutex_unlock(&e->lock);
	*out = s;
	return 0;
}

struct cas_manifest *engine_snapshot_manifest(struct engine_snap *s)
{
	return s->m;
}

int engine_snapshot_set_tag(struct engine_snap *s, const char *tag)
{
	int rc = cas_tag_check(tag);
	if (rc < 0)
		return rc;
	/* Tags do not move: refuse one that is taken, in the store or by a
	 * snapshot still in flight here, before any byte is ingested.
	 * cas_commit checks again under the writer lock. */
	rc = cas_tag_free(s->e->store, tag);
	if (rc < 0)
		return rc;
	char *t = strdup(tag);
	if (!t)
		return crest_errf(-ENOMEM, "setting a tag");
	struct engine *e = s->e;
	pthread_mutex_lock(&e->lock);
	for (const struct engine_snap *o = e->cq_head; o && rc == 0; o = o->next)
		if (o != s && o->tag && !strcmp(o->tag, tag))
			rc = crest_errx(-EEXIST, "tag %s is taken by a snapshot still being written, and "
					"tags do not move", tag);
	if (rc == 0) {
		free(s->tag);
		s->tag = t;
		t = NULL;
	}
	pthread_mutex_unlock(&e->lock);
	free(t);
	return rc;
}

void engine_snapshot_set_parent(struct engine_snap *s, const uint8_t id[32], struct cas_manifest *parent)
{
	s->m->has_parent = true;
	memcpy(s->m->parent, id, 32);
	cas_manifest_free(s->parent);
	s->parent = parent;
}

void engine_snapshot_expect(struct engine_snap *s, uint64_t bytes)
{
	atomic_fetch_add(&s->expect, bytes);
}

void engine_snapshot_progress(struct engine_snap *s, uint64_t *done, uint64_t *total)
{
	*done = atomic_load(&s->bytes_done);
	*total = atomic_load(&s->expect);
}

static int stream_new(struct engine_snap *s, const char *name, uint8_t type, bool memory,
		      struct engine_stream **out)
{
	struct engine_stream *st = calloc(1, sizeof(*st));
	struct engine_stream **ns = realloc(s->streams, (s->nstreams + 1) * sizeof(*ns));
	if (!st || !ns) {
		free(st);
		if (ns)
			s->streams = ns;
		return crest_errf(-ENOMEM, "adding stream %s", name);
	}
	s->streams = ns;
	st->snap = s;
	st->dp = memory ? &s->e->o.memory_chunking : &s->e->o.file_chunking;
	st->meta.type = type;
	if (cas_stream_set_str(&st->meta.name, name) < 0 || cas_stream_set_str(&st->meta.target, "") < 0 ||
	    cas_stream_set_str(&st->meta.meta, "") < 0) {
		free(st->meta.name);
		free(st->meta.target);
		free(st);
		return crest_errf(-ENOMEM, "adding stream %s", name);
	}
	s->streams[s->nstreams++] = st;
	/* A parent's chunk list stands in for index look-ups only while every
	 * pack the index names is there (cas_store_damaged). */
	if (s->parent && !cas_store_damaged(s->e->store)) {
		const struct cas_stream *h = cas_manifest_find(s->parent, name);
		if (h && h->nextents)
			st->hint = h;
		st->guided = st->hint && !memory && st->dp->kind == DEDUP_CDC && h->type == type &&
			     parent_chunked_alike(s, type);
	}
	pthread_mutex_init(&st->hint_lock, NULL);
	atomic_init(&st->hint_state, 0);
	*out = st;
	return 0;
}

int engine_add_entry(struct engine_snap *s, const char *name, uint8_t type, uint32_t mode,
		     int64_t mtime_ns, const char *target)
{
	struct engine_stream *st = NULL;
	int rc = stream_new(s, name, type, false, &st);
	if (rc < 0)
		return rc;
	st->meta.mode = mode;
	st->meta.mtime_ns = mtime_ns;
	st->closed = true;
	if (target && cas_stream_set_str(&st->meta.target, target) < 0)
		return crest_errf(-ENOMEM, "adding %s", name);
	return 0;
}

int engine_stream_open(struct engine_snap *s, const char *name, uint8_t type, bool memory,
		       struct engine_stream **out)
{
	return stream_new(s, name, type, memory, out);
}

struct cas_stream *engine_stream_meta(struct engine_stream *st)
{
	return &st->meta;
}

/* The release of memory given to a stream, called once the last segment
 * made of it is done: the producer holds one reference until every segment
 * is queued, so it cannot run while segments are still being added. NULL
 * (and release called at once) when there is no memory for it. */
static struct release_ref *rel_new(struct engine_stream *st, void (*release)(void *arg), void *arg)
{
	struct release_ref *rel = malloc(sizeof(*rel));
	if (!rel) {
		if (release)
			release(arg);
		crest_errf(-ENOMEM, "adding memory to stream %s", st->meta.name);
		return NULL;
	}
	rel->release = release;
	rel->arg = arg;
	atomic_init(&rel->refs, 1);
	return rel;
}

static void rel_drop(struct release_ref *rel)
{
	if (atomic_fetch_sub(&rel->refs, 1) == 1) {
		if (rel->release)
			rel->release(rel->arg);
		free(rel);
	}
}

static void fd_source_close(void *arg)
{
	struct fd_source *f = arg;
	close(f->fd);
	free(f);
}

int engine_stream_add_fd(struct engine_stream *st, int fd, const char *what)
{
	struct engine *e = st->snap->e;
	struct stat sb;
	if (fstat(fd, &sb) < 0)
		return crest_errf(-errno, "cannot stat %s", what);
	const uint64_t size = (uint64_t)sb.st_size, seg = e->o.segment_bytes;
	struct fd_source *src = malloc(sizeof(*src) + strlen(what) + 1);
	if (!src)
		return crest_errf(-ENOMEM, "reading %s", what);
	strcpy(src->what, what);
	/* The workers read after this returns, and the caller may close fd
	 * then: they read a dup of it, closed when the last segment is done. */
	src->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (src->fd < 0) {
		const int rc = crest_errf(-errno, "cannot read %s", what);
		free(src);
		return rc;
	}
	struct release_ref *rel = rel_new(st, fd_source_close, src);
	if (!rel)
		return -ENOMEM;
	int rc = 0;
	uint64_t pos = st->size;  /* a stream read from one fd starts at 0 */
	while (rc == 0 && pos < size) {
		off_t data = lseek(fd, (off_t)pos, SEEK_DATA);
		if (data < 0)
			data = errno == ENXIO ? (off_t)size : (off_t)pos;  /* ENXIO: only a hole is left */
		if ((uint64_t)data > pos) {
			rc = seg_submit(st, NULL, (uint64_t)data - pos, NULL, NULL, NULL);
			if (rc < 0)
				break;
			pos = (uint64_t)data;
		}
		if (pos >= size)
			break;
		off_t hole = lseek(fd, (off_t)pos, SEEK_HOLE);
		uint64_t end = hole < 0 || (uint64_t)hole > size ? size : (uint64_t)hole;
		while (pos < end) {
			if (atomic_load(&st->snap->cancelled)) {
				rc = crest_errx(-EINTR, "interrupted while reading %s", what);
				break;
			}
			/* Cut at multiples of the segment size: the same bytes give
			 * the same segments, so CDC cuts stay put between snapshots. */
			uint64_t next = (pos / seg + 1) * seg;
			size_t len = (size_t)((next < end ? next : end) - pos);
			void *buf;
			rc = eng_worker_staging_get(e, &buf);
			if (rc < 0)
				break;
			const struct seg how = { .src = src, .src_off = pos };
			atomic_fetch_add(&rel->refs, 1);
			rc = seg_submit(st, NULL, len, buf, rel, &how);
			if (rc < 0) {
				atomic_fetch_sub(&rel->refs, 1);
				eng_worker_staging_put(e, buf);
				break;
			}
			pos += len;
		}
	}
	rel_drop(rel);
	return rc;
}

int engine_stream_add_memory(struct engine_stream *st, const void *p, size_t len,
			     void (*release)(void *arg), void *arg)
{
	struct engine *e = st->snap->e;
	if (len == 0) {
		if (release)
			release(arg);
		return 0;
	}
	struct release_ref *rel = rel_new(st, release, arg);
	if (!rel)
		return -ENOMEM;
	const uint8_t *base = p;
	const uint64_t seg = e->o.segment_bytes;
	int rc = 0;
	for (size_t off = 0; off < len;) {
		/* Cut at multiples of the segment size in the stream, as for files. */
		size_t n = (size_t)((st->size / seg + 1) * seg - st->size);
		if (n > len - off)
			n = len - off;
		atomic_fetch_add(&rel->refs, 1);
		rc = seg_submit(st, base + off, n, NULL, rel, NULL);
		if (rc < 0) {
			atomic_fetch_sub(&rel->refs, 1);
			break;
		}
		off += n;
	}
	rel_drop(rel);
	return rc;
}

bool eng_hint_offsets(struct engine_stream *st)
{
	if (!st->hint)
		return false;
	int state = atomic_load_explicit(&st->hint_state, memory_order_acquire);
	if (state)
		return state > 0;
	pthread_mutex_lock(&st->hint_lock);
	state = atomic_load_explicit(&st->hint_state, memory_order_relaxed);
	if (!state) {
		const struct cas_stream *h = st->hint;
		st->hint_off = malloc(h->nextents * sizeof(*st->hint_off));
		if (st->hint_off) {
			uint64_t o = 0;
			for (uint64_t i = 0; i < h->nextents; i++) {
				st->hint_off[i] = o;
				o += h->ext[i].len;
			}
		}
		state = st->hint_off ? 1 : -1;
		atomic_store_explicit(&st->hint_state, state, memory_order_release);
	}
	pthread_mutex_unlock(&st->hint_lock);
	return state > 0;
}

bool engine_stream_parent(const struct engine_stream *st, uint8_t id[32], uint64_t *size)
{
	const struct engine_snap *s = st->snap;
	if (!st->hint || !s->m->has_parent)
		return false;
	memcpy(id, s->m->parent, 32);
	*size = st->hint->size;
	return true;
}

uint32_t engine_stream_fixed_chunk(const struct engine_stream *st)
{
	return st->dp->kind == DEDUP_FIXED ? st->dp->avg : 0;
}

int engine_stream_add_chunks(struct engine_stream *st, uint64_t len, const uint32_t *idx, size_t n,
			     const void *data, const uint8_t *ids, void (*release)(void *arg), void *arg)
{
	struct engine *e = st->snap->e;
	const uint32_t c = st->dp->avg;
	const uint64_t nch = (len + c - 1) / c;
	int rc = 0;
	if (st->dp->kind != DEDUP_FIXED || st->size % c || (idx && n && !data) || (!idx && len && !data))
		rc = crest_errx(-EINVAL, "stream %s: chunks can be given only whole, in fixed-size chunking, "
				"and with their data", st->meta.name);
	for (size_t i = 0; rc == 0 && idx && i < n; i++)
		if (idx[i] >= nch || (i && idx[i] <= idx[i - 1]))
			rc = crest_errx(-EINVAL, "stream %s: changed chunk %zu (%u) is out of order or past "
					"the %llu chunks given", st->meta.name, i, idx[i], (unsigned long long)nch);
	if (rc == 0 && idx && !st->hint && n < nch)
		rc = crest_errx(-EINVAL, "stream %s: chunks given as unchanged, but the parent has no "
				"stream of that name", st->meta.name);
	if (rc < 0 || len == 0) {
		if (release)
			release(arg);
		return rc;
	}
	struct release_ref *rel = rel_new(st, release, arg);
	if (!rel)
		return -ENOMEM;
	const uint8_t *base = data;
	const uint64_t seg = e->o.segment_bytes;
	size_t j = 0;   /* the first chunk in data not yet in a segment */
	for (uint64_t off = 0; off < len;) {
		uint64_t sn = (st->size / seg + 1) * seg - st->size;
		if (sn > len - off)
			sn = len - off;
		const uint64_t first = off / c, last = (off + sn + c - 1) / c;   /* chunks [first, last) */
		size_t k = idx ? j : (size_t)first;
		if (idx)
			while (k < n && idx[k] < last)
				k++;
		const size_t j0 = idx ? j : (size_t)first;
		const struct seg how = { .ids = ids ? ids + (uint64_t)j0 * 32 : NULL, .sparse = idx != NULL,
					 .idx = idx ? idx + j : NULL, .nidx = k - j0, .idx_base = first };
		atomic_fetch_add(&rel->refs, 1);
		rc = seg_submit(st, base ? base + (uint64_t)j0 * c : NULL, (size_t)sn, NULL, rel, &how);
		if (rc < 0) {
			atomic_fetch_sub(&rel->refs, 1);
			break;
		}
		j = k;
		off += sn;
	}
	rel_drop(rel);
	return rc;
}

int engine_stream_close(struct engine_stream *st)
{
	st->closed = true;
	return 0;
}

int engine_snapshot_seal(struct engine_snap *s)
{
	struct engine *e = s->e;
	uint64_t logical = 0;
	for (size_t i = 0; i < s->nstreams; i++)
		logical += s->streams[i]->size;
	pthread_mutex_lock(&e->lock);
	s->sealed = true;
	s->m->logical_bytes = logical;
	pthread_cond_broadcast(&e->snap_cond);
	pthread_mutex_unlock(&e->lock);
	return 0;
}

/* ---- commit ---- */

static void snap_free(struct engine_snap *s)
{
	for (size_t i = 0; i < s->nstreams; i++) {
		struct engine_stream *st = s->streams[i];
		for (size_t j = 0; j < st->nsegs; j++) {
			free(st->segs[j]->ext);
			free(st->segs[j]);
		}
		free(st->segs);
		free(st->hint_off);
		pthread_mutex_destroy(&st->hint_lock);
		free(st->meta.name);
		free(st->meta.target);
		free(st->meta.meta);
		free(st->meta.ext);
		free(st);
	}
	free(s->streams);
	cas_manifest_free(s->m);
	cas_manifest_free(s->parent);
	free(s->tag);
	free(s);
}

/* A stream's extents, segment after segment, with neighbouring holes made
 * one. Each segment is merged on its own first (count, and whether it
 * starts and ends with a hole); then where each lands is known, and the
 * segments are copied in parallel: one thread took 77 ms for the 2M
 * extents (100 MB) of an 8 GiB region. A segment whose first hole joins
 * the previous output's keeps that hole's length aside (lead), added
 * after the copies, as the slot is another segment's. */
struct seg_plan {
	uint64_t cnt, at, lead;       /* merged extents; first output slot */
	bool first_hole, last_hole, joins;
};

struct build_job {
	struct seg *const *segs;
	struct seg_plan *sp;
	struct cas_extent *ext;
};

static int seg_count(struct par *p, void *tls, size_t j)
{
	(void)tls;
	const struct build_job *b = p->arg;
	const struct seg *sg = b->segs[j];
	struct seg_plan *sp = &b->sp[j];
	uint64_t n = 0;
	for (size_t x = 0; x < sg->next_ext; x++)
		n += !(sg->ext[x].hole && x && sg->ext[x - 1].hole);
	sp->cnt = n;
	sp->first_hole = sg->next_ext && sg->ext[0].hole;
	sp->last_hole = sg->next_ext && sg->ext[sg->next_ext - 1].hole;
	return 0;
}

static int seg_copy(struct par *p, void *tls, size_t j)
{
	(void)tls;
	const struct build_job *b = p->arg;
	const struct seg *sg = b->segs[j];
	struct seg_plan *sp = &b->sp[j];
	/* A joined first hole's slot is the previous segment's last. */
	struct cas_extent *out = b->ext + sp->at + sp->joins;
	uint64_t k = 0;
	bool lead = sp->joins;   /* still in the joined hole */
	for (size_t x = 0; x < sg->next_ext; x++) {
		const struct cas_extent *e = &sg->ext[x];
		if (lead && (x == 0 || e->hole)) {
			sp->lead += e->len;
		} else if (e->hole && x && sg->ext[x - 1].hole) {
			out[k - 1].len += e->len;
		} else {
			lead = false;
			out[k++] = *e;
		}
	}
	assert(k + sp->joins == sp->cnt);
	return 0;
}

static int stream_extents(struct engine_stream *st, struct cas_extent **out, uint64_t *nout)
{
	struct seg_plan *sp = calloc(st->nsegs ? st->nsegs : 1, sizeof(*sp));
	if (!sp)
		return -ENOMEM;
	struct build_job b = { .segs = st->segs, .sp = sp };
	struct par p1 = { .n = st->nsegs, .fn = seg_count, .arg = &b };
	int rc = par_run(&p1, 0, NULL, 0);
	uint64_t k = 0;
	bool hole = false;   /* the last output so far is a hole */
	for (size_t j = 0; rc == 0 && j < st->nsegs; j++) {
		if (!sp[j].cnt)
			continue;
		sp[j].joins = hole && sp[j].first_hole;
		sp[j].at = sp[j].joins ? k - 1 : k;
		k = sp[j].at + sp[j].cnt;
		hole = sp[j].last_hole;
	}
	if (rc == 0 && !(b.ext = malloc((k ? k : 1) * sizeof(*b.ext))))
		rc = -ENOMEM;
	if (rc == 0) {
		struct par p2 = { .n = st->nsegs, .fn = seg_copy, .arg = &b };
		rc = par_run(&p2, 0, NULL, 0);
	}
	for (size_t j = 0; rc == 0 && j < st->nsegs; j++)
		if (sp[j].cnt && sp[j].joins)
			b.ext[sp[j].at].len += sp[j].lead;
	free(sp);
	if (rc < 0) {
		free(b.ext);
		return rc;
	}
	*out = b.ext;
	*nout = k;
	return 0;
}

/* Moves each stream's extents, segment by segment, into the manifest. */
static int snap_build_manifest(struct engine_snap *s)
{
	for (size_t i = 0; i < s->nstreams; i++) {
		struct engine_stream *st = s->streams[i];
		struct cas_extent *ext;
		uint64_t k;
		if (stream_extents(st, &ext, &k) < 0)
			return crest_errf(-ENOMEM, "building the manifest");
		struct cas_stream *ms = cas_manifest_add_stream(s->m, st->meta.name, st->meta.type);
		if (!ms) {
			free(ext);
			return crest_errf(-ENOMEM, "building the manifest");
		}
		ms->mode = st->meta.mode;
		ms->mtime_ns = st->meta.mtime_ns;
		ms->size = st->size;
		if (cas_stream_set_str(&ms->target, st->meta.target) < 0 ||
		    cas_stream_set_str(&ms->meta, st->meta.meta) < 0) {
			free(ext);
			return crest_errf(-ENOMEM, "building the manifest");
		}
		ms->ext = ext;
		ms->nextents = k;
	}
	return 0;
}

static double tv_s(const struct timeval *t)
{
	return (double)t->tv_sec + t->tv_usec / 1e6;
}

/* Commits s. Its index entries are left in *iep (*np of them) for the
 * caller to forget from the pending table once s is done (committer_main),
 * or NULL. */
static int snap_commit(struct engine *e, struct engine_snap *s, struct cas_index_entry **iep, size_t *np)
{
	struct cas_index_entry *ie;
	size_t n;
	*iep = NULL;
	*np = 0;
	/* Every chunk is named (the workers are done with the snapshot), so
	 * the manifest is built and encoded while the writer's last writes
	 * become durable, not after. */
	const uint64_t t0 = time_now_ns();
	int rc = snap_build_manifest(s);
	struct cas_encoded enc;
	if (rc == 0)
		rc = cas_commit_encode(e->store, s->m, s->parent, &enc, s->res.id);
	const bool encoded = rc == 0;
	const uint64_t t1 = time_now_ns();
	const int wrc = eng_writer_durable(e, atomic_load(&s->max_seq), &ie, &n);
	if (wrc < 0) {
		if (encoded)
			cas_encoded_free(&enc);
		return wrc;
	}
	const uint64_t t2 = time_now_ns();
	if (rc == 0)
		rc = cas_commit_encoded(e->store, ie, n, &enc, s->tag, s->res.id);
	if (e->trace) {
		/* The writers' share: their busy time (summed over the lanes)
		 * near the lanes times the chunks' time, and workers blocked on
		 * their queues, mean they, not the workers, bound the ingest. */
		pthread_mutex_lock(&e->wlock);
		const uint64_t busy = e->t_wbusy, wbytes = e->w_bytes, full = e->t_wfull;
		e->t_wbusy = e->w_bytes = e->t_wfull = 0;
		pthread_mutex_unlock(&e->wlock);
		fprintf(stderr, "crest trace: engine: snapshot's chunks done %.3f s after its begin; manifest built "
			"and encoded %.3f s; writes durable %.3f s later; commit of %zu index entries and the "
			"manifest %.3f s; %u writer%s busy %.3f s summed for %.1f MB (%.2f GB/s each), workers "
			"blocked on their queues %.3f s summed\n", (t0 - s->begin_ns) / 1e9, (t1 - t0) / 1e9,
			(t2 - t1) / 1e9, n, (time_now_ns() - t2) / 1e9, e->nlanes, e->nlanes == 1 ? "" : "s",
			busy / 1e9, wbytes / 1e6, busy ? wbytes / (double)busy : 0.0, full / 1e9);
		uint64_t wt[ENG_WT_N];
		for (int i = 0; i < ENG_WT_N; i++)
			wt[i] = atomic_exchange(&e->t_work[i], 0);
		/* The whole process's, so other work beside the snapshot's
		 * counts too; page faults and switches say whether the
		 * workers' time went to the kernel. */
		struct rusage ru;
		getrusage(RUSAGE_SELF, &ru);
		fprintf(stderr, "crest trace: engine: process since the snapshot began: user %.3f s, sys %.3f s, "
			"%ld minor faults, %ld voluntary and %ld involuntary switches\n",
			tv_s(&ru.ru_utime) - tv_s(&s->ru0.ru_utime), tv_s(&ru.ru_stime) - tv_s(&s->ru0.ru_stime),
			ru.ru_minflt - s->ru0.ru_minflt, ru.ru_nvcsw - s->ru0.ru_nvcsw, ru.ru_nivcsw - s->ru0.ru_nivcsw);
		fprintf(stderr, "crest trace: engine: %u workers busy %.3f s summed: zero check and hashing %.3f s, "
			"the parent's chunks %.3f s, index look-ups %.3f s, new chunks: entered in the pending table %.3f s, "
			"compressed %.3f s; batches flushed %.3f s; %llu chunks cut where the parent's end, "
			"unscanned\n", e->nworkers, wt[ENG_WT_ALL] / 1e9, wt[ENG_WT_HASH] / 1e9,
			wt[ENG_WT_KNOWN] / 1e9, wt[ENG_WT_LOOKUP] / 1e9, wt[ENG_WT_TABLE] / 1e9, wt[ENG_WT_NEW] / 1e9,
			wt[ENG_WT_FLUSH] / 1e9, (unsigned long long)atomic_load(&s->guided_chunks));
	}
	if (rc == 0 && n) {
		/* n == 0 when the snapshot added no chunk: pend may then still be
		 * NULL, and memmove(NULL, ...) is undefined even for 0 bytes. */
		eng_writer_committed(e, n);
		*iep = ie;
		*np = n;
	} else {
		free(ie);
	}
	return rc;
}

/* Takes a committed snapshot's ids out of the pending table. After the
 * snapshot is done, not before: the index has them, and a worker that
 * still finds them in the table finds them written (a seq), so nothing
 * waits for this but the next commit (the committer's own thread). For a
 * first 8 GiB checkpoint that is 2 M ids, 0.1 s on the 16-core host. */
static void snap_forget(struct engine *e, struct cas_index_entry *ie, size_t n)
{
	if (!ie)
		return;
	const uint64_t t = time_now_ns();
	eng_pending_forget(e, ie, n);
	free(ie);
	if (e->trace)
		fprintf(stderr, "crest trace: engine: %zu pending entries forgotten %.3f s, after the commit\n", n,
			(time_now_ns() - t) / 1e9);
}

/* Under e->lock, with the commit queue empty: no snapshot is in flight
 * that could reference a write the writer failed, and none can begin.
 * Once the writer is idle, everything written and not committed is
 * forgotten (the table, the pending index entries; the store starts a fresh
 * pack and cuts the old ones' unreferenced ends), and werr is cleared. When
 * the store cannot do that yet, werr stays, with the new reason, and the
 * next snapshot to fail tries again. */
static void engine_recover(struct engine *e)
{
	/* No worker is busy: every node has a seq, none is PENDING. */
	if (eng_writer_recover(e))
		eng_pending_clear(e);
}

static void *committer_main(void *arg)
{
	struct engine *e = arg;
	pthread_mutex_lock(&e->lock);
	for (;;) {
		struct engine_snap *s = e->cq_head;
		while (!(s && s->sealed && s->segs_done == s->segs_total)) {
			if (!s && e->stop_committer)
				goto out;
			pthread_cond_wait(&e->snap_cond, &e->lock);
			s = e->cq_head;
		}
		e->cq_head = s->next;
		if (!e->cq_head)
			e->cq_tail = NULL;
		/* A cancel seen here fails the snapshot; one that comes
		 * after this point is too late: the commit goes on. */
		if (atomic_load(&s->cancelled))
			eng_snap_fail(s, -EINTR, "interrupted: nothing committed");
		int err = s->err;
		bool aborted = s->aborted;
		pthread_mutex_unlock(&e->lock);

		struct cas_index_entry *ie = NULL;
		size_t nie = 0;
		int rc = err || aborted ? 0 : snap_commit(e, s, &ie, &nie);
		char msg[1024];
		if (rc < 0)
			crest_errcpy(msg, sizeof(msg));

		pthread_mutex_lock(&e->lock);
		if (rc < 0)
			eng_snap_fail(s, rc, msg);
		struct engine_result *r = &s->res;
		r->logical_bytes = s->m->logical_bytes;
		r->zero_bytes = atomic_load(&s->zero_bytes);
		r->new_bytes = atomic_load(&s->new_bytes);
		r->stored_bytes = atomic_load(&s->stored_bytes);
		r->chunks = atomic_load(&s->chunks);
		r->new_chunks = atomic_load(&s->new_chunks);
		r->guided_chunks = atomic_load(&s->guided_chunks);
		r->ingest_ns = time_now_ns() - s->begin_ns;
		/* Before s is done: whoever waits for it may begin the next one
		 * at once, and it should find the engine working again. */
		if (!e->cq_head)
			engine_recover(e);
		s->done = true;
		if (s->detached) {
			pthread_mutex_unlock(&e->lock);
			snap_free(s);
			pthread_mutex_lock(&e->lock);
		}
		pthread_cond_broadcast(&e->snap_cond);
		if (ie) {
			pthread_mutex_unlock(&e->lock);
			snap_forget(e, ie, nie);
			pthread_mutex_lock(&e->lock);
		}
	}
out:
	pthread_mutex_unlock(&e->lock);
	return NULL;
}

bool engine_snapshot_timedwait(struct engine_snap *s, uint64_t timeout_ns)
{
	struct engine *e = s->e;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t t = (uint64_t)ts.tv_nsec + timeout_ns;
	ts.tv_sec += (time_t)(t / 1000000000);
	ts.tv_nsec = (long)(t % 1000000000);
	pthread_mutex_lock(&e->lock);
	while (!s->done && pthread_cond_timedwait(&e->snap_cond, &e->lock, &ts) == 0)
		;
	bool done = s->done;
	pthread_mutex_unlock(&e->lock);
	return done;
}

int engine_snapshot_wait(struct engine_snap *s, struct engine_result *r)
{
	struct engine *e = s->e;
	pthread_mutex_lock(&e->lock);
	while (!s->done)
		pthread_cond_wait(&e->snap_cond, &e->lock);
	pthread_mutex_unlock(&e->lock);
	int rc = s->err;
	if (rc < 0)
		crest_errset_str(s->errmsg);
	if (r)
		*r = s->res;
	snap_free(s);
	return rc;
}

void engine_snapshot_cancel(struct engine_snap *s)
{
	atomic_store(&s->cancelled, 1);
}

void engine_snapshot_abort(struct engine_snap *s)
{
	struct engine *e = s->e;
	pthread_mutex_lock(&e->lock);
	s->aborted = true;
	s->sealed = true;
	s->detached = true;
	bool done = s->done;
	pthread_cond_broadcast(&e->snap_cond);
	pthread_mutex_unlock(&e->lock);
	if (done)
		snap_free(s);
}

/* ---- open and close ---- */

int engine_open(struct cas_store *store, const struct engine_opts *o, struct engine **out)
{
	struct engine *e = calloc(1, sizeof(*e));
	if (!e)
		return crest_errf(-ENOMEM, "starting the engine");
	engine_opts_default(&e->o);
	if (o) {
		if (o->workers)
			e->o.workers = o->workers;
		if (o->staging_bytes)
			e->o.staging_bytes = o->staging_bytes;
		if (o->segment_bytes)
			e->o.segment_bytes = o->segment_bytes;
		if (o->write_queue_bytes)
			e->o.write_queue_bytes = o->write_queue_bytes;
		if (o->lanes)
			e->o.lanes = o->lanes;
		if (o->file_chunking.avg)
			e->o.file_chunking = o->file_chunking;
		if (o->memory_chunking.avg)
			e->o.memory_chunking = o->memory_chunking;
	}
	if (e->o.segment_bytes < e->o.file_chunking.max || e->o.segment_bytes < e->o.memory_chunking.max)
		e->o.segment_bytes = e->o.file_chunking.max > e->o.memory_chunking.max
					     ? e->o.file_chunking.max : e->o.memory_chunking.max;
	e->store = store;
	/* Lanes: one writer thread each. One thread copies about 2.3 GB/s into
	 * the page cache, four 7.8 (bench/store/pack_write.c, 16 cores). Once
	 * the GPU's ids spared the workers the hashing, 4 lanes bound a first
	 * 8 GiB library checkpoint on the H100 host (its 16 workers blocked on
	 * the queues 6-7 s summed; ingest 2.32-2.48 s), and 8 did not (2.19-
	 * 2.26 s): half the workers, up to CAS_LANES_MAX.
	 * CREST_PACK_LANES (1 to CAS_LANES_MAX) is for tests and benchmarks. */
	if (!e->o.lanes) {
		e->o.lanes = e->o.workers / 2;
		e->o.lanes = e->o.lanes < 1 ? 1 : e->o.lanes > CAS_LANES_MAX ? CAS_LANES_MAX : e->o.lanes;
	}
	const char *lanes = getenv("CREST_PACK_LANES");
	if (lanes && atoi(lanes) > 0)
		e->o.lanes = (unsigned)atoi(lanes);
	e->nlanes = cas_pack_lanes_set(store, e->o.lanes);
	e->trace = getenv("CREST_TRACE") != NULL;
	const char *sl = getenv("CREST_TEST_LOOKUP_SLEEP_US");
	if (sl)
		e->lookup_sleep_us = (unsigned)strtoul(sl, NULL, 10);
	const char *fault = getenv("CREST_FAULT_WRITE");
	if (fault)
		e->fault_write = strtoull(fault, NULL, 10);
	/* Staging buffers: within staging_bytes, and no more than the workers
	 * can be reading or working on with a few queued behind each. The
	 * producer only cuts a file into segments (the workers read them), so
	 * it runs ahead and takes every buffer the bound allows, and each is
	 * memory touched for the first time. Where a first touch is dear (13-15
	 * us a page on the development VM, 2026-11-27, even for memory freed
	 * and touched again), 256 MiB of staging was 65 K of a 1 GiB put's
	 * 88 K page faults on 2 cores. */
	e->maxbufs = e->o.staging_bytes / e->o.segment_bytes;
	if (e->maxbufs > (size_t)ENGINE_STAGING_PER_WORKER * e->o.workers)
		e->maxbufs = (size_t)ENGINE_STAGING_PER_WORKER * e->o.workers;
	if (e->maxbufs < 2)
		e->maxbufs = 2;
	e->free_bufs = calloc(e->maxbufs, sizeof(void *));
	e->workers = calloc(e->o.workers, sizeof(pthread_t));
	if (!e->free_bufs || !e->workers) {
		free(e->free_bufs);
		free(e->workers);
		free(e);
		return crest_errf(-ENOMEM, "starting the engine");
	}
	pthread_mutex_init(&e->lock, NULL);
	pthread_cond_init(&e->job_cond, NULL);
	pthread_cond_init(&e->snap_cond, NULL);
	pthread_mutex_init(&e->stage_lock, NULL);
	pthread_cond_init(&e->stage_cond, NULL);
	pthread_mutex_init(&e->wlock, NULL);
	pthread_cond_init(&e->wcond, NULL);
	pthread_mutex_init(&e->seq_lock, NULL);
	pthread_cond_init(&e->seq_cond, NULL);
	for (int i = 0; i < NSTRIPES; i++)
		pthread_mutex_init(&e->stripes[i].lock, NULL);

	int rc = 0;
	for (unsigned i = 0; rc == 0 && i < e->nlanes; i++) {
		e->lanes[i].e = e;
		rc = pthread_create(&e->lanes[i].thread, NULL, eng_writer_main, &e->lanes[i]);
		e->lanes[i].started = rc == 0;
		if (rc == 0)
			pthread_setname_np(e->lanes[i].thread, "crest-writer");
	}
	if (rc == 0) {
		rc = pthread_create(&e->committer, NULL, committer_main, e);
		e->committer_started = rc == 0;
		if (rc == 0)
			pthread_setname_np(e->committer, "crest-commit");
	}
	/* Named, so that top -H and perf tell the engine's threads apart
	 * from the job's. */
	for (unsigned i = 0; rc == 0 && i < e->o.workers; i++) {
		rc = pthread_create(&e->workers[i], NULL, eng_worker_main, e);
		if (rc == 0) {
			e->nworkers++;
			pthread_setname_np(e->workers[i], "crest-worker");
		}
	}
	if (rc != 0) {
		engine_close(e);
		return crest_errf(-rc, "starting engine threads");
	}
	*out = e;
	return 0;
}

void engine_close(struct engine *e)
{
	if (!e)
		return;
	/* Snapshots never sealed are dropped, not committed. */
	pthread_mutex_lock(&e->lock);
	for (struct engine_snap *s = e->cq_head; s; s = s->next)
		if (!s->sealed) {
			s->sealed = s->aborted = s->detached = true;
		}
	e->stop_committer = true;
	pthread_cond_broadcast(&e->snap_cond);
	pthread_mutex_unlock(&e->lock);
	if (e->committer_started)
		pthread_join(e->committer, NULL);

	pthread_mutex_lock(&e->lock);
	e->stop_workers = true;
	pthread_cond_broadcast(&e->job_cond);
	pthread_mutex_unlock(&e->lock);
	for (unsigned i = 0; i < e->nworkers; i++)
		pthread_join(e->workers[i], NULL);

	pthread_mutex_lock(&e->wlock);
	e->wstop = true;
	pthread_cond_broadcast(&e->wcond);
	pthread_mutex_unlock(&e->wlock);
	for (unsigned i = 0; i < e->nlanes; i++)
		if (e->lanes[i].started)
			pthread_join(e->lanes[i].thread, NULL);

	for (size_t i = 0; i < e->nfree; i++)
		free(e->free_bufs[i]);
	free(e->free_bufs);
	free(e->workers);
	free(e->pend);
	for (size_t i = 0; i < e->narenas; i++)
		free(e->arenas[i]);
	free(e->arenas);
	free(e->arena_caps);
	for (int i = 0; i < NSTRIPES; i++) {
		struct stripe *s = &e->stripes[i];
		for (size_t b = 0; b < s->nb; b++)
			for (struct node *n = s->b[b], *next; n; n = next) {
				next = n->next;
				free(n);
			}
		free(s->b);
		pthread_mutex_destroy(&s->lock);
	}
	free(e);
}
