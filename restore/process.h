/*
 * process.h - bringing a checkpointed process tree back from the store.
 *
 * The images are served to CRIU straight out of the store as it reads them
 * (restore/imgsrv.h; with CREST_RESTORE_IMAGES=files, written into a
 * private tmpfs directory first, as before), the
 * files the job had open for writing are staged as they were at the
 * snapshot in temporaries beside them (unless the caller keeps them) and
 * swapped in right before CRIU restores the tree (swapped back if it
 * fails: a failed restore leaves them byte for byte as they were), and CUDA
 * processes get their device state back through the driver (restore +
 * unlock), optionally onto other GPUs.
 *
 * A snapshot of a job in a pid namespace of its own (label pidns) needs no
 * free host pids: CRIU makes a new namespace. Restored in place while the
 * original still runs, it would take the original's files from under it,
 * so that is refused; rp_opts.beside restores it as a copy instead. Only
 * one restore in place runs at a time on a host, and it touches nothing
 * while the job or a copy of it runs (process.c: restore_lock, job_running,
 * copy_running). restore/ reaches CRIU and the driver
 * through capture/'s wrappers; it writes nothing to the store.
 */
#ifndef CREST_RESTORE_PROCESS_H
#define CREST_RESTORE_PROCESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "os/criu.h"
#include "gpu/gpuckpt.h"
#include "restore/restore.h"

struct rp_opts {
	const char *tmpdir;                /* NULL: /dev/shm */
	bool keep_files;                   /* leave the job's files as they are now */
	bool huge_pages;                   /* --huge-pages: the machine's huge page setting "always"
					    * while CRIU and the driver restore (os/thp.h) */
	const struct gpuckpt_map *map;     /* --gpu-map: completed by gpumap_complete */
	size_t nmap;
	const char *gpu;                   /* --gpu: the job's first GPU goes here */
	FILE *notes;                       /* what was done to files; NULL: silent */
	unsigned wait_pids_ms;             /* how long to wait for a pid to be freed */
	/* A copy beside the original, which may still run (crest clone): only
	 * for a snapshot of a job in a pid namespace of its own (crest run,
	 * os/pidns.h), whose copy CRIU puts in a new namespace with the same
	 * pids inside. The job's files go to new paths, never over the
	 * original's: workdir/BASENAME (workdir is created if missing), or
	 * without workdir FILE.clone-N beside each file (N = clone). A path
	 * that exists is an error, not overwritten. */
	bool beside;
	const char *workdir;
	unsigned clone;
};

struct rp_result {
	pid_t pid;
	uint64_t stream_ns, criu_ns, gpu_ns, total_ns;
	uint64_t bytes;
};

int restore_process(const struct restore_ctx *c, const struct cas_manifest *m, const struct criu *criu,
		    const struct rp_opts *o, struct rp_result *r);

#endif
