/*
 * shim_lib.c - libcrest-shim.so, preloaded into a job by `crest run
 * --cuda-shim` (or LD_PRELOAD by hand): stands between the job and NCCL so
 * that crest can end the job's real communicators at a quiet point before
 * the driver's checkpoint and build new ones after its restore. gpu/shim.h
 * has the protocol and why; this file is the job's side.
 *
 * Every NCCL 2.28 entry point that takes a communicator is defined here
 * and forwards to the next definition (RTLD_NEXT: the job's libnccl). The
 * job is handed a struct vcomm as its ncclComm_t, never NCCL's own, so the
 * real one can be swapped under it. An entry point the shim did not define
 * would receive a vcomm and crash in NCCL: the list follows nccl.h 2.28
 * (host API), and gpu-check lists what PyTorch imports against it.
 *
 * It is loaded into processes crest does not own: no crest library is
 * linked in, nothing runs until the process makes its first communicator
 * (a process that never does, a launcher or a data-loader worker, gets no
 * thread and no memfd), nothing is written to stdout, and failures become
 * NCCL error codes. Cost on the job's path: an atomic increment and load on
 * the way in and out of each call that enqueues work.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "gpu/shim.h"

#include <dlfcn.h>
#include <link.h>
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

/* NCCL's types as its 2.28 header declares them: the ABI interposed. */
typedef struct ncclComm *ncclComm_t;
typedef struct ncclWindow_vidmem *ncclWindow_t;
typedef struct { char internal[SHIM_ID_BYTES]; } ncclUniqueId;
typedef int ncclResult_t;
typedef int ncclDataType_t;
typedef int ncclRedOp_t;
typedef int ncclScalarResidence_t;
typedef struct CUstream_st *cudaStream_t;
typedef struct ncclSimInfo ncclSimInfo_t;
typedef struct ncclDevCommRequirements ncclDevCommRequirements_t;
typedef struct ncclDevComm ncclDevComm_t;
enum { ncclSuccess = 0, ncclSystemError = 2, ncclInternalError = 3, ncclInvalidUsage = 5, ncclInProgress = 7 };
enum { ncclNumOps = 5, ncclScalarHostImmediate = 1 };
/* ncclConfig_t begins so in every version; the rest is copied by its size. */
struct nccl_config_head {
	size_t size;
	unsigned int magic, version;
};
/* Offsets of the two strings in ncclConfig_v22800 (netName, commName),
 * deep-copied when the config the job passed is that long. */
#define CFG_NETNAME_OFF 32
#define CFG_COMMNAME_OFF 48

/* ---- the next definitions (the job's libnccl) ---- */

/* The job's libnccl: by its soname when it is loaded already, which finds
 * it where a plain RTLD_NEXT does not (PyTorch's comes in as a dependency
 * of an extension module that Python loads RTLD_LOCAL: outside the global
 * scope that RTLD_NEXT searches from a preloaded library); else the next
 * definition in the global scope (a job linked against libnccl). */
