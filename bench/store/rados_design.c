/*
 * rados_design - the design choices of crest's shared store on RADOS
 * (issue 35, items 2 and 6), measured with N writer processes against one
 * pool. Not the backend: what the backend's layout would cost.
 *
 *   rados_design data [-n N] [-u SIZE] [-c UNITS] [-o OVERLAP] [-q Q]
 *   rados_design index shared|perwriter|sharded [-n N] [-e E] [-b B] [-k K]
 *                [-l LOOKUPS] [-q Q]
 *   common: [-p POOL] [--osd-pid PID] [--keep]
 *
 * data: each writer puts UNITS (64) content-addressed units of SIZE bytes
 * (4M; K and M suffixes, powers of two) named by the SHA-256 of their
 * bytes, each with one write op (exclusive create + write_full), Q (16) in
 * flight; -EEXIST is a unit another writer (or this one) already stored:
 * counted as dedup, the object left untouched. A fraction OVERLAP (0.5) of
 * every writer's units is the same bytes in every writer (data-parallel
 * replicas), spread through its sequence so that writers race for them.
 * At the end the objects in the run's namespace are counted: they must be
 * the unique units exactly, and the created ones too, else exit 1.
 *
 * index: each writer inserts E (20000) entries, key the 64 hex digits of a
 * 32-byte id (the C API's paged scan takes its start key as a C string),
 * value 24 bytes (object, offset, length), B (1000) entries an op; an
 * OVERLAP share of them the same entries in every writer, as for data:
 *   shared     one omap object; each op compares the object's version
 *              xattr (cmpxattr EQ), sets the entries and the next version;
 *              the version is read just before (getxattr), so an op
 *              fails, -ECANCELED, only when another writer's op landed
 *              in between: it is read again and retried, and counted.
 *   perwriter  one omap object a writer, no guard (nothing contends);
 *              a reader merges the N objects.
 *   sharded    K (64, a power of two up to 256) omap objects by the id's
 *              first bits, each guarded as `shared`; a batch's sub-batches
 *              go to their shards at once (aio), retried per shard.
 *   --guard absent (shared, sharded): instead of the version, each op
 *              compares every key it sets with the empty value (omap_cmp:
 *              a key not there compares as empty), so it fails only when
 *              one of its keys is already there; those keys are read,
 *              dropped (dedup) and the rest retried. Disjoint inserts never
 *              conflict, whatever else is written to the object.
 * Then, from one reader: a full ordered scan (pages of 1000 keys; the
 * per-writer objects merged), checked in order and complete, and LOOKUPS
 * (10000) random ids, Q ops in flight, each one op (per-writer: one op on
 * each of the N objects), each checked found once with its value.
 *
 * Objects live in a namespace of their own (crest-design-PID), removed at
 * the end unless --keep. --osd-pid PID adds that process's CPU seconds
 * during the writers' phase (the OSD's); the machine's busy share of all
 * its cores over that phase (anyone's work, from /proc/stat) is printed
 * too, to tell a CPU-bound run, and one that shared the cores, apart. Prints one markdown table (a
 * header and one row) and one JSON line. Exit: 0 done, 1 failed (one line
 * why), 2 bad usage (one line). The cluster is CEPH_CONF's, the pool -p
 * or CREST_CEPH_POOL (default crest). MB are 10^6 bytes, as rados bench's.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <rados/librados.h>

#include "util/sha256.h"

#define MAX_WRITERS 64
#define KEY_HEX 64
#define VAL_LEN 24
#define PAGE_KEYS 1000

enum mode { M_DATA, M_INDEX };
enum design { D_SHARED, D_PERWRITER, D_SHARDED };
static const char *design_name[] = {"shared", "perwriter", "sharded"};

struct opts {
	enum mode mode;
	enum design design;
	int writers;
	uint64_t unit, units;
	double overlap;
	int q;
	uint64_t entries, batch, lookups;
	int shards, shard_bits;
	const char *pool;
	int osd_pid;
	int keep;
	int guard_absent;
};

/* What a writer sends back: fixed size, under PIPE_BUF. */
struct wresult {
	int writer, failed;
	double t0, t1;
	uint64_t created, skipped, ops, retries, reads;
	char why[160];
};

static struct opts O;
static char ns[64];

static void usage(const char *why)
{
	fprintf(stderr, "rados_design: %s (usage: rados_design data [-n N] [-u SIZE] [-c UNITS] [-o OVERLAP] [-q Q] | "
		"rados_design index shared|perwriter|sharded [-n N] [-e E] [-b B] [-k K] [-l LOOKUPS] [-q Q]; "
		"[-p POOL] [--osd-pid PID] [--keep])\n", why);
	exit(2);
}

