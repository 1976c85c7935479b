/*
 * lingen.h - the one public header of lingen, a template-free CUDA kernel
 * generator for the fused FP8-MoE training kernels of the linghe family.
 *
 * A spec (JSON) names a kernel family and its static shape; lingen emits
 * specialised CUDA source, compiles it with NVRTC (or finds it in its cache),
 * loads the cubin with the driver API and launches it on the caller's stream.
 *
 * Conventions:
 *   - every call returns an lg_status; on failure lg_last_error() gives a
 *     readable message for the calling thread (file, JSON path, what was
 *     expected, NVRTC log, driver error string);
 *   - objects come in _create/_destroy or _load/_free pairs; ownership of
 *     every returned pointer is stated beside the function;
 *   - the library never exits, never prints unless LINGEN_LOG asks it to,
 *     and needs no CUDA library at link time: libcuda and NVRTC are opened
 *     with dlopen when first needed.
 *
 * Thread safety: a context may be shared by threads; lg_kernel_get and the
 * launchers may be called concurrently. A launch after the first does no
 * hashing, file access or allocation.
 */
#ifndef LINGEN_H
#define LINGEN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LINGEN_VERSION_MAJOR 0
#define LINGEN_VERSION_MINOR 1
#define LINGEN_VERSION_PATCH 0
#define LINGEN_VERSION "0.1.0"

/* Status codes. lg_status_str() names each. */
typedef enum lg_status {
	LG_OK = 0,
	LG_ERR_INVALID_ARG,   /* a bad argument to an API call */
	LG_ERR_SPEC,          /* a spec file that does not parse or validate */
	LG_ERR_NO_MEMORY,     /* host allocation failed */
	LG_ERR_IO,            /* a file could not be read or written */
	LG_ERR_DRIVER,        /* libcuda.so.1 could not be loaded or lacks a symbol */
	LG_ERR_NVRTC,         /* libnvrtc could not be loaded or lacks a symbol */
	LG_ERR_COMPILE,       /* NVRTC rejected the generated source */
	LG_ERR_CUDA,          /* a driver call failed */
	LG_ERR_NO_DEVICE,     /* no CUDA device, and no --arch to compile for */
	LG_ERR_UNSUPPORTED,   /* valid request this build or arch cannot serve */
	LG_ERR_MISSING,       /* a kernel the context's bundle does not hold */
	LG_STATUS_COUNT
} lg_status;

/* Name of a status code, e.g. "LG_ERR_SPEC". Never NULL. */
const char *lg_status_str(lg_status st);

/* Detail message of the last failed lingen call on this thread ("" if none);
 * calls that return an lg_status clear it on entry, accessors leave it alone.
 * Valid until the next lingen call on the same thread. */
const char *lg_last_error(void);

/* Version of lingen as "MAJOR.MINOR.PATCH". */
const char *lg_version(void);

/* ---------------------------------------------------------------- specs */

typedef struct lg_spec lg_spec;           /* one kernel: family, pass, static shape */
typedef struct lg_spec_file lg_spec_file; /* a parsed spec file: many kernels */

/* Parse a spec file held in memory; `filename` is only used in messages and
 * may be NULL. On success *out is owned by the caller: lg_spec_file_free. */
lg_status lg_spec_file_parse(const char *text, size_t len, const char *filename,
			     lg_spec_file **out);
/* Read and parse a spec file from disk. */
lg_status lg_spec_file_load(const char *path, lg_spec_file **out);
void lg_spec_file_free(lg_spec_file *f);
size_t lg_spec_file_count(const lg_spec_file *f);
/* The i-th kernel of a file; owned by the file. */
const lg_spec *lg_spec_file_get(const lg_spec_file *f, size_t i);
/* The file's optional "name" ("" if absent); owned by the file. */
const char *lg_spec_file_name(const lg_spec_file *f);

/* Parse one kernel object, e.g. {"op":"rmsnorm","pass":"forward",...}.
 * The caller frees *out with lg_spec_free. */
lg_status lg_spec_parse(const char *json, lg_spec **out);
void lg_spec_free(lg_spec *s);

/* The spec as canonical JSON (fixed key order, every default filled in).
 * The caller frees the result with free(). NULL on allocation failure. */
