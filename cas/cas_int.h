/* cas_int.h - the store's private state, shared by store.c and pack.c only. */
#ifndef CREST_CAS_INT_H
#define CREST_CAS_INT_H

#include "cas/cas.h"

#include <liburing.h>
#include <pthread.h>
#include <rocksdb/c.h>

#define CAS_PACK_MAGIC "CRESTPAK"
#define CAS_PACK_HEADER 16
#define CAS_PACK_LIMIT_DEFAULT (1ull << 30)
#define CAS_REC_MAGIC "CRCK"
#define CAS_REC_CRC 16     /* offsets in a record header; see pack.c */
#define CAS_REC_SHA 24

struct cas_store {
	char *dir;
	enum cas_mode mode;
	int lock_fd;
	rocksdb_t *db;
	rocksdb_options_t *opts;
	rocksdb_block_based_table_options_t *topts;
	rocksdb_filterpolicy_t *bloom;    /* owned by topts once set */
	rocksdb_cache_t *cache;
	rocksdb_readoptions_t *ropts;
	rocksdb_readoptions_t *ropts_nofill;   /* look-ups that should not evict (db_has) */
	rocksdb_writeoptions_t *wopts;

	/* Read side: one O_RDONLY descriptor per pack, opened on first use. */
	pthread_mutex_t rfd_lock;
	int *rfds;
	uint32_t nrfds;

	/* Write side. reserve_lock guards cur_pack/cur_off; the rest belongs to
	 * the one thread that calls cas_pack_write and cas_pack_sync. */
	pthread_mutex_t reserve_lock;
	uint32_t cur_pack;
	uint64_t cur_off;
	uint64_t pack_limit;
	uint32_t first_pack;  /* the first pack this writer created */
	uint32_t mark_pack;   /* end of the last committed record: what lies */
	uint64_t mark_off;    /* beyond it at close is referenced by nothing */
	struct io_uring ring;
	bool ring_ready;
	int wfd;              /* descriptor of wfd_pack, the pack being written */
	uint32_t wfd_pack;
	struct cas_pack_fd *unsynced; /* other packs written since the last sync */
	unsigned nunsynced;
	unsigned ring_inflight;       /* requests in the ring besides writes */
	bool dirty;           /* wfd written since the last sync */
	uint64_t wb_from;     /* wfd's writeback is started up to here */
	uint64_t wb_end;      /* and written up to here */
	bool wb_inflight;     /* a writeback request for wfd is in the ring */
};

/* A pack written since the last cas_pack_sync, other than the current one. */
struct cas_pack_fd {
	int fd;
	uint32_t pack;
	uint8_t state;        /* PFD_* in pack.c */
	int err;              /* PFD_FAILED: what the early sync returned */
};

int cas_pack_open_writer(struct cas_store *s);
void cas_pack_close_writer(struct cas_store *s);
void cas_pack_mark(struct cas_store *s, const struct cas_index_entry *e, size_t n);
void cas_pack_close_readers(struct cas_store *s);
void cas_pack_path(const struct cas_store *s, uint32_t pack, char *buf, size_t cap);
int cas_pack_max_on_disk(struct cas_store *s, uint32_t *max);

#endif
