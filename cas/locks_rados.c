/*
 * locks_rados.c - the locks of locks.h as RADOS object locks (cls_lock) in
 * the store's pool and namespace (issue 35): the object "lock" (the
 * writer's, exclusive; its holder writes "PID HOST COMMAND" into its
 * bytes), "lock.wants" (shared by each waiting writer) and "readers"
 * (shared by readers, exclusive for gc). The store is named
 * "POOL[/NAMESPACE]" (rados.h).
 *
 * Leases: every lock is taken for CREST_RADOS_LEASE seconds (30 unless
 * set; 1 to 3600), and a thread of the handle renews what it holds every
 * third of that. A holder that dies, or is cut off from the cluster, stops
 * renewing, and its locks go when the lease runs out: the next writer (or
 * gc) takes over then, never sooner. A renewal that fails (the lease ran
 * out before it: a holder stopped for longer than the lease) loses the
 * lock for good: the handle says so on stderr at once, writer_check
 * refuses from then on (the store asks it before every meta-log append, so
 * nothing is committed under a lock another may hold), and writer_try,
 * writer_live and readers_none answer as if it had never been held.
 * Without librados' headers (CREST_HAVE_RADOS), open says -ENOTSUP.
 */
#include "cas/locks.h"
#include "util/err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef CREST_HAVE_RADOS

static int rl_open(const char *spec, struct cas_locks **out)
{
	(void)out;
	return crest_errx(-ENOTSUP, "store rados:%s: this crest was built without librados (librados-dev)", spec);
}

const struct cas_locks_ops cas_locks_rados = { .name = "rados", .open = rl_open };

#else

#include "cas/rados.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define R cas_R
#define LOCK_NAME "crest"

enum { L_WRITER, L_WANT, L_READER, L_GC, L_KINDS };

static const struct {
	const char *oid, *what;
	bool exclusive;
} kinds[L_KINDS] = {
	[L_WRITER] = { "lock", "the writer's lock", true },
	[L_WANT] = { "lock.wants", "a waiting writer's flag", false },
	[L_READER] = { "readers", "a reader's hold", false },
	[L_GC] = { "readers", "gc's hold of the readers' lock", true },
};

struct rados_locks {
	struct cas_locks base;
	char *spec;
	rados_t cluster;
	rados_ioctx_t io;
	char cookie[96];          /* this handle's: host, pid and a random part */
	unsigned lease_s;
	pthread_mutex_t mu;       /* held[], lost, stop */
	pthread_cond_t cv;
	bool held[L_KINDS];
	bool lost[L_KINDS];
	bool stop, renewing;
	pthread_t renewer;
};

static unsigned lease_seconds(void)
{
	const char *v = getenv("CREST_RADOS_LEASE");
	const long n = v ? strtol(v, NULL, 10) : 0;
	return n >= 1 && n <= 3600 ? (unsigned)n : 30;
}

/* Takes (or, with MUST_RENEW, renews) lock k for one lease. */
static int take(struct rados_locks *r, int k, uint8_t flags)
{
	struct timeval tv = { .tv_sec = r->lease_s };
	char desc[64];
	snprintf(desc, sizeof(desc), "crest pid %d", (int)getpid());
	return kinds[k].exclusive
		       ? R.rados_lock_exclusive(r->io, kinds[k].oid, LOCK_NAME, r->cookie, desc, &tv, flags)
		       : R.rados_lock_shared(r->io, kinds[k].oid, LOCK_NAME, r->cookie, LOCK_NAME, desc, &tv, flags);
}

/* Renews what the handle holds every third of the lease, until stop. */
static void *renew_loop(void *arg)
{
	struct rados_locks *r = arg;
	pthread_mutex_lock(&r->mu);
	while (!r->stop) {
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		const long step_ms = r->lease_s * 1000L / 3;
		until.tv_sec += step_ms / 1000;
		until.tv_nsec += (step_ms % 1000) * 1000000L;
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		while (!r->stop && pthread_cond_timedwait(&r->cv, &r->mu, &until) != ETIMEDOUT)
			;
		for (int k = 0; k < L_KINDS && !r->stop; k++) {
			if (!r->held[k])
				continue;
			const int rc = take(r, k, LIBRADOS_LOCK_FLAG_MUST_RENEW);
			if (rc == 0)
				continue;
			r->held[k] = false;
			r->lost[k] = true;
			fprintf(stderr, "crest: store rados:%s: %s was lost: its renewal failed (%s); the lease of "
				"%u s ran out before it, and another may hold it now\n", r->spec, kinds[k].what,
				strerror(-rc), r->lease_s);
		}
	}
	pthread_mutex_unlock(&r->mu);
	return NULL;
}

