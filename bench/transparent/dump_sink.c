/*
 * dump_sink.c - the receiving end of `criu dump --stream`, for measuring
 * what issue 36 (item 2) asks before anything is built: how long CRIU's
 * dump takes when its images go to a process instead of tmpfs, and what
 * chunking and hashing them while CRIU dumps adds to it.
 *
 *   crest-dump-sink DIR MODE [THREADS]
 *
 * Listens on DIR/streamer-capture.sock (CRIU 3.16+'s image streamer, dump
 * side: for each image a u32 length and an img_streamer_request_entry
 * naming it, then the read end of a pipe passed with SCM_RIGHTS; CRIU
 * writes the image into the pipe and closes it; no answers). Serves one
 * CRIU, then prints one JSON line: images, bytes, and seconds from the
 * connection to the last image's end.
 *
 * MODE:
 *   mem   every image read whole into memory of the sink's own, fresh
 *         (untouched) pages, as a tmpfs file takes them: what crest would
 *         hold when the stall ends, the engine not yet having run;
 *   hash  every image read through a ring of 4 MiB windows, each window's
 *         4 KiB chunks hashed with SHA-256 (OpenSSL EVP) by THREADS hash
 *         threads (default: the CPUs less one) before the window is used
 *         again: the engine's chunking and hashing done while CRIU dumps,
 *         the sink holding one ring, not the images;
 *   drop  read and dropped: the pipe's own ceiling.
 * A bench tool: it checks what it must to run, nothing of the images.
 */
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define WIN (4u << 20)
#define RING 64
#define CHUNK 4096

enum mode { MODE_MEM, MODE_HASH, MODE_DROP };

static enum mode mode;
static atomic_uint_fast64_t total;

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* ---- hashing: windows filled by image readers, hashed by workers ---- */

/* Free windows on a stack, full ones in a FIFO; a hasher takes any full
 * window. In-order hashing would deadlock: CRIU keeps small images open
 * while it writes the pages, and a window held by such an image's reader
 * would hold back every window after it. */
struct win {
	uint8_t *p;
	size_t len;
};

static struct win ring[RING];
static struct win *free_v[RING], *full_v[RING];
static size_t nfree, full_head, nfull;
static bool ring_done;
static pthread_mutex_t ring_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ring_cond = PTHREAD_COND_INITIALIZER;
static atomic_uint_fast64_t chunks_hashed;

static struct win *win_take(void)
{
	pthread_mutex_lock(&ring_lock);
	while (nfree == 0)
		pthread_cond_wait(&ring_cond, &ring_lock);
	struct win *w = free_v[--nfree];
	pthread_mutex_unlock(&ring_lock);
	w->len = 0;
	return w;
}

static void win_fill_done(struct win *w)
{
	pthread_mutex_lock(&ring_lock);
	full_v[(full_head + nfull++) % RING] = w;
	pthread_cond_broadcast(&ring_cond);
	pthread_mutex_unlock(&ring_lock);
}

static void *hasher(void *arg)
{
	(void)arg;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	const EVP_MD *md = EVP_sha256();
	uint8_t sum[32];
	for (;;) {
		pthread_mutex_lock(&ring_lock);
		while (!ring_done && nfull == 0)
			pthread_cond_wait(&ring_cond, &ring_lock);
		if (nfull == 0) {
			pthread_mutex_unlock(&ring_lock);
			break;
		}
		struct win *w = full_v[full_head];
		full_head = (full_head + 1) % RING;
		nfull--;
		pthread_mutex_unlock(&ring_lock);
		for (size_t o = 0; o < w->len; o += CHUNK) {
			const size_t n = w->len - o < CHUNK ? w->len - o : CHUNK;
			unsigned int sl;
			if (!ctx || !EVP_DigestInit_ex(ctx, md, NULL) || !EVP_DigestUpdate(ctx, w->p + o, n) ||
			    !EVP_DigestFinal_ex(ctx, sum, &sl)) {
				fprintf(stderr, "dump_sink: SHA-256 failed\n");
				exit(1);
			}
			atomic_fetch_add(&chunks_hashed, 1);
		}
		pthread_mutex_lock(&ring_lock);
		free_v[nfree++] = w;
		pthread_cond_broadcast(&ring_cond);
		pthread_mutex_unlock(&ring_lock);
	}
	EVP_MD_CTX_free(ctx);
	return NULL;
}

