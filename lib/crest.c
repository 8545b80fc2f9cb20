/*
 * crest.c - libcrest: the public API of include/crest.h.
 *
 * Owns the handles (a process-wide table of tokens), the registered regions
 * and the checkpoints in flight of each handle; the work is done below it:
 * capture/regions.c copies regions into the engine through the staging
 * pool, restore/regions.c streams a snapshot back into them. Calls capture/,
 * restore/, engine/, gpu/, cas/ and util/; nothing calls it but a user.
 *
 * The store is held while it is used, and given up between checkpoints to
 * another writer that waits for it (issue 12: `casctl gc` beside a job).
 * The writer lock (cas_open CAS_WRITE) and the engine on it are taken at
 * crest_open. The handle's keeper thread lets them go once no checkpoint is
 * in flight (every one committed or failed) and either another writer
 * waits for the lock (gc, a `crest checkpoint` ingest: they hold
 * STORE/lock.wants while they wait, cas_lock_wanted) or, with
 * $CREST_STORE_IDLE_MS set, the store has been idle for that long. Having
 * stepped aside for a writer, the keeper takes the store back once that
 * writer is done, without the caller's thread.
 *
 * A checkpoint that finds the store let go does not wait for it: the
 * regions are held in host memory (capture_hold: in the staging pool's
 * free slices where they fit, no engine using them meanwhile; past them in
 * new memory) and the call returns; the
 * keeper opens the store (waiting while gc holds it) and ingests the held
 * copies in order, as the checkpoints they would have been then (branch,
 * parent, labels, tag). crest_wait on one waits for that. Held copies take
 * at most half the machine's memory together; past that, or when memory
 * cannot be had, a checkpoint waits for the store as before. Restores,
 * blob reads and branch switches wait for the store (store_up), after the
 * held checkpoints are ingested, so they see them.
 *
 * Letting go before (only with $CREST_STORE_IDLE_MS, in the caller's
 * thread) cost the next checkpoint's stall a reopen: 4-5 s after an 8 GiB
 * checkpoint on the H100 host (gpu_bench's unchanged second checkpoint:
 * 3.96-5.0 s against 0.16 s). A session nobody waits for keeps the store,
 * so that figure is unchanged. Why letting go is safe:
 *  - Chunks of an ingest in flight are never collected: the lock is held
 *    from before engine_snapshot_begin to after the commit (the keeper lets
 *    go only when every snapshot is done, and a held checkpoint has no
 *    engine snapshot until the lock is back), so gc cannot run while a
 *    chunk is written and not yet named by a committed manifest.
 *  - gc holds the lock for its whole run, so its mark sees every committed
 *    snapshot, ours included, and nothing commits while it sweeps.
 *  - What the handle remembers across a let-go is the parent's id, not its
 *    manifest: a manifest's chunk list tells the workers which chunks the
 *    store has (no look-up), which is only true while no gc ran since it
 *    was loaded. So the hint (c->parent) is freed whenever the store is let
 *    go and loaded again from the store just opened; a parent that gc
 *    expired meanwhile (it keeps branch heads, so only one another writer
 *    superseded) is replaced by the branch's head, as after a failed commit.
 *  - A crash leaves what it left before: a writer killed mid-ingest leaves
 *    bytes past the last commit, cut by the next writer's open (cas.h); a
 *    let-go is an ordinary cas_close. A process killed with checkpoints
 *    held loses them, as it loses checkpoints in flight: none was committed
 *    or reported so.
 */
#include "crest.h"

#include "capture/regions.h"
#include "cas/cas.h"
#include "cas/history.h"
#include "cas/jobjoin.h"
#include "cas/jobsnap.h"
#include "engine/engine.h"
#include "gpu/cudrv.h"
#include "gpu/hostcache.h"
#include "gpu/pool.h"
#include "lib/push.h"
#include "restore/regions.h"
#include "restore/restore.h"
#include "util/err.h"
#include "util/parse.h"
#include "util/progress.h"
#include "util/sha256.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define SEGMENT ENGINE_SEGMENT_BYTES       /* slices are whole segments */

struct region {
	uint64_t id;
	char *name;
	uint8_t *ptr;
	size_t size;
	enum crest_mem mem;
	CUcontext ctx;                /* device regions */
	struct capture_digests *dig;  /* its chunks' digests on the GPU (capture/) */
};

/* A checkpoint taken while the store was let go: its copy, and what the
 * engine snapshot gets once the store is back (held_ingest). */
struct held_ckpt {
	struct capture_held *h;
	char *tag;
	char **labels;
	size_t nlabels;
	uint64_t bytes;
};

struct pending {
	uint64_t id;
	/* NULL once done (the keeper waited for it), and while held. */
	struct engine_snap *snap;
	struct held_ckpt *held;       /* waiting for the store; NULL once ingested */
	uint64_t stall_ns, wait_ns;
	unsigned rounds;
	bool cached;                  /* its copies went into the host cache too */
	uint64_t cache_gen;           /* c->cache_gen when they did */
	/* Its outcome, when the keeper collected it before letting the store go. */
	bool done;
	int rc;
	char *msg;                    /* the failure's message, or NULL */
	struct engine_result er;
};

struct crest {
	struct crest_options o;
	struct cas_store *store;
	struct engine *eng;
	char *store_dir;     /* to open it again (store_up) */
	struct pool *pool;
	const struct cudrv *d;        /* NULL: no GPU at open */
	CUdevice dev;
	CUcontext pctx;               /* retained primary context, or NULL */
	struct region *regions;
	size_t nregions, capregions;
	uint64_t next_region;
	struct capture_copier *copier;
	struct pending *ckpts;
	size_t nckpts, capckpts;
	uint64_t next_ckpt;
	/* The next checkpoint's branch and parent (cas/history.h): the parent
	 * is the newest checkpoint waited for, else what crest_open,
	 * crest_set_branch or crest_restore chose. */
	char *branch;
	bool has_parent;
	uint8_t parent_id[32];
	struct cas_manifest *parent;  /* its manifest (dedup hints), or NULL */
	/* Only checkpoints from this number on may become the parent when
	 * waited for: not one issued before a branch switch or a restore, nor
	 * one older than the parent (waited for out of order). */
	uint64_t parent_from;
	/* The keeper (the notes at the top): mu covers store, eng, parent and
	 * ckpts against it; the caller's thread holds it for a whole call that
	 * uses the store, the keeper only to let the store go. */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_t keeper;
	bool keeper_on, quit;
	uint64_t used_ns;             /* when a call last used the store */
	uint64_t idle_ns;             /* $CREST_STORE_IDLE_MS */
	bool stepped;                 /* let go for a waiting writer: take it back after */
	bool opening;                 /* the keeper opens the store, without mu */
	uint64_t held_bytes;          /* memory of the held checkpoints */
	/* The host cache of the device regions (crest_options.host_cache;
	 * gpu/hostcache.h), or NULL; its directory is c->o.host_cache, ours. */
	struct hostcache *cache;
	bool cache_said;              /* the cache's failure was said on stderr */
	/* Counts the checkpoints whose copies went into the cache: the hint
	 * may name a checkpoint only while no later one has written it,
	 * including one that failed after its first copies (crest_wait). */
	uint64_t cache_gen;
	struct lib_pusher *pusher;    /* crest_options.push_to, or NULL */
};

/* ---- handles ---- */

/*
 * A crest_t * given to the caller is a token, never the address of the
 * struct: slot and generation of a process-wide table, odd so that no real
 * pointer matches one. Every public function looks the token up under the
 * lock and gets the struct only if the slot is live and of the same
 * generation. A closed handle (its slot freed, or reused by a later
 * crest_open with the next generation), a handle closed twice, or a pointer
 * that never came from crest_open is -EBADF and is never dereferenced. The
 * lock covers the lookup only: a handle is still used by one thread at a
 * time (crest.h), so no call is running on a handle while it is closed.
 */
#define HANDLE_SLOTS 65535u

struct handle_slot {
	crest_t *c;          /* NULL: free */
	uint32_t gen;
};

static pthread_mutex_t handles_lock = PTHREAD_MUTEX_INITIALIZER;
static struct handle_slot *handles;
static size_t nhandles;

static crest_t *handle_token(size_t slot, uint32_t gen)
{
	return (crest_t *)(((uintptr_t)gen << 17) | ((uintptr_t)(slot + 1) << 1) | 1u);
}

/* A slot for c; *out its token. */
static int handle_add(crest_t *c, crest_t **out)
{
	int rc = 0;
	pthread_mutex_lock(&handles_lock);
	size_t i = 0;
	while (i < nhandles && handles[i].c)
		i++;
	if (i == nhandles) {
		struct handle_slot *n = NULL;
		if (nhandles < HANDLE_SLOTS)
			n = realloc(handles, (nhandles + 1) * sizeof(*n));
		if (!n)
			rc = crest_errx(-EMFILE, "crest_open: %zu crest handles are open already", nhandles);
		else {
			handles = n;
			handles[nhandles++] = (struct handle_slot){ 0 };
		}
	}
	if (rc == 0) {
		handles[i].c = c;
		handles[i].gen = (handles[i].gen + 1) & 0x7fffffffu;   /* fits the token on 32-bit too */
		*out = handle_token(i, handles[i].gen);
	}
	pthread_mutex_unlock(&handles_lock);
	return rc;
}

/* The struct behind token h; with drop, the slot is freed in the same
 * critical section, so of two crest_close calls only one gets it. */
static int handle_get(const crest_t *h, const char *what, bool drop, crest_t **out)
{
	*out = NULL;
	if (!h)
		return crest_errx(-EBADF, "%s: the crest handle is NULL", what);
	const uintptr_t t = (uintptr_t)h;
	const size_t slot = ((t >> 1) & 0xffffu) - 1;
	const uint32_t gen = (uint32_t)(t >> 17);
	pthread_mutex_lock(&handles_lock);
	if ((t & 1) && slot < nhandles && handles[slot].c && handles[slot].gen == gen) {
		*out = handles[slot].c;
		if (drop)
			handles[slot].c = NULL;
	}
	pthread_mutex_unlock(&handles_lock);
	if (!*out)
		return crest_errx(-EBADF, "%s: not an open crest handle (closed, or never opened)", what);
	return 0;
}

