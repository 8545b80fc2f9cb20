/* imgsrv.c - CRIU's images served from the store; see imgsrv.h. */
#include "restore/imgsrv.h"
#include "os/criustream.h"
#include "util/err.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
	struct criustream_server srv; /* its failure: the protocol's, a thread's */
	pthread_mutex_t lock;        /* senders */
	struct sender *senders;
	atomic_uint_fast64_t bytes;
};

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
static int serve_one(void *arg, int conn, bool *eof)
{
	struct imgsrv *s = arg;
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

int imgsrv_start(const struct restore_ctx *c, const struct cas_manifest *m, const char *dir,
		 struct imgsrv **out)
{
	*out = NULL;
	struct imgsrv *s = calloc(1, sizeof(*s));
	if (!s)
		return crest_errf(-ENOMEM, "serving images");
	s->c = *c;
	s->m = m;
	pthread_mutex_init(&s->lock, NULL);
	for (size_t i = 0; i < m->nstreams; i++)
		if (m->streams[i].type == CAS_STREAM_IMAGE && (!s->largest || m->streams[i].size > s->largest->size))
			s->largest = &m->streams[i];
	int rc = c->reader ? 0 : cas_reader_open(c->store, &s->rd);
	if (rc == 0 && !c->reader)
		s->c.reader = s->rd;
	/* Restore side: once CRIU is gone, what it asked for is nobody's. */
	if (rc == 0)
		rc = criustream_server_start(&s->srv, dir, CRIUSTREAM_SERVE_SOCKET, serve_one, s, false);
	if (rc < 0) {
		char msg[1024];
		crest_errcpy(msg, sizeof(msg));
		imgsrv_finish(s, NULL);
		crest_errset_str(msg);
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
	/* CRIU has exited, so every pipe's reader is closed: each sender ends,
	 * done or with EPIPE. The first real failure is the one to report:
	 * the server's own, else a sender's. */
	int rc = criustream_server_stop(&s->srv);
	char msg[1400];
	snprintf(msg, sizeof(msg), "%s", rc < 0 ? s->srv.msg : "");
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
	if (s->rd)
		cas_reader_close(s->rd);
	pthread_mutex_destroy(&s->lock);
	free(s);
	if (rc < 0)
		crest_errset_str(msg);
	return rc;
}
