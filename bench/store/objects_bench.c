/*
 * objects_bench - what a commit's meta-log append costs through the objects
 * table (cas/objects.h) on the directory and on RADOS (issue 35): a commit
 * appends its records to the session's log and syncs them before its index
 * batch, so one append + sync is the log's share of every commit's latency.
 *
 *   objects_bench TARGET [N] [SIZE]
 *
 * TARGET: a directory (made if missing, its meta/ emptied of this bench's
 * object first) or rados:POOL[/NAMESPACE] (CEPH_CONF names the cluster).
 * Creates meta object 1, appends N (1000) records of SIZE (4K; K and M
 * suffixes) bytes one after the other, each followed by a sync, then reads
 * the object back whole and checks it, and removes it. Prints one RESULT
 * line: append+sync latency median, p99 and max, appends a second, the
 * read-back rate.
 */
#include "cas/objects.h"
#include "util/err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
	const double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static size_t size_arg(const char *s)
{
	char *end;
	size_t v = strtoull(s, &end, 10);
	if (*end == 'K' || *end == 'k')
		v <<= 10;
	else if (*end == 'M' || *end == 'm')
		v <<= 20;
	return v;
}

static int fail(const char *what)
{
	fprintf(stderr, "objects_bench: %s: %s\n", what, crest_errmsg());
	return 1;
}

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 4) {
		fprintf(stderr, "usage: objects_bench DIR|rados:POOL[/NAMESPACE] [N] [SIZE]\n");
		return 2;
	}
	const char *target = argv[1];
	const int n = argc > 2 ? atoi(argv[2]) : 1000;
	const size_t size = argc > 3 ? size_arg(argv[3]) : 4096;
	if (n < 1 || size < 1 || size > (64u << 20) || (uint64_t)n * size > (100u << 20)) {
		fprintf(stderr, "objects_bench: N and SIZE from 1, SIZE up to 64M, N * SIZE up to 100M (a RADOS "
			"object's limit is 128 MiB)\n");
		return 2;
	}
	const bool rados = !strncmp(target, "rados:", 6);
	struct cas_objects *o;
	if (!rados)
		mkdir(target, 0700);   /* EEXIST is fine; any other failure shows at the create */
	const int orc = rados ? cas_objects_rados.open(target + 6, target, &o) : cas_objects_dir.open(target, target, &o);
	if (orc < 0)
		return fail("opening the objects");
	(void)cas_obj_remove(o, CAS_OBJ_META, 1);
	struct cas_obj *f;
	if (cas_obj_create(o, CAS_OBJ_META, 1, &f) < 0 || cas_obj_sync_names(o, CAS_OBJ_META) < 0)
		return fail("creating meta object 1");
	uint8_t *rec = malloc(size), *back = malloc((size_t)n * size);
	double *lat = malloc((size_t)n * sizeof(*lat));
	if (!rec || !back || !lat)
		return 1;
	uint64_t x = 0x9e3779b97f4a7c15ull;
	const double t0 = now();
	for (int i = 0; i < n; i++) {
		for (size_t j = 0; j < size; j++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			rec[j] = (uint8_t)x;
		}
		memcpy(back + (size_t)i * size, rec, size);   /* what the read must give back */
		const double a = now();
		if (cas_obj_write(f, rec, size, (uint64_t)i * size) < 0 || cas_obj_sync(f) < 0)
			return fail("appending");
		lat[i] = now() - a;
	}
	const double t1 = now();
	uint8_t *got = malloc((size_t)n * size);
	const double r0 = now();
	if (!got || cas_obj_read(f, got, (size_t)n * size, 0) < 0)
		return fail("reading back");
	const double r1 = now();
	const int same = !memcmp(got, back, (size_t)n * size);
	cas_obj_close(f);
	if (cas_obj_remove(o, CAS_OBJ_META, 1) < 0 || cas_obj_sync_names(o, CAS_OBJ_META) < 0)
		return fail("removing meta object 1");
	cas_objects_close(o);
	qsort(lat, (size_t)n, sizeof(*lat), cmp_d);
	printf("RESULT target=%s appends=%d size=%zu append_sync_median_ms=%.3f p99_ms=%.3f max_ms=%.3f "
	       "appends_per_s=%.0f readback_MBps=%.0f readback_equal=%s\n",
	       rados ? "rados" : "directory", n, size, lat[n / 2] * 1e3, lat[(size_t)n * 99 / 100] * 1e3,
	       lat[n - 1] * 1e3, n / (t1 - t0), (double)n * size / (r1 - r0) / 1e6, same ? "yes" : "NO");
	free(rec);
	free(back);
	free(got);
	free(lat);
	return same ? 0 : 1;
}
