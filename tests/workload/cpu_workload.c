/*
 * cpu_workload: a deterministic sample workload for checkpoint/restore tests.
 *
 * It holds a large anonymous-memory state (--mib, default 512) made of incompressible random
 * pages, compressible pages and zero pages, and mutates about --change-pct percent of it per
 * step (scattered 4 KiB pages picked by a seeded PRNG that lives in this process's memory).
 * After each step it prints "step N checksum HEX" (a 64-bit hash of the whole state) to
 * stdout, flushed, optionally appends the same line to --log FILE (opened once, O_APPEND,
 * kept open), then sleeps --interval-ms. Two runs with the same options print the same
 * lines, so a restored process can be compared line by line with an uninterrupted run.
 *
 * Only libc is used, so it builds anywhere and CRIU sees a plain process.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* MADV_NOHUGEPAGE */
#endif
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define STATE_PAGE 4096u

struct options {
	uint64_t mib;
	double change_pct;
	uint64_t interval_ms;
	uint64_t steps; /* 0 means run forever */
	uint64_t seed;
	const char *log_path;
};

/* xoshiro256**: fast, good quality, and its whole state is four words in our memory, so a
 * checkpoint captures it and a restored process continues the same sequence. */
struct prng {
	uint64_t s[4];
};

static uint64_t rotl64(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t prng_next(struct prng *r)
{
	uint64_t *s = r->s;
	uint64_t result = rotl64(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl64(s[3], 45);
	return result;
}

/* splitmix64 expands the user's seed into a non-degenerate xoshiro state. */
static void prng_seed(struct prng *r, uint64_t seed)
{
	for (int i = 0; i < 4; i++) {
		uint64_t z = (seed += 0x9e3779b97f4a7c15ull);

		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		r->s[i] = z ^ (z >> 31);
	}
}

/* Uniform in [0, n) for n > 0; the tiny modulo bias does not matter here. */
static uint64_t prng_below(struct prng *r, uint64_t n)
{
	return prng_next(r) % n;
}

/* Page contents. The mix matters for the store: random pages defeat compression, pattern
 * pages compress well and often repeat across pages (deduplication), zero pages are common
 * in real heaps. */
enum page_kind { PAGE_RANDOM, PAGE_SMALL_INTS, PAGE_PATTERN, PAGE_ZERO };

static void fill_random(uint8_t *page, struct prng *r)
{
	uint64_t *w = (uint64_t *)page;

	for (size_t i = 0; i < STATE_PAGE / sizeof(*w); i++)
		w[i] = prng_next(r);
}

/* Counters and small values, like an array of indices or histogram bins. */
static void fill_small_ints(uint8_t *page, struct prng *r)
{
	uint32_t *w = (uint32_t *)page;
	uint32_t base = (uint32_t)prng_below(r, 1000);
	uint32_t stride = (uint32_t)prng_below(r, 4);

	for (size_t i = 0; i < STATE_PAGE / sizeof(*w); i++)
		w[i] = base + (uint32_t)i * stride + (uint32_t)(prng_next(r) & 3);
}

/* A short record repeated over the page, like a table of identical structs or text. Only
 * 16 distinct patterns exist, so many pages are byte-identical. */
static void fill_pattern(uint8_t *page, struct prng *r)
{
	static const char *const words[] = { "crest ", "checkpoint ", "restore ", "page ",
					     "state ", "delta ", "chunk ", "store " };
	uint64_t variant = prng_below(r, 16);
	char rec[64];
	int n = snprintf(rec, sizeof(rec), "%s%s#%02" PRIu64 "|", words[variant % 8],
			 words[(variant / 2) % 8], variant);
	size_t len = (size_t)n;

	for (size_t off = 0; off < STATE_PAGE; off += len) {
		size_t k = STATE_PAGE - off < len ? STATE_PAGE - off : len;

		memcpy(page + off, rec, k);
	}
}

static void fill_page(uint8_t *page, enum page_kind kind, struct prng *r)
{
	switch (kind) {
	case PAGE_RANDOM:
		fill_random(page, r);
		break;
	case PAGE_SMALL_INTS:
		fill_small_ints(page, r);
		break;
	case PAGE_PATTERN:
		fill_pattern(page, r);
		break;
	case PAGE_ZERO:
		/* Written explicitly: the page is then present (resident) and all zero. */
		memset(page, 0, STATE_PAGE);
		break;
	}
}

/* Initial layout: 35% random, 20% small ints, 20% pattern, 15% written zeros, and 10% never
 * touched (not even faulted in: CRIU skips such holes, a real heap has them too). */
static void init_state(uint8_t *state, size_t npages, struct prng *r)
{
	for (size_t i = 0; i < npages; i++) {
		uint64_t x = prng_below(r, 100);
		uint8_t *page = state + i * STATE_PAGE;

		if (x < 35)
			fill_page(page, PAGE_RANDOM, r);
		else if (x < 55)
			fill_page(page, PAGE_SMALL_INTS, r);
		else if (x < 75)
			fill_page(page, PAGE_PATTERN, r);
		else if (x < 90)
			fill_page(page, PAGE_ZERO, r);
		/* else: leave untouched */
	}
}

/* One step: rewrite about pct% of the pages, at scattered places, keeping the mix. Some
 * writes only touch part of a page, as real programs do: the page is dirty all the same. */
static void mutate_state(uint8_t *state, size_t npages, size_t nchange, struct prng *r)
{
	for (size_t i = 0; i < nchange; i++) {
		uint8_t *page = state + prng_below(r, npages) * STATE_PAGE;
		uint64_t x = prng_below(r, 100);

		if (x < 40) {
			fill_page(page, PAGE_RANDOM, r);
		} else if (x < 60) {
			fill_page(page, PAGE_SMALL_INTS, r);
		} else if (x < 75) {
			fill_page(page, PAGE_PATTERN, r);
		} else if (x < 85) {
			fill_page(page, PAGE_ZERO, r);
		} else {
			/* Bump one 64-bit word: a tiny change that dirties a whole page. */
			uint64_t *w = (uint64_t *)page + prng_below(r, STATE_PAGE / 8);

			*w += prng_next(r) | 1;
		}
	}
}

/* 64-bit hash of the whole state, xxh64-style: four independent lanes over 32-byte stripes
 * so that hashing 512 MiB each step stays well under the default interval. */
#define P1 0x9e3779b185ebca87ull
#define P2 0xc2b2ae3d27d4eb4full
#define P3 0x165667b19e3779f9ull
#define P4 0x85ebca77c2b2ae63ull

static uint64_t lane_round(uint64_t acc, uint64_t in)
{
	acc += in * P2;
	acc = rotl64(acc, 31);
	return acc * P1;
}

static uint64_t checksum(const uint8_t *buf, size_t len)
{
	const uint64_t *w = (const uint64_t *)buf; /* len is a multiple of 32 */
	uint64_t v1 = P1 + P2, v2 = P2, v3 = 0, v4 = 0 - P1;
	uint64_t h;

	for (size_t i = 0; i + 4 <= len / 8; i += 4) {
		v1 = lane_round(v1, w[i]);
		v2 = lane_round(v2, w[i + 1]);
		v3 = lane_round(v3, w[i + 2]);
		v4 = lane_round(v4, w[i + 3]);
	}
	h = rotl64(v1, 1) + rotl64(v2, 7) + rotl64(v3, 12) + rotl64(v4, 18);
	h = (h ^ lane_round(0, v1)) * P1 + P4;
	h = (h ^ lane_round(0, v2)) * P1 + P4;
	h = (h ^ lane_round(0, v3)) * P1 + P4;
	h = (h ^ lane_round(0, v4)) * P1 + P4;
	h += (uint64_t)len;
	h ^= h >> 33;
	h *= P2;
	h ^= h >> 29;
	h *= P3;
	h ^= h >> 32;
	return h;
}

/* Sleeps the full interval even when a signal interrupts it (CRIU's freeze and a restore
 * interrupt sleeps), so the step cadence does not depend on being checkpointed. */
static void sleep_ms(uint64_t ms)
{
	struct timespec ts = { .tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L };

	while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) == EINTR)
		;
}

