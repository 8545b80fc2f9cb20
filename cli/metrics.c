/*
 * metrics.c - Prometheus metrics of crest's checkpoint loops: the values,
 * their text format (0.0.4), a one-thread HTTP server and the
 * node_exporter textfile. See metrics.h.
 *
 * The server is one poll loop that always accepts: no connection holds a
 * slot a scrape needs. It keeps at most CONNS_MAX connections; when a new
 * one comes past that, the oldest still sending its request is dropped
 * (a scrape sends its request at once, so a slow-loris client, a byte a
 * second, is always the older), and each connection has a deadline to
 * send its request and one to take the answer. It listens on loopback
 * unless an address is named (--metrics 0.0.0.0:PORT).
 *
 * Why not a library. libmicrohttpd (Debian's libmicrohttpd-dev) is the
 * one to weigh: an internal poll thread, a connection limit and a
 * per-connection timeout, all well tested. But at its connection limit it
 * refuses the new connection, so the limit is exactly the slot a slow
 * client holds hostage: 32 idle connections at its default timeouts
 * blind scrapes as the 8 slots here did (reported in issue 32), and
 * dropping the oldest idle one is not among its options. For one fixed
 * answer to GET /metrics it would also bring a parser of everything HTTP
 * (chunked bodies, POST processing, upgrades: the parts its CVEs were in)
 * into a process that runs as root beside the job, and a dependency to
 * every install. What crest needs is the request line and the end of the
 * headers, a few hundred lines it can bound and test. The checkpoint loop
 * never waits on this thread: it only takes the lock on the values.
 */
#include "cli/metrics.h"
#include "util/err.h"
#include "util/fs.h"
#include "util/progress.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* A request is a line and a few headers: anything longer is refused, so a
 * client cannot make crest buffer more than this per connection. */
#define REQ_MAX 4096
/* Connections held at once (REQ_MAX bytes each: 256 KiB in all); a new
 * one past it takes the place of the oldest still sending its request. */
#define CONNS_MAX 64
/* A connection that has not sent its whole request within REQ_DEADLINE_MS
 * of its accept, or not taken its answer within SEND_DEADLINE_MS of it
 * being ready, is dropped. */
#define REQ_DEADLINE_MS 5000
#define SEND_DEADLINE_MS 5000
#define BACKLOG 128

struct client {
	int fd;
	uint64_t born_ns;       /* accepted then: the oldest idle goes first */
	uint64_t deadline_ns;
	size_t inlen;
	char in[REQ_MAX];
	char *out;          /* the whole response, once the request is in */
	size_t outlen, outoff;
};

struct values {
	uint64_t ok, failures;
	uint64_t stall_ns, ingest_ns, logical, new_bytes, stored;
	uint64_t last_ok_ns;      /* wall clock; 0: none yet */
	uint64_t store_bytes;
};

struct cli_metrics {
	int lfd;                  /* listening socket, -1 without --metrics */
	int wake;                 /* eventfd: ask the thread to end */
	pthread_t thread;
	bool running;
	char url[128];
	int dirfd;                /* the textfile's directory, -1 without --metrics-file */
	char *fname;              /* its name there */
	bool file_failed;         /* the last write failed: warned already */
	const struct cli *c;
	char *labels;             /* branch="...",pid="..." */
	uint64_t every_ns;
	pthread_mutex_t mu;
	struct values v;          /* under mu */
	struct client cl[CONNS_MAX];
	uint64_t accept_pause_ns;  /* accept failing (EMFILE...): wait till then */
};

/* Parses ADDR into a socket address: "PORT", "HOST:PORT", "[V6]:PORT",
 * ":PORT". Numeric hosts only (and "localhost"): no name lookup that could
 * hang or answer differently later. */
