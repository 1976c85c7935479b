/*
 * rmsnorm_router_ref.h - the pieces of the rmsnorm_router reference (K3b)
 * its tests use to measure each precision's error.
 */
#ifndef LG_RMSNORM_ROUTER_REF_H
#define LG_RMSNORM_ROUTER_REF_H

#include <stddef.h>
#include <stdint.h>

/* y [m, n] = (x r) w in fp32 and rms [m] = r (rms may be NULL). */
void lg_ref_rmsnorm_router_y(const uint16_t *x, const uint16_t *w, size_t m, size_t n, double eps, float *y,
			     float *rms);
/* logits [m, e] = A(y) . rw^T in float64, A(y) the sum of the first `terms`
 * bf16 terms of each fp32 y (1: y rounded to bf16), or y itself (terms 0). */
void lg_ref_rmsnorm_router_logits(const float *y, const uint16_t *rw, size_t m, size_t n, size_t e, int terms,
				  double *logits);

#endif
