/*
 * nccl_job.c - a NCCL job that knows nothing of crest, for the NCCL shim's
 * test (nccl_shim.sh), linked with the fake libnccl.so.2 (fake_nccl.h).
 *
 *   nccl_job OUTDIR NRANKS STEPS
 *
 * The launcher makes a unique id, forks NRANKS ranks (it makes no
 * communicator itself) and waits for them: 0 when all ended with 0. Rank r
 * makes its communicator, then for each step i makes K all-reduces (sum of
 * int64 vectors whose values depend on i, k and r alone), each followed by
 * a random sleep of 0 to 5 ms and no wait for the others (the ranks drift
 * apart, a call may wait in the fake for a peer's), waits for its stream,
 * checks the results and appends "step i sum CHECKSUM" to OUTDIR/rankR.log
 * (one descriptor, open for the whole run), and sleeps 20 ms. What it logs
 * depends on NRANKS and STEPS only: an uninterrupted run's logs are the
 * reference for a checkpointed and restored one.
 */
#include "fake_nccl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define K 3
#define LEN 16

static void die(int rank, const char *what, const char *why)
{
	fprintf(stderr, "nccl_job: rank %d: %s: %s\n", rank, what, why);
	exit(2);
}

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* Rank r's value j of call k of step i. */
static int64_t value(int i, int k, int r, int j)
{
	return (int64_t)(mix(((uint64_t)i << 32) ^ ((uint64_t)k << 24) ^ ((uint64_t)r << 16) ^ (uint64_t)j) >> 8);
}

static void sleep_us(long us)
{
	struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static void write_all(int fd, const char *buf, size_t n, int rank)
{
	while (n > 0) {
		ssize_t w = write(fd, buf, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			die(rank, "write to the log", strerror(errno));
		buf += w;
		n -= (size_t)w;
	}
}

static int run_rank(const char *outdir, int n, int steps, ncclUniqueId id, int r)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/rank%d.log", outdir, r);
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0)
		die(r, path, strerror(errno));
	srand((unsigned)time(NULL) ^ (unsigned)getpid());
	ncclComm_t comm;
	ncclResult_t rc = ncclCommInitRank(&comm, n, id, r);
	if (rc != ncclSuccess)
		die(r, "ncclCommInitRank", ncclGetErrorString(rc));
	int cnt = -1, me = -1;
	if (ncclCommCount(comm, &cnt) != ncclSuccess || ncclCommUserRank(comm, &me) != ncclSuccess ||
	    cnt != n || me != r)
		die(r, "ncclCommCount/ncclCommUserRank", "the communicator is not the one made");
	static struct CUstream_st stream;   /* the job's stream, zeroed */
	static int64_t send[K][LEN], recv[K][LEN];
	for (int i = 0; i < steps; i++) {
		for (int k = 0; k < K; k++) {
			for (int j = 0; j < LEN; j++) {
				send[k][j] = value(i, k, r, j);
				recv[k][j] = -1;
			}
			rc = ncclAllReduce(send[k], recv[k], LEN, ncclInt64, ncclSum, comm, &stream);
			if (rc != ncclSuccess)
				die(r, "ncclAllReduce", ncclGetErrorString(rc));
			sleep_us(rand() % 5001);
		}
		if (fake_stream_sync(&stream) != 0)
			die(r, "fake_stream_sync", "an all-reduce failed");
		uint64_t sum = 0xcbf29ce484222325ull;
		for (int k = 0; k < K; k++) {
			for (int j = 0; j < LEN; j++) {
				uint64_t want = 0;
				for (int q = 0; q < n; q++)
					want += (uint64_t)value(i, k, q, j);
				if ((uint64_t)recv[k][j] != want) {
					char why[128];
					snprintf(why, sizeof why, "step %d call %d element %d: %lld, not %lld", i, k, j,
						 (long long)recv[k][j], (long long)want);
					die(r, "wrong all-reduce result", why);
				}
				sum = (sum ^ (uint64_t)recv[k][j]) * 0x100000001b3ull;
			}
		}
		char line[96];
		int len = snprintf(line, sizeof line, "step %d sum %016llx\n", i, (unsigned long long)sum);
		write_all(fd, line, (size_t)len, r);
		sleep_us(20000);
	}
	rc = ncclCommDestroy(comm);
	if (rc != ncclSuccess)
		die(r, "ncclCommDestroy", ncclGetErrorString(rc));
	close(fd);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: nccl_job OUTDIR NRANKS STEPS\n");
		return 2;
	}
	int n = atoi(argv[2]), steps = atoi(argv[3]);
	if (n < 1 || n > FAKE_MAX_RANKS || steps < 0) {
		fprintf(stderr, "nccl_job: NRANKS 1 to %d, STEPS at least 0\n", FAKE_MAX_RANKS);
		return 2;
	}
	ncclUniqueId id;
	ncclResult_t rc = ncclGetUniqueId(&id);
	if (rc != ncclSuccess)
		die(-1, "ncclGetUniqueId", ncclGetErrorString(rc));
	pid_t pids[FAKE_MAX_RANKS];
	for (int r = 0; r < n; r++) {
		pids[r] = fork();
		if (pids[r] < 0)
			die(-1, "fork", strerror(errno));
		if (pids[r] == 0)
			exit(run_rank(argv[1], n, steps, id, r));
	}
	int bad = 0;
	for (int r = 0; r < n; r++) {
		int st;
		while (waitpid(pids[r], &st, 0) < 0) {
			if (errno != EINTR)
				die(-1, "waitpid", strerror(errno));
		}
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			fprintf(stderr, "nccl_job: rank %d ended with status 0x%x\n", r, st);
			bad = 1;
		}
	}
	return bad;
}
