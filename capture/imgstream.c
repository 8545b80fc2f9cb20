/* imgstream.c - CRIU's images streamed into the engine; see imgstream.h. */
#include "capture/imgstream.h"
#include "cas/cas.h"
#include "os/criustream.h"
#include "util/err.h"
#include "util/fault.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* A window is one engine segment: full windows fall on the stream's
 * segment boundaries, as a file's reads do. */
#define WIN ENGINE_SEGMENT_BYTES
/* At least this many: one per image CRIU may hold open while it writes
 * the pages (a handful), and some for the engine to work on. */
#define WIN_MIN 16

/* The windows. Free ones on a stack; each given to the engine comes back
 * through win_release on a worker thread. Freed once the owner is done
 * (closing) and no window is out, by whichever side sees that last. */
struct ring {
	uint8_t *mem;
	size_t nwin;
	struct win {
		struct ring *r;
		uint8_t *p;
	} *wins, **free_v;
	size_t nfree, out;
	bool closing;
	pthread_mutex_t lock;
	pthread_cond_t cond;
};

struct reader {
	struct imgstream *t;
	struct engine_stream *st;   /* NULL: drained, not stored */
	int fd;                     /* the pipe's read end, from CRIU */
	char name[NAME_MAX + 1];
	pthread_t th;
	int rc;
	char msg[1024];
	uint64_t bytes;
	struct reader *next;
};

struct imgstream {
	struct engine_snap *s;
	struct ring *ring;
	struct criustream_server srv; /* its failure: the protocol's, a thread's */
	struct reader *readers;     /* the server thread's until it is stopped */
	atomic_bool faulted;        /* the fault sites passed once */
};

static void ring_free(struct ring *r)
{
	munmap(r->mem, r->nwin * WIN);
	free(r->wins);
	free(r->free_v);
	pthread_mutex_destroy(&r->lock);
	pthread_cond_destroy(&r->cond);
	free(r);
}

static int ring_new(size_t bytes, struct ring **out)
{
	struct ring *r = calloc(1, sizeof(*r));
	if (!r)
		return crest_errf(-ENOMEM, "the images' ring");
	r->nwin = bytes / WIN < WIN_MIN ? WIN_MIN : bytes / WIN;
	r->wins = calloc(r->nwin, sizeof(*r->wins));
	r->free_v = calloc(r->nwin, sizeof(*r->free_v));
	/* Faulted in now (MAP_POPULATE), before the freeze: fresh pages are
	 * what makes a dump into tmpfs slow. */
	r->mem = mmap(NULL, r->nwin * WIN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
		      -1, 0);
	if (!r->wins || !r->free_v || r->mem == MAP_FAILED) {
		const int rc = crest_errf(r->mem == MAP_FAILED ? -errno : -ENOMEM, "the images' ring of %zu MiB",
					  r->nwin * WIN >> 20);
		if (r->mem == MAP_FAILED)
			r->mem = NULL;
		else
			munmap(r->mem, r->nwin * WIN);
		free(r->wins);
		free(r->free_v);
		free(r);
		return rc;
	}
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->cond, NULL);
	for (size_t i = 0; i < r->nwin; i++) {
		r->wins[i] = (struct win){ .r = r, .p = r->mem + i * WIN };
		r->free_v[r->nfree++] = &r->wins[i];
	}
	*out = r;
	return 0;
}

static struct win *win_take(struct ring *r)
{
	pthread_mutex_lock(&r->lock);
	while (r->nfree == 0)
		pthread_cond_wait(&r->cond, &r->lock);
	struct win *w = r->free_v[--r->nfree];
	r->out++;
	pthread_mutex_unlock(&r->lock);
	return w;
}

/* The engine is done with w (or it was never given): back on the stack. */
static void win_release(void *arg)
{
	struct win *w = arg;
	struct ring *r = w->r;
	pthread_mutex_lock(&r->lock);
	r->free_v[r->nfree++] = w;
	const bool last = --r->out == 0 && r->closing;
	pthread_cond_signal(&r->cond);
	pthread_mutex_unlock(&r->lock);
	if (last)
		ring_free(r);
}

static void ring_close(struct ring *r)
{
	pthread_mutex_lock(&r->lock);
	r->closing = true;
	const bool last = r->out == 0;
	pthread_mutex_unlock(&r->lock);
	if (last)
		ring_free(r);
}

/* Fills w from fd up to WIN bytes; short only at the image's end. */
static int fill(int fd, uint8_t *p, size_t *len, bool *end)
{
	*len = 0;
	*end = false;
	while (*len < WIN) {
		const ssize_t n = read(fd, p + *len, WIN - *len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0) {
			*end = true;
			break;
		}
		*len += (size_t)n;
	}
	return 0;
}

