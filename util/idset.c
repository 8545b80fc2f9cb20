/* idset.c - sorted arrays of 32-byte ids (idset.h). */
#include "util/idset.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

int idset_add(struct idset *s, const uint8_t id[32])
{
	if (s->n == s->cap) {
		const size_t cap = s->cap ? 2 * s->cap : 256;
		uint8_t(*nv)[32] = realloc(s->v, cap * 32);
		if (!nv)
			return -ENOMEM;
		s->v = nv;
		s->cap = cap;
	}
	memcpy(s->v[s->n++], id, 32);
	s->sorted = false;
	return 0;
}

static int id_cmp(const void *a, const void *b)
{
	return memcmp(a, b, 32);
}

void idset_sort(struct idset *s)
{
	if (!s->sorted && s->n > 1)
		qsort(s->v, s->n, 32, id_cmp);
	s->sorted = true;
}

void idset_seal(struct idset *s)
{
	idset_sort(s);
	size_t k = s->n ? 1 : 0;
	for (size_t i = 1; i < s->n; i++)
		if (memcmp(s->v[i], s->v[k - 1], 32))
			memcpy(s->v[k++], s->v[i], 32);
	s->n = k;
}

bool idset_has(const struct idset *s, const uint8_t id[32])
{
	assert(s->sorted || s->n < 2);
	return s->n && bsearch(id, s->v, s->n, 32, id_cmp) != NULL;
}

void idset_free(struct idset *s)
{
	free(s->v);
	*s = (struct idset){ 0 };
}
