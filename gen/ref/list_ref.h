/*
 * list_ref.h - plain-C references of the tensor-list reductions (K10 grad
 * norm, K11 count-zero), over host tensors, with nothing shared with the
 * generated code: element by element, in list order, fp64 sums with
 * Neumaier's compensation (so the reference is exact to about one fp64
 * rounding, whatever the list's length), exact maxima and counts.
 */
#ifndef LG_LIST_REF_H
#define LG_LIST_REF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ref.h"

struct lg_ref_tensor {
	const void *data; /* host memory */
	int elem;         /* lg_list_elem (lingen.h) */
	int64_t count;
};

enum lg_ref_ord { LG_REF_ORD_2, LG_REF_ORD_1, LG_REF_ORD_INF };

/* Sum of squares (ord 2, its square root with root), sum of |x| (ord 1)
 * or max |x| (ord inf, NaN if any element is NaN; 0 for no element). */
double lg_ref_list_norm(const struct lg_ref_tensor *t, size_t n, enum lg_ref_ord ord, bool root);
/* Elements equal to zero (+0.0 and -0.0). */
int64_t lg_ref_list_count_zero(const struct lg_ref_tensor *t, size_t n);

/* The tensors of a host table (rows as lingen.h lays them out, pointers
 * into host memory): the rows' items as tensors. The caller frees the
 * result with free(); NULL for 0 rows or out of memory. */
struct lg_ref_tensor *lg_ref_list_rows(const void *table, size_t rows);

/* fill() of a list family's reference case (list, out, workspace) at
 * c->sizes[0] items: tensors of 1 to 7 whole items (16 KiB), the last
 * shorter, of the spec's dtype (alternating bf16 and fp32 when mixed), in
 * c->data (16-byte aligned), values about normal with 3% zeros of either
 * sign; the table rows (buf[0]) point into c->data. */
void lg_ref_list_fill(const struct lg_spec *s, struct lg_ref_case *c, uint64_t seed);

/* Family "adamw": the hyperparameters of a spec, and one AdamW step of n
 * elements in place (p fp32; g, m, v fp32 or bf16 as the flags say), as
 * torch.optim.AdamW computes it (adamw_ref.c). */
struct lg_ref_adamw_hp {
	double beta1, beta2, eps, weight_decay;
	bool grad_bf16, moments_bf16, param_bf16;
};
struct lg_ref_adamw_hp lg_ref_adamw_hp_of(const struct lg_spec *s);
void lg_ref_adamw_step(const struct lg_ref_adamw_hp *h, void *p, const void *g, void *m, void *v, size_t n,
		       float step, float lr);

/* Family "adamw_fp8": the FP8 copies of a weight w [m, n] (bf16, or fp32
 * with !bf16; n a multiple of 128) in 128 x 128 tiles, as fp8_quant_weight
 * gives them (transposed): q [m, n], s [cdiv(m, 128), n / 128], qt [n, m],
 * st [n / 128, cdiv(m, 128)]; a partial last row of tiles over its real
 * rows (adamw_fp8_ref.c). */
void lg_ref_weight_tiles(const void *w, bool bf16, size_t m, size_t n, bool pow2, uint8_t *q, float *s,
			 uint8_t *qt, float *st);
/* The experts' own transposed copies (adamw_fp8 with expert_rows er, a
 * multiple of 128) of the transposed copy qt [n, m], st [n / 128,
 * cdiv(m, 128)] of m rows: expert e (rows e er .. e er + c - 1, c = min(er,
 * m - e er)) gets qe [n, c] at element e er n and se [n / 128, cdiv(c,
 * 128)] at element e er / 128 n / 128 (lingen.nn._quant.experts_transposed
 * at m a multiple of er). */
void lg_ref_experts_transposed(const uint8_t *qt, const float *st, size_t m, size_t n, size_t er, uint8_t *qe,
			       float *se);

#endif
