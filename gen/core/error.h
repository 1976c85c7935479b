/*
 * error.h - the thread-local error message behind lg_last_error().
 *
 * Library code never prints or exits: it records what went wrong here and
 * returns a status. lg_fail() formats the message and hands the status back,
 * so a failure path reads `return lg_fail(LG_ERR_IO, "%s: %s", path, ...)`.
 */
#ifndef LG_ERROR_H
#define LG_ERROR_H

#include "lingen.h"

#define LG_ERROR_MAX 8192

/* Record a message for this thread and return st. */
lg_status lg_fail(lg_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append a line to this thread's message (e.g. an NVRTC log), keeping st. */
void lg_fail_append(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Put context before this thread's message ("tuning file " before
 * "a.json: No such file or directory"); returns st. */
lg_status lg_fail_prefix(lg_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Forget the last message (called on entry of public functions). */
void lg_clear_error(void);

/* Always-on check of an internal invariant: a failure is a lingen bug. */
#define LG_ASSERT(c)                                                          \
	do {                                                                  \
		if (!(c))                                                     \
			lg_assert_fail(#c, __FILE__, __LINE__);               \
	} while (0)
_Noreturn void lg_assert_fail(const char *what, const char *file, int line);

#endif
