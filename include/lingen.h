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
 *                                      "shape", "align", "doc"}...]}, ...}}...]}
 * Arguments and sizes are in launch order (lg_kernel_run). The caller frees
 * *json with free(). */
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

/* Bytes of device workspace a launch of k needs (0 for most kernels). */
size_t lg_kernel_workspace_size(const lg_kernel *k);

/* A CUDA stream: CUstream / cudaStream_t (NULL = the legacy default stream). */
typedef struct CUstream_st *lg_stream;
/* A device pointer: CUdeviceptr, or a cudaMalloc'd pointer cast to integer. */
typedef unsigned long long lg_dptr;

/* Launch with the family's run-time sizes (tokens, ...) and pointers in
 * its documented order (`lingen help OP`; as in the typed launchers
 * below); an output the spec did not ask for is 0, and so may be an
 * argument with no element at these sizes (an empty tensor). Each size must lie in
 * its declared range and the launch geometry within the hardware's;
 * entries with nothing to do at the sizes are not launched. */
lg_status lg_kernel_run(const lg_kernel *k, lg_stream stream, const int64_t *sizes, int nsizes,
			const lg_dptr *ptrs, int nptrs);
/* The same for a family whose only run-time size is the token count. */
lg_status lg_kernel_launch(const lg_kernel *k, lg_stream stream, int64_t tokens,
			   const lg_dptr *ptrs, int nptrs);

/* K1: RMSNorm + blockwise FP8 quantisation, forward (op "rmsnorm_quant").
 *   x [tokens, hidden] bf16, w [hidden] bf16;
 *   q  [tokens, hidden] e4m3, s  [hidden/128, tokens] fp32   (rowwise)
 *   qt [hidden, tokens] e4m3, st [ceil(tokens/128), hidden] fp32 (columnwise)
 *   rms [tokens] fp32 (reciprocal RMS): required, also the hand-over between
 *   the kernel's two passes.
 * Copies the spec's quant.output did not ask for take 0. Each typed
 * launcher refuses a kernel of another op or pass (LG_ERR_INVALID_ARG). */
lg_status lg_rmsnorm_quant_forward(const lg_kernel *k, lg_stream stream, int64_t tokens,
				   lg_dptr x, lg_dptr w, lg_dptr q, lg_dptr s, lg_dptr rms,
				   lg_dptr qt, lg_dptr st);

/* Blockwise FP8 quantisation of activations (op "fp8_quant", KERNELS.md
 *   1.3): x [tokens, hidden] bf16; q, s, qt, st as lg_rmsnorm_quant_forward
 *   (0 for a copy quant.output does not ask for). */
lg_status lg_fp8_quant_forward(const lg_kernel *k, lg_stream stream, int64_t tokens, lg_dptr x, lg_dptr q,
			       lg_dptr s, lg_dptr qt, lg_dptr st);
/* Per-expert (batched) FP8 quantisation (op "fp8_quant_batched", KERNELS.md
 *   1.3): x [tokens, hidden] bf16, tokens grouped by expert; counts
 *   [experts] int32 in device memory (read by the kernel, sum <= tokens);
 *   each expert's segment quantised as a tensor of its own, outputs
 *   concatenated in expert order: q [tokens, hidden]; s: a [hidden/128,
 *   count_e] block at element start_e * hidden/128 (buffer hidden/128 *
 *   tokens floats); qt: a [hidden, count_e] block at element start_e *
 *   hidden (buffer hidden * tokens bytes); st: cdiv(count_e, 128) rows of
 *   hidden floats an expert, one after the other (buffer capacity
 *   (cdiv(tokens, 128) + experts) * hidden floats; rows past the last are
 *   not written). */
lg_status lg_fp8_quant_batched_forward(const lg_kernel *k, lg_stream stream, int64_t tokens, int64_t experts,
				       lg_dptr x, lg_dptr counts, lg_dptr q, lg_dptr s, lg_dptr qt, lg_dptr st);
