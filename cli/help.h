/*
 * help.h - the one description of crest's and casctl's commands and
 * options. `PROG help`, `PROG COMMAND --help`, the unknown option check
 * before a command runs, the man pages crest(1) and casctl(1) and the bash
 * completion are all made from it (help.c; gendoc.c at build time), so
 * they cannot disagree. Adding an option: one line in its command's entry
 * in help.c. Adding a command: one entry there and one line in the
 * program's dispatch table (crest.c or casctl.c).
 *
 * Needs nothing but the C library at link time: gendoc, a build host
 * program, links help.c alone.
 */
#ifndef CREST_CLI_HELP_H
#define CREST_CLI_HELP_H

#include <stdbool.h>
#include <stdio.h>

#define CLI_DOC_MAX_OPTS 24

struct cli_opt_doc {
	const char *name;    /* "--tag"; NULL ends the list */
	const char *alias;   /* "-q", or NULL */
	/* The value's name, NULL for a flag. Completion reads it: SNAPSHOT,
	 * BRANCH, DIR, FILE, PATH and a list "a|b" complete those. */
	const char *arg;
	const char *help;    /* one line */
};

struct cli_cmd_doc {
	const char *prog;      /* "crest" or "casctl" */
	const char *name;      /* NULL ends the table */
	const char *synopsis;  /* what follows "PROG NAME" */
	const char *summary;   /* one line, no full stop */
	const char *text;      /* a paragraph */
	/* The operands by position, for completion: "SNAPSHOT DEST"; a last
	 * one ending in "..." repeats. */
	const char *operands;
	/* The first operand ends the options (crest run: what follows is the
	 * job's command line, its options included). */
	bool operand_ends_opts;
	struct cli_opt_doc opts[CLI_DOC_MAX_OPTS];
};

extern const struct cli_cmd_doc cli_cmd_docs[];
extern const struct cli_opt_doc cli_global_opts[];   /* every command's */

struct cli_env_doc {
	const char *name;      /* NULL ends the list */
	const char *help;
};
extern const struct cli_env_doc cli_env_docs[];

/* The command's entry, or NULL. */
const struct cli_cmd_doc *cli_doc_find(const char *prog, const char *name);
/* The option of d (or a global one) named arg, or NULL. */
const struct cli_opt_doc *cli_doc_opt(const struct cli_cmd_doc *d, const char *arg);

/* "0.4.0", and `git describe` of the tree it was built from ("" if none). */
const char *cli_version(void);
const char *cli_version_git(void);

/* PROG's commands and global options (`PROG help`). */
void cli_help_usage(FILE *f, const char *prog);
/* One command's synopsis, paragraph and options (`PROG help CMD`). */
void cli_help_command(FILE *f, const struct cli_cmd_doc *d);
void cli_help_version(FILE *f, const char *prog, bool json);

struct cli;
/* What comes before a command runs, from the table: no command (usage on
 * stderr, 2), help and version (stdout, 0), an unknown command or an
 * option the command does not take (one line on stderr, 2), --help or -h
 * among a command's options (its help, 0). Returns the exit code, or -1
 * when the command should run. argv holds the global options removed. */
int cli_help_dispatch(const struct cli *c, int argc, char **argv);

#endif
