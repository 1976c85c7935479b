/*
 * nvrtc.c - NVRTC opened lazily with dlopen, and the one compile path.
 *
 * Loading: $LINGEN_NVRTC, when set, is the only library tried (an explicit
 * choice never falls back silently); otherwise libnvrtc.so.13, .so.12, .so by
 * the loader's search, then the same names under $CUDA_HOME/lib64 and
 * /usr/local/cuda/lib64. Loading happens under a mutex on the first compile;
 * a failure is not remembered, so installing NVRTC later just works.
 *
 * Compiling: one header-free program per kernel, the options of
 * lg_nvrtc_options (in the cache key), cubin out, never PTX. A failed
 * compile keeps the NVRTC log, the options and the numbered source around
 * the first error in lg_last_error(). $LINGEN_DUMP_DIR receives
 * <name>.<arch>.cu/.cubin/.log of each compile; a dump problem is one
 * warning, never an error.
 */
#include "nvrtc.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wundef" /* the toolkit's header tests undefined macros */
#include <nvrtc.h>
#pragma GCC diagnostic pop
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache.h"
#include "env.h"
#include "error.h"
#include "file.h"
#include "log.h"

/* X(member, params): the NVRTC entry points used, resolved by name. */
#define LG_NVRTC_FUNCS(X)                                                                  \
	X(nvrtcVersion, (int *, int *))                                                    \
	X(nvrtcCreateProgram, (nvrtcProgram *, const char *, const char *, int,             \
			       const char *const *, const char *const *))                   \
	X(nvrtcDestroyProgram, (nvrtcProgram *))                                            \
	X(nvrtcCompileProgram, (nvrtcProgram, int, const char *const *))                    \
	X(nvrtcGetProgramLogSize, (nvrtcProgram, size_t *))                                 \
	X(nvrtcGetProgramLog, (nvrtcProgram, char *))                                       \
	X(nvrtcGetCUBINSize, (nvrtcProgram, size_t *))                                      \
	X(nvrtcGetCUBIN, (nvrtcProgram, char *))                                            \
	X(nvrtcGetNumSupportedArchs, (int *))                                               \
	X(nvrtcGetSupportedArchs, (int *))

struct nvrtc_api {
	void *lib;
	const char *(*nvrtcGetErrorString)(nvrtcResult);
#define LG_NVRTC_MEMBER(name, params) nvrtcResult(*name) params;
	LG_NVRTC_FUNCS(LG_NVRTC_MEMBER)
#undef LG_NVRTC_MEMBER
};

static pthread_mutex_t nv_lock = PTHREAD_MUTEX_INITIALIZER;
static struct nvrtc_api nv;  /* nv.lib != NULL once loaded */
static int nv_blocked;

/* ------------------------------------------------------------- loading */

static const char *const nv_names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};

