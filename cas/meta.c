/*
 * meta.c - the meta log: every manifest, extent-list piece and tag a commit
 * makes, written and synced before the index batch that makes it visible.
 * See cas/FORMAT.md for the layout and store.c's design notes for why.
 *
 * A writer session appends to its log, STORE/meta/NNNNNNNN.log, created at
 * its first commit one past the highest on disk (as packs are); when an
 * append would take the log past meta_limit (64 MiB: under RADOS's largest
 * object), the session leaves that log as it is, committed up to its 'q'
 * end, and goes on in a new one, numbered the same way. A commit's records
 * are never split: one larger than the limit goes whole into a new log of
 * its own (on RADOS such a commit fails past 128 MiB). Logs are numbered
 * in commit order, within a session and across sessions. A log
 * starts with 16 bytes ("CRESTMET", u32 version, u32 number) and holds
 * records laid out like pack records: a 56-byte header (magic "CRMR", kind,
 * payload length, CRC32C of the payload, the SHA-256 that names it) and the
 * payload. Records are only appended; a failed commit cuts its own records
 * off again (cas_meta_cut) before it reports failure.
 *
 * The logs are objects of kind CAS_OBJ_META (objects.h): this file knows
 * their bytes, the objects table where they lie.
 */
#include "cas/cas_int.h"
#include "util/crc32c.h"
#include "util/err.h"
#include "util/sha256.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cas_meta_path(const struct cas_store *s, uint32_t num, char *buf, size_t cap)
{
	cas_obj_name(s->objs, CAS_OBJ_META, num, buf, cap);
}

int cas_meta_max_on_disk(const struct cas_store *s, uint32_t *max)
{
	return cas_obj_max(s->objs, CAS_OBJ_META, max);
}

/* Creates this session's log, its header durable and its name too. */
static int meta_create(struct cas_store *s)
{
	uint32_t max;
	int rc = cas_meta_max_on_disk(s, &max);
	if (rc < 0)
		return rc;
	const uint32_t num = max + 1;
	struct cas_obj *f;
	if ((rc = cas_obj_create(s->objs, CAS_OBJ_META, num, &f)) < 0)
		return rc;
	uint8_t h[CAS_FILE_HEADER];
	cas_file_header(h, CAS_META_MAGIC, s->shared ? CAS_META_VERSION : CAS_META_VERSION_DIR, num);
	rc = cas_obj_write(f, h, sizeof(h), 0);
	if (rc == 0)
		rc = cas_obj_sync(f);
	if (rc == 0)
		rc = cas_obj_sync_names(s->objs, CAS_OBJ_META);
	if (rc < 0) {
		char msg[512];
		crest_errcpy(msg, sizeof(msg));
		cas_obj_close(f);
		(void)cas_obj_remove(s->objs, CAS_OBJ_META, num);
		crest_errset_str(msg);
		return rc;
	}
	s->meta = f;
	s->meta_num = num;
	s->meta_end = CAS_FILE_HEADER;
	return 0;
}

void cas_meta_rec(struct cas_meta_buf *b, uint8_t kind, const uint8_t sha[32], const void *p, size_t len)
{
	if (b->err)
		return;
	const size_t need = b->len + CAS_REC_HEADER + len;
	if (need > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < need)
			cap *= 2;
		uint8_t *np = realloc(b->p, cap);
		if (!np) {
			b->err = -ENOMEM;
			return;
		}
		b->p = np;
		b->cap = cap;
	}
	uint8_t *h = b->p + b->len;
	memset(h, 0, CAS_REC_HEADER);
	memcpy(h, CAS_META_REC_MAGIC, 4);
	h[4] = kind;
	le32_put(h + 8, (uint32_t)len);
	le32_put(h + CAS_REC_CRC, crc32c(p, len));
	memcpy(h + CAS_REC_SHA, sha, 32);
	if (len)
		memcpy(h + CAS_REC_HEADER, p, len);
	b->len = need;
}

