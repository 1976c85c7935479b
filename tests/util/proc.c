/*
 * proc.c - run a program and capture its output, temp folders (proc.h).
 */
#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

char *lg_test_read(const char *path, size_t *size)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	char *buf = NULL;
	size_t len = 0, cap = 0;
	for (;;) {
		if (len + 4096 + 1 > cap) {
			cap = 2 * cap + 4096 + 1;
			char *nb = realloc(buf, cap);
			if (!nb) {
				free(buf);
				fclose(f);
				return NULL;
			}
			buf = nb;
		}
		size_t got = fread(buf + len, 1, 4096, f);
		len += got;
		if (got < 4096)
			break;
	}
	fclose(f);
	buf[len] = '\0';
	if (size)
		*size = len;
	return buf;
}

int lg_test_write(const char *path, const char *text)
{
	FILE *f = fopen(path, "wb");
	if (!f)
		return -1;
	size_t n = strlen(text);
	int rc = fwrite(text, 1, n, f) == n ? 0 : -1;
	if (fclose(f) != 0)
		rc = -1;
	return rc;
}

char *lg_test_tmpdir(const char *prefix)
{
	const char *base = getenv("TMPDIR");
	char *p;
	if (asprintf(&p, "%s/%s.XXXXXX", base && *base ? base : "/tmp", prefix) < 0)
		return NULL;
	if (!mkdtemp(p)) {
		free(p);
		return NULL;
	}
	return p;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

void lg_test_rmtree(const char *path)
{
	if (path)
		nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* environ with the extras replacing variables of the same name. */
static char **merge_env(char *const extra[])
{
	size_t ne = 0, nx = 0;
	while (environ[ne])
		ne++;
	while (extra && extra[nx])
		nx++;
	char **v = calloc(ne + nx + 1, sizeof *v);
	if (!v)
		return NULL;
	size_t n = 0;
	for (size_t i = 0; i < ne; i++) {
		size_t klen = strcspn(environ[i], "=");
		int replaced = 0;
		for (size_t j = 0; j < nx && !replaced; j++)
			replaced = strncmp(extra[j], environ[i], klen) == 0 && extra[j][klen] == '=';
		if (!replaced)
			v[n++] = environ[i];
	}
	for (size_t j = 0; j < nx; j++)
		v[n++] = extra[j];
	return v;
}

int lg_proc_run(char *const argv[], char *const env[], struct lg_proc *p)
{
	memset(p, 0, sizeof *p);
	char *dir = lg_test_tmpdir("lg-proc");
	char *out = NULL, *err = NULL;
	char **envv = merge_env(env);
	int rc = -1;
	if (!dir || !envv || asprintf(&out, "%s/out", dir) < 0 || asprintf(&err, "%s/err", dir) < 0)
		goto done;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	posix_spawn_file_actions_addopen(&fa, 2, err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	pid_t pid;
	int sr = posix_spawn(&pid, argv[0], &fa, NULL, argv, envv);
	posix_spawn_file_actions_destroy(&fa);
	if (sr != 0)
		goto done;
	int ws;
	while (waitpid(pid, &ws, 0) < 0) {
		if (errno != EINTR)
			goto done;
	}
	p->status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
	p->out = lg_test_read(out, NULL);
	p->err = lg_test_read(err, NULL);
	if (!p->out)
		p->out = strdup("");
	if (!p->err)
		p->err = strdup("");
	rc = 0;
done:
	lg_test_rmtree(dir);
	free(dir);
	free(out);
	free(err);
	free(envv);
	return rc;
}

void lg_proc_free(struct lg_proc *p)
{
	free(p->out);
	free(p->err);
	memset(p, 0, sizeof *p);
}