/* FP8 quantisation of a weight in 128 x 128 tiles (op "fp8_quant_weight"):
 *   w [rows, hidden] bf16 -> q [rows, hidden] e4m3, s [cdiv(rows, 128),
 *   hidden/128] fp32, one scale a tile (a partial last row of tiles over its
 *   real rows). */
lg_status lg_fp8_quant_weight_forward(const lg_kernel *k, lg_stream stream, int64_t rows, lg_dptr w, lg_dptr q,
				      lg_dptr s);

/* Plain RMSNorm forward (op "rmsnorm", pass "forward"):
 *   y [tokens, hidden] bf16 = x * r * w; rms [tokens] fp32 optional. */
lg_status lg_rmsnorm_forward(const lg_kernel *k, lg_stream stream, int64_t tokens,
			     lg_dptr x, lg_dptr w, lg_dptr y, lg_dptr rms);

/* RMSNorm backward (op "rmsnorm", pass "backward"):
 *   dy, x [tokens, hidden] bf16, w [hidden] bf16, rms [tokens] fp32 or 0
 *   (recomputed); dx [tokens, hidden] bf16, dw [hidden] fp32 (overwritten,
 *   deterministic). workspace: lg_kernel_workspace_size(k) bytes. */
lg_status lg_rmsnorm_backward(const lg_kernel *k, lg_stream stream, int64_t tokens,
			      lg_dptr dy, lg_dptr x, lg_dptr w, lg_dptr rms, lg_dptr dx,
			      lg_dptr dw, lg_dptr workspace);

/* K8: group RMSNorm x sigmoid gate, forward (op "group_rmsnorm_gate"):
 *   x [batch, seq, dim] bf16; gate [seq, batch, dim] bf16 (transpose,
 *   the default) or [batch, seq, dim]; w [dim] bf16, or [dim / groups]
 *   with shared_weight; y = x * r * w * sigmoid(gate) in gate's layout. */
lg_status lg_group_rmsnorm_gate_forward(const lg_kernel *k, lg_stream stream, int64_t batch, int64_t seq,
					lg_dptr x, lg_dptr gate, lg_dptr w, lg_dptr y);
/* Its backward: dy in gate's layout; dx [batch, seq, dim] bf16, dgate in
 *   gate's layout bf16, dw fp32 in w's shape (overwritten, deterministic).
 *   workspace: lg_kernel_workspace_size(k) bytes. */
lg_status lg_group_rmsnorm_gate_backward(const lg_kernel *k, lg_stream stream, int64_t batch, int64_t seq,
					 lg_dptr dy, lg_dptr x, lg_dptr gate, lg_dptr w, lg_dptr dx,
					 lg_dptr dgate, lg_dptr dw, lg_dptr workspace);

/* K7: SwiGLU + blockwise FP8, forward (op "swiglu_quant"): x [tokens, 2n]
 *   bf16 = [gate | up]; y = silu(gate) * up quantised: q [tokens, n] e4m3,
 *   s [n/128, tokens] fp32, qt [n, tokens] e4m3, st [cdiv(tokens, 128), n]
 *   fp32 (0 for a copy quant.output leaves out). Any token count. */
lg_status lg_swiglu_quant_forward(const lg_kernel *k, lg_stream stream, int64_t tokens, lg_dptr x, lg_dptr q,
				  lg_dptr s, lg_dptr qt, lg_dptr st);
/* Its backward: g [tokens, n] bf16, x as in the forward; dx = [dgate | dup]
 *   quantised with K = 2n: dxq [tokens, 2n], dxs [2n/128, tokens], dxqt
 *   [2n, tokens], dxst [cdiv(tokens, 128), 2n]; dx [tokens, 2n] bf16 with
 *   dx_bf16 (else 0). */
lg_status lg_swiglu_quant_backward(const lg_kernel *k, lg_stream stream, int64_t tokens, lg_dptr g, lg_dptr x,
				   lg_dptr dxq, lg_dptr dxs, lg_dptr dxqt, lg_dptr dxst, lg_dptr dx);

