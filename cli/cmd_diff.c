/*
 * cmd_diff.c - crest diff A B: what changed between two snapshots, stream by
 * stream, read from their manifests alone (no chunk is fetched).
 *
 * Every stream name in either manifest is reported, in name order, with a
 * status: "added" (only in B), "removed" (only in A), "same" (content and
 * metadata equal) or "changed". For a stream in both:
 *
 *  - bytes_differ: both extent lists are walked together by byte offset
 *    (two pointers, O(extents)). Over the common length a range counts as
 *    the same where the extents covering it on both sides are both holes,
 *    or are the same chunk (same sha) starting at the same offset; any other
 *    overlap (different sha, a hole against a chunk, or one chunk at shifted
 *    offsets) counts as differing, all its bytes. The size difference (bytes
 *    present on one side only) is added. A hole against a chunk of zeros
 *    would count as differing, but the engine never stores an all-zero chunk
 *    (it makes it a hole), so for snapshots crest wrote that is exact at
 *    chunk granularity: it compares chunk identities, not bytes, so the same
 *    bytes cut differently (another chunker or chunk size) count as
 *    differing. For an added or removed stream it is that stream's size.
 *  - chunks_shared: how many distinct chunk shas of B's stream also appear
 *    anywhere in A's stream of the same name; chunks_b: B's distinct chunk
 *    shas; shared_bytes: the bytes of B's stream covered by extents whose
 *    chunk appears in A's stream (each occurrence counted). Holes are not
 *    chunks: they count in neither. Hash sets, O(extents).
 *  - meta_changed: which of type, mode, mtime, target (symlink) and meta
 *    (the producer's string, e.g. a hard link's "link=NAME") differ.
 *
 * The total adds the streams up by status, bytes_differ and shared_bytes,
 * gives both snapshots' logical sizes, and dedup_bytes: the bytes of B whose
 * chunk appears in any stream of A (what B shares with A whatever the names).
 */
#include "cli/commands.h"
#include "util/err.h"
#include "util/json.h"
#include "util/progress.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a set of chunk shas (pointers into the manifests' extents) ---- */

/* Open addressing, linear probing, at most half full; a sha is uniform, so
 * its first 8 bytes are the hash. */
struct shaset {
	const uint8_t **slot;
	size_t mask;
};

static int shaset_init(struct shaset *s, uint64_t n)
{
	size_t cap = 16;
	while (cap / 2 < n) {
		if (cap > SIZE_MAX / 4 / sizeof(*s->slot))
			return -ENOMEM;
		cap *= 2;
	}
	s->slot = calloc(cap, sizeof(*s->slot));
	s->mask = cap - 1;
	return s->slot ? 0 : -ENOMEM;
}

static size_t shaset_pos(const struct shaset *s, const uint8_t *sha)
{
	uint64_t h;
	memcpy(&h, sha, sizeof(h));
	size_t i = (size_t)h & s->mask;
	while (s->slot[i] && memcmp(s->slot[i], sha, 32))
		i = (i + 1) & s->mask;
	return i;
}

/* True when sha was not in s yet (the caller sized s for every add). */
static bool shaset_add(struct shaset *s, const uint8_t *sha)
{
	size_t i = shaset_pos(s, sha);
	if (s->slot[i])
		return false;
	s->slot[i] = sha;
	return true;
}

static bool shaset_has(const struct shaset *s, const uint8_t *sha)
{
	return s->slot[shaset_pos(s, sha)] != NULL;
}

static uint64_t chunk_extents(const struct cas_stream *st)
{
	uint64_t n = 0;
	for (uint64_t k = 0; k < st->nextents; k++)
		n += !st->ext[k].hole;
	return n;
}

/* ---- one stream ---- */

enum { ST_ADDED, ST_REMOVED, ST_CHANGED, ST_SAME };
static const char *const status_name[] = { "added", "removed", "changed", "same" };

enum { M_TYPE = 1, M_MODE = 2, M_MTIME = 4, M_TARGET = 8, M_META = 16 };
static const char *const meta_name[] = { "type", "mode", "mtime", "target", "meta" };
#define NMETA 5

