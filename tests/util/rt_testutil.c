/*
 * rt_testutil.c - helpers for the runtime tests (rt_testutil.h).
 */
#include "rt_testutil.h"

#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void die(const char *what)
{
	perror(what);
	abort();
}

char *rt_tmpdir(const char *tag)
{
	char *p = NULL;
	if (asprintf(&p, "/tmp/lingen-%s-XXXXXX", tag) < 0)
		die("asprintf");
	if (!mkdtemp(p))
		die("mkdtemp");
	return p;
}

static int open_up(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)ftw;
	if (flag == FTW_D && (sb->st_mode & 0700) != 0700)
		chmod(path, 0755);
	return 0;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)ftw;
	if (flag == FTW_DP)
		rmdir(path);
	else
		unlink(path);
	return 0;
}

void rt_rm_rf(const char *path)
{
	/* make folders writable first (tests chmod some to 0555) */
	nftw(path, open_up, 16, FTW_PHYS);
	nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

char *rt_read_file(const char *path, size_t *size)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	size_t cap = 4096, n = 0;
	char *b = malloc(cap + 1);
	if (!b)
		die("malloc");
	size_t r;
	while ((r = fread(b + n, 1, cap - n, f)) > 0) {
		n += r;
		if (n == cap) {
			cap *= 2;
			b = realloc(b, cap + 1);
			if (!b)
				die("realloc");
		}
	}
	fclose(f);
	b[n] = '\0';
	if (size)
		*size = n;
	return b;
}

void rt_write_file(const char *path, const void *data, size_t size)
{
	FILE *f = fopen(path, "wb");
	if (!f)
		die(path);
	if (size && fwrite(data, 1, size, f) != size)
		die("fwrite");
	if (fclose(f) != 0)
		die("fclose");
}

char *rt_path(const char *dir, const char *name)
{
	char *p = NULL;
	if (asprintf(&p, "%s/%s", dir, name) < 0)
		die("asprintf");
	return p;
}

static int saved_fd = -1;
static char cap_path[64];

void rt_stderr_begin(void)
{
	fflush(stderr);
	snprintf(cap_path, sizeof cap_path, "/tmp/lingen-stderr-XXXXXX");
	int fd = mkstemp(cap_path);
	if (fd < 0)
		die("mkstemp");
	saved_fd = dup(STDERR_FILENO);
	if (saved_fd < 0 || dup2(fd, STDERR_FILENO) < 0)
		die("dup2");
	close(fd);
}

char *rt_stderr_end(void)
{
	fflush(stderr);
	if (dup2(saved_fd, STDERR_FILENO) < 0)
		die("dup2");
	close(saved_fd);
	saved_fd = -1;
	char *text = rt_read_file(cap_path, NULL);
	unlink(cap_path);
	if (!text)
		die("reading captured stderr");
	return text;
}

int rt_count(const char *hay, const char *needle)
{
	int n = 0;
	size_t len = strlen(needle);
	for (const char *p = hay; len && (p = strstr(p, needle)) != NULL; p += len)
		n++;
	return n;
}
