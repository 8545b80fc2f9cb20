/*
 * endian.h - fixed-width integers in byte buffers: little-endian, as every
 * integer in crest's files is (the store's packs, logs and manifests, the
 * host cache), and big-endian, as the numbers inside the store's index keys
 * are so that keys sort in numeric order. Byte by byte, so neither the
 * host's byte order nor the buffer's alignment matters.
 */
#ifndef CREST_UTIL_ENDIAN_H
#define CREST_UTIL_ENDIAN_H

#include <stdint.h>

static inline void le32_put(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint16_t le16_get(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static inline uint32_t le32_get(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline void le64_put(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint64_t le64_get(const uint8_t *p)
{
	return (uint64_t)le32_get(p) | (uint64_t)le32_get(p + 4) << 32;
}

static inline void be32_put(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (24 - 8 * i));
}

static inline uint32_t be32_get(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

#endif
