/* format.c - the small encoders of format.h that are not inline. */
#include "cas/format.h"

#include <errno.h>
#include <string.h>

void cas_file_header(uint8_t h[CAS_FILE_HEADER], const char *magic, uint32_t version, uint32_t num)
{
	memcpy(h, magic, 8);
	cas_le32_put(h + 8, version);
	cas_le32_put(h + 12, num);
}

int cas_file_header_check(const uint8_t h[CAS_FILE_HEADER], const char *magic, uint32_t *version,
			  uint32_t *num)
{
	if (memcmp(h, magic, 8))
		return -EBADMSG;
	*version = cas_le32_get(h + 8);
	*num = cas_le32_get(h + 12);
	return 0;
}