struct sdiff {
	const struct cas_stream *a, *b;   /* either may be NULL, not both */
	int status;
	unsigned meta;                    /* M_* bits */
	uint64_t differ, shared, chunks_b, shared_bytes;
};

/* The bytes of a and b (both present) whose content identity differs; see
 * the header. The decoder checked that each list adds up to its size. */
static uint64_t bytes_differ(const struct cas_stream *a, const struct cas_stream *b)
{
	uint64_t ia = 0, ib = 0, pos = 0, diff = 0;
	uint64_t ea = a->nextents ? a->ext[0].len : 0, eb = b->nextents ? b->ext[0].len : 0;
	uint64_t sa = 0, sb = 0;   /* where extents ia and ib start */
	while (ia < a->nextents && ib < b->nextents) {
		const struct cas_extent *x = &a->ext[ia], *y = &b->ext[ib];
		const uint64_t end = ea < eb ? ea : eb;
		const bool same = x->hole && y->hole
			? true : !x->hole && !y->hole && sa == sb && !memcmp(x->sha, y->sha, 32);
		if (!same)
			diff += end - pos;
		pos = end;
		if (ea == end && ++ia < a->nextents) {
			sa = ea;
			ea += a->ext[ia].len;
		}
		if (eb == end && ++ib < b->nextents) {
			sb = eb;
			eb += b->ext[ib].len;
		}
	}
	return diff + (a->size > b->size ? a->size - b->size : b->size - a->size);
}

static unsigned meta_diff(const struct cas_stream *a, const struct cas_stream *b)
{
	return (a->type != b->type ? M_TYPE : 0) | (a->mode != b->mode ? M_MODE : 0) |
		(a->mtime_ns != b->mtime_ns ? M_MTIME : 0) | (strcmp(a->target, b->target) ? M_TARGET : 0) |
		(strcmp(a->meta, b->meta) ? M_META : 0);
}

/* Fills d's figures; adds B's chunk bytes found anywhere in A to *dedup. */
static int stream_diff(struct sdiff *d, const struct shaset *all_a, uint64_t *dedup)
{
	const struct cas_stream *a = d->a, *b = d->b;
	if (!b) {
		d->status = ST_REMOVED;
		d->differ = a->size;
		return 0;
	}
	struct shaset sa = { 0 }, sb = { 0 };
	int rc = shaset_init(&sb, chunk_extents(b));
	if (rc == 0 && a)
		rc = shaset_init(&sa, chunk_extents(a));
	if (rc < 0) {
		free(sb.slot);
		return crest_errf(rc, "comparing stream %s", b->name);
	}
	if (a)
		for (uint64_t k = 0; k < a->nextents; k++)
			if (!a->ext[k].hole)
				shaset_add(&sa, a->ext[k].sha);
	for (uint64_t k = 0; k < b->nextents; k++) {
		const struct cas_extent *x = &b->ext[k];
		if (x->hole)
			continue;
		const bool in_a = a && shaset_has(&sa, x->sha);
		if (shaset_add(&sb, x->sha)) {
			d->chunks_b++;
			d->shared += in_a;
		}
		if (in_a)
			d->shared_bytes += x->len;
		if (shaset_has(all_a, x->sha))
			*dedup += x->len;
	}
	free(sa.slot);
	free(sb.slot);
	if (!a) {
		d->status = ST_ADDED;
		d->differ = b->size;
		return 0;
	}
	d->differ = bytes_differ(a, b);
	d->meta = meta_diff(a, b);
	d->status = d->differ || d->meta ? ST_CHANGED : ST_SAME;
	return 0;
}

/* ---- printing ---- */

static void print_size(char *buf, size_t cap, const struct cas_stream *st)
{
	if (st)
		fmt_bytes(st->size, buf, (unsigned)cap);
	else
		snprintf(buf, cap, "-");
}

