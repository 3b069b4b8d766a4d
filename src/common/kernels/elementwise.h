// elementwise.h: the elementwise ops and copies on either backend: the embedding lookup, sums,
// the embedding scale, biases (per column, per routed expert), the casts between the activation
// dtype and fp32, and strided row copies. The ops_* calls (dispatched in ops.c) and struct
// elementwise_kernels, the table each backend fills: elementwise_cpu.c's elementwise_kernels_cpu
// (fp32) and elementwise_cuda.cu's elementwise_kernels_cuda (bf16 activations, fp32 arithmetic).
// "act" is the backend's activation dtype (ops_act_dtype); buffers are the backend's memory.
#pragma once
#include <stdint.h>

#include "common/backend/backend.h"
#include "common/backend/backend_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

// ops_embed: out[t,:] = table[ids[t],:].       out [T,H] act, table [V,H] act, ids [T] i32
void ops_embed(backend *be, void *out, const void *table, const int32_t *ids, int T, int H);

// ops_add: x += y, elementwise over n.                         act
void ops_add(backend *be, void *x, const void *y, int64_t n);

// ops_add_to_f32: acc[n] += x[n] (x act).
void ops_add_to_f32(backend *be, float *acc, const void *x, int64_t n);

// ops_scale: x[i] *= s for i < n.                            x [n] act
// (Gemma's embedding scale: s is sqrt(hidden) rounded to the act dtype by the caller, as transformers does)
void ops_scale(backend *be, void *x, float s, int64_t n);

// ops_bias_add: y[r, :] += b[:] for r < R.                  y [R, N] act, b [N] act
void ops_bias_add(backend *be, void *y, const void *b, int64_t R, int64_t N);

// ops_moe_bias_add: ys[r, :] += bias[e, :] for the routed rows r of expert e, offsets[e] <= r <
// offsets[e + 1] (the rows grouped by expert, as ops_moe_route leaves them).
//   ys [R, N] act, bias [E, N] act, offsets [E + 1] i32 (device)
void ops_moe_bias_add(backend *be, void *ys, const void *bias, const int32_t *offsets, int E, int64_t R, int64_t N);

// ops_to_f32: dst[n] (f32, device) = src[n] (act, device).
void ops_to_f32(backend *be, float *dst, const void *src, int64_t n);

// ops_f32_to_act: dst[n] = src[n] in the act dtype (an fp32 accumulator into an act buffer).
void ops_f32_to_act(backend *be, void *dst, const float *src, int64_t n);

// ops_copy_2d: dst[r, 0:cols] = src[r, 0:cols] for r < rows, with row strides dst_ld/src_ld
// (elements of the act dtype). Places a layer's hidden states into its column block of features.
void ops_copy_2d(backend *be, void *dst, int64_t dst_ld, const void *src, int64_t src_ld, int64_t rows, int64_t cols);

// The table: one member per op above, same arguments (no checks: the ops_* calls make them).
struct elementwise_kernels {
    void (*embed)(backend *be, void *out, const void *table, const int32_t *ids, int T, int H);
    void (*add)(backend *be, void *x, const void *y, int64_t n);
    void (*add_to_f32)(backend *be, float *acc, const void *x, int64_t n);
    void (*scale)(backend *be, void *x, float s, int64_t n);
    void (*bias_add)(backend *be, void *y, const void *b, int64_t R, int64_t N);
    void (*moe_bias_add)(backend *be, void *ys, const void *bias, const int32_t *offsets, int E, int64_t R, int64_t N);
    void (*to_f32)(backend *be, float *dst, const void *src, int64_t n);
    void (*f32_to_act)(backend *be, void *dst, const float *src, int64_t n);
    void (*copy_2d)(backend *be, void *dst, int64_t dst_ld, const void *src, int64_t src_ld, int64_t rows,
                    int64_t cols);
};

// ELEMENTWISE_OPS: the members above, once, in order; each backend fills its table from it in one
// line (OP_FILL, backend_ops.h).
#define ELEMENTWISE_OPS(X, p) X(p, embed) X(p, add) X(p, add_to_f32) X(p, scale) X(p, bias_add) \
    X(p, moe_bias_add) X(p, to_f32) X(p, f32_to_act) X(p, copy_2d)
OPS_LISTED(struct elementwise_kernels, ELEMENTWISE_OPS, 0);

#ifdef __cplusplus
}
#endif
