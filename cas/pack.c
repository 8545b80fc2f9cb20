/*
 * pack.c - packs: reserving places, writing records through each lane's
 * write queue (objects.h: an io_uring for a directory), syncing, and
 * reading records back; see cas.h. Packs are objects of the objects
 * table: nothing here knows a file.
 *
 * A pack starts with 16 bytes ("CRESTPAK", u32 version, u32 pack number).
 * Each record is a 56-byte header and then the stored bytes. The header:
 *   0 "CRCK"  4 codec  5 3 zero bytes  8 u32 raw length  12 u32 stored length
 *   16 u32 CRC32C of the stored bytes  20 4 zero bytes  24 the chunk's SHA-256
 * (little-endian). It makes a pack self-describing: the index can be checked
 * against it on every read and rebuilt from it if lost; the CRC32C lets
 * restores check the bytes without re-hashing them (see cas_reader_get).
 *
 * Invariant: each writer session creates new packs only (numbered past the
 * highest on disk, in the order its lanes need them) and only ever writes
 * records at places cas_pack_reserve handed out, so no two records overlap
 * and nothing committed is rewritten.
 */
#include "cas/cas_int.h"
#include "cas/format.h"
#include "util/crc32c.h"
#include "util/err.h"
#include "util/fault.h"
#include "util/progress.h"
#include "util/sha256.h"

#include <assert.h>
#include <errno.h>
#include <lz4.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RING_DEPTH 64   /* writes a batch */
/* Writeback of a pack is started every this many bytes (see pack_kick). */
#define WB_BYTES (32u << 20)
/* Completions that are not writes (whose tags are batch indexes). */
#define KICK_TAG UINT64_MAX
#define SYNC_TAG (1ull << 62)   /* | index in unsynced */

/* A finished pack: to be synced, being synced in the queue, synced, or its
 * sync failed. A failure is final: after a failed fsync Linux may report
 * the next one clean although the data is lost, so it is never retried. */
enum { PFD_DIRTY, PFD_SYNCING, PFD_SYNCED, PFD_FAILED };

void cas_pack_name(const struct cas_store *s, uint32_t pack, char *buf, size_t cap)
{
	cas_obj_name(s->objs, CAS_OBJ_PACK, pack, buf, cap);
}

int cas_pack_max_on_disk(struct cas_store *s, uint32_t *max)
{
	return cas_obj_max(s->objs, CAS_OBJ_PACK, max);
}

/* Opens the pack for writing: created with its header when new. */
static int pack_open_w(struct cas_store *s, uint32_t pack, struct cas_obj **out)
{
	struct cas_obj *f;
	int rc = cas_obj_create(s->objs, CAS_OBJ_PACK, pack, &f);
	uint64_t size = 0;
	if (rc == -EEXIST) {   /* a straggler's, or a pack made empty: written on */
		rc = cas_obj_open(s->objs, CAS_OBJ_PACK, pack, true, &f);
		if (rc == 0 && (rc = cas_obj_size(f, &size)) < 0)
			cas_obj_close(f);
	}
	if (rc < 0)
		return rc;
	if (size == 0) {
		uint8_t h[CAS_PACK_HEADER];
		cas_file_header(h, CAS_PACK_MAGIC, CAS_PACK_VERSION, pack);
		rc = cas_obj_write(f, h, sizeof(h), 0);
		if (rc < 0) {
			cas_obj_close(f);
			return crest_errctx(rc, "writing the header of a new pack");
		}
	}
	*out = f;
	return 0;
}

/* Under reserve_lock: a new pack number for lane, noted in pack_lane.
 * Numbers are handed out in reservation order across all lanes, which is
 * what recovery relies on (store.c's notes): a pack none of whose records
 * is committed is numbered above every pack with a committed record. */
static int lane_new_pack(struct cas_store *s, unsigned lane, uint32_t *pack)
{
	const uint32_t p = s->next_pack, i = p - s->first_pack;
	if (p >= CAS_FILE_NUM_MAX)
		return crest_errx(-EFBIG, "store %s has run out of pack numbers", s->dir);
	if (i >= s->npack_lane) {
		const uint32_t n = s->npack_lane ? 2 * s->npack_lane : 64;
		uint8_t *v = realloc(s->pack_lane, n);
		if (!v)
			return crest_errf(-ENOMEM, "starting a new pack in %s", s->dir);
		memset(v + s->npack_lane, 0xff, n - s->npack_lane);
		s->pack_lane = v;
		s->npack_lane = n;
	}
	s->pack_lane[i] = (uint8_t)lane;
	s->next_pack = p + 1;
	*pack = p;
	return 0;
}

/* Under reserve_lock: the lane of a pack this writer created, or -1. */
static int lane_of(const struct cas_store *s, uint32_t pack)
{
	const uint32_t i = pack - s->first_pack;
	return pack >= s->first_pack && i < s->npack_lane && s->pack_lane[i] < CAS_LANES_MAX ? s->pack_lane[i] : -1;
}