/* K6: per-expert prob-weighted SwiGLU + blockwise FP8, forward (op
 *   "batch_swiglu_quant"): x [tokens, 2n] bf16 with rows grouped by expert,
 *   prob [tokens, 1] fp32, counts [experts] int32 in device memory (summing to
 *   tokens; never read by the host); y = silu(gate) * up * prob quantised
 *   per expert (KERNELS.md 1.3): q [tokens, n]; s, per expert [n/128,
 *   count] at start * n/128; qt, per expert [n, count] at start * n; st
 *   [cdiv(tokens, 128) + experts, n], per expert cdiv(count, 128) rows
 *   (the rows past them not written). */
lg_status lg_batch_swiglu_quant_forward(const lg_kernel *k, lg_stream stream, int64_t tokens, lg_dptr x,
					lg_dptr prob, lg_dptr counts, lg_dptr q, lg_dptr s, lg_dptr qt, lg_dptr st);
/* Its backward: g [tokens, n] bf16, x, prob, counts as in the forward; dx
 *   quantised per expert with K = 2n (dxq, dxs, dxqt, dxst laid out as the
 *   forward's, both always); dprob [tokens, 1] fp32 = sum_j silu(gate) * up *
 *   g (deterministic); dx [tokens, 2n] bf16 with dx_bf16 (else 0). */
lg_status lg_batch_swiglu_quant_backward(const lg_kernel *k, lg_stream stream, int64_t tokens, lg_dptr g,
					 lg_dptr x, lg_dptr prob, lg_dptr counts, lg_dptr dxq, lg_dptr dxs,
					 lg_dptr dprob, lg_dptr dxqt, lg_dptr dxst, lg_dptr dx);

/* K2: split qkv + q/k RMSNorm + rotate-half RoPE + transpose, forward (op
 *   "qk_norm_rope"): qkv [seq, batch, (H + 2h) * D] bf16 (qkv_order
 *   "seq_batch", the default; [batch, seq, ...] for "batch_seq"), heads as
 *   head_layout; q_weight, k_weight [D] bf16; freqs [seq * cp_size, R] fp32
 *   (R = rotary_fraction * D, cat(f, f): only [:, 0:R/2] is read); q [batch,
 *   seq, H, D], k_out and v [batch, seq, h, D] bf16; cu_seqlens 0.
 *   K2b (varlen): seq = T packed tokens, batch = the number of sequences:
 *   qkv [T, 1, ...], cu_seqlens [batch + 1] int32 (cumulative global lengths
 *   from 0; this rank's tokens of sequence i are rows cu[i] / cp_size ..
 *   cu[i + 1] / cp_size - 1), q [1, T, H, D], k_out and v [1, T, h, D]. */
lg_status lg_qk_norm_rope_forward(const lg_kernel *k, lg_stream stream, int64_t seq, int64_t batch,
				  lg_dptr qkv, lg_dptr q_weight, lg_dptr k_weight, lg_dptr freqs,
				  lg_dptr cu_seqlens, lg_dptr q, lg_dptr k_out, lg_dptr v);
/* Its backward: gq, gk, gv as q, k, v; qkv, the weights, freqs and
 *   cu_seqlens as in the forward; dqkv in qkv's layout bf16; dq_weight,
 *   dk_weight [D] fp32 (overwritten, deterministic). workspace:
 *   lg_kernel_workspace_size(k). */
lg_status lg_qk_norm_rope_backward(const lg_kernel *k, lg_stream stream, int64_t seq, int64_t batch,
				   lg_dptr gq, lg_dptr gk, lg_dptr gv, lg_dptr qkv, lg_dptr q_weight,
				   lg_dptr k_weight, lg_dptr freqs, lg_dptr cu_seqlens, lg_dptr dqkv,
				   lg_dptr dq_weight, lg_dptr dk_weight, lg_dptr workspace);

/* K3: the router GEMM, forward (op "router_gemm"): x [tokens, hidden] bf16,
 *   w [experts, hidden] bf16; logits [tokens, experts] fp32 = x . w^T. */
