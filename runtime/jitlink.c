/*
 * jitlink.c - nvJitLink opened lazily with dlopen, and the one link path
 * (jitlink.h). Loading happens under a mutex on the first link; a failure
 * is not remembered, so installing nvJitLink later just works.
 */
#include "jitlink.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wundef"
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#define NVJITLINK_NO_INLINE /* the entry points are resolved by name below */
#include <nvJitLink.h>
#pragma GCC diagnostic pop

#include "env.h"
#include "error.h"
#include "log.h"

/* X(member, params): the nvJitLink entry points used, resolved by their
 * unversioned names (exported beside the versioned ones). */
#define LG_JITLINK_FUNCS(X)                                                                \
	X(nvJitLinkCreate, (nvJitLinkHandle *, uint32_t, const char **))                   \
	X(nvJitLinkDestroy, (nvJitLinkHandle *))                                           \
	X(nvJitLinkAddData, (nvJitLinkHandle, nvJitLinkInputType, const void *, size_t,    \
			     const char *))                                                \
	X(nvJitLinkComplete, (nvJitLinkHandle))                                            \
	X(nvJitLinkGetLinkedCubinSize, (nvJitLinkHandle, size_t *))                        \
	X(nvJitLinkGetLinkedCubin, (nvJitLinkHandle, void *))                              \
	X(nvJitLinkGetErrorLogSize, (nvJitLinkHandle, size_t *))                           \
	X(nvJitLinkGetErrorLog, (nvJitLinkHandle, char *))

struct jitlink_api {
	void *lib;
#define LG_JITLINK_MEMBER(name, params) nvJitLinkResult(*name) params;
	LG_JITLINK_FUNCS(LG_JITLINK_MEMBER)
#undef LG_JITLINK_MEMBER
};

static pthread_mutex_t jl_lock = PTHREAD_MUTEX_INITIALIZER;
static struct jitlink_api jl; /* jl.lib != NULL once loaded */

static const char *const jl_names[] = {"libnvJitLink.so.13", "libnvJitLink.so.12", "libnvJitLink.so"};