char *lg_spec_canonical(const lg_spec *s);
/* Entry-point base name of the kernel, e.g. "lg_rmsnorm_quant_fwd_h2048_both".
 * Owned by the spec. */
const char *lg_spec_entry(const lg_spec *s);

/* -------------------------------------------------------------- models */

/* Expand a model config (configs/models/<name>.json: a model's dimensions,
 * rms_norm_eps and FP8 recipe) into the spec file of every kernel one
 * training step needs, forward and backward: JSON text that
 * lg_spec_file_parse reads, with "kernels" (those lingen can generate,
 * each once) and "skipped" (those whose family is not implemented yet).
 * `filename` is only used in messages and may be NULL. On success the
 * caller frees *spec_json with free(). A bad config is LG_ERR_SPEC. */
lg_status lg_model_expand_text(const char *text, size_t len, const char *filename,
			       char **spec_json);
/* Read and expand a model config from disk. */
lg_status lg_model_expand_file(const char *path, char **spec_json);

/* ------------------------------------------------------------ families */

/* Every kernel family's declaration as JSON, for bindings and tools:
 *   {"lingen": "0.1.0", "ops": [{"op", "summary", "dtypes": [...],
 *     "keys": [{"path", "type" (int|number|bool|enum|object), "required",
 *               "shape", "tile", "min", "max", "multiple", "only", "above",
 *               "below", "values", "default", "doc"}...],
 *     "passes": {"forward": {"sizes": [{"name", "min", "max", "doc"}...],
 *                            "args": [{"name", "role" (in|out|optional_in|
 *                                      optional_out|workspace|list), "elem"
 *                                      (bf16|fp32|e4m3|int32|int64|uint8|dtype),
 *                                      "shape", "align", "doc"}...],
 *                            "doc", "forms": [{"launcher", "keys": {key: value},
 *                                      "sizes": [names], "fixed": {size: value},
 *                                      "params": [{"name", "to": [args]}...],
 *                                      "doc"}...]}, ...}}...]}
 * Arguments and sizes are in launch order (lg_kernel_run). "forms" are the
 * pass's typed launchers (lingen_ops.h): the kernel keys each takes, its
 * sizes and pointer parameters (a parameter of several arguments goes to
 * the one the spec uses), the other sizes fixed and arguments 0. The
 * caller frees *json with free(). */
lg_status lg_families_json(char **json);
/* The dimensions of argument i of spec s for the pass's run-time sizes
 * (nsizes of them, each within its range): dims[0..*ndims), at most
 * maxdims. A workspace argument has none (its size is
 * lg_kernel_workspace_size). */
lg_status lg_spec_arg_shape(const lg_spec *s, int i, const int64_t *sizes, int nsizes, int64_t *dims,
			    int maxdims, int *ndims);

/* Whether kernels of spec s use argument i (launch order): 1 when they
 * read or write it, 2 when it is optional by its role but this spec
 * requires it (e.g. the weights of a weighted moe_unpermute: launches
 * refuse 0 there), 0 when the spec leaves it out (an output copy its
 * quant.output does not ask for: pass 0 there), -1 when s is NULL or i is
 * out of range. The same on every arch. Bindings allocate outputs by it. */
int lg_spec_arg_used(const lg_spec *s, int i);

/* ------------------------------------------------------ generation only */

/* Generated CUDA source of a spec for an arch ("sm_90a", "sm_80", ...).
 * The caller frees *src with free(). Needs no GPU and no NVRTC. */
lg_status lg_generate(const lg_spec *s, const char *arch, char **src);

/* ------------------------------------------------------------ contexts */

typedef struct lg_ctx lg_ctx;

