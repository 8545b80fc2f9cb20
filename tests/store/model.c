/*
 * model.c - a randomized model test of one store (issue 9).
 *
 * Thousands of random operations on ONE store, each checked against an
 * in-memory model of what the store must hold:
 *  - a working tree is edited at random (files of every awkward size, empty,
 *    one byte, just off every chunk, piece and segment boundary; sparse
 *    files; symlinks; directories; in-place edits, insertions, truncations,
 *    mode changes) and put, whole or in part, through the engine with a
 *    random chunker (fixed of several sizes, or cdc), segment size, lanes,
 *    parent and tag, as `crest put` does;
 *  - host regions of odd sizes are registered, changed and checkpointed
 *    through libcrest with random blobs, tags and several checkpoints in
 *    flight, and random earlier checkpoints are restored into the regions
 *    with crest_restore (after scribbling over them) or refused when the
 *    regions do not match;
 *  - random EARLIER snapshots of both kinds are read back with restore_tree
 *    (and now and then with the crest binary) and compared with the model
 *    byte for byte, with modes, symlink targets, mtimes and no extra files;
 *    streams are read into memory over junk; blobs read back; tags and id
 *    prefixes resolve to the snapshot the model says;
 *  - restore_verify (casctl verify) runs on random snapshots, and on all of
 *    them every so often and at the end.
 * Pieces, packs, segments and chunks are made tiny so that every boundary is
 * crossed all the time.
 *
 * The run is a pure function of its seed and of whether CREST and CASCTL
 * are set (printed first, as the environment that replays it): CREST_TEST_SEED=N
 * or --seed N replays it. --ops N (CREST_MODEL_OPS) sets the operation
 * count, --seconds S (CREST_MODEL_SECONDS) stops sooner. CREST and CASCTL,
 * when set, name the binaries some operations run (crest put, crest get,
 * casctl verify). The writer is closed while crest get and casctl verify
 * run unless CREST_MODEL_READERS_BESIDE=1: a read-only open beside a writer
 * now and then fails (RocksDB: an SST file the writer's compaction just
 * deleted), which cas.h promises it does not. CREST_MODEL_VERBOSE=1 prints
 * every operation; on a failure the last operations are printed and the
 * store is kept. The store lives under $TMPDIR, else /dev/shm.
 */
#include "cas/cas.h"
#include "cli/commands.h"
#include "tests/check.h"
#include "dedup/chunker.h"
#include "engine/engine.h"
#include "restore/restore.h"
#include "util/err.h"
#include "util/fs.h"
#include "util/progress.h"
#include "util/sha256.h"

#include <crest.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* ---- randomness ---- */

static uint64_t rs[4];

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t rnd(void)  /* xoshiro256** */
{
	uint64_t out = rotl(rs[1] * 5, 7) * 9, t = rs[1] << 17;
	rs[2] ^= rs[0];
	rs[3] ^= rs[1];
	rs[1] ^= rs[2];
	rs[0] ^= rs[3];
	rs[2] ^= t;
	rs[3] = rotl(rs[3], 45);
	return out;
}

static void rnd_seed(uint64_t seed)
{
	for (int i = 0; i < 4; i++) {
		uint64_t z = (seed += 0x9e3779b97f4a7c15ull);
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		rs[i] = z ^ (z >> 31);
	}
}

static uint64_t below(uint64_t n)
{
	return n ? rnd() % n : 0;
}

static bool chance(unsigned pct)
{
	return below(100) < pct;
}

static void fill_random(uint8_t *p, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t v = rnd();
		memcpy(p + i, &v, 8);
	}
	if (i < n) {
		uint64_t v = rnd();
		memcpy(p + i, &v, n - i);
	}
}

/* Bytes of one of several kinds: random, zero (stored as holes), repeating
 * (compresses), or pages of each, as memory looks. */
static void fill(uint8_t *p, size_t n)
{
	switch (below(5)) {
	case 0:
		fill_random(p, n);
		break;
	case 1:
		memset(p, 0, n);
		break;
	case 2: {
		uint8_t pat[37];
		fill_random(pat, sizeof(pat));
		size_t k = 1 + below(sizeof(pat));
		for (size_t i = 0; i < n; i++)
			p[i] = pat[i % k];
		break;
	}
	default:
		for (size_t i = 0; i < n; i += 4096) {
			size_t m = n - i < 4096 ? n - i : 4096;
			if (chance(40))
				memset(p + i, 0, m);
			else
				fill_random(p + i, m);
		}
	}
}

/* A size just off one of the boundaries the store has, or a random one. */
static const uint64_t bounds[] = { 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144 };

static size_t pick_size(size_t big)
{
	switch (below(8)) {
	case 0:
		return below(4);                      /* empty, 1, 2, 3 bytes */
	case 1:
		return 1 + below(300);
	case 2:
	case 3: {
		uint64_t b = bounds[below(sizeof(bounds) / sizeof(bounds[0]))];
		uint64_t s = b * (1 + below(4)) + below(3) - 1;
		return (size_t)s;
	}
	case 4:
		return chance(10) ? big + below(3) - 1 : below(200000);
	default:
		return below(chance(20) ? 300000 : 40000);
	}
}

/* ---- failure and the operation log ---- */

static uint64_t g_seed;
static unsigned long g_op;
static char g_root[PATH_MAX];
static bool g_verbose;
#define LOGN 48
static char g_log[LOGN][200];
static unsigned long g_nlog;

static void oplog(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void oplog(const char *fmt, ...)
{
	char *l = g_log[g_nlog++ % LOGN];
	int n = snprintf(l, sizeof(g_log[0]), "op %lu: ", g_op);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(l + n, sizeof(g_log[0]) - (size_t)n, fmt, ap);
	va_end(ap);
	if (g_verbose)
		printf("%s\n", l);
}

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static char g_replay[2 * PATH_MAX + 64];   /* the environment that replays this run */

static void fail(const char *fmt, ...)
{
	fflush(stdout);
	fprintf(stderr, "model: the last operations:\n");
	for (unsigned long i = g_nlog >= LOGN ? g_nlog - LOGN : 0; i < g_nlog; i++)
		fprintf(stderr, "  %s\n", g_log[i % LOGN]);
	fprintf(stderr, "model: FAIL at op %lu (seed %llu; %s replays it): ", g_op, (unsigned long long)g_seed,
		g_replay);
	va_list ap;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nmodel: store and files kept in %s\n", g_root);
	exit(1);
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		fail("out of memory (%zu bytes)", n);
	return p;
}

static char *xstrdup(const char *s)
{
	char *p = strdup(s);
	if (!p)
		fail("out of memory");
	return p;
}

/* ---- shared contents ---- */

struct buf {
	int refs;
	size_t len;
	uint8_t *p;
};

static struct buf *buf_new(size_t len)
{
	struct buf *b = xmalloc(sizeof(*b));
	b->refs = 1;
	b->len = len;
	b->p = xmalloc(len);
	return b;
}

static struct buf *buf_copy(const void *p, size_t len)
{
	struct buf *b = buf_new(len);
	memcpy(b->p, p, len);
	return b;
}

static struct buf *buf_ref(struct buf *b)
{
	b->refs++;
	return b;
}

static void buf_put(struct buf *b)
{
	if (b && --b->refs == 0) {
		free(b->p);
		free(b);
	}
}

/* b, made the only reference to its contents, resized to len (new bytes 0). */
static struct buf *buf_own(struct buf *b, size_t len)
{
	struct buf *n = buf_new(len);
	memcpy(n->p, b->p, b->len < len ? b->len : len);
	if (len > b->len)
		memset(n->p + b->len, 0, len - b->len);
	buf_put(b);
	return n;
}

/* ---- entries: the working tree, and what a snapshot restores to ---- */

enum { E_DIR, E_FILE, E_LINK };

struct ent {
	char *name;
	int type;
	unsigned mode;
	struct buf *data;    /* files */
	char *target;        /* symlinks */
	int64_t mtime;
	bool check_mtime;
};

struct ents {
	struct ent *v;
	size_t n, cap;
};

static struct ent *ents_add(struct ents *s, const char *name, int type, unsigned mode)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 16;
		s->v = realloc(s->v, s->cap * sizeof(*s->v));
		if (!s->v)
			fail("out of memory");
	}
	struct ent *e = &s->v[s->n++];
	*e = (struct ent){ .name = xstrdup(name), .type = type, .mode = mode };
	return e;
}

static void ent_free(struct ent *e)
{
	free(e->name);
	free(e->target);
	buf_put(e->data);
}

static void ents_free(struct ents *s)
{
	for (size_t i = 0; i < s->n; i++)
		ent_free(&s->v[i]);
	free(s->v);
	*s = (struct ents){ 0 };
}

