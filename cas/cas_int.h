/* cas_int.h - the store's private state, shared by store.c and pack.c only. */
#ifndef CREST_CAS_INT_H
#define CREST_CAS_INT_H

#include "cas/cas.h"
#include "cas/index.h"
#include "cas/locks.h"
#include "cas/objects.h"

#include <pthread.h>

#define CAS_PACK_HEADER CAS_FILE_HEADER
#define CAS_PACK_LIMIT_DEFAULT (1ull << 30)
/* A pack of a store on RADOS rolls over here: well under its largest
 * object (128 MiB, osd_max_object_size), a record past it included. */
#define CAS_PACK_LIMIT_RADOS (64ull << 20)
/* A writer rolls over to a new meta log once its log would pass this: well
 * under RADOS's largest object (128 MiB), and one 'q' key a log. */
#define CAS_META_LIMIT_DEFAULT (64ull << 20)

/* A manifest past its log's committed end that the index lacks. */
struct cas_unindexed {
	uint8_t id[32];
	uint32_t log;
	uint64_t off;
};

/* One lane of the write side. Under reserve_lock: cur_pack and cur_off
 * (where the next record goes; cur_pack 0: the next reservation takes a new
 * pack), mark_pack and mark_off (the end of the lane's last committed
 * record; mark_pack 0: none). The rest belongs to the lane's thread.
 * Invariant: within a lane, records are reserved in the order they are
 * committed (the engine commits a prefix of its seqs, and reserves a job's
 * records in one lane under one lock with its seq), so whatever lies past
 * the lane's mark is referenced by nothing once no commit is in flight. */
struct cas_lane {
	uint32_t cur_pack;
	uint64_t cur_off;
	uint32_t mark_pack;
	uint64_t mark_off;
	struct cas_obj_queue *q;      /* its writes and syncs (objects.h), once used */
	struct cas_obj *wobj;         /* the handle of wpack, the pack being written */
	uint32_t wpack;
	struct cas_pack_unsynced *unsynced; /* other packs written since the last sync */
	unsigned nunsynced;
	unsigned q_inflight;          /* requests in the queue besides writes */
	bool dirty;           /* wobj written since the last sync */
	bool dir_dirty;       /* a pack created since the last sync */
	uint64_t wb_from;     /* wobj's writeback is started up to here */
	uint64_t wb_end;      /* and written up to here */
	bool wb_inflight;     /* a writeback request for wobj is in the queue */
};

#define CAS_GEN_LEN 16
/* A store's head (cache.c): its generation, its base (drawn anew by gc and
 * repair, which remove or cut what commits made) and whether it is sealed
 * (its last writer closed cleanly: every byte in RADOS is committed). */
struct cas_head {
	uint8_t gen[CAS_GEN_LEN];
	uint8_t base[CAS_GEN_LEN];
	bool sealed;
};

/* A pack's committed end, as the index records it ('p' keys). */
struct cas_pack_end {
	uint32_t pack;
	uint64_t end;
};

struct cas_store {
	char *dir;            /* its name: a directory, or "rados:POOL[/NS]" */
	char *local;          /* where its index and scratch live: dir itself, or
			       * for a shared store this node's cache (cache.c) */
	bool shared;          /* on RADOS: FORMAT and head are blobs, the index a cache */
	struct cas_head head; /* shared: the head last read or put (cache.c) */
	bool head_known;      /* head holds one */
	bool head_bumped;     /* this writer put an open head: it seals at a clean close */
	bool uncut;           /* bytes past a lane's mark were left (pack.c's rollback) */
	int cache_fd;         /* shared: CACHE/cache.lock, held while open; else -1 */
	enum cas_mode mode;
	int format;           /* the store's format version, from FORMAT */
	struct cas_locks *locks;  /* the writer's, waiters' and readers' locks (locks.h) */
	bool nowait;          /* cas_open_nowait: -EWOULDBLOCK instead of waiting */
	struct cas_index *ix;  /* the index (index.h): crest's keys above it, in store.c */
	struct cas_objects *objs;  /* its numbered files (objects.h): packs and meta logs */

	/* Read side: one read handle per pack, opened on first use. */
	pthread_mutex_t rfd_lock;
	struct cas_obj **rpacks;
	uint32_t nrpacks;

