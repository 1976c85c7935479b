/*
 * cmd_env.c - `lingen env`: every environment variable lingen reads (the
 * table of runtime/env.c), its meaning, default and current value.
 */
#include <stdlib.h>

#include "cache.h"
#include "cli.h"
#include "env.h"

static int run(const struct lg_cli_cmd *cmd, const struct lg_cli_args *a)
{
	(void)cmd;
	(void)a;
	for (int i = 0; i < LG_ENV_COUNT; i++) {
		const struct lg_env_var *v = &lg_env_vars[i];
		const char *now = lg_env_get((enum lg_env)i);
		printf("%-20s %s\n", v->name, v->meaning);
		printf("%-20s   default: %s; now: %s\n", "",
		       v->default_value ? v->default_value : "(none)", now ? now : "(unset)");
	}
	char *dir = lg_cache_dir_resolve(NULL);
	printf("\ndisk cache folder: %s\n", dir ? dir : "?");
	free(dir);
	return LG_EXIT_OK;
}

const struct lg_cli_cmd lg_cmd_env = {
	.name = "env",
	.synopsis = "",
	.summary = "list the environment variables lingen reads, with their values",
	.opts = NULL,
	.min_pos = 0,
	.max_pos = 0,
	.run = run,
};