/* Lock k, for a lease, renewed from then on. 0, or the error of the
 * attempt (no message). */
static int hold(struct rados_locks *r, int k)
{
	pthread_mutex_lock(&r->mu);
	int rc = r->held[k] ? 0 : take(r, k, 0);
	if (rc == -EEXIST)
		rc = 0;   /* ours already (a renewal raced): held */
	if (rc == 0) {
		r->held[k] = true;
		r->lost[k] = false;
		if (!r->renewing && pthread_create(&r->renewer, NULL, renew_loop, r) == 0)
			r->renewing = true;
	}
	pthread_mutex_unlock(&r->mu);
	return rc;
}

static void let_go(struct rados_locks *r, int k)
{
	pthread_mutex_lock(&r->mu);
	if (r->held[k])
		R.rados_unlock(r->io, kinds[k].oid, LOCK_NAME, r->cookie);
	r->held[k] = false;
	pthread_mutex_unlock(&r->mu);
}

/* How many hold lock k now (expired leases do not count); 0 as well when
 * RADOS cannot say. */
static int holders(const struct rados_locks *r, int k)
{
	int excl = 0;
	char tag[256], clients[4096], cookies[4096], addrs[4096];
	size_t tl = sizeof(tag), cl = sizeof(clients), kl = sizeof(cookies), al = sizeof(addrs);
	const ssize_t n = R.rados_list_lockers(r->io, kinds[k].oid, LOCK_NAME, &excl, tag, &tl, clients, &cl,
					       cookies, &kl, addrs, &al);
	if (n == -ERANGE)
		return 1;   /* too many to list: held */
	return n > 0 ? (int)n : 0;
}

static int rl_open(const char *spec, struct cas_locks **out)
{
	struct rados_locks *r = calloc(1, sizeof(*r));
	if (!r || !(r->spec = strdup(spec))) {
		free(r);
		return crest_errf(-ENOMEM, "opening the locks of store rados:%s", spec);
	}
	const int rc = cas_rados_connect(spec, &r->cluster, &r->io);
	if (rc < 0) {
		free(r->spec);
		free(r);
		return rc;
	}
	r->base.ops = &cas_locks_rados;
	r->lease_s = lease_seconds();
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
	char host[64] = "";
	gethostname(host, sizeof(host) - 1);
	uint64_t rnd = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)r;
	const int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		if (read(fd, &rnd, sizeof(rnd)) < 0) {
			/* the time, the pid and an address do */
		}
		close(fd);
	}
	snprintf(r->cookie, sizeof(r->cookie), "%s:%d:%016llx", host, (int)getpid(), (unsigned long long)rnd);
	*out = &r->base;
	return 0;
}

/* The holder's "PID HOST COMMAND" (cmdline's words joined by spaces). */
static void name_text(char *text, size_t cap)
{
	char cmd[256], host[64] = "";
	gethostname(host, sizeof(host) - 1);
	cas_locks_command(cmd, sizeof(cmd));
	snprintf(text, cap, "%d %s %s\n", (int)getpid(), host[0] ? host : "-", cmd);
}

static void rl_close(struct cas_locks *l)
{
	struct rados_locks *r = (struct rados_locks *)l;
	if (!r)
		return;
	pthread_mutex_lock(&r->mu);
	r->stop = true;
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
	if (r->renewing)
		pthread_join(r->renewer, NULL);
	/* The name goes before the lock does, as with flock (locks_flock.c). */
	if (r->held[L_WRITER])
		R.rados_write_full(r->io, kinds[L_WRITER].oid, "", 0);
	for (int k = 0; k < L_KINDS; k++)
		let_go(r, k);
	cas_rados_disconnect(r->cluster, r->io);
	pthread_cond_destroy(&r->cv);
	pthread_mutex_destroy(&r->mu);
	free(r->spec);
	free(r);
}

