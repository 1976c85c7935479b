/*
 * testutil.c - file helpers for the tests (see testutil.h).
 */
#include "testutil.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *lg_test_read_file(const char *path, size_t *len)
{
	FILE *fp = fopen(path, "rb");
	char *data = NULL;
	size_t n = 0, cap = 0;
	if (!fp)
		return NULL;
	for (;;) {
		if (n + 4096 + 1 > cap) {
			cap = cap ? cap * 2 : 8192;
			char *p = realloc(data, cap);
			if (!p)
				goto fail;
			data = p;
		}
		size_t got = fread(data + n, 1, cap - n - 1, fp);
		n += got;
		if (got == 0)
			break;
	}
	if (ferror(fp))
		goto fail;
	fclose(fp);
	data[n] = '\0';
	if (len)
		*len = n;
	return data;
fail:
	fclose(fp);
	free(data);
	return NULL;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

char **lg_test_list_dir(const char *dir, const char *suffix, size_t *count)
{
	DIR *d = opendir(dir);
	char **list = NULL;
	size_t n = 0;
	struct dirent *e;
	if (!d)
		return NULL;
	while ((e = readdir(d)) != NULL) {
		size_t ln = strlen(e->d_name), ls = strlen(suffix);
		if (e->d_name[0] == '.' || ln < ls || strcmp(e->d_name + ln - ls, suffix) != 0)
			continue;
		char **p = realloc(list, (n + 2) * sizeof *list);
		if (!p)
			goto fail;
		list = p;
		size_t sz = strlen(dir) + 1 + ln + 1;
		if (!(list[n] = malloc(sz)))
			goto fail;
		snprintf(list[n], sz, "%s/%s", dir, e->d_name);
		list[++n] = NULL;
	}
	closedir(d);
	if (!list && !(list = calloc(1, sizeof *list)))
		return NULL;
	qsort(list, n, sizeof *list, by_name);
	*count = n;
	return list;
fail:
	closedir(d);
	if (list)
		list[n] = NULL;
	lg_test_free_list(list);
	return NULL;
}

void lg_test_free_list(char **list)
{
	if (!list)
		return;
	for (char **p = list; *p; p++)
		free(*p);
	free(list);
}
