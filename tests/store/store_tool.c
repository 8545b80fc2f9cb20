/*
 * store_tool.c - helpers for the store tests and benchmarks: fast test data,
 * in-place edits, and deliberate damage to a store.
 *
 *   store_tool random PATH SIZE SEED          SIZE pseudo-random bytes
 *   store_tool memory PATH SIZE SEED          memory-like pages (see below)
 *   store_tool scatter PATH FRACTION SEED     overwrite that fraction of the
 *                                             file's 4 KiB pages, in place
 *   store_tool insert SRC DST COUNT SEED      SRC with COUNT runs of 1-64
 *                                             random bytes inserted at random
 *                                             places (a file edited by shifts)
 *   store_tool flip PATH OFFSET               invert one byte
 *   store_tool forge PACK OFFSET              invert the middle byte of the
 *                                             record at OFFSET's data and
 *                                             write its CRC32C anew: damage
 *                                             only the SHA-256 check sees
 *                                             (twice undoes it)
 *   store_tool records PACK                   one line per chunk record:
 *                                             "offset codec stored sha"
 *   store_tool format NAME                    the value of a constant of
 *                                             cas/format.h (CAS_REC_HEADER,
 *                                             CAS_FORMAT_VERSION, ...): the
 *                                             scripts take the layout from
 *                                             there, never from a copy
 *   store_tool damage-manifest STORE IDPREFIX invert one byte in the middle
 *                                             of that snapshot's manifest
 *   store_tool damage-piece STORE flip|drop   the same to the first piece of
 *                                             an extent list, or delete it;
 *                                             prints the piece's SHA-256
 *   store_tool drop-key STORE TYPE IDPREFIX   deletes the first index key of
 *                                             that type ('i', 'm', 'l', ...)
 *                                             whose id starts with IDPREFIX
 *                                             (type 't': the tag IDPREFIX)
 *   store_tool files DIR COUNT SEED           COUNT small files (0-8999 bytes,
 *                                             slices of one random MiB, random
 *                                             modes) as DIR/dK/fI, K = I % 17:
 *                                             one process, not a dd each
 *   store_tool same A B                       every regular file under A has
 *                                             the same bytes as B's at the same
 *                                             path (else the first that does
 *                                             not, and exit 1): one process,
 *                                             not a cmp each
 *   store_tool ends STORE                     one line per pack on disk or
 *                                             with a 'p' key: "PACK SIZE END",
 *                                             SIZE the file's ("-": none),
 *                                             END the 'p' end, "r" (retired)
 *                                             or "-" (neither); the index is
 *                                             opened read-only
 *
 * Data comes from xoshiro256** so that a GiB takes well under a second to
 * make (urandom takes several): tests make their data fresh every run and
 * the same seed gives the same bytes, so a failure can be reproduced.
 * Sizes take K/M/G suffixes (powers of 1024).
 */
#include "cas/format.h"
#include "util/crc32c.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <rocksdb/c.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define PAGE 4096u
#define BUF (4u << 20)

struct rng {
	uint64_t s[4];
};

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(struct rng *r)
{
	uint64_t *s = r->s, out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return out;
}

static void rng_seed(struct rng *r, uint64_t seed)
{
	for (int i = 0; i < 4; i++) {  /* splitmix64 to spread the seed */
		uint64_t z = (seed += 0x9e3779b97f4a7c15ull);
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		r->s[i] = z ^ (z >> 31);
	}
}

static void fill_random(struct rng *r, uint8_t *p, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t v = rng_next(r);
		memcpy(p + i, &v, 8);
	}
	if (i < n) {
		uint64_t v = rng_next(r);
		memcpy(p + i, &v, n - i);
	}
}

/* One memory-like page. The mix is what a process heap roughly looks like:
 * about a quarter untouched (zero), a third already dense (compressed or
 * random data), the rest structured records that LZ4 shrinks about 2-3x.
 * Every non-zero page carries its page number, so pages do not dedup
 * against each other: ingest has to hash and store all of them. */
static void fill_memory_page(struct rng *r, uint8_t *p, uint64_t pageno)
{
	uint64_t kind = rng_next(r) % 100;
	if (kind < 25) {
		memset(p, 0, PAGE);
		return;
	}
	if (kind < 60) {
		fill_random(r, p, PAGE);
		return;
	}
	/* 16-byte records: a page-local counter, a small random field, padding. */
	uint64_t base = pageno << 12;
	for (unsigned i = 0; i < PAGE; i += 16) {
		uint64_t v = rng_next(r);
		uint64_t a = base + i;
		uint32_t b = (uint32_t)(v & 0x3ff), c = 0;
		memcpy(p + i, &a, 8);
		memcpy(p + i + 8, &b, 4);
		memcpy(p + i + 12, &c, 4);
	}
}

