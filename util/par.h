/*
 * par.h - a parallel for: n independent items on up to one thread per core,
 * the first error stopping the rest.
 *
 * For bursts of work that are over in one call (restoring a stream,
 * verifying chunks, decoding or hashing a large manifest), where a standing
 * pool would cost more to keep than threads cost to start. Threads take
 * `batch` items at a time from a shared counter, so uneven items balance
 * and neighbouring items stay together. The first item that fails stops
 * every thread; its code is returned and its message (set by fn in its own
 * thread, as crest_errf does) becomes the caller's. If no thread can be
 * started the caller does all of the work itself.
 */
#ifndef CREST_UTIL_PAR_H
#define CREST_UTIL_PAR_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/progress.h"

struct par {
	/* Set by the caller. */
	size_t n;                    /* items 0..n-1 */
	size_t batch;                /* items a thread takes at a time; 0: 1 */
	/* Item i: 0, or a negative code with a message set. */
	int (*fn)(struct par *p, void *tls, size_t i);
	/* Optional per-thread state, made once per thread before its items. */
	int (*tls_new)(struct par *p, void **tls);
	void (*tls_free)(void *tls);
	void *arg;
	/* fn adds the bytes it has done, for the progress line. */
	atomic_uint_fast64_t bytes;
	/* fn may check it to give up early inside a long item. */
	atomic_bool stop;
	/* Private to par.c. */
	atomic_size_t next;
	pthread_mutex_t lock;
	int err;
	char msg[1024];
	unsigned running;            /* under lock; done signals each exit */
	pthread_cond_t done;
};

/* Runs p->fn over every item on up to `threads` threads (0: one per online
 * core), updating prog (when non-NULL) to base + p->bytes as it goes.
 * Returns 0, or the first failure's code with its message. */
int par_run(struct par *p, unsigned threads, struct progress *prog, uint64_t base);

/* One thread per online core: the default of every parallel part of crest
 * (engine workers, restores, par_run). At least 1. */
unsigned par_cores(void);

#endif