/* Writes all of buf, retrying on short writes and EINTR. Returns 0 or -errno. */
static int write_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, buf, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

static void usage(FILE *f, const char *prog)
{
	fprintf(f,
		"usage: %s [--mib N] [--change-pct P] [--interval-ms MS] [--steps N] [--seed S]\n"
		"          [--log FILE]\n"
		"  --mib N          state size in MiB (default 512)\n"
		"  --change-pct P   percent of the state's pages rewritten per step (default 2)\n"
		"  --interval-ms MS sleep between steps (default 200)\n"
		"  --steps N        stop after N steps and exit 0 (default or 0: run forever)\n"
		"  --seed S         PRNG seed (default 1)\n"
		"  --log FILE       also append each line to FILE (opened once with O_APPEND)\n",
		prog);
}

static int parse_u64(const char *opt, const char *s, uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	if (s == NULL || *s == '\0' || *s == '-') {
		fprintf(stderr, "cpu_workload: %s: missing or negative value\n", opt);
		return -EINVAL;
	}
	v = strtoull(s, &end, 10);
	if (errno != 0 || *end != '\0' || v > max) {
		fprintf(stderr, "cpu_workload: %s: invalid value '%s' (an integer 0..%" PRIu64 ")\n",
			opt, s, max);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

static int parse_pct(const char *opt, const char *s, double *out)
{
	char *end;
	double v;

	if (s == NULL || *s == '\0') {
		fprintf(stderr, "cpu_workload: %s: missing value\n", opt);
		return -EINVAL;
	}
	errno = 0;
	v = strtod(s, &end);
	if (errno != 0 || *end != '\0' || !(v >= 0.0 && v <= 100.0)) {
		fprintf(stderr, "cpu_workload: %s: invalid value '%s' (a number 0..100)\n", opt, s);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

static int parse_args(int argc, char **argv, struct options *o)
{
	int rc = 0;

	for (int i = 1; i < argc && rc == 0; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			usage(stdout, argv[0]);
			return 1;
		} else if (strcmp(a, "--mib") == 0) {
			rc = parse_u64(a, v, 1u << 20, &o->mib);
			if (rc == 0 && o->mib == 0) {
				fprintf(stderr, "cpu_workload: --mib: must be at least 1\n");
				rc = -EINVAL;
			}
			i++;
		} else if (strcmp(a, "--change-pct") == 0) {
			rc = parse_pct(a, v, &o->change_pct);
			i++;
		} else if (strcmp(a, "--interval-ms") == 0) {
			rc = parse_u64(a, v, 24ull * 3600 * 1000, &o->interval_ms);
			i++;
		} else if (strcmp(a, "--steps") == 0) {
			rc = parse_u64(a, v, UINT64_MAX, &o->steps);
			i++;
		} else if (strcmp(a, "--seed") == 0) {
			rc = parse_u64(a, v, UINT64_MAX, &o->seed);
			i++;
		} else if (strcmp(a, "--log") == 0) {
			if (v == NULL || *v == '\0') {
				fprintf(stderr, "cpu_workload: --log: missing file name\n");
				rc = -EINVAL;
			}
			o->log_path = v;
			i++;
		} else {
			fprintf(stderr, "cpu_workload: unknown option '%s'\n", a);
			usage(stderr, argv[0]);
			rc = -EINVAL;
		}
	}
	return rc;
}

int main(int argc, char **argv)
{
	struct options o = { .mib = 512, .change_pct = 2.0, .interval_ms = 200, .steps = 0,
			     .seed = 1, .log_path = NULL };
	struct prng rng;
	size_t size, npages, nchange;
	uint8_t *state;

	/* Descriptors inherited by accident (a test harness's logs) would be
	 * checkpointed and restored with the job: keep only 0, 1 and 2. */
	close_range(3, ~0u, 0);
	int log_fd = -1;
	int rc;

	rc = parse_args(argc, argv, &o);
	if (rc > 0)
		return 0;
	if (rc < 0)
		return 2;

	if (o.mib > SIZE_MAX / (1024 * 1024)) {
		fprintf(stderr, "cpu_workload: --mib %" PRIu64 ": too large for this machine\n", o.mib);
		return 2;
	}
	size = (size_t)o.mib * 1024 * 1024;
	npages = size / STATE_PAGE;
	nchange = (size_t)((double)npages * o.change_pct / 100.0 + 0.5);

	if (o.log_path != NULL) {
		log_fd = open(o.log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (log_fd < 0) {
			fprintf(stderr, "cpu_workload: open log file %s: %s\n", o.log_path,
				strerror(errno));
			return 1;
		}
	}

	/* A private anonymous mapping, not malloc: its size and place are exactly the state, and
	 * pages we never touch stay unpopulated. */
	state = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (state == MAP_FAILED) {
		fprintf(stderr, "cpu_workload: mmap %zu bytes of anonymous memory: %s\n", size,
			strerror(errno));
		if (log_fd >= 0)
			close(log_fd);
		return 1;
	}
	/* Keep each 4 KiB page separately dirtiable (as CRIU tracks memory per page). */
	(void)madvise(state, size, MADV_NOHUGEPAGE);

	prng_seed(&rng, o.seed);
	init_state(state, npages, &rng);

	for (uint64_t step = 1; o.steps == 0 || step <= o.steps; step++) {
		char line[64];
		int n;

		mutate_state(state, npages, nchange, &rng);
		n = snprintf(line, sizeof(line), "step %" PRIu64 " checksum %016" PRIx64 "\n", step,
			     checksum(state, size));
		if (fputs(line, stdout) == EOF || fflush(stdout) == EOF) {
			fprintf(stderr, "cpu_workload: write step %" PRIu64 " to stdout: %s\n", step,
				strerror(errno));
			rc = 1;
			break;
		}
		if (log_fd >= 0) {
			int err = write_all(log_fd, line, (size_t)n);

			if (err < 0) {
				fprintf(stderr, "cpu_workload: append step %" PRIu64 " to %s: %s\n",
					step, o.log_path, strerror(-err));
				rc = 1;
				break;
			}
		}
		if (o.steps == 0 || step < o.steps)
			sleep_ms(o.interval_ms);
	}

	munmap(state, size);
	if (log_fd >= 0)
		close(log_fd);
	return rc;
}
