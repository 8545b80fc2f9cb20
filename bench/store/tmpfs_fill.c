/*
 * tmpfs_fill.c - ways for several threads to fill ONE new file in a tmpfs
 * (/dev/shm), each timed alone: the question behind crest get's 2.2 GB/s
 * into tmpfs with 16 threads, against >= 10 GB/s wanted. Each thread takes
 * windows of W bytes from a shared atomic cursor and writes a buffer of
 * non-zero bytes (stamped with the window's number) into its window; after
 * each method a sample of windows is read back with pread and compared, and
 * the file is deleted before the next.
 *
 *   tmpfs_fill DIR SIZE_MIB THREADS [WINDOW_KIB [METHODS]]
 *
 * WINDOW_KIB: 8192 unless given (a multiple of the page size). METHODS: a
 * comma-separated list of the names below, "default" (all but those marked
 * off) or "all"; default unless given. One line per method:
 *
 *   method  seconds  GB/s  (details)
 *
 * seconds run from open(O_CREAT) to the file's last byte written and its
 * mapping gone (munmap included, unlink not); GB/s = SIZE / 1e9 / seconds.
 * details: serial setup (ftruncate, fallocate, MAP_POPULATE), time in the
 * workers, munmap; summed over threads: time preparing windows (fallocate,
 * MADV_POPULATE_WRITE), copying (pwrite, memcpy) and dropping the window's
 * page table entries (MADV_DONTNEED, the _dn methods), system and user CPU
 * and voluntary context switches (sleeps on a lock, such as the inode's);
 * ShmemPmdMapped (huge pages mapped); the unlink's time; the check.
 *
 * A file system too full for the file is an error (one line, exit status 1),
 * never a SIGBUS: methods that store into a mapping first make its pages
 * (fallocate, MADV_POPULATE_WRITE, or MAP_POPULATE checked with mincore),
 * except "fault", which is off unless named; a SIGBUS there, or SIGINT or
 * SIGTERM, removes the file and exits with one line. A method that fails
 * prints its error and the others still run; the exit status is then 1.
 * (A DIR with less free space than SIZE is refused before any method runs;
 * TMPFS_FILL_NOCHECK=1 in the environment skips that, to try the errors.)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#ifndef MADV_HUGEPAGE
#define MADV_HUGEPAGE 14
#endif
#define TMPFS_MAGIC_ 0x01021994
#define HUGE_ALIGN (2u << 20)

enum op {
	OP_PWRITE,         /* pwrite at the window's offset */
	OP_POP_COPY,       /* MADV_POPULATE_WRITE on the window, then memcpy */
	OP_COPY,           /* memcpy into the mapping */
	OP_FALLOC_PWRITE,  /* fallocate(fd, 0, off, len), then pwrite */
	OP_FALLOC_COPY,    /* fallocate(fd, 0, off, len), then memcpy */
	OP_WINMAP,         /* mmap of the window alone, populate, memcpy, munmap */
};

enum {
	F_FALLOC = 1,      /* fallocate(fd, 0, 0, SIZE) before the threads, not ftruncate */
	F_MAP = 2,         /* one shared mapping of the file */
	F_MAP_POP = 4,     /* ... made with MAP_POPULATE (checked with mincore) */
	F_HUGE = 8,        /* ... with madvise(MADV_HUGEPAGE) */
	F_PROCS = 16,      /* processes, each with its own mapping, not threads */
	F_OFF = 32,        /* not in "default" */
	F_DONTNEED = 64,   /* each worker MADV_DONTNEEDs its window after the copy */
};

struct method {
	const char *name, *help;
	enum op op;
	unsigned flags;
};

