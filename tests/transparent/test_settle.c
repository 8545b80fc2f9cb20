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
 */
#include "gpu/gpuckpt.h"
#include "os/proc.h"
#include "tests/check.h"
#include "util/progress.h"

#include <signal.h>
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
	const struct cudrv *d = NULL;
	OK(cudrv_load(&d));
	/* Two live processes, one checkpointed and one locked, a third that
	 * has exited (reaped: its pid is free), and a fourth that has exited
	 * and is not reaped yet (a zombie, left checkpointed). */
	pid_t pids[4] = { sleeper(), sleeper(), fork(), 0 };
	if (pids[2] == 0)
		_exit(0);
	waitpid(pids[2], NULL, 0);
	if ((pids[3] = fork()) == 0)
		_exit(0);
	for (int i = 0; i < 500 && proc_state(pids[3]) != 'Z'; i++)
		usleep(10000);
	CHECK(proc_state(pids[3]) == 'Z', "the fourth child is in state '%c', not a zombie", proc_state(pids[3]));
	state_set(pids[0], CU_PROCESS_STATE_CHECKPOINTED);
	state_set(pids[1], CU_PROCESS_STATE_LOCKED);
	state_set(pids[3], CU_PROCESS_STATE_CHECKPOINTED);
	const uint64_t t0 = time_now_ns();
	const int rc = gpuckpt_settle(d, pids, 4, NULL, 0, 300, 10, proc_gone);
	const double s = (double)(time_now_ns() - t0) / 1e9;
	CHECK(rc == 0, "settle with processes gone failed after %.1f s: %s", s, crest_errmsg());
	CHECK(s < 5, "settle with processes gone took %.1f s (its limit is 10 s)", s);
	for (int i = 0; i < 2; i++) {
		CUprocessState st = CU_PROCESS_STATE_FAILED;
		CHECK(d->CheckpointProcessGetState(pids[i], &st) == CUDA_SUCCESS && st == CU_PROCESS_STATE_RUNNING,
		      "process %d was left in state %d", i, (int)st);
	}
	if (!failures)
		printf("test_settle: two processes brought back to running, one gone and one a zombie, in %.2f s\n", s);
	kill(pids[0], SIGKILL);
	kill(pids[1], SIGKILL);
	for (int i = 0; i < 4; i++)
		if (i != 2)
			waitpid(pids[i], NULL, 0);
	char cmd[64];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "test_settle: could not remove %s\n", dir);
	return failures ? 1 : 0;
}
