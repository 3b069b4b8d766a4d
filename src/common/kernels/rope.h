// rope.h: rotary position embeddings, forward and backward, on either backend: RoPE over the whole
// head and partial RoPE over its first dims (the hybrid targets, DeepSeek's rope dims). The ops_*
// calls (dispatched in ops.c) and struct rope_kernels, the table each backend fills: rope_cpu.c's
// rope_kernels_cpu (fp32, the reference) and rope_cuda.cu's rope_kernels_cuda (bf16 activations,
// fp32 angles). Both write the rotation once for both directions: the backward is the forward's
// turn by minus the angle. "act" is the backend's activation dtype (ops_act_dtype).
#pragma once
#include <stdint.h>

#include "common/backend/backend.h"
#include "common/backend/backend_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

// ops_rope: rotate x in place, Hugging Face "rotate_half" layout: for i < hd/2, the pair
// (x[i], x[i + hd/2]) turns by angle pos[t] * inv_freq[i].   x [T, nh, hd] act, pos [T] i32, inv_freq [hd/2] f32
void ops_rope(backend *be, void *x, const int32_t *pos, const float *inv_freq, int T, int nh, int hd);

// ops_rope_partial: RoPE on the first rot dims of every head only (rot even, rot <= hd), rotate_half
// layout inside them: for i < rot/2 the pair (x[i], x[i + rot/2]) turns by pos[t] * inv_freq[i];
// dims rot..hd-1 are left as they are. rot = hd is ops_rope.
//   x [T, nh, hd] act (in place), pos [T] i32, inv_freq [rot/2] f32
void ops_rope_partial(backend *be, void *x, const int32_t *pos, const float *inv_freq, int T, int nh, int hd,
                      int rot);

// ops_rope_backward: the transpose of ops_rope (rotation by -angle), in place on dx [T, nh, hd].
void ops_rope_backward(backend *be, void *dx, const int32_t *pos, const float *inv_freq, int T, int nh, int hd);

// The table: one member per op above, same arguments (no checks: the ops_* calls make them).
struct rope_kernels {
    void (*rope)(backend *be, void *x, const int32_t *pos, const float *inv_freq, int T, int nh, int hd);
    void (*rope_partial)(backend *be, void *x, const int32_t *pos, const float *inv_freq, int T, int nh, int hd,
                         int rot);
    void (*rope_backward)(backend *be, void *dx, const int32_t *pos, const float *inv_freq, int T, int nh, int hd);
};

// ROPE_OPS: the members above, once, in order; each backend fills its table from it in one
// line (OP_FILL, backend_ops.h).
#define ROPE_OPS(X, p) X(p, rope) X(p, rope_partial) X(p, rope_backward)
OPS_LISTED(struct rope_kernels, ROPE_OPS, 0);

#ifdef __cplusplus
}
#endif
