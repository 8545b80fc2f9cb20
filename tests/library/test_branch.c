/*
 * test_branch.c - libcrest's branches and parents (issue 12), on host
 * regions, against a model.
 *
 *   test_branch history STORE_DIR [SEED]
 *   test_branch errors STORE_DIR
 *
 * history: a fixed opening (restore then checkpoint, a new branch from a
 * restored snapshot, back to an existing branch, a fresh handle) and then a
 * random sequence (SEED, default the clock; printed for a replay) of
 * checkpoints (some two in flight, waited in either order), restores,
 * crest_set_branch calls and reopens. A model says the branch and parent
 * every checkpoint must have, and the head of every branch; the store is
 * then read through cas/ (another reader beside the writer) and each
 * snapshot's manifest checked against the model. Every restore compares
 * the restored bytes with what was checkpointed.
 * errors: an invalid branch name, a reserved label key and a bad handle.
 */
#include "crest.h"
#include "cas/cas.h"
#include "cas/history.h"
#include "tests/check.h"
#include "util/sha256.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NREG 2
#define MAXSNAP 256
#define NOPS 60

static uint64_t rng;

struct snap {
	char id[65];
	char branch[32];
	char parent[65];          /* "" when none */
	uint64_t seeds[NREG];     /* the regions' contents */
};

/* The model: what the next checkpoint must be, and every snapshot taken. */
static struct snap snaps[MAXSNAP];
static size_t nsnaps;
static char cur_branch[32] = "main";
static char cur_parent[65];

static uint8_t *reg[NREG];
static size_t regsize[NREG];
static uint64_t cur_seed[NREG];

static const char *const branches[] = { "main", "exp", "b/1", "x@2.rc-1" };

static crest_t *open_store(const char *dir)
{
	struct crest_options o;
	crest_options_init(&o);
	o.staging_bytes = 16u << 20;
	o.flags = CREST_OPEN_NO_GPU;
	o.workers = 2;
	crest_t *c;
	OK(crest_open(dir, &o, &c));
	crest_region_t h;
	for (int i = 0; i < NREG; i++) {
		char name[16];
		snprintf(name, sizeof(name), "r%d", i);
		OK(crest_register(c, name, reg[i], regsize[i], CREST_MEM_HOST, &h));
	}
	return c;
}

/* The newest snapshot on branch b in the model, or NULL. */
static const struct snap *head(const char *b)
{
	for (size_t i = nsnaps; i-- > 0;)
		if (!strcmp(snaps[i].branch, b))
			return &snaps[i];
	return NULL;
}

static void scribble(void)
{
	for (int i = 0; i < NREG; i++)
		if (check_rnd(&rng) % 3) {   /* some regions stay as they were: dedup through the parent */
			cur_seed[i] = check_rnd(&rng);
			check_fill(reg[i], regsize[i], cur_seed[i]);
		}
}

static struct snap *record(const struct crest_result *r, const char *parent)
{
	if (nsnaps == MAXSNAP) {
		fprintf(stderr, "FAIL: more than %d snapshots\n", MAXSNAP);
		exit(1);
	}
	struct snap *s = &snaps[nsnaps++];
	memcpy(s->id, r->snapshot, 65);
	snprintf(s->branch, sizeof(s->branch), "%s", cur_branch);
	snprintf(s->parent, sizeof(s->parent), "%s", parent);
	memcpy(s->seeds, cur_seed, sizeof(cur_seed));
	return s;
}

static void op_checkpoint(crest_t *c)
{
	scribble();
	crest_ckpt_t h;
	struct crest_result r;
	OK(crest_checkpoint(c, NULL, &h));
	OK(crest_wait(c, h, &r));
	record(&r, cur_parent);
	printf("  checkpoint %.12s on %s, parent %.12s\n", r.snapshot, cur_branch, cur_parent);
	memcpy(cur_parent, r.snapshot, 65);
}

/* Two checkpoints in flight: both get the same parent; the one issued later
 * is the next parent, whichever is waited for first. */
static void op_two(crest_t *c)
{
	crest_ckpt_t h[2];
	uint64_t seeds[2][NREG];
	for (int k = 0; k < 2; k++) {
		scribble();
		memcpy(seeds[k], cur_seed, sizeof(cur_seed));
		OK(crest_checkpoint(c, NULL, &h[k]));
	}
	const int first = (int)(check_rnd(&rng) % 2);
	struct crest_result r[2];
	OK(crest_wait(c, h[first], &r[first]));
	OK(crest_wait(c, h[!first], &r[!first]));
	for (int k = 0; k < 2; k++) {
		memcpy(cur_seed, seeds[k], sizeof(cur_seed));
		record(&r[k], cur_parent);
	}
	printf("  two in flight (waited %s) %.12s %.12s on %s, parent %.12s\n", first ? "newer first" : "in order",
	       r[0].snapshot, r[1].snapshot, cur_branch, cur_parent);
	memcpy(cur_parent, r[1].snapshot, 65);
}

