/*
 * fake_libcuda.c - a stand-in for libcuda.so.1 in the error tests: enough
 * of the driver API for crest to load it. Built twice: without the
 * checkpoint API (an old driver), and with one that refuses, as the driver
 * does for a CUDA feature it cannot checkpoint.
 */
/* No cuda.h: these stubs do not match its prototypes, and need not. */
typedef int CUresult;
#define CUDA_SUCCESS 0
#define CUDA_ERROR_NOT_SUPPORTED 801

CUresult cuInit(unsigned int f) { (void)f; return CUDA_SUCCESS; }
CUresult cuDriverGetVersion(int *v) { *v = 12020; return CUDA_SUCCESS; }
CUresult cuGetErrorName(CUresult r, const char **s)
{
	*s = r == CUDA_ERROR_NOT_SUPPORTED ? "CUDA_ERROR_NOT_SUPPORTED" : "CUDA_ERROR_UNKNOWN";
	return CUDA_SUCCESS;
}
CUresult cuGetErrorString(CUresult r, const char **s)
{
	*s = r == CUDA_ERROR_NOT_SUPPORTED ? "operation not supported" : "unknown error";
	return CUDA_SUCCESS;
}
CUresult cuDeviceGetCount(int *n) { *n = 0; return CUDA_SUCCESS; }

/* Everything else crest looks up: present, and never called in the tests. */
#define STUB(name) CUresult name(void) { return CUDA_ERROR_NOT_SUPPORTED; }
STUB(cuDeviceGet) STUB(cuDeviceGetName) STUB(cuDeviceGetUuid) STUB(cuDevicePrimaryCtxRetain)
STUB(cuDevicePrimaryCtxRelease_v2) STUB(cuCtxSetCurrent) STUB(cuCtxGetCurrent) STUB(cuCtxSynchronize)
STUB(cuStreamCreate) STUB(cuStreamDestroy_v2) STUB(cuStreamSynchronize) STUB(cuEventCreate)
STUB(cuEventRecord) STUB(cuEventSynchronize) STUB(cuEventQuery) STUB(cuEventDestroy_v2)
STUB(cuMemAlloc_v2) STUB(cuMemFree_v2) STUB(cuMemHostAlloc) STUB(cuMemFreeHost)
STUB(cuMemcpyDtoHAsync_v2) STUB(cuMemcpyHtoDAsync_v2) STUB(cuMemsetD8_v2)
STUB(cuMemGetAddressRange_v2) STUB(cuPointerGetAttribute)
#ifdef FAKE_WITH_CHECKPOINT
STUB(cuCheckpointProcessGetState) STUB(cuCheckpointProcessGetRestoreThreadId)
STUB(cuCheckpointProcessLock) STUB(cuCheckpointProcessCheckpoint)
STUB(cuCheckpointProcessRestore) STUB(cuCheckpointProcessUnlock)
#endif