static void *next(const char *name)
{
	static void *_Atomic lib;
	void *h = atomic_load(&lib);
	if (!h) {
		const char *so = getenv("CREST_SHIM_NCCL");
		h = dlopen(so && so[0] ? so : "libnccl.so.2", RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);
		if (h)
			atomic_store(&lib, h);
	}
	void *f = h ? dlsym(h, name) : NULL;
	return f ? f : dlsym(RTLD_NEXT, name);
}
#define REAL(name, type) static __typeof__(type) real_##name; \
	if (!real_##name) real_##name = (type)next(#name)

/* ---- communicators ---- */

#define VCOMM_MAGIC 0x63726573746d6d63ull
#define MAX_STREAMS 8
#define MAX_OPS 16
#define MAX_REGS 64

struct redop {
	int vop, rop;           /* the job's handle, NCCL's now */
	ncclDataType_t type;
	ncclScalarResidence_t res;
	void *scalar;           /* device residence: the job's pointer */
	uint64_t value;         /* host residence: the value, read at creation */
	bool live;
};

struct reg {
	bool window;
	void *buf;
	size_t size;
	int flags;
	void *real;             /* NCCL's handle (or window) now */
};

enum vkind { VK_INIT, VK_SPLIT, VK_FIXED };

struct vcomm {
	uint64_t magic;
	ncclComm_t real;        /* NULL while released */
	int rank, nranks, dev;
	uint8_t key[16];
	enum vkind kind;
	const char *fixed_why;  /* VK_FIXED: what made it */
	bool devapi;
	void *config;           /* a copy of the config it was made with, or NULL */
	_Atomic uint64_t count;
	uint64_t target;
	uint64_t splits;        /* ncclCommSplit calls on it: the children's keys */
	cudaStream_t streams[MAX_STREAMS];
	int nstreams;
	bool streams_full;
	struct redop ops[MAX_OPS];
	struct reg *regs[MAX_REGS];
};

static pthread_mutex_t table_mu = PTHREAD_MUTEX_INITIALIZER;
static struct vcomm *table[SHIM_MAX_COMMS];   /* creation order, no holes */
static int ntable;
static bool lost_comm;   /* one the shim could not stand in for: PAUSE refuses */

/* ---- the gate ---- */

static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static _Atomic int gate_closed;
static _Atomic int inflight;
static bool draining;        /* under gate_mu */
static _Atomic int broken;   /* a rebuild failed: calls fail */
static __thread int group_depth;

static struct vcomm *as_v(ncclComm_t c)
{
	struct vcomm *v = (struct vcomm *)c;
	return v && v->magic == VCOMM_MAGIC ? v : NULL;
}

static bool any_below_target(void)
{
	for (int i = 0; i < ntable; i++)
		if (table[i] && table[i]->real && atomic_load(&table[i]->count) < table[i]->target)
			return true;
	return false;
}

/* In: waits while the gate is closed, unless crest's DRAIN lets this call
 * through (its communicator is below target; a group start while any is).
 * Counts the call on v. Dekker with the closer: inflight is raised before
 * the gate is read, and the closer reads inflight after closing it. */
static void gate_enter(struct vcomm *v, bool counts)
{
	atomic_fetch_add(&inflight, 1);
	if (!atomic_load(&gate_closed)) {
		if (v && counts)
			atomic_fetch_add(&v->count, 1);
		return;
	}
	atomic_fetch_sub(&inflight, 1);
	pthread_mutex_lock(&gate_mu);
	pthread_cond_broadcast(&gate_cv);
	for (;;) {
		if (!atomic_load(&gate_closed))
			break;
		if (draining && counts && (v ? v->real && atomic_load(&v->count) < v->target : any_below_target()))
			break;
		pthread_cond_wait(&gate_cv, &gate_mu);
	}
	atomic_fetch_add(&inflight, 1);
	if (v && counts)
		atomic_fetch_add(&v->count, 1);
	pthread_mutex_unlock(&gate_mu);
}

static void gate_leave(void)
{
	if (atomic_fetch_sub(&inflight, 1) == 1 && atomic_load(&gate_closed)) {
		pthread_mutex_lock(&gate_mu);
		pthread_cond_broadcast(&gate_cv);
		pthread_mutex_unlock(&gate_mu);
	}
}

static void note_stream(struct vcomm *v, cudaStream_t s)
{
	if (v->nstreams && v->streams[v->nstreams - 1] == s)
		return;
	pthread_mutex_lock(&table_mu);
	int i = 0;
	while (i < v->nstreams && v->streams[i] != s)
		i++;
	if (i == v->nstreams) {
		if (v->nstreams < MAX_STREAMS)
			v->streams[v->nstreams++] = s;
		else
			v->streams_full = true;
	}
	pthread_mutex_unlock(&table_mu);
}

/* Enter for a call that enqueues work on c (outside a group: through the
 * gate; inside one, the group start went through it). */
static ncclResult_t enq_enter(ncclComm_t c, struct vcomm **out, cudaStream_t s)
{
	struct vcomm *v = as_v(c);
	*out = v;
	if (!v)
		return ncclSuccess;   /* not one of ours: passed on as it is */
	if (group_depth == 0)
		gate_enter(v, true);
	else
		atomic_fetch_add(&v->count, 1);
	if (!v->real) {
		if (group_depth == 0)
			gate_leave();
		return atomic_load(&broken) ? ncclSystemError : ncclInvalidUsage;
	}
	note_stream(v, s);
	return ncclSuccess;
}

static void enq_leave(const struct vcomm *v)
{
	if (v && group_depth == 0)
		gate_leave();
}

static ncclComm_t real_of(ncclComm_t c)
{
	struct vcomm *v = as_v(c);
	return v ? v->real : c;
}

static int map_op(const struct vcomm *v, int op)
{
	if (!v || op < ncclNumOps)
		return op;
	for (int i = 0; i < MAX_OPS; i++)
		if (v->ops[i].live && v->ops[i].vop == op)
			return v->ops[i].rop;
	return op;
}

/* ---- the control thread (gpu/shim.h) ---- */

static struct shim_ctl *ctl;
static int ctl_fd = -1;
static pthread_mutex_t ctl_mu = PTHREAD_MUTEX_INITIALIZER;

static long futex(_Atomic uint32_t *a, int op, uint32_t v, const struct timespec *ts)
{
	return syscall(SYS_futex, (uint32_t *)a, op, v, ts, NULL, 0);
}

static _Atomic uint32_t *seq_of(uint32_t *p)
{
	return (_Atomic uint32_t *)p;
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(ctl->rep_msg, sizeof(ctl->rep_msg), fmt, ap);
	va_end(ap);
}

/* Waits on cv (mu held) for at most ms milliseconds: the callers loop on
 * their own condition and deadline. */
static void cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, long ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += ms * 1000 * 1000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_cond_timedwait(cv, mu, &ts);
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The driver, for stream queries and the device a rebuild runs on. It is
 * loaded already in a CUDA process; absent (a test's fake NCCL), both are
 * skipped. */
typedef int (*cu_fn_get)(int *, int);
typedef int (*cu_fn_retain)(void **, int);
typedef int (*cu_fn_setcur)(void *);
typedef int (*cu_fn_query)(cudaStream_t);
static struct {
	bool tried, ok;
	cu_fn_get device_get;
	cu_fn_retain retain;
	cu_fn_setcur set_current;
	cu_fn_query stream_query;
	void *ctx[64];
} cu;

static bool cu_load(void)
{
	if (cu.tried)
		return cu.ok;
	cu.tried = true;
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	if (!h)
		return false;
	cu.device_get = (cu_fn_get)dlsym(h, "cuDeviceGet");
	cu.retain = (cu_fn_retain)dlsym(h, "cuDevicePrimaryCtxRetain");
	cu.set_current = (cu_fn_setcur)dlsym(h, "cuCtxSetCurrent");
	cu.stream_query = (cu_fn_query)dlsym(h, "cuStreamQuery");
	cu.ok = cu.device_get && cu.retain && cu.set_current && cu.stream_query;
	return cu.ok;
}

/* Makes dev's primary context current on this thread: NCCL builds a
 * communicator on the calling thread's device. */
static int cu_use(int dev)
{
	if (!cu_load() || dev < 0 || dev >= 64)
		return 0;
	if (!cu.ctx[dev]) {
		int d;
		if (cu.device_get(&d, dev) != 0 || cu.retain(&cu.ctx[dev], d) != 0) {
			cu.ctx[dev] = NULL;
			return -ENODEV;
		}
	}
	return cu.set_current(cu.ctx[dev]) == 0 ? 0 : -ENODEV;
}

/* ---- the work gate: the job's kernels held while its peer access is off ----
 *
 * Between the release (peer access disabled, before the driver's lock)
 * and the rebuild (enabled again, after the driver's unlock or restore) the
 * job runs, and a kernel it launched then that reads a peer GPU's memory
 * would fault: the context would be lost. So while the shim has peer
 * access off, the job's kernel launches (the runtime's and the driver's,
 * as far as they come through the dynamic linker) wait at this gate, and
 * the release first lets every kernel already queued finish. Copies are
 * not held: the driver copies between GPUs without peer access. A job that
 * never enabled peer access pays one atomic load a launch. */
static _Atomic int work_closed;
static _Atomic int work_inflight;
static _Atomic int work_any;      /* the job ever enabled a pair */
static pthread_mutex_t work_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work_cv = PTHREAD_COND_INITIALIZER;

static bool work_enter(void)
{
	if (!atomic_load_explicit(&work_any, memory_order_relaxed))
		return false;
	atomic_fetch_add(&work_inflight, 1);
	if (!atomic_load(&work_closed))
		return true;
	atomic_fetch_sub(&work_inflight, 1);
	pthread_mutex_lock(&work_mu);
	pthread_cond_broadcast(&work_cv);
	while (atomic_load(&work_closed))
		pthread_cond_wait(&work_cv, &work_mu);
	atomic_fetch_add(&work_inflight, 1);
	pthread_mutex_unlock(&work_mu);
	return true;
}

static void work_leave(bool entered)
{
	if (entered && atomic_fetch_sub(&work_inflight, 1) == 1 && atomic_load(&work_closed)) {
		pthread_mutex_lock(&work_mu);
		pthread_cond_broadcast(&work_cv);
		pthread_mutex_unlock(&work_mu);
	}
}

/* Closes the gate and waits, within timeout_ms, for the launches inside
 * it to return. */
static int work_close(unsigned timeout_ms)
{
	atomic_store(&work_closed, 1);
	const uint64_t end = now_ms() + timeout_ms;
	pthread_mutex_lock(&work_mu);
	while (atomic_load(&work_inflight) > 0 && now_ms() < end) {
		cond_wait_ms(&work_cv, &work_mu, 2);
	}
	const int busy = atomic_load(&work_inflight);
	pthread_mutex_unlock(&work_mu);
	if (busy > 0) {
		say("%d kernel launch(es) of the job did not return within %u ms", busy, timeout_ms);
		return -EBUSY;
	}
	return 0;
}

static void work_open(void)
{
	pthread_mutex_lock(&work_mu);
	atomic_store(&work_closed, 0);
	pthread_cond_broadcast(&work_cv);
	pthread_mutex_unlock(&work_mu);
}

/* ---- peer access between GPUs ---- */

/* The job's CUDA runtime, when it is a shared library (PyTorch's is): the
 * first loaded object named libcudart.so*, by its path. */
static int find_cudart(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	const char *slash = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
	if (slash && !strncmp(slash + 1, "libcudart.so", 12)) {
		*(void **)arg = dlopen(info->dlpi_name, RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);
		return *(void **)arg != NULL;
	}
	return 0;
}

static void *rt_sym(const char *name)
{
	static void *_Atomic lib;
	void *h = atomic_load(&lib);
	if (!h) {
		dl_iterate_phdr(find_cudart, &h);
		if (h)
			atomic_store(&lib, h);
	}
	void *f = h ? dlsym(h, name) : NULL;
	return f ? f : dlsym(RTLD_NEXT, name);
}

/* Whether the job's CUDA runtime is a shared library the shim stands in
 * front of (a runtime linked into a program statically is not). */
static bool rt_shared(void)
{
	void *h = NULL;
	dl_iterate_phdr(find_cudart, &h);
	return h != NULL;
}

static void *cu_sym(const char *name)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	return h ? dlsym(h, name) : NULL;
}

#define MAX_PEERS 64
struct peer {
	bool drv;           /* cuCtxEnablePeerAccess: ctx, pctx; else the runtime's dev, to */
	int dev, to;
	void *ctx, *pctx;
	unsigned flags;
};
static struct peer peers[MAX_PEERS];   /* under table_mu */
static int npeers;
static bool peers_lost;                /* more than MAX_PEERS: not all can be disabled */

static int ctl_start(void);

static void peer_note(bool add, const struct peer *p)
{
	pthread_mutex_lock(&table_mu);
	int i = 0;
	while (i < npeers && !(peers[i].drv == p->drv && peers[i].dev == p->dev && peers[i].to == p->to &&
			       peers[i].ctx == p->ctx && peers[i].pctx == p->pctx))
		i++;
	if (add && i == npeers) {
		atomic_store(&work_any, 1);
		if (npeers < MAX_PEERS)
			peers[npeers++] = *p;
		else
			peers_lost = true;
	} else if (!add && i < npeers) {
		peers[i] = peers[--npeers];
	}
	if (ctl && !p->drv)
		ctl->flags |= SHIM_SEES_RUNTIME;   /* a runtime call came through the shim */
	pthread_mutex_unlock(&table_mu);
}

#define CUDA_PEER_ALREADY_ENABLED 704   /* cudaErrorPeerAccessAlreadyEnabled */
#define CUDA_PEER_NOT_ENABLED 705       /* cudaErrorPeerAccessNotEnabled */

EXPORT int cudaDeviceEnablePeerAccess(int to, unsigned int flags)
{
	int (*real)(int, unsigned int) = (int (*)(int, unsigned int))rt_sym("cudaDeviceEnablePeerAccess");
	int (*getdev)(int *) = (int (*)(int *))rt_sym("cudaGetDevice");
	if (!real)
		return 35;   /* cudaErrorInsufficientDriver: no runtime to pass it to */
	const bool in = work_enter();   /* not while the shim has peer access off */
	const int rc = real(to, flags);
	work_leave(in);
	struct peer p = { .drv = false, .to = to, .flags = flags };
	if ((rc == 0 || rc == CUDA_PEER_ALREADY_ENABLED) && getdev && getdev(&p.dev) == 0 && ctl_start() == 0)
		peer_note(true, &p);
	return rc;
}

EXPORT int cudaDeviceDisablePeerAccess(int to)
{
	int (*real)(int) = (int (*)(int))rt_sym("cudaDeviceDisablePeerAccess");
	int (*getdev)(int *) = (int (*)(int *))rt_sym("cudaGetDevice");
	if (!real)
		return 35;
	const int rc = real(to);
	struct peer p = { .drv = false, .to = to };
	if ((rc == 0 || rc == CUDA_PEER_NOT_ENABLED) && getdev && getdev(&p.dev) == 0)
		peer_note(false, &p);
	return rc;
}

EXPORT int cuCtxEnablePeerAccess(void *pctx, unsigned int flags)
{
	int (*real)(void *, unsigned int) = (int (*)(void *, unsigned int))cu_sym("cuCtxEnablePeerAccess");
	int (*getcur)(void **) = (int (*)(void **))cu_sym("cuCtxGetCurrent");
	if (!real)
		return 3;   /* CUDA_ERROR_NOT_INITIALIZED */
	const bool in = work_enter();
	const int rc = real(pctx, flags);
	work_leave(in);
	struct peer p = { .drv = true, .pctx = pctx, .flags = flags };
	if ((rc == 0 || rc == CUDA_PEER_ALREADY_ENABLED) && getcur && getcur(&p.ctx) == 0 && ctl_start() == 0)
		peer_note(true, &p);
	return rc;
}

EXPORT int cuCtxDisablePeerAccess(void *pctx)
{
	int (*real)(void *) = (int (*)(void *))cu_sym("cuCtxDisablePeerAccess");
	int (*getcur)(void **) = (int (*)(void **))cu_sym("cuCtxGetCurrent");
	if (!real)
		return 3;
	const int rc = real(pctx);
	struct peer p = { .drv = true, .pctx = pctx };
	if ((rc == 0 || rc == CUDA_PEER_NOT_ENABLED) && getcur && getcur(&p.ctx) == 0)
		peer_note(false, &p);
	return rc;
}

/* The job's kernel launches, held at the work gate (above). */
typedef struct {
	unsigned x, y, z;
} shim_dim3;

#define HOLD(type, name, params, args)                              \
	EXPORT type name params                                     \
	{                                                           \
		static type(*real) params;                           \
		if (!real)                                          \
			real = (type(*) params)LOOKUP(#name);      \
		if (!real)                                          \
			return (type)MISSING;                       \
		const bool in = work_enter();                       \
		const type rc = real args;                          \
		work_leave(in);                                     \
		return rc;                                          \
	}

#define LOOKUP rt_sym
#define MISSING 35   /* cudaErrorInsufficientDriver: no runtime to pass it to */
HOLD(int, cudaLaunchKernel, (const void *f, shim_dim3 g, shim_dim3 b, void **a, size_t m, cudaStream_t s),
     (f, g, b, a, m, s))
HOLD(int, cudaLaunchCooperativeKernel, (const void *f, shim_dim3 g, shim_dim3 b, void **a, size_t m, cudaStream_t s),
     (f, g, b, a, m, s))
HOLD(int, cudaLaunchKernelExC, (const void *config, const void *f, void **a), (config, f, a))
HOLD(int, cudaGraphLaunch, (void *exec, cudaStream_t s), (exec, s))
#undef LOOKUP
#undef MISSING
#define LOOKUP cu_sym
#define MISSING 3    /* CUDA_ERROR_NOT_INITIALIZED */
HOLD(int, cuLaunchKernel,
     (void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned m, void *s,
      void **p, void **e),
     (f, gx, gy, gz, bx, by, bz, m, s, p, e))
HOLD(int, cuLaunchCooperativeKernel,
     (void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned m, void *s,
      void **p),
     (f, gx, gy, gz, bx, by, bz, m, s, p))
HOLD(int, cuLaunchKernelEx, (const void *config, void *f, void **p, void **e), (config, f, p, e))
HOLD(int, cuGraphLaunch, (void *exec, void *s), (exec, s))
#undef LOOKUP
#undef MISSING

/* Disables (on) or enables again (!on) every pair the job enabled, from
 * the control thread: the runtime's on the pair's device, the driver's in
 * the pair's context. */
static int peers_set(bool off)
{
	int (*devsync)(void) = (int (*)(void))rt_sym("cudaDeviceSynchronize");
	int (*ctxsync)(void) = (int (*)(void))cu_sym("cuCtxSynchronize");
	int (*setdev)(int) = (int (*)(int))rt_sym("cudaSetDevice");
	int (*rt_en)(int, unsigned) = (int (*)(int, unsigned))rt_sym("cudaDeviceEnablePeerAccess");
	int (*rt_dis)(int) = (int (*)(int))rt_sym("cudaDeviceDisablePeerAccess");
	int (*cu_en)(void *, unsigned) = (int (*)(void *, unsigned))cu_sym("cuCtxEnablePeerAccess");
	int (*cu_dis)(void *) = (int (*)(void *))cu_sym("cuCtxDisablePeerAccess");
	int (*cu_set)(void *) = (int (*)(void *))cu_sym("cuCtxSetCurrent");
	pthread_mutex_lock(&table_mu);
	/* Off: every kernel queued before the gate closed finishes first (it
	 * may read the peer's memory). */
	for (int i = 0; off && i < npeers; i++) {
		const struct peer *p = &peers[i];
		const int r = p->drv ? (!cu_set || !ctxsync || cu_set(p->ctx) != 0 ? -1 : ctxsync())
				     : (!setdev || !devsync || setdev(p->dev) != 0 ? -1 : devsync());
		if (r != 0) {
			pthread_mutex_unlock(&table_mu);
			say("waiting for the job's kernels on %s %d failed (error %d)", p->drv ? "a context of device" : "device",
			    p->dev, r);
			return -EIO;
		}
	}
	for (int i = 0; i < npeers; i++) {
		const struct peer *p = &peers[i];
		int r;
		if (p->drv)
			r = !cu_set || !cu_en || !cu_dis || cu_set(p->ctx) != 0 ? -1 : off ? cu_dis(p->pctx) : cu_en(p->pctx, p->flags);
		else
			r = !setdev || !rt_en || !rt_dis || setdev(p->dev) != 0 ? -1 : off ? rt_dis(p->to) : rt_en(p->to, p->flags);
		if (r != 0 && r != (off ? CUDA_PEER_NOT_ENABLED : CUDA_PEER_ALREADY_ENABLED)) {
			if (p->drv)
				say("%s peer access from context %p to %p failed (CUresult %d)", off ? "disabling" : "enabling",
				    p->ctx, p->pctx, r);
			else
				say("%s peer access from device %d to %d failed (cudaError %d)", off ? "disabling" : "enabling",
				    p->dev, p->to, r);
			pthread_mutex_unlock(&table_mu);
			return -EIO;
		}
	}
	pthread_mutex_unlock(&table_mu);
	return 0;
}

static void publish(void)
{
	int n = 0;
	for (int i = 0; i < ntable && n < SHIM_MAX_COMMS; i++) {
		struct vcomm *v = table[i];
		if (!v)
			continue;
		struct shim_comm *sc = &ctl->comm[n++];
		REAL(ncclCommCount, ncclResult_t (*)(ncclComm_t, int *));
		REAL(ncclCommUserRank, ncclResult_t (*)(ncclComm_t, int *));
		if (v->nranks < 0 && v->real && real_ncclCommCount)
			real_ncclCommCount(v->real, &v->nranks);
		if (v->rank < 0 && v->real && real_ncclCommUserRank)
			real_ncclCommUserRank(v->real, &v->rank);
		memcpy(sc->key, v->key, sizeof(sc->key));
		sc->rank = v->rank;
		sc->nranks = v->nranks;
		sc->dev = v->dev;
		sc->flags = (v->devapi || v->kind == VK_FIXED) ? SHIM_COMM_DEVAPI : 0;
		sc->count = atomic_load(&v->count);
	}
	ctl->ncomm = (uint32_t)n;
	ctl->npeer = (uint32_t)npeers;
	if (rt_shared())
		ctl->flags |= SHIM_SEES_RUNTIME;
}

static int op_pause(unsigned timeout_ms)
{
	atomic_store(&gate_closed, 1);
	const uint64_t end = now_ms() + timeout_ms;
	pthread_mutex_lock(&gate_mu);
	while (atomic_load(&inflight) > 0 && now_ms() < end) {
		cond_wait_ms(&gate_cv, &gate_mu, 10);
	}
	const int busy = atomic_load(&inflight);
	pthread_mutex_unlock(&gate_mu);
	ctl->state = SHIM_PAUSED;
	pthread_mutex_lock(&table_mu);
	publish();
	pthread_mutex_unlock(&table_mu);
	if (busy > 0) {
		say("%d NCCL call(s) did not return within %u ms (a communicator being made, or a blocking call)",
		    busy, timeout_ms);
		return -EBUSY;
	}
	if (lost_comm) {
		say("a communicator the shim could not stand in for (more than %d at once, or out of memory)",
		    SHIM_MAX_COMMS);
		return -EOPNOTSUPP;
	}
	if (peers_lost) {
		say("the job enabled peer access between more than %d pairs of GPUs", MAX_PEERS);
		return -EOPNOTSUPP;
	}
	for (int i = 0; i < ntable; i++)
		if (table[i] && table[i]->kind == VK_FIXED) {
			say("a communicator made by %s, which the shim cannot make again", table[i]->fixed_why);
			return -EOPNOTSUPP;
		} else if (table[i] && table[i]->devapi) {
			say("a communicator with NCCL device-API state (ncclDevCommCreate), which the shim cannot "
			    "make again");
			return -EOPNOTSUPP;
		} else if (table[i] && table[i]->streams_full) {
			say("a communicator used on more than %d CUDA streams", MAX_STREAMS);
			return -EOPNOTSUPP;
		}
	return 0;
}

static int op_drain(unsigned timeout_ms)
{
	const uint64_t end = now_ms() + timeout_ms;
	pthread_mutex_lock(&table_mu);
	for (int i = 0, n = 0; i < ntable && n < (int)ctl->ncomm; i++)
		if (table[i])
			table[i]->target = ctl->comm[n++].target;
	pthread_mutex_unlock(&table_mu);
	pthread_mutex_lock(&gate_mu);
	draining = true;
	pthread_cond_broadcast(&gate_cv);
	bool done = false;
	while (!done && now_ms() < end) {
		done = atomic_load(&inflight) == 0 && !any_below_target();
		if (!done) {
			cond_wait_ms(&gate_cv, &gate_mu, 2);
		}
	}
	draining = false;
	pthread_mutex_unlock(&gate_mu);
	pthread_mutex_lock(&table_mu);
	publish();
	bool over = false;
	for (int i = 0; i < ntable; i++)
		if (table[i] && table[i]->real && atomic_load(&table[i]->count) > table[i]->target)
			over = true;
	pthread_mutex_unlock(&table_mu);
	if (!done) {
		say("the job did not make the NCCL calls its peers had made within %u ms", timeout_ms);
		return -ETIMEDOUT;
	}
	if (over)
		return -EAGAIN;
	/* Every call the peers wait for is in: the streams they went to run
	 * dry (a collective whose peer never came would keep one busy). */
	for (int i = 0; i < ntable; i++) {
		struct vcomm *v = table[i];
		for (int s = 0; v && v->real && s < v->nstreams; s++) {
			if (!cu_load())
				break;
			if (cu_use(v->dev) < 0) {
				say("cannot use device %d to wait for NCCL's streams", v->dev);
				return -ENODEV;
			}
			int r;
			while ((r = cu.stream_query(v->streams[s])) == 600 /* CUDA_ERROR_NOT_READY */ && now_ms() < end) {
				struct timespec ts = { 0, 200 * 1000 };
				nanosleep(&ts, NULL);
			}
			if (r == 600) {
				say("a NCCL stream of device %d was still busy after %u ms", v->dev, timeout_ms);
				return -ETIMEDOUT;
			}
			if (r != 0 && r != 400 /* CUDA_ERROR_INVALID_HANDLE: a stream the job destroyed */) {
				say("cuStreamQuery on a NCCL stream of device %d failed (CUresult %d)", v->dev, r);
				return -EIO;
			}
		}
	}
	return 0;
}

static int op_release(void)
{
	REAL(ncclCommAbort, ncclResult_t (*)(ncclComm_t));
	int rc = 0;
	/* Children (splits) before their parents: reverse creation order. */
	for (int i = ntable; i-- > 0;) {
		struct vcomm *v = table[i];
		if (!v || !v->real)
			continue;
		const ncclResult_t r = real_ncclCommAbort ? real_ncclCommAbort(v->real) : ncclSystemError;
		v->real = NULL;
		for (int k = 0; k < MAX_REGS; k++)
			if (v->regs[k])
				v->regs[k]->real = NULL;
		if (r != ncclSuccess && rc == 0) {
			say("ncclCommAbort of communicator %d (rank %d of %d) failed (ncclResult %d)", i, v->rank,
			    v->nranks, r);
			rc = -EIO;
		}
	}
	/* Then the peer access (NCCL's own is gone with its communicators),
	 * with the job's kernel launches held until it is on again. */
	int prc = npeers ? work_close(ctl->req_timeout_ms ? ctl->req_timeout_ms : 10000) : 0;
	if (prc == 0)
		prc = peers_set(true);
	if (prc < 0 && rc == 0)
		rc = prc;
	ctl->state = SHIM_RELEASED;
	return rc;
}

static int op_ids(void)
{
	REAL(ncclGetUniqueId, ncclResult_t (*)(ncclUniqueId *));
	/* Ids only for a rebuild to come: each one starts a bootstrap root
	 * (a thread and a socket) in this process. */
	if (ctl->state != SHIM_RELEASED)
		return 0;
	for (int i = 0, n = 0; i < ntable; i++) {
		struct vcomm *v = table[i];
		if (!v)
			continue;
		struct shim_comm *sc = &ctl->comm[n++];
		if (v->rank != 0)
			continue;
		ncclUniqueId id;
		if (!real_ncclGetUniqueId || real_ncclGetUniqueId(&id) != ncclSuccess) {
			say("ncclGetUniqueId failed for communicator %d", i);
			return -EIO;
		}
		memcpy(sc->newid, id.internal, SHIM_ID_BYTES);
	}
	return 0;
}

static void open_gate(void)
{
	pthread_mutex_lock(&gate_mu);
	atomic_store(&gate_closed, 0);
	draining = false;
	pthread_cond_broadcast(&gate_cv);
	pthread_mutex_unlock(&gate_mu);
}

static int rebuild_extras(struct vcomm *v)
{
	REAL(ncclRedOpCreatePreMulSum, ncclResult_t (*)(ncclRedOp_t *, void *, ncclDataType_t, ncclScalarResidence_t,
							ncclComm_t));
	REAL(ncclCommRegister, ncclResult_t (*)(ncclComm_t, void *, size_t, void **));
	REAL(ncclCommWindowRegister, ncclResult_t (*)(ncclComm_t, void *, size_t, ncclWindow_t *, int));
	for (int k = 0; k < MAX_OPS; k++) {
		struct redop *o = &v->ops[k];
		if (!o->live)
			continue;
		ncclRedOp_t r;
		void *scalar = o->res == ncclScalarHostImmediate ? (void *)&o->value : o->scalar;
		if (!real_ncclRedOpCreatePreMulSum ||
		    real_ncclRedOpCreatePreMulSum(&r, scalar, o->type, o->res, v->real) != ncclSuccess)
			return -EIO;
		o->rop = r;
	}
	for (int k = 0; k < MAX_REGS; k++) {
		struct reg *g = v->regs[k];
		if (!g)
			continue;
		ncclResult_t r;
		if (g->window)
			r = real_ncclCommWindowRegister
				    ? real_ncclCommWindowRegister(v->real, g->buf, g->size, (ncclWindow_t *)&g->real,
								  g->flags)
				    : ncclSystemError;
		else
			r = real_ncclCommRegister ? real_ncclCommRegister(v->real, g->buf, g->size, &g->real)
						  : ncclSystemError;
		if (r != ncclSuccess)
			return -EIO;
	}
	return 0;
}

static int op_rebuild(unsigned timeout_ms)
{
	REAL(ncclGroupStart, ncclResult_t (*)(void));
	REAL(ncclGroupEnd, ncclResult_t (*)(void));
	REAL(ncclCommInitRankConfig, ncclResult_t (*)(ncclComm_t *, int, ncclUniqueId, int, void *));
	REAL(ncclCommInitRank, ncclResult_t (*)(ncclComm_t *, int, ncclUniqueId, int));
	REAL(ncclCommGetAsyncError, ncclResult_t (*)(ncclComm_t, ncclResult_t *));
	if (ctl->state != SHIM_RELEASED) {
		open_gate();
		ctl->state = SHIM_RUNNING;
		return 0;   /* never released (a PAUSE given up on): nothing to build */
	}
	if (peers_set(false) < 0)
		goto broken;
	work_open();
	bool comms = false;
	for (int i = 0; i < ntable; i++)
		comms |= table[i] != NULL;
	if (!comms) {
		ctl->state = SHIM_RUNNING;
		open_gate();
		return 0;
	}
	if (!real_ncclGroupStart || !real_ncclGroupEnd || !real_ncclCommInitRank || !real_ncclCommGetAsyncError) {
		say("the job's libnccl lacks the calls a rebuild needs");
		goto broken;
	}
	/* One group: NCCL runs the inits at the group's end, together, so
	 * that ranks in several communicators need not agree on an order. */
	ncclResult_t r = real_ncclGroupStart();
	int failed = -1;
	for (int i = 0, n = 0; r == ncclSuccess && i < ntable; i++) {
		struct vcomm *v = table[i];
		if (!v)
			continue;
		ncclUniqueId id;
		memcpy(id.internal, ctl->comm[n++].newid, SHIM_ID_BYTES);
		if (cu_use(v->dev) < 0) {
			r = ncclSystemError;
			failed = i;
			break;
		}
		r = v->config && real_ncclCommInitRankConfig
			    ? real_ncclCommInitRankConfig(&v->real, v->nranks, id, v->rank, v->config)
			    : real_ncclCommInitRank(&v->real, v->nranks, id, v->rank);
		if (r != ncclSuccess && r != ncclInProgress)
			failed = i;
	}
	const ncclResult_t e = real_ncclGroupEnd();
	if (r == ncclSuccess || r == ncclInProgress)
		r = e;
	/* A non-blocking communicator is ready once its error is no longer
	 * ncclInProgress. */
	const uint64_t end = now_ms() + timeout_ms;
	for (int i = 0; (r == ncclSuccess || r == ncclInProgress) && i < ntable; i++) {
		struct vcomm *v = table[i];
		if (!v || !v->real)
			continue;
		ncclResult_t a = ncclInProgress;
		while (real_ncclCommGetAsyncError(v->real, &a) == ncclSuccess && a == ncclInProgress && now_ms() < end) {
			struct timespec ts = { 0, 1000 * 1000 };
			nanosleep(&ts, NULL);
		}
		if (a != ncclSuccess) {
			r = a;
			failed = i;
		}
	}
	if (r != ncclSuccess && r != ncclInProgress) {
		say("NCCL could not make communicator %d again (ncclResult %d)", failed, r);
		goto broken;
	}
	for (int i = 0; i < ntable; i++)
		if (table[i] && rebuild_extras(table[i]) < 0) {
			say("a reduction op or buffer registration of communicator %d could not be made again", i);
			goto broken;
		}
	ctl->state = SHIM_RUNNING;
	open_gate();
	return 0;
broken:
	/* Calls now fail with ncclSystemError, which the job sees as a NCCL
	 * error (PyTorch raises it) rather than waiting for ever. */
	atomic_store(&broken, 1);
	ctl->state = SHIM_BROKEN;
	work_open();
	open_gate();
	return -EIO;
}

static void *ctl_main(void *arg)
{
	(void)arg;
	prctl(PR_SET_NAME, SHIM_THREAD_NAME);
	_Atomic uint32_t *req = seq_of(&ctl->req_seq), *rep = seq_of(&ctl->rep_seq);
	for (;;) {
		const uint32_t r = atomic_load(req);
		if (r == atomic_load(rep)) {
			/* A second's timeout: a wake lost across a restore costs a second. */
			const struct timespec ts = { 1, 0 };
			futex(req, FUTEX_WAIT, r, &ts);
			continue;
		}
		ctl->rep_msg[0] = 0;
		int rc;
		const unsigned t = ctl->req_timeout_ms ? ctl->req_timeout_ms : 10000;
		switch (ctl->req_op) {
		case SHIM_OP_PAUSE:
			rc = op_pause(t);
			break;
		case SHIM_OP_DRAIN:
			rc = op_drain(t);
			break;
		case SHIM_OP_RELEASE:
			rc = op_release();
			break;
		case SHIM_OP_IDS:
			rc = op_ids();
			break;
		case SHIM_OP_REBUILD:
			rc = op_rebuild(t);
			break;
		case SHIM_OP_OPEN:
			rc = 0;
			if (ctl->state == SHIM_PAUSED) {
				open_gate();
				ctl->state = SHIM_RUNNING;
			} else if (ctl->state == SHIM_RELEASED) {
				/* No rebuild is coming: calls fail rather than wait. */
				atomic_store(&broken, 1);
				ctl->state = SHIM_BROKEN;
				work_open();
				open_gate();
			}
			break;
		default:
			say("unknown request %u", ctl->req_op);
			rc = -EINVAL;
		}
		ctl->rep_rc = rc;
		atomic_store(rep, r);
		futex(rep, FUTEX_WAKE, INT32_MAX, NULL);
	}
	return NULL;
}

static void ctl_forget(void)
{
	/* A forked child: the parent's channel and communicators are not its. */
	if (ctl)
		munmap(ctl, sizeof(*ctl));
	if (ctl_fd >= 0)
		close(ctl_fd);
	ctl = NULL;
	ctl_fd = -1;
	ntable = 0;
	memset(table, 0, sizeof(table));
	lost_comm = false;
	npeers = 0;
	peers_lost = false;
	atomic_store(&work_closed, 0);
	atomic_store(&work_inflight, 0);
	pthread_mutex_init(&work_mu, NULL);
	pthread_cond_init(&work_cv, NULL);
	atomic_store(&gate_closed, 0);
	atomic_store(&inflight, 0);
	pthread_mutex_init(&gate_mu, NULL);
	pthread_mutex_init(&table_mu, NULL);
	pthread_mutex_init(&ctl_mu, NULL);
	pthread_cond_init(&gate_cv, NULL);
}

/* The channel and its thread, made with the process's first communicator. */
static int ctl_start(void)
{
	pthread_mutex_lock(&ctl_mu);
	if (ctl) {
		pthread_mutex_unlock(&ctl_mu);
		return 0;
	}
	static bool atfork;
	if (!atfork) {
		pthread_atfork(NULL, NULL, ctl_forget);
		atfork = true;
	}
	int fd = memfd_create(SHIM_MEMFD_NAME, MFD_CLOEXEC);
	void *p = MAP_FAILED;
	if (fd >= 0 && ftruncate(fd, sizeof(struct shim_ctl)) == 0)
		p = mmap(NULL, sizeof(struct shim_ctl), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		if (fd >= 0)
			close(fd);
		pthread_mutex_unlock(&ctl_mu);
		return -1;
	}
	struct shim_ctl *c = p;
	c->magic = SHIM_MAGIC;
	c->version = SHIM_VERSION;
	c->pid = getpid();
	c->state = SHIM_RUNNING;
	ctl = c;
	ctl_fd = fd;
	/* The thread takes none of the job's signals. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_t th;
	pthread_attr_t a;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&a, 16u << 20);   /* NCCL builds a communicator on it */
	const int rc = pthread_create(&th, &a, ctl_main, NULL);
	pthread_attr_destroy(&a);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_mutex_unlock(&ctl_mu);
	return rc == 0 ? 0 : -1;
}

/* ---- making and ending communicators ---- */

static void key_of(uint8_t key[16], const void *data, size_t len, uint64_t salt)
{
	/* Two FNV-1a lanes: the key only has to match across ranks. */
	uint64_t a = 0xcbf29ce484222325ull ^ salt, b = 0x84222325cbf29ce4ull ^ (salt * 31);
	const uint8_t *p = data;
	for (size_t i = 0; i < len; i++) {
		a = (a ^ p[i]) * 0x100000001b3ull;
		b = (b ^ p[len - 1 - i]) * 0x100000001b3ull;
	}
	memcpy(key, &a, 8);
	memcpy(key + 8, &b, 8);
}

static void *config_copy(const void *config)
{
	if (!config)
		return NULL;
	const struct nccl_config_head *h = config;
	size_t n = h->size;
	if (n < sizeof(*h) || n > 4096)
		return NULL;
	char *c = malloc(n);
	if (!c)
		return NULL;
	memcpy(c, config, n);
	/* The strings may not outlive the call in the job: ours do. */
	const size_t offs[2] = { CFG_NETNAME_OFF, CFG_COMMNAME_OFF };
	for (int i = 0; i < 2; i++)
		if (n >= offs[i] + sizeof(char *)) {
			const char *s;
			memcpy(&s, c + offs[i], sizeof(s));
			char *d = s ? strdup(s) : NULL;
			memcpy(c + offs[i], &d, sizeof(d));
		}
	return c;
}

/* Wraps a new real communicator; *out becomes the job's handle. On any
 * failure of the shim itself the real one is handed over as it is (the job
 * runs; crest will then see no shim for it and refuse as without one). */
/* Wraps a new real communicator; *out becomes the job's handle. rank and
 * nranks as the init was given them (a non-blocking communicator may not
 * answer yet), or -1 to ask it. On a failure of the shim itself the real
 * one is handed over as it is, and every later PAUSE refuses: crest must
 * not end the others and leave that one to the driver. */
static void adopt(ncclComm_t *out, ncclComm_t real, enum vkind kind, const char *why, const uint8_t key[16],
		  const void *config, int rank, int nranks)
{
	REAL(ncclCommCount, ncclResult_t (*)(ncclComm_t, int *));
	REAL(ncclCommUserRank, ncclResult_t (*)(ncclComm_t, int *));
	REAL(ncclCommCuDevice, ncclResult_t (*)(ncclComm_t, int *));
	*out = real;
	if (!real)
		return;
	struct vcomm *v = ctl_start() == 0 ? calloc(1, sizeof(*v)) : NULL;
	if (!v) {
		lost_comm = true;
		return;
	}
	if (rt_shared())
		ctl->flags |= SHIM_SEES_RUNTIME;
	v->magic = VCOMM_MAGIC;
	v->real = real;
	v->kind = kind;
	v->fixed_why = why;
	v->rank = rank;
	v->nranks = nranks;
	v->dev = -1;
	memcpy(v->key, key, 16);
	if (v->nranks < 0 && real_ncclCommCount)
		real_ncclCommCount(real, &v->nranks);
	if (v->rank < 0 && real_ncclCommUserRank)
		real_ncclCommUserRank(real, &v->rank);
	if (real_ncclCommCuDevice && real_ncclCommCuDevice(real, &v->dev) != ncclSuccess)
		v->dev = -1;
	/* Not answered yet (non-blocking): the calling thread's device is
	 * the one NCCL took. */
	int (*ctxdev)(int *) = (int (*)(int *))cu_sym("cuCtxGetDevice");
	if (v->dev < 0 && ctxdev && ctxdev(&v->dev) != 0)
		v->dev = -1;
	v->config = config_copy(config);
	pthread_mutex_lock(&table_mu);
	if (ntable == SHIM_MAX_COMMS) {
		pthread_mutex_unlock(&table_mu);
		free(v->config);
		free(v);
		lost_comm = true;
		return;
	}
	table[ntable++] = v;   /* creation order: the rebuild's and the children's */
	pthread_mutex_unlock(&table_mu);
	*out = (ncclComm_t)v;
}

/* The job ended it: out of the table, the rest kept in creation order.
 * Never between PAUSE and REBUILD (the gate holds the job's calls), so
 * the order crest saw stays. */
static void forget(struct vcomm *v)
{
	pthread_mutex_lock(&table_mu);
	int i = 0;
	while (i < ntable && table[i] != v)
		i++;
	if (i < ntable) {
		memmove(&table[i], &table[i + 1], (size_t)(ntable - i - 1) * sizeof(table[0]));
		table[--ntable] = NULL;
	}
	pthread_mutex_unlock(&table_mu);
	for (int k = 0; k < MAX_REGS; k++)
		free(v->regs[k]);
	free(v->config);
	v->magic = 0;
	free(v);
}

EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, void *config)
{
	REAL(ncclCommInitRankConfig, ncclResult_t (*)(ncclComm_t *, int, ncclUniqueId, int, void *));
	if (!real_ncclCommInitRankConfig)
		return ncclSystemError;
	gate_enter(NULL, false);
	ncclComm_t r = NULL;
	const ncclResult_t rc = real_ncclCommInitRankConfig(&r, nranks, id, rank, config);
	gate_leave();
	uint8_t key[16];
	key_of(key, id.internal, sizeof(id.internal), 0);
	if (rc == ncclSuccess || rc == ncclInProgress)
		adopt(comm, r, VK_INIT, NULL, key, config, rank, nranks);
	else
		*comm = r;
	return rc;
}

EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
	REAL(ncclCommInitRank, ncclResult_t (*)(ncclComm_t *, int, ncclUniqueId, int));
	if (!real_ncclCommInitRank)
		return ncclSystemError;
	gate_enter(NULL, false);
	ncclComm_t r = NULL;
	const ncclResult_t rc = real_ncclCommInitRank(&r, nranks, id, rank);
	gate_leave();
	uint8_t key[16];
	key_of(key, id.internal, sizeof(id.internal), 0);
	if (rc == ncclSuccess || rc == ncclInProgress)
		adopt(comm, r, VK_INIT, NULL, key, NULL, rank, nranks);
	else
		*comm = r;
	return rc;
}

EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t *comm, int nranks, int rank, int nid, ncclUniqueId *ids,
					     void *config)
{
	REAL(ncclCommInitRankScalable, ncclResult_t (*)(ncclComm_t *, int, int, int, ncclUniqueId *, void *));
	if (!real_ncclCommInitRankScalable)
		return ncclSystemError;
	gate_enter(NULL, false);
	ncclComm_t r = NULL;
	const ncclResult_t rc = real_ncclCommInitRankScalable(&r, nranks, rank, nid, ids, config);
	gate_leave();
	uint8_t key[16];
	key_of(key, nid > 0 ? ids[0].internal : "", nid > 0 ? sizeof(ids[0].internal) : 0, 1);
	/* Made again from one new id with ncclCommInitRankConfig: the same
	 * communicator to the job. */
	if (rc == ncclSuccess || rc == ncclInProgress)
		adopt(comm, r, VK_INIT, NULL, key, config, rank, nranks);
	else
		*comm = r;
	return rc;
}

EXPORT ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist)
{
	REAL(ncclCommInitAll, ncclResult_t (*)(ncclComm_t *, int, const int *));
	if (!real_ncclCommInitAll)
		return ncclSystemError;
	gate_enter(NULL, false);
	const ncclResult_t rc = real_ncclCommInitAll(comms, ndev, devlist);
	gate_leave();
	for (int i = 0; rc == ncclSuccess && i < ndev; i++) {
		uint8_t key[16];
		const uint64_t salt[2] = { (uint64_t)getpid(), (uint64_t)i };
		key_of(key, salt, sizeof(salt), 2);
		adopt(&comms[i], comms[i], VK_FIXED, "ncclCommInitAll", key, NULL, i, ndev);
	}
	return rc;
}

EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int k, ncclComm_t *newcomm, void *config)
{
	REAL(ncclCommSplit, ncclResult_t (*)(ncclComm_t, int, int, ncclComm_t *, void *));
	if (!real_ncclCommSplit)
		return ncclSystemError;
	struct vcomm *v;
	ncclResult_t rc = enq_enter(comm, &v, NULL);
	if (rc != ncclSuccess)
		return rc;
	ncclComm_t r = NULL;
	rc = real_ncclCommSplit(real_of(comm), color, k, &r, config);
	const uint64_t nth = v ? v->splits++ : 0;
	enq_leave(v);
	/* The child's key: its parent's, which split, and the color; the same
	 * in each of its ranks. */
	uint8_t key[16];
	struct {
		uint8_t parent[16];
		uint64_t nth;
		int64_t color;
	} s = { { 0 }, nth, color };
	if (v)
		memcpy(s.parent, v->key, 16);
	key_of(key, &s, sizeof(s), 3);
	if ((rc == ncclSuccess || rc == ncclInProgress) && r)
		adopt(newcomm, r, VK_INIT, NULL, key, config ? config : v ? v->config : NULL, -1, -1);
	else
		*newcomm = r;
	return rc;
}

EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int *excl, int nexcl, ncclComm_t *newcomm, void *config,
				   int flags)
{
	REAL(ncclCommShrink, ncclResult_t (*)(ncclComm_t, int *, int, ncclComm_t *, void *, int));
	if (!real_ncclCommShrink)
		return ncclSystemError;
	struct vcomm *v;
	ncclResult_t rc = enq_enter(comm, &v, NULL);
	if (rc != ncclSuccess)
		return rc;
	ncclComm_t r = NULL;
	rc = real_ncclCommShrink(real_of(comm), excl, nexcl, &r, config, flags);
	enq_leave(v);
	uint8_t key[16];
	const uint64_t salt[2] = { (uint64_t)getpid(), (uint64_t)(uintptr_t)r };
	key_of(key, salt, sizeof(salt), 4);
	if ((rc == ncclSuccess || rc == ncclInProgress) && r)
		adopt(newcomm, r, VK_FIXED, "ncclCommShrink", key, NULL, -1, -1);
	else
		*newcomm = r;
	return rc;
}