typedef struct lg_ctx_opts {
	/* Target arch, e.g. "sm_90a". NULL: $LINGEN_ARCH, else the arch of the
	 * current (or first) CUDA device. */
	const char *arch;
	/* Disk cache folder. NULL: $LINGEN_CACHE_DIR, else $XDG_CACHE_HOME/lingen,
	 * else ~/.cache/lingen. "off" disables the disk cache. */
	const char *cache_dir;
	/* A deployment bundle folder written by `lingen build` (manifest.json +
	 * cubins). Kernels then come from the bundle only: NVRTC is never
	 * loaded and the disk cache is not used; a kernel the bundle lacks for
	 * the context's arch is LG_ERR_MISSING, naming kernel, arch and bundle.
	 * NULL: JIT (NVRTC + cache). */
	const char *bundle;
	/* The same over cubins linked into the program by `lingen aot`
	 * (lingen_aot() of the generated lingen_aot.c). Not with `bundle`. */
	const struct lg_aot_table *aot;
	/* Tuning file, or a folder holding <arch>.json: the tile of each spec
	 * that gives none. NULL: $LINGEN_TUNING, else configs/tuning/<arch>.json
	 * of the source tree, else of the install (share/lingen/tuning); a
	 * missing <arch>.json means heuristics. "off": heuristics. A file that
	 * does not parse or validate makes lg_ctx_create fail (LG_ERR_SPEC). */
	const char *tuning;
} lg_ctx_opts;

/* One cubin embedded by `lingen aot`; the fields of a manifest.json kernel. */
struct lg_aot_entry {
	const char *spec;            /* the kernel's canonical spec JSON */
	const char *entry;           /* entry-point base name (lg_spec_entry) */
	const char *arch;            /* "sm_90a" */
	const char *plan;            /* launch plan JSON, as in manifest.json */
	const unsigned char *cubin;
	size_t size;
	unsigned long long checksum; /* XXH3-64 of the cubin */
};

/* The table `lingen aot` writes (LG_AOT_FORMAT: the manifest format). */
#define LG_AOT_FORMAT 3
struct lg_aot_table {
	int format;                  /* LG_AOT_FORMAT of the lingen that wrote it */
	const char *lingen;          /* its version */
	const char *nvrtc;           /* NVRTC version of the cubins, "13.0" */
	size_t count;
	const struct lg_aot_entry *entries;
};

/* Create a context. opts may be NULL. Creating a context with an explicit
 * arch touches no CUDA library; the driver is opened when a kernel is first
 * loaded. The caller destroys *out with lg_ctx_destroy. */
lg_status lg_ctx_create(const lg_ctx_opts *opts, lg_ctx **out);
/* Unloads every kernel of the context. No launch may be in flight. */
void lg_ctx_destroy(lg_ctx *ctx);
/* The arch the context compiles (or takes from its bundle) for. Owned by
 * the context. */
const char *lg_ctx_arch(const lg_ctx *ctx);

/* Cubin of a spec for the context's arch, from the memory cache, the disk
 * cache or a fresh NVRTC compile (in that order); with a bundle, from the
 * bundle (checksum verified). Needs no GPU. *cubin is
 * owned by the context and lives as long as it. */
lg_status lg_ctx_cubin(lg_ctx *ctx, const lg_spec *s, const void **cubin, size_t *size);

/* ------------------------------------------------------------- kernels */

typedef struct lg_kernel lg_kernel; /* owned by its context */

/* A loaded kernel for a spec: JIT-compiled or taken from the cache, then
 * loaded with cuLibraryLoadData (context-independent: it serves every GPU of
 * the process). The same spec gives the same handle. A CUDA context must be
 * current on the calling thread when launching. */
lg_status lg_kernel_get(lg_ctx *ctx, const lg_spec *s, lg_kernel **out);

/* The cubins of specs[0..n-1] (lg_ctx_cubin of each) made in `jobs` threads
 * (0: one a CPU): a cold step compiles in about the time of its slowest
 * kernel. Needs no GPU. The first failing spec's status and message. */
lg_status lg_ctx_cubins(lg_ctx *ctx, const lg_spec *const *specs, size_t n, int jobs);
/* lg_ctx_cubins, then lg_kernel_get of each on the calling thread, into
 * out[0..n-1]. */
lg_status lg_kernels_get(lg_ctx *ctx, const lg_spec *const *specs, size_t n, int jobs, lg_kernel **out);

/* Bytes of device workspace a launch of k needs (0 for most kernels). */
size_t lg_kernel_workspace_size(const lg_kernel *k);