/* ---- one image, one reader thread ---- */

struct reader {
	int fd;
	char name[256];
	uint64_t bytes;
	pthread_t t;
	struct reader *next;
};

static void *read_image(void *arg)
{
	struct reader *r = arg;
	if (mode == MODE_HASH) {
		for (;;) {
			struct win *w = win_take();
			while (w->len < WIN) {
				const ssize_t n = read(r->fd, w->p + w->len, WIN - w->len);
				if (n < 0 && errno == EINTR)
					continue;
				if (n <= 0)
					break;
				w->len += (size_t)n;
			}
			const size_t got = w->len;
			r->bytes += got;
			win_fill_done(w);   /* an empty one is hashed as nothing */
			if (got < WIN)
				break;
		}
	} else {
		/* mem: fresh pages, grown by doubling (mremap moves pages, it
		 * does not copy them); drop: one buffer again and again. */
		size_t cap = mode == MODE_MEM ? (1u << 20) : WIN;
		uint8_t *p = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED) {
			fprintf(stderr, "dump_sink: out of memory\n");
			exit(1);
		}
		size_t len = 0;
		for (;;) {
			if (mode == MODE_MEM && len == cap) {
				uint8_t *q = mremap(p, cap, cap * 2, MREMAP_MAYMOVE);
				if (q == MAP_FAILED) {
					fprintf(stderr, "dump_sink: out of memory\n");
					exit(1);
				}
				p = q;
				cap *= 2;
			}
			const size_t at = mode == MODE_MEM ? len : 0;
			const ssize_t n = read(r->fd, p + at, cap - at);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				break;
			len += mode == MODE_MEM ? (size_t)n : 0;
			r->bytes += (uint64_t)n;
		}
		/* mem: kept until the end, as the images would be. */
		if (mode == MODE_DROP)
			munmap(p, cap);
	}
	atomic_fetch_add(&total, r->bytes);
	close(r->fd);
	return NULL;
}

/* ---- the connection ---- */

static int read_full(int fd, void *buf, size_t n)
{
	for (size_t got = 0; got < n;) {
		const ssize_t r = read(fd, (uint8_t *)buf + got, n - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return got == 0 && r == 0 ? 1 : -1;
		got += (size_t)r;
	}
	return 0;
}

/* Field 1 of the request (tag 0x0a, a one- or two-byte length). */
static int name_of(const uint8_t *p, size_t n, char *name, size_t cap)
{
	if (n < 2 || p[0] != 0x0a)
		return -1;
	size_t i = 1, len = p[i] & 0x7f;
	if (p[i++] & 0x80) {
		if (i >= n)
			return -1;
		len |= (size_t)(p[i++] & 0x7f) << 7;
	}
	if (len >= cap || len > n - i)
		return -1;
	memcpy(name, p + i, len);
	name[len] = 0;
	return 0;
}

static int take_fd(int conn)
{
	char byte;
	struct iovec iov = { &byte, 1 };
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf) };
	if (recvmsg(conn, &mh, MSG_CMSG_CLOEXEC) <= 0)
		return -1;
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	if (!c || c->cmsg_type != SCM_RIGHTS)
		return -1;
	int fd;
	memcpy(&fd, CMSG_DATA(c), sizeof(fd));
	return fd;
}