static int parse_size(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -1;
	uint64_t mul = 1;
	if (*end == 'K' || *end == 'k')
		mul = 1ull << 10;
	else if (*end == 'M' || *end == 'm')
		mul = 1ull << 20;
	else if (*end == 'G' || *end == 'g')
		mul = 1ull << 30;
	else if (*end)
		return -1;
	*out = v * mul;
	return 0;
}

static int die(const char *what)
{
	fprintf(stderr, "store_tool: %s: %s\n", what, strerror(errno));
	return 1;
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static int gen(const char *path, uint64_t size, uint64_t seed, int memory)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return die(path);
	uint8_t *buf = malloc(BUF);
	if (!buf)
		return die("malloc");
	struct rng r;
	rng_seed(&r, seed);
	uint64_t done = 0;
	while (done < size) {
		size_t n = size - done < BUF ? (size_t)(size - done) : BUF;
		if (memory)
			for (size_t o = 0; o < n; o += PAGE)
				fill_memory_page(&r, buf + o, (done + o) / PAGE);
		else
			fill_random(&r, buf, n);
		if (write_all(fd, buf, n) < 0)
			return die(path);
		done += n;
	}
	free(buf);
	return close(fd) < 0 ? die(path) : 0;
}

/* Overwrites distinct 4 KiB pages chosen at random, so exactly that share of
 * the file changes (a partial Fisher-Yates shuffle picks the pages). */
static int scatter(const char *path, double fraction, uint64_t seed)
{
	int fd = open(path, O_RDWR);
	struct stat sb;
	if (fd < 0 || fstat(fd, &sb) < 0)
		return die(path);
	uint64_t pages = (uint64_t)sb.st_size / PAGE;
	uint64_t want = (uint64_t)((double)pages * fraction + 0.5);
	uint32_t *idx = malloc(pages * sizeof(*idx) + 1);
	if (!idx)
		return die("malloc");
	for (uint64_t i = 0; i < pages; i++)
		idx[i] = (uint32_t)i;
	struct rng r;
	rng_seed(&r, seed);
	uint8_t page[PAGE];
	for (uint64_t i = 0; i < want; i++) {
		uint64_t j = i + rng_next(&r) % (pages - i);
		uint32_t t = idx[i];
		idx[i] = idx[j];
		idx[j] = t;
		fill_random(&r, page, PAGE);
		if (pwrite(fd, page, PAGE, (off_t)idx[i] * PAGE) != PAGE)
			return die(path);
	}
	free(idx);
	printf("%llu\n", (unsigned long long)want);
	return close(fd) < 0 ? die(path) : 0;
}

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static int insert(const char *src, const char *dst, uint64_t count, uint64_t seed)
{
	int in = open(src, O_RDONLY), out = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	struct stat sb;
	if (in < 0 || out < 0 || fstat(in, &sb) < 0)
		return die(in < 0 ? src : dst);
	uint64_t *at = malloc((count + 1) * sizeof(*at));
	uint8_t *buf = malloc(BUF);
	if (!at || !buf)
		return die("malloc");
	struct rng r;
	rng_seed(&r, seed);
	for (uint64_t i = 0; i < count; i++)
		at[i] = sb.st_size ? rng_next(&r) % (uint64_t)sb.st_size : 0;
	qsort(at, count, sizeof(*at), u64_cmp);
	at[count] = (uint64_t)sb.st_size;
	uint64_t pos = 0;
	for (uint64_t i = 0; i <= count; i++) {
		while (pos < at[i]) {
			size_t n = at[i] - pos < BUF ? (size_t)(at[i] - pos) : BUF;
			ssize_t got = read(in, buf, n);
			if (got <= 0 || write_all(out, buf, (size_t)got) < 0)
				return die(src);
			pos += (uint64_t)got;
		}
		if (i < count) {
			uint8_t ins[64];
			size_t n = 1 + rng_next(&r) % 64;
			fill_random(&r, ins, n);
			if (write_all(out, ins, n) < 0)
				return die(dst);
		}
	}
	free(at);
	free(buf);
	close(in);
	return close(out) < 0 ? die(dst) : 0;
}

