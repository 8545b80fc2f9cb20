/* hostcache.c - the host copy of a job's device regions; see hostcache.h. */
#include "gpu/hostcache.h"

#include "util/endian.h"
#include "util/err.h"
#include "util/par.h"
#include "util/sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAGIC "CRESTHC"             /* with its NUL: 8 bytes */
#define FIXED 32                     /* the header before the region table */
#define NAME_MAX_LEN 1024u
#define HINT_MAGIC "CRESTHCH"
#define HINT 40                      /* the hint after the header: magic, id */
#ifndef MADV_POPULATE_READ           /* Linux 5.14; older headers lack them */
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

struct entry {
	char *name;
	uint64_t off, size;
};

struct mapping {
	uint8_t *p;
	size_t len;
};

struct hostcache {
	char *path;
	uint64_t hint_at;             /* the hint's offset in the current file */
	struct entry *e;              /* the current layout */
	size_t n;
	struct mapping cur;           /* the current file's mapping, or none */
	struct mapping *old;          /* mappings of files since replaced */
	size_t nold;
};

int hostcache_name(const char *store, const uint8_t uuid[16], char *out, size_t cap)
{
	const size_t sl = strlen(store);
	uint8_t *buf = malloc(sl + 1 + 16), h[SHA256_LEN];
	if (!buf)
		return crest_errf(-ENOMEM, "naming the host cache");
	memcpy(buf, store, sl + 1);
	memcpy(buf + sl + 1, uuid, 16);
	int rc = sha256_once(buf, sl + 1 + 16, h);
	free(buf);
	if (rc < 0)
		return rc;
	char hex[2 * SHA256_LEN + 1];
	hex_encode(h, SHA256_LEN, hex);
	if (snprintf(out, cap, "crest-cache-%.16s", hex) >= (int)cap)
		return crest_errx(-ENAMETOOLONG, "naming the host cache: no room");
	return 0;
}

static void entries_free(struct entry *e, size_t n)
{
	if (!e)   /* header_read's table could not be allocated */
		return;
	for (size_t i = 0; i < n; i++)
		free(e[i].name);
	free(e);
}

/* Reads and checks the header of the file open at fd, of file_len bytes;
 * its table into *e, *n. -EBADMSG (no message) when it does not check out. */
static int header_read(int fd, uint64_t file_len, struct entry **eout, size_t *nout, uint64_t *hint_at)
{
	uint8_t fixed[FIXED];
	if (file_len < FIXED + SHA256_LEN || pread(fd, fixed, FIXED, 0) != FIXED)
		return -EBADMSG;
	const uint64_t h = le64_get(fixed + 16);
	const uint32_t n = le32_get(fixed + 12);
	if (memcmp(fixed, MAGIC, 8) || le32_get(fixed + 8) != HOSTCACHE_VERSION || le64_get(fixed + 24) != file_len ||
	    n > HOSTCACHE_MAX_REGIONS || h < FIXED + SHA256_LEN || h > file_len - HINT ||
	    h > FIXED + SHA256_LEN + (uint64_t)n * (18 + NAME_MAX_LEN))
		return -EBADMSG;
	uint8_t *b = malloc(h);
	struct entry *e = calloc(n ? n : 1, sizeof(*e));
	int rc = b && e ? 0 : -ENOMEM;
	if (rc == 0 && pread(fd, b, h, 0) != (ssize_t)h)
		rc = -EBADMSG;
	uint8_t sum[SHA256_LEN];
	if (rc == 0 && (sha256_once(b, h - SHA256_LEN, sum) < 0 || memcmp(sum, b + h - SHA256_LEN, SHA256_LEN)))
		rc = -EBADMSG;
	uint64_t at = FIXED, end = h + HINT;   /* the table; then the end of the last region */
	for (uint32_t i = 0; rc == 0 && i < n; i++) {
		if (at + 18 > h - SHA256_LEN) {
			rc = -EBADMSG;
			break;
		}
		const uint64_t off = le64_get(b + at), size = le64_get(b + at + 8);
		const uint64_t nl = le16_get(b + at + 16);
		at += 18;
		if (nl < 1 || nl > NAME_MAX_LEN || at + nl > h - SHA256_LEN || off % HOSTCACHE_ALIGN || off < end ||
		    size > file_len || off > file_len - size || memchr(b + at, 0, nl)) {
			rc = -EBADMSG;
			break;
		}
		if (!(e[i].name = strndup((const char *)b + at, nl))) {
			rc = -ENOMEM;
			break;
		}
		e[i] = (struct entry){ .name = e[i].name, .off = off, .size = size };
		at += nl;
		end = off + size;
	}
	if (rc == 0 && at != h - SHA256_LEN)
		rc = -EBADMSG;
	free(b);
	if (rc < 0) {
		entries_free(e, n);
		return rc;
	}
	*eout = e;
	*nout = n;
	*hint_at = h;
	return 0;
}

