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

static void verify_print_json(const struct verify_result *r, int rc, double secs)
{
	char hex[65];
	printf("{\"ok\": %s, \"snapshots\": %zu, \"damaged\": %zu, \"chunks\": %llu, \"bytes\": %llu, "
	       "\"bad_chunks\": %llu, \"seconds\": %.3f, \"results\": [", rc == 0 ? "true" : "false",
	       r->nsnaps, r->damaged, (unsigned long long)r->chunks, (unsigned long long)r->bytes,
	       (unsigned long long)r->bad, secs);
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

int cmd_verify(struct cli *c, int argc, char **argv)
{
	if (argc > 2)
		return cli_usage(c, "verify", "wants at most one SNAPSHOT, no more: %s", argv[2]);
	struct cas_store *store;
	int rc = cli_store_open(c, CAS_READ, &store);
	if (rc < 0)
		return cli_fail(c, rc);
	/* Commits the index lacks make the store not whole: verifying all of
	 * it fails; verifying one named snapshot only says so. */
	rc = cli_check_index(c, store);
	if (rc < 0 && argc == 2) {
		fprintf(stderr, "%s: warning: %s\n", c->prog, crest_errmsg());
		rc = 0;
	}
	if (rc < 0) {
		cas_close(store);
		return cli_fail(c, rc);
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
	uint64_t t0 = time_now_ns();
	if (rc == 0)
		rc = restore_verify(store, (const uint8_t (*)[32])ids, n, c->workers, c->quiet, &r);
	double secs = cli_secs(time_now_ns() - t0);
	free(ids);
	cas_close(store);
	/* The report: every snapshot asked for, damaged ones always (they are
	 * the answer), whole ones unless --quiet. */
	if (rc == 0 || rc == -EBADMSG) {
		if (c->json)
			verify_print_json(&r, rc, secs);
		else
			verify_print_text(c, &r);
	}
	if (rc == 0 && !c->json && !c->quiet) {
		char b[32];
		printf("ok: %zu snapshot%s, %llu chunks, %s re-read and re-hashed in %.2f s\n", n,
		       n == 1 ? "" : "s", (unsigned long long)r.chunks, fmt_bytes(r.bytes, b, sizeof(b)), secs);
	}
	restore_verify_free(&r);   /* it clears r: the summary above reads it first */
	return rc < 0 ? cli_fail(c, rc) : 0;
}
