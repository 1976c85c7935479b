/*
 * proc.h - for tests: run a program (the built `lingen` CLI) with extra
 * environment variables, capture its exit status, stdout and stderr; make
 * and remove temporary folders and files.
 */
#ifndef LG_TEST_PROC_H
#define LG_TEST_PROC_H

#include <stddef.h>

struct lg_proc {
	int status; /* exit status, or 128 + signal number */
	char *out;  /* everything written to stdout (NUL-terminated) */
	char *err;  /* everything written to stderr */
};

/* Run argv[0] (a path) with argv; env holds extra "NAME=VALUE" strings
 * (NULL-terminated, may be NULL) that override the inherited environment.
 * Returns 0 when the program ran; -1 if it could not be started. Free the
 * result with lg_proc_free. */
int lg_proc_run(char *const argv[], char *const env[], struct lg_proc *p);
void lg_proc_free(struct lg_proc *p);

/* A new empty folder under $TMPDIR (or /tmp), malloc'd; NULL on failure. */
char *lg_test_tmpdir(const char *prefix);
/* rm -rf path. */
void lg_test_rmtree(const char *path);
/* Write text to path; 0 on success. */
int lg_test_write(const char *path, const char *text);
/* The whole file as a NUL-terminated malloc'd string (*size if non-NULL);
 * NULL on failure. */
char *lg_test_read(const char *path, size_t *size);

#endif
