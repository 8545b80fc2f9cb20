/*
 * fuzz_loc.c - cas_loc_decode, the chunk index value decoder: what it
 * accepts is safe to hand to the pack reader (a pack number whose table
 * index cannot wrap, a codec that exists), and encodes back to the same
 * bytes.
 */
#include "cas/cas.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "fuzz_loc: %s fails\n", #c); abort(); } } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cas_loc l;
	int rc = cas_loc_decode(data, size, &l);
	CHECK(rc == 0 || rc == -EBADMSG);
	if (rc < 0)
		return 0;
	CHECK(size == CAS_LOC_BYTES);
	/* pack_rfd in pack.c sizes its table pack + 16 entries (uint32_t). */
	CHECK(l.pack < CAS_PACK_NUM_MAX && (uint32_t)(l.pack + 16) > l.pack);
	CHECK(l.codec == CAS_CODEC_RAW || l.codec == CAS_CODEC_LZ4);
	uint8_t b[CAS_LOC_BYTES];
	cas_loc_encode(&l, b);
	CHECK(!memcmp(b, data, CAS_LOC_BYTES));
	return 0;
}
