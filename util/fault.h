/*
 * fault.h - a test hook for I/O whose result no LD_PRELOAD shim can see:
 * io_uring completions (tests/fault/faultshim.c covers the libc calls).
 *
 * crest_fault_res(site, res) returns res, unless the environment variable
 * CREST_FAULT_SITE="SITE:N:ERRNO[:sticky]" names this site: then the Nth
 * call for it (every call from the Nth with sticky) returns -ERRNO instead
 * (ERRNO: EIO, ENOSPC or a number). The operation itself has happened; only
 * its reported result changes, as when a device reports an error late.
 * With CREST_FAULT_TRACE=FILE every call appends "uring:SITE N -" to FILE,
 * the same trace format as the shim's, so a test can enumerate the calls.
 * The environment is read once; unset, a call costs one predictable branch.
 *
 * Sites: "pack.write" (a pack write's completion), "pack.sync" (an early
 * data sync of a finished pack), "guard.gpu" (the restore guard's bringing
 * back of the GPU state of a tree crest left: fails before it starts),
 * "capture.guard.gpu" (the same for the checkpoint's guard).
 *
 * crest_fault_die(site) kills the calling process with SIGKILL when
 * CREST_FAULT_DIE names the site, after one line on stderr: a crash at an
 * exact step, for the tests of what a guard does when crest dies there,
 * where a kill timed from outside lands too early or too late. Sites:
 * "restore.cuda" (a process restore after CRIU, before the driver gives
 * the processes their GPU state back), "capture.stranded" (a checkpoint
 * whose driver restore failed after the dump, before it stores the
 * images; capture/transparent.h), "restore.workdir" (a process
 * restore in place, its --workdir swapped in, before CRIU runs),
 * "store.head_bump" (a writer's open of a store on RADOS, its new
 * generation recorded in this node's index, not yet put as the head:
 * cas/cache.c), "store.head_seal" (the same at a writer's clean close),
 * "capture.imgstream" (a checkpoint with its images streamed: the first
 * full window of an image taken, CRIU waiting to write the rest, the job
 * frozen; capture/imgstream.h).
 *
 * crest_fault_pause(site) holds the calling thread at a step when
 * CREST_FAULT_PAUSE="SITE:FILE" names the site: it creates FILE, then
 * waits until FILE is gone (polled every 10 ms, 120 s at most). A test
 * waits for FILE, does what must happen in that window (a gc beside a
 * reader's open), and removes FILE: a race made certain, not hoped for.
 * Sites: "store.read_open" (a reader's open, its index opened, before it
 * reads the meta logs), "store.write_open" (a writer's open, done: its
 * index opened and recovered, nothing of its own written yet), "restore.lock" (a process restore, holding the
 * job's restore lock, before it checks for a running copy), "criu.probe"
 * (the child that tells whether breakpoints fire is forked, not yet told
 * to go: os/criu.c), "capture.sockets" (a checkpoint has looked at the
 * job's sockets, nothing is frozen yet: a client may connect meanwhile),
 * "copy.commit" (crest push or pull: a snapshot's records written and
 * synced in the destination, before the commit that lists it),
 * "capture.thp" (a checkpoint with --huge-pages: the setting raised under
 * the guard, nothing frozen yet), "restore.thp" (the same for a restore:
 * before CRIU runs), "capture.imgstream" (as for crest_fault_die).
 */
#ifndef CREST_UTIL_FAULT_H
#define CREST_UTIL_FAULT_H

#include <stdatomic.h>

int crest_fault_res_slow(const char *site, int res);
void crest_fault_die(const char *site);
void crest_fault_pause(const char *site);

extern atomic_int crest_fault_on;   /* -1 not read yet, 0 off, 1 on */

static inline int crest_fault_res(const char *site, int res)
{
	if (__builtin_expect(atomic_load_explicit(&crest_fault_on, memory_order_relaxed) == 0, 1))
		return res;
	return crest_fault_res_slow(site, res);
}

#endif
