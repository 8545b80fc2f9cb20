/* format.c - the chunk index value's encoding; see format.h. */
#include "cas/format.h"

#include <errno.h>
#include <string.h>

void cas_loc_encode(const struct cas_loc *l, uint8_t b[CAS_LOC_BYTES])
{
	for (int i = 0; i < 4; i++)
		b[i] = (uint8_t)(l->pack >> (8 * i));
	for (int i = 0; i < 8; i++)
		b[4 + i] = (uint8_t)(l->off >> (8 * i));
	for (int i = 0; i < 4; i++)
		b[12 + i] = (uint8_t)(l->stored >> (8 * i));
	for (int i = 0; i < 4; i++)
		b[16 + i] = (uint8_t)(l->raw >> (8 * i));
	b[20] = l->codec;
}

int cas_loc_decode(const uint8_t *b, size_t n, struct cas_loc *l)
{
	if (n != CAS_LOC_BYTES)
		return -EBADMSG;
	memset(l, 0, sizeof(*l));
	for (int i = 0; i < 4; i++)
		l->pack |= (uint32_t)b[i] << (8 * i);
	for (int i = 0; i < 8; i++)
		l->off |= (uint64_t)b[4 + i] << (8 * i);
	for (int i = 0; i < 4; i++)
		l->stored |= (uint32_t)b[12 + i] << (8 * i);
	for (int i = 0; i < 4; i++)
		l->raw |= (uint32_t)b[16 + i] << (8 * i);
	l->codec = b[20];
	return 0;
}
