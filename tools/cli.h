/*
 * cli.h - what the commands of the `lingen` tool share: the command and
 * option tables, option parsing, usage errors, spec loading, value parsing
 * (arch lists, token lists, integers), folders and atomic file writes.
 *
 * Each command is one file tools/cmd_<name>.c exporting one
 * `const struct lg_cli_cmd`; tools/lingen.c holds the table of commands and
 * dispatches through lg_cli_run(), which parses the arguments against the
 * command's own option table (so `lingen help CMD` and `lingen CMD --help`
 * print the same text) and hands them to the command's run().
 *
 * Exit status: 0 success, 1 a failed check or a runtime error (no GPU, a
 * compile failure, a file that cannot be written), 2 bad usage or bad input
 * (unknown option, a spec that does not parse, a missing file).
 */
#ifndef LG_CLI_H
#define LG_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "lingen.h"

enum { LG_EXIT_OK = 0, LG_EXIT_FAIL = 1, LG_EXIT_USAGE = 2 };

#define LG_CLI_MAX_OPTS 16

/* One option of a command. Tables end with an entry whose name is NULL and
 * are indexed by a command-local enum, so a parsed value is args.val[O_X]. */
struct lg_cli_opt {
	const char *name;  /* long name without "--" */
	char short_name;   /* single-letter alias, 0 if none */
	const char *arg;   /* name of the value in help ("DIR"); NULL for a flag */
	const char *help;  /* one line */
};

/* Parsed arguments: val[i] is the value of option i (a flag gives "1"),
 * NULL when absent; pos the positional arguments (pointers into argv);
 * argc and argv the command's own (argv[0] is its name). */
struct lg_cli_args {
	const char *val[LG_CLI_MAX_OPTS];
	char **pos;
	int npos;
	int argc;
	char **argv;
};

struct lg_cli_cmd {
	const char *name;     /* "build" */
	const char *synopsis; /* arguments after the name, for usage lines */
	const char *summary;  /* one line, for `lingen --help` */
	const char *details;  /* more help text after the options; may be NULL */
	const struct lg_cli_opt *opts; /* NULL-name terminated; may be NULL */
	int min_pos, max_pos; /* positional argument count; max -1 = no limit */
	/* The command on its parsed arguments; returns the exit status. */
	int (*run)(const struct lg_cli_cmd *cmd, const struct lg_cli_args *a);
};

/* Parse argv (argv[0] = the command's name) against cmd->opts and run the
 * command. Accepts "--name VALUE", "--name=VALUE", "-x VALUE", "-xVALUE",
 * "--" and options mixed with positional arguments, and checks the count
 * of positional ones. Returns the exit status: LG_EXIT_OK after printing
 * --help, LG_EXIT_USAGE after a usage error, else cmd->run's. */
int lg_cli_run(const struct lg_cli_cmd *cmd, int argc, char **argv);

/* Print the command's help (usage, summary, options, details). */
void lg_cli_help(const struct lg_cli_cmd *cmd, FILE *f);

/* "lingen CMD: <message>" plus the usage line on stderr; returns
 * LG_EXIT_USAGE. cmd may be NULL for the top level. */
