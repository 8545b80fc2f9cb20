/*
 * manifest.h - what a snapshot is: metadata and named streams, each stream a
 * list of extents (a chunk reference or a hole of zeros).
 *
 * The encoding is little-endian and versioned; its SHA-256 is the snapshot
 * id. The summary kept for listings is the same encoding cut after the
 * header, so one decoder reads both.
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
};

int cas_manifest_encode(const struct cas_manifest *m, uint8_t **buf, size_t *len, size_t *head_len);
/* Decodes buf; -EBADMSG (no message set) when it is malformed. */
int cas_manifest_decode(const uint8_t *buf, size_t len, bool header_only, struct cas_manifest **out);
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
