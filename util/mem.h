/*
 * mem.h - memory for large private buffers that are touched whole.
 *
 * A restore thread's window and read buffer, an ingest worker's staging
 * buffer: megabytes each, first touched page by page. A 4 KiB page costs a
 * fault on first touch (13-15 us each on a PVM guest: bench/RESULTS.md,
 * "Staging buffers bounded by the workers"), a 2 MiB huge page one fault
 * for 512 of them. mem_big_alloc aligns a buffer of 2 MiB or more to 2 MiB
 * and asks for transparent huge pages (MADV_HUGEPAGE), which most kernels
 * give only where asked (THP "madvise"). Without them it is plain memory.
 * free() frees it.
 */
#ifndef CREST_UTIL_MEM_H
#define CREST_UTIL_MEM_H

#include <stddef.h>

/* n bytes (uninitialized), or NULL with errno set. */
void *mem_big_alloc(size_t n);

#endif
