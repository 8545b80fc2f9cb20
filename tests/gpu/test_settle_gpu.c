/*
 * test_settle_gpu.c - gpuckpt_settle (gpu/gpuckpt.h) against the real
 * driver, with a CUDA process that has exited but is not yet reaped (a
 * zombie) beside a live one. A zombie has given back its memory and its
 * GPU contexts; nothing of it can be brought back. The guards' settle had
 * counted it alive (kill(pid, 0) succeeds on a zombie) and asked the driver
 * about it every round: if the driver refuses a zombie, settle never
 * settles and reports failure after its limit, with every live process
 * back. The test prints what the driver says of both processes, so the
 * stand-in driver of the CI tests (tests/transparent/fake_libcuda.c) can
 * be held to the real one.
 *
 * Skips (77) only where there is no NVIDIA GPU (tests/gpu_here.h).
 */
#include "gpu/cudrv.h"
#include "gpu/gpuckpt.h"
#include "os/proc.h"
#include "tests/check.h"
#include "tests/gpu_here.h"
#include "util/progress.h"

#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

/* A child that makes a CUDA context and holds 64 MiB of device memory,
 * says so on ready, then exits (zombie) or sleeps until killed. The
 * parent must not have touched CUDA before the fork. */
static pid_t cuda_child(bool stay, int *ready_fd)
{
	int p[2];
	if (pipe(p) < 0)
		return -1;
	const pid_t pid = fork();
	if (pid == 0) {
		close(p[0]);
		const struct cudrv *d = NULL;
		CUdevice dev;
		CUcontext ctx;
		CUdeviceptr m;
		char ok = 0;
		if (cudrv_load(&d) == 0 && d->Init(0) == CUDA_SUCCESS && d->DeviceGet(&dev, 0) == CUDA_SUCCESS &&
		    d->DevicePrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS && d->CtxSetCurrent(ctx) == CUDA_SUCCESS &&
		    d->MemAlloc(&m, 64u << 20) == CUDA_SUCCESS && d->MemsetD8(m, 7, 64u << 20) == CUDA_SUCCESS &&
		    d->CtxSynchronize() == CUDA_SUCCESS)
			ok = 1;
		if (write(p[1], &ok, 1) != 1)
			_exit(2);
		if (!stay)
			_exit(0);
		for (;;)
			pause();
	}
	close(p[1]);
	*ready_fd = p[0];
	return pid;
}

static bool ready(int fd)
{
	char ok = 0;
	const bool r = read(fd, &ok, 1) == 1 && ok == 1;
	close(fd);
	return r;
}

int main(void)
{
	char why[256];
	if (no_gpu_here(why, sizeof(why))) {
		printf("SKIP: %s\n", why);
		return 77;
	}
	int f1, f2;
	const pid_t live = cuda_child(true, &f1), gone = cuda_child(false, &f2);
	OK(live > 0 && gone > 0 ? 0 : -errno);
	CHECK(ready(f1), "the live child could not make its CUDA context");
	CHECK(ready(f2), "the exiting child could not make its CUDA context");
	/* Let the second become a zombie: exited, not reaped (we are its
	 * parent and do not wait for it yet). */
	for (int i = 0; i < 500 && proc_state(gone) != 'Z'; i++)
		usleep(10000);
	CHECK(proc_state(gone) == 'Z', "the exiting child is in state '%c', not a zombie", proc_state(gone));
	const struct cudrv *d = NULL;
	OK(cudrv_load(&d));
	OK(cudrv_check(d, d->Init(0), "cuInit"));
	CUprocessState st = CU_PROCESS_STATE_FAILED;
	CUresult r = d->CheckpointProcessGetState(live, &st);
	printf("test_settle_gpu: the driver says of the live CUDA process: result %d, state %d\n", (int)r, (int)st);
	CHECK(r == CUDA_SUCCESS && st == CU_PROCESS_STATE_RUNNING, "the live process: result %d, state %d", (int)r,
	      (int)st);
	st = CU_PROCESS_STATE_FAILED;
	r = d->CheckpointProcessGetState(gone, &st);
	const char *name = "?";
	d->GetErrorName(r, &name);
	printf("test_settle_gpu: the driver says of the zombie: result %d (%s), state %d\n", (int)r, name, (int)st);
	/* What the guards do when crest died: settle both. */
	const pid_t pids[2] = { live, gone };
	const uint64_t t0 = time_now_ns();
	const int rc = gpuckpt_settle(d, pids, 2, NULL, 0, 300, 10, proc_gone);
	const double s = (double)(time_now_ns() - t0) / 1e9;
	CHECK(rc == 0, "settle with a zombie beside a live process failed after %.1f s: %s", s, crest_errmsg());
	CHECK(s < 5, "settle with a zombie beside a live process took %.1f s (its limit is 10 s)", s);
	kill(live, SIGKILL);
	waitpid(live, NULL, 0);
	waitpid(gone, NULL, 0);
	if (!failures)
		printf("test_settle_gpu: a live CUDA process and a zombie settled in %.2f s\n", s);
	return failures ? 1 : 0;
}