static void print_human(const struct sdiff *d)
{
	const struct cas_stream *st = d->b ? d->b : d->a;
	char sa[32], sb[32], df[32], sh[48];
	print_size(sa, sizeof(sa), d->a);
	print_size(sb, sizeof(sb), d->b);
	fmt_bytes(d->differ, df, sizeof(df));
	if (d->b)
		snprintf(sh, sizeof(sh), "%llu/%llu", (unsigned long long)d->shared,
			 (unsigned long long)d->chunks_b);
	else
		snprintf(sh, sizeof(sh), "-");
	printf("%-8s %-8s %11s %11s %11s %13s  %s", status_name[d->status], cas_stream_type_name(st->type),
	       sa, sb, df, sh, st->name);
	if (d->meta) {
		printf(" (");
		for (unsigned k = 0, n = 0; k < NMETA; k++)
			if (d->meta & (1u << k))
				printf("%s%s", n++ ? "," : "", meta_name[k]);
		printf(")");
	}
	printf("\n");
}

static void print_json_size(const struct cas_stream *st)
{
	if (st)
		printf("%llu", (unsigned long long)st->size);
	else
		printf("null");
}

static void print_json(const struct sdiff *d, bool first)
{
	const struct cas_stream *st = d->b ? d->b : d->a;
	printf("%s\n  {\"name\": ", first ? "" : ",");
	json_str(stdout, st->name);
	printf(", \"status\": \"%s\", \"type\": \"%s\", \"size_a\": ", status_name[d->status],
	       cas_stream_type_name(st->type));
	print_json_size(d->a);
	printf(", \"size_b\": ");
	print_json_size(d->b);
	printf(", \"bytes_differ\": %llu, \"chunks_shared\": %llu, \"chunks_b\": %llu, \"shared_bytes\": %llu, "
	       "\"meta_changed\": [", (unsigned long long)d->differ, (unsigned long long)d->shared,
	       (unsigned long long)d->chunks_b, (unsigned long long)d->shared_bytes);
	for (unsigned k = 0, n = 0; k < NMETA; k++)
		if (d->meta & (1u << k))
			printf("%s\"%s\"", n++ ? ", " : "", meta_name[k]);
	printf("]}");
}

/* ---- the command ---- */

static int stream_cmp(const void *x, const void *y)
{
	return strcmp((*(const struct cas_stream *const *)x)->name, (*(const struct cas_stream *const *)y)->name);
}

/* m's streams by name, for the merge. */
static const struct cas_stream **sorted_streams(const struct cas_manifest *m)
{
	const struct cas_stream **v = malloc((m->nstreams ? m->nstreams : 1) * sizeof(*v));
	if (!v)
		return NULL;
	for (size_t i = 0; i < m->nstreams; i++)
		v[i] = &m->streams[i];
	qsort(v, m->nstreams, sizeof(*v), stream_cmp);
	return v;
}

static int load(struct cas_store *store, const char *name, uint8_t id[32], struct cas_manifest **m)
{
	int rc = cas_snapshot_resolve(store, name, id);
	return rc < 0 ? rc : cas_manifest_load(store, id, m);
}

