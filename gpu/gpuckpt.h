/*
 * gpuckpt.h - the CUDA driver's process checkpoint API over a set of pids.
 *
 * lock + checkpoint moves each process's device memory into its own host
 * memory and releases its GPU handles, so CRIU can then dump it as a CPU
 * process; restore + unlock brings it back. The driver does the work on a
 * thread inside each target, so the targets must be running (not frozen)
 * while these calls run. All or nothing: if one process fails, the ones
 * already done are brought back before the error is returned.
 *
 * What the driver allows, and what crest refuses (issue 33; what was seen
 * is in shared/notes/gpu-checkpoint-facts.md):
 *  - One process on one GPU: checkpointed and restored, onto the same GPU
 *    or, with every GPU it saw mapped, onto others of the same chip
 *    (gpumap.h).
 *  - Several CUDA processes (the ranks of a job, one GPU each): the driver
 *    takes each alone; crest calls it for all at once (gpuckpt_suspend),
 *    which NCCL needs: ranks locked one after the other deadlock on a
 *    collective in flight (the later lock answers CUDA_ERROR_NOT_READY).
 *    A lock that still gives up is let go on every rank and tried again,
 *    within --lock-within; then crest gives up and the job runs on.
 *    Shown on the driver with 2 NCCL ranks over sockets (NCCL_P2P_DISABLE=1
 *    NCCL_SHM_DISABLE=1): checkpointed and restored, identical afterwards.
 *  - NCCL ranks with its P2P transport on (its default on one node): the
 *    driver checkpoints them, and its restore answers
 *    CUDA_ERROR_NOT_SUPPORTED; capture/transparent.c refuses such a job
 *    before anything is frozen (refuse_nccl_p2p), unless it runs crest's
 *    shim (gpu/shim.h), which ends its communicators before the lock and
 *    makes them again after the restore: then checkpointed and restored,
 *    identical afterwards (4 ranks, 4 H200s).
 *  - A process that maps libcuda without a context (a spawn launcher):
 *    every driver call fails for it (CUDA_ERROR_NOT_INITIALIZED); it is a
 *    CPU process to CRIU.
 *  - Managed memory (cudaMallocManaged): the driver's checkpoint answers
 *    CUDA_ERROR_NOT_SUPPORTED; crest undoes the locks and the job runs on.
 *  - One process with CUDA state on two or more GPUs that moves data
 *    between them (peer access): the driver checkpoints it, then its
 *    restore answers CUDA_ERROR_INVALID_VALUE (CUDA_ERROR_OPERATING_SYSTEM
 *    with GPU pairs) and the process stays checkpointed for good; the bare
 *    driver + CRIU flow fails the same way. crest refuses a process on
 *    several GPUs (gpumap_held's rule) before anything is locked, unless
 *    --multi-gpu-process. With it, a driver restore that fails after the
 *    dump ends in a defined state (capture/transparent.c): the snapshot is
 *    stored (or its images kept on tmpfs as crest-kept-*), the job is
 *    ended, and crest says which pid, which driver error and where the
 *    images are; a restore of that snapshot is then likely to fail the
 *    same way, and crest restore ends what it brought back (the snapshot
 *    untouched). The ways around it: one GPU per process, tensors moved
 *    between GPUs through host memory (that process restored bit-exact),
 *    crest's shim, which disables the peer access before the lock and
 *    enables it again after (such a process restored bit-exact, 2 H200s),
 *    or crest's library (crest_checkpoint), which copies device memory
 *    itself.
 */
#ifndef CREST_GPU_GPUCKPT_H
#define CREST_GPU_GPUCKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "gpu/cudrv.h"

struct gpuckpt_map {
	CUuuid from, to;
};

/* Whether the driver holds CUDA state for pid: cuCheckpointProcessGetState
 * answers for it. A process can map libcuda with no context at all (a
 * torch.multiprocessing.spawn launcher, a data-loader worker, a process
 * that imported torch and never touched the GPU): the driver then answers
 * an error (CUDA_ERROR_NOT_INITIALIZED from its Lock, seen with driver
 * 580), and such a process is a CPU process to CRIU. *why gets the
 * driver's answer (CUDA_SUCCESS when it holds state). */
bool gpuckpt_has_state(const struct cudrv *d, pid_t pid, CUresult *why);


/*
 * Locks, then checkpoints, every process of pids; all at once, one thread
 * each, so that n processes stall about as long as the slowest one, not
 * the sum. Each lock waits at most timeout_ms (0: for good). The ranks of
 * a collective job (NCCL) cannot be locked one after the other: a rank
 * whose collective is in flight waits for its peers, and a peer already
 * locked never joins, so its lock gives up (CUDA_ERROR_NOT_READY, seen on
 * the H100). Locked at once, none is left waiting on a locked peer. Where
 * a lock still gives up (NOT_READY, TIMEOUT), every process locked in
 * that round is unlocked at once, so the collective can end, and the
 * round is tried again after a short, growing, jittered pause, for at
 * most within_ms in all (0: one round); then -ETIMEDOUT, with a message
 * saying why, and every process running, unlocked. Any other failure
 * leaves every process as it was (restored, unlocked) and is returned.
 * lock_ns: the time spent locking, every round; ckpt_ns: checkpointing.
 */
int gpuckpt_suspend(const struct cudrv *d, const pid_t *pids, size_t n, unsigned timeout_ms, unsigned within_ms,
		    uint64_t *lock_ns, uint64_t *ckpt_ns);
/* Restores (with map, when the driver has a process checkpointed) and then
 * unlocks every process of pids: all restores at once, then all unlocks at
 * once. Each process is brought as far as it goes; the first failure is
 * returned, naming its pid and the driver's error. */
int gpuckpt_resume(const struct cudrv *d, const pid_t *pids, size_t n, const struct gpuckpt_map *map,
		   size_t nmap);
/* For a guard whose crest died inside a suspend or a resume: brings each
 * process back to running (restored with map, unlocked), however far the
 * driver got. The driver finishes a lock, checkpoint or restore call that
 * crest died inside on its own, in the target, so a process that shows
 * running may be locked a moment later: the states are watched until all
 * have run for settle_ms in a row, each one brought back as it shows, for
 * at most max_s seconds. A process gone counts as settled: one whose pid
 * is free, or for which gone(pid) is true (NULL: the pid test only). A
 * zombie, or a process on its way out, has given its GPU state up and
 * cannot have it back, and kill(pid, 0) still finds it: the guards pass
 * os/proc.h's proc_gone, which this layer cannot call itself. */
int gpuckpt_settle(const struct cudrv *d, const pid_t *pids, size_t n, const struct gpuckpt_map *map,
		   size_t nmap, unsigned settle_ms, unsigned max_s, bool (*gone)(pid_t));
/* What both guards run once crest died holding a job: the driver loaded,
 * then gpuckpt_settle with the guards' bounds, running for
 * GPUCKPT_GUARD_SETTLE_MS in a row, watched for at most
 * GPUCKPT_GUARD_MAX_S. 0 at once when n is 0. */
#define GPUCKPT_GUARD_SETTLE_MS 3000
#define GPUCKPT_GUARD_MAX_S 180
int gpuckpt_guard_settle(const pid_t *pids, size_t n, const struct gpuckpt_map *map, size_t nmap,
			 bool (*gone)(pid_t));
/* "GPU-xxxxxxxx-xxxx-..." as nvidia-smi prints it, to a CUuuid. */
int gpuckpt_parse_uuid(const char *s, CUuuid *u);

#endif
