/*
 * env.c - the table of every environment variable lingen reads (env.h).
 *
 * All lookups go through lg_env_get so `lingen --help` and the docs can list
 * the variables from one place; an empty value counts as unset.
 */
#include "env.h"

#include <stdlib.h>

const struct lg_env_var lg_env_vars[LG_ENV_COUNT] = {
	[LG_ENV_CACHE_DIR] = {"LINGEN_CACHE_DIR",
			      "disk cache folder; \"off\" disables the disk cache",
			      "$XDG_CACHE_HOME/lingen, else ~/.cache/lingen"},
	[LG_ENV_CACHE_MAX_MB] = {"LINGEN_CACHE_MAX_MB",
				 "bound of the disk cache in MiB (least recently used entries "
				 "are pruned past it)",
				 "1024"},
	[LG_ENV_DUMP_DIR] = {"LINGEN_DUMP_DIR",
			     "write the source, cubin and NVRTC log of each compile here",
			     NULL},
	[LG_ENV_LOG] = {"LINGEN_LOG",
			"1: log cache hits/misses and per-stage timings on stderr", "0"},
	[LG_ENV_ARCH] = {"LINGEN_ARCH",
			 "target arch (e.g. sm_90a) instead of the current device's", NULL},
	[LG_ENV_NVRTC] = {"LINGEN_NVRTC", "path of the libnvrtc shared library to load",
			  "libnvrtc.so.13, .so.12, .so, then $CUDA_HOME/lib64, "
			  "/usr/local/cuda/lib64"},
	[LG_ENV_PDL] = {"LINGEN_PDL",
			"0: launch multi-kernel families without programmatic dependent launch (sm_90+)",
			"1"},
	[LG_ENV_TUNING] = {"LINGEN_TUNING",
			   "tuning file, or folder holding <arch>.json, for tiles of specs that "
			   "give none; \"off\" uses the heuristics",
			   "<arch>.json in the source tree's configs/tuning, else in "
			   "share/lingen/tuning"},
	[LG_ENV_SEED] = {"LINGEN_SEED",
			 "seed of the random inputs of `lingen check` (without --seed) and of the "
			 "tests, to replay a run; each prints the seed it used",
			 "a new seed from the clock"},
	[LG_ENV_REF_THREADS] = {"LINGEN_REF_THREADS",
				"threads of the CPU references and comparisons of `lingen check` and "
				"the GPU tests (the results do not depend on it)",
				"the online CPUs, at most 64"},
	[LG_ENV_NVRTC_OPTIONS] = {"LINGEN_NVRTC_OPTIONS",
				  "extra NVRTC options, blank-separated, after lingen's own (e.g. "
				  "-lineinfo for profiling, -Ofc=max for faster compiles); part of "
				  "the cache key",
				  NULL},
	[LG_ENV_NVJITLINK] = {"LINGEN_NVJITLINK",
			      "path of the libnvJitLink shared library that `lingen build` links a "
			      "bundle's module with (a file that cannot be loaded: no linked module)",
			      "libnvJitLink.so.13, .so.12, .so, then $CUDA_HOME/lib64, "
			      "/usr/local/cuda/lib64"},
};
_Static_assert(sizeof lg_env_vars / sizeof lg_env_vars[0] == LG_ENV_COUNT,
	       "every environment variable is in the table");

const char *lg_env_get(enum lg_env e)
{
	if ((unsigned)e >= LG_ENV_COUNT || !lg_env_vars[e].name)
		return NULL;
	const char *v = getenv(lg_env_vars[e].name);
	return v && *v ? v : NULL;
}