static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("rados_design: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int parse_u64(const char *s, uint64_t min, uint64_t max, int suffix, uint64_t *out)
{
	char *end;
	errno = 0;
	if (*s < '0' || *s > '9')
		return -1;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno)
		return -1;
	if (suffix && (*end == 'K' || *end == 'k')) {
		if (v > (UINT64_MAX >> 10)) return -1;
		v <<= 10, end++;
	} else if (suffix && (*end == 'M' || *end == 'm')) {
		if (v > (UINT64_MAX >> 20)) return -1;
		v <<= 20, end++;
	}
	if (*end || v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

/* CPU seconds (user + system) of a process, or -1. */
static double proc_cpu(int pid)
{
	char path[64], buf[1024];
	if (pid <= 0)
		return -1;
	snprintf(path, sizeof path, "/proc/%d/stat", pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	char *p = strrchr(buf, ')');
	if (!p)
		return -1;
	unsigned long long ut, st;
	/* after ")": state ppid pgrp session tty tpgid flags minflt cminflt
	 * majflt cmajflt utime stime */
	if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
		return -1;
	return (double)(ut + st) / sysconf(_SC_CLK_TCK);
}

/* The machine's busy and total CPU ticks, all cores (/proc/stat): with
 * other work on the machine, whether a run had the cores to itself. */
static void machine_cpu(unsigned long long *busy, unsigned long long *total)
{
	unsigned long long v[10] = {0};
	*busy = *total = 0;
	FILE *f = fopen("/proc/stat", "r");
	if (!f)
		return;
	if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
		   &v[7]) == 8) {
		for (int i = 0; i < 8; i++)
			*total += v[i];
		*busy = *total - v[3] - v[4];
	}
	fclose(f);
}

static void connect_pool(rados_t *cl, rados_ioctx_t *io)
{
	int rc;
	if ((rc = rados_create2(cl, "ceph", "client.admin", 0)) < 0)
		die("rados_create2: %s", strerror(-rc));
	if ((rc = rados_conf_read_file(*cl, NULL)) < 0)
		die("reading the Ceph configuration (CEPH_CONF): %s", strerror(-rc));
	if ((rc = rados_connect(*cl)) < 0)
		die("connecting to the cluster: %s", strerror(-rc));
	if ((rc = rados_ioctx_create(*cl, O.pool, io)) < 0)
		die("pool %s: %s", O.pool, strerror(-rc));
	rados_ioctx_set_namespace(*io, ns);
}

/* ---- data ---- */

/* Unit j of a writer is a shared one when the running count of shared
 * units steps there: OVERLAP of them, spread evenly. */
static int unit_shared(uint64_t j, uint64_t *sidx)
{
	uint64_t a = (uint64_t)floor(j * O.overlap), b = (uint64_t)floor((j + 1) * O.overlap);
	*sidx = a;
	return b > a;
}

static uint64_t shared_units(void)
{
	return (uint64_t)floor(O.units * O.overlap);
}

struct slot {
	rados_completion_t c;
	rados_write_op_t op;
	uint8_t *buf;
	int busy;
};

static int slot_finish(struct slot *s, struct wresult *r)
{
	rados_aio_wait_for_complete(s->c);
	int rv = rados_aio_get_return_value(s->c);
	rados_aio_release(s->c);
	rados_release_write_op(s->op);
	s->busy = 0;
	r->ops++;
	if (rv == 0)
		r->created++;
	else if (rv == -EEXIST)
		r->skipped++;
	else {
		snprintf(r->why, sizeof r->why, "a unit's write failed: %s", strerror(-rv));
		return -1;
	}
	return 0;
}

static int data_writer(rados_ioctx_t io, int w, struct wresult *r)
{
	struct slot *sl = calloc(O.q, sizeof *sl);
	struct sha256_hasher *h;
	if (!sl || sha256_hasher_new(&h) < 0) {
		snprintf(r->why, sizeof r->why, "out of memory");
		return -1;
	}
	/* The same bytes in every writer, a header telling units apart: the
	 * OSD stores them as they come (no compression on the pool). */
	uint64_t x = 0x9e3779b97f4a7c15ull;
	for (int i = 0; i < O.q; i++) {
		if (posix_memalign((void **)&sl[i].buf, 4096, O.unit)) {
			snprintf(r->why, sizeof r->why, "out of memory for %d buffers", O.q);
			return -1;
		}
		uint64_t *p = (uint64_t *)sl[i].buf;
		x = 0x9e3779b97f4a7c15ull;
		for (uint64_t k = 0; k < O.unit / 8; k++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			p[k] = x;
		}
	}
	for (uint64_t j = 0; j < O.units; j++) {
		struct slot *s = &sl[j % O.q];
		if (s->busy && slot_finish(s, r) < 0)
			return -1;
		uint64_t sidx, *hdr = (uint64_t *)s->buf;
		if (unit_shared(j, &sidx))
			hdr[0] = UINT64_MAX, hdr[1] = sidx;
		else
			hdr[0] = (uint64_t)w, hdr[1] = j;
		hdr[2] = O.unit;
		uint8_t id[SHA256_LEN];
		char oid[SHA256_HEX_LEN + 1];
		if (sha256_hash(h, s->buf, O.unit, id) < 0) {
			snprintf(r->why, sizeof r->why, "SHA-256 failed");
			return -1;
		}
		hex_encode(id, SHA256_LEN, oid);
		s->op = rados_create_write_op();
		rados_write_op_create(s->op, LIBRADOS_CREATE_EXCLUSIVE, NULL);
		rados_write_op_write_full(s->op, (const char *)s->buf, O.unit);
		rados_aio_create_completion2(NULL, NULL, &s->c);
		int rc = rados_aio_write_op_operate(s->op, io, s->c, oid, NULL, 0);
		if (rc < 0) {
			snprintf(r->why, sizeof r->why, "rados_aio_write_op_operate: %s", strerror(-rc));
			return -1;
		}
		s->busy = 1;
	}
	for (int i = 0; i < O.q; i++)
		if (sl[i].busy && slot_finish(&sl[i], r) < 0)
			return -1;
	sha256_hasher_free(h);
	return 0;
}

/* ---- index ---- */

/* Entry i of writer w: its id and value. An OVERLAP share of them is the
 * same entry in every writer (the units replicas all put), the same value
 * too, spread through the sequence as the data's shared units are. */
static void entry_of(int w, uint64_t i, uint8_t id[SHA256_LEN], char v[VAL_LEN])
{
	uint64_t sidx, ow = (uint64_t)w;
	if (unit_shared(i, &sidx))
		ow = 0xffffffffull, i = sidx;
	uint64_t in[3] = {ow, i, 0x637265737469647full};
	sha256_once(in, sizeof in, id);
	uint64_t t[3] = {(ow << 32) | (i >> 4), (i & 15) << 22, 4194304};
	memcpy(v, t, VAL_LEN);
}

static uint64_t index_unique(void)
{
	uint64_t shared = (uint64_t)floor(O.entries * O.overlap);
	return (uint64_t)O.writers * (O.entries - shared) + shared;
}

static int shard_of(const uint8_t id[SHA256_LEN])
{
	return O.shard_bits ? id[0] >> (8 - O.shard_bits) : 0;
}

static void index_oid(int which, char *oid, size_t n)
{
	switch (O.design) {
	case D_SHARED: snprintf(oid, n, "idx"); break;
	case D_PERWRITER: snprintf(oid, n, "idx.w%03d", which); break;
	case D_SHARDED: snprintf(oid, n, "idx.s%03d", which); break;
	}
}

static int index_objects(void)
{
	return O.design == D_SHARED ? 1 : O.design == D_PERWRITER ? O.writers : O.shards;
}

/* One guarded op, --guard absent: every key compared with the empty value
 * (a key not there compares as empty), then set: the op fails whole,
 * -ECANCELED, when one of its keys is already in the object. */
static rados_write_op_t absent_op(const char **keys, const char **vals, const size_t *klen, const size_t *vlen,
				  size_t n, int *prv)
{
	rados_write_op_t op = rados_create_write_op();
	for (size_t k = 0; k < n; k++)
		rados_write_op_omap_cmp2(op, keys[k], LIBRADOS_CMPXATTR_OP_EQ, "", klen[k], 0, &prv[k]);
	rados_write_op_omap_set2(op, keys, vals, klen, vlen, n);
	return op;
}

/* After a failed absent_op: the keys of the sub-batch already there are
 * dropped from it (another writer inserted them: dedup). Returns how many
 * are left, or -errno. */
static long drop_present(rados_ioctx_t io, const char *oid, const char **keys, const char **vals, size_t *klen,
			 size_t *vlen, size_t n, uint64_t *dropped)
{
	rados_read_op_t op = rados_create_read_op();
	rados_omap_iter_t it;
	int prval = 0;
	rados_read_op_omap_get_vals_by_keys(op, keys, n, &it, &prval);
	int rc = rados_read_op_operate(op, io, oid, 0);
	if (rc < 0 || prval < 0) {
		rados_release_read_op(op);
		return rc < 0 ? rc : prval;
	}
	char *k, *v;
	size_t kl, vl, left = n;
	while (rados_omap_get_next2(it, &k, &v, &kl, &vl) == 0 && k) {
		for (size_t j = 0; j < left; j++)
			if (klen[j] == kl && !memcmp(keys[j], k, kl)) {
				left--;
				keys[j] = keys[left], vals[j] = vals[left], klen[j] = klen[left], vlen[j] = vlen[left];
				(*dropped)++;
				break;
			}
	}
	rados_omap_get_end(it);
	rados_release_read_op(op);
	return left;
}

/* One guarded op: compare the version, set the entries, bump it. */
static rados_write_op_t guarded_op(uint64_t ver, char vbuf[2][24], const char **keys, const char **vals,
				   const size_t *klen, const size_t *vlen, size_t n)
{
	rados_write_op_t op = rados_create_write_op();
	snprintf(vbuf[0], 24, "%" PRIu64, ver);
	snprintf(vbuf[1], 24, "%" PRIu64, ver + 1);
	rados_write_op_cmpxattr(op, "ver", LIBRADOS_CMPXATTR_OP_EQ, vbuf[0], strlen(vbuf[0]));
	rados_write_op_omap_set2(op, keys, vals, klen, vlen, n);
	rados_write_op_setxattr(op, "ver", vbuf[1], strlen(vbuf[1]));
	return op;
}

/* Sends ops[s] of every pending shard to its index object, all in flight
 * at once; -1 with r->why set when one cannot be sent. */
static int send_pending(rados_ioctx_t io, int K, const int *pending, rados_write_op_t *ops, rados_completion_t *comp,
			struct wresult *r)
{
	char oid[32];
	for (int s = 0; s < K; s++) {
		if (!pending[s])
			continue;
		index_oid(s, oid, sizeof oid);
		rados_aio_create_completion2(NULL, NULL, &comp[s]);
		const int rc = rados_aio_write_op_operate(ops[s], io, comp[s], oid, NULL, 0);
		if (rc < 0) {
			snprintf(r->why, sizeof r->why, "rados_aio_write_op_operate: %s", strerror(-rc));
			return -1;
		}
	}
	return 0;
}

/* Waits for an op send_pending sent, releases it, counts it: its result. */
static int op_result(rados_completion_t c, rados_write_op_t op, struct wresult *r)
{
	rados_aio_wait_for_complete(c);
	const int rc = rados_aio_get_return_value(c);
	rados_aio_release(c);
	rados_release_write_op(op);
	r->ops++;
	return rc;
}

static int index_writer(rados_ioctx_t io, int w, struct wresult *r)
{
	size_t B = O.batch;
	char *kh = malloc(B * (KEY_HEX + 1)), *vb = malloc(B * VAL_LEN);
	const char **keys = malloc(B * sizeof *keys), **vals = malloc(B * sizeof *vals);
	size_t *klen = malloc(B * sizeof *klen), *vlen = malloc(B * sizeof *vlen);
	int *shard = malloc(B * sizeof *shard);
	int K = O.design == D_SHARDED ? O.shards : 1;
	/* per shard: its entries' positions in the batch, as arrays */
	const char **skeys = malloc(B * sizeof *skeys), **svals = malloc(B * sizeof *svals);
	size_t *sklen = malloc(B * sizeof *sklen), *svlen = malloc(B * sizeof *svlen);
	size_t *sstart = calloc(K + 1, sizeof *sstart), *scount = calloc(K, sizeof *scount);
	uint64_t *ver = calloc(K, sizeof *ver);
	rados_completion_t *comp = calloc(K, sizeof *comp);
	rados_write_op_t *ops = calloc(K, sizeof *ops);
	char (*vbuf)[2][24] = calloc(K, sizeof *vbuf);
	int *pending = calloc(K, sizeof *pending);
	char (*vread)[24] = calloc(K, sizeof *vread);
	int *prv = calloc(B, sizeof *prv);
	if (!vread || !prv || !kh || !vb || !keys || !vals || !klen || !vlen || !shard || !skeys || !svals || !sklen || !svlen ||
	    !sstart || !scount || !ver || !comp || !ops || !vbuf || !pending) {
		snprintf(r->why, sizeof r->why, "out of memory");
		return -1;
	}
	char oid[32];
	int rc;
	for (uint64_t base = 0; base < O.entries; base += B) {
		size_t n = O.entries - base < B ? O.entries - base : B;
		for (size_t k = 0; k < n; k++) {
			uint8_t id[SHA256_LEN];
			entry_of(w, base + k, id, vb + k * VAL_LEN);
			hex_encode(id, SHA256_LEN, kh + k * (KEY_HEX + 1));
			keys[k] = kh + k * (KEY_HEX + 1), vals[k] = vb + k * VAL_LEN;
			klen[k] = KEY_HEX, vlen[k] = VAL_LEN;
			shard[k] = K > 1 ? shard_of(id) : 0;
		}
		if (O.design == D_PERWRITER) {
			index_oid(w, oid, sizeof oid);
			rados_write_op_t op = rados_create_write_op();
			rados_write_op_omap_set2(op, keys, vals, klen, vlen, n);
			rc = rados_write_op_operate(op, io, oid, NULL, 0);
			rados_release_write_op(op);
			r->ops++;
			if (rc < 0) {
				snprintf(r->why, sizeof r->why, "omap_set on %s: %s", oid, strerror(-rc));
				return -1;
			}
			continue;
		}
		/* Group by shard (one shard for `shared`), keeping key order. */
		memset(scount, 0, K * sizeof *scount);
		for (size_t k = 0; k < n; k++)
			scount[shard[k]]++;
		sstart[0] = 0;
		for (int s = 0; s < K; s++)
			sstart[s + 1] = sstart[s] + scount[s];
		memset(scount, 0, K * sizeof *scount);
		for (size_t k = 0; k < n; k++) {
			size_t at = sstart[shard[k]] + scount[shard[k]]++;
			skeys[at] = keys[k], svals[at] = vals[k], sklen[at] = klen[k], svlen[at] = vlen[k];
		}
		int left = 0;
		for (int s = 0; s < K; s++)
			left += pending[s] = scount[s] > 0;
		while (left && O.guard_absent) {
			for (int s = 0; s < K; s++)
				if (pending[s])
					ops[s] = absent_op(skeys + sstart[s], svals + sstart[s], sklen + sstart[s],
							   svlen + sstart[s], scount[s], prv + sstart[s]);
			if (send_pending(io, K, pending, ops, comp, r) < 0)
				return -1;
			for (int s = 0; s < K; s++) {
				if (!pending[s])
					continue;
				rc = op_result(comp[s], ops[s], r);
				index_oid(s, oid, sizeof oid);
				if (rc == -ECANCELED) {
					r->retries++;
					size_t a = sstart[s];
					long l = drop_present(io, oid, skeys + a, svals + a, sklen + a, svlen + a, scount[s],
							      &r->skipped);
					r->reads++;
					if (l < 0) {
						snprintf(r->why, sizeof r->why, "reading %s's keys: %s", oid, strerror((int)-l));
						return -1;
					}
					scount[s] = l;
					rc = l ? -ECANCELED : 0;
				}
				if (rc == 0) {
					pending[s] = 0;
					left--;
				} else if (rc != -ECANCELED) {
					snprintf(r->why, sizeof r->why, "guarded omap_set on %s: %s", oid, strerror(-rc));
					return -1;
				}
			}
		}
		while (left) {
			/* Read each pending object's version, all at once, then
			 * the guarded ops: a retry is a real race, another
			 * writer's op landing between the read and the write. */
			for (int s = 0; s < K; s++) {
				if (!pending[s])
					continue;
				index_oid(s, oid, sizeof oid);
				rados_aio_create_completion2(NULL, NULL, &comp[s]);
				if ((rc = rados_aio_getxattr(io, oid, comp[s], "ver", vread[s], sizeof vread[s] - 1)) < 0) {
					snprintf(r->why, sizeof r->why, "rados_aio_getxattr: %s", strerror(-rc));
					return -1;
				}
			}
			for (int s = 0; s < K; s++) {
				if (!pending[s])
					continue;
				rados_aio_wait_for_complete(comp[s]);
				rc = rados_aio_get_return_value(comp[s]);
				rados_aio_release(comp[s]);
				r->reads++;
				if (rc < 0) {
					snprintf(r->why, sizeof r->why, "reading a version: %s", strerror(-rc));
					return -1;
				}
				vread[s][rc] = 0;
				ver[s] = strtoull(vread[s], NULL, 10);
			}
			for (int s = 0; s < K; s++)
				if (pending[s])
					ops[s] = guarded_op(ver[s], vbuf[s], skeys + sstart[s], svals + sstart[s],
							    sklen + sstart[s], svlen + sstart[s], scount[s]);
			if (send_pending(io, K, pending, ops, comp, r) < 0)
				return -1;
			for (int s = 0; s < K; s++) {
				if (!pending[s])
					continue;
				rc = op_result(comp[s], ops[s], r);
				index_oid(s, oid, sizeof oid);
				if (rc == 0) {
					ver[s]++;
					pending[s] = 0;
					left--;
				} else if (rc == -ECANCELED) {
					r->retries++;
				} else {
					snprintf(r->why, sizeof r->why, "guarded omap_set on %s: %s", oid, strerror(-rc));
					return -1;
				}
			}
		}
	}
	return 0;
}

/* The index objects with version 0, before the writers start. */
static void index_prepare(rados_ioctx_t io)
{
	if (O.design == D_PERWRITER)
		return;
	for (int s = 0; s < index_objects(); s++) {
		char oid[32];
		index_oid(s, oid, sizeof oid);
		rados_write_op_t op = rados_create_write_op();
		rados_write_op_create(op, LIBRADOS_CREATE_EXCLUSIVE, NULL);
		rados_write_op_setxattr(op, "ver", "0", 1);
		int rc = rados_write_op_operate(op, io, oid, NULL, 0);
		rados_release_write_op(op);
		if (rc < 0)
			die("creating %s: %s", oid, strerror(-rc));
	}
}

struct kv {
	char key[KEY_HEX + 1];
	char val[VAL_LEN];
};

/* All of one object's entries, in key order, paged; returns the count. */
static size_t scan_object(rados_ioctx_t io, const char *oid, struct kv *out, size_t cap, uint64_t *ops)
{
	char after[KEY_HEX + 1] = "";
	size_t n = 0;
	for (;;) {
		rados_read_op_t op = rados_create_read_op();
		rados_omap_iter_t it;
		unsigned char more = 0;
		int prval = 0;
		rados_read_op_omap_get_vals2(op, after, NULL, PAGE_KEYS, &it, &more, &prval);
		int rc = rados_read_op_operate(op, io, oid, 0);
		(*ops)++;
		if (rc < 0 || prval < 0)
			die("scanning %s: %s", oid, strerror(-(rc < 0 ? rc : prval)));
		char *k, *v;
		size_t kl, vl;
		while (rados_omap_get_next2(it, &k, &v, &kl, &vl) == 0 && k) {
			if (n == cap || kl != KEY_HEX || vl != VAL_LEN)
				die("scanning %s: an entry too many or malformed (key %zu bytes, value %zu)", oid, kl, vl);
			memcpy(out[n].key, k, KEY_HEX);
			out[n].key[KEY_HEX] = 0;
			memcpy(out[n].val, v, VAL_LEN);
			n++;
		}
		rados_omap_get_end(it);
		rados_release_read_op(op);
		if (!more)
			break;
		if (!n)
			die("scanning %s: more announced, none returned", oid);
		memcpy(after, out[n - 1].key, KEY_HEX + 1);
	}
	return n;
}

struct scan_res {
	double secs;
	uint64_t ops;
};

static struct scan_res index_scan(rados_ioctx_t io)
{
	uint64_t total = (uint64_t)O.writers * O.entries, unique = index_unique();
	int nobj = index_objects();
	struct kv *all = malloc(total * sizeof *all), *out = malloc(total * sizeof *out);
	size_t *start = calloc(nobj + 1, sizeof *start), *pos = calloc(nobj, sizeof *pos);
	if (!all || !out || !start || !pos)
		die("out of memory for the scan");
	struct scan_res sr = {0};
	double t0 = now();
	size_t n = 0;
	for (int s = 0; s < nobj; s++) {
		char oid[32];
		index_oid(s, oid, sizeof oid);
		start[s] = n;
		n += scan_object(io, oid, all + n, total - n, &sr.ops);
	}
	start[nobj] = n;
	struct kv *ordered = all;
	if (O.design == D_PERWRITER) {
		/* merged on read: the smallest head of the N sorted runs */
		/* an id several writers inserted comes out once */
		for (int s = 0; s < nobj; s++)
			pos[s] = start[s];
		size_t o = 0;
		for (size_t m = 0; m < n; m++) {
			int best = -1;
			for (int s = 0; s < nobj; s++)
				if (pos[s] < start[s + 1] &&
				    (best < 0 || memcmp(all[pos[s]].key, all[pos[best]].key, KEY_HEX) < 0))
					best = s;
			if (!o || memcmp(out[o - 1].key, all[pos[best]].key, KEY_HEX))
				out[o++] = all[pos[best]];
			pos[best]++;
		}
		ordered = out;
		n = o;
	}
	sr.secs = now() - t0;
	if (n != unique)
		die("FAILED: the scan found %zu entries, %" PRIu64 " unique ones were inserted", n, unique);
	for (size_t i = 1; i < n; i++)
		if (memcmp(ordered[i - 1].key, ordered[i].key, KEY_HEX) >= 0)
			die("the scan is out of order at entry %zu", i);
	free(all), free(out), free(start), free(pos);
	return sr;
}

struct lslot {
	rados_completion_t c;
	rados_read_op_t op;
	rados_omap_iter_t it;
	int prval, busy;
	uint64_t lookup;
};

static uint64_t xs(uint64_t *x)
{
	*x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
	return *x;
}

static void lookup_done(struct lslot *s, char (*lkey)[KEY_HEX + 1], char (*lval)[VAL_LEN], uint8_t *found)
{
	rados_aio_wait_for_complete(s->c);
	int rc = rados_aio_get_return_value(s->c);
	if (rc < 0 || s->prval < 0)
		die("a lookup failed: %s", strerror(-(rc < 0 ? rc : s->prval)));
	char *k, *v;
	size_t kl, vl;
	while (rados_omap_get_next2(s->it, &k, &v, &kl, &vl) == 0 && k) {
		if (kl != KEY_HEX || memcmp(k, lkey[s->lookup], KEY_HEX) || vl != VAL_LEN ||
		    memcmp(v, lval[s->lookup], VAL_LEN))
			die("lookup %" PRIu64 " returned a wrong entry", s->lookup);
		found[s->lookup]++;
	}
	rados_omap_get_end(s->it);
	rados_release_read_op(s->op);
	rados_aio_release(s->c);
	s->busy = 0;
}

static struct scan_res index_lookups(rados_ioctx_t io)
{
	char (*lkey)[KEY_HEX + 1] = malloc(O.lookups * sizeof *lkey);
	char (*lval)[VAL_LEN] = malloc(O.lookups * sizeof *lval);
	int *lshard = malloc(O.lookups * sizeof *lshard);
	uint8_t *found = calloc(O.lookups, 1);
	struct lslot *sl = calloc(O.q, sizeof *sl);
	if (!lkey || !lval || !lshard || !found || !sl)
		die("out of memory for the lookups");
	uint64_t x = 0x2545f4914f6cdd1dull;
	for (uint64_t l = 0; l < O.lookups; l++) {
		int w = xs(&x) % O.writers;
		uint64_t i = xs(&x) % O.entries;
		uint8_t id[SHA256_LEN];
		entry_of(w, i, id, lval[l]);
		hex_encode(id, SHA256_LEN, lkey[l]);
		lshard[l] = O.design == D_SHARDED ? shard_of(id) : 0;
	}
	/* per-writer: the id may be in any writer's object, so every object */
	int per = O.design == D_PERWRITER ? O.writers : 1;
	struct scan_res lr = {0};
	double t0 = now();
	uint64_t nops = O.lookups * per;
	for (uint64_t o = 0; o < nops; o++) {
		struct lslot *s = &sl[o % O.q];
		if (s->busy)
			lookup_done(s, lkey, lval, found);
		s->lookup = o / per;
		char oid[32];
		index_oid(O.design == D_PERWRITER ? (int)(o % per) : lshard[s->lookup], oid, sizeof oid);
		const char *k = lkey[s->lookup];
		s->op = rados_create_read_op();
		rados_read_op_omap_get_vals_by_keys(s->op, &k, 1, &s->it, &s->prval);
		rados_aio_create_completion2(NULL, NULL, &s->c);
		int rc = rados_aio_read_op_operate(s->op, io, s->c, oid, 0);
		if (rc < 0)
			die("rados_aio_read_op_operate: %s", strerror(-rc));
		s->busy = 1;
		lr.ops++;
	}
	for (int i = 0; i < O.q; i++)
		if (sl[i].busy)
			lookup_done(&sl[i], lkey, lval, found);
	lr.secs = now() - t0;
	/* per-writer: a shared id is in several writers' objects */
	for (uint64_t l = 0; l < O.lookups; l++)
		if (found[l] < 1 || (O.design != D_PERWRITER && found[l] != 1))
			die("FAILED: lookup %" PRIu64 " found its id %u times", l, found[l]);
	free(lkey), free(lval), free(lshard), free(found), free(sl);
	return lr;
}

/* ---- the run ---- */

/* The run's objects: counted, and removed unless --keep. */
static uint64_t count_and_clean(rados_ioctx_t io, int remove)
{
	rados_list_ctx_t ctx;
	int rc = rados_nobjects_list_open(io, &ctx);
	if (rc < 0)
		die("listing the pool: %s", strerror(-rc));
	size_t cap = 1024, n = 0;
	char **names = malloc(cap * sizeof *names);
	const char *e;
	while ((rc = rados_nobjects_list_next(ctx, &e, NULL, NULL)) == 0) {
		if (n == cap)
			names = realloc(names, (cap *= 2) * sizeof *names);
		if (!names || !(names[n++] = strdup(e)))
			die("out of memory listing the pool");
	}
	rados_nobjects_list_close(ctx);
	if (rc != -ENOENT)
		die("listing the pool: %s", strerror(-rc));
	if (remove) {
		rados_completion_t *c = calloc(O.q, sizeof *c);
		for (size_t i = 0; i < n + O.q; i++) {
			size_t at = i % O.q;
			if (c[at]) {
				rados_aio_wait_for_complete(c[at]);
				rc = rados_aio_get_return_value(c[at]);
				rados_aio_release(c[at]);
				c[at] = NULL;
				if (rc < 0)
					die("removing an object: %s", strerror(-rc));
			}
			if (i < n) {
				rados_aio_create_completion2(NULL, NULL, &c[at]);
				if ((rc = rados_aio_remove(io, names[i], c[at])) < 0)
					die("removing %s: %s", names[i], strerror(-rc));
			}
		}
		free(c);
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return n;
}

int main(int argc, char **argv)
{
	O = (struct opts){.writers = 1, .unit = 4 << 20, .units = 64, .overlap = 0.5, .q = 16,
			  .entries = 20000, .batch = 1000, .lookups = 10000, .shards = 64, .osd_pid = -1};
	O.pool = getenv("CREST_CEPH_POOL");
	if (!O.pool || !*O.pool)
		O.pool = "crest";
	if (argc < 2)
		usage("a mode is needed");
	int first = 2;
	if (!strcmp(argv[1], "data"))
		O.mode = M_DATA;
	else if (!strcmp(argv[1], "index")) {
		O.mode = M_INDEX;
		if (argc < 3)
			usage("index needs a design");
		int d;
		for (d = 0; d < 3 && strcmp(argv[2], design_name[d]); d++)
			;
		if (d == 3)
			usage("the design is shared, perwriter or sharded");
		O.design = d;
		first = 3;
	} else
		usage("the mode is data or index");
	static const struct option lo[] = {{"osd-pid", 1, 0, 'P'}, {"keep", 0, 0, 'K'}, {"guard", 1, 0, 'G'}, {0, 0, 0, 0}};
	optind = first;
	int c;
	uint64_t v;
	while ((c = getopt_long(argc, argv, "n:u:c:o:q:e:b:k:l:p:", lo, NULL)) != -1) {
		switch (c) {
		case 'n':
			if (parse_u64(optarg, 1, MAX_WRITERS, 0, &v)) usage("-n takes 1 to 64 writers");
			O.writers = v;
			break;
		case 'u':
			if (parse_u64(optarg, 4096, 64 << 20, 1, &v) || (v & (v - 1))) usage("-u takes a power of two from 4K to 64M");
			O.unit = v;
			break;
		case 'c':
			if (parse_u64(optarg, 1, 1 << 24, 0, &O.units)) usage("-c takes 1 to 16M units");
			break;
		case 'o': {
			char *end;
			O.overlap = strtod(optarg, &end);
			if (*end || end == optarg || !(O.overlap >= 0 && O.overlap <= 1)) usage("-o takes a fraction from 0 to 1");
			break;
		}
		case 'q':
			if (parse_u64(optarg, 1, 1024, 0, &v)) usage("-q takes 1 to 1024");
			O.q = v;
			break;
		case 'e':
			if (parse_u64(optarg, 1, 10000000, 0, &O.entries)) usage("-e takes 1 to 10M entries");
			break;
		case 'b':
			if (parse_u64(optarg, 1, 100000, 0, &O.batch)) usage("-b takes 1 to 100000 entries");
			break;
		case 'k':
			if (parse_u64(optarg, 1, 256, 0, &v) || (v & (v - 1))) usage("-k takes a power of two from 1 to 256");
			O.shards = v;
			break;
		case 'l':
			if (parse_u64(optarg, 0, 10000000, 0, &O.lookups)) usage("-l takes 0 to 10M lookups");
			break;
		case 'p':
			if (!*optarg) usage("-p takes a pool name");
			O.pool = optarg;
			break;
		case 'P':
			if (parse_u64(optarg, 1, 1u << 30, 0, &v)) usage("--osd-pid takes a process id");
			O.osd_pid = v;
			break;
		case 'K':
			O.keep = 1;
			break;
		case 'G':
			if (!strcmp(optarg, "absent"))
				O.guard_absent = 1;
			else if (strcmp(optarg, "version"))
				usage("--guard takes version or absent");
			break;
		default:
			usage("unknown option");
		}
	}
	if (optind != argc)
		usage("unexpected operand");
	if (O.guard_absent && (O.mode != M_INDEX || O.design == D_PERWRITER))
		usage("--guard is for the shared and sharded index designs");
	while ((1 << O.shard_bits) < O.shards)
		O.shard_bits++;
	if (O.mode == M_DATA && (uint64_t)O.writers * O.q * O.unit > (8ull << 30))
		usage("writers x Q x SIZE buffers would pass 8 GiB");
	snprintf(ns, sizeof ns, "crest-design-%d", (int)getpid());

	/* The parent touches no librados before the writers are forked: a
	 * client made in the parent leaves its random state to every child,
	 * and the children then share one messenger address (nonce), so the
	 * OSD takes their connections for one client's and replaces them in
	 * turn: ops stall for seconds. The index's objects are made by a child
	 * of their own. */
	rados_t cl;
	rados_ioctx_t io;
	if (O.mode == M_INDEX) {
		pid_t p = fork();
		if (p < 0)
			die("fork: %s", strerror(errno));
		if (p == 0) {
			connect_pool(&cl, &io);
			index_prepare(io);
			rados_ioctx_destroy(io);
			rados_shutdown(cl);
			_exit(0);
		}
		int st;
		if (waitpid(p, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
			die("preparing the index objects failed");
	}

	int ready[2], go[2], res[2];
	if (pipe(ready) || pipe(go) || pipe(res))
		die("pipe: %s", strerror(errno));
	pid_t pids[MAX_WRITERS];
	for (int w = 0; w < O.writers; w++) {
		pids[w] = fork();
		if (pids[w] < 0)
			die("fork: %s", strerror(errno));
		if (pids[w] == 0) {
			close(ready[0]), close(go[1]), close(res[0]);
			struct wresult r = {.writer = w};
			connect_pool(&cl, &io);
			char b = 'r';
			if (write(ready[1], &b, 1) != 1 || read(go[0], &b, 1) != 1)
				_exit(1);
			r.t0 = now();
			int rc = O.mode == M_DATA ? data_writer(io, w, &r) : index_writer(io, w, &r);
			r.t1 = now();
			r.failed = rc < 0;
			if (write(res[1], &r, sizeof r) != sizeof r)
				_exit(1);
			rados_ioctx_destroy(io);
			rados_shutdown(cl);
			_exit(0);
		}
	}
	close(ready[1]), close(go[0]), close(res[1]);
	for (int w = 0; w < O.writers; w++) {
		char b;
		if (read(ready[0], &b, 1) != 1)
			die("a writer failed before it was ready");
	}
	double osd0 = proc_cpu(O.osd_pid);
	unsigned long long mb0, mt0, mb1, mt1;
	machine_cpu(&mb0, &mt0);
	char gos[MAX_WRITERS];
	memset(gos, 'g', sizeof gos);
	if (write(go[1], gos, O.writers) != O.writers)
		die("starting the writers: %s", strerror(errno));
	struct wresult rs[MAX_WRITERS];
	for (int w = 0; w < O.writers; w++) {
		struct wresult r;
		if (read(res[0], &r, sizeof r) != sizeof r)
			die("a writer died without a result");
		if (r.failed)
			die("writer %d: %s", r.writer, r.why);
		rs[r.writer] = r;
	}
	double osd1 = proc_cpu(O.osd_pid);
	machine_cpu(&mb1, &mt1);
	/* the share of all cores busy (anyone's work), 0-100 */
	double busy = mt1 > mt0 ? 100.0 * (mb1 - mb0) / (mt1 - mt0) : -1;
	for (int w = 0; w < O.writers; w++) {
		int st;
		if (waitpid(pids[w], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
			die("writer %d did not exit cleanly", w);
	}
	struct rusage ru;
	getrusage(RUSAGE_CHILDREN, &ru);
	double client_cpu = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
	double osd_cpu = osd0 >= 0 && osd1 >= 0 ? osd1 - osd0 : -1;

	double t0 = rs[0].t0, t1 = rs[0].t1, wmin = 1e30, wmax = 0;
	uint64_t created = 0, skipped = 0, ops = 0, retries = 0, reads = 0;
	for (int w = 0; w < O.writers; w++) {
		t0 = fmin(t0, rs[w].t0), t1 = fmax(t1, rs[w].t1);
		created += rs[w].created, skipped += rs[w].skipped, ops += rs[w].ops, retries += rs[w].retries;
		reads += rs[w].reads;
		double secs = rs[w].t1 - rs[w].t0;
		wmin = fmin(wmin, secs), wmax = fmax(wmax, secs);
	}
	double wall = t1 - t0;

	connect_pool(&cl, &io);
	if (O.mode == M_DATA) {
		uint64_t shared = shared_units();
		uint64_t unique = (uint64_t)O.writers * (O.units - shared) + shared;
		uint64_t objects = count_and_clean(io, !O.keep);
		double put = (double)O.writers * O.units * O.unit;
		double mbs = put / wall / 1e6, stored = (double)created * O.unit / wall / 1e6;
		double pw_min = (double)O.units * O.unit / wmax / 1e6, pw_max = (double)O.units * O.unit / wmin / 1e6;
		char u[32];
		if (O.unit >= (1 << 20))
			snprintf(u, sizeof u, "%" PRIu64 " MiB", O.unit >> 20);
		else
			snprintf(u, sizeof u, "%" PRIu64 " KiB", O.unit >> 10);
		printf("| writers | unit | units a writer | overlap | in flight | wall s | put MB/s | a writer MB/s (min-max) | "
		       "stored MB/s | created | skipped (dedup) | unique | pool objects | client CPU s | OSD CPU s | machine busy %% |\n");
		printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
		printf("| %d | %s | %" PRIu64 " | %.2f | %d | %.2f | %.1f | %.1f-%.1f | %.1f | %" PRIu64 " | %" PRIu64
		       " | %" PRIu64 " | %" PRIu64 " | %.2f | %.2f | %.0f |\n",
		       O.writers, u, O.units, O.overlap, O.q, wall, mbs, pw_min, pw_max, stored, created, skipped, unique,
		       objects, client_cpu, osd_cpu, busy);
		printf("{\"mode\":\"data\",\"writers\":%d,\"unit\":%" PRIu64 ",\"units_per_writer\":%" PRIu64
		       ",\"overlap\":%.3f,\"in_flight\":%d,\"wall_s\":%.4f,\"put_mbs\":%.2f,\"writer_mbs_min\":%.2f,"
		       "\"writer_mbs_max\":%.2f,\"stored_mbs\":%.2f,\"created\":%" PRIu64 ",\"skipped\":%" PRIu64
		       ",\"unique\":%" PRIu64 ",\"pool_objects\":%" PRIu64 ",\"client_cpu_s\":%.3f,\"osd_cpu_s\":%.3f,\"machine_busy_pct\":%.1f}\n",
		       O.writers, O.unit, O.units, O.overlap, O.q, wall, mbs, pw_min, pw_max, stored, created, skipped,
		       unique, objects, client_cpu, osd_cpu, busy);
		fflush(stdout);
		if (objects != unique || created != unique || created + skipped != (uint64_t)O.writers * O.units)
			die("FAILED: %" PRIu64 " objects in the pool and %" PRIu64 " created for %" PRIu64
			    " unique units (%" PRIu64 " skipped of %" PRIu64 " puts)",
			    objects, created, unique, skipped, (uint64_t)O.writers * O.units);
	} else {
		uint64_t total = (uint64_t)O.writers * O.entries, unique = index_unique();
		struct scan_res sc = index_scan(io);
		struct scan_res lk = {0};
		if (O.lookups)
			lk = index_lookups(io);
		uint64_t batches = (uint64_t)O.writers * ((O.entries + O.batch - 1) / O.batch);
		count_and_clean(io, !O.keep);
		int K = O.design == D_SHARDED ? O.shards : 1;
		const char *guard = O.design == D_PERWRITER ? "none" : O.guard_absent ? "absent" : "version";
		char label[64];
		if (O.design == D_PERWRITER)
			snprintf(label, sizeof label, "perwriter");
		else if (O.design == D_SHARED)
			snprintf(label, sizeof label, "shared, %s", guard);
		else
			snprintf(label, sizeof label, "sharded %d, %s", K, guard);
		double lps = O.lookups ? O.lookups / lk.secs : 0;
		printf("| design | writers | entries a writer | overlap | unique | batch | wall s | entries/s | write ops | guard reads | "
		       "retries | retries a batch | scan s | scan entries/s | lookups/s | ops a lookup | client CPU s | "
		       "OSD CPU s | machine busy %% |\n");
		printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
		printf("| %s | %d | %" PRIu64 " | %.2f | %" PRIu64 " | %" PRIu64 " | %.2f | %.0f | %" PRIu64 " | %" PRIu64
		       " | %" PRIu64 " | %.2f | %.3f | %.0f | %.0f | %d | %.2f | %.2f | %.0f |\n",
		       label, O.writers, O.entries, O.overlap, unique, O.batch, wall, total / wall, ops, reads, retries,
		       (double)retries / batches, sc.secs, unique / sc.secs, lps, O.design == D_PERWRITER ? O.writers : 1,
		       client_cpu, osd_cpu, busy);
		printf("{\"mode\":\"index\",\"design\":\"%s\",\"guard\":\"%s\",\"writers\":%d,"
		       "\"entries_per_writer\":%" PRIu64 ",\"overlap\":%.3f,\"unique\":%" PRIu64 ",\"batch\":%" PRIu64
		       ",\"shards\":%d,\"objects\":%d,\"wall_s\":%.4f,\"entries_per_s\":%.1f,\"write_ops\":%" PRIu64
		       ",\"guard_reads\":%" PRIu64 ",\"retries\":%" PRIu64 ",\"retries_per_batch\":%.3f,"
		       "\"present_dropped\":%" PRIu64 ",\"scan_s\":%.4f,\"scan_ops\":%" PRIu64
		       ",\"scan_entries_per_s\":%.1f,\"lookups\":%" PRIu64 ",\"lookup_s\":%.4f,"
		       "\"lookups_per_s\":%.1f,\"lookup_ops\":%" PRIu64 ",\"client_cpu_s\":%.3f,\"osd_cpu_s\":%.3f,"
		       "\"machine_busy_pct\":%.1f}\n",
		       design_name[O.design], guard, O.writers, O.entries, O.overlap, unique, O.batch, K, index_objects(),
		       wall, total / wall, ops, reads, retries, (double)retries / batches, skipped, sc.secs, sc.ops,
		       unique / sc.secs, O.lookups, lk.secs, lps, lk.ops, client_cpu, osd_cpu, busy);
	}
	rados_ioctx_destroy(io);
	rados_shutdown(cl);
	return 0;
}