static int diff_run(const struct cli *c, const uint8_t ida[32], const struct cas_manifest *ma,
		    const uint8_t idb[32], const struct cas_manifest *mb)
{
	const struct cas_stream **va = sorted_streams(ma), **vb = sorted_streams(mb);
	struct shaset all_a = { 0 };
	uint64_t na = 0;
	for (size_t i = 0; i < ma->nstreams; i++)
		na += chunk_extents(&ma->streams[i]);
	int rc = va && vb ? shaset_init(&all_a, na) : -ENOMEM;
	if (rc < 0) {
		free(va);
		free(vb);
		return crest_errf(rc, "comparing snapshots");
	}
	for (size_t i = 0; i < ma->nstreams; i++)
		for (uint64_t k = 0; k < ma->streams[i].nextents; k++)
			if (!ma->streams[i].ext[k].hole)
				shaset_add(&all_a, ma->streams[i].ext[k].sha);

	char ha[65], hb[65];
	cli_print_id(ha, ida);
	cli_print_id(hb, idb);
	if (c->json)
		printf("{\"a\": \"%s\", \"b\": \"%s\", \"streams\": [", ha, hb);
	else
		printf("a %s\nb %s\n%-8s %-8s %11s %11s %11s %13s  %s\n", ha, hb, "STATUS", "TYPE", "SIZE A",
		       "SIZE B", "DIFFER", "SHARED/CHUNKS", "NAME");
	uint64_t count[4] = { 0 }, differ = 0, shared = 0, dedup = 0, printed = 0;
	size_t i = 0, j = 0;
	while (i < ma->nstreams || j < mb->nstreams) {
		struct sdiff d = { 0 };
		int cmp = i == ma->nstreams ? 1 : j == mb->nstreams ? -1 : strcmp(va[i]->name, vb[j]->name);
		if (cmp <= 0)
			d.a = va[i++];
		if (cmp >= 0)
			d.b = vb[j++];
		rc = stream_diff(&d, &all_a, &dedup);
		if (rc < 0)
			break;
		count[d.status]++;
		differ += d.differ;
		shared += d.shared_bytes;
		if (c->json)
			print_json(&d, printed++ == 0);
		else if (d.status != ST_SAME)
			print_human(&d);
	}
	free(va);
	free(vb);
	free(all_a.slot);
	if (rc < 0) {
		if (c->json)
			printf("\n]}\n");   /* what was printed stays valid JSON; the error says why it stops */
		return rc;
	}
	if (c->json) {
		printf("%s], \"total\": {\"added\": %llu, \"removed\": %llu, \"changed\": %llu, \"same\": %llu, "
		       "\"bytes_differ\": %llu, \"bytes_a\": %llu, \"bytes_b\": %llu, \"shared_bytes\": %llu, "
		       "\"dedup_bytes\": %llu}}\n", ma->nstreams || mb->nstreams ? "\n" : "",
		       (unsigned long long)count[ST_ADDED], (unsigned long long)count[ST_REMOVED],
		       (unsigned long long)count[ST_CHANGED], (unsigned long long)count[ST_SAME],
		       (unsigned long long)differ, (unsigned long long)ma->logical_bytes,
		       (unsigned long long)mb->logical_bytes, (unsigned long long)shared,
		       (unsigned long long)dedup);
	} else {
		char b1[32], b2[32], b3[32], b4[32];
		printf("%llu same\ntotal: %llu added, %llu removed, %llu changed, %llu same; %s differ; "
		       "%s of B's %s shared with A's same-named streams, %s with any of A\n",
		       (unsigned long long)count[ST_SAME], (unsigned long long)count[ST_ADDED],
		       (unsigned long long)count[ST_REMOVED], (unsigned long long)count[ST_CHANGED],
		       (unsigned long long)count[ST_SAME], fmt_bytes(differ, b1, sizeof(b1)),
		       fmt_bytes(shared, b2, sizeof(b2)), fmt_bytes(mb->logical_bytes, b3, sizeof(b3)),
		       fmt_bytes(dedup, b4, sizeof(b4)));
	}
	return 0;
}

int cmd_diff(struct cli *c, int argc, char **argv)
{
	if (argc != 3)
		return cli_usage(c, "diff", "wants SNAPSHOT_A SNAPSHOT_B, %s", argc < 3 ? "not fewer" : "no more");
	struct cas_store *store;
	int rc = cli_store_open(c, CAS_READ, &store);
	if (rc < 0)
		return cli_fail(c, rc);
	uint8_t ida[32], idb[32];
	struct cas_manifest *ma = NULL, *mb = NULL;
	rc = load(store, argv[1], ida, &ma);
	if (rc == 0)
		rc = load(store, argv[2], idb, &mb);
	cas_close(store);
	if (rc == 0)
		rc = diff_run(c, ida, ma, idb, mb);
	if (ma)
		cas_manifest_free(ma);
	if (mb)
		cas_manifest_free(mb);
	return rc < 0 ? cli_fail(c, rc) : 0;
}
