/*
 * regions.h - restoring a library snapshot into the job's registered
 * regions, host and device.
 *
 * A snapshot restores only into regions of the same names and sizes (both
 * ways: none missing, none extra), checked before a byte is written. The
 * bytes then go through restore/gpu.c's windows: chunks read and checked
 * (record header SHA-256 and CRC32C), device windows staged in slices of
 * the pinned pool, host regions filled in place. Calls cas/, gpu/ and util/.
 */
#ifndef CREST_RESTORE_REGIONS_H
#define CREST_RESTORE_REGIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu/cudrv.h"
#include "gpu/pool.h"
#include "restore/restore.h"

struct restore_region {
	const char *name;
	uint8_t *ptr;
	size_t size;
	bool device;                  /* device memory of context ctx */
	CUcontext ctx;
};

/* 0 when m's REGION streams and r[0..n) agree by name and size; else
 * -EINVAL naming the first region that differs (snap names m in it). */
int restore_regions_match(const struct cas_manifest *m, const char *snap, const struct restore_region *r,
			  size_t n);

/* Restores every region of r from m (matched first, all of them), but
 * those with skip[i] set (skip NULL: none), which the caller has restored
 * otherwise. d: the driver, NULL when no region to restore is on a device;
 * pool: staging for device windows, taken slice by slice (a checkpoint
 * still being ingested may hold some). The current CUDA context may be left
 * changed: the caller saves it. */
int restore_regions(const struct restore_ctx *c, const struct cas_manifest *m, const struct restore_region *r,
		    size_t n, const bool *skip, const struct cudrv *d, struct pool *pool);

#endif