static int flip(const char *path, uint64_t off)
{
	int fd = open(path, O_RDWR);
	uint8_t b;
	if (fd < 0 || pread(fd, &b, 1, (off_t)off) != 1)
		return die(path);
	b ^= 0xff;
	if (pwrite(fd, &b, 1, (off_t)off) != 1 || fsync(fd) < 0)
		return die(path);
	return close(fd) < 0 ? die(path) : 0;
}

static int forge(const char *path, uint64_t off)
{
	int fd = open(path, O_RDWR);
	uint8_t h[CAS_REC_HEADER];
	if (fd < 0 || pread(fd, h, sizeof(h), (off_t)off) != (ssize_t)sizeof(h))
		return die(path);
	const uint32_t stored = le32_get(h + CAS_REC_STORED);
	uint8_t *d = malloc(stored ? stored : 1);
	if (memcmp(h, CAS_REC_MAGIC, 4) || !stored || !d) {
		fprintf(stderr, "store_tool: %s: no chunk record with data at %llu\n", path,
			(unsigned long long)off);
		return 1;
	}
	if (pread(fd, d, stored, (off_t)(off + CAS_REC_HEADER)) != (ssize_t)stored)
		return die(path);
	d[stored / 2] ^= 0xff;
	le32_put(h + CAS_REC_CRC, crc32c(d, stored));
	if (pwrite(fd, d, stored, (off_t)(off + CAS_REC_HEADER)) != (ssize_t)stored ||
	    pwrite(fd, h, sizeof(h), (off_t)off) != (ssize_t)sizeof(h) || fsync(fd) < 0)
		return die(path);
	free(d);
	return close(fd) < 0 ? die(path) : 0;
}

/* Walks a pack's records as cas/format.h lays them out: the file header,
 * then per record a header and the stored bytes. */
static int records(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return die(path);
	uint64_t off = CAS_FILE_HEADER;
	uint8_t h[CAS_REC_HEADER];
	while (fseeko(f, (off_t)off, SEEK_SET) == 0 && fread(h, 1, sizeof(h), f) == sizeof(h) &&
	       !memcmp(h, CAS_REC_MAGIC, 4)) {
		const uint32_t stored = le32_get(h + CAS_REC_STORED);
		printf("%llu %u %u ", (unsigned long long)off, h[CAS_REC_CODEC], stored);
		for (int i = 0; i < 32; i++)
			printf("%02x", h[CAS_REC_SHA + i]);
		printf("\n");
		off += CAS_REC_HEADER + stored;
	}
	fclose(f);
	return 0;
}

/* The constants the scripts need to find their way in a pack or a store. */
static int format_const(const char *name)
{
	static const struct {
		const char *name;
		unsigned long value;
	} c[] = {
		{ "CAS_FORMAT_VERSION", CAS_FORMAT_VERSION }, { "CAS_FORMAT_OLDEST", CAS_FORMAT_OLDEST },
		{ "CAS_FILE_HEADER", CAS_FILE_HEADER },       { "CAS_FILE_HDR_VERSION", CAS_FILE_HDR_VERSION },
		{ "CAS_PACK_VERSION", CAS_PACK_VERSION },     { "CAS_REC_HEADER", CAS_REC_HEADER },
		{ "CAS_REC_CODEC", CAS_REC_CODEC },           { "CAS_REC_RAW", CAS_REC_RAW },
		{ "CAS_REC_STORED", CAS_REC_STORED },         { "CAS_REC_CRC", CAS_REC_CRC },
		{ "CAS_REC_SHA", CAS_REC_SHA },
	};
	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		if (!strcmp(c[i].name, name)) {
			printf("%lu\n", c[i].value);
			return 0;
		}
	}
	fprintf(stderr, "store_tool: format: %s is not a constant store_tool knows\n", name);
	return 2;
}

/* Index keys are 'm' + id[32]; the value's SHA-256 is the id, so any changed
 * byte must be caught when the manifest is loaded. */
/* Damages the first index value of this type ('m' manifest, 'l' piece)
 * whose key starts with the hex prefix: one byte inverted, or deleted. */
