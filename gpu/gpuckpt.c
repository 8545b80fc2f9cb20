/* gpuckpt.c - driver checkpoint of CUDA processes; see gpuckpt.h. */
#include "gpu/gpuckpt.h"
#include "util/err.h"
#include "util/progress.h"

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int pid_err(int rc, pid_t pid, const char *step)
{
	return crest_errctx(rc, "%s of CUDA process %d", step, (int)pid);
}

bool gpuckpt_has_state(const struct cudrv *d, pid_t pid, CUresult *why)
{
	CUprocessState st = CU_PROCESS_STATE_RUNNING;
	*why = d->CheckpointProcessGetState ? d->CheckpointProcessGetState(pid, &st) : CUDA_ERROR_NOT_SUPPORTED;
	return *why == CUDA_SUCCESS;
}

int gpuckpt_suspend(const struct cudrv *d, const pid_t *pids, size_t n, unsigned timeout_ms,
		    uint64_t *lock_ns, uint64_t *ckpt_ns)
{
	int rc = cudrv_need_checkpoint(d);
	if (rc < 0)
		return rc;
	size_t locked = 0, done = 0;
	uint64_t t0 = time_now_ns();
	for (; locked < n; locked++) {
		CUcheckpointLockArgs la;
		memset(&la, 0, sizeof(la));
		la.timeoutMs = timeout_ms;
		rc = cudrv_check(d, d->CheckpointProcessLock(pids[locked], &la), "cuCheckpointProcessLock");
		if (rc < 0) {
			pid_err(rc, pids[locked], "locking");
			goto undo;
		}
	}
	uint64_t t1 = time_now_ns();
	for (; done < n; done++) {
		CUcheckpointCheckpointArgs ca;
		memset(&ca, 0, sizeof(ca));
		rc = cudrv_check(d, d->CheckpointProcessCheckpoint(pids[done], &ca), "cuCheckpointProcessCheckpoint");
		if (rc < 0) {
			pid_err(rc, pids[done], "checkpointing");
			goto undo;
		}
	}
	if (lock_ns)
		*lock_ns = t1 - t0;
	if (ckpt_ns)
		*ckpt_ns = time_now_ns() - t1;
	return 0;
undo:;
	/* Leave every process as it was: restored and unlocked. */
	char msg[1024];
	crest_errcpy(msg, sizeof(msg));
	for (size_t i = 0; i < locked; i++) {
		CUprocessState st = CU_PROCESS_STATE_RUNNING;
		d->CheckpointProcessGetState(pids[i], &st);
		if (st == CU_PROCESS_STATE_CHECKPOINTED) {
			CUcheckpointRestoreArgs ra;
			memset(&ra, 0, sizeof(ra));
			d->CheckpointProcessRestore(pids[i], &ra);
		}
		CUcheckpointUnlockArgs ua;
		memset(&ua, 0, sizeof(ua));
		d->CheckpointProcessUnlock(pids[i], &ua);
	}
	crest_errset_str(msg);
	return rc;
}

int gpuckpt_resume(const struct cudrv *d, const pid_t *pids, size_t n, const struct gpuckpt_map *map,
		   size_t nmap)
{
	int rc = cudrv_need_checkpoint(d);
	if (rc < 0)
		return rc;
	CUcheckpointGpuPair *pairs = NULL;
	if (nmap) {
		pairs = calloc(nmap, sizeof(*pairs));
		if (!pairs)
			return crest_errf(-ENOMEM, "GPU map");
		for (size_t i = 0; i < nmap; i++) {
			pairs[i].oldUuid = map[i].from;
			pairs[i].newUuid = map[i].to;
		}
	}
	int first = 0;
	for (size_t i = 0; i < n; i++) {
		CUprocessState st = CU_PROCESS_STATE_RUNNING;
		rc = cudrv_check(d, d->CheckpointProcessGetState(pids[i], &st), "cuCheckpointProcessGetState");
		if (rc == 0 && st == CU_PROCESS_STATE_CHECKPOINTED) {
			CUcheckpointRestoreArgs ra;
			memset(&ra, 0, sizeof(ra));
			ra.gpuPairs = pairs;
			ra.gpuPairsCount = (unsigned)nmap;
			rc = cudrv_check(d, d->CheckpointProcessRestore(pids[i], &ra), "cuCheckpointProcessRestore");
		}
		if (rc == 0 && (st == CU_PROCESS_STATE_CHECKPOINTED || st == CU_PROCESS_STATE_LOCKED)) {
			CUcheckpointUnlockArgs ua;
			memset(&ua, 0, sizeof(ua));
			rc = cudrv_check(d, d->CheckpointProcessUnlock(pids[i], &ua), "cuCheckpointProcessUnlock");
		}
		if (rc < 0 && !first)
			first = pid_err(rc, pids[i], "restoring");
	}
	free(pairs);
	return first;
}

