/*
 * env.h - every environment variable lingen reads, in one table.
 */
#ifndef LG_RUNTIME_ENV_H
#define LG_RUNTIME_ENV_H

enum lg_env {
	LG_ENV_CACHE_DIR,   /* LINGEN_CACHE_DIR: cache folder, "off" disables */
	LG_ENV_CACHE_MAX_MB,/* LINGEN_CACHE_MAX_MB: disk cache bound (default 1024) */
	LG_ENV_DUMP_DIR,    /* LINGEN_DUMP_DIR: write .cu/.ptx?/.cubin/.json of each compile */
	LG_ENV_LOG,         /* LINGEN_LOG: 1 = cache hits/misses and per-stage timings on stderr */
	LG_ENV_ARCH,        /* LINGEN_ARCH: override the target arch */
	LG_ENV_NVRTC,       /* LINGEN_NVRTC: path of libnvrtc to load */
	LG_ENV_PDL,         /* LINGEN_PDL: 0 = no programmatic dependent launch */
	LG_ENV_TUNING,      /* LINGEN_TUNING: tuning file or folder, "off" disables */
	LG_ENV_SEED,        /* LINGEN_SEED: seed of the random inputs of `lingen check` and the tests */
	LG_ENV_REF_THREADS, /* LINGEN_REF_THREADS: threads of the CPU references (check, tests) */
	LG_ENV_NVRTC_OPTIONS, /* LINGEN_NVRTC_OPTIONS: extra NVRTC options (cache key) */
	LG_ENV_NVJITLINK,   /* LINGEN_NVJITLINK: path of libnvJitLink to load (lingen build) */
	LG_ENV_COUNT
};

struct lg_env_var {
	const char *name;
	const char *meaning;
	const char *default_value; /* as documented, NULL if none */
};

extern const struct lg_env_var lg_env_vars[LG_ENV_COUNT];

/* The variable's value, NULL when unset or empty. */
const char *lg_env_get(enum lg_env e);

#endif
