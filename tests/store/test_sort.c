/*
 * test_sort.c - cas_entries_sort against qsort, on random ids and on ids
 * made to share long prefixes (all in one bucket of its counting pass),
 * at sizes on both sides of where it stops using qsort alone. The seed is
 * printed; CREST_TEST_SEED replays it. A wrong order would not fail any
 * store test (RocksDB takes keys in any order, only slower), so it is
 * checked here.
 */
#include "cas/cas_int.h"
#include "tests/check.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t rng;   /* check_rnd's state, from the printed seed */

/* By id, then pack (unique here): a total order, padding never read. */
static int cmp(const void *a, const void *b)
{
	const struct cas_index_entry *x = a, *y = b;
	const int c = memcmp(x->sha, y->sha, 32);
	return c ? c : (x->loc.pack > y->loc.pack) - (x->loc.pack < y->loc.pack);
}

static bool same(const struct cas_index_entry *x, const struct cas_index_entry *y, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (memcmp(x[i].sha, y[i].sha, 32) || x[i].loc.pack != y[i].loc.pack || x[i].loc.off != y[i].loc.off)
			return false;
	return true;
}

int main(void)
{
	const char *env = getenv("CREST_TEST_SEED");
	const uint64_t seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL);
	rng = seed | 1;
	printf("seed %llu (CREST_TEST_SEED replays it)\n", (unsigned long long)seed);
	static const size_t sizes[] = { 0, 1, 2, 100, 4095, 4096, 4097, 70000, 300000 };
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		for (int shared = 0; shared <= 3; shared++) {
			const size_t n = sizes[k];
			struct cas_index_entry *e = calloc(n ? n : 1, sizeof(*e)), *want = calloc(n ? n : 1, sizeof(*e));
			if (!e || !want)
				return 1;
			for (size_t i = 0; i < n; i++) {
				for (int j = 0; j < 32; j++)
					e[i].sha[j] = (uint8_t)check_rnd(&rng);
				/* shared: 0 random; 1 two-byte prefix; 2 thirty-byte
				 * prefix; 3 a few distinct ids repeated. */
				if (shared == 1)
					memset(e[i].sha, 0xab, 2);
				else if (shared == 2)
					memset(e[i].sha, 0x5c, 30);
				else if (shared == 3)
					memset(e[i].sha, (int)(check_rnd(&rng) % 3), 32);
				e[i].loc.pack = (uint32_t)i;
				e[i].loc.off = check_rnd(&rng);
			}
			memcpy(want, e, n * sizeof(*e));
			/* The reference: by id, then the rest (which ties may order
			 * any way: compare as multisets below). */
			qsort(want, n, sizeof(*want), cmp);
			cas_entries_sort(e, n);
			for (size_t i = 1; i < n; i++)
				if (memcmp(e[i - 1].sha, e[i].sha, 32) > 0) {
					printf("FAIL: n %zu, ids %d: entry %zu is out of order\n", n, shared, i);
					return 1;
				}
			qsort(e, n, sizeof(*e), cmp);
			if (!same(e, want, n)) {
				printf("FAIL: n %zu, ids %d: entries lost or changed\n", n, shared);
				return 1;
			}
			free(e);
			free(want);
		}
	}
	printf("ok: cas_entries_sort agrees with qsort\n");
	return 0;
}
