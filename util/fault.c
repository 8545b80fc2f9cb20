/* fault.c - the io_uring fault hook for tests; see fault.h. */
#include "util/fault.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

atomic_int crest_fault_on = -1;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char site_want[64];
static long nth;
static int err;
static int sticky;
static int trace_fd = -1;
/* Calls so far per site, for the trace: a handful of sites, named by
 * string literals. */
#define NSITES 8
static struct { const char *name; long calls; } sites[NSITES];
static pthread_mutex_t sites_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_long hits;

static void fault_init(void)
{
	const char *spec = getenv("CREST_FAULT_SITE");
	const char *trace = getenv("CREST_FAULT_TRACE");
	if (spec && *spec) {
		char e[32] = "", st[16] = "";
		/* SITE:N:ERRNO[:sticky] */
		if (sscanf(spec, "%63[^:]:%ld:%31[^:]:%15s", site_want, &nth, e, st) >= 2) {
			err = !strcmp(e, "ENOSPC") ? ENOSPC : atoi(e) > 0 ? atoi(e) : EIO;
			sticky = !strcmp(st, "sticky");
		} else {
			nth = 0;
		}
	}
	if (trace && *trace)
		trace_fd = open(trace, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	crest_fault_on = nth > 0 || trace_fd >= 0;
}

int crest_fault_res_slow(const char *site, int res)
{
	pthread_once(&once, fault_init);
	if (!crest_fault_on)
		return res;
	if (trace_fd >= 0) {
		long c = 0;
		pthread_mutex_lock(&sites_lock);
		for (int i = 0; i < NSITES; i++)
			if (!sites[i].name || !strcmp(sites[i].name, site)) {
				sites[i].name = site;
				c = ++sites[i].calls;
				break;
			}
		pthread_mutex_unlock(&sites_lock);
		char line[128];
		int n = snprintf(line, sizeof(line), "uring:%s %ld -\n", site, c);
		if (write(trace_fd, line, (size_t)n) < 0) {
			/* a lost trace line only shortens the enumeration */
		}
	}
	if (nth <= 0 || strcmp(site, site_want))
		return res;
	const long n = atomic_fetch_add(&hits, 1) + 1;
	if (n < nth || (n > nth && !sticky))
		return res;
	fprintf(stderr, "crest: fault hook: %s #%ld fails with %s\n", site, n, strerror(err));
	return -err;
}

void crest_fault_die(const char *site)
{
	/* Read each time: a handful of calls per run, none on a hot path. */
	const char *want = getenv("CREST_FAULT_DIE");
	if (!want || strcmp(want, site))
		return;
	fprintf(stderr, "crest: fault hook: killed at %s\n", site);
	raise(SIGKILL);
}

void crest_fault_pause(const char *site)
{
	/* Read each time, as crest_fault_die: a few calls per run. */
	const char *want = getenv("CREST_FAULT_PAUSE");
	const size_t n = strlen(site);
	if (!want || strncmp(want, site, n) || want[n] != ':' || !want[n + 1])
		return;
	const char *file = want + n + 1;
	const int fd = open(file, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	close(fd);
	for (int i = 0; i < 12000 && access(file, F_OK) == 0; i++) {
		struct timespec ts = { 0, 10 * 1000000L };
		nanosleep(&ts, NULL);
	}
}