lg_status lg_router_gemm_forward(const lg_kernel *k, lg_stream stream, int64_t tokens, lg_dptr x,
				 lg_dptr w, lg_dptr logits);
/* Its backward: dy [tokens, experts] fp32, x and w as in the forward;
 *   dx [tokens, hidden] bf16 = dy . w, dw [experts, hidden] fp32 = dy^T . x
 *   (overwritten, deterministic); either may be 0 (not computed).
 *   workspace: lg_kernel_workspace_size(k) bytes. */
lg_status lg_router_gemm_backward(const lg_kernel *k, lg_stream stream, int64_t tokens, lg_dptr dy,
				  lg_dptr x, lg_dptr w, lg_dptr dx, lg_dptr dw, lg_dptr workspace);

/* K3b: RMSNorm + router GEMM + rowwise FP8 in one pass (op "rmsnorm_router"):
 *   x [tokens, hidden] bf16, w [hidden] bf16 (the norm's weight), route_w
 *   [experts, hidden] bf16; y [tokens, hidden] bf16 = (x r) w, rms [tokens]
 *   fp32 = r (reciprocal RMS), logits [tokens, experts] fp32 = y . route_w^T
 *   (y as the spec's precision), q, s the rowwise copy of fp32 y (s
 *   [cdiv(hidden, 128), tokens]), qt, st the columnwise copy (quant.output
 *   "both"; else 0). */
lg_status lg_rmsnorm_router_forward(const lg_kernel *k, lg_stream stream, int64_t tokens, lg_dptr x,
				    lg_dptr w, lg_dptr route_w, lg_dptr y, lg_dptr rms, lg_dptr logits,
				    lg_dptr q, lg_dptr s, lg_dptr qt, lg_dptr st);

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

/* K10: grad norm over a list (op "grad_norm", pass "forward"): out, a 0-d
 *   fp32, = (sum |x|^2)^(1/2) (ord "2"; sum x^2 with "norm": false), sum |x|
 *   (ord "1") or max |x| (ord "inf", NaN if any is NaN), over every element
 *   of every tensor, accumulated in fp64 in a fixed order: the same list
 *   gives the same bits on every call. The kernel's dtype must be the
 *   list's only element type, unless its spec has "mixed": true.
 *   workspace: lg_kernel_workspace_size(k) bytes. */
lg_status lg_grad_norm(const lg_kernel *k, lg_stream stream, const lg_tensor_list *list, lg_dptr out,
		       lg_dptr workspace);
/* K11: count-zero over a list (op "count_zero", pass "forward"): out, a
 *   0-d int64, = the number of elements equal to 0 (+0.0 and -0.0).
 *   Element types and workspace as lg_grad_norm. */
lg_status lg_count_zero(const lg_kernel *k, lg_stream stream, const lg_tensor_list *list, lg_dptr out,
			lg_dptr workspace);

/* K9: softmax cross entropy (op "cross_entropy"). logits [tokens, vocab]
 *   bf16 or fp32, 16-byte aligned (its rows need not be: any vocab), labels
 *   [tokens] int64 (int32 with "index": "int32"), 4-byte aligned (int64 ones
 *   too: read as two words); a row whose label is the
 *   spec's ignore_index gets loss = S = m = 0 and a zero gradient. Each
 *   launcher refuses a kernel of another op, pass or part.
 * Forward (part "full"): loss, sum_exp S = sum exp(x - m), max_logit m
 *   [tokens] fp32 (S and m optional: 0). */
lg_status lg_cross_entropy_forward(const lg_kernel *k, lg_stream stream, int64_t tokens, lg_dptr logits,
				   lg_dptr labels, lg_dptr loss, lg_dptr sum_exp, lg_dptr max_logit);
/* The fused forward + backward ("fused": true): as the forward, and grad
 *   [tokens, vocab] in logits' type for the output gradient g[0] (a device
 *   fp32 scalar, e.g. 1 / rows for the mean) on every row; with "inplace"
 *   grad is 0 and the gradient is written over the logits. */
