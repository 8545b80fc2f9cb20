/*
 * fuzz_names.c - names users type: tags (cas_tag_check) and what a
 * snapshot name can be (cas_snapshot_name_kind, the pure part of
 * cas_snapshot_resolve), checked against the rules written out again here.
 */
#include "cas/cas.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "fuzz_names: %s fails\n", #c); abort(); } } while (0)

static int tag_char(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("-_./@+", c);
}

static int hex_char(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);
	CHECK(s);
	memcpy(s, data, size);
	s[size] = 0;   /* a C string, as argv gives: it ends at the first NUL */
	const size_t n = strlen(s);
	int tag = n >= 1 && n <= 128, hex = n >= 4 && n <= 64;
	for (size_t i = 0; i < n; i++) {
		tag = tag && tag_char((unsigned char)s[i]) && s[i];
		hex = hex && hex_char((unsigned char)s[i]);
	}
	const int rc = cas_tag_check(s);
	CHECK(rc == 0 || rc == -EINVAL);
	/* A hex tag would shadow an id prefix; latest and crest.* are crest's. */
	const int own = !strcmp(s, CAS_NAME_LATEST) || !strncmp(s, CAS_TAG_RESERVED, strlen(CAS_TAG_RESERVED));
	CHECK((rc == 0) == (tag && !hex && !own));
	const int kind = cas_snapshot_name_kind(s);
	CHECK(kind >= 0);
	CHECK(!!(kind & CAS_NAME_TAG) == tag && !!(kind & CAS_NAME_PREFIX) == hex);
	free(s);
	return 0;
}
