/* err.c - thread-local error messages; see err.h. */
#include "util/err.h"

#include <stdio.h>
#include <string.h>

#define CREST_ERR_CAP 1024

/* A message longer than the buffer is cut, on purpose. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

static __thread char err_buf[CREST_ERR_CAP];

/* A message is one line for a terminal, and its parts may be a snapshot's
 * word (a label, a stream's name): a control character in one could end
 * the line or drive the terminal (an escape sequence). They become '?',
 * and so does a C1 control in UTF-8 (0xc2 0x80-0x9f), which some terminals
 * obey too. */
static void err_clean(void)
{
	for (unsigned char *p = (unsigned char *)err_buf; *p; p++) {
		if (*p < 0x20 || *p == 0x7f)
			*p = '?';
		else if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f)
			p[0] = p[1] = '?';
	}
}

static int err_vset(int err, int with_strerror, const char *fmt, va_list ap)
{
	char tmp[CREST_ERR_CAP];
	vsnprintf(tmp, sizeof(tmp), fmt, ap);
	if (with_strerror && err < 0)
		snprintf(err_buf, sizeof(err_buf), "%s: %s", tmp, strerror(-err));
	else
		snprintf(err_buf, sizeof(err_buf), "%s", tmp);
	err_clean();
	return err;
}

int crest_errf(int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	err_vset(err, 1, fmt, ap);
	va_end(ap);
	return err;
}

int crest_errx(int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	err_vset(err, 0, fmt, ap);
	va_end(ap);
	return err;
}

int crest_errctx(int err, const char *fmt, ...)
{
	char prefix[CREST_ERR_CAP], old[CREST_ERR_CAP];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(prefix, sizeof(prefix), fmt, ap);
	va_end(ap);
	snprintf(old, sizeof(old), "%s", err_buf);
	if (old[0])
		snprintf(err_buf, sizeof(err_buf), "%s: %s", prefix, old);
	else if (err < 0)
		snprintf(err_buf, sizeof(err_buf), "%s: %s", prefix, strerror(-err));
	else
		snprintf(err_buf, sizeof(err_buf), "%s", prefix);
	err_clean();
	return err;
}

const char *crest_errmsg(void)
{
	return err_buf;
}

void crest_errcpy(char *dst, unsigned long cap)
{
	snprintf(dst, cap, "%s", err_buf);
}

void crest_errset_str(const char *msg)
{
	snprintf(err_buf, sizeof(err_buf), "%s", msg);
	err_clean();
}
