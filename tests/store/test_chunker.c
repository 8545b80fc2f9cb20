/*
 * test_chunker.c - dedup_cut_holds (dedup/chunker.h) against dedup_next
 * itself. For random bytes of random kinds (random, zeros, short patterns
 * repeated, copies of earlier bytes), random cdc parameters and random
 * start points: a first dedup_next with some length gives a cut c; then
 * for lengths from c up (c itself, one past, min, normal's and max's edges,
 * random, all that is left) dedup_cut_holds must say exactly whether
 * dedup_next with that length cuts at c too. That is the promise the
 * engine relies on when it takes a parent's cut without a scan: a wrong
 * "yes" makes a snapshot's cuts differ from the same bytes' own (chunker.h
 * promises they never do), a wrong "no" only costs a scan. Both answers
 * must occur, or the test tested nothing. Fixed chunking: always no.
 *
 *   test_chunker [SEED]     (else $CREST_TEST_SEED, else the clock; printed)
 */
#include "dedup/chunker.h"
#include "tests/check.h"

#include <inttypes.h>

int main(int argc, char **argv)
{
	const uint64_t seed = check_seed(argc, argv, 1);
	printf("chunker: seed %" PRIu64 " (replay: test_chunker %" PRIu64 ")\n", seed, seed);
	uint64_t st = check_state(seed);
	enum { MAX = 1 << 20 };
	uint8_t *buf = malloc(MAX);
	long yes = 0, no = 0, at_end = 0;
	for (int round = 0; round < 200 && failures < 10; round++) {
		struct dedup_params p;
		const uint32_t avg = 1024u << (check_rnd(&st) % 5);   /* 1-16 KiB */
		OK(dedup_params_init(&p, DEDUP_CDC, avg));
		const size_t size = 1 + check_rnd(&st) % MAX;
		for (size_t at = 0; at < size;) {
			const size_t n = 1 + check_rnd(&st) % (size - at < 32768 ? size - at : 32768);
			check_fill_kind(buf, at, n, &st);
			at += n;
		}
		for (int k = 0; k < 200; k++) {
			const size_t s = check_rnd(&st) % size, room = size - s;
			/* Short first lengths too: a cut forced by the end of what
			 * was left (a segment's end) below avg is where mask_s and
			 * mask_l part. */
			const uint64_t r = check_rnd(&st);
			const size_t edge[] = { p.min, p.min + 1, avg - 1, avg, avg + 1, p.max - 1, p.max, p.max + 1 };
			size_t len1 = 1 + (r % 4 == 0 ? r % room : (r >> 2) % (room < 2 * avg ? room : 2 * avg));
			if (r % 4 == 1)
				len1 = edge[(r >> 8) % 8];
			if (len1 > room)
				len1 = room;
			const size_t c = dedup_next(&p, buf + s, len1);
			const size_t normal = p.avg, lens[] = { c, c + 1, p.min, p.min + 1, normal - 1, normal, normal + 1,
						 p.max - 1, p.max, p.max + 1, c + check_rnd(&st) % (room - c + 1), room };
			for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
				const size_t len2 = lens[i];
				if (len2 < c || len2 > room)
					continue;
				const bool want = dedup_next(&p, buf + s, len2) == c;
				const bool got = dedup_cut_holds(&p, buf + s, len2, c);
				CHECK(got == want, "avg %u, at %zu: first cut %zu (length %zu); with length %zu dedup_next %s "
				      "there but dedup_cut_holds says %s (seed %" PRIu64 ")", avg, s, c, len1, len2,
				      want ? "cuts" : "does not cut", got ? "yes" : "no", seed);
				yes += got;
				no += !got;
				at_end += got && c == (len2 < p.max ? len2 : p.max);
			}
		}
	}
	struct dedup_params f;
	OK(dedup_params_init(&f, DEDUP_FIXED, 4096));
	check_fill64(buf, 8192, &st);
	CHECK(!dedup_cut_holds(&f, buf, 8192, dedup_next(&f, buf, 8192)), "fixed chunking: dedup_cut_holds said yes");
	printf("chunker: %ld yes (%ld of them the end of the scan), %ld no\n", yes, at_end, no);
	CHECK(yes > at_end && no > 0, "one answer never occurred: the test tested nothing");
	free(buf);
	if (failures)
		fprintf(stderr, "%d check(s) failed\n", failures);
	return failures ? 1 : 0;
}
