/*
 * fail.h - how the library benches stop on a call that fails: one line
 * naming the bench, the call and crest's message, then exit 1 (a bench
 * measures, it does not recover). Define BENCH_NAME (a string) before
 * including; CU also needs `d`, the bench's driver (gpu/cudrv.h). Included
 * by one .c of each bench.
 */
#ifndef CREST_BENCH_FAIL_H
#define CREST_BENCH_FAIL_H

#include <stdio.h>
#include <stdlib.h>

#ifndef BENCH_NAME
#error "define BENCH_NAME before including bench/library/fail.h"
#endif

static void die(const char *what, int rc)
{
	fprintf(stderr, BENCH_NAME ": %s failed (%d): %s\n", what, rc, crest_errmsg());
	exit(1);
}

#define OK(call)                          \
	do {                              \
		int rc_ = (call);         \
		if (rc_ < 0)              \
			die(#call, rc_);  \
	} while (0)

#define CU(call)                                                 \
	do {                                                     \
		int rc_ = cudrv_check(d, (call), #call);         \
		if (rc_ < 0)                                     \
			die(#call, rc_);                         \
	} while (0)

#endif
