/* mem.c - see mem.h. */
#include "util/mem.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>

#define MEM_HUGE (2u << 20)

void *mem_big_alloc(size_t n)
{
	if (n < MEM_HUGE)
		return malloc(n ? n : 1);
	const size_t whole = (n + MEM_HUGE - 1) / MEM_HUGE * MEM_HUGE;   /* whole huge pages */
	void *p = NULL;
	const int rc = posix_memalign(&p, MEM_HUGE, whole);
	if (rc) {
		errno = rc;
		return NULL;
	}
	/* Advice only: a kernel without THP, or with it off, refuses, and the
	 * buffer works as plain pages. */
	(void)madvise(p, whole, MADV_HUGEPAGE);
	return p;
}