static int ent_cmp(const void *a, const void *b)
{
	return strcmp(((const struct ent *)a)->name, ((const struct ent *)b)->name);
}

static struct ent *ents_find(struct ents *s, const char *name)
{
	for (size_t i = 0; i < s->n; i++)
		if (!strcmp(s->v[i].name, name))
			return &s->v[i];
	return NULL;
}

/* ---- snapshots in the model ---- */

struct lreg {
	char *name;
	struct buf *data;
};

struct snap {
	uint8_t id[32];
	char hex[65];
	bool library;
	bool kept;            /* contents still held (others are forgotten) */
	unsigned long seq;    /* begun in this order: the store's newest is the last */
	struct ents tree;     /* what restore_tree must produce */
	struct lreg *regs, *blobs;   /* library: regions and blobs */
	size_t nregs, nblobs;
};

static struct snap **snaps;
static size_t nsnaps, capsnaps, nkept_files, nkept_lib;
#define KEEP_MAX 40   /* snapshots whose contents the model keeps, per kind */

#define NTAGS 12
static long tags[NTAGS];   /* tag "t<i>" -> index into snaps, or -1 */
static unsigned long tag_seq[NTAGS], g_seq;

/* Snapshots commit (and move their tags) in the order they were begun,
 * whatever order they are waited for in. */
static void tag_move(int t, long idx, unsigned long seq)
{
	if (t >= 0 && seq > tag_seq[t]) {
		tags[t] = idx;
		tag_seq[t] = seq;
	}
}

static void snap_forget(struct snap *s)
{
	ents_free(&s->tree);
	for (size_t i = 0; i < s->nregs; i++) {
		free(s->regs[i].name);
		buf_put(s->regs[i].data);
	}
	for (size_t i = 0; i < s->nblobs; i++) {
		free(s->blobs[i].name);
		buf_put(s->blobs[i].data);
	}
	free(s->regs);
	free(s->blobs);
	s->regs = s->blobs = NULL;
	s->nregs = s->nblobs = 0;
	if (s->kept) {
		if (s->library)
			nkept_lib--;
		else
			nkept_files--;
	}
	s->kept = false;
}

/* Adds s; forgets the contents of a random older one of its kind past
 * KEEP_MAX (never of the first few, so that the oldest stay checked). */
static long snap_add(struct snap *s)
{
	for (size_t i = 0; i < nsnaps; i++)
		if (!memcmp(snaps[i]->id, s->id, 32))
			fail("snapshot %s committed twice (an id reused)", s->hex);
	if (nsnaps == capsnaps) {
		capsnaps = capsnaps ? 2 * capsnaps : 64;
		snaps = realloc(snaps, capsnaps * sizeof(*snaps));
		if (!snaps)
			fail("out of memory");
	}
	s->kept = true;
	if (s->library)
		nkept_lib++;
	else
		nkept_files++;
	snaps[nsnaps++] = s;
	while ((s->library ? nkept_lib : nkept_files) > KEEP_MAX) {
		size_t i = 4 + below(nsnaps - 5);
		if (snaps[i]->kept && snaps[i]->library == s->library)
			snap_forget(snaps[i]);
	}
	return (long)nsnaps - 1;
}

/* A random kept snapshot (of a kind when kind >= 0), the newest more often. */
static struct snap *snap_pick(int kind)
{
	for (size_t i = nsnaps; chance(30) && i-- > 0;)
		if (snaps[i]->kept && (kind < 0 || snaps[i]->library == kind))
			return snaps[i];
	size_t n = 0;
	for (size_t i = 0; i < nsnaps; i++)
		n += snaps[i]->kept && (kind < 0 || snaps[i]->library == kind);
	if (!n)
		return NULL;
	size_t k = below(n);
	for (size_t i = 0; i < nsnaps; i++)
		if (snaps[i]->kept && (kind < 0 || snaps[i]->library == kind) && k-- == 0)
			return snaps[i];
	return NULL;
}

static bool tag_pending(int t);

/* A tag on s, unless a checkpoint in flight may move it any moment. */
static const char *tag_of(const struct snap *s)
{
	static char t[16];
	for (int i = 0; i < NTAGS; i++)
		if (tags[i] >= 0 && snaps[tags[i]] == s && !tag_pending(i)) {
			snprintf(t, sizeof(t), "t%d", i);
			return t;
		}
	return NULL;
}

/* How to name s: its id, an id prefix, or a tag on it. */
static const char *snap_name(const struct snap *s, char *buf)
{
	const char *t = tag_of(s);
	switch (below(4)) {
	case 0:
		if (t)
			return t;
		/* fall through */
	case 1:
		snprintf(buf, 65, "%.*s", (int)(8 + below(12)), s->hex);
		return buf;
	default:
		return s->hex;
	}
}

/* ---- the working tree, on disk and in the model ---- */

static struct ents work;         /* names relative to g_root/work; root "w" */
static char work_dir[PATH_MAX + 16];
static unsigned long name_seq;
#define WORK_MAX_BYTES (1u << 20)
#define WORK_MAX_ENTS 40

static void disk_path(char *out, size_t cap, const char *name)
{
	if ((size_t)snprintf(out, cap, "%s/%s", work_dir, name) >= cap)
		fail("path too long: %s/%s", work_dir, name);
}

static size_t work_bytes(void)
{
	size_t n = 0;
	for (size_t i = 0; i < work.n; i++)
		if (work.v[i].type == E_FILE)
			n += work.v[i].data->len;
	return n;
}

/* Opens path for writing, even where its mode says read-only (when this
 * test does not run as root), keeping the mode. */
static int open_w(const char *path, int flags, unsigned mode)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC | flags, 0600);
	if (fd < 0 && errno == EACCES && chmod(path, 0600) == 0) {
		fd = open(path, O_WRONLY | O_CLOEXEC | flags, 0600);
		if (fd >= 0 && fchmod(fd, mode) < 0)
			fail("cannot chmod %s: %s", path, strerror(errno));
	}
	if (fd < 0)
		fail("cannot open %s for writing: %s", path, strerror(errno));
	return fd;
}

/* Writes b into path: all of it, or (sparse) leaving every all-zero 4 KiB
 * block a hole. */
static void write_file(const char *path, const struct buf *b, unsigned mode, bool sparse)
{
	int fd = open_w(path, O_CREAT | O_TRUNC, mode);
	for (size_t off = 0; off < b->len;) {
		size_t n = b->len - off < 4096 ? b->len - off : 4096;
		if (!sparse || !dedup_is_zero(b->p + off, n))
			if (pwrite(fd, b->p + off, n, (off_t)off) != (ssize_t)n)
				fail("cannot write %s: %s", path, strerror(errno));
		off += n;
	}
	if (ftruncate(fd, (off_t)b->len) < 0 || fchmod(fd, mode) < 0)
		fail("cannot size %s: %s", path, strerror(errno));
	close(fd);
}

static struct ent *random_ent(int type)
{
	size_t n = 0;
	for (size_t i = 0; i < work.n; i++)
		n += type < 0 || work.v[i].type == type;
	if (!n)
		return NULL;
	size_t k = below(n);
	for (size_t i = 0; i < work.n; i++)
		if ((type < 0 || work.v[i].type == type) && k-- == 0)
			return &work.v[i];
	return NULL;
}

static const unsigned file_modes[] = { 0644, 0600, 0755, 0444, 0640, 0700, 0604 };
static const unsigned dir_modes[] = { 0700, 0755, 0750, 0711 };

static void work_new(void)
{
	struct ent *dir = random_ent(E_DIR);
	char name[PATH_MAX], path[PATH_MAX + 64];
	unsigned kind = (unsigned)below(10);
	snprintf(name, sizeof(name), "%s/%c%lu", dir->name, kind < 6 ? 'f' : kind < 8 ? 'l' : 'd', name_seq++);
	disk_path(path, sizeof(path), name);
	if (kind < 6) {
		size_t size = pick_size(1 << 20);
		struct buf *b = buf_new(size);
		struct ent *src = chance(20) ? random_ent(E_FILE) : NULL;
		if (src && src->data->len) {   /* a copy with edits: dedups */
			for (size_t i = 0; i < size; i++)
				b->p[i] = src->data->p[i % src->data->len];
			if (size && chance(70))
				b->p[below(size)] ^= 1;
		} else {
			fill(b->p, size);
		}
		struct ent *e = ents_add(&work, name, E_FILE, file_modes[below(7)]);
		e->data = b;
		write_file(path, b, e->mode, chance(50));
		oplog("new file %s, %zu bytes", name, size);
	} else if (kind < 8) {
		char target[300];
		struct ent *t = random_ent(-1);
		switch (below(3)) {
		case 0:
			snprintf(target, sizeof(target), "/no/such/%llu", (unsigned long long)rnd());
			break;
		case 1: {
			size_t n = 1 + below(250);
			for (size_t i = 0; i < n; i++)
				target[i] = "abcdefghij/._-xyz"[below(17)];
			target[n] = 0;
			break;
		}
		default:   /* relative to the work directory: the same every run */
			snprintf(target, sizeof(target), "../%.250s", t->name);
		}
		if (symlink(target, path) < 0)
			fail("cannot create symlink %s: %s", path, strerror(errno));
		struct ent *e = ents_add(&work, name, E_LINK, 0777);
		e->target = xstrdup(target);
		oplog("new symlink %s -> %s", name, target);
	} else {
		unsigned mode = dir_modes[below(4)];
		if (mkdir(path, mode) < 0 || chmod(path, mode) < 0)
			fail("cannot create directory %s: %s", path, strerror(errno));
		ents_add(&work, name, E_DIR, mode);
		oplog("new directory %s", name);
	}
}

