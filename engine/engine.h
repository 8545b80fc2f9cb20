/*
 * engine.h - the asynchronous ingest pipeline: from bytes to a committed
 * snapshot, in the background.
 *
 * A snapshot is begun, streams are added to it (from a file descriptor, read
 * through bounded staging buffers, or from memory the caller owns until the
 * engine releases it), then it is sealed; adding and sealing return at once
 * or block only for back-pressure. Worker threads chunk, hash, deduplicate
 * and compress segments of every stream in parallel; one writer thread
 * appends new chunks to packs through io_uring; one commit thread commits
 * snapshots in the order they were begun.
 *
 * Promises:
 *  - Bounded memory: file staging and the writer's queue each have a byte
 *    budget; producers block when it is spent.
 *  - Atomic, ordered commit: a snapshot's chunks are durable in packs before
 *    its index entries and manifest are written in one synced batch.
 *  - Memory given with engine_stream_add_memory is only read, and is handed
 *    back through its release callback as soon as the engine is done with it
 *    (before the snapshot commits): capture reuses staging buffers that way.
 *  - A failed write fails the snapshots that need it, with a message; it
 *    never commits a snapshot that references missing data. Once those
 *    have failed (no snapshot is in flight), the engine forgets what it
 *    wrote and did not commit and works again: a transient failure of the
 *    store costs the snapshots under way, not every later one.
 */
#ifndef CREST_ENGINE_H
#define CREST_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cas/cas.h"
#include "dedup/chunker.h"

struct engine;
struct engine_snap;
struct engine_stream;

/* The default unit of parallel work. Library capture cuts regions into
 * slices that are whole segments, so a region's chunks fall where they fell
 * last time and unchanged data dedups. */
#define ENGINE_SEGMENT_BYTES (4u << 20)

/* At most this many staging buffers a worker (within staging_bytes): the
 * ones it reads or works on and a few queued behind (engine.c says why). */
#define ENGINE_STAGING_PER_WORKER 4

/* New chunks are stored LZ4-compressed when that shrinks them, else raw.
 * Most GPU state does not shrink, and trying it cost a first 8 GiB library
 * checkpoint's workers 7-8 s of their 20 s on the H100 host. So a chunk
 * longer than ENGINE_LZ4_PROBE bytes and at most ENGINE_LZ4_PROBE_UPTO
 * (a page or two: memory regions are cut in 4 KiB chunks) is tried whole
 * only when LZ4 shrinks its first ENGINE_LZ4_PROBE bytes. Larger chunks,
 * cut by content from files and images, mix pages of every kind, and their
 * first KiB tells little: probed too, a 1 GiB put of memory-like data
 * stored 720.9 MiB where trying every chunk whole stores 570.1 MiB. They are
 * always tried whole. The choice rests on the chunk's bytes alone: a
 * chunk's record is the same whichever snapshot stores it. */
#define ENGINE_LZ4_PROBE 1024
#define ENGINE_LZ4_PROBE_UPTO 8192

struct engine_opts {
	unsigned workers;            /* 0: one per online core */
	size_t staging_bytes;        /* file-read buffers in flight; 0: 256 MiB */
	size_t segment_bytes;        /* unit of parallel work; 0: ENGINE_SEGMENT_BYTES */
	size_t write_queue_bytes;    /* compressed chunks waiting for the writers; 0: 128 MiB */
	unsigned lanes;              /* packs written at once (cas.h); 0: half the
	                              * workers, 1 to 8; CREST_PACK_LANES overrides */
	struct dedup_params file_chunking;    /* for files; kind 0 & avg 0: defaults */
	struct dedup_params memory_chunking;  /* for regions and images */
};

/* The defaults (see bench/RESULTS.md for why). */
void engine_opts_default(struct engine_opts *o);

int engine_open(struct cas_store *store, const struct engine_opts *o, struct engine **out);
/* Waits for every sealed snapshot to commit, then stops the threads.
 * Snapshots not yet waited for are freed. */
void engine_close(struct engine *e);

struct engine_result {
	uint8_t id[32];
	uint64_t logical_bytes;   /* all stream bytes */
	uint64_t zero_bytes;      /* stored as holes */
	uint64_t new_bytes;       /* raw bytes of chunks the store did not have */
	uint64_t stored_bytes;    /* what those took in packs, headers included */
	uint64_t chunks, new_chunks;
	uint64_t guided_chunks;   /* cut where the parent's chunk ends, without a scan */
	uint64_t ingest_ns;       /* begin to commit */
};

/* Every snapshot is labelled with the chunkers that cut it (a value such as
 * "files=cdc/2048/8192/65536 memory=fixed/4096"). A "files" snapshot whose
 * parent is one with the same label takes the parent's cuts where a file
 * has the parent's bytes, and so skips the content-defined scan of
 * unchanged data (seg_process). */
#define ENGINE_CHUNKING_LABEL "crest.chunking"

int engine_snapshot_begin(struct engine *e, const char *kind, struct engine_snap **out);
/* The manifest being built: add labels here before sealing. */
struct cas_manifest *engine_snapshot_manifest(struct engine_snap *s);
int engine_snapshot_set_tag(struct engine_snap *s, const char *tag);
/* Regular files seen with more than one link, by inode: the next path of
 * one is stored as a link to the first (FORMAT.md, "link=NAME"). */
