/*
 * cmd_history.c - crest log and crest branch: the snapshots' history, read
 * from the parents and branches they record (cas/history.h).
 */
#include "cas/history.h"
#include "cli/commands.h"
#include "util/err.h"
#include "util/json.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Snapshot ids sorted, each with its place in the list: parents are found
 * by binary search, so a history of any length is drawn in n log n. */
struct idpos {
	uint8_t id[32];
	size_t pos;
};

struct idmap {
	struct idpos *v;
	size_t n;
};

static int idpos_cmp(const void *a, const void *b)
{
	return memcmp(((const struct idpos *)a)->id, ((const struct idpos *)b)->id, 32);
}

static int idmap_build(const struct cas_snapinfo *v, size_t n, struct idmap *m)
{
	m->n = n;
	m->v = calloc(n ? n : 1, sizeof(*m->v));
	if (!m->v)
		return crest_errf(-ENOMEM, "reading the history");
	for (size_t i = 0; i < n; i++) {
		memcpy(m->v[i].id, v[i].id, 32);
		m->v[i].pos = i;
	}
	if (n > 1)
		qsort(m->v, n, sizeof(*m->v), idpos_cmp);
	return 0;
}

/* Where id is in the list, or -1 when the store does not hold it. */
static long idmap_find(const struct idmap *m, const uint8_t id[32])
{
	size_t lo = 0, hi = m->n;
	while (lo < hi) {
		const size_t mid = (lo + hi) / 2;
		const int c = memcmp(m->v[mid].id, id, 32);
		if (c == 0)
			return (long)m->v[mid].pos;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

static void idmap_free(struct idmap *m)
{
	free(m->v);
}

/*
 * The graph, newest first: one lane per line of history being drawn. A
 * snapshot takes the lane that expects it (a child drawn earlier named it
 * as parent) or a new one; its lane then expects its parent. Lanes that
 * expected the same snapshot (two children of one parent: a fork) join it
 * there, drawn '/'. The lanes are fixed-size strings: no line of the
 * output depends on more than the lanes open at that point.
 *
 * Two '*' one above the other in a column read as child and parent, as
 * nothing is drawn between them. So a lane that closed on a line (a root,
 * a snapshot whose parent is not drawn, a '/' join) is not taken by the
 * next line: a new line of history, such as the root of a branch started
 * afresh, opens beside it, not under another branch's snapshot as if it
 * were that snapshot's parent. On the line after, the column is blank and
 * may be taken again.
 */
struct lanes {
	uint8_t (*want)[32];
	bool *open;
	size_t *closed;   /* the line a lane closed on (lines count from 1) */
	size_t n, cap, line;
};

static void lanes_close(struct lanes *l, size_t col)
{
	l->open[col] = false;
	l->closed[col] = l->line;
}

static int lanes_place(struct lanes *l, const uint8_t id[32], char *line, size_t cap, size_t *col_out)
{
	l->line++;
	size_t col = l->n;
	for (size_t i = 0; i < l->n && col == l->n; i++)
		if (l->open[i] && !memcmp(l->want[i], id, 32))
			col = i;
	if (col == l->n) {
		for (size_t i = 0; i < l->n && col == l->n; i++)
			if (!l->open[i] && l->closed[i] + 1 < l->line)
				col = i;
	}
	if (col == l->n) {
		if (l->n == l->cap) {
			const size_t nc = l->cap ? 2 * l->cap : 8;
			uint8_t (*nw)[32] = realloc(l->want, nc * 32);
			if (nw)
				l->want = nw;
			bool *no = nw ? realloc(l->open, nc * sizeof(*no)) : NULL;
			if (no)
				l->open = no;
			size_t *ncl = no ? realloc(l->closed, nc * sizeof(*ncl)) : NULL;
			if (!nw || !no || !ncl)
				return crest_errf(-ENOMEM, "drawing the graph");
			l->closed = ncl;
			l->cap = nc;
		}
		l->open[l->n] = false;
		l->closed[l->n++] = 0;
	}
	size_t k = 0;
	for (size_t i = 0; i < l->n && k + 3 < cap; i++) {
		char ch = ' ';
		if (i == col)
			ch = '*';
		else if (l->open[i] && !memcmp(l->want[i], id, 32)) {
			ch = '/';
			lanes_close(l, i);
		} else if (l->open[i])
			ch = '|';
		line[k++] = ch;
		line[k++] = ' ';
	}
	while (k > 0 && line[k - 1] == ' ')
		k--;
	line[k] = 0;
	l->open[col] = true;
	memcpy(l->want[col], id, 32);
	*col_out = col;
	return 0;
}

int cmd_log(struct cli *c, int argc, char **argv)
{
	bool graph = false;
	const char *branch = NULL, *plot = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--graph"))
			graph = true;
		else if (!strcmp(argv[i], "--plot") && i + 1 < argc)
			plot = argv[++i];
		else if (!strcmp(argv[i], "--plot"))
			return cli_usage(c, "log", "--plot needs a value");
		else if (argv[i][0] == '-' && argv[i][1])
			return cli_usage(c, "log", "unknown option %s", argv[i]);
		else if (branch)
			return cli_usage(c, "log", "wants one BRANCH, no more: %s", argv[i]);
		else
			branch = argv[i];
	}
	if (branch && cas_branch_check(branch) < 0)
		return cli_usage_fail(c, -EINVAL);
	if (plot && cli_plot_name_ok(plot) < 0)
		return cli_usage_fail(c, -EINVAL);
	if (plot) {   /* a picture of the branch (default main) instead of the list */
		int prc = cli_log_plot(c, branch, plot);
		return prc < 0 ? cli_fail(c, prc) : 0;
	}
	struct cas_store *store;
	int rc = cli_store_open(c, CAS_READ, &store);
	if (rc < 0)
		return cli_fail(c, rc);
	if (cli_check_index(c, store) < 0)
		fprintf(stderr, "%s: warning: %s\n", c->prog, crest_errmsg());
	struct cas_snapinfo *v = NULL;
	size_t n = 0;
	struct cas_branch *b = NULL;
	size_t nb = 0;
	rc = cas_snapshot_list(store, &v, &n);
	if (rc == 0)
		rc = cas_branch_list(store, &b, &nb);
	uint8_t head[32];
	if (rc == 0 && branch)
		rc = cas_branch_head(store, branch, head);
	cas_close(store);
	struct idmap im = { 0 };
	bool *show = NULL;
	if (rc == 0)
		rc = idmap_build(v, n, &im);
	if (rc == 0 && !(show = calloc(n ? n : 1, sizeof(*show))))
		rc = crest_errf(-ENOMEM, "reading the history");
	/* With a branch: its head and every ancestor, across branches. A
	 * parent missing from the store (never stored here) ends the walk. */
	for (size_t i = 0; rc == 0 && i < n; i++)
		show[i] = !branch;
	if (rc == 0 && branch) {
		long at = idmap_find(&im, head);
		while (at >= 0 && !show[at]) {
			show[at] = true;
			const struct cas_manifest *h = v[at].head;
			at = h->has_parent ? idmap_find(&im, h->parent) : -1;
		}
	}
	struct lanes ln = { 0 };
	bool first = true;
	if (rc == 0 && c->json)
		printf("[");
	for (size_t k = n; rc == 0 && k-- > 0;) {
		if (!show[k])
			continue;
		const struct cas_manifest *h = v[k].head;
		char gl[256] = "";
		size_t col = 0;
		if (graph && (rc = lanes_place(&ln, v[k].id, gl, sizeof(gl), &col)) < 0)
			break;
		if (graph) {
			/* The lane now expects the parent, if it is drawn. */
			const long p = h->has_parent ? idmap_find(&im, h->parent) : -1;
			if (p >= 0 && show[p])
				memcpy(ln.want[col], h->parent, 32);
			else
				lanes_close(&ln, col);
		}
		char hex[65], ph[65] = "", tbuf[32];
		cli_print_id(hex, v[k].id);
		if (h->has_parent)
			cli_print_id(ph, h->parent);
		const char *br = cas_manifest_branch(h);
		if (c->json) {
			printf("%s\n {\"snapshot\": \"%s\", \"parent\": ", first ? "" : ",", hex);
			if (h->has_parent)
				printf("\"%s\"", ph);
			else
				printf("null");
			printf(", \"branch\": ");
			json_str(stdout, br);
			printf(", \"time_ns\": %llu, \"kind\": ", (unsigned long long)h->time_ns);
			json_str(stdout, h->kind);
			printf(", \"logical_bytes\": %llu, \"heads\": [", (unsigned long long)h->logical_bytes);
			bool any = false;
			for (size_t j = 0; j < nb; j++)
				if (!memcmp(b[j].head, v[k].id, 32)) {
					printf("%s", any ? ", " : "");
					json_str(stdout, b[j].name);
					any = true;
				}
			printf("], \"tags\": [");
			for (size_t t = 0; t < v[k].ntags; t++) {
				printf("%s", t ? ", " : "");
				json_str(stdout, v[k].tags[t]);
			}
			printf("]");
			if (graph) {
				printf(", \"graph\": ");
				json_str(stdout, gl);
			}
			printf("}");
		} else {
			cli_fmt_time(h->time_ns, tbuf, sizeof(tbuf));
			if (graph)
				printf("%-*s  ", (int)(2 * ln.n > 1 ? 2 * ln.n - 1 : 1), gl);
			printf("%.12s  %s  %-8s  %s", hex, tbuf, h->kind, br);
			for (size_t j = 0; j < nb; j++)
				if (!memcmp(b[j].head, v[k].id, 32))
					printf("  (head of %s)", b[j].name);
			for (size_t t = 0; t < v[k].ntags; t++)
				printf("  tag %s", v[k].tags[t]);
			if (h->has_parent)
				printf("  parent %.12s", ph);
			printf("\n");
		}
		first = false;
	}
	if (rc == 0 && c->json)
		printf("%s]\n", first ? "" : "\n");
	free(ln.want);
	free(ln.open);
	free(ln.closed);
	free(show);
	idmap_free(&im);
	cas_branch_list_free(b, nb);
	cas_snapshot_list_free(v, n);
	return rc < 0 ? cli_fail(c, rc) : 0;
}

int cmd_branch(struct cli *c, int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (argv[i][0] == '-' && argv[i][1])
			return cli_usage(c, "branch", "unknown option %s", argv[i]);
	if (argc > 3)
		return cli_usage(c, "branch", "wants at most NAME SNAPSHOT, no more: %s", argv[3]);
	struct cas_store *store;
	if (argc == 1) {
		int rc = cli_store_open(c, CAS_READ, &store);
		if (rc < 0)
			return cli_fail(c, rc);
		struct cas_branch *b;
		size_t n;
		rc = cas_branch_list(store, &b, &n);
		cas_close(store);
		if (rc < 0)
			return cli_fail(c, rc);
		if (c->json)
			printf("[");
		else
			printf("%-24s  %-12s  %-19s  %s\n", "BRANCH", "HEAD", "TIME", "SNAPSHOTS");
		for (size_t i = 0; i < n; i++) {
			char hex[65], tbuf[32];
			cli_print_id(hex, b[i].head);
			if (c->json) {
				printf("%s\n {\"branch\": ", i ? "," : "");
				json_str(stdout, b[i].name);
				printf(", \"head\": \"%s\", \"head_time_ns\": %llu, \"snapshots\": %zu}", hex,
				       (unsigned long long)b[i].head_time_ns, b[i].snapshots);
			} else {
				cli_fmt_time(b[i].head_time_ns, tbuf, sizeof(tbuf));
				printf("%-24s  %.12s  %-19s  %zu\n", b[i].name, hex, tbuf, b[i].snapshots);
			}
		}
		if (c->json)
			printf("%s]\n", n ? "\n" : "");
		cas_branch_list_free(b, n);
		return 0;
	}
	const char *name = argv[1], *from = argc > 2 ? argv[2] : NULL;
	if (cas_branch_check(name) < 0)
		return cli_usage_fail(c, -EINVAL);
	int rc = cli_store_open(c, CAS_WRITE, &store);
	if (rc < 0)
		return cli_fail(c, rc);
	uint8_t fid[32], id[32];
	rc = from ? cas_snapshot_resolve(store, from, fid) : cas_branch_head(store, CAS_BRANCH_DEFAULT, fid);
	if (rc == 0)
		rc = cas_branch_fork(store, fid, name, id);
	cas_close(store);
	if (rc < 0)
		return cli_fail(c, rc);
	char fh[65], hex[65];
	cli_print_id(fh, fid);
	cli_print_id(hex, id);
	/* A ref: the branch's head is the snapshot itself (hex is fh). */
	if (c->json) {
		printf("{\"branch\": ");
		json_str(stdout, name);
		printf(", \"from\": \"%s\", \"snapshot\": \"%s\"}\n", fh, hex);
	} else if (!c->quiet) {
		printf("branch %s points at %s\n", name, hex);
	}
	return 0;
}
