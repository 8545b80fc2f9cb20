/*
 * pattern.h - the library benches' memory pattern: 64-bit words that
 * neither compress nor dedup (splitmix64 of the word's index), where the
 * words of chunks marked in `changed` (one byte per 4 KiB chunk) follow the
 * pattern from BENCH_CHANGED_OFF on instead, so a rewritten chunk is new
 * data too. Filled and checked with NTHREADS threads. Included by one .c
 * of each bench.
 */
#ifndef CREST_BENCH_PATTERN_H
#define CREST_BENCH_PATTERN_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BENCH_CHUNK_WORDS 512          /* 4 KiB */
#define BENCH_CHANGED_OFF (1ull << 40)
#define BENCH_THREADS 16

static inline uint64_t bench_mix(uint64_t i)
{
	uint64_t z = i + 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

struct bench_part {
	uint64_t *p;
	size_t words;
	uint64_t first;               /* index of p[0] */
	bool check;
	const uint8_t *changed;
	atomic_size_t *bad;
};

static void *bench_part_main(void *arg)
{
	const struct bench_part *t = arg;
	size_t bad = 0;
	for (size_t i = 0; i < t->words; i++) {
		const uint64_t w = t->first + i;
		const uint64_t want =
			bench_mix(w + (t->changed && t->changed[w / BENCH_CHUNK_WORDS] ? BENCH_CHANGED_OFF : 0));
		if (t->check)
			bad += t->p[i] != want;
		else
			t->p[i] = want;
	}
	if (t->check)
		atomic_fetch_add(t->bad, bad);
	return NULL;
}

/* Fills buf (bytes, a multiple of 8 * BENCH_THREADS) with the words from
 * index first on, or (check) counts the words that differ from them. */
static inline size_t bench_pattern_run(uint64_t *buf, size_t bytes, uint64_t first, bool check,
				       const uint8_t *changed)
{
	pthread_t th[BENCH_THREADS];
	struct bench_part parts[BENCH_THREADS];
	atomic_size_t bad = 0;
	const size_t per = bytes / 8 / BENCH_THREADS;
	for (int i = 0; i < BENCH_THREADS; i++) {
		parts[i] = (struct bench_part){ buf + i * per, per, first + i * per, check, changed, &bad };
		pthread_create(&th[i], NULL, bench_part_main, &parts[i]);
	}
	for (int i = 0; i < BENCH_THREADS; i++)
		pthread_join(th[i], NULL);
	return atomic_load(&bad);
}

#endif
