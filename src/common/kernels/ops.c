// ops.c: dispatch of the model ops to the CPU reference or the CUDA kernels (see ops.h).
#include "common/kernels/ops.h"

#include <string.h>

#include "common/core/check.h"
#include "common/kernels/ops_cpu.h"
#ifdef DFLASH_HAVE_CUDA
#include "common/kernels/ops_cuda.h"
#endif
#include "common/kernels/ops_dispatch.h"

dtype ops_act_dtype(const backend *be) { return be->kind == BACKEND_CUDA ? DT_BF16 : DT_F32; }

void ops_embed(backend *be, void *out, const void *table, const int32_t *ids, int T, int H) {
    DISPATCH(be, cuda_embed(be, out, table, ids, T, H), cpu_embed(out, table, ids, T, H));
}

void ops_rmsnorm(backend *be, void *out, const void *in, const void *w, int R, int D, float eps) {
    DISPATCH(be, cuda_rmsnorm(be, out, in, w, R, D, eps), cpu_rmsnorm(out, in, w, R, D, eps));
}

void ops_rope(backend *be, void *x, const int32_t *pos, const float *inv_freq, int T, int nh, int hd) {
    DISPATCH(be, cuda_rope(be, x, pos, inv_freq, T, nh, hd), cpu_rope(x, pos, inv_freq, T, nh, hd));
}

// ops_attention_ext (ops_arch.h) without a window or sinks: the same kernels, dispatched here so
// that the profile keeps this op's name.
void ops_attention_causal(backend *be, void *out, const void *q, const void *k, const void *v,
                          const int32_t *cu_seqlens, int n_seq, int T, int nq, int nkv, int hd, float scale) {
    if (nkv < 1 || nq % nkv) fatal("attention: %d query heads do not group over %d kv heads", nq, nkv);
    DISPATCH(be, cuda_attention_causal(be, out, q, k, v, cu_seqlens, n_seq, T, nq, nkv, hd, scale, 0, NULL),
             cpu_attention_causal(out, q, k, v, cu_seqlens, n_seq, T, nq, nkv, hd, scale, 0, NULL));
}

void ops_swiglu(backend *be, void *out, const void *gate, const void *up, int64_t n) {
    DISPATCH(be, cuda_swiglu(be, out, gate, up, n), cpu_swiglu(out, gate, up, n));
}

void ops_add(backend *be, void *x, const void *y, int64_t n) {
    DISPATCH(be, cuda_add(be, x, y, n), cpu_add(x, y, n));
}

void ops_to_f32(backend *be, float *dst, const void *src, int64_t n) {
    DISPATCH(be, cuda_to_f32(be, dst, src, n), if (dst != src) memmove(dst, src, (size_t)n * sizeof(float)));
}

void ops_copy_2d(backend *be, void *dst, int64_t dst_ld, const void *src, int64_t src_ld, int64_t rows, int64_t cols) {
    DISPATCH(be, cuda_copy_2d(be, dst, dst_ld, src, src_ld, rows, cols),
             cpu_copy_2d(dst, dst_ld, src, src_ld, rows, cols));
}

void ops_topk_lse_init(backend *be, float *val, int32_t *idx, float *m, float *s, int R, int k) {
    if (k < 1 || k > OPS_TOPK_MAX) fatal("top-k %d outside [1, %d]", k, OPS_TOPK_MAX);
    DISPATCH(be, cuda_topk_lse_init(be, val, idx, m, s, R, k), cpu_topk_lse_init(val, idx, m, s, R, k));
}

void ops_topk_lse_update(backend *be, const float *logits, int ld, int v0, int R, int Vc, int k,
                         float *val, int32_t *idx, float *m, float *s) {
    DISPATCH(be, cuda_topk_lse_update(be, logits, ld, v0, R, Vc, k, val, idx, m, s),
             cpu_topk_lse_update(logits, ld, v0, R, Vc, k, val, idx, m, s));
}

void ops_topk_lse_finish(backend *be, float *lse, const float *m, const float *s, int R) {
    DISPATCH(be, cuda_topk_lse_finish(be, lse, m, s, R), cpu_topk_lse_finish(lse, m, s, R));
}
