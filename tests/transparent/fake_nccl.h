/*
 * fake_nccl.h - a stand-in for NCCL 2.28 on the CPU (built as libnccl.so.2,
 * fake_nccl.c), for the tests of the NCCL shim (gpu/shim.h) without a GPU.
 *
 * The types and signatures are NCCL 2.28's own (nccl.h), so a program or a
 * shim built against the real header runs against this library unchanged:
 * ncclComm_t, ncclUniqueId, ncclResult_t, ncclDataType_t, ncclRedOp_t and
 * ncclConfig_t have the real layout and values, and every nccl* function
 * has its pnccl* twin, as in the real library.
 *
 * What stands for the GPU: a communicator is a POSIX shared-memory segment
 * its ranks map (its name is in the unique id; rank 0 unlinks it once all
 * ranks joined, ncclCommAbort and ncclCommDestroy unmap it). A collective
 * is asynchronous, as on a GPU: ncclAllReduce and ncclBroadcast copy the
 * caller's contribution into slot (seq % FAKE_NSLOT) of the segment and
 * return at once, leaving the operation pending on the caller's stream.
 * The stream is the program's own object (struct CUstream_st below, zeroed
 * before first use); fake_stream_sync() is its cudaStreamSynchronize: it
 * waits until every rank contributed to each pending operation, writes the
 * results into their receive buffers and frees the slots (the last rank to
 * read a slot frees it; a rank runs at most FAKE_NSLOT calls ahead of the
 * slowest reader). A communicator aborted or destroyed with operations
 * still pending completes those whose contributions are all there (the GPU
 * would have run them) and fails the others: fake_stream_sync then returns
 * -1. Nothing of the segment is mapped after ncclCommAbort returns. This
 * is what makes the shim's release safe here: its drain waits for streams
 * through libcuda (cuStreamQuery), which a CPU-only test has not, but at a
 * consistent cut every rank's part of every call is in, so the abort
 * completes all of them, as the GPU would have.
 *
 * Limits: at most FAKE_MAX_RANKS ranks, FAKE_MAX_BYTES bytes a call, and
 * FAKE_STREAM_OPS operations pending on one stream (more is
 * ncclInvalidUsage). ncclAllReduce knows ncclSum, ncclProd, ncclMax and
 * ncclMin on the 8-, 32- and 64-bit integers and on ncclFloat32 and
 * ncclFloat64; anything else is ncclInvalidArgument. ncclGroupStart and
 * ncclGroupEnd do nothing; ncclCommInitRank blocks until all ranks joined
 * (with config or without: a non-blocking config is not honoured).
 */
#ifndef CREST_TESTS_FAKE_NCCL_H
#define CREST_TESTS_FAKE_NCCL_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FAKE_NCCL_VERSION 22809      /* what ncclGetVersion says: 2.28.9 */
#define FAKE_NSLOT 16
#define FAKE_MAX_RANKS 16
#define FAKE_MAX_BYTES 4096
#define FAKE_STREAM_OPS 64

/* nccl.h 2.28 */
typedef struct ncclComm *ncclComm_t;
#define NCCL_COMM_NULL NULL
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct { char internal[NCCL_UNIQUE_ID_BYTES]; } ncclUniqueId;

typedef enum { ncclSuccess                 =  0,
               ncclUnhandledCudaError      =  1,
               ncclSystemError             =  2,
               ncclInternalError           =  3,
               ncclInvalidArgument         =  4,
               ncclInvalidUsage            =  5,
               ncclRemoteError             =  6,
               ncclInProgress              =  7,
               ncclNumResults              =  8 } ncclResult_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL

typedef struct ncclConfig_v22800 {
	size_t size;
	unsigned int magic;
	unsigned int version;
	int blocking;
	int cgaClusterSize;
	int minCTAs;
	int maxCTAs;
	const char *netName;
	int splitShare;
	int trafficClass;
	const char *commName;
	int collnetEnable;
	int CTAPolicy;
	int shrinkShare;
	int nvlsCTAs;
	int nChannelsPerNetPeer;
	int nvlinkCentricSched;
} ncclConfig_t;

typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;
typedef enum { ncclSum        = 0,
               ncclProd       = 1,
               ncclMax        = 2,
               ncclMin        = 3,
               ncclAvg        = 4,
               ncclNumOps     = 5,
               ncclMaxRedOp   = 0x7fffffff>>(32-8*sizeof(ncclRedOp_dummy_t))
             } ncclRedOp_t;

typedef enum { ncclInt8       = 0, ncclChar       = 0,
               ncclUint8      = 1,
               ncclInt32      = 2, ncclInt        = 2,
               ncclUint32     = 3,
               ncclInt64      = 4,
               ncclUint64     = 5,
               ncclFloat16    = 6, ncclHalf       = 6,
               ncclFloat32    = 7, ncclFloat      = 7,
               ncclFloat64    = 8, ncclDouble     = 8,
               ncclBfloat16   = 9,
               ncclFloat8e4m3 = 10,
               ncclFloat8e5m2 = 11,
               ncclNumTypes   = 12
} ncclDataType_t;

/* The stream: the program's, zeroed before its first use (static, or
 * memset), never shared between processes. What is in it is the fake's. */
struct fake_stream_op {
	void *comm;            /* the fake's communicator (struct ncclComm *) */
	uint64_t seq;          /* the call's number on that communicator */
	void *recvbuff;
	size_t count;
	int32_t datatype, redop, root, kind;
	int32_t done;          /* 1 completed, -1 failed (its communicator went first) */
};
struct CUstream_st {
	uint32_t nops;
	uint32_t failed;       /* operations failed since the last sync */
	struct fake_stream_op ops[FAKE_STREAM_OPS];
};
typedef struct CUstream_st *cudaStream_t;

/* Waits for every operation pending on s and completes it. 0, or -1 when
 * one failed (its communicator was aborted or destroyed before all of its
 * ranks contributed) or s is NULL. Takes no communicator: a program under
 * the shim holds only the shim's handles. Safe beside another thread's
 * NCCL calls (the shim's thread aborting and rebuilding communicators). */
int fake_stream_sync(cudaStream_t s);

ncclResult_t ncclGetVersion(int *version);
ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId);
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
				    ncclConfig_t *config);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
const char *ncclGetErrorString(ncclResult_t result);
const char *ncclGetLastError(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);
ncclResult_t ncclCommCount(const ncclComm_t comm, int *count);
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank);
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
			   int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
			   ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

#ifdef __cplusplus
}
#endif

#endif
