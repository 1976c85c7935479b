/*
 * rt_testutil.h - small helpers for the runtime tests: temp folders, file
 * bytes and stderr capture. They abort on setup errors (tests may die).
 */
#ifndef LG_RT_TESTUTIL_H
#define LG_RT_TESTUTIL_H

#include <stddef.h>

/* A fresh folder /tmp/lingen-<tag>-XXXXXX; the caller frees the path. */
char *rt_tmpdir(const char *tag);
/* Remove a folder tree (like rm -rf); missing is fine. */
void rt_rm_rf(const char *path);
/* Whole file into a malloc'd buffer (NUL-terminated); NULL if unreadable. */
char *rt_read_file(const char *path, size_t *size);
/* Write bytes to a file (created or truncated); aborts on failure. */
void rt_write_file(const char *path, const void *data, size_t size);
/* Path join into a malloc'd string. */
char *rt_path(const char *dir, const char *name);

/* Redirect stderr to a temp file until rt_stderr_end, which restores it and
 * returns what was written (malloc'd, caller frees). Not nestable. */
void rt_stderr_begin(void);
char *rt_stderr_end(void);

/* Occurrences of `needle` in `hay`. */
int rt_count(const char *hay, const char *needle);

#endif