/* Ending one: through the gate (not while crest holds it), then gone. */
static ncclResult_t end_comm(ncclComm_t comm, const char *name)
{
	struct vcomm *v = as_v(comm);
	ncclResult_t (*f)(ncclComm_t) = (ncclResult_t (*)(ncclComm_t))next(name);
	if (!f)
		return ncclSystemError;
	if (!v)
		return f(comm);
	gate_enter(NULL, false);
	const ncclResult_t rc = v->real ? f(v->real) : ncclSuccess;
	forget(v);
	gate_leave();
	return rc;
}

EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
	return end_comm(comm, "ncclCommDestroy");
}

EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm)
{
	return end_comm(comm, "ncclCommAbort");
}

EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
	REAL(ncclCommFinalize, ncclResult_t (*)(ncclComm_t));
	if (!real_ncclCommFinalize)
		return ncclSystemError;
	struct vcomm *v = as_v(comm);
	if (!v)
		return real_ncclCommFinalize(comm);
	gate_enter(NULL, false);
	const ncclResult_t rc = v->real ? real_ncclCommFinalize(v->real) : ncclSuccess;
	gate_leave();
	return rc;
}

EXPORT ncclResult_t ncclCommRevoke(ncclComm_t comm, int flags)
{
	REAL(ncclCommRevoke, ncclResult_t (*)(ncclComm_t, int));
	if (!real_ncclCommRevoke)
		return ncclSystemError;
	struct vcomm *v = as_v(comm);
	if (v && !v->real)
		return ncclSuccess;
	return real_ncclCommRevoke(real_of(comm), flags);
}

