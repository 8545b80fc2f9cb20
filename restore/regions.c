/*
 * regions.c - a library snapshot back into registered regions; see
 * regions.h.
 */
#include "restore/regions.h"

#include "engine/engine.h"
#include "restore/gpu.h"
#include "util/err.h"
#include "util/par.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define RESTORE_WINDOW (64u << 20)          /* largest window: see restore_regions */
#define SEGMENT ENGINE_SEGMENT_BYTES

int restore_regions_match(const struct cas_manifest *m, const char *snap, const struct restore_region *r,
			  size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const struct cas_stream *st = cas_manifest_find(m, r[i].name);
		if (!st || st->type != CAS_STREAM_REGION)
			return crest_errx(-EINVAL, "snapshot %.12s has no region %s (registered with %zu bytes)",
					  snap, r[i].name, r[i].size);
		if (st->size != r[i].size)
			return crest_errx(-EINVAL, "region %s has %llu bytes in snapshot %.12s but %zu registered",
					  r[i].name, (unsigned long long)st->size, snap, r[i].size);
	}
	for (size_t i = 0; i < m->nstreams; i++) {
		const struct cas_stream *st = &m->streams[i];
		if (st->type != CAS_STREAM_REGION)
			continue;
		bool known = false;
		for (size_t k = 0; k < n && !known; k++)
			known = !strcmp(r[k].name, st->name);
		if (!known)
			return crest_errx(-EINVAL, "snapshot %.12s has region %s (%llu bytes), which is not registered",
					  snap, st->name, (unsigned long long)st->size);
	}
	return 0;
}

int restore_regions(const struct restore_ctx *c, const struct cas_manifest *m, const struct restore_region *r,
		    size_t nr, const bool *skip, const struct cudrv *d, struct pool *pool)
{
	int rc = restore_regions_match(m, c->snapshot, r, nr);
	if (rc < 0)
		return rc;
	size_t n = 0, ndev = 0;
	for (size_t i = 0; i < nr; i++) {
		n += r[i].size > 0 && !(skip && skip[i]);
		ndev += r[i].device && r[i].size && !(skip && skip[i]);
	}
	if (!n)
		return 0;
	if (ndev && !d)
		return crest_errx(-ENODEV, "restoring device regions: no GPU driver");
	struct restore_gpu_dst *dst = calloc(n, sizeof(*dst));
	struct pool_slice **sl = calloc(pool_nslices(pool), sizeof(*sl));
	const unsigned threads = c->threads ? c->threads : par_cores();
	/* Windows as large as two per thread allow, up to 64 MiB: a window is
	 * restored by walking the packs over the segments it covers (gpu.c),
	 * and the more of the segments that were ingested side by side it
	 * covers, the fewer records each walk passes over for nothing. Host
	 * regions need no staging and take the largest. */
	const size_t slice = pool_slice_bytes(pool);
	size_t win = (size_t)pool_nslices(pool) * slice / (2 * (size_t)threads);
	win = win > RESTORE_WINDOW ? RESTORE_WINDOW : win;
	win = win > slice ? slice : win;
	win -= win % SEGMENT;
	win = win < SEGMENT ? SEGMENT : win;
	const size_t per = slice / win;
	uint8_t **bufs = calloc((size_t)pool_nslices(pool) * per, sizeof(*bufs));
	rc = dst && sl && bufs ? 0 : crest_errf(-ENOMEM, "restoring device regions");
	size_t k = 0;
	for (size_t i = 0; rc == 0 && i < nr; i++) {
		if (!r[i].size || (skip && skip[i]))
			continue;
		if (!r[i].device)
			dst[k++] = (struct restore_gpu_dst){ .st = cas_manifest_find(m, r[i].name), .host = r[i].ptr };
		else
			dst[k++] = (struct restore_gpu_dst){ .st = cas_manifest_find(m, r[i].name), .ctx = r[i].ctx,
							     .dst = (CUdeviceptr)(uintptr_t)r[i].ptr };
	}
	/* Two windows per thread; take slices as they come, waiting only for
	 * the first (a checkpoint still being ingested holds the rest). */
	size_t want = ndev ? (2 * (size_t)threads + per - 1) / per : 0, got = 0, nbufs = 0;
	if (ndev && want < 1)
		want = 1;
	while (rc == 0 && got < want) {
		struct pool_slice *s = got == 0 || nbufs < 2 ? pool_take(pool) : pool_try_take(pool);
		if (!s)
			break;
		sl[got++] = s;
		for (size_t j = 0; j < per; j++)
			bufs[nbufs++] = s->p + j * win;
	}
	if (rc == 0) {
		struct restore_gpu_opts go = { .d = d, .bufs = bufs, .nbufs = (unsigned)nbufs,
					       .buf_bytes = ndev ? win : RESTORE_WINDOW, .win_step = SEGMENT };
		rc = restore_streams_to_device(c, dst, n, &go);
	}
	for (size_t i = 0; i < got; i++)
		pool_give(sl[i]);
	free(dst);
	free(sl);
	free(bufs);
	return rc;
}
