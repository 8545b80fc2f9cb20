/*
 * fuzz_manifest.c - cas_manifest_decode on arbitrary bytes, as a manifest
 * (full) and as a summary (header only): a manifest comes off a disk and
 * must be rejected, never crash or overread, however it is damaged.
 *
 * Beyond the sanitizers it checks what must hold of what decodes:
 *  - the summary decode of the same bytes agrees on the header;
 *  - a full manifest without pieces re-encodes to bytes that decode to the
 *    same streams and extents (pieces are the other target's).
 */
#include "cas/manifest.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "fuzz_manifest: %s fails\n", #c); abort(); } } while (0)

static void same_streams(const struct cas_manifest *a, const struct cas_manifest *b)
{
	CHECK(a->nstreams == b->nstreams);
	for (size_t i = 0; i < a->nstreams; i++) {
		const struct cas_stream *x = &a->streams[i], *y = &b->streams[i];
		CHECK(!strcmp(x->name, y->name) && !strcmp(x->target, y->target) && !strcmp(x->meta, y->meta));
		CHECK(x->type == y->type && x->mode == y->mode && x->mtime_ns == y->mtime_ns);
		CHECK(x->size == y->size && x->nextents == y->nextents);
		for (uint64_t j = 0; j < x->nextents; j++)
			CHECK(x->ext[j].len == y->ext[j].len && x->ext[j].hole == y->ext[j].hole &&
			      !memcmp(x->ext[j].sha, y->ext[j].sha, 32));
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cas_manifest *m = NULL, *h = NULL;
	const int full = cas_manifest_decode(data, size, false, &m);
	const int head = cas_manifest_decode(data, size, true, &h);
	CHECK(full == 0 || full == -EBADMSG);
	CHECK(head == 0 || head == -EBADMSG);
	if (full == 0) {
		/* Extents add up to the stream's size, and the summary is the
		 * manifest's first part: it decodes whenever the whole does. */
		for (size_t i = 0; i < m->nstreams; i++) {
			const struct cas_stream *s = &m->streams[i];
			uint64_t sum = 0;
			for (uint64_t j = 0; !m->npieces && j < s->nextents; j++)
				sum += s->ext[j].len;
			CHECK(m->npieces || sum == s->size);
		}
		CHECK(head == 0);
		CHECK(h->time_ns == m->time_ns && !strcmp(h->kind, m->kind) && h->has_parent == m->has_parent);
		CHECK(h->nlabels == m->nlabels && h->nstreams == m->nstreams && h->logical_bytes == m->logical_bytes);
	}
	if (full == 0 && m->npieces == 0) {
		struct cas_encoded enc;
		CHECK(cas_manifest_encode(m, NULL, &enc) == 0);
		struct cas_manifest *r = NULL;
		if (enc.npieces == 0) {   /* a long list is cut into pieces: not here */
			CHECK(cas_manifest_decode(enc.buf, enc.len, false, &r) == 0);
			same_streams(m, r);
			CHECK(r->nlabels == m->nlabels);
			for (size_t i = 0; i < m->nlabels; i++)
				CHECK(!strcmp(r->labels[i].key, m->labels[i].key) &&
				      !strcmp(r->labels[i].value, m->labels[i].value));
			cas_manifest_free(r);
		}
		cas_encoded_free(&enc);
	}
	cas_manifest_free(m);
	cas_manifest_free(h);
	return 0;
}