static int rl_writer_try(struct cas_locks *l)
{
	struct rados_locks *r = (struct rados_locks *)l;
	const int rc = hold(r, L_WRITER);
	if (rc == -EBUSY)
		return -EWOULDBLOCK;
	if (rc < 0)
		return crest_errf(rc, "cannot lock rados:%s/%s", r->spec, kinds[L_WRITER].oid);
	char text[400];
	name_text(text, sizeof(text));
	/* Only a message for others: a failure here costs nothing else. */
	R.rados_write_full(r->io, kinds[L_WRITER].oid, text, strlen(text));
	return 0;
}

static void rl_writer_holder(struct cas_locks *l, char *buf, size_t cap)
{
	struct rados_locks *r = (struct rados_locks *)l;
	char text[400];
	const int n = holders(r, L_WRITER) > 0
			      ? R.rados_read(r->io, kinds[L_WRITER].oid, text, sizeof(text) - 1, 0)
			      : -1;
	int pid = 0, used = 0;
	char host[64];
	text[n > 0 ? n : 0] = 0;
	text[strcspn(text, "\n")] = 0;
	if (n <= 0 || sscanf(text, "%d %63s %n", &pid, host, &used) != 2 || pid <= 0) {
		snprintf(buf, cap, "another crest (it has not said which)");
		return;
	}
	char me[64] = "";
	gethostname(me, sizeof(me) - 1);
	if (pid == (int)getpid() && !strcmp(host, me))
		snprintf(buf, cap, "this process (pid %d: a store handle it has not closed)", pid);
	else
		snprintf(buf, cap, "pid %d on %s (%s), holding a lease of %u s", pid, host, text + used, r->lease_s);
}

static bool rl_writer_live(const struct cas_locks *l)
{
	return holders((const struct rados_locks *)l, L_WRITER) > 0;
}

static int rl_writer_check(struct cas_locks *l)
{
	struct rados_locks *r = (struct rados_locks *)l;
	pthread_mutex_lock(&r->mu);
	const bool lost = r->lost[L_WRITER] && !r->held[L_WRITER];
	pthread_mutex_unlock(&r->mu);
	return lost ? crest_errx(-ENOLCK, "store rados:%s: this writer lost its lock (its lease of %u s ran out "
				 "before a renewal): nothing more is committed through it; open the store again",
				 r->spec, r->lease_s)
		    : 0;
}

static bool rl_want(struct cas_locks *l)
{
	return hold((struct rados_locks *)l, L_WANT) == 0;
}

static void rl_unwant(struct cas_locks *l)
{
	let_go((struct rados_locks *)l, L_WANT);
}

static bool rl_wanted(struct cas_locks *l)
{
	return holders((struct rados_locks *)l, L_WANT) > 0;
}

/* Retried while gc holds the readers' lock alone (a moment, while it
 * removes packs); best effort, as locks.h says. */
static void rl_readers_join(struct cas_locks *l)
{
	struct rados_locks *r = (struct rados_locks *)l;
	for (int i = 0; i < 3000 && hold(r, L_READER) == -EBUSY; i++) {
		const struct timespec ts = { 0, 10000000L };
		nanosleep(&ts, NULL);
	}
}

static int rl_readers_none(struct cas_locks *l)
{
	struct rados_locks *r = (struct rados_locks *)l;
	const int rc = hold(r, L_GC);
	if (rc == -EBUSY)
		return -EBUSY;
	return rc < 0 ? crest_errf(rc, "cannot lock rados:%s/%s", r->spec, kinds[L_GC].oid) : 0;
}

static void rl_readers_let_in(struct cas_locks *l)
{
	let_go((struct rados_locks *)l, L_GC);
}

const struct cas_locks_ops cas_locks_rados = {
	.name = "rados",
	.open = rl_open,
	.close = rl_close,
	.writer_try = rl_writer_try,
	.writer_holder = rl_writer_holder,
	.writer_live = rl_writer_live,
	.writer_check = rl_writer_check,
	.want = rl_want,
	.unwant = rl_unwant,
	.wanted = rl_wanted,
	.readers_join = rl_readers_join,
	.readers_none = rl_readers_none,
	.readers_let_in = rl_readers_let_in,
};

#endif
