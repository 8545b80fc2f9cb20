/*
 * seed_dump.c - writes the values of a store's index to files, for seeds.sh:
 *   fuzz_seed_dump INDEXDIR OUTDIR
 * makes OUTDIR/<type>-<first 16 hex digits of the key> for each value,
 * type being the key's first byte ('c' chunk location, 'm' manifest,
 * 'i' summary, 'l' piece, 't' tag). Opens the index read-only.
 */
#include <rocksdb/c.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: fuzz_seed_dump INDEXDIR OUTDIR\n");
		return 2;
	}
	char *err = NULL;
	rocksdb_options_t *o = rocksdb_options_create();
	rocksdb_t *db = rocksdb_open_for_read_only(o, argv[1], 0, &err);
	if (!db) {
		fprintf(stderr, "fuzz_seed_dump: cannot open %s: %s\n", argv[1], err);
		return 1;
	}
	rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
	rocksdb_iterator_t *it = rocksdb_create_iterator(db, ro);
	int n = 0;
	for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
		size_t kl, vl;
		const unsigned char *k = (const unsigned char *)rocksdb_iter_key(it, &kl);
		const char *v = rocksdb_iter_value(it, &vl);
		char path[4096];
		int p = snprintf(path, sizeof(path), "%s/%c-", argv[2], kl ? k[0] : '_');
		for (size_t i = 1; i < kl && i <= 8; i++)
			p += snprintf(path + p, sizeof(path) - (size_t)p, "%02x", k[i]);
		FILE *f = fopen(path, "wb");
		if (!f || fwrite(v, 1, vl, f) != vl || fclose(f)) {
			fprintf(stderr, "fuzz_seed_dump: cannot write %s\n", path);
			return 1;
		}
		n++;
	}
	rocksdb_iter_destroy(it);
	rocksdb_readoptions_destroy(ro);
	rocksdb_close(db);
	rocksdb_options_destroy(o);
	printf("%d values\n", n);
	return 0;
}
