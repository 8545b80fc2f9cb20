/*
 * err.h - the user-facing message that goes with a negative errno-style code.
 *
 * crest's functions return 0 or -errno (liburing's habit). The function that
 * detects a failure also records, in a thread-local buffer, one line that says
 * what failed, on what (path, pid, snapshot) and why. Callers up the stack
 * either pass the code on untouched or add context in front with crest_errctx.
 * The CLI prints crest_errmsg() once, at the top.
 */
#ifndef CREST_UTIL_ERR_H
#define CREST_UTIL_ERR_H

#include <stdarg.h>

/* Record "FMT..." as the current message and return err (a negative errno).
 * If err is a system error, ": strerror(-err)" is appended. */
int crest_errf(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Like crest_errf but with no strerror suffix: for errors that are not system
 * errors (a damaged file, a bad argument), where strerror would mislead. */
int crest_errx(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prefix the current message with "FMT...: " and return err. */
int crest_errctx(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The current thread's message, "" if none was recorded. */
const char *crest_errmsg(void);

/* Copy the current message into another thread's context (engine workers
 * report failures to the thread that waits on a snapshot). */
void crest_errcpy(char *dst, unsigned long cap);
void crest_errset_str(const char *msg);

#endif