int cas_meta_append(struct cas_store *s, const struct cas_meta_buf *b)
{
	if (b->err)
		return crest_errf(b->err, "building the meta log records of a commit");
	/* Every durable change of the store's history passes here: none is
	 * made by a writer that lost its lock (a leased one, locks.h). */
	int rc = cas_locks_writer_check(s->locks);
	if (rc < 0)
		return rc;
	/* Roll over: the log stays, every record of it committed (a failed
	 * append cuts itself off before it returns), its end in the index. */
	if (s->meta && s->meta_end > CAS_FILE_HEADER && s->meta_end + b->len > s->meta_limit)
		cas_meta_close(s);
	if (!s->meta && (rc = meta_create(s)) < 0)
		return rc;
	const uint64_t old_end = s->meta_end;
	rc = cas_obj_write(s->meta, b->p, b->len, s->meta_end);
	if (rc == 0)
		rc = cas_obj_sync(s->meta);
	if (rc < 0) {
		/* The write's or the sync's message, not the cut's. */
		char msg[512];
		crest_errcpy(msg, sizeof(msg));
		cas_meta_cut(s, old_end);
		crest_errset_str(msg);
		return rc;
	}
	s->meta_end += b->len;
	return 0;
}

int cas_meta_cut(struct cas_store *s, uint64_t end)
{
	if (!s->meta)
		return 0;
	int rc = cas_obj_truncate(s->meta, end);
	if (rc == 0)
		rc = cas_obj_sync(s->meta);
	if (rc == 0)
		s->meta_end = end;
	return rc;
}

void cas_meta_close(struct cas_store *s)
{
	cas_obj_close(s->meta);
	s->meta = NULL;
}

/* Whether a record that checks out (magic, length, CRC32C) starts at off
 * of buf, which holds [base, size) of a log. */
static bool meta_rec_ok(const uint8_t *buf, uint64_t base, uint64_t size, uint64_t off)
{
	if (off + CAS_REC_HEADER > size)
		return false;
	const uint8_t *r = buf + (off - base);
	const uint32_t len = le32_get(r + 8);
	return !memcmp(r, CAS_META_REC_MAGIC, 4) && len <= size - off - CAS_REC_HEADER &&
	       crc32c(r + CAS_REC_HEADER, len) == le32_get(r + CAS_REC_CRC);
}

/* Where a walk with resync goes on past the record at off, which does not
 * check out: where that record says it ends, if a record checks out there
 * (damage inside a payload leaves its length right), else the first place
 * past off where one does, else size. */
static uint64_t meta_resync(const uint8_t *buf, uint64_t base, uint64_t size, uint64_t off)
{
	const uint8_t *r = buf + (off - base);
	const uint64_t said = off + CAS_REC_HEADER + le32_get(r + 8);
	if (!memcmp(r, CAS_META_REC_MAGIC, 4) && said < size && meta_rec_ok(buf, base, size, said))
		return said;
	const uint8_t *p = r + 1, *end = buf + (size - base);
	while (p < end && (p = memmem(p, (size_t)(end - p), CAS_META_REC_MAGIC, 4))) {
		if (meta_rec_ok(buf, base, size, base + (uint64_t)(p - buf)))
			return base + (uint64_t)(p - buf);
		p++;
	}
	return size;
}

