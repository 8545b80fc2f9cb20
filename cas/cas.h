/*
 * cas.h - crest's content-addressed store. cas/ owns every file in a store
 * directory; nothing else opens them.
 *
 *   STORE/FORMAT          "crest-store N": written first (cas_init), checked on open
 *   STORE/lock            flock()ed by the one writer, which writes
 *                         "PID COMMAND" into it for writers that wait
 *   STORE/packs/N.pack    append-only chunk records (header + LZ4 or raw data);
 *                         each header holds the chunk's SHA-256 and a CRC32C
 *                         of the stored bytes
 *   STORE/meta/N.log      append-only manifests, pieces and tags, synced before
 *                         the index batch that commits them
 *   STORE/readers         flock()ed shared by readers while open (gc.h)
 *   STORE/jobs/KEY        where a running job's history goes on (jobs.h)
 *   STORE/index/          RocksDB: a cache of the above (chunk index,
 *                         manifests, summaries, tags) and committed ends
 * cas/FORMAT.md is the specification; cas/format.h declares it.
 *
 * Underneath, the store reaches its storage through three operation
 * tables, so that a shared store can replace the directory (issue 35): the
 * index (index.h; RocksDB, index_rocks.c), the numbered objects (objects.h;
 * the directory, objects_dir.c: the meta logs go through it, the packs do
 * not yet) and the locks (locks.h; flock, locks_flock.c).
 *
 * Promises:
 *  - A chunk record is never rewritten; a pack is only appended to, by one
 *    writer process at a time, which always starts a fresh pack. Bytes left
 *    at a pack's end by a killed writer are never referenced; a writer that
 *    closes cuts what it wrote past its last commit (failed snapshots).
 *  - cas_commit makes a snapshot visible whole or not at all: callers sync
 *    the packs first (cas_pack_sync), then the meta log is synced, then one
 *    synced RocksDB batch holds the new index entries, the manifest, its
 *    summary, its tag and the committed ends. A failed commit is never
 *    listed, and a writer's open recovers what the index lost (store.c).
 *  - A manifest is immutable; its id is the SHA-256 of its encoding, checked
 *    on every load, so a damaged manifest is reported, never used.
 *  - Readers (CAS_READ) open the index read-only and may run beside a writer;
 *    they see the snapshots committed before they opened.
 * Directories are created 0700 and files 0600: snapshots hold process memory.
 */
#ifndef CREST_CAS_H
#define CREST_CAS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "cas/format.h"
#include "cas/manifest.h"

#define CAS_ID_LEN 32
#define CAS_CHUNK_MAX (32u << 20)     /* largest raw chunk a store accepts */

struct cas_store;

/* CAS_REPAIR: a writer that first sets the index aside (renamed, never
 * deleted) and rebuilds it from the packs and meta logs (cas_open says what
 * it recovered and what it could not). */
enum cas_mode { CAS_READ, CAS_WRITE, CAS_REPAIR };
enum cas_codec { CAS_CODEC_RAW = 0, CAS_CODEC_LZ4 = 1 };

/* Where a chunk lives. off is the record header's offset in the pack. */
struct cas_loc {
	uint32_t pack;
	uint32_t stored;   /* bytes of data after the header */
	uint64_t off;
	uint32_t raw;      /* bytes once decompressed */
	uint8_t codec;
};

/* A chunk index value ('c' keys): pack u32, off u64, stored u32, raw u32,
 * codec u8, little-endian (format.c). Decoding returns -EBADMSG (no
 * message) when n is not CAS_LOC_BYTES, the pack number is
 * CAS_FILE_NUM_MAX or more, or the codec is unknown. */
#define CAS_LOC_BYTES 21
#define CAS_PACK_NUM_MAX CAS_FILE_NUM_MAX
void cas_loc_encode(const struct cas_loc *l, uint8_t b[CAS_LOC_BYTES]);
int cas_loc_decode(const uint8_t *b, size_t n, struct cas_loc *l);

/* What a snapshot name may be (cas_snapshot_resolve tries a tag first,
 * and an id prefix last): CAS_NAME_TAG when it is a valid tag, CAS_NAME_PREFIX
 * when it is 4 to 64 hex digits, both, or 0 for neither (an empty name). */
enum { CAS_NAME_TAG = 1, CAS_NAME_PREFIX = 2 };
/* The newest snapshot of the store (cas_snapshot_resolve, history.h). */
#define CAS_NAME_LATEST "latest"
int cas_snapshot_name_kind(const char *name);

