/*
 * shimctl.h - crest's side of the NCCL shim (gpu/shim.h): the processes of
 * a job that run it, brought to a consistent cut and their communicators
 * released before the driver's lock, and built again after the restore.
 *
 * Promises: shimctl_release either returns 0 with every process's real
 * communicators ended at the same count of calls on each of them, or
 * returns an error with every process open again (its communicators
 * untouched, the job running on); it never leaves a gate closed behind a
 * failure. shimctl_rebuild returns 0 with every process running on new
 * communicators, or an error naming the process that could not, whose NCCL
 * calls then fail (the shim's BROKEN state) rather than wait for ever.
 */
#ifndef CREST_GPU_SHIMCTL_H
#define CREST_GPU_SHIMCTL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct shim_ctl;

struct shimctl_proc {
	pid_t pid;
	int fd;
	struct shim_ctl *ctl;
};

struct shimctl {
	struct shimctl_proc *v;
	size_t n;
};

/* The default bound on each step's wait (PAUSE, DRAIN, a rebuild). */
#define SHIMCTL_TIMEOUT_MS 10000u

/* Adds pid if it runs the shim: its control memfd (SHIM_MEMFD_NAME),
 * found and opened through /proc/PID/fd. -ENOENT, with no message, when
 * pid holds none (a process that made no communicator) or is gone;
 * -EPROTO for a control block of another version; else -errno. */
int shimctl_open(struct shimctl *s, pid_t pid);
void shimctl_free(struct shimctl *s);

struct shimctl_stats {
	unsigned ncomm;       /* distinct communicators */
	uint64_t drained;     /* calls the ranks behind were let make */
	unsigned rounds;      /* DRAIN rounds */
	uint64_t ns;
};

/* PAUSE, DRAIN to equal counts, RELEASE (gpu/shim.h). A communicator with
 * a rank outside s is refused (-EOPNOTSUPP): its peers would wait. */
int shimctl_release(struct shimctl *s, unsigned timeout_ms, struct shimctl_stats *st);
/* IDS, then REBUILD with every rank's new ids. */
int shimctl_rebuild(struct shimctl *s, unsigned timeout_ms, uint64_t *ns);
/* shimctl_rebuild of the processes pids (host pids), every one of which
 * must run the shim: what a restore and the guards do. */
int shimctl_rebuild_pids(const pid_t *pids, size_t n);

#endif