/* A CUDA stream: CUstream / cudaStream_t (NULL = the legacy default stream). */
typedef struct CUstream_st *lg_stream;
/* A device pointer: CUdeviceptr, or a cudaMalloc'd pointer cast to integer. */
typedef unsigned long long lg_dptr;

/* Launch with the family's run-time sizes (tokens, ...) and pointers in
 * its documented order (`lingen help OP`; as in the typed launchers of
 * lingen_ops.h); an output the spec did not ask for is 0, and so may be an
 * argument with no element at these sizes (an empty tensor). Each size must lie in
 * its declared range and the launch geometry within the hardware's;
 * entries with nothing to do at the sizes are not launched. */
lg_status lg_kernel_run(const lg_kernel *k, lg_stream stream, const int64_t *sizes, int nsizes,
			const lg_dptr *ptrs, int nptrs);
/* The same for a family whose only run-time size is the token count. */
lg_status lg_kernel_launch(const lg_kernel *k, lg_stream stream, int64_t tokens,
			   const lg_dptr *ptrs, int nptrs);

/* ------------------------------------------------------- tensor lists */

/* A list of device tensors, for the families that reduce over one (K10 grad
 * norm, K11 count-zero). lg_tensor_list_create builds the list's table
 * ONCE: each tensor cut into items of at most LG_LIST_ITEM_BYTES (cuts at
 * multiples of it from the tensor's 16-byte-aligned base, so every item
 * but a tensor's first starts 16-byte aligned), uploaded to device memory
 * the list owns. A launch passes the table's device pointer and its item
 * count (the run-time size "items"): it copies nothing from the host and
 * never synchronises, so it can be captured in a CUDA graph.
 *
 * The table on the device, one 16-byte row per item, in tensor order:
 *   u64 ptr   first element of the item (element-aligned, any address)
 *   u32 count elements of the item (1 .. LG_LIST_ITEM_BYTES / element size)
 *   u32 elem  lg_list_elem of the item's tensor
 * Tensors of 0 elements have no item. The tensors' memory must outlive
 * every launch over the list (the list holds addresses, not references). */
#define LG_LIST_ITEM_BYTES 16384
#define LG_LIST_ROW_BYTES 16

typedef enum lg_list_elem { LG_LIST_BF16 = 0, LG_LIST_FP32 = 1, LG_LIST_ELEM_COUNT } lg_list_elem;

typedef struct lg_tensor_list lg_tensor_list;

/* Build the table of n tensors: ptrs[i] (device pointers, each aligned to
 * its element size; 0 only for a tensor of 0 elements), elems[i] (an
 * lg_list_elem) and counts[i] (elements, >= 0). Allocates the table on the
 * current CUDA context's device and copies it there (synchronously, once).
 * n may be 0. The caller destroys *out with lg_tensor_list_destroy. */
lg_status lg_tensor_list_create(const lg_dptr *ptrs, const int *elems, const int64_t *counts, size_t n,
				lg_tensor_list **out);
/* Frees the table's device memory. No launch over the list may be in
 * flight. NULL is a no-op. */
void lg_tensor_list_destroy(lg_tensor_list *l);
/* The table's device pointer (0 for a list with no item). */
lg_dptr lg_tensor_list_table(const lg_tensor_list *l);
/* Rows of the table: the run-time size "items" of a launch over the list. */
int64_t lg_tensor_list_items(const lg_tensor_list *l);
/* Tensors of the list, and elements over all of them. */
size_t lg_tensor_list_count(const lg_tensor_list *l);
int64_t lg_tensor_list_numel(const lg_tensor_list *l);
/* Bit (1 << lg_list_elem) for each element type with at least one element. */
unsigned lg_tensor_list_elems(const lg_tensor_list *l);

/* ------------------------------------------------- typed launchers */

/* One launcher per launch form of every family's pass, lg_<op>_<form>
 * (k, stream, sizes, pointers): lingen_ops.h, written at build time from
 * the family declarations and installed beside this header. Define
 * LINGEN_NO_TYPED_LAUNCHERS to leave them out. */
#ifndef LINGEN_NO_TYPED_LAUNCHERS
#include "lingen_ops.h"
#endif

#ifdef __cplusplus
}
#endif
#endif /* LINGEN_H */
