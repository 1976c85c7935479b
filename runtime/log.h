/*
 * log.h - LINGEN_LOG diagnostics and one-time warnings, on stderr.
 */
#ifndef LG_RUNTIME_LOG_H
#define LG_RUNTIME_LOG_H

#include <stdbool.h>

/* True when LINGEN_LOG is set to something other than "0". */
bool lg_log_enabled(void);
/* "lingen: ..." on stderr when logging is on. */
void lg_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "lingen: warning: ..." on stderr, always (used once per event by callers). */
void lg_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Monotonic clock in seconds, for stage timings. */
double lg_now(void);

#endif
