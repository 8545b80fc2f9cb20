/* gpuckpt.c - driver checkpoint of CUDA processes; see gpuckpt.h. */
#include "gpu/gpuckpt.h"
#include "util/err.h"
#include "util/progress.h"

#include <errno.h>
#include <pthread.h>
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


/* ---- one driver call per process, all at once ---- */

enum op { OP_LOCK, OP_CHECKPOINT, OP_RESTORE, OP_UNLOCK };
/* What the driver refuses to save (seen on driver 580: a process with
 * managed memory, whose checkpoint answers CUDA_ERROR_NOT_SUPPORTED) the
 * job can still save itself: said at the end of msg. */
static void unsupported_hint(CUresult r, char *msg, size_t cap)
{
	if (r != CUDA_ERROR_NOT_SUPPORTED)
		return;
	const size_t k = strlen(msg);
	snprintf(msg + k, cap - k, "; the driver cannot checkpoint what this process holds (managed memory, "
		 "cudaMallocManaged, is one such thing): crest's library saves such a job (crest_register with "
		 "CREST_MEM_MANAGED, then crest_checkpoint)");
}

static const char *const op_name[] = { "cuCheckpointProcessLock", "cuCheckpointProcessCheckpoint",
				       "cuCheckpointProcessRestore", "cuCheckpointProcessUnlock" };

/* One process's call. r is CUDA_SUCCESS until the call answers; skip
 * leaves the process out of a round (it failed an earlier step). */
struct call {
	const struct cudrv *d;
	pid_t pid;
	enum op op;
	bool skip;
	unsigned timeout_ms;                 /* OP_LOCK */
	CUcheckpointGpuPair *pairs;          /* OP_RESTORE */
	unsigned npairs;
	CUresult r;
};

static void *call_run(void *arg)
{
	struct call *c = arg;
	if (c->skip)
		return NULL;
	switch (c->op) {
	case OP_LOCK: {
		CUcheckpointLockArgs a;
		memset(&a, 0, sizeof(a));
		a.timeoutMs = c->timeout_ms;
		c->r = c->d->CheckpointProcessLock(c->pid, &a);
		break;
	}
	case OP_CHECKPOINT: {
		CUcheckpointCheckpointArgs a;
		memset(&a, 0, sizeof(a));
		c->r = c->d->CheckpointProcessCheckpoint(c->pid, &a);
		break;
	}
	case OP_RESTORE: {
		CUcheckpointRestoreArgs a;
		memset(&a, 0, sizeof(a));
		a.gpuPairs = c->pairs;
		a.gpuPairsCount = c->npairs;
		c->r = c->d->CheckpointProcessRestore(c->pid, &a);
		break;
	}
	case OP_UNLOCK: {
		CUcheckpointUnlockArgs a;
		memset(&a, 0, sizeof(a));
		c->r = c->d->CheckpointProcessUnlock(c->pid, &a);
		break;
	}
	}
	return NULL;
}

/*
 * Makes op's call for every process of v at once, one thread each, and
 * returns when all have answered: the driver does the work on a thread
 * inside each target, so n processes take about as long as the slowest,
 * not the sum. That matters beyond speed for the ranks of one collective
 * job (NCCL): a rank locked while a peer runs can wait for good on a
 * collective the peer can no longer join (gpuckpt.h). A thread that cannot
 * be started has its call made here, after the others started: slower,
 * never skipped.
 */
static void call_all(struct call *v, size_t n, enum op op)
{
	pthread_t *t = n > 1 ? calloc(n, sizeof(*t)) : NULL;
	bool *started = n > 1 ? calloc(n, sizeof(*started)) : NULL;
	for (size_t i = 0; i < n; i++) {
		v[i].op = op;
		v[i].r = CUDA_SUCCESS;
	}
	for (size_t i = 1; t && started && i < n; i++)
		started[i] = !v[i].skip && pthread_create(&t[i], NULL, call_run, &v[i]) == 0;
	call_run(&v[0]);
	for (size_t i = 1; i < n; i++) {
		if (t && started && started[i])
			pthread_join(t[i], NULL);
		else
			call_run(&v[i]);
	}
	free(t);
	free(started);
}