static void op_restore(crest_t *c, const struct snap *s)
{
	for (int i = 0; i < NREG; i++)
		check_fill(reg[i], regsize[i], check_rnd(&rng));   /* nothing of s left in the regions */
	struct crest_restore_result rr;
	OK(crest_restore(c, s->id, &rr));
	CHECK(!strcmp(rr.snapshot, s->id), "restored %s, asked for %s", rr.snapshot, s->id);
	uint8_t *want = malloc(regsize[0] > regsize[1] ? regsize[0] : regsize[1]);
	for (int i = 0; i < NREG; i++) {
		check_fill(want, regsize[i], s->seeds[i]);
		const size_t d = first_diff(reg[i], want, regsize[i]);
		CHECK(d == regsize[i], "restore of %.12s: region r%d differs at byte %zu of %zu", s->id, i, d,
		      regsize[i]);
		cur_seed[i] = s->seeds[i];
	}
	free(want);
	snprintf(cur_branch, sizeof(cur_branch), "%s", s->branch);
	memcpy(cur_parent, s->id, 65);
	printf("  restore %.12s: on %s, parent %.12s\n", s->id, cur_branch, cur_parent);
}

static void op_set_branch(crest_t *c, const char *b)
{
	OK(crest_set_branch(c, b));
	const struct snap *h = head(b);
	if (h)
		memcpy(cur_parent, h->id, 65);
	snprintf(cur_branch, sizeof(cur_branch), "%s", b);
	printf("  set_branch %s (%s): parent %.12s\n", b, h ? "exists" : "new", cur_parent);
}

/* A fresh handle is on main and goes on from main's head. */
static crest_t *op_reopen(crest_t *c, const char *dir)
{
	OK(crest_close(c));
	c = open_store(dir);
	const struct snap *h = head("main");
	snprintf(cur_branch, sizeof(cur_branch), "main");
	snprintf(cur_parent, sizeof(cur_parent), "%s", h ? h->id : "");
	printf("  reopen: on main, parent %.12s\n", cur_parent);
	return c;
}

/* Every snapshot's manifest and every branch's head, read through cas/
 * beside the writer, against the model. */
static void verify_store(const char *dir)
{
	struct cas_store *s;
	OK(cas_open(dir, CAS_READ, &s));
	for (size_t i = 0; i < nsnaps; i++) {
		uint8_t id[32];
		struct cas_manifest *m;
		CHECK(hex_decode(snaps[i].id, id, 32) == 32, "snapshot id %s", snaps[i].id);
		OK(cas_manifest_load(s, id, &m));
		char parent[65] = "";
		if (m->has_parent)
			hex_encode(m->parent, 32, parent);
		CHECK(!strcmp(cas_manifest_branch(m), snaps[i].branch), "snapshot %zu (%.12s) is on branch %s, "
		      "expected %s", i, snaps[i].id, cas_manifest_branch(m), snaps[i].branch);
		CHECK(!strcmp(parent, snaps[i].parent), "snapshot %zu (%.12s, on %s) has parent '%.12s', expected "
		      "'%.12s'", i, snaps[i].id, snaps[i].branch, parent, snaps[i].parent);
		cas_manifest_free(m);
	}
	for (size_t b = 0; b < sizeof(branches) / sizeof(branches[0]); b++) {
		const struct snap *want = head(branches[b]);
		uint8_t id[32];
		char hex[65] = "";
		if (cas_branch_head(s, branches[b], id) == 0)
			hex_encode(id, 32, hex);
		CHECK(!strcmp(hex, want ? want->id : ""), "branch %s: head '%.12s', expected '%.12s'", branches[b],
		      hex, want ? want->id : "");
	}
	cas_close(s);
}

