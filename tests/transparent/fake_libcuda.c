/*
 * fake_libcuda.c - a stand-in for libcuda.so.1 in the tests: enough of the
 * driver API for crest to load it. Built three times: without the
 * checkpoint API (an old driver); with one that refuses, as the driver
 * does for a CUDA feature it cannot checkpoint; and (FAKE_STATEFUL) with
 * one that works, for the guards' tests on machines without a GPU.
 *
 * The stateful one keeps each process's checkpoint state (running, locked,
 * checkpointed) in a file per pid under $FAKE_CUDA_STATE, so that crest,
 * its guards and the test all see one "driver", and appends each call to
 * $FAKE_CUDA_STATE/log. Like the driver it allows only lock (running ->
 * locked), checkpoint (locked -> checkpointed), restore (checkpointed ->
 * locked) and unlock (locked -> running), on a live pid; a zombie gets
 * an error from every call, as from the driver 580 on the H100
 * (CUDA_ERROR_NOT_INITIALIZED or _OPERATING_SYSTEM there; the stand-in
 * says the first; tests/gpu/test_settle_gpu prints what it says). It moves no
 * memory and blocks no process: a test reads the state file to see where
 * a job was left. Two hooks:
 *  FAKE_CUDA_DIE=OP[:after]  the first call of OP (lock, checkpoint,
 *      restore, unlock), in whichever process makes it, kills that process
 *      with SIGKILL before (or after) the state changes: crest dying inside
 *      a driver call, at an exact step;
 *  FAKE_CUDA_FAIL=OP  every call of OP fails (CUDA_ERROR_UNKNOWN) and
 *      changes nothing.
 * And a process that loads it with FAKE_CUDA_NO_CONTEXT set in its
 * environment maps libcuda but has no context, like a
 * torch.multiprocessing.spawn launcher on the H100 (driver 580): every
 * checkpoint call on it, cuCheckpointProcessGetState included, answers
 * CUDA_ERROR_NOT_INITIALIZED (a lock or another step tried on it is logged
 * as "OP PID: no context"). It says so in $FAKE_CUDA_STATE/PID.noctx,
 * made as the library loads.
 */
/* No cuda.h: these stubs do not match its prototypes, and need not. */
typedef int CUresult;
#define CUDA_SUCCESS 0
#define CUDA_ERROR_NOT_SUPPORTED 801

CUresult cuInit(unsigned int f) { (void)f; return CUDA_SUCCESS; }
CUresult cuDriverGetVersion(int *v) { *v = 12020; return CUDA_SUCCESS; }
CUresult cuGetErrorName(CUresult r, const char **s)
{
	*s = r == CUDA_ERROR_NOT_SUPPORTED ? "CUDA_ERROR_NOT_SUPPORTED"
	     : r == 1 ? "CUDA_ERROR_INVALID_VALUE" : r == 3 ? "CUDA_ERROR_NOT_INITIALIZED" : r == 401 ? "CUDA_ERROR_ILLEGAL_STATE" : "CUDA_ERROR_UNKNOWN";
	return CUDA_SUCCESS;
}
CUresult cuGetErrorString(CUresult r, const char **s)
{
	*s = r == CUDA_ERROR_NOT_SUPPORTED ? "operation not supported" : "unknown error";
	return CUDA_SUCCESS;
}
#ifndef FAKE_STATEFUL
CUresult cuDeviceGetCount(int *n) { *n = 0; return CUDA_SUCCESS; }
#endif

