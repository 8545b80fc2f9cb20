/*
 * fork_exec - crest's children run criu while other threads of crest go on
 * (RocksDB's, the engine's). Between fork and exec the child may call only
 * what cannot wait on a lock another thread held at the fork: an
 * interposed libc call (this shim, a sanitizer's) may take such a lock, and
 * the child then waits for ever, and crest with it, the job's checkpoint
 * never ending. Under libfaultshim.so, whose open() and close() take a
 * lock, two threads open and close files without pause while the main
 * thread starts "criu --version" ROUNDS times (criu_find, CREST_CRIU set
 * to a stand-in); a round that takes over LIMIT seconds is a hang.
 *
 *   CREST_CRIU=STAND_IN LD_PRELOAD=libfaultshim.so CREST_FAULT_TRACE=/dev/null \
 *       fork_exec ROUNDS LIMIT
 */
#include "os/criu.h"
#include "util/err.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static atomic_int stop;

static void *churn(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		const int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (fd >= 0)
			close(fd);
	}
	return NULL;
}

static void on_alarm(int sig)
{
	(void)sig;
	static const char msg[] = "FAIL: a round of fork and exec hung: the child waits on a lock\n";
	if (write(2, msg, sizeof(msg) - 1) < 0)
		_exit(3);
	_exit(1);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: fork_exec ROUNDS LIMIT\n");
		return 2;
	}
	const int rounds = atoi(argv[1]);
	const unsigned limit = (unsigned)atoi(argv[2]);
	signal(SIGALRM, on_alarm);
	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		if (pthread_create(&t[i], NULL, churn, NULL)) {
			fprintf(stderr, "fork_exec: pthread_create failed\n");
			return 2;
		}
	int rc = 0;
	for (int i = 0; i < rounds && rc == 0; i++) {
		struct criu c;
		alarm(limit);
		rc = criu_find(&c);
		alarm(0);
		if (rc < 0)
			fprintf(stderr, "FAIL: round %d: %s\n", i, crest_errmsg());
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	if (rc == 0)
		printf("PASS: %d rounds of fork and exec beside two threads opening files\n", rounds);
	return rc < 0;
}
