/* imgsrv.c - CRIU's images served from the store; see imgsrv.h. */
#include "restore/imgsrv.h"
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
#include <sys/un.h>
#include <unistd.h>

#define REQ_MAX 4096    /* a request: a file name, well under PATH_MAX */

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

/* Reads exactly n bytes; 0 at a clean end before any byte (*eof set). */
static int read_full(int fd, void *buf, size_t n, bool *eof)
{
	*eof = false;
	for (size_t got = 0; got < n;) {
		const ssize_t r = read(fd, (uint8_t *)buf + got, n - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return crest_errf(-errno, "reading criu's image request");
		if (r == 0) {
			if (got == 0) {
				*eof = true;
				return 0;
			}
			return crest_errx(-EPROTO, "criu's image request ended after %zu of %zu bytes", got, n);
		}
		got += (size_t)r;
	}
	return 0;
}

static int write_full(int fd, const void *buf, size_t n)
{
	for (size_t put = 0; put < n;) {
		const ssize_t r = send(fd, (const uint8_t *)buf + put, n - put, MSG_NOSIGNAL);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return crest_errf(r < 0 ? -errno : -EIO, "answering criu's image request");
		put += (size_t)r;
	}
	return 0;
}

/* A protobuf varint at p[*i] (of n bytes) into *v; -EPROTO past the end or
 * past 64 bits. */
static int varint(const uint8_t *p, size_t n, size_t *i, uint64_t *v)
{
	*v = 0;
	for (unsigned sh = 0;; sh += 7) {
		if (*i >= n || sh > 63)
			return crest_errx(-EPROTO, "criu's image request is malformed");
		*v |= (uint64_t)(p[*i] & 0x7f) << sh;
		if (!(p[(*i)++] & 0x80))
			return 0;
	}
}

/* The file name of an img_streamer_request_entry: field 1, a string (tag
 * 0x0a, a varint length, the bytes). Unknown fields are skipped as
 * protobuf says; the name must be there, without NUL or '/'. */
static int request_name(const uint8_t *p, size_t n, char *name, size_t cap)
{
	bool have = false;
	for (size_t i = 0; i < n;) {
		uint64_t key, v;
		int rc = varint(p, n, &i, &key);
		if (rc < 0)
			return rc;
		const unsigned wt = key & 7;
		if (wt == 0 || wt == 2) {
			if ((rc = varint(p, n, &i, &v)) < 0)
				return rc;
		} else if (wt == 1 || wt == 5) {
			v = wt == 1 ? 8 : 4;
			if (v > n - i)
				return crest_errx(-EPROTO, "criu's image request is malformed");
			i += v;
			continue;
		} else {
			return crest_errx(-EPROTO, "criu's image request is malformed (wire type %u)", wt);
		}
		if (wt == 0)
			continue;
		if (v > n - i)
			return crest_errx(-EPROTO, "criu's image request is malformed");
		if (key >> 3 == 1) {
			if (v >= cap || memchr(p + i, 0, v) || memchr(p + i, '/', v) || v == 0)
				return crest_errx(-EPROTO, "criu asked for an image by an unusable name");
			memcpy(name, p + i, v);
			name[v] = 0;
			have = true;
		}
		i += v;
	}
	return have ? 0 : crest_errx(-EPROTO, "criu's image request names no file");
}

/* The pipe CRIU passes with one byte of data. */
static int recv_pipe(int conn, int *fd)
{
	char byte;
	struct iovec iov = { &byte, 1 };
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			     .msg_controllen = sizeof(u.buf) };
	ssize_t r;
	do
		r = recvmsg(conn, &mh, MSG_CMSG_CLOEXEC);
	while (r < 0 && errno == EINTR);
	if (r <= 0)
		return crest_errf(r < 0 ? -errno : -EPROTO, "receiving the pipe for an image from criu");
	const struct cmsghdr *ch = CMSG_FIRSTHDR(&mh);
	const bool rights = ch && ch->cmsg_level == SOL_SOCKET && ch->cmsg_type == SCM_RIGHTS;
	if (!rights || ch->cmsg_len != CMSG_LEN(sizeof(int)) || (mh.msg_flags & MSG_CTRUNC)) {
		/* Whatever fds did arrive are ours to close. */
		for (size_t k = 0; rights && k < (ch->cmsg_len - CMSG_LEN(0)) / sizeof(int); k++) {
			int got;
			memcpy(&got, CMSG_DATA(ch) + k * sizeof(int), sizeof(int));
			close(got);
		}
		return crest_errx(-EPROTO, "criu sent no pipe for an image");
	}
	memcpy(fd, CMSG_DATA(ch), sizeof(int));
	return 0;
}

/* One request: the answer, and for an image that exists its sender. */
static int serve_one(struct imgsrv *s, int conn, bool *eof)
{
	uint32_t len;
	int rc = read_full(conn, &len, sizeof(len), eof);
	if (rc < 0 || *eof)
		return rc;
	if (len == 0 || len > REQ_MAX)
		return crest_errx(-EPROTO, "criu's image request has a length of %u bytes", len);
	uint8_t req[REQ_MAX];
	char name[NAME_MAX + 1];
	bool end;
	rc = read_full(conn, req, len, &end);
	if (rc == 0 && end)
		rc = crest_errx(-EPROTO, "criu's image request ended early");
	if (rc == 0)
		rc = request_name(req, len, name, sizeof(name));
	if (rc < 0)
		return rc;
	const struct cas_stream *st = image_find(s->m, name);
	/* img_streamer_reply_entry { required bool exists = 1; } */
	const uint32_t rlen = 2;
	uint8_t reply[6];
	memcpy(reply, &rlen, 4);
	reply[4] = 0x08;
	reply[5] = st ? 1 : 0;
	rc = write_full(conn, reply, sizeof(reply));
	if (rc < 0 || !st)
		return rc;
	int fd = -1;
	rc = recv_pipe(conn, &fd);
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
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	if (snprintf(a.sun_path, sizeof(a.sun_path), "%s/%s", dir, IMGSRV_SOCKET) >= (int)sizeof(a.sun_path))
		return crest_errx(-ENAMETOOLONG, "%s/%s: too long for a unix socket's path", dir, IMGSRV_SOCKET);
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
	if (rc == 0) {
		s->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (s->lfd < 0)
			rc = crest_errf(-errno, "making a socket for criu's images");
	}
	if (rc == 0 && bind(s->lfd, (const struct sockaddr *)&a, sizeof(a)) < 0)
		rc = crest_errf(-errno, "cannot bind %s", a.sun_path);
	if (rc == 0 && listen(s->lfd, 4) < 0)
		rc = crest_errf(-errno, "cannot listen on %s", a.sun_path);
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
