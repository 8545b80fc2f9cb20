/*
 * test_parse.c - util/parse.h's parse_duration, the one parser of every
 * duration crest takes (issue 32): exact values in nanoseconds for each
 * unit and for fractions, the bounds inclusive, and -EINVAL or -ERANGE
 * for what is not a duration or lies outside them, never a value that
 * wrapped (2^32 ms, 2^64 of anything) or rounded to 0.
 */
#include "util/parse.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#define DAY PARSE_NS_DAY
#define MAXD (366 * PARSE_NS_DAY)

static int failures;

static void want(const char *s, uint64_t bare, uint64_t lo, uint64_t hi, int rc, uint64_t ns)
{
	uint64_t got = 12345;
	const int r = parse_duration(s, bare, lo, hi, &got);
	if (r != rc || (rc == 0 && got != ns)) {
		fprintf(stderr, "FAIL: parse_duration(\"%s\") = %d, %" PRIu64 "; want %d, %" PRIu64 "\n", s, r, got,
			rc, ns);
		failures++;
	}
}

int main(void)
{
	const uint64_t S = PARSE_NS_S, MS = PARSE_NS_MS;
	want("30s", S, MS, MAXD, 0, 30 * S);
	want("30", S, MS, MAXD, 0, 30 * S);
	want("30", MS, MS, MAXD, 0, 30 * MS);
	want("250ms", S, MS, MAXD, 0, 250 * MS);
	want("1.5m", S, MS, MAXD, 0, 90 * S);
	want("2h", S, MS, MAXD, 0, 7200 * S);
	want("7d", S, MS, MAXD, 0, 7 * DAY);
	want("366d", S, MS, MAXD, 0, MAXD);
	want("8784h", S, MS, MAXD, 0, MAXD);
	want(".5s", S, MS, MAXD, 0, S / 2);
	want("5.s", S, MS, MAXD, 0, 5 * S);
	want("0.001s", S, MS, MAXD, 0, MS);
	want("1000000us", S, MS, MAXD, 0, S);
	want("1000000ns", S, MS, MAXD, 0, MS);
	want("0.1234567891234567891234s", S, 0, MAXD, 0, 123456789);
	/* The values the int of milliseconds bent (issue 32). */
	want("4294967296ms", S, MS, MAXD, 0, 4294967296ull * MS);
	want("4294968s", S, MS, MAXD, 0, 4294968ull * S);
	want("2147483648ms", S, MS, MAXD, 0, 2147483648ull * MS);
	/* Out of range: -ERANGE, whatever the size. */
	want("366.000001d", S, MS, MAXD, -ERANGE, 0);
	want("367d", S, MS, MAXD, -ERANGE, 0);
	want("4294967296", S, MS, MAXD, -ERANGE, 0);
	want("0", S, MS, MAXD, -ERANGE, 0);
	want("0.0009s", S, MS, MAXD, -ERANGE, 0);
	want("18446744073709551615d", S, MS, MAXD, -ERANGE, 0);
	want("18446744073709551616", S, MS, MAXD, -ERANGE, 0);
	want("99999999999999999999999999ms", S, MS, MAXD, -ERANGE, 0);
	/* (2^58 + 1000) ms is 2^64 ns + 1 s: in 64 bits it would wrap to 1 s. */
	want("288230376151712744ms", S, MS, MAXD, -ERANGE, 0);
	want("0", S, 0, MAXD, 0, 0);
	want("2h", MS, MS, 3600 * S, -ERANGE, 0);
	want("1h", MS, MS, 3600 * S, 0, 3600 * S);
	/* Not durations. */
	const char *bad[] = { "", ".", "s", "-1s", "+1s", " 1s", "1s ", "1 s", "1e3", "1e3s", "inf", "nan", "0x10",
			      "1.2.3s", "1sec", "1S", "1ss", "5x", "1m30s", "1,5s", "١s" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		want(bad[i], S, 0, MAXD, -EINVAL, 0);
	if (failures) {
		fprintf(stderr, "FAIL: %d case(s)\n", failures);
		return 1;
	}
	printf("ok: parse_duration, every case\n");
	return 0;
}