static int lane_queue(struct cas_store *s, struct cas_lane *l)
{
	/* Room for a batch of writes, the early syncs (at most RING_DEPTH / 2)
	 * and a kick: queueing never meets a full queue. */
	return l->q ? 0 : cas_queue_open(s->objs, 2 * RING_DEPTH, &l->q);
}

int cas_pack_open_writer(struct cas_store *s, uint32_t floor)
{
	uint32_t max = 0;
	int rc = cas_pack_max_on_disk(s, &max);
	if (rc < 0)
		return rc;
	/* Never below a number the index records (see store.c's notes). */
	if (floor > max + 1)
		max = floor - 1;
	s->first_pack = s->next_pack = max + 1;
	s->nlanes = 1;
	struct cas_lane *l = &s->lanes[0];
	rc = lane_queue(s, l);
	if (rc < 0)
		return rc;
	s->writer_ready = true;
	/* Create lane 0's first pack now, so that a store we cannot write to
	 * fails at open rather than in the middle of a snapshot. The other
	 * lanes create theirs when first used. */
	pthread_mutex_lock(&s->reserve_lock);
	rc = lane_new_pack(s, 0, &l->cur_pack);
	pthread_mutex_unlock(&s->reserve_lock);
	if (rc < 0)
		return rc;
	l->cur_off = CAS_PACK_HEADER;
	rc = pack_open_w(s, l->cur_pack, &l->wobj);
	if (rc < 0)
		return rc;
	l->wpack = l->cur_pack;
	l->wb_from = l->wb_end = CAS_PACK_HEADER;
	l->dir_dirty = true;  /* its directory entry is not durable yet */
	return 0;
}

unsigned cas_pack_lanes_set(struct cas_store *s, unsigned n)
{
	if (n < 1)
		n = 1;
	if (n > CAS_LANES_MAX)
		n = CAS_LANES_MAX;
	pthread_mutex_lock(&s->reserve_lock);
	s->nlanes = n;
	pthread_mutex_unlock(&s->reserve_lock);
	return n;
}

void cas_pack_mark(struct cas_store *s, const struct cas_index_entry *e, size_t n)
{
	pthread_mutex_lock(&s->reserve_lock);
	for (size_t i = 0; i < n; i++) {
		const int lane = lane_of(s, e[i].loc.pack);
		assert(lane >= 0);   /* a commit names only records this writer reserved */
		if (lane < 0)
			continue;
		struct cas_lane *l = &s->lanes[lane];
		const uint64_t end = e[i].loc.off + CAS_REC_HEADER + e[i].loc.stored;
		if (e[i].loc.pack > l->mark_pack || (e[i].loc.pack == l->mark_pack && end > l->mark_off)) {
			l->mark_pack = e[i].loc.pack;
			l->mark_off = end;
		}
	}
	pthread_mutex_unlock(&s->reserve_lock);
}

/* Cuts what this writer wrote past its last commit, lane by lane: records
 * of snapshots that failed or were abandoned. Past a lane's mark nothing is
 * referenced (struct cas_lane's invariant), and nothing is in flight once
 * the store is being closed or discards. A lane that committed nothing
 * leaves no pack at all, not even an empty one. Without this, a job
 * checkpointed every few minutes into a full disk would fill it further
 * with each try. */
static void pack_rollback(struct cas_store *s)
{
	for (uint32_t p = s->first_pack; p < s->next_pack; p++) {
		const int lane = lane_of(s, p);
		if (lane < 0)
			continue;
		const struct cas_lane *l = &s->lanes[lane];
		struct cas_obj *f;
		int rc = 0;
		if (p > l->mark_pack) {
			rc = cas_obj_remove(s->objs, CAS_OBJ_PACK, p);
		} else if (p == l->mark_pack && (rc = cas_obj_open(s->objs, CAS_OBJ_PACK, p, true, &f)) == 0) {
			rc = cas_obj_truncate(f, l->mark_off);
			cas_obj_close(f);
		}
		/* Left in place: the next writer's open cuts it, but this one
		 * must not seal a shared store's head (cache.c). */
		s->uncut |= rc < 0 && rc != -ENOENT;
	}
}

/* Closes a lane's packs; with queue, its queue too. */
static void lane_close(struct cas_lane *l, bool queue)
{
	for (unsigned i = 0; i < l->nunsynced; i++)
		cas_obj_close(l->unsynced[i].obj);
	l->nunsynced = 0;
	cas_obj_close(l->wobj);
	l->wobj = NULL;
	l->wpack = 0;
	l->dirty = false;
	if (queue) {
		free(l->unsynced);
		l->unsynced = NULL;
		cas_queue_close(l->q);
		l->q = NULL;
	}
}

