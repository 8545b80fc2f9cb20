/*
 * gpumap.h - which GPUs a checkpointed job saw, and where they go on
 * restore.
 *
 * The driver's restore takes pairs (old UUID -> new UUID) and wants every
 * GPU the process saw at its checkpoint in them, each mapped to a GPU of
 * the same chip, no two onto one; a map of some GPUs only fails, and only
 * after CRIU has brought the processes back. So a checkpoint records the
 * GPUs its job saw (gpumap_seen, as a manifest label in gpumap_format's
 * form), and a restore completes what the user asked for (`--gpu-map
 * OLD=NEW`, `--gpu N`) into a whole permutation and checks it against the
 * GPUs of this machine (gpumap_complete) before anything is restored.
 */
#ifndef CREST_GPU_GPUMAP_H
#define CREST_GPU_GPUMAP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "gpu/cudrv.h"
#include "gpu/gpuckpt.h"

struct gpu_info {
	CUuuid uuid;
	char name[96];     /* the chip, as cuDeviceGetName says */
	uint64_t mib;      /* seen: the job's memory on it; host: free memory; 0: not known */
};

/* The GPUs of this machine, in the driver's order. */
int gpumap_host(const struct cudrv *d, struct gpu_info **out, size_t *n);
/* The GPUs pid saw: those CUDA_VISIBLE_DEVICES (in /proc/pid/environ)
 * names, by index or UUID (prefix), else all of host. */
int gpumap_seen(pid_t pid, const struct gpu_info *host, size_t nhost, struct gpu_info **out, size_t *n);

/* Memory by GPU from nvidia-smi, which ships with the driver (the driver
 * API tells no process another's usage): into seen, what the processes
 * pids use on each; into host, what each has free. Left 0 where nvidia-smi
 * is missing or says nothing: the check is then not made. */
void gpumap_used(const pid_t *pids, size_t npids, struct gpu_info *seen, size_t nseen);
void gpumap_free_mem(struct gpu_info *host, size_t nhost);

/*
 * The GPUs on which pid holds CUDA state, as far as can be told from
 * outside the process: into what, "GPU 0 (GPU-uuid), GPU 1 (GPU-uuid)"
 * or "/dev/nvidia0, /dev/nvidia1"; how many (0 when none can be told).
 * The one place that says what "holds state on a GPU" means, for the
 * refusal of a process on several GPUs (gpuckpt.h says why): change the
 * rule here. Today: the GPUs nvidia-smi lists the process under (one per
 * CUDA context it has; --query-compute-apps), else, where nvidia-smi is
 * missing or does not see the process (another pid namespace), the
 * distinct /dev/nvidiaN it maps (/proc/PID/maps). Not the files it holds
 * open: CUDA may open every GPU's device file at cuInit, one it uses or
 * not (not verified on the GPU machines; gpu-check's multigpu_refuse logs
 * what the maps and descriptors of a 2-GPU process show).
 */
size_t gpumap_held(pid_t pid, const struct gpu_info *host, size_t nhost, char *what, size_t cap);

/* "GPU-uuid=name[@MiB];..." and back (-EINVAL with a message). */
int gpumap_format(const struct gpu_info *g, size_t n, char **out);
int gpumap_parse(const char *s, struct gpu_info **out, size_t *n);
void gpumap_uuid_str(const CUuuid *u, char buf[41]);

/* The whole map for a restore: the user's pairs (want; gpu, if not NULL,
 * adds "the job's first GPU -> this one", an index into host or a UUID),
 * checked (each from a GPU the job saw, each to a GPU here of the same
 * chip with the memory the job used free, where both are known, none twice) and completed (every other GPU the job saw to itself
 * if it is here and free, else to a free one of its chip). *n is 0 when
 * nothing moves. -EINVAL with a message that says what cannot be done. */
int gpumap_complete(const struct gpu_info *seen, size_t nseen, const struct gpu_info *host, size_t nhost,
		    const struct gpuckpt_map *want, size_t nwant, const char *gpu,
		    struct gpuckpt_map **out, size_t *n);

#endif
