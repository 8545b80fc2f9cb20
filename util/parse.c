/* parse.c - see parse.h. */
#include "util/parse.h"

#include <errno.h>
#include <string.h>

int parse_duration(const char *s, uint64_t bare_unit_ns, uint64_t min_ns, uint64_t max_ns, uint64_t *ns)
{
	const char *p = s;
	/* The whole part must fit 64 bits; times the largest unit (a day,
	 * < 2^47) it stays below 2^111, so the product is exact in an
	 * unsigned __int128 and compared with the bounds before narrowing. */
	uint64_t whole = 0, frac = 0, frac_den = 1;
	int digits = 0;
	for (; *p >= '0' && *p <= '9'; p++, digits++) {
		const unsigned d = (unsigned)(*p - '0');
		if (whole > (UINT64_MAX - d) / 10)
			return -ERANGE;
		whole = whole * 10 + d;
	}
	if (*p == '.') {
		p++;
		for (; *p >= '0' && *p <= '9'; p++, digits++) {
			/* Past 18 digits the fraction is below any unit's
			 * nanosecond: read, not kept. */
			if (frac_den < 1000000000000000000ull) {
				frac = frac * 10 + (uint64_t)(*p - '0');
				frac_den *= 10;
			}
		}
	}
	if (!digits)
		return -EINVAL;
	uint64_t unit;
	if (!*p)
		unit = bare_unit_ns;
	else if (!strcmp(p, "ns"))
		unit = 1;
	else if (!strcmp(p, "us"))
		unit = 1000;
	else if (!strcmp(p, "ms"))
		unit = PARSE_NS_MS;
	else if (!strcmp(p, "s"))
		unit = PARSE_NS_S;
	else if (!strcmp(p, "m"))
		unit = 60 * PARSE_NS_S;
	else if (!strcmp(p, "h"))
		unit = 3600 * PARSE_NS_S;
	else if (!strcmp(p, "d"))
		unit = PARSE_NS_DAY;
	else if (!strcmp(p, "w"))
		unit = 7 * PARSE_NS_DAY;
	else
		return -EINVAL;
	const unsigned __int128 t = (unsigned __int128)whole * unit + (unsigned __int128)frac * unit / frac_den;
	if (t < min_ns || t > max_ns)
		return -ERANGE;
	*ns = (uint64_t)t;
	return 0;
}
