/*
 * gpuckpt.h - the CUDA driver's process checkpoint API over a set of pids.
 *
 * lock + checkpoint moves each process's device memory into its own host
 * memory and releases its GPU handles, so CRIU can then dump it as a CPU
 * process; restore + unlock brings it back. The driver does the work on a
 * thread inside each target, so the targets must be running (not frozen)
 * while these calls run. All or nothing: if one process fails, the ones
 * already done are brought back before the error is returned.
 */
#ifndef CREST_GPU_GPUCKPT_H
#define CREST_GPU_GPUCKPT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "gpu/cudrv.h"

struct gpuckpt_map {
	CUuuid from, to;
};

int gpuckpt_suspend(const struct cudrv *d, const pid_t *pids, size_t n, unsigned timeout_ms,
		    uint64_t *lock_ns, uint64_t *ckpt_ns);
int gpuckpt_resume(const struct cudrv *d, const pid_t *pids, size_t n, const struct gpuckpt_map *map,
		   size_t nmap);
/* "GPU-xxxxxxxx-xxxx-..." as nvidia-smi prints it, to a CUuuid. */
int gpuckpt_parse_uuid(const char *s, CUuuid *u);

#endif
