/*
 * fuzz_cli_parse.c - the CLI's parsers of sizes (--chunk-size, --file-limit)
 * and durations (--every), and GPU UUIDs (--gpu-map). What they accept
 * must be what common.h promises, with the value it denotes:
 *   size:     digits, optionally one of kKmMgGtT (powers of 1024) and then
 *             optionally B or iB; no more than 2^64 - 1 bytes;
 *   duration: a finite positive number, then ns, us, ms, s, m, h, d, w or
 *             nothing (seconds), from CLI_DURATION_MIN_NS to
 *             CLI_DURATION_MAX_NS; -EINVAL when it is no duration, -ERANGE
 *             when it is one out of that range;
 *   number:   digits alone (no sign, space or hex), their value in range.
 */
#include "cli/common.h"
#include "gpu/gpuckpt.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "fuzz_cli_parse: %s fails on '%s'\n", #c, s); abort(); } } while (0)

/* The size grammar written out again: 1 and the value when s is a size. */
static int size_model(const char *s, uint64_t *out)
{
	uint64_t v = 0;
	const char *p = s;
	if (*p < '0' || *p > '9')
		return 0;
	for (; *p >= '0' && *p <= '9'; p++)
		if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, (uint64_t)(*p - '0'), &v))
			return 0;
	uint64_t mul = 1;
	const char *u = strchr("kKmMgGtT", *p);
	if (*p && u) {
		mul = 1ull << (10 * (1 + (u - "kKmMgGtT") / 2));
		p++;
		if (p[0] == 'i' && p[1] == 'B')
			p += 2;
		else if (*p == 'B')
			p++;
	}
	if (*p || __builtin_mul_overflow(v, mul, out))
		return 0;
	return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);
	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = 0;

	uint64_t v = 0, want = 0;
	int rc = cli_parse_size(s, &v);
	CHECK(rc == 0 || rc == -EINVAL);
	int ok = size_model(s, &want);
	CHECK((rc == 0) == ok);
	CHECK(rc < 0 || v == want);

	uint64_t ns = 0;
	rc = cli_parse_duration(s, &ns);
	CHECK(rc == 0 || rc == -EINVAL || rc == -ERANGE);
	if (rc == 0) {
		CHECK(ns >= CLI_DURATION_MIN_NS && ns <= CLI_DURATION_MAX_NS);
		char *end;
		const double d = strtod(s, &end);
		CHECK(isfinite(d) && d > 0 && strspn(s, "0123456789.eE+-") == (size_t)(end - s));
	}

	/* Counts, pids, milliseconds: digits alone, in range, exact. */
	uint64_t n = 0, m = 0;
	rc = cli_parse_uint(s, 1, 1000, &n);
	CHECK(rc == 0 || rc == -EINVAL);
	const size_t len = strlen(s);   /* the parser sees the string up to a NUL */
	ok = len && strspn(s, "0123456789") == len;
	for (size_t i = 0; ok && i < len; i++)
		ok = !__builtin_mul_overflow(m, 10, &m) && !__builtin_add_overflow(m, (uint64_t)(s[i] - '0'), &m);
	CHECK((rc == 0) == (ok && m >= 1 && m <= 1000));
	CHECK(rc < 0 || n == m);

	CUuuid u;
	rc = gpuckpt_parse_uuid(s, &u);
	CHECK(rc == 0 || rc == -EINVAL);
	free(s);
	return 0;
}
