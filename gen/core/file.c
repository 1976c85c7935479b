/*
 * file.c - the one whole-file reader and the one write loop (file.h).
 */
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error.h"

/* Record "<name>: <what>" (or just <what> without a name) and return st,
 * with errno = err for the caller. */
static lg_status fail(int err, lg_status st, const char *name, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static lg_status fail(int err, lg_status st, const char *name, const char *fmt, ...)
{
	char what[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	if (name)
		lg_fail(st, "%s: %s", name, what);
	else
		lg_fail(st, "%s", what);
	errno = err;
	return st;
}

static lg_status sys_fail(int err, const char *name)
{
	char buf[128];
	return fail(err, LG_ERR_IO, name, "%s", strerror_r(err, buf, sizeof buf));
}

/* What a file that is neither regular nor a folder is, for messages. */
static const char *kind(mode_t m)
{
	if (S_ISFIFO(m))
		return "a FIFO";
	if (S_ISCHR(m))
		return "a character device";
	if (S_ISBLK(m))
		return "a block device";
	if (S_ISSOCK(m))
		return "a socket";
	return "a special file";
}

static lg_status too_big(const char *name, size_t max)
{
	if (max % ((size_t)1 << 20) == 0)
		return fail(EFBIG, LG_ERR_IO, name, "larger than %zu MiB", max >> 20);
	return fail(EFBIG, LG_ERR_IO, name, "larger than %zu bytes", max);
}

lg_status lg_read_fd(int fd, const char *name, size_t max, struct stat *st, char **text,
		     size_t *len)
{
	struct stat sb;
	*text = NULL;
	*len = 0;
	if (!st)
		st = &sb;
	if (fstat(fd, st) != 0)
		return sys_fail(errno, name);
	if (S_ISDIR(st->st_mode))
		return sys_fail(EISDIR, name);
	if (!S_ISREG(st->st_mode))
		return fail(EINVAL, LG_ERR_IO, name, "is %s, not a regular file", kind(st->st_mode));
	if ((uintmax_t)st->st_size > max)
		return too_big(name, max);
	/* Read to the end, not st_size bytes: a file may grow while it is
	 * read, and some (in /proc) say 0. want bytes prove it too large;
	 * the buffer keeps one byte for the NUL and one to see growth. */
	size_t want = max < SIZE_MAX - 2 ? max + 1 : SIZE_MAX - 2;
	size_t cap = (size_t)st->st_size + 2 < want + 1 ? (size_t)st->st_size + 2 : want + 1;
	size_t n = 0;
	char *b = malloc(cap);
	if (!b)
		return fail(ENOMEM, LG_ERR_NO_MEMORY, name, "out of memory");
	for (;;) {
		if (n + 1 == cap) {
			if (n >= want)
				break;
			size_t more = cap > (want + 1) / 2 ? want + 1 : 2 * cap;
			char *nb = realloc(b, more);
			if (!nb) {
				free(b);
				return fail(ENOMEM, LG_ERR_NO_MEMORY, name, "out of memory");
			}
			b = nb;
			cap = more;
		}
		ssize_t r = read(fd, b + n, cap - 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int err = errno;
			free(b);
			return sys_fail(err, name);
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	if (n > max) {
		free(b);
		return too_big(name, max);
	}
	b[n] = '\0';
	*text = b;
	*len = n;
	return LG_OK;
}

lg_status lg_read_file_max(const char *path, size_t max, char **text, size_t *len)
{
	*text = NULL;
	*len = 0;
	/* O_NONBLOCK: opening a FIFO with no writer must not wait for one */
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return sys_fail(errno, path);
	lg_status st = lg_read_fd(fd, path, max, NULL, text, len);
	int err = errno;
	close(fd);
	errno = err;
	return st;
}

lg_status lg_read_file(const char *path, char **text, size_t *len)
{
	return lg_read_file_max(path, LG_INPUT_MAX, text, len);
}

int lg_write_all(int fd, const void *data, size_t size)
{
	const char *p = data;
	while (size > 0) {
		ssize_t w = write(fd, p, size);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			if (w == 0)
				errno = EIO;
			return -1;
		}
		p += w;
		size -= (size_t)w;
	}
	return 0;
}
