/* cudrv.c - dlopen'ed CUDA driver; see cudrv.h. */
#include "gpu/cudrv.h"
#include "util/err.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static struct cudrv drv;
static int drv_rc = 1;   /* 1: not tried yet */
static char drv_msg[1024];
static pthread_mutex_t drv_lock = PTHREAD_MUTEX_INITIALIZER;

#define SYM(field, name, required)                                                   \
	do {                                                                         \
		*(void **)&drv.field = dlsym(h, name);                               \
		if (!drv.field && (required)) {                                      \
			return crest_errx(-ENOSYS, "the NVIDIA driver library has no %s: " \
					  "driver too old for crest", name);          \
		}                                                                    \
	} while (0)

static int drv_fill(void *h)
{
	SYM(Init, "cuInit", 1);
	SYM(DriverGetVersion, "cuDriverGetVersion", 1);
	SYM(GetErrorString, "cuGetErrorString", 1);
	SYM(GetErrorName, "cuGetErrorName", 1);
	SYM(DeviceGetCount, "cuDeviceGetCount", 1);
	SYM(DeviceGet, "cuDeviceGet", 1);
	SYM(DeviceGetName, "cuDeviceGetName", 1);
	SYM(DeviceGetUuid, "cuDeviceGetUuid", 1);
	SYM(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 1);
	SYM(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", 1);
	SYM(CtxSetCurrent, "cuCtxSetCurrent", 1);
	SYM(CtxGetCurrent, "cuCtxGetCurrent", 1);
	SYM(CtxSynchronize, "cuCtxSynchronize", 1);
	SYM(StreamCreate, "cuStreamCreate", 1);
	SYM(StreamDestroy, "cuStreamDestroy_v2", 1);
	SYM(StreamSynchronize, "cuStreamSynchronize", 1);
	SYM(EventCreate, "cuEventCreate", 1);
	SYM(EventRecord, "cuEventRecord", 1);
	SYM(EventSynchronize, "cuEventSynchronize", 1);
	SYM(EventQuery, "cuEventQuery", 1);
	SYM(EventDestroy, "cuEventDestroy_v2", 1);
	SYM(MemAlloc, "cuMemAlloc_v2", 1);
	SYM(MemFree, "cuMemFree_v2", 1);
	SYM(MemHostAlloc, "cuMemHostAlloc", 1);
	SYM(MemFreeHost, "cuMemFreeHost", 1);
	SYM(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", 1);
	SYM(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", 1);
	SYM(MemsetD8, "cuMemsetD8_v2", 1);
	SYM(Memcpy2DAsync, "cuMemcpy2DAsync_v2", 0);
	SYM(MemGetAddressRange, "cuMemGetAddressRange_v2", 1);
	SYM(PointerGetAttribute, "cuPointerGetAttribute", 1);
	SYM(ModuleLoadDataEx, "cuModuleLoadDataEx", 0);
	SYM(ModuleGetFunction, "cuModuleGetFunction", 0);
	SYM(ModuleUnload, "cuModuleUnload", 0);
	SYM(LaunchKernel, "cuLaunchKernel", 0);
	SYM(CheckpointProcessGetState, "cuCheckpointProcessGetState", 0);
	SYM(CheckpointProcessGetRestoreThreadId, "cuCheckpointProcessGetRestoreThreadId", 0);
	SYM(CheckpointProcessLock, "cuCheckpointProcessLock", 0);
	SYM(CheckpointProcessCheckpoint, "cuCheckpointProcessCheckpoint", 0);
	SYM(CheckpointProcessRestore, "cuCheckpointProcessRestore", 0);
	SYM(CheckpointProcessUnlock, "cuCheckpointProcessUnlock", 0);
	return 0;
}

int cudrv_check(const struct cudrv *d, CUresult r, const char *what)
{
	if (r == CUDA_SUCCESS)
		return 0;
	const char *name = NULL, *desc = NULL;
	if (d && d->GetErrorName)
		d->GetErrorName(r, &name);
	if (d && d->GetErrorString)
		d->GetErrorString(r, &desc);
	int err = r == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM
		  : r == CUDA_ERROR_NOT_SUPPORTED ? -ENOTSUP
		  : r == CUDA_ERROR_INVALID_VALUE ? -EINVAL
		  : r == CUDA_ERROR_NO_DEVICE ? -ENODEV
		  : -EIO;
	return crest_errx(err, "%s: %s (%s)", what, name ? name : "CUDA error", desc ? desc : "no description");
}

int cudrv_load(const struct cudrv **out)
{
	pthread_mutex_lock(&drv_lock);
	if (drv_rc == 1) {
		const char *lib = getenv("CREST_LIBCUDA");
		if (!lib || !*lib)
			lib = "libcuda.so.1";
		void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
		if (!h) {
			drv_rc = crest_errx(-ENODEV, "no NVIDIA GPU driver here: cannot load %s (%s)", lib, dlerror());
		} else {
			drv_rc = drv_fill(h);
			if (drv_rc == 0)
				drv_rc = cudrv_check(&drv, drv.Init(0), "cuInit");
			if (drv_rc == 0)
				drv_rc = cudrv_check(&drv, drv.DriverGetVersion(&drv.driver_version), "cuDriverGetVersion");
		}
		crest_errcpy(drv_msg, sizeof(drv_msg));
	}
	int rc = drv_rc;
	pthread_mutex_unlock(&drv_lock);
	if (rc < 0) {
		crest_errset_str(drv_msg);
		return rc;
	}
	*out = &drv;
	return 0;
}

int cudrv_need_checkpoint(const struct cudrv *d)
{
	if (!d->CheckpointProcessLock || !d->CheckpointProcessCheckpoint || !d->CheckpointProcessRestore ||
	    !d->CheckpointProcessUnlock || !d->CheckpointProcessGetState)
		return crest_errx(-ENOTSUP, "NVIDIA driver %d.%d has no checkpoint API "
				  "(cuCheckpointProcess*, driver 570 or later)",
				  d->driver_version / 1000, d->driver_version % 1000 / 10);
	return 0;
}
