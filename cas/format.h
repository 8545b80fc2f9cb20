/*
 * format.h - the store's on-disk format, declared in one place; cas/FORMAT.md
 * describes it in words. Every integer on disk is little-endian, except the
 * numbers inside index keys, which are big-endian so that keys sort in
 * numeric order. Readers check versions: a store, pack or log newer than
 * this crest is refused with a message, never guessed at.
 */
#ifndef CREST_CAS_FORMAT_H
#define CREST_CAS_FORMAT_H

#include <stdint.h>

#include "util/endian.h"   /* le32_put and the rest: the byte order above */

/* STORE/FORMAT holds "crest-store N\n". Version 1: packs and the index.
 * Version 2 adds the meta log and the 'p' and 'q' index keys; a writer
 * upgrades a version 1 store when it opens it, and reads it as it was.
 * Version 3 lets extent-list pieces be deltas (manifests of version 3,
 * manifest.h), which an older crest would take for damage; a writer
 * rewrites a version 2 store's FORMAT, and nothing else changes.
 * Version 4 adds branch refs: tags named CAS_BRANCH_REF_PREFIX NAME point
 * branch NAME at a snapshot (cas/history.h). An older crest would take one
 * for a user's tag, and its gc could expire the branch's only snapshot; a
 * writer rewrites an older store's FORMAT, and nothing else changes.
 * Version 5 adds job snapshots (cas/jobsnap.h): manifests of kind "job"
 * whose streams of type CAS_STREAM_MEMBER name other snapshots, which gc
 * must keep with them. An older crest's gc would expire them on their own
 * and leave a job snapshot naming deleted ranks; a writer rewrites an older
 * store's FORMAT, and nothing else changes. */
#define CAS_FORMAT_VERSION 5
/* Tags whose names start with this are crest's own (a user's tag may not):
 * CAS_BRANCH_REF_PREFIX NAME is branch NAME's ref. Listings leave them out. */
#define CAS_TAG_RESERVED "crest."
#define CAS_BRANCH_REF_PREFIX "crest.branch/"
#define CAS_FORMAT_OLDEST 1

/* Packs (STORE/packs/NNNNNNNN.pack) and meta logs (STORE/meta/NNNNNNNN.log)
 * start with a 16-byte header: magic[8], u32 version, u32 file number. */
#define CAS_FILE_HEADER 16
#define CAS_FILE_HDR_VERSION 8   /* offsets of the version and file number */
#define CAS_FILE_HDR_NUM 12
#define CAS_PACK_MAGIC "CRESTPAK"
#define CAS_PACK_VERSION 1
#define CAS_META_MAGIC "CRESTMET"
/* 2: a log of a store on RADOS, which may hold CAS_META_CHUNKS records; a
 * directory's logs stay at 1. */
#define CAS_META_VERSION 2
#define CAS_META_VERSION_DIR 1
/* File numbers stay below this: index values and names are checked against it. */
#define CAS_FILE_NUM_MAX 0x7fffffffu

/* Records, in packs and meta logs alike: a 56-byte header, then the payload.
 *   0 magic[4]  4 u8 codec (packs) / kind (meta)  5 three zero bytes
 *   8 u32 raw length  12 u32 stored length (meta: 0)
 *  16 u32 CRC32C of the stored bytes  20 four zero bytes  24 SHA-256[32] */
#define CAS_REC_HEADER 56
#define CAS_REC_MAGIC "CRCK"
#define CAS_META_REC_MAGIC "CRMR"
#define CAS_REC_CODEC 4
#define CAS_REC_RAW 8
#define CAS_REC_STORED 12
#define CAS_REC_CRC 16
#define CAS_REC_SHA 24

/* Kinds of meta log record; the SHA-256 in the header names the payload. */
enum cas_meta_kind {
	CAS_META_MANIFEST = 1,   /* a manifest's encoding; SHA-256 = snapshot id */
	CAS_META_PIECE = 2,      /* an extent-list piece; SHA-256 of the payload */
	CAS_META_TAG = 3,        /* payload: the tag's name; SHA-256 field: the id */
	CAS_META_REVOKE = 4,     /* the commit of this id failed. Payload: empty, or
				  * u8 had, id[32] the tag's earlier target (if had),
				  * then the tag's name: put it back */
	CAS_META_DELETE = 5,     /* gc deleted this id (and the tags naming it).
				  * Payload: empty */
	CAS_META_CHUNKS = 6,     /* a store on RADOS: the chunk entries the commit
				  * of this id added, so that a node's index
				  * catches up without reading the packs. Payload:
				  * n x (sha[32], location[CAS_LOC_BYTES] as a 'c'
				  * value), n >= 0; a commit has none, or all of
				  * them, in the same append before its manifest */
};
/* One entry of a CAS_META_CHUNKS payload: sha[32], then the location
 * (CAS_LOC_BYTES, cas.h). */
#define CAS_META_CHUNK_ENTRY (32 + CAS_LOC_BYTES)


/* Index key 'd' id[32]: snapshot id is damaged. casctl repair kept it
 * without the chunks it lost (their records did not check out), and this
 * names the bytes lost. Value: u8 CAS_DAMAGE_VERSION, u32 n, then n ranges
 * of CAS_DAMAGE_RANGE bytes: u32 stream (its index in the manifest),
 * u64 offset, u64 length; by stream then offset, none overlapping, each
 * the extents of chunks the index lacked. Derived: a repair finds it anew
 * from the packs and logs, so no meta log record holds it. A crest that
 * does not know the key lists the snapshot as whole and fails its restore
 * at the first lost chunk (which verify names): nothing is taken for data
 * that is not there, so the store's format stays 3. */
#define CAS_DAMAGE_VERSION 1
#define CAS_DAMAGE_RANGE 20

/* A file header for magic (8 bytes), version and file number. */
void cas_file_header(uint8_t h[CAS_FILE_HEADER], const char *magic, uint32_t version, uint32_t num);
/* -EBADMSG when h does not start with magic; else 0 and its fields. */
int cas_file_header_check(const uint8_t h[CAS_FILE_HEADER], const char *magic, uint32_t *version,
			  uint32_t *num);

#endif
