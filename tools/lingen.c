/*
 * lingen.c - main() of the `lingen` command-line tool: the table of
 * commands, top-level help and version, and dispatch to tools/cmd_<name>.c.
 *
 *   lingen --help | --version | help [CMD] | CMD [ARGS...]
 *
 * Exit status: 0 success, 1 failed check or runtime error, 2 bad usage or
 * bad input (see cli.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "family.h"
#include "nvrtc.h"

static const struct lg_cli_cmd *const commands[] = {
	&lg_cmd_gen, &lg_cmd_expand, &lg_cmd_build, &lg_cmd_aot, &lg_cmd_check, &lg_cmd_bench,
	&lg_cmd_tune, &lg_cmd_cache, &lg_cmd_env,
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static const struct lg_cli_cmd *find(const char *name)
{
	for (size_t i = 0; i < NCOMMANDS; i++)
		if (strcmp(commands[i]->name, name) == 0)
			return commands[i];
	return NULL;
}

static void usage(FILE *f)
{
	fprintf(f, "lingen %s - a template-free CUDA kernel generator\n\n"
		   "usage: lingen COMMAND [ARGS...]\n"
		   "       lingen help COMMAND | OP | --help | --version\n\ncommands:\n",
		lg_version());
	for (size_t i = 0; i < NCOMMANDS; i++)
		fprintf(f, "  %-7s %s\n", commands[i]->name, commands[i]->summary);
	fputs("\nSPEC is a kernel spec file (configs/kernels/*.json) or a model config\n"
	      "(configs/models/*.json, expanded into one training step's kernels).\n"
	      "Exit status: 0 success, 1 failed check or runtime error, 2 bad usage or input.\n"
	      "Environment variables: see 'lingen env'.\n\nops (kernel families; 'lingen help OP' shows one's keys and arguments):\n",
	      f);
	int width = 0;
	for (int i = 0; i < LG_OP_COUNT; i++)
		width = (int)strlen(lg_op_names[i]) > width ? (int)strlen(lg_op_names[i]) : width;
	for (int i = 0; i < LG_OP_COUNT; i++)
		fprintf(f, "  %-*s %s\n", width, lg_op_names[i], lg_family_get((enum lg_op)i)->summary);
}

static int version(void)
{
	int major, minor;
	printf("lingen %s\n", lg_version());
	lg_status st = lg_nvrtc_version(&major, &minor);
	if (st == LG_OK)
		printf("NVRTC %d.%d\n", major, minor);
	else
		printf("NVRTC not found (%s)\n", lg_cli_error(st));
	return LG_EXIT_OK;
}

static int help(int argc, char **argv)
{
	if (argc < 3) {
		usage(stdout);
		return LG_EXIT_OK;
	}
	const struct lg_cli_cmd *c = find(argv[2]);
	if (c) {
		lg_cli_help(c, stdout);
		return LG_EXIT_OK;
	}
	for (int i = 0; i < LG_OP_COUNT; i++) {
		if (strcmp(lg_op_names[i], argv[2]) != 0)
			continue;
		char *text = lg_family_help(lg_family_get((enum lg_op)i));
		if (!text)
			return lg_cli_fail(LG_EXIT_FAIL, "out of memory");
		fputs(text, stdout);
		free(text);
		return LG_EXIT_OK;
	}
	return lg_cli_usage_error(NULL, "no command or op '%s'", argv[2]);
}

/* The command's exit status, before stdout is checked. */
static int dispatch(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return LG_EXIT_USAGE;
	}
	const char *name = argv[1];
	if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0)
		return help(1, argv);
	if (strcmp(name, "help") == 0)
		return help(argc, argv);
	if (strcmp(name, "--version") == 0 || strcmp(name, "version") == 0)
		return version();
	const struct lg_cli_cmd *c = find(name);
	if (!c)
		return lg_cli_usage_error(NULL, "unknown command '%s'", name);
	return lg_cli_run(c, argc - 1, argv + 1);
}

int main(int argc, char **argv)
{
	int rc = dispatch(argc, argv);
	/* a write error on stdout (a full disk, a closed pipe) is a failure,
	 * whether the buffer failed on the way (ferror) or at the end */
	int err = fflush(stdout) != 0 || ferror(stdout);
	if (err && rc == LG_EXIT_OK)
		rc = lg_cli_fail(LG_EXIT_FAIL, "cannot write the output: %s", strerror(errno ? errno : EIO));
	return rc;
}
