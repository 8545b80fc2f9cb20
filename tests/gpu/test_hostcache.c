/*
 * test_hostcache.c - the host cache's file (gpu/hostcache.h), without a GPU:
 * random layouts written, read back by a new handle and found byte for
 * byte; layouts changed under a writer; every header byte flipped, the file
 * cut short, made a symlink or someone else's: each such file is ignored,
 * never read, and the next layout replaces it. And crest_open's refusal of
 * a host cache directory that is not one; and a header whose table cannot
 * be allocated; and hostcache_populate on ranges off page boundaries and
 * unmapped. Seed: CREST_TEST_SEED (printed).
 */
#include "crest.h"
#include "gpu/hostcache.h"
#include "tests/check.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <malloc.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXR 8

struct layout {
	size_t n;
	char names[MAXR][48];
	uint64_t size[MAXR];
};

static void layout_random(struct layout *l, uint64_t *st)
{
	static const char abc[] = "abcdefghijklmnopqrstuvwxyz0123456789/._-";
	l->n = 1 + check_rnd(st) % MAXR;
	for (size_t i = 0; i < l->n; i++) {
		const size_t nl = 1 + check_rnd(st) % 40;
		for (size_t k = 0; k < nl; k++)
			l->names[i][k] = abc[check_rnd(st) % (sizeof(abc) - 1)];
		l->names[i][nl] = 0;
		snprintf(l->names[i] + nl, 48 - nl, "%zu", i);   /* unique */
		l->size[i] = check_rnd(st) % 4 == 0 ? 0 : check_rnd(st) % (3u << 20);
	}
}

static void regions_of(const struct layout *l, struct hostcache_region *r)
{
	for (size_t i = 0; i < l->n; i++)
		r[i] = (struct hostcache_region){ .name = l->names[i], .size = l->size[i] };
}

/* Fills every region of l in hc from seed. */
static void fill(struct hostcache *hc, const struct layout *l, uint64_t seed)
{
	for (size_t i = 0; i < l->n; i++) {
		uint8_t *p = hostcache_find(hc, l->names[i], l->size[i]);
		CHECK(p, "region %s of %llu bytes not found after the layout", l->names[i],
		      (unsigned long long)l->size[i]);
		uint64_t s = seed + i;
		if (p)
			check_fill64(p, l->size[i], &s);
	}
}

/* Whether a new handle on dir/name finds l's regions with fill's bytes. */
static bool reads_back(const char *dir, const char *name, const struct layout *l, uint64_t seed)
{
	struct hostcache *hc;
	OK(hostcache_open(dir, name, &hc));
	bool ok = true;
	for (size_t i = 0; i < l->n && ok; i++) {
		const uint8_t *p = hostcache_find(hc, l->names[i], l->size[i]);
		if (!p) {
			ok = false;
			break;
		}
		uint8_t *want = malloc(l->size[i] + 1);
		uint64_t s = seed + i;
		check_fill64(want, l->size[i], &s);
		ok = !memcmp(p, want, l->size[i]);
		free(want);
	}
	CHECK(!hostcache_find(hc, "no such region", 1), "a region that was never laid out was found");
	hostcache_close(hc);
	return ok;
}

/* The header's length: the bytes a flip must make the reader refuse. */
/* How many mappings of this process are of files replaced at path. */
static int replaced_maps(const char *path)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char l[1024];
	int n = 0;
	while (f && fgets(l, sizeof(l), f))
		n += strstr(l, path) && strstr(l, "(deleted)");
	if (f)
		fclose(f);
	return n;
}

static uint64_t header_len(const char *path)
{
	uint8_t b[24] = { 0 };
	const int fd = open(path, O_RDONLY);
	if (fd < 0 || pread(fd, b, sizeof(b), 0) != (ssize_t)sizeof(b))
		return 0;
	close(fd);
	uint64_t h = 0;
	for (int i = 8; i-- > 0;)
		h = h << 8 | b[16 + i];
	return h;
}