/* The default store: $CREST_STORE, else ./crest-store. */
const char *cas_default_path(void);

/* Makes dir a new, empty store (FORMAT written): creates the directory if
 * it is missing (not its parents) or takes an empty one. -EEXIST, with a
 * message, when dir is a store already; refuses a directory holding
 * anything else. Nothing else creates a store, so that a mistyped path is
 * an error rather than a new store. */
int cas_init(const char *dir);
/* CAS_WRITE needs an existing store (cas_init), and
 * waits while another writer holds it: saying on stderr who, every 15 s,
 * for $CREST_LOCK_TIMEOUT seconds (default 600), then -ETIMEDOUT. CAS_READ needs an
 * existing store. Refuses anything that is not a crest store of this format. */
int cas_open(const char *dir, enum cas_mode mode, struct cas_store **out);
/* CAS_WRITE, but -EWOULDBLOCK at once (no message) while another writer
 * holds the lock. */
int cas_open_nowait(const char *dir, struct cas_store **out);
void cas_close(struct cas_store *s);
/* Whether another writer is waiting for the lock this writer holds: writers
 * hold STORE/lock.wants shared while they wait. A holder that can step
 * aside (a libcrest session between checkpoints) closes the store; gc and
 * checkpoint ingests then take their turn. The _dir form asks without a
 * handle (a session that stepped aside, to see its waiter served). */
bool cas_lock_wanted(struct cas_store *s);
bool cas_lock_wanted_dir(const char *dir);
/* True when packs the index names are missing (a writer's open checks), or
 * a snapshot is marked damaged: the engine then trusts no parent's chunk
 * list without a look-up. */
bool cas_store_damaged(const struct cas_store *s);
/* True once a commit failed in the index and could not be undone in this
 * process: commits then fail until the store is opened again (whose open
 * puts it right; see the notes at cas_commit in store.c). */
bool cas_store_broken(const struct cas_store *s);

/* What a writer's open (or a repair) did to put the index right. */
struct cas_recovery {
	uint64_t records;       /* chunk records indexed from packs */
	uint64_t listed;        /* a catch-up: chunk entries indexed from the meta
				 * logs' records of them (a store on RADOS) */
	unsigned recovered;     /* snapshots committed again from the meta logs */
	unsigned dropped;       /* snapshots there that lack a manifest or piece: left out */
	unsigned damaged;       /* repair: snapshots kept without chunks they lost */
	unsigned revoked;       /* failed commits taken out of the index */
	unsigned unindexed;     /* readers: snapshots in the meta logs, not in the index,
				 * and no writer there to commit them: lost commits */
	unsigned in_progress;   /* readers: commits a live writer has in flight */
};
void cas_recovery_get(const struct cas_store *s, struct cas_recovery *r);
const char *cas_dir(const struct cas_store *s);
/* Where s keeps its index, job registry and scratch files: its directory,
 * or for a store on RADOS this node's cache of it (cache.c). */
const char *cas_local_dir(const struct cas_store *s);

/* 0 and *loc when the index has sha, -ENOENT when not, other negatives on I/O. */
int cas_chunk_lookup(struct cas_store *s, const uint8_t sha[32], struct cas_loc *loc);

/* Reads the chunk at loc into raw (cap bytes) and decompresses it. The record
 * header must match the index and the stored bytes their CRC32C. The caller
 * verifies the SHA-256 of what comes back: a read is only as good as the disk.
 * scratch must hold loc->stored bytes when the chunk is compressed.
 * Thread-safe. Returns the raw length or a negative code. */
int cas_chunk_read(struct cas_store *s, const uint8_t sha[32], const struct cas_loc *loc,
		   void *raw, uint32_t cap, void *scratch);

/* cas_chunk_read, adding to t where its time went: reading the record,
 * checking it (header, CRC32C), decompressing. For benchmarks (crest bench);
 * t NULL is cas_chunk_read. Not thread-safe on t: one per thread. */
struct cas_read_times {
	uint64_t read_ns, check_ns, decomp_ns;
};
int cas_chunk_read_timed(struct cas_store *s, const uint8_t sha[32], const struct cas_loc *loc,
			 void *raw, uint32_t cap, void *scratch, struct cas_read_times *t);
/* Asks the kernel to drop the page cache of every pack of the store
 * (posix_fadvise DONTNEED: only clean pages, only these files), so a
 * benchmark reads them from the disk. Returns the packs it reached. */
