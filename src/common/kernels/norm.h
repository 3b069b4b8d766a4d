// norm.h: the RMSNorms, forward and backward, on either backend: plain (the layer and q/k norms),
// zero-centred (the hybrid targets' norm) and gated (the linear mixer's output norm). The ops_*
// calls (dispatched in ops.c) and struct norm_kernels, the table each backend fills: norm_cpu.c's
// norm_kernels_cpu (fp32, the reference) and norm_cuda.cu's norm_kernels_cuda (bf16 activations,
// fp32 sums). "act" is the backend's activation dtype (ops_act_dtype); buffers are the backend's
// memory; shapes [rows, cols], row-major.
#pragma once
#include <stdint.h>

#include "common/backend/backend.h"
#include "common/backend/backend_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

// ops_rmsnorm: out[r,:] = in[r,:] / sqrt(mean(in[r,:]^2) + eps) * w.  in/out [R,D] act (may alias), w [D] act
// Used for the layer norms (R = tokens, D = H) and the per-head q/k norms (R = tokens*heads, D = head_dim).
void ops_rmsnorm(backend *be, void *out, const void *in, const void *w, int R, int D, float eps);

// ops_rmsnorm_backward: y = x * r * w with r = 1/sqrt(mean(x^2) + eps), per row of D.
//   dx [R,D] act: written (accumulate = 0) or added to (accumulate = 1)
//   dw [D] f32: += sum over rows of dy * x * r
void ops_rmsnorm_backward(backend *be, void *dx, float *dw, const void *dy, const void *x, const void *w, int R, int D,
                          float eps, int accumulate);

// ops_rmsnorm_zc: zero-centred RMSNorm, out[r,:] = in[r,:] * rsqrt(mean(in[r,:]^2) + eps) * (1 + w),
// computed in fp32 (transformers' Qwen3_5RMSNorm). in/out [R, D] act (may alias), w [D] act.
void ops_rmsnorm_zc(backend *be, void *out, const void *in, const void *w, int R, int D, float eps);

// ops_gated_rmsnorm: the gated norm of the linear mixer (not zero-centred), per row of D:
//   out = w * (x * rsqrt(mean(x^2) + eps)) * silu(z)
//   x, z, out [R, D] act (out may alias x), w [D] act
void ops_gated_rmsnorm(backend *be, void *out, const void *x, const void *z, const void *w, int R, int D, float eps);

// The table: one member per op above, same arguments (no checks: the ops_* calls make them).
struct norm_kernels {
    void (*rmsnorm)(backend *be, void *out, const void *in, const void *w, int R, int D, float eps);
    void (*rmsnorm_backward)(backend *be, void *dx, float *dw, const void *dy, const void *x, const void *w, int R,
                             int D, float eps, int accumulate);
    void (*rmsnorm_zc)(backend *be, void *out, const void *in, const void *w, int R, int D, float eps);
    void (*gated_rmsnorm)(backend *be, void *out, const void *x, const void *z, const void *w, int R, int D,
                          float eps);
};

// NORM_OPS: the members above, once, in order; each backend fills its table from it in one
// line (OP_FILL, backend_ops.h).
#define NORM_OPS(X, p) X(p, rmsnorm) X(p, rmsnorm_backward) X(p, rmsnorm_zc) X(p, gated_rmsnorm)
OPS_LISTED(struct norm_kernels, NORM_OPS, 0);

#ifdef __cplusplus
}
#endif