void cas_pack_close_writer(struct cas_store *s)
{
	/* A broken store (a failed commit that could not be undone) may have
	 * index entries past the marks in its WAL: leave its packs whole for
	 * the next writer, which reconciles them with what the index holds. */
	/* Nor may a writer that lost a shared store's lock (its lease ran
	 * out) cut anything: another writer may have indexed it since. */
	if (s->writer_ready && !s->broken && cas_locks_writer_check(s->locks) == 0)
		pack_rollback(s);
	else if (s->writer_ready)
		s->uncut = true;
	s->writer_ready = false;
	for (unsigned i = 0; i < CAS_LANES_MAX; i++)
		lane_close(&s->lanes[i], true);
	free(s->pack_lane);
	s->pack_lane = NULL;
	s->npack_lane = 0;
}

void cas_pack_close_readers(struct cas_store *s)
{
	for (uint32_t i = 0; i < s->nrpacks; i++)
		cas_obj_close(s->rpacks[i]);
	free(s->rpacks);
	s->rpacks = NULL;
	s->nrpacks = 0;
}

int cas_pack_reserve(struct cas_store *s, unsigned lane, uint32_t stored, uint32_t raw, uint8_t codec,
		     struct cas_loc *loc)
{
	if (s->mode != CAS_WRITE || !s->writer_ready)
		return crest_errx(-EROFS, "store %s is not open for writing", s->dir);
	const uint64_t rec = CAS_REC_HEADER + (uint64_t)stored;
	pthread_mutex_lock(&s->reserve_lock);
	assert(lane < s->nlanes);
	if (lane >= s->nlanes) {
		pthread_mutex_unlock(&s->reserve_lock);
		return crest_errx(-EINVAL, "store %s: lane %u of %u", s->dir, lane, s->nlanes);
	}
	struct cas_lane *l = &s->lanes[lane];
	if (!l->cur_pack || (l->cur_off > CAS_PACK_HEADER && l->cur_off + rec > s->pack_limit)) {
		const int rc = lane_new_pack(s, lane, &l->cur_pack);
		if (rc < 0) {
			l->cur_pack = 0;
			pthread_mutex_unlock(&s->reserve_lock);
			return rc;
		}
		l->cur_off = CAS_PACK_HEADER;
	}
	loc->pack = l->cur_pack;
	loc->off = l->cur_off;
	l->cur_off += rec;
	pthread_mutex_unlock(&s->reserve_lock);
	loc->stored = stored;
	loc->raw = raw;
	loc->codec = codec;
	return 0;
}

/* Adds f (of pack) to the packs the lane's next sync must cover. */
static int pack_defer(struct cas_lane *l, struct cas_obj *f, uint32_t pack)
{
	struct cas_pack_unsynced *nu = realloc(l->unsynced, (l->nunsynced + 1) * sizeof(*nu));
	if (!nu)
		return crest_errf(-ENOMEM, "switching packs");
	l->unsynced = nu;
	l->unsynced[l->nunsynced++] = (struct cas_pack_unsynced){ .obj = f, .pack = pack, .state = PFD_DIRTY };
	return 0;
}

/* Makes pack the lane's current write target; the previous one, if any,
 * waits for a sync. */
static int pack_switch(struct cas_store *s, struct cas_lane *l, uint32_t pack)
{
	struct cas_obj *f;
	int rc = pack_open_w(s, pack, &f);
	if (rc < 0)
		return rc;
	if (l->wobj) {
		rc = pack_defer(l, l->wobj, l->wpack);
		if (rc < 0) {
			cas_obj_close(f);
			return rc;
		}
	}
	l->wobj = f;
	l->wpack = pack;
	l->wb_from = l->wb_end = CAS_PACK_HEADER;
	l->dir_dirty = true;   /* its name */
	return 0;
}

/* Starts writeback of what was written to the lane's current pack since the
 * last start, once that is WB_BYTES, without waiting for it. Otherwise the
 * kernel holds a whole snapshot's packs dirty (under its dirty limits,
 * gigabytes) and the commit's fdatasync writes them all while the job
 * waits: measured, 3.5 s of a 13 s ingest of 4 GiB. The request runs in the
 * queue's async workers, so the writer does not block on the disk here; at
 * most one is in flight, so the queue never fills. Its completion carries
 * KICK_TAG. */
static void pack_kick(struct cas_lane *l)
{
	if (l->wb_inflight || l->wb_end - l->wb_from < WB_BYTES)
		return;
	if (cas_queue_writeback(l->q, l->wobj, l->wb_from, l->wb_end - l->wb_from, KICK_TAG) < 0)
		return;   /* only a hint: the commit's sync does the work anyway */
	l->wb_inflight = true;
	l->q_inflight++;
	l->wb_from = l->wb_end;
}