int cas_pack_drop_cache(struct cas_store *s);

/* Writer side. cas_rec_build lays out a record (header, then the stored
 * bytes already at rec + CAS_REC_HEADER) in the caller's memory, so that the
 * threads that make chunks also checksum them.
 *
 * Records go to lanes: each lane has a pack of its own being written, so
 * that one thread per lane writes several packs at once (the kernel writes
 * one file at a time: a single pack writer bounds ingest at what one thread
 * copies into the page cache). cas_pack_reserve assigns a record's place in
 * a lane (thread-safe; a lane rolls to a new pack, numbered after every pack
 * of the session, past the size limit): records reserved one after another
 * in a lane lie back to back unless it rolls. The caller must commit the
 * records of each lane in the order it reserved them (cas_pack_discard and
 * a writer's close rely on it). cas_pack_write writes runs of one lane's
 * records to their places through the lane's write queue (objects.h: io_uring
 * for a directory store); one thread at a time calls it for
 * a lane, and cas_pack_sync, which makes that lane's records durable. */
#define CAS_LANES_MAX 8
void cas_rec_build(uint8_t *rec, const uint8_t sha[32], uint8_t codec, uint32_t raw, uint32_t stored);
struct cas_write {
	uint32_t pack;
	uint64_t off;      /* where the first record was reserved */
	const void *data;  /* len bytes: whole records, back to back */
	size_t len;
};
/* The lanes reservations may use from now on, 1 to CAS_LANES_MAX (clamped;
 * returned). Only while nothing is being reserved or written. */
unsigned cas_pack_lanes_set(struct cas_store *s, unsigned n);
int cas_pack_reserve(struct cas_store *s, unsigned lane, uint32_t stored, uint32_t raw, uint8_t codec,
		     struct cas_loc *loc);
int cas_pack_write(struct cas_store *s, unsigned lane, const struct cas_write *w, unsigned n);
int cas_pack_sync(struct cas_store *s, unsigned lane);
/* After a failed write or sync: forgets every record written since the last
 * commit (the caller commits none of them), cuts them from the packs and
 * has every lane go on in a fresh pack, so later records never share a file
 * with bytes whose fate is unknown and a failed sync is not reported again.
 * Only while nothing is being reserved or written. */
int cas_pack_discard(struct cas_store *s);

/* Sequential reads for restores of large streams (regions): no SHA-256 per
 * chunk and, mostly, no index look-up.
 *
 * Why this is safe without re-hashing: a chunk's SHA-256 was computed at
 * ingest over exactly the bytes that went into its record, and the record
 * header binds that SHA-256 to a CRC32C of the stored bytes. Finding the
 * expected SHA-256 in a header (identity) and the stored bytes matching the
 * header's CRC32C (integrity: any change on disk since they were written) is
 * as good a check as re-hashing, barring deliberate forgery inside the pack,
 * which `casctl verify` (full SHA-256) is for.
 *
 * Why it is fast: the engine writes the new chunks of each segment of a
 * stream back to back, in order, so a batch of consecutive chunks lies in a
 * few stretches of a pack. A span walks a stretch: one read fills its
 * buffer with many records, cas_reader_next steps from record to record and
 * the caller takes the ones it wants (cas_reader_take). Headers are read
 * only where a record is known to start (a looked-up record, or the end of
 * one walked over), and never past the end of a record known committed
 * (cas_reader_locate raises that bound; cas_cursor.end may stop a walk
 * sooner): what a writer wrote past its last commit may be cut or rewritten.
 */
struct cas_reader;
struct cas_cursor {
	uint32_t pack;
	uint64_t off;      /* where the next record starts */
	uint64_t end;      /* walks stop here (0: at the last safe record) */
	bool valid;
};
struct cas_span {
	struct cas_cursor cur;
	uint8_t *buf;      /* the caller's buffer, cap bytes (a few MiB) */
	size_t cap;
	uint32_t pack;     /* what buf holds: len bytes of pack from base */
	uint64_t base;
	size_t len;
	uint64_t nreads, read_bytes;   /* statistics: reads made, bytes they read */
};
struct cas_rec {
	const uint8_t *sha, *hdr;   /* in the span's buffer: valid until the next call */
	uint32_t pack;
	uint64_t off;
	uint8_t codec;
	uint32_t raw, stored, crc;
};
/* One per restore, shared by its threads; opens packs once, as needed. */
int cas_reader_open(struct cas_store *s, struct cas_reader **out);
void cas_reader_close(struct cas_reader *r);
/* *cur at sha's record, cur->end at the record's end (an index look-up,
 * which also raises the bound); -ENOENT, no message, when the index has no
 * such chunk. */