void crest_options_init(struct crest_options *o)
{
	memset(o, 0, sizeof(*o));
	o->staging_bytes = (size_t)1 << 30;
	o->copy_streams = 4;
}

static struct region *region_find(crest_t *c, uint64_t id)
{
	for (size_t i = 0; i < c->nregions; i++)
		if (c->regions[i].id == id)
			return &c->regions[i];
	return NULL;
}

static struct region *region_by_name(crest_t *c, const char *name)
{
	for (size_t i = 0; i < c->nregions; i++)
		if (!strcmp(c->regions[i].name, name))
			return &c->regions[i];
	return NULL;
}

static struct pending *pending_find(crest_t *c, uint64_t id)
{
	for (size_t i = 0; i < c->nckpts; i++)
		if (c->ckpts[i].id == id)
			return &c->ckpts[i];
	return NULL;
}

/* ---- the driver ---- */

/* The driver, for a device region; a clear error when there is none. */
static int need_gpu(crest_t *c, const char *what)
{
	if (c->d)
		return 0;
	if (c->o.flags & CREST_OPEN_NO_GPU)
		return crest_errx(-ENODEV, "%s: the store was opened with CREST_OPEN_NO_GPU", what);
	const struct cudrv *d;
	int rc = cudrv_load(&d);
	if (rc < 0)
		return crest_errctx(rc, "%s", what);
	return crest_errx(-ENODEV, "%s: no NVIDIA GPU was visible when the store was opened", what);
}

/* ---- open and close ---- */

static int open_gpu(crest_t *c)
{
	const struct cudrv *d;
	if (c->o.flags & CREST_OPEN_NO_GPU)
		return 0;
	if (cudrv_load(&d) < 0)
		return 0;   /* host regions only; a device region says why */
	int n = 0;
	if (d->DeviceGetCount(&n) != CUDA_SUCCESS || n == 0)
		return 0;
	if (c->o.device < 0 || c->o.device >= n)
		return crest_errx(-EINVAL, "GPU %d does not exist: this machine has %d", c->o.device, n);
	int rc = cudrv_check(d, d->DeviceGet(&c->dev, c->o.device), "cuDeviceGet");
	if (rc == 0)
		rc = cudrv_check(d, d->DevicePrimaryCtxRetain(&c->pctx, c->dev),
				 "retaining the GPU's primary context (cuDevicePrimaryCtxRetain)");
	if (rc < 0)
		return rc;
	c->d = d;
	return 0;
}

/* A slice: a multiple of the engine segment, 1/16 of the pool, 4..64 MiB. */
static size_t slice_size(size_t pool)
{
	size_t s = pool / 16;
	if (s > (64u << 20))
		s = 64u << 20;
	s -= s % SEGMENT;
	return s < SEGMENT ? SEGMENT : s;
}

/* An engine on store s, with the handle's options (read only: the keeper
 * calls it without mu). */
static int engine_start(const crest_t *c, struct cas_store *s, struct engine **out)
{
	struct engine_opts eo;
	engine_opts_default(&eo);
	if (c->o.workers)
		eo.workers = c->o.workers;
	return engine_open(s, &eo, out);
}

/* Makes snapshot id the next checkpoint's parent. m, its manifest (taken),
 * only gives the workers hints: the parent is id also when m is NULL. */
static void parent_set(crest_t *c, const uint8_t id[32], struct cas_manifest *m)
{
	cas_manifest_free(c->parent);
	c->parent = m;
	c->has_parent = true;
	memcpy(c->parent_id, id, 32);
}

/* Makes the head of branch name the next checkpoint's parent, when the
 * branch has one; when no snapshot is on it, nothing changes and no message
 * is left behind (a new branch is no failure). */
static int parent_from_head(crest_t *c, const char *name)
{
	char saved[1024];
	crest_errcpy(saved, sizeof(saved));
	uint8_t id[32];
	int rc = cas_branch_head(c->store, name, id);
	if (rc == -ENOENT) {
		crest_errset_str(saved);
		return 0;
	}
	if (rc < 0)
		return rc;
	struct cas_manifest *m = NULL;
	if (cas_manifest_load(c->store, id, &m) < 0) {
		m = NULL;   /* the head is listed, so it is the parent; hints are optional */
		crest_errset_str(saved);
	}
	parent_set(c, id, m);
	return 0;
}

/* Whether every checkpoint in flight is committed or failed. */
static bool all_done(crest_t *c)
{
	for (size_t i = 0; i < c->nckpts; i++)
		if (!c->ckpts[i].done && (c->ckpts[i].held || !engine_snapshot_timedwait(c->ckpts[i].snap, 0)))
			return false;
	return true;
}

static bool any_held(const crest_t *c)
{
	for (size_t i = 0; i < c->nckpts; i++)
		if (c->ckpts[i].held)
			return true;
	return false;
}

static void held_free(crest_t *c, struct held_ckpt *k)
{
	if (!k)
		return;
	c->held_bytes -= k->bytes;
	capture_held_free(k->h);
	free(k->tag);
	for (size_t i = 0; i < k->nlabels; i++)
		free(k->labels[i]);
	free(k->labels);
	free(k);
}

/* Fails every held checkpoint with rc and msg (the store could not be had). */
static void held_fail(crest_t *c, int rc, const char *msg)
{
	for (size_t i = 0; i < c->nckpts; i++) {
		struct pending *p = &c->ckpts[i];
		if (!p->held)
			continue;
		held_free(c, p->held);
		p->held = NULL;
		p->done = true;
		p->rc = rc;
		p->msg = strdup(msg && *msg ? msg : "the store could not be opened again");
	}
}

/* A library snapshot begun on the handle's branch, with its labels, tag,
 * parent and expected bytes: what crest_checkpoint and held_ingest both
 * start with. Checkpoints issued before the parent's successor is waited
 * for all get the same parent; the manifest (hints) goes to the first.
 * Under mu, the store up. On failure nothing is left begun. */
static int snap_start(crest_t *c, const char *const *labels, size_t nlabels, const char *tag, uint64_t bytes,
		      struct engine_snap **out)
{
	struct engine_snap *snap = NULL;
	int rc = engine_snapshot_begin(c->eng, "library", &snap);
	if (rc < 0)
		return rc;
	if (cas_manifest_set_branch(engine_snapshot_manifest(snap), c->branch) < 0)
		rc = crest_errf(-ENOMEM, "putting the checkpoint on branch %s", c->branch);
	if (rc == 0)
		rc = capture_labels(snap, labels, nlabels);
	if (rc == 0 && tag)
		rc = engine_snapshot_set_tag(snap, tag);
	if (rc < 0) {
		engine_snapshot_abort(snap);
		return rc;
	}
	if (c->has_parent) {
		engine_snapshot_set_parent(snap, c->parent_id, c->parent);  /* takes it */
		c->parent = NULL;
	}
	engine_snapshot_expect(snap, bytes);
	*out = snap;
	return 0;
}

/* Each held checkpoint, oldest first, into an engine snapshot on the store
 * just opened, as crest_checkpoint would have made it then: on the
 * handle's branch, with its parent. Under mu, the store up. Nothing here
 * waits long: the engine reads the copies from its workers. */
static void held_ingest(crest_t *c)
{
	for (size_t i = 0; i < c->nckpts; i++) {
		struct pending *p = &c->ckpts[i];
		struct held_ckpt *k = p->held;
		if (!k)
			continue;
		struct engine_snap *snap = NULL;
		int rc = snap_start(c, (const char *const *)k->labels, k->nlabels, k->tag, k->bytes, &snap);
		if (rc == 0)
			rc = capture_held_ingest(k->h, snap);
		if (rc == 0)
			rc = engine_snapshot_seal(snap);
		held_free(c, k);
		p->held = NULL;
		if (rc < 0) {
			if (snap)
				engine_snapshot_abort(snap);
			char msg[1024];
			crest_errcpy(msg, sizeof(msg));
			p->done = true;
			p->rc = rc;
			p->msg = strdup(msg);
			continue;
		}
		p->snap = snap;
	}
	pthread_cond_broadcast(&c->cv);
}

/* Collects the outcome of every checkpoint in flight (blocking for those
 * not done), so that the engine can close; under mu. */
static void collect(crest_t *c)
{
	for (size_t i = 0; i < c->nckpts; i++) {
		struct pending *p = &c->ckpts[i];
		if (p->done || p->held)
			continue;
		p->rc = engine_snapshot_wait(p->snap, &p->er);
		p->snap = NULL;
		p->done = true;
		if (p->rc < 0) {
			char msg[1024];
			crest_errcpy(msg, sizeof(msg));
			p->msg = strdup(msg);   /* NULL: crest_wait says less */
		}
	}
}

/* Lets the store go: the engine, the writer lock, and the parent's manifest
 * (only a hint while the lock is held: the notes at the top). Under mu,
 * after collect. */
static void store_down(crest_t *c)
{
	if (c->eng)
		engine_close(c->eng);
	c->eng = NULL;
	cas_close(c->store);
	c->store = NULL;
	cas_manifest_free(c->parent);
	c->parent = NULL;
}

/* The store and its engine, opened (or reopened after a failed commit:
 * the store then refuses commits until opened again, and its next open
 * puts it right; see cas_commit's notes). Waits for the lock while another
 * writer (gc) holds it. The parent's manifest is loaded again from the
 * store just opened; a parent that is no longer there gives way to the
 * branch's head. Under mu. */
