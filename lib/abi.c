/*
 * abi.c - the layout of crest.h's structs and its constants, answered by
 * name (see "ABI introspection" in include/crest.h).
 *
 * The tables are made by the compiler from the header itself (sizeof,
 * offsetof), so they are right for the library they are built into by
 * construction. What this file must keep up with is the list of members:
 * tests/library/test_abi.py compares it with the members crest.h declares.
 *
 * Only crest.h and libc: this answers about the public header, nothing of
 * crest's insides.
 */
#include "crest.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct abi_field {
	const char *name;
	size_t off, size;
};

struct abi_type {
	const char *name;
	size_t size;
	const struct abi_field *fields;
	size_t nfields;
};

#define FIELD(T, f) { #f, offsetof(struct T, f), sizeof(((struct T *)0)->f) }
#define TYPE(T, list) { #T, sizeof(struct T), list, sizeof(list) / sizeof(list[0]) }

static const struct abi_field options_fields[] = {
	FIELD(crest_options, staging_bytes), FIELD(crest_options, workers),
	FIELD(crest_options, copy_streams), FIELD(crest_options, restore_threads),
	FIELD(crest_options, device), FIELD(crest_options, flags), FIELD(crest_options, host_cache),
	FIELD(crest_options, push_to),
};
static const struct abi_field blob_fields[] = {
	FIELD(crest_blob, name), FIELD(crest_blob, data), FIELD(crest_blob, len),
};
static const struct abi_field ckpt_opts_fields[] = {
	FIELD(crest_checkpoint_opts, tag), FIELD(crest_checkpoint_opts, labels),
	FIELD(crest_checkpoint_opts, nlabels), FIELD(crest_checkpoint_opts, blobs),
	FIELD(crest_checkpoint_opts, nblobs), FIELD(crest_checkpoint_opts, sync_streams),
	FIELD(crest_checkpoint_opts, nsync_streams),
};
static const struct abi_field result_fields[] = {
	FIELD(crest_result, snapshot), FIELD(crest_result, bytes), FIELD(crest_result, new_bytes),
	FIELD(crest_result, stored_bytes), FIELD(crest_result, zero_bytes), FIELD(crest_result, stall_ns),
	FIELD(crest_result, staging_wait_ns), FIELD(crest_result, ingest_ns), FIELD(crest_result, rounds),
};
static const struct abi_field restore_result_fields[] = {
	FIELD(crest_restore_result, snapshot), FIELD(crest_restore_result, bytes),
	FIELD(crest_restore_result, ns), FIELD(crest_restore_result, cache_bytes),
};

static const struct abi_field job_fields[] = {
	FIELD(crest_job, name), FIELD(crest_job, attempt), FIELD(crest_job, rank),
	FIELD(crest_job, world), FIELD(crest_job, gpu),
};
static const struct abi_field job_result_fields[] = {
	FIELD(crest_job_result, rank), FIELD(crest_job_result, committed),
	FIELD(crest_job_result, job_snapshot),
};

static const struct abi_type types[] = {
	TYPE(crest_options, options_fields),
	TYPE(crest_blob, blob_fields),
	TYPE(crest_checkpoint_opts, ckpt_opts_fields),
	TYPE(crest_result, result_fields),
	TYPE(crest_restore_result, restore_result_fields),
	TYPE(crest_job, job_fields),
	TYPE(crest_job_result, job_result_fields),
};

static const struct {
	const char *name;
	long long value;
} consts[] = {
	{ "CREST_MEM_HOST", CREST_MEM_HOST },
	{ "CREST_MEM_DEVICE", CREST_MEM_DEVICE },
	{ "CREST_MEM_MANAGED", CREST_MEM_MANAGED },
	{ "CREST_OPEN_NO_GPU", CREST_OPEN_NO_GPU },
};

/* The type named by the first len bytes of name. */
static const struct abi_type *find_type(const char *name, size_t len)
{
	for (size_t i = 0; name && i < sizeof(types) / sizeof(types[0]); i++)
		if (strlen(types[i].name) == len && !memcmp(types[i].name, name, len))
			return &types[i];
	return NULL;
}

static const struct abi_field *find_field(const struct abi_type *t, const char *field)
{
	for (size_t i = 0; t && field && i < t->nfields; i++)
		if (!strcmp(t->fields[i].name, field))
			return &t->fields[i];
	return NULL;
}

size_t crest_abi_sizeof(const char *type)
{
	if (!type)
		return 0;
	const char *dot = strchr(type, '.');
	const struct abi_type *t = find_type(type, dot ? (size_t)(dot - type) : strlen(type));
	if (!dot)
		return t ? t->size : 0;
	const struct abi_field *f = find_field(t, dot + 1);
	return f ? f->size : 0;
}

size_t crest_abi_offsetof(const char *type, const char *field)
{
	const struct abi_field *f = find_field(find_type(type, type ? strlen(type) : 0), field);
	return f ? f->off : SIZE_MAX;
}

const char *crest_abi_field(const char *type, size_t i)
{
	const struct abi_type *t = find_type(type, type ? strlen(type) : 0);
	return t && i < t->nfields ? t->fields[i].name : NULL;
}

int crest_abi_const(const char *name, long long *value)
{
	for (size_t i = 0; name && i < sizeof(consts) / sizeof(consts[0]); i++) {
		if (!strcmp(consts[i].name, name)) {
			if (value)
				*value = consts[i].value;
			return 0;
		}
	}
	return -ENOENT;
}
