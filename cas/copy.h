/*
 * copy.h - a snapshot copied from one store into another: crest push (to a
 * shared store) and crest pull (back from it), as git and restic copy
 * between repositories.
 *
 * Promises:
 *  - Only what the destination lacks is sent: chunks it already indexes,
 *    and pieces it already holds, are neither read nor written.
 *  - Every chunk sent is checked on the way: its record's header and
 *    CRC32C against the source's index (as every read is), and its bytes,
 *    unpacked, against its SHA-256. A chunk that does not check out fails
 *    the copy, naming it; nothing of the snapshot is then listed in the
 *    destination (the records written are cut, as any failed commit's).
 *  - The snapshot keeps its id: its manifest and pieces go over as
 *    encoded (each checked against its SHA-256 first), and records as
 *    stored (LZ4 or raw, the same bytes), so both stores name it alike.
 *  - A job snapshot (cas/jobsnap.h) brings its members, each committed
 *    before it, so it is never listed without them.
 *  - The destination commits it as any writer does (cas_commit_encoded):
 *    whole or not at all. Tags are not copied with it: the caller decides
 *    (cas_snapshot_copy_tags gives it those free in the destination; tags
 *    never move, and the destination may use the name for another).
 */
#ifndef CREST_CAS_COPY_H
#define CREST_CAS_COPY_H

#include <stdint.h>

#include "cas/cas.h"

struct cas_copy_stats {
	uint64_t snapshots;      /* committed in dst by this copy (a job's members too) */
	uint64_t present;        /* of those, already in dst: nothing sent for them */
	uint64_t chunks;         /* distinct chunks the snapshots use */
	uint64_t chunks_sent;    /* of those, the ones dst lacked */
	uint64_t bytes_sent;     /* records written (headers + stored bytes) */
	uint64_t raw_sent;       /* the bytes those chunks hold, unpacked */
	uint64_t pieces_sent;    /* extent-list pieces dst lacked */
};

/* Copies snapshot id from src (open for reading) into dst (open for
 * writing); 0, or a negative errno with a message. progress, if not NULL,
 * is called now and then with the bytes written so far (bytes_sent), from
 * the caller's thread. */
int cas_snapshot_copy(struct cas_store *src, struct cas_store *dst, const uint8_t id[32],
		      void (*progress)(uint64_t sent, void *arg), void *arg, struct cas_copy_stats *st);
/* The tags of snapshot id in src given to it in dst (open for writing)
 * where dst has them free; *given counts them. A tag dst has for another
 * snapshot is left as it is, and taken(tag, other, arg) is called for it
 * (taken may be NULL). 0, or a negative errno with a message. */
int cas_snapshot_copy_tags(struct cas_store *src, struct cas_store *dst, const uint8_t id[32], size_t *given,
			   void (*taken)(const char *tag, const uint8_t other[32], void *arg), void *arg);

#endif
