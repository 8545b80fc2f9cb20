/*
 * crc32c.h - CRC32C (Castagnoli), the checksum in every pack record header.
 *
 * Where the CPU has SSE4.2 its crc32 instruction is used (about 8 bytes a
 * cycle per core); elsewhere a table, chosen once at run time. The result is
 * the same either way, so a store written on one machine reads on another.
 */
#ifndef CREST_UTIL_CRC32C_H
#define CREST_UTIL_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* CRC32C of len bytes (standard: initial ~0, final xor ~0). */
uint32_t crc32c(const void *data, size_t len);

#endif
