/*
 * restore.h - streaming a snapshot's chunks back out of the store.
 *
 * Every chunk is read, decompressed and its SHA-256 checked against the
 * manifest before any of its bytes reach the destination: a damaged chunk
 * stops the stream with an error naming the snapshot, stream and offset, and
 * nothing wrong is written. Chunks are fetched by several threads at once;
 * a sink receives each verified chunk with its offset, in no set order.
 * restore/ only reads the store.
 */
#ifndef CREST_RESTORE_H
#define CREST_RESTORE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "cas/cas.h"
#include "util/progress.h"

/* Where a restore's time goes, for benchmarks (crest bench restore): per
 * phase, nanoseconds summed over threads and bytes through it so far (a
 * sampler may read them while the restore runs). Off, and free, unless a
 * restore_ctx points at one. The streaming path (restore_stream) splits
 * lookup, read, check (header, CRC32C, SHA-256), decompress and copy (the
 * sink); the region path (restore_streams_to_device) reads, checks and
 * unpacks in one pass and counts it all as read, plus its device copies;
 * files (restore_stream_to_fd) take the region path and add the SHA-256
 * checks as check and their writes as copy. */
enum restore_phase {
	RESTORE_PH_LOOKUP, RESTORE_PH_READ, RESTORE_PH_CHECK, RESTORE_PH_DECOMP, RESTORE_PH_COPY,
	RESTORE_PH_DEVICE, RESTORE_PH_N
};
struct restore_phases {
	atomic_uint_fast64_t ns[RESTORE_PH_N];
	atomic_uint_fast64_t bytes[RESTORE_PH_N];
	/* Optional: told of every addition, ending now (time_now_ns), from
	 * the restore's threads: what a picture over time is drawn from. */
	void (*event)(void *arg, enum restore_phase i, uint64_t end_ns, uint64_t ns, uint64_t bytes);
	void *event_arg;
};
extern const char *const restore_phase_names[RESTORE_PH_N];
/* Adds ns and bytes to phase i of ph (thread-safe). */
void restore_phase_add(struct restore_phases *ph, enum restore_phase i, uint64_t ns, uint64_t bytes);

/* Called from restore threads; returns 0 or a negative code (with message). */
typedef int (*restore_sink_fn)(void *arg, uint64_t off, const void *data, uint32_t len);

struct restore_ctx {
	struct cas_store *store;
	const char *snapshot;        /* name used in messages */
	unsigned threads;            /* 0: one per core */
	struct progress *progress;   /* optional; driven by the calling thread */
	uint64_t progress_base;      /* bytes already done before this stream */
	struct restore_phases *phases;   /* optional: timers for benchmarks */
	/* Optional: the reader restore_streams_to_device uses, shared by the
	 * calls of one restore (restore_tree's files), so that each small file
	 * does not list and open the packs again. */
	struct cas_reader *reader;
};

/* Feeds every data chunk of st to sink (holes are skipped: the sink's
 * destination must read as zeros there). */
int restore_stream(const struct restore_ctx *c, const struct cas_stream *st, restore_sink_fn sink,
		   void *arg);

/* A sink that pwrite()s each chunk at its offset into fd. */
struct restore_fd_sink {
	int fd;
	const char *what;   /* names fd in errors */
};
int restore_sink_fd(void *arg, uint64_t off, const void *data, uint32_t len);

/* The stream into fd, a regular file: truncated to the stream's size first,
 * so holes stay holes. Not through restore_stream: windows of consecutive
 * chunks are read in long runs, each chunk's SHA-256 checked, and a window
 * written only once all of it checked out (restore/gpu.h). A file on tmpfs
 * opened for reading and writing is written by several threads through a
 * shared mapping; otherwise with pwrite. */
int restore_stream_to_fd(const struct restore_ctx *c, const struct cas_stream *st, int fd);

/* The stream into fd, a pipe: every byte from the first to the last, holes
 * as zeros, in order, each window checked as for a file before it is
 * written. The pipe is handed the windows' pages (vmsplice) and the call
 * returns only once the reader has read them all, or has gone. The caller
 * keeps SIGPIPE blocked or ignored in the calling thread (the threads it
 * starts inherit that): a reader that goes away is -EPIPE. */
int restore_stream_to_pipe(const struct restore_ctx *c, const struct cas_stream *st, int fd);
/* The stream into dst, which holds cap >= st->size bytes; holes are zeroed. */
int restore_stream_to_memory(const struct restore_ctx *c, const struct cas_stream *st, void *dst,
			     uint64_t cap);

/* Files snapshots: recreates the tree under dest (an existing empty or new
 * directory): files through a temporary name then rename, modes, mtimes,
 * symlinks; streams of other kinds (regions, images) become plain files.
 * Refuses names that would leave dest, and existing targets. */
int restore_tree(const struct restore_ctx *c, const struct cas_manifest *m, const char *dest,
		 uint64_t *bytes_out);

/* What one snapshot lost to bad chunks in one of its streams. */
struct verify_loss {
	const char *stream;          /* its name (in the snapshot's manifest) */
	uint32_t stream_index;
	uint64_t chunks, bytes;      /* uses of bad chunks, and their bytes */
	uint8_t (*shas)[32];         /* the bad chunks, each once */
	size_t nshas;
};
struct verify_snap {
	uint8_t id[32];
	struct cas_manifest *m;      /* NULL when it could not be loaded */
	char *error;                 /* then: why (manifest or piece damaged) */
	uint64_t bad_chunks, bad_bytes;
	struct verify_loss *loss;    /* streams that lost chunks */
	size_t nloss;
};
struct verify_result {
	uint64_t chunks, bytes, bad;  /* distinct chunks checked, their bytes, bad ones */
	struct verify_snap *snaps;    /* one per id asked for, in that order */
	size_t nsnaps, damaged;
};
/* Re-reads and re-hashes every chunk the given snapshots reference, each
 * distinct chunk once, and says per snapshot what it lost: a manifest or
 * extent-list piece that does not load (the whole snapshot), or the streams
 * whose chunks are missing or damaged; a bad chunk counts against every
 * snapshot that uses it. Never stops at the first damage. Prints one line
 * per bad chunk on stderr. Returns 0 when all are whole, -EBADMSG when any
 * snapshot is damaged (r filled in either way), other negatives on failure.
 * Free r with restore_verify_free. */
int restore_verify(struct cas_store *s, const uint8_t (*ids)[32], size_t nids, unsigned threads,
		   bool quiet, struct verify_result *r);
void restore_verify_free(struct verify_result *r);

#endif