#if !defined(__SANITIZE_ADDRESS__)
static long vmsize(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char l[256];
	long kb = 0;
	while (f && fgets(l, sizeof(l), f))
		if (!strncmp(l, "VmSize:", 7))
			kb = atol(l + 7);
	if (f)
		fclose(f);
	return kb * 1024;
}

/* A header of the most regions (no checksum needed: the table is allocated
 * before it is checked) in dir/enomem, h bytes of header. */
static uint64_t enomem_file(const char *dir)
{
	char path[300];
	snprintf(path, sizeof(path), "%s/enomem", dir);
	const uint32_t n = HOSTCACHE_MAX_REGIONS;
	const uint64_t h = 64 + (uint64_t)n * (18 + 1024), len = h + 40;
	uint8_t b[32] = "CRESTHC";
	b[8] = HOSTCACHE_VERSION;
	for (int i = 0; i < 8; i++) {
		if (i < 4)
			b[12 + i] = (uint8_t)(n >> (8 * i));
		b[16 + i] = (uint8_t)(h >> (8 * i));
		b[24 + i] = (uint8_t)(len >> (8 * i));
	}
	const int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0 && ftruncate(fd, (off_t)len) == 0 && pwrite(fd, b, 32, 0) == 32, "writing %s", path);
	if (fd >= 0)
		close(fd);
	return h;
}

/* In a fresh process (the test run again): that file opened with memory
 * for the header's buffer but not for the table of regions. The open must
 * come back, the file ignored. Exit 0 when it did. */
static int enomem_child(const char *dir, uint64_t h)
{
	mallopt(M_MMAP_THRESHOLD, 64 << 10);   /* both from mmap, under the limit */
	struct rlimit rl = { .rlim_cur = (rlim_t)vmsize() + h + (512u << 10), .rlim_max = RLIM_INFINITY };
	if (setrlimit(RLIMIT_AS, &rl) < 0)
		return 2;
	struct hostcache *hc = NULL;
	const int rc = hostcache_open(dir, "enomem", &hc);
	return rc == 0 && !hostcache_find(hc, "w", 1) ? 0 : 1;
}
#endif

/* Not under ASan, whose shadow memory RLIMIT_AS would not leave room for. */
static void table_enomem(const char *dir)
{
#if !defined(__SANITIZE_ADDRESS__)
	char harg[24];
	snprintf(harg, sizeof(harg), "%llu", (unsigned long long)enomem_file(dir));
	fflush(NULL);
	const pid_t pid = fork();
	if (pid == 0) {
		execl("/proc/self/exe", "test_hostcache", "--enomem", dir, harg, (char *)NULL);
		_exit(3);
	}
	int ws = 0;
	CHECK(pid > 0 && waitpid(pid, &ws, 0) == pid, "fork");
	CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "opening a cache whose table could not be allocated: %s %d",
	      WIFSIGNALED(ws) ? "killed by signal" : "exit", WIFSIGNALED(ws) ? WTERMSIG(ws) : WEXITSTATUS(ws));
#else
	(void)dir;
#endif
}

