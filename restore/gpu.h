/*
 * gpu.h - restoring region streams into device memory.
 *
 * Worker threads take windows of consecutive chunks (never more than one
 * buffer's worth, never across streams), read, check (the record header's
 * SHA-256 and CRC32C: cas/cas.h) and decompress them straight into pinned
 * host buffers (raw chunks stored back to back are read into them with
 * preadv, no copy), then start an asynchronous host-to-device copy of the
 * window; each thread owns two buffers, so it fills one while the other
 * crosses PCIe. Disk (page cache), CPU and PCIe overlap. Destinations on
 * several GPUs are restored at once: each thread starts on one device's
 * windows (the host's are a group of their own) and helps the others once
 * its own are handed out.
 * A window is copied to the device only once every chunk in it checked out:
 * a damaged chunk stops the restore with an error naming snapshot, stream and
 * offset, and no byte of its window reaches the device.
 * File destinations (restore_stream_to_fd) take the same windows into each
 * thread's own buffer, check every chunk's SHA-256 against the manifest as
 * well, and write the window's data with one pwrite per stretch between
 * holes only once all of it checked out: the promise of restore.h.
 * A pipe takes the same checked windows in stream order: each thread waits
 * for the window before its own to be written, so the threads read and
 * check ahead of the reader by at most one window each.
 * The driver comes from gpu/cudrv.h; restore/ still only reads the store.
 */
#ifndef CREST_RESTORE_GPU_H
#define CREST_RESTORE_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu/cudrv.h"
#include "restore/restore.h"

struct restore_gpu_dst {
	const struct cas_stream *st;  /* source; st->size bytes are written */
	CUcontext ctx;                /* the context dst belongs to */
	CUdeviceptr dst;
	uint8_t *host;                /* non-NULL: a host region, filled in place */
	bool file;                    /* fd, a regular file of st->size bytes (holes
					 read as zeros), written with pwrite */
	bool pipe;                    /* with file: fd is a pipe (or socket), written
					 from offset 0 to the end in order, holes as
					 zeros; the only destination of its call */
	int fd;
};

struct restore_gpu_opts {
	const struct cudrv *d;        /* NULL when every destination is on the host */
	uint8_t *const *bufs;         /* pinned host buffers, at least 2 for devices */
	unsigned nbufs;
	size_t buf_bytes;             /* each; a window never exceeds it (0: 8 MiB) */
	size_t win_step;              /* windows shrink toward the end in these steps
					 (the engine's segment); 0: they do not */
};

/* Restores n streams; c->threads caps the threads (nbufs / 2 does too when
 * any destination is a device). Returns when every copy has reached the
 * device. Host destinations take the same path without the copy, the region
 * itself as the buffer: a chunk that fails its check fails the restore with
 * the same error, and the region's bytes are then unspecified (partly
 * restored anyway; a damaged raw chunk may have been read into place before
 * its check). */
int restore_streams_to_device(const struct restore_ctx *c, const struct restore_gpu_dst *dst, size_t n,
			      const struct restore_gpu_opts *o);

#endif
