/*
 * cli.c - the helpers every `lingen` command shares (see cli.h): option
 * parsing and help from the command's option table, usage and runtime
 * errors, value lists, spec loading, folders and atomic file writes.
 */
#include "cli.h"
#include "nvrtc.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "cache.h" /* lg_mkdir_p */
#include "env.h"
#include "family.h"
#include "file.h"
#include "model.h"

/* ------------------------------------------------------------ errors */

__attribute__((format(printf, 2, 0))) static void vmsg(const char *prefix, const char *fmt, va_list ap)
{
	fputs(prefix, stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

int lg_cli_usage_error(const struct lg_cli_cmd *cmd, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "lingen%s%s: ", cmd ? " " : "", cmd ? cmd->name : "");
	vmsg("", fmt, ap);
	va_end(ap);
	if (cmd)
		fprintf(stderr, "usage: lingen %s %s\nTry 'lingen help %s'.\n", cmd->name,
			cmd->synopsis, cmd->name);
	else
		fputs("Try 'lingen --help'.\n", stderr);
	return LG_EXIT_USAGE;
}

int lg_cli_fail(int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vmsg("lingen: ", fmt, ap);
	va_end(ap);
	return code;
}

const char *lg_cli_error(lg_status st)
{
	static _Thread_local char copy[8192];
	const char *msg = lg_last_error();
	snprintf(copy, sizeof copy, "%s", msg && msg[0] ? msg : lg_status_str(st));
	return copy;
}

int lg_cli_status_exit(lg_status st)
{
	switch (st) {
	case LG_OK:
		return LG_EXIT_OK;
	case LG_ERR_SPEC:
	case LG_ERR_INVALID_ARG:
		return LG_EXIT_USAGE;
	default:
		return LG_EXIT_FAIL;
	}
}

int lg_cli_ctx_exit(lg_status st)
{
	/* a context reads no input but its tuning file or bundle manifest: one
	 * that cannot be read is bad input, as an unreadable spec file is */
	return st == LG_ERR_IO ? LG_EXIT_USAGE : lg_cli_status_exit(st);
}

/* ------------------------------------------------------------ options */

void lg_cli_help(const struct lg_cli_cmd *cmd, FILE *f)
{
	fprintf(f, "usage: lingen %s %s\n\n%s\n\noptions:\n", cmd->name, cmd->synopsis,
		cmd->summary);
	for (const struct lg_cli_opt *o = cmd->opts; o && o->name; o++) {
		char left[64];
		snprintf(left, sizeof left, "%c%c%s--%s%s%s", o->short_name ? '-' : ' ',
			 o->short_name ? o->short_name : ' ', o->short_name ? ", " : "  ",
			 o->name, o->arg ? " " : "", o->arg ? o->arg : "");
		fprintf(f, "  %-24s %s\n", left, o->help);
	}
	fprintf(f, "  %-24s %s\n", "-h, --help", "show this help");
	if (cmd->details)
		fprintf(f, "\n%s", cmd->details);
}

/* Index of the option named by arg ("--name" or "--name=v" or "-x..."). */
static int find_opt(const struct lg_cli_opt *opts, const char *arg, const char **inline_val)
{
	*inline_val = NULL;
	for (int i = 0; opts && opts[i].name; i++) {
		const struct lg_cli_opt *o = &opts[i];
		if (arg[1] == '-') {
			size_t n = strlen(o->name);
			if (strncmp(arg + 2, o->name, n) != 0)
				continue;
			if (arg[2 + n] == '=') {
				*inline_val = arg + 3 + n;
				return i;
			}
			if (arg[2 + n] == '\0')
				return i;
		} else if (o->short_name && arg[1] == o->short_name) {
			if (arg[2])
				*inline_val = arg + 2;
			return i;
		}
	}
	return -1;
}

/* Returned by parse when the command should go on running. */
#define GO (-1)

/* Parse argv against cmd->opts (see lg_cli_run). Returns GO to go on (the
 * caller frees a->pos), or the exit status after --help or an error. */
static int parse(const struct lg_cli_cmd *cmd, int argc, char **argv, struct lg_cli_args *a)
{
	memset(a, 0, sizeof *a);
	a->argc = argc;
	a->argv = argv;
	a->pos = calloc((size_t)argc + 1, sizeof *a->pos);
	if (!a->pos)
		return lg_cli_fail(LG_EXIT_FAIL, "out of memory");
	bool only_pos = false;
	int rc = GO;
	for (int i = 1; i < argc && rc == GO; i++) {
		const char *s = argv[i];
		if (only_pos || s[0] != '-' || s[1] == '\0') {
			a->pos[a->npos++] = argv[i];
			continue;
		}
		if (strcmp(s, "--") == 0) {
			only_pos = true;
			continue;
		}
		if (strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0) {
			lg_cli_help(cmd, stdout);
			rc = LG_EXIT_OK;
			break;
		}
		const char *v;
		int k = find_opt(cmd->opts, s, &v);
		if (k < 0) {
			rc = lg_cli_usage_error(cmd, "unknown option '%s'", s);
			break;
		}
		const struct lg_cli_opt *o = &cmd->opts[k];
		if (!o->arg) {
			if (v)
				rc = lg_cli_usage_error(cmd, "option --%s takes no value", o->name);
			a->val[k] = "1";
			continue;
		}
		if (!v) {
			if (i + 1 >= argc) {
				rc = lg_cli_usage_error(cmd, "option --%s needs a value (%s)",
							o->name, o->arg);
				break;
			}
			v = argv[++i];
		}
		a->val[k] = v;
	}
	if (rc == GO && a->npos < cmd->min_pos)
		rc = lg_cli_usage_error(cmd, "missing argument");
	if (rc == GO && cmd->max_pos >= 0 && a->npos > cmd->max_pos)
		rc = lg_cli_usage_error(cmd, "unexpected argument '%s'", a->pos[cmd->max_pos]);
	if (rc != GO) {
		free(a->pos);
		a->pos = NULL;
	}
	return rc;
}

int lg_cli_run(const struct lg_cli_cmd *cmd, int argc, char **argv)
{
	struct lg_cli_args a;
	int rc = parse(cmd, argc, argv, &a);
	if (rc != GO)
		return rc;
	rc = cmd->run(cmd, &a);
	free(a.pos);
	return rc;
}

/* ------------------------------------------------------------- values */

int lg_cli_int(const struct lg_cli_cmd *cmd, const char *opt, const char *text,
	       long long min, long long max, long long *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(text, &end, 10);
	/* strict: digits with an optional '-', no space around (strtoll skips
	 * leading space; none is accepted after, so none before either) */
	bool starts = (text[0] >= '0' && text[0] <= '9') || (text[0] == '-' && text[1] >= '0' && text[1] <= '9');
	if (!starts || errno || end == text || *end || v < min || v > max)
		return lg_cli_usage_error(cmd, "--%s: found '%s', expected an integer from %lld to %lld",
					  opt, text, min, max);
	*out = v;
	return LG_EXIT_OK;
}

int lg_cli_opt_int(const struct lg_cli_cmd *cmd, const struct lg_cli_args *a, int k,
		   long long min, long long max, long long *out)
{
	if (!a->val[k])
		return LG_EXIT_OK;
	return lg_cli_int(cmd, cmd->opts[k].name, a->val[k], min, max, out);
}

/* Split a comma-separated list into malloc'd strings. */
static int split(const char *text, char ***out, int *n)
{
	*out = NULL;
	*n = 0;
	int cap = 1;
	for (const char *p = text; *p; p++)
		cap += *p == ',';
	char **v = calloc((size_t)cap, sizeof *v);
	if (!v)
		return -1;
	const char *p = text;
	for (;;) {
		size_t len = strcspn(p, ",");
		v[*n] = strndup(p, len);
		if (!v[*n]) {
			lg_cli_strv_free(v, *n);
			return -1;
		}
		(*n)++;
		if (!p[len])
			break;
		p += len + 1;
	}
	*out = v;
	return 0;
}

void lg_cli_strv_free(char **v, int n)
{
	for (int i = 0; v && i < n; i++)
		free(v[i]);
	free(v);
}

int lg_cli_tokens(const struct lg_cli_cmd *cmd, const char *text, int64_t dflt, int64_t **out,
		  int *n)
{
	*out = NULL;
	*n = 0;
	char **parts = NULL;
	int np = 0;
	if (!text) {
		*out = malloc(sizeof **out);
		if (!*out)
			return lg_cli_fail(LG_EXIT_FAIL, "out of memory");
		(*out)[0] = dflt;
		*n = 1;
		return LG_EXIT_OK;
	}
	if (split(text, &parts, &np))
		return lg_cli_fail(LG_EXIT_FAIL, "out of memory");
	int64_t *t = calloc((size_t)np, sizeof *t);
	int rc = t ? LG_EXIT_OK : lg_cli_fail(LG_EXIT_FAIL, "out of memory");
	for (int i = 0; i < np && rc == LG_EXIT_OK; i++) {
		long long v = 0;
		rc = lg_cli_int(cmd, "tokens", parts[i], 1, INT32_MAX, &v);
		if (rc == LG_EXIT_OK)
			t[i] = v;
	}
	lg_cli_strv_free(parts, np);
	if (rc != LG_EXIT_OK) {
		free(t);
		return rc;
	}
	*out = t;
	*n = np;
	return LG_EXIT_OK;
}

const char *lg_cli_default_arch(void)
{
	const char *a = lg_env_get(LG_ENV_ARCH);
	return a ? a : "sm_90a";
}

/* "; this NVRTC (X.Y) knows: sm_80, sm_86, sm_90, sm_90a, ..." (the targets
 * lingen takes among the SM numbers NVRTC lists), or "" without NVRTC. */
static void known_archs(char *buf, size_t size)
{
	int archs[128], n = 0, major = 0, minor = 0;
	buf[0] = '\0';
	if (lg_nvrtc_archs(archs, 128, &n) != LG_OK || lg_nvrtc_version(&major, &minor) != LG_OK)
		return;
	size_t len = (size_t)snprintf(buf, size, "; this NVRTC (%d.%d) knows:", major, minor);
	for (int i = 0, first = 1; i < n && len < size; i++) {
		if (archs[i] < 80)
			continue;
		len += (size_t)snprintf(buf + len, size - len, "%s sm_%d", first ? "" : ",", archs[i]);
		if (archs[i] >= 90 && len < size)
			len += (size_t)snprintf(buf + len, size - len, ", sm_%da", archs[i]);
		first = 0;
	}
}

/* Whether NVRTC lists SM number sm (true when it cannot be asked: then the
 * compile says). */
static bool nvrtc_knows(int sm)
{
	int archs[128], n = 0;
	if (lg_nvrtc_archs(archs, 128, &n) != LG_OK || n == 0)
		return true;
	for (int i = 0; i < n; i++)
		if (archs[i] == sm)
			return true;
	return false;
}

int lg_cli_archs(const struct lg_cli_cmd *cmd, const char *text, char ***out, int *n)
{
	char **v;
	int nv;
	if (split(text ? text : lg_cli_default_arch(), &v, &nv))
		return lg_cli_fail(LG_EXIT_FAIL, "out of memory");
	int kept = 0;
	for (int i = 0; i < nv; i++) {
		struct lg_target t;
		if (!lg_target_parse(v[i], &t) || !nvrtc_knows(t.sm)) {
			char known[512];
			known_archs(known, sizeof known);
			int rc = lg_cli_usage_error(cmd,
						    "--arch: found '%s', expected sm_<NN> with NN >= 80 or sm_<NN>a "
						    "with NN >= 90 (e.g. sm_90a, sm_80)%s",
						    v[i], known);
			lg_cli_strv_free(v, nv);
			return rc;
		}
		bool dup = false;
		for (int j = 0; j < kept; j++)
			dup = dup || strcmp(v[j], t.name) == 0;
		free(v[i]);
		v[i] = NULL;
		if (!dup) {
			v[kept] = strdup(t.name);
			if (!v[kept]) {
				lg_cli_strv_free(v, nv);
				return lg_cli_fail(LG_EXIT_FAIL, "out of memory");
			}
			kept++;
		}
	}
	*out = v;
	*n = kept;
	return LG_EXIT_OK;
}

/* -------------------------------------------------------------- specs */

/* The library's message, prefixed with the file name unless it names it.
 * Anything wrong with an input file is bad input (2); only running out of
 * memory is a runtime error (1). */
static int load_error(const char *path, lg_status st)
{
	const char *msg = lg_cli_error(st);
	int code = st == LG_ERR_NO_MEMORY ? LG_EXIT_FAIL : LG_EXIT_USAGE;
	if (strstr(msg, path))
		return lg_cli_fail(code, "%s", msg);
	return lg_cli_fail(code, "%s: %s", path, msg);
}

/* A spec file, or a model config expanded into one (the same text
 * `lingen expand` prints). */
static lg_status load_file(const char *path, lg_spec_file **out, bool *model)
{
	char *text = NULL, *expanded = NULL;
	size_t len = 0;
	lg_status st = lg_read_file(path, &text, &len);
	*model = st == LG_OK && lg_model_is_config(text, len);
	if (*model) {
		st = lg_model_expand_text(text, len, path, &expanded);
		free(text);
		text = expanded;
		len = text ? strlen(text) : 0;
	}
	if (st == LG_OK)
		st = lg_spec_file_parse(text, len, path, out);
	free(text);
	return st;
}

/* Add one kernel unless an identical one is already there. */
static int add_kernel(struct lg_cli_specs *s, const lg_spec *sp, const char *path, size_t idx, bool model)
{
	char *canon = lg_spec_canonical(sp);
	if (!canon)
		return lg_cli_fail(LG_EXIT_FAIL, "out of memory");
	int rc = LG_EXIT_OK;
	bool dup = false;
	for (size_t i = 0; i < s->n && rc == LG_EXIT_OK && !dup; i++) {
		if (strcmp(lg_spec_entry(s->k[i].spec), lg_spec_entry(sp)) != 0)
			continue;
		char *other = lg_spec_canonical(s->k[i].spec);
		if (!other)
			rc = lg_cli_fail(LG_EXIT_FAIL, "out of memory");
		else if (strcmp(other, canon) == 0)
			dup = true;
		else
			rc = lg_cli_fail(LG_EXIT_USAGE,
					 "%s: kernels[%zu] and %s: kernels[%zu] differ but share the entry name %s",
					 s->k[i].path, s->k[i].index, path, idx, lg_spec_entry(sp));
		free(other);
	}
	free(canon);
	if (rc == LG_EXIT_OK && !dup)
		s->k[s->n++] = (struct lg_cli_kernel){sp, path, idx, model};
	return rc;
}

int lg_cli_load_specs(char *const *paths, int n, struct lg_cli_specs *out)
{
	memset(out, 0, sizeof *out);
	out->files = calloc((size_t)n + 1, sizeof *out->files);
	out->model = calloc((size_t)n + 1, sizeof *out->model);
	if (!out->files || !out->model)
		return lg_cli_fail(LG_EXIT_FAIL, "out of memory");
	size_t total = 0;
	for (int i = 0; i < n; i++) {
		struct stat st;
		if (stat(paths[i], &st) != 0)
			return lg_cli_fail(LG_EXIT_USAGE, "%s: %s", paths[i], strerror(errno));
		if (S_ISDIR(st.st_mode))
			return lg_cli_fail(LG_EXIT_USAGE, "%s: is a folder, expected a spec file or a model config",
					   paths[i]);
		lg_status rc = load_file(paths[i], &out->files[i], &out->model[i]);
		if (rc != LG_OK)
			return load_error(paths[i], rc);
		out->nfiles++;
		total += lg_spec_file_count(out->files[i]);
	}
	out->k = calloc(total + 1, sizeof *out->k);
	if (!out->k)
		return lg_cli_fail(LG_EXIT_FAIL, "out of memory");
	for (size_t f = 0; f < out->nfiles; f++) {
		size_t cnt = lg_spec_file_count(out->files[f]);
		for (size_t j = 0; j < cnt; j++) {
			int rc = add_kernel(out, lg_spec_file_get(out->files[f], j), paths[f], j, out->model[f]);
			if (rc != LG_EXIT_OK)
				return rc;
		}
	}
	if (out->n == 0)
		return lg_cli_fail(LG_EXIT_USAGE, "%s: no kernels", n == 1 ? paths[0] : "spec files");
	return LG_EXIT_OK;
}

void lg_cli_specs_free(struct lg_cli_specs *s)
{
	for (size_t i = 0; s->files && i < s->nfiles; i++)
		lg_spec_file_free(s->files[i]);
	free(s->files);
	free(s->model);
	free(s->k);
	memset(s, 0, sizeof *s);
}

int lg_cli_gpu_ctx(const char *what, lg_ctx **ctx)
{
	lg_ctx_opts o = {.arch = NULL, .cache_dir = NULL};
	lg_status st = lg_ctx_create(&o, ctx);
	if (lg_cli_ctx_exit(st) == LG_EXIT_USAGE) { /* bad input (a tuning file), not a missing GPU */
		*ctx = NULL;
		return lg_cli_fail(LG_EXIT_USAGE, "%s", lg_cli_error(st));
	}
	if (st != LG_OK) {
		const char *why = lg_cli_error(st);
		*ctx = NULL;
		return lg_cli_fail(LG_EXIT_FAIL, "%s needs a CUDA GPU and its driver: %s (%s)", what,
				   why, lg_status_str(st));
	}
	return LG_EXIT_OK;
}

/* -------------------------------------------------------------- files */

char *lg_cli_path(const char *dir, const char *name)
{
	char *p;
	if (!name)
		return NULL;
	size_t n = strlen(dir);
	bool slash = n > 0 && dir[n - 1] == '/';
	if (asprintf(&p, "%s%s%s", dir, slash ? "" : "/", name) < 0)
		return NULL;
	return p;
}

/* Write to a path that is not a regular file (a device, a FIFO): in place,
 * never by rename (which would replace the device with a file). */
static int write_in_place(const char *path, const void *data, size_t size)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	int rc = lg_write_all(fd, data, size), err = errno;
	if (close(fd) != 0 && rc == 0) {
		rc = -1;
		err = errno;
	}
	errno = err;
	return rc;
}

