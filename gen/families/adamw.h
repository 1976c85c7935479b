/*
 * adamw.h - the pieces of family "adamw" (adamw.c) that family "adamw_fp8"
 * (the same update, the weight re-quantised in the same pass) emits too, so
 * that both compute the same operations in the same order. Private to
 * gen/families/.
 */
#ifndef LG_FAMILY_ADAMW_H
#define LG_FAMILY_ADAMW_H

#include <stdbool.h>

#include "family.h"

/* The keys of both families after the parameters' type: keys k .. k +
 * LG_ADAMW_KEYS - 1 in this order (offsets LG_ADAMW_KEY_*). */
enum {
	LG_ADAMW_KEY_GRAD,
	LG_ADAMW_KEY_MOMENTS,
	LG_ADAMW_KEY_BETA1,
	LG_ADAMW_KEY_BETA2,
	LG_ADAMW_KEY_EPS,
	LG_ADAMW_KEY_WD,
	LG_ADAMW_KEYS
};
enum { LG_ADAMW_FP32, LG_ADAMW_BF16 };
extern const char *const lg_adamw_type_values[2];
extern const char *const lg_adamw_grad_words[2];
extern const char *const lg_adamw_moment_words[2];
#define LG_KEYS_ADAMW(k)                                                                          \
	[(k) + LG_ADAMW_KEY_GRAD] = {.path = "grad", .type = LG_KEY_ENUM, .values = lg_adamw_type_values,    \
				     .nvalues = 2, .has_def = true, .def = LG_ADAMW_FP32,                    \
				     .naming = LG_NAME_IF_NOT_DEFAULT, .rank = 20,                           \
				     .words = lg_adamw_grad_words, .doc = "the gradients' element type"},    \
	[(k) + LG_ADAMW_KEY_MOMENTS] = {.path = "moments", .type = LG_KEY_ENUM,                              \
					.values = lg_adamw_type_values, .nvalues = 2, .has_def = true,       \
					.def = LG_ADAMW_FP32, .naming = LG_NAME_IF_NOT_DEFAULT, .rank = 21,  \
					.words = lg_adamw_moment_words,                                      \
					.doc = "exp_avg and exp_avg_sq: fp32, or bf16 (rounded to nearest "  \
					       "even)"},                                                     \
	[(k) + LG_ADAMW_KEY_BETA1] = {.path = "beta1", .type = LG_KEY_NUMBER, .lo = -1.0, .hi = 1.0,         \
				      .has_def = true, .def_num = 0.9, .naming = LG_NAME_IF_NOT_DEFAULT,     \
				      .rank = 30, .abbrev = "b1", .doc = "in [0, 1): the first moment's decay"}, \
	[(k) + LG_ADAMW_KEY_BETA2] = {.path = "beta2", .type = LG_KEY_NUMBER, .lo = -1.0, .hi = 1.0,         \
				      .has_def = true, .def_num = 0.999, .naming = LG_NAME_IF_NOT_DEFAULT,   \
				      .rank = 31, .abbrev = "b2",                                            \
				      .doc = "in [0, 1): the second moment's decay"},                        \
	[(k) + LG_ADAMW_KEY_EPS] = {.path = "eps", .type = LG_KEY_NUMBER, .lo = 0.0, .hi = 1.0,              \
				    .has_def = true, .def_num = 1e-8, .naming = LG_NAME_IF_NOT_DEFAULT,      \
				    .rank = 32, .abbrev = "eps", .doc = "added to sqrt(v) / sqrt(bc2)"},     \
	[(k) + LG_ADAMW_KEY_WD] = {.path = "weight_decay", .type = LG_KEY_NUMBER, .lo = -1.0, .hi = 1e6,     \
				   .has_def = true, .def_num = 0.01, .naming = LG_NAME_IF_NOT_DEFAULT,       \
				   .rank = 33, .abbrev = "wd",                                               \
				   .doc = ">= 0: decoupled weight decay, p = p (1 - lr wd)"}

/* beta1, beta2 and weight_decay >= 0 (keys from k). */
lg_status lg_adamw_validate_hp(const struct lg_spec *s, const char *where, int k0);

/* struct lg_adamw_k (the step's fp32 scalars) and lg_adamw1(p, g, m, v, k):
 * one element, torch.optim.AdamW's operations in its order. */
void lg_adamw_emit_update(lg_buf *b, double beta1, double beta2, double eps);
/* lg_ld_<t>(base, e, x) and lg_st_<t>(base, e, x), t f32 or bf16: the
 * loads and stores of g elements of one array at element e of base (u64),
 * whole 16-byte vectors (base + e elements 16-byte aligned). */
void lg_adamw_emit_access(lg_buf *b, bool bf16, int g);
/* `lg_adamw_k k` of a kernel body from its arguments step and lr (device
 * fp32), the scalars in fp64, each rounded once to fp32. */
void lg_adamw_emit_scalars(lg_buf *b, double beta1, double beta2, double wd);

#endif