/* Everything else crest looks up: present, and never called in the tests. */
#define STUB(name) CUresult name(void) { return CUDA_ERROR_NOT_SUPPORTED; }
STUB(cuDevicePrimaryCtxRetain)
STUB(cuDevicePrimaryCtxRelease_v2) STUB(cuCtxSetCurrent) STUB(cuCtxGetCurrent) STUB(cuCtxSynchronize)
STUB(cuStreamCreate) STUB(cuStreamDestroy_v2) STUB(cuStreamSynchronize) STUB(cuEventCreate)
STUB(cuEventRecord) STUB(cuEventSynchronize) STUB(cuEventQuery) STUB(cuEventDestroy_v2)
STUB(cuMemAlloc_v2) STUB(cuMemFree_v2) STUB(cuMemHostAlloc) STUB(cuMemFreeHost)
STUB(cuMemcpyDtoHAsync_v2) STUB(cuMemcpyHtoDAsync_v2) STUB(cuMemsetD8_v2)
STUB(cuMemGetAddressRange_v2) STUB(cuPointerGetAttribute)
#if defined(FAKE_WITH_CHECKPOINT) || defined(FAKE_STATEFUL)
STUB(cuCheckpointProcessGetRestoreThreadId)
#endif
#ifdef FAKE_WITH_CHECKPOINT
STUB(cuDeviceGet) STUB(cuDeviceGetName) STUB(cuDeviceGetUuid)
/* The driver knows the process (it has a context) and says it runs; only
 * the steps refuse. */
CUresult cuCheckpointProcessGetState(int pid, int *st) { (void)pid; *st = 0; return CUDA_SUCCESS; }
STUB(cuCheckpointProcessLock) STUB(cuCheckpointProcessCheckpoint)
STUB(cuCheckpointProcessRestore) STUB(cuCheckpointProcessUnlock)
#elif !defined(FAKE_STATEFUL)
STUB(cuDeviceGet) STUB(cuDeviceGetName) STUB(cuDeviceGetUuid)
#endif

#ifdef FAKE_STATEFUL
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_ILLEGAL_STATE 401
#define CUDA_ERROR_UNKNOWN 999
enum { RUNNING, LOCKED, CHECKPOINTED };   /* CUprocessState's numbers */

/* One GPU, always the same. */
CUresult cuDeviceGetCount(int *n) { *n = 1; return CUDA_SUCCESS; }
CUresult cuDeviceGet(int *dev, int i) { *dev = i; return i == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }
CUresult cuDeviceGetName(char *name, int len, int dev)
{
	(void)dev;
	snprintf(name, (size_t)len, "crest fake GPU");
	return CUDA_SUCCESS;
}
CUresult cuDeviceGetUuid(unsigned char *uuid, int dev)
{
	(void)dev;
	for (int i = 0; i < 16; i++)
		uuid[i] = (unsigned char)(0xc0 + i);
	return CUDA_SUCCESS;
}

static void path_of(char *out, size_t cap, const char *name)
{
	const char *d = getenv("FAKE_CUDA_STATE");
	snprintf(out, cap, "%s/%s", d && *d ? d : "/tmp", name);
}

static int state_of(int pid)
{
	char name[32], path[4096];
	snprintf(name, sizeof(name), "%d", pid);
	path_of(path, sizeof(path), name);
	FILE *f = fopen(path, "re");
	int st = RUNNING;
	if (f) {
		if (fscanf(f, "%d", &st) != 1)
			st = RUNNING;
		fclose(f);
	}
	return st;
}

static void logline(const char *fmt, int pid, const char *op, int a, int b)
{
	char path[4096], line[256];
	path_of(path, sizeof(path), "log");
	const int n = snprintf(line, sizeof(line), fmt, op, pid, a, b, (int)getpid());
	const int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (fd >= 0) {
		if (write(fd, line, (size_t)n) < 0) {
			/* the log is for reading a failure, nothing depends on it */
		}
		close(fd);
	}
}

static void state_set(int pid, int st)
{
	char name[32], path[4096], tmp[4200];
	snprintf(name, sizeof(name), "%d", pid);
	path_of(path, sizeof(path), name);
	snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid());
	FILE *f = fopen(tmp, "we");
	if (!f)
		return;
	fprintf(f, "%d\n", st);
	fclose(f);
	rename(tmp, path);
}

