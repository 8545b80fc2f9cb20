/*
 * test_gpumap.c - completing a restore's GPU map (gpu/gpumap.h) without
 * a GPU: the cases the driver refused (a map of some GPUs only) and the
 * ones crest must refuse itself, then random GPU sets against the rules:
 * every GPU the job saw mapped exactly once, onto a GPU here of its chip,
 * no two onto one, the user's pairs kept. The seed is printed.
 */
#include "gpu/gpumap.h"
#include "tests/check.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

static struct gpu_info gpu(unsigned id, const char *name)
{
	struct gpu_info g;
	memset(&g, 0, sizeof(g));
	g.uuid.bytes[0] = (char)id;
	g.uuid.bytes[15] = (char)(id * 7 + 1);
	snprintf(g.name, sizeof(g.name), "%s", name);
	return g;
}

static struct gpuckpt_map pair(const struct gpu_info *a, const struct gpu_info *b)
{
	struct gpuckpt_map m = { a->uuid, b->uuid };
	return m;
}

static bool same(const CUuuid *a, const CUuuid *b)
{
	return !memcmp(a->bytes, b->bytes, sizeof(a->bytes));
}

/* The pair whose source is g in m, or NULL. */
static const struct gpuckpt_map *to_of(const struct gpuckpt_map *m, size_t n, const struct gpu_info *g)
{
	for (size_t i = 0; i < n; i++)
		if (same(&m[i].from, &g->uuid))
			return &m[i];
	return NULL;
}

static void fixed_cases(void)
{
	const struct gpu_info A = gpu(1, "NVIDIA H200"), B = gpu(2, "NVIDIA H200"), C = gpu(3, "NVIDIA H200"),
			      X = gpu(9, "NVIDIA H100 80GB HBM3");
	const struct gpu_info two[] = { A, B }, three[] = { A, B, C }, one_b[] = { B }, mixed[] = { A, X };
	struct gpuckpt_map *m;
	size_t n;

	/* The case: GPU0=GPU1 alone on a machine of two. */
	struct gpuckpt_map w = pair(&A, &B);
	OK(gpumap_complete(two, 2, two, 2, &w, 1, NULL, &m, &n));
	CHECK(n == 2 && same(&to_of(m, n, &A)->to, &B.uuid) && same(&to_of(m, n, &B)->to, &A.uuid),
	      "A=B on two GPUs: want the swap, got %zu pairs", n);
	free(m);
	/* --gpu 1: the same, by index. */
	OK(gpumap_complete(two, 2, two, 2, NULL, 0, "1", &m, &n));
	CHECK(n == 2 && same(&to_of(m, n, &A)->to, &B.uuid), "--gpu 1: want the swap, got %zu pairs", n);
	free(m);
	/* Nothing asked, nothing moves: no pairs at all. */
	OK(gpumap_complete(two, 2, two, 2, NULL, 0, NULL, &m, &n));
	CHECK(n == 0 && !m, "no map asked on the same GPUs: want none, got %zu", n);
	/* Another machine: its GPUs are others of the same chip. */
	OK(gpumap_complete(one_b, 1, (const struct gpu_info[]){ C }, 1, NULL, 0, NULL, &m, &n));
	CHECK(n == 1 && same(&m[0].to, &C.uuid), "B onto a machine with only C: want B=C");
	free(m);
	/* A=C on three: B stays where it is. */
	w = pair(&A, &C);
	OK(gpumap_complete(two, 2, three, 3, &w, 1, NULL, &m, &n));
	CHECK(n == 2 && same(&to_of(m, n, &B)->to, &B.uuid), "A=C on three: B must stay");
	free(m);

	EXPECT_ERR(gpumap_complete(two, 2, one_b, 1, NULL, 0, NULL, &m, &n), -EINVAL, "no GPU here is free");
	w = pair(&A, &C);
	EXPECT_ERR(gpumap_complete(two, 2, two, 2, &w, 1, NULL, &m, &n), -EINVAL, "not on this machine");
	w = pair(&C, &A);
	EXPECT_ERR(gpumap_complete(two, 2, two, 2, &w, 1, NULL, &m, &n), -EINVAL, "did not see it");
	EXPECT_ERR(gpumap_complete(two, 2, mixed, 2, NULL, 0, "1", &m, &n), -EINVAL, "same chip");
	struct gpuckpt_map ww[] = { pair(&A, &B), pair(&B, &B) };
	EXPECT_ERR(gpumap_complete(two, 2, two, 2, ww, 2, NULL, &m, &n), -EINVAL, "mapped onto");
	EXPECT_ERR(gpumap_complete(two, 2, two, 2, NULL, 0, "7", &m, &n), -EINVAL, "not on this machine");

	/* Memory: the job used 60 GiB on A; B has 40 GiB free, C 80. */
	struct gpu_info ua = A, fb = B, fc = C;
	ua.mib = 61440;
	fb.mib = 40960;
	fc.mib = 81920;
	const struct gpu_info used[] = { ua }, room[] = { fb, fc };
	w = pair(&A, &B);
	EXPECT_ERR(gpumap_complete(used, 1, room, 2, &w, 1, NULL, &m, &n), -EINVAL, "MiB free");
	OK(gpumap_complete(used, 1, room, 2, NULL, 0, NULL, &m, &n));
	CHECK(n == 1 && same(&m[0].to, &C.uuid), "A needing 60 GiB: want C (80 free), not B (40 free)");
	free(m);
	EXPECT_ERR(gpumap_complete(used, 1, (const struct gpu_info[]){ fb }, 1, NULL, 0, NULL, &m, &n), -EINVAL,
		   "with that memory free");

	/* The label a checkpoint writes, back. */
	char *s;
	struct gpu_info *back;
	size_t nb;
	const struct gpu_info labelled[] = { A, ua };
	OK(gpumap_format(labelled, 2, &s));
	OK(gpumap_parse(s, &back, &nb));
	CHECK(nb == 2 && same(&back[1].uuid, &A.uuid) && !strcmp(back[1].name, A.name) && back[1].mib == 61440 &&
	      back[0].mib == 0, "format/parse of %s did not round-trip", s);
	free(s);
	free(back);
	EXPECT_ERR(gpumap_parse("GPU-12=x;junk", &back, &nb), -EINVAL, "damaged");
}

