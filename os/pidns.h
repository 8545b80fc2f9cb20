/*
 * pidns.h - a job in a pid namespace of its own, so that a snapshot of it
 * can be restored beside the original: CRIU gives the copy the same pids
 * inside a new namespace, whatever host pids the original holds.
 *
 * The job is not pid 1 itself: a small init is (a fork of crest that never
 * execs), with the job as its only child, pid 2. pid 1 of a namespace gets
 * no signal it has no handler for, not even SIGTERM from the host, and has
 * to reap every orphan of the namespace; the init does both: it forwards
 * SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to the job, reaps
 * whatever ends, and exits with the job's status (128 + signal when the job
 * was killed) once the job ends; the kernel then kills what is left in the
 * namespace. CRIU dumps and restores init and job as one tree (dump -t
 * INIT: the init is a session leader, as CRIU wants the root to be).
 *
 * A mount namespace of its own too, a copy of the host's with its mounts
 * made private and a /proc of its own: the CUDA driver looks itself up in
 * /proc by the pid the namespace gives it, and does not start with the
 * host's (cudaMalloc: "OS call failed or operation not supported on this
 * OS", H100, driver 580). CRIU dumps that namespace, the host's mounts in
 * it as external, and the job's stdio, opened by the caller in the host's
 * namespace, as external files (os/proc.h: proc_extfds_get); a restore
 * hands those back (restore/process.c).
 */
#ifndef CREST_OS_PIDNS_H
#define CREST_OS_PIDNS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct pidns_job {
	pid_t init;       /* the namespace's pid 1, as the host sees it */
	pid_t helper;     /* crest's child that started it and passes its status on */
};

/* Starts argv (argv[0] looked up in PATH) in a new pid namespace under the
 * init; stdin, stdout and stderr are the caller's, every other descriptor
 * is closed. The job gets job_umask (the user's, not the caller's own:
 * crest keeps 077 for its snapshots). Call it before starting threads. A command that cannot be run
 * ends with status 127 (not found) or 126, after a line on stderr.
 * The init is the caller's own program run again, as PROGRAM __pidns-init
 * ARGV...: its main must hand such a call to pidns_init_main first thing. */
int pidns_spawn(char *const argv[], mode_t job_umask, struct pidns_job *j);

/* The init, in a program started as PROGRAM __pidns-init ARGV... by
 * pidns_spawn (argv here is ARGV): starts the job, forwards signals to it,
 * reaps every orphan, and ends with the job. Returns (2, after a line on
 * stderr) only when not pid 1 of a namespace, that is, when a user typed it. */
int pidns_init_main(char *const argv[]);

/* Waits until the job's init has ended; 1 and its status (an exit code,
 * 128 + signal for a killed job) when it has, 0 if it still runs after
 * timeout_ns (0: do not wait; negative: for ever). */
int pidns_wait(struct pidns_job *j, int64_t timeout_ns, int *status);

/* Sends sig to the job (through its init, which forwards it). Safe in a
 * signal handler. */
void pidns_signal(const struct pidns_job *j, int sig);

/* The signals the init forwards to the job (*n of them): the ones a caller
 * standing in for the job (crest run) must pass on too, rather than die of
 * and leave the job orphaned. */
const int *pidns_forwarded(size_t *n);

/* 1 and the namespace's inode when pid is pid 1 of a pid namespace other
 * than the caller's; 0 when it is not; negative when pid is gone. */
int pidns_init_of(pid_t pid, uint64_t *ns_ino);

/* True when pid exists and lives in the pid namespace ns_ino. */
bool pidns_holds(pid_t pid, uint64_t ns_ino);

/* pid as its own (innermost) pid namespace sees it: what CRIU gives a
 * restored copy back. -ESRCH when pid is gone. */
int pidns_inner_pid(pid_t pid, pid_t *inner);

/* The host pids of the processes that the namespace whose init is the host
 * pid init knows as inner[0..n): the driver's checkpoint API takes host
 * pids, and a restored copy has new ones (same inner pids). -ESRCH with a
 * message when one is not in that namespace. */
int pidns_host_pids(pid_t init, const pid_t *inner, size_t n, pid_t *host);

/* Binds src over dst inside the mount namespace of pid (a restored copy
 * of a crest run job, from CRIU's post-setup-namespaces step, before any
 * of its files or working directories are opened): the copy then finds
 * its own copy of dst wherever it looks, by any path. src is looked up in
 * that namespace (a copy's mounts are the host's). The calling process
 * moves into the namespace: only a short-lived helper calls it. */
int pidns_bind_over(pid_t pid, const char *src, const char *dst);

#endif
