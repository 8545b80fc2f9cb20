/*
 * crest.h - libcrest: a job snapshots its own GPU and host memory into a
 * crest store, and restores it.
 *
 * The job registers regions (a device or host pointer, a size, a name).
 * crest_checkpoint makes the device idle, copies every region into a pinned
 * staging pool with asynchronous device-to-host copies and returns as soon as
 * the copies are done: the job may change its memory again while crest
 * deduplicates, compresses and stores the copy in the background.
 * crest_wait collects the result. crest_restore streams a snapshot back into
 * the registered regions.
 *
 * Promises:
 *  - Every function returns 0 (or a documented positive value) on success and
 *    a negative errno code on failure; crest_errmsg() then holds one line
 *    saying what failed, on what and why. Nothing aborts the process.
 *  - The staging pool is allocated once, in crest_open (pinned with
 *    cuMemHostAlloc where a GPU driver is present), and reused: a checkpoint
 *    allocates no staging. When the regions are larger than the pool, the
 *    copy goes in rounds as the store frees staging; the stall is longer and
 *    crest_result says by how much.
 *  - Snapshots are ordinary crest snapshots of kind "library": one stream of
 *    type region per region (named as registered) and one blob stream per
 *    blob. `crest ls/show/get` and `casctl verify` work on them.
 *  - Every checkpoint is on a branch (the label crest.branch; `crest log`
 *    and `crest branch` show them) and names its parent: the newest
 *    checkpoint of the handle that was waited for, else the head (newest
 *    snapshot) of its branch when the handle was opened, or what
 *    crest_set_branch or crest_restore chose. A handle starts on branch
 *    "main", so a job's sessions continue one history. Checkpoints issued
 *    before the previous one is waited for share its parent.
 *  - libcuda is loaded with dlopen: without a GPU, host regions work and
 *    device regions fail with "no NVIDIA GPU driver here".
 *  - A crest handle is used by one thread at a time.
 *  - A crest_t * is a token, not an address: after crest_close, or for any
 *    pointer crest_open did not return, every function (crest_close too)
 *    fails with -EBADF and crest_region_count returns 0. The token is
 *    never dereferenced, and a later crest_open never brings it back.
 */
#ifndef CREST_H
#define CREST_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct crest crest_t;
typedef uint64_t crest_region_t;   /* 0 is never a valid region */
typedef uint64_t crest_ckpt_t;     /* 0 is never a valid checkpoint */

#define CREST_OPEN_NO_GPU 0x1u     /* never load the GPU driver: pageable staging */

struct crest_options {
	size_t staging_bytes;      /* the staging pool; 0: 1 GiB (at least 8 MiB) */
	unsigned workers;          /* ingest threads; 0: one per core */
	unsigned copy_streams;     /* CUDA streams for device-to-host copies; 0: 4 */
	unsigned restore_threads;  /* 0: one per core */
	int device;                /* GPU whose primary context pins the pool (0) */
	unsigned flags;            /* CREST_OPEN_* */
	/* A directory in shared memory (a tmpfs: /dev/shm, best mounted with
	 * huge=within_size) for the host cache, or NULL: none. Each checkpoint
	 * also leaves a copy of the device regions there, written by the
	 * ingest threads (no stall), in one file per store and GPU that
	 * outlives the process, and takes host memory equal to the regions.
	 * A restore, in this process or in the next one on this node after a
	 * crash, copies the regions from it and hashes every chunk on the GPU
	 * against the snapshot's ids; a region that does not match is
	 * restored from the store. Needs GPU hashing (crest_checkpoint). */
	const char *host_cache;
	/* Another store (a directory: a shared file system, another disk), or
	 * NULL: none. Each snapshot this handle commits, and each job snapshot
	 * it commits (crest_job_wait), is then pushed there as `crest push`
	 * does (only the chunks that store lacks, every one checked, the same
	 * id, its tags where free there) by a thread of the handle's, the job
	 * running on. The store must exist and not be this one (crest_open
	 * fails with -EINVAL otherwise). A failed push is said on stderr;
	 * crest_close waits for the pushes and returns the first failure. */
	const char *push_to;
};

