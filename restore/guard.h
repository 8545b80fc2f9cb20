/*
 * guard.h - the job's files given back if crest restore dies holding them.
 *
 * An in-place restore swaps the snapshot's versions of the job's files in
 * (restore/process.c) right before CRIU runs, and swaps the originals back
 * if CRIU fails. A crest killed in between (kill -9, the OOM killer) used
 * to leave the snapshot's versions in place with no job running on them,
 * and the originals (the job's output after the snapshot) hidden under
 * ".NAME.crest-restore-XXXXXX" for good. The guard, a process of crest's
 * own (`crest __restore-guard DIR`) in a session of its own, is told of
 * each staged file (its directory by descriptor, its names and inodes)
 * and of each CRIU it starts. If crest goes without disarming it, it waits
 * for that CRIU to end, then: a tree that came back (DIR/restored.pid)
 * keeps the files and loses the originals, as after a restore that
 * finished; else every file is put back by inode, as after one that
 * failed. It holds DIR's lock (fd 4) meanwhile, then removes DIR.
 *
 * A tree that came back holds its CUDA processes' GPU state in the
 * driver's checkpointed state until crest restores and unlocks it
 * (gpu/gpuckpt.h): a crest killed after CRIU and before that left the job
 * holding host memory and unable to use its GPU for good. So the guard is
 * also told of the CUDA processes (by their pids inside the job's pid
 * namespace when it has one) and the GPU map, and brings their state back
 * itself, however far crest got. It runs for every restore with CUDA
 * processes, in place or beside. Where that fails, the processes hold
 * their memory and can never run: the guard then ends the tree, as crest
 * does when the driver fails it (so it is told of the tree's processes
 * too), and puts the job's files back as after a restore that failed.
 * The same for the NCCL shim's processes, whose communicators the guard
 * makes again after their GPU state. Last, the machine's huge page setting
 * goes back if crest raised it (--huge-pages, os/thp.h) and no other crest
 * holds it.
 */
#ifndef CREST_RESTORE_GUARD_H
#define CREST_RESTORE_GUARD_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct rp_guard {
	pid_t pid;   /* 0 when none */
	int fd;      /* crest's end of the socket */
};

/* One staged file, as the guard is told of it (again after each change). */
struct rp_guard_file {
	uint32_t idx;
	bool existed;           /* base was there: the original is at tmp or aside after the swap */
	uint64_t orig_ino;      /* the original (when existed) */
	uint64_t new_ino;       /* the staged file */
	char base[256], tmp[256], aside[256];
};

int rp_guard_start(struct rp_guard *g, const char *dir, int lock_fd);
/* dfd: the file's directory, passed to the guard. */
int rp_guard_file(struct rp_guard *g, const struct rp_guard_file *f, int dfd);
/* The CUDA processes of the tree CRIU will bring back: pids as the job's
 * own pid namespace sees them when inner (translated through DIR's
 * restored.pid, the namespace's init), else host pids; and the GPU map
 * of the restore. Before CRIU starts. */
struct gpuckpt_map;
int rp_guard_cuda(struct rp_guard *g, const pid_t *pids, size_t n, bool inner, const struct gpuckpt_map *map,
		  size_t nmap);
/* The processes of the tree CRIU will bring back, host pids, for the guard
 * to end should their GPU state not come back; with pidns the tree is its
 * own pid namespace, ended through its init (DIR's restored.pid), and pids
 * are not needed. Before CRIU starts. */
int rp_guard_tree(struct rp_guard *g, const pid_t *pids, size_t n, bool pidns);
/* The processes of the tree whose NCCL shim crest released before the
 * freeze (gpu/shim.h), pids as for rp_guard_cuda: the guard makes their
 * communicators again once their GPU state is back, or ends the tree if
 * it cannot (ranks whose NCCL is gone would wait at their next collective
 * for ever). Before CRIU starts. */
int rp_guard_shim(struct rp_guard *g, const pid_t *pids, size_t n, bool inner);
/* CRIU runs as pid. */
void rp_guard_criu(struct rp_guard *g, pid_t pid);
/* crest has dealt with the outcome: the guard ends, reaped. */
void rp_guard_disarm(struct rp_guard *g);
int rp_guard_main(int argc, char **argv);

#endif
