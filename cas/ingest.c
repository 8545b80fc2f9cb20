/*
 * ingest.c - a big commit's chunk entries put into the index as table
 * files: sorted and written by several threads at once, then added by one
 * RocksDB ingest (step 2 of the commit in store.c's design notes).
 *
 * Why: a first checkpoint of 8 GiB commits 2 M chunk entries, and RocksDB
 * spent about 2 s of its 3.2 s commit inserting them into its memtable on
 * one thread, however the batch was cut or written (bench/RESULTS.md,
 * bench/store/index_batch.c). A table file needs no memtable: the entries
 * are written in key order straight into the format RocksDB reads, one
 * file per range of first bytes, and an ingest links the files into the
 * index in one step.
 *
 * The manifest's new extent-list pieces ('l') come along, one more file:
 * 86 MB of them for that checkpoint, which the commit's batch took 0.28 s
 * to log and insert, and every later open to replay until a flush.
 *
 * What it promises (the commit relies on each):
 *  - The entries of all parts, the pieces and the new pack ends ('p')
 *    arrive in one ingest: RocksDB records it as one edit of its MANIFEST, so after any
 *    crash either every file is in the index or none is. Entries thus
 *    never name bytes past a recorded end, and a commit in doubt whose
 *    ingest landed finds every one of its chunks indexed.
 *  - The files are synced before the ingest returns (RocksDB syncs a
 *    linked file and the directory), so what it added is durable then.
 *  - The files are written under names RocksDB does not take for its own
 *    (crest-ingest-N.tmp) in the index's directory, so the ingest links
 *    them rather than copies; a kill may leave some, which the next writer
 *    removes (cas_ingest_clean) and nothing ever reads.
 *  - A failed ingest can leave an index RocksDB cannot open, and the next
 *    writer then rebuilds it from the packs and meta logs (store_open), as
 *    `casctl repair` does. Seen by fault.points with RocksDB 7.8: the sync
 *    of the MANIFEST record that adds the files fails, RocksDB reports the
 *    ingest failed and deletes the files it linked, yet the record is on
 *    disk (a failed sync says nothing of what reached the disk), so the
 *    next open finds it naming files that are gone. A failed ingest keeps
 *    its own names of the files, and they tell the next writer that this
 *    may be why the index does not open.
 */
#include "cas/cas_int.h"
#include "util/endian.h"
#include "util/err.h"
#include "util/par.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PARTS_MAX 8            /* at most this many files, one per range */
#define PART_MIN 16384         /* entries a part has, at least */
#define PREFIX "crest-ingest-"

size_t cas_ingest_min(void)
{
	const char *v = getenv("CREST_COMMIT_INGEST_MIN");
	const long long x = v ? atoll(v) : 0;
	return x > 0 ? (size_t)x : 65536;
}

struct part {
	size_t from, n;        /* entries t[from .. from + n) */
	char path[4096];
};

struct job {
	struct cas_store *s;
	struct cas_index_entry *t;   /* the entries, grouped by part */
	struct part *parts;
	size_t nparts;               /* chunk parts; then the pieces, if any, and the ends */
	struct cas_ingest_piece *pv;
	size_t npv;
	const struct cas_pack_end *ends;
	size_t nends;
};

/* A table file opened: t, or NULL with a message (for want of memory). */
static struct cas_index_table *table_open(struct cas_store *s, const char *path)
{
	struct cas_index_table *t = cas_index_table_open(s->ix, path);
	if (!t)
		crest_errf(-ENOMEM, "writing %s", path);
	return t;
}

static int part_write(struct par *p, void *tls, size_t i)
{
	(void)tls;
	struct job *j = p->arg;
	struct part *pt = &j->parts[i];
	struct cas_index_entry *e = j->t + pt->from;
	cas_entries_sort(e, pt->n);
	struct cas_index_table *t = table_open(j->s, pt->path);
	if (!t)
		return -ENOMEM;
	char k[33];
	uint8_t v[CAS_LOC_BYTES];
	k[0] = 'c';
	for (size_t x = 0; x < pt->n; x++) {
		/* A table's keys must rise strictly. An id twice in one commit
		 * (each copy a committed record) keeps one of its places, as
		 * a batch would. */
		if (x + 1 < pt->n && !memcmp(e[x].sha, e[x + 1].sha, 32))
			continue;
		memcpy(k + 1, e[x].sha, 32);
		cas_loc_encode(&e[x].loc, v);
		cas_index_table_put(t, k, sizeof(k), v, sizeof(v));
	}
	const int rc = cas_index_table_finish(t, "index entries");
	if (rc == 0)
		p->bytes += pt->n;
	return rc;
}

static int end_cmp(const void *a, const void *b)
{
	const uint32_t x = ((const struct cas_pack_end *)a)->pack, y = ((const struct cas_pack_end *)b)->pack;
	return x < y ? -1 : x > y;
}

static int piece_cmp(const void *a, const void *b)
{
	return memcmp(((const struct cas_ingest_piece *)a)->sha, ((const struct cas_ingest_piece *)b)->sha, 32);
}

/* The pieces as one more table ('l' keys sort between 'c' and 'p'). */
static int pieces_write(struct cas_store *s, struct cas_ingest_piece *pv, size_t npv, const char *path)
{
	qsort(pv, npv, sizeof(*pv), piece_cmp);
	struct cas_index_table *t = table_open(s, path);
	if (!t)
		return -ENOMEM;
	char k[33];
	k[0] = 'l';
	for (size_t i = 0; i < npv; i++) {
		if (i + 1 < npv && !memcmp(pv[i].sha, pv[i + 1].sha, 32))
			continue;   /* the same piece twice in one manifest */
		memcpy(k + 1, pv[i].sha, 32);
		cas_index_table_put(t, k, sizeof(k), pv[i].p, pv[i].len);
	}
	return cas_index_table_finish(t, "extent-list pieces");
}

