/*
 * check.h - the assertions of crest's C tests. CHECK counts a failure and
 * goes on (the test exits non-zero at its end when failures > 0); OK stops
 * the test at the first error of a call that must succeed; EXPECT_ERR
 * wants one exact error code and a message naming something; CU is OK for
 * CUDA driver calls made through gpu/cudrv.h (the test's `d`).
 * first_diff says where two buffers part, for failure messages; check_rnd
 * check_fill and check_fill64 make reproducible data from a seed.
 * Included once per test program.
 */
#ifndef CREST_TESTS_CHECK_H
#define CREST_TESTS_CHECK_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/err.h"

static int failures __attribute__((unused));   /* CHECK counts here */

/* xorshift64*: the tests' reproducible generator, from a printed seed
 * (*state must not be 0). */
static inline uint64_t check_rnd(uint64_t *state)
{
	uint64_t x = *state;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*state = x;
	return x * 0x2545f4914f6cdd1dull;
}

/* A randomized test's seed: argv[i] when given, else $CREST_TEST_SEED, else
 * the clock and the pid. The test prints it, so that a failure replays. */
static inline uint64_t check_seed(int argc, char **argv, int i)
{
	const char *env = getenv("CREST_TEST_SEED");
	return argc > i ? strtoull(argv[i], NULL, 0)
	       : env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
}

/* check_rnd's state from a seed (never 0). */
static inline uint64_t check_state(uint64_t seed)
{
	const uint64_t st = seed * 0x9e3779b97f4a7c15ull + 1;
	return st ? st : 1;
}

/* n bytes that do not compress or dedup, the same for the same seed. */
static inline void check_fill(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(check_rnd(&x) >> 56);
}

/* The same kind of bytes 8 a step (for MiBs), continuing the generator at
 * *st. Not check_fill's sequence: its seeds replay only with this. */
static inline void check_fill64(uint8_t *p, size_t n, uint64_t *st)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		const uint64_t x = check_rnd(st);
		memcpy(p + i, &x, 8);
	}
	for (; i < n; i++)
		p[i] = (uint8_t)(check_rnd(st) >> 56);
}

/* n bytes at p + at of a kind chosen at random: zeros, a short pattern
 * repeated (no cdc cut falls in it: the chunk runs to its maximum), a copy
 * of bytes before at (a repeat of earlier chunks), or random bytes. */
static inline void check_fill_kind(uint8_t *p, size_t at, size_t n, uint64_t *st)
{
	switch (check_rnd(st) % 5) {
	case 0:
		memset(p + at, 0, n);
		break;
	case 1: {
		const uint64_t period = 1 + check_rnd(st) % 64, v = check_rnd(st);
		for (size_t i = 0; i < n; i++)
			p[at + i] = (uint8_t)(v >> (8 * (i % period % 8)));
		break;
	}
	case 2:
		if (at >= n) {
			memmove(p + at, p + check_rnd(st) % (at - n + 1), n);
			break;
		}
		/* fall through */
	default:
		check_fill64(p + at, n, st);
	}
}

/* The first index where a and b differ, or n when they do not. */
static inline size_t first_diff(const uint8_t *a, const uint8_t *b, size_t n)
{
	size_t i = 0;
	while (i < n && a[i] == b[i])
		i++;
	return i;
}

#define CHECK(cond, ...)                                                       \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);   \
			fprintf(stderr, __VA_ARGS__);                          \
			fprintf(stderr, "\n");                                 \
			failures++;                                            \
		}                                                              \
	} while (0)

#define OK(call)                                                                              \
	do {                                                                                  \
		int rc_ = (call);                                                             \
		if (rc_ < 0) {                                                                \
			fprintf(stderr, "FAIL %s:%d: %s = %d: %s\n", __FILE__, __LINE__, #call, rc_, \
				crest_errmsg());                                              \
			exit(1);                                                              \
		}                                                                             \
	} while (0)

#define EXPECT_ERR(call, err, needle)                                                          \
	do {                                                                                   \
		int rc_ = (call);                                                              \
		const char *m_ = crest_errmsg();                                               \
		printf("  %-58s -> %d: %s\n", #call, rc_, m_);                                 \
		CHECK(rc_ == (err), "%s returned %d, expected %d (%s)", #call, rc_, err, m_);  \
		CHECK(strstr(m_, needle), "message of %s lacks \"%s\": %s", #call, needle, m_); \
	} while (0)

#define CU(call)                                                                          \
	do {                                                                              \
		if (cudrv_check(d, (call), #call) < 0) {                                  \
			fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, crest_errmsg()); \
			exit(1);                                                          \
		}                                                                         \
	} while (0)

#endif