int cas_reader_locate(struct cas_reader *r, const uint8_t sha[32], struct cas_cursor *cur);
/* The record at sp->cur, which then moves past it: 0, or -ENOENT where the
 * walk cannot go on (the bound, no record there, a record larger than the
 * buffer). Never an error message: whatever looks wrong is left to
 * cas_reader_get. */
int cas_reader_next(struct cas_reader *r, struct cas_span *sp, struct cas_rec *rec);
/* Checks rec (sizes, CRC32C) and unpacks it into dst (len bytes raw):
 * -EBADMSG, no message, when it does not check out, and then dst is
 * untouched if bounce (len bytes) was given. */
int cas_reader_take(struct cas_reader *r, const struct cas_rec *rec, void *dst, uint32_t len, void *bounce);
/* One chunk through the index, checked (header against the index, CRC32C)
 * and unpacked into dst; -EBADMSG with a message naming the chunk when it
 * is missing or damaged. With bounce dst is written only once all checked
 * out; without, dst may hold junk after an error (a staging buffer). */
int cas_reader_get(struct cas_reader *r, const uint8_t sha[32], void *dst, uint32_t len, void *bounce);
/* Direct reads, for stretches whose layout the caller expects (a run of
 * raw records back to back, between two located ones): the records go
 * straight to their destinations with one vectored read of n iovecs at
 * off, no span buffer and no copy. Returns the bytes read (all of them),
 * or -ENOENT where the pack cannot be opened or the stretch reaches past
 * what is known committed, or another negative errno from the read, whose
 * message is not the one to report: the walk's is. The caller checks the records in order with
 * cas_reader_check_raw: a header where a record is only expected is to be
 * believed once the record before it checked out (which makes that place a
 * record's start), and what does not check out is left to the walk and
 * cas_reader_get, which name what is wrong. */
ssize_t cas_reader_readv(struct cas_reader *r, uint32_t pack, uint64_t off, const struct iovec *iov, int n);
/* 0 when hdr (CAS_REC_HEADER bytes read from a pack) heads a raw record of
 * chunk sha, len bytes, and data (its stored bytes) match the header's
 * CRC32C: the check cas_reader_take makes. 1 when it heads an intact raw
 * record of len bytes of another chunk (the next record then starts right
 * after it). -EBADMSG, no message, if neither. */
int cas_reader_check_raw(const uint8_t *hdr, const uint8_t sha[32], const void *data, uint32_t len);

struct cas_index_entry {
	uint8_t sha[32];
	struct cas_loc loc;
};

/* Encodes m, commits entries + manifest + summary (+ tag when non-NULL),
 * and returns the new id; the commit point is one synced batch (a big
 * commit's entries reach the index just before it: store.c's notes). May
 * reorder e.
 * base (or NULL), a manifest loaded whole from this store, usually m's
 * parent, lets long extent lists be stored as deltas against its pieces
 * (manifest.h); a delta whose base the index no longer has is not written. */
int cas_commit(struct cas_store *s, struct cas_index_entry *e, size_t n,
	       const struct cas_manifest *m, const struct cas_manifest *base, const char *tag, uint8_t id[32]);
/* cas_commit in two halves, for a writer that encodes while its chunks
 * are still being made durable: the encoding (which reads the index, and
 * needs no chunk of the snapshot), then the commit, which takes enc (freed
 * on every path). The caller keeps the store open for writing between the
 * two, so that no gc takes a delta's base meanwhile. */
int cas_commit_encode(struct cas_store *s, const struct cas_manifest *m, const struct cas_manifest *base,
		      struct cas_encoded *enc, uint8_t id[32]);
int cas_commit_encoded(struct cas_store *s, struct cas_index_entry *e, size_t n, struct cas_encoded *enc,
		       const char *tag, const uint8_t id[32]);

/* The snapshot a user's name names: job:JOB, a tag, latest, a branch, a full id or a
 * unique id prefix of >= 4 hex digits, and NAME~N (cas/history.h has the
 * rules, history.c the resolver). 0 and the id, or a negative errno with a
 * message. Every command that takes a snapshot name uses it. */
int cas_snapshot_resolve(struct cas_store *s, const char *name, uint8_t id[32]);
int cas_manifest_load(struct cas_store *s, const uint8_t id[32], struct cas_manifest **out);