struct engine_links {
	struct engine_link {
		dev_t dev;
		ino_t ino;
		char *name;
	} *v;
	size_t n, cap;
};
void engine_links_free(struct engine_links *l);

/* path (a file, a directory with everything below it, or a symlink, never
 * followed) into s as stream name and, below a directory, name/CHILD...:
 * contents with their holes, modes, mtimes, symlinks; a second path of an
 * inode already seen in links becomes a link to the first ("link=NAME").
 * Devices, FIFOs and sockets are skipped with a warning. crest put's walk,
 * and a checkpoint's --workdir. */
int engine_put_tree(struct engine_snap *s, const char *path, const char *name, struct engine_links *links);

/* Makes the snapshot a child of parent. Takes ownership of parent (a full
 * manifest): its chunk lists tell the workers which chunks the store already
 * has, so unchanged memory costs no index look-up. */
void engine_snapshot_set_parent(struct engine_snap *s, const uint8_t id[32], struct cas_manifest *parent);
/* For the progress line; total may grow as streams are added. */
void engine_snapshot_expect(struct engine_snap *s, uint64_t bytes);
void engine_snapshot_progress(struct engine_snap *s, uint64_t *done, uint64_t *total);

/* A stream with no data (a directory, a symlink). */
int engine_add_entry(struct engine_snap *s, const char *name, uint8_t type, uint32_t mode,
		     int64_t mtime_ns, const char *target);

/* A stream's data, added in order. With memory_chunking when `memory` is set,
 * file_chunking otherwise. */
int engine_stream_open(struct engine_snap *s, const char *name, uint8_t type, bool memory,
		       struct engine_stream **out);
struct cas_stream *engine_stream_meta(struct engine_stream *st);  /* mode, mtime, meta */
/* Appends the file fd to its end, keeping holes (SEEK_HOLE) as holes. Blocks
 * for staging buffers; the workers read the bytes into them, from a dup of
 * fd, so the caller may close fd once this returns. A read that fails, or a
 * file that shrinks meanwhile, fails the snapshot. `what` names it in errors. */
int engine_stream_add_fd(struct engine_stream *st, int fd, const char *what);
/* Appends len bytes at p. The engine reads them from worker threads and calls
 * release(arg) once, when done with all of them (perhaps before this returns). */
int engine_stream_add_memory(struct engine_stream *st, const void *p, size_t len,
			     void (*release)(void *arg), void *arg);
/* Appends len bytes of a memory stream chunk by chunk, for a caller that
 * knows which chunks changed since the parent, or their ids (the GPU
 * hashes device memory: capture/regions.c). The stream so far must be a
 * whole number of memory_chunking's fixed chunks, and so must len unless
 * this is the stream's end.
 *  - idx NULL: every chunk of len is in data, in order.
 *  - Otherwise only the n chunks idx[0..n) (ascending, numbered from this
 *    append's first chunk) are in data, back to back, each a whole chunk
 *    (the stream's short last chunk its own length). Every other chunk is
 *    the parent's chunk at the same place (engine_stream_parent): the
 *    manifest names it without reading it, and the snapshot fails if the
 *    parent has no chunk of that length there.
 *  - ids, unless NULL: the SHA-256 of each chunk in data, in order,
 *    computed elsewhere and trusted (the workers do not hash them again).
 * data, idx and ids are read until release(arg), as engine_stream_add_memory. */
int engine_stream_add_chunks(struct engine_stream *st, uint64_t len, const uint32_t *idx, size_t n,
			     const void *data, const uint8_t *ids, void (*release)(void *arg), void *arg);
/* Whether the snapshot's parent manifest (engine_snapshot_set_parent) has
 * a stream of st's name, whose chunks the workers then know: the parent's
 * id, and that stream's size. */
bool engine_stream_parent(const struct engine_stream *st, uint8_t id[32], uint64_t *size);
/* The chunk size of st's chunking when it is fixed-size; 0 when by content. */
uint32_t engine_stream_fixed_chunk(const struct engine_stream *st);
int engine_stream_close(struct engine_stream *st);

/* No more streams; commit happens once the workers are done. Returns at once. */
int engine_snapshot_seal(struct engine_snap *s);
/* True once the snapshot committed or failed; waits up to timeout_ns. */
bool engine_snapshot_timedwait(struct engine_snap *s, uint64_t timeout_ns);
/* Blocks until the snapshot committed or failed, fills r, frees s. */
int engine_snapshot_wait(struct engine_snap *s, struct engine_result *r);
/* Drops an unsealed snapshot: nothing of it is committed. */
void engine_snapshot_abort(struct engine_snap *s);
/* Asks that s fail with -EINTR ("interrupted") rather than commit: its
 * workers skip what is left, engine_stream_add_fd stops, and the
 * committer fails it unless its commit had begun (then it commits whole,
 * and the wait says so). One lock-free atomic store: safe in a signal
 * handler, on any thread, as long as s is not freed meanwhile. What its
 * workers wrote is past the store's commit marks, cut when the store
 * closes (cas_close). */
void engine_snapshot_cancel(struct engine_snap *s);

#endif