static uint64_t rng;
static unsigned below(unsigned n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (unsigned)(rng % n);
}

/* Random machines and maps: what comes back obeys every rule, or an
 * error says why, and never when a valid completion plainly exists. */
static void random_cases(unsigned rounds)
{
	static const char *chips[] = { "NVIDIA H100 80GB HBM3", "NVIDIA H200" };
	for (unsigned r = 0; r < rounds; r++) {
		struct gpu_info pool[8], seen[8], host[8];
		for (unsigned i = 0; i < 8; i++)
			pool[i] = gpu(i + 1, chips[below(2)]);
		struct gpu_info mem[8];   /* used by the job / free here: 0 (not known) or some GiB */
		for (unsigned i = 0; i < 8; i++)
			mem[i].mib = below(3) ? (uint64_t)(1 + below(80)) * 1024 : 0;
		size_t nseen = 1 + below(4), nhost = 1 + below(6);
		for (size_t i = 0; i < nseen; i++) {
			seen[i] = pool[i];                 /* the job's GPUs: pool[0..nseen) */
			seen[i].mib = mem[i].mib;
		}
		unsigned start = below(8);
		for (size_t i = 0; i < nhost; i++) {
			host[i] = pool[(start + i) % 8];   /* this machine's: some of the same, some not */
			host[i].mib = below(3) ? (uint64_t)(1 + below(80)) * 1024 : 0;
		}
		struct gpuckpt_map want[2];
		size_t nwant = below(3);
		for (size_t i = 0; i < nwant; i++)
			want[i] = pair(&seen[below((unsigned)nseen)], &host[below((unsigned)nhost)]);
		struct gpuckpt_map *m = NULL;
		size_t n = 0;
		crest_errset_str("");
		int rc = gpumap_complete(seen, nseen, host, nhost, want, nwant, NULL, &m, &n);
		if (rc < 0) {
			CHECK(rc == -EINVAL && crest_errmsg()[0], "round %u: error %d without a message", r, rc);
			continue;
		}
		bool moved = false;
		for (size_t i = 0; i < n; i++)
			moved |= !same(&m[i].from, &m[i].to);
		CHECK(n == 0 || (n == nseen && moved), "round %u: %zu pairs for %zu GPUs", r, n, nseen);
		for (size_t i = 0; i < nseen && n; i++) {
			const struct gpuckpt_map *p = to_of(m, n, &seen[i]);
			CHECK(p, "round %u: GPU %zu of the job is not mapped", r, i);
			if (!p)
				continue;
			int h = -1;
			for (size_t j = 0; j < nhost; j++)
				if (same(&host[j].uuid, &p->to))
					h = (int)j;
			CHECK(h >= 0 && !strcmp(host[h].name, seen[i].name), "round %u: GPU %zu mapped off-chip "
			      "or off-machine", r, i);
			CHECK(h < 0 || same(&host[h].uuid, &seen[i].uuid) || !seen[i].mib || !host[h].mib ||
			      host[h].mib >= seen[i].mib, "round %u: GPU %zu moved onto one without its memory free",
			      r, i);
			for (size_t k = 0; k < n; k++)
				CHECK(&m[k] == p || !same(&m[k].to, &p->to), "round %u: two GPUs onto one", r);
		}
		for (size_t w = 0; w < nwant; w++) {
			const struct gpuckpt_map *p = NULL;
			for (size_t i = 0; i < n; i++)
				if (same(&m[i].from, &want[w].from))
					p = &m[i];
			CHECK(n == 0 ? same(&want[w].from, &want[w].to) : p && same(&p->to, &want[w].to),
			      "round %u: the user's pair %zu was not kept", r, w);
		}
		free(m);
	}
}

int main(int argc, char **argv)
{
	uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 10) : (uint64_t)time(NULL);
	printf("gpumap: seed %" PRIu64 " (pass it as the argument to replay)\n", seed);
	rng = seed | 1;
	fixed_cases();
	random_cases(20000);
	printf("%s: %d failures\n", failures ? "FAIL" : "ok", failures);
	return failures ? 1 : 0;
}
