/* cmd_store.c - casctl stats and verify: what the store holds, and whether
 * every chunk a snapshot needs is still what it was. */
#include "cli/commands.h"
#include "restore/restore.h"
#include "util/err.h"
#include "util/json.h"
#include "util/sha256.h"
#include "util/progress.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct stats_acc {
	uint64_t chunks, raw, stored;
};

static int stats_cb(const uint8_t sha[32], const struct cas_loc *loc, void *arg)
{
	(void)sha;
	struct stats_acc *a = arg;
	a->chunks++;
	a->raw += loc->raw;
	a->stored += loc->stored + CAS_REC_HEADER;
	return 0;
}

int cmd_stats(struct cli *c, int argc, char **argv)
{
	if (argc != 1)
		return cli_usage(c, "stats", "takes no operands: %s", argv[1]);
	struct cas_store *store;
	int rc = cli_store_open(c, CAS_READ, &store);
	if (rc < 0)
		return cli_fail(c, rc);
	struct cas_snapinfo *v = NULL;
	size_t n = 0;
	struct stats_acc a = { 0 };
	struct cas_pack_stats ps;
	struct cas_index_stats is;
	rc = cas_snapshot_list(store, &v, &n);
	if (rc == 0)
		rc = cas_index_foreach(store, stats_cb, &a);
	if (rc == 0)
		rc = cas_pack_stats(store, &ps);
	if (rc == 0)
		rc = cas_index_stats(store, &is);
	struct cas_meta_stats ms = { 0 };
	if (rc == 0)
		rc = cas_meta_stats(store, &ms);
	cas_close(store);
	if (rc < 0) {
		cas_snapshot_list_free(v, n);
		return cli_fail(c, rc);
	}
	uint64_t logical = 0;
	for (size_t i = 0; i < n; i++)
		logical += v[i].head->logical_bytes;
	cas_snapshot_list_free(v, n);
	/* dedup: logical bytes per unique byte; compression: unique bytes per
	 * byte stored (record headers included, so it is what the disk sees). */
	double dedup = a.raw ? (double)logical / (double)a.raw : 0;
	double comp = a.stored ? (double)a.raw / (double)a.stored : 0;
	if (c->json) {
		printf("{\"snapshots\": %zu, \"logical_bytes\": %llu, \"unique_bytes\": %llu, "
		       "\"stored_bytes\": %llu, \"dedup_ratio\": %.4f, \"compression_ratio\": %.4f, "
		       "\"chunks\": %llu, \"packs\": %llu, \"pack_bytes\": %llu, \"manifest_bytes\": %llu, "
		       "\"pieces\": %llu, \"piece_bytes\": %llu, \"meta_logs\": %llu, \"meta_log_bytes\": %llu}\n",
		       n, (unsigned long long)logical, (unsigned long long)a.raw, (unsigned long long)a.stored,
		       dedup, comp, (unsigned long long)a.chunks, (unsigned long long)ps.packs,
		       (unsigned long long)ps.pack_bytes, (unsigned long long)is.manifest_bytes,
		       (unsigned long long)is.pieces, (unsigned long long)is.piece_bytes, (unsigned long long)ms.logs,
		       (unsigned long long)ms.log_bytes);
	} else {
		char b[6][32];
		printf("store        %s\n", c->store);
		printf("snapshots    %zu\n", n);
		printf("logical      %s\n", fmt_bytes(logical, b[0], 32));
		printf("unique       %s\n", fmt_bytes(a.raw, b[1], 32));
		printf("stored       %s\n", fmt_bytes(a.stored, b[2], 32));
		printf("dedup        %.2fx\n", dedup);
		printf("compression  %.2fx\n", comp);
		printf("chunks       %llu\n", (unsigned long long)a.chunks);
		printf("packs        %llu (%s on disk)\n", (unsigned long long)ps.packs,
		       fmt_bytes(ps.pack_bytes, b[3], 32));
		printf("manifests    %s, and %llu extent-list pieces (%s)\n", fmt_bytes(is.manifest_bytes, b[4], 32),
		       (unsigned long long)is.pieces, fmt_bytes(is.piece_bytes, b[5], 32));
		printf("meta logs    %llu (%s on disk)\n", (unsigned long long)ms.logs, fmt_bytes(ms.log_bytes, b[0], 32));
	}
	return 0;
}

#define VERIFY_SHAS_SHOWN 4   /* bad chunks named per stream in text; --json names all */