struct cas_snapinfo {
	uint8_t id[32];
	struct cas_manifest *head;   /* header only: no streams */
	char **tags;
	size_t ntags;
	bool damaged;                /* a repair kept it without chunks it lost */
};
/* The tags that name snapshot id, in name order; the caller frees them
 * with cas_snapshot_tags_free. */
int cas_snapshot_tags(struct cas_store *s, const uint8_t id[32], char ***tags, size_t *n);
void cas_snapshot_tags_free(char **tags, size_t n);

/* All committed snapshots, oldest first. */
int cas_snapshot_list(struct cas_store *s, struct cas_snapinfo **out, size_t *n);
void cas_snapshot_list_free(struct cas_snapinfo *v, size_t n);

/* Damaged snapshots: a repair that finds chunks of a snapshot lost (their
 * records do not check out, or their pack is gone) keeps the snapshot,
 * marked with the byte ranges it lost ('d' keys, format.h). cas_snapshot_lost
 * gives them: 0 and *n 0 (*out NULL) for a snapshot not marked; -EBADMSG
 * with a message when the mark is damaged or of a newer crest. free() *out. */
struct cas_lost {
	uint32_t stream;   /* index in the manifest's streams */
	uint64_t off, len;
};
int cas_snapshot_lost(struct cas_store *s, const uint8_t id[32], struct cas_lost **out, size_t *n);
/* Makes the lost ranges of m holes, so that a restore writes zeros there
 * and reads no chunk of them (what --allow-damaged restores): -EBADMSG with
 * a message when a range does not lie on whole extents of its stream. */
int cas_manifest_holes(struct cas_manifest *m, const struct cas_lost *v, size_t n);

/* Tags are fixed names: cas_tag_set with move false, and cas_commit, refuse
 * (-EEXIST, with a message) a tag that names another snapshot; move true
 * moves it (the user asked for it by name). cas_tag_get: 0 and the id, or
 * -ENOENT. cas_tag_free: 0 when the tag is free, -EEXIST when taken. */
int cas_tag_set(struct cas_store *s, const char *tag, const uint8_t id[32], bool move);
int cas_tag_get(struct cas_store *s, const char *tag, uint8_t id[32]);
int cas_tag_free(struct cas_store *s, const char *tag);
/* -EINVAL with a message if unusable as a new tag: not a valid tag, 4 to
 * 64 hex digits (it would shadow an id prefix), latest, or starting with
 * CAS_TAG_RESERVED (crest's own: branch refs). */
int cas_tag_check(const char *tag);

/* A fault casctl verify names: where it is (a file and offset, or an
 * index key), what is wrong and what that does, and the snapshots it
 * costs (ids). For damaged pack bytes, chunks are the chunks the index
 * locates there: the caller, which knows which snapshots use them, costs
 * them. */
struct cas_fault {
	const char *where;
	const char *what;
	const uint8_t (*ids)[32];
	size_t nids;
	const uint8_t (*chunks)[32];
	size_t nchunks;
};
/* Checks every durable byte a restore or a repair depends on besides the
 * chunks snapshots use (restore_verify re-reads and re-hashes those): every
 * meta log record, every pack up to its committed end, and the index
 * against the meta logs both ways (check.c says what exactly). cb gets
 * each fault, one call each (a non-zero return stops it and is passed on).
 * Returns the number of faults, or a negative errno with a message. */
int cas_check(struct cas_store *s, int (*cb)(const struct cas_fault *f, void *arg), void *arg);

/* Every index entry, in key order; cb returns non-zero to stop (passed on). */
int cas_index_foreach(struct cas_store *s,
		      int (*cb)(const uint8_t sha[32], const struct cas_loc *loc, void *arg), void *arg);

/* What snapshots cost the index: manifests and the pieces of long extent
 * lists they name (each piece once, however many snapshots name it). */
struct cas_index_stats {
	uint64_t manifests, manifest_bytes, pieces, piece_bytes;
};
int cas_index_stats(struct cas_store *s, struct cas_index_stats *st);

struct cas_pack_stats {
	uint64_t packs, pack_bytes;
};
int cas_pack_stats(struct cas_store *s, struct cas_pack_stats *st);

/* The meta logs on disk (gc compacts them: cas/gc.h). */
struct cas_meta_stats {
	uint64_t logs, log_bytes;
};
int cas_meta_stats(struct cas_store *s, struct cas_meta_stats *st);

#endif