/* Starts the data sync of the lane's packs finished before the last batch:
 * no write to them can still be in the queue (every batch is reaped before
 * the next), and a straggler for one reopens it (pack_defer again). Syncing
 * a pack as soon as it is done spreads over the ingest what the commit
 * would otherwise do while the job waits: the journal commit and the tail
 * of each pack. */
static void pack_sync_finished(struct cas_lane *l)
{
	for (unsigned i = 0; i < l->nunsynced && l->q_inflight < RING_DEPTH / 2; i++) {
		struct cas_pack_unsynced *p = &l->unsynced[i];
		if (p->state != PFD_DIRTY)
			continue;
		if (cas_queue_sync(l->q, p->obj, SYNC_TAG | i) < 0)
			return;
		p->state = PFD_SYNCING;
		l->q_inflight++;
	}
}

/* Notes the completion of a kick or an early sync. A failed kick costs
 * nothing (it only starts writeback; it reports no write error); a failed
 * sync is kept for cas_pack_sync to report. */
static void pack_note(struct cas_lane *l, uint64_t tag, int res)
{
	assert(l->q_inflight > 0);
	l->q_inflight--;
	if (tag == KICK_TAG) {
		l->wb_inflight = false;
		return;
	}
	struct cas_pack_unsynced *p = &l->unsynced[tag & ~SYNC_TAG];
	res = crest_fault_res("pack.sync", res);   /* tests only: util/fault.h */
	p->state = res == 0 ? PFD_SYNCED : PFD_FAILED;
	p->err = res;
}

void cas_rec_build(uint8_t *rec, const uint8_t sha[32], uint8_t codec, uint32_t raw, uint32_t stored)
{
	memset(rec, 0, CAS_REC_HEADER);
	memcpy(rec, CAS_REC_MAGIC, 4);
	rec[CAS_REC_CODEC] = codec;
	le32_put(rec + CAS_REC_RAW, raw);
	le32_put(rec + CAS_REC_STORED, stored);
	le32_put(rec + CAS_REC_CRC, crc32c(rec + CAS_REC_HEADER, stored));
	memcpy(rec + CAS_REC_SHA, sha, 32);
}

/* The handle to write pack with: the lane's current one, a new current
 * one, or, for records that arrive after their pack was left (a run
 * reserved just before a roll), the old pack reopened. */
static int pack_wobj(struct cas_store *s, struct cas_lane *l, uint32_t pack, struct cas_obj **f)
{
	if (pack == l->wpack && l->wobj) {
		*f = l->wobj;
		return 0;
	}
#ifndef NDEBUG
	pthread_mutex_lock(&s->reserve_lock);
	assert(lane_of(s, pack) == (int)(l - s->lanes));   /* a lane writes only its own packs */
	pthread_mutex_unlock(&s->reserve_lock);
#endif
	if (pack > l->wpack) {
		int rc = pack_switch(s, l, pack);
		*f = l->wobj;
		return rc;
	}
	int rc = pack_open_w(s, pack, f);
	if (rc < 0)
		return rc;
	rc = pack_defer(l, *f, pack);
	if (rc < 0)
		cas_obj_close(*f);
	return rc;
}

int cas_pack_write(struct cas_store *s, unsigned lane, const struct cas_write *w, unsigned n)
{
	assert(lane < CAS_LANES_MAX);
	struct cas_lane *l = &s->lanes[lane];
	struct cas_obj *objs[RING_DEPTH];
	unsigned done = 0;
	int rc = lane_queue(s, l);
	if (rc < 0)
		return rc;
	pack_sync_finished(l);
	while (done < n) {
		unsigned batch = n - done < RING_DEPTH ? n - done : RING_DEPTH;
		/* Every handle first (one may roll to a new pack, whose header
		 * write can fail): a failure must leave no write queued, where
		 * the next submit would run it, and must submit the syncs
		 * already queued, which pack_reap waits for. */
		for (unsigned i = 0; i < batch; i++) {
			rc = pack_wobj(s, l, w[done + i].pack, &objs[i]);
			if (rc < 0) {
				cas_queue_submit(l->q, 0);
				return rc;
			}
		}
		for (unsigned i = 0; i < batch; i++) {
			const struct cas_write *r = &w[done + i];
			/* batch <= RING_DEPTH and every batch is reaped before the
			 * next: the queue always has room (lane_queue). */
			rc = cas_queue_write(l->q, objs[i], r->data, r->len, r->off, i);
			assert(rc == 0);
			if (rc < 0) {
				cas_queue_submit(l->q, 0);
				return crest_errx(rc, "store %s: a lane's write queue is full", s->dir);
			}
		}
		pack_kick(l);
		rc = cas_queue_submit(l->q, batch);
		if (rc < 0)
			return rc;
		int first_err = 0;
		for (unsigned got = 0; got < batch;) {
			uint64_t tag;
			int res;
			rc = cas_queue_wait(l->q, &tag, &res);
			if (rc < 0)
				return rc;
			if (tag == KICK_TAG || (tag & SYNC_TAG)) {
				pack_note(l, tag, res);
				continue;
			}
			const unsigned i = (unsigned)tag;
			got++;
			res = crest_fault_res("pack.write", res);   /* tests only: util/fault.h */
			const struct cas_write *r = &w[done + i];
			if (res < 0 && !first_err) {
				char name[4096];
				cas_pack_name(s, r->pack, name, sizeof(name));
				first_err = crest_errf(res, "writing chunks to pack %s", name);
			}
			if (objs[i] == l->wobj && r->off + r->len > l->wb_end)
				l->wb_end = r->off + r->len;
		}
		if (first_err)
			return first_err;
		done += batch;
	}
	l->dirty = true;
	return 0;
}

