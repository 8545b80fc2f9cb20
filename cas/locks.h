/*
 * locks.h - the store's locks as an operation table (issue 35), beside the
 * objects (objects.h) and the index (index.h): what a directory does with
 * flock(2) today (locks_flock.c), a shared store does with RADOS locks and
 * leases next, under the same waiting, stepping aside and gc core in
 * store.c and gc.c.
 *
 * Three locks:
 *  - the writer's: one writer at a time. Its holder names itself (pid and
 *    command line) for the messages of writers that wait, and its name goes
 *    before the lock does, so a name left behind is a dead holder's.
 *  - the waiters' flag: a writer holds it while it waits for the writer's
 *    lock, so that a holder that can step aside (a libcrest session
 *    between checkpoints) sees someone waiting.
 *  - the readers': every reader holds it shared while it is open; gc
 *    unlinks the packs it rewrote only while it holds it alone (gc.h).
 * What it promises: a lock is held until released, closed, or its holder
 * dies (for flock, the process's descriptors go; a leased lock goes when
 * its lease runs out, and its holder then learns it from writer_check). The waiting, its messages and its timeout are
 * the caller's: every call here returns at once.
 * Errors: 0 or a negative errno, with a one-line message where it says so.
 */
#ifndef CREST_CAS_LOCKS_H
#define CREST_CAS_LOCKS_H

#include <stdbool.h>
#include <stddef.h>

struct cas_locks;

struct cas_locks_ops {
	const char *name;
	/* The locks of the store at dir; nothing is taken yet. */
	int (*open)(const char *dir, struct cas_locks **out);
	/* Lets go of whatever the handle still holds (the writer's lock as
	 * writer_release does). NULL is a no-op. */
	void (*close)(struct cas_locks *l);

	/* Tries the writer's lock once: 0, held and named; -EWOULDBLOCK
	 * (no message) when another holds it; another error with one. */
	int (*writer_try)(struct cas_locks *l);
	/* Who holds the writer's lock, for a message: "pid 42 (crest put
	 * ...)", "this process (...)", or that it has not said. */
	void (*writer_holder)(struct cas_locks *l, char *buf, size_t cap);
	/* Whether a live writer holds it now (not a dead one's name). */
	bool (*writer_live)(const struct cas_locks *l);
	/* 0 while this handle still holds the writer's lock it took; -ENOLCK,
	 * with a message, once it has lost it (a lease that ran out): asked
	 * before each durable change (meta.c), so that nothing is committed
	 * under a lock another may hold. A flock is never lost. */
	int (*writer_check)(struct cas_locks *l);

	/* A waiting writer's flag, held until unwant; false when it cannot
	 * be raised (the writer then waits unannounced). */
	bool (*want)(struct cas_locks *l);
	void (*unwant)(struct cas_locks *l);
	/* Whether a writer waits (asked by the holder of the writer's lock). */
	bool (*wanted)(struct cas_locks *l);

	/* A reader's shared hold, kept until close; best effort (a read-only
	 * store has none, and gc then never finds it free of readers). */
	void (*readers_join)(struct cas_locks *l);
	/* gc: 0 and held alone until readers_let_in, or -EBUSY (no message)
	 * while any reader holds it, or another error. */
	int (*readers_none)(struct cas_locks *l);
	void (*readers_let_in)(struct cas_locks *l);
};

/* The part of a handle every implementation shares (its first member). */
struct cas_locks {
	const struct cas_locks_ops *ops;
};

extern const struct cas_locks_ops cas_locks_flock;
/* RADOS object locks with leases (locks_rados.c): open's dir is
 * "POOL[/NAMESPACE]"; -ENOTSUP in a build without librados. */
extern const struct cas_locks_ops cas_locks_rados;

/* This process's command line, its words joined by spaces (cut at cap):
 * what a writer's lock names its holder by, in every implementation. */
void cas_locks_command(char *buf, size_t cap);

static inline int cas_locks_writer_check(struct cas_locks *l)
{
	return l->ops->writer_check(l);
}

static inline void cas_locks_close(struct cas_locks *l)
{
	if (l)
		l->ops->close(l);
}

#endif