int lg_cli_write_file(const char *path, const void *data, size_t size)
{
	struct stat st;
	if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
		if (S_ISDIR(st.st_mode)) {
			errno = EISDIR;
			return -1;
		}
		return write_in_place(path, data, size);
	}
	char *tmp;
	if (asprintf(&tmp, "%s.tmp.XXXXXX", path) < 0)
		return -1;
	int fd = mkstemp(tmp);
	if (fd < 0) {
		free(tmp);
		return -1;
	}
	int rc = lg_write_all(fd, data, size);
	if (rc == 0)
		rc = fchmod(fd, 0644);
	if (rc == 0)
		rc = fsync(fd);
	int err = errno;
	if (close(fd) != 0 && rc == 0) {
		rc = -1;
		err = errno;
	}
	if (rc == 0 && rename(tmp, path) != 0) {
		rc = -1;
		err = errno;
	}
	if (rc != 0) {
		unlink(tmp);
		errno = err;
	}
	free(tmp);
	return rc;
}

int lg_cli_save(const char *path, const void *data, size_t size)
{
	if (!path || !data)
		return lg_cli_fail(LG_EXIT_FAIL, "out of memory");
	if (lg_cli_write_file(path, data, size) != 0)
		return lg_cli_fail(LG_EXIT_FAIL, "%s: %s", path, strerror(errno));
	return LG_EXIT_OK;
}

int lg_cli_mkdir(const char *dir)
{
	if (lg_mkdir_p(dir) != 0)
		return lg_cli_fail(LG_EXIT_FAIL, "%s: %s", dir, strerror(errno));
	return LG_EXIT_OK;
}

char *lg_cli_command_line(const struct lg_cli_args *a)
{
	lg_buf b;
	lg_buf_init(&b);
	lg_emit(&b, "lingen");
	for (int i = 0; i < a->argc; i++)
		lg_emit(&b, " %s", a->argv[i]);
	return lg_buf_finish(&b, NULL);
}

double lg_cli_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
