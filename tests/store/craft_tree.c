/*
 * craft_tree - writes a snapshot whose entries no real capture can give
 * (crest put stores what a directory holds): a symlink "a" and a file "a/x"
 * below it, for the test that crest get refuses to write through it; a
 * process snapshot whose labels are damaged, for the tests that crest
 * restore refuses it before it does anything to the host.
 *
 *   craft_tree STORE TAG ENTRY...
 *   ENTRY: d:NAME (directory), l:NAME:TARGET (symlink), f:NAME:TEXT (file),
 *          j:NAME:META (an empty job file stream, its meta "k=v;..."),
 *          L:KEY=VALUE (a label), k:KIND (the snapshot's kind, "files"
 *          unless given; it must come first)
 */
#include "engine/engine.h"
#include "util/err.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static void release(void *arg)
{
	(void)arg;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: craft_tree STORE TAG ENTRY...\n");
		return 2;
	}
	struct cas_store *store;
	struct engine *e;
	struct engine_snap *s;
	struct engine_opts o;
	engine_opts_default(&o);
	int rc = cas_init(argv[1]);
	if (rc == -EEXIST)
		rc = 0;
	if (rc == 0)
		rc = cas_open(argv[1], CAS_WRITE, &store);
	if (rc == 0 && (rc = engine_open(store, &o, &e)) < 0)
		cas_close(store);
	if (rc < 0) {
		fprintf(stderr, "craft_tree: %s\n", crest_errmsg());
		return 1;
	}
	const int has_kind = !strncmp(argv[3], "k:", 2);
	const char *kind = has_kind ? argv[3] + 2 : "files";
	rc = engine_snapshot_begin(e, kind, &s);
	if (rc == 0)
		rc = engine_snapshot_set_tag(s, argv[2]);
	for (int i = 3 + has_kind; rc == 0 && i < argc; i++) {
		char name[4096];
		const char *arg = argv[i] + 2, *colon = strchr(arg, ':');
		size_t n = colon ? (size_t)(colon - arg) : strlen(arg);
		snprintf(name, sizeof(name), "%.*s", (int)n, arg);
		if (argv[i][0] == 'L' && strchr(arg, '=')) {
			const char *eq = strchr(arg, '=');
			snprintf(name, sizeof(name), "%.*s", (int)(eq - arg), arg);
			rc = cas_manifest_label(engine_snapshot_manifest(s), name, eq + 1);
		} else if (argv[i][0] == 'j' && colon) {
			struct engine_stream *st;
			rc = engine_stream_open(s, name, CAS_STREAM_JOBFILE, false, &st);
			if (rc == 0) {
				engine_stream_meta(st)->mode = 0644;
				rc = cas_stream_set_str(&engine_stream_meta(st)->meta, colon + 1);
				int rc2 = engine_stream_close(st);
				if (rc == 0)
					rc = rc2;
			}
		} else if (argv[i][0] == 'd') {
			rc = engine_add_entry(s, name, CAS_STREAM_DIR, 0755, 0, NULL);
		} else if (argv[i][0] == 'l' && colon) {
			rc = engine_add_entry(s, name, CAS_STREAM_SYMLINK, 0777, 0, colon + 1);
		} else if (argv[i][0] == 'f' && colon) {
			struct engine_stream *st;
			rc = engine_stream_open(s, name, CAS_STREAM_FILE, false, &st);
			if (rc == 0) {
				engine_stream_meta(st)->mode = 0644;
				rc = engine_stream_add_memory(st, colon + 1, strlen(colon + 1), release, NULL);
				int rc2 = engine_stream_close(st);
				if (rc == 0)
					rc = rc2;
			}
		} else {
			fprintf(stderr, "craft_tree: bad entry %s\n", argv[i]);
			rc = -1;
		}
	}
	struct engine_result r;
	if (rc == 0) {
		engine_snapshot_seal(s);
		rc = engine_snapshot_wait(s, &r);
	} else {
		engine_snapshot_abort(s);
	}
	engine_close(e);
	cas_close(store);
	if (rc < 0)
		fprintf(stderr, "craft_tree: %s\n", crest_errmsg());
	return rc < 0;
}