lg_status lg_cross_entropy_fused(const lg_kernel *k, lg_stream stream, int64_t tokens, lg_dptr logits,
				 lg_dptr labels, lg_dptr g, lg_dptr loss, lg_dptr sum_exp, lg_dptr max_logit,
				 lg_dptr grad);
/* Backward (part "full" or "shard"): grad = (exp(x - m) / S - (1 - e)
 *   onehot - e / C) dloss[row] in logits' type, from the forward's S and m
 *   (the merged ones for a shard, whose columns start at vocab_start; 0
 *   for part "full"); with "inplace" grad is 0 and the logits are
 *   overwritten. */
lg_status lg_cross_entropy_backward(const lg_kernel *k, lg_stream stream, int64_t tokens, int64_t vocab_start,
				    lg_dptr logits, lg_dptr labels, lg_dptr sum_exp, lg_dptr max_logit,
				    lg_dptr dloss, lg_dptr grad);
/* Vocab parallel, part "shard": this rank's logits [tokens, vocab] (columns
 *   vocab_start .. of the classes) -> stats [tokens, 6] fp32: m, S hi, S lo,
 *   target logit (-inf when the label is not in the shard), sum x hi, lo.
 *   The trainer all-gathers them into [shards, tokens, 6]. */
lg_status lg_cross_entropy_shard_stats(const lg_kernel *k, lg_stream stream, int64_t tokens,
				       int64_t vocab_start, lg_dptr logits, lg_dptr labels, lg_dptr stats);
/* Part "merge": the gathered stats_in [shards, tokens, 6] -> loss, S, m of
 *   the whole rows (S, m optional), for lg_cross_entropy_backward of each
 *   shard. */
lg_status lg_cross_entropy_merge(const lg_kernel *k, lg_stream stream, int64_t tokens, int64_t shards,
				 lg_dptr labels, lg_dptr stats_in, lg_dptr loss, lg_dptr sum_exp,
				 lg_dptr max_logit);
/* K4: the padded MoE row map (op "moe_row_map"): routing is the mask
 *   [tokens, experts] u8/bool (non-zero: routed; routing "mask"), or the
 *   top-k indices [tokens, top_k] int32 ("topk_i32") / int64 ("topk_i64"),
 *   where an index outside [0, experts) is no expert and a repeat counts
 *   once. row_id_map [tokens, experts] int32 (the padded row, -1 where not
 *   routed; rows expert-major, ascending token within an expert); counts
 *   [experts] int32; offsets [experts + 1] int32, each expert's first row
 *   with counts padded to `multiple`, offsets[experts] = P, the padded
 *   total. P stays on the device: a host that needs it copies the 4 bytes
 *   of offsets[experts] (cuMemcpyDtoH), or sizes buffers by the bound
 *   rows = tokens * top_k + experts * (multiple - 1) that every dispatch
 *   buffer uses (below 2^31, the row ids being int32: every MoE launcher
 *   refuses a larger one). row_index [rows] int32 or 0: the source token of row r < P,
 *   -1 for padding rows and rows >= P. padded_counts [experts] int32 or 0:
 *   round_up(counts, multiple), each expert's rows (the segments of
 *   moe_permute_quant; a grouped GEMM's row counts). workspace:
 *   lg_kernel_workspace_size(k) bytes. */
lg_status lg_moe_row_map_forward(const lg_kernel *k, lg_stream stream, int64_t tokens, lg_dptr routing,
				 lg_dptr row_id_map, lg_dptr counts, lg_dptr offsets, lg_dptr row_index,
				 lg_dptr padded_counts, lg_dptr workspace);
