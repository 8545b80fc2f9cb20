/*
 * json.h - the little JSON writing the CLI needs: every listing has --json,
 * and strings (paths, tags, labels) must be escaped, not trusted.
 */
#ifndef CREST_UTIL_JSON_H
#define CREST_UTIL_JSON_H

#include <stdio.h>

/* Writes s as a quoted JSON string, escaping quotes, backslashes and control
 * characters; bytes >= 0x80 pass through (paths are taken as UTF-8). */
void json_str(FILE *f, const char *s);

#endif
