// dynconv.h: the grouped dynamic causal convolution of the DFlash2 drafter (SPEC §3.1; the dflash
// package's _grouped_dynamic_convolve), forward and backward, on either backend. The ops_* calls
// (dispatched in ops.c, with the shape checks) and struct dynconv_kernels, the table each backend
// fills: dynconv_cpu.c's dynconv_kernels_cpu (fp32, the reference) and dynconv_cuda.cu's
// dynconv_kernels_cuda (act in, fp32 accumulation).
//
// Rows are C blocks of B slots each (row t = c*B + k, slot k), H channels in H/G groups of G
// channels. Per row, per offset o < K, the kernel is base[o, h] + dyn[t, o*(H/G) + h/G] (one dynamic
// value per group, broadcast over its G channels):
//   out[t, h] = sum_{o < K, o <= k} (base[o, h] + dyn[t, o*(H/G) + h/G]) * x[t - o, h]
// causal along the block's slots: a slot sees itself and the K-1 before it in its own block (the
// package convolves the block's positions with zero padding before the first). dyn rows have a
// stride ld (the kernel_projection output [T, 2*K*H/G] holds both convolutions of a module: prepare
// reads columns [0, K*H/G), finish [K*H/G, 2*K*H/G)).
#pragma once
#include <stdint.h>

#include "common/backend/backend.h"
#include "common/backend/backend_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

// ops_dynconv_forward: out [T, H] act (written; not x), x [T, H] act, dyn [T, ld] act, base [K, H] act.
void ops_dynconv_forward(backend *be, void *out, const void *x, const void *dyn, int ld, const void *base, int T, int B,
                         int H, int K, int G);
// ops_dynconv_backward: from dout [T, H] act:
//   dx [T, H] act (written): sum_o (base[o] + dyn[t+o, o]) * dout[t+o] over the slots t+o of t's block
//   ddyn [T, ld] act (columns [0, K*H/G) written): sum over the group's channels of dout[t] * x[t-o]
//   dbase [K, H] f32 (+=): sum over rows of dout[t] * x[t-o]
void ops_dynconv_backward(backend *be, void *dx, void *ddyn, float *dbase, const void *dout, const void *x,
                          const void *dyn, int ld, const void *base, int T, int B, int H, int K, int G);

// The table: one member per op above, same arguments (no checks: the ops_* calls make them).
struct dynconv_kernels {
    void (*forward)(backend *be, void *out, const void *x, const void *dyn, int ld, const void *base, int T, int B,
                    int H, int K, int G);
    void (*backward)(backend *be, void *dx, void *ddyn, float *dbase, const void *dout, const void *x,
                     const void *dyn, int ld, const void *base, int T, int B, int H, int K, int G);
};

// DYNCONV_OPS: the members above, once, in order; each backend fills its table from it in one
// line (OP_FILL, backend_ops.h).
#define DYNCONV_OPS(X, p) X(p, forward) X(p, backward)
OPS_LISTED(struct dynconv_kernels, DYNCONV_OPS, 0);

#ifdef __cplusplus
}
#endif
