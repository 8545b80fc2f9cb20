/*
 * common.h - what crest and casctl share: global options, size parsing,
 * opening the store, the progress line driven from a side thread, and the
 * one-line error report.
 */
#ifndef CREST_CLI_COMMON_H
#define CREST_CLI_COMMON_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "cas/cas.h"
#include "engine/engine.h"

struct cli {
	const char *prog;      /* "crest" or "casctl" */
	const char *store;     /* --store, $CREST_STORE, ./crest-store */
	bool json, quiet;
	bool init;             /* --init or CREST_INIT=1: make the store if missing */
	unsigned workers;      /* --workers; 0: all cores */
	mode_t umask;          /* the caller's, before crest's own 077: a job's */
};

/* Exit codes: 0 done, 1 failed (the store, the job, the system), 2 a usage
 * error (an unknown or bad option or value, a missing or extra operand,
 * options that do not go together); git and restic do the same. */
#define CLI_EXIT_FAIL 1
#define CLI_EXIT_USAGE 2

/* Removes the global options (--store DIR, --json, --quiet, --workers N)
 * from argv wherever they appear. Returns the new argc, or -1 after printing
 * a message. */
int cli_parse_globals(struct cli *c, int argc, char **argv);

/* cas_open of the store, made first with --init (or CREST_INIT=1) if it
 * is not one yet, as crest init would. Every command opens its store
 * through it, after its arguments are checked: a refused command line
 * makes no store. */
int cli_store_open(const struct cli *c, enum cas_mode mode, struct cas_store **out);

/* A usage error, one line on stderr: "PROG: CMD: MESSAGE (PROG help CMD)".
 * Returns CLI_EXIT_USAGE. */
