/*
 * file.h - whole files in and out, one way everywhere: the reader behind
 * spec files, model configs, tuning files, bundle manifests and cubins and
 * disk-cache entries, and the write loop behind cache entries, NVRTC dumps
 * and the files the CLI writes.
 *
 * The reader opens with O_NONBLOCK and refuses anything but a regular file
 * before reading, so a FIFO or a device named by mistake is an error with
 * a message, never a hang or an endless read.
 */
#ifndef LG_FILE_H
#define LG_FILE_H

#include <stddef.h>
#include <sys/stat.h>

#include "lingen.h"

/* The bound of every input document (spec files, model configs, tuning
 * files): larger ones are refused before they are read or parsed. Bundle
 * manifests have 64 MiB, cubins 256 MiB. */
#define LG_INPUT_MAX ((size_t)16 << 20)

/* The whole regular file at path, at most LG_INPUT_MAX bytes: *text gets
 * a malloc'd copy with a NUL after its *len bytes (the caller frees it with free()). On failure *text
 * is NULL and the status is LG_ERR_IO, with the message "<path>: <what is
 * wrong>" ("No such file or directory", "is a FIFO, not a regular file",
 * ...), or LG_ERR_NO_MEMORY; errno then holds the cause (ENOENT: missing,
 * EISDIR: a folder, EINVAL: another kind of file that is not regular,
 * EFBIG: over the bound) for callers that treat some causes apart. */
lg_status lg_read_file(const char *path, char **text, size_t *len);
/* The same, refusing a file of more than max bytes. */
lg_status lg_read_file_max(const char *path, size_t max, char **text, size_t *len);
/* The same for a file open on fd (not closed here); name is its path for
 * messages (NULL: the message is only what is wrong); *st, when st is not
 * NULL, gets the file's fstat. */
lg_status lg_read_fd(int fd, const char *name, size_t max, struct stat *st, char **text,
		     size_t *len);

/* Write all size bytes to fd, going on after EINTR and short writes.
 * 0, or -1 with errno set (EIO when write() stops making progress). */
int lg_write_all(int fd, const void *data, size_t size);

#endif