/* The ends as the last table: 'p' and the pack number big-endian sort
 * after every 'c' and 'l' key, so no two files of the ingest overlap. */
static int ends_write(struct cas_store *s, const struct cas_pack_end *ends, size_t nends, const char *path)
{
	struct cas_pack_end *v = malloc((nends ? nends : 1) * sizeof(*v));
	if (!v)
		return crest_errf(-ENOMEM, "indexing a commit in %s", s->dir);
	memcpy(v, ends, nends * sizeof(*v));
	qsort(v, nends, sizeof(*v), end_cmp);
	struct cas_index_table *t = table_open(s, path);
	if (!t) {
		free(v);
		return -ENOMEM;
	}
	for (size_t i = 0; i < nends; i++) {
		char k[5];
		uint8_t val[8];
		cas_key_num(k, 'p', v[i].pack);
		le64_put(val, v[i].end);
		cas_index_table_put(t, k, sizeof(k), val, sizeof(val));
	}
	free(v);
	return cas_index_table_finish(t, "pack ends");
}

/* File i of the ingest: a chunk part, the pieces, or the ends. The pieces
 * of a first 8 GiB checkpoint (86 MB) take about as long as a part, so
 * they are written beside the parts, not after them. */
static int file_write(struct par *p, void *tls, size_t i)
{
	struct job *j = p->arg;
	if (i < j->nparts)
		return part_write(p, tls, i);
	if (j->npv && i == j->nparts)
		return pieces_write(j->s, j->pv, j->npv, j->parts[i].path);
	return ends_write(j->s, j->ends, j->nends, j->parts[i].path);
}

int cas_entries_ingest(struct cas_store *s, const struct cas_index_entry *e, size_t n,
		       struct cas_ingest_piece *pv, size_t npv, const struct cas_pack_end *ends, size_t nends)
{
	assert(n > 0 && nends > 0);
	size_t np = n / PART_MIN;
	if (np > PARTS_MAX)
		np = PARTS_MAX;
	if (np < 1)
		np = 1;
	/* Parts by first byte: part b holds the ids whose first byte is in
	 * [256 b / np, 256 (b + 1) / np), so their key ranges do not meet. */
	struct part parts[PARTS_MAX + 2];   /* the chunk parts, the pieces, the ends */
	struct cas_index_entry *t = malloc(n * sizeof(*t));
	if (!t)
		return crest_errf(-ENOMEM, "indexing %zu chunk entries in %s", n, s->dir);
	size_t count[PARTS_MAX] = { 0 };
	for (size_t i = 0; i < n; i++)
		count[e[i].sha[0] * np / 256]++;
	size_t at[PARTS_MAX], from = 0;
	for (size_t b = 0; b < np; b++) {
		parts[b].from = at[b] = from;
		parts[b].n = count[b];
		from += count[b];
	}
	for (size_t i = 0; i < n; i++)
		t[at[e[i].sha[0] * np / 256]++] = e[i];
	/* Empty parts go: a table file cannot be empty. Files k (the pieces,
	 * when there are any) and nf - 1 (the ends) follow the chunk parts. */
	size_t k = 0;
	for (size_t b = 0; b < np; b++)
		if (parts[b].n)
			parts[k++] = parts[b];
	const size_t nf = k + (npv ? 2 : 1);
	for (size_t b = 0; b < nf; b++)
		snprintf(parts[b].path, sizeof(parts[b].path), "%s/index/" PREFIX "%zu.tmp", s->local, b);
	for (size_t b = 0; b < nf; b++)
		unlink(parts[b].path);
	struct job j = { .s = s, .t = t, .parts = parts, .nparts = k, .pv = pv, .npv = npv,
			 .ends = ends, .nends = nends };
	struct par p = { .n = nf, .fn = file_write, .arg = &j };
	const uint64_t t0 = time_now_ns();
	int rc = par_run(&p, (unsigned)nf, NULL, 0);
	const uint64_t t1 = time_now_ns();
	free(t);
	const bool tried = rc == 0;   /* the ingest itself was called */
	if (rc == 0) {
		const char *files[PARTS_MAX + 2];
		for (size_t b = 0; b < nf; b++)
			files[b] = parts[b].path;
		char what[64];
		snprintf(what, sizeof(what), "adding %zu chunk entries", n);
		rc = cas_index_ingest(s->ix, files, nf, what);
		if (getenv("CREST_TRACE"))
			fprintf(stderr, "crest trace: cas_ingest: %zu table files written %.3f s, ingested %.3f s\n",
				nf, (t1 - t0) / 1e9, (time_now_ns() - t1) / 1e9);
	}
	/* Linked into the index: these names go. A failed ingest keeps them,
	 * as the sign that the index may name files RocksDB removed (the
	 * notes at the top). */
	for (size_t b = 0; b < nf && !(rc < 0 && tried); b++)
		unlink(parts[b].path);
	return rc;
}

bool cas_ingest_left(const char *dir)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/index/" PREFIX "0.tmp", dir);
	return access(path, F_OK) == 0;
}

void cas_ingest_clean(const char *index_dir)
{
	DIR *d = opendir(index_dir);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		const size_t l = strlen(de->d_name);
		if (!strncmp(de->d_name, PREFIX, strlen(PREFIX)) && l > 4 && !strcmp(de->d_name + l - 4, ".tmp"))
			unlinkat(dirfd(d), de->d_name, 0);
	}
	closedir(d);
}