static int parse_addr(const char *addr, struct sockaddr_storage *ss, socklen_t *sl)
{
	char host[64];
	const char *port;
	const char *colon = strrchr(addr, ':');
	if (addr[0] == '[') {
		const char *close = strchr(addr, ']');
		if (!close || close[1] != ':' || (size_t)(close - addr - 1) >= sizeof(host))
			goto bad;
		memcpy(host, addr + 1, (size_t)(close - addr - 1));
		host[close - addr - 1] = 0;
		port = close + 2;
	} else if (colon) {
		if (strchr(addr, ':') != colon || (size_t)(colon - addr) >= sizeof(host))
			goto bad;   /* an IPv6 address wants its brackets */
		memcpy(host, addr, (size_t)(colon - addr));
		host[colon - addr] = 0;
		/* ":PORT" is loopback too: every interface only when named
		 * (0.0.0.0:PORT, [::]:PORT), since anyone who reaches the port
		 * may read the job's figures and take the server's time. */
		if (!host[0])
			strcpy(host, "127.0.0.1");
		port = colon + 1;
	} else {
		strcpy(host, "127.0.0.1");
		port = addr;
	}
	if (!strcmp(host, "localhost"))
		strcpy(host, "127.0.0.1");
	char *end;
	errno = 0;
	const unsigned long p = strtoul(port, &end, 10);
	if (!port[0] || *end || port[0] == '-' || port[0] == '+' || errno || p > 65535)
		goto bad;
	memset(ss, 0, sizeof(*ss));
	struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
	if (inet_pton(AF_INET, host, &in4->sin_addr) == 1 && addr[0] != '[') {
		in4->sin_family = AF_INET;
		in4->sin_port = htons((uint16_t)p);
		*sl = sizeof(*in4);
		return 0;
	}
	if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1 && addr[0] == '[') {
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)p);
		*sl = sizeof(*in6);
		return 0;
	}
bad:
	return crest_errx(-EINVAL, "--metrics %s: not an address to listen on (PORT, HOST:PORT or [IPV6]:PORT, "
			  "with a numeric host and a port from 0 to 65535)", addr);
}

static int listen_on(struct cli_metrics *m, const char *addr)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	int rc = parse_addr(addr, &ss, &sl);
	if (rc < 0)
		return rc;
	const int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return crest_errf(-errno, "--metrics %s: socket", addr);
	const int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&ss, sl) < 0 || listen(fd, BACKLOG) < 0) {
		rc = crest_errf(-errno, "--metrics %s: cannot listen there", addr);
		close(fd);
		return rc;
	}
	/* The port the kernel chose for port 0, for the line that says where. */
	sl = sizeof(ss);
	getsockname(fd, (struct sockaddr *)&ss, &sl);
	char h[INET6_ADDRSTRLEN] = "?";
	if (ss.ss_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&ss;
		inet_ntop(AF_INET6, &in6->sin6_addr, h, sizeof(h));
		snprintf(m->url, sizeof(m->url), "http://[%s]:%u/metrics", h, ntohs(in6->sin6_port));
	} else {
		const struct sockaddr_in *in4 = (const struct sockaddr_in *)&ss;
		inet_ntop(AF_INET, &in4->sin_addr, h, sizeof(h));
		snprintf(m->url, sizeof(m->url), "http://%s:%u/metrics", h, ntohs(in4->sin_port));
	}
	m->lfd = fd;
	return 0;
}

/* The textfile's directory, opened with no symlink anywhere on the path:
 * crest runs as root, and a symlink planted by someone else must not turn
 * its write into a write elsewhere. The file itself is always replaced by
 * rename, which never follows a symlink either. */
