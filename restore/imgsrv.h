/*
 * imgsrv.h - a process snapshot's CRIU images served to `criu restore
 * --stream` straight out of the store.
 *
 * Why: written to tmpfs first, the images of an 8 GiB CUDA job took 2.4 s
 * on the GPU host before CRIU could start, and as much RAM again as the job
 * holds. Served, CRIU reads each image while the store's threads are still
 * reading and checking the rest of it: the two overlap, and nothing of the
 * images is kept but one window a thread.
 *
 * CRIU's image-streamer protocol (os/criustream.h), restore side: CRIU
 * asks for each image it wants by name and reads it from a pipe it passes;
 * it may read several images at once: each image is written by a thread of
 * its own.
 *
 * Every byte is checked as restore_stream_to_pipe checks it. A damaged chunk
 * ends its image early, CRIU fails on the short image, and imgsrv_finish
 * names the chunk. Should CRIU take the short image for whole (cut between
 * two of its entries), the tree it brought back is ended once imgsrv_finish
 * reports the damage (restore/process.c): it does not go on running.
 */
#ifndef CREST_RESTORE_IMGSRV_H
#define CREST_RESTORE_IMGSRV_H

#include <stdbool.h>
#include <stdint.h>

#include "restore/restore.h"

struct imgsrv;

/* Listens on dir/CRIUSTREAM_SERVE_SOCKET and serves the image streams of m (by their
 * base names) from a thread of its own until imgsrv_finish. c's progress
 * line, if any, is driven by the thread sending the largest image. */
int imgsrv_start(const struct restore_ctx *c, const struct cas_manifest *m, const char *dir,
		 struct imgsrv **out);

/* Once CRIU has exited: stops listening, waits for the images still being
 * sent (CRIU's exit closed their readers) and frees s; NULL is a no-op.
 * Returns 0, or the first failure to send an image, with its message: a
 * damaged chunk, a read error, or the server's own (CRIU spoke out of
 * turn). An image that CRIU stopped reading early (EPIPE) is none: CRIU
 * either had what it needed or failed, and says why itself. *bytes (may be
 * NULL): image bytes sent. */
int imgsrv_finish(struct imgsrv *s, uint64_t *bytes);

#endif
