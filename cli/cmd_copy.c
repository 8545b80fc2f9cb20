/* cmd_copy.c - crest push and crest pull: a snapshot copied between the
 * store and another one (cas/copy.h), as git pushes to and pulls from a
 * remote it names. */
#include "cas/copy.h"
#include "cli/commands.h"
#include "util/err.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/sha256.h"
#include "util/progress.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void on_progress(uint64_t sent, void *arg)
{
	progress_update(arg, sent);
}

/* A tag the destination has for another snapshot: said once. */
struct tag_note {
	const struct cli *c;
	const char *dst_name;
};

static void tag_taken(const char *tag, const uint8_t other[32], void *arg)
{
	const struct tag_note *t = arg;
	char hex[65];
	hex_encode(other, 32, hex);
	if (!t->c->quiet)
		fprintf(stderr, "%s: tag %s in %s names another snapshot (%.12s): left as it is\n", t->c->prog, tag,
			t->dst_name, hex);
}

/* One copy of id from src into the store at to (opened here for writing)
 * and its tags; what it did in *st and *tags. */
static int copy_into(const struct cli *c, const char *label, struct cas_store *src, const struct cli *dc,
		     const uint8_t id[32], struct cas_copy_stats *st, size_t *tags)
{
	struct cas_store *dst = NULL;
	int rc = cli_store_open(dc, CAS_WRITE, &dst);
	struct progress prog;
	progress_begin(&prog, label, 0, c->quiet || c->json);
	if (rc == 0)
		rc = cas_snapshot_copy(src, dst, id, on_progress, &prog, st);
	progress_end(&prog);
	struct tag_note note = { c, dc->store };
	if (rc == 0)
		rc = cas_snapshot_copy_tags(src, dst, id, tags, tag_taken, &note);
	if (dst)
		cas_close(dst);
	return rc;
}

/* key: the JSON member that names the snapshot ("pushed" beside a
 * checkpoint's own lines). */
static void print_copy(const struct cli *c, FILE *out, const char *verb, const char *key, const char *from,
		       const char *to, const char *other, const uint8_t id[32], const struct cas_copy_stats *st,
		       size_t tags, double secs)
{
	char hex[65];
	cli_print_id(hex, id);
	if (c->json) {
		fprintf(out, "{\"%s\": \"%s\", \"from\": ", key, hex);
		json_str(out, from);
		fprintf(out, ", \"to\": ");
		json_str(out, to);
		fprintf(out, ", \"snapshots\": %llu, \"present\": %llu, \"chunks\": %llu, \"chunks_sent\": %llu, "
			"\"bytes_sent\": %llu, \"raw_sent\": %llu, \"pieces_sent\": %llu, \"tags\": %zu, "
			"\"seconds\": %.3f}\n", (unsigned long long)st->snapshots, (unsigned long long)st->present,
			(unsigned long long)st->chunks, (unsigned long long)st->chunks_sent,
			(unsigned long long)st->bytes_sent, (unsigned long long)st->raw_sent,
			(unsigned long long)st->pieces_sent, tags, secs);
	} else if (!c->quiet && st->snapshots == st->present) {
		fprintf(out, "%.12s is in %s already: nothing sent\n", hex, to);
	} else if (!c->quiet) {
		char b1[32], b2[32], b3[32];
		fprintf(out, "%s %.12s %s %s: %llu of %llu chunks sent (%s stored, %s of data), %llu snapshot%s new%s, "
			"in %.2f s (%s/s)\n", verb, hex, strcmp(verb, "pulled") ? "to" : "from", other,
			(unsigned long long)st->chunks_sent, (unsigned long long)st->chunks,
			fmt_bytes(st->bytes_sent, b1, sizeof(b1)), fmt_bytes(st->raw_sent, b2, sizeof(b2)),
			(unsigned long long)(st->snapshots - st->present), st->snapshots - st->present == 1 ? "" : "s",
			st->present ? ", the rest there already" : "", secs,
			fmt_bytes(cli_rate(st->bytes_sent, secs), b3, sizeof(b3)));
	}
}

int cli_push_check(const struct cli *c, const char *to)
{
	if (fs_same_path(c->store, to))
		return crest_errx(-EINVAL, "--push-to %s is the store itself (--store)", to);
	if (c->init)
		return 0;
	struct cas_store *s;
	const int rc = cas_open(to, CAS_READ, &s);
	if (rc < 0)
		return crest_errctx(-EINVAL, "--push-to %s", to);
	cas_close(s);
	return 0;
}

int cli_push(const struct cli *c, struct cas_store *src, const char *to, const uint8_t id[32], FILE *out)
{
	struct cli dc = *c;
	dc.store = to;
	struct cas_copy_stats st = { 0 };
	size_t tags = 0;
	const uint64_t t0 = time_now_ns();
	const int rc = copy_into(c, "push", src, &dc, id, &st, &tags);
	if (rc < 0)
		return crest_errctx(rc, "pushing to %s", to);
	print_copy(c, out, "pushed", "pushed", cas_dir(src), to, to, id, &st, tags, cli_secs(time_now_ns() - t0));
	return 0;
}

/* push: from the store into other; pull: from other into the store. */
static int copy_cmd(struct cli *c, int argc, char **argv, bool push)
{
	const char *cmd = push ? "push" : "pull";
	if (argc != 3)
		return cli_usage(c, cmd, "wants SNAPSHOT STORE, %s", argc < 3 ? "not fewer" : "no more");
	const char *other = argv[2];
	if (fs_same_path(c->store, other))
		return cli_usage(c, cmd, "%s is the store itself (--store)", other);
	struct cli oc = *c;
	oc.store = other;
	/* The destination may be made (--init, as for any writer); the
	 * source must be there. */
	const struct cli *sc = push ? c : &oc, *dc = push ? &oc : c;
	struct cas_store *src = NULL;
	int rc = cas_open(sc->store, CAS_READ, &src);
	if (rc == 0)
		rc = cli_check_index(c, src);
	uint8_t id[32];
	if (rc == 0)
		rc = cas_snapshot_resolve(src, argv[1], id);
	struct cas_copy_stats st = { 0 };
	size_t tags = 0;
	const uint64_t t0 = time_now_ns();
	if (rc == 0)
		rc = copy_into(c, cmd, src, dc, id, &st, &tags);
	if (src)
		cas_close(src);
	if (rc < 0)
		return cli_fail(c, rc);
	print_copy(c, stdout, push ? "pushed" : "pulled", "snapshot", sc->store, dc->store, other, id, &st, tags,
		   cli_secs(time_now_ns() - t0));
	return 0;
}
int cmd_push(struct cli *c, int argc, char **argv)
{
	return copy_cmd(c, argc, argv, true);
}

int cmd_pull(struct cli *c, int argc, char **argv)
{
	return copy_cmd(c, argc, argv, false);
}