/* Whether every process runs, as far as the driver says. */
static bool all_running(const struct cudrv *d, const pid_t *pids, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		CUprocessState st = CU_PROCESS_STATE_RUNNING;
		if (d->CheckpointProcessGetState(pids[i], &st) != CUDA_SUCCESS)
			continue;   /* gone */
		if (st != CU_PROCESS_STATE_RUNNING)
			return false;
	}
	return true;
}

/* The pids of v[0..n) still alive, moved to its front; how many. A process
 * that has exited has no GPU state left to bring back, and the driver
 * answers for it only with an error. */
static size_t live_first(pid_t *v, size_t n, bool (*gone)(pid_t))
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if ((kill(v[i], 0) == 0 || errno != ESRCH) && !(gone && gone(v[i])))
			v[k++] = v[i];
	return k;
}

int gpuckpt_settle(const struct cudrv *d, const pid_t *pids, size_t n, const struct gpuckpt_map *map,
		   size_t nmap, unsigned settle_ms, unsigned max_s, bool (*gone)(pid_t))
{
	if (!n)
		return 0;
	pid_t *live = malloc(n * sizeof(*live));
	if (!live)
		return crest_errf(-ENOMEM, "the CUDA processes to bring back");
	memcpy(live, pids, n * sizeof(*live));
	const uint64_t deadline = time_now_ns() + (uint64_t)max_s * 1000000000ull;
	unsigned stable = 0;
	int rc = 0;
	while (stable < settle_ms && time_now_ns() < deadline) {
		/* Only the ones still there: one that exited meanwhile would
		 * fail every round, and the rest never count as settled. */
		n = live_first(live, n, gone);
		rc = gpuckpt_resume(d, live, n, map, nmap);
		stable = rc == 0 && all_running(d, live, n) ? stable + 100 : 0;
		const struct timespec ms100 = { 0, 100 * 1000 * 1000 };
		nanosleep(&ms100, NULL);
	}
	free(live);
	return rc;
}

int gpuckpt_guard_settle(const pid_t *pids, size_t n, const struct gpuckpt_map *map, size_t nmap,
			 bool (*gone)(pid_t))
{
	if (!n)
		return 0;
	const struct cudrv *d = NULL;
	const int rc = cudrv_load(&d);
	return rc < 0 ? rc : gpuckpt_settle(d, pids, n, map, nmap, GPUCKPT_GUARD_SETTLE_MS, GPUCKPT_GUARD_MAX_S, gone);
}

int gpuckpt_parse_uuid(const char *s, CUuuid *u)
{
	if (!strncmp(s, "GPU-", 4))
		s += 4;
	size_t k = 0;
	for (; *s && k < 16; s++) {
		if (*s == '-')
			continue;
		unsigned v;
		if (sscanf(s, "%2x", &v) != 1 || !s[1])
			return crest_errx(-EINVAL, "bad GPU UUID");
		u->bytes[k++] = (char)v;
		s++;
	}
	if (k != 16 || *s)
		return crest_errx(-EINVAL, "bad GPU UUID: want GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx");
	return 0;
}