/* Fills o with the defaults above. */
void crest_options_init(struct crest_options *o);

/* Opens (creating if needed) the store in dir; NULL: $CREST_STORE or
 * ./crest-store. o may be NULL. The handle holds the store's writer lock
 * while it uses it, and gives it up between checkpoints to another writer
 * that waits for it (`casctl gc`, a `crest checkpoint` ingest), taking it
 * back when that one is done; with $CREST_STORE_IDLE_MS set, also once it
 * has been idle that many milliseconds. A checkpoint taken meanwhile is
 * held in host memory and ingested once the store is back. A call that
 * needs the store itself (crest_open, a restore, crest_read_blob,
 * crest_set_branch) waits while another process (or another handle of this
 * one) holds it, saying on stderr who after a second, for
 * $CREST_LOCK_TIMEOUT seconds (default 600; 0: not at all), then fails
 * with -ETIMEDOUT naming the holder. */
int crest_open(const char *dir, const struct crest_options *o, crest_t **out);
/* Waits for the checkpoints not yet waited for, then frees everything.
 * Returns the first failure among them (0 when none). NULL is a no-op; a
 * handle already closed is -EBADF. Close every handle before the process
 * exits: an open handle's threads are still in RocksDB while exit() runs
 * the C library's and RocksDB's own exit handlers, which can crash the
 * process then (seen: SIGSEGV, about 1 in 20 exits beside another writer).
 * The Python binding closes its Checkpointers at exit. */
int crest_close(crest_t *c);

enum crest_mem {
	CREST_MEM_HOST = 0,        /* ordinary process memory */
	CREST_MEM_DEVICE = 1,      /* a CUDA device pointer (cuMemAlloc, cudaMalloc) */
	/* CUDA managed memory (cuMemAllocManaged, cudaMallocManaged), its
	 * pages on the host or on any GPU: copied and restored through the
	 * driver wherever they live, and hashed by the CPU (hashing it on a
	 * GPU would move its pages there). The driver's transparent
	 * checkpoint refuses a process holding it; this is the way to save
	 * such a job. */
	CREST_MEM_MANAGED = 2,
};

/* Registers size bytes at ptr under name (unique among registered regions;
 * becomes the stream name). The memory must stay allocated until
 * crest_unregister: a device region found freed at a checkpoint or restore,
 * or a host region whose pages are no longer mapped, fails that call with
 * -EFAULT. (Host memory handed back to malloc but still mapped cannot be
 * told apart from live memory: unregister before freeing.) */
int crest_register(crest_t *c, const char *name, void *ptr, size_t size, enum crest_mem mem,
		   crest_region_t *out);
int crest_unregister(crest_t *c, crest_region_t r);
/* Number of registered regions. */
size_t crest_region_count(const crest_t *c);

/* Small state stored beside the regions (a pickle, a step counter). */
struct crest_blob {
	const char *name;
	const void *data;
	size_t len;
};

struct crest_checkpoint_opts {
	const char *tag;               /* optional: names the snapshot */
	const char *const *labels;     /* "key=value" strings, shown by crest show */
	size_t nlabels;
	const struct crest_blob *blobs;  /* copied before crest_checkpoint returns; names
					  * unique (-EEXIST), and unlike any region's */
	size_t nblobs;
	/* CUstream handles to synchronize before copying. None: every context
	 * that holds a device region is synchronized (cuCtxSynchronize). */
	void *const *sync_streams;
	size_t nsync_streams;
};

/* Copies every region and returns once the copies are done; ingest goes on
 * in the background. o may be NULL. When the handle has let the store go
 * (crest_open), the copies go into host memory instead of the staging pool
 * and are ingested once the store is back; crest_wait waits for that.
 *
 * Device regions are hashed on their GPU (SHA-256 of each 4 KiB chunk,
 * the ids the CPU would compute), and once the newest checkpoint was
 * waited for, the next one copies only the chunks whose hashes changed:
 * its stall is the hash (about 11 ms for 8 GiB on an H100) and those
 * chunks' copy. The hashes take 68 bytes of device memory per 4 KiB of
 * region, allocated at crest_register. Where the build has no kernels (no
 * nvcc), or with $CREST_GPU_HASH=0, every checkpoint copies the regions
 * whole and the CPU hashes them. */