static int store_up(crest_t *c)
{
	/* The keeper opens it without mu: wait for that rather than take a
	 * second lock of this process's own. */
	while (c->opening)
		pthread_cond_wait(&c->cv, &c->mu);
	if (c->store && c->eng && !cas_store_broken(c->store))
		return 0;
	if (c->store && cas_store_broken(c->store)) {
		/* Only with no checkpoint in flight, whose handles name the old
		 * engine: until then, the next checkpoint fails as the store says. */
		if (!all_done(c))
			return 0;
		collect(c);
	}
	const bool reopen = c->store != NULL;
	store_down(c);
	/* The library makes its store (crest.h): the program's own code named
	 * it, unlike a --store typed at a prompt. */
	int rc = reopen ? 0 : cas_init(c->store_dir);
	if (rc == -EEXIST)
		rc = 0;
	if (rc == 0)
		rc = cas_open(c->store_dir, CAS_WRITE, &c->store);
	if (rc == 0)
		rc = engine_start(c, c->store, &c->eng);
	if (rc == 0 && c->has_parent) {
		char saved[1024];
		crest_errcpy(saved, sizeof(saved));
		if (cas_manifest_load(c->store, c->parent_id, &c->parent) < 0) {
			c->parent = NULL;
			c->has_parent = false;
			crest_errset_str(saved);
		}
	}
	if (rc == 0 && !c->has_parent && c->branch)
		rc = parent_from_head(c, c->branch);
	if (rc < 0) {
		if (c->eng)
			engine_close(c->eng);
		c->eng = NULL;
		cas_close(c->store);
		c->store = NULL;
		rc = crest_errctx(rc, reopen ? "reopening crest store %s after a failed commit" : "opening crest store %s",
				  c->store_dir);
	}
	if (rc == 0) {
		c->stepped = false;
		held_ingest(c);   /* before the caller's call: they come first */
	}
	return rc;
}

/* A call is done with the store: the keeper may let it go once idle. */
static void store_used(crest_t *c)
{
	c->used_ns = time_now_ns();
	pthread_cond_signal(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

static void cond_wait_ns(crest_t *c, uint64_t ns)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ns += (uint64_t)ts.tv_nsec;
	ts.tv_sec += (time_t)(ns / 1000000000u);
	ts.tv_nsec = (long)(ns % 1000000000u);
	pthread_cond_timedwait(&c->cv, &c->mu, &ts);
}

#define IDLE_NEVER UINT64_MAX

/* How often the keeper looks for a writer waiting for the lock, and, having
 * stepped aside, for the lock to come free. */
#define WANT_POLL_NS 100000000u

/* The keeper opens the store again, without mu (the caller's checkpoints
 * are held meanwhile, not stalled); wait: as long as the lock takes (held
 * checkpoints need it), else only if it is free now. Called and returns
 * under mu. */
static void keeper_open(crest_t *c, bool wait)
{
	c->opening = true;
	const bool had_parent = c->has_parent;
	uint8_t pid[32];
	memcpy(pid, c->parent_id, 32);
	pthread_mutex_unlock(&c->mu);
	struct cas_store *s = NULL;
	struct engine *e = NULL;
	struct cas_manifest *m = NULL;
	bool parent_gone = false;
	char msg[1024] = "";
	int rc = wait ? cas_open(c->store_dir, CAS_WRITE, &s) : cas_open_nowait(c->store_dir, &s);
	if (rc == 0)
		rc = engine_start(c, s, &e);
	if (rc == 0 && had_parent && cas_manifest_load(s, pid, &m) < 0) {
		m = NULL;
		parent_gone = true;   /* gc expired it: the branch's head instead */
	}
	if (rc < 0) {
		crest_errcpy(msg, sizeof(msg));
		if (e)
			engine_close(e);
		cas_close(s);
	}
	pthread_mutex_lock(&c->mu);
	c->opening = false;
	if (rc == 0) {
		c->store = s;
		c->eng = e;
		c->stepped = false;
		if (c->has_parent && !memcmp(c->parent_id, pid, 32)) {
			if (parent_gone)
				c->has_parent = false;
			else if (!c->parent)
				c->parent = m, m = NULL;
		}
		cas_manifest_free(m);
		if (!c->has_parent && c->branch)
			parent_from_head(c, c->branch);
		held_ingest(c);
	} else if (rc != -EWOULDBLOCK) {
		held_fail(c, rc, msg);
	}
	pthread_cond_broadcast(&c->cv);
	/* Locked, or failing (a store gone or damaged: the caller's own calls
	 * will say so): try again a poll later, not at once. */
	if (rc < 0 && !c->quit)
		cond_wait_ns(c, WANT_POLL_NS);
}

/* The keeper. With the store: lets it go once every checkpoint in flight is
 * done and either another writer waits for the lock (gc, a checkpoint's
 * ingest: cas_lock_wanted) or the store was idle for idle_ns. Without it:
 * opens it again as soon as a checkpoint is held, or, having stepped aside
 * for a writer, once that writer has the lock and is done with it. */
static void *keeper_main(void *arg)
{
	crest_t *c = arg;
	pthread_mutex_lock(&c->mu);
	while (!c->quit) {
		if (c->store) {
			if (!all_done(c)) {
				cond_wait_ns(c, 5000000);
				continue;
			}
			const uint64_t now = time_now_ns();
			const uint64_t used = now - c->used_ns;
			const bool idle = c->idle_ns != IDLE_NEVER && used >= c->idle_ns;
			const bool wanted = !idle && cas_lock_wanted(c->store);
			if (idle || wanted) {
				collect(c);
				store_down(c);
				c->stepped = wanted;
				continue;
			}
			uint64_t ns = WANT_POLL_NS;
			if (c->idle_ns != IDLE_NEVER && c->idle_ns - used < ns)
				ns = c->idle_ns - used;
			cond_wait_ns(c, ns);
			continue;
		}
		if (any_held(c)) {
			keeper_open(c, true);
		} else if (c->stepped) {
			/* Not while the writer still waits: it would lose the race. */
			if (cas_lock_wanted_dir(c->store_dir))
				cond_wait_ns(c, WANT_POLL_NS);
			else
				keeper_open(c, false);
		} else {
			pthread_cond_wait(&c->cv, &c->mu);
		}
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

/* $CREST_STORE_IDLE_MS: how long an idle handle keeps the store; unset:
 * IDLE_NEVER, for the whole session (unless another writer waits). */
static uint64_t idle_from_env(void)
{
	const char *e = getenv("CREST_STORE_IDLE_MS");
	if (!e || !*e)
		return IDLE_NEVER;
	/* The one duration parser; a bare number is milliseconds. */
	uint64_t ns;
	if (parse_duration(e, PARSE_NS_MS, 0, 366 * PARSE_NS_DAY, &ns) < 0) {
		fprintf(stderr, "crest: CREST_STORE_IDLE_MS=%s is not a number of milliseconds up to 366 days; "
			"the session keeps the store\n", e);
		return IDLE_NEVER;
	}
	return ns;
}

static int crest_destroy(crest_t *c);

/* CREST_GPU_HASH=0 turns GPU hashing of device regions off: every
 * checkpoint copies them whole and the CPU hashes them (to compare). */
static bool gpu_hash_from_env(void)
{
	const char *e = getenv("CREST_GPU_HASH");
	return !e || strcmp(e, "0");
}

/* Frees a region's digests on its GPU; the thread's context is kept. */
static void region_digests_free(crest_t *c, struct region *r)
{
	if (!r->dig)
		return;
	CUcontext saved = NULL;
	c->d->CtxGetCurrent(&saved);
	capture_digests_free(c->d, r->dig);
	c->d->CtxSetCurrent(saved);
	r->dig = NULL;
}

/* The host cache in dir for this store and GPU (gpu/hostcache.h). Without
 * a GPU driver there are no device regions to keep, and no cache. */
static int cache_open(crest_t *c, const char *dir)
{
	if (!(c->o.host_cache = strdup(dir)))
		return crest_errf(-ENOMEM, "opening the host cache in %s", dir);
	if (!c->d)
		return hostcache_dir_check(dir);
	CUuuid uuid;
	/* A store on RADOS is named by its name: it has no path. */
	char *real = strncmp(c->store_dir, "rados:", 6) ? realpath(c->store_dir, NULL) : strdup(c->store_dir),
	     name[64];
	int rc = real ? 0 : crest_errf(-errno, "resolving the store's path %s", c->store_dir);
	if (rc == 0)
		rc = cudrv_check(c->d, c->d->DeviceGetUuid(&uuid, c->dev), "the GPU's UUID (cuDeviceGetUuid)");
	if (rc == 0)
		rc = hostcache_name(real, (const uint8_t *)uuid.bytes, name, sizeof(name));
	if (rc == 0)
		rc = hostcache_open(dir, name, &c->cache);
	free(real);
	return rc;
}

int crest_open(const char *dir, const struct crest_options *o, crest_t **out)
{
	if (!out)
		return crest_errx(-EINVAL, "crest_open: out is NULL");
	*out = NULL;
	crest_t *c = calloc(1, sizeof(*c));
	if (!c)
		return crest_errf(-ENOMEM, "crest_open");
	crest_options_init(&c->o);
	if (o) {
		c->o = *o;
		if (!c->o.staging_bytes)
			c->o.staging_bytes = (size_t)1 << 30;
		if (!c->o.copy_streams)
			c->o.copy_streams = 4;
		c->o.host_cache = NULL;   /* the caller's string: a copy below */
		c->o.push_to = NULL;      /* the pusher keeps its own copy */
	}
	c->next_region = c->next_ckpt = c->parent_from = 1;
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);
	c->idle_ns = idle_from_env();
	if (!dir)
		dir = cas_default_path();
	int rc = 0;
	if (c->o.staging_bytes < 2 * SEGMENT)
		rc = crest_errx(-EINVAL, "staging pool of %zu bytes is too small: crest needs at least %u",
				c->o.staging_bytes, 2 * SEGMENT);
	if (rc == 0 && !(c->store_dir = strdup(dir)))
		rc = crest_errf(-ENOMEM, "opening crest store %s", dir);
	/* The store first: a bad directory is this call's failure. A session
	 * continues its branch: the first checkpoint's parent is the branch's
	 * head. */
	if (rc == 0 && !(c->branch = strdup(CAS_BRANCH_DEFAULT)))
		rc = crest_errf(-ENOMEM, "opening crest store %s", dir);
	bool said = false;   /* store_up's message names the store already */
	if (rc == 0)
		said = (rc = store_up(c)) < 0;
	if (rc == 0)
		rc = open_gpu(c);
	if (rc == 0) {
		CUcontext saved = NULL;
		if (c->d) {
			c->d->CtxGetCurrent(&saved);
			c->d->CtxSetCurrent(c->pctx);
		}
		rc = pool_open(c->d, c->o.staging_bytes, slice_size(c->o.staging_bytes), &c->pool);
		if (c->d)
			c->d->CtxSetCurrent(saved);
	}
	if (rc == 0)
		rc = capture_copier_open(c->d, c->pool, c->o.copy_streams, gpu_hash_from_env(), &c->copier);
	if (rc == 0 && o && o->host_cache)
		rc = cache_open(c, o->host_cache);
	if (rc == 0 && o && o->push_to)
		said = (rc = lib_pusher_open(dir, o->push_to, &c->pusher)) < 0;
	if (rc == 0) {
		rc = -pthread_create(&c->keeper, NULL, keeper_main, c);
		if (rc < 0)
			rc = crest_errx(rc, "starting the thread that keeps the store: %s",
					strerror(-rc));
		c->keeper_on = rc == 0;
	}
	if (rc == 0) {
		pthread_mutex_lock(&c->mu);
		store_used(c);
	}
	if (rc < 0) {
		if (!said)
			rc = crest_errctx(rc, "opening crest store %s", dir);
		char msg[1024];
		crest_errcpy(msg, sizeof(msg));
		crest_destroy(c);
		crest_errset_str(msg);
		return rc;
	}
	rc = handle_add(c, out);
	if (rc < 0)
		crest_destroy(c);   /* keeps the message: destroy has nothing to wait for */
	return rc;
}

static void result_fill(const struct pending *p, const struct engine_result *er, struct crest_result *r)
{
	memset(r, 0, sizeof(*r));
	hex_encode(er->id, 32, r->snapshot);
	r->bytes = er->logical_bytes;
	r->new_bytes = er->new_bytes;
	r->stored_bytes = er->stored_bytes;
	r->zero_bytes = er->zero_bytes;
	r->ingest_ns = er->ingest_ns;
	r->stall_ns = p->stall_ns;
	r->staging_wait_ns = p->wait_ns;
	r->rounds = p->rounds;
}

/* Waits for the pending checkpoints and frees c: crest_close, and
 * crest_open's failures. */
static int crest_destroy(crest_t *c)
{
	int first = 0;
	char msg[1024] = "";
	if (c->keeper_on) {
		pthread_mutex_lock(&c->mu);
		c->quit = true;
		pthread_cond_signal(&c->cv);
		pthread_mutex_unlock(&c->mu);
		pthread_join(c->keeper, NULL);
	}
	/* Held checkpoints still need the store: wait for it here. */
	if (any_held(c)) {
		pthread_mutex_lock(&c->mu);
		const int up = store_up(c);
		if (up < 0) {
			char m[1024];
			crest_errcpy(m, sizeof(m));
			held_fail(c, up, m);
		}
		pthread_mutex_unlock(&c->mu);
	}
	collect(c);
	for (size_t i = 0; i < c->nckpts; i++) {
		if (c->pusher && c->ckpts[i].done && c->ckpts[i].rc == 0)
			lib_pusher_add(c->pusher, c->ckpts[i].er.id);   /* committed, never waited for */
		if (c->ckpts[i].rc < 0 && !first) {
			first = c->ckpts[i].rc;
			snprintf(msg, sizeof(msg), "%s", c->ckpts[i].msg ? c->ckpts[i].msg : "");
		}
		free(c->ckpts[i].msg);
	}
	c->nckpts = 0;
	store_down(c);   /* the engine before the pool: its workers give slices back */
	const int pushed = lib_pusher_close(c->pusher);
	if (pushed < 0 && !first) {
		first = pushed;
		crest_errcpy(msg, sizeof(msg));
	}
	const struct cudrv *d = c->d;
	CUcontext saved = NULL;
	if (d)
		d->CtxGetCurrent(&saved);
	for (size_t i = 0; i < c->nregions; i++)
		region_digests_free(c, &c->regions[i]);
	capture_copier_close(c->copier);   /* before the pool: its events are per slice */
	hostcache_close(c->cache);         /* the engine, which writes it, is gone */
	free((char *)c->o.host_cache);
	if (d && c->pctx)
		d->CtxSetCurrent(c->pctx);
	pool_close(c->pool);
	if (d) {
		d->CtxSetCurrent(saved);
		if (c->pctx)
			d->DevicePrimaryCtxRelease(c->dev);
	}
	free(c->branch);
	free(c->store_dir);
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->mu);
	for (size_t i = 0; i < c->nregions; i++)
		free(c->regions[i].name);
	free(c->regions);
	free(c->ckpts);
	free(c);
	if (first)
		crest_errset_str(msg);
	return first;
}

int crest_close(crest_t *ch)
{
	if (!ch)
		return 0;
	crest_t *c;
	int rc = handle_get(ch, "crest_close", true, &c);
	if (rc < 0)
		return rc;
	return crest_destroy(c);
}

/* ---- regions ---- */

/* Whether [p, p+len) is still mapped: a region freed with munmap (large
 * malloc blocks, freed tensors) shows up here instead of as a crash. */
static int host_mapped(const void *p, size_t len)
{
	const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t a = (uintptr_t)p & ~(pg - 1);
	const uintptr_t end = (uintptr_t)p + len;
	unsigned char vec[4096];
	while (a < end) {
		size_t pages = (end - a + pg - 1) / pg;
		if (pages > sizeof(vec))
			pages = sizeof(vec);
		if (mincore((void *)a, pages * pg, vec) < 0)
			return -errno;
		a += pages * pg;
	}
	return 0;
}

/* Is [ptr, ptr + size) managed memory, inside one allocation? (The range
 * attributes, as for device regions: see region_check.) */
static int managed_check(crest_t *c, const char *name, const uint8_t *ptr, size_t size)
{
	const CUdeviceptr p = (CUdeviceptr)(uintptr_t)ptr;
	unsigned int managed = 0;
	CUdeviceptr base = 0;
	size_t bsize = 0;
	if (c->d->PointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p) != CUDA_SUCCESS || !managed)
		return crest_errx(-EFAULT, "managed region %s (0x%llx, %zu bytes) is not CUDA managed memory "
				  "(cudaMallocManaged): freed while registered, or registered with the wrong kind?",
				  name, (unsigned long long)p, size);
	if (c->d->PointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p) == CUDA_SUCCESS &&
	    c->d->PointerGetAttribute(&bsize, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p) == CUDA_SUCCESS &&
	    p + size > base + bsize)
		return crest_errx(-EFAULT, "managed region %s (0x%llx, %zu bytes) runs past the end of its "
				  "allocation (0x%llx, %zu bytes)", name, (unsigned long long)p, size,
				  (unsigned long long)base, bsize);
	return 0;
}

