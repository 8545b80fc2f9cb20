/*
 * proc.h - what /proc says about a process tree that crest is about to
 * checkpoint: its members, which of them use CUDA, and the regular files
 * they hold open for writing (their contents are part of a snapshot, since
 * CRIU refuses to restore a file whose size changed).
 */
#ifndef CREST_OS_PROC_H
#define CREST_OS_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct proc_tree {
	pid_t *pids;          /* pids[0] is the root; the rest in no order */
	size_t n;
};

/* Pid lists as crest writes them, in a snapshot's labels and a guard's
 * arguments: "pid,pid,...". proc_pids_format returns one, malloc'ed (""
 * for none), or NULL when out of memory. proc_pids_parse reads one
 * strictly, since a store may be damaged or crafted: digits only, each pid
 * 1..PROC_PID_MAX, no empty entry, into *out (malloc'ed, the caller's to
 * free whatever the result). 0, -EINVAL or -ENOMEM; no message. */
#define PROC_PID_MAX (4u << 20)   /* PID_MAX_LIMIT on 64 bits: no kernel gives more */
char *proc_pids_format(const pid_t *v, size_t n);
int proc_pids_parse(const char *s, pid_t **out, size_t *n);

/* What the machine can still hold, for a caller about to start many
 * processes (crest clone --count): *mem_bytes, /proc/meminfo's
 * MemAvailable; *tasks, how many more tasks (processes and threads) the
 * kernel allows: the lower of kernel.pid_max and kernel.threads-max, less
 * the tasks that exist now (/proc/loadavg). Each the lower still where
 * crest's own cgroup (v1 or v2) sets a memory or pids limit: its limit
 * less its usage. 0, or -errno with a message when /proc cannot say. */
int proc_room(uint64_t *mem_bytes, uint64_t *tasks);

/* The root and all its descendants. -ESRCH with a message if root is gone. */
int proc_tree_get(pid_t root, struct proc_tree *t);
void proc_tree_free(struct proc_tree *t);

/* True when the process maps libcuda: it may have a CUDA context to
 * checkpoint (the driver tells: gpu/gpuckpt.h, gpuckpt_has_state). */
bool proc_uses_cuda(pid_t pid);
/* True when some mapping of the process is a file whose path holds name
 * ("/libnccl.so", "/libcuda.so"). */
bool proc_maps_has(pid_t pid, const char *name);
/* The value of key in the environment the process was started with
 * (/proc/PID/environ: what it set in itself later is not there), copied
 * into buf; -ENOENT when it has none. */
int proc_env_get(pid_t pid, const char *key, char *buf, size_t cap);
/* True when some thread of the process is named name (/proc/PID/task/
 * TID/comm, at most 15 bytes: "pt_nccl_watchdg"). */
bool proc_has_thread(pid_t pid, const char *name);

/* 'R', 'S', 'Z', ... or 0 when the process does not exist. */
char proc_state(pid_t pid);
/* True when pid no longer runs or is on its way out: gone, a zombie ('Z')
 * or dead ('X') its parent has not reaped yet, exiting (PF_EXITING: a big
 * job takes a while to give its memory back before it becomes a zombie), or
 * with a SIGKILL pending. A job killed under crest is usually in one of the
 * last three when crest looks. */
bool proc_gone(pid_t pid);
/* True when pid is a kernel thread (PF_KTHREAD): no user memory, nothing
 * CRIU can checkpoint. */
bool proc_is_kthread(pid_t pid);
/* A name for the process that a reused pid cannot repeat: the boot's id,
 * the pid and its start time ("BOOTID-PID-TICKS", letters, digits and
 * '-'). -ESRCH (no message) when the process is gone. */
int proc_job_key(pid_t pid, char *key, size_t cap);
/* comm of pid into buf ("?" when unknown). */
void proc_comm(pid_t pid, char *buf, size_t cap);

struct proc_file {
	char *path;
	uint64_t size;        /* when listed; the capture records its own */
	uint64_t dev, ino;    /* the file the job holds, whatever its path names later */
	uint32_t uid;         /* its owner: a restore writes only a file it still owns */
};
struct proc_files {
	struct proc_file *v;
	size_t n;
};
/* Regular files that any process of the tree has open for writing, each
 * path once. Deleted files are left out (CRIU handles them itself). */
int proc_files_writable(const struct proc_tree *t, struct proc_files *f);
void proc_files_free(struct proc_files *f);
/* Whether a process other than the caller has one of the n files (by dev
 * and ino; path only for the caller's messages) open for writing: 1, its
 * pid in *who and the file's index in *which; 0 when none. Every process's
 * descriptors are looked at (/proc/PID/fd), so a job's processes are found
 * whatever their pids or pid namespace: what a restore in place checks
 * before it puts the job's files back (restore/process.c). */
int proc_file_writer(const struct proc_file *files, size_t n, pid_t *who, size_t *which);

/* A descriptor of the tree that names a file on a mount its own mount
 * namespace does not have: one it inherited from outside, as the stdio
 * of a job under crest run (pidns.h). CRIU dumps such a file only when
 * told of it by key (--external KEY), and restores it only from a
 * descriptor handed over under that key (--inherit-fd fd[N]:KEY). */
struct proc_extfd {
	char key[64];         /* "file[MNT:INO]" or "tty[RDEV:DEV]", in hex, as CRIU spells them */
	char *path;           /* as /proc showed it: what a restore reopens */
	int flags;            /* the descriptor's O_ACCMODE and O_APPEND */
	uint64_t pos;         /* its offset at the listing */
};
struct proc_extfds {
	struct proc_extfd *v;
	size_t n;
};
/* 1 when pid's mount namespace is not the caller's, 0 when it is,
 * negative when pid is gone. */
int proc_own_mntns(pid_t pid);
/* The same for its network namespace. */
int proc_own_netns(pid_t pid);
/* The inode of pid's namespace of the kind ns ("net", "mnt", ...); 0 when
 * pid is gone. */
uint64_t proc_ns_ino(pid_t pid, const char *ns);
/* The tree's descriptors on mounts of the caller's namespace that the
 * tree's own namespace lacks, each key once. Descriptors on no mount
 * either side knows (pipes, sockets, memfds) are CRIU's own business and
 * left out. A path CRIU could not be handed back (a newline in it) is an
 * error naming it. */
int proc_extfds_get(const struct proc_tree *t, struct proc_extfds *out);
void proc_extfds_free(struct proc_extfds *f);

#endif
