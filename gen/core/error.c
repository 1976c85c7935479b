/*
 * error.c - status names and the per-thread error message (see error.h).
 */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char msg[LG_ERROR_MAX];

static const char *const status_names[LG_STATUS_COUNT] = {
	[LG_OK] = "LG_OK",
	[LG_ERR_INVALID_ARG] = "LG_ERR_INVALID_ARG",
	[LG_ERR_SPEC] = "LG_ERR_SPEC",
	[LG_ERR_NO_MEMORY] = "LG_ERR_NO_MEMORY",
	[LG_ERR_IO] = "LG_ERR_IO",
	[LG_ERR_DRIVER] = "LG_ERR_DRIVER",
	[LG_ERR_NVRTC] = "LG_ERR_NVRTC",
	[LG_ERR_COMPILE] = "LG_ERR_COMPILE",
	[LG_ERR_CUDA] = "LG_ERR_CUDA",
	[LG_ERR_NO_DEVICE] = "LG_ERR_NO_DEVICE",
	[LG_ERR_UNSUPPORTED] = "LG_ERR_UNSUPPORTED",
	[LG_ERR_MISSING] = "LG_ERR_MISSING",
};
_Static_assert(sizeof status_names / sizeof status_names[0] == LG_STATUS_COUNT,
	       "every status has a name");

const char *lg_status_str(lg_status st)
{
	if ((unsigned)st >= LG_STATUS_COUNT || !status_names[st])
		return "LG_ERR_UNKNOWN";
	return status_names[st];
}

const char *lg_last_error(void) { return msg; }

const char *lg_version(void) { return LINGEN_VERSION; }

void lg_clear_error(void) { msg[0] = '\0'; }

lg_status lg_fail(lg_status st, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return st;
}

void lg_fail_append(const char *fmt, ...)
{
	size_t n = strlen(msg);
	if (n + 1 >= sizeof msg)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg + n, sizeof msg - n, fmt, ap);
	va_end(ap);
}

lg_status lg_fail_prefix(lg_status st, const char *fmt, ...)
{
	char pre[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(pre, sizeof pre, fmt, ap);
	va_end(ap);
	size_t plen = n < 0 ? 0 : (size_t)n < sizeof pre ? (size_t)n : sizeof pre - 1;
	size_t mlen = strlen(msg);
	if (mlen + plen >= sizeof msg)
		mlen = sizeof msg - 1 - plen; /* the end of the message gives way */
	memmove(msg + plen, msg, mlen);
	memcpy(msg, pre, plen);
	msg[plen + mlen] = '\0';
	return st;
}

void lg_assert_fail(const char *what, const char *file, int line)
{
	fprintf(stderr, "lingen: internal error: %s (%s:%d)\n", what, file, line);
	abort();
}
