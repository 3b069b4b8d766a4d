// topk_lse.h: the running top-k and log-sum-exp over vocabulary tiles, on either backend (the
// lm_head never materialises [T, V]). The ops_* calls (dispatched in ops.c) and struct
// topk_lse_kernels, the table each backend fills: topk_lse_cpu.c's topk_lse_kernels_cpu (the
// reference) and topk_lse_cuda.cu's topk_lse_kernels_cuda (a radix select per row); all fp32.
#pragma once
#include <stdint.h>

#include "common/backend/backend.h"
#include "common/backend/backend_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

// Running top-k and log-sum-exp over vocabulary tiles:
//   ops_topk_lse_init   m = -inf, s = 0, val = -inf, idx = -1
//   ops_topk_lse_update one fp32 logits tile [R, Vc] (row stride ld) covering vocab ids v0 .. v0+Vc-1
//   ops_topk_lse_finish lse = m + log(s)
// top-k is kept sorted descending; among equal values the lower vocabulary id comes first.
// k <= OPS_TOPK_MAX.  val [R,k] f32, idx [R,k] i32, m/s/lse [R] f32, logits [R, ld] f32
#define OPS_TOPK_MAX 256
void ops_topk_lse_init(backend *be, float *val, int32_t *idx, float *m, float *s, int R, int k);
void ops_topk_lse_update(backend *be, const float *logits, int ld, int v0, int R, int Vc, int k,
                         float *val, int32_t *idx, float *m, float *s);
void ops_topk_lse_finish(backend *be, float *lse, const float *m, const float *s, int R);

// The table: one member per op above, same arguments (no checks: the ops_* calls make them).
struct topk_lse_kernels {
    void (*init)(backend *be, float *val, int32_t *idx, float *m, float *s, int R, int k);
    void (*update)(backend *be, const float *logits, int ld, int v0, int R, int Vc, int k, float *val, int32_t *idx,
                   float *m, float *s);
    void (*finish)(backend *be, float *lse, const float *m, const float *s, int R);
};

// TOPK_LSE_OPS: the members above, once, in order; each backend fills its table from it in one
// line (OP_FILL, backend_ops.h).
#define TOPK_LSE_OPS(X, p) X(p, init) X(p, update) X(p, finish)
OPS_LISTED(struct topk_lse_kernels, TOPK_LSE_OPS, 0);

#ifdef __cplusplus
}
#endif
