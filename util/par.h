/*
 * par.h - run n independent items of work on up to one thread per core.
 *
 * For short, CPU-bound bursts (decoding or hashing a large manifest) where
 * a standing pool would cost more to keep than threads cost to start. The
 * caller's thread works too; items are handed out one at a time, so uneven
 * items balance. If no thread can be started the caller does all of them.
 */
#ifndef CREST_UTIL_PAR_H
#define CREST_UTIL_PAR_H

#include <stddef.h>

/* Calls fn(arg, i) once for every i in [0, n), on at most max_threads
 * threads (0: one per online core, at most 16), and returns when all are
 * done. fn must be safe to run concurrently for different i. */
void par_for(size_t n, unsigned max_threads, void (*fn)(void *arg, size_t i), void *arg);

#endif
