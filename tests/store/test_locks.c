/*
 * test_locks.c - the locks table (cas/locks.h): what every implementation
 * must do, the same steps on flock (a directory) and, given rados:POOL, on
 * RADOS object locks with leases (the suite's own cluster: ceph.locks).
 *
 *  - The writer's lock is held by one handle at a time; another's try says
 *    -EWOULDBLOCK without a message, names the holder ("this process" for
 *    a handle of this one) and sees it live; a close lets the next in at
 *    once.
 *  - A waiting writer's flag is seen by the holder while raised, not after.
 *  - Readers hold theirs shared: gc's readers_none is -EBUSY while one is
 *    open, and 0 once it closed; a reader that comes meanwhile waits.
 *  - A holder in another process, killed with SIGKILL while it holds the
 *    writer's lock and gc's hold: a new holder gets both. On flock at once;
 *    on RADOS only once the lease ran out (CREST_RADOS_LEASE seconds: not
 *    sooner than two thirds of it after the kill, not later than the lease
 *    and a margin), and not while the holder lived: it held them for two
 *    leases before the kill, renewing.
 *  - writer_check is 0 while the lock is held. On RADOS, a holder stopped
 *    (SIGSTOP) for longer than its lease loses the lock to another, and
 *    once it runs again its writer_check says -ENOLCK.
 *
 * usage: test_locks [rados:POOL[/NAMESPACE]]
 *        (RADOS: the namespace test-locks-PID unless one is named; its lock
 *        objects are removed after, so that the pool's counts are the
 *        other tests')
 */
#include "cas/locks.h"
#include "tests/check.h"
#include "tests/store/rados_test.h"
#include "util/err.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const struct cas_locks_ops *ops;
static char spec[512];

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static struct cas_locks *open_locks(void)
{
	struct cas_locks *l = NULL;
	OK(ops->open(spec, &l));
	return l;
}

static void sleep_s(double s)
{
	const struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };
	nanosleep(&ts, NULL);
}

/* A holder in a child process: it takes the writer's lock and, with
 * watch, waits until writer_check says the lock is lost (then writes 'l'
 * and exits 0), or else takes gc's hold too and waits to be killed. It
 * writes 'h' into *rd's pipe once it holds what it took. */
