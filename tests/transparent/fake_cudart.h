/*
 * fake_cudart.h - a stand-in CUDA runtime (libcudart.so.13) for the peer
 * access test of crest's shim without a GPU (peer_shim.sh): the runtime
 * calls the shim stands in front of (gpu/shim_lib.c, "peer access") and
 * the state they leave, shared with the stand-in driver (fake_libcuda.c's
 * stateful build) and readable from outside.
 *
 * Each process that loads it gets one page, a memfd named
 * FAKE_RT_MEMFD_NAME that it keeps open and mapped shared, holding a
 * struct fake_rt_page: the peer access pairs it has enabled (process-wide,
 * as in the runtime) and the driver's checkpoint state of the process.
 * Anyone root reaches it through /proc/PID/fd (the fd whose link is
 * "/memfd:fake-cudart (deleted)"), by host pid, inside a pid namespace or
 * not; and CRIU dumps and restores it with the process, so that a
 * restored copy has the state its original had when it was dumped: no
 * file of the job's for CRIU to find changed or gone.
 *
 * The stand-in driver, for a process with a page, keeps the process's
 * checkpoint state there (a copy restored under another pid is found
 * checkpointed, as the driver finds it) and, like the real driver,
 * cannot restore a process while it has peer access enabled. The runtime's
 * calls wait while the driver has the process locked or checkpointed, as
 * a real process's CUDA calls do.
 */
#ifndef CREST_TESTS_FAKE_CUDART_H
#define CREST_TESTS_FAKE_CUDART_H

#include <stdint.h>

#define FAKE_RT_MEMFD_NAME "fake-cudart"
#define FAKE_RT_MAGIC 0x74726b66u   /* "fkrt" */
#define FAKE_RT_MAX_DEV 8

struct fake_rt_page {
	uint32_t magic;     /* FAKE_RT_MAGIC */
	uint32_t state;     /* the driver's: 0 running, 1 locked, 2 checkpointed (CUprocessState) */
	uint32_t npairs;    /* peer access pairs enabled now */
	uint32_t changes;   /* enables and disables that changed a pair, so far */
	uint64_t pairs;     /* bit FROM * FAKE_RT_MAX_DEV + TO: access from device FROM to TO's memory */
};

#endif