static int damage_index(const char *store, char type, const char *prefix, int drop)
{
	char path[4096], *err = NULL;
	snprintf(path, sizeof(path), "%s/index", store);
	rocksdb_options_t *o = rocksdb_options_create();
	rocksdb_t *db = rocksdb_open(o, path, &err);
	if (!db) {
		fprintf(stderr, "store_tool: cannot open %s: %s\n", path, err);
		return 1;
	}
	rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
	rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
	rocksdb_writeoptions_set_sync(wo, 1);
	rocksdb_iterator_t *it = rocksdb_create_iterator(db, ro);
	int found = 0;
	for (rocksdb_iter_seek(it, &type, 1); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
		size_t kl, vl;
		const char *k = rocksdb_iter_key(it, &kl);
		if (type == 't') {   /* a tag: its key is its name, whole */
			if (kl < 2 || k[0] != 't')
				break;
			if (kl - 1 != strlen(prefix) || memcmp(k + 1, prefix, kl - 1))
				continue;
		} else if (kl != 33 || k[0] != type) {
			break;
		}
		char hex[65];
		for (int i = 0; i < 32; i++)
			snprintf(hex + 2 * i, 3, "%02x", (uint8_t)k[1 + i]);
		if (type != 't' && strncasecmp(hex, prefix, strlen(prefix)))
			continue;
		if (type == 'l')
			printf("%s\n", hex);
		if (drop) {
			rocksdb_delete(db, wo, k, kl, &err);
		} else {
			const char *v = rocksdb_iter_value(it, &vl);
			char *nv = malloc(vl);
			memcpy(nv, v, vl);
			nv[vl / 2] ^= 0x5a;
			rocksdb_put(db, wo, k, kl, nv, vl, &err);
			free(nv);
		}
		found = !err;
		break;
	}
	rocksdb_iter_destroy(it);
	rocksdb_readoptions_destroy(ro);
	rocksdb_writeoptions_destroy(wo);
	rocksdb_close(db);
	rocksdb_options_destroy(o);
	if (err || !found) {
		fprintf(stderr, "store_tool: no %s %s damaged in %s%s%s\n", type == 'm' ? "manifest" : type == 'l' ? "piece" : "key",
			prefix, store,
			err ? ": " : "", err ? err : "");
		return 1;
	}
	return 0;
}

/* What one pack number has: a file in packs/ and its size, a 'p' end, an
 * 'r' key (cas/FORMAT.md, "Index keys"). */
struct pack_row {
	uint32_t pack;
	int has_file, has_p, has_r;
	uint64_t size, end;
};

/* A new row for pack, appended: a pack seen on disk and in the index has
 * a row from each, merged once they are sorted. */
static struct pack_row *row_add(struct pack_row **v, size_t *n, size_t *cap, uint32_t pack)
{
	if (*n == *cap) {
		size_t nc = *cap ? *cap * 2 : 64;
		struct pack_row *nv = realloc(*v, nc * sizeof(*nv));
		if (!nv)
			return NULL;
		*v = nv;
		*cap = nc;
	}
	(*v)[*n] = (struct pack_row){ .pack = pack };
	return &(*v)[(*n)++];
}

static int row_cmp(const void *a, const void *b)
{
	uint32_t x = ((const struct pack_row *)a)->pack, y = ((const struct pack_row *)b)->pack;
	return x < y ? -1 : x > y;
}

/* Each pack's file size beside its committed end: what a writer's open
 * leaves (every pack recorded and cut back to its end, or retired) can be
 * checked from a script. The index is opened read-only, so looking never
 * changes the store (a writer's open would cut the packs it is asked about). */