static void work_remove(void)
{
	struct ent *e = random_ent(-1);
	if (!strcmp(e->name, "w"))
		return;
	char path[PATH_MAX + 64], pre[PATH_MAX];
	disk_path(path, sizeof(path), e->name);
	oplog("remove %s", e->name);
	int rc = e->type == E_DIR ? fs_rm_tree(path) : unlink(path) < 0 ? -errno : 0;
	if (rc < 0)
		fail("cannot remove %s: %s", path, strerror(-rc));
	snprintf(pre, sizeof(pre), "%s/", e->name);
	size_t pl = strlen(pre), k = 0;
	char *gone = xstrdup(e->name);
	for (size_t i = 0; i < work.n; i++) {
		if (!strcmp(work.v[i].name, gone) || !strncmp(work.v[i].name, pre, pl))
			ent_free(&work.v[i]);
		else
			work.v[k++] = work.v[i];
	}
	work.n = k;
	free(gone);
}

/* In place: overwrite a range, insert or delete bytes, append, truncate,
 * grow with a hole, or change the mode. */
static void work_edit(void)
{
	struct ent *e = random_ent(E_FILE);
	if (!e)
		return;
	char path[PATH_MAX + 64];
	disk_path(path, sizeof(path), e->name);
	size_t len = e->data->len;
	unsigned what = (unsigned)below(7);
	if (what == 6) {
		e->mode = file_modes[below(7)];
		if (chmod(path, e->mode) < 0)
			fail("cannot chmod %s: %s", path, strerror(errno));
		oplog("chmod %s %o", e->name, e->mode);
		return;
	}
	if (what <= 1 && len) {   /* overwrite in place, through pwrite */
		size_t off = below(len), n = 1 + below(chance(50) ? 16 : 20000);
		if (n > len - off)
			n = len - off;
		e->data = buf_own(e->data, len);
		fill(e->data->p + off, n);
		int fd = open_w(path, 0, e->mode);
		if (pwrite(fd, e->data->p + off, n, (off_t)off) != (ssize_t)n)
			fail("cannot edit %s: %s", path, strerror(errno));
		close(fd);
		oplog("overwrite %s: %zu bytes at %zu", e->name, n, off);
		return;
	}
	if (what == 2 || what == 3) {   /* insert or delete: the rest shifts */
		size_t off = below(len + 1), n = 1 + below(chance(50) ? 64 : 9000);
		struct buf *b;
		if (what == 2 || off == len) {
			b = buf_new(len + n);
			memcpy(b->p, e->data->p, off);
			fill(b->p + off, n);
			memcpy(b->p + off + n, e->data->p + off, len - off);
			oplog("insert into %s: %zu bytes at %zu", e->name, n, off);
		} else {
			if (n > len - off)
				n = len - off;
			b = buf_new(len - n);
			memcpy(b->p, e->data->p, off);
			memcpy(b->p + off, e->data->p + off + n, len - off - n);
			oplog("delete from %s: %zu bytes at %zu", e->name, n, off);
		}
		buf_put(e->data);
		e->data = b;
		write_file(path, b, e->mode, chance(50));
		return;
	}
	/* Size changes through ftruncate (growth is a hole) or an append. */
	size_t nl = what == 4 ? below(len + 1) : len + pick_size(1 << 20) % 300000;
	e->data = buf_own(e->data, nl);
	int fd = open_w(path, 0, e->mode);
	if (what == 5 && nl > len && chance(50)) {
		fill(e->data->p + len, nl - len);
		if (pwrite(fd, e->data->p + len, nl - len, (off_t)len) != (ssize_t)(nl - len))
			fail("cannot append to %s: %s", path, strerror(errno));
		oplog("append to %s: %zu -> %zu", e->name, len, nl);
	} else {
		if (ftruncate(fd, (off_t)nl) < 0)
			fail("cannot truncate %s: %s", path, strerror(errno));
		oplog("truncate %s: %zu -> %zu", e->name, len, nl);
	}
	close(fd);
}

static void work_change(void)
{
	bool full = work.n >= WORK_MAX_ENTS || work_bytes() > WORK_MAX_BYTES;
	unsigned r = (unsigned)below(100);
	if (full ? r < 30 : r < 8)
		work_remove();
	else if (r < 55)
		work_edit();
	else if (!full)
		work_new();
	else
		work_edit();
}

/* ---- comparing a restored tree with the model ---- */

struct found {
	char (*names)[PATH_MAX];
	size_t n, cap;
};

static void walk(const char *base, const char *rel, struct found *f)
{
	char path[PATH_MAX * 2];
	snprintf(path, sizeof(path), "%s%s%s", base, *rel ? "/" : "", rel);
	DIR *d = opendir(path);
	if (!d)
		fail("cannot read restored directory %s: %s", path, strerror(errno));
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (f->n == f->cap) {
			f->cap = f->cap ? 2 * f->cap : 64;
			f->names = realloc(f->names, f->cap * sizeof(*f->names));
			if (!f->names)
				fail("out of memory");
		}
		char *r = f->names[f->n++];
		snprintf(r, PATH_MAX, "%s%s%s", rel, *rel ? "/" : "", de->d_name);
		if (de->d_type == DT_DIR) {
			char sub[PATH_MAX];
			snprintf(sub, sizeof(sub), "%s", r);
			walk(base, sub, f);
		}
	}
	closedir(d);
}

static uint8_t *read_whole(const char *path, size_t len)
{
	uint8_t *p = xmalloc(len);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		fail("cannot open restored %s: %s", path, strerror(errno));
	size_t got = 0;
	while (got < len) {
		ssize_t r = read(fd, p + got, len - got);
		if (r <= 0)
			fail("cannot read restored %s: %s", path, r ? strerror(errno) : "short");
		got += (size_t)r;
	}
	close(fd);
	return p;
}

/* dest must hold exactly want (names relative to dest), nothing else. */
static void check_tree(const char *dest, struct ents *want, const char *what)
{
	struct found f = { 0 };
	walk(dest, "", &f);
	if (f.n != want->n) {
		for (size_t i = 0; i < f.n; i++)
			if (!ents_find(want, f.names[i]))
				fail("%s: restored an entry the snapshot does not have: %s", what, f.names[i]);
		for (size_t i = 0; i < want->n; i++) {
			bool ok = false;
			for (size_t j = 0; j < f.n && !ok; j++)
				ok = !strcmp(f.names[j], want->v[i].name);
			if (!ok)
				fail("%s: %s is missing", what, want->v[i].name);
		}
		fail("%s: %zu entries restored, %zu expected", what, f.n, want->n);
	}
	for (size_t i = 0; i < want->n; i++) {
		const struct ent *e = &want->v[i];
		char path[PATH_MAX * 2];
		snprintf(path, sizeof(path), "%s/%s", dest, e->name);
		struct stat sb;
		if (lstat(path, &sb) < 0)
			fail("%s: %s is missing", what, e->name);
		int t = S_ISDIR(sb.st_mode) ? E_DIR : S_ISREG(sb.st_mode) ? E_FILE : S_ISLNK(sb.st_mode) ? E_LINK : -1;
		if (t != e->type)
			fail("%s: %s came back as type %d, not %d", what, e->name, t, e->type);
		if (t != E_LINK && (sb.st_mode & 07777) != e->mode)
			fail("%s: %s came back with mode %o, not %o", what, e->name, sb.st_mode & 07777, e->mode);
		int64_t mt = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
		if (e->check_mtime && mt != e->mtime)
			fail("%s: %s came back with mtime %lld, not %lld", what, e->name, (long long)mt,
			     (long long)e->mtime);
		if (t == E_LINK) {
			char target[PATH_MAX];
			ssize_t n = readlink(path, target, sizeof(target) - 1);
			target[n < 0 ? 0 : n] = 0;
			if (strcmp(target, e->target))
				fail("%s: symlink %s points to '%s', not '%s'", what, e->name, target, e->target);
		} else if (t == E_FILE) {
			if ((size_t)sb.st_size != e->data->len)
				fail("%s: %s came back with %lld bytes, not %zu", what, e->name, (long long)sb.st_size,
				     e->data->len);
			uint8_t *got = read_whole(path, e->data->len);
			size_t d = first_diff(got, e->data->p, e->data->len);
			if (d < e->data->len)
				fail("%s: %s differs at byte %zu of %zu (0x%02x, not 0x%02x)", what, e->name, d,
				     e->data->len, got[d], e->data->p[d]);
			free(got);
			/* Zero chunks are holes, so an all-zero file comes back
			 * with no blocks at all. */
			if (e->data->len >= 65536 && dedup_is_zero(e->data->p, e->data->len) && sb.st_blocks)
				fail("%s: %s is all zeros but came back with %lld blocks, not as a hole", what,
				     e->name, (long long)sb.st_blocks);
		}
	}
	free(f.names);
}