static int open_file_dir(struct cli_metrics *m, const char *file)
{
	char parent[4096];
	const char *name = fs_split(file, parent, sizeof(parent));
	if (!name[0] || !strcmp(name, ".") || !strcmp(name, "..") || strlen(file) >= sizeof(parent))
		return crest_errx(-EINVAL, "--metrics-file %s: not a file name", file);
	const bool abs = file[0] == '/';
	const int base = open(abs ? "/" : ".", O_DIRECTORY | O_RDONLY | O_CLOEXEC);
	if (base < 0)
		return crest_errf(-errno, "--metrics-file %s", file);
	const char *rel = parent;
	while (*rel == '/')
		rel++;
	int fd = fs_openat_beneath(base, rel, O_DIRECTORY | O_RDONLY, 0);
	close(base);
	if (fd == -ELOOP)
		return crest_errx(-ELOOP, "--metrics-file %s: a symlink on its path: crest runs as root and "
				  "follows none there; name the real directory", file);
	if (fd < 0)
		return crest_errf(fd, "--metrics-file %s: its directory", file);
	struct stat sb;
	if (fstatat(fd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(sb.st_mode)) {
		close(fd);
		return crest_errx(-EINVAL, "--metrics-file %s: %s, not a regular file: crest replaces only a "
				  "file of its own there", file, S_ISLNK(sb.st_mode) ? "a symlink" : "exists");
	}
	m->fname = strdup(name);
	if (!m->fname) {
		close(fd);
		return crest_errf(-ENOMEM, "--metrics-file %s", file);
	}
	m->dirfd = fd;
	return 0;
}

int cli_metrics_open(const char *addr, const char *file, struct cli_metrics **out)
{
	*out = NULL;
	struct cli_metrics *m = calloc(1, sizeof(*m));
	if (!m)
		return crest_errf(-ENOMEM, "metrics");
	m->lfd = m->wake = m->dirfd = -1;
	for (int i = 0; i < CONNS_MAX; i++)
		m->cl[i].fd = -1;
	pthread_mutex_init(&m->mu, NULL);
	int rc = 0;
	if (addr)
		rc = listen_on(m, addr);
	if (rc == 0 && file)
		rc = open_file_dir(m, file);
	if (rc == 0 && addr) {
		m->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (m->wake < 0)
			rc = crest_errf(-errno, "--metrics: eventfd");
	}
	if (rc < 0) {
		cli_metrics_close(m);
		return rc;
	}
	*out = m;
	return 0;
}

/* A label value, escaped as the text format wants: \\, \" and \n. */
static void put_label(FILE *f, const char *s)
{
	for (; *s; s++) {
		if (*s == '\\' || *s == '"')
			fprintf(f, "\\%c", *s);
		else if (*s == '\n')
			fputs("\\n", f);
		else
			fputc(*s, f);
	}
}

static uint64_t wall_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

char *cli_metrics_format(struct cli_metrics *m, size_t *len)
{
	pthread_mutex_lock(&m->mu);
	const struct values v = m->v;
	pthread_mutex_unlock(&m->mu);
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);
	if (!f)
		return NULL;
	const char *l = m->labels ? m->labels : "";
	/* One gauge or counter: its HELP, TYPE and one sample. */
#define ONE(name, type, help, fmt, val)                                                                    \
	fprintf(f, "# HELP crest_" name " " help "\n# TYPE crest_" name " " type "\ncrest_" name "{%s} " fmt "\n", \
		l, val)
	ONE("checkpoints_total", "counter", "Checkpoints committed to the store since this crest started.",
	    "%llu", (unsigned long long)v.ok);
	ONE("checkpoint_failures_total", "counter", "Checkpoints that failed since this crest started.", "%llu",
	    (unsigned long long)v.failures);
	ONE("checkpoint_last_success_timestamp_seconds", "gauge",
	    "Unix time of the last committed checkpoint (0: none yet).", "%.3f", (double)v.last_ok_ns / 1e9);
	ONE("checkpoint_last_stall_seconds", "gauge", "How long the job was stopped for the last checkpoint.",
	    "%.6f", cli_secs(v.stall_ns));
	ONE("checkpoint_last_ingest_seconds", "gauge",
	    "How long the last checkpoint took to chunk, hash, compress and commit.", "%.6f", cli_secs(v.ingest_ns));
	ONE("checkpoint_last_logical_bytes", "gauge", "Bytes the last snapshot holds (its size as restored).",
	    "%llu", (unsigned long long)v.logical);
	ONE("checkpoint_last_new_bytes", "gauge", "Bytes of the last snapshot the store did not hold before.",
	    "%llu", (unsigned long long)v.new_bytes);
	ONE("checkpoint_last_stored_bytes", "gauge", "Bytes the last snapshot added to the store, compressed.",
	    "%llu", (unsigned long long)v.stored);
	ONE("checkpoint_interval_seconds", "gauge", "The loop's --every.", "%.3f", cli_secs(m->every_ns));
	ONE("store_size_bytes", "gauge", "Bytes of the store's packs, meta logs and index on disk.", "%llu",
	    (unsigned long long)v.store_bytes);
#undef ONE
	if (fclose(f) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}

/* Sum of the regular files' sizes in DIR/sub and one level below (the
 * index is RocksDB's flat directory). */
static uint64_t dir_bytes(int dfd, const char *sub, int depth)
{
	const int fd = openat(dfd, sub, O_DIRECTORY | O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return 0;
	DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return 0;
	}
	uint64_t sum = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		struct stat sb;
		if (fstatat(fd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0)
			continue;   /* gone meanwhile (gc, a compaction) */
		if (S_ISREG(sb.st_mode))
			sum += (uint64_t)sb.st_size;
		else if (S_ISDIR(sb.st_mode) && depth > 0)
			sum += dir_bytes(fd, e->d_name, depth - 1);
	}
	closedir(d);
	return sum;
}

static uint64_t store_bytes(const char *store)
{
	const int fd = open(store, O_DIRECTORY | O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	const uint64_t sum = dir_bytes(fd, "packs", 0) + dir_bytes(fd, "meta", 0) + dir_bytes(fd, "index", 1);
	close(fd);
	return sum;
}

/* Writes the textfile whole under a temporary name beside it and renames
 * it over the old one: node_exporter never reads half a file. */
static int write_file(struct cli_metrics *m)
{
	size_t len;
	char *body = cli_metrics_format(m, &len);
	if (!body)
		return crest_errf(-ENOMEM, "metrics");
	char tmp[512];
	int fd = -1;
	for (int tries = 0; fd < 0 && tries < 8; tries++) {
		uint64_t r = 0;
		if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
			r = wall_ns() ^ (uint64_t)getpid();
		/* A leading dot and no .prom suffix: node_exporter skips it. */
		snprintf(tmp, sizeof(tmp), ".%.400s.%016llx.tmp", m->fname, (unsigned long long)r);
		fd = openat(m->dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
		if (fd < 0 && errno != EEXIST)
			break;
	}
	int rc = 0;
	if (fd < 0) {
		rc = crest_errf(-errno, "--metrics-file %s: cannot create a file beside it", m->fname);
		free(body);
		return rc;
	}
	/* umask 077 is crest's for snapshots; node_exporter may run as
	 * another user, and these numbers are no secret. */
	fchmod(fd, 0644);
	size_t off = 0;
	while (off < len && rc == 0) {
		const ssize_t w = write(fd, body + off, len - off);
		if (w < 0 && errno != EINTR)
			rc = crest_errf(-errno, "--metrics-file %s: write", m->fname);
		else if (w > 0)
			off += (size_t)w;
	}
	free(body);
	if (close(fd) < 0 && rc == 0)
		rc = crest_errf(-errno, "--metrics-file %s: write", m->fname);
	struct stat sb;
	if (rc == 0 && fstatat(m->dirfd, m->fname, &sb, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(sb.st_mode))
		rc = crest_errx(-EINVAL, "--metrics-file %s: no longer a regular file: not replaced", m->fname);
	if (rc == 0 && renameat(m->dirfd, tmp, m->dirfd, m->fname) < 0)
		rc = crest_errf(-errno, "--metrics-file %s: rename", m->fname);
	if (rc < 0)
		unlinkat(m->dirfd, tmp, 0);
	return rc;
}

static void file_update(struct cli_metrics *m)
{
	if (m->dirfd < 0)
		return;
	const int rc = write_file(m);
	/* Said once per run of failures: the loop goes on either way. */
	if (rc < 0 && !m->file_failed && !m->c->quiet)
		fprintf(stderr, "%s: warning: %s\n", m->c->prog, crest_errmsg());
	m->file_failed = rc < 0;
	crest_errset_str("");
}

/* --- the server ------------------------------------------------------ */

static void client_close(struct client *cl)
{
	if (cl->fd >= 0)
		close(cl->fd);
	free(cl->out);
	cl->fd = -1;
	cl->out = NULL;
	cl->inlen = cl->outlen = cl->outoff = 0;
}

static void respond(struct client *cl, const char *status, const char *ctype, const char *body, size_t blen,
		    bool head)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (f) {
		fprintf(f, "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
			status, ctype, blen);
		if (!head && blen)
			fwrite(body, 1, blen, f);
		if (fclose(f) != 0) {
			free(buf);
			buf = NULL;
		}
	}
	if (!buf) {
		client_close(cl);
		return;
	}
	cl->out = buf;
	cl->outlen = len;
	cl->outoff = 0;
	cl->deadline_ns = time_now_ns() + SEND_DEADLINE_MS * 1000000ull;
}

static void respond_text(struct client *cl, const char *status, const char *msg)
{
	respond(cl, status, "text/plain; charset=utf-8", msg, strlen(msg), false);
}

/* The request line is all that matters: GET (or HEAD) /metrics. */
static void handle(struct cli_metrics *m, struct client *cl)
{
	char *eol = memchr(cl->in, '\n', cl->inlen);
	*eol = 0;
	char method[8], target[256];
	if (sscanf(cl->in, "%7s %255s HTTP/1.%*c", method, target) != 2) {
		respond_text(cl, "400 Bad Request", "bad request\n");
		return;
	}
	const bool head = !strcmp(method, "HEAD");
	if (!head && strcmp(method, "GET")) {
		respond_text(cl, "405 Method Not Allowed", "GET /metrics\n");
		return;
	}
	const size_t pl = strcspn(target, "?");
	if (pl != 8 || strncmp(target, "/metrics", 8)) {
		respond_text(cl, "404 Not Found", "crest serves /metrics only\n");
		return;
	}
	size_t len;
	char *body = cli_metrics_format(m, &len);
	if (!body) {
		respond_text(cl, "500 Internal Server Error", "out of memory\n");
		return;
	}
	respond(cl, "200 OK", "text/plain; version=0.0.4; charset=utf-8", body, len, head);
	free(body);
}

/* Reads what the client sent; answers once its headers end. */
static void client_read(struct cli_metrics *m, struct client *cl)
{
	for (;;) {
		if (cl->inlen == sizeof(cl->in)) {
			respond_text(cl, "431 Request Header Fields Too Large", "request too large\n");
			return;
		}
		const ssize_t r = recv(cl->fd, cl->in + cl->inlen, sizeof(cl->in) - cl->inlen, 0);
		if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
			client_close(cl);
			return;
		}
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		const size_t from = cl->inlen >= 3 ? cl->inlen - 3 : 0;
		cl->inlen += (size_t)r;
		for (size_t i = from; i + 1 < cl->inlen; i++) {
			if ((cl->in[i] == '\n' && cl->in[i + 1] == '\n') ||
			    (i + 3 < cl->inlen && !memcmp(cl->in + i, "\r\n\r\n", 4))) {
				handle(m, cl);
				return;
			}
		}
	}
}

static void client_write(struct client *cl)
{
	while (cl->outoff < cl->outlen) {
		const ssize_t w = send(cl->fd, cl->out + cl->outoff, cl->outlen - cl->outoff, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN)
			return;
		if (w <= 0) {
			client_close(cl);
			return;
		}
		cl->outoff += (size_t)w;
	}
	client_close(cl);
}

/* A new connection's slot: a free one, else the oldest connection still
 * sending its request, dropped for it; -1 when every connection is being
 * answered (then the new one is closed: those answers are on their way). */
static int slot_for_new(struct cli_metrics *m)
{
	int oldest = -1;
	for (int i = 0; i < CONNS_MAX; i++) {
		const struct client *cl = &m->cl[i];
		if (cl->fd < 0)
			return i;
		if (!cl->out && (oldest < 0 || cl->born_ns < m->cl[oldest].born_ns))
			oldest = i;
	}
	if (oldest >= 0)
		client_close(&m->cl[oldest]);
	return oldest;
}

/* Takes the connections waiting, at most half the table a round: those
 * taken in one round are read in the next before more come, so a scrape
 * accepted in a flood has sent its request (and is no longer idle, nor
 * dropped) before the connections behind it could push it out. */
static void accept_all(struct cli_metrics *m)
{
	for (int k = 0; k < CONNS_MAX / 2; k++) {
		const int fd = accept4(m->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			/* Out of descriptors or memory: the pending connection
			 * stays readable, and polling it again at once would
			 * spin a core beside the job. */
			if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
				m->accept_pause_ns = time_now_ns() + 100000000ull;
			return;
		}
		const int i = slot_for_new(m);
		if (i < 0) {
			close(fd);
			continue;
		}
		const uint64_t now = time_now_ns();
		m->cl[i].fd = fd;
		m->cl[i].born_ns = now;
		m->cl[i].deadline_ns = now + REQ_DEADLINE_MS * 1000000ull;
	}
}

static void *serve(void *arg)
{
	struct cli_metrics *m = arg;
	for (;;) {
		struct pollfd p[2 + CONNS_MAX];
		int who[2 + CONNS_MAX];
		nfds_t n = 0;
		p[n++] = (struct pollfd){ .fd = m->wake, .events = POLLIN };
		const uint64_t now = time_now_ns();
		uint64_t next = UINT64_MAX;
		for (int i = 0; i < CONNS_MAX; i++) {
			struct client *cl = &m->cl[i];
			if (cl->fd < 0)
				continue;
			if (now >= cl->deadline_ns) {
				client_close(cl);
				continue;
			}
			if (cl->deadline_ns < next)
				next = cl->deadline_ns;
			who[n] = i;
			p[n++] = (struct pollfd){ .fd = cl->fd, .events = cl->out ? POLLOUT : POLLIN };
		}
		/* The listening socket is always polled (but while accept
		 * fails for want of descriptors): a full table makes room. */
		const nfds_t lidx = n;
		const bool paused = now < m->accept_pause_ns;
		if (paused && m->accept_pause_ns < next)
			next = m->accept_pause_ns;
		if (!paused)
			p[n++] = (struct pollfd){ .fd = m->lfd, .events = POLLIN };
		const int timeout = next == UINT64_MAX ? -1 : (int)((next - now) / 1000000ull) + 1;
		const int r = poll(p, n, timeout);
		if (r < 0 && errno != EINTR)
			break;
		if (r <= 0)
			continue;
		if (p[0].revents)
			break;
		for (nfds_t k = 1; k < lidx; k++) {
			struct client *cl = &m->cl[who[k]];
			if (!p[k].revents)
				continue;
			if (p[k].revents & (POLLERR | POLLNVAL))
				client_close(cl);
			else if (cl->out)
				client_write(cl);
			else
				client_read(m, cl);
			/* An answer just made is sent at once if it fits. */
			if (cl->fd >= 0 && cl->out && cl->outoff == 0)
				client_write(cl);
		}
		if (lidx < n && p[lidx].revents)
			accept_all(m);
	}
	for (int i = 0; i < CONNS_MAX; i++)
		client_close(&m->cl[i]);
	return NULL;
}

int cli_metrics_start(struct cli_metrics *m, const struct cli *c, const char *branch, pid_t pid,
		      uint64_t every_ns)
{
	m->c = c;
	m->every_ns = every_ns;
	char *buf = NULL;
	size_t len;
	FILE *f = open_memstream(&buf, &len);
	if (!f)
		return crest_errf(-ENOMEM, "metrics");
	fputs("branch=\"", f);
	put_label(f, branch);
	fprintf(f, "\",pid=\"%d\"", (int)pid);
	if (fclose(f) != 0) {
		free(buf);
		return crest_errf(-ENOMEM, "metrics");
	}
	m->labels = buf;
	pthread_mutex_lock(&m->mu);
	m->v.store_bytes = store_bytes(c->store);
	pthread_mutex_unlock(&m->mu);
	file_update(m);
	if (m->lfd < 0)
		return 0;
	/* The thread takes no signal: SIGINT, SIGTERM and SIGHUP are the
	 * loop's (stop, or forward to the job). */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	const int err = pthread_create(&m->thread, NULL, serve, m);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err)
		return crest_errf(-err, "--metrics: cannot start its thread");
	m->running = true;
	if (c->json)
		fprintf(stderr, "{\"metrics\": \"%s\"}\n", m->url);
	else if (!c->quiet)
		fprintf(stderr, "%s: metrics on %s\n", c->prog, m->url);
	return 0;
}

void cli_metrics_round(struct cli_metrics *m, int rc, const struct tp_result *st)
{
	if (!m)
		return;
	/* Measured outside the lock: a scrape never waits on a directory walk. */
	const uint64_t bytes = m->c ? store_bytes(m->c->store) : 0;
	pthread_mutex_lock(&m->mu);
	if (rc == 0) {
		m->v.ok++;
		m->v.stall_ns = st->stall_ns;
		m->v.ingest_ns = st->r.ingest_ns;
		m->v.logical = st->r.logical_bytes;
		m->v.new_bytes = st->r.new_bytes;
		m->v.stored = st->r.stored_bytes;
		m->v.last_ok_ns = wall_ns();
	} else {
		m->v.failures++;
	}
	m->v.store_bytes = bytes;
	pthread_mutex_unlock(&m->mu);
	if (m->c)
		file_update(m);
}

void cli_metrics_close(struct cli_metrics *m)
{
	if (!m)
		return;
	if (m->running) {
		const uint64_t one = 1;
		if (write(m->wake, &one, sizeof(one)) < 0) {
			/* An eventfd refuses only past 2^64-2: cannot happen. */
		}
		pthread_join(m->thread, NULL);
	}
	for (int i = 0; i < CONNS_MAX; i++)
		client_close(&m->cl[i]);
	if (m->lfd >= 0)
		close(m->lfd);
	if (m->wake >= 0)
		close(m->wake);
	if (m->dirfd >= 0)
		close(m->dirfd);
	free(m->fname);
	free(m->labels);
	pthread_mutex_destroy(&m->mu);
	free(m);
}
