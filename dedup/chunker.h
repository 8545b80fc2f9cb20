/*
 * chunker.h - where chunk boundaries fall.
 *
 * Two chunkers, chosen per stream:
 *  - fixed: every `avg` bytes. Best for memory images, which change in place:
 *    a changed 4 KiB page dirties exactly the chunk that holds it.
 *  - cdc: content-defined (FastCDC with normalized chunking, level 2). A cut
 *    depends only on the 64 bytes before it, so an insertion moves boundaries
 *    only near the edit: best for files, whose contents shift.
 *
 * Both are pure functions of the bytes: the same input always gives the same
 * cuts, across runs and machines. The gear table is generated from a fixed
 * seed and must never change, or new snapshots stop deduplicating against old.
 */
#ifndef CREST_DEDUP_CHUNKER_H
#define CREST_DEDUP_CHUNKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum dedup_kind { DEDUP_FIXED = 0, DEDUP_CDC = 1 };

struct dedup_params {
	enum dedup_kind kind;
	uint32_t min, avg, max;     /* fixed: all three equal */
	uint64_t mask_s, mask_l;    /* cdc: stricter mask before avg, looser after */
};

#define DEDUP_SIZE_MIN 1024u
#define DEDUP_SIZE_MAX (4u << 20)

/* avg must be a power of two within [DEDUP_SIZE_MIN, DEDUP_SIZE_MAX]; cdc cuts
 * fall between avg/4 and avg*8. Returns -EINVAL with a message otherwise. */
int dedup_params_init(struct dedup_params *p, enum dedup_kind kind, uint32_t avg);

/* Parses "fixed" / "cdc"; -EINVAL otherwise. */
int dedup_kind_parse(const char *s, enum dedup_kind *out);
const char *dedup_kind_name(enum dedup_kind k);

/* Length of the chunk that starts at data[0]: in (0, len], and == len when
 * len <= min. The caller advances by it and calls again. */
size_t dedup_next(const struct dedup_params *p, const uint8_t *data, size_t len);

/* Whether dedup_next(p, data, len) returns cut, for a caller that knows no
 * position before cut is a cut point of these bytes: one that chunked the
 * same bytes data[0..cut) before, with the same p and any length >= cut,
 * and was given cut. (A cdc scan before cut applies the same masks at the
 * same places for every length >= cut: they depend on the length only from
 * min(length, avg) on, and only positions below length are scanned.) What
 * that chunking does not tell, this checks: that cut is where len would stop
 * (the end of what it may scan), or that the hash of the up to 64 bytes
 * before cut meets the mask len applies there. Costs at most 64 steps of the
 * hash, against the chunk's length for dedup_next. False for fixed chunking
 * (it needs no help) and for a cut that len cannot give. */
bool dedup_cut_holds(const struct dedup_params *p, const uint8_t *data, size_t len, size_t cut);

/* "cdc/2048/8192/65536", "fixed/4096": p's kind and sizes (cdc: min, avg,
 * max). Snapshots record it (engine.h, ENGINE_CHUNKING_LABEL), and a child
 * takes its parent's cuts only where the two names are equal: so whatever
 * else decides a cut and may ever change (the masks, the normalization,
 * where the hash starts) must change this name too. The gear table must
 * never change at all. buf must hold 40 bytes. */
void dedup_params_name(const struct dedup_params *p, char buf[40]);

/* True when all len bytes are zero: such chunks are stored as holes. */
int dedup_is_zero(const uint8_t *data, size_t len);

#endif