static lg_status jl_resolve(void *lib, const char *path)
{
	struct jitlink_api api = {.lib = lib};
	void *p;
#define LG_JITLINK_RESOLVE(name, params)                                                   \
	if (!(p = dlsym(lib, #name)))                                                      \
		return lg_fail(LG_ERR_UNSUPPORTED, "nvJitLink at %s lacks %s", path, #name); \
	memcpy(&api.name, &p, sizeof p);
	LG_JITLINK_FUNCS(LG_JITLINK_RESOLVE)
#undef LG_JITLINK_RESOLVE
	jl = api;
	return LG_OK;
}

static lg_status jl_load_locked(void)
{
	if (jl.lib)
		return LG_OK;
	const char *env = lg_env_get(LG_ENV_NVJITLINK);
	const char *cuda_home = getenv("CUDA_HOME");
	const char *dirs[] = {NULL, cuda_home && *cuda_home ? cuda_home : NULL, "/usr/local/cuda"};
	char path[4096], tried[1024] = "";
	void *lib = NULL;
	if (env) { /* an explicit choice never falls back */
		snprintf(path, sizeof path, "%s", env);
		if (!(lib = dlopen(path, RTLD_NOW | RTLD_LOCAL))) {
			const char *why = dlerror();
			return lg_fail(LG_ERR_UNSUPPORTED, "cannot load nvJitLink from LINGEN_NVJITLINK=%s: %s", env,
				       why ? why : "not found");
		}
	}
	for (size_t d = 0; d < 3 && !lib; d++) {
		if (d > 0 && !dirs[d])
			continue;
		for (size_t i = 0; i < sizeof jl_names / sizeof jl_names[0] && !lib; i++) {
			if (d == 0)
				snprintf(path, sizeof path, "%s", jl_names[i]);
			else
				snprintf(path, sizeof path, "%s/lib64/%s", dirs[d], jl_names[i]);
			lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
			size_t n = strlen(tried);
			if (!lib && n + 8 < sizeof tried)
				snprintf(tried + n, sizeof tried - n, "%s%.300s", n ? ", " : "", path);
		}
	}
	if (!lib)
		return lg_fail(LG_ERR_UNSUPPORTED, "cannot load nvJitLink (the CUDA toolkit's libnvJitLink.so; tried %s)",
			       tried);
	lg_status st = jl_resolve(lib, path);
	if (st != LG_OK) {
		dlclose(lib);
		return st;
	}
	lg_log("nvjitlink: loaded %s", path);
	return LG_OK;
}

static lg_status jl_get(struct jitlink_api *api)
{
	pthread_mutex_lock(&jl_lock);
	lg_status st = jl_load_locked();
	if (st == LG_OK)
		*api = jl;
	pthread_mutex_unlock(&jl_lock);
	return st;
}

lg_status lg_jitlink_load(void)
{
	struct jitlink_api api;
	return jl_get(&api);
}

/* A failed step of a link: its name, result and error log. */
static lg_status link_failed(const struct jitlink_api *api, nvJitLinkHandle h, const char *arch, const char *step,
			     nvJitLinkResult r)
{
	size_t n = 0;
	char *log = NULL;
	if (h && api->nvJitLinkGetErrorLogSize(h, &n) == NVJITLINK_SUCCESS && n > 1 && (log = malloc(n)) &&
	    api->nvJitLinkGetErrorLog(h, log) != NVJITLINK_SUCCESS) {
		free(log);
		log = NULL;
	}
	lg_status st = lg_fail(LG_ERR_COMPILE,
			       "nvJitLink could not link the module for %s (%s: error %d)%s%.3000s", arch, step, (int)r,
			       log ? ":\n" : "", log ? log : "");
	free(log);
	return st;
}

lg_status lg_jitlink_link(const char *arch, const void *const *obj, const size_t *size, const char *const *name,
			  size_t n, void **cubin, size_t *cubin_size)
{
	*cubin = NULL;
	*cubin_size = 0;
	struct jitlink_api api;
	lg_status st = jl_get(&api);
	if (st != LG_OK)
		return st;
	char opt[64];
	snprintf(opt, sizeof opt, "-arch=%s", arch);
	const char *opts[] = {opt};
	nvJitLinkHandle h = NULL;
	nvJitLinkResult r = api.nvJitLinkCreate(&h, 1, opts);
	if (r != NVJITLINK_SUCCESS)
		return link_failed(&api, h, arch, "nvJitLinkCreate", r);
	for (size_t i = 0; i < n && r == NVJITLINK_SUCCESS; i++)
		if ((r = api.nvJitLinkAddData(h, NVJITLINK_INPUT_CUBIN, obj[i], size[i], name[i])) != NVJITLINK_SUCCESS)
			st = link_failed(&api, h, arch, name[i], r);
	if (r == NVJITLINK_SUCCESS && (r = api.nvJitLinkComplete(h)) != NVJITLINK_SUCCESS)
		st = link_failed(&api, h, arch, "nvJitLinkComplete", r);
	size_t bytes = 0;
	if (r == NVJITLINK_SUCCESS && (r = api.nvJitLinkGetLinkedCubinSize(h, &bytes)) != NVJITLINK_SUCCESS)
		st = link_failed(&api, h, arch, "nvJitLinkGetLinkedCubinSize", r);
	void *out = r == NVJITLINK_SUCCESS ? malloc(bytes ? bytes : 1) : NULL;
	if (r == NVJITLINK_SUCCESS && !out)
		st = lg_fail(LG_ERR_NO_MEMORY, "out of memory for a linked cubin of %zu bytes", bytes);
	else if (out && (r = api.nvJitLinkGetLinkedCubin(h, out)) != NVJITLINK_SUCCESS)
		st = link_failed(&api, h, arch, "nvJitLinkGetLinkedCubin", r);
	api.nvJitLinkDestroy(&h);
	if (st != LG_OK) {
		free(out);
		return st;
	}
	*cubin = out;
	*cubin_size = bytes;
	return LG_OK;
}