static void *reader_main(void *arg)
{
	struct reader *rd = arg;
	struct ring *r = rd->t->ring;
	bool end = false;
	while (!end && rd->st && rd->rc == 0) {
		struct win *w = win_take(r);
		size_t len;
		const int rc = fill(rd->fd, w->p, &len, &end);
		if (rc < 0) {
			win_release(w);
			rd->rc = crest_errf(rc, "reading image %s from criu", rd->name);
			break;
		}
		rd->bytes += len;
		if (len == 0) {
			win_release(w);
			continue;
		}
		engine_snapshot_expect(rd->t->s, len);
		/* w comes back through win_release, also when this fails. */
		rd->rc = engine_stream_add_memory(rd->st, w->p, len, win_release, w);
		/* Tests only (util/fault.h): the first full window of the dump
		 * taken, CRIU waiting on the rest, the job frozen. */
		if (len == WIN && !atomic_exchange(&rd->t->faulted, true)) {
			crest_fault_pause("capture.imgstream");
			crest_fault_die("capture.imgstream");
		}
	}
	if (rd->rc < 0)
		crest_errcpy(rd->msg, sizeof(rd->msg));
	/* Not stored (failed, or no stream for it): read to its end all the
	 * same, so that CRIU finishes rather than wait on a full pipe. */
	if (!end) {
		uint8_t sink[1 << 16];
		ssize_t n;
		while ((n = read(rd->fd, sink, sizeof(sink))) > 0 || (n < 0 && errno == EINTR))
			;
	}
	if (rd->st)
		engine_stream_close(rd->st);
	close(rd->fd);
	return NULL;
}

/* One image: its stream and its reader. */
static int take_one(void *arg, int conn, bool *eof)
{
	struct imgstream *t = arg;
	char name[NAME_MAX + 1];
	int rc = criustream_request(conn, name, eof);
	if (rc < 0 || *eof)
		return rc;
	int fd;
	rc = criustream_recv_pipe(conn, &fd);
	if (rc < 0)
		return rc;
	struct reader *rd = calloc(1, sizeof(*rd));
	if (!rd) {
		close(fd);
		return crest_errf(-ENOMEM, "taking image %s", name);
	}
	rd->t = t;
	rd->fd = fd;
	snprintf(rd->name, sizeof(rd->name), "%s", name);
	char sname[NAME_MAX + 8];
	snprintf(sname, sizeof(sname), "criu/%s", name);
	/* Streams are added on this thread alone (engine.h: one producer a
	 * stream; the snapshot's list of them is not locked). */
	rc = engine_stream_open(t->s, sname, CAS_STREAM_IMAGE, true, &rd->st);
	if (rc == 0)
		engine_stream_meta(rd->st)->mode = 0600;   /* as CRIU creates an image file */
	else {
		rd->st = NULL;
		rd->rc = rc;   /* drained, and reported by imgstream_finish */
	}
	const int prc = pthread_create(&rd->th, NULL, reader_main, rd);
	if (prc == 0) {
		rd->next = t->readers;
		t->readers = rd;
	} else {
		if (rd->st)
			engine_stream_close(rd->st);
		close(fd);
		free(rd);
		return crest_errf(-prc, "starting a thread to read image %s", name);
	}
	return 0;
}

int imgstream_start(struct engine_snap *s, const char *dir, struct imgstream **out)
{
	*out = NULL;
	struct imgstream *t = calloc(1, sizeof(*t));
	if (!t)
		return crest_errf(-ENOMEM, "streaming images");
	t->s = s;
	int rc = ring_new(IMGSTREAM_RING_BYTES, &t->ring);
	/* Dump side: an image CRIU wrote whole into its pipe before it exited
	 * is still to be taken when the stop comes. */
	if (rc == 0)
		rc = criustream_server_start(&t->srv, dir, CRIUSTREAM_CAPTURE_SOCKET, take_one, t, true);
	if (rc < 0) {
		char msg[1024];
		crest_errcpy(msg, sizeof(msg));
		imgstream_finish(t, NULL);
		crest_errset_str(msg);
		return rc;
	}
	*out = t;
	return 0;
}

int imgstream_finish(struct imgstream *t, uint64_t *bytes)
{
	if (bytes)
		*bytes = 0;
	if (!t)
		return 0;
	int rc = criustream_server_stop(&t->srv);
	char msg[1400];
	snprintf(msg, sizeof(msg), "%s", rc < 0 ? t->srv.msg : "");
	uint64_t sum = 0;
	for (struct reader *rd = t->readers, *next; rd; rd = next) {
		next = rd->next;
		pthread_join(rd->th, NULL);   /* CRIU is gone: each pipe is at its end */
		sum += rd->bytes;
		if (rd->rc < 0 && !rc) {
			rc = rd->rc;
			snprintf(msg, sizeof(msg), "image %s: %s", rd->name, rd->msg);
		}
		free(rd);
	}
	if (bytes)
		*bytes = sum;
	if (t->ring)
		ring_close(t->ring);
	free(t);
	if (rc < 0)
		crest_errset_str(msg);
	return rc;
}
