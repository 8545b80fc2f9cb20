/*
 * uring_job - a job that holds an io_uring (or not) and appends a counter
 * to LOG, one line every 20 ms, for transparent/io_uring.sh.
 *
 *   uring_job LOG [--ring both|fd|map|none] [--child] [--thread] [--libcrest STORE]
 *
 * --ring: how the ring is held (raw io_uring_setup, no liburing): both its
 *   descriptor and a mapping of its SQ ring (what liburing does, the
 *   default), the descriptor only (never mapped), the mapping only (the
 *   descriptor closed after the mmap), or no ring at all.
 * --child: a child holds the ring and writes LOG; the process started
 *   waits for it.
 * --thread: a thread with a descriptor table of its own
 *   (unshare(CLONE_FILES)) holds the ring; the main thread writes LOG.
 * --libcrest STORE: no ring of its own; a libcrest handle on STORE takes
 *   one checkpoint and stays open (its store writer's ring with it). Only
 *   in uring_job_crest, the same program linked with libcrest: uring_job
 *   itself does not map libcrest, which crest's refusal mentions.
 *
 * Once the ring is there, prints "ring pid PID tid TID fd FD" on stdout
 * (FD -1: closed; "none": no ring), then starts writing LOG.
 */
#ifdef URING_JOB_LIBCREST
#include <crest.h>
#endif
#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *ring_mode = "both";

static void die(const char *what)
{
	fprintf(stderr, "uring_job: %s: %s\n", what, strerror(errno));
	exit(1);
}

/* Sets up a ring as ring_mode says; prints where it is. */
static void ring_open(void)
{
	if (!strcmp(ring_mode, "none")) {
		printf("ring pid %d tid %d fd none\n", (int)getpid(), (int)gettid());
		fflush(stdout);
		return;
	}
	struct io_uring_params p;
	memset(&p, 0, sizeof(p));
	const int fd = (int)syscall(__NR_io_uring_setup, 4, &p);
	if (fd < 0)
		die("io_uring_setup");
	int shown = fd;
	if (strcmp(ring_mode, "fd")) {
		const size_t len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
		if (mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_SQ_RING) ==
		    MAP_FAILED)
			die("mmap of the SQ ring");
		if (!strcmp(ring_mode, "map")) {
			close(fd);
			shown = -1;
		}
	}
	printf("ring pid %d tid %d fd %d\n", (int)getpid(), (int)gettid(), shown);
	fflush(stdout);
}

static void *ring_thread(void *arg)
{
	(void)arg;
	if (unshare(CLONE_FILES) < 0)
		die("unshare(CLONE_FILES)");
	ring_open();
	for (;;)
		pause();
	return NULL;
}

static void count(const char *log)
{
	const int fd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		die(log);
	for (unsigned long i = 0;; i++) {
		dprintf(fd, "%lu\n", i);
		usleep(20000);
	}
}

#ifdef URING_JOB_LIBCREST
static void libcrest_checkpoint(const char *store)
{
	struct crest_options o;
	crest_options_init(&o);
	o.flags = CREST_OPEN_NO_GPU;
	o.staging_bytes = 8u << 20;
	o.workers = 1;
	crest_t *c;
	static char region[1 << 20];
	memset(region, 7, sizeof(region));
	crest_region_t r;
	crest_ckpt_t h;
	struct crest_result res;
	int rc = crest_open(store, &o, &c);
	if (rc == 0)
		rc = crest_register(c, "region", region, sizeof(region), CREST_MEM_HOST, &r);
	if (rc == 0)
		rc = crest_checkpoint(c, NULL, &h);
	if (rc == 0)
		rc = crest_wait(c, h, &res);
	if (rc < 0) {
		errno = -rc;
		die("libcrest checkpoint");
	}
	printf("libcrest pid %d\n", (int)getpid());   /* the handle stays open */
	fflush(stdout);
}
#else
static void libcrest_checkpoint(const char *store)
{
	(void)store;
	fprintf(stderr, "uring_job: --libcrest is uring_job_crest's\n");
	exit(2);
}
#endif

int main(int argc, char **argv)
{
	bool child = false, thread = false;
	const char *store = NULL;
	if (argc < 2) {
		fprintf(stderr, "usage: uring_job LOG [--ring both|fd|map|none] [--child] [--thread] [--libcrest STORE]\n");
		return 2;
	}
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--ring") && i + 1 < argc) {
			ring_mode = argv[++i];
		} else if (!strcmp(argv[i], "--child")) {
			child = true;
		} else if (!strcmp(argv[i], "--thread")) {
			thread = true;
		} else if (!strcmp(argv[i], "--libcrest") && i + 1 < argc) {
			store = argv[++i];
			ring_mode = "none";
		} else {
			fprintf(stderr, "uring_job: unknown argument %s\n", argv[i]);
			return 2;
		}
	}
	if (child) {
		const pid_t p = fork();
		if (p < 0)
			die("fork");
		if (p > 0) {
			int st;
			while (waitpid(p, &st, 0) < 0 && errno == EINTR)
				;
			return 0;
		}
	}
	if (store)
		libcrest_checkpoint(store);
	if (thread) {
		pthread_t t;
		if ((errno = pthread_create(&t, NULL, ring_thread, NULL)))
			die("pthread_create");
	} else {
		ring_open();
	}
	count(argv[1]);
	return 0;
}