/* FAKE_CUDA_DIE: the first call of op at this phase, in any process, dies. */
static void die_hook(const char *op, int after, int pid)
{
	const char *want = getenv("FAKE_CUDA_DIE");
	if (!want)
		return;
	const size_t n = strlen(op);
	if (strncmp(want, op, n) || strcmp(want + n, after ? ":after" : ""))
		return;
	char path[4096];
	path_of(path, sizeof(path), "died");
	const int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return;   /* died once already */
	close(fd);
	logline("%s %d: dies here (%d %d) in pid %d\n", pid, op, after, 0);
	raise(SIGKILL);
}

__attribute__((constructor)) static void fake_load(void)
{
	if (!getenv("FAKE_CUDA_NO_CONTEXT"))
		return;
	char name[48], path[4096];
	snprintf(name, sizeof(name), "%d.noctx", (int)getpid());
	path_of(path, sizeof(path), name);
	const int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	if (fd >= 0)
		close(fd);
}

static bool no_context(int pid)
{
	char name[48], path[4096];
	snprintf(name, sizeof(name), "%d.noctx", pid);
	path_of(path, sizeof(path), name);
	return access(path, F_OK) == 0;
}

/* What the driver answers a pid with no process it can reach: a free pid,
 * or a zombie (exited, not reaped: its GPU contexts are gone), or one that
 * has no context (FAKE_CUDA_NO_CONTEXT); 0 for a live one. */
static CUresult unreachable(int pid)
{
	if (pid <= 0 || (kill(pid, 0) < 0 && errno == ESRCH))
		return CUDA_ERROR_INVALID_VALUE;
	if (no_context(pid))
		return CUDA_ERROR_NOT_INITIALIZED;
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	const int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return CUDA_ERROR_INVALID_VALUE;
	const ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = 0;
	const char *rp = strrchr(buf, ')');   /* comm may hold anything */
	return rp && (rp[2] == 'Z' || rp[2] == 'X') ? CUDA_ERROR_NOT_INITIALIZED : CUDA_SUCCESS;
}

static CUresult step(int pid, const char *op, int from, int to)
{
	const CUresult u = unreachable(pid);
	if (u == CUDA_ERROR_NOT_INITIALIZED && no_context(pid))
		logline("%s %d: no context (%d %d) in pid %d\n", pid, op, from, to);
	if (u != CUDA_SUCCESS)
		return u;
	die_hook(op, 0, pid);
	const char *fail = getenv("FAKE_CUDA_FAIL");
	if (fail && !strcmp(fail, op)) {
		logline("%s %d: fails (%d %d) in pid %d\n", pid, op, from, to);
		return CUDA_ERROR_UNKNOWN;
	}
	const int st = state_of(pid);
	if (st != from) {
		logline("%s %d: illegal in state %d (wants %d) in pid %d\n", pid, op, st, from);
		return CUDA_ERROR_ILLEGAL_STATE;
	}
	state_set(pid, to);
	logline("%s %d: %d -> %d in pid %d\n", pid, op, from, to);
	die_hook(op, 1, pid);
	return CUDA_SUCCESS;
}

CUresult cuCheckpointProcessGetState(int pid, int *st)
{
	const CUresult u = unreachable(pid);
	if (u != CUDA_SUCCESS)
		return u;
	*st = state_of(pid);
	return CUDA_SUCCESS;
}
CUresult cuCheckpointProcessLock(int pid, void *a) { (void)a; return step(pid, "lock", RUNNING, LOCKED); }
CUresult cuCheckpointProcessCheckpoint(int pid, void *a) { (void)a; return step(pid, "checkpoint", LOCKED, CHECKPOINTED); }
CUresult cuCheckpointProcessRestore(int pid, void *a) { (void)a; return step(pid, "restore", CHECKPOINTED, LOCKED); }
CUresult cuCheckpointProcessUnlock(int pid, void *a) { (void)a; return step(pid, "unlock", LOCKED, RUNNING); }
#endif