	/* Write side, in lanes (cas.h): each lane has a current pack of its own
	 * and is written by one thread at a time, so that several packs are
	 * written at once. reserve_lock guards next_pack, pack_lane and each
	 * lane's cursor and mark (struct cas_lane says which is which); the rest
	 * of a lane belongs to the thread that calls cas_pack_write and
	 * cas_pack_sync for it. */
	pthread_mutex_t reserve_lock;
	uint64_t pack_limit;
	uint32_t first_pack;  /* the first pack this writer created */
	uint32_t next_pack;   /* the number the next new pack takes */
	uint8_t *pack_lane;   /* the lane of pack first_pack + i, i < npack_lane */
	uint32_t npack_lane;
	unsigned nlanes;      /* lanes reservations may use (cas_pack_lanes_set) */
	bool writer_ready;    /* cas_pack_open_writer succeeded */
	struct cas_lane lanes[CAS_LANES_MAX];

	/* Commit state (store.c). ends: the committed end of each pack this
	 * writer committed records to, as its 'p' keys say. lost: packs the
	 * index records that are missing or shorter on disk, sorted; chunks in
	 * them count as absent for dedup. broken: a commit failed and could not
	 * be undone; no more commits through this handle, and the packs are
	 * left as they are for the next writer to reconcile. */
	struct cas_pack_end *ends;
	size_t nends;
	uint32_t *lost;
	size_t nlost;
	int broken;
	bool marked;          /* the index marks a snapshot damaged ('d') */
	struct cas_recovery rec;  /* what cas_recover / cas_hidden_load found */
	uint8_t (*hidden)[32];  /* readers: revoked ids not yet undone */
	size_t nhidden;
	struct cas_unindexed *unidx;  /* readers: commits lost (cas_hidden_load) */
	size_t nunidx;
	struct cas_obj *meta; /* this session's current meta log, once created */
	uint32_t meta_num;
	uint64_t meta_end;
	uint64_t meta_limit;  /* the size past which an append rolls over (meta.c) */
};

/* A pack written since the last cas_pack_sync, other than the current one. */
struct cas_pack_unsynced {
	struct cas_obj *obj;
	uint32_t pack;
	uint8_t state;        /* PFD_* in pack.c */
	int err;              /* PFD_FAILED: what the early sync returned */
};

/* floor: the lowest pack number this writer may create (cas_recover). */
int cas_pack_open_writer(struct cas_store *s, uint32_t floor);
void cas_pack_close_writer(struct cas_store *s);
void cas_pack_mark(struct cas_store *s, const struct cas_index_entry *e, size_t n);
void cas_pack_close_readers(struct cas_store *s);
/* The pack's name in messages (a directory store's: its path). */
void cas_pack_name(const struct cas_store *s, uint32_t pack, char *buf, size_t cap);
/* The highest pack number in the store (0: none). */
int cas_pack_max_on_disk(struct cas_store *s, uint32_t *max);
/* fsync of a file or directory by path: 0 or a negative errno. */
int cas_fsync_path(const char *path);
/* An index value of type and key (free it), or NULL with *rc
 * -ENOENT (no message) or an error (with one). */
char *cas_db_get(struct cas_store *s, char type, const void *key, size_t klen, size_t *vlen, int *rc);
/* A manifest's bytes as read from the index: checked against its id and
 * decoded (pieces not fetched); -EBADMSG with a message when damaged. */
int cas_manifest_check(const struct cas_store *s, const uint8_t id[32], const void *v, size_t n,
		       struct cas_manifest **out);
/* Fetches piece i of m from the index, with its base when it is a delta,
 * checks both against their ids and decodes it into place; hex names the
 * snapshot in messages. Threads may load different pieces at once. */
int cas_piece_load(struct cas_store *s, struct cas_manifest *m, size_t i, const char *hex);
/* Opens pack for reading and checks its header (magic, version, number):
 * 0 and the handle (cas_obj_close it), or a negative code with a message. */
int cas_pack_open_read(const struct cas_store *s, uint32_t pack, struct cas_obj **out);
/* The records of pack from off on, until one does not check out (magic,
 * sizes, CRC32C): cb gets each with its place; *end is where the walk
 * stopped. For recovery and repair, which trust nothing else. With resync
 * (repair), the walk goes on past bytes that do not check out, at the next
 * record that does, and says on stderr what it skipped; records past such
 * a place are taken only if their SHA-256 checks out too, and *end is the
 * file's end when it ends in such bytes. */
struct cas_scan_rec {
	const uint8_t *sha;
	struct cas_loc loc;
	const uint8_t *data;     /* the stored bytes */
};
int cas_pack_scan(const struct cas_store *s, uint32_t pack, uint64_t off, bool resync,
		  int (*cb)(const struct cas_scan_rec *r, void *arg), void *arg, uint64_t *end);

/* Every index entry of one type, in key order (keys without the type
 * byte); cb returns non-zero to stop (passed on). */
