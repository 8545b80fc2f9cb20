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
 * CRIU's image-streamer protocol (CRIU 3.16 and later: criu/img-streamer.c,
 * images/img-streamer.proto). CRIU connects to DIR/streamer-serve.sock. For
 * each image it wants it sends a request: a u32 length (host order), then
 * an img_streamer_request_entry, whose field 1 is the file's name. The
 * server answers with a u32 length and an img_streamer_reply_entry, whose
 * field 1 says whether the image exists. When it does, CRIU passes the write
 * end of a pipe (SCM_RIGHTS, one byte of data) and reads the image from the
 * other end, in order. CRIU's processes share the one connection, taking
 * turns under a lock, and may read several images at once: each image is
 * written by a thread of its own.
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

#define IMGSRV_SOCKET "streamer-serve.sock"

struct imgsrv;

/* Listens on dir/IMGSRV_SOCKET and serves the image streams of m (by their
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