static const struct method methods[] = {
	{"pwrite", "a: ftruncate, pwrite per window (the inode lock serialises)", OP_PWRITE, 0},
	{"populate", "b: ftruncate, one MAP_SHARED map, MADV_POPULATE_WRITE + memcpy per window (crest now)",
	 OP_POP_COPY, F_MAP},
	{"falloc_map", "d: fallocate(0, SIZE) once (timed), one map, memcpy per window", OP_COPY,
	 F_FALLOC | F_MAP},
	{"falloc_pop", "g: fallocate(0, SIZE) once (timed), one map, MADV_POPULATE_WRITE + memcpy per window",
	 OP_POP_COPY, F_FALLOC | F_MAP},
	{"falloc_map_dn", "g: as falloc_map, then MADV_DONTNEED per window (PTEs gone in parallel, munmap cheap)",
	 OP_COPY, F_FALLOC | F_MAP | F_DONTNEED},
	{"falloc_pwrite", "d': fallocate(0, SIZE) once (timed), pwrite per window", OP_PWRITE, F_FALLOC},
	{"wfalloc_pwrite", "e: ftruncate, per window fallocate(off, W) then pwrite", OP_FALLOC_PWRITE, 0},
	{"wfalloc_map", "e': ftruncate, one map, per window fallocate(off, W) then memcpy", OP_FALLOC_COPY, F_MAP},
	{"map_populate", "f: ftruncate, one map with MAP_POPULATE (timed, mincore-checked), memcpy", OP_COPY,
	 F_MAP | F_MAP_POP},
	{"populate_dn", "g: as populate, then MADV_DONTNEED per window", OP_POP_COPY, F_MAP | F_DONTNEED},
	{"huge", "g: as populate, with madvise(MADV_HUGEPAGE) on the map (tmpfs huge=advise/always)",
	 OP_POP_COPY, F_MAP | F_HUGE},
	{"procs", "g: as populate, from processes each with its own map (no shared mm, mmap_lock)",
	 OP_POP_COPY, F_MAP | F_PROCS},
	{"winmap", "g: ftruncate, per window its own mmap + POPULATE_WRITE + memcpy + munmap (off unless named)",
	 OP_WINMAP, F_OFF},
	/* last: a SIGBUS here ends the run */
	{"fault", "c: ftruncate, one map, memcpy alone (page faults; CAN SIGBUS when full: off unless named)",
	 OP_COPY, F_MAP | F_OFF},
};
#define NMETHODS (sizeof(methods) / sizeof(methods[0]))

/* What a worker reports (in memory shared with processes, for "procs"). */
struct result {
	uint64_t prep_ns, copy_ns, drop_ns, sys_ns, usr_ns, nvcsw;
};

struct shared {
	_Atomic uint64_t cursor;   /* next window */
	_Atomic int failed;        /* set by the first worker to fail */
	char err[256];             /* its message */
	struct result res[];       /* one per worker */
};

struct run {
	const struct method *m;
	int fd;
	uint64_t size, win, nwin;
	uint8_t *map;               /* threads' shared mapping, or NULL */
	uint8_t **src;              /* one source buffer per worker */
	struct shared *sh;
};

struct worker {
	struct run *r;
	unsigned idx;
};

static char g_path[PATH_MAX];   /* the file, for the signal handlers to remove */
static size_t g_page;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static double sec(uint64_t ns)
{
	return (double)ns / 1e9;
}

static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("tmpfs_fill: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	if (g_path[0])
		unlink(g_path);
	exit(1);
}

