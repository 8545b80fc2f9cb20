/*
 * index_batch.c - what RocksDB takes to put a commit's chunk entries into
 * crest's index, the part that now bounds a first ingest (bench/RESULTS.md:
 * 3.2 s of an 8 GiB first checkpoint's 5.6 s commit and ingest, 2.2 s of it
 * in one rocksdb_write of 2 M entries). N entries shaped as crest's ('c' and
 * a random 32-byte id, a 21-byte location) go into a fresh RocksDB in DIR,
 * with crest's options (no compression, bloom filter), one way per line,
 * each into a database of its own:
 *
 *   sorted     one batch, keys in order, synced: what cas_commit does;
 *   unsorted   the same, keys in random order;
 *   nowal      sorted, no write-ahead log: the memtable insert alone;
 *   parts8     8 batches by first byte, written at once from 8 threads,
 *              unsynced, then an empty synced write (the commit-parts
 *              branch's step 3a);
 *   bigbuf     sorted, with a 1 GiB write buffer (one memtable for all);
 *   sst8       8 table files by first byte, built at once by 8 threads
 *              (rocksdb_sstfilewriter), then ingested in one call, moved
 *              in, then an empty synced write;
 *   sst8full   sst8 with half the ids, into a database that already holds
 *              the other half (written and flushed before the clock
 *              starts), as a later big commit meets it;
 *   sortedfull sorted, the same way.
 *
 *   index_batch DIR N [WAYS]   (WAYS: the ways to run, space-separated;
 *                               all when left out)
 *
 * One line per way: "way entries build_s write_s Mentries/s", and for the
 * sst ways one more before it: "way build S ingest S". The
 * databases are deleted after each. An error is one line and exit 1.
 */
#include <pthread.h>
#include <rocksdb/c.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KEY 33
#define VAL 21
#define PARTS 8

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int key_cmp(const void *a, const void *b)
{
	return memcmp(a, b, KEY);
}

struct part {
	rocksdb_t *db;
	rocksdb_writeoptions_t *wo;
	rocksdb_writebatch_t *b;
	char *err;
};

static void *part_write(void *arg)
{
	struct part *p = arg;
	rocksdb_write(p->db, p->wo, p->b, &p->err);
	return NULL;
}

struct sst {
	const rocksdb_options_t *o;
	const uint8_t (*k)[KEY];
	size_t n;
	char path[4200];
	char *err;
};

static void *sst_build(void *arg)
{
	struct sst *p = arg;
	static const char val[VAL];
	rocksdb_envoptions_t *eo = rocksdb_envoptions_create();
	rocksdb_sstfilewriter_t *w = rocksdb_sstfilewriter_create(eo, p->o);
	rocksdb_sstfilewriter_open(w, p->path, &p->err);
	for (size_t i = 0; i < p->n && !p->err; i++)
		rocksdb_sstfilewriter_put(w, (const char *)p->k[i], KEY, val, VAL, &p->err);
	if (!p->err)
		rocksdb_sstfilewriter_finish(w, &p->err);
	rocksdb_sstfilewriter_destroy(w);
	rocksdb_envoptions_destroy(eo);
	return NULL;
}

/* Whether way is one of the space-separated words of only (NULL: all). */
static bool wanted(const char *only, const char *way)
{
	if (!only)
		return true;
	const size_t l = strlen(way);
	for (const char *p = only; (p = strstr(p, way)); p += l)
		if ((p == only || p[-1] == ' ') && (p[l] == ' ' || p[l] == 0))
			return true;
	return false;
}

static rocksdb_options_t *db_options(void)
{
	rocksdb_options_t *o = rocksdb_options_create();
	rocksdb_block_based_table_options_t *t = rocksdb_block_based_options_create();
	rocksdb_block_based_options_set_filter_policy(t, rocksdb_filterpolicy_create_bloom(10));
	rocksdb_options_set_block_based_table_factory(o, t);
	rocksdb_options_set_compression(o, rocksdb_no_compression);
	rocksdb_block_based_options_destroy(t);
	return o;
}