static int map_file(int fd, size_t len, struct mapping *m)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	*m = (struct mapping){ .p = p, .len = len };
	return 0;
}

int hostcache_dir_check(const char *dir)
{
	struct stat st;
	if (stat(dir, &st) < 0)
		return crest_errf(-errno, "host cache directory %s", dir);
	if (!S_ISDIR(st.st_mode))
		return crest_errx(-ENOTDIR, "host cache directory %s: not a directory", dir);
	return 0;
}

int hostcache_open(const char *dir, const char *name, struct hostcache **out)
{
	int rc = hostcache_dir_check(dir);
	if (rc < 0)
		return rc;
	if (access(dir, W_OK | X_OK) < 0)
		return crest_errf(-errno, "host cache directory %s", dir);
	struct stat st;
	struct hostcache *hc = calloc(1, sizeof(*hc));
	if (!hc || asprintf(&hc->path, "%s/%s", dir, name) < 0) {
		if (hc)
			hc->path = NULL;
		hostcache_close(hc);
		return crest_errf(-ENOMEM, "opening the host cache in %s", dir);
	}
	/* An existing file is only read if it is ours and regular: in a shared
	 * directory anyone may have put one there. Its bytes are checked at
	 * every restore anyway; its layout is checked here. */
	const int fd = open(hc->path, O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd >= 0) {
		if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
		    header_read(fd, (uint64_t)st.st_size, &hc->e, &hc->n, &hc->hint_at) == 0 &&
		    map_file(fd, (size_t)st.st_size, &hc->cur) < 0) {
			entries_free(hc->e, hc->n);
			hc->e = NULL;
			hc->n = 0;
		}
		close(fd);
	}
	*out = hc;
	return 0;
}

void hostcache_forget_old(struct hostcache *hc)
{
	if (!hc)
		return;
	for (size_t i = 0; i < hc->nold; i++)
		munmap(hc->old[i].p, hc->old[i].len);
	free(hc->old);
	hc->old = NULL;
	hc->nold = 0;
}

void hostcache_close(struct hostcache *hc)
{
	if (!hc)
		return;
	if (hc->cur.p)
		munmap(hc->cur.p, hc->cur.len);
	hostcache_forget_old(hc);
	entries_free(hc->e, hc->n);
	free(hc->path);
	free(hc);
}

static bool same_layout(const struct hostcache *hc, const struct hostcache_region *r, size_t n)
{
	if (!hc->cur.p || hc->n != n)
		return false;
	for (size_t i = 0; i < n; i++)
		if (hc->e[i].size != r[i].size || strcmp(hc->e[i].name, r[i].name))
			return false;
	return true;
}

static uint64_t align_up(uint64_t v)
{
	return (v + HOSTCACHE_ALIGN - 1) / HOSTCACHE_ALIGN * HOSTCACHE_ALIGN;
}

