/*
 * test_pipe.c - restore_stream_to_pipe against a reader that takes its
 * time, in random bites, with random pauses, and sometimes goes away early.
 *
 *   test_pipe STORE SNAPSHOT OUTDIR SEED
 *
 * Every stream of SNAPSHOT goes through a pipe into OUTDIR/<stream index>;
 * the script compares each with the file that was put. The pipe takes the
 * restore's buffers by reference (vmsplice), so a buffer reused before the
 * reader took its pages would show up here as wrong bytes. In one stream of
 * three (by SEED; at least one a run) the reader stops after a random number of bytes and
 * closes its end: the restore must then fail with -EPIPE, not hang, and
 * that stream's output is removed so the script does not compare it.
 */
#include "cas/cas.h"
#include "restore/restore.h"
#include "tests/check.h"
#include "util/err.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct sender {
	struct restore_ctx c;
	const struct cas_stream *st;
	int fd;
	int rc;
	char msg[1024];
};

static void *send_main(void *arg)
{
	struct sender *s = arg;
	s->rc = restore_stream_to_pipe(&s->c, s->st, s->fd);
	if (s->rc < 0)
		crest_errcpy(s->msg, sizeof(s->msg));
	close(s->fd);
	return NULL;
}

static uint64_t rng;   /* check_rnd's state, from the printed seed */

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: test_pipe STORE SNAPSHOT OUTDIR SEED\n");
		return 2;
	}
	rng = strtoull(argv[4], NULL, 10) * 2654435761u + 1;
	printf("test_pipe: seed %s\n", argv[4]);
	/* EPIPE, not a signal, when the reader goes: as imgsrv does. */
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	struct cas_store *s;
	uint8_t id[32];
	struct cas_manifest *m;
	int rc = cas_open(argv[1], CAS_READ, &s);
	if (rc == 0)
		rc = cas_snapshot_resolve(s, argv[2], id);
	if (rc == 0)
		rc = cas_manifest_load(s, id, &m);
	if (rc < 0) {
		fprintf(stderr, "test_pipe: %s\n", crest_errmsg());
		return 1;
	}
	int bad = 0, quits = 0;
	size_t last_big = 0;   /* the last stream a reader can leave: one does */
	for (size_t i = 0; i < m->nstreams; i++)
		if (m->streams[i].size > 1)
			last_big = i;
	uint8_t *buf = malloc(4u << 20);
	for (size_t i = 0; buf && i < m->nstreams; i++) {
		const struct cas_stream *st = &m->streams[i];
		const bool quit = st->size > 1 && (check_rnd(&rng) % 3 == 0 || (i == last_big && !quits));
		quits += quit;
		const uint64_t quit_at = quit ? check_rnd(&rng) % st->size : 0;
		int p[2];
		if (pipe(p) < 0) {
			perror("pipe");
			return 1;
		}
		char path[4096];
		snprintf(path, sizeof(path), "%s/%zu", argv[3], i);
		FILE *out = fopen(path, "wb");
		if (!out) {
			perror(path);
			return 1;
		}
		struct sender sd = { .c = { .store = s, .snapshot = argv[2], .threads = 2 + check_rnd(&rng) % 3 },
				     .st = st, .fd = p[1] };
		pthread_t t;
		if (pthread_create(&t, NULL, send_main, &sd) != 0) {
			perror("pthread_create");
			return 1;
		}
		/* A reader that starts late, in one stream of three: the
		 * threads fill the pipe and wait for it with buffers to spare. */
		if (check_rnd(&rng) % 3 == 0) {
			const struct timespec late = { 0, 100 * 1000 * 1000 };
			nanosleep(&late, NULL);
		}
		/* Bites of 1 byte to 4 MiB, skewed small; a pause now and then. */
		uint64_t got = 0;
		for (;;) {
			const unsigned shift = (unsigned)(check_rnd(&rng) % 23);
			size_t want = 1 + (size_t)(check_rnd(&rng) % ((size_t)1 << shift));
			if (quit && want > quit_at - got)
				want = (size_t)(quit_at - got);
			if (quit && got >= quit_at)
				break;
			const ssize_t n = read(p[0], buf, want);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				break;
			fwrite(buf, 1, (size_t)n, out);
			got += (uint64_t)n;
			if (check_rnd(&rng) % 64 == 0) {
				const struct timespec ts = { 0, (long)(check_rnd(&rng) % 3000000) };
				nanosleep(&ts, NULL);
			}
		}
		close(p[0]);
		pthread_join(t, NULL);
		fclose(out);
		if (quit) {
			unlink(path);
			if (sd.rc != -EPIPE) {
				fprintf(stderr, "test_pipe: stream %s: the reader left at %llu of %llu bytes, "
					"and the restore said %d (%s), not -EPIPE\n", st->name,
					(unsigned long long)quit_at, (unsigned long long)st->size, sd.rc, sd.msg);
				bad++;
			}
			printf("stream %zu %s: reader left at %llu of %llu bytes: %s\n", i, st->name,
			       (unsigned long long)quit_at, (unsigned long long)st->size, sd.msg);
		} else if (sd.rc < 0 || got != st->size) {
			fprintf(stderr, "test_pipe: stream %s: %llu of %llu bytes, rc %d (%s)\n", st->name,
				(unsigned long long)got, (unsigned long long)st->size, sd.rc, sd.msg);
			bad++;
		} else {
			printf("stream %zu %s: %llu bytes through the pipe\n", i, st->name, (unsigned long long)got);
		}
	}
	free(buf);
	cas_manifest_free(m);
	cas_close(s);
	return bad ? 1 : 0;
}
