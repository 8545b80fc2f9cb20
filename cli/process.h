/*
 * process.h - one transparent checkpoint, end to end, for the CLI's
 * checkpoint and demo commands: capture (the job frozen), resume, then
 * ingest into the store while the job runs.
 */
#ifndef CREST_CLI_PROCESS_H
#define CREST_CLI_PROCESS_H

#include "capture/transparent.h"
#include "cli/common.h"

struct ckpt_stats {
	uint8_t id[32];
	uint64_t stall_ns, gpu_lock_ns, gpu_ckpt_ns, dump_ns, gpu_resume_ns;
	uint64_t image_bytes;
	struct engine_result r;
	const char *watch_path;      /* in: a file the job writes, or NULL */
	uint64_t watch_size;         /* out: its size at the freeze */
};

/* Captures o->pid and stores it as a child of parent (if has_parent).
 * The job is resumed before the store is written. */
int ckpt_once(const struct cli *c, struct cas_store *store, struct engine *e, const struct tp_opts *o,
	      const char *tag, const uint8_t *parent, struct ckpt_stats *st);

/* The checkpoint's figures as JSON members (no braces), for --json output. */
void ckpt_print_json_fields(const struct ckpt_stats *st);

#endif
