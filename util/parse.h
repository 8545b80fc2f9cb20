/* parse.h - the one parser of durations for every option and environment
 * variable that takes one (crest run/checkpoint --every, gc --keep-within,
 * --lock-timeout, CREST_LOCK_TIMEOUT, CREST_STORE_IDLE_MS): exact integer
 * arithmetic and 64-bit nanoseconds throughout, so that no value the
 * parser accepts can wrap, round to zero or turn negative on its way to
 * the clock. A caller that hands the value to an API of a narrower type
 * chooses a max_ns that fits it. */
#ifndef CREST_UTIL_PARSE_H
#define CREST_UTIL_PARSE_H

#include <stdint.h>

#define PARSE_NS_MS 1000000ull
#define PARSE_NS_S  1000000000ull
#define PARSE_NS_DAY (86400ull * PARSE_NS_S)

/* "250ms", "30s", "1.5m", "2h", "7d", "2w" (units ns, us, ms, s, m, h, d,
 * w: 7 days), or a bare number in bare_unit_ns
 * (seconds for most, milliseconds where the option always took those):
 * decimal digits with at most one '.', then the unit, nothing else (no
 * sign, space, exponent, "inf" or "nan"). Digits below a nanosecond are
 * dropped. 0 and *ns on success; -EINVAL when s is not a duration; -ERANGE
 * when it is one outside [min_ns, max_ns]. Sets no error message: the
 * caller's names the option. */
int parse_duration(const char *s, uint64_t bare_unit_ns, uint64_t min_ns, uint64_t max_ns, uint64_t *ns);

#endif
