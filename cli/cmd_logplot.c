/*
 * cmd_logplot.c - crest log --plot: a branch's snapshots over time, their
 * sizes (logical, new, stored) and stalls, drawn by gnuplot.
 *
 * Manifests record each snapshot's logical bytes and, for process
 * snapshots, the job's stall (label stall_ns); what was new and what it
 * took on disk is not recorded, so it is worked out here along the branch:
 * new = the bytes of chunks no earlier snapshot of the branch (its head's
 * ancestors) used, stored = what those chunks take in the packs. A chunk
 * another branch stored first counts as new here.
 */
#include "cas/history.h"
#include "cli/commands.h"
#include "util/err.h"
#include "util/progress.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct shaset {
	uint8_t (*k)[32];
	uint8_t *used;
	size_t cap, n;
};

static uint64_t sha_key(const uint8_t *sha)
{
	uint64_t v;
	memcpy(&v, sha, sizeof(v));
	return v;
}

/* 1 when sha was added, 0 when it was there, -ENOMEM. */
static int shaset_add(struct shaset *s, const uint8_t sha[32])
{
	if (2 * (s->n + 1) > s->cap) {
		struct shaset ns = { .cap = s->cap ? 2 * s->cap : 4096 };
		ns.k = malloc(ns.cap * 32);
		ns.used = calloc(ns.cap, 1);
		if (!ns.k || !ns.used) {
			free(ns.k);
			free(ns.used);
			return -ENOMEM;
		}
		for (size_t i = 0; i < s->cap; i++)
			if (s->used[i])
				shaset_add(&ns, s->k[i]);
		free(s->k);
		free(s->used);
		*s = ns;
	}
	size_t i = sha_key(sha) & (s->cap - 1);
	for (; s->used[i]; i = (i + 1) & (s->cap - 1))
		if (!memcmp(s->k[i], sha, 32))
			return 0;
	s->used[i] = 1;
	memcpy(s->k[i], sha, 32);
	s->n++;
	return 1;
}

struct point {
	uint64_t time_ns, logical, new_bytes, stored;
	int64_t stall_ns;   /* -1: not recorded */
};