/* Is the region still what was registered? */
static int region_check(crest_t *c, const struct region *r)
{
	if (r->size == 0)
		return 0;
	if (r->mem == CREST_MEM_HOST) {
		int rc = host_mapped(r->ptr, r->size);
		if (rc < 0)
			return crest_errx(-EFAULT, "host region %s (%p, %zu bytes) is no longer mapped: freed while "
					  "registered? (unregister it first)", r->name, (void *)r->ptr, r->size);
		return 0;
	}
	if (r->mem == CREST_MEM_MANAGED)
		return managed_check(c, r->name, r->ptr, r->size);
	/* The range attributes, not cuMemGetAddressRange, which looks only in
	 * the current context: a region on another GPU would read as freed. */
	const CUdeviceptr p = (CUdeviceptr)(uintptr_t)r->ptr;
	CUdeviceptr base = 0;
	size_t bsize = 0;
	if (c->d->PointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p) != CUDA_SUCCESS ||
	    c->d->PointerGetAttribute(&bsize, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p) != CUDA_SUCCESS)
		return crest_errx(-EFAULT, "device region %s (0x%llx, %zu bytes) is not device memory any more: "
				  "freed while registered? (unregister it first)", r->name,
				  (unsigned long long)(uintptr_t)r->ptr, r->size);
	if ((uintptr_t)r->ptr + r->size > base + bsize)
		return crest_errx(-EFAULT, "device region %s (0x%llx, %zu bytes) runs past the end of its "
				  "allocation (0x%llx, %zu bytes)", r->name, (unsigned long long)(uintptr_t)r->ptr,
				  r->size, (unsigned long long)base, bsize);
	return 0;
}

/* The size the engine cuts region streams in, as the GPU hashes them; 0
 * when it cuts them by content (no GPU hashing, no cache check). */
static uint32_t region_chunk(void)
{
	struct engine_opts eo;
	engine_opts_default(&eo);
	return eo.memory_chunking.kind == DEDUP_FIXED ? eo.memory_chunking.avg : 0;
}

