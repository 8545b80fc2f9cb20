/*
 * bare_ckpt.c - the baseline crest's stall and restore are measured
 * against: the CUDA driver's checkpoint round trip and CRIU, with nothing of
 * crest's pipeline (no /proc scans, no hook, no store). It does what the
 * notes in shared/ describe by hand, and prints each time as JSON:
 *
 *   crest-bare-ckpt PID DIR [CUDA_PID...]   lock + checkpoint, criu dump
 *                  --leave-running into DIR, restore + unlock (the stall)
 *   crest-bare-ckpt --kill PID DIR          lock + checkpoint, criu dump into
 *                  DIR, the tree killed by criu (what a restore starts from)
 *   crest-bare-ckpt --restore DIR           criu restore from DIR, then the
 *                  driver's restore + unlock of the restored root: the bare
 *                  restore a `crest restore` of the same job is held against
 *
 * DIR on tmpfs; criu from $CREST_CRIU. The tree of PID is dumped; the CUDA
 * processes are CUDA_PID... (the ranks of a job under its launcher), else
 * PID itself, all locked and checkpointed at once as crest does
 * (gpuckpt_suspend); --kill and --restore take a job of one CUDA process,
 * its root. The connections between the tree's processes are dumped
 * (--tcp-established) and deleted files up to 64 MiB kept (--ghost-limit),
 * as crest's checkpoint asks of criu for such a job.
 */
#include "os/criu.h"
#include "gpu/gpuckpt.h"
#include "util/err.h"
#include "util/progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>

static int usage(void)
{
	fprintf(stderr, "usage: crest-bare-ckpt PID DIR [CUDA_PID...] | --kill PID DIR | --restore DIR\n");
	return 2;
}

/* criu restore from dir (detached), then the driver's restore + unlock. */
static int bare_restore(const char *dir)
{
	const struct cudrv *d;
	struct criu criu;
	int rc = cudrv_load(&d);
	if (rc == 0)
		rc = criu_find(&criu);
	/* The restored root is re-parented to us, not to init, and reaped
	 * by nobody: it runs on after this exits, as a crest restore's does. */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	pid_t pid = 0;
	const struct criu_restore_opts o = { .dir = dir, .tcp_established = true, .pid_out = &pid };
	const uint64_t t0 = time_now_ns();
	if (rc == 0)
		rc = criu_restore(&criu, &o);
	const uint64_t t1 = time_now_ns();
	if (rc == 0)
		rc = gpuckpt_resume(d, &pid, 1, NULL, 0);
	const uint64_t t2 = time_now_ns();
	if (rc < 0) {
		fprintf(stderr, "crest-bare-ckpt: %s\n", crest_errmsg());
		return 1;
	}
	printf("{\"pid\": %d, \"criu_restore_seconds\": %.4f, \"driver_restore_unlock_seconds\": %.4f, "
	       "\"restore_seconds\": %.4f}\n", (int)pid, (t1 - t0) / 1e9, (t2 - t1) / 1e9, (t2 - t0) / 1e9);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "--restore"))
		return bare_restore(argv[2]);
	const bool kill = argc > 1 && !strcmp(argv[1], "--kill");
	if (kill && argc != 4)
		return usage();
	if (kill) {
		argv++;
		argc--;
	}
	if (argc < 3 || argc > 3 + 64 || argv[1][0] == '-')
		return usage();
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
	struct criu_dump_opts o = { .pid = pid, .dir = argv[2], .leave_running = !kill, .tcp_established = true,
				     .ghost_limit = 64ull << 20 };
	if (rc == 0)
		rc = criu_dump(&criu, &o);
	uint64_t t2 = time_now_ns();
	/* --kill: the tree is gone once the dump succeeded; a failed dump
	 * leaves it frozen in the driver, which gets it back here. */
	int rrc = kill && rc == 0 ? 0 : gpuckpt_resume(d, cuda, ncuda, NULL, 0);
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
