/*
 * cudrv.h - the CUDA driver API, loaded with dlopen at run time.
 *
 * crest never links libcuda: every binary builds and runs where there is no
 * GPU, and only a call that needs one fails, with a message saying why.
 * The table is filled once per process and is read-only afterwards.
 * Symbols are taken by their versioned names (cuMemcpyDtoHAsync_v2 ...),
 * which is what cuda.h's macros would have linked against.
 */
#ifndef CREST_GPU_CUDRV_H
#define CREST_GPU_CUDRV_H

#include <stdbool.h>
#include <stddef.h>
#include <cuda.h>

struct cudrv {
	int driver_version;      /* e.g. 13000 */
	CUresult (*Init)(unsigned int);
	CUresult (*DriverGetVersion)(int *);
	CUresult (*GetErrorString)(CUresult, const char **);
	CUresult (*GetErrorName)(CUresult, const char **);
	CUresult (*DeviceGetCount)(int *);
	CUresult (*DeviceGet)(CUdevice *, int);
	CUresult (*DeviceGetName)(char *, int, CUdevice);
	CUresult (*DeviceGetUuid)(CUuuid *, CUdevice);
	CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
	CUresult (*DevicePrimaryCtxRelease)(CUdevice);
	CUresult (*CtxSetCurrent)(CUcontext);
	CUresult (*CtxGetCurrent)(CUcontext *);
	CUresult (*CtxSynchronize)(void);
	CUresult (*StreamCreate)(CUstream *, unsigned int);
	CUresult (*StreamDestroy)(CUstream);
	CUresult (*StreamSynchronize)(CUstream);
	CUresult (*EventCreate)(CUevent *, unsigned int);
	CUresult (*EventRecord)(CUevent, CUstream);
	CUresult (*EventSynchronize)(CUevent);
	CUresult (*EventQuery)(CUevent);
	CUresult (*EventDestroy)(CUevent);
	CUresult (*MemAlloc)(CUdeviceptr *, size_t);
	CUresult (*MemFree)(CUdeviceptr);
	CUresult (*MemHostAlloc)(void **, size_t, unsigned int);
	CUresult (*MemFreeHost)(void *);
	CUresult (*MemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
	CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
	CUresult (*MemsetD8)(CUdeviceptr, unsigned char, size_t);
	/* Pitched copies (restore/gpu.c); NULL if missing. */
	CUresult (*Memcpy2DAsync)(const CUDA_MEMCPY2D *, CUstream);
	CUresult (*MemGetAddressRange)(CUdeviceptr *, size_t *, CUdeviceptr);
	CUresult (*PointerGetAttribute)(void *, CUpointer_attribute, CUdeviceptr);
	/* Modules and launches (gpu/gpusha.c); NULL if missing. */
	CUresult (*ModuleLoadDataEx)(CUmodule *, const void *, unsigned int, CUjit_option *, void **);
	CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
	CUresult (*ModuleUnload)(CUmodule);
	CUresult (*LaunchKernel)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
				 unsigned int, unsigned int, CUstream, void **, void **);
	/* The checkpoint API (driver 570+); NULL on older drivers. */
	CUresult (*CheckpointProcessGetState)(int, CUprocessState *);
	CUresult (*CheckpointProcessGetRestoreThreadId)(int, int *);
	CUresult (*CheckpointProcessLock)(int, CUcheckpointLockArgs *);
	CUresult (*CheckpointProcessCheckpoint)(int, CUcheckpointCheckpointArgs *);
	CUresult (*CheckpointProcessRestore)(int, CUcheckpointRestoreArgs *);
	CUresult (*CheckpointProcessUnlock)(int, CUcheckpointUnlockArgs *);
};

/* Loads libcuda.so.1 (or $CREST_LIBCUDA) and cuInit()s it. On a machine
 * without the driver: -ENODEV and a message that says so. */
int cudrv_load(const struct cudrv **out);

/* -ENOTSUP with a message when the driver lacks the checkpoint API. */
int cudrv_need_checkpoint(const struct cudrv *d);

/* Turns a CUresult into 0 or a negative code, recording
 * "WHAT: CUDA_ERROR_NAME (description)" as the message. */
int cudrv_check(const struct cudrv *d, CUresult r, const char *what);

#endif
