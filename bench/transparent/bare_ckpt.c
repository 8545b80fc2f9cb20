/*
 * bare_ckpt.c - the baseline crest's stall is measured against: the CUDA
 * driver's checkpoint round trip and a CRIU dump, with nothing of crest's
 * pipeline (no /proc scans, no hook, no store). It does what the notes in
 * shared/ describe by hand: lock + checkpoint, criu dump --leave-running
 * into DIR, restore + unlock, and prints each time as JSON.
 *
 *   crest-bare-ckpt PID DIR [CUDA_PID...]   (DIR on tmpfs; criu from $CREST_CRIU)
 *
 * The tree of PID is dumped; the CUDA processes are CUDA_PID... (the ranks
 * of a job under its launcher), else PID itself, all locked and
 * checkpointed at once as crest does (gpuckpt_suspend). The connections
 * between the tree's processes are dumped (--tcp-established) and deleted
 * files up to 64 MiB kept (--ghost-limit), as crest's checkpoint asks of
 * criu for such a job.
 */
#include "os/criu.h"
#include "gpu/gpuckpt.h"
#include "util/err.h"
#include "util/progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

int main(int argc, char **argv)
{
	if (argc < 3 || argc > 3 + 64) {
		fprintf(stderr, "usage: crest-bare-ckpt PID DIR [CUDA_PID...]\n");
		return 2;
	}
	pid_t pid = (pid_t)atoi(argv[1]);
	pid_t cuda[64];
	size_t ncuda = 0;
	for (int i = 3; i < argc; i++)
		cuda[ncuda++] = (pid_t)atoi(argv[i]);
	if (!ncuda)
		cuda[ncuda++] = pid;
	const struct cudrv *d;
	struct criu criu;
	int rc = cudrv_load(&d);
	if (rc == 0)
		rc = criu_find(&criu);
	if (rc == 0 && mkdir(argv[2], 0700) < 0)
		rc = crest_errf(-1, "cannot create %s", argv[2]);
	if (rc < 0) {
		fprintf(stderr, "crest-bare-ckpt: %s\n", crest_errmsg());
		return 1;
	}
	uint64_t lock_ns = 0, ckpt_ns = 0;
	uint64_t t0 = time_now_ns();
	rc = gpuckpt_suspend(d, cuda, ncuda, 0, 0, &lock_ns, &ckpt_ns);
	uint64_t t1 = time_now_ns();
	struct criu_dump_opts o = { .pid = pid, .dir = argv[2], .leave_running = true, .tcp_established = true,
				     .ghost_limit = 64ull << 20 };
	if (rc == 0)
		rc = criu_dump(&criu, &o);
	uint64_t t2 = time_now_ns();
	int rrc = gpuckpt_resume(d, cuda, ncuda, NULL, 0);
	uint64_t t3 = time_now_ns();
	if (rc < 0 || rrc < 0) {
		fprintf(stderr, "crest-bare-ckpt: %s\n", crest_errmsg());
		return 1;
	}
	printf("{\"lock_seconds\": %.4f, \"checkpoint_seconds\": %.4f, \"criu_dump_seconds\": %.4f, "
	       "\"restore_unlock_seconds\": %.4f, \"driver_round_trip_seconds\": %.4f, \"stall_seconds\": %.4f}\n",
	       lock_ns / 1e9, ckpt_ns / 1e9, (t2 - t1) / 1e9, (t3 - t2) / 1e9, (t1 - t0 + t3 - t2) / 1e9,
	       (t3 - t0) / 1e9);
	return 0;
}