static void verify_print_text(const struct cli *c, const struct verify_result *r)
{
	for (size_t k = 0; k < r->nsnaps; k++) {
		const struct verify_snap *vs = &r->snaps[k];
		char hex[65], b[32];
		cli_print_id(hex, vs->id);
		if (vs->error) {
			printf("DAMAGED %s  unreadable, all of it lost: %s\n", hex, vs->error);
			continue;
		}
		if (!vs->nloss) {
			if (!c->quiet)
				printf("ok      %s  %s, %zu streams, %s\n", hex, vs->m->kind, vs->m->nstreams,
				       fmt_bytes(vs->m->logical_bytes, b, sizeof(b)));
			continue;
		}
		printf("DAMAGED %s  %s: %s in %llu chunks lost, in %zu of %zu streams\n", hex, vs->m->kind,
		       fmt_bytes(vs->bad_bytes, b, sizeof(b)), (unsigned long long)vs->bad_chunks, vs->nloss,
		       vs->m->nstreams);
		for (size_t i = 0; i < vs->nloss; i++) {
			const struct verify_loss *l = &vs->loss[i];
			printf("        stream %s: %s in %llu chunks lost; bad:", l->stream,
			       fmt_bytes(l->bytes, b, sizeof(b)), (unsigned long long)l->chunks);
			for (size_t j = 0; j < l->nshas && j < VERIFY_SHAS_SHOWN; j++) {
				hex_encode(l->shas[j], 32, hex);
				printf(" %.16s", hex);
			}
			if (l->nshas > VERIFY_SHAS_SHOWN)
				printf(" and %zu more", l->nshas - VERIFY_SHAS_SHOWN);
			printf("\n");
		}
	}
	fflush(stdout);
}

struct vfaults;
static void vf_print_json(const struct vfaults *fs);

static void verify_print_json(const struct verify_result *r, const struct vfaults *fs, int rc, double secs)
{
	char hex[65];
	printf("{\"ok\": %s, \"snapshots\": %zu, \"damaged\": %zu, \"chunks\": %llu, \"bytes\": %llu, "
	       "\"bad_chunks\": %llu, \"seconds\": %.3f, \"faults\": ", rc == 0 ? "true" : "false",
	       r->nsnaps, r->damaged, (unsigned long long)r->chunks, (unsigned long long)r->bytes,
	       (unsigned long long)r->bad, secs);
	vf_print_json(fs);
	printf(", \"results\": [");
	for (size_t k = 0; k < r->nsnaps; k++) {
		const struct verify_snap *vs = &r->snaps[k];
		cli_print_id(hex, vs->id);
		printf("%s\n {\"snapshot\": \"%s\", \"ok\": %s, \"error\": ", k ? "," : "", hex,
		       vs->error || vs->nloss ? "false" : "true");
		if (vs->error)
			json_str(stdout, vs->error);
		else
			printf("null");
		printf(", \"lost_chunks\": %llu, \"lost_bytes\": %llu, \"streams\": [",
		       (unsigned long long)vs->bad_chunks, (unsigned long long)vs->bad_bytes);
		for (size_t i = 0; i < vs->nloss; i++) {
			const struct verify_loss *l = &vs->loss[i];
			printf("%s{\"name\": ", i ? ", " : "");
			json_str(stdout, l->stream);
			printf(", \"lost_chunks\": %llu, \"lost_bytes\": %llu, \"bad\": [", (unsigned long long)l->chunks,
			       (unsigned long long)l->bytes);
			for (size_t j = 0; j < l->nshas; j++) {
				hex_encode(l->shas[j], 32, hex);
				printf("%s\"%s\"", j ? ", " : "", hex);
			}
			printf("]}");
		}
		printf("]}");
	}
	printf("%s]}\n", r->nsnaps ? "\n" : "");
	fflush(stdout);
}

/* Store-wide faults (cas_check, and each bad chunk of restore_verify's),
 * one line each: where, what, and the snapshots it costs. */
struct vfault {
	char *where, *what;
	uint8_t (*ids)[32];
	size_t nids;
	uint8_t (*chunks)[32];   /* bad chunks this line already costs */
	size_t nchunks;
};
struct vfaults {
	struct vfault *v;
	size_t n;
	const struct verify_result *r;
};

static int vf_add_id(struct vfault *f, const uint8_t id[32])
{
	for (size_t i = 0; i < f->nids; i++)
		if (!memcmp(f->ids[i], id, 32))
			return 0;
	uint8_t (*ni)[32] = realloc(f->ids, (f->nids + 1) * 32);
	if (!ni)
		return -ENOMEM;
	f->ids = ni;
	memcpy(f->ids[f->nids++], id, 32);
	return 0;
}

/* Every snapshot restore_verify found losing chunk sha. */
static int vf_cost_chunk(struct vfault *f, const struct verify_result *r, const uint8_t sha[32])
{
	for (size_t k = 0; r && k < r->nsnaps; k++)
		for (size_t i = 0; i < r->snaps[k].nloss; i++)
			for (size_t j = 0; j < r->snaps[k].loss[i].nshas; j++)
				if (!memcmp(r->snaps[k].loss[i].shas[j], sha, 32) && vf_add_id(f, r->snaps[k].id) < 0)
					return -ENOMEM;
	return 0;
}