static int ends(const char *store)
{
	char path[4096], *err = NULL;
	struct pack_row *v = NULL;
	size_t n = 0, cap = 0;
	snprintf(path, sizeof(path), "%s/packs", store);
	DIR *d = opendir(path);
	if (!d)
		return die(path);
	struct dirent *de;
	while ((de = readdir(d))) {
		/* NNNNNNNN.pack: the number in at least eight decimal digits
		 * (FORMAT.md, "Files"; cas_pack_path). */
		const char *nm = de->d_name;
		const size_t digits = strspn(nm, "0123456789");
		if (digits < 8 || digits > 10 || strcmp(nm + digits, ".pack"))
			continue;
		struct stat sb;
		snprintf(path, sizeof(path), "%s/packs/%s", store, nm);
		if (stat(path, &sb) < 0) {
			closedir(d);
			return die(path);
		}
		struct pack_row *r = row_add(&v, &n, &cap, (uint32_t)strtoul(nm, NULL, 10));
		if (!r) {
			closedir(d);
			return die("malloc");
		}
		r->has_file = 1;
		r->size = (uint64_t)sb.st_size;
	}
	closedir(d);

	snprintf(path, sizeof(path), "%s/index", store);
	rocksdb_options_t *o = rocksdb_options_create();
	rocksdb_t *db = rocksdb_open_for_read_only(o, path, 0, &err);
	if (!db) {
		fprintf(stderr, "store_tool: cannot open %s read-only: %s\n", path, err);
		free(err);
		rocksdb_options_destroy(o);
		free(v);
		return 1;
	}
	rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
	int rc = 0;
	static const char types[] = { 'p', 'r' };
	for (size_t t = 0; t < sizeof(types) && !rc; t++) {
		rocksdb_iterator_t *it = rocksdb_create_iterator(db, ro);
		for (rocksdb_iter_seek(it, &types[t], 1); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
			size_t kl, vl;
			const char *k = rocksdb_iter_key(it, &kl);
			if (kl < 1 || k[0] != types[t])
				break;
			const char *val = rocksdb_iter_value(it, &vl);
			/* 'p'/'r' + u32 pack (BE) -> u64 (LE). */
			if (kl != 5 || vl != 8) {
				fprintf(stderr, "store_tool: %s: a '%c' key of %zu bytes with a value of %zu: "
						"not a pack end\n", path, types[t], kl, vl);
				rc = 1;
				break;
			}
			struct pack_row *r = row_add(&v, &n, &cap, be32_get((const uint8_t *)k + 1));
			if (!r) {
				rc = die("malloc");
				break;
			}
			if (types[t] == 'p') {
				r->has_p = 1;
				r->end = le64_get((const uint8_t *)val);
			} else {
				r->has_r = 1;
			}
		}
		if (!rc) {
			rocksdb_iter_get_error(it, &err);
			if (err) {
				fprintf(stderr, "store_tool: scanning %s: %s\n", path, err);
				free(err);
				rc = 1;
			}
		}
		rocksdb_iter_destroy(it);
	}
	rocksdb_readoptions_destroy(ro);
	rocksdb_close(db);
	rocksdb_options_destroy(o);
	if (!rc) {
		qsort(v, n, sizeof(*v), row_cmp);
		size_t m = 0;   /* rows of the same pack merged */
		for (size_t i = 0; i < n; i++) {
			if (m && v[m - 1].pack == v[i].pack) {
				struct pack_row *r = &v[m - 1];
				if (v[i].has_file) {
					r->has_file = 1;
					r->size = v[i].size;
				}
				if (v[i].has_p) {
					r->has_p = 1;
					r->end = v[i].end;
				}
				r->has_r |= v[i].has_r;
			} else {
				v[m++] = v[i];
			}
		}
		for (size_t i = 0; i < m; i++) {
			/* A retired pack gone from disk has nothing left to check. */
			if (!v[i].has_file && !v[i].has_p)
				continue;
			char size[24] = "-", end[24] = "-";
			if (v[i].has_file)
				snprintf(size, sizeof(size), "%llu", (unsigned long long)v[i].size);
			if (v[i].has_p)
				snprintf(end, sizeof(end), "%llu", (unsigned long long)v[i].end);
			else if (v[i].has_r)
				snprintf(end, sizeof(end), "r");
			printf("%u %s %s\n", v[i].pack, size, end);
		}
	}
	free(v);
	return rc;
}

static int files(const char *dir, uint64_t count, uint64_t seed)
{
	static const mode_t modes[] = { 0600, 0644, 0755, 0400, 0640, 0700, 0444, 0000 };
	enum { BLOB = 1 << 20, MAXLEN = 9000, DIRS = 17 };
	static uint8_t blob[BLOB];
	struct rng r;
	rng_seed(&r, seed);
	fill_random(&r, blob, BLOB);
	char path[4096];
	for (int k = 0; k < DIRS && (uint64_t)k < count; k++) {
		snprintf(path, sizeof(path), "%s/d%d", dir, k);
		if (mkdir(path, 0755) < 0 && errno != EEXIST)
			return die(path);
	}
	for (uint64_t i = 0; i < count; i++) {
		const size_t n = (size_t)(rng_next(&r) % MAXLEN);
		const size_t off = (size_t)(rng_next(&r) % (BLOB - MAXLEN));
		snprintf(path, sizeof(path), "%s/d%d/f%llu", dir, (int)(i % DIRS), (unsigned long long)i);
		const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (fd < 0 || write_all(fd, blob + off, n) < 0 ||
		    fchmod(fd, modes[rng_next(&r) % (sizeof(modes) / sizeof(modes[0]))]) < 0)
			return die(path);
		if (close(fd) < 0)
			return die(path);
	}
	return 0;
}