int crest_register(crest_t *ch, const char *name, void *ptr, size_t size, enum crest_mem mem, crest_region_t *out)
{
	crest_t *c;
	int rc = handle_get(ch, "crest_register", false, &c);
	if (rc < 0)
		return rc;
	if (!name || !*name || !out)
		return crest_errx(-EINVAL, "crest_register: a region needs a name and an out handle");
	if (!ptr && size)
		return crest_errx(-EINVAL, "region %s: NULL pointer with %zu bytes", name, size);
	if (mem != CREST_MEM_HOST && mem != CREST_MEM_DEVICE && mem != CREST_MEM_MANAGED)
		return crest_errx(-EINVAL, "region %s: memory kind %d is neither host, device nor managed", name,
				  (int)mem);
	if (region_by_name(c, name))
		return crest_errx(-EEXIST, "region %s is already registered", name);
	struct region r = { .name = strdup(name), .ptr = ptr, .size = size, .mem = mem };
	if (!r.name)
		return crest_errf(-ENOMEM, "registering region %s", name);
	if (mem == CREST_MEM_MANAGED) {
		/* Its copies run in the context it was made in, when the
		 * driver says which; the handle's own otherwise. */
		char what[300];
		snprintf(what, sizeof(what), "managed region %s", name);
		rc = need_gpu(c, what);
		if (rc == 0 && size && c->d->PointerGetAttribute(&r.ctx, CU_POINTER_ATTRIBUTE_CONTEXT,
								 (CUdeviceptr)(uintptr_t)ptr) != CUDA_SUCCESS)
			r.ctx = NULL;
		if (rc == 0 && !r.ctx)
			r.ctx = c->pctx;
	} else if (mem == CREST_MEM_DEVICE) {
		char what[300];
		snprintf(what, sizeof(what), "device region %s", name);
		rc = need_gpu(c, what);
		if (rc == 0 && size)
			rc = cudrv_check(c->d, c->d->PointerGetAttribute(&r.ctx, CU_POINTER_ATTRIBUTE_CONTEXT,
									 (CUdeviceptr)(uintptr_t)ptr),
					 "looking up its context (cuPointerGetAttribute)");
		if (rc < 0 && size)
			rc = crest_errctx(rc, "device region %s at 0x%llx", name, (unsigned long long)(uintptr_t)ptr);
		if (rc == 0 && !r.ctx)
			r.ctx = c->pctx;
	}
	if (rc == 0)
		rc = region_check(c, &r);
	if (rc == 0 && c->nregions == c->capregions) {
		size_t cap = c->capregions ? c->capregions * 2 : 16;
		struct region *nr = realloc(c->regions, cap * sizeof(*nr));
		if (!nr)
			rc = crest_errf(-ENOMEM, "registering region %s", name);
		else {
			c->regions = nr;
			c->capregions = cap;
		}
	}
	if (rc < 0) {
		free(r.name);
		return rc;
	}
	r.id = c->next_region++;
	c->regions[c->nregions++] = r;
	*out = r.id;
	if (mem == CREST_MEM_DEVICE && size && c->copier) {
		/* What the first checkpoint would otherwise make in its stall:
		 * copy streams, the kernels (the driver compiles them: a third
		 * of a second on a fresh H100), the digests. Best effort: the
		 * checkpoint tries again, or copies whole. */
		struct region *nr = &c->regions[c->nregions - 1];
		const struct capture_region cr = { .name = nr->name, .ptr = nr->ptr, .size = nr->size, .device = true,
						   .ctx = nr->ctx, .dig = &nr->dig };
		CUcontext saved = NULL;
		c->d->CtxGetCurrent(&saved);
		capture_prepare(c->copier, &cr, region_chunk());
		c->d->CtxSetCurrent(saved);
	}
	return 0;
}

int crest_unregister(crest_t *ch, crest_region_t id)
{
	crest_t *c;
	int rc = handle_get(ch, "crest_unregister", false, &c);
	if (rc < 0)
		return rc;
	struct region *r = region_find(c, id);
	if (!r)
		return crest_errx(-EBADF, "crest_unregister: region handle %llu is not registered "
				  "(never was, or already unregistered)", (unsigned long long)id);
	free(r->name);
	region_digests_free(c, r);
	size_t i = (size_t)(r - c->regions);
	memmove(r, r + 1, (c->nregions - i - 1) * sizeof(*r));
	c->nregions--;
	return 0;
}

size_t crest_region_count(const crest_t *ch)
{
	crest_t *c;
	return handle_get(ch, "crest_region_count", false, &c) < 0 ? 0 : c->nregions;
}

/* ---- checkpoint ---- */

/* The registered regions, as capture/ and restore/ take them (both are
 * views: the names stay the handle's). NULL with a message on ENOMEM; an
 * empty list is a valid 1-byte allocation. */
static struct capture_region *capture_list(crest_t *c)
{
	struct capture_region *v = calloc(c->nregions ? c->nregions : 1, sizeof(*v));
	if (!v) {
		crest_errf(-ENOMEM, "listing %zu regions", c->nregions);
		return NULL;
	}
	for (size_t i = 0; i < c->nregions; i++)
		v[i] = (struct capture_region){ .name = c->regions[i].name, .ptr = c->regions[i].ptr,
						.size = c->regions[i].size,
						.device = c->regions[i].mem != CREST_MEM_HOST,
						.ctx = c->regions[i].ctx,
						/* managed: never hashed on a GPU */
						.dig = c->regions[i].mem == CREST_MEM_DEVICE ? &c->regions[i].dig
											     : NULL };
	return v;
}

static struct restore_region *restore_list(const crest_t *c)
{
	struct restore_region *v = calloc(c->nregions ? c->nregions : 1, sizeof(*v));
	if (!v) {
		crest_errf(-ENOMEM, "listing %zu regions", c->nregions);
		return NULL;
	}
	for (size_t i = 0; i < c->nregions; i++)
		v[i] = (struct restore_region){ .name = c->regions[i].name, .ptr = c->regions[i].ptr,
						.size = c->regions[i].size,
						.device = c->regions[i].mem != CREST_MEM_HOST,
						.ctx = c->regions[i].ctx };
	return v;
}

/* Makes the device idle: the given streams, else every context in use. */
static int sync_devices(crest_t *c, const struct capture_region *r, void *const *streams, size_t nstreams)
{
	int rc = 0;
	if (nstreams) {
		rc = need_gpu(c, "synchronizing the given streams");
		for (size_t i = 0; rc == 0 && i < nstreams; i++)
			rc = cudrv_check(c->d, c->d->StreamSynchronize((CUstream)streams[i]),
					 "synchronizing a given stream (cuStreamSynchronize)");
		return rc;
	}
	return c->d ? capture_sync(c->d, r, c->nregions) : 0;
}

/* How much memory held checkpoints may take together: half the machine's.
 * Past it, a checkpoint waits for the store, as it did before holding. */
static uint64_t held_limit(void)
{
	const long pages = sysconf(_SC_PHYS_PAGES), pg = sysconf(_SC_PAGESIZE);
	return pages > 0 && pg > 0 ? (uint64_t)pages * (uint64_t)pg / 2 : 0;
}

/* crest_checkpoint while the store is let go (another writer has it, or
 * the keeper is opening it again): the regions are copied into host memory
 * and the job goes on; the keeper ingests the copy once the store is back.
 * The stall is the copy (1.23x a kept checkpoint's at 8 GiB on the H100
 * host, bench/RESULTS.md), not gc's run. -EAGAIN (no message) when it should
 * not hold: too much memory held, or none to be had; the caller then waits
 * for the store. Under mu. */
static int checkpoint_held(crest_t *c, const struct crest_checkpoint_opts *o, const struct capture_region *regs,
			   const struct capture_blob *blobs, uint64_t t0, crest_ckpt_t *out)
{
	if (!c->keeper_on)
		return -EAGAIN;
	uint64_t bytes = 0;
	for (size_t i = 0; i < c->nregions; i++)
		bytes += c->regions[i].size;
	for (size_t i = 0; i < o->nblobs; i++)
		bytes += o->blobs[i].len;
	if (c->held_bytes + bytes > held_limit())
		return -EAGAIN;
	int rc = capture_labels(NULL, o->labels, o->nlabels);
	if (rc < 0)
		return rc;
	struct held_ckpt *k = calloc(1, sizeof(*k));
	if (!k)
		return -EAGAIN;
	k->labels = calloc(o->nlabels + 1, sizeof(*k->labels));
	bool ok = k->labels && (!o->tag || (k->tag = strdup(o->tag)));
	for (size_t i = 0; ok && i < o->nlabels; i++, k->nlabels++)
		ok = (k->labels[i] = strdup(o->labels[i])) != NULL;
	if (ok)
		rc = sync_devices(c, regs, o->sync_streams, o->nsync_streams);
	if (ok && rc == 0) {
		rc = capture_hold(c->d, c->pool, regs, c->nregions, blobs, o->nblobs, &k->h);
		if (rc == -ENOMEM)
			ok = false;   /* wait for the store instead */
	}
	if (!ok || rc < 0) {
		held_free(c, k);
		return ok ? rc : -EAGAIN;
	}
	k->bytes = bytes;
	c->held_bytes += bytes;
	struct pending *p = &c->ckpts[c->nckpts++];
	*p = (struct pending){ .id = c->next_ckpt++, .held = k };
	p->stall_ns = time_now_ns() - t0;
	if (getenv("CREST_TRACE"))
		fprintf(stderr, "crest trace: crest_checkpoint %llu: the store is another's: %.3f GB held in host "
			"memory, stall %.3f s\n", (unsigned long long)p->id, bytes / 1e9, p->stall_ns / 1e9);
	*out = p->id;
	pthread_cond_broadcast(&c->cv);   /* the keeper opens the store */
	return 0;
}

/* Where each device region of regs (not a managed one: checking it on the
 * GPU would pull its pages there) lies in the host cache, laid out for
 * them first. A cache that cannot be had (its tmpfs full, say) costs the
 * checkpoint nothing: it goes on without, and says so once. */