static struct vfault *vf_new(struct vfaults *fs, const char *where, const char *what)
{
	struct vfault *nv = realloc(fs->v, (fs->n + 1) * sizeof(*nv));
	if (!nv)
		return NULL;
	fs->v = nv;
	struct vfault *f = &nv[fs->n];
	memset(f, 0, sizeof(*f));
	f->where = strdup(where);
	f->what = strdup(what);
	if (!f->where || !f->what) {
		free(f->where);
		free(f->what);
		return NULL;
	}
	fs->n++;
	return f;
}

static int vf_cb(const struct cas_fault *cf, void *arg)
{
	struct vfaults *fs = arg;
	struct vfault *f = vf_new(fs, cf->where, cf->what);
	if (!f)
		return crest_errf(-ENOMEM, "verify");
	for (size_t i = 0; i < cf->nids; i++)
		if (vf_add_id(f, cf->ids[i]) < 0)
			return crest_errf(-ENOMEM, "verify");
	for (size_t i = 0; i < cf->nchunks; i++)
		if (vf_cost_chunk(f, fs->r, cf->chunks[i]) < 0)
			return crest_errf(-ENOMEM, "verify");
	if (cf->nchunks) {
		f->chunks = malloc(cf->nchunks * 32);
		if (!f->chunks)
			return crest_errf(-ENOMEM, "verify");
		memcpy(f->chunks, cf->chunks, cf->nchunks * 32);
		f->nchunks = cf->nchunks;
	}
	return 0;
}

/* One fault per bad chunk restore_verify found: where it is (its record,
 * or the index that lacks it) and every snapshot that uses it. A chunk
 * in pack bytes cas_check named is costed on that line instead. */
static int vf_chunks(struct cas_store *store, struct vfaults *fs, const struct verify_result *r)
{
	for (size_t k = 0; k < r->nsnaps; k++)
		for (size_t i = 0; i < r->snaps[k].nloss; i++)
			for (size_t j = 0; j < r->snaps[k].loss[i].nshas; j++) {
				const uint8_t *sha = r->snaps[k].loss[i].shas[j];
				char hex[65], where[4200], what[256];
				hex_encode(sha, 32, hex);
				bool done = false;
				for (size_t x = 0; x < fs->n && !done; x++)
					for (size_t y = 0; y < fs->v[x].nchunks && !done; y++)
						done = !memcmp(fs->v[x].chunks[y], sha, 32);
				for (size_t x = 0; x < fs->n && !done; x++)
					done = strstr(fs->v[x].what, hex) != NULL;
				struct cas_loc loc;
				const int lrc = cas_chunk_lookup(store, sha, &loc);
				if (lrc == 0) {
					snprintf(where, sizeof(where), "pack %s/packs/%08u.pack at %llu", cas_dir(store),
						 loc.pack, (unsigned long long)loc.off);
					snprintf(what, sizeof(what), "chunk %s does not read back whole (stderr says "
						 "how): every snapshot that uses it lost its bytes", hex);
				} else {
					snprintf(where, sizeof(where), "index %s/index, key 'c' %s", cas_dir(store), hex);
					snprintf(what, sizeof(what), "chunk %s is not in the index (or its pack is "
						 "lost): every snapshot that uses it lost its bytes", hex);
				}
				if (done)
					continue;
				struct vfault *f = vf_new(fs, where, what);
				if (!f || vf_cost_chunk(f, r, sha) < 0)
					return crest_errf(-ENOMEM, "verify");
			}
	return 0;
}

static void vf_free(struct vfaults *fs)
{
	for (size_t i = 0; i < fs->n; i++) {
		free(fs->v[i].where);
		free(fs->v[i].what);
		free(fs->v[i].ids);
		free(fs->v[i].chunks);
	}
	free(fs->v);
	memset(fs, 0, sizeof(*fs));
}

/* FAULT WHERE: WHAT; costs N snapshot(s): ID ID ... (or "costs no
 * snapshot"): the format casctl's help documents, one line per fault. */
static void vf_print_text(const struct vfaults *fs)
{
	char hex[65];
	for (size_t i = 0; i < fs->n; i++) {
		const struct vfault *f = &fs->v[i];
		printf("FAULT %s: %s; ", f->where, f->what);
		if (!f->nids)
			printf("costs no snapshot");
		else
			printf("costs %zu snapshot%s:", f->nids, f->nids == 1 ? "" : "s");
		for (size_t j = 0; j < f->nids; j++) {
			cli_print_id(hex, f->ids[j]);
			printf(" %s", hex);
		}
		printf("\n");
	}
}

