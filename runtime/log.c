/*
 * log.c - LINGEN_LOG diagnostics and warnings on stderr (log.h).
 *
 * Each message is formatted into one buffer and written with a single
 * fputs, so lines from concurrent threads do not interleave mid-line.
 */
#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "env.h"

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static bool log_on;

static void log_init(void)
{
	const char *v = lg_env_get(LG_ENV_LOG);
	log_on = v && strcmp(v, "0") != 0;
}

bool lg_log_enabled(void)
{
	pthread_once(&log_once, log_init);
	return log_on;
}

static void vprint(const char *prefix, const char *fmt, va_list ap)
	__attribute__((format(printf, 2, 0)));

static void vprint(const char *prefix, const char *fmt, va_list ap)
{
	char line[2048];
	size_t n = (size_t)snprintf(line, sizeof line, "%s", prefix);
	vsnprintf(line + n, sizeof line - n, fmt, ap);
	n = strlen(line);
	if (n + 1 < sizeof line) {
		line[n] = '\n';
		line[n + 1] = '\0';
	} else {
		line[sizeof line - 2] = '\n';
	}
	fputs(line, stderr);
	fflush(stderr);
}

void lg_log(const char *fmt, ...)
{
	if (!lg_log_enabled())
		return;
	va_list ap;
	va_start(ap, fmt);
	vprint("lingen: ", fmt, ap);
	va_end(ap);
}

void lg_warn(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vprint("lingen: warning: ", fmt, ap);
	va_end(ap);
}

double lg_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
