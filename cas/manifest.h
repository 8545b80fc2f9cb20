/*
 * manifest.h - what a snapshot is: metadata and named streams, each stream a
 * list of extents (a chunk reference or a hole of zeros).
 *
 * The encoding is little-endian and versioned; its SHA-256 is the snapshot
 * id. The summary kept for listings is the same encoding cut after the
 * header, so one decoder reads both.
 *
 * A long extent list (a region of gigabytes has millions of extents) is not
 * inlined: it is cut into pieces, each stored apart under its own SHA-256,
 * which the manifest names. The id still covers every byte (a hash tree of
 * depth two); pieces are fetched, checked and decoded in parallel, and an
 * unchanged part of a region costs a later snapshot 48 bytes, not 2.6 MB.
 *
 * A piece that differs from the parent's piece at the same place in a few
 * extents is stored as a delta (manifest version 3): the id of a full piece,
 * its base, and the extents that replace some of the base's. A delta's base
 * is always a full piece (never a chain), and a later delta at that place
 * names the same base with every change since, until the changes pass a
 * quarter of the piece and a full piece starts again. So a checkpoint that
 * rewrote 2% of a region's chunks at random stores ~2% of its extent list,
 * not all of it, and a reader needs at most two pieces for any place.
 */
#ifndef CREST_CAS_MANIFEST_H
#define CREST_CAS_MANIFEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum cas_stream_type {
	CAS_STREAM_FILE = 1,     /* regular file from `crest put` */
	CAS_STREAM_DIR = 2,
	CAS_STREAM_SYMLINK = 3,
	CAS_STREAM_REGION = 4,   /* a library-registered memory region */
	CAS_STREAM_IMAGE = 5,    /* a CRIU image file */
	CAS_STREAM_JOBFILE = 6,  /* a file the checkpointed job held open */
	CAS_STREAM_BLOB = 7,     /* small metadata (process info, pickles) */
	CAS_STREAM_MEMBER = 8,   /* a job snapshot's rank (cas/jobsnap.h): no extents,
				  * size 0, target the member's 64-hex id, meta
				  * "gpu=UUID" or "" (format 5) */
};

struct cas_extent {
	uint64_t len;
	uint8_t sha[32];
	bool hole;        /* len zero bytes, nothing stored */
};

struct cas_stream {
	char *name;
	char *target;     /* symlink target, else "" */
	char *meta;       /* free-form "k=v;..." for the stream's producer, else "" */
	uint8_t type;
	uint32_t mode;
	int64_t mtime_ns;
	uint64_t size;
	uint64_t nextents;
	struct cas_extent *ext;
};

struct cas_label {
	char *key, *value;
};

/* A piece of a stream's extent list, stored apart (see above). */
struct cas_piece {
	uint8_t sha[32];         /* of its encoding */
	size_t stream;           /* index into streams */
	uint64_t first, n;       /* extents [first, first + n) of that stream */
	uint64_t bytes;          /* their lengths added up */
	size_t off, len;         /* encoding only: where it lies in cas_encoded.pbuf */
	/* A delta (see the top), as decoded or encoded: base is the full
	 * piece it changes; chg (decoded only, owned by the manifest) the
	 * nchg ascending indices, within the piece, of the extents it
	 * replaces. */
	bool delta;
	uint8_t base[32];
	uint32_t nchg;
	uint32_t *chg;
};

struct cas_manifest {
	uint64_t time_ns;          /* wall clock at capture */
	char *kind;                /* "files", "process", "library" */
	bool has_parent;
	uint8_t parent[32];
	uint64_t logical_bytes;    /* sum of stream sizes */
	size_t nlabels;
	struct cas_label *labels;
	size_t nstreams;
	struct cas_stream *streams;
	bool header_only;          /* decoded from a summary */
	unsigned version;          /* decoded only: the encoding's version */
	size_t npieces;            /* extent-list pieces named, in stream order */
	struct cas_piece *pieces;
};

/* An encoded manifest: the manifest itself (its first head_len bytes are the
 * summary) and the pieces it names, their encodings back to back in pbuf. */
struct cas_encoded {
	uint8_t *buf;
	size_t len, head_len;
	uint8_t *pbuf;
	struct cas_piece *pieces;
	size_t npieces;
	uint64_t encode_ns;        /* cas_commit_encode: what it took, for CREST_TRACE */
};

/* Encodes m, hashing the pieces (in parallel); -ENOMEM or -EIO (hashing).
 * base, when not NULL, is a fully loaded manifest (cas_manifest_load),
 * usually the parent: a piece of m that has a piece of base at the same
 * place (same stream name, same first extent and count) becomes a delta
 * against it where that is small enough (see the top). The caller makes
 * sure each delta's base is stored (cas_commit does, under the writer
 * lock, and encodes again without base if one is not). */
int cas_manifest_encode(const struct cas_manifest *m, const struct cas_manifest *base, struct cas_encoded *out);
void cas_encoded_free(struct cas_encoded *e);
/* Decodes buf; -EBADMSG (no message set) when it is malformed. A full decode
 * leaves the extents of pieced streams unset: the manifest is complete only
 * once cas_manifest_piece_decode has filled every piece in m->pieces
 * (cas_manifest_load in store.c does that). */
int cas_manifest_decode(const uint8_t *buf, size_t len, bool header_only, struct cas_manifest **out);
/* 1 when the piece encoding buf is a delta, with the id of its base in
 * base (unless NULL); 0 when it is a full piece; -EBADMSG when too short to tell. */
int cas_piece_base(const uint8_t *buf, size_t len, uint8_t base[32]);
/* Checks piece i's encoding against its SHA-256 and decodes it into place;
 * a delta also needs its base's encoding (bbuf, blen), which is checked
 * against the id the delta names (NULL for a full piece). -EBADMSG (no
 * message) when either does not match or is malformed, or a delta comes
 * without its base or in a manifest older than version 3. Safe to call
 * concurrently for different pieces. */
int cas_manifest_piece_decode(struct cas_manifest *m, size_t i, const uint8_t *buf, size_t len,
			      const uint8_t *bbuf, size_t blen);
void cas_manifest_free(struct cas_manifest *m);

/* Builders; they copy their strings. -ENOMEM on allocation failure. */
struct cas_manifest *cas_manifest_new(const char *kind);
int cas_manifest_label(struct cas_manifest *m, const char *key, const char *value);
const char *cas_manifest_get_label(const struct cas_manifest *m, const char *key);
struct cas_stream *cas_manifest_add_stream(struct cas_manifest *m, const char *name, uint8_t type);
int cas_stream_set_str(char **field, const char *value);
const struct cas_stream *cas_manifest_find(const struct cas_manifest *m, const char *name);
const char *cas_stream_type_name(uint8_t type);

#endif
