/*
 * criustream.h - CRIU's image-streamer wire protocol, both sides: the
 * messages `criu dump --stream` and `criu restore --stream` exchange with
 * the process that holds their images (CRIU 3.16 and later:
 * criu/img-streamer.c, images/img-streamer.proto).
 *
 * CRIU connects to DIR/streamer-capture.sock (dump) or
 * DIR/streamer-serve.sock (restore), once; its processes share the
 * connection, taking turns under a lock. For each image it sends a request:
 * a u32 length (host order), then an img_streamer_request_entry whose
 * field 1 is the file's base name. On restore the streamer answers with a
 * u32 length and an img_streamer_reply_entry (field 1: whether the image
 * exists), and for one that does CRIU passes the write end of a pipe; on
 * dump there is no answer and CRIU passes the read end of a pipe, into
 * which it writes the image and closes it at the image's end. Each pipe
 * comes as SCM_RIGHTS with one byte of data. Several images may be open at
 * once (a dump keeps small ones open while it writes the pages).
 *
 * This module owns the framing (listening, one request's name, the reply,
 * the pipe) and the server that takes CRIU's one connection and hands each
 * request to its caller. What is done with an image is the caller's.
 */
#ifndef CREST_OS_CRIUSTREAM_H
#define CREST_OS_CRIUSTREAM_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>

#define CRIUSTREAM_CAPTURE_SOCKET "streamer-capture.sock"
#define CRIUSTREAM_SERVE_SOCKET "streamer-serve.sock"

/* Binds and listens on dir/sock; *lfd is close-on-exec. */
int criustream_listen(const char *dir, const char *sock, int *lfd);

/* Reads one request from conn: the image's base name into name (NAME_MAX
 * + 1 bytes), checked to hold no '/' and no NUL. *eof is set, and 0
 * returned, when CRIU closed the connection between two requests: it is
 * done. -EPROTO on anything malformed. */
int criustream_request(int conn, char name[NAME_MAX + 1], bool *eof);

/* Restore side: whether the image asked for exists. */
int criustream_reply(int conn, bool exists);

/* The pipe that follows a request (restore: after a reply that it exists). */
int criustream_recv_pipe(int conn, int *fd);

/* The server: from a thread of its own, accepts CRIU's connection on
 * dir/sock and calls serve(arg, conn, &eof) for each request until CRIU
 * closes the connection, serve fails, or criustream_server_stop. serve
 * reads one request (criustream_request) and does what it asks; it sets
 * eof at the connection's clean end. Members are the server's own. */
struct criustream_server {
	int (*serve)(void *arg, int conn, bool *eof);
	void *arg;
	/* Requests CRIU sent before the stop are still served (dump side: an
	 * image CRIU wrote whole into its pipe and exited is still to be read);
	 * otherwise the stop comes first (restore side: CRIU is gone, and
	 * nobody reads what it asked for). */
	bool drain;
	int lfd, conn, stop[2];
	pthread_t t;
	bool running;
	pthread_mutex_t lock;       /* conn, rc and msg */
	int rc;                     /* the first failure: accepting, or serve's */
	char msg[1024];
};

/* Listens and starts the thread; on failure nothing is left running. */
int criustream_server_start(struct criustream_server *s, const char *dir, const char *sock,
			    int (*serve)(void *arg, int conn, bool *eof), void *arg, bool drain);

/* Once CRIU has exited (or was never run): stops the thread, a request CRIU
 * left half sent included, and closes what the server holds. Returns the
 * server's first failure, its message set; 0 if none. A no-op on a server
 * stopped already, or zeroed and never started. */
int criustream_server_stop(struct criustream_server *s);

#endif
