/* criustream.c - CRIU's image-streamer framing; see criustream.h. */
#include "os/criustream.h"
#include "util/err.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define REQ_MAX 4096    /* a request: a file name, well under PATH_MAX */

int criustream_listen(const char *dir, const char *sock, int *lfd)
{
	*lfd = -1;
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	if (snprintf(a.sun_path, sizeof(a.sun_path), "%s/%s", dir, sock) >= (int)sizeof(a.sun_path))
		return crest_errx(-ENAMETOOLONG, "%s/%s: too long for a unix socket's path", dir, sock);
	const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return crest_errf(-errno, "making a socket for criu's images");
	int rc = 0;
	if (bind(fd, (const struct sockaddr *)&a, sizeof(a)) < 0)
		rc = crest_errf(-errno, "cannot bind %s", a.sun_path);
	else if (listen(fd, 4) < 0)
		rc = crest_errf(-errno, "cannot listen on %s", a.sun_path);
	if (rc < 0) {
		close(fd);
		return rc;
	}
	*lfd = fd;
	return 0;
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
				return crest_errx(-EPROTO, "criu named an image by an unusable name");
			memcpy(name, p + i, v);
			name[v] = 0;
			have = true;
		}
		i += v;
	}
	return have ? 0 : crest_errx(-EPROTO, "criu's image request names no file");
}

int criustream_request(int conn, char name[NAME_MAX + 1], bool *eof)
{
	uint32_t len;
	int rc = read_full(conn, &len, sizeof(len), eof);
	if (rc < 0 || *eof)
		return rc;
	if (len == 0 || len > REQ_MAX)
		return crest_errx(-EPROTO, "criu's image request has a length of %u bytes", len);
	uint8_t req[REQ_MAX];
	bool end;
	rc = read_full(conn, req, len, &end);
	if (rc == 0 && end)
		rc = crest_errx(-EPROTO, "criu's image request ended early");
	return rc < 0 ? rc : request_name(req, len, name, NAME_MAX + 1);
}

int criustream_reply(int conn, bool exists)
{
	/* img_streamer_reply_entry { required bool exists = 1; } */
	const uint32_t rlen = 2;
	uint8_t reply[6];
	memcpy(reply, &rlen, 4);
	reply[4] = 0x08;
	reply[5] = exists ? 1 : 0;
	return write_full(conn, reply, sizeof(reply));
}

int criustream_recv_pipe(int conn, int *fd)
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

static void srv_fail(struct criustream_server *s, int rc)
{
	pthread_mutex_lock(&s->lock);
	if (!s->rc) {
		s->rc = rc;
		crest_errcpy(s->msg, sizeof(s->msg));
	}
	pthread_mutex_unlock(&s->lock);
}

/* Waits for fd to be readable; false when criustream_server_stop said stop. */
static bool wait_for(struct criustream_server *s, int fd)
{
	for (;;) {
		struct pollfd p[2] = { { .fd = fd, .events = POLLIN }, { .fd = s->stop[0], .events = POLLIN } };
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return false;
		}
		if (s->drain && p[0].revents)
			return true;
		if (p[1].revents)
			return false;
		if (p[0].revents)
			return true;
	}
}

static void *server_main(void *arg)
{
	struct criustream_server *s = arg;
	/* A reader gone is EPIPE, not a signal that ends crest: blocked here,
	 * and so in every thread serve starts. */
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
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
	s->conn = conn;   /* criustream_server_stop shuts it down: a read cut short ends */
	pthread_mutex_unlock(&s->lock);
	while (wait_for(s, conn)) {
		bool eof = false;
		const int rc = s->serve(s->arg, conn, &eof);
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

int criustream_server_start(struct criustream_server *s, const char *dir, const char *sock,
			    int (*serve)(void *arg, int conn, bool *eof), void *arg, bool drain)
{
	*s = (struct criustream_server){ .serve = serve, .arg = arg, .drain = drain, .lfd = -1, .conn = -1,
					 .stop = { -1, -1 } };
	pthread_mutex_init(&s->lock, NULL);
	int rc = 0;
	if (pipe2(s->stop, O_CLOEXEC) < 0)
		rc = crest_errf(-errno, "serving criu's images");
	if (rc == 0)
		rc = criustream_listen(dir, sock, &s->lfd);
	if (rc == 0) {
		const int prc = pthread_create(&s->t, NULL, server_main, s);
		if (prc != 0)
			rc = crest_errf(-prc, "starting the server for criu's images");
		s->running = prc == 0;
	}
	if (rc < 0) {
		char msg[1024];
		crest_errcpy(msg, sizeof(msg));
		criustream_server_stop(s);
		crest_errset_str(msg);
	}
	return rc;
}

int criustream_server_stop(struct criustream_server *s)
{
	if (!s->serve)
		return 0;   /* never started, or stopped already */
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
		s->running = false;
	}
	if (s->lfd >= 0)
		close(s->lfd);
	for (int i = 0; i < 2; i++)
		if (s->stop[i] >= 0)
			close(s->stop[i]);
	s->lfd = s->stop[0] = s->stop[1] = -1;
	pthread_mutex_destroy(&s->lock);
	s->serve = NULL;
	if (s->rc < 0)
		crest_errset_str(s->msg);
	return s->rc;
}
