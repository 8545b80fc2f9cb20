/* commands.h - the subcommands of crest and casctl; each takes argv with the
 * global options removed, argv[0] being the subcommand, and returns the exit
 * code (0 ok, 1 failed, 2 usage). */
#ifndef CREST_CLI_COMMANDS_H
#define CREST_CLI_COMMANDS_H

#include <stdio.h>

#include "capture/transparent.h"
#include "cli/common.h"

int cmd_put(struct cli *c, int argc, char **argv);
int cmd_get(struct cli *c, int argc, char **argv);
int cmd_init(struct cli *c, int argc, char **argv);
int cmd_ls(struct cli *c, int argc, char **argv);
int cmd_show(struct cli *c, int argc, char **argv);
int cmd_tag(struct cli *c, int argc, char **argv);
int cmd_diff(struct cli *c, int argc, char **argv);
int cmd_checkpoint(struct cli *c, int argc, char **argv);
int cmd_restore(struct cli *c, int argc, char **argv);
int cmd_demo(struct cli *c, int argc, char **argv);
int cmd_log(struct cli *c, int argc, char **argv);
int cmd_branch(struct cli *c, int argc, char **argv);
int cmd_run(struct cli *c, int argc, char **argv);
int cmd_clone(struct cli *c, int argc, char **argv);
int cmd_bench(struct cli *c, int argc, char **argv);
int cmd_job(struct cli *c, int argc, char **argv);
int cmd_push(struct cli *c, int argc, char **argv);
int cmd_pull(struct cli *c, int argc, char **argv);

int cmd_stats(struct cli *c, int argc, char **argv);
int cmd_verify(struct cli *c, int argc, char **argv);
int cmd_repair(struct cli *c, int argc, char **argv);
int cmd_gc(struct cli *c, int argc, char **argv);

/* crest put's walk: adds path (stored as name) and, for a directory,
 * everything below it in name order, so the same tree always gives the
 * same manifest (cmd_files.c; tests/store/model.c drives it too). */
int cli_put_path(struct engine_snap *s, const char *path, const char *name, const struct cli *c);

/* One transparent checkpoint (tp_checkpoint) with the CLI's lines and
 * progress bar (cmd_process.c; the demo uses it too). */
int ckpt_once(const struct cli *c, struct cas_store *store, struct engine *e, const struct tp_opts *o,
	      const char *tag, const uint8_t *parent, struct tp_result *st);
/* The checkpoint's figures as JSON members (no braces), for --json output. */
void ckpt_print_json_fields(const struct tp_result *st);

/* crest push's work for a snapshot just stored (--push-to on checkpoint
 * and run; cmd_copy.c): id copied from src, open, into the store at to,
 * opened for the copy alone (other nodes' writers wait only that long),
 * with its tags where free there; one line on out unless quiet. 0, or a
 * negative errno with the message set. cli_push_check, before any
 * freeze: -EINVAL with a message when to is the store itself, or no store
 * (and --init does not make one). */
int cli_push(const struct cli *c, struct cas_store *src, const char *to, const uint8_t id[32], FILE *out);
int cli_push_check(const struct cli *c, const char *to);

/* Pictures (cmd_bench.c): gnuplot run on script, drawing png; -ENOENT
 * with a message when gnuplot is not installed. cli_plot_name_ok refuses
 * a file name gnuplot would not take as one. */
int cli_gnuplot(const char *script, const char *png);
int cli_plot_name_ok(const char *png);
/* crest log --plot (cmd_logplot.c). */
int cli_log_plot(const struct cli *c, const char *branch, const char *png);

#endif