static rocksdb_t *db_open(const char *path, const char *extra)
{
	rocksdb_options_t *o = rocksdb_options_create();
	rocksdb_block_based_table_options_t *t = rocksdb_block_based_options_create();
	rocksdb_block_based_options_set_filter_policy(t, rocksdb_filterpolicy_create_bloom(10));
	rocksdb_options_set_block_based_table_factory(o, t);
	rocksdb_options_set_compression(o, rocksdb_no_compression);
	rocksdb_options_set_create_if_missing(o, 1);
	rocksdb_options_set_error_if_exists(o, 1);
	char *err = NULL;
	if (extra) {
		rocksdb_options_t *o2 = rocksdb_options_create();
		rocksdb_get_options_from_string(o, extra, o2, &err);
		if (err) {
			fprintf(stderr, "index_batch: options %s: %s\n", extra, err);
			exit(1);
		}
		rocksdb_options_destroy(o);
		o = o2;
	}
	rocksdb_t *db = rocksdb_open(o, path, &err);
	if (err) {
		fprintf(stderr, "index_batch: cannot open %s: %s\n", path, err);
		exit(1);
	}
	rocksdb_options_destroy(o);
	rocksdb_block_based_options_destroy(t);
	return db;
}

static void run(const char *dir, const char *way, const uint8_t (*k)[KEY], size_t n,
		const uint8_t (*pre)[KEY], size_t npre)
{
	char path[4096], cmd[8300];
	snprintf(path, sizeof(path), "%s/index_batch-%s", dir, way);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'.*.sst", path, path);
	if (system(cmd) != 0) {
		fprintf(stderr, "index_batch: cannot clear %s\n", path);
		exit(1);
	}
	const bool parts = !strcmp(way, "parts8");
	const bool sst = !strncmp(way, "sst", 3);
	rocksdb_t *db = db_open(path, !strcmp(way, "bigbuf") ? "write_buffer_size=1073741824" : NULL);
	if (pre) {   /* what an earlier commit left: written and flushed */
		static const char v0[VAL];
		char *e0 = NULL;
		rocksdb_writeoptions_t *w0 = rocksdb_writeoptions_create();
		rocksdb_writebatch_t *b0 = rocksdb_writebatch_create();
		for (size_t i = 0; i < npre; i++)
			rocksdb_writebatch_put(b0, (const char *)pre[i], KEY, v0, VAL);
		rocksdb_write(db, w0, b0, &e0);
		rocksdb_flushoptions_t *fo = rocksdb_flushoptions_create();
		rocksdb_flushoptions_set_wait(fo, 1);
		if (!e0)
			rocksdb_flush(db, fo, &e0);
		if (e0) {
			fprintf(stderr, "index_batch: %s: prefill: %s\n", way, e0);
			exit(1);
		}
		rocksdb_flushoptions_destroy(fo);
		rocksdb_writebatch_destroy(b0);
		rocksdb_writeoptions_destroy(w0);
	}
	rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
	rocksdb_writeoptions_set_sync(wo, 1);
	if (!strcmp(way, "nowal")) {
		rocksdb_writeoptions_set_sync(wo, 0);
		rocksdb_writeoptions_disable_WAL(wo, 1);
	}
	static const char val[VAL];
	char *err = NULL;
	const double t0 = now();
	struct part p[PARTS];
	rocksdb_writebatch_t *b = rocksdb_writebatch_create();
	if (sst) {
		rocksdb_options_t *o = db_options();
		struct sst sp[PARTS];
		pthread_t th[PARTS];
		size_t lo = 0;
		for (int i = 0; i < PARTS; i++) {
			size_t hi = lo;
			while (hi < n && k[hi][1] * PARTS / 256 == i)
				hi++;
			sp[i] = (struct sst){ .o = o, .k = k + lo, .n = hi - lo };
			snprintf(sp[i].path, sizeof(sp[i].path), "%s.%d.sst", path, i);
			lo = hi;
			if (pthread_create(&th[i], NULL, sst_build, &sp[i]) != 0) {
				fprintf(stderr, "index_batch: cannot start a thread\n");
				exit(1);
			}
		}
		const char *files[PARTS];
		for (int i = 0; i < PARTS; i++) {
			pthread_join(th[i], NULL);
			if (sp[i].err) {
				fprintf(stderr, "index_batch: %s: %s\n", sp[i].path, sp[i].err);
				exit(1);
			}
			files[i] = sp[i].path;
		}
		const double tb = now();
		rocksdb_ingestexternalfileoptions_t *io = rocksdb_ingestexternalfileoptions_create();
		rocksdb_ingestexternalfileoptions_set_move_files(io, 1);
		rocksdb_ingest_external_file(db, files, PARTS, io, &err);
		if (err) {
			fprintf(stderr, "index_batch: %s: ingest: %s\n", way, err);
			exit(1);
		}
		rocksdb_ingestexternalfileoptions_destroy(io);
		rocksdb_options_destroy(o);
		printf("%s build %.3f ingest %.3f\n", way, tb - t0, now() - tb);
	} else if (parts) {
		rocksdb_writeoptions_t *nosync = rocksdb_writeoptions_create();
		for (int i = 0; i < PARTS; i++)
			p[i] = (struct part){ .db = db, .wo = nosync, .b = rocksdb_writebatch_create() };
		for (size_t i = 0; i < n; i++)   /* keys are sorted: first byte ranges */
			rocksdb_writebatch_put(p[k[i][1] * PARTS / 256].b, (const char *)k[i], KEY, val, VAL);
	} else {
		for (size_t i = 0; i < n; i++)
			rocksdb_writebatch_put(b, (const char *)k[i], KEY, val, VAL);
	}
	const double t1 = now();
	if (parts) {
		pthread_t th[PARTS];
		for (int i = 0; i < PARTS; i++)
			if (pthread_create(&th[i], NULL, part_write, &p[i]) != 0) {
				fprintf(stderr, "index_batch: cannot start a thread\n");
				exit(1);
			}
		for (int i = 0; i < PARTS; i++) {
			pthread_join(th[i], NULL);
			if (p[i].err) {
				fprintf(stderr, "index_batch: %s: %s\n", way, p[i].err);
				exit(1);
			}
			rocksdb_writebatch_destroy(p[i].b);
		}
	}
	rocksdb_write(db, wo, b, &err);   /* parts8: empty, synced */
	const double t2 = now();
	if (err) {
		fprintf(stderr, "index_batch: %s: %s\n", way, err);
		exit(1);
	}
	printf("%s %zu %.3f %.3f %.2f\n", way, n, t1 - t0, t2 - t1, (double)n / (t2 - t1) / 1e6);
	fflush(stdout);
	rocksdb_writebatch_destroy(b);
	rocksdb_writeoptions_destroy(wo);
	rocksdb_close(db);
	if (system(cmd) != 0)
		fprintf(stderr, "index_batch: cannot remove %s\n", path);
}

