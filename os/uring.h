/*
 * uring.h - the io_uring instances a process tree holds, as /proc shows
 * them, so that a checkpoint can refuse the tree before anything is frozen.
 *
 * CRIU 4.2.1 cannot dump an io_uring: it seizes and freezes the tree, then
 * fails on the ring's descriptor ("Unknown shit 600 (anon_inode:[io_uring])")
 * and lets the tree go (os/CRIU-NOTES.md). Jobs get one without asking for
 * it: libuv >= 1.45 sets up rings unless UV_USE_IO_URING=0, and PyTorch's
 * TCPStore runs on libuv. PyTorch 2.11's TCPStore holds a ring all the same
 * with UV_USE_IO_URING=0 set; USE_LIBUV=0 (its store without libuv, PyTorch
 * >= 2.4) leaves none (seen on the GPU machine, 2026-11-28: a process that
 * made a TCPStore or called init_process_group).
 *
 * A ring shows in two places, either of which may be its only trace: a
 * descriptor whose link is "anon_inode:[io_uring]" (a ring set up with
 * IORING_SETUP_NO_MMAP has no mapping), and a mapping of that name in
 * /proc/PID/maps (a ring whose descriptor was closed after the mmap, or
 * registered with IORING_REGISTER_RING_FDS and closed, lives on through
 * it). Every process of the tree is looked at, and in each process the
 * descriptor table of every thread that has one of its own (a thread that
 * called unshare(CLONE_FILES)); threads share their memory, so one maps
 * file per process.
 */
#ifndef CREST_OS_URING_H
#define CREST_OS_URING_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "os/proc.h"

struct uring_found {
	size_t nproc;              /* processes of the tree holding one; 0: none */
	/* The first of them: */
	pid_t pid;
	pid_t tid;                 /* the thread whose descriptor it is; pid for the process's own table */
	int fd;                    /* the descriptor, or -1: seen only as a mapping */
	char comm[64];             /* the process's command name (/proc/PID/comm) */
	bool libcrest;             /* it maps libcrest, whose store writer uses io_uring */
};

/* Whether a process of the tree holds an io_uring: 1 and the first one in
 * *out, 0 when none does. A process gone meanwhile is left out (CRIU will
 * say so); -ENOMEM with a message. */
int uring_find_tree(const struct proc_tree *t, struct uring_found *out);

#endif