/* Waits for every kick and early sync in the lane's queue: an entry's
 * state is final only then, and unsynced may not shrink under them. */
static int pack_reap(struct cas_lane *l)
{
	while (l->q_inflight > 0) {
		uint64_t tag;
		int res;
		const int rc = cas_queue_wait(l->q, &tag, &res);
		if (rc < 0)
			return rc;
		pack_note(l, tag, res);
	}
	return 0;
}

int cas_pack_sync(struct cas_store *s, unsigned lane)
{
	assert(lane < CAS_LANES_MAX);
	struct cas_lane *l = &s->lanes[lane];
	char name[4096];
	int rc = pack_reap(l);
	if (rc < 0)
		return rc;
	while (l->nunsynced > 0) {
		const struct cas_pack_unsynced *p = &l->unsynced[l->nunsynced - 1];
		if (p->state == PFD_FAILED) {
			cas_pack_name(s, p->pack, name, sizeof(name));
			return crest_errf(p->err, "cannot sync pack %s", name);
		}
		if (p->state == PFD_DIRTY && (rc = cas_obj_sync(p->obj)) < 0)
			return rc;
		cas_obj_close(p->obj);
		l->nunsynced--;
	}
	if (l->dirty && l->wobj && (rc = cas_obj_sync(l->wobj)) < 0)
		return rc;
	l->dirty = false;
	if (l->dir_dirty) {
		/* New packs' names must be durable before the index points
		 * into them. */
		rc = cas_obj_sync_names(s->objs, CAS_OBJ_PACK);
		if (rc < 0)
			return rc;
		l->dir_dirty = false;
	}
	return 0;
}

int cas_pack_open_read(const struct cas_store *s, uint32_t pack, struct cas_obj **out)
{
	char name[4096];
	cas_pack_name(s, pack, name, sizeof(name));
	if (pack >= CAS_FILE_NUM_MAX)
		return crest_errx(-EBADMSG, "pack number %u is out of range (damaged index entry)", pack);
	struct cas_obj *f;
	int rc = cas_obj_open(s->objs, CAS_OBJ_PACK, pack, false, &f);
	if (rc < 0)
		return rc;
	uint8_t h[CAS_PACK_HEADER];
	uint32_t version, num;
	if (cas_obj_read(f, h, sizeof(h), 0) < 0 || cas_file_header_check(h, CAS_PACK_MAGIC, &version, &num) < 0 ||
	    num != pack)
		rc = crest_errx(-EBADMSG, "%s is not a crest pack (bad header)", name);
	else if (version > CAS_PACK_VERSION)
		rc = crest_errx(-EPROTONOSUPPORT, "pack %s has version %u; this crest reads up to %u",
				name, version, CAS_PACK_VERSION);
	if (rc < 0) {
		cas_obj_close(f);
		return rc;
	}
	*out = f;
	return 0;
}

int cas_pack_discard(struct cas_store *s)
{
	if (!s->writer_ready)
		return crest_errx(-EROFS, "store %s is not open for writing", s->dir);
	if (s->broken)   /* its packs stay whole: see cas_pack_close_writer */
		return crest_errx(-EIO, "store %s: a commit failed earlier in this process; open it again",
				  s->dir);
	for (unsigned i = 0; i < CAS_LANES_MAX; i++) {
		struct cas_lane *l = &s->lanes[i];
		if (l->q) {
			const int rc = pack_reap(l);
			if (rc < 0)
				return rc;
		}
		/* Unsynced packs hold nothing committed: dropped unsynced,
		 * failed syncs with them (they are final, see PFD_FAILED). */
		lane_close(l, false);
	}
	/* Everything past each lane's mark is unreferenced now: cut it, which
	 * also gives back the space a full disk needs. Each lane's next
	 * reservation takes a new pack. */
	pthread_mutex_lock(&s->reserve_lock);
	pack_rollback(s);
	for (unsigned i = 0; i < CAS_LANES_MAX; i++)
		s->lanes[i].cur_pack = 0;
	pthread_mutex_unlock(&s->reserve_lock);
	return 0;
}