int cli_log_plot(const struct cli *c, const char *branch, const char *png)
{
	if (!branch)
		branch = "main";
	if (cas_branch_check(branch) < 0 || cli_plot_name_ok(png) < 0)
		return -EINVAL;
	struct cas_store *store;
	int rc = cli_store_open(c, CAS_READ, &store);
	if (rc < 0)
		return rc;
	uint8_t id[32];
	struct cas_manifest **chain = NULL;
	size_t n = 0, cap = 0;
	rc = cas_branch_head(store, branch, id);
	/* Head to root; a parent not in this store ends the walk. */
	for (bool more = rc == 0; more;) {
		struct cas_manifest *m = NULL;
		int lrc = cas_manifest_load(store, id, &m);
		if (lrc == -ENOENT && n)
			break;
		if (lrc < 0) {
			rc = lrc;
			break;
		}
		if (n == cap) {
			cap = cap ? 2 * cap : 64;
			struct cas_manifest **nc = realloc(chain, cap * sizeof(*nc));
			if (!nc) {
				cas_manifest_free(m);
				rc = crest_errf(-ENOMEM, "reading branch %s", branch);
				break;
			}
			chain = nc;
		}
		chain[n++] = m;
		more = m->has_parent;
		if (more)
			memcpy(id, m->parent, 32);
	}
	struct point *pt = calloc(n ? n : 1, sizeof(*pt));
	struct shaset seen = { 0 };
	bool any_stall = false;
	if (rc == 0 && !pt)
		rc = crest_errf(-ENOMEM, "reading branch %s", branch);
	for (size_t k = n; rc == 0 && k-- > 0;) {   /* oldest first */
		const struct cas_manifest *m = chain[k];
		struct point *p = &pt[n - 1 - k];
		p->time_ns = m->time_ns;
		p->logical = m->logical_bytes;
		p->stall_ns = -1;
		for (size_t l = 0; l < m->nlabels; l++)
			if (!strcmp(m->labels[l].key, "stall_ns")) {
				p->stall_ns = strtoll(m->labels[l].value, NULL, 10);
				any_stall = true;
			}
		for (size_t s = 0; rc == 0 && s < m->nstreams; s++)
			for (uint64_t e = 0; rc == 0 && e < m->streams[s].nextents; e++) {
				const struct cas_extent *x = &m->streams[s].ext[e];
				if (x->hole)
					continue;
				int a = shaset_add(&seen, x->sha);
				if (a < 0) {
					rc = crest_errf(-ENOMEM, "reading branch %s", branch);
					break;
				}
				if (!a)
					continue;
				struct cas_loc loc;
				p->new_bytes += x->len;
				if (cas_chunk_lookup(store, x->sha, &loc) == 0)
					p->stored += CAS_REC_HEADER + (uint64_t)loc.stored;
			}
	}
	for (size_t k = 0; k < n; k++)
		cas_manifest_free(chain[k]);
	free(chain);
	free(seen.k);
	free(seen.used);
	cas_close(store);
	char dat[] = "/tmp/crest-plot-XXXXXX";
	int fd = rc == 0 ? mkstemp(dat) : -1;
	if (rc == 0 && fd < 0)
		rc = crest_errf(-errno, "cannot make a temporary file for the plot");
	FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (fd >= 0 && !f) {
		close(fd);
		rc = crest_errf(-ENOMEM, "writing the plot's data");
	}
	/* Seconds since the first snapshot; MiB; stall in ms or ? (missing). */
	for (size_t k = 0; f && k < n; k++) {
		const struct point *p = &pt[k];
		fprintf(f, "%.3f %.4f %.4f %.4f ", (p->time_ns - pt[0].time_ns) / 1e9, p->logical / 1048576.0,
			p->new_bytes / 1048576.0, p->stored / 1048576.0);
		if (p->stall_ns >= 0)
			fprintf(f, "%.3f\n", p->stall_ns / 1e6);
		else
			fprintf(f, "?\n");
	}
	if (f)
		fclose(f);
	char *script = NULL;
	size_t len = 0;
	FILE *s = rc == 0 ? open_memstream(&script, &len) : NULL;
	if (rc == 0 && !s)
		rc = crest_errf(-ENOMEM, "writing the plot's script");
	if (s) {
		char t0[32] = "";
		if (n)
			cli_fmt_time(pt[0].time_ns, t0, sizeof(t0));
		fprintf(s, "set terminal pngcairo size 1100,%d font 'sans,11'\nset output '%s'\n", any_stall ? 800 : 550,
			png);
		fprintf(s, "set datafile missing '?'\nset grid\nset key outside right top\n"
			"set lmargin 10\nset rmargin 18\nset offsets 0, 0, graph 0.08, 0\n");
		if (n < 2)
			fprintf(s, "set xrange [-1:1]\n");
		if (any_stall)
			fprintf(s, "set multiplot layout 2,1 title 'crest log --plot %s: %zu snapshot%s'\n", branch, n,
				n == 1 ? "" : "s");
		else
			fprintf(s, "set title \"crest log --plot %s: %zu snapshot%s (no stall recorded: library and files "
				"snapshots do not record one)\"\n", branch, n, n == 1 ? "" : "s");
		if (!any_stall)
			fprintf(s, "set xlabel 'seconds since the first snapshot (%s)'\n", t0);
		fprintf(s, "set ylabel 'MiB'\nset yrange [0:*]\n"
			"plot '%s' using 1:2 with linespoints lw 2 pt 7 lc rgb '#1f77b4' title 'logical', "
			"'' using 1:3 with linespoints lw 2 pt 5 lc rgb '#ff7f0e' title 'new', "
			"'' using 1:4 with linespoints lw 2 pt 9 lc rgb '#2ca02c' title 'stored'\n", dat);
		if (any_stall)
			fprintf(s, "set xlabel 'seconds since the first snapshot (%s)'\nset ylabel 'stall (ms)'\nplot '%s' using 1:5 with linespoints lw 2 pt 7 "
				"lc rgb '#d62728' title 'stall'\nunset multiplot\n", t0, dat);
		fclose(s);
		rc = cli_gnuplot(script, png);
	}
	free(script);
	if (fd >= 0)
		unlink(dat);
	if (rc == 0 && !c->json) {
		printf("plot: %s (%zu snapshot%s of branch %s", png, n, n == 1 ? "" : "s", branch);
		if (!any_stall)
			printf("; no stall recorded for them: only process snapshots record one");
		printf(")\n");
	}
	free(pt);
	return rc;
}