static bool cache_places(crest_t *c, struct capture_region *regs)
{
	if (!c->cache)
		return false;
	struct hostcache_region *hr = calloc(c->nregions + 1, sizeof(*hr));
	size_t n = 0;
	for (size_t i = 0; hr && i < c->nregions; i++)
		if (c->regions[i].mem == CREST_MEM_DEVICE && regs[i].size)
			hr[n++] = (struct hostcache_region){ .name = regs[i].name, .size = regs[i].size };
	const int rc = hr ? hostcache_layout(c->cache, hr, n) : crest_errf(-ENOMEM, "laying out the host cache");
	free(hr);
	if (rc < 0) {
		if (!c->cache_said)
			fprintf(stderr, "crest: %s; checkpoints go on without the host cache\n", crest_errmsg());
		c->cache_said = true;
		return false;
	}
	/* A file replaced by a layout change holds a whole copy of the
	 * regions while mapped: let it go once no earlier checkpoint can
	 * still be writing it (mu is held: none starts meanwhile). */
	if (capture_cache_idle(c->copier))
		hostcache_forget_old(c->cache);
	/* From the first copy on, the cache holds no one snapshot whole. */
	hostcache_hint_set(c->cache, NULL);
	c->cache_gen++;
	for (size_t i = 0; i < c->nregions; i++)
		if (c->regions[i].mem == CREST_MEM_DEVICE && regs[i].size)
			regs[i].cache = hostcache_find(c->cache, regs[i].name, regs[i].size);
	return true;
}

int crest_checkpoint(crest_t *ch, const struct crest_checkpoint_opts *o, crest_ckpt_t *out)
{
	const struct crest_checkpoint_opts none = { 0 };
	crest_t *c;
	int rc = handle_get(ch, "crest_checkpoint", false, &c);
	if (rc < 0)
		return rc;
	if (!out)
		return crest_errx(-EINVAL, "crest_checkpoint: out is NULL");
	if (!o)
		o = &none;
	const uint64_t t0 = time_now_ns();
	for (size_t i = 0; i < o->nblobs; i++)
		if (o->blobs[i].name && region_by_name(c, o->blobs[i].name))
			return crest_errx(-EEXIST, "blob %s has the name of a region", o->blobs[i].name);
	/* Two streams of one name: the manifest would hold both and a reader
	 * would get whichever it finds first. Quadratic, but blobs are few. */
	for (size_t i = 0; i < o->nblobs; i++)
		for (size_t j = 0; j < i && o->blobs[i].name; j++)
			if (o->blobs[j].name && !strcmp(o->blobs[i].name, o->blobs[j].name))
				return crest_errx(-EEXIST, "blobs %zu and %zu are both named %s", j, i,
						  o->blobs[i].name);
	if (o->tag && (rc = cas_tag_check(o->tag)) < 0)
		return rc;
	for (size_t i = 0; i < c->nregions; i++)
		if ((rc = region_check(c, &c->regions[i])) < 0)
			return crest_errctx(rc, "checkpoint");
	/* The list of checkpoints in flight is the keeper's too. */
	pthread_mutex_lock(&c->mu);
	if (c->nckpts == c->capckpts) {
		size_t cap = c->capckpts ? c->capckpts * 2 : 8;
		struct pending *np = realloc(c->ckpts, cap * sizeof(*np));
		if (!np) {
			pthread_mutex_unlock(&c->mu);
			return crest_errf(-ENOMEM, "starting a checkpoint");
		}
		c->ckpts = np;
		c->capckpts = cap;
	}
	pthread_mutex_unlock(&c->mu);
	struct capture_region *regs = capture_list(c);
	const char **names = calloc(c->nregions + o->nblobs + 1, sizeof(*names));
	struct capture_blob *blobs = calloc(o->nblobs + 1, sizeof(*blobs));
	if (!regs || !names || !blobs) {
		free(regs);
		free(names);
		free(blobs);
		return crest_errf(-ENOMEM, "starting a checkpoint");
	}
	for (size_t i = 0; i < c->nregions; i++)
		names[i] = c->regions[i].name;
	for (size_t i = 0; i < o->nblobs; i++) {
		names[c->nregions + i] = o->blobs[i].name;
		blobs[i] = (struct capture_blob){ .name = o->blobs[i].name, .data = o->blobs[i].data,
						  .len = o->blobs[i].len };
	}
	CUcontext saved = NULL;
	if (c->d)
		c->d->CtxGetCurrent(&saved);
	struct engine_snap *snap = NULL;
	struct capture_stats cs = { 0 };
	/* From here to its seal the checkpoint holds mu: the keeper cannot
	 * let the store go under it. */
	pthread_mutex_lock(&c->mu);
	if (!c->store && (rc = checkpoint_held(c, o, regs, blobs, t0, out)) != -EAGAIN) {
		if (c->d)
			c->d->CtxSetCurrent(saved);
		free(regs);
		free(names);
		free(blobs);
		if (rc < 0)
			rc = crest_errctx(rc, "checkpoint");
		store_used(c);
		return rc;
	}
	uint64_t total = 0;
	for (size_t i = 0; i < c->nregions; i++)
		total += c->regions[i].size;
	/* CREST_TRACE: where the stall went, phase by phase. */
	uint64_t tp[5];
	tp[0] = time_now_ns();
	rc = store_up(c);
	if (rc == 0)
		rc = sync_devices(c, regs, o->sync_streams, o->nsync_streams);
	tp[1] = time_now_ns();
	if (rc == 0)
		rc = snap_start(c, o->labels, o->nlabels, o->tag, total, &snap);
	if (rc == 0)
		rc = capture_dirs(snap, names, c->nregions + o->nblobs);
	const bool cached = rc == 0 && cache_places(c, regs);
	tp[2] = time_now_ns();
	if (rc == 0)
		rc = capture_regions(c->copier, snap, regs, c->nregions, c->next_ckpt, &cs);
	tp[3] = time_now_ns();
	if (rc == 0)
		rc = capture_blobs(snap, blobs, o->nblobs);
	if (rc == 0)
		rc = engine_snapshot_seal(snap);
	tp[4] = time_now_ns();
	if (getenv("CREST_TRACE") && c->copier) {
		const char *why = capture_gpu_hash_why(c->copier);
		fprintf(stderr, "crest trace: crest_checkpoint %llu: %.3f GB copied; %u device regions hashed on the "
			"GPU, %u of them copied as changed chunks only (%u found by the wide hash) and %u whole with "
			"their ids%s%s; stall: checks "
			"%.3f s, store and sync %.3f s, snapshot begun %.3f s, regions %.3f s (%.3f s waiting for "
			"staging), blobs and seal %.3f s\n",
			(unsigned long long)c->next_ckpt, cs.copied / 1e9, cs.hashed, cs.sparse, cs.sparse_wide, cs.whole_ids,
			why ? "; no GPU hashing: " : "", why ? why : "", (tp[0] - t0) / 1e9, (tp[1] - tp[0]) / 1e9,
			(tp[2] - tp[1]) / 1e9, (tp[3] - tp[2]) / 1e9, cs.wait_ns / 1e9, (tp[4] - tp[3]) / 1e9);
	}
	if (c->d)
		c->d->CtxSetCurrent(saved);
	free(regs);
	free(names);
	free(blobs);
	if (rc < 0) {
		if (snap)
			engine_snapshot_abort(snap);
		rc = crest_errctx(rc, "checkpoint");
		store_used(c);
		return rc;
	}
	struct pending *p = &c->ckpts[c->nckpts++];
	*p = (struct pending){ .id = c->next_ckpt++, .snap = snap, .wait_ns = cs.wait_ns, .rounds = cs.rounds,
			       .cached = cached, .cache_gen = c->cache_gen };
	p->stall_ns = time_now_ns() - t0;
	*out = p->id;
	store_used(c);
	return 0;
}

int crest_poll(crest_t *ch, crest_ckpt_t h)
{
	crest_t *c;
	int rc = handle_get(ch, "crest_poll", false, &c);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&c->mu);
	struct pending *p = pending_find(c, h);
	if (p)
		rc = p->done || (!p->held && engine_snapshot_timedwait(p->snap, 0)) ? 1 : 0;
	pthread_mutex_unlock(&c->mu);
	if (!p)
		return crest_errx(-EBADF, "crest_poll: checkpoint handle %llu is not pending "
				  "(already waited for, or never issued)", (unsigned long long)h);
	return rc;
}

int crest_wait(crest_t *ch, crest_ckpt_t h, struct crest_result *r)
{
	crest_t *c;
	int rc = handle_get(ch, "crest_wait", false, &c);
	if (rc < 0)
		return rc;
	/* mu for the whole wait: the keeper cannot close the engine this
	 * snapshot belongs to (it only waits for mu meanwhile). */
	pthread_mutex_lock(&c->mu);
	struct pending *p = pending_find(c, h);
	/* Held: the keeper gives it an engine snapshot once it has the store
	 * (or fails it). p moves when another thread adds a checkpoint. */
	while (p && p->held) {
		pthread_cond_wait(&c->cv, &c->mu);
		p = pending_find(c, h);
	}
	if (!p) {
		pthread_mutex_unlock(&c->mu);
		return crest_errx(-EBADF, "crest_wait: checkpoint handle %llu is not pending "
				  "(already waited for, or never issued)", (unsigned long long)h);
	}
	struct pending me = *p;
	memmove(p, p + 1, (size_t)(c->ckpts + c->nckpts - p - 1) * sizeof(*p));
	c->nckpts--;
	struct engine_result er = me.er;
	if (me.done) {
		rc = me.rc;
		if (rc < 0)
			crest_errset_str(me.msg ? me.msg : "the ingest failed");
		free(me.msg);
	} else {
		rc = engine_snapshot_wait(me.snap, &er);
	}
	if (rc < 0) {
		pthread_mutex_unlock(&c->mu);
		return crest_errctx(rc, "checkpoint %llu", (unsigned long long)h);
	}
	if (r)
		result_fill(&me, &er, r);
	/* The newest committed snapshot is the next one's parent, and, while
	 * the store is held, tells its workers which chunks the store has:
	 * unchanged memory costs no index look-up. With the store let go, the
	 * next open loads it (the notes at the top). */
	if (me.id >= c->parent_from) {
		struct cas_manifest *m = NULL;
		if (!c->store || cas_manifest_load(c->store, er.id, &m) < 0)
			m = NULL;   /* the parent still, without hints */
		parent_set(c, er.id, m);
		c->parent_from = me.id + 1;
		/* The digests this checkpoint computed now describe the parent. */
		for (size_t i = 0; i < c->nregions; i++)
			capture_digests_commit(c->regions[i].dig, me.id, er.id);
		/* Every copy of a committed checkpoint is in the cache (the
		 * engine wrote them as it released the slices), and unless a
		 * later checkpoint wrote it too, nothing else. */
		if (me.cached && me.cache_gen == c->cache_gen)
			hostcache_hint_set(c->cache, er.id);
	}
	if (c->pusher)
		lib_pusher_add(c->pusher, er.id);
	pthread_mutex_unlock(&c->mu);
	return 0;
}