/* A snapshot by tag (what has CAS_NAME_TAG) or unique id prefix (what has
 * CAS_NAME_PREFIX), the tag first: the names the index holds.
 * cas_snapshot_resolve (history.c) adds latest, branches and NAME~N. */
int cas_snapshot_lookup(struct cas_store *s, const char *name, int what, uint8_t id[32]);
/* cas_tag_set without the check of a user's tag name: for crest's own
 * tags (CAS_TAG_RESERVED), such as branch refs. */
int cas_tag_put(struct cas_store *s, const char *tag, const uint8_t id[32], bool move);
/* Whether tag key k (kl bytes) is crest's own: listings leave it out. */
bool cas_tag_reserved(const char *k, size_t kl);
/* Whether the index has a key of this type (false when it cannot say). */
bool cas_db_any(struct cas_store *s, char type);
int cas_db_scan(struct cas_store *s, char type,
		int (*cb)(const char *k, size_t kl, const char *v, size_t vl, void *arg), void *arg);
/* Sorts e by id (RocksDB inserts a batch's keys in order far faster). */
void cas_entries_sort(struct cas_index_entry *e, size_t n);
/* Commits of at least this many chunk entries index them with
 * cas_entries_ingest (CREST_COMMIT_INGEST_MIN; else 65536). */
size_t cas_ingest_min(void);
/* Puts e's 'c' entries, the pieces pv ('l') and the pack ends into the
 * index as table files, built by several threads and added in one atomic,
 * durable ingest (ingest.c; step 2 in store.c's notes). 0, or -EIO or
 * -ENOMEM with a message: the ingest may then have happened or not. */
struct cas_ingest_piece {
	const uint8_t *sha;
	const uint8_t *p;
	size_t len;
};
int cas_entries_ingest(struct cas_store *s, const struct cas_index_entry *e, size_t n,
		       struct cas_ingest_piece *pv, size_t npv, const struct cas_pack_end *ends, size_t nends);
/* Removes the table files a killed ingest left in index_dir (a writer's
 * open, under the lock). */
void cas_ingest_clean(const char *index_dir);
/* Whether store dir has the files of an ingest that failed or was killed
 * (ingest.c): the one case in which a writer rebuilds an index that does
 * not open. */
bool cas_ingest_left(const char *dir);
/* s->ends with the ends of e's records merged in (a new array). */
int cas_ends_merge(const struct cas_store *s, const struct cas_index_entry *e, size_t n,
		   struct cas_pack_end **out, size_t *nout);
/* An index key of type and a pack or log number: type, then num big-endian. */
void cas_key_num(char k[5], char type, uint32_t num);
/* Queues in b the removal of snapshots ids[0..n) (sorted) from the index:
 * their manifests, summaries and every tag naming one (gc, and a writer's
 * open finishing a killed gc). */
int cas_batch_forget(struct cas_store *s, struct cas_index_batch *b, const uint8_t (*ids)[32], size_t n);
/* 0 and the readers' lock held alone, when no reader holds it shared;
 * -EBUSY when one does (gc.h). cas_readers_let_in lets them in again. */
int cas_readers_none(struct cas_store *s);
void cas_readers_let_in(struct cas_store *s);

/* A shared store's node-local index cache (cache.c says what is trusted
 * when, and what a crash may leave). */
/* The cache directory of store rados:spec, made if missing (0700). */
int cas_cache_path(const char *spec, char **out);
/* CACHE/cache.lock taken shared or exclusive (a held lock is converted);
 * cas_cache_unlock lets go of it. */
int cas_cache_lock(struct cas_store *s, bool excl);
void cas_cache_unlock(struct cas_store *s);
/* The store's head: 0, -ENOENT (no message) when no writer has opened it
 * yet, or another error. */
int cas_head_get(struct cas_store *s, struct cas_head *h);
/* 1 when the open index records head's generation as its own, 0 when not. */
int cas_cache_trusted(struct cas_store *s, const struct cas_head *head);
/* 1 when the open index may catch up to head (cas_recover_catch_up): both
 * sealed, the same base. 0 when it must be rebuilt. */
int cas_cache_can_catch_up(struct cas_store *s, const struct cas_head *head);
/* Removes CACHE/index (closed, under the exclusive cache lock). */
int cas_cache_wipe(struct cas_store *s);
/* Records head as the open index's generation (a synced batch). */
int cas_cache_mark(struct cas_store *s, const struct cas_head *head);
/* A writer: a new generation, open (and a new base when rebase, or when
 * the store had no head), recorded in the index and then put as the head,
 * before anything else in RADOS changes. */
