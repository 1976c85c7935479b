/*
 * proc.h - for tests: run a program (the built `lingen` CLI) with extra
 * environment variables and capture its exit status, stdout and stderr.
 * Files and folders are in testutil.h.
 */
#ifndef LG_TEST_PROC_H
#define LG_TEST_PROC_H

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

#endif
