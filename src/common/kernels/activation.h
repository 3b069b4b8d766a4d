// activation.h: the activations on either backend: SwiGLU (forward and backward), GeGLU with the
// tanh GELU, gpt-oss's clamped SwiGLU, the sigmoid gate of the gated attention and the final logit
// soft-cap. The ops_* calls (dispatched in ops.c) and struct activation_kernels, the table each
// backend fills: activation_cpu.c's activation_kernels_cpu (fp32, the reference) and
// activation_cuda.cu's activation_kernels_cuda (bf16 activations, fp32 arithmetic). "act" is the
// backend's activation dtype (ops_act_dtype); buffers are the backend's memory.
#pragma once
#include <stdint.h>

#include "common/backend/backend.h"
#include "common/backend/backend_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

// ops_swiglu: out = silu(gate) * up, elementwise over n.      act
void ops_swiglu(backend *be, void *out, const void *gate, const void *up, int64_t n);

// ops_swiglu_backward: out = silu(g) * u  ->  dg = dout * u * silu'(g), du = dout * silu(g).  act [n]
void ops_swiglu_backward(backend *be, void *dgate, void *dup, const void *dout, const void *gate, const void *up, int64_t n);

// ops_geglu_tanh: out = gelu_tanh(gate) * up, elementwise over n (out may alias gate).   act
// gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (transformers' gelu_pytorch_tanh)
void ops_geglu_tanh(backend *be, void *out, const void *gate, const void *up, int64_t n);

// ops_swiglu_clamped: gpt-oss's expert activation on interleaved columns: in [R, 2I] act, column 2j
// the gate and 2j+1 the up of unit j; out [R, I] act (I = n_i: complex.h, via cblas.h, defines I):
//   g = min(gate, limit), u = clamp(up, -limit, limit), out = (u + 1) * g * sigmoid(alpha * g)
void ops_swiglu_clamped(backend *be, void *out, const void *in, int64_t R, int64_t n_i, float alpha, float limit);

// ops_sigmoid_mul: x[i] *= sigmoid(g[i]) for i < n (the gated attention's output gate).   act
void ops_sigmoid_mul(backend *be, void *x, const void *g, int64_t n);

// ops_softcap_f32: x[r, c] = cap * tanh(x[r, c] / cap) for r < R, c < C (row stride ld).   f32
// (the final logit soft-cap on an lm_head tile, before the top-k and the LSE)
void ops_softcap_f32(backend *be, float *x, int64_t ld, int64_t R, int64_t C, float cap);

// The table: one member per op above, same arguments (no checks: the ops_* calls make them).
struct activation_kernels {
    void (*swiglu)(backend *be, void *out, const void *gate, const void *up, int64_t n);
    void (*swiglu_backward)(backend *be, void *dgate, void *dup, const void *dout, const void *gate, const void *up,
                            int64_t n);
    void (*geglu_tanh)(backend *be, void *out, const void *gate, const void *up, int64_t n);
    void (*swiglu_clamped)(backend *be, void *out, const void *in, int64_t R, int64_t n_i, float alpha, float limit);
    void (*sigmoid_mul)(backend *be, void *x, const void *g, int64_t n);
    void (*softcap_f32)(backend *be, float *x, int64_t ld, int64_t R, int64_t C, float cap);
};

// ACTIVATION_OPS: the members above, once, in order; each backend fills its table from it in one
// line (OP_FILL, backend_ops.h).
#define ACTIVATION_OPS(X, p) X(p, swiglu) X(p, swiglu_backward) X(p, geglu_tanh) X(p, swiglu_clamped) \
    X(p, sigmoid_mul) X(p, softcap_f32)
OPS_LISTED(struct activation_kernels, ACTIVATION_OPS, 0);

#ifdef __cplusplus
}
#endif
