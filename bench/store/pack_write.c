/*
 * pack_write.c - how to write several pack files at once: the question
 * behind crest's one pack writer (engine/writer.c, cas/pack.c), which is
 * busy for the whole of a first ingest into tmpfs at 2.2 GB/s while tmpfs
 * takes 12 GB/s from eight dds into eight files (bench/RESULTS.md). The
 * same SIZE bytes go into FILES new files in DIR, 4 MiB a write, two ways,
 * each timed alone:
 *
 *   uring    one thread and one io_uring, batches of 32 writes across the
 *            files (file k % FILES), each with IOSQE_ASYNC so the ring's
 *            workers may take different files at once: how crest's writer
 *            would write several packs without more threads;
 *   threads  FILES threads, each pwrite()s its own file.
 *
 *   pack_write DIR SIZE_MIB FILES...
 *
 * One line per way and number of files: "way files seconds GB/s". The files
 * are deleted after each. Every write must complete in full; an error is
 * one line and exit status 1.
 */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BLOCK ((size_t)4 << 20)
#define BATCH 32
#define MAX_FILES 64

static const char *dir;
static uint8_t *buf;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int open_file(unsigned i)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/pack_write.%u", dir, i);
	unlink(path);
	const int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		fprintf(stderr, "pack_write: cannot create %s: %s\n", path, strerror(errno));
	return fd;
}

static void remove_files(unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		char path[4096];
		snprintf(path, sizeof(path), "%s/pack_write.%u", dir, i);
		unlink(path);
	}
}

static int by_uring(unsigned n, size_t blocks)
{
	int fds[MAX_FILES];
	uint64_t off[MAX_FILES] = { 0 };
	for (unsigned i = 0; i < n; i++)
		if ((fds[i] = open_file(i)) < 0)
			return -1;
	struct io_uring r;
	int rc = io_uring_queue_init(2 * BATCH, &r, 0);
	if (rc < 0) {
		fprintf(stderr, "pack_write: io_uring_queue_init: %s\n", strerror(-rc));
		return -1;
	}
	for (size_t b = 0; rc >= 0 && b < blocks; b += BATCH) {
		unsigned k = 0;
		for (size_t j = b; j < blocks && k < BATCH; j++, k++) {
			const unsigned f = (unsigned)(j % n);
			struct io_uring_sqe *sqe = io_uring_get_sqe(&r);
			io_uring_prep_write(sqe, fds[f], buf, (unsigned)BLOCK, off[f]);
			io_uring_sqe_set_flags(sqe, IOSQE_ASYNC);
			off[f] += BLOCK;
		}
		rc = io_uring_submit_and_wait(&r, k);
		for (unsigned g = 0; rc >= 0 && g < k; g++) {
			struct io_uring_cqe *c;
			rc = io_uring_wait_cqe(&r, &c);
			if (rc == 0 && c->res != (int)BLOCK)
				rc = c->res < 0 ? c->res : -EIO;
			if (rc == 0)
				io_uring_cqe_seen(&r, c);
		}
	}
	if (rc < 0)
		fprintf(stderr, "pack_write: uring write: %s\n", strerror(-rc));
	io_uring_queue_exit(&r);
	for (unsigned i = 0; i < n; i++)
		close(fds[i]);
	return rc < 0 ? -1 : 0;
}

struct job {
	unsigned i;
	size_t blocks;
	int err;
};

static void *thread_main(void *arg)
{
	struct job *j = arg;
	const int fd = open_file(j->i);
	if (fd < 0) {
		j->err = errno;
		return NULL;
	}
	for (size_t b = 0; b < j->blocks && !j->err; b++) {
		const ssize_t w = pwrite(fd, buf, BLOCK, (off_t)(b * BLOCK));
		if (w != (ssize_t)BLOCK)
			j->err = w < 0 ? errno : EIO;
	}
	close(fd);
	return NULL;
}

static int by_threads(unsigned n, size_t blocks)
{
	pthread_t t[MAX_FILES];
	struct job j[MAX_FILES];
	unsigned started = 0;
	for (unsigned i = 0; i < n; i++) {
		j[i] = (struct job){ .i = i, .blocks = blocks / n + (i < blocks % n) };
		if (pthread_create(&t[i], NULL, thread_main, &j[i]) != 0)
			break;
		started++;
	}
	int bad = started < n;
	for (unsigned i = 0; i < started; i++) {
		pthread_join(t[i], NULL);
		if (j[i].err) {
			fprintf(stderr, "pack_write: pwrite to file %u: %s\n", i, strerror(j[i].err));
			bad = 1;
		}
	}
	return bad ? -1 : 0;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: pack_write DIR SIZE_MIB FILES...\n");
		return 2;
	}
	dir = argv[1];
	const size_t blocks = ((size_t)strtoull(argv[2], NULL, 10) << 20) / BLOCK;
	if (!blocks || posix_memalign((void **)&buf, 4096, BLOCK) != 0) {
		fprintf(stderr, "pack_write: SIZE_MIB must be at least 4, and the buffer must fit\n");
		return 2;
	}
	memset(buf, 0x5a, BLOCK);
	int status = 0;
	for (int a = 3; a < argc; a++) {
		const unsigned n = (unsigned)atoi(argv[a]);
		if (n < 1 || n > MAX_FILES) {
			fprintf(stderr, "pack_write: FILES must be 1 to %d, not '%s'\n", MAX_FILES, argv[a]);
			return 2;
		}
		for (int way = 0; way < 2; way++) {
			const double t0 = now();
			const int rc = way ? by_threads(n, blocks) : by_uring(n, blocks);
			const double s = now() - t0;
			remove_files(n);
			if (rc < 0) {
				status = 1;
				continue;
			}
			printf("%s %u %.3f %.2f\n", way ? "threads" : "uring", n, s, (double)(blocks * BLOCK) / s / 1e9);
			fflush(stdout);
		}
	}
	return status;
}
