/*
 * idset.h - sets of 32-byte ids (SHA-256s) as growable arrays, sorted on
 * demand and searched by bisection: what gc marks live, what verify finds
 * in the index and the logs, what a copy sends. Plain memory, no hashing:
 * ids are uniform already, and a sorted array is the smallest and fastest
 * to walk in order.
 */
#ifndef CREST_UTIL_IDSET_H
#define CREST_UTIL_IDSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Zero-initialised is empty. A set may also be laid over ids held
 * elsewhere ({ .v = ids, .n = n }): then it is only read, never added to
 * nor freed. */
struct idset {
	uint8_t (*v)[32];
	size_t n, cap;
	bool sorted;
};

/* Appends id (duplicates are kept until idset_seal); -ENOMEM. */
int idset_add(struct idset *s, const uint8_t id[32]);
/* Sorts, keeping duplicates (cheap when sorted already). */
void idset_sort(struct idset *s);
/* Sorts and drops duplicates. */
void idset_seal(struct idset *s);
/* Whether id is in s, which must be sorted (idset_sort or idset_seal
 * since the last add). */
bool idset_has(const struct idset *s, const uint8_t id[32]);
void idset_free(struct idset *s);

#endif