/* ---- the store ---- */

static char store_dir[PATH_MAX + 16], out_dir[PATH_MAX + 16];
static struct cas_store *S;   /* the writer, in file phases */
static crest_t *C;            /* libcrest, in library phases */
static const char *crest_bin, *casctl_bin;

static struct {
	unsigned long puts, bin_puts, ckpts, restores, lib_restores, refused, mem_reads, blobs, verifies,
		verify_all, bin_gets, bin_verifies, tags, tags_refused, phases, changes, regions;
	uint64_t put_bytes, ckpt_bytes;
} st;

/* On RADOS (--rados POOL), two "nodes": two index caches (CREST_CACHE_DIR)
 * that each writer's open picks between at random, so that the caches
 * are behind the store again and again and rebuilt (cas/cache.c). Not
 * between a writer's open and its close: a reader of the other node would
 * wait for this process's own writer. */
static bool g_rados;
static char g_node[2][PATH_MAX + 16];
static unsigned long g_node_switches;

static void check_list(void);

static void node_pick(void)
{
	static int cur = -1;
	if (!g_rados)
		return;
	const int n = cur < 0 ? 0 : chance(30) ? !cur : cur;
	if (n != cur && cur >= 0)
		g_node_switches++;
	cur = n;
	setenv("CREST_CACHE_DIR", g_node[n], 1);
}

/* A reader on a node picked at random, between two writer sessions (a
 * phase switch: nothing open, the model whole): its listing is the
 * model's. A cache that the other node's writes left behind must be seen
 * to be behind: no writer here puts it right first. */
static void node_check(void)
{
	if (!g_rados || S || C)
		return;
	node_pick();
	if (cas_open(store_dir, CAS_READ, &S) < 0)
		fail("a reader's open: %s", crest_errmsg());
	oplog("list on node %s", getenv("CREST_CACHE_DIR"));
	check_list();
	cas_close(S);
	S = NULL;
}

static void store_open(void)
{
	node_pick();
	int rc = cas_init(store_dir);
	if (rc == -EEXIST)
		rc = 0;
	if (rc == 0)
		rc = cas_open(store_dir, CAS_WRITE, &S);
	if (rc < 0)
		fail("cas_open: %s", crest_errmsg());
}

static void store_close(void)
{
	cas_close(S);
	S = NULL;
}

static void hex_to_id(const char *hex, uint8_t id[32])
{
	if (hex_decode(hex, id, 32) != 32)
		fail("not a snapshot id: '%s'", hex);
}

static bool g_readers_beside;

/* Runs argv; its stdout into out (cap bytes) when given. Returns the exit code. */
static bool run_stderr;   /* run() also captures stderr */

static int run(char *const argv[], char *out, size_t cap)
{
	int p[2];
	if (pipe(p) < 0)
		fail("pipe: %s", strerror(errno));
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, p[1], 1);
	if (run_stderr)
		posix_spawn_file_actions_adddup2(&fa, p[1], 2);
	posix_spawn_file_actions_addclose(&fa, p[0]);
	pid_t pid;
	int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(p[1]);
	if (rc)
		fail("cannot run %s: %s", argv[0], strerror(rc));
	size_t got = 0;
	char junk[4096];
	for (;;) {
		ssize_t r = out && got + 1 < cap ? read(p[0], out + got, cap - 1 - got) : read(p[0], junk, sizeof(junk));
		if (r <= 0)
			break;
		if (out && got + 1 < cap)
			got += (size_t)r;
	}
	if (out)
		out[got] = 0;
	close(p[0]);
	int status;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* The expected restore of a put of work entry `top`: it and everything under
 * it, named from top's last component, with the mtimes on disk now. */
static void expect_put(struct ents *out, const char *top)
{
	const char *base = strrchr(top, '/');
	base = base ? base + 1 : top;
	size_t tl = strlen(top);
	for (size_t i = 0; i < work.n; i++) {
		const struct ent *w = &work.v[i];
		if (strcmp(w->name, top) && (strncmp(w->name, top, tl) || w->name[tl] != '/'))
			continue;
		char name[PATH_MAX * 2], path[PATH_MAX + 64];
		snprintf(name, sizeof(name), "%s%s", base, w->name + tl);
		struct ent *e = ents_add(out, name, w->type, w->mode);
		if (w->data)
			e->data = buf_ref(w->data);
		if (w->target)
			e->target = xstrdup(w->target);
		disk_path(path, sizeof(path), w->name);
		struct stat sb;
		if (lstat(path, &sb) < 0)
			fail("cannot stat %s: %s", path, strerror(errno));
		e->mtime = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
		e->check_mtime = true;
	}
	qsort(out->v, out->n, sizeof(*out->v), ent_cmp);
}

/* crest put's own walk does the puts (cli_put_path), quietly. */
static const struct cli quiet_cli = { .prog = "model", .quiet = true };

static struct snap *snap_new(bool library)
{
	struct snap *s = xmalloc(sizeof(*s));
	memset(s, 0, sizeof(*s));
	s->library = library;
	s->seq = ++g_seq;
	return s;
}

/* A free tag now and then (tags do not move: a put or checkpoint under a
 * taken one is refused, which op_taken_tag checks), or -1. */
static int pick_tag(void)
{
	if (!chance(25))
		return -1;
	const int t0 = (int)below(NTAGS);
	for (int k = 0; k < NTAGS; k++) {
		const int t = (t0 + k) % NTAGS;
		if (tags[t] < 0 && !tag_pending(t))
			return t;
	}
	return -1;
}

/* Puts all of the working tree or one entry of it, in process (as crest put
 * does) or, now and then, by running crest put. */