/* The store's read handle of pack, opened on first use and kept. */
static int pack_rfd(struct cas_store *s, uint32_t pack, struct cas_obj **out)
{
	if (pack >= CAS_FILE_NUM_MAX)
		return cas_pack_open_read(s, pack, out);   /* says why */
	pthread_mutex_lock(&s->rfd_lock);
	if (pack >= s->nrpacks) {
		uint32_t n = pack + 16;
		struct cas_obj **nv = realloc(s->rpacks, n * sizeof(*nv));
		if (!nv) {
			pthread_mutex_unlock(&s->rfd_lock);
			return crest_errf(-ENOMEM, "opening pack %u", pack);
		}
		memset(nv + s->nrpacks, 0, (n - s->nrpacks) * sizeof(*nv));
		s->rpacks = nv;
		s->nrpacks = n;
	}
	int rc = 0;
	if (!s->rpacks[pack])
		rc = cas_pack_open_read(s, pack, &s->rpacks[pack]);
	*out = s->rpacks[pack];
	pthread_mutex_unlock(&s->rfd_lock);
	return rc;
}

int cas_chunk_read(struct cas_store *s, const uint8_t sha[32], const struct cas_loc *loc,
		   void *raw, uint32_t cap, void *scratch)
{
	return cas_chunk_read_timed(s, sha, loc, raw, cap, scratch, NULL);
}

int cas_chunk_read_timed(struct cas_store *s, const uint8_t sha[32], const struct cas_loc *loc,
			 void *raw, uint32_t cap, void *scratch, struct cas_read_times *t)
{
	char hex[65], path[4096];
	uint64_t t0 = t ? time_now_ns() : 0;
	struct cas_obj *f;
	if (loc->raw > cap || loc->raw > CAS_CHUNK_MAX || loc->stored > CAS_CHUNK_MAX ||
	    (loc->codec == CAS_CODEC_RAW && loc->stored != loc->raw) || loc->codec > CAS_CODEC_LZ4) {
		hex_encode(sha, 32, hex);
		return crest_errx(-EBADMSG, "index entry of chunk %.16s in %s is damaged", hex, s->dir);
	}
	int rc = pack_rfd(s, loc->pack, &f);
	if (rc < 0)
		return rc;
	uint8_t h[CAS_REC_HEADER];
	void *dst = loc->codec == CAS_CODEC_RAW ? raw : scratch;
	const struct iovec iov[2] = { { h, sizeof(h) }, { dst, loc->stored } };
	rc = cas_obj_readv(f, iov, 2, loc->off);
	if (rc < 0) {
		hex_encode(sha, 32, hex);
		return crest_errctx(rc, "reading chunk %.16s", hex);
	}
	uint64_t t1 = t ? time_now_ns() : 0;
	if (t)
		t->read_ns += t1 - t0;
	const uint32_t hraw = le32_get(h + CAS_REC_RAW), hstored = le32_get(h + CAS_REC_STORED);
	const uint32_t hcrc = le32_get(h + CAS_REC_CRC);
	if (memcmp(h, CAS_REC_MAGIC, 4) || h[4] != loc->codec || hraw != loc->raw || hstored != loc->stored ||
	    memcmp(h + CAS_REC_SHA, sha, 32)) {
		cas_pack_name(s, loc->pack, path, sizeof(path));
		hex_encode(sha, 32, hex);
		return crest_errx(-EBADMSG, "chunk %.16s: record header at %s offset %llu does not match "
				  "the index (damaged pack)", hex, path, (unsigned long long)loc->off);
	}
	if (crc32c(dst, loc->stored) != hcrc) {
		cas_pack_name(s, loc->pack, path, sizeof(path));
		hex_encode(sha, 32, hex);
		return crest_errx(-EBADMSG, "chunk %.16s at %s offset %llu fails its CRC32C check "
				  "(damaged pack)", hex, path, (unsigned long long)loc->off);
	}
	if (t) {
		t0 = time_now_ns();
		t->check_ns += t0 - t1;
	}
	if (loc->codec == CAS_CODEC_LZ4) {
		int n = LZ4_decompress_safe(scratch, raw, (int)loc->stored, (int)cap);
		if (n < 0 || (uint32_t)n != loc->raw) {
			cas_pack_name(s, loc->pack, path, sizeof(path));
			hex_encode(sha, 32, hex);
			return crest_errx(-EBADMSG, "chunk %.16s at %s offset %llu does not decompress "
					  "(damaged pack)", hex, path, (unsigned long long)loc->off);
		}
	}
	if (t && loc->codec == CAS_CODEC_LZ4)
		t->decomp_ns += time_now_ns() - t0;
	return (int)loc->raw;
}