int cli_usage(const struct cli *c, const char *cmd, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* A value crest refused with the message set (a tag, a branch name, a
 * chunker, a GPU map): "PROG: MESSAGE", and CLI_EXIT_USAGE. */
int cli_usage_fail(const struct cli *c, int rc);

/* What the commands' table (cli/help.c) says of argv's options, before a
 * command runs: an option with a value given twice, an option given without
 * the one it needs, or with one it excludes (cli_opt_rules), is a usage
 * error. Returns CLI_EXIT_USAGE after one line, or 0. */
int cli_check_opts(const struct cli *c, int argc, char **argv);

/* A decimal number from lo to hi: digits only (no sign, space, or hex).
 * -EINVAL on anything else. */
int cli_parse_uint(const char *s, uint64_t lo, uint64_t hi, uint64_t *out);

/* "4096", "64K", "16M", "2G" (powers of 1024). -EINVAL on anything else. */
int cli_parse_size(const char *s, uint64_t *out);
/* "30s", "5m", "1h", "7d", "2w", "250ms", plain seconds, from 1 ms to 366
 * days (util/parse.h's parser; m is minutes, as in sleep(1), d a day of
 * 24 h, w 7 days): -EINVAL when s is not a duration, -ERANGE out of range.
 * Carried as 64-bit nanoseconds wherever it goes. */
#define CLI_DURATION_MIN_NS 1000000ull
#define CLI_DURATION_MAX_NS (366ull * 86400 * 1000000000)
int cli_parse_duration(const char *s, uint64_t *ns);

/* Prints "PROG: MESSAGE" for the current error and returns the exit code. */
/* -EBADMSG, with the message set, when the store's meta logs hold commits
 * its index lacks (a damaged index, or a commit interrupted or in
 * progress): readers say so rather than report a store whole. */
int cli_check_index(const struct cli *c, const struct cas_store *s);
int cli_fail(const struct cli *c, int rc);

/* A progress line for a snapshot being ingested, drawn by a side thread
 * while the caller blocks in the engine. */
struct cli_progress;
struct cli_progress *cli_progress_start(const struct cli *c, struct engine_snap *s, const char *label);
void cli_progress_stop(struct cli_progress *p);

/* Opens the store read-only and loads snapshot `name` (id, prefix or tag).
 * On success the caller owns *store and *m; on failure neither is left. */
int cli_snapshot_open(const struct cli *c, const char *name, struct cas_store **store, uint8_t id[32],
		      struct cas_manifest **m);

/* A snapshot a repair kept without chunks it lost (cas_snapshot_lost).
 * Without allow: -EBADMSG, its message naming the streams and byte ranges
 * lost and the option that restores the rest. With allow: m's lost ranges
 * become holes (a restore writes zeros there) and *lost holds them, for
 * cli_lost_print (free() it). 0 and *nlost 0 for a whole snapshot. */
#define CLI_ALLOW_DAMAGED "--allow-damaged"
int cli_snapshot_damage(struct cas_store *s, const uint8_t id[32], struct cas_manifest *m, bool allow,
			struct cas_lost **lost, size_t *nlost);
/* The lost ranges: a warning line each on stderr, or with json a
 * ", \"lost\": [...]" member for the caller's object on stdout. */
void cli_lost_print(const struct cli *c, const uint8_t id[32], const struct cas_manifest *m,
		    const struct cas_lost *v, size_t n);

/* Opens the store for writing and an engine on it (o, or the defaults with
 * --workers). On failure neither is left open. */
int cli_writer_open(const struct cli *c, const struct engine_opts *o, struct cas_store **store,
		    struct engine **e);

/* The options crest checkpoint and crest run share, for a job checkpointed
 * again and again: --every, --branch, --file-limit, --tmpdir, --metrics,
 * --metrics-file and --push-to. cli_every_opt: 1 when option a is one of them and took
 * its value v, 0 when it is not, -1 after a line on stderr when v is bad
 * (exit 2). --metrics and --metrics-file without --every are refused
 * before (cli_check_opts). */
struct tp_opts;
struct tp_capture;
struct cli_every {
	uint64_t every_ns;        /* 0: once */
	const char *maddr, *mfile;
	const char *push_to;      /* --push-to STORE: each snapshot pushed there */
};
int cli_every_opt(const char *a, const char *v, struct tp_opts *o, struct cli_every *ev);

/* -EINVAL with a message when o->workdir holds the store or the images'
 * directory (o->tmpdir, else /dev/shm), or lies inside either: each
 * checkpoint would copy the store, or CRIU's images as they are written,
 * into itself. 0 without --workdir. */
int cli_workdir_check(const struct cli *c, const struct tp_opts *o);
/* The path of libcrest-shim.so (crest run --cuda-shim): $CREST_SHIM, else
 * beside crest's program (a build tree, a bundle), else where it installs.
 * 0, or -ENOENT with a message naming where it looked. */
int cli_shim_path(char *buf, size_t cap);
/* One line on stderr of what the NCCL shim did in a checkpoint, if the
 * job runs it. */
void cli_shim_note(const struct cli *c, const struct tp_opts *o, const struct tp_capture *cap);

/* Records that the job at pid last came from snapshot id on branch, for its
 * next checkpoint's parent; a warning only when it cannot. */
void cli_job_note(const struct cli *c, struct cas_store *store, pid_t pid, const uint8_t id[32],
		  const char *branch);

/* --gpu-map "OLD=NEW[,OLD=NEW]" with nvidia-smi's GPU-... UUIDs; the caller
 * frees *out, also after an error. */
struct gpuckpt_map;
int cli_parse_gpu_map(const char *s, struct gpuckpt_map **out, size_t *n);

/* --gpu N: an index, or nvidia-smi's GPU-... UUID; -EINVAL with the
 * message set on anything else. */
int cli_check_gpu(const char *v);

void cli_print_id(char out[65], const uint8_t id[32]);
double cli_secs(uint64_t ns);
/* Bytes a second for a speed line. A sparse file's logical size over a
 * short time can pass what uint64_t holds, and the conversion of a double
 * out of range is undefined: it is capped. */
uint64_t cli_rate(uint64_t bytes, double secs);
/* "YYYY-MM-DD HH:MM:SS", local time, of a wall-clock time in ns. */
void cli_fmt_time(uint64_t ns, char *buf, size_t cap);

#endif
