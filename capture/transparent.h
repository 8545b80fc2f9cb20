/*
 * transparent.h - checkpointing an unmodified process tree by pid.
 *
 * The frozen part (tp_capture_run) is kept as short as it can be: CUDA
 * processes are locked and checkpointed by the driver (device memory moves
 * into their host memory), CRIU dumps the tree into a tmpfs directory (never
 * the store's disk), the contents of the regular files the tree has open for
 * writing are copied from inside CRIU's freeze, and the job resumes at once
 * (driver restore + unlock) unless it is to be killed. Only then does
 * tp_capture_ingest hand the images to the engine, which stores them in the
 * background: a failure there never touches the job. Unless stage_images,
 * CRIU's images go into the engine as CRIU writes them (imgstream.h): the
 * snapshot is begun before the freeze, the engine chunks and hashes during
 * the dump, and nothing of the images is on tmpfs; the commit still comes
 * only after the job runs again, and a failure of the store still fails
 * only the snapshot.
 *
 * A job to be killed (--kill) is left stopped by CRIU, not killed: it is
 * ended by tp_capture_kill only once its snapshot is committed. Until then
 * the images on tmpfs (streamed: the stopped job itself) are its only
 * copy, and they go with tp_capture_free;
 * a failed store resumes it instead (tp_capture_resume), so no failure can
 * leave the job neither running nor stored.
 */
#ifndef CREST_CAPTURE_TRANSPARENT_H
#define CREST_CAPTURE_TRANSPARENT_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "capture/guard.h"
#include "capture/imgstream.h"
#include "gpu/shimctl.h"
#include "os/criu.h"
#include "os/proc.h"
#include "engine/engine.h"

#define TP_FILE_LIMIT_DEFAULT (64ull << 20)
/* The defaults of --lock-timeout (each try to lock the CUDA processes) and
 * --lock-within (all tries; gpu/gpuckpt.h says why there are several). */
#define TP_LOCK_TIMEOUT_MS 10000u
#define TP_LOCK_WITHIN_MS 30000u

#define TP_WORKDIR_LIMIT_DEFAULT (1ull << 30)

/* --workdir DIR: a directory the job writes by path (logs it opens again
 * each step, event files, its own checkpoints), captured whole with every
 * snapshot from inside CRIU's freeze, beside the files the job holds open,
 * so it matches the memory image. Stored as the snapshot's streams
 * "workdir" and "workdir/..." (engine_put_tree: contents with holes, modes,
 * symlinks; owners and hard links are not kept), its path in the label
 * "workdir". A tree over the limit is refused before anything is frozen
 * (and, grown past it by the freeze, fails the dump: the job runs on).
 * Copied in the freeze, it lengthens the stall by what the copy takes: on
 * the development VM (2 shared cores), 202 files of 1.8 MiB added about
 * 4 ms to a crest run job's median stall of 88 ms (25 checkpoints each). */

struct tp_opts {
	pid_t pid;
	bool kill;                 /* end the job once its snapshot is stored */
	uint64_t file_limit;       /* bytes kept of each file open for writing */
	unsigned lock_timeout_ms;  /* for cuCheckpointProcessLock, each try; 0: 10 s */
	unsigned lock_within_ms;   /* all tries to lock every CUDA process at once; 0: 30 s */
	const char *tmpdir;        /* for images; NULL: /dev/shm */
	const struct criu *criu;
	const char *branch;        /* the snapshot's branch; NULL: CAS_BRANCH_DEFAULT */
	/* Drop the job's TCP connections (criu --tcp-close): a restore gives
	 * it each one closed. Without it a connection to a peer outside the
	 * tree is refused before anything is frozen. */
	bool tcp_close;
	bool multi_gpu;            /* --multi-gpu-process: take a process with CUDA state on several
				    * GPUs, which the driver may not restore (gpu/gpuckpt.h) */
	bool huge_pages;           /* --huge-pages: the machine's huge page setting "always"
				    * from before the freeze until the job runs again (os/thp.h) */
	/* --stage-images: CRIU's images written to tmpdir first, stored once
	 * the job runs again, instead of streamed into the engine while CRIU
	 * dumps (capture/imgstream.h). Streamed, the stall was the same on the
	 * H200 (bench/RESULTS.md), the snapshot durable 2-3 s sooner after
	 * it, and tmpfs held 0.27 GB instead of the job's 7.8 GB; staged, a
	 * store slower than CRIU's dump cannot lengthen the stall. */
	bool stage_images;
	const char *workdir;       /* --workdir: absolute, free of symlinks; NULL: none */
	uint64_t workdir_limit;    /* bytes of regular files in it; 0: TP_WORKDIR_LIMIT_DEFAULT */
};

