/*
 * fake_nccl.c - NCCL 2.28 on the CPU, libnccl.so.2 for the NCCL shim's
 * tests (fake_nccl.h says what it does and what not).
 *
 * The segment: a header (who joined) and FAKE_NSLOT slots. Call number seq
 * of a communicator goes to slot seq % FAKE_NSLOT in generation
 * seq / FAKE_NSLOT. A slot holds one generation at a time (slot.gen): a
 * rank writes its part of call seq once slot.gen is seq's generation, and
 * counts itself in (arrived); each rank reads the slot when all arrived
 * (its stream's sync), counts itself out (consumed), and the last one
 * empties the slot and moves it on to the next generation. A rank that is
 * FAKE_NSLOT calls ahead of the slowest reader waits in its call.
 *
 * In a process, one lock (g_lock) guards every communicator and stream;
 * nothing waits while holding it (waits poll every 100 us without it), so
 * the shim's thread may abort a communicator while the program's thread
 * is in fake_stream_sync or a call.
 */
#include "fake_nccl.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SEG_MAGIC 0x4e43434cu   /* "NCCL" */
#define ID_PREFIX "/fakenccl-"

enum { KIND_ALLREDUCE = 1, KIND_BROADCAST = 2 };

/* What each rank said of a call, for the readers to check they agree. */
struct seg_desc {
	uint64_t seq;
	uint64_t count;
	int32_t kind, datatype, redop, root;
};

struct seg_slot {
	_Atomic uint64_t gen;
	_Atomic uint32_t arrived;
	_Atomic uint32_t consumed;
	struct seg_desc desc[FAKE_MAX_RANKS];
	_Alignas(16) unsigned char data[FAKE_MAX_RANKS][FAKE_MAX_BYTES];
};

struct seg {
	_Atomic uint32_t magic;      /* set by the first to join */
	_Atomic int32_t nranks;
	_Atomic uint32_t joined;
	_Atomic uint64_t rankmask;
	struct seg_slot slot[FAKE_NSLOT];
};

