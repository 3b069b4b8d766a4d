// ops_train.c: dispatch of the training ops to the CPU reference or the CUDA kernels (see
// ops_train.h), in the pattern of ops.c. Argument checks that hold on both backends live here.
#include "common/kernels/ops_train.h"

#include <string.h>

#include "common/core/check.h"
#include "common/kernels/ops_cpu.h"
#include "common/kernels/ops_train_cpu.h"
#ifdef DFLASH_HAVE_CUDA
#include "common/kernels/ops_train_cuda.h"
#endif
#include "common/kernels/ops_dispatch.h"


void ops_rmsnorm_backward(backend *be, void *dx, float *dw, const void *dy, const void *x, const void *w, int R, int D,
                          float eps, int accumulate) {
    DISPATCH(be, cuda_rmsnorm_backward(be, dx, dw, dy, x, w, R, D, eps, accumulate),
             cpu_rmsnorm_backward(dx, dw, dy, x, w, R, D, eps, accumulate));
}

void ops_rope_backward(backend *be, void *dx, const int32_t *pos, const float *inv_freq, int T, int nh, int hd) {
    DISPATCH(be, cuda_rope_backward(be, dx, pos, inv_freq, T, nh, hd), cpu_rope_backward(dx, pos, inv_freq, T, nh, hd));
}

void ops_swiglu_backward(backend *be, void *dgate, void *dup, const void *dout, const void *gate, const void *up,
                         int64_t n) {
    DISPATCH(be, cuda_swiglu_backward(be, dgate, dup, dout, gate, up, n),
             cpu_swiglu_backward(dgate, dup, dout, gate, up, n));
}

// Shapes both attention ops rely on: the heads group evenly and a block has at least one slot.
static void check_attn_shape(int C, int B, int nq, int nkv, int hd) {
    if (nkv < 1 || nq % nkv) fatal("dflash attention: %d query heads do not group over %d kv heads", nq, nkv);
    if (C < 0 || B < 1 || hd < 1) fatal("dflash attention: bad shape C %d, B %d, head_dim %d", C, B, hd);
}

void ops_dflash_attn_forward(backend *be, void *out, float *lse, const void *q, const void *kb, const void *vb,
                             const void *kc, const void *vc, const int32_t *anchors, const int32_t *seq_start,
                             int C, int B, int nq, int nkv, int hd, float scale, int window, int block_causal) {
    check_attn_shape(C, B, nq, nkv, hd);
    if (C == 0) return;
    DISPATCH(be,
             cuda_dflash_attn_forward(be, out, lse, q, kb, vb, kc, vc, anchors, seq_start, C, B, nq, nkv, hd, scale,
                                      window, block_causal),
             cpu_dflash_attn_forward(out, lse, q, kb, vb, kc, vc, anchors, seq_start, C, B, nq, nkv, hd, scale, window,
                                     block_causal));
}

void ops_dflash_attn_backward(backend *be, void *dq, void *dkb, void *dvb, float *dkc, float *dvc, const void *dout,
                              const void *out, const float *lse, const void *q, const void *kb, const void *vb,
                              const void *kc, const void *vc, const int32_t *anchors, const int32_t *seq_start,
                              int C, int B, int nq, int nkv, int hd, float scale, int window, int block_causal) {
    check_attn_shape(C, B, nq, nkv, hd);
    if (C == 0) return;
    DISPATCH(be,
             cuda_dflash_attn_backward(be, dq, dkb, dvb, dkc, dvc, dout, out, lse, q, kb, vb, kc, vc, anchors,
                                       seq_start, C, B, nq, nkv, hd, scale, window, block_causal),
             cpu_dflash_attn_backward(dq, dkb, dvb, dkc, dvc, dout, out, lse, q, kb, vb, kc, vc, anchors, seq_start,
                                      C, B, nq, nkv, hd, scale, window, block_causal));
}

void ops_f32_to_act(backend *be, void *dst, const float *src, int64_t n) {
    DISPATCH(be, cuda_f32_to_act(be, dst, src, n), if (dst != src) memmove(dst, src, (size_t)n * sizeof(float)));
}

void ops_add_to_f32(backend *be, float *acc, const void *x, int64_t n) {
    DISPATCH(be, cuda_add_to_f32(be, acc, x, n), cpu_add(acc, x, n));
}
