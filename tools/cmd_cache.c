/*
 * cmd_cache.c - `lingen cache ls|clear|prune|verify [--dir D] [--max-mb N]`:
 * look after the disk cache of cubins (runtime/cache.h).
 *
 *   ls      every entry: kernel, arch, size, age since last use, valid
 *   clear   remove every entry
 *   prune   remove least-recently-used entries down to the bound
 *           (--max-mb, else $LINGEN_CACHE_MAX_MB, else 1024)
 *   verify  check every entry; exit 1 naming each invalid one and why
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cache.h"
#include "cli.h"
#include "env.h"

enum { O_DIR, O_MAX_MB };
static const struct lg_cli_opt opts[] = {
	[O_DIR] = {"dir", 'd', "D", "cache folder (default $LINGEN_CACHE_DIR, else ~/.cache/lingen)"},
	[O_MAX_MB] = {"max-mb", 0, "N", "bound for prune, in MiB (default $LINGEN_CACHE_MAX_MB or 1024)"},
	{0},
};

#define MIB (1024.0 * 1024.0)

/* "42s", "7m", "3h", "12d". */
static void age(int64_t mtime, char out[24])
{
	long long s = (long long)time(NULL) - mtime;
	if (s < 0)
		s = 0;
	if (s < 120)
		snprintf(out, 24, "%llds", s);
	else if (s < 7200)
		snprintf(out, 24, "%lldm", s / 60);
	else if (s < 172800)
		snprintf(out, 24, "%lldh", s / 3600);
	else
		snprintf(out, 24, "%lldd", s / 86400);
}

/* The exit status of a cache operation; a failure is printed as
 * "lingen: <folder>: <why>". */
static int status(const lg_cache *c, lg_status st)
{
	if (st != LG_OK)
		return lg_cli_fail(LG_EXIT_FAIL, "%s: %s", lg_cache_path(c), lg_cli_error(st));
	return LG_EXIT_OK;
}

static int cmd_ls(lg_cache *c)
{
	struct lg_cache_entry *e = NULL;
	size_t n = 0;
	int rc = status(c, lg_cache_list(c, &e, &n));
	if (rc != LG_EXIT_OK)
		return rc;
	uint64_t total = 0;
	printf("%-48s %-8s %10s %6s %s\n", "kernel", "arch", "bytes", "age", "valid");
	for (size_t i = 0; i < n; i++) {
		char a[24];
		age(e[i].mtime, a);
		printf("%-48s %-8s %10llu %6s %s%s%s\n", e[i].entry, e[i].arch,
		       (unsigned long long)e[i].size, a, e[i].valid ? "yes" : "NO",
		       e[i].valid ? "" : ": ", e[i].valid ? "" : e[i].problem);
		total += e[i].size;
	}
	printf("%zu entr%s, %.1f MiB in %s\n", n, n == 1 ? "y" : "ies", (double)total / MIB,
	       lg_cache_path(c));
	free(e);
	return LG_EXIT_OK;
}

static int cmd_verify(lg_cache *c)
{
	struct lg_cache_entry *e = NULL;
	size_t n = 0, bad = 0;
	int rc = status(c, lg_cache_list(c, &e, &n));
	if (rc != LG_EXIT_OK)
		return rc;
	for (size_t i = 0; i < n; i++) {
		if (e[i].valid)
			continue;
		bad++;
		fprintf(stderr, "lingen: invalid cache entry %s (%s %s): %s\n", e[i].file,
			e[i].entry, e[i].arch, e[i].problem);
	}
	printf("%zu of %zu entr%s valid in %s\n", n - bad, n, n == 1 ? "y" : "ies",
	       lg_cache_path(c));
	free(e);
	return bad ? LG_EXIT_FAIL : LG_EXIT_OK;
}

static int cmd_clear(lg_cache *c)
{
	size_t removed = 0;
	int rc = status(c, lg_cache_clear(c, &removed));
	if (rc != LG_EXIT_OK)
		return rc;
	printf("removed %zu entr%s from %s\n", removed, removed == 1 ? "y" : "ies",
	       lg_cache_path(c));
	return LG_EXIT_OK;
}

static int cmd_prune(lg_cache *c, uint64_t max_bytes)
{
	size_t removed = 0;
	int rc = status(c, lg_cache_prune(c, max_bytes, &removed));
	if (rc != LG_EXIT_OK)
		return rc;
	printf("removed %zu entr%s from %s (bound %.0f MiB)\n", removed, removed == 1 ? "y" : "ies",
	       lg_cache_path(c), (double)max_bytes / MIB);
	return LG_EXIT_OK;
}

/* The bound: --max-mb, else $LINGEN_CACHE_MAX_MB, else 1024 MiB. */
static int bound(const struct lg_cli_cmd *cmd, const struct lg_cli_args *a, uint64_t *out)
{
	long long mb = 1024;
	const char *env = lg_env_get(LG_ENV_CACHE_MAX_MB);
	int rc = LG_EXIT_OK;
	if (a->val[O_MAX_MB])
		rc = lg_cli_opt_int(cmd, a, O_MAX_MB, 0, 1LL << 40, &mb);
	else if (env && lg_cli_int(cmd, "max-mb ($LINGEN_CACHE_MAX_MB)", env, 0, 1LL << 40, &mb))
		rc = LG_EXIT_USAGE;
	*out = (uint64_t)mb * 1024 * 1024;
	return rc;
}

static int run(const struct lg_cli_cmd *cmd, const struct lg_cli_args *a)
{
	static const char *const subs[] = {"ls", "clear", "prune", "verify"};
	int sub = -1;
	for (int i = 0; i < 4; i++)
		if (strcmp(a->pos[0], subs[i]) == 0)
			sub = i;
	uint64_t max_bytes = 0;
	int rc = sub < 0 ? lg_cli_usage_error(cmd, "unknown action '%s'", a->pos[0])
			 : bound(cmd, a, &max_bytes);
	lg_cache *c = NULL;
	struct stat sb;
	const char *dir = a->val[O_DIR];
	if (rc == LG_EXIT_OK && dir && (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)))
		rc = lg_cli_fail(LG_EXIT_USAGE, "--dir %s: %s, expected an existing cache folder", dir,
				 stat(dir, &sb) != 0 ? strerror(errno) : "not a folder");
	if (rc == LG_EXIT_OK) {
		c = lg_cache_open(a->val[O_DIR], max_bytes);
		if (!c)
			rc = lg_cli_fail(LG_EXIT_FAIL, "out of memory");
		else if (!lg_cache_enabled(c))
			printf("the disk cache is off (%s)\n", lg_cache_path(c));
	}
	if (rc == LG_EXIT_OK && lg_cache_enabled(c)) {
		switch (sub) {
		case 0: rc = cmd_ls(c); break;
		case 1: rc = cmd_clear(c); break;
		case 2: rc = cmd_prune(c, max_bytes); break;
		default: rc = cmd_verify(c); break;
		}
	}
	if (c)
		lg_cache_close(c);
	return rc;
}

const struct lg_cli_cmd lg_cmd_cache = {
	.name = "cache",
	.synopsis = "ls|clear|prune|verify [--dir D] [--max-mb N]",
	.summary = "look after the disk cache (list, clear, prune, verify)",
	.details = "  ls      every entry: kernel, arch, size, age since last use, valid\n"
		   "  clear   remove every entry\n"
		   "  prune   remove least-recently-used entries down to the bound\n"
		   "  verify  check every entry; exit 1 naming each invalid one and why\n",
	.opts = opts,
	.min_pos = 1,
	.max_pos = 1,
	.run = run,
};
