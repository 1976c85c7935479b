/*
 * cross_entropy_grad.h - the pieces of K9's gradient that family
 * "cross_entropy" (cross_entropy_emit.c) and family "cross_entropy_quant"
 * emit alike, so that both compute the gradient with the same instructions
 * (the same bits): the exp, the label read and the target's and the
 * smoothing's shares. Private to gen/families/.
 */
#ifndef LG_FAMILY_CROSS_ENTROPY_GRAD_H
#define LG_FAMILY_CROSS_ENTROPY_GRAD_H

#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "error.h"

/* The device helper lg_ce_exp(d) = e^d for d <= 0 (ex2.approx.ftz of d
 * log2 e in fp32; 0 for -inf). */
void lg_ce_emit_exp(lg_buf *b);
/* `const i64 y` (the label of token expression `row` in `labels`, int32 or
 * int64, the latter read as two 4-byte words) and `const bool ign`
 * (y == ignore). */
void lg_ce_emit_label(lg_buf *b, bool i32, int64_t ignore, const char *row);
/* label_smoothing e over `classes` classes: in torch's [0, 1], and e /
 * classes (a constant of the kernels) 0 or an fp32 normal. */
lg_status lg_ce_check_smoothing(double e, int64_t classes, const char *where);
/* `const float gy, ge`: the target's share (1 - e) g0 and the smoothing's
 * e / classes g0 of the fp32 output gradient g0 (a name in scope). The
 * gradient of x is then lg_ce_exp(x - m) * gs - ge, less gy at the label,
 * with gs = g0 / S. */
void lg_ce_emit_shares(lg_buf *b, double e, int64_t classes);

#endif
