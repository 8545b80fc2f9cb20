/*
 * push.h - libcrest's background push (crest_options.push_to): each
 * snapshot a handle commits copied into another store, only what that store
 * lacks (cas/copy.h, as crest push does), by a thread of its own, so that
 * the job never waits for it.
 *
 * Each push opens the handle's store for reading (readers run beside its
 * writer) and the other store for writing only for that copy, so another
 * node's writer of the shared store waits at most one copy. Pushes go in
 * the order the snapshots were added; a job snapshot brings its members.
 * A failed push is said on stderr at once, and the first one is
 * lib_pusher_close's result; later pushes are still tried.
 */
#ifndef CREST_LIB_PUSH_H
#define CREST_LIB_PUSH_H

#include <stdint.h>

struct lib_pusher;

/* src: the handle's store; dst: another store, which must exist (and not
 * be src). -EINVAL with a message otherwise. */
int lib_pusher_open(const char *src, const char *dst, struct lib_pusher **out);
/* Queues snapshot id (committed in src) for its push. */
void lib_pusher_add(struct lib_pusher *p, const uint8_t id[32]);
/* Waits for every queued push, then frees p: 0, or the first push's
 * failure (its message set). NULL: 0. */
int lib_pusher_close(struct lib_pusher *p);

#endif
