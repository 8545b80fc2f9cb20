/*
 * test_settle.c - gpuckpt_settle (gpu/gpuckpt.h), what both guards run
 * when crest died inside the driver's calls, against the stateful stand-in
 * driver (fake_libcuda.c, named by CREST_LIBCUDA, set by ctest):
 * live processes left locked or checkpointed are brought back to running,
 * and one that exited meanwhile counts as settled, whether its pid is free
 * or it is a zombie its parent has not reaped (the stand-in, like the real
 * driver, refuses a zombie). Before, a process gone failed every round, so
 * settle spun until its limit and reported failure although every live one
 * was back.
 *
 * Randomized against a model, from a printed seed (SETTLE_SEED replays it):
 * each round has one to six processes, each live, exited and reaped, or a
 * zombie, each left running, locked or checkpointed. Settle must return 0
 * well within its limit with every live one running. In some rounds the
 * driver fails every restore (FAKE_CUDA_FAIL=restore): if a live process
 * was left checkpointed, settle must then report failure, never success.
 */
#include "gpu/gpuckpt.h"
#include "os/proc.h"
#include "tests/check.h"
#include "util/progress.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

/* A child that sleeps until killed. */
static pid_t sleeper(void)
{
	const pid_t p = fork();
	if (p == 0) {
		for (;;)
			pause();
	}
	return p;
}

static void state_set(pid_t pid, int st)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%d", getenv("FAKE_CUDA_STATE"), (int)pid);
	FILE *f = fopen(path, "w");
	if (f) {
		fprintf(f, "%d\n", st);
		fclose(f);
	}
}

/* A child that exits; reaped (its pid free) or left a zombie. */
static pid_t exited(bool reap)
{
	const pid_t p = fork();
	if (p == 0)
		_exit(0);
	if (p > 0 && reap)
		waitpid(p, NULL, 0);
	for (int i = 0; !reap && p > 0 && i < 500 && proc_state(p) != 'Z'; i++)
		usleep(10000);
	return p;
}

enum kind { LIVE, REAPED, ZOMBIE };

static void round_run(const struct cudrv *d, unsigned r, uint64_t *rs)
{
	const unsigned n = 1 + (unsigned)(check_rnd(rs) % 6);
	const bool fail = check_rnd(rs) % 4 == 0;
	pid_t pids[6];
	enum kind kind[6];
	int st0[6];
	bool live_ckpt = false;
	for (unsigned i = 0; i < n; i++) {
		kind[i] = (enum kind)(check_rnd(rs) % 3);
		st0[i] = (int)(check_rnd(rs) % 3);   /* running, locked, checkpointed */
		pids[i] = kind[i] == LIVE ? sleeper() : exited(kind[i] == REAPED);
		OK(pids[i] > 0 ? 0 : -errno);
		if (kind[i] == ZOMBIE)
			CHECK(proc_state(pids[i]) == 'Z', "round %u: child %u is in state '%c', not a zombie", r, i,
			      proc_state(pids[i]));
		if (kind[i] != REAPED)
			state_set(pids[i], st0[i]);
		live_ckpt |= kind[i] == LIVE && st0[i] == CU_PROCESS_STATE_CHECKPOINTED;
	}
	if (fail)
		setenv("FAKE_CUDA_FAIL", "restore", 1);
	const uint64_t t0 = time_now_ns();
	const int rc = gpuckpt_settle(d, pids, n, NULL, 0, 300, fail ? 2 : 10, proc_gone);
	const double s = (double)(time_now_ns() - t0) / 1e9;
	unsetenv("FAKE_CUDA_FAIL");
	char what[64] = "";
	for (unsigned i = 0; i < n; i++)
		snprintf(what + strlen(what), sizeof(what) - strlen(what), "%s%c%d", i ? " " : "", "lrz"[kind[i]],
			 st0[i]);
	if (fail && live_ckpt) {
		CHECK(rc < 0, "round %u (%s, restores failing): settle reported success with a live process "
		      "left checkpointed", r, what);
	} else {
		CHECK(rc == 0, "round %u (%s%s): settle failed after %.1f s: %s", r, what,
		      fail ? ", restores failing" : "", s, crest_errmsg());
		CHECK(s < 5, "round %u (%s): settle took %.1f s (its limit is 10 s)", r, what, s);
		for (unsigned i = 0; i < n; i++) {
			CUprocessState st = CU_PROCESS_STATE_FAILED;
			CHECK(kind[i] != LIVE || (d->CheckpointProcessGetState(pids[i], &st) == CUDA_SUCCESS &&
						  st == CU_PROCESS_STATE_RUNNING),
			      "round %u (%s): live process %u was left in state %d", r, what, i, (int)st);
		}
	}
	for (unsigned i = 0; i < n; i++) {
		if (kind[i] == LIVE)
			kill(pids[i], SIGKILL);
		if (kind[i] != REAPED)
			waitpid(pids[i], NULL, 0);
	}
}

int main(void)
{
	if (!getenv("CREST_LIBCUDA")) {
		fprintf(stderr, "test_settle: run it through ctest (CREST_LIBCUDA names the stand-in driver)\n");
		return 1;
	}
	char dir[] = "/tmp/crest-settle-XXXXXX";
	if (!mkdtemp(dir) || setenv("FAKE_CUDA_STATE", dir, 1) < 0) {
		perror("test_settle: a state directory");
		return 1;
	}
	const char *env = getenv("SETTLE_SEED");
	const uint64_t seed = env ? strtoull(env, NULL, 0) : (time_now_ns() ^ (uint64_t)getpid()) % 1000000007u;
	printf("test_settle: seed %llu (SETTLE_SEED replays it)\n", (unsigned long long)seed);
	fflush(stdout);
	uint64_t rs = seed * 0x9e3779b97f4a7c15ull + 1;
	const struct cudrv *d = NULL;
	OK(cudrv_load(&d));
	const unsigned rounds = 10;
	const uint64_t t0 = time_now_ns();
	for (unsigned r = 0; r < rounds && !failures; r++)
		round_run(d, r, &rs);
	if (!failures)
		printf("test_settle: %u rounds of live, exited and zombie processes settled as the model says, "
		       "in %.1f s\n", rounds, (double)(time_now_ns() - t0) / 1e9);
	char cmd[64];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "test_settle: could not remove %s\n", dir);
	return failures ? 1 : 0;
}