static lg_status nv_resolve(void *lib, const char *path)
{
	struct nvrtc_api api = {.lib = lib};
	void *p;
#define LG_NVRTC_RESOLVE(name, params)                                                     \
	if (!(p = dlsym(lib, #name)))                                                      \
		return lg_fail(LG_ERR_NVRTC, "NVRTC at %s lacks %s", path, #name);         \
	memcpy(&api.name, &p, sizeof p);
	LG_NVRTC_FUNCS(LG_NVRTC_RESOLVE)
	LG_NVRTC_RESOLVE(nvrtcGetErrorString, x)
#undef LG_NVRTC_RESOLVE
	nv = api;
	return LG_OK;
}

/* Try one name or path; on failure append the loader's reason to *tried. */
static void *nv_try(const char *path, char *tried, size_t cap)
{
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		const char *why = dlerror();
		size_t n = strlen(tried);
		if (n + 1 < cap) /* truncation of the list of reasons is fine */
			n += (size_t)snprintf(tried + n, cap - n, "\n  %.*s: ", (int)(cap / 4), path);
		if (n + 1 < cap)
			snprintf(tried + n, cap - n, "%.*s", (int)(cap / 2), why ? why : "not found");
	}
	return lib;
}

static lg_status nv_load_locked(void)
{
	if (nv.lib)
		return LG_OK;
	if (nv_blocked)
		return lg_fail(LG_ERR_NVRTC, "NVRTC is unavailable (blocked for tests); a cache "
					     "miss cannot be compiled");
	char tried[2048] = "";
	void *lib = NULL;
	char path[4096];
	const char *env = lg_env_get(LG_ENV_NVRTC);
	if (env) {
		snprintf(path, sizeof path, "%s", env);
		lib = nv_try(path, tried, sizeof tried);
	} else {
		const char *cuda_home = getenv("CUDA_HOME");
		const char *dirs[] = {NULL, cuda_home && *cuda_home ? cuda_home : NULL,
				      "/usr/local/cuda"};
		for (size_t d = 0; d < 3 && !lib; d++) {
			if (d > 0 && !dirs[d])
				continue;
			for (size_t i = 0; i < sizeof nv_names / sizeof nv_names[0] && !lib; i++) {
				if (d == 0)
					snprintf(path, sizeof path, "%s", nv_names[i]);
				else
					snprintf(path, sizeof path, "%s/lib64/%s", dirs[d],
						 nv_names[i]);
				lib = nv_try(path, tried, sizeof tried);
			}
		}
	}
	if (!lib)
		return lg_fail(LG_ERR_NVRTC,
			       "cannot load NVRTC%s%s; it is needed to compile kernels that are "
			       "not in the cache (install the CUDA toolkit's NVRTC or set "
			       "LINGEN_NVRTC to the path of libnvrtc.so). Tried:%s",
			       env ? " from LINGEN_NVRTC=" : "", env ? env : "", tried);
	lg_status st = nv_resolve(lib, path);
	if (st != LG_OK) {
		dlclose(lib);
		return st;
	}
	int major = 0, minor = 0;
	nv.nvrtcVersion(&major, &minor);
	lg_log("nvrtc: loaded %s (version %d.%d)", path, major, minor);
	return LG_OK;
}

/* Load NVRTC if needed and copy its table for this call. */
static lg_status nv_get(struct nvrtc_api *api)
{
	pthread_mutex_lock(&nv_lock);
	lg_status st = nv_load_locked();
	if (st == LG_OK)
		*api = nv;
	pthread_mutex_unlock(&nv_lock);
	return st;
}

void lg_nvrtc_block_for_tests(int blocked)
{
	pthread_mutex_lock(&nv_lock);
	nv_blocked = blocked;
	if (blocked && nv.lib) {
		/* NVRTC is not unloaded: the runtime it started may not survive a
		 * dlclose and reload; forgetting the handle is enough. */
		memset(&nv, 0, sizeof nv);
	}
	pthread_mutex_unlock(&nv_lock);
}

bool lg_nvrtc_loaded(char *path, size_t len)
{
	pthread_mutex_lock(&nv_lock);
	struct nvrtc_api api = nv;
	pthread_mutex_unlock(&nv_lock);
	if (len)
		path[0] = '\0';
	if (!api.lib)
		return false;
	Dl_info info;
	void *sym;
	memcpy(&sym, &api.nvrtcVersion, sizeof sym);
	if (len && dladdr(sym, &info) && info.dli_fname)
		snprintf(path, len, "%s", info.dli_fname);
	return true;
}

lg_status lg_nvrtc_version(int *major, int *minor)
{
	struct nvrtc_api api;
	lg_status st = nv_get(&api);
	if (st != LG_OK)
		return st;
	nvrtcResult r = api.nvrtcVersion(major, minor);
	if (r != NVRTC_SUCCESS)
		return lg_fail(LG_ERR_NVRTC, "nvrtcVersion: %s", api.nvrtcGetErrorString(r));
	return LG_OK;
}

/* ------------------------------------------------------------- options */

#define LG_NVRTC_MAX_ARCHS 32
#define LG_NVRTC_NBASE 3   /* --gpu-architecture, --std, --minimal */
#define LG_NVRTC_NEXTRA 8  /* LINGEN_NVRTC_OPTIONS: at most this many */
#define LG_NVRTC_NOPTS (LG_NVRTC_NBASE + LG_NVRTC_NEXTRA)
_Static_assert(LG_NVRTC_NOPTS == LG_NVRTC_MAX_OPTIONS, "nvrtc.h's LG_NVRTC_MAX_OPTIONS");
#define LG_NVRTC_EXTRA_MAX 256

/* Interned option lists, one per arch, NVRTC option set and
 * LINGEN_NVRTC_OPTIONS value, never freed: the pointers handed out stay
 * valid for the life of the process. */
static struct {
	char arch[16];
	bool minimal;
	char gpu_arch[48];
	char extra[LG_NVRTC_EXTRA_MAX]; /* the variable's value, split in place */
	char key[LG_NVRTC_EXTRA_MAX];   /* the value as given */
	int n;
	const char *opts[LG_NVRTC_NOPTS + 1];
} arch_opts[LG_NVRTC_MAX_ARCHS];
static int narch_opts;
static pthread_mutex_t opts_lock = PTHREAD_MUTEX_INITIALIZER;

/* "sm_" or "compute_", digits, an optional lower-case suffix ("a", "f"). */
static int arch_valid(const char *arch)
{
	const char *p = arch;
	if (!arch || strlen(arch) >= 16)
		return 0;
	if (strncmp(p, "sm_", 3) == 0)
		p += 3;
	else
		return 0;
	if (*p < '0' || *p > '9')
		return 0;
	while (*p >= '0' && *p <= '9')
		p++;
	if (*p >= 'a' && *p <= 'z')
		p++;
	return *p == '\0';
}

/* --minimal (NVRTC 12.4 on) leaves out the texture, device-runtime and
 * runtime-API declarations of NVRTC's built-in headers, which no generated
 * kernel uses: less front-end work, and byte-identical cubins for every
 * kernel of the ling-mini-2.0 step (bench/jit-load.md). */
static bool has_minimal(int major, int minor) { return major > 12 || (major == 12 && minor >= 4); }

/* Split LINGEN_NVRTC_OPTIONS (v, at most LG_NVRTC_EXTRA_MAX - 1 bytes) at
 * blanks into buf, its words into words[]: the number of words, or -1 with
 * the error set when one does not start with '-', holds a quote or a
 * backslash, or there are more than LG_NVRTC_NEXTRA. */
static int split_extra(const char *v, char *buf, const char **words)
{
	int n = 0;
	snprintf(buf, LG_NVRTC_EXTRA_MAX, "%s", v);
	for (char *p = buf; *p;) {
		while (*p == ' ' || *p == '\t' || *p == '\n')
			*p++ = '\0';
		if (!*p)
			break;
		if (*p != '-' || n == LG_NVRTC_NEXTRA) {
			if (n == LG_NVRTC_NEXTRA)
				lg_fail(LG_ERR_INVALID_ARG, "LINGEN_NVRTC_OPTIONS=\"%s\": more than %d options", v,
					LG_NVRTC_NEXTRA);
			else
				lg_fail(LG_ERR_INVALID_ARG,
					"LINGEN_NVRTC_OPTIONS=\"%s\": each option starts with '-' (blank-separated)", v);
			return -1;
		}
		words[n++] = p;
		while (*p && *p != ' ' && *p != '\t' && *p != '\n') {
			if (*p == '"' || *p == '\'' || *p == '\\') {
				lg_fail(LG_ERR_INVALID_ARG,
					"LINGEN_NVRTC_OPTIONS=\"%s\": no quotes or backslashes", v);
				return -1;
			}
			p++;
		}
	}
	return n;
}

const char *const *lg_nvrtc_options(const char *arch, int major, int minor, int *count)
{
	const char *const *res = NULL;
	bool minimal = has_minimal(major, minor);
	const char *extra = lg_env_get(LG_ENV_NVRTC_OPTIONS);
	int n = 0;
	if (count)
		*count = 0;
	if (!arch_valid(arch))
		return NULL;
	if (!extra)
		extra = "";
	if (strlen(extra) >= LG_NVRTC_EXTRA_MAX) {
		lg_fail(LG_ERR_INVALID_ARG, "LINGEN_NVRTC_OPTIONS is longer than %d bytes",
			LG_NVRTC_EXTRA_MAX - 1);
		return NULL;
	}
	pthread_mutex_lock(&opts_lock);
	for (int i = 0; i < narch_opts && !res; i++)
		if (strcmp(arch_opts[i].arch, arch) == 0 && arch_opts[i].minimal == minimal &&
		    strcmp(arch_opts[i].key, extra) == 0) {
			res = arch_opts[i].opts;
			n = arch_opts[i].n;
		}
	if (!res && narch_opts < LG_NVRTC_MAX_ARCHS) {
		int i = narch_opts;
		const char *words[LG_NVRTC_NEXTRA];
		int nw = split_extra(extra, arch_opts[i].extra, words);
		if (nw >= 0) {
			narch_opts++;
			snprintf(arch_opts[i].arch, sizeof arch_opts[i].arch, "%s", arch);
			snprintf(arch_opts[i].key, sizeof arch_opts[i].key, "%s", extra);
			snprintf(arch_opts[i].gpu_arch, sizeof arch_opts[i].gpu_arch,
				 "--gpu-architecture=%s", arch);
			arch_opts[i].minimal = minimal;
			arch_opts[i].opts[n++] = arch_opts[i].gpu_arch;
			arch_opts[i].opts[n++] = "--std=c++17";
			if (minimal)
				arch_opts[i].opts[n++] = "--minimal";
			for (int w = 0; w < nw; w++)
				arch_opts[i].opts[n++] = words[w];
			arch_opts[i].opts[n] = NULL;
			arch_opts[i].n = n;
			res = arch_opts[i].opts;
		}
	}
	bool full = !res && narch_opts == LG_NVRTC_MAX_ARCHS;
	pthread_mutex_unlock(&opts_lock);
	if (full)
		lg_fail(LG_ERR_INVALID_ARG, "more than %d arch and LINGEN_NVRTC_OPTIONS pairs in one process",
			LG_NVRTC_MAX_ARCHS);
	if (res && count)
		*count = n;
	return res;
}

/* ---------------------------------------------------------------- dumps */

static int write_file(const char *path, const void *data, size_t size)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -1;
	if (lg_write_all(fd, data, size) != 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return close(fd);
}

/* Write <dir>/<name>.<arch>.{cu,cubin,log}; one warning on any failure. */
static void dump(const char *name, const char *arch, const char *src, const void *cubin,
		 size_t cubin_size, const char *log)
{
	const char *dir = lg_env_get(LG_ENV_DUMP_DIR);
	if (!dir)
		return;
	char base[256], path[4400];
	size_t n = 0;
	for (const char *p = name; *p && n + 1 < sizeof base; p++)
		base[n++] = *p == '/' || *p == '\\' ? '_' : *p;
	base[n] = '\0';
	if (strcmp(base, ".") == 0 || strcmp(base, "..") == 0 || n == 0)
		snprintf(base, sizeof base, "kernel");

	const char *what = dir;
	if (lg_mkdir_p(dir) != 0)
		goto fail;
	snprintf(path, sizeof path, "%s/%s.%s.cu", dir, base, arch);
	what = path;
	if (write_file(path, src, strlen(src)) != 0)
		goto fail;
	if (cubin) {
		snprintf(path, sizeof path, "%s/%s.%s.cubin", dir, base, arch);
		if (write_file(path, cubin, cubin_size) != 0)
			goto fail;
	}
	if (log && *log) {
		snprintf(path, sizeof path, "%s/%s.%s.log", dir, base, arch);
		if (write_file(path, log, strlen(log)) != 0)
			goto fail;
	}
	return;
fail:
	lg_warn("cannot write the compile dump %s (%s); continuing", what, strerror(errno));
}

/* ------------------------------------------------------------- compiling */

/* The line number of the first "(N): error" in an NVRTC log, 0 if none. */
static long first_error_line(const char *log)
{
	for (const char *p = log; (p = strchr(p, '(')) != NULL; p++) {
		char *end;
		long line = strtol(p + 1, &end, 10);
		if (end != p + 1 && strncmp(end, "): error", 8) == 0 && line > 0)
			return line;
	}
	return 0;
}

/* Append the numbered source: a window around `center` (or the start). */
static void append_source(const char *src, long center)
{
	const long before = 12, after = 12, head = 40;
	long lo = center > 0 ? center - before : 1;
	long hi = center > 0 ? center + after : head;
	if (lo < 1)
		lo = 1;
	long line = 1;
	const char *p = src;
	if (lo > 1)
		lg_fail_append("  ... (lines 1-%ld not shown)\n", lo - 1);
	while (*p) {
		const char *eol = strchr(p, '\n');
		size_t len = eol ? (size_t)(eol - p) : strlen(p);
		if (line >= lo && line <= hi) {
			int show = len > 160 ? 160 : (int)len;
			lg_fail_append("%5ld%s| %.*s%s\n", line, line == center ? ">" : " ", show, p,
				       len > 160 ? " ..." : "");
		}
		if (!eol)
			break;
		p = eol + 1;
		line++;
		if (line > hi && *p) {
			lg_fail_append("  ... (more lines not shown)\n");
			break;
		}
	}
}

static char *program_log(const struct nvrtc_api *api, nvrtcProgram prog)
{
	size_t n = 0;
	if (api->nvrtcGetProgramLogSize(prog, &n) != NVRTC_SUCCESS || n == 0)
		return NULL;
	char *log = malloc(n + 1);
	if (!log)
		return NULL;
	if (api->nvrtcGetProgramLog(prog, log) != NVRTC_SUCCESS) {
		free(log);
		return NULL;
	}
	log[n] = '\0';
	/* an empty log is no log */
	size_t len = strlen(log);
	while (len > 0 && (log[len - 1] == '\n' || log[len - 1] == ' ' || log[len - 1] == '\r'))
		log[--len] = '\0';
	if (len == 0) {
		free(log);
		return NULL;
	}
	return log;
}

static void compile_failed(const char *name, const char *arch, const char *src,
			   const char *const *opts, int nopts, const char *log,
			   const char *why)
{
	const size_t max_log = 4000;
	lg_fail(LG_ERR_COMPILE, "NVRTC failed to compile %s for %s (%s):\n", name, arch, why);
	if (log) {
		size_t len = strlen(log);
		lg_fail_append("%.*s%s\n", (int)(len > max_log ? max_log : len), log,
			       len > max_log ? "\n  ... (log truncated)" : "");
	} else {
		lg_fail_append("(no log)\n");
	}
	lg_fail_append("options:");
	for (int i = 0; i < nopts; i++)
		lg_fail_append(" %s", opts[i]);
	lg_fail_append("\nsource:\n");
	append_source(src, log ? first_error_line(log) : 0);
}

/* Is the SM number of arch ("sm_90a": 90) one this NVRTC compiles for?
 * Otherwise LG_ERR_UNSUPPORTED listing those it does. */
static lg_status check_arch(const struct nvrtc_api *api, const char *arch, const char *name)
{
	int n = 0, archs[128], sm = atoi(arch + 3);
	if (api->nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0 || n > 128 ||
	    api->nvrtcGetSupportedArchs(archs) != NVRTC_SUCCESS)
		return LG_OK; /* cannot tell: let the compile say */
	for (int i = 0; i < n; i++)
		if (archs[i] == sm)
			return LG_OK;
	int major = 0, minor = 0;
	api->nvrtcVersion(&major, &minor);
	lg_status st = lg_fail(LG_ERR_UNSUPPORTED, "cannot compile %s for %s: NVRTC %d.%d compiles for", name, arch,
			       major, minor);
	for (int i = 0; i < n; i++)
		lg_fail_append("%s sm_%d", i ? "," : "", archs[i]);
	return st;
}

lg_status lg_nvrtc_archs(int *archs, int max, int *n)
{
	struct nvrtc_api api;
	*n = 0;
	lg_status st = nv_get(&api);
	if (st != LG_OK)
		return st;
	int k = 0, all[128];
	if (api.nvrtcGetNumSupportedArchs(&k) != NVRTC_SUCCESS || k <= 0 || k > 128 ||
	    api.nvrtcGetSupportedArchs(all) != NVRTC_SUCCESS)
		return lg_fail(LG_ERR_NVRTC, "NVRTC does not list the arches it compiles for");
	for (int i = 0; i < k && *n < max; i++)
		archs[(*n)++] = all[i];
	return LG_OK;
}

/* lg_nvrtc_compile, or with relocatable set lg_nvrtc_compile_relocatable:
 * the options of lg_nvrtc_options, then LG_NVRTC_RDC. */
static lg_status compile_cubin(const char *src, const char *name, const char *arch, bool relocatable, void **cubin,
			       size_t *size, char **log)
{
	if (!src || !cubin || !size)
		return lg_fail(LG_ERR_INVALID_ARG, "lg_nvrtc_compile: NULL argument");
	*cubin = NULL;
	*size = 0;
	if (log)
		*log = NULL;
	if (!name)
		name = "kernel";
	int nopts = 0;
	if (!arch_valid(arch))
		return lg_fail(LG_ERR_INVALID_ARG,
			       "cannot compile %s: \"%s\" is not an arch NVRTC takes (expected "
			       "sm_<digits>[suffix], e.g. sm_90a, sm_80, sm_100a)",
			       name, arch ? arch : "(null)");
	struct nvrtc_api api;
	lg_status st = nv_get(&api);
	if (st == LG_OK)
		st = check_arch(&api, arch, name);
	if (st != LG_OK)
		return st;
	int major = 0, minor = 0;
	api.nvrtcVersion(&major, &minor);
	const char *const *base = lg_nvrtc_options(arch, major, minor, &nopts);
	if (!base)
		return LG_ERR_INVALID_ARG; /* LINGEN_NVRTC_OPTIONS (said) */
	const char *opts[LG_NVRTC_NOPTS + 1];
	memcpy(opts, base, (size_t)nopts * sizeof *opts);
	if (relocatable)
		opts[nopts++] = LG_NVRTC_RDC;

	double t0 = lg_now();
	nvrtcProgram prog = NULL;
	char *plog = NULL, *bin = NULL;
	nvrtcResult r = api.nvrtcCreateProgram(&prog, src, name, 0, NULL, NULL);
	if (r != NVRTC_SUCCESS) {
		st = lg_fail(r == NVRTC_ERROR_OUT_OF_MEMORY ? LG_ERR_NO_MEMORY : LG_ERR_NVRTC,
			     "nvrtcCreateProgram (%s): %s", name, api.nvrtcGetErrorString(r));
		goto fail;
	}
	r = api.nvrtcCompileProgram(prog, nopts, opts);
	plog = program_log(&api, prog);
	if (r != NVRTC_SUCCESS) {
		compile_failed(name, arch, src, opts, nopts, plog, api.nvrtcGetErrorString(r));
		st = LG_ERR_COMPILE;
		if (!relocatable)
			dump(name, arch, src, NULL, 0, plog ? plog : api.nvrtcGetErrorString(r));
		goto fail;
	}
	size_t n = 0;
	r = api.nvrtcGetCUBINSize(prog, &n);
	if (r != NVRTC_SUCCESS || n == 0) {
		st = lg_fail(LG_ERR_NVRTC, "nvrtcGetCUBINSize (%s, %s): %s", name, arch,
			     r != NVRTC_SUCCESS ? api.nvrtcGetErrorString(r) : "empty cubin");
		goto fail;
	}
	bin = malloc(n);
	if (!bin) {
		st = lg_fail(LG_ERR_NO_MEMORY, "out of memory for a %zu-byte cubin", n);
		goto fail;
	}
	r = api.nvrtcGetCUBIN(prog, bin);
	if (r != NVRTC_SUCCESS) {
		st = lg_fail(LG_ERR_NVRTC, "nvrtcGetCUBIN (%s, %s): %s", name, arch,
			     api.nvrtcGetErrorString(r));
		goto fail;
	}
	api.nvrtcDestroyProgram(&prog);
	lg_log("nvrtc: %s %s%s %.1f ms", name, arch, relocatable ? " relocatable" : "", (lg_now() - t0) * 1e3);
	if (plog)
		lg_log("nvrtc: %s %s warnings:\n%s", name, arch, plog);
	if (!relocatable) /* the dump's .cubin is the one a context loads */
		dump(name, arch, src, bin, n, plog);
	*cubin = bin;
	*size = n;
	if (log)
		*log = plog;
	else
		free(plog);
	return LG_OK;

fail:
	if (prog)
		api.nvrtcDestroyProgram(&prog);
	free(plog);
	free(bin);
	return st;
}

lg_status lg_nvrtc_compile(const char *src, const char *name, const char *arch, void **cubin,
			   size_t *size, char **log)
{
	return compile_cubin(src, name, arch, false, cubin, size, log);
}

lg_status lg_nvrtc_compile_relocatable(const char *src, const char *name, const char *arch, void **cubin,
				       size_t *size)
{
	return compile_cubin(src, name, arch, true, cubin, size, NULL);
}

/* ------------------------------------------------------------------ lint */

/* The front end's diagnostics of dead code, remarks by default, raised to
 * warnings: 177 a variable declared and never referenced, 550 one set and
 * never used (826, a parameter never referenced, is left a remark: static
 * helpers and shadowed names still have some). */
static const char *const lint_opts[] = {"--diag-warn=177,550", "-fdevice-syntax-only"};

/* Compile src for arch with the base options and `extra` (n of them, at
 * most 2): *log the program's log (NULL when empty; the caller frees). */
static lg_status compile_log(const char *src, const char *name, const char *arch, const char *what,
			     const char *const *extra, size_t n, char **log)
{
	if (!src || !log)
		return lg_fail(LG_ERR_INVALID_ARG, "lg_nvrtc_%s: NULL argument", what);
	*log = NULL;
	if (!name)
		name = "kernel";
	int nbase = 0;
	if (!arch_valid(arch))
		return lg_fail(LG_ERR_INVALID_ARG, "cannot %s %s: \"%s\" is not an arch NVRTC takes", what, name,
			       arch ? arch : "(null)");
	struct nvrtc_api api;
	lg_status st = nv_get(&api);
	if (st != LG_OK)
		return st;
	int major = 0, minor = 0;
	api.nvrtcVersion(&major, &minor);
	const char *const *base = lg_nvrtc_options(arch, major, minor, &nbase);
	if (!base)
		return LG_ERR_INVALID_ARG; /* LINGEN_NVRTC_OPTIONS (said) */
	const char *opts[LG_NVRTC_NOPTS + 2];
	int nopts = 0;
	for (int i = 0; i < nbase; i++)
		opts[nopts++] = base[i];
	for (size_t i = 0; i < n && i < 2; i++)
		opts[nopts++] = extra[i];
	nvrtcProgram prog = NULL;
	nvrtcResult r = api.nvrtcCreateProgram(&prog, src, name, 0, NULL, NULL);
	if (r != NVRTC_SUCCESS)
		return lg_fail(LG_ERR_NVRTC, "nvrtcCreateProgram (%s): %s", name, api.nvrtcGetErrorString(r));
	r = api.nvrtcCompileProgram(prog, nopts, opts);
	char *plog = program_log(&api, prog);
	if (r != NVRTC_SUCCESS) {
		compile_failed(name, arch, src, opts, nopts, plog, api.nvrtcGetErrorString(r));
		st = LG_ERR_COMPILE;
		free(plog);
		plog = NULL;
	}
	api.nvrtcDestroyProgram(&prog);
	*log = plog;
	return st;
}

lg_status lg_nvrtc_lint(const char *src, const char *name, const char *arch, char **log)
{
	return compile_log(src, name, arch, "lint", lint_opts, sizeof lint_opts / sizeof lint_opts[0], log);
}

lg_status lg_nvrtc_resources(const char *src, const char *name, const char *arch, char **log)
{
	static const char *const verbose[] = {"--ptxas-options=-v"};
	return compile_log(src, name, arch, "resources", verbose, 1, log);
}
