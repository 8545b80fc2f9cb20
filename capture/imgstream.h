/*
 * imgstream.h - a checkpoint's CRIU images taken straight into the engine
 * while CRIU dumps (`criu dump --stream`), instead of through tmpfs.
 *
 * Why: a dump into tmpfs allocates as many fresh pages as the job holds
 * (9 GB beside an 8 GiB CUDA job), and CRIU's dump is slower for it than
 * its pipe (bench/RESULTS.md, issue 36 item 2: the pipe alone is 0.49-0.76x
 * the tmpfs dump). Streamed, each image is read from CRIU's pipe into a
 * bounded ring of windows, every window handed to the engine as memory
 * (engine_stream_add_memory) and reused once the engine is done with it:
 * the workers chunk and hash while CRIU is still dumping, and nothing of
 * the images is kept but the ring.
 *
 * Promises:
 *  - Each image becomes the memory stream "criu/NAME" of the snapshot, as a
 *    dump into files would have made it (same bytes, same segment cuts), so
 *    a restore cannot tell the two apart.
 *  - CRIU is never left blocked on a pipe nobody reads: a failure to queue
 *    an image drains the rest of it, and imgstream_finish reports it.
 *  - Back-pressure only: when the engine falls behind, the ring empties
 *    and CRIU waits (the job stays frozen that much longer; the ring's size
 *    bounds the memory, not the time).
 *  - The ring's memory is freed when both imgstream_finish has run and the
 *    engine has given back every window, whichever comes last.
 */
#ifndef CREST_CAPTURE_IMGSTREAM_H
#define CREST_CAPTURE_IMGSTREAM_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"

/* The ring: what the measurement used (bench/transparent/dump_sink.c). */
#define IMGSTREAM_RING_BYTES (256u << 20)

struct imgstream;

/* Listens on dir/CRIUSTREAM_CAPTURE_SOCKET and, from a thread of its own,
 * takes every image CRIU sends into s until imgstream_finish. The ring
 * (IMGSTREAM_RING_BYTES) is allocated and faulted in here, before anything
 * is frozen. */
int imgstream_start(struct engine_snap *s, const char *dir, struct imgstream **out);

/* Once CRIU has exited (or was never run): stops listening, waits for the
 * images still being read and frees t; NULL is a no-op. Returns 0, or the
 * first failure (a protocol error, an image that could not be queued). An
 * image cut short by CRIU's own failure is none: CRIU says why. *bytes (may
 * be NULL): the image bytes read. No stream may be added to s until this
 * returns. */
int imgstream_finish(struct imgstream *t, uint64_t *bytes);

#endif