/* ---- branches ---- */

int crest_set_branch(crest_t *ch, const char *branch)
{
	crest_t *c;
	int rc = handle_get(ch, "crest_set_branch", false, &c);
	if (rc < 0)
		return rc;
	if ((rc = cas_branch_check(branch)) < 0)
		return crest_errctx(rc, "crest_set_branch");
	char *dup = strdup(branch);
	if (!dup)
		return crest_errf(-ENOMEM, "switching to branch %s", branch);
	pthread_mutex_lock(&c->mu);
	rc = store_up(c);
	/* An existing branch goes on from its head; a new one starts from the
	 * parent the handle has. */
	if (rc == 0)
		rc = parent_from_head(c, branch);
	if (rc < 0) {
		free(dup);
		rc = crest_errctx(rc, "switching to branch %s", branch);
		store_used(c);
		return rc;
	}
	free(c->branch);
	c->branch = dup;
	c->parent_from = c->next_ckpt;   /* a checkpoint in flight is on the old branch */
	store_used(c);
	return 0;
}

/* ---- restore ---- */

/* name NULL: the newest snapshot of kind "library". Under mu; opens the
 * store. */
static int resolve(crest_t *c, const char *name, uint8_t id[32])
{
	const int up = store_up(c);
	if (up < 0)
		return up;
	if (name)
		return cas_snapshot_resolve(c->store, name, id);
	struct cas_snapinfo *v;
	size_t n;
	int rc = cas_snapshot_list(c->store, &v, &n);
	if (rc < 0)
		return rc;
	rc = crest_errx(-ENOENT, "store %s holds no library snapshot", cas_dir(c->store));
	for (size_t i = n; i-- > 0;)
		if (!strcmp(v[i].head->kind, "library")) {
			memcpy(id, v[i].id, 32);
			rc = 0;
			break;
		}
	cas_snapshot_list_free(v, n);
	return rc;
}

static int load(crest_t *c, const char *name, uint8_t id[32], char hex[65], struct cas_manifest **m)
{
	int rc = resolve(c, name, id);
	if (rc == 0) {
		hex_encode(id, 32, hex);
		rc = cas_manifest_load(c->store, id, m);
	}
	return rc;
}

static int restore_locked(crest_t *c, const char *snapshot, struct crest_restore_result *res);

/* Device regions from the host cache, each checked on its GPU against the
 * snapshot's ids (capture_cache_verify); skip[i] is set for those that
 * checked out, and their bytes added to *bytes. Whatever did not, and any
 * failure here, is left to the store: a stale, torn or tampered cache costs
 * only time. */
static void cache_restore(crest_t *c, const struct cas_manifest *m, const uint8_t id[32],
			  const struct capture_region *cr, bool *skip, uint64_t *bytes)
{
	const uint32_t chunk = region_chunk();
	for (size_t i = 0; chunk && i < c->nregions; i++) {
		const uint8_t *src = c->regions[i].mem == CREST_MEM_DEVICE ?
					     hostcache_find(c->cache, cr[i].name, cr[i].size) : NULL;
		const struct cas_stream *st = cas_manifest_find(m, cr[i].name);
		if (!src || !st || !cr[i].size)
			continue;
		uint64_t nbad = 0;
		int rc = hostcache_to_device(src, cr[i].size, c->d, cr[i].ctx, (CUdeviceptr)(uintptr_t)cr[i].ptr,
					     c->pool, c->o.restore_threads);
		if (rc == 0)
			rc = capture_cache_verify(c->copier, &cr[i], st, chunk, id, &nbad);
		if (rc == 0 && nbad == 0) {
			skip[i] = true;
			*bytes += cr[i].size;
		} else if (getenv("CREST_TRACE")) {
			char why[160];
			snprintf(why, sizeof(why), "the host cache differs in %llu chunks", (unsigned long long)nbad);
			fprintf(stderr, "crest trace: crest_restore: region %s from the store: %s\n", cr[i].name,
				rc == -ENOTSUP ? "no GPU hashing to check the host cache with" :
				rc < 0 ? crest_errmsg() : why);
		}
	}
}

int crest_restore(crest_t *ch, const char *snapshot, struct crest_restore_result *res)
{
	crest_t *c;
	int rc = handle_get(ch, "crest_restore", false, &c);
	if (rc < 0)
		return rc;
	/* mu and the store for the whole restore: the writer lock, so no gc
	 * moves a chunk under it. */
	pthread_mutex_lock(&c->mu);
	rc = restore_locked(c, snapshot, res);
	store_used(c);
	return rc;
}

static int restore_locked(crest_t *c, const char *snapshot, struct crest_restore_result *res)
{
	int rc;
	const uint64_t t0 = time_now_ns();
	char hex[65];
	uint8_t id[32];
	struct cas_manifest *m = NULL;
	rc = load(c, snapshot, id, hex, &m);
	if (rc < 0)
		return crest_errctx(rc, "restore");
	if (!strcmp(m->kind, CAS_JOBSNAP_KIND)) {
		cas_manifest_free(m);
		return crest_errx(-EINVAL, "restore: snapshot %.12s is a job snapshot: restore one rank of it "
				  "with crest_job_restore", hex);
	}
	char *branch = strdup(cas_manifest_branch(m));
	if (!branch) {
		cas_manifest_free(m);
		return crest_errf(-ENOMEM, "restore of %.12s", hex);
	}
	struct restore_region *rr = restore_list(c);
	struct capture_region *cr = capture_list(c);
	rc = rr && cr ? restore_regions_match(m, hex, rr, c->nregions) : -ENOMEM;
	for (size_t i = 0; rc == 0 && i < c->nregions; i++)
		rc = region_check(c, &c->regions[i]);
	CUcontext saved = NULL;
	if (c->d)
		c->d->CtxGetCurrent(&saved);
	if (rc == 0)
		rc = sync_devices(c, cr, NULL, 0);   /* nothing may still be reading the regions */
	struct restore_ctx rctx = { .store = c->store, .snapshot = hex, .threads = c->o.restore_threads };
	uint64_t bytes = 0;
	for (size_t i = 0; rc == 0 && i < c->nregions; i++)
		bytes += c->regions[i].size;
	const uint64_t t1 = time_now_ns();
	bool *skip = calloc(c->nregions + 1, sizeof(*skip));
	uint64_t cache_bytes = 0;
	if (rc == 0 && !skip)
		rc = crest_errf(-ENOMEM, "restore of %.12s", hex);
	if (rc == 0 && c->cache && hostcache_hint_is(c->cache, id))
		cache_restore(c, m, id, cr, skip, &cache_bytes);
	const uint64_t t2 = time_now_ns();
	if (rc == 0)
		rc = restore_regions(&rctx, m, rr, c->nregions, skip, c->d, c->pool);
	free(skip);
	const uint64_t t3 = time_now_ns();
	if (c->d)
		c->d->CtxSetCurrent(saved);
	free(rr);
	free(cr);
	if (rc == 0) {
		/* The job goes on from the snapshot: on its branch, as its
		 * child; the checkpoints in flight become no parent. */
		free(c->branch);
		c->branch = branch;
		parent_set(c, id, m);   /* takes m */
		c->parent_from = c->next_ckpt;
	} else {
		cas_manifest_free(m);
		free(branch);
	}
	if (getenv("CREST_TRACE"))   /* a failed restore's too */
		fprintf(stderr, "crest trace: crest_restore: manifest and checks %.3f s, host cache %.3f s (%.3f GB "
			"checked and kept), regions %.3f s, then %.3f s\n", (t1 - t0) / 1e9, (t2 - t1) / 1e9,
			cache_bytes / 1e9, (t3 - t2) / 1e9, (time_now_ns() - t3) / 1e9);
	if (rc < 0)
		return crest_errctx(rc, "restore");
	if (res) {
		memset(res, 0, sizeof(*res));
		memcpy(res->snapshot, hex, sizeof(res->snapshot));
		res->bytes = bytes;
		res->cache_bytes = cache_bytes;
		res->ns = time_now_ns() - t0;
	}
	return 0;
}

static int read_blob_locked(crest_t *c, const char *snapshot, const char *name, void **data, size_t *len);

int crest_read_blob(crest_t *ch, const char *snapshot, const char *name, void **data, size_t *len)
{
	crest_t *c;
	int rc = handle_get(ch, "crest_read_blob", false, &c);
	if (rc < 0)
		return rc;
	if (!name || !data || !len)
		return crest_errx(-EINVAL, "crest_read_blob: name, data and len are needed");
	pthread_mutex_lock(&c->mu);
	rc = read_blob_locked(c, snapshot, name, data, len);
	store_used(c);
	return rc;
}

