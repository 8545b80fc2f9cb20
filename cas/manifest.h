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
};

/* Encodes m, hashing the pieces (in parallel); -ENOMEM or -EIO (hashing). */
int cas_manifest_encode(const struct cas_manifest *m, struct cas_encoded *out);
void cas_encoded_free(struct cas_encoded *e);
/* Decodes buf; -EBADMSG (no message set) when it is malformed. A full decode
 * leaves the extents of pieced streams unset: the manifest is complete only
 * once cas_manifest_piece_decode has filled every piece in m->pieces
 * (cas_manifest_load in store.c does that). */
int cas_manifest_decode(const uint8_t *buf, size_t len, bool header_only, struct cas_manifest **out);
/* Checks piece i's encoding against its SHA-256 and decodes it into place:
 * -EBADMSG (no message) when it does not match or is malformed. Safe to
 * call concurrently for different pieces. */
int cas_manifest_piece_decode(struct cas_manifest *m, size_t i, const uint8_t *buf, size_t len);
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
