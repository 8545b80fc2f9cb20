/* progress.c - terminal progress line; see progress.h. */
#include "util/progress.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

uint64_t time_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t time_wall_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

const char *fmt_bytes(uint64_t n, char *buf, unsigned cap)
{
	static const char *units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double v = (double)n;
	unsigned u = 0;
	while (v >= 1024 && u < 4) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, cap, "%llu B", (unsigned long long)n);
	else
		snprintf(buf, cap, "%.1f %s", v, units[u]);
	return buf;
}

void progress_begin(struct progress *p, const char *label, uint64_t total, bool quiet)
{
	p->label = label;
	p->total = total;
	p->start_ns = p->last_ns = time_now_ns();
	p->enabled = !quiet && isatty(STDERR_FILENO);
	p->drawn = false;
}

void progress_update(struct progress *p, uint64_t done)
{
	if (!p->enabled)
		return;
	uint64_t now = time_now_ns();
	if (now - p->last_ns < 250000000ull)
		return;
	p->last_ns = now;
	double secs = (double)(now - p->start_ns) / 1e9;
	double rate = secs > 0 ? (double)done / secs : 0;
	char b1[32], b2[32], b3[32], eta[32] = "";
	if (p->total && rate > 0 && done <= p->total)
		snprintf(eta, sizeof(eta), ", %.0f s left", (double)(p->total - done) / rate);
	if (p->total)
		fprintf(stderr, "\r%s: %s of %s, %s/s%s\033[K", p->label, fmt_bytes(done, b1, sizeof(b1)),
			fmt_bytes(p->total, b2, sizeof(b2)), fmt_bytes((uint64_t)rate, b3, sizeof(b3)), eta);
	else
		fprintf(stderr, "\r%s: %s, %s/s\033[K", p->label, fmt_bytes(done, b1, sizeof(b1)),
			fmt_bytes((uint64_t)rate, b3, sizeof(b3)));
	p->drawn = true;
}

void progress_end(struct progress *p)
{
	if (p->enabled && p->drawn)
		fprintf(stderr, "\r\033[K");
	p->drawn = false;
}