static void op_put(void)
{
	struct ent *top = chance(70) ? &work.v[0] : random_ent(-1);
	char topname[PATH_MAX], path[PATH_MAX + 64];
	snprintf(topname, sizeof(topname), "%s", top->name);
	disk_path(path, sizeof(path), topname);
	const int tag = pick_tag();
	char tagname[16];
	snprintf(tagname, sizeof(tagname), "t%d", tag);
	const enum dedup_kind kind = chance(50) ? DEDUP_CDC : DEDUP_FIXED;
	const uint32_t avg = chance(5) ? 65536 : 1024u << below(5);
	struct snap *sn = snap_new(false);
	expect_put(&sn->tree, topname);
	uint64_t logical = 0;
	for (size_t i = 0; i < sn->tree.n; i++)
		if (sn->tree.v[i].type == E_FILE)
			logical += sn->tree.v[i].data->len;

	if (crest_bin && chance(2)) {   /* the real crest put, now and then */
		char sz[32], out[4096];
		snprintf(sz, sizeof(sz), "%u", avg);
		char *argv[16];
		int a = 0;
		argv[a++] = (char *)crest_bin;
		argv[a++] = "--store";
		argv[a++] = store_dir;
		argv[a++] = "--json";
		argv[a++] = "put";
		argv[a++] = "--chunker";
		argv[a++] = kind == DEDUP_CDC ? "cdc" : "fixed";
		argv[a++] = "--chunk-size";
		argv[a++] = sz;
		if (tag >= 0) {
			argv[a++] = "--tag";
			argv[a++] = tagname;
		}
		argv[a++] = path;
		argv[a] = NULL;
		oplog("crest put %s (%s %u%s%s)", topname, argv[6], avg, tag >= 0 ? ", tag " : "",
		      tag >= 0 ? tagname : "");
		store_close();   /* it takes the writer's lock */
		int rc = run(argv, out, sizeof(out));
		store_open();
		const char *k = strstr(out, "\"snapshot\": \"");
		if (rc || !k)
			fail("crest put %s exited %d: %s", topname, rc, out);
		snprintf(sn->hex, sizeof(sn->hex), "%.64s", k + 13);
		hex_to_id(sn->hex, sn->id);
		st.bin_puts++;
	} else {
		struct engine_opts o;
		engine_opts_default(&o);
		o.workers = 1 + (unsigned)below(3);
		o.segment_bytes = (size_t)65536 << below(5);
		o.staging_bytes = chance(50) ? 2 * o.segment_bytes : 0;
		o.write_queue_bytes = chance(50) ? 2 * o.segment_bytes : 0;
		o.lanes = 1 + (unsigned)below(4);   /* packs written at once (cas.h) */
		if (dedup_params_init(&o.file_chunking, kind, avg) < 0)
			fail("dedup_params_init: %s", crest_errmsg());
		oplog("put %s (%s %u, segment %zu, %u workers, %u lanes%s%s)", topname, dedup_kind_name(kind), avg,
		      o.segment_bytes, o.workers, o.lanes, tag >= 0 ? ", tag " : "", tag >= 0 ? tagname : "");
		struct engine *e;
		int rc = engine_open(S, &o, &e);
		if (rc < 0)
			fail("engine_open: %s", crest_errmsg());
		struct engine_snap *es;
		rc = engine_snapshot_begin(e, "files", &es);
		if (rc == 0 && tag >= 0)
			rc = engine_snapshot_set_tag(es, tagname);
		/* A parent: the tag's snapshot, as crest put takes it, or any. */
		struct snap *par = tag >= 0 && tags[tag] >= 0 ? snaps[tags[tag]] : chance(30) && nsnaps
			? snaps[below(nsnaps)] : NULL;
		if (rc == 0 && par) {
			struct cas_manifest *pm;
			if (cas_manifest_load(S, par->id, &pm) < 0)
				fail("loading parent %s: %s", par->hex, crest_errmsg());
			engine_snapshot_set_parent(es, par->id, pm);
		}
		if (rc == 0)
			rc = cli_put_path(es, path, strrchr(topname, '/') ? strrchr(topname, '/') + 1 : topname, &quiet_cli);
		if (rc < 0)
			fail("put %s: %s", topname, crest_errmsg());
		engine_snapshot_seal(es);
		struct engine_result r;
		rc = engine_snapshot_wait(es, &r);
		if (rc < 0)
			fail("put %s did not commit: %s", topname, crest_errmsg());
		engine_close(e);
		if (r.logical_bytes != logical)
			fail("put %s: %llu logical bytes, the model has %llu", topname,
			     (unsigned long long)r.logical_bytes, (unsigned long long)logical);
		memcpy(sn->id, r.id, 32);
		hex_encode(sn->id, 32, sn->hex);
	}
	st.puts++;
	st.put_bytes += logical;
	tag_move(tag, snap_add(sn), sn->seq);
	oplog("  -> %.12s", sn->hex);
}

/* Restores s with restore_tree (or crest get) and compares. */
static void op_restore_tree(struct snap *s)
{
	char name[65], dest[PATH_MAX + 64], what[200];
	snprintf(dest, sizeof(dest), "%s/r%lu", out_dir, g_op);
	const char *nm = snap_name(s, name);
	if (crest_bin && chance(3)) {
		oplog("crest get %s (%.12s, %s)", nm, s->hex, s->library ? "library" : "files");
		char *argv[] = { (char *)crest_bin, "--store", store_dir, "-q", "get", (char *)nm, dest, NULL };
		char out[2048];
		if (!g_readers_beside)
			store_close();
		int rc = run(argv, out, sizeof(out));
		if (!g_readers_beside)
			store_open();
		if (rc)
			fail("crest get %s exited %d", s->hex, rc);
		st.bin_gets++;
	} else {
		oplog("restore %s (%.12s, %s)", nm, s->hex, s->library ? "library" : "files");
		uint8_t id[32];
		if (cas_snapshot_resolve(S, nm, id) < 0)
			fail("cannot resolve %s (snapshot %.12s): %s", nm, s->hex, crest_errmsg());
		if (memcmp(id, s->id, 32))
			fail("%s resolves to another snapshot than %.12s", nm, s->hex);
		struct cas_manifest *m;
		if (cas_manifest_load(S, id, &m) < 0)
			fail("cannot load snapshot %.12s: %s", s->hex, crest_errmsg());
		struct restore_ctx rc_ = { .store = S, .snapshot = s->hex, .threads = 1 + (unsigned)below(3) };
		uint64_t bytes = 0;
		if (restore_tree(&rc_, m, dest, &bytes) < 0)
			fail("restoring %.12s: %s", s->hex, crest_errmsg());
		/* And one stream into memory over junk: holes must be zeroed. */
		if (m->nstreams) {
			const struct cas_stream *cs = &m->streams[below(m->nstreams)];
			const struct ent *e = ents_find(&s->tree, cs->name);
			if (!e)
				fail("snapshot %.12s holds stream %s the model does not", s->hex, cs->name);
			if (e->type == E_FILE) {
				uint8_t *p = xmalloc(cs->size);
				memset(p, 0xa5, cs->size);
				if (cs->size != e->data->len)
					fail("%.12s: stream %s has %llu bytes, not %zu", s->hex, cs->name,
					     (unsigned long long)cs->size, e->data->len);
				if (restore_stream_to_memory(&rc_, cs, p, cs->size) < 0)
					fail("restoring %s of %.12s into memory: %s", cs->name, s->hex, crest_errmsg());
				size_t d = first_diff(p, e->data->p, e->data->len);
				if (d < e->data->len)
					fail("%.12s: %s read into memory differs at byte %zu", s->hex, cs->name, d);
				free(p);
				st.mem_reads++;
			}
		}
		cas_manifest_free(m);
	}
	snprintf(what, sizeof(what), "snapshot %.12s (%s)", s->hex, s->library ? "library" : "files");
	check_tree(dest, &s->tree, what);
	int rc = fs_rm_tree(dest);
	if (rc < 0)
		fail("cannot remove %s: %s", dest, strerror(-rc));
	st.restores++;
}

static void op_verify(bool all)
{
	if (casctl_bin && chance(all ? 20 : 2)) {
		char *argv[] = { (char *)casctl_bin, "--store", store_dir, "-q", "verify", NULL };
		oplog("casctl verify");
		if (!g_readers_beside)
			store_close();
		int rc = run(argv, NULL, 0);
		if (!g_readers_beside)
			store_open();
		if (rc)
			fail("casctl verify exited %d", rc);
		st.bin_verifies++;
		return;
	}
	uint8_t (*ids)[32] = xmalloc(32 * (nsnaps + 1));
	size_t n = 0;
	if (all) {
		for (size_t i = 0; i < nsnaps; i++)
			memcpy(ids[n++], snaps[i]->id, 32);
		st.verify_all++;
	} else if (nsnaps) {
		memcpy(ids[n++], snaps[below(nsnaps)]->id, 32);
	}
	oplog("verify %s (%zu snapshots)", all ? "all" : "one", n);
	struct verify_result r = { 0 };
	int rc = restore_verify(S, (const uint8_t (*)[32])ids, n, 1 + (unsigned)below(2), true, &r);
	if (rc < 0 || r.bad)
		fail("verify of %zu snapshots: %s (%llu bad chunks)", n, crest_errmsg(), (unsigned long long)r.bad);
	restore_verify_free(&r);
	free(ids);
	st.verifies++;
}

/* The store's list of snapshots and tags is the model's. */
static void check_list(void)
{
	struct cas_snapinfo *v;
	size_t n;
	if (cas_snapshot_list(S, &v, &n) < 0)
		fail("cas_snapshot_list: %s", crest_errmsg());
	if (n != nsnaps)
		fail("the store lists %zu snapshots, the model has %zu", n, nsnaps);
	for (size_t i = 0; i < n; i++) {
		bool ok = false;
		for (size_t j = 0; j < nsnaps && !ok; j++)
			ok = !memcmp(v[i].id, snaps[j]->id, 32);
		if (!ok)
			fail("the store lists a snapshot the model does not know");
	}
	cas_snapshot_list_free(v, n);
	for (int t = 0; t < NTAGS; t++) {
		char tn[16];
		uint8_t id[32];
		snprintf(tn, sizeof(tn), "t%d", t);
		int rc = cas_snapshot_resolve(S, tn, id);
		crest_errset_str("");
		if (tags[t] < 0 ? rc == 0 : rc < 0 || memcmp(id, snaps[tags[t]]->id, 32))
			fail("tag %s does not name the snapshot the model says", tn);
	}
}

/* Tags are fixed: setting one that names another snapshot is refused and
 * changes nothing, unless asked to move it. */