struct tp_capture {
	char dir[PATH_MAX];        /* CRIU's images (fs_workdir_make) */
	int lock_fd;               /* its lock, held while it is in use */
	bool locked;
	char files_dir[PATH_MAX + 8]; /* contents of files the job writes */
	const char *workdir;       /* tp_opts.workdir: its copy is files_dir/wd */
	uint64_t workdir_bytes;    /* what the listing before the freeze found */
	bool workdir_cwd;          /* a process's working directory is below it (no clone) */
	bool workdir_bound;        /* the job sees another DIR than the host's: a clone's own copy */
	struct proc_tree tree;
	pid_t *cuda;
	pid_t *cuda_inner;         /* in its pid namespace, when pidns: restore maps them to new host pids */
	size_t ncuda;
	char *gpus;                /* the GPUs the job saw (gpumap_format), or NULL */
	bool shell_job;
	uint64_t pidns;            /* the root is init of this pid namespace (pidns.h), or 0 */
	bool stopped;              /* --kill: left stopped by CRIU, not yet ended */
	pid_t *held;               /* processes of the tree stopped (SIGSTOP) before the freeze: */
	size_t nheld;              /* the job's own stop, which a resume must not end */
	struct tp_guard guard;     /* armed from the freeze until the job is not crest's to give back */
	const struct cudrv *drv;   /* for the CUDA processes, when ncuda */
	struct proc_files files;   /* sizes as the freeze saw them */
	bool mntns;                /* the tree has a mount namespace of its own (crest run) */
	struct proc_extfds ext;    /* then: its descriptors on the host's mounts (its stdio) */
	uint64_t netns;            /* a network namespace of its own (a copy's): its inode, or 0 */
	bool tcp_established;      /* it holds TCP connections, both ends in the tree: saved */
	bool tcp_close;            /* it holds TCP connections, dropped (tp_opts.tcp_close) */
	char *tcp_ports;           /* the local ports of its TCP sockets, "P,P,...", or NULL */
	char comm[64];
	uint64_t stall_ns, gpu_lock_ns, gpu_ckpt_ns, dump_ns, gpu_resume_ns;
	uint64_t image_bytes;
	/* The job's processes that run crest's NCCL shim (--cuda-shim,
	 * gpu/shim.h): their communicators are released at a consistent cut
	 * just before the freeze and made again once the job runs; released
	 * is true in between. A --kill job's are made again by the restore
	 * (the manifest's shim_pids). */
	struct shimctl shim;
	pid_t *shim_inner;         /* their pids in the job's pid namespace, when pidns */
	bool shim_released;
	struct shimctl_stats shim_st;
	uint64_t shim_rebuild_ns;
	bool stranded_nccl;        /* stranded: by its NCCL, not by the driver */
	bool thp;                  /* the huge page setting raised (tp_opts.huge_pages) */
	/* Not tp_opts.stage_images: CRIU's images went into the snapshot as it
	 * dumped (capture/imgstream.h), none is in dir. stream_rc: what went
	 * wrong taking them, which fails the snapshot. */
	bool streamed;
	struct imgstream *stream;
	int stream_rc;
	char stream_msg[1024];
	/* Set when, after the dump, the driver could not give a CUDA process
	 * back (it stays checkpointed or locked, and can never run again): what
	 * it said. The images are stored all the same, then the job is ended
	 * (tp_checkpoint), loudly; never left frozen in silence. */
	char stranded[1024];
};

/* What one tp_checkpoint did. */
struct tp_result {
	uint8_t id[32];              /* the snapshot, once committed */
	uint64_t stall_ns, gpu_lock_ns, gpu_ckpt_ns, dump_ns, gpu_resume_ns;
	/* The shim's part, when the job runs it (shim_procs > 0): its release
	 * before the freeze, its rebuild after (0 with --kill). */
	size_t shim_procs;
	unsigned shim_comms, shim_peers;
	uint64_t shim_release_ns, shim_rebuild_ns;
	struct engine_result r;
	const char *watch_path;      /* in: a file the job writes, or NULL */
	uint64_t watch_size;         /* out: its size at the freeze */
};

/* How the caller follows a tp_checkpoint; every member may be NULL. */
struct tp_hooks {
	/* The job runs again (or, with --kill, is stopped): before the ingest. */
	void (*resumed)(void *arg, const struct tp_opts *o, const struct tp_capture *c);
	/* Returns once s is committed or has failed (to show progress while
	 * waiting); NULL: plain engine_snapshot_wait. */
	void (*ingesting)(void *arg, struct engine_snap *s);
	void *arg;
};

/*
 * One transparent checkpoint, end to end: capture (the job frozen), resume,
 * then ingest into the store through e while the job runs, as a child of
 * parent (NULL: none). With o->kill the job ends only once its snapshot is
 * committed; if it was not, the job runs on and the error says so.
 */
int tp_checkpoint(struct cas_store *store, struct engine *e, const struct tp_opts *o, const char *tag,
		  const uint8_t *parent, const struct tp_hooks *h, struct tp_result *res);

/* The action script criu runs inside its freeze: `crest __criu-hook DIR LIMIT`.
 * (`crest __capture-guard` is capture/guard.h's tp_guard_main.) */
int tp_hook_main(int argc, char **argv);

#endif