int crest_checkpoint(crest_t *c, const struct crest_checkpoint_opts *o, crest_ckpt_t *out);

/* 1 when the checkpoint is committed or failed (crest_wait will not block),
 * 0 while it is still being ingested; -EBADF for an unknown handle. */
int crest_poll(crest_t *c, crest_ckpt_t h);

struct crest_result {
	char snapshot[65];           /* id, lowercase hex */
	uint64_t bytes;              /* all region and blob bytes */
	uint64_t new_bytes;          /* raw bytes of chunks the store did not have */
	uint64_t stored_bytes;       /* what those took on disk */
	uint64_t zero_bytes;         /* stored as holes */
	uint64_t stall_ns;           /* time inside crest_checkpoint */
	uint64_t staging_wait_ns;    /* part of the stall spent waiting for staging */
	uint64_t ingest_ns;          /* begin to commit */
	unsigned rounds;             /* times the copy waited for staging; 0 when it fit */
};

/* Blocks until the checkpoint is committed; the handle is spent either way.
 * r may be NULL. */
int crest_wait(crest_t *c, crest_ckpt_t h, struct crest_result *r);

struct crest_restore_result {
	char snapshot[65];
	uint64_t bytes;              /* region bytes restored */
	uint64_t ns;                 /* wall time */
	uint64_t cache_bytes;        /* of bytes, those restored from the host cache */
};

/* Streams a snapshot (named as crest names one: a tag, latest, a branch's
 * head, an id or unique id prefix, NAME~N; NULL: the newest library
 * snapshot) back into the registered regions (device regions from the host
 * cache where it holds them, checked: crest_options). The snapshot's regions must
 * match the registered ones by name and size, both ways: otherwise -EINVAL
 * naming the first difference, and nothing is written. Blobs are not
 * touched; read them with crest_read_blob. r may be NULL.
 * Once it succeeds, the job continues from that snapshot: the next
 * checkpoint goes on the snapshot's branch with the snapshot as its parent
 * (checkpoints still in flight do not change that). To keep the branch's
 * newer snapshots as they are, follow with crest_set_branch to a new
 * branch: it starts from the restored snapshot. */
int crest_restore(crest_t *c, const char *snapshot, struct crest_restore_result *r);

/* Puts the later checkpoints on branch name (1 to 128 of [A-Za-z0-9-_./@+];
 * otherwise -EINVAL). When the branch has a head (a snapshot on it, or the
 * one `crest branch` pointed it at), the next checkpoint's parent is that
 * head, so the branch goes on from there; when it has none, it is new and
 * starts from the parent the handle has (the newest
 * checkpoint waited for, or a restored snapshot). Checkpoints in flight stay
 * on the branch they were taken on and become no parent. */
int crest_set_branch(crest_t *c, const char *name);

/* Reads blob `name` of a snapshot (as for crest_restore) into a buffer the
 * caller frees with crest_free. -ENOENT when the snapshot has no such blob. */
int crest_read_blob(crest_t *c, const char *snapshot, const char *name, void **data, size_t *len);
void crest_free(void *p);

/*
 * Jobs of many processes (ranks; docs/JOBS.md). Each rank checkpoints its
 * own regions on its own handle, as above, with crest_job_checkpoint; once
 * every rank's checkpoint of a step is committed, one job snapshot names
 * them all, with the step, the world size and each rank's GPU. It is
 * committed once, all or nothing, and listed only whole: a rank killed
 * before its checkpoint of a step is committed leaves no job snapshot of
 * that step. No rank waits for another: each leaves its snapshot's id in
 * the store once it is committed (crest_job_wait), and the rank that
 * completes the set commits the job snapshot.
 */
