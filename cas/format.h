/*
 * format.h - pure encodings and checks of the store's small values (index
 * entries, tag and snapshot names), apart from the store so that they can be
 * tested and fuzzed without one. cas_tag_check (cas.h) lives here too.
 */
#ifndef CREST_CAS_FORMAT_H
#define CREST_CAS_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "cas/cas.h"

/* Pack numbers are below this: readers size per-pack tables by pack + a
 * margin in 32 bits, which must not wrap. */
#define CAS_PACK_NUM_MAX 0x7fffffffu
#define CAS_LOC_BYTES 21

/* A chunk index value: pack u32, off u64, stored u32, raw u32, codec u8,
 * little-endian. Decoding returns -EBADMSG (no message) when n is not
 * CAS_LOC_BYTES, the pack number is CAS_PACK_NUM_MAX or more, or the codec
 * is unknown. */
void cas_loc_encode(const struct cas_loc *l, uint8_t b[CAS_LOC_BYTES]);
int cas_loc_decode(const uint8_t *b, size_t n, struct cas_loc *l);

/* What a snapshot name may be (cas_snapshot_resolve tries a tag first,
 * then an id prefix): CAS_NAME_TAG when it is a valid tag, CAS_NAME_PREFIX
 * when it is 4 to 64 hex digits, both, or 0 for neither (an empty name). */
enum { CAS_NAME_TAG = 1, CAS_NAME_PREFIX = 2 };
int cas_snapshot_name_kind(const char *name);

#endif