static void op_tag(void)
{
	if (!nsnaps)
		return;
	int t = (int)below(NTAGS);
	if (tag_pending(t))
		return;
	size_t i = below(nsnaps);
	char tn[16];
	snprintf(tn, sizeof(tn), "t%d", t);
	const bool taken = tags[t] >= 0 && (size_t)tags[t] != i, move = chance(50);
	oplog("tag%s %.12s %s (%s)", move ? " --force" : "", snaps[i]->hex, tn, taken ? "taken" : "free");
	const int rc = cas_tag_set(S, tn, snaps[i]->id, move);
	if (taken && !move) {
		if (rc != -EEXIST)
			fail("cas_tag_set of taken tag %s returned %d, not -EEXIST: %s", tn, rc, crest_errmsg());
		crest_errset_str("");
		st.tags_refused++;
		return;
	}
	if (rc < 0)
		fail("cas_tag_set: %s", crest_errmsg());
	tag_move(t, (long)i, ++g_seq);
	st.tags++;
}

/* A put under a taken tag is refused before it ingests, in process and by
 * crest put, and the store is left as it was. */
static void op_taken_tag(void)
{
	int t = -1;
	const int t0 = (int)below(NTAGS);
	for (int k = 0; k < NTAGS && t < 0; k++)
		if (tags[(t0 + k) % NTAGS] >= 0 && !tag_pending((t0 + k) % NTAGS))
			t = (t0 + k) % NTAGS;
	if (t < 0)
		return;
	char tn[16], path[PATH_MAX + 64];
	snprintf(tn, sizeof(tn), "t%d", t);
	disk_path(path, sizeof(path), work.v[0].name);
	if (crest_bin && chance(20)) {
		char *argv[] = { (char *)crest_bin, "--store", store_dir, "--quiet", "put", "--tag", tn, path, NULL };
		char out[4096];
		oplog("crest put --tag %s (taken): must be refused", tn);
		store_close();
		run_stderr = true;
		const int rc = run(argv, out, sizeof(out));
		run_stderr = false;
		store_open();
		if (rc == 0 || !strstr(out, "tags do not move"))
			fail("crest put under taken tag %s exited %d: %s", tn, rc, out);
	} else {
		oplog("put under taken tag %s in process: must be refused", tn);
		struct engine_opts o;
		engine_opts_default(&o);
		struct engine *e;
		if (engine_open(S, &o, &e) < 0)
			fail("engine_open: %s", crest_errmsg());
		struct engine_snap *es;
		if (engine_snapshot_begin(e, "files", &es) < 0)
			fail("engine_snapshot_begin: %s", crest_errmsg());
		const int rc = engine_snapshot_set_tag(es, tn);
		if (rc != -EEXIST)
			fail("engine_snapshot_set_tag of taken tag %s returned %d: %s", tn, rc, crest_errmsg());
		crest_errset_str("");
		engine_snapshot_abort(es);
		engine_close(e);
	}
	st.tags_refused++;
}

/* ---- library phases ---- */

struct live {
	char *name;
	uint8_t *p;
	size_t size;
	crest_region_t h;
};
static struct live lives[8];
static size_t nlives;
static unsigned long reg_seq;

struct pend {
	crest_ckpt_t h;
	struct snap *s;
	int tag;
};
static struct pend pend[4];
static size_t npend;

static bool tag_pending(int t)
{
	for (size_t i = 0; i < npend; i++)
		if (pend[i].tag == t)
			return true;
	return false;
}

static void lib_register(struct live *l)
{
	int rc = crest_register(C, l->name, l->p, l->size, CREST_MEM_HOST, &l->h);
	if (rc < 0)
		fail("crest_register %s (%zu bytes): %s", l->name, l->size, crest_errmsg());
}

static void lib_open(void)
{
	struct crest_options o;
	crest_options_init(&o);
	o.staging_bytes = (size_t)8 << 20;   /* the least: big regions go in rounds */
	o.workers = 1 + (unsigned)below(2);
	o.restore_threads = 1 + (unsigned)below(3);
	o.flags = CREST_OPEN_NO_GPU;
	node_pick();
	if (crest_open(store_dir, &o, &C) < 0)
		fail("crest_open: %s", crest_errmsg());
	for (size_t i = 0; i < nlives; i++)
		lib_register(&lives[i]);
}

static void lib_wait(size_t k)
{
	struct pend p = pend[k];
	pend[k] = pend[--npend];
	struct crest_result r;
	if (crest_wait(C, p.h, &r) < 0)
		fail("crest_wait: %s", crest_errmsg());
	hex_to_id(r.snapshot, p.s->id);
	memcpy(p.s->hex, r.snapshot, 65);
	uint64_t bytes = 0;
	for (size_t i = 0; i < p.s->nregs; i++)
		bytes += p.s->regs[i].data->len;
	for (size_t i = 0; i < p.s->nblobs; i++)
		bytes += p.s->blobs[i].data->len;
	if (r.bytes != bytes)
		fail("checkpoint %.12s: %llu bytes, the model has %llu", r.snapshot, (unsigned long long)r.bytes,
		     (unsigned long long)bytes);
	tag_move(p.tag, snap_add(p.s), p.s->seq);
	oplog("waited for checkpoint %.12s", r.snapshot);
}

static void lib_close(void)
{
	while (npend)
		lib_wait(npend - 1);
	if (crest_close(C) < 0)
		fail("crest_close: %s", crest_errmsg());
	C = NULL;
}

static void live_fill(struct live *l)
{
	fill(l->p, l->size);
}

static void live_add(const char *name, size_t size)
{
	struct live *l = &lives[nlives++];
	l->name = xstrdup(name);
	l->size = size;
	l->p = xmalloc(size);
	live_fill(l);
	lib_register(l);
	st.regions++;
}

static void live_drop(size_t i)
{
	if (crest_unregister(C, lives[i].h) < 0)
		fail("crest_unregister %s: %s", lives[i].name, crest_errmsg());
	free(lives[i].name);
	free(lives[i].p);
	lives[i] = lives[--nlives];
}

static void lib_change(void)
{
	unsigned r = (unsigned)below(100);
	if ((r < 20 && nlives < 8) || nlives == 0) {
		char name[64];
		/* Names under a few "g<i>/" directories; no region is named
		 * like a directory (see the report of this test). */
		if (chance(40))
			snprintf(name, sizeof(name), "g%u/r%lu", (unsigned)below(3), reg_seq++);
		else
			snprintf(name, sizeof(name), "r%lu", reg_seq++);
		size_t size = chance(4) ? ((size_t)4 << 20) + below(9) - 4 : pick_size(1 << 20) % 400000;
		oplog("register %s, %zu bytes", name, size);
		live_add(name, size);
	} else if (r < 30) {
		size_t i = below(nlives);
		oplog("unregister %s", lives[i].name);
		live_drop(i);
	} else {
		struct live *l = &lives[below(nlives)];
		if (!l->size)
			return;
		unsigned n = 1 + (unsigned)below(4);
		for (unsigned k = 0; k < n; k++) {
			size_t off = below(l->size), len = chance(50) ? 1 + below(8) : 1 + below(20000);
			if (len > l->size - off)
				len = l->size - off;
			if (chance(80))
				off -= off % 4096;
			len = len > l->size - off ? l->size - off : len;
			fill(l->p + off, len);
		}
		oplog("change %s", l->name);
	}
}

static void add_dir_ents(struct ents *t, const char *name)
{
	for (const char *sl = strchr(name, '/'); sl; sl = strchr(sl + 1, '/')) {
		char d[PATH_MAX];
		snprintf(d, sizeof(d), "%.*s", (int)(sl - name), name);
		if (!ents_find(t, d))
			ents_add(t, d, E_DIR, 0700);
	}
}