int cas_meta_walk(const struct cas_store *s, uint32_t num, uint64_t from, bool resync,
		  int (*cb)(const struct cas_meta_item *it, void *arg), void *arg, uint64_t *end)
{
	char path[4096];
	struct cas_obj *f;
	cas_meta_path(s, num, path, sizeof(path));
	int rc = cas_obj_open(s->objs, CAS_OBJ_META, num, false, &f);
	if (rc < 0)
		return rc;
	uint8_t *buf = NULL, h[CAS_FILE_HEADER];
	uint64_t size = 0;
	rc = cas_obj_size(f, &size);
	uint64_t off = from < CAS_FILE_HEADER ? CAS_FILE_HEADER : from;
	/* Only what lies past from is read: at a writer's open that is
	 * usually nothing. buf holds [off, size). */
	if (rc == 0 && size >= CAS_FILE_HEADER)
		rc = cas_obj_read(f, h, sizeof(h), 0);
	if (rc == 0 && size > off) {
		buf = malloc(size - off);
		rc = buf ? cas_obj_read(f, buf, size - off, off) : crest_errf(-ENOMEM, "reading %s", path);
	}
	cas_obj_close(f);
	const uint64_t base = off;
	if (rc == 0 && size >= CAS_FILE_HEADER) {
		uint32_t version, n;
		if ((cas_file_header_check(h, CAS_META_MAGIC, &version, &n) < 0 || n != num ||
		     version > CAS_META_VERSION) && resync)
			/* Repair: the records still say what they are (a newer
			 * log in a store of this format is damage too). */
			fprintf(stderr, "crest: %s: its header is damaged; reading its records all the same\n", path);
		else if (cas_file_header_check(h, CAS_META_MAGIC, &version, &n) < 0 || n != num)
			rc = crest_errx(-EBADMSG, "%s is not a crest meta log (bad header)", path);
		else if (version > CAS_META_VERSION)
			rc = crest_errx(-EPROTONOSUPPORT, "%s has version %u; this crest reads up to %u",
					path, version, CAS_META_VERSION);
	}
	/* Records until the first one that does not check out: a torn tail
	 * (a writer killed mid-append) ends the walk, and so does damage,
	 * which *end then points at. With resync (repair), the walk goes on
	 * past damage at the next record that checks out: manifests and
	 * pieces are checked against their SHA-256 later, whatever their
	 * place; what is skipped is said, and stays below *end. */
	while (rc == 0 && off + CAS_REC_HEADER <= size) {
		if (!meta_rec_ok(buf, base, size, off)) {
			if (!resync)
				break;
			const uint8_t *r = buf + (off - base);
			uint64_t len = le32_get(r + 8);
			const uint64_t next = meta_resync(buf, base, size, off);
			/* A damaged manifest is passed on, by the id its header
			 * says, so that the repair names the snapshot it loses.
			 * off is a record's start (the walk goes from record to
			 * record), so its kind byte is where a manifest's is even
			 * when its magic or its length is what was damaged; the
			 * record that checks out after it then bounds it. Without
			 * one (next == size) only a record whose magic and length
			 * hold is taken for a manifest: past the last good record
			 * may lie what a killed writer left. */
			bool named = false;
			if (r[4] == CAS_META_MANIFEST && !memcmp(r, CAS_META_REC_MAGIC, 4) &&
			    len <= size - off - CAS_REC_HEADER) {
				named = true;
			} else if (r[4] == CAS_META_MANIFEST && next < size && next - off >= CAS_REC_HEADER) {
				named = true;
				if (len > next - off - CAS_REC_HEADER)
					len = next - off - CAS_REC_HEADER;
			}
			if (named) {
				const struct cas_meta_item it = { .kind = r[4], .sha = r + CAS_REC_SHA,
								  .p = r + CAS_REC_HEADER, .len = (size_t)len,
								  .log = num, .off = off, .damaged = true };
				rc = cb(&it, arg);
			}
			fprintf(stderr, "crest: %s: bytes %llu to %llu hold no record that checks out "
				"(damage, or what a killed writer left): skipped\n", path, (unsigned long long)off,
				(unsigned long long)next);
			off = next;
			continue;
		}
		const uint8_t *r = buf + (off - base);
		const uint32_t len = le32_get(r + 8);
		const struct cas_meta_item it = { .kind = r[4], .sha = r + CAS_REC_SHA,
						  .p = r + CAS_REC_HEADER, .len = len,
						  .log = num, .off = off };
		rc = cb(&it, arg);
		off += CAS_REC_HEADER + len;
	}
	free(buf);
	if (end)
		*end = off;
	return rc;
}

/* ---- compaction (gc) ----
 *
 * Logs are append-only and gc removes snapshots from the index only, so
 * without this they grow for good: a region of 8 GiB in 4 KiB chunks puts
 * 86 MB of extent-list pieces in the log at every checkpoint that touches
 * all of it. When the logs before this session's hold more than min_bytes
 * and more than twice what the index still names, everything the index
 * names (manifests, pieces, tags) is appended to this session's log and
 * synced, its committed end recorded, and then the older logs are
 * unlinked, oldest first, and their ends dropped.
 *
 * Why this is safe, at any crash:
 *  - Before the copy's end is recorded, the copied records are a log tail
 *    past its end: the next writer's open walks them and finds every
 *    snapshot already in the index (pieces and tags put again, the same).
 *  - Unlinking oldest first leaves, at any moment, a suffix of the old
 *    logs. A snapshot's delete record is in a log at least as new as its
 *    manifest's (gc's own log is made after every commit it deletes), so a
 *    manifest left on disk always has its delete record beside it: neither
 *    a reconcile nor `casctl repair` brings a deleted snapshot back. And
 *    every live snapshot is whole in this session's log.
 *  - An end ('q') kept for a log already unlinked is skipped by the
 *    reconcile (a log not on disk has no tail).
 * Readers read manifests and pieces from the index, never from the logs,
 * but for revokes past a log's end, which a writer's open has resolved
 * before gc runs. What a compaction drops: the records of expired and
 * revoked snapshots, and of commits a reconcile found it could not
 * recover (their chunks were gone). */
struct compact {
	struct cas_store *s;
	struct cas_meta_buf mb;
	uint8_t kind;
	uint64_t copied;
};

#define COMPACT_BATCH ((size_t)16 << 20)   /* bytes of records per append */

