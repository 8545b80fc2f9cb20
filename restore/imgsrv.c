/* imgsrv.c - CRIU's images served from the store; see imgsrv.h. */
#include "restore/imgsrv.h"
#include "os/criustream.h"
#include "util/err.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct sender {
	struct imgsrv *s;
	const struct cas_stream *st;
	int fd;                      /* the pipe's write end, from CRIU */
	bool progress;               /* drives the progress line */
	pthread_t t;
	int rc;
	char msg[1024];
	struct sender *next;
};

struct imgsrv {
	struct restore_ctx c;        /* progress off: one sender drives it */
	const struct cas_manifest *m;
	const struct cas_stream *largest;
	struct cas_reader *rd;       /* shared by every image's threads */
	int lfd;                     /* listening */
	int stop[2];                 /* imgsrv_finish writes a byte: the server ends */
	pthread_t t;
	bool running;
	pthread_mutex_t lock;        /* senders, the server's error, conn */
	int conn;                    /* CRIU's connection, -1 before and after */
	struct sender *senders;
	int rc;                      /* the server's own failure (protocol, threads) */
	char msg[1024];
	atomic_uint_fast64_t bytes;
};

static void srv_fail(struct imgsrv *s, int rc)
{
	pthread_mutex_lock(&s->lock);
	if (!s->rc) {
		s->rc = rc;
		crest_errcpy(s->msg, sizeof(s->msg));
	}
	pthread_mutex_unlock(&s->lock);
}

static const char *base_of(const char *name)
{
	const char *b = strrchr(name, '/');
	return b ? b + 1 : name;
}

/* The image stream named base, or NULL. */
static const struct cas_stream *image_find(const struct cas_manifest *m, const char *base)
{
	for (size_t i = 0; i < m->nstreams; i++)
		if (m->streams[i].type == CAS_STREAM_IMAGE && !strcmp(base_of(m->streams[i].name), base))
			return &m->streams[i];
	return NULL;
}

/* A reader gone is EPIPE from write() and vmsplice(), not a signal that
 * ends crest: blocked in the calling thread, whose restore threads inherit
 * the mask. */
static void block_sigpipe(void)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
}

static void *sender_main(void *arg)
{
	struct sender *w = arg;
	block_sigpipe();
	struct restore_ctx c = w->s->c;
	c.progress = w->progress ? w->s->c.progress : NULL;
	w->rc = restore_stream_to_pipe(&c, w->st, w->fd);
	if (w->rc < 0)
		crest_errcpy(w->msg, sizeof(w->msg));
	else
		atomic_fetch_add(&w->s->bytes, w->st->size);
	close(w->fd);   /* the end of the image, or, cut short, CRIU's error */
	return NULL;
}

/* One request: the answer, and for an image that exists its sender. */
static int serve_one(struct imgsrv *s, int conn, bool *eof)
{
	char name[NAME_MAX + 1];
	int rc = criustream_request(conn, name, eof);
	if (rc < 0 || *eof)
		return rc;
	const struct cas_stream *st = image_find(s->m, name);
	rc = criustream_reply(conn, st != NULL);
	if (rc < 0 || !st)
		return rc;
	int fd = -1;
	rc = criustream_recv_pipe(conn, &fd);
	if (rc < 0)
		return rc;
	struct sender *w = calloc(1, sizeof(*w));
	if (!w) {
		close(fd);
		return crest_errf(-ENOMEM, "serving image %s", name);
	}
	*w = (struct sender){ .s = s, .st = st, .fd = fd };
	pthread_mutex_lock(&s->lock);
	/* The first sender of the largest image drives the progress line:
	 * one thread may, and that image is the restore's time. */
	if (st == s->largest && s->c.progress) {
		w->progress = true;
		s->largest = NULL;
	}
	const int prc = pthread_create(&w->t, NULL, sender_main, w);
	if (prc == 0) {
		w->next = s->senders;
		s->senders = w;
	}
	pthread_mutex_unlock(&s->lock);
	if (prc != 0) {
		close(fd);
		free(w);
		return crest_errf(-prc, "starting a thread to send image %s", name);
	}
	return 0;
}

/* Waits for fd to be readable; false when imgsrv_finish said stop. */
static bool wait_for(struct imgsrv *s, int fd)
{
	for (;;) {
		struct pollfd p[2] = { { .fd = fd, .events = POLLIN }, { .fd = s->stop[0], .events = POLLIN } };
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return false;
		}
		if (p[1].revents)
			return false;
		if (p[0].revents)
			return true;
	}
}