int lg_cli_usage_error(const struct lg_cli_cmd *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* "lingen: <message>" on stderr; returns code. */
int lg_cli_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The message of a failed library call: a copy of lg_last_error() (or the
 * status name when the library left none), valid until the next call on
 * this thread. Take it right after the failed call, before any other lingen
 * call: public calls clear the message on entry. */
const char *lg_cli_error(lg_status st);
/* Exit status for a failed library call: 2 for bad input (spec, argument),
 * 1 for everything else (driver, NVRTC, I/O, CUDA). */
int lg_cli_status_exit(lg_status st);
/* The exit code of a failed lg_ctx_create: as lg_cli_status_exit, but an
 * unreadable tuning file or manifest (LG_ERR_IO) is bad input (2). */
int lg_cli_ctx_exit(lg_status st);

/* ---------------------------------------------------------- values */

/* An integer option value in [min, max]; a usage error names the option. */
int lg_cli_int(const struct lg_cli_cmd *cmd, const char *opt, const char *text,
	       long long min, long long max, long long *out);
/* Option k of cmd as an integer in [min, max] when it was given; *out is
 * left as it is (the default) when it was not. */
int lg_cli_opt_int(const struct lg_cli_cmd *cmd, const struct lg_cli_args *a, int k,
		   long long min, long long max, long long *out);
/* A comma-separated list of positive token counts. *out is malloc'd
 * (caller frees). Empty or NULL text gives the one value `dflt`. */
int lg_cli_tokens(const struct lg_cli_cmd *cmd, const char *text, int64_t dflt,
		  int64_t **out, int *n);
/* A comma-separated list of arch names ("sm_90a,sm_80"), each validated and
 * normalised; duplicates dropped. NULL text gives the default arch. The
 * caller frees the list with lg_cli_strv_free. */
int lg_cli_archs(const struct lg_cli_cmd *cmd, const char *text, char ***out, int *n);
void lg_cli_strv_free(char **v, int n);
/* $LINGEN_ARCH, else "sm_90a": the arch for commands that need no GPU. */
const char *lg_cli_default_arch(void);

/* ----------------------------------------------------------- specs */

/* One kernel of the loaded spec files, with the file it came from. */
struct lg_cli_kernel {
	const lg_spec *spec;
	const char *path;
	size_t index; /* within its file */
	bool model;   /* the file is a model config (expanded in memory) */
};

struct lg_cli_specs {
	lg_spec_file **files;
	bool *model; /* per file: a model config */
	size_t nfiles;
	struct lg_cli_kernel *k; /* every kernel, in file order, duplicates dropped */
	size_t n;
};

/* Load every file named in paths: spec files, or model configs (a JSON
 * object with model keys and no "kernels"), which are expanded in memory
 * into the kernels of one training step, as `lingen expand` does. Kernels given twice
 * are kept once; two different kernels with one entry name are an error.
 * Errors are printed (naming the file and the JSON path) and give
 * LG_EXIT_USAGE; an allocation failure gives LG_EXIT_FAIL. Returns
 * LG_EXIT_OK on success; free with lg_cli_specs_free either way. */
int lg_cli_load_specs(char *const *paths, int n, struct lg_cli_specs *out);
void lg_cli_specs_free(struct lg_cli_specs *s);

/* A context for the GPU's own arch (check, bench). A missing driver or GPU
 * is printed as a runtime error naming `what`; returns LG_EXIT_FAIL. */
int lg_cli_gpu_ctx(const char *what, lg_ctx **ctx);

/* ----------------------------------------------------------- files */

/* Write a file atomically: a temp file in the same folder, fsync, rename.
 * 0 on success, -1 with errno set (the temp file is removed). */
int lg_cli_write_file(const char *path, const void *data, size_t size);
/* lg_cli_write_file as a command step: a failure is printed ("lingen:
 * PATH: why") and gives LG_EXIT_FAIL, as does a NULL path or data (an
 * allocation that failed: "out of memory"). Returns the exit status. */
int lg_cli_save(const char *path, const void *data, size_t size);
/* Create a folder and its parents; a failure is printed ("lingen: DIR:
 * why"). Returns the exit status. */
int lg_cli_mkdir(const char *dir);
/* dir + "/" + name, malloc'd (caller frees); NULL on allocation failure or
 * when name is NULL (an allocation that failed before). */
char *lg_cli_path(const char *dir, const char *name);

/* "lingen CMD ARGS...", the command line as given, malloc'd (caller
 * frees); NULL on allocation failure. For records of how a file was made. */
char *lg_cli_command_line(const struct lg_cli_args *a);

/* Monotonic clock in seconds. */
double lg_cli_now(void);

/* The commands, one per tools/cmd_<name>.c. */
extern const struct lg_cli_cmd lg_cmd_gen;
extern const struct lg_cli_cmd lg_cmd_build;
extern const struct lg_cli_cmd lg_cmd_aot;
extern const struct lg_cli_cmd lg_cmd_check;
extern const struct lg_cli_cmd lg_cmd_bench;
extern const struct lg_cli_cmd lg_cmd_cache;
extern const struct lg_cli_cmd lg_cmd_env;
extern const struct lg_cli_cmd lg_cmd_tune;
extern const struct lg_cli_cmd lg_cmd_expand;

#endif
