/*
 * test_file.c - the whole-file reader and the write loop (gen/core/file.h).
 *
 * The reader returns an empty file as an empty NUL-terminated text, a file
 * of several reads byte for byte (NUL bytes included), a file longer than
 * its stat says (/proc), and refuses without blocking or reading anything
 * that is not a regular file: a FIFO with no writer, a character device, a
 * folder; a missing file and a file over the bound are errors too, each
 * LG_ERR_IO with the path and the cause in the message and in errno.
 *
 * The write loop writes everything through short writes and EINTR (a slow
 * reader on a pipe while a timer interrupts the writer), stops on a real
 * error (a full device) and writes nothing for no bytes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "error.h"
#include "file.h"
#include "testutil.h"

static char *dir;

static int setup(void **state)
{
	(void)state;
	dir = lg_test_tmpdir("file");
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	lg_test_rm_rf(dir);
	free(dir);
	return 0;
}

/* A pattern with NUL bytes in it, n bytes. */
static char *pattern(size_t n)
{
	char *p = malloc(n ? n : 1);
	assert_non_null(p);
	for (size_t i = 0; i < n; i++)
		p[i] = (char)(i * 7 + (i >> 9));
	return p;
}

/* lg_read_file(path) fails with st, errno err, and a message holding the
 * path and want. */
static void expect_refused(const char *path, lg_status st, int err, const char *want)
{
	char *text = (char *)1;
	size_t len = 7;
	lg_clear_error();
	assert_int_equal(lg_read_file(path, &text, &len), st);
	assert_int_equal(errno, err);
	assert_null(text);
	assert_int_equal(len, 0);
	const char *msg = lg_last_error();
	if (!strstr(msg, path) || !strstr(msg, want))
		fail_msg("message '%s': expected the path %s and '%s'", msg, path, want);
}

/* Reading path with a bound of max gives the n bytes of want and a NUL
 * after them. */
static void expect_contents(const char *path, size_t max, const char *want, size_t n)
{
	char *text = NULL;
	size_t len = 99;
	assert_int_equal(lg_read_file_max(path, max, &text, &len), LG_OK);
	assert_non_null(text);
	assert_int_equal(len, n);
	assert_memory_equal(text, want, n);
	assert_int_equal(text[n], '\0');
	free(text);
}

/* Write n bytes of want to path, then read them back. */
static void expect_read(const char *path, size_t max, const char *want, size_t n)
{
	lg_test_write_file(path, want, n);
	expect_contents(path, max, want, n);
}

static void test_read_empty(void **state)
{
	(void)state;
	char *path = lg_test_path(dir, "empty.json");
	expect_read(path, SIZE_MAX, "", 0);
	char *text = NULL;
	size_t len = 99;
	assert_int_equal(lg_read_file(path, &text, &len), LG_OK); /* the unbounded form too */
	assert_int_equal(len, 0);
	assert_string_equal(text, "");
	free(text);
	free(path);
}

static void test_read_normal(void **state)
{
	(void)state;
	const size_t sizes[] = {1, 4095, 4096, 200001}; /* the last takes several reads */
	char *path = lg_test_path(dir, "data.bin");
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		char *want = pattern(sizes[i]);
		expect_read(path, SIZE_MAX, want, sizes[i]);
		free(want);
	}
	free(path);
}

/* /proc files say 0 bytes in stat and still have contents. */
static void test_read_longer_than_stat(void **state)
{
	(void)state;
	struct stat sb;
	if (stat("/proc/self/status", &sb) != 0 || sb.st_size != 0) {
		fprintf(stderr, "skipped: no /proc/self/status of size 0\n");
		return;
	}
	char *text = NULL;
	size_t len = 0;
	assert_int_equal(lg_read_file("/proc/self/status", &text, &len), LG_OK);
	assert_true(len > 0);
	assert_int_equal(strlen(text), len);
	assert_non_null(strstr(text, "Pid:"));
	free(text);
}

static void test_refuse_fifo(void **state)
{
	(void)state;
	char *path = lg_test_path(dir, "spec.fifo");
	assert_int_equal(mkfifo(path, 0600), 0);
	/* no writer: a blocking open would wait forever; this returns at once */
	expect_refused(path, LG_ERR_IO, EINVAL, "is a FIFO, not a regular file");
	free(path);
}

static void test_refuse_device_folder_missing(void **state)
{
	(void)state;
	expect_refused("/dev/null", LG_ERR_IO, EINVAL, "is a character device, not a regular file");
	expect_refused(dir, LG_ERR_IO, EISDIR, "Is a directory");
	char *missing = lg_test_path(dir, "no-such.json");
	expect_refused(missing, LG_ERR_IO, ENOENT, "No such file or directory");
	free(missing);
}

static void test_bound(void **state)
{
	(void)state;
	char *path = lg_test_path(dir, "ten.txt");
	expect_read(path, 10, "0123456789", 10);
	char *text = (char *)1;
	size_t len = 0;
	assert_int_equal(lg_read_file_max(path, 9, &text, &len), LG_ERR_IO);
	assert_int_equal(errno, EFBIG);
	assert_null(text);
	assert_non_null(strstr(lg_last_error(), "ten.txt: larger than 9 bytes"));
	free(path);
}

/* Input documents are bounded: a spec file over 16 MiB is refused before it
 * is read (a sparse file: no disk used), and so is a JSON text over 64 MiB
 * handed to the parser in memory. */