/* ---- questions: answered without NCCL while released ---- */

EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *err)
{
	REAL(ncclCommGetAsyncError, ncclResult_t (*)(ncclComm_t, ncclResult_t *));
	struct vcomm *v = as_v(comm);
	if (v && !v->real) {
		*err = atomic_load(&broken) ? ncclSystemError : ncclSuccess;
		return ncclSuccess;
	}
	return real_ncclCommGetAsyncError ? real_ncclCommGetAsyncError(real_of(comm), err) : ncclSystemError;
}

EXPORT const char *ncclGetLastError(ncclComm_t comm)
{
	REAL(ncclGetLastError, const char *(*)(ncclComm_t));
	struct vcomm *v = as_v(comm);
	if (v && !v->real)
		return atomic_load(&broken) ? "crest's NCCL shim could not make the communicator again after a restore"
					    : "";
	return real_ncclGetLastError ? real_ncclGetLastError(real_of(comm)) : "";
}

EXPORT ncclResult_t ncclCommCount(ncclComm_t comm, int *count)
{
	REAL(ncclCommCount, ncclResult_t (*)(ncclComm_t, int *));
	struct vcomm *v = as_v(comm);
	if (v) {
		*count = v->nranks;
		return ncclSuccess;
	}
	return real_ncclCommCount ? real_ncclCommCount(comm, count) : ncclSystemError;
}