struct ncclComm {
	struct seg *seg;
	int rank, nranks;
	uint64_t seq;                /* calls enqueued so far */
	bool dead;                   /* aborted or destroyed: calls inside leave */
	int inside;                  /* calls waiting for a slot, without g_lock */
	char name[NCCL_UNIQUE_ID_BYTES];
	char lasterr[256];
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
/* The streams an operation was ever enqueued on (the program's objects):
 * what an abort looks through for the communicator's pending operations. */
#define MAX_STREAMS 64
static cudaStream_t g_streams[MAX_STREAMS];
static int g_nstreams;
static char g_lasterr[256];
static _Atomic uint32_t g_idcount;

static void pause_us(long us)
{
	struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

__attribute__((format(printf, 2, 3)))
static ncclResult_t seterr(ncclResult_t rc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(g_lasterr, sizeof g_lasterr, fmt, ap);
	va_end(ap);
	return rc;
}

static size_t type_size(int t)
{
	switch (t) {
	case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
	case ncclFloat16: case ncclBfloat16: return 2;
	case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
	case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
	default: return 0;
	}
}

static bool reducible(int t, int op)
{
	if (op < ncclSum || op > ncclMin)
		return false;
	switch (t) {
	case ncclInt8: case ncclUint8: case ncclInt32: case ncclUint32:
	case ncclInt64: case ncclUint64: case ncclFloat32: case ncclFloat64:
		return true;
	default:
		return false;
	}
}

/* acc = acc OP x, elementwise, in rank order (so floats are the same each
 * run). Integer sums and products wrap, as on a GPU. */
#define RED_INT(T, U)                                                                  \
	do {                                                                           \
		T *a = acc;                                                            \
		const T *b = x;                                                        \
		for (size_t i = 0; i < n; i++) {                                       \
			switch (op) {                                                  \
			case ncclSum: a[i] = (T)((U)a[i] + (U)b[i]); break;            \
			case ncclProd: a[i] = (T)((U)a[i] * (U)b[i]); break;           \
			case ncclMax: a[i] = a[i] > b[i] ? a[i] : b[i]; break;         \
			default: a[i] = a[i] < b[i] ? a[i] : b[i]; break;              \
			}                                                              \
		}                                                                      \
	} while (0)
#define RED_FLT(T)                                                                     \
	do {                                                                           \
		T *a = acc;                                                            \
		const T *b = x;                                                        \
		for (size_t i = 0; i < n; i++) {                                       \
			switch (op) {                                                  \
			case ncclSum: a[i] = a[i] + b[i]; break;                       \
			case ncclProd: a[i] = a[i] * b[i]; break;                      \
			case ncclMax: a[i] = a[i] > b[i] ? a[i] : b[i]; break;         \
			default: a[i] = a[i] < b[i] ? a[i] : b[i]; break;              \
			}                                                              \
		}                                                                      \
	} while (0)

static void reduce_into(void *acc, const void *x, size_t n, int t, int op)
{
	switch (t) {
	case ncclInt8: RED_INT(int8_t, uint8_t); break;
	case ncclUint8: RED_INT(uint8_t, uint32_t); break;
	case ncclInt32: RED_INT(int32_t, uint32_t); break;
	case ncclUint32: RED_INT(uint32_t, uint32_t); break;
	case ncclInt64: RED_INT(int64_t, uint64_t); break;
	case ncclUint64: RED_INT(uint64_t, uint64_t); break;
	case ncclFloat32: RED_FLT(float); break;
	case ncclFloat64: RED_FLT(double); break;
	default: break;
	}
}

/* With g_lock: completes op if every rank has contributed to its slot.
 * 1 done (or failed: op->done says which), 0 not yet. */
static int try_complete(struct fake_stream_op *op)
{
	struct ncclComm *c = op->comm;
	if (op->done)
		return 1;
	struct seg_slot *sl = &c->seg->slot[op->seq % FAKE_NSLOT];
	uint64_t gen = op->seq / FAKE_NSLOT;
	if (atomic_load_explicit(&sl->gen, memory_order_acquire) != gen ||
	    atomic_load_explicit(&sl->arrived, memory_order_acquire) != (uint32_t)c->nranks)
		return 0;
	size_t bytes = op->count * type_size(op->datatype);
	bool agree = true;
	for (int r = 0; r < c->nranks; r++) {
		const struct seg_desc *d = &sl->desc[r];
		if (d->seq != op->seq || d->count != op->count || d->kind != op->kind ||
		    d->datatype != op->datatype || d->redop != op->redop || d->root != op->root)
			agree = false;
	}
	if (!agree) {
		snprintf(c->lasterr, sizeof c->lasterr,
			 "call %llu: the ranks did not make the same call (kind, count, type, op or root differ)",
			 (unsigned long long)op->seq);
		fprintf(stderr, "fake nccl: rank %d: %s\n", c->rank, c->lasterr);
		op->done = -1;
	} else if (op->kind == KIND_BROADCAST) {
		memmove(op->recvbuff, sl->data[op->root], bytes);
		op->done = 1;
	} else {
		_Alignas(16) unsigned char acc[FAKE_MAX_BYTES];
		memcpy(acc, sl->data[0], bytes);
		for (int r = 1; r < c->nranks; r++)
			reduce_into(acc, sl->data[r], op->count, op->datatype, op->redop);
		memcpy(op->recvbuff, acc, bytes);
		op->done = 1;
	}
	/* The last reader frees the slot for the next generation. */
	if (atomic_fetch_add_explicit(&sl->consumed, 1, memory_order_acq_rel) + 1 == (uint32_t)c->nranks) {
		atomic_store_explicit(&sl->arrived, 0, memory_order_relaxed);
		atomic_store_explicit(&sl->consumed, 0, memory_order_relaxed);
		atomic_store_explicit(&sl->gen, gen + 1, memory_order_release);
	}
	return 1;
}

/* With g_lock: the stream's operations, all tried once. 1 when every one
 * is done or failed (then the stream is emptied), 0 when one still waits. */
static int stream_step(cudaStream_t s)
{
	int all = 1;
	for (uint32_t i = 0; i < s->nops; i++) {
		if (!try_complete(&s->ops[i])) {
			all = 0;
			break;   /* in order, as a stream runs */
		}
	}
	if (all) {
		for (uint32_t i = 0; i < s->nops; i++)
			if (s->ops[i].done < 0)
				s->failed++;
		s->nops = 0;
	}
	return all;
}

int fake_stream_sync(cudaStream_t s)
{
	if (!s)
		return -1;
	long waited_us = 0;
	pthread_mutex_lock(&g_lock);
	while (!stream_step(s)) {
		pthread_mutex_unlock(&g_lock);
		pause_us(100);
		waited_us += 100;
		if (waited_us == 120L * 1000000)
			fprintf(stderr, "fake nccl: pid %d: a stream has waited 120 s for a rank's contribution\n",
				(int)getpid());
		pthread_mutex_lock(&g_lock);
	}
	int failed = s->failed != 0;
	s->failed = 0;
	pthread_mutex_unlock(&g_lock);
	return failed ? -1 : 0;
}

ncclResult_t ncclGetVersion(int *version)
{
	if (!version)
		return seterr(ncclInvalidArgument, "ncclGetVersion: version is NULL");
	*version = FAKE_NCCL_VERSION;
	return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
	if (!id)
		return seterr(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
	uint64_t rnd = 0;
	if (getrandom(&rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
		rnd = (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)clock();
	memset(id, 0, sizeof *id);
	snprintf(id->internal, sizeof id->internal, ID_PREFIX "%d-%u-%016llx", (int)getpid(),
		 atomic_fetch_add(&g_idcount, 1), (unsigned long long)rnd);
	return ncclSuccess;
}

static ncclResult_t init_rank(ncclComm_t *out, int nranks, ncclUniqueId id, int rank)
{
	if (!out)
		return seterr(ncclInvalidArgument, "ncclCommInitRank: comm is NULL");
	*out = NULL;
	if (nranks < 1 || nranks > FAKE_MAX_RANKS || rank < 0 || rank >= nranks)
		return seterr(ncclInvalidArgument, "ncclCommInitRank: rank %d of %d (at most %d ranks)", rank,
			      nranks, FAKE_MAX_RANKS);
	if (strncmp(id.internal, ID_PREFIX, strlen(ID_PREFIX)) != 0 ||
	    !memchr(id.internal, 0, sizeof id.internal))
		return seterr(ncclInvalidArgument, "ncclCommInitRank: not a unique id of this library");
	struct ncclComm *c = calloc(1, sizeof *c);
	if (!c)
		return seterr(ncclSystemError, "ncclCommInitRank: out of memory");
	memcpy(c->name, id.internal, sizeof c->name);
	c->rank = rank;
	c->nranks = nranks;
	int fd = shm_open(c->name, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0) {
		free(c);
		return seterr(ncclSystemError, "ncclCommInitRank: shm_open %s: %s", id.internal, strerror(errno));
	}
	if (ftruncate(fd, sizeof(struct seg)) < 0) {
		int e = errno;
		close(fd);
		free(c);
		return seterr(ncclSystemError, "ncclCommInitRank: ftruncate %s: %s", id.internal, strerror(e));
	}
	void *p = mmap(NULL, sizeof(struct seg), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	int e = errno;
	close(fd);
	if (p == MAP_FAILED) {
		free(c);
		return seterr(ncclSystemError, "ncclCommInitRank: mmap %s: %s", id.internal, strerror(e));
	}
	c->seg = p;
	struct seg *s = c->seg;
	int32_t zero = 0;
	uint32_t none = 0;
	atomic_compare_exchange_strong(&s->nranks, &zero, nranks);
	atomic_compare_exchange_strong(&s->magic, &none, SEG_MAGIC);
	const char *why = NULL;
	if (atomic_load(&s->nranks) != nranks)
		why = "ranks disagree on the number of ranks";
	else if (atomic_load(&s->magic) != SEG_MAGIC)
		why = "not a segment of this library";
	else if (atomic_fetch_or(&s->rankmask, 1ull << rank) & (1ull << rank))
		why = "two ranks of the same number";
	if (why) {
		munmap(p, sizeof(struct seg));
		free(c);
		return seterr(ncclInvalidUsage, "ncclCommInitRank %s rank %d: %s", id.internal, rank, why);
	}
	/* The join barrier: all ranks, then rank 0 removes the name. */
	atomic_fetch_add(&s->joined, 1);
	while (atomic_load(&s->joined) < (uint32_t)nranks)
		pause_us(100);
	if (rank == 0)
		shm_unlink(c->name);
	*out = c;
	return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
	return init_rank(comm, nranks, commId, rank);
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
				    ncclConfig_t *config)
{
	(void)config;
	return init_rank(comm, nranks, commId, rank);
}

/* Ends a communicator: its pending operations completed or failed, its
 * segment unmapped once no call is inside, the object freed. */
static ncclResult_t end_comm(ncclComm_t c, const char *fn)
{
	if (!c)
		return seterr(ncclInvalidArgument, "%s: comm is NULL", fn);
	pthread_mutex_lock(&g_lock);
	if (c->dead) {
		pthread_mutex_unlock(&g_lock);
		return seterr(ncclInvalidUsage, "%s: communicator already ended", fn);
	}
	c->dead = true;
	for (int i = 0; i < g_nstreams; i++) {
		cudaStream_t s = g_streams[i];
		for (uint32_t k = 0; k < s->nops; k++) {
			struct fake_stream_op *op = &s->ops[k];
			if (op->comm == c && !try_complete(op))
				op->done = -1;
		}
	}
	while (c->inside > 0) {
		pthread_mutex_unlock(&g_lock);
		pause_us(100);
		pthread_mutex_lock(&g_lock);
	}
	pthread_mutex_unlock(&g_lock);
	munmap(c->seg, sizeof(struct seg));
	free(c);
	return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
	if (!comm)
		return ncclSuccess;   /* as NCCL: aborting NULL is fine */
	return end_comm(comm, "ncclCommAbort");
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
	if (!comm)
		return ncclSuccess;
	return end_comm(comm, "ncclCommDestroy");
}

ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
	if (!comm)
		return seterr(ncclInvalidArgument, "ncclCommFinalize: comm is NULL");
	return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
	if (!comm || !asyncError)
		return seterr(ncclInvalidArgument, "ncclCommGetAsyncError: NULL argument");
	*asyncError = ncclSuccess;
	return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
	if (!comm || !count)
		return seterr(ncclInvalidArgument, "ncclCommCount: NULL argument");
	*count = comm->nranks;
	return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
	if (!comm || !rank)
		return seterr(ncclInvalidArgument, "ncclCommUserRank: NULL argument");
	*rank = comm->rank;
	return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device)
{
	if (!comm || !device)
		return seterr(ncclInvalidArgument, "ncclCommCuDevice: NULL argument");
	*device = 0;
	return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t result)
{
	switch (result) {
	case ncclSuccess: return "no error";
	case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
	case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
	case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
	case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
	case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
	case ncclRemoteError: return "remote process exited or there was a network error";
	case ncclInProgress: return "NCCL operation in progress";
	default: return "unknown result code";
	}
}

const char *ncclGetLastError(ncclComm_t comm)
{
	if (comm && comm->lasterr[0])
		return comm->lasterr;
	return g_lasterr;
}

ncclResult_t ncclGroupStart(void)
{
	return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
	return ncclSuccess;
}

/* With g_lock: s among the streams an abort looks through. */
static int track_stream(cudaStream_t s)
{
	for (int i = 0; i < g_nstreams; i++)
		if (g_streams[i] == s)
			return 0;
	if (g_nstreams == MAX_STREAMS)
		return -1;
	g_streams[g_nstreams++] = s;
	return 0;
}

static ncclResult_t enqueue(const char *fn, int kind, const void *sendbuff, void *recvbuff, size_t count,
			    int datatype, int redop, int root, ncclComm_t c, cudaStream_t s)
{
	if (!c || !s || !recvbuff || (!sendbuff && (kind == KIND_ALLREDUCE || root == c->rank)))
		return seterr(ncclInvalidArgument, "%s: NULL argument", fn);
	size_t ts = type_size(datatype);
	if (ts == 0)
		return seterr(ncclInvalidArgument, "%s: unknown data type %d", fn, datatype);
	if (kind == KIND_ALLREDUCE && !reducible(datatype, redop))
		return seterr(ncclInvalidArgument, "%s: reduction %d on type %d is not in the fake", fn, redop,
			      datatype);
	if (kind == KIND_BROADCAST && (root < 0 || root >= c->nranks))
		return seterr(ncclInvalidArgument, "%s: root %d of %d ranks", fn, root, c->nranks);
	if (count > FAKE_MAX_BYTES / ts)
		return seterr(ncclInvalidArgument, "%s: %zu bytes, the fake takes at most %d", fn, count * ts,
			      FAKE_MAX_BYTES);
	pthread_mutex_lock(&g_lock);
	if (c->dead) {
		pthread_mutex_unlock(&g_lock);
		return seterr(ncclInvalidUsage, "%s: the communicator was aborted or destroyed", fn);
	}
	if (s->nops == FAKE_STREAM_OPS || track_stream(s) < 0) {
		pthread_mutex_unlock(&g_lock);
		return seterr(ncclInvalidUsage, "%s: more than %d operations on a stream, or %d streams", fn,
			      FAKE_STREAM_OPS, MAX_STREAMS);
	}
	uint64_t seq = c->seq;
	struct seg_slot *sl = &c->seg->slot[seq % FAKE_NSLOT];
	uint64_t gen = seq / FAKE_NSLOT;
	/* A rank FAKE_NSLOT calls ahead waits for the slot's readers. */
	c->inside++;
	while (atomic_load_explicit(&sl->gen, memory_order_acquire) != gen) {
		pthread_mutex_unlock(&g_lock);
		pause_us(100);
		pthread_mutex_lock(&g_lock);
		if (c->dead) {
			c->inside--;
			pthread_mutex_unlock(&g_lock);
			return seterr(ncclInvalidUsage, "%s: the communicator was aborted during the call", fn);
		}
	}
	c->inside--;
	sl->desc[c->rank] = (struct seg_desc){ .seq = seq, .count = count, .kind = kind,
					       .datatype = datatype, .redop = redop, .root = root };
	if (sendbuff)
		memcpy(sl->data[c->rank], sendbuff, count * ts);
	atomic_fetch_add_explicit(&sl->arrived, 1, memory_order_release);
	c->seq++;
	s->ops[s->nops++] = (struct fake_stream_op){ .comm = c, .seq = seq, .recvbuff = recvbuff,
						     .count = count, .datatype = datatype, .redop = redop,
						     .root = root, .kind = kind };
	pthread_mutex_unlock(&g_lock);
	return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
			   ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
	return enqueue("ncclAllReduce", KIND_ALLREDUCE, sendbuff, recvbuff, count, datatype, op, 0, comm,
		       stream);
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
			   int root, ncclComm_t comm, cudaStream_t stream)
{
	return enqueue("ncclBroadcast", KIND_BROADCAST, sendbuff, recvbuff, count, datatype, ncclSum, root,
		       comm, stream);
}

/* The profiling names the real library exports beside each function. */
#define PNCCL(ret, name, args) ret p##name args __attribute__((alias(#name)))
PNCCL(ncclResult_t, ncclGetVersion, (int *));
PNCCL(ncclResult_t, ncclGetUniqueId, (ncclUniqueId *));
PNCCL(ncclResult_t, ncclCommInitRankConfig, (ncclComm_t *, int, ncclUniqueId, int, ncclConfig_t *));
PNCCL(ncclResult_t, ncclCommInitRank, (ncclComm_t *, int, ncclUniqueId, int));
PNCCL(ncclResult_t, ncclCommFinalize, (ncclComm_t));
PNCCL(ncclResult_t, ncclCommDestroy, (ncclComm_t));
PNCCL(ncclResult_t, ncclCommAbort, (ncclComm_t));
PNCCL(const char *, ncclGetErrorString, (ncclResult_t));
PNCCL(const char *, ncclGetLastError, (ncclComm_t));
PNCCL(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t, ncclResult_t *));
PNCCL(ncclResult_t, ncclCommCount, (const ncclComm_t, int *));
PNCCL(ncclResult_t, ncclCommCuDevice, (const ncclComm_t, int *));
PNCCL(ncclResult_t, ncclCommUserRank, (const ncclComm_t, int *));
PNCCL(ncclResult_t, ncclBroadcast, (const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t));
PNCCL(ncclResult_t, ncclAllReduce,
      (const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t));
PNCCL(ncclResult_t, ncclGroupStart, (void));
PNCCL(ncclResult_t, ncclGroupEnd, (void));