static void lib_checkpoint(void)
{
	if (npend == 3)
		lib_wait(below(npend));
	struct snap *s = snap_new(true);
	s->regs = xmalloc(sizeof(*s->regs) * (nlives + 1));
	s->nregs = nlives;
	for (size_t i = 0; i < nlives; i++) {
		s->regs[i].name = xstrdup(lives[i].name);
		s->regs[i].data = buf_copy(lives[i].p, lives[i].size);
		add_dir_ents(&s->tree, lives[i].name);
	}
	size_t nb = chance(50) ? below(4) : 0;
	struct crest_blob b[4];
	s->blobs = xmalloc(sizeof(*s->blobs) * 4);
	s->nblobs = nb;
	for (size_t i = 0; i < nb; i++) {
		char name[64];
		snprintf(name, sizeof(name), chance(30) ? "g1/b%zu" : "b%zu", i);
		size_t len = chance(20) ? 0 : 1 + below(chance(20) ? 70000 : 300);
		s->blobs[i].name = xstrdup(name);
		s->blobs[i].data = buf_new(len);
		fill(s->blobs[i].data->p, len);
		b[i] = (struct crest_blob){ .name = s->blobs[i].name, .data = s->blobs[i].data->p, .len = len };
		add_dir_ents(&s->tree, name);
	}
	for (size_t i = 0; i < s->nregs + s->nblobs; i++) {
		const struct lreg *x = i < s->nregs ? &s->regs[i] : &s->blobs[i - s->nregs];
		struct ent *e = ents_add(&s->tree, x->name, E_FILE, 0600);
		e->data = buf_ref(x->data);
	}
	if (s->tree.n)
		qsort(s->tree.v, s->tree.n, sizeof(*s->tree.v), ent_cmp);
	int tag = pick_tag();
	char tn[16];
	snprintf(tn, sizeof(tn), "t%d", tag);
	const char *labels[] = { "step=1", "model=test" };
	struct crest_checkpoint_opts o = { .tag = tag >= 0 ? tn : NULL, .blobs = b, .nblobs = nb,
					   .labels = labels, .nlabels = below(3) };
	struct pend *p = &pend[npend];
	if (crest_checkpoint(C, &o, &p->h) < 0)
		fail("crest_checkpoint: %s", crest_errmsg());
	p->s = s;
	p->tag = tag;
	npend++;
	uint64_t bytes = 0;
	for (size_t i = 0; i < s->nregs; i++)
		bytes += s->regs[i].data->len;
	st.ckpts++;
	st.ckpt_bytes += bytes;
	oplog("checkpoint: %zu regions, %zu blobs, %llu bytes%s%s", s->nregs, nb, (unsigned long long)bytes,
	      tag >= 0 ? ", tag " : "", tag >= 0 ? tn : "");
	/* Change the regions at once now and then: crest copied them. */
	if (chance(30) && nlives) {
		struct live *l = &lives[below(nlives)];
		if (l->size)
			memset(l->p, 0x5a, l->size < 100 ? l->size : 100);
		oplog("scribble %s right after the checkpoint", l->name);
	}
	if (chance(60))
		while (npend)
			lib_wait(below(npend));
}

static bool regions_match(const struct snap *s)
{
	if (s->nregs != nlives)
		return false;
	for (size_t i = 0; i < nlives; i++) {
		bool ok = false;
		for (size_t j = 0; j < s->nregs && !ok; j++)
			ok = !strcmp(s->regs[j].name, lives[i].name) && s->regs[j].data->len == lives[i].size;
		if (!ok)
			return false;
	}
	return true;
}

/* crest_restore of an earlier checkpoint into the regions: refused (and
 * nothing written) when they do not match; else every byte as the model
 * says, over junk. */
static void lib_restore(void)
{
	struct snap *s = snap_pick(1);
	if (!s)
		return;
	char nbuf[65];
	const char *nm = snap_name(s, nbuf);
	/* NULL names the newest library snapshot (the last begun, whatever
	 * order they were waited for in): only when nothing is pending. */
	bool newest = !npend;
	for (size_t i = 0; i < nsnaps && newest; i++)
		newest = !snaps[i]->library || snaps[i]->seq <= s->seq;
	if (newest && chance(50))
		nm = NULL;
	if (!regions_match(s)) {
		if (chance(50) && nlives) {
			struct buf **before = xmalloc(nlives * sizeof(*before));
			for (size_t i = 0; i < nlives; i++)
				before[i] = buf_copy(lives[i].p, lives[i].size);
			oplog("crest_restore %s (%.12s) into other regions: must be refused", nm ? nm : "NULL", s->hex);
			int rc = crest_restore(C, nm, NULL);
			if (rc != -EINVAL)
				fail("crest_restore of %.12s into regions that differ returned %d, not -EINVAL (%s)",
				     s->hex, rc, crest_errmsg());
			for (size_t i = 0; i < nlives; i++) {
				if (memcmp(before[i]->p, lives[i].p, lives[i].size))
					fail("a refused crest_restore changed region %s", lives[i].name);
				buf_put(before[i]);
			}
			free(before);
			st.refused++;
			return;
		}
		while (nlives)
			live_drop(nlives - 1);
		for (size_t i = 0; i < s->nregs; i++)
			live_add(s->regs[i].name, s->regs[i].data->len);
	}
	for (size_t i = 0; i < nlives; i++)
		fill(lives[i].p, lives[i].size);   /* junk the restore must replace */
	oplog("crest_restore %s (%.12s)", nm ? nm : "NULL", s->hex);
	struct crest_restore_result r;
	if (crest_restore(C, nm, &r) < 0)
		fail("crest_restore %.12s: %s", s->hex, crest_errmsg());
	if (strcmp(r.snapshot, s->hex))
		fail("crest_restore %s restored %.12s, not %.12s", nm ? nm : "NULL", r.snapshot, s->hex);
	for (size_t i = 0; i < nlives; i++)
		for (size_t j = 0; j < s->nregs; j++)
			if (!strcmp(s->regs[j].name, lives[i].name)) {
				size_t d = first_diff(lives[i].p, s->regs[j].data->p, lives[i].size);
				if (d < lives[i].size)
					fail("crest_restore %.12s: region %s (%zu bytes) differs at byte %zu", s->hex,
					     lives[i].name, lives[i].size, d);
			}
	st.lib_restores++;
}

static void lib_blob(void)
{
	struct snap *s = snap_pick(1);
	if (!s)
		return;
	char nbuf[65];
	const char *nm = snap_name(s, nbuf);
	void *data;
	size_t len;
	if (!s->nblobs) {
		int rc = crest_read_blob(C, nm, "b0", &data, &len);
		if (rc != -ENOENT)
			fail("crest_read_blob of a blob %.12s does not have returned %d", s->hex, rc);
		return;
	}
	const struct lreg *b = &s->blobs[below(s->nblobs)];
	oplog("read blob %s of %.12s", b->name, s->hex);
	if (crest_read_blob(C, nm, b->name, &data, &len) < 0)
		fail("crest_read_blob %s of %.12s: %s", b->name, s->hex, crest_errmsg());
	if (len != b->data->len || memcmp(data, b->data->p, len))
		fail("blob %s of %.12s came back different (%zu bytes, not %zu)", b->name, s->hex, len, b->data->len);
	crest_free(data);
	st.blobs++;
}

/* ---- the run ---- */

static void usage(void)
{
	fprintf(stderr, "usage: model [--ops N] [--seconds S] [--seed N] [--dir DIR] [--rados POOL]\n");
	exit(2);
}

static uint64_t cat_ns[2][5];