int cas_pack_drop_cache(struct cas_store *s)
{
	uint32_t max = 0;
	int rc = cas_pack_max_on_disk(s, &max), n = 0;
	if (rc < 0)
		return rc;
	/* Gaps (packs gc removed) are skipped; nothing is written or synced:
	 * packs are clean once committed, so DONTNEED drops all their pages. */
	for (uint32_t i = 0; i <= max; i++) {
		struct cas_obj *f;
		if (cas_pack_open_read(s, i, &f) < 0)
			continue;
		cas_obj_advise(f, 0, 0, CAS_OBJ_DONTNEED);
		cas_obj_close(f);
		n++;
	}
	crest_errset_str("");
	return n;
}

struct stats_ctx {
	struct cas_store *s;
	struct cas_pack_stats *st;
};

static int stats_cb(uint32_t num, void *arg)
{
	const struct stats_ctx *c = arg;
	uint64_t size;
	const int rc = cas_obj_stat(c->s->objs, CAS_OBJ_PACK, num, &size);
	if (rc == -ENOENT)
		return 0;   /* gone since the listing */
	if (rc < 0)
		return rc;
	c->st->packs++;
	c->st->pack_bytes += size;
	return 0;
}

int cas_pack_stats(struct cas_store *s, struct cas_pack_stats *st)
{
	memset(st, 0, sizeof(*st));
	struct stats_ctx c = { .s = s, .st = st };
	return cas_obj_list(s->objs, CAS_OBJ_PACK, stats_cb, &c);
}

/* Whether a record that checks out (magic, sizes, CRC32C; with hash, its
 * SHA-256 too) starts at off: 1 and its header and stored bytes in h and
 * *data, 0 if not, or -ENOMEM. */
/* A walk's read-ahead. A pack is walked record by record, a header and a
 * payload each: two reads, which on RADOS are two round trips to an OSD.
 * So the walk reads SCAN_WIN bytes at a time and takes its records from
 * there. Only bytes below size, fixed when the walk starts, are read:
 * those a writer appends meanwhile are not the walk's. */
#define SCAN_WIN ((size_t)4 << 20)
struct scan_win {
	struct cas_obj *f;
	uint64_t size;
	uint8_t *buf;         /* cap bytes, or NULL: every read direct */
	size_t cap;           /* SCAN_WIN, or the pack's size when smaller */
	uint64_t at;          /* the offset of buf[0] */
	size_t len;           /* bytes in buf */
};

static int win_read(struct scan_win *w, void *p, size_t n, uint64_t off)
{
	if (!w->buf || n > w->cap / 2)
		return cas_obj_read(w->f, p, n, off);
	if (off < w->at || off + n > w->at + w->len) {
		const size_t len = w->size - off < w->cap ? (size_t)(w->size - off) : w->cap;
		w->len = 0;
		if (len < n)
			return -EIO;   /* past the walk's end: the caller checked it is not */
		const int rc = cas_obj_read(w->f, w->buf, len, off);
		if (rc < 0)
			return rc;
		w->at = off;
		w->len = len;
	}
	memcpy(p, w->buf + (off - w->at), n);
	return 0;
}

static int scan_rec_at(struct scan_win *w, uint64_t off, bool hash, uint8_t h[CAS_REC_HEADER], uint8_t **data,
		       size_t *cap)
{
	const uint64_t size = w->size;
	if (off + CAS_REC_HEADER > size || win_read(w, h, CAS_REC_HEADER, off) < 0)
		return 0;
	const uint32_t raw = le32_get(h + CAS_REC_RAW), stored = le32_get(h + CAS_REC_STORED);
	if (memcmp(h, CAS_REC_MAGIC, 4) || h[4] > CAS_CODEC_LZ4 || raw > CAS_CHUNK_MAX ||
	    stored > CAS_CHUNK_MAX || (h[4] == CAS_CODEC_RAW && raw != stored) ||
	    off + CAS_REC_HEADER + stored > size)
		return 0;
	if (stored > *cap) {
		uint8_t *nd = realloc(*data, stored);
		if (!nd)
			return -ENOMEM;
		*data = nd;
		*cap = stored;
	}
	if (stored && win_read(w, *data, stored, off + CAS_REC_HEADER) < 0)
		return 0;
	if (crc32c(*data, stored) != le32_get(h + CAS_REC_CRC))
		return 0;
	if (!hash)
		return 1;
	uint8_t sum[32];
	uint8_t *plain = *data;
	if (h[4] == CAS_CODEC_LZ4) {
		plain = malloc(raw ? raw : 1);
		if (!plain)
			return -ENOMEM;
		if (LZ4_decompress_safe((const char *)*data, (char *)plain, (int)stored, (int)raw) != (int)raw) {
			free(plain);
			return 0;
		}
	}
	const bool ok = sha256_once(plain, raw, sum) == 0 && !memcmp(sum, h + CAS_REC_SHA, 32);
	if (plain != *data)
		free(plain);
	return ok;
}