int main(int argc, char **argv)
{
#if !defined(__SANITIZE_ADDRESS__)
	if (argc == 4 && !strcmp(argv[1], "--enomem"))
		return enomem_child(argv[2], strtoull(argv[3], NULL, 10));
#else
	(void)argc;
	(void)argv;
#endif
	uint64_t seed = (uint64_t)time(NULL) ^ (uint64_t)getpid() << 20;
	const char *e = getenv("CREST_TEST_SEED");
	if (e && *e)
		seed = strtoull(e, NULL, 10);
	if (!seed)
		seed = 1;
	printf("test_hostcache: CREST_TEST_SEED=%llu\n", (unsigned long long)seed);
	uint64_t st = seed;
	char dir[] = "/tmp/crest-hostcache.XXXXXX";
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	char name[64], path[256];
	const uint8_t uuid[16] = { 1, 2, 3 };
	OK(hostcache_name(dir, uuid, name, sizeof(name)));
	snprintf(path, sizeof(path), "%s/%s", dir, name);

	/* 1. Layouts, each written and read back by a new handle; the hint. */
	struct hostcache *hc;
	OK(hostcache_open(dir, name, &hc));
	CHECK(!hostcache_find(hc, "x", 1), "an empty cache found a region");
	struct layout l, prev = { 0 };
	uint8_t *old_p = NULL;
	uint64_t old_size = 0;
	for (int round = 0; round < 40; round++) {
		layout_random(&l, &st);
		struct hostcache_region r[MAXR];
		regions_of(&l, r);
		OK(hostcache_layout(hc, r, l.n));
		/* A checkpoint in flight keeps writing the layout before: harmless. */
		if (old_p && old_size)
			memset(old_p, 0xab, old_size);
		fill(hc, &l, seed + (uint64_t)round * 100);
		uint8_t id[32];
		check_fill(id, 32, seed + (uint64_t)round);
		hostcache_hint_set(hc, id);
		CHECK(hostcache_hint_is(hc, id), "round %d: the hint just set is not there", round);
		CHECK(reads_back(dir, name, &l, seed + (uint64_t)round * 100), "round %d: a new handle did not read "
		      "back the %zu regions written", round, l.n);
		struct hostcache *h2;
		OK(hostcache_open(dir, name, &h2));
		CHECK(hostcache_hint_is(h2, id), "round %d: a new handle lost the hint", round);
		hostcache_hint_set(h2, NULL);
		CHECK(!hostcache_hint_is(h2, id), "round %d: a cleared hint still names the snapshot", round);
		hostcache_close(h2);
		/* Laid out the same again: nothing moves. */
		const uint8_t *before = l.n ? hostcache_find(hc, l.names[0], l.size[0]) : NULL;
		OK(hostcache_layout(hc, r, l.n));
		CHECK(!l.n || hostcache_find(hc, l.names[0], l.size[0]) == before, "round %d: the same layout "
		      "made a new file", round);
		old_p = l.n ? hostcache_find(hc, l.names[0], l.size[0]) : NULL;
		old_size = l.n ? l.size[0] : 0;
		prev = l;
	}
	/* hostcache_populate widens a range to whole pages and makes them
	 * present; a range not mapped at all is an error, not a SIGBUS later.
	 * EINVAL: a kernel before 5.14, which has no such advice. */
	uint8_t *r0 = prev.n ? hostcache_find(hc, prev.names[0], prev.size[0]) : NULL;
	if (r0 && prev.size[0] > 2 && hostcache_populate(r0, 1, false) != -EINVAL) {
		OK(hostcache_populate(r0 + 1, (size_t)prev.size[0] - 2, false));
		OK(hostcache_populate(r0 + 1, (size_t)prev.size[0] - 2, true));
		void *gone = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		CHECK(gone != MAP_FAILED && munmap(gone, 4096) == 0, "no page to unmap");
		const int rc = hostcache_populate((uint8_t *)gone + 1, 10, true);
		CHECK(rc == -ENOMEM, "hostcache_populate of an unmapped page: %d, not -ENOMEM", rc);
	}
	/* The files replaced, each a whole copy of its regions while mapped,
	 * let go (no writer left): the current one still there and whole. */
	CHECK(replaced_maps(path) > 0, "40 layouts left no replaced file mapped");
	hostcache_forget_old(hc);
	CHECK(replaced_maps(path) == 0, "%d replaced files still mapped after hostcache_forget_old",
	      replaced_maps(path));
	hostcache_close(hc);
	CHECK(reads_back(dir, name, &prev, seed + 39 * 100), "the cache does not read back after its old files went");

	/* 2. Every byte of the header flipped in turn (a sample of them when
	 * the header is long): the file is refused, whole. */
	const uint64_t h = header_len(path);
	CHECK(h > 32, "the header's length reads %llu", (unsigned long long)h);
	const int fd = open(path, O_RDWR);
	OK(fd < 0 ? -errno : 0);
	size_t flips = 0;
	for (uint64_t at = 0; at < h; at += 1 + check_rnd(&st) % 3) {
		uint8_t b;
		const uint8_t bit = (uint8_t)(1u << (check_rnd(&st) % 8));
		CHECK(pread(fd, &b, 1, (off_t)at) == 1, "pread");
		b ^= bit;
		CHECK(pwrite(fd, &b, 1, (off_t)at) == 1, "pwrite");
		OK(hostcache_open(dir, name, &hc));
		bool any = false;
		for (size_t i = 0; i < prev.n; i++)
			any |= hostcache_find(hc, prev.names[i], prev.size[i]) != NULL;
		CHECK(!any, "a cache with header byte %llu flipped (bit %u) was read", (unsigned long long)at, bit);
		hostcache_close(hc);
		b ^= bit;
		CHECK(pwrite(fd, &b, 1, (off_t)at) == 1, "pwrite");
		flips++;
	}
	CHECK(reads_back(dir, name, &prev, seed + 39 * 100), "the cache, every flip undone, does not read back");
	/* 3. Cut short: refused. */
	struct stat sb;
	CHECK(fstat(fd, &sb) == 0, "fstat");
	CHECK(ftruncate(fd, sb.st_size - 4096) == 0, "ftruncate");
	CHECK(!reads_back(dir, name, &prev, seed + 39 * 100), "a cache cut short was read");
	close(fd);
	/* 4. Someone else's file, and a symlink: refused, and replaced by the
	 * next layout. */
	unlink(path);
	struct hostcache_region r[MAXR];
	regions_of(&prev, r);
	OK(hostcache_open(dir, name, &hc));
	OK(hostcache_layout(hc, r, prev.n));
	fill(hc, &prev, seed);
	hostcache_close(hc);
	if (geteuid() == 0) {
		CHECK(chown(path, 12345, 12345) == 0, "chown");
		CHECK(!reads_back(dir, name, &prev, seed), "a cache owned by uid 12345 was read");
		CHECK(chown(path, 0, 0) == 0, "chown");
	}
	char target[300];
	snprintf(target, sizeof(target), "%s/elsewhere", dir);
	CHECK(rename(path, target) == 0, "rename");
	CHECK(symlink(target, path) == 0, "symlink");
	CHECK(!reads_back(dir, name, &prev, seed), "a cache reached through a symlink was read");
	OK(hostcache_open(dir, name, &hc));
	OK(hostcache_layout(hc, r, prev.n));
	hostcache_close(hc);
	CHECK(lstat(path, &sb) == 0 && S_ISREG(sb.st_mode), "the layout did not replace the symlink with a file");
	printf("  %d layouts written and read back, %zu header flips refused, short, foreign and linked files "
	       "refused\n", 40, flips);

	/* 5. Not a directory: one line naming it. */
	EXPECT_ERR(hostcache_open(target, name, &hc), -ENOTDIR, target);
	char nodir[300];
	snprintf(nodir, sizeof(nodir), "%s/missing", dir);
	EXPECT_ERR(hostcache_open(nodir, name, &hc), -ENOENT, nodir);
	struct crest_options o;
	crest_options_init(&o);
	o.flags = CREST_OPEN_NO_GPU;
	o.host_cache = nodir;
	char store[300];
	snprintf(store, sizeof(store), "%s/store", dir);
	crest_t *c = NULL;
	EXPECT_ERR(crest_open(store, &o, &c), -ENOENT, nodir);
	o.host_cache = dir;
	OK(crest_open(store, &o, &c));
	OK(crest_close(c));

	/* 6. A table that cannot be allocated: no crash. */
	table_enomem(dir);

	char cmd[400];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
	if (failures) {
		printf("FAIL: test_hostcache: %d failures (CREST_TEST_SEED=%llu)\n", failures, (unsigned long long)seed);
		return 1;
	}
	printf("PASS test_hostcache\n");
	return 0;
}
