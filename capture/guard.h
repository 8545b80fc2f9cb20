/*
 * guard.h - a job given back if crest dies while it holds it.
 *
 * From the freeze until crest has resumed the job (or, with --kill, ended
 * it after the commit), the job depends on crest: its CUDA processes are
 * locked and checkpointed by the driver, and a --kill job is left stopped.
 * Killed there (SIGKILL, the OOM killer), crest would leave the job so for
 * good. So before the freeze crest starts a guard, its own program in a
 * session of its own (`crest __capture-guard`), holding the read end of a
 * pipe whose write end only crest holds. crest disarms it once the job is
 * no longer its to give back; if instead the pipe ends, crest is gone, and
 * the guard waits for CRIU to be done with the tree (for a second in a
 * row, no CRIU dump of it runs and nothing of it is traced), continues a
 * --kill tree but for the processes stopped before the freeze, and brings
 * back the driver's state of each CUDA process (restore, unlock), as crest
 * would have, and then NCCL to the processes whose shim crest had paused
 * or released (gpu/shimctl.h), and last the machine's huge page setting,
 * when crest raised it (--huge-pages, os/thp.h) and no other crest holds
 * it. If the driver cannot give a process back (it stays locked or
 * checkpointed, and can never run again), the guard ends the tree and says
 * so: with crest gone nobody is left to store it, and a job frozen for
 * good in silence is the one outcome never allowed.
 */
#ifndef CREST_CAPTURE_GUARD_H
#define CREST_CAPTURE_GUARD_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct tp_guard {
	pid_t pid;   /* the guard; 0 when none */
	int fd;      /* the pipe's write end */
};

/* Starts a guard for the tree under root and its CUDA processes (host
 * pids); stopped: CRIU is to leave the tree stopped (--kill), and the
 * guard then continues it, all but the held processes (stopped before the
 * freeze: their stop is the job's). 0, or -errno with a message. */
int tp_guard_start(struct tp_guard *g, pid_t root, bool stopped, const pid_t *cuda, size_t ncuda,
		   const pid_t *held, size_t nheld, const pid_t *shim, size_t nshim);
/* The job is no longer crest's to give back: the guard ends, reaped. */
void tp_guard_disarm(struct tp_guard *g);
/* `crest __capture-guard ROOT stopped|running CUDA_PID,... HELD_PID,... SHIM_PID,...`
 * (the lists may be empty), fd 3 the pipe's read end. */
int tp_guard_main(int argc, char **argv);

#endif
