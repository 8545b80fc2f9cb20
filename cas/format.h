/*
 * format.h - pure encodings of the store's small on-disk values, apart from
 * the store so that they can be tested and fuzzed without one.
 */
#ifndef CREST_CAS_FORMAT_H
#define CREST_CAS_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "cas/cas.h"

#define CAS_LOC_BYTES 21

/* A chunk index value: pack u32, off u64, stored u32, raw u32, codec u8,
 * little-endian. Decoding returns -EBADMSG (no message) when n is not
 * CAS_LOC_BYTES. */
void cas_loc_encode(const struct cas_loc *l, uint8_t b[CAS_LOC_BYTES]);
int cas_loc_decode(const uint8_t *b, size_t n, struct cas_loc *l);

#endif