int main(int argc, char **argv)
{
	if (argc < 3 || argc > 4) {
		fprintf(stderr, "usage: crest-dump-sink DIR mem|hash|drop [THREADS]\n");
		return 2;
	}
	if (!strcmp(argv[2], "mem"))
		mode = MODE_MEM;
	else if (!strcmp(argv[2], "hash"))
		mode = MODE_HASH;
	else if (!strcmp(argv[2], "drop"))
		mode = MODE_DROP;
	else {
		fprintf(stderr, "crest-dump-sink: mode '%s' is none of mem, hash, drop\n", argv[2]);
		return 2;
	}
	long nthreads = sysconf(_SC_NPROCESSORS_ONLN) - 1;
	if (argc == 4) {
		char *end;
		nthreads = strtol(argv[3], &end, 10);
		if (*end || nthreads < 1 || nthreads > 256) {
			fprintf(stderr, "crest-dump-sink: THREADS '%s' is not 1 to 256\n", argv[3]);
			return 2;
		}
	}
	if (nthreads < 1)
		nthreads = 1;
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	if ((size_t)snprintf(a.sun_path, sizeof(a.sun_path), "%s/streamer-capture.sock", argv[1]) >=
	    sizeof(a.sun_path)) {
		fprintf(stderr, "crest-dump-sink: DIR '%s' is too long for a socket path\n", argv[1]);
		return 2;
	}
	unlink(a.sun_path);
	const int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 1) < 0) {
		fprintf(stderr, "crest-dump-sink: cannot listen on %s: %s\n", a.sun_path, strerror(errno));
		return 1;
	}
	pthread_t *hs = calloc((size_t)nthreads, sizeof(*hs));
	if (mode == MODE_HASH) {
		for (size_t i = 0; i < RING; i++) {
			ring[i].p = malloc(WIN);
			if (!ring[i].p)
				return 1;
			memset(ring[i].p, 0, WIN);   /* faulted in before the dump */
			free_v[nfree++] = &ring[i];
		}
		for (long i = 0; i < nthreads; i++)
			pthread_create(&hs[i], NULL, hasher, NULL);
	}
	/* Ready: the script waits for this line before it starts CRIU. */
	printf("listening\n");
	fflush(stdout);
	const int conn = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	if (conn < 0) {
		fprintf(stderr, "crest-dump-sink: accept: %s\n", strerror(errno));
		return 1;
	}
	const double t0 = now();
	struct reader *rs = NULL;
	unsigned images = 0;
	for (;;) {
		uint32_t len;
		uint8_t req[4096];
		int rc = read_full(conn, &len, sizeof(len));
		if (rc == 1)
			break;   /* CRIU is done */
		if (rc < 0 || len == 0 || len > sizeof(req) || read_full(conn, req, len) != 0) {
			fprintf(stderr, "crest-dump-sink: a malformed request from criu\n");
			return 1;
		}
		struct reader *r = calloc(1, sizeof(*r));
		if (!r || name_of(req, len, r->name, sizeof(r->name)) < 0) {
			fprintf(stderr, "crest-dump-sink: a request that names no image\n");
			return 1;
		}
		r->fd = take_fd(conn);
		if (r->fd < 0) {
			fprintf(stderr, "crest-dump-sink: no pipe for image %s\n", r->name);
			return 1;
		}
		pthread_create(&r->t, NULL, read_image, r);
		r->next = rs;
		rs = r;
		images++;
	}
	uint64_t biggest = 0;
	const char *big = "";
	for (struct reader *r = rs; r; r = r->next) {
		pthread_join(r->t, NULL);
		if (r->bytes > biggest) {
			biggest = r->bytes;
			big = r->name;
		}
	}
	const double t_read = now() - t0;
	if (mode == MODE_HASH) {
		pthread_mutex_lock(&ring_lock);
		ring_done = true;
		pthread_cond_broadcast(&ring_cond);
		pthread_mutex_unlock(&ring_lock);
		for (long i = 0; i < nthreads; i++)
			pthread_join(hs[i], NULL);
	}
	const double t_all = now() - t0;
	printf("{\"mode\": \"%s\", \"threads\": %ld, \"images\": %u, \"bytes\": %llu, \"largest\": \"%s\", "
	       "\"largest_bytes\": %llu, \"read_s\": %.3f, \"done_s\": %.3f, \"chunks_hashed\": %llu}\n",
	       argv[2], mode == MODE_HASH ? nthreads : 0, images, (unsigned long long)atomic_load(&total), big,
	       (unsigned long long)biggest, t_read, t_all, (unsigned long long)atomic_load(&chunks_hashed));
	return 0;
}
