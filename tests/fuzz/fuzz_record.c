/*
 * fuzz_record.c - chunk records read back from a pack whose bytes are
 * fuzzed: the header checks and decompression of cas_chunk_read (the index
 * path), the walk of cas_reader_next over a span, cas_reader_take and
 * cas_reader_check_raw (the restore fast path). A pack comes off a disk:
 * whatever it holds, a read is refused or correct, never a crash.
 *
 * One real store is made at start-up in a temporary directory; its index
 * holds one chunk whose record claims the first WINDOW bytes of pack
 * FUZZ_PACK, so that readers may walk that far. Each input is:
 *   21 bytes: an index value (cas_loc_decode) for cas_chunk_read; its pack
 *             is forced to FUZZ_PACK (the pack number is fuzz_loc's);
 *   the rest: the pack file's bytes.
 * The SHA-256 the chunk read expects is the one in the header at the
 * record's offset when there is one, so that the checks behind it are
 * reached.
 */
#include "cas/cas_int.h"
#include "cas/cas.h"
#include "util/sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "fuzz_record: %s fails\n", #c); abort(); } } while (0)
#define FUZZ_PACK 1u
#define WINDOW (1u << 20)
#define SPAN (256u << 10)

static struct cas_store *st;
static struct cas_reader *rd;
static int pack_fd = -1;
static uint8_t *raw, *scratch, *bounce, *span;
static const uint8_t anchor[32] = { 0xa5, 0x5a, 1, 2, 3 };
static char top[64];

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

/* libFuzzer ends a bounded run with exit(): the store goes with it. */
static void cleanup(void)
{
	if (top[0])
		nftw(top, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void setup(void)
{
	char tmpl[] = "/tmp/crest-fuzz-XXXXXX";
	CHECK(mkdtemp(tmpl));
	snprintf(top, sizeof(top), "%s", tmpl);
	atexit(cleanup);
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s/store", tmpl);
	struct cas_store *w;
	CHECK(cas_init(dir) == 0);
	CHECK(cas_open(dir, CAS_WRITE, &w) == 0);
	struct cas_index_entry e = { .loc = { .pack = FUZZ_PACK, .off = CAS_PACK_HEADER,
					      .stored = WINDOW - CAS_PACK_HEADER - CAS_REC_HEADER,
					      .raw = WINDOW - CAS_PACK_HEADER - CAS_REC_HEADER } };
	memcpy(e.sha, anchor, 32);
	struct cas_manifest *m = cas_manifest_new("files");
	uint8_t id[32];
	CHECK(m && cas_commit(w, &e, 1, m, NULL, NULL, id) == 0);
	cas_manifest_free(m);
	cas_close(w);
	CHECK(cas_open(dir, CAS_READ, &st) == 0);
	char path[4096];
	cas_pack_name(st, FUZZ_PACK, path, sizeof(path));
	pack_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	CHECK(pack_fd >= 0);
	CHECK(cas_reader_open(st, &rd) == 0);
	struct cas_cursor cur;
	CHECK(cas_reader_locate(rd, anchor, &cur) == 0);   /* readers may walk the window */
	raw = malloc(CAS_CHUNK_MAX);
	scratch = malloc(CAS_CHUNK_MAX);
	bounce = malloc(CAS_CHUNK_MAX);
	span = malloc(SPAN);
	CHECK(raw && scratch && bounce && span);
	/* The directory is left behind only if the process dies (a crash):
	 * it is small. */
}

/* The walk a restore makes, from the pack's first record. */
static void walk(void)
{
	struct cas_span sp = { .cur = { .pack = FUZZ_PACK, .off = CAS_PACK_HEADER, .valid = true },
			       .buf = span, .cap = SPAN };
	struct cas_rec rec;
	for (int i = 0; i < 4096 && cas_reader_next(rd, &sp, &rec) == 0; i++) {
		CHECK(rec.stored <= CAS_CHUNK_MAX && rec.hdr >= span &&
		      rec.hdr + CAS_REC_HEADER + rec.stored <= span + sp.len);
		const uint32_t len = rec.raw <= CAS_CHUNK_MAX ? rec.raw : CAS_CHUNK_MAX;
		int rc = cas_reader_take(rd, &rec, raw, len, bounce);
		CHECK(rc == 0 || rc == -EBADMSG);
		if (rec.codec == CAS_CODEC_RAW && rec.stored == rec.raw) {
			rc = cas_reader_check_raw(rec.hdr, rec.sha, rec.hdr + CAS_REC_HEADER, rec.raw);
			CHECK(rc == 0 || rc == -EBADMSG);
			if (rc == 0)
				CHECK(!memcmp(raw, rec.hdr + CAS_REC_HEADER, rec.raw));
			/* Asked for another chunk's id, the record is never
			 * taken for it: 1 (intact, another chunk's) exactly
			 * when it checked out above, else damaged. */
			uint8_t other[32];
			memcpy(other, rec.sha, 32);
			other[0] ^= 1;
			const int rc2 = cas_reader_check_raw(rec.hdr, other, rec.hdr + CAS_REC_HEADER, rec.raw);
			CHECK(rc2 == (rc == 0 ? 1 : -EBADMSG));
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!st)
		setup();
	if (size < CAS_LOC_BYTES)
		return 0;
	const uint8_t *pk = data + CAS_LOC_BYTES;
	const size_t plen = size - CAS_LOC_BYTES;
	CHECK(ftruncate(pack_fd, 0) == 0);
	CHECK(plen == 0 || pwrite(pack_fd, pk, plen, 0) == (ssize_t)plen);

	struct cas_loc loc;
	if (cas_loc_decode(data, CAS_LOC_BYTES, &loc) == 0) {
		loc.pack = FUZZ_PACK;
		uint8_t sha[32];
		memcpy(sha, anchor, 32);
		if (loc.off < plen && plen - loc.off >= CAS_REC_HEADER)
			memcpy(sha, pk + loc.off + CAS_REC_SHA, 32);
		int n = cas_chunk_read(st, sha, &loc, raw, CAS_CHUNK_MAX, scratch);
		CHECK(n < 0 || (uint32_t)n == loc.raw);
		if (n >= 0) {
			/* It checked out: the bytes are the record's, unpacked. */
			CHECK(loc.off + CAS_REC_HEADER + loc.stored <= plen);
			if (loc.codec == CAS_CODEC_RAW)
				CHECK(!memcmp(raw, pk + loc.off + CAS_REC_HEADER, loc.raw));
		}
	}
	walk();
	return 0;
}