/* The first offset past off at which a record checks out (scan_rec_at,
 * hashed), or size when none does: where a scan goes on past damage.
 * First where the record at off says it ends (damage inside its stored
 * bytes leaves its length right), then every place "CRCK" appears. */
static int scan_resync(struct scan_win *sw, uint64_t off, uint8_t h[CAS_REC_HEADER], uint8_t **data, size_t *cap,
		       uint64_t *next)
{
	struct cas_obj *const f = sw->f;
	const uint64_t size = sw->size;
	uint8_t hb[CAS_REC_HEADER];
	int rc = 0;
	if (off + sizeof(hb) <= size && cas_obj_read(f, hb, sizeof(hb), off) == 0 && !memcmp(hb, CAS_REC_MAGIC, 4) &&
	    le32_get(hb + CAS_REC_STORED) <= CAS_CHUNK_MAX) {
		*next = off + CAS_REC_HEADER + le32_get(hb + CAS_REC_STORED);
		rc = scan_rec_at(sw, *next, true, h, data, cap);
		if (rc != 0)
			return rc;
	}
	enum { WIN = 1 << 20 };
	uint8_t *w = malloc(WIN);
	if (!w)
		return -ENOMEM;
	uint64_t at = off + 1;
	*next = size;
	while (rc == 0 && at + CAS_REC_HEADER <= size) {
		const size_t got = size - at < WIN ? (size_t)(size - at) : WIN;
		if (cas_obj_read(f, w, got, at) < 0)
			break;
		const uint8_t *p = w, *end = w + got;
		while (rc == 0 && (p = memmem(p, (size_t)(end - p), CAS_REC_MAGIC, 4))) {
			rc = scan_rec_at(sw, at + (uint64_t)(p - w), true, h, data, cap);
			if (rc == 1) {
				*next = at + (uint64_t)(p - w);
				break;
			}
			p++;
		}
		at += (uint64_t)got - 3;   /* a magic across the window's end is found in the next */
	}
	free(w);
	return rc;
}

int cas_pack_scan(const struct cas_store *s, uint32_t pack, uint64_t off, bool resync,
		  int (*cb)(const struct cas_scan_rec *r, void *arg), void *arg, uint64_t *end)
{
	struct cas_obj *f;
	int rc = cas_pack_open_read(s, pack, &f);
	if (rc < 0)
		return rc;
	uint64_t size = 0;
	rc = cas_obj_size(f, &size);
	/* Without the memory for a window the walk reads directly. */
	struct scan_win w = { .f = f, .size = size, .cap = size < SCAN_WIN ? (size_t)size : SCAN_WIN };
	w.buf = w.cap ? malloc(w.cap) : NULL;
	uint8_t *data = NULL;
	size_t cap = 0;
	bool hash = false;   /* past a resync: every record is hashed */
	if (off < CAS_PACK_HEADER)
		off = CAS_PACK_HEADER;
	/* Each record is read whole and checked before the walk steps over
	 * it: a record that does not check out may be a torn tail or damage,
	 * and nothing past it can be trusted to start where it says. With
	 * resync (repair), the walk goes on at the next place a record checks
	 * out, hashed: a record found by a search may lie inside another's
	 * stored bytes (a file that holds a pack), and its SHA-256 is what
	 * makes it the chunk it names wherever it lies. */
	while (rc == 0 && off + CAS_REC_HEADER <= size) {
		uint8_t h[CAS_REC_HEADER];
		int ok = scan_rec_at(&w, off, hash, h, &data, &cap);
		if (ok == 0 && resync) {
			uint64_t next;
			ok = scan_resync(&w, off, h, &data, &cap, &next);
			if (ok >= 0) {
				char path[4096];
				cas_pack_name(s, pack, path, sizeof(path));
				fprintf(stderr, "crest: %s: bytes %llu to %llu hold no record that checks out "
					"(damage, or what a killed writer left): skipped\n", path,
					(unsigned long long)off, (unsigned long long)next);
				hash = true;
				off = next;
			}
		}
		if (ok < 0)
			rc = ok;
		if (ok <= 0)
			break;
		const uint32_t stored = le32_get(h + CAS_REC_STORED);
		const struct cas_scan_rec r = {
			.sha = h + CAS_REC_SHA, .data = data,
			.loc = { .pack = pack, .off = off, .stored = stored, .raw = le32_get(h + CAS_REC_RAW),
				 .codec = h[4] },
		};
		rc = cb(&r, arg);
		off += CAS_REC_HEADER + stored;
	}
	free(data);
	free(w.buf);
	cas_obj_close(f);
	/* With resync, bytes skipped at the end stay below it: a writer cuts
	 * what lies past a pack's end, and damage is kept for whoever looks. */
	if (end)
		*end = off;
	return rc;
}
