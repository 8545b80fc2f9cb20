/*
 * thp.h - transparent huge pages for a checkpoint's window: the machine's
 * setting switched to "always" while crest needs it, and put back.
 *
 * At a checkpoint the driver stages a CUDA process's device memory in the
 * process's own host memory, and that memory is faulted in 4 KiB pages
 * under the usual "madvise" setting: on an H100 the driver's checkpoint of
 * 8 GiB took 2.5-2.7 s with "always" against 3.7-4.0 s (issue 36). A
 * restore writes the job's pages, and the driver its staging, into memory
 * faulted the same way. No
 * per-process switch reaches memory a job maps itself (prctl can only turn
 * huge pages off), so crest switches the machine's setting, only when the
 * user asks (--huge-pages), and only for the window.
 *
 * Every process that raises the setting is a holder, recorded in the state
 * directory: STATE/saved holds the setting found before the first holder
 * raised it, STATE/PID one holder (its start time, so that a reused pid is
 * not taken for it), all changed under flock(STATE/lock). The last holder
 * to lower writes the saved setting back. A holder that died without
 * lowering (its pid gone, a zombie, or another process's) is dropped by the
 * next call that takes the lock, which then puts the setting back if no
 * holder is left: the guard of a checkpoint or a restore does so when crest
 * dies in the window (capture/guard.h, restore/guard.h), and any later
 * --huge-pages use does in any case.
 * So the setting outlives crest only while a guard still runs, or, if crest
 * and its guard are both killed, until the next crest with --huge-pages.
 * A change another program made to the setting meanwhile is overwritten.
 *
 * Paths: /sys/kernel/mm/transparent_hugepage/enabled and /run/crest/thp
 * (a tmpfs, so that the record goes with a reboot as the setting does);
 * $CREST_THP_FILE and $CREST_THP_STATE name others (tests).
 */
#ifndef CREST_OS_THP_H
#define CREST_OS_THP_H

/* Raises the setting to "always" for this process (a holder until
 * os_thp_lower, or its death). -errno with a message naming the file when
 * the setting cannot be read, recorded or written (not root, no THP):
 * nothing is changed then. */
int os_thp_raise(void);
/* This process is no longer a holder; the setting is put back if no other
 * is left. 0, or -errno with a message. */
int os_thp_lower(void);
/* Drops dead holders and puts the setting back if none is left. 0 when
 * there is nothing to do (no state directory) or it was done; 1 when a
 * holder is still alive (the setting stays raised for it). */
int os_thp_repair(void);

/* os_thp_lower for a caller that goes on either way (the job runs
 * again, or its checkpoint failed): a failure is said on stderr, loudly,
 * and the calling thread's message is left as it was, so that it still
 * says why a checkpoint or restore failed. */
void os_thp_lower_loud(void);
/* For a guard whose crest died: os_thp_repair, again every 50 ms while a
 * holder is still alive, for 5 s at most (crest's end of the guard's pipe
 * closes as it exits, a moment before /proc shows it gone; a holder alive
 * for longer is another crest, which puts the setting back itself). What
 * cannot be put back is said on stderr. */
void os_thp_repair_wait(void);

#endif