static void t_history(const char *dir, uint64_t seed)
{
	printf("seed %llu (replay: test_branch history DIR %llu)\n", (unsigned long long)seed,
	       (unsigned long long)seed);
	rng = seed | 1;
	for (int i = 0; i < NREG; i++) {
		regsize[i] = 1 + check_rnd(&rng) % (192 * 1024);
		reg[i] = malloc(regsize[i]);
		cur_seed[i] = check_rnd(&rng);
		check_fill(reg[i], regsize[i], cur_seed[i]);
	}
	crest_t *c = open_store(dir);
	/* The fixed opening: each rule once whatever the seed. */
	op_checkpoint(c);                 /* the first snapshot: main, no parent */
	op_checkpoint(c);
	op_restore(c, &snaps[0]);         /* back to the first ... */
	op_checkpoint(c);                 /* ... whose child this is, on main */
	op_restore(c, &snaps[1]);
	op_set_branch(c, "exp");          /* a new branch from a restored snapshot */
	op_checkpoint(c);
	op_set_branch(c, "main");         /* back: main's head is the parent */
	op_checkpoint(c);
	c = op_reopen(c, dir);            /* a new session continues main */
	op_checkpoint(c);
	op_restore(c, head("exp"));       /* restore continues on exp */
	op_checkpoint(c);
	c = op_reopen(c, dir);
	op_two(c);
	for (int k = 0; k < NOPS && !failures; k++) {
		const unsigned op = (unsigned)(check_rnd(&rng) % 10);
		if (op < 4)
			op_checkpoint(c);
		else if (op < 5)
			op_two(c);
		else if (op < 7)
			op_restore(c, &snaps[check_rnd(&rng) % nsnaps]);
		else if (op < 9)
			op_set_branch(c, branches[check_rnd(&rng) % (sizeof(branches) / sizeof(branches[0]))]);
		else
			c = op_reopen(c, dir);
	}
	verify_store(dir);   /* beside the open writer */
	OK(crest_close(c));
	printf("history: %zu snapshots checked (seed %llu)\n", nsnaps, (unsigned long long)seed);
	for (int i = 0; i < NREG; i++)
		free(reg[i]);
}

static void t_errors(const char *dir)
{
	static uint8_t a[4096];
	crest_t *c;
	struct crest_options o;
	crest_options_init(&o);
	o.staging_bytes = 16u << 20;
	o.flags = CREST_OPEN_NO_GPU;
	OK(crest_open(dir, &o, &c));
	crest_region_t h;
	OK(crest_register(c, "a", a, sizeof(a), CREST_MEM_HOST, &h));
	EXPECT_ERR(crest_set_branch(c, "no spaces"), -EINVAL, "no spaces");
	EXPECT_ERR(crest_set_branch(c, ""), -EINVAL, "1 to 128");
	EXPECT_ERR(crest_set_branch(c, NULL), -EINVAL, "1 to 128");
	char longname[200];
	memset(longname, 'b', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = 0;
	EXPECT_ERR(crest_set_branch(c, longname), -EINVAL, "1 to 128");
	const char *bad[] = { "crest.branch=x" }, *bad2[] = { "ok=1", "crest.mine=1" };
	struct crest_checkpoint_opts co = { .labels = bad, .nlabels = 1 };
	crest_ckpt_t ck;
	EXPECT_ERR(crest_checkpoint(c, &co, &ck), -EINVAL, "crest.branch");
	co = (struct crest_checkpoint_opts){ .labels = bad2, .nlabels = 2 };
	EXPECT_ERR(crest_checkpoint(c, &co, &ck), -EINVAL, "crest.mine");
	/* After the failures the handle is where it was: on main, no parent. */
	struct crest_result r;
	const char *fine[] = { "crestx=1", "mycrest.branch=2" };
	co = (struct crest_checkpoint_opts){ .labels = fine, .nlabels = 2 };
	OK(crest_checkpoint(c, &co, &ck));
	OK(crest_wait(c, ck, &r));
	OK(crest_set_branch(c, "b-1"));
	OK(crest_checkpoint(c, NULL, &ck));
	struct crest_result r2;
	OK(crest_wait(c, ck, &r2));
	EXPECT_ERR(crest_set_branch(NULL, "main"), -EBADF, "NULL");
	OK(crest_close(c));
	EXPECT_ERR(crest_set_branch(c, "main"), -EBADF, "crest_set_branch");
	EXPECT_ERR(crest_set_branch((crest_t *)&o, "main"), -EBADF, "not an open crest handle");

	nsnaps = 0;
	struct crest_result *rs[2] = { &r, &r2 };
	snprintf(cur_branch, sizeof(cur_branch), "main");
	record(rs[0], "");
	snprintf(cur_branch, sizeof(cur_branch), "b-1");
	record(rs[1], r.snapshot);
	verify_store(dir);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: test_branch history|errors STORE [SEED]\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	const char *t = argv[1], *dir = argv[2];
	char cmd[4200];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		return 1;
	if (!strcmp(t, "history")) {
		uint64_t seed = argc > 3 ? strtoull(argv[3], NULL, 0) : (uint64_t)time(NULL) ^ (uint64_t)getpid() << 16;
		t_history(dir, seed);
	} else if (!strcmp(t, "errors")) {
		t_errors(dir);
	} else {
		fprintf(stderr, "test_branch: unknown case %s\n", t);
		return 2;
	}
	if (failures) {
		fprintf(stderr, "%s: %d check(s) failed\n", t, failures);
		return 1;
	}
	if (system(cmd) != 0)
		return 1;
	printf("%s: ok\n", t);
	return 0;
}
