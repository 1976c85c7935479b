/*
 * proc.c - run a program and capture its output (proc.h).
 */
#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

extern char **environ;

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
	char *dir = lg_test_tmpdir("proc");
	char *out = lg_test_path(dir, "out"), *err = lg_test_path(dir, "err");
	char **envv = merge_env(env);
	int rc = -1;
	if (!envv)
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
	p->out = lg_test_read_file(out, NULL);
	p->err = lg_test_read_file(err, NULL);
	if (!p->out)
		p->out = strdup("");
	if (!p->err)
		p->err = strdup("");
	rc = 0;
done:
	lg_test_rm_rf(dir);
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
