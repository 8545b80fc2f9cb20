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
 *   bigbuf     sorted, with a 1 GiB write buffer (one memtable for all).
 *
 *   index_batch DIR N
 *
 * One line per way: "way entries build_s write_s Mentries/s". The
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

static void run(const char *dir, const char *way, const uint8_t (*k)[KEY], size_t n)
{
	char path[4096], cmd[4200];
	snprintf(path, sizeof(path), "%s/index_batch-%s", dir, way);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
	if (system(cmd) != 0) {
		fprintf(stderr, "index_batch: cannot clear %s\n", path);
		exit(1);
	}
	const bool parts = !strcmp(way, "parts8");
	rocksdb_t *db = db_open(path, !strcmp(way, "bigbuf") ? "write_buffer_size=1073741824" : NULL);
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
	if (parts) {
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
	if (argc != 3 || atoll(argv[2]) <= 0) {
		fprintf(stderr, "usage: index_batch DIR ENTRIES\n");
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
	run(argv[1], "sorted", (const uint8_t (*)[KEY])k, n);
	run(argv[1], "unsorted", (const uint8_t (*)[KEY])u, n);
	run(argv[1], "nowal", (const uint8_t (*)[KEY])k, n);
	run(argv[1], "parts8", (const uint8_t (*)[KEY])k, n);
	run(argv[1], "bigbuf", (const uint8_t (*)[KEY])k, n);
	free(k);
	free(u);
	return 0;
}