int main(int argc, char **argv)
{
	if (argc < 3 || argc > 4 || atoll(argv[2]) <= 0) {
		fprintf(stderr, "usage: index_batch DIR ENTRIES [WAYS]\n");
		return 2;
	}
	const size_t n = (size_t)atoll(argv[2]);
	uint8_t (*k)[KEY] = malloc(n * KEY), (*u)[KEY] = malloc(n * KEY);
	if (!k || !u) {
		fprintf(stderr, "index_batch: no memory for %zu entries\n", n);
		return 1;
	}
	uint64_t x = 88172645463325252ull;   /* xorshift64: the same ids every run */
	for (size_t i = 0; i < n; i++) {
		k[i][0] = 'c';
		for (int j = 1; j < KEY; j++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			k[i][j] = (uint8_t)x;
		}
	}
	memcpy(u, k, n * KEY);
	qsort(k, n, KEY, key_cmp);
	const char *only = argc > 3 ? argv[3] : NULL;
	static const char *const ways[] = { "sorted", "unsorted", "nowal", "parts8", "bigbuf", "sst8" };
	for (size_t i = 0; i < sizeof(ways) / sizeof(ways[0]); i++)
		if (wanted(only, ways[i]))
			run(argv[1], ways[i], (const uint8_t (*)[KEY])(strcmp(ways[i], "unsorted") ? k : u), n, NULL, 0);
	if (wanted(only, "sst8full") || wanted(only, "sortedfull")) {
		/* half the ids already in, the other half committed */
		const size_t h = n / 2;
		uint8_t (*a)[KEY] = malloc(h * KEY), (*c)[KEY] = malloc((n - h) * KEY);
		if (!a || !c) {
			fprintf(stderr, "index_batch: no memory\n");
			return 1;
		}
		size_t na = 0, nc = 0;
		for (size_t i = 0; i < n; i++)   /* alternate: both halves span every range */
			memcpy(i % 2 ? c[nc++] : a[na++], k[i], KEY);
		if (wanted(only, "sst8full"))
			run(argv[1], "sst8full", (const uint8_t (*)[KEY])c, nc, (const uint8_t (*)[KEY])a, na);
		if (wanted(only, "sortedfull"))
			run(argv[1], "sortedfull", (const uint8_t (*)[KEY])c, nc, (const uint8_t (*)[KEY])a, na);
		free(a);
		free(c);
	}
	free(k);
	free(u);
	return 0;
}