int cas_head_bump(struct cas_store *s, bool rebase);
/* A writer closing cleanly, once nothing past its commits is left: a new
 * generation, sealed, the same way. Nothing when it never bumped. */
int cas_head_seal(struct cas_store *s);

/* Index helpers for recover.c (store.c). */
int cas_ends_load(struct cas_store *s, char type, struct cas_pack_end **out, size_t *n);
void cas_batch_end(struct cas_index_batch *b, char type, uint32_t num, uint64_t end);
void cas_batch_entry(struct cas_index_batch *b, const uint8_t sha[32], const struct cas_loc *loc);
/* A new batch of the index (index.h: commit it with cas_index_batch_commit,
 * synced; free it with cas_index_batch_free), or NULL with *rc -ENOMEM
 * and a message. */
struct cas_index_batch *cas_batch_new(struct cas_store *s, int *rc);
/* Reconciles the packs and meta logs with the index (recover.c; see the
 * notes in store.c). full: as if the index recorded nothing (repair, into
 * an empty index). *floor: pack numbers below it are taken. */
int cas_recover(struct cas_store *s, bool full, uint32_t *floor);
/* A shared store's cache brought up to a sealed head (cache.c): the commits
 * past its ends indexed, and nothing in RADOS changed. -ESTALE (with a
 * message) when what it finds is not what a sealed head promises (a pack
 * it records gone or shorter, a commit it cannot recover): the caller
 * rebuilds instead. */
int cas_recover_catch_up(struct cas_store *s);
/* Copies a format 1 store's manifests, pieces and tags into a meta log and
 * records its packs' ends (recover.c). */
int cas_upgrade_from_1(struct cas_store *s);
/* Readers: ids revoked in the meta logs past their committed ends, and
 * the commits there that the index lost (s->unidx; in progress ones are
 * only counted). May reopen the index view (recover.c says why). */
int cas_hidden_load(struct cas_store *s);
/* Whether a writer holds the lock now: the pid it wrote into STORE/lock
 * lives (a writer names itself once it has the lock, and takes its name
 * out before it lets go; a killed one leaves a pid that is gone). */
bool cas_writer_live(const struct cas_store *s);
/* A reader's index view, closed and opened again: the store as of now. */
int cas_db_reopen(struct cas_store *s);
bool cas_hidden(const struct cas_store *s, const uint8_t id[32]);
bool cas_pack_lost(const struct cas_store *s, uint32_t pack);

/* The meta log (meta.c). */
struct cas_meta_buf {
	uint8_t *p;
	size_t len, cap;
	int err;
};
struct cas_meta_item {
	uint8_t kind;
	const uint8_t *sha;
	const uint8_t *p;
	size_t len;
	uint32_t log;
	uint64_t off;
	bool damaged;     /* resync: a manifest record that does not check out
			   * (its CRC32C, magic or length), given so that a
			   * repair can name the snapshot it lost */
};
void cas_meta_path(const struct cas_store *s, uint32_t num, char *buf, size_t cap);
int cas_meta_max_on_disk(const struct cas_store *s, uint32_t *max);
/* Adds a record to b; errors are kept in b->err for cas_meta_append. */
void cas_meta_rec(struct cas_meta_buf *b, uint8_t kind, const uint8_t sha[32], const void *p, size_t len);
/* Appends b to this session's log (creating it) and syncs it. On failure
 * the log is cut back to where it ended before, as far as the disk lets. */
int cas_meta_append(struct cas_store *s, const struct cas_meta_buf *b);
int cas_meta_cut(struct cas_store *s, uint64_t end);
void cas_meta_close(struct cas_store *s);
/* The records of log num from offset from on, until one does not check out. */
/* gc: when the logs before this session's hold more than min_bytes and
 * more than twice live (the bytes of the records of what the index names,
 * which gc has counted while marking), copies all the index names into
 * this session's log and removes the older logs (meta.c says why that is
 * safe at any crash). r says what it found and did. */
struct cas_meta_compaction {
	uint64_t bytes_before, bytes_after, bytes_copied;
	uint32_t logs_removed;
};
int cas_meta_compact(struct cas_store *s, uint64_t min_bytes, uint64_t live, struct cas_meta_compaction *r);
/* With resync (repair), past records that do not check out, as
 * cas_pack_scan does (said on stderr). */
int cas_meta_walk(const struct cas_store *s, uint32_t num, uint64_t from, bool resync,
		  int (*cb)(const struct cas_meta_item *it, void *arg), void *arg, uint64_t *end);

#endif