EXPORT ncclResult_t ncclCommCuDevice(ncclComm_t comm, int *dev)
{
	REAL(ncclCommCuDevice, ncclResult_t (*)(ncclComm_t, int *));
	struct vcomm *v = as_v(comm);
	if (v) {
		*dev = v->dev;
		return ncclSuccess;
	}
	return real_ncclCommCuDevice ? real_ncclCommCuDevice(comm, dev) : ncclSystemError;
}

EXPORT ncclResult_t ncclCommUserRank(ncclComm_t comm, int *rank)
{
	REAL(ncclCommUserRank, ncclResult_t (*)(ncclComm_t, int *));
	struct vcomm *v = as_v(comm);
	if (v) {
		*rank = v->rank;
		return ncclSuccess;
	}
	return real_ncclCommUserRank ? real_ncclCommUserRank(comm, rank) : ncclSystemError;
}

/* ---- reduction ops and registrations: kept, to be made again ---- */

EXPORT ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t type,
					     ncclScalarResidence_t res, ncclComm_t comm)
{
	REAL(ncclRedOpCreatePreMulSum,
	     ncclResult_t (*)(ncclRedOp_t *, void *, ncclDataType_t, ncclScalarResidence_t, ncclComm_t));
	if (!real_ncclRedOpCreatePreMulSum)
		return ncclSystemError;
	struct vcomm *v = as_v(comm);
	if (!v)
		return real_ncclRedOpCreatePreMulSum(op, scalar, type, res, comm);
	gate_enter(NULL, false);
	ncclResult_t rc = v->real ? real_ncclRedOpCreatePreMulSum(op, scalar, type, res, v->real) : ncclInvalidUsage;
	if (rc == ncclSuccess) {
		int k = 0;
		while (k < MAX_OPS && v->ops[k].live)
			k++;
		if (k < MAX_OPS) {
			struct redop *o = &v->ops[k];
			memset(o, 0, sizeof(*o));
			o->vop = o->rop = *op;
			o->type = type;
			o->res = res;
			o->scalar = scalar;
			/* A host scalar is read now; at most 8 bytes (float64). */
			if (res == ncclScalarHostImmediate)
				memcpy(&o->value, scalar, type == 4 || type == 5 || type == 8 ? 8
							 : type == 6 || type == 9 || type == 10 ? 2
							 : type <= 1 ? 1 : 4);
			o->live = true;
		} else {
			v->kind = VK_FIXED;
			v->fixed_why = "more than 16 live ncclRedOpCreatePreMulSum ops";
		}
	}
	gate_leave();
	return rc;
}

EXPORT ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm)
{
	REAL(ncclRedOpDestroy, ncclResult_t (*)(ncclRedOp_t, ncclComm_t));
	if (!real_ncclRedOpDestroy)
		return ncclSystemError;
	struct vcomm *v = as_v(comm);
	if (!v)
		return real_ncclRedOpDestroy(op, comm);
	gate_enter(NULL, false);
	ncclResult_t rc = v->real ? real_ncclRedOpDestroy(map_op(v, op), v->real) : ncclSuccess;
	for (int k = 0; k < MAX_OPS; k++)
		if (v->ops[k].live && v->ops[k].vop == op)
			v->ops[k].live = false;
	gate_leave();
	return rc;
}

static ncclResult_t reg_add(struct vcomm *v, bool window, void *buf, size_t size, int flags, void **handle)
{
	REAL(ncclCommRegister, ncclResult_t (*)(ncclComm_t, void *, size_t, void **));
	REAL(ncclCommWindowRegister, ncclResult_t (*)(ncclComm_t, void *, size_t, ncclWindow_t *, int));
	struct reg *g = calloc(1, sizeof(*g));
	if (!g)
		return ncclSystemError;
	g->window = window;
	g->buf = buf;
	g->size = size;
	g->flags = flags;
	gate_enter(NULL, false);
	ncclResult_t rc = ncclInvalidUsage;
	if (v->real && window && real_ncclCommWindowRegister)
		rc = real_ncclCommWindowRegister(v->real, buf, size, (ncclWindow_t *)&g->real, flags);
	else if (v->real && !window && real_ncclCommRegister)
		rc = real_ncclCommRegister(v->real, buf, size, &g->real);
	int k = 0;
	while (rc == ncclSuccess && k < MAX_REGS && v->regs[k])
		k++;
	if (rc == ncclSuccess && k < MAX_REGS)
		v->regs[k] = g;
	else if (rc == ncclSuccess) {
		v->kind = VK_FIXED;
		v->fixed_why = "more than 64 buffer registrations";
		*handle = g->real;   /* NCCL's own: never made again */
		free(g);
		g = NULL;
	}
	gate_leave();
	if (rc != ncclSuccess) {
		free(g);
		return rc;
	}
	if (g)
		*handle = g;
	return rc;
}

static ncclResult_t reg_del(struct vcomm *v, void *handle, bool window)
{
	REAL(ncclCommDeregister, ncclResult_t (*)(ncclComm_t, void *));
	REAL(ncclCommWindowDeregister, ncclResult_t (*)(ncclComm_t, ncclWindow_t));
	gate_enter(NULL, false);
	int k = 0;
	while (k < MAX_REGS && v->regs[k] != handle)
		k++;
	void *h = k < MAX_REGS ? v->regs[k]->real : handle;
	ncclResult_t rc = ncclSuccess;
	if (v->real && h) {
		if (window)
			rc = real_ncclCommWindowDeregister ? real_ncclCommWindowDeregister(v->real, (ncclWindow_t)h)
							   : ncclSystemError;
		else
			rc = real_ncclCommDeregister ? real_ncclCommDeregister(v->real, h) : ncclSystemError;
	}
	if (k < MAX_REGS) {
		free(v->regs[k]);
		v->regs[k] = NULL;
	}
	gate_leave();
	return rc;
}