static void *server_main(void *arg)
{
	struct imgsrv *s = arg;
	block_sigpipe();
	/* CRIU connects once, early; its processes share that connection,
	 * which ends when the last of them has exited or become the job. */
	if (!wait_for(s, s->lfd))
		return NULL;
	int conn;
	do
		conn = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
	while (conn < 0 && errno == EINTR);
	if (conn < 0) {
		srv_fail(s, crest_errf(-errno, "accepting criu's connection for images"));
		return NULL;
	}
	pthread_mutex_lock(&s->lock);
	s->conn = conn;   /* imgsrv_finish shuts it down: a read cut short ends */
	pthread_mutex_unlock(&s->lock);
	while (wait_for(s, conn)) {
		bool eof = false;
		const int rc = serve_one(s, conn, &eof);
		if (rc < 0) {
			srv_fail(s, rc);
			break;   /* closing the connection fails CRIU's next request */
		}
		if (eof)
			break;
	}
	pthread_mutex_lock(&s->lock);
	s->conn = -1;
	close(conn);
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

int imgsrv_start(const struct restore_ctx *c, const struct cas_manifest *m, const char *dir,
		 struct imgsrv **out)
{
	*out = NULL;
	struct imgsrv *s = calloc(1, sizeof(*s));
	if (!s)
		return crest_errf(-ENOMEM, "serving images");
	s->c = *c;
	s->m = m;
	s->lfd = s->conn = -1;
	s->stop[0] = s->stop[1] = -1;
	pthread_mutex_init(&s->lock, NULL);
	for (size_t i = 0; i < m->nstreams; i++)
		if (m->streams[i].type == CAS_STREAM_IMAGE && (!s->largest || m->streams[i].size > s->largest->size))
			s->largest = &m->streams[i];
	int rc = c->reader ? 0 : cas_reader_open(c->store, &s->rd);
	if (rc == 0 && !c->reader)
		s->c.reader = s->rd;
	if (rc == 0 && pipe2(s->stop, O_CLOEXEC) < 0)
		rc = crest_errf(-errno, "serving images");
	if (rc == 0)
		rc = criustream_listen(dir, CRIUSTREAM_SERVE_SOCKET, &s->lfd);
	if (rc == 0) {
		const int prc = pthread_create(&s->t, NULL, server_main, s);
		if (prc != 0)
			rc = crest_errf(-prc, "starting the image server");
		s->running = prc == 0;
	}
	if (rc < 0) {
		imgsrv_finish(s, NULL);
		return rc;
	}
	*out = s;
	return 0;
}

int imgsrv_finish(struct imgsrv *s, uint64_t *bytes)
{
	if (bytes)
		*bytes = 0;
	if (!s)
		return 0;
	if (s->running) {
		const char b = 1;
		ssize_t w;
		do
			w = write(s->stop[1], &b, 1);
		while (w < 0 && errno == EINTR);
		/* CRIU has exited; a request it left half sent (its length and
		 * body are two writes) must not hold the server in read(). */
		pthread_mutex_lock(&s->lock);
		if (s->conn >= 0)
			shutdown(s->conn, SHUT_RDWR);
		pthread_mutex_unlock(&s->lock);
		pthread_join(s->t, NULL);
	}
	/* CRIU has exited, so every pipe's reader is closed: each sender ends,
	 * done or with EPIPE. The first real failure is the one to report. */
	int rc = s->rc;
	char msg[1400];
	snprintf(msg, sizeof(msg), "%s", s->msg);
	for (struct sender *w = s->senders, *next; w; w = next) {
		next = w->next;
		pthread_join(w->t, NULL);
		/* A reader gone (EPIPE) follows from CRIU's end, early or
		 * failed: CRIU's own error says why. A damaged chunk or a read
		 * error is the news whatever CRIU did. */
		if (w->rc < 0 && w->rc != -EPIPE && !rc) {
			rc = w->rc;
			snprintf(msg, sizeof(msg), "image %s: %s", base_of(w->st->name), w->msg);
		}
		free(w);
	}
	if (bytes)
		*bytes = atomic_load(&s->bytes);
	if (s->lfd >= 0)
		close(s->lfd);
	for (int i = 0; i < 2; i++)
		if (s->stop[i] >= 0)
			close(s->stop[i]);
	if (s->rd)
		cas_reader_close(s->rd);
	pthread_mutex_destroy(&s->lock);
	free(s);
	if (rc < 0)
		crest_errset_str(msg);
	return rc;
}