int hostcache_layout(struct hostcache *hc, const struct hostcache_region *r, size_t n)
{
	if (same_layout(hc, r, n))
		return 0;
	if (n > HOSTCACHE_MAX_REGIONS)
		return crest_errx(-E2BIG, "host cache %s: %zu regions, at most %u", hc->path, n, HOSTCACHE_MAX_REGIONS);
	uint64_t h = FIXED + SHA256_LEN;
	for (size_t i = 0; i < n; i++) {
		const size_t nl = strlen(r[i].name);
		if (nl < 1 || nl > NAME_MAX_LEN)
			return crest_errx(-EINVAL, "host cache %s: region name of %zu bytes", hc->path, nl);
		h += 18 + nl;
	}
	struct entry *e = calloc(n ? n : 1, sizeof(*e));
	/* The hint written too (zeros), so that its page is allocated now: a
	 * store into a tmpfs page that cannot be had is a SIGBUS. */
	uint8_t *b = calloc(1, h + HINT);
	int rc = e && b ? 0 : crest_errf(-ENOMEM, "laying out the host cache %s", hc->path);
	uint64_t end = align_up(h + HINT), at = FIXED;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		const size_t nl = strlen(r[i].name);
		if (!(e[i].name = strdup(r[i].name))) {
			rc = crest_errf(-ENOMEM, "laying out the host cache %s", hc->path);
			break;
		}
		e[i].off = end;
		e[i].size = r[i].size;
		if (r[i].size > UINT64_MAX / 2 || end > UINT64_MAX / 2) {
			rc = crest_errx(-EFBIG, "host cache %s: regions too large", hc->path);
			break;
		}
		end = align_up(end + r[i].size);
		le64_put(b + at, e[i].off);
		le64_put(b + at + 8, e[i].size);
		b[at + 16] = (uint8_t)nl;
		b[at + 17] = (uint8_t)(nl >> 8);
		memcpy(b + at + 18, r[i].name, nl);
		at += 18 + nl;
	}
	if (rc == 0 && end > (uint64_t)SIZE_MAX / 2)
		rc = crest_errx(-EFBIG, "host cache %s: regions too large", hc->path);
	char *tmp = NULL;
	int fd = -1;
	struct mapping m = { 0 };
	if (rc == 0) {
		memcpy(b, MAGIC, 8);
		le32_put(b + 8, HOSTCACHE_VERSION);
		le32_put(b + 12, (uint32_t)n);
		le64_put(b + 16, h);
		le64_put(b + 24, end);
		rc = sha256_once(b, h - SHA256_LEN, b + h - SHA256_LEN);
	}
	if (rc == 0 && asprintf(&tmp, "%s.XXXXXX", hc->path) < 0) {
		tmp = NULL;
		rc = crest_errf(-ENOMEM, "laying out the host cache %s", hc->path);
	}
	if (rc == 0 && (fd = mkostemp(tmp, O_CLOEXEC)) < 0)
		rc = crest_errf(-errno, "creating the host cache %s", tmp);
	/* The size is set, not allocated: pages come as checkpoints write them. */
	if (rc == 0 && ftruncate(fd, (off_t)end) < 0)
		rc = crest_errf(-errno, "sizing the host cache %s to %llu bytes", tmp, (unsigned long long)end);
	if (rc == 0 && pwrite(fd, b, h + HINT, 0) != (ssize_t)(h + HINT))
		rc = crest_errf(-EIO, "writing the host cache's header to %s", tmp);
	if (rc == 0 && (rc = map_file(fd, (size_t)end, &m)) < 0)
		rc = crest_errf(rc, "mapping the host cache %s (%llu bytes)", tmp, (unsigned long long)end);
	struct mapping *old = NULL;
	if (rc == 0 && hc->cur.p && !(old = realloc(hc->old, (hc->nold + 1) * sizeof(*old))))
		rc = crest_errf(-ENOMEM, "laying out the host cache %s", hc->path);
	if (rc == 0 && rename(tmp, hc->path) < 0)
		rc = crest_errf(-errno, "renaming %s to %s", tmp, hc->path);
	if (fd >= 0)
		close(fd);
	free(b);
	if (rc < 0) {
		if (m.p)
			munmap(m.p, m.len);
		if (tmp && fd >= 0)
			unlink(tmp);
		free(tmp);
		entries_free(e, n);
		if (old)
			hc->old = old;
		return rc;
	}
	free(tmp);
	/* A checkpoint in flight may still be writing into the old mapping. */
	if (hc->cur.p) {
		hc->old = old;
		hc->old[hc->nold++] = hc->cur;
	}
	hc->cur = m;
	hc->hint_at = h;
	entries_free(hc->e, hc->n);
	hc->e = e;
	hc->n = n;
	return 0;
}

uint8_t *hostcache_find(const struct hostcache *hc, const char *name, uint64_t size)
{
	if (!hc || !hc->cur.p)
		return NULL;
	for (size_t i = 0; i < hc->n; i++)
		if (hc->e[i].size == size && !strcmp(hc->e[i].name, name))
			return hc->cur.p + hc->e[i].off;
	return NULL;
}

int hostcache_populate(const void *p, size_t n, bool write)
{
	const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	const uintptr_t a = (uintptr_t)p & ~(pg - 1), e = ((uintptr_t)p + n + pg - 1) & ~(pg - 1);
	return madvise((void *)a, e - a, write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ) < 0 ? -errno : 0;
}

/* The hint's page, there before it is read or written: a file another
 * process wrote may have a hole there, and a tmpfs may be full (SIGBUS). */
static bool hint_page(const struct hostcache *hc, bool write)
{
	return hostcache_populate(hc->cur.p + hc->hint_at, HINT, write) == 0;
}

void hostcache_hint_set(struct hostcache *hc, const uint8_t id[32])
{
	static const uint8_t none[32];
	if (!hc || !hc->cur.p || !hint_page(hc, true))
		return;
	memcpy(hc->cur.p + hc->hint_at + 8, id ? id : none, 32);
	memcpy(hc->cur.p + hc->hint_at, HINT_MAGIC, 8);
}

