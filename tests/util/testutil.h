/*
 * testutil.h - small helpers shared by the cmocka tests: reading files and
 * listing a folder. Tests may die on error; these return NULL instead and
 * let the test assert.
 */
#ifndef LG_TESTUTIL_H
#define LG_TESTUTIL_H

#include <stddef.h>

/* The whole file at path, NUL-terminated (*len excludes the NUL; len may be
 * NULL). NULL if it cannot be read. The caller frees the result with free(). */
char *lg_test_read_file(const char *path, size_t *len);

/* Sorted full paths of the regular files in dir whose names end in suffix,
 * as a NULL-terminated array; *count gets their number. NULL if dir cannot
 * be opened. The caller frees with lg_test_free_list(). */
char **lg_test_list_dir(const char *dir, const char *suffix, size_t *count);
void lg_test_free_list(char **list);

#endif