static void test_input_bound(void **state)
{
	(void)state;
	char *path = lg_test_path(dir, "huge.json");
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)LG_INPUT_MAX + 1), 0);
	close(fd);
	lg_spec_file *f = NULL;
	assert_int_equal(lg_spec_file_load(path, &f), LG_ERR_IO);
	assert_null(f);
	assert_non_null(strstr(lg_last_error(), "huge.json: larger than 16 MiB"));
	char *json = NULL;
	assert_int_equal(lg_model_expand_file(path, &json), LG_ERR_IO);
	assert_null(json);
	size_t n = ((size_t)64 << 20) + 1;
	char *text = malloc(n);
	assert_non_null(text);
	memset(text, ' ', n);
	assert_int_equal(lg_spec_file_parse(text, n, "big.json", &f), LG_ERR_SPEC);
	assert_non_null(strstr(lg_last_error(), "allowed: at most 64 MiB"));
	free(text);
	unlink(path);
	free(path);
}

/* An open file read without a name: the message is only the cause, and the
 * stat comes back. */
static void test_read_fd(void **state)
{
	(void)state;
	char *path = lg_test_path(dir, "fd.txt");
	lg_test_write_file(path, "abc", 3);
	int fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	struct stat st;
	char *text = NULL;
	size_t len = 0;
	assert_int_equal(lg_read_fd(fd, NULL, 100, &st, &text, &len), LG_OK);
	assert_int_equal(st.st_size, 3);
	assert_string_equal(text, "abc");
	free(text);
	close(fd);

	char *fifo = lg_test_path(dir, "fd.fifo");
	assert_int_equal(mkfifo(fifo, 0600), 0);
	fd = open(fifo, O_RDONLY | O_NONBLOCK);
	assert_true(fd >= 0);
	assert_int_equal(lg_read_fd(fd, NULL, 100, &st, &text, &len), LG_ERR_IO);
	assert_true(S_ISFIFO(st.st_mode));
	assert_string_equal(lg_last_error(), "is a FIFO, not a regular file");
	close(fd);
	free(fifo);
	free(path);
}

/* ------------------------------------------------------------ writing */

static void test_write_file(void **state)
{
	(void)state;
	const size_t n = 1 << 20;
	char *want = pattern(n), *path = lg_test_path(dir, "written.bin");
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(lg_write_all(fd, want, n), 0);
	assert_int_equal(lg_write_all(fd, want, 0), 0); /* nothing more */
	assert_int_equal(close(fd), 0);
	expect_contents(path, SIZE_MAX, want, n);
	free(want);
	free(path);
}

static void test_write_error(void **state)
{
	(void)state;
	int fd = open("/dev/full", O_WRONLY);
	if (fd < 0) {
		fprintf(stderr, "skipped: no /dev/full\n");
		return;
	}
	char buf[100] = {0};
	errno = 0;
	assert_int_equal(lg_write_all(fd, buf, sizeof buf), -1);
	assert_int_equal(errno, ENOSPC);
	close(fd);
}

static volatile sig_atomic_t ticks;

static void on_tick(int sig)
{
	(void)sig;
	ticks++;
}

struct drain {
	int fd;
	char *got;
	size_t n;
};

/* Read the pipe slowly to its end (16 KiB a millisecond), so the writer
 * mostly waits on a full pipe: a tick then interrupts a write() that has
 * written nothing yet (EINTR) or part of its bytes (a short write). */
static void *drain_main(void *arg)
{
	struct drain *d = arg;
	struct timespec nap = {0, 1000000};
	for (;;) {
		ssize_t r = read(d->fd, d->got + d->n, 16384);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		d->n += (size_t)r;
		nanosleep(&nap, NULL);
	}
	return NULL;
}

static void test_write_interrupted(void **state)
{
	(void)state;
	const size_t n = 1 << 20;
	char *want = pattern(n);
	int p[2];
	assert_int_equal(pipe(p), 0);
	struct drain d = {.fd = p[0], .got = malloc(n + 16384)};
	assert_non_null(d.got);

	/* the timer's signal goes to this thread only: the reader blocks it */
	sigset_t alrm, old;
	sigemptyset(&alrm);
	sigaddset(&alrm, SIGALRM);
	pthread_sigmask(SIG_BLOCK, &alrm, &old);
	pthread_t reader;
	assert_int_equal(pthread_create(&reader, NULL, drain_main, &d), 0);
	struct sigaction sa, old_sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_tick; /* no SA_RESTART: write() returns short or EINTR */
	sigemptyset(&sa.sa_mask);
	assert_int_equal(sigaction(SIGALRM, &sa, &old_sa), 0);
	struct itimerval every = {{0, 100}, {0, 100}}, off = {{0, 0}, {0, 0}};
	ticks = 0;
	setitimer(ITIMER_REAL, &every, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);

	int rc = lg_write_all(p[1], want, n);
	int err = errno;

	setitimer(ITIMER_REAL, &off, NULL);
	sigaction(SIGALRM, &old_sa, NULL);
	close(p[1]);
	pthread_join(reader, NULL);
	close(p[0]);
	if (rc != 0)
		fail_msg("lg_write_all: %s", strerror(err));
	assert_true(ticks > 0); /* the writer was interrupted */
	assert_int_equal(d.n, n);
	assert_memory_equal(d.got, want, n);
	free(d.got);
	free(want);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_read_empty),
		cmocka_unit_test(test_read_normal),
		cmocka_unit_test(test_read_longer_than_stat),
		cmocka_unit_test(test_refuse_fifo),
		cmocka_unit_test(test_refuse_device_folder_missing),
		cmocka_unit_test(test_bound),
		cmocka_unit_test(test_input_bound),
		cmocka_unit_test(test_read_fd),
		cmocka_unit_test(test_write_file),
		cmocka_unit_test(test_write_error),
		cmocka_unit_test(test_write_interrupted),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