static uint64_t ms_ns(uint64_t ms)
{
	return ms * 1000000ull;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static const char *cuda_name(CUresult r)
{
	return r == CUDA_ERROR_TIMEOUT ? "CUDA_ERROR_TIMEOUT" : "CUDA_ERROR_NOT_READY";
}

/* A lock that gave up waiting: the process runs on, unlocked. */
static bool lock_busy(CUresult r)
{
	return r == CUDA_ERROR_NOT_READY || r == CUDA_ERROR_TIMEOUT;
}

/* Brings back every process of v, restored where the driver says it is
 * checkpointed, then unlocked where it is locked: how a failed suspend
 * leaves them. Errors here are not reported (the caller's is). */
static void undo_all(const struct cudrv *d, struct call *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		CUprocessState st = CU_PROCESS_STATE_RUNNING;
		v[i].skip = d->CheckpointProcessGetState(v[i].pid, &st) != CUDA_SUCCESS ||
			    st != CU_PROCESS_STATE_CHECKPOINTED;
	}
	call_all(v, n, OP_RESTORE);
	for (size_t i = 0; i < n; i++) {
		CUprocessState st = CU_PROCESS_STATE_RUNNING;
		v[i].skip = d->CheckpointProcessGetState(v[i].pid, &st) != CUDA_SUCCESS ||
			    st != CU_PROCESS_STATE_LOCKED;
	}
	call_all(v, n, OP_UNLOCK);
}

int gpuckpt_suspend(const struct cudrv *d, const pid_t *pids, size_t n, unsigned timeout_ms, unsigned within_ms,
		    uint64_t *lock_ns, uint64_t *ckpt_ns)
{
	int rc = cudrv_need_checkpoint(d);
	if (rc < 0)
		return rc;
	if (!n)
		return 0;
	struct call *v = calloc(n, sizeof(*v));
	if (!v)
		return crest_errf(-ENOMEM, "locking %zu CUDA processes", n);
	for (size_t i = 0; i < n; i++) {
		v[i].d = d;
		v[i].pid = pids[i];
	}
	const uint64_t t0 = time_now_ns(), deadline = t0 + ms_ns(within_ms);
	unsigned tries = 0, pause = 50, seed = (unsigned)t0 ^ (unsigned)pids[0];
	/* All locked in one round, or none: a lock that gave up waiting
	 * (NOT_READY, TIMEOUT) is, for the ranks of a collective job, one whose
	 * peer was locked first while a collective was in flight; the others
	 * are let go at once, so that the collective can end, and all tried
	 * again a moment later, until within_ms has passed. */
	for (;;) {
		tries++;
		uint64_t now = time_now_ns();
		/* No try outlasts the bound: its lock waits for what is left. */
		unsigned t = timeout_ms;
		if (within_ms) {
			const uint64_t left = now + ms_ns(1) < deadline ? (deadline - now) / 1000000ull : 1;
			t = !t || t > left ? (unsigned)left : t;
		}
		for (size_t i = 0; i < n; i++) {
			v[i].skip = false;
			v[i].timeout_ms = t;
		}
		call_all(v, n, OP_LOCK);
		size_t bad = n, busy = 0;
		for (size_t i = 0; i < n; i++) {
			busy += lock_busy(v[i].r);
			if (v[i].r != CUDA_SUCCESS && (bad == n || (lock_busy(v[bad].r) && !lock_busy(v[i].r))))
				bad = i;   /* the first failure, one not busy before busy ones */
		}
		if (bad == n)
			break;
		const pid_t who = v[bad].pid;
		const CUresult why = v[bad].r;
		for (size_t i = 0; i < n; i++)
			v[i].skip = v[i].r != CUDA_SUCCESS;
		call_all(v, n, OP_UNLOCK);
		for (size_t i = 0; i < n; i++) {
			CUprocessState st = CU_PROCESS_STATE_RUNNING;
			if (!v[i].skip && v[i].r != CUDA_SUCCESS &&
			    d->CheckpointProcessGetState(v[i].pid, &st) == CUDA_SUCCESS && st == CU_PROCESS_STATE_LOCKED) {
				/* Not one to retry over: it holds the job. (One
				 * that exited meanwhile holds nothing.) */
				rc = pid_err(cudrv_check(d, v[i].r, op_name[OP_UNLOCK]), v[i].pid,
					     "unlocking after a failed lock");
				free(v);
				return rc;
			}
		}
		now = time_now_ns();
		if (!lock_busy(why) || !within_ms || now + ms_ns(pause) >= deadline) {
			rc = cudrv_check(d, why, op_name[OP_LOCK]);
			if (lock_busy(why) && within_ms)
				crest_errx(-ETIMEDOUT, "could not lock all %zu CUDA processes at once within %u ms "
					   "(%u tries, --lock-timeout %u ms each): the lock of pid %d%s answered %s, as when a "
					   "collective (NCCL) is in flight while a peer rank is already locked; every "
					   "process was unlocked and the job runs on: checkpoint again, or allow longer "
					   "with --lock-within", n, within_ms, tries, timeout_ms, (int)who,
					   busy > 1 ? " (and others)" : "", cuda_name(why));
			else if (lock_busy(why))
				crest_errx(-ETIMEDOUT, "could not lock all %zu CUDA processes at once (one try of %u ms): "
					   "the lock of pid %d answered %s; every process was unlocked and the job runs on",
					   n, timeout_ms, (int)who, cuda_name(why));
			else {
				crest_errctx(rc, "locking CUDA process %d (every process was unlocked; the job runs on)",
					     (int)who);
				char msg[1024];
				crest_errcpy(msg, sizeof(msg));
				unsupported_hint(why, msg, sizeof(msg));
				crest_errset_str(msg);
			}
			free(v);
			return lock_busy(why) ? -ETIMEDOUT : rc;
		}
		/* A quiet moment is not visible from here: wait a little, longer
		 * each time and jittered, so as not to keep landing on the same
		 * phase of a job that runs collectives at a steady rate. */
		sleep_ms(pause / 2 + (unsigned)rand_r(&seed) % (pause / 2 + 1));
		pause = pause < 800 ? pause * 2 : 1000;
	}
	const uint64_t t1 = time_now_ns();
	for (size_t i = 0; i < n; i++)
		v[i].skip = false;
	call_all(v, n, OP_CHECKPOINT);
	size_t bad = n;
	for (size_t i = 0; i < n && bad == n; i++)
		if (v[i].r != CUDA_SUCCESS)
			bad = i;
	if (bad < n) {
		rc = pid_err(cudrv_check(d, v[bad].r, op_name[OP_CHECKPOINT]), v[bad].pid, "checkpointing");
		/* Leave every process as it was: restored and unlocked. */
		char msg[1024];
		crest_errcpy(msg, sizeof(msg));
		unsupported_hint(v[bad].r, msg, sizeof(msg));
		for (size_t i = 0; i < n; i++)
			v[i].skip = false;
		undo_all(d, v, n);
		crest_errset_str(msg);
		free(v);
		return rc;
	}
	if (lock_ns)
		*lock_ns = t1 - t0;
	if (ckpt_ns)
		*ckpt_ns = time_now_ns() - t1;
	free(v);
	return 0;
}