static void vf_print_json(const struct vfaults *fs)
{
	char hex[65];
	printf("[");
	for (size_t i = 0; i < fs->n; i++) {
		const struct vfault *f = &fs->v[i];
		printf("%s\n {\"where\": ", i ? "," : "");
		json_str(stdout, f->where);
		printf(", \"what\": ");
		json_str(stdout, f->what);
		printf(", \"snapshots\": [");
		for (size_t j = 0; j < f->nids; j++) {
			cli_print_id(hex, f->ids[j]);
			printf("%s\"%s\"", j ? ", " : "", hex);
		}
		printf("]}");
	}
	printf("%s]", fs->n ? "\n" : "");
}

int cmd_verify(struct cli *c, int argc, char **argv)
{
	if (argc > 2)
		return cli_usage(c, "verify", "wants at most one SNAPSHOT, no more: %s", argv[2]);
	struct cas_store *store;
	int rc = cli_store_open(c, CAS_READ, &store);
	if (rc < 0)
		return cli_fail(c, rc);
	/* Commits the index lacks make the store not whole: verifying all of
	 * it names each (cas_check); verifying one named snapshot only says so. */
	char lost_msg[1024] = "";
	if (cli_check_index(c, store) < 0) {
		if (argc == 2)
			fprintf(stderr, "%s: warning: %s\n", c->prog, crest_errmsg());
		else
			crest_errcpy(lost_msg, sizeof(lost_msg));
	}
	uint8_t (*ids)[32] = NULL;
	size_t n = 0;
	if (argc == 2) {
		ids = malloc(32);
		rc = ids ? cas_snapshot_resolve(store, argv[1], ids[0]) : crest_errf(-ENOMEM, "verify");
		n = 1;
	} else {
		struct cas_snapinfo *v;
		rc = cas_snapshot_list(store, &v, &n);
		if (rc == 0) {
			ids = malloc((n ? n : 1) * 32);
			if (!ids)
				rc = crest_errf(-ENOMEM, "verify");
			for (size_t i = 0; ids && i < n; i++)
				memcpy(ids[i], v[i].id, 32);
			cas_snapshot_list_free(v, n);
		}
	}
	struct verify_result r = { 0 };
	struct vfaults fs = { .r = &r };
	uint64_t t0 = time_now_ns();
	if (rc == 0)
		rc = restore_verify(store, (const uint8_t (*)[32])ids, n, c->workers, c->quiet, &r);
	/* The whole store: every other byte a restore or a repair depends on
	 * (cas_check), then each bad chunk as a fault of its own. */
	char damaged_msg[1024] = "";
	if (rc == -EBADMSG)
		crest_errcpy(damaged_msg, sizeof(damaged_msg));
	int frc = 0;
	if ((rc == 0 || rc == -EBADMSG) && argc == 1)
		frc = cas_check(store, vf_cb, &fs);
	if ((rc == 0 || rc == -EBADMSG) && frc >= 0)
		frc = vf_chunks(store, &fs, &r);
	if (frc < 0)
		rc = frc;
	double secs = cli_secs(time_now_ns() - t0);
	free(ids);
	cas_close(store);
	if (rc == 0 && fs.n && lost_msg[0])
		rc = crest_errx(-EBADMSG, "%s; %zu fault%s (the FAULT lines above)", lost_msg, fs.n,
				fs.n == 1 ? "" : "s");
	else if (rc == 0 && fs.n)
		rc = crest_errx(-EBADMSG, "%s: %zu fault%s in the store (the FAULT lines above)", c->store, fs.n,
				fs.n == 1 ? "" : "s");
	else if (rc == -EBADMSG && damaged_msg[0])
		crest_errx(rc, "%s; %zu fault%s (the FAULT lines above)", damaged_msg, fs.n, fs.n == 1 ? "" : "s");
	/* The report: the faults, then every snapshot asked for, damaged ones
	 * always (they are the answer), whole ones unless --quiet. */
	if (rc == 0 || rc == -EBADMSG) {
		if (c->json) {
			verify_print_json(&r, &fs, rc, secs);
		} else {
			vf_print_text(&fs);
			verify_print_text(c, &r);
		}
	}
	if (rc == 0 && !c->json && !c->quiet) {
		char b[32];
		printf("ok: %zu snapshot%s, %llu chunks, %s re-read and re-hashed in %.2f s%s\n", n,
		       n == 1 ? "" : "s", (unsigned long long)r.chunks, fmt_bytes(r.bytes, b, sizeof(b)), secs,
		       argc == 1 ? "; every meta log, pack and index entry checked" : "");
	}
	vf_free(&fs);
	restore_verify_free(&r);   /* it clears r: the summary above reads it first */
	return rc < 0 ? cli_fail(c, rc) : 0;
}