static pid_t spawn_holder(bool watch, int *rd)
{
	int up[2];
	if (pipe(up) < 0) {
		perror("pipe");
		exit(1);
	}
	const pid_t pid = fork();
	if (pid == 0) {
		close(up[0]);
		struct cas_locks *c = NULL;
		if (ops->open(spec, &c) < 0 || c->ops->writer_try(c) < 0 ||
		    (watch ? c->ops->writer_check(c) : c->ops->readers_none(c)) < 0)
			_exit(3);
		if (write(up[1], "h", 1) != 1)
			_exit(4);
		if (!watch)
			for (;;)
				pause();
		for (int i = 0; i < 600; i++) {   /* a minute at most */
			sleep_s(0.1);
			crest_errset_str("");
			if (c->ops->writer_check(c) == -ENOLCK && crest_errmsg()[0]) {
				printf("the stopped holder, running again: %s\n", crest_errmsg());
				_exit(write(up[1], "l", 1) == 1 ? 0 : 4);
			}
		}
		_exit(5);
	}
	close(up[1]);
	*rd = up[0];
	return pid;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	const bool rados = argc > 1 && !strncmp(argv[1], "rados:", 6);
	char dir[256] = "/tmp/crest-locks-XXXXXX";
	unsigned lease = 0;
	if (rados) {
		ops = &cas_locks_rados;
		if (strchr(argv[1] + 6, '/'))
			snprintf(spec, sizeof(spec), "%s", argv[1] + 6);
		else
			snprintf(spec, sizeof(spec), "%s/test-locks-%d", argv[1] + 6, (int)getpid());
		const char *v = getenv("CREST_RADOS_LEASE");
		lease = v && atoi(v) > 0 ? (unsigned)atoi(v) : 30;
		printf("on RADOS: rados:%s, leases of %u s\n", spec, lease);
	} else {
		ops = &cas_locks_flock;
		if (!mkdtemp(dir)) {
			perror("mkdtemp");
			return 1;
		}
		snprintf(spec, sizeof(spec), "%s", dir);
		printf("flock in %s\n", dir);
	}

	/* One writer at a time; the other is told who. */
	struct cas_locks *a = open_locks(), *b = open_locks();
	OK(a->ops->writer_try(a));
	OK(a->ops->writer_check(a));
	crest_errset_str("");
	int rc = b->ops->writer_try(b);
	CHECK(rc == -EWOULDBLOCK && !crest_errmsg()[0], "a second writer's try: %d (%s)", rc, crest_errmsg());
	char who[512];
	b->ops->writer_holder(b, who, sizeof(who));
	CHECK(strstr(who, "this process") != NULL, "the holder, seen from this process: %s", who);
	CHECK(b->ops->writer_live(b), "a live holder is not seen live");

	/* The waiting writer's flag, seen by the holder only while raised. */
	CHECK(!a->ops->wanted(a), "wanted before anyone waits");
	CHECK(b->ops->want(b), "a waiting writer could not raise its flag");
	CHECK(a->ops->wanted(a), "the holder does not see a writer waiting");
	b->ops->unwant(b);
	CHECK(!a->ops->wanted(a), "wanted after the waiter let go");

	/* A close lets the next writer in at once. */
	cas_locks_close(a);
	OK(b->ops->writer_try(b));
	cas_locks_close(b);

	/* Readers shared; gc alone only when none is open. */
	struct cas_locks *r1 = open_locks(), *r2 = open_locks(), *g = open_locks();
	r1->ops->readers_join(r1);
	r2->ops->readers_join(r2);
	crest_errset_str("");
	rc = g->ops->readers_none(g);
	CHECK(rc == -EBUSY && !crest_errmsg()[0], "gc beside two readers: %d (%s)", rc, crest_errmsg());
	cas_locks_close(r1);
	rc = g->ops->readers_none(g);
	CHECK(rc == -EBUSY, "gc beside one reader: %d", rc);
	cas_locks_close(r2);
	OK(g->ops->readers_none(g));
	g->ops->readers_let_in(g);
	struct cas_locks *r3 = open_locks();
	r3->ops->readers_join(r3);
	CHECK(g->ops->readers_none(g) == -EBUSY, "gc beside a reader that came after it let readers in");
	cas_locks_close(r3);
	cas_locks_close(g);

	/* A holder killed: the writer's lock and gc's hold go with it. */
	int rd;
	const pid_t child = spawn_holder(false, &rd);
	char h = 0;
	CHECK(read(rd, &h, 1) == 1 && h == 'h', "the child did not take the locks");
	close(rd);
	struct cas_locks *n = open_locks();
	crest_errset_str("");
	rc = n->ops->writer_try(n);
	CHECK(rc == -EWOULDBLOCK, "a writer beside a live holder in another process: %d (%s)", rc, crest_errmsg());
	n->ops->writer_holder(n, who, sizeof(who));
	char pid_s[32];
	snprintf(pid_s, sizeof(pid_s), "pid %d", (int)child);
	CHECK(strstr(who, pid_s) != NULL, "the holder in another process: %s (want %s)", who, pid_s);
	if (rados) {
		/* Held past its first leases: the holder renews. */
		for (double t0 = now_s(); now_s() - t0 < 2.0 * lease;) {
			sleep_s(0.25);
			rc = n->ops->writer_try(n);
			if (rc != -EWOULDBLOCK) {
				CHECK(0, "the writer's lock of a live holder went after %.1f s (%d): not renewed",
				      now_s() - t0, rc);
				break;
			}
			CHECK(n->ops->readers_none(n) == -EBUSY, "gc's hold of a live holder went");
		}
	}
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	const double t_kill = now_s();
	double t_w = -1, t_g = -1;
	while (now_s() - t_kill < lease + 10.0 && (t_w < 0 || t_g < 0)) {
		if (t_w < 0 && n->ops->writer_try(n) == 0)
			t_w = now_s() - t_kill;
		if (t_g < 0 && n->ops->readers_none(n) == 0)
			t_g = now_s() - t_kill;
		if (t_w < 0 || t_g < 0)
			sleep_s(0.05);
	}
	printf("after the kill: the writer's lock taken over in %.2f s, gc's hold in %.2f s\n", t_w, t_g);
	CHECK(t_w >= 0 && t_g >= 0, "a dead holder's locks never went (%.2f, %.2f s)", t_w, t_g);
	if (rados) {
		CHECK(t_w >= lease * 2.0 / 3 - 0.5 && t_g >= lease * 2.0 / 3 - 0.5,
		      "a dead holder's locks went before its lease ran out (%.2f, %.2f s; lease %u s)", t_w, t_g, lease);
		CHECK(t_w <= lease + 3.0 && t_g <= lease + 3.0, "a dead holder's locks outlived its lease of %u s", lease);
	} else {
		CHECK(t_w < 1.0 && t_g < 1.0, "flock: a dead holder's locks went only after %.2f, %.2f s", t_w, t_g);
	}
	n->ops->writer_holder(n, who, sizeof(who));
	CHECK(strstr(who, "this process") != NULL, "the new holder: %s", who);
	n->ops->readers_let_in(n);
	OK(n->ops->writer_check(n));

	if (rados) {
		/* A holder stopped past its lease: another takes the lock, and the
		 * holder, running again, learns that it lost it. */
		cas_locks_close(n);
		const pid_t st = spawn_holder(true, &rd);
		CHECK(read(rd, &h, 1) == 1 && h == 'h', "the second child did not take the lock");
		kill(st, SIGSTOP);
		n = open_locks();
		const double t_stop = now_s();
		double t_take = -1;
		while (now_s() - t_stop < lease + 10.0 && t_take < 0) {
			if (n->ops->writer_try(n) == 0)
				t_take = now_s() - t_stop;
			else
				sleep_s(0.05);
		}
		printf("a holder stopped: its lock taken over after %.2f s\n", t_take);
		CHECK(t_take >= lease * 2.0 / 3 - 0.5, "a stopped holder's lock went after %.2f s, before its lease", t_take);
		kill(st, SIGCONT);
		h = 0;
		CHECK(read(rd, &h, 1) == 1 && h == 'l', "the stopped holder, running again, was not told it lost "
		      "the lock");
		close(rd);
		int status = 0;
		waitpid(st, &status, 0);
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the stopped holder exited with %d", status);
		OK(n->ops->writer_check(n));
	}
	cas_locks_close(n);

#ifdef CREST_HAVE_RADOS
	rados_t cl;
	rados_ioctx_t io;
	if (rados && test_rados(spec, &cl, &io)) {
		static const char *const objs[] = { "lock", "lock.wants", "readers" };
		for (size_t i = 0; i < sizeof(objs) / sizeof(objs[0]); i++) {
			const int rc2 = rados_remove(io, objs[i]);
			CHECK(rc2 == 0 || rc2 == -ENOENT, "removing %s after the test: %d", objs[i], rc2);
		}
		rados_ioctx_destroy(io);
		rados_shutdown(cl);
	} else if (rados) {
		CHECK(0, "cannot reach the cluster to remove the test's lock objects");
	}
#endif
	if (!rados) {
		char cmd[400];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		if (system(cmd) != 0)
			fprintf(stderr, "test_locks: could not remove %s\n", dir);
	}
	if (failures) {
		printf("FAIL: %d check(s) failed\n", failures);
		return 1;
	}
	printf("ok: the locks table on %s\n", rados ? "rados" : "flock");
	return 0;
}