int main(int argc, char **argv)
{
	unsigned long ops = 6000;
	double seconds = 0;
	const char *v, *dir = NULL, *pool = NULL;
	bool have_seed = false;
	if ((v = getenv("CREST_MODEL_OPS")) && *v)
		ops = strtoul(v, NULL, 10);
	if ((v = getenv("CREST_MODEL_SECONDS")) && *v)
		seconds = strtod(v, NULL);
	if ((v = getenv("CREST_TEST_SEED")) && *v) {
		g_seed = strtoull(v, NULL, 10);
		have_seed = true;
	}
	for (int i = 1; i < argc; i++) {
		if (i + 1 >= argc)
			usage();
		if (!strcmp(argv[i], "--ops"))
			ops = strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--seconds"))
			seconds = strtod(argv[++i], NULL);
		else if (!strcmp(argv[i], "--seed")) {
			g_seed = strtoull(argv[++i], NULL, 10);
			have_seed = true;
		} else if (!strcmp(argv[i], "--dir"))
			dir = argv[++i];
		else if (!strcmp(argv[i], "--rados"))
			pool = argv[++i];
		else
			usage();
	}
	if (!have_seed) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		g_seed = ((uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 20)) % 1000000000;
	}
	g_verbose = (v = getenv("CREST_MODEL_VERBOSE")) && *v == '1';
	crest_bin = (v = getenv("CREST")) && *v ? v : NULL;
	casctl_bin = (v = getenv("CASCTL")) && *v ? v : NULL;
	g_readers_beside = (v = getenv("CREST_MODEL_READERS_BESIDE")) && *v == '1';
	/* Tiny pieces, packs and (below) chunks and segments: every boundary
	 * is crossed many times per operation. */
	setenv("CREST_PIECE_MIN_EXTENTS", "4", 0);
	setenv("CREST_PIECE_SPAN", "65536", 0);
	setenv("CREST_PACK_LIMIT", "65536", 0);
	setenv("CREST_META_LIMIT", "65536", 0);   /* meta logs roll over too */
	/* The binaries change which operations run (puts and gets by crest),
	 * so the replay names them: the seed alone replays another run. */
	snprintf(g_replay, sizeof(g_replay), "CREST_TEST_SEED=%llu%s%s%s%s%s%s",
		 (unsigned long long)g_seed, crest_bin ? " CREST=" : "", crest_bin ? crest_bin : "",
		 casctl_bin ? " CASCTL=" : "", casctl_bin ? casctl_bin : "", pool ? " with --rados " : "",
		 pool ? pool : "");
	printf("model: seed %llu (%s replays it), %lu operations%s\n", (unsigned long long)g_seed, g_replay, ops,
	       seconds > 0 ? " at most" : "");
	fflush(stdout);
	rnd_seed(g_seed);

	/* In memory where it can be: a commit's syncs on a disk cost more than
	 * the rest of the operation, and durability is crash.sh's business. */
	const char *tmp = getenv("TMPDIR");
	if (!tmp || !*tmp)
		tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	if (dir)
		snprintf(g_root, sizeof(g_root), "%s", dir);
	else
		snprintf(g_root, sizeof(g_root), "%s/crest-model.XXXXXX", tmp);
	if (dir ? mkdir(g_root, 0700) < 0 && errno != EEXIST : !mkdtemp(g_root))
		fail("cannot create %s: %s", g_root, strerror(errno));
	snprintf(store_dir, sizeof(store_dir), "%s/store", g_root);
	if (pool) {
		/* A namespace of this run's own; the cluster goes with the
		 * suite's fixture (tests/ceph), the objects with it. */
		g_rados = true;
		snprintf(store_dir, sizeof(store_dir), "rados:%s/model-%llu-%d", pool, (unsigned long long)g_seed,
			 (int)getpid());
		for (int n = 0; n < 2; n++)
			snprintf(g_node[n], sizeof(g_node[n]), "%s/node-%c", g_root, 'a' + n);
		printf("model: store %s, nodes %s and %s\n", store_dir, g_node[0], g_node[1]);
	}
	snprintf(work_dir, sizeof(work_dir), "%s/work", g_root);
	snprintf(out_dir, sizeof(out_dir), "%s/out", g_root);
	if (mkdir(work_dir, 0700) < 0 || mkdir(out_dir, 0700) < 0)
		fail("cannot create %s: %s", work_dir, strerror(errno));
	char path[PATH_MAX + 64];
	disk_path(path, sizeof(path), "w");
	if (mkdir(path, 0755) < 0 || chmod(path, 0755) < 0)
		fail("cannot create %s: %s", path, strerror(errno));
	ents_add(&work, "w", E_DIR, 0755);
	for (int i = 0; i < NTAGS; i++)
		tags[i] = -1;

	store_open();
	bool library = false;
	const uint64_t t0 = time_now_ns();
	for (g_op = 0; g_op < ops; g_op++) {
		if (seconds > 0 && (double)(time_now_ns() - t0) / 1e9 > seconds)
			break;
		if (g_op && g_op % 1000 == 0) {   /* all of it, every so often */
			if (library) {
				lib_close();
				store_open();
				library = false;
			}
			check_list();
			op_verify(true);
			printf("model: %lu operations, %zu snapshots, %.1f s\n", g_op, nsnaps,
			       (double)(time_now_ns() - t0) / 1e9);
			fflush(stdout);
		}
		unsigned r = (unsigned)below(1000);
		/* Half the commits add their chunk entries to the index as
		 * table files (cas/ingest.c), which else only commits of 64 K
		 * entries do. */
		setenv("CREST_COMMIT_INGEST_MIN", chance(50) ? "8" : "1000000000", 1);
		const uint64_t top = time_now_ns();
		if (r < 15) {   /* switch between file and library phases */
			oplog("switch to %s", library ? "files" : "library");
			if (library) {
				lib_close();
				node_check();
				store_open();
				check_list();
			} else {
				store_close();
				node_check();
				lib_open();
			}
			library = !library;
			st.phases++;
			continue;
		}
		if (!library) {
			if (r < 500) {
				work_change();
				st.changes++;
			} else if (r < 700) {
				op_put();
				/* Check at once: this snapshot or an earlier one. */
				struct snap *s = snap_pick(-1);
				if (s)
					op_restore_tree(s);
			} else if (r < 950) {
				struct snap *s = snap_pick(chance(80) ? 0 : 1);
				if (s)
					op_restore_tree(s);
			} else if (r < 965) {
				op_tag();
			} else if (r < 970) {
				op_taken_tag();
			} else if (r < 995) {
				op_verify(false);
			} else {
				check_list();
			}
		} else {
			if (r < 550) {
				lib_change();
			} else if (r < 750) {
				lib_checkpoint();
			} else if (r < 950) {
				lib_restore();
			} else {
				lib_blob();
			}
		}
		cat_ns[library][r < 15 ? 0 : library ? (r < 550 ? 1 : r < 750 ? 2 : r < 950 ? 3 : 4)
				   : (r < 500 ? 1 : r < 700 ? 2 : r < 950 ? 3 : 4)] += time_now_ns() - top;
	}
	if (library)
		lib_close();
	else
		store_close();
	store_open();
	check_list();
	op_verify(true);
	for (size_t i = 0; i < nsnaps; i++)   /* every snapshot still kept, once more */
		if (snaps[i]->kept)
			op_restore_tree(snaps[i]);
	store_close();
	const double secs = (double)(time_now_ns() - t0) / 1e9;
	struct cas_pack_stats ps = { 0 };
	if (cas_open(store_dir, CAS_READ, &S) == 0) {
		cas_pack_stats(S, &ps);
		store_close();
	}
	/* The rollover's promise, on the logs on disk: a log past the limit
	 * took one append only (it rolls over before any append that would
	 * take it past), so it holds one commit's manifest at most. Without
	 * the rollover, a session's log passes 64 KiB with many. */
	const unsigned long limit = strtoul(getenv("CREST_META_LIMIT"), NULL, 10);
	unsigned long logs = 0, past = 0;
	char mdir[PATH_MAX + 32];
	snprintf(mdir, sizeof(mdir), "%s/meta", store_dir);
	DIR *md = opendir(mdir);
	for (struct dirent *e; md && (e = readdir(md));) {
		if (!strstr(e->d_name, ".log"))
			continue;
		logs++;
		char lp[PATH_MAX + 300];
		snprintf(lp, sizeof(lp), "%s/%s", mdir, e->d_name);
		struct stat lst;
		if (stat(lp, &lst) < 0 || (unsigned long)lst.st_size <= limit)
			continue;
		const size_t len = (size_t)lst.st_size;
		uint8_t *b = read_whole(lp, len);
		past++;
		unsigned manifests = 0;
		for (size_t off = CAS_FILE_HEADER; off + CAS_REC_HEADER <= len && !memcmp(b + off, CAS_META_REC_MAGIC, 4);
		     off += CAS_REC_HEADER + le32_get(b + off + 8))
			manifests += b[off + 4] == CAS_META_MANIFEST;
		free(b);
		if (manifests > 1)
			fail("meta log %s has %zu bytes, past the rollover limit of %lu, and %u commits' manifests",
			     lp, len, limit, manifests);
	}
	if (md)
		closedir(md);
	if (!g_rados)   /* RADOS: the logs are objects, which this check does not read */
		printf("model: %lu meta logs, %lu of them past the limit of %lu bytes with one commit each\n", logs,
		       past, limit);
	else
		printf("model: %lu switches between the two nodes' index caches\n", g_node_switches);
	printf("model: ok: %lu operations in %.1f s (%.0f/s), seed %llu\n", g_op, secs, g_op / secs,
	       (unsigned long long)g_seed);
	printf("model: %lu tree changes, %lu puts (%lu by crest put, %.1f MiB), %lu checkpoints (%.1f MiB), "
	       "%lu regions registered, %lu tree restores (%lu by crest get), %lu region restores, %lu refused, "
	       "%lu stream reads, %lu blob reads, %lu verifies (%lu of all, %lu by casctl), %lu tags (%lu refused: taken), "
	       "%lu phase switches; %zu snapshots, %llu packs, %.1f MiB of packs\n",
	       st.changes, st.puts, st.bin_puts, st.put_bytes / 1048576.0, st.ckpts, st.ckpt_bytes / 1048576.0,
	       st.regions, st.restores, st.bin_gets, st.lib_restores, st.refused, st.mem_reads, st.blobs,
	       st.verifies, st.verify_all, st.bin_verifies, st.tags, st.tags_refused, st.phases, nsnaps,
	       (unsigned long long)ps.packs, ps.pack_bytes / 1048576.0);
	if (getenv("CREST_MODEL_TIMES"))
		printf("model: seconds in files: switch %.1f change %.1f put %.1f restore %.1f other %.1f; "
		       "library: switch %.1f change %.1f ckpt %.1f restore %.1f blob %.1f\n",
		       cat_ns[0][0] / 1e9, cat_ns[0][1] / 1e9, cat_ns[0][2] / 1e9, cat_ns[0][3] / 1e9, cat_ns[0][4] / 1e9,
		       cat_ns[1][0] / 1e9, cat_ns[1][1] / 1e9, cat_ns[1][2] / 1e9, cat_ns[1][3] / 1e9, cat_ns[1][4] / 1e9);
	if (!dir)
		fs_rm_tree(g_root);
	return 0;
}
