/*
 * crc32c.h - CRC32C (Castagnoli), the checksum in every pack record header.
 *
 * Where the CPU has AVX-512 and VPCLMULQDQ, input of 512 bytes or more is
 * folded by carry-less multiplication; where it has SSE4.2, its crc32
 * instruction (about 8 bytes a cycle per core) does the rest; elsewhere a
 * table. Chosen once at run time. The result is
 * the same either way, so a store written on one machine reads on another.
 */
#ifndef CREST_UTIL_CRC32C_H
#define CREST_UTIL_CRC32C_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* CRC32C of len bytes (standard: initial ~0, final xor ~0). */
uint32_t crc32c(const void *data, size_t len);

/* For tests and benches: the same by variant i (0 table, 1 the SSE4.2
 * instruction, 2 folding; more may come), in *out with its name in *name,
 * or *name NULL when this CPU lacks it. False past the last variant. */
bool crc32c_variant(int i, const void *data, size_t len, uint32_t *out, const char **name);

#endif