/* K4: MoE permute (op "moe_permute", pass "forward"), dtype bf16 or e4m3:
 *   x [tokens, hidden], x_scale [tokens, hidden / 128] fp32 (e4m3; else 0),
 *   probs [tokens, experts] fp32 or 0, the row map's row_id_map, offsets,
 *   counts; out [rows, hidden] (rows = tokens * top_k + experts * (multiple
 *   - 1): a static bound, since P is known on the device only), out_scale
 *   [rows, hidden / 128] (e4m3), out_probs [rows] fp32 or 0. Row r < P of
 *   (t, e) is x[t] with probs[t, e]; every other row is zeros, probability
 *   0, scale that of a zero block (2^-99 with round_scale, else 1e-30). */
lg_status lg_moe_permute_forward(const lg_kernel *k, lg_stream stream, int64_t tokens, lg_dptr x,
				 lg_dptr x_scale, lg_dptr probs, lg_dptr row_id_map, lg_dptr offsets,
				 lg_dptr counts, lg_dptr out, lg_dptr out_scale, lg_dptr out_probs);
/* Its backward (bf16): dout [rows, hidden], dout_probs [rows] fp32 or 0;
 *   dx [tokens, hidden] = fp32 sum of the token's rows in ascending expert
 *   order; dprobs [tokens, experts] fp32 or 0 (dout_probs of each routed
 *   pair, else 0). */
lg_status lg_moe_permute_backward(const lg_kernel *k, lg_stream stream, int64_t tokens, lg_dptr dout,
				  lg_dptr dout_probs, lg_dptr row_id_map, lg_dptr dx, lg_dptr dprobs);
/* K5: MoE unpermute (op "moe_unpermute", pass "forward"): g [rows, hidden]
 *   bf16, probs [rows] fp32 (required when weighted, else optional);
 *   out [tokens, hidden] bf16 = fp32 sum in ascending expert order of the
 *   token's rows (weighted: each times probs[r]); restore_probs [tokens,
 *   experts] fp32 or 0 (probs[r] where routed, else 0). Any hidden. */
lg_status lg_moe_unpermute_forward(const lg_kernel *k, lg_stream stream, int64_t tokens, lg_dptr g,
				   lg_dptr probs, lg_dptr row_id_map, lg_dptr out, lg_dptr restore_probs);
/* Its backward: dout [tokens, hidden] bf16, drestore [tokens, experts] fp32
 *   or 0, the row map; weighted: g and probs of the forward. dg [rows,
 *   hidden] bf16 (dout[t], weighted times probs[r]; other rows zeros);
 *   dprobs [rows] fp32 or 0 (drestore[t, e], weighted plus <dout[t], g[r]>;
 *   0 on other rows). */
lg_status lg_moe_unpermute_backward(const lg_kernel *k, lg_stream stream, int64_t tokens, lg_dptr dout,
				    lg_dptr drestore, lg_dptr row_id_map, lg_dptr offsets, lg_dptr counts,
				    lg_dptr g, lg_dptr probs, lg_dptr dg, lg_dptr dprobs);

/* K4b: MoE permute + pad + per-expert blockwise FP8 quantisation (op
 *   "moe_permute_quant"): x [tokens, hidden] bf16 (hidden a multiple of
 *   128), probs [tokens, experts] fp32 or 0, moe_row_map's row_index [rows]
 *   and padded_counts [experts] (rows = tokens * top_k + experts *
 *   (multiple - 1)). Each expert's padded segment (padding rows zeros) is
 *   quantised as its own tensor (KERNELS.md 1.3): q [rows, hidden] e4m3,
 *   s a [hidden/128, P_e] block an expert; qt a [hidden, P_e] block an
 *   expert, st [cdiv(rows, 128) + experts, hidden] (cdiv(P_e, 128) rows an
 *   expert); the copies quant.output does not ask for take 0. out_probs
 *   [rows] fp32 or 0. Rows past the padded total are not written. */
lg_status lg_moe_permute_quant_forward(const lg_kernel *k, lg_stream stream, int64_t tokens, lg_dptr x,
				       lg_dptr probs, lg_dptr row_index, lg_dptr padded_counts, lg_dptr q,
				       lg_dptr s, lg_dptr qt, lg_dptr st, lg_dptr out_probs);

#ifdef __cplusplus
}
#endif
#endif /* LINGEN_H */
