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
 * What a target process has in its own environment (/proc/PID/environ;
 * else crest's) shapes its calls, so that each process of a tree can
 * differ:
 *  FAKE_CUDA_LOCK_MS, FAKE_CUDA_CKPT_MS, FAKE_CUDA_RESTORE_MS  its lock,
 *      checkpoint and restore take that long (the driver's work on a big
 *      job: seconds);
 *  FAKE_CUDA_NCCL=ranks|always  it is a rank of a collective job (NCCL),
 *      the other processes with the variable its peers. A rank's lock
 *      cannot end while a peer is locked and it is not, since its
 *      collective in flight waits for that peer: the lock waits out its
 *      timeout and answers CUDA_ERROR_NOT_READY, changing nothing, as on
 *      the H100 (shared notes). "ranks": when a peer's lock had ended
 *      before this one began (locked one after the other; locks made at
 *      once succeed, as a collective both have in flight can end);
 *      "always": when a peer is locked as this lock ends, however close
 *      (a job whose ranks are never quiet together: locks can only fail).
 * A process that loads the stand-in CUDA runtime (fake_cudart.h) has a
 * page of that runtime's: the stateful driver keeps the process's state
 * there (as well as in its file), so that a copy restored under another
 * pid (crest run's pid namespace) is found checkpointed, as the driver
 * finds it, and the runtime's calls wait while it is not running; and,
 * like the driver 580 (cuCheckpointProcessRestore: CUDA_ERROR_INVALID_VALUE,
 * capture/transparent.c), it cannot restore such a process while it has
 * peer access between GPUs enabled: the restore answers that error,
 * changes nothing, and logs "restore PID: peer access on ...". Its lock
 * and checkpoint log "peers PID: N pair(s) at the lock|checkpoint".
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
	     : r == 1 ? "CUDA_ERROR_INVALID_VALUE" : r == 3 ? "CUDA_ERROR_NOT_INITIALIZED" : r == 401 ? "CUDA_ERROR_ILLEGAL_STATE"
	     : r == 600 ? "CUDA_ERROR_NOT_READY" : "CUDA_ERROR_UNKNOWN";
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
#include "fake_cudart.h"

#include <dirent.h>
#include <errno.h>
#include <sys/mman.h>
#include <stdbool.h>
#include <fcntl.h>
#include <sys/file.h>
#include <time.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_ILLEGAL_STATE 401
#define CUDA_ERROR_NOT_READY 600
#define CUDA_ERROR_UNKNOWN 999
enum { RUNNING, LOCKED, CHECKPOINTED };   /* CUprocessState's numbers */

/* FAKE_CUDA_GPUS GPUs (default 1), all of one chip; GPU d's UUID is
 * c0c1...ce followed by the byte d (so GPU 0's is the one GPU of before). */
static int ngpus(void)
{
	const char *v = getenv("FAKE_CUDA_GPUS");
	const int n = v ? atoi(v) : 1;
	return n >= 1 && n <= 16 ? n : 1;
}
CUresult cuDeviceGetCount(int *n) { *n = ngpus(); return CUDA_SUCCESS; }
CUresult cuDeviceGet(int *dev, int i) { *dev = i; return i >= 0 && i < ngpus() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }
CUresult cuDeviceGetName(char *name, int len, int dev)
{
	(void)dev;
	snprintf(name, (size_t)len, "crest fake GPU");
	return CUDA_SUCCESS;
}
CUresult cuDeviceGetUuid(unsigned char *uuid, int dev)
{
	for (int i = 0; i < 15; i++)
		uuid[i] = (unsigned char)(0xc0 + i);
	uuid[15] = (unsigned char)(0xcf + dev);
	return CUDA_SUCCESS;
}

static void path_of(char *out, size_t cap, const char *name)
{
	const char *d = getenv("FAKE_CUDA_STATE");
	snprintf(out, cap, "%s/%s", d && *d ? d : "/tmp", name);
}

/* The page of pid's stand-in runtime (fake_cudart.h), mapped (munmap
 * 4096 bytes), or NULL: pid loads none. */
static struct fake_rt_page *rt_page(int pid)
{
	char dir[64];
	snprintf(dir, sizeof(dir), "/proc/%d/fd", pid);
	DIR *d = opendir(dir);
	if (!d)
		return NULL;
	struct fake_rt_page *p = NULL;
	struct dirent *e;
	while (!p && (e = readdir(d))) {
		char path[384], link[256];
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		const ssize_t n = readlink(path, link, sizeof(link) - 1);
		if (n <= 0)
			continue;
		link[n] = 0;
		if (strcmp(link, "/memfd:" FAKE_RT_MEMFD_NAME " (deleted)"))
			continue;
		const int fd = open(path, O_RDWR | O_CLOEXEC);
		if (fd < 0)
			continue;
		void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		close(fd);
		if (m == MAP_FAILED)
			continue;
		p = m;
		if (__atomic_load_n(&p->magic, __ATOMIC_ACQUIRE) != FAKE_RT_MAGIC) {
			munmap(m, 4096);
			p = NULL;
		}
	}
	closedir(d);
	return p;
}

static int state_of(int pid)
{
	struct fake_rt_page *p = rt_page(pid);
	if (p) {
		const int st = (int)__atomic_load_n(&p->state, __ATOMIC_ACQUIRE);
		munmap(p, 4096);
		return st;
	}
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
	struct fake_rt_page *p = rt_page(pid);
	if (p) {
		__atomic_store_n(&p->state, (uint32_t)st, __ATOMIC_RELEASE);
		munmap(p, 4096);
	}
}

/* The peer access pairs pid has on now (-1: it loads no stand-in
 * runtime), logged as "peers PID: N pair(s) at the WHEN". */
static int peers_of(int pid, const char *when)
{
	struct fake_rt_page *p = rt_page(pid);
	if (!p)
		return -1;
	const int n = (int)__atomic_load_n(&p->npairs, __ATOMIC_ACQUIRE);
	munmap(p, 4096);
	char fmt[128];
	snprintf(fmt, sizeof(fmt), "%%s %%d: %%d pair(s) at the %s%%.0d in pid %%d\n", when);
	logline(fmt, pid, "peers", n, 0);
	return n;
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

/* NAME from pid's environment, else from the caller's, into buf: NULL
 * when neither has it. */
static const char *target_env(int pid, const char *name, char *buf, size_t cap)
{
	char path[64], env[65536];
	snprintf(path, sizeof(path), "/proc/%d/environ", pid);
	const int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, env, sizeof(env) - 1) : -1;
	if (fd >= 0)
		close(fd);
	const size_t len = strlen(name);
	for (ssize_t i = 0; n > 0 && i < n; i += (ssize_t)strlen(env + i) + 1) {
		env[n] = 0;
		if (!strncmp(env + i, name, len) && env[i + (ssize_t)len] == '=') {
			snprintf(buf, cap, "%s", env + i + len + 1);
			return buf;
		}
	}
	const char *v = getenv(name);
	if (!v)
		return NULL;
	snprintf(buf, cap, "%s", v);
	return buf;
}

static unsigned target_ms(int pid, const char *name)
{
	char buf[32];
	return target_env(pid, name, buf, sizeof(buf)) ? (unsigned)strtoul(buf, NULL, 10) : 0;
}

static unsigned long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000ull + (unsigned long long)ts.tv_nsec / 1000000ull;
}

static void nap_ms(unsigned long long ms)
{
	struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* A peer rank (FAKE_CUDA_NCCL) of pid that is locked now, with when its
 * lock ended (PID.locked_at), or 0. */
static int peer_locked(int pid, unsigned long long *at)
{
	char path[4096];
	path_of(path, sizeof(path), "");
	DIR *d = opendir(path);
	if (!d)
		return 0;
	int peer = 0;
	struct dirent *e;
	while (!peer && (e = readdir(d))) {
		int p = 0;
		char rest[32];
		if (sscanf(e->d_name, "%d.%31s", &p, rest) != 2 || strcmp(rest, "locked_at") || p == pid)
			continue;
		if (state_of(p) != LOCKED || unreachable(p) != CUDA_SUCCESS)
			continue;
		char name[48];
		snprintf(name, sizeof(name), "%d.locked_at", p);
		path_of(path, sizeof(path), name);
		FILE *f = fopen(path, "re");
		if (f) {
			if (fscanf(f, "%llu", at) == 1)
				peer = p;
			fclose(f);
		}
	}
	closedir(d);
	return peer;
}

/* The lock of a rank (FAKE_CUDA_NCCL), begun at begin: under the ranks'
 * own lock (nccl.lock), so that two locks ending together see each
 * other. */
static CUresult nccl_lock(int pid, const char *mode, unsigned long long begin, unsigned timeout_ms)
{
	char path[4096];
	path_of(path, sizeof(path), "nccl.lock");
	const int lk = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (lk >= 0)
		flock(lk, LOCK_EX);
	unsigned long long at = 0;
	const int peer = peer_locked(pid, &at);
	const int busy = peer && (!strcmp(mode, "always") || at <= begin);
	CUresult r = CUDA_SUCCESS;
	if (!busy) {
		r = step(pid, "lock", RUNNING, LOCKED);
		if (r == CUDA_SUCCESS) {
			char name[48], line[32];
			snprintf(name, sizeof(name), "%d.locked_at", pid);
			path_of(path, sizeof(path), name);
			const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
			const int n = snprintf(line, sizeof(line), "%llu\n", now_ms());
			if (fd >= 0) {
				if (write(fd, line, (size_t)n) < 0) {
					/* then the peers do not see this lock: the test fails */
				}
				close(fd);
			}
		}
	}
	if (lk >= 0)
		close(lk);
	if (!busy)
		return r;
	/* Its collective waits for the peer: the lock waits out its timeout
	 * (the driver's 0, none, is 10 s here) and gives up. */
	const unsigned long long waited = now_ms() - begin, limit = timeout_ms ? timeout_ms : 10000;
	if (waited < limit)
		nap_ms(limit - waited);
	logline("%s %d: not ready (peer %d locked%.0d) in pid %d\n", pid, "lock", peer, 0);
	return CUDA_ERROR_NOT_READY;
}

CUresult cuCheckpointProcessGetState(int pid, int *st)
{
	const CUresult u = unreachable(pid);
	if (u != CUDA_SUCCESS)
		return u;
	*st = state_of(pid);
	return CUDA_SUCCESS;
}
/* a: CUcheckpointLockArgs, whose first member is timeoutMs. */
CUresult cuCheckpointProcessLock(int pid, void *a)
{
	const unsigned long long begin = now_ms();
	if (unreachable(pid) == CUDA_SUCCESS)
		nap_ms(target_ms(pid, "FAKE_CUDA_LOCK_MS"));
	if (unreachable(pid) == CUDA_SUCCESS && state_of(pid) == RUNNING)
		peers_of(pid, "lock");
	char mode[16];
	if (unreachable(pid) == CUDA_SUCCESS && target_env(pid, "FAKE_CUDA_NCCL", mode, sizeof(mode)))
		return nccl_lock(pid, mode, begin, a ? *(const unsigned *)a : 0);
	return step(pid, "lock", RUNNING, LOCKED);
}
CUresult cuCheckpointProcessCheckpoint(int pid, void *a)
{
	(void)a;
	if (unreachable(pid) == CUDA_SUCCESS && state_of(pid) == LOCKED) {
		peers_of(pid, "checkpoint");
		nap_ms(target_ms(pid, "FAKE_CUDA_CKPT_MS"));
	}
	return step(pid, "checkpoint", LOCKED, CHECKPOINTED);
}
/* cuda.h's CUcheckpointRestoreArgs begins with the GPU pairs and their
 * count; each pair is two 16-byte UUIDs. A restore with pairs logs them,
 * "restore PID: gpus OLD>NEW ...", by the UUIDs' last byte less 0xcf (the
 * GPU's index here). */
struct fake_restore_args {
	const unsigned char (*pairs)[2][16];
	unsigned npairs;
};
CUresult cuCheckpointProcessRestore(int pid, void *a)
{
	const struct fake_restore_args *r = a;
	if (r && r->pairs && r->npairs && unreachable(pid) == CUDA_SUCCESS) {
		char fmt[256] = "%s %d: gpus";
		size_t n = strlen(fmt);
		for (unsigned i = 0; i < r->npairs && n + 16 < sizeof(fmt); i++)
			n += (size_t)snprintf(fmt + n, sizeof(fmt) - n, " %d>%d", r->pairs[i][0][15] - 0xcf,
					      r->pairs[i][1][15] - 0xcf);
		snprintf(fmt + n, sizeof(fmt) - n, " (%%d %%d) in pid %%d\n");
		logline(fmt, pid, "restore", 0, 0);
	}
	if (unreachable(pid) == CUDA_SUCCESS && state_of(pid) == CHECKPOINTED) {
		nap_ms(target_ms(pid, "FAKE_CUDA_RESTORE_MS"));
		const int peers = peers_of(pid, "restore");
		if (peers > 0) {
			logline("%s %d: peer access on (%d pair(s)%.0d): refused in pid %d\n", pid, "restore", peers, 0);
			return CUDA_ERROR_INVALID_VALUE;
		}
	}
	return step(pid, "restore", CHECKPOINTED, LOCKED);
}
CUresult cuCheckpointProcessUnlock(int pid, void *a) { (void)a; return step(pid, "unlock", LOCKED, RUNNING); }
#endif