int gpuckpt_resume(const struct cudrv *d, const pid_t *pids, size_t n, const struct gpuckpt_map *map,
		   size_t nmap)
{
	int rc = cudrv_need_checkpoint(d);
	if (rc < 0)
		return rc;
	if (!n)
		return 0;
	CUcheckpointGpuPair *pairs = nmap ? calloc(nmap, sizeof(*pairs)) : NULL;
	struct call *v = calloc(n, sizeof(*v));
	if ((nmap && !pairs) || !v) {
		free(pairs);
		free(v);
		return crest_errf(-ENOMEM, "restoring %zu CUDA processes", n);
	}
	for (size_t i = 0; i < nmap; i++) {
		pairs[i].oldUuid = map[i].from;
		pairs[i].newUuid = map[i].to;
	}
	/* Each process as the driver has it: restored if checkpointed, then
	 * unlocked if locked; all restores at once, then all unlocks at once,
	 * so that the ranks of one job start again together. */
	CUresult *st_r = calloc(n, sizeof(*st_r));
	CUprocessState *st = calloc(n, sizeof(*st));
	if (!st_r || !st) {
		free(pairs);
		free(v);
		free(st_r);
		free(st);
		return crest_errf(-ENOMEM, "restoring %zu CUDA processes", n);
	}
	for (size_t i = 0; i < n; i++) {
		v[i].d = d;
		v[i].pid = pids[i];
		v[i].pairs = pairs;
		v[i].npairs = (unsigned)nmap;
		st[i] = CU_PROCESS_STATE_RUNNING;
		st_r[i] = d->CheckpointProcessGetState(pids[i], &st[i]);
		v[i].skip = st_r[i] != CUDA_SUCCESS || st[i] != CU_PROCESS_STATE_CHECKPOINTED;
	}
	call_all(v, n, OP_RESTORE);
	CUresult *rest_r = calloc(n, sizeof(*rest_r));
	for (size_t i = 0; rest_r && i < n; i++) {
		rest_r[i] = v[i].r;
		v[i].skip = st_r[i] != CUDA_SUCCESS || v[i].r != CUDA_SUCCESS ||
			    (st[i] != CU_PROCESS_STATE_CHECKPOINTED && st[i] != CU_PROCESS_STATE_LOCKED);
	}
	if (rest_r)
		call_all(v, n, OP_UNLOCK);
	int first = rest_r ? 0 : crest_errf(-ENOMEM, "restoring %zu CUDA processes", n);
	for (size_t i = 0; rest_r && i < n && !first; i++) {
		const char *what = op_name[OP_UNLOCK];
		CUresult r = v[i].r;
		if (st_r[i] != CUDA_SUCCESS) {
			what = "cuCheckpointProcessGetState";
			r = st_r[i];
		} else if (rest_r[i] != CUDA_SUCCESS) {
			what = op_name[OP_RESTORE];
			r = rest_r[i];
		}
		if (r != CUDA_SUCCESS)
			first = pid_err(cudrv_check(d, r, what), pids[i], "restoring");
	}
	free(rest_r);
	free(st_r);
	free(st);
	free(pairs);
	free(v);
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