static void on_signal(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	char msg[160];
	int n;
	if (sig == SIGBUS)
		n = snprintf(msg, sizeof(msg),
			     "tmpfs_fill: SIGBUS storing at %p: the file system cannot back the mapping (full?)\n",
			     si->si_addr);
	else
		n = snprintf(msg, sizeof(msg), "tmpfs_fill: signal %d: stopped, file removed\n", sig);
	if (n > 0)
		(void)!write(2, msg, (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1);
	if (g_path[0])
		unlink(g_path);
	_exit(sig == SIGBUS ? 1 : 128 + sig);
}

/* Records the first failure; later ones are dropped. */
static void fail(struct shared *sh, const char *fmt, ...)
{
	int expect = 0;
	if (!atomic_compare_exchange_strong(&sh->failed, &expect, 1))
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(sh->err, sizeof(sh->err), fmt, ap);
	va_end(ap);
}

/* The bytes every window holds before its stamp: never zero. */
static void pattern(uint8_t *b, uint64_t len)
{
	for (uint64_t i = 0; i < len; i++)
		b[i] = (uint8_t)(1 + (i * 7 + i / 4096) % 251);
}

/* The first 8 bytes of window w: its number, every byte non-zero. */
static void stamp(uint8_t *b, uint64_t w)
{
	uint64_t v = w | 0x8080808080808080ull;
	memcpy(b, &v, sizeof(v));
}

static int pwrite_all(int fd, const uint8_t *b, uint64_t len, uint64_t off)
{
	for (uint64_t done = 0; done < len;) {
		ssize_t n = pwrite(fd, b + done, len - done, (off_t)(off + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;
		done += (uint64_t)n;
	}
	return 0;
}

static int fallocate_r(int fd, uint64_t off, uint64_t len)
{
	int rc;
	do
		rc = fallocate(fd, 0, (off_t)off, (off_t)len);
	while (rc < 0 && errno == EINTR);
	return rc < 0 ? -errno : 0;
}

static int populate(uint8_t *p, uint64_t len)
{
	int rc;
	do
		rc = madvise(p, len, MADV_POPULATE_WRITE);
	while (rc < 0 && errno == EINTR);
	return rc < 0 ? -errno : 0;
}

static const char *populate_err(int e)
{
	if (e == -EINVAL)
		return "MADV_POPULATE_WRITE not supported (kernel before 5.14?)";
	if (e == -EFAULT || e == -ENOMEM)
		return "the file system cannot back the pages (full?)";
	return strerror(-e);
}

/* The worker loop: windows from the cursor until none is left or a worker
 * has failed. */
static void work(struct run *r, unsigned idx, uint8_t *map)
{
	struct shared *sh = r->sh;
	struct result *res = &sh->res[idx];
	uint8_t *src = r->src[idx];
	struct rusage ru0, ru1;
	getrusage(RUSAGE_THREAD, &ru0);
	while (!atomic_load(&sh->failed)) {
		const uint64_t w = atomic_fetch_add(&sh->cursor, 1);
		if (w >= r->nwin)
			break;
		const uint64_t off = w * r->win;
		const uint64_t len = r->size - off < r->win ? r->size - off : r->win;
		stamp(src, w);
		const uint64_t t0 = now_ns();
		uint64_t t1 = t0;
		int e = 0;
		switch (r->m->op) {
		case OP_PWRITE:
			e = pwrite_all(r->fd, src, len, off);
			if (e)
				fail(sh, "pwrite at %llu: %s", (unsigned long long)off, strerror(-e));
			break;
		case OP_POP_COPY:
			e = populate(map + off, len);
			t1 = now_ns();
			if (e)
				fail(sh, "MADV_POPULATE_WRITE at %llu: %s", (unsigned long long)off, populate_err(e));
			else
				memcpy(map + off, src, len);
			break;
		case OP_COPY:
			memcpy(map + off, src, len);
			break;
		case OP_FALLOC_PWRITE:
		case OP_FALLOC_COPY:
			e = fallocate_r(r->fd, off, len);
			t1 = now_ns();
			if (e)
				fail(sh, "fallocate at %llu: %s", (unsigned long long)off, strerror(-e));
			else if (r->m->op == OP_FALLOC_COPY)
				memcpy(map + off, src, len);
			else if ((e = pwrite_all(r->fd, src, len, off)))
				fail(sh, "pwrite at %llu: %s", (unsigned long long)off, strerror(-e));
			break;
		case OP_WINMAP: {
			void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, (off_t)off);
			if (p == MAP_FAILED) {
				fail(sh, "mmap of window at %llu: %s", (unsigned long long)off, strerror(errno));
				break;
			}
			e = populate(p, len);
			t1 = now_ns();
			if (e)
				fail(sh, "MADV_POPULATE_WRITE at %llu: %s", (unsigned long long)off, populate_err(e));
			else
				memcpy(p, src, len);
			if (munmap(p, len) < 0)
				fail(sh, "munmap of window at %llu: %s", (unsigned long long)off, strerror(errno));
			break;
		}
		}
		const uint64_t t2 = now_ns();
		if ((r->m->flags & F_DONTNEED) && !atomic_load(&sh->failed) && madvise(map + off, len, MADV_DONTNEED) < 0)
			fail(sh, "madvise(MADV_DONTNEED) at %llu: %s", (unsigned long long)off, strerror(errno));
		res->prep_ns += t1 - t0;
		res->copy_ns += t2 - t1;
		res->drop_ns += now_ns() - t2;
	}
	getrusage(RUSAGE_THREAD, &ru1);
	res->sys_ns += (uint64_t)((ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) * 1000000000ll +
				  (ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec) * 1000ll);
	res->usr_ns += (uint64_t)((ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec) * 1000000000ll +
				  (ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec) * 1000ll);
	res->nvcsw += (uint64_t)(ru1.ru_nvcsw - ru0.ru_nvcsw);
}

static void *thread_main(void *arg)
{
	struct worker *wk = arg;
	work(wk->r, wk->idx, wk->r->map);
	return NULL;
}

/* size bytes of fd mapped shared at a 2 MiB-aligned address (so that huge
 * pages can be mapped whole), with MAP_POPULATE when asked. */
static uint8_t *map_file(int fd, uint64_t size, bool pop)
{
	const size_t span = (size_t)size + HUGE_ALIGN;
	uint8_t *res = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (res == MAP_FAILED)
		return NULL;
	uint8_t *a = (uint8_t *)(((uintptr_t)res + HUGE_ALIGN - 1) & ~(uintptr_t)(HUGE_ALIGN - 1));
	void *p = mmap(a, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | (pop ? MAP_POPULATE : 0),
		       fd, 0);
	if (p == MAP_FAILED) {
		int e = errno;
		munmap(res, span);
		errno = e;
		return NULL;
	}
	if (a > res)
		munmap(res, (size_t)(a - res));
	if (a + size < res + span)
		munmap(a + size, (size_t)(res + span - (a + size)));
	return a;
}

/* Huge-page-mapped shmem of this process in MiB (smaps_rollup), or -1. */
static long pmd_mapped_mib(void)
{
	FILE *f = fopen("/proc/self/smaps_rollup", "r");
	if (!f)
		return -1;
	char line[256];
	long kb = -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "ShmemPmdMapped: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb < 0 ? -1 : kb / 1024;
}

/* Every page of the mapping in the page cache: what MAP_POPULATE (which
 * reports no failure) made. */
static int check_resident(uint8_t *map, uint64_t size, char *why, size_t whylen)
{
	const size_t n = (size_t)((size + g_page - 1) / g_page);
	unsigned char *v = malloc(n);
	if (!v) {
		snprintf(why, whylen, "mincore vector: out of memory");
		return -1;
	}
	if (mincore(map, (size_t)size, v) < 0) {
		snprintf(why, whylen, "mincore: %s", strerror(errno));
		free(v);
		return -1;
	}
	size_t missing = 0;
	for (size_t i = 0; i < n; i++)
		missing += !(v[i] & 1);
	free(v);
	if (missing) {
		snprintf(why, whylen, "MAP_POPULATE left %zu pages unmade (file system full?)", missing);
		return -1;
	}
	return 0;
}

/* Windows 0, the last and a spread of others read back and compared. */
static int verify(int fd, uint64_t size, uint64_t win, uint64_t nwin, uint8_t *buf, uint8_t *exp,
		  char *why, size_t whylen)
{
	struct stat st;
	if (fstat(fd, &st) < 0) {
		snprintf(why, whylen, "fstat: %s", strerror(errno));
		return -1;
	}
	if ((uint64_t)st.st_size != size) {
		snprintf(why, whylen, "file is %lld bytes, not %llu", (long long)st.st_size, (unsigned long long)size);
		return -1;
	}
	if ((uint64_t)st.st_blocks * 512 < size) {
		snprintf(why, whylen, "file has only %llu bytes allocated of %llu",
			 (unsigned long long)st.st_blocks * 512, (unsigned long long)size);
		return -1;
	}
	const unsigned nsample = nwin < 64 ? (unsigned)nwin : 64;
	uint64_t x = 0x9e3779b97f4a7c15ull ^ size;
	for (unsigned s = 0; s < nsample; s++) {
		uint64_t w;
		if (nwin <= 64)
			w = s;
		else if (s == 0)
			w = 0;
		else if (s == 1)
			w = nwin - 1;
		else {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			w = x % nwin;
		}
		const uint64_t off = w * win, len = size - off < win ? size - off : win;
		for (uint64_t done = 0; done < len;) {
			ssize_t n = pread(fd, buf + done, len - done, (off_t)(off + done));
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				snprintf(why, whylen, "pread at %llu: %s", (unsigned long long)(off + done),
					 n < 0 ? strerror(errno) : "end of file");
				return -1;
			}
			done += (uint64_t)n;
		}
		stamp(exp, w);
		if (memcmp(buf, exp, len)) {
			uint64_t i = 0;
			while (buf[i] == exp[i])
				i++;
			snprintf(why, whylen, "byte %llu is %u, not %u", (unsigned long long)(off + i), buf[i], exp[i]);
			return -1;
		}
	}
	return 0;
}

/* One method, one line; 0, or -1 after printing why it failed. */
static int run_method(const struct method *m, const char *dir, uint64_t size, uint64_t win, unsigned nthr,
		      uint8_t **src, uint8_t *vbuf, uint8_t *vexp)
{
	struct run r = {.m = m, .fd = -1, .size = size, .win = win, .nwin = (size + win - 1) / win, .src = src};
	const size_t shlen = sizeof(struct shared) + nthr * sizeof(struct result);
	char why[320] = "";
	uint64_t t_setup = 0, t_work = 0, t_unmap = 0, t_rm = 0;
	long pmd = -1;
	int rc = -1;
	r.sh = mmap(NULL, shlen, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (r.sh == MAP_FAILED) {
		fprintf(stderr, "tmpfs_fill: %s: shared memory: %s\n", m->name, strerror(errno));
		printf("%-15s FAILED (shared memory)\n", m->name);
		return -1;
	}
	snprintf(g_path, sizeof(g_path), "%s/tmpfs_fill.%ld.tmp", dir, (long)getpid());

	const uint64_t t0 = now_ns();
	r.fd = open(g_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (r.fd < 0) {
		snprintf(why, sizeof(why), "cannot create %.200s: %s", g_path, strerror(errno));
		g_path[0] = 0;
		goto out;
	}
	if (m->flags & F_FALLOC) {
		int e = fallocate_r(r.fd, 0, size);
		if (e) {
			snprintf(why, sizeof(why), "fallocate of %llu bytes: %s", (unsigned long long)size, strerror(-e));
			goto out;
		}
	} else if (ftruncate(r.fd, (off_t)size) < 0) {
		snprintf(why, sizeof(why), "ftruncate: %s", strerror(errno));
		goto out;
	}
	if ((m->flags & F_MAP) && !(m->flags & F_PROCS)) {
		r.map = map_file(r.fd, size, m->flags & F_MAP_POP);
		if (!r.map) {
			snprintf(why, sizeof(why), "mmap of %llu bytes: %s", (unsigned long long)size, strerror(errno));
			goto out;
		}
		if ((m->flags & F_HUGE) && madvise(r.map, size, MADV_HUGEPAGE) < 0) {
			snprintf(why, sizeof(why), "madvise(MADV_HUGEPAGE): %s", strerror(errno));
			goto out;
		}
		if ((m->flags & F_MAP_POP) && check_resident(r.map, size, why, sizeof(why)) < 0)
			goto out;
	}
	const uint64_t t1 = now_ns();
	t_setup = t1 - t0;

	if (m->flags & F_PROCS) {
		pid_t *pid = calloc(nthr, sizeof(*pid));
		if (!pid) {
			snprintf(why, sizeof(why), "out of memory");
			goto out;
		}
		unsigned started = 0;
		fflush(NULL);
		for (; started < nthr; started++) {
			pid[started] = fork();
			if (pid[started] < 0) {
				fail(r.sh, "fork: %s", strerror(errno));
				break;
			}
			if (pid[started] == 0) {
				g_path[0] = 0;   /* the parent removes it */
				uint8_t *map = map_file(r.fd, size, false);
				if (!map)
					fail(r.sh, "mmap in process %u: %s", started, strerror(errno));
				else
					work(&r, started, map);
				_exit(0);
			}
		}
		for (unsigned i = 0; i < started; i++) {
			int st;
			while (waitpid(pid[i], &st, 0) < 0 && errno == EINTR)
				;
			if (WIFSIGNALED(st))
				fail(r.sh, "process %u killed by signal %d%s", i, WTERMSIG(st),
				     WTERMSIG(st) == SIGBUS ? " (SIGBUS: file system full?)" : "");
		}
		free(pid);
	} else {
		pthread_t *t = calloc(nthr, sizeof(*t));
		struct worker *wk = calloc(nthr, sizeof(*wk));
		if (!t || !wk) {
			free(t), free(wk);
			snprintf(why, sizeof(why), "out of memory");
			goto out;
		}
		unsigned started = 0;
		for (; started < nthr; started++) {
			wk[started] = (struct worker){&r, started};
			int e = pthread_create(&t[started], NULL, thread_main, &wk[started]);
			if (e) {
				fail(r.sh, "pthread_create: %s", strerror(e));
				break;
			}
		}
		for (unsigned i = 0; i < started; i++)
			pthread_join(t[i], NULL);
		free(t), free(wk);
	}
	const uint64_t t2 = now_ns();
	t_work = t2 - t1;
	if (atomic_load(&r.sh->failed)) {
		snprintf(why, sizeof(why), "%s", r.sh->err);
		goto out;
	}
	if (r.map) {
		pmd = pmd_mapped_mib();   /* outside the timing */
		const uint64_t t3 = now_ns();
		if (munmap(r.map, size) < 0) {
			r.map = NULL;
			snprintf(why, sizeof(why), "munmap: %s", strerror(errno));
			goto out;
		}
		r.map = NULL;
		t_unmap = now_ns() - t3;
	}
	const uint64_t total = t_setup + t_work + t_unmap;
	if (verify(r.fd, size, win, r.nwin, vbuf, vexp, why, sizeof(why)) < 0)
		goto out;
	struct result sum = {0};
	for (unsigned i = 0; i < nthr; i++) {
		sum.prep_ns += r.sh->res[i].prep_ns;
		sum.copy_ns += r.sh->res[i].copy_ns;
		sum.drop_ns += r.sh->res[i].drop_ns;
		sum.sys_ns += r.sh->res[i].sys_ns;
		sum.usr_ns += r.sh->res[i].usr_ns;
		sum.nvcsw += r.sh->res[i].nvcsw;
	}
	close(r.fd);
	r.fd = -1;
	const uint64_t t4 = now_ns();
	if (unlink(g_path) < 0) {
		snprintf(why, sizeof(why), "unlink %.200s: %s", g_path, strerror(errno));
		goto out;
	}
	g_path[0] = 0;
	t_rm = now_ns() - t4;
	char pmds[48] = "";
	if (m->flags & F_MAP && !(m->flags & F_PROCS))
		snprintf(pmds, sizeof(pmds), "; pmd-mapped %ld MiB", pmd);
	printf("%-15s %7.3f %6.2f  (setup %.3f s, workers %.3f s, munmap %.3f s; sum over %u: prep %.2f s, "
	       "copy %.2f s, dontneed %.2f s, sys %.2f s, usr %.2f s, vcsw %llu%s; rm %.3f s; check ok)\n",
	       m->name, sec(total), (double)size / 1e9 / sec(total), sec(t_setup), sec(t_work), sec(t_unmap), nthr,
	       sec(sum.prep_ns), sec(sum.copy_ns), sec(sum.drop_ns), sec(sum.sys_ns), sec(sum.usr_ns), (unsigned long long)sum.nvcsw,
	       pmds, sec(t_rm));
	fflush(stdout);
	rc = 0;
out:
	if (rc < 0) {
		fprintf(stderr, "tmpfs_fill: %s: %s\n", m->name, why);
		printf("%-15s FAILED  (%s)\n", m->name, why);
		fflush(stdout);
	}
	if (r.map)
		munmap(r.map, size);
	if (r.fd >= 0)
		close(r.fd);
	if (g_path[0])
		unlink(g_path);
	g_path[0] = 0;
	munmap(r.sh, shlen);
	return rc;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: tmpfs_fill DIR SIZE_MIB THREADS [WINDOW_KIB [METHODS]]\n"
		   "  fills one new file of SIZE_MIB MiB in DIR from THREADS threads, windows of WINDOW_KIB\n"
		   "  (8192) from a shared cursor, once per method; METHODS: comma-separated names,\n"
		   "  \"default\" (all but those marked off) or \"all\":\n");
	for (size_t i = 0; i < NMETHODS; i++)
		fprintf(f, "    %-15s %s\n", methods[i].name, methods[i].help);
}

static bool parse_u64(const char *s, uint64_t *v)
{
	char *end;
	if (!*s || *s == '-')
		return false;
	errno = 0;
	unsigned long long x = strtoull(s, &end, 10);
	if (errno || *end || x == 0)
		return false;
	*v = x;
	return true;
}

/* The first line of a file, or "?" */
static void read_line(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "r");
	if (!f || !fgets(buf, (int)len, f))
		snprintf(buf, len, "?");
	if (f)
		fclose(f);
	buf[strcspn(buf, "\n")] = 0;
}

/* The options of the mount DIR lies on (from /proc/self/mountinfo). */
static void mount_opts(const char *dir, char *buf, size_t len)
{
	char real[PATH_MAX], line[4096];
	snprintf(buf, len, "?");
	if (!realpath(dir, real))
		return;
	FILE *f = fopen("/proc/self/mountinfo", "r");
	if (!f)
		return;
	size_t best = 0;
	while (fgets(line, sizeof(line), f)) {
		/* id parent maj:min root mountpoint opts [optional...] - fstype source superopts */
		char mp[1024], fstype[64], source[256], super[1024];
		const char *dash = strstr(line, " - ");
		if (!dash || sscanf(line, "%*s %*s %*s %*s %1023s", mp) != 1 ||
		    sscanf(dash + 3, "%63s %255s %1023s", fstype, source, super) != 3)
			continue;
		const size_t n = strlen(mp);
		const bool under = strcmp(mp, "/") == 0 ||
				   (strncmp(real, mp, n) == 0 && (real[n] == '/' || real[n] == 0));
		if (under && n >= best) {
			best = n;
			snprintf(buf, len, "%s %s %s", mp, fstype, super);
		}
	}
	fclose(f);
}

int main(int argc, char **argv)
{
	if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		usage(stdout);
		return 0;
	}
	if (argc < 4 || argc > 6) {
		usage(stderr);
		return 2;
	}
	g_page = (size_t)sysconf(_SC_PAGESIZE);
	const char *dir = argv[1];
	uint64_t mib, thr, wkib = 8192;
	if (!parse_u64(argv[2], &mib) || mib > (1ull << 30))
		die("SIZE_MIB: not a number of MiB: %s", argv[2]);
	if (!parse_u64(argv[3], &thr) || thr > 4096)
		die("THREADS: not a number from 1 to 4096: %s", argv[3]);
	if (argc >= 5 && (!parse_u64(argv[4], &wkib) || wkib > (1ull << 22) || (wkib * 1024) % g_page))
		die("WINDOW_KIB: not a multiple of the page size (%zu bytes) up to 4 GiB: %s", g_page, argv[4]);
	const uint64_t size = mib << 20, win = wkib << 10;
	if (size > SIZE_MAX / 2)
		die("SIZE_MIB too large for this machine");
	bool want[NMETHODS];
	const char *list = argc >= 6 ? argv[5] : "default";
	for (size_t i = 0; i < NMETHODS; i++)
		want[i] = !strcmp(list, "all") || (!strcmp(list, "default") && !(methods[i].flags & F_OFF));
	if (strcmp(list, "all") && strcmp(list, "default")) {
		char *copy = strdup(list), *save = NULL;
		if (!copy)
			die("out of memory");
		for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
			size_t i = 0;
			while (i < NMETHODS && strcmp(tok, methods[i].name))
				i++;
			if (i == NMETHODS)
				die("no method %s (tmpfs_fill --help lists them)", tok);
			want[i] = true;
		}
		free(copy);
	}

	struct sigaction sa = {.sa_sigaction = on_signal, .sa_flags = SA_SIGINFO};
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGBUS, &sa, NULL) < 0 || sigaction(SIGINT, &sa, NULL) < 0 || sigaction(SIGTERM, &sa, NULL) < 0)
		die("sigaction: %s", strerror(errno));

	struct stat dst;
	if (stat(dir, &dst) < 0)
		die("%s: %s", dir, strerror(errno));
	if (!S_ISDIR(dst.st_mode))
		die("%s: not a directory", dir);
	if (strlen(dir) > PATH_MAX - 64)
		die("DIR: too long a path");
	struct statvfs vfs;
	if (statvfs(dir, &vfs) < 0)
		die("statvfs %s: %s", dir, strerror(errno));
	const uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
	if (avail < size && !getenv("TMPFS_FILL_NOCHECK"))   /* that variable: to try the errors */
		die("%s has %llu MiB free, the file needs %llu MiB", dir, (unsigned long long)(avail >> 20),
		    (unsigned long long)mib);
	struct statfs sfs;
	const bool tmpfs = statfs(dir, &sfs) == 0 && sfs.f_type == TMPFS_MAGIC_;

	struct utsname u;
	char shm[256], huge2m[256], thp[256], mnt[2200];
	if (uname(&u) < 0)
		die("uname: %s", strerror(errno));
	read_line("/sys/kernel/mm/transparent_hugepage/shmem_enabled", shm, sizeof(shm));
	read_line("/sys/kernel/mm/transparent_hugepage/hugepages-2048kB/shmem_enabled", huge2m, sizeof(huge2m));
	read_line("/sys/kernel/mm/transparent_hugepage/enabled", thp, sizeof(thp));
	mount_opts(dir, mnt, sizeof(mnt));
	char cpu[256] = "?", line[512];
	FILE *ci = fopen("/proc/cpuinfo", "r");
	while (ci && fgets(line, sizeof(line), ci))
		if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
			snprintf(cpu, sizeof(cpu), "%s", strchr(line, ':') + 2);
			cpu[strcspn(cpu, "\n")] = 0;
			break;
		}
	if (ci)
		fclose(ci);
	printf("# tmpfs_fill: nproc %ld (%s), kernel %s %s, shmem_enabled: %s (2048kB: %s), thp enabled: %s; "
	       "%s: %s%s; %llu MiB, %u threads, window %llu KiB\n",
	       sysconf(_SC_NPROCESSORS_ONLN), cpu, u.release, u.version, shm, huge2m, thp, dir, mnt,
	       tmpfs ? "" : " (NOT tmpfs)", (unsigned long long)mib, (unsigned)thr, (unsigned long long)wkib);
	printf("# method          seconds   GB/s  (details)\n");
	fflush(stdout);

	/* Source buffers, made and touched before any timing. */
	uint8_t **src = calloc(thr, sizeof(*src));
	const size_t blen = (size_t)((win + HUGE_ALIGN - 1) & ~(uint64_t)(HUGE_ALIGN - 1));
	uint8_t *vbuf = aligned_alloc(HUGE_ALIGN, blen), *vexp = aligned_alloc(HUGE_ALIGN, blen);
	if (!src || !vbuf || !vexp)
		die("out of memory for the buffers");
	for (unsigned i = 0; i < thr; i++) {
		if (!(src[i] = aligned_alloc(HUGE_ALIGN, blen)))
			die("out of memory for %u source buffers of %llu KiB", (unsigned)thr, (unsigned long long)wkib);
		(void)madvise(src[i], blen, MADV_HUGEPAGE);   /* fewer TLB misses reading it; best effort */
		pattern(src[i], win);
	}
	pattern(vexp, win);

	int status = 0;
	for (size_t i = 0; i < NMETHODS; i++)
		if (want[i] && run_method(&methods[i], dir, size, win, (unsigned)thr, src, vbuf, vexp) < 0)
			status = 1;
	for (unsigned i = 0; i < thr; i++)
		free(src[i]);
	free(src), free(vbuf), free(vexp);
	return status;
}