/* For same(): nftw's callback has no argument of its own. */
static const char *same_a, *same_b;
static int same_bad;

static int same_file(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)ftw;
	if (type == FTW_DNR || type == FTW_NS) {   /* files it could not see: not "the same" */
		fprintf(stderr, "store_tool: cannot read %s\n", path);
		same_bad = 1;
		return 1;
	}
	if (type != FTW_F || !S_ISREG(st->st_mode))
		return 0;
	static uint8_t x[1 << 20], y[1 << 20];
	char other[8192];
	snprintf(other, sizeof(other), "%s%s", same_b, path + strlen(same_a));
	const int fa = open(path, O_RDONLY | O_CLOEXEC), fb = open(other, O_RDONLY | O_CLOEXEC);
	int differ = fa < 0 || fb < 0;
	while (!differ) {
		const ssize_t n = read(fa, x, sizeof(x));
		if (n < 0) {
			differ = 1;
			break;
		}
		ssize_t got = 0;
		while (got < n) {
			const ssize_t m = read(fb, y + got, (size_t)(n - got));
			if (m <= 0)
				break;
			got += m;
		}
		if (got != n || memcmp(x, y, (size_t)n))
			differ = 1;
		else if (n == 0)
			differ = read(fb, y, 1) != 0;   /* B is longer */
		if (n == 0)
			break;
	}
	if (fa >= 0)
		close(fa);
	if (fb >= 0)
		close(fb);
	if (differ) {
		fprintf(stderr, "store_tool: %s and %s differ\n", path, other);
		same_bad = 1;
		return 1;   /* the first is enough */
	}
	return 0;
}

static int same(const char *a, const char *b)
{
	same_a = a;
	same_b = b;
	if (nftw(a, same_file, 32, FTW_PHYS) < 0 && !same_bad)
		return die(a);
	return same_bad;
}

int main(int argc, char **argv)
{
	uint64_t a, b;
	const char *cmd = argc > 1 ? argv[1] : "";
	if ((!strcmp(cmd, "random") || !strcmp(cmd, "memory")) && argc == 5 &&
	    !parse_size(argv[3], &a) && !parse_size(argv[4], &b))
		return gen(argv[2], a, b, !strcmp(cmd, "memory"));
	if (!strcmp(cmd, "scatter") && argc == 5 && !parse_size(argv[4], &b))
		return scatter(argv[2], atof(argv[3]), b);
	if (!strcmp(cmd, "insert") && argc == 6 && !parse_size(argv[4], &a) && !parse_size(argv[5], &b))
		return insert(argv[2], argv[3], a, b);
	if (!strcmp(cmd, "flip") && argc == 4 && !parse_size(argv[3], &a))
		return flip(argv[2], a);
	if (!strcmp(cmd, "forge") && argc == 4 && !parse_size(argv[3], &a))
		return forge(argv[2], a);
	if (!strcmp(cmd, "records") && argc == 3)
		return records(argv[2]);
	if (!strcmp(cmd, "format") && argc == 3)
		return format_const(argv[2]);
	if (!strcmp(cmd, "damage-manifest") && argc == 4)
		return damage_index(argv[2], 'm', argv[3], 0);
	if (!strcmp(cmd, "damage-piece") && argc == 4 && (!strcmp(argv[3], "flip") || !strcmp(argv[3], "drop")))
		return damage_index(argv[2], 'l', "", !strcmp(argv[3], "drop"));
	if (!strcmp(cmd, "drop-key") && argc == 5 && strlen(argv[3]) == 1)
		return damage_index(argv[2], argv[3][0], argv[4], 1);
	if (!strcmp(cmd, "ends") && argc == 3)
		return ends(argv[2]);
	if (!strcmp(cmd, "files") && argc == 5 && !parse_size(argv[3], &a) && !parse_size(argv[4], &b))
		return files(argv[2], a, b);
	if (!strcmp(cmd, "same") && argc == 4)
		return same(argv[2], argv[3]);
	fprintf(stderr, "usage: store_tool random|memory PATH SIZE SEED | scatter PATH FRACTION SEED |\n"
			"       insert SRC DST COUNT SEED |\n"
			"       flip PATH OFFSET | forge PACK OFFSET | records PACK | damage-manifest STORE IDPREFIX |\n"
			"       damage-piece STORE flip|drop | format NAME | ends STORE | files DIR COUNT SEED |\n"
			"       drop-key STORE TYPE IDPREFIX | same A B\n");
	return 2;
}
