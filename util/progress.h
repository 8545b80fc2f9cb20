/*
 * progress.h - one status line on a terminal for long work: bytes done,
 * rate, time left. Silent when stderr is not a terminal (CI, pipes, --json),
 * so logs stay clean. Updates are rate-limited; calls are cheap.
 * One progress line belongs to one thread.
 */
#ifndef CREST_UTIL_PROGRESS_H
#define CREST_UTIL_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

struct progress {
	const char *label;
	uint64_t total;      /* 0 when unknown: no time left is shown */
	uint64_t start_ns, last_ns;
	bool enabled, drawn;
};

void progress_begin(struct progress *p, const char *label, uint64_t total, bool quiet);
void progress_update(struct progress *p, uint64_t done);
void progress_end(struct progress *p);

uint64_t time_now_ns(void);           /* CLOCK_MONOTONIC */
uint64_t time_wall_ns(void);          /* CLOCK_REALTIME */
/* "1.5 GiB" style; buf holds at least 16 bytes. */
const char *fmt_bytes(uint64_t n, char *buf, unsigned cap);

#endif