static int compact_cb(const char *k, size_t kl, const char *v, size_t vl, void *arg)
{
	struct compact *c = arg;
	if (c->kind == CAS_META_TAG) {
		if (vl != 32 || kl == 0 || kl > 128)
			return crest_errx(-EBADMSG, "store %s: a tag in the index is damaged", c->s->dir);
		cas_meta_rec(&c->mb, CAS_META_TAG, (const uint8_t *)v, k, kl);
	} else {
		if (kl != 32)
			return crest_errx(-EBADMSG, "store %s: an index key is damaged", c->s->dir);
		cas_meta_rec(&c->mb, c->kind, (const uint8_t *)k, v, vl);
	}
	if (c->mb.len < COMPACT_BATCH)
		return 0;
	const int rc = cas_meta_append(c->s, &c->mb);
	c->copied += c->mb.len;
	c->mb.len = 0;
	return rc;
}

/* The logs on disk: how many (*count), their bytes (*all) and the bytes of
 * those numbered below num (*below). */
static int logs_bytes(const struct cas_store *s, uint32_t num, uint64_t *count, uint64_t *all, uint64_t *below)
{
	uint32_t max;
	int rc = cas_meta_max_on_disk(s, &max);
	*count = *all = *below = 0;
	for (uint32_t i = 1; rc == 0 && i <= max; i++) {
		uint64_t size;
		const int st = cas_obj_stat(s->objs, CAS_OBJ_META, i, &size);
		if (st == -ENOENT)
			continue;
		if (st < 0)
			return st;
		(*count)++;
		*all += size;
		if (i < num)
			*below += size;
	}
	return rc;
}

int cas_meta_stats(struct cas_store *s, struct cas_meta_stats *st)
{
	uint64_t below;
	return logs_bytes(s, 0, &st->logs, &st->log_bytes, &below);
}

int cas_meta_compact(struct cas_store *s, uint64_t min_bytes, uint64_t live, struct cas_meta_compaction *r)
{
	memset(r, 0, sizeof(*r));
	/* This session's log first (gc made it for its delete records, unless
	 * nothing expired): the logs below it are the old ones. */
	const struct cas_meta_buf none = { 0 };
	int rc = !s->meta ? cas_meta_append(s, &none) : 0;
	uint64_t old = 0, count;
	if (rc == 0)
		rc = logs_bytes(s, s->meta_num, &count, &r->bytes_before, &old);
	r->bytes_after = r->bytes_before;
	if (rc < 0 || old <= min_bytes || old <= 2 * live)
		return rc;
	struct compact c = { .s = s };
	static const struct { char type; uint8_t kind; } what[] = {
		{ 'l', CAS_META_PIECE }, { 'm', CAS_META_MANIFEST }, { 't', CAS_META_TAG },
	};
	for (size_t i = 0; rc == 0 && i < sizeof(what) / sizeof(what[0]); i++) {
		c.kind = what[i].kind;
		rc = cas_db_scan(s, what[i].type, compact_cb, &c);
	}
	if (rc == 0 && c.mb.len) {
		rc = cas_meta_append(s, &c.mb);
		c.copied += c.mb.len;
	}
	free(c.mb.p);
	/* The copy's end, recorded before any old log goes. */
	struct cas_index_batch *b = rc == 0 ? cas_batch_new(s, &rc) : NULL;
	if (b) {
		cas_batch_end(b, 'q', s->meta_num, s->meta_end);
		rc = cas_index_batch_commit(b, "recording the compacted meta log");
		cas_index_batch_free(b);
	}
	if (rc < 0)
		return rc;
	/* Oldest first (see above). */
	b = cas_batch_new(s, &rc);
	if (!b)
		return rc;
	for (uint32_t i = 1; i < s->meta_num; i++) {
		const int rm = cas_obj_remove(s->objs, CAS_OBJ_META, i);
		if (rm == 0) {
			r->logs_removed++;
		} else if (rm != -ENOENT) {   /* ENOENT: an earlier compaction's */
			rc = rm;
			break;
		}
		char k[5];
		cas_key_num(k, 'q', i);
		cas_index_batch_delete(b, k, sizeof(k));
	}
	if (rc == 0)
		rc = cas_obj_sync_names(s->objs, CAS_OBJ_META);
	if (rc == 0)
		rc = cas_index_batch_commit(b, "dropping the ends of removed meta logs");
	cas_index_batch_free(b);
	r->bytes_copied = c.copied;
	uint64_t below;
	if (rc == 0)
		rc = logs_bytes(s, s->meta_num, &count, &r->bytes_after, &below);
	return rc;
}