static int read_blob_locked(crest_t *c, const char *snapshot, const char *name, void **data, size_t *len)
{
	int rc;
	char hex[65];
	uint8_t id[32];
	struct cas_manifest *m = NULL;
	rc = load(c, snapshot, id, hex, &m);
	if (rc < 0)
		return crest_errctx(rc, "reading blob %s", name);
	const struct cas_stream *st = cas_manifest_find(m, name);
	if (!st || st->type != CAS_STREAM_BLOB) {
		cas_manifest_free(m);
		return crest_errx(-ENOENT, "snapshot %.12s has no blob %s", hex, name);
	}
	void *buf = malloc(st->size ? st->size : 1);
	if (!buf) {
		rc = crest_errf(-ENOMEM, "reading blob %s (%llu bytes)", name, (unsigned long long)st->size);
	} else {
		struct restore_ctx rctx = { .store = c->store, .snapshot = hex, .threads = 1 };
		rc = restore_stream_to_memory(&rctx, st, buf, st->size);
	}
	if (rc == 0) {
		*data = buf;
		*len = st->size;
	} else {
		free(buf);
	}
	cas_manifest_free(m);
	return rc;
}

void crest_free(void *p)
{
	free(p);
}

/* ---- jobs (crest.h; the meeting of the ranks: cas/jobjoin.h) ---- */

/* j checked, and its attempt (crest.h's defaults) into attempt. */
static int job_check(const struct crest_job *j, const char *what, char *attempt, size_t cap)
{
	if (!j)
		return crest_errx(-EINVAL, "%s: the job is NULL", what);
	int rc = cas_jobsnap_name_check(j->name);
	if (rc == 0 && j->gpu)
		rc = cas_jobsnap_gpu_check(j->gpu);
	if (rc < 0)
		return crest_errctx(rc, "%s", what);
	if (j->world == 0 || j->world > CAS_JOBSNAP_WORLD_MAX || j->rank >= j->world)
		return crest_errx(-EINVAL, "%s: job %s: rank %u is not in [0, %u)", what, j->name, j->rank, j->world);
	const char *a = j->attempt ? j->attempt : getenv("CREST_JOB_ATTEMPT");
	const char *run = getenv("TORCHELASTIC_RUN_ID"), *restarts = getenv("TORCHELASTIC_RESTART_COUNT");
	if (a)
		snprintf(attempt, cap, "%s", a);
	else if (run && restarts)
		snprintf(attempt, cap, "%s.%s", run, restarts);
	else
		snprintf(attempt, cap, "0");
	if (!cas_jobsnap_name_ok(attempt, CAS_JOBJOIN_ATTEMPT_MAX))
		return crest_errx(-EINVAL, "%s: job %s: attempt '%s' is not 1 to %d of letters, digits, '.', '_', '-'",
				  what, j->name, attempt, CAS_JOBJOIN_ATTEMPT_MAX);
	return 0;
}

int crest_job_checkpoint(crest_t *ch, const struct crest_job *j, uint64_t step,
			 const struct crest_checkpoint_opts *o, crest_ckpt_t *out)
{
	char attempt[CAS_JOBJOIN_ATTEMPT_MAX + 1];
	int rc = job_check(j, "crest_job_checkpoint", attempt, sizeof(attempt));
	if (rc < 0)
		return rc;
	struct crest_checkpoint_opts mine = o ? *o : (struct crest_checkpoint_opts){ 0 };
	const char **labels = calloc(mine.nlabels + 5, sizeof(*labels));
	char l[5][160];
	if (!labels)
		return crest_errf(-ENOMEM, "crest_job_checkpoint");
	for (size_t i = 0; i < mine.nlabels; i++)
		labels[i] = mine.labels[i];
	snprintf(l[0], sizeof(l[0]), CAS_JOBSNAP_LABEL "=%s", j->name);
	snprintf(l[1], sizeof(l[1]), CAS_JOBSNAP_LABEL_STEP "=%llu", (unsigned long long)step);
	snprintf(l[2], sizeof(l[2]), CAS_JOBSNAP_LABEL_RANK "=%u", j->rank);
	snprintf(l[3], sizeof(l[3]), CAS_JOBSNAP_LABEL_WORLD "=%u", j->world);
	snprintf(l[4], sizeof(l[4]), CAS_JOBSNAP_LABEL_ATTEMPT "=%s", attempt);
	for (int i = 0; i < 5; i++)
		labels[mine.nlabels + (size_t)i] = l[i];
	mine.labels = labels;
	mine.nlabels += 5;
	/* A rank's snapshots go on a branch of their own, job/NAME/rank-R:
	 * the store's history then holds one line a rank, and no rank
	 * snapshot becomes the head of main (gc keeps a rank only through a
	 * job snapshot that names it: gc.h). A handle restored from a job
	 * snapshot is on its rank's branch already. */
	char branch[16 + CAS_JOBSNAP_NAME_MAX + 16];
	snprintf(branch, sizeof(branch), "job/%s/rank-%u", j->name, j->rank);
	crest_t *c;
	rc = handle_get(ch, "crest_job_checkpoint", false, &c);
	if (rc == 0) {
		/* A handle with no parent yet (a fresh launch) takes the branch
		 * without the store: the parent comes from the branch's head
		 * when the store is next opened, as for a handle opened on a
		 * branch. Asking for the store here made a rank's first
		 * checkpoint wait for the other ranks' ingests (up to 2.3 s of
		 * 4 ranks, bench/RESULTS.md). With a parent, or the store held,
		 * crest_set_branch decides where the branch goes on from. */
		pthread_mutex_lock(&c->mu);
		const bool on = c->branch && !strcmp(c->branch, branch);
		const bool quick = !on && !c->has_parent && !(c->store && c->eng);
		char *dup = quick ? strdup(branch) : NULL;
		if (quick && dup) {
			free(c->branch);
			c->branch = dup;
			c->parent_from = c->next_ckpt;
		}
		pthread_mutex_unlock(&c->mu);
		if (!on && !dup)
			rc = crest_set_branch(ch, branch);
	}
	if (rc == 0)
		rc = crest_checkpoint(ch, &mine, out);
	free(labels);
	return rc;
}

int crest_job_wait(crest_t *ch, const struct crest_job *j, uint64_t step, crest_ckpt_t h,
		   struct crest_job_result *r)
{
	char attempt[CAS_JOBJOIN_ATTEMPT_MAX + 1];
	int rc = job_check(j, "crest_job_wait", attempt, sizeof(attempt));
	if (rc < 0)
		return rc;
	struct crest_job_result res = { 0 };
	rc = crest_wait(ch, h, &res.rank);
	if (r)
		*r = res;
	if (rc < 0)
		return rc;
	crest_t *c;
	uint8_t id[32], jid[32];
	if ((rc = handle_get(ch, "crest_job_wait", false, &c)) < 0)
		return rc;
	if (hex_decode(res.rank.snapshot, id, 32) < 0)
		return crest_errx(-EIO, "crest_job_wait: checkpoint %llu gave no snapshot id", (unsigned long long)h);
	pthread_mutex_lock(&c->mu);
	rc = store_up(c);
	struct cas_jobjoin_set set = { 0 };
	if (rc == 0)
		rc = cas_jobjoin_arrive(c->store, j->name, attempt, step, j->rank, j->world, id, j->gpu, &set);
	if (rc == 1) {
		const char **gpus = calloc(j->world, sizeof(*gpus));
		rc = gpus ? 0 : crest_errf(-ENOMEM, "crest_job_wait");
		for (uint32_t i = 0; rc == 0 && i < j->world; i++)
			gpus[i] = set.gpus[i];
		if (rc == 0)
			rc = cas_jobsnap_commit(c->store, j->name, step, j->world, (const uint8_t (*)[32])set.ids,
						gpus, NULL, jid);
		free(gpus);
		cas_jobjoin_set_free(&set);
		if (rc == 0) {
			cas_jobjoin_done(c->store, j->name, attempt, step);
			res.committed = 1;
			hex_encode(jid, 32, res.job_snapshot);
			if (c->pusher)
				lib_pusher_add(c->pusher, jid);   /* its members with it */
		}
	}
	store_used(c);
	if (rc < 0)
		return crest_errctx(rc, "job %s step %llu, rank %u", j->name, (unsigned long long)step, j->rank);
	if (r)
		*r = res;
	return 0;
}

int crest_job_restore(crest_t *ch, const struct crest_job *j, const char *snapshot,
		      struct crest_restore_result *r)
{
	char attempt[CAS_JOBJOIN_ATTEMPT_MAX + 1], name[16 + CAS_JOBSNAP_NAME_MAX], hex[65], mhex[65];
	int rc = job_check(j, "crest_job_restore", attempt, sizeof(attempt));
	crest_t *c;
	if (rc == 0)
		rc = handle_get(ch, "crest_job_restore", false, &c);
	if (rc < 0)
		return rc;
	if (!snapshot) {
		snprintf(name, sizeof(name), "job:%s", j->name);
		snapshot = name;
	}
	pthread_mutex_lock(&c->mu);
	uint8_t id[32];
	struct cas_jobsnap *js = NULL;
	rc = store_up(c);
	if (rc == 0)
		rc = cas_snapshot_resolve(c->store, snapshot, id);
	if (rc == 0)
		rc = cas_jobsnap_load(c->store, id, &js);
	if (rc == 0) {
		hex_encode(id, 32, hex);
		if (js->world != j->world)
			rc = crest_errx(-EINVAL, "job snapshot %.12s (job %s, step %llu) has %u ranks; this job has %u",
					hex, js->name, (unsigned long long)js->step, js->world, j->world);
	}
	uint8_t mid[32];
	if (rc == 0)
		rc = cas_jobsnap_rank(c->store, js, id, j->rank, mid);   /* names the rank when it is missing */
	if (rc == 0) {
		hex_encode(mid, 32, mhex);
		rc = restore_locked(c, mhex, r);
	}
	cas_jobsnap_free(js);
	store_used(c);
	if (rc < 0)
		return crest_errctx(rc, "crest_job_restore (job %s, rank %u)", j->name, j->rank);
	return 0;
}
