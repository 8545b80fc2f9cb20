/* format.c - the encoders and checks of the on-disk format that are not
 * inline (format.h), the chunk index value's encoding, and tag and
 * snapshot names (cas.h): pure functions, tested and fuzzed without a store. */
#include "cas/cas.h"
#include "util/err.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

void cas_file_header(uint8_t h[CAS_FILE_HEADER], const char *magic, uint32_t version, uint32_t num)
{
	memcpy(h, magic, 8);
	le32_put(h + CAS_FILE_HDR_VERSION, version);
	le32_put(h + CAS_FILE_HDR_NUM, num);
}

int cas_file_header_check(const uint8_t h[CAS_FILE_HEADER], const char *magic, uint32_t *version,
			  uint32_t *num)
{
	if (memcmp(h, magic, 8))
		return -EBADMSG;
	*version = le32_get(h + CAS_FILE_HDR_VERSION);
	*num = le32_get(h + CAS_FILE_HDR_NUM);
	return 0;
}

void cas_loc_encode(const struct cas_loc *l, uint8_t b[CAS_LOC_BYTES])
{
	le32_put(b, l->pack);
	le64_put(b + 4, l->off);
	le32_put(b + 12, l->stored);
	le32_put(b + 16, l->raw);
	b[20] = l->codec;
}

int cas_loc_decode(const uint8_t *b, size_t n, struct cas_loc *l)
{
	if (n != CAS_LOC_BYTES)
		return -EBADMSG;
	memset(l, 0, sizeof(*l));
	l->pack = le32_get(b);
	l->off = le64_get(b + 4);
	l->stored = le32_get(b + 12);
	l->raw = le32_get(b + 16);
	l->codec = b[20];
	/* A damaged entry must not reach the pack tables (pack + 16 would
	 * wrap in 32 bits) or a decoder that does not exist. */
	if (l->pack >= CAS_PACK_NUM_MAX || l->codec > CAS_CODEC_LZ4)
		return -EBADMSG;
	return 0;
}

static bool tag_ok(const char *tag)
{
	size_t n = strlen(tag);
	if (n == 0 || n > 128)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = tag[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '-' || c == '_' || c == '.' || c == '/' || c == '@' || c == '+'))
			return false;
	}
	return true;
}

int cas_tag_check(const char *tag)
{
	size_t n = strlen(tag);
	/* Names resolve tag first: a tag of 4 to 64 hex digits would hide
	 * every snapshot whose id starts with it. Old stores may hold such
	 * tags; they still resolve, only new ones are refused. */
	if (tag_ok(tag) && (cas_snapshot_name_kind(tag) & CAS_NAME_PREFIX))
		return crest_errx(-EINVAL, "tag '%s': 4 to 64 hex digits read as a snapshot id prefix; "
				  "add a letter past f", tag);
	if (tag_ok(tag) && !strncmp(tag, CAS_TAG_RESERVED, strlen(CAS_TAG_RESERVED)))
		return crest_errx(-EINVAL, "tag '%s': tags that start with '%s' are crest's own", tag,
				  CAS_TAG_RESERVED);
	if (tag_ok(tag) && !strcmp(tag, CAS_NAME_LATEST))
		return crest_errx(-EINVAL, "tag '%s': '%s' names the newest snapshot already", tag, CAS_NAME_LATEST);
	if (tag_ok(tag))
		return 0;
	if (n == 0 || n > 128)
		return crest_errx(-EINVAL, "tag '%s': must be 1 to 128 characters", tag);
	return crest_errx(-EINVAL, "tag '%s': only letters, digits and -_./@+ are allowed", tag);
}

int cas_snapshot_name_kind(const char *name)
{
	const size_t n = strlen(name);
	bool hex = n >= 4 && n <= 64;
	for (size_t i = 0; i < n && hex; i++)
		hex = (name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f') ||
		      (name[i] >= 'A' && name[i] <= 'F');
	return (tag_ok(name) ? CAS_NAME_TAG : 0) | (hex ? CAS_NAME_PREFIX : 0);
}
