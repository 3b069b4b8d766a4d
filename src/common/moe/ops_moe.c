// ops_moe.c: dispatch of the mixture-of-experts ops (ops_moe.h) to the CPU reference or the CUDA
// kernels, in the pattern of ops_hybrid.c. Argument checks that hold on both backends live here.
#include "common/moe/ops_moe.h"

#include "common/core/check.h"
#include "common/moe/ops_moe_cpu.h"
#ifdef DFLASH_HAVE_CUDA
#include "common/moe/ops_moe_cuda.h"
#endif
#include "common/kernels/ops_dispatch.h"

size_t ops_moe_route_work_bytes(const backend *be, int T, int E, int k) {
#ifdef DFLASH_HAVE_CUDA
    if (be->kind == BACKEND_CUDA) return cuda_moe_route_work_bytes(be, T, E, k);
#endif
    return 0; // the CPU sorts in place (offsets double as the cursors)
}

void ops_moe_route(backend *be, const float *logits, int T, int E, int k, int renorm, int32_t *topk_idx,
                   float *topk_w, int32_t *offsets, int32_t *perm, int32_t *slot, void *work) {
    if (E < 1 || k < 1 || k > E) fatal("moe route: top %d of %d experts", k, E);
    if (T < 0 || (int64_t)T * k > INT32_MAX) fatal("moe route: %d tokens x top %d", T, k);
    DISPATCH(be, cuda_moe_route(be, logits, T, E, k, renorm, topk_idx, topk_w, offsets, perm, slot, work),
             cpu_moe_route(logits, T, E, k, renorm, topk_idx, topk_w, offsets, perm, slot));
}

void ops_moe_gather(backend *be, void *xs, const void *x, const int32_t *perm, int R, int H) {
    DISPATCH(be, cuda_moe_gather(be, xs, x, perm, R, H), cpu_moe_gather(xs, x, perm, R, H));
}

void ops_moe_gemm(backend *be, void *y, const void *x, const void *W, const int32_t *offsets, int E, int R, int N,
                  int K, int max_rows) {
    if (E < 1 || N < 1 || K < 1) fatal("moe gemm: %d experts of [%d, %d]", E, N, K);
    if (max_rows < 0 || max_rows > R) max_rows = R; // R bounds every expert's rows
    DISPATCH(be, cuda_moe_gemm(be, y, x, W, offsets, E, R, N, K, max_rows),
             cpu_moe_gemm(y, x, W, offsets, E, R, N, K));
}

void ops_swiglu_packed(backend *be, void *out, const void *gu, int R, int I) {
    DISPATCH(be, cuda_swiglu_packed(be, out, gu, R, I), cpu_swiglu_packed(out, gu, R, I));
}

void ops_moe_combine(backend *be, void *y, const void *ys, const int32_t *slot, const int32_t *topk_idx,
                     const float *topk_w, int T, int k, int H) {
    if (k < 1) fatal("moe combine: top %d", k);
    DISPATCH(be, cuda_moe_combine(be, y, ys, slot, topk_idx, topk_w, T, k, H),
             cpu_moe_combine(y, ys, slot, topk_idx, topk_w, T, k, H));
}

void ops_sigmoid_gate_add(backend *be, void *y, const void *s, const void *g, int T, int H) {
    DISPATCH(be, cuda_sigmoid_gate_add(be, y, s, g, T, H), cpu_sigmoid_gate_add(y, s, g, T, H));
}