bool hostcache_hint_is(const struct hostcache *hc, const uint8_t id[32])
{
	return hc && hc->cur.p && hint_page(hc, false) && !memcmp(hc->cur.p + hc->hint_at, HINT_MAGIC, 8) &&
	       !memcmp(hc->cur.p + hc->hint_at + 8, id, 32);
}

/* ---- into the device ---- */

struct to_dev {
	const uint8_t *src;
	uint64_t len;
	size_t win;
	const struct cudrv *d;
	CUcontext ctx;
	CUdeviceptr dst;
	struct pool *pool;
};

/* A thread's slice, cut in two buffers, its stream and an event per buffer. */
struct to_dev_tls {
	const struct cudrv *d;
	struct pool_slice *sl;
	CUstream s;
	CUevent ev[2];
	unsigned k;
};

static void tls_free(void *arg)
{
	struct to_dev_tls *t = arg;
	if (!t)
		return;
	if (t->s) {
		t->d->StreamSynchronize(t->s);
		t->d->StreamDestroy(t->s);
	}
	for (int i = 0; i < 2; i++)
		if (t->ev[i])
			t->d->EventDestroy(t->ev[i]);
	if (t->sl)
		pool_give(t->sl);
	free(t);
}

static int tls_new(struct par *p, void **out)
{
	const struct to_dev *x = p->arg;
	struct to_dev_tls *t = calloc(1, sizeof(*t));
	if (!t)
		return crest_errf(-ENOMEM, "restoring from the host cache");
	t->d = x->d;
	int rc = cudrv_check(x->d, x->d->CtxSetCurrent(x->ctx), "entering the region's context");
	if (rc == 0)
		rc = cudrv_check(x->d, x->d->StreamCreate(&t->s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
	for (int i = 0; rc == 0 && i < 2; i++)
		rc = cudrv_check(x->d, x->d->EventCreate(&t->ev[i], CU_EVENT_DISABLE_TIMING), "cuEventCreate");
	if (rc < 0) {
		tls_free(t);
		return rc;
	}
	t->sl = pool_take(x->pool);
	*out = t;
	return 0;
}

/* Window i: into the buffer its copy of two windows ago has left. */
static int window(struct par *p, void *arg, size_t i)
{
	const struct to_dev *x = p->arg;
	struct to_dev_tls *t = arg;
	const uint64_t off = (uint64_t)i * x->win;
	const size_t n = x->len - off < x->win ? (size_t)(x->len - off) : x->win;
	uint8_t *buf = t->sl->p + (size_t)t->k * x->win;
	int rc = cudrv_check(x->d, x->d->EventSynchronize(t->ev[t->k]), "waiting for a host-to-device copy");
	/* The window's pages in one call, before anything reads them: in a
	 * full tmpfs this fails where a plain read would be a SIGBUS in the
	 * job (hostcache_populate), and the region comes from the store. It is
	 * also faster: a new process would otherwise fault the cache in 4 KiB
	 * at a time (on the H100 host, 8 GiB with 16 threads: 0.303 s with it,
	 * 0.324 s without). */
	if (rc == 0 && (rc = hostcache_populate(x->src + off, n, false)) < 0)
		return crest_errf(rc, "mapping the host cache at offset %llu (its tmpfs full?)",
				  (unsigned long long)off);
	if (rc == 0) {
		memcpy(buf, x->src + off, n);
		rc = cudrv_check(x->d, x->d->MemcpyHtoDAsync(x->dst + off, buf, n, t->s),
				 "copying to the device (cuMemcpyHtoDAsync)");
	}
	if (rc == 0)
		rc = cudrv_check(x->d, x->d->EventRecord(t->ev[t->k], t->s), "cuEventRecord");
	t->k ^= 1;
	atomic_fetch_add(&p->bytes, n);
	return rc < 0 ? crest_errctx(rc, "host cache, offset %llu", (unsigned long long)off) : 0;
}

int hostcache_to_device(const uint8_t *src, uint64_t len, const struct cudrv *d, CUcontext ctx, CUdeviceptr dst,
			struct pool *pool, unsigned threads)
{
	if (!len)
		return 0;
	struct to_dev x = { .src = src, .len = len, .win = pool_slice_bytes(pool) / 2, .d = d, .ctx = ctx,
			    .dst = dst, .pool = pool };
	if (!threads)
		threads = par_cores();
	/* Each thread holds a slice: never more threads than slices. */
	threads = threads > pool_nslices(pool) ? pool_nslices(pool) : threads;
	struct par p = { .n = (size_t)((len + x.win - 1) / x.win), .fn = window, .tls_new = tls_new,
			 .tls_free = tls_free, .arg = &x };
	return par_run(&p, threads, NULL, 0);
}
