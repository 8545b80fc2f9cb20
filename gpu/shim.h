/*
 * shim.h - the control block between crest and the NCCL shim preloaded
 * into a job (`crest run --cuda-shim`, gpu/shim_lib.c), and the format
 * both sides read: declared here alone, versioned, checked by each reader.
 *
 * Why a shim: the driver cannot restore a process that holds a NCCL
 * communicator with its P2P transport on (CUDA_ERROR_NOT_SUPPORTED, seen
 * with NCCL 2.28.9 and driver 580), and NCCL 2.28 has no way to release
 * one but to end it (ncclCommSuspend came with 2.29). So the shim stands
 * between the job and NCCL: the job holds the shim's communicator handles,
 * and the shim can end the real ones at a quiet point before the driver's
 * lock and build new ones after the restore, unseen by the job.
 *
 * The channel: the shim, once its process makes its first communicator
 * or enables peer access between GPUs,
 * creates a memfd named SHIM_MEMFD_NAME holding one struct shim_ctl,
 * mapped shared, and a thread named SHIM_THREAD_NAME that waits on
 * ctl.req_seq (a futex on the shared page). crest opens the memfd through
 * /proc/PID/fd, writes a request and its arguments, bumps req_seq and
 * wakes the futex; the shim answers by writing rep_rc, rep_msg and its
 * part of comm[], then rep_seq = req_seq (futex woken too). No path, no
 * signal: it works across crest run's namespaces, and CRIU dumps and
 * restores the memfd with the process, so the same channel is there after
 * a restore. A forked child closes its copy (the shim's atfork handler):
 * only a process that made a communicator itself answers.
 *
 * The steps of one checkpoint, crest's side in gpu/shimctl.h:
 *  PAUSE    the shim closes its gate: a call into NCCL that would enqueue
 *           work (a collective, send/recv, a group) waits at the gate; it
 *           returns once none is inside, with each communicator's key,
 *           rank, size and count of calls so far.
 *  DRAIN    with comm[i].target set by crest to the largest count of that
 *           communicator over all its ranks: the gate lets through calls on
 *           a communicator below its target (each rank issues the same
 *           sequence on a communicator, so a rank behind is missing calls
 *           its peers' kernels already wait for) until every count is at
 *           its target, then waits for the streams those calls went to to
 *           be idle. rc -EAGAIN (a count went past its target, in a group
 *           spanning communicators) asks crest for another DRAIN.
 *  RELEASE  every count equal on every rank and nothing in flight: the
 *           shim ends the real communicators (ncclCommAbort: local, no
 *           hang) and disables the peer access between GPUs the job had
 *           enabled (cudaDeviceEnablePeerAccess, cuCtxEnablePeerAccess,
 *           which the driver cannot restore either); the job holds no NCCL
 *           or peer state the driver must keep.
 *  (freeze, dump; or the job is killed and restored later)
 *  IDS      for each communicator it is rank 0 of, the shim makes a new
 *           unique id (ncclGetUniqueId) into comm[i].newid.
 *  REBUILD  with every comm[i].newid filled by crest from the rank 0s: the
 *           shim enables the peer access again, builds new real communicators (one NCCL group, so their
 *           order does not matter), the custom reduction ops and buffer
 *           registrations again, and opens the gate.
 *  OPEN     a PAUSE or DRAIN that crest gives up on: the gate opens again,
 *           the real communicators untouched. Sent to a released shim (no
 *           rebuild is coming: the ids failed), it goes BROKEN: the gate
 *           opens and every NCCL call fails, so that nothing waits for ever.
 * A communicator's key is the same in every rank (a hash of the unique id
 * it was made from, or of its parent's key and the split), so crest can
 * match ranks; its count is what the cut is made on.
 */
#ifndef CREST_GPU_SHIM_H
#define CREST_GPU_SHIM_H

#include <stdint.h>

#define SHIM_MEMFD_NAME "crest-shim"
#define SHIM_THREAD_NAME "crest-shim"
#define SHIM_MAGIC 0x6d696873u      /* "shim" */
#define SHIM_VERSION 1u
#define SHIM_MAX_COMMS 64
#define SHIM_ID_BYTES 128           /* NCCL_UNIQUE_ID_BYTES */

enum shim_op {
	SHIM_OP_NONE = 0,
	SHIM_OP_PAUSE = 1,
	SHIM_OP_DRAIN = 2,
	SHIM_OP_RELEASE = 3,
	SHIM_OP_IDS = 4,
	SHIM_OP_REBUILD = 5,
	SHIM_OP_OPEN = 6,
};

/* What the shim says of its state (ctl.state), for crest's checks. */
enum shim_state {
	SHIM_RUNNING = 0,    /* gate open, real communicators live */
	SHIM_PAUSED = 1,     /* gate closed, real communicators live */
	SHIM_RELEASED = 2,   /* gate closed, no real communicator */
	SHIM_BROKEN = 3,     /* a rebuild failed: NCCL calls fail (rep_msg says why) */
};

/* The job's CUDA runtime is a shared library the shim stands in front of:
 * every peer access it enables goes through the shim (a runtime linked
 * statically into the program does not). */
#define SHIM_SEES_RUNTIME 1u

#define SHIM_COMM_DEVAPI 1u      /* the job made NCCL device-API state on it: cannot be rebuilt */
#define SHIM_COMM_DEAD 2u        /* the job destroyed or aborted it: nothing to do */

struct shim_comm {
	uint8_t key[16];
	int32_t rank, nranks, dev;
	uint32_t flags;              /* SHIM_COMM_* */
	uint64_t count;              /* calls enqueued on it so far (shim) */
	uint64_t target;             /* DRAIN: count to reach (crest) */
	uint8_t newid[SHIM_ID_BYTES];/* IDS: the shim's (rank 0); REBUILD: crest's */
};

struct shim_ctl {
	uint32_t magic, version;     /* SHIM_MAGIC, SHIM_VERSION: checked by crest */
	int32_t pid;                 /* the process that made it (getpid) */
	uint32_t state;              /* enum shim_state */
	/* crest writes these, then req_seq */
	uint32_t req_seq;
	uint32_t req_op;             /* enum shim_op */
	uint32_t req_timeout_ms;     /* DRAIN: how long to wait */
	uint32_t pad0;
	/* the shim writes these, then rep_seq = req_seq */
	uint32_t rep_seq;
	int32_t rep_rc;              /* 0 or -errno */
	char rep_msg[256];           /* why, when rep_rc < 0 */
	uint32_t ncomm;              /* comm[0..ncomm) */
	uint32_t npeer;              /* peer access pairs it enabled for the job (PAUSE) */
	uint32_t flags;              /* SHIM_SEES_* (PAUSE) */
	uint32_t pad1;
	struct shim_comm comm[SHIM_MAX_COMMS];
};

#endif