struct crest_job {
	const char *name;      /* the job, the same in every rank: 1 to 96 of
				* [A-Za-z0-9._-], not beginning with '.' */
	const char *attempt;   /* the same in every rank of one launch and new
				* in the next (a restart must never meet the
				* ranks of the launch that crashed); NULL:
				* $CREST_JOB_ATTEMPT, else torchrun's
				* $TORCHELASTIC_RUN_ID.$TORCHELASTIC_RESTART_COUNT,
				* else "0". Same characters as name. */
	uint32_t rank;         /* this process's rank, in [0, world) */
	uint32_t world;        /* the number of ranks */
	const char *gpu;       /* this rank's GPU as recorded (a UUID), or NULL */
};

/* crest_checkpoint of step `step` of the job: the snapshot carries the
 * labels crest.job, crest.job.step, crest.job.rank and crest.job.world
 * besides o's (o may be NULL). Wait for it with crest_job_wait. */
int crest_job_checkpoint(crest_t *c, const struct crest_job *j, uint64_t step,
			 const struct crest_checkpoint_opts *o, crest_ckpt_t *out);

struct crest_job_result {
	struct crest_result rank;    /* this rank's checkpoint, as crest_wait gives it */
	int committed;               /* 1: this rank completed the set and committed the job snapshot */
	char job_snapshot[65];       /* its id when committed, else "" */
};

/* crest_wait for h (a crest_job_checkpoint of step), then this rank's
 * arrival: it leaves its snapshot's id in the store and, if every rank of
 * the step has, commits the job snapshot (r->committed). Returns as soon as
 * that is done: it never waits for another rank. r may be NULL. */
int crest_job_wait(crest_t *c, const struct crest_job *j, uint64_t step, crest_ckpt_t h,
		   struct crest_job_result *r);

/* Restores this rank's part of a job snapshot into the registered regions,
 * as crest_restore does: snapshot names one (a tag, an id, "job:NAME" for
 * the newest of job NAME); NULL: the newest job snapshot of j->name. The
 * job snapshot must have j->world ranks (a job resumes at the same world
 * size; its rank r may sit on another GPU than rank r did) and its member
 * for j->rank must be in the store: otherwise -EINVAL or -ENOENT naming
 * them, and nothing is written. crest_restore refuses a job snapshot. */
int crest_job_restore(crest_t *c, const struct crest_job *j, const char *snapshot,
		      struct crest_restore_result *r);

/* The calling thread's message for the last failure, "" if none. */
const char *crest_errmsg(void);

/*
 * ABI introspection: the layout of this header's structs and the values of
 * its constants, as the library was built. For bindings that declare the
 * structs themselves (python/crest with ctypes): they compare their copy
 * with these answers when they load libcrest and refuse to run on any
 * difference, rather than pass the library a struct it reads otherwise.
 *
 * type is a struct's tag without "struct " ("crest_result"); field a member
 * name ("rounds"). Unknown names are answered by the values below, never by
 * a failure of the process, and leave crest_errmsg() as it was: the caller
 * knows which name it asked for. The functions keep no state and may be
 * called from any thread, before crest_open.
 */
/* sizeof(struct type), or of its member when given "type.field"; 0 for an
 * unknown name (no struct or member here has size 0). */
size_t crest_abi_sizeof(const char *type);
/* offsetof(struct type, field); SIZE_MAX for an unknown type or field
 * (0 is the first member's offset). */
size_t crest_abi_offsetof(const char *type, const char *field);
/* The name of member i of struct type, in declaration order; NULL past the
 * last member or for an unknown type. */
const char *crest_abi_field(const char *type, size_t i);
/* The value of a constant of this header: "CREST_MEM_HOST",
 * "CREST_MEM_DEVICE", "CREST_OPEN_NO_GPU". 0 and *value set; -ENOENT for an
 * unknown name (*value untouched). */
int crest_abi_const(const char *name, long long *value);

#ifdef __cplusplus
}
#endif

#endif
