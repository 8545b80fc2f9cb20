/*
 * fault_lib.c - the library checkpoint that tests/fault/faults.sh puts
 * faults into: host regions of deterministic data, checkpointed through
 * include/crest.h without a GPU, and checked after a restore.
 *
 *   fault_lib ckpt STORE TAG SEED    checkpoint regions made from SEED, tag TAG
 *   fault_lib check STORE TAG SEED   restore TAG into fresh regions and compare
 *
 * Exit 0 on success, 1 with crest's message on stderr on failure.
 */
#include "crest.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NREG 3
static const size_t reg_size[NREG] = { 3u << 20, 1u << 20, 256u << 10 };
static const char *const reg_name[NREG] = { "weights", "opt", "small" };

/* Region i from seed: mostly random, a shared stretch (dedup across seeds)
 * and a zero stretch (holes). */
static void fill(uint8_t *p, size_t n, unsigned seed, unsigned i)
{
	uint64_t x = 0x9e3779b97f4a7c15ull * (seed * 7u + i + 1);
	for (size_t k = 0; k + 8 <= n; k += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(p + k, &x, 8);
	}
	memset(p + n / 4, 0, n / 8);
	for (size_t k = n / 2; k < n / 2 + n / 8; k++)
		p[k] = (uint8_t)(k * 31 + i);
}

static int die(const char *what, int rc)
{
	fprintf(stderr, "fault_lib: %s: %s (rc %d)\n", what, crest_errmsg(), rc);
	return 1;
}

int main(int argc, char **argv)
{
	if (argc != 5 || (strcmp(argv[1], "ckpt") && strcmp(argv[1], "check"))) {
		fprintf(stderr, "usage: fault_lib ckpt|check STORE TAG SEED\n");
		return 2;
	}
	const int ckpt = !strcmp(argv[1], "ckpt");
	const unsigned seed = (unsigned)atoi(argv[4]);
	struct crest_options o;
	crest_options_init(&o);
	o.flags = CREST_OPEN_NO_GPU;
	o.staging_bytes = 8u << 20;
	o.workers = 2;
	crest_t *c;
	int rc = crest_open(argv[2], &o, &c);
	if (rc < 0)
		return die("crest_open", rc);
	uint8_t *want[NREG], *mem[NREG];
	for (int i = 0; i < NREG; i++) {
		want[i] = malloc(reg_size[i]);
		mem[i] = malloc(reg_size[i]);
		if (!want[i] || !mem[i])
			return die("malloc", -12);
		fill(want[i], reg_size[i], seed, (unsigned)i);
		if (ckpt)
			memcpy(mem[i], want[i], reg_size[i]);
		else
			memset(mem[i], 0xa5, reg_size[i]);
		crest_region_t r;
		rc = crest_register(c, reg_name[i], mem[i], reg_size[i], CREST_MEM_HOST, &r);
		if (rc < 0)
			return die("crest_register", rc);
	}
	if (ckpt) {
		struct crest_checkpoint_opts co = { .tag = argv[3] };
		crest_ckpt_t h;
		rc = crest_checkpoint(c, &co, &h);
		if (rc < 0)
			return die("crest_checkpoint", rc);
		rc = crest_wait(c, h, NULL);
		if (rc < 0)
			return die("crest_wait", rc);
	} else {
		rc = crest_restore(c, argv[3], NULL);
		if (rc < 0)
			return die("crest_restore", rc);
		for (int i = 0; i < NREG; i++)
			if (memcmp(mem[i], want[i], reg_size[i])) {
				fprintf(stderr, "fault_lib: region %s of %s differs after restore\n", reg_name[i], argv[3]);
				return 1;
			}
	}
	rc = crest_close(c);
	if (rc < 0)
		return die("crest_close", rc);
	for (int i = 0; i < NREG; i++) {
		free(want[i]);
		free(mem[i]);
	}
	return 0;
}