EXPORT ncclResult_t ncclCommRegister(ncclComm_t comm, void *buf, size_t size, void **handle)
{
	REAL(ncclCommRegister, ncclResult_t (*)(ncclComm_t, void *, size_t, void **));
	struct vcomm *v = as_v(comm);
	if (!v)
		return real_ncclCommRegister ? real_ncclCommRegister(comm, buf, size, handle) : ncclSystemError;
	return reg_add(v, false, buf, size, 0, handle);
}

EXPORT ncclResult_t ncclCommDeregister(ncclComm_t comm, void *handle)
{
	REAL(ncclCommDeregister, ncclResult_t (*)(ncclComm_t, void *));
	struct vcomm *v = as_v(comm);
	if (!v)
		return real_ncclCommDeregister ? real_ncclCommDeregister(comm, handle) : ncclSystemError;
	return reg_del(v, handle, false);
}

EXPORT ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buf, size_t size, ncclWindow_t *win, int flags)
{
	REAL(ncclCommWindowRegister, ncclResult_t (*)(ncclComm_t, void *, size_t, ncclWindow_t *, int));
	struct vcomm *v = as_v(comm);
	if (!v)
		return real_ncclCommWindowRegister ? real_ncclCommWindowRegister(comm, buf, size, win, flags)
						   : ncclSystemError;
	return reg_add(v, true, buf, size, flags, (void **)win);
}

EXPORT ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win)
{
	REAL(ncclCommWindowDeregister, ncclResult_t (*)(ncclComm_t, ncclWindow_t));
	struct vcomm *v = as_v(comm);
	if (!v)
		return real_ncclCommWindowDeregister ? real_ncclCommWindowDeregister(comm, win) : ncclSystemError;
	return reg_del(v, win, true);
}

/* The device API: passed on, and the communicator marked as one the shim
 * cannot make again (its device-side state is the job's). */
EXPORT ncclResult_t ncclDevCommCreate(ncclComm_t comm, const ncclDevCommRequirements_t *req, ncclDevComm_t *out)
{
	REAL(ncclDevCommCreate, ncclResult_t (*)(ncclComm_t, const ncclDevCommRequirements_t *, ncclDevComm_t *));
	struct vcomm *v = as_v(comm);
	if (v)
		v->devapi = true;
	return real_ncclDevCommCreate ? real_ncclDevCommCreate(real_of(comm), req, out) : ncclSystemError;
}

EXPORT ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const ncclDevComm_t *dc)
{
	REAL(ncclDevCommDestroy, ncclResult_t (*)(ncclComm_t, const ncclDevComm_t *));
	return real_ncclDevCommDestroy ? real_ncclDevCommDestroy(real_of(comm), dc) : ncclSystemError;
}

/* ---- groups ---- */

EXPORT ncclResult_t ncclGroupStart(void)
{
	REAL(ncclGroupStart, ncclResult_t (*)(void));
	if (!real_ncclGroupStart)
		return ncclSystemError;
	if (group_depth++ == 0)
		gate_enter(NULL, true);
	return real_ncclGroupStart();
}

static ncclResult_t group_done(ncclResult_t rc)
{
	if (group_depth > 0 && --group_depth == 0)
		gate_leave();
	return rc;
}

EXPORT ncclResult_t ncclGroupEnd(void)
{
	REAL(ncclGroupEnd, ncclResult_t (*)(void));
	return group_done(real_ncclGroupEnd ? real_ncclGroupEnd() : ncclSystemError);
}

EXPORT ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *info)
{
	REAL(ncclGroupSimulateEnd, ncclResult_t (*)(ncclSimInfo_t *));
	return group_done(real_ncclGroupSimulateEnd ? real_ncclGroupSimulateEnd(info) : ncclSystemError);
}

/* ---- the calls that enqueue work ---- */

#define ENQ(call, comm, stream)                          \
	do {                                             \
		struct vcomm *v_;                        \
		ncclResult_t rc_ = enq_enter(comm, &v_, stream); \
		if (rc_ != ncclSuccess)                  \
			return rc_;                      \
		ncclComm_t rcomm_ = v_ ? v_->real : comm; \
		rc_ = call;                              \
		enq_leave(v_);                           \
		return rc_;                              \
	} while (0)

EXPORT ncclResult_t ncclReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, int root,
			       ncclComm_t comm, cudaStream_t st)
{
	REAL(ncclReduce, ncclResult_t (*)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t,
					  cudaStream_t));
	if (!real_ncclReduce)
		return ncclSystemError;
	ENQ(real_ncclReduce(s, r, n, t, map_op(v_, op), root, rcomm_, st), comm, st);
}

EXPORT ncclResult_t ncclBcast(void *b, size_t n, ncclDataType_t t, int root, ncclComm_t comm, cudaStream_t st)
{
	REAL(ncclBcast, ncclResult_t (*)(void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t));
	if (!real_ncclBcast)
		return ncclSystemError;
	ENQ(real_ncclBcast(b, n, t, root, rcomm_, st), comm, st);
}

EXPORT ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, ncclDataType_t t, int root, ncclComm_t comm,
				  cudaStream_t st)
{
	REAL(ncclBroadcast, ncclResult_t (*)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t,
					     cudaStream_t));
	if (!real_ncclBroadcast)
		return ncclSystemError;
	ENQ(real_ncclBroadcast(s, r, n, t, root, rcomm_, st), comm, st);
}

EXPORT ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op,
				  ncclComm_t comm, cudaStream_t st)
{
	REAL(ncclAllReduce, ncclResult_t (*)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
					     cudaStream_t));
	if (!real_ncclAllReduce)
		return ncclSystemError;
	ENQ(real_ncclAllReduce(s, r, n, t, map_op(v_, op), rcomm_, st), comm, st);
}

EXPORT ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op,
				      ncclComm_t comm, cudaStream_t st)
{
	REAL(ncclReduceScatter, ncclResult_t (*)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
						 ncclComm_t, cudaStream_t));
	if (!real_ncclReduceScatter)
		return ncclSystemError;
	ENQ(real_ncclReduceScatter(s, r, n, t, map_op(v_, op), rcomm_, st), comm, st);
}

EXPORT ncclResult_t ncclAllGather(const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t comm,
				  cudaStream_t st)
{
	REAL(ncclAllGather, ncclResult_t (*)(const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t));
	if (!real_ncclAllGather)
		return ncclSystemError;
	ENQ(real_ncclAllGather(s, r, n, t, rcomm_, st), comm, st);
}

EXPORT ncclResult_t ncclAlltoAll(const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t comm,
				 cudaStream_t st)
{
	REAL(ncclAlltoAll, ncclResult_t (*)(const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t));
	if (!real_ncclAlltoAll)
		return ncclSystemError;
	ENQ(real_ncclAlltoAll(s, r, n, t, rcomm_, st), comm, st);
}

EXPORT ncclResult_t ncclGather(const void *s, void *r, size_t n, ncclDataType_t t, int root, ncclComm_t comm,
			       cudaStream_t st)
{
	REAL(ncclGather, ncclResult_t (*)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t,
					  cudaStream_t));
	if (!real_ncclGather)
		return ncclSystemError;
	ENQ(real_ncclGather(s, r, n, t, root, rcomm_, st), comm, st);
}

EXPORT ncclResult_t ncclScatter(const void *s, void *r, size_t n, ncclDataType_t t, int root, ncclComm_t comm,
				cudaStream_t st)
{
	REAL(ncclScatter, ncclResult_t (*)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t,
					   cudaStream_t));
	if (!real_ncclScatter)
		return ncclSystemError;
	ENQ(real_ncclScatter(s, r, n, t, root, rcomm_, st), comm, st);
}

EXPORT ncclResult_t ncclSend(const void *s, size_t n, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t st)
{
	REAL(ncclSend, ncclResult_t (*)(const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t));
	if (!real_ncclSend)
		return ncclSystemError;
	ENQ(real_ncclSend(s, n, t, peer, rcomm_, st), comm, st);
}

EXPORT ncclResult_t ncclRecv(void *r, size_t n, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t st)
{
	REAL(ncclRecv, ncclResult_t (*)(void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t));
	if (!real_ncclRecv)
		return ncclSystemError;
	ENQ(real_ncclRecv(r, n, t, peer, rcomm_, st), comm, st);
}
