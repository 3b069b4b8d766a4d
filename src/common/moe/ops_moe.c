// ops_moe.c: the mixture-of-experts ops (ops_moe.h): the argument checks that hold on both
// backends, then the backend's table (moe_kernels), each op timed under its ops_* name.
#include "common/moe/ops_moe.h"

#include "common/backend/backend_ops.h"
#include "common/backend/profile.h"
#include "common/core/check.h"

size_t ops_moe_route_work_bytes(const backend *be, int T, int E, int k) {
    return BACKEND_TABLE(be, moe)->route_work_bytes(be, T, E, k);
}

void ops_moe_route(backend *be, const float *logits, int T, int E, int k, int renorm, int32_t *topk_idx,
                   float *topk_w, int32_t *offsets, int32_t *perm, int32_t *slot, void *work) {
    if (E < 1 || k < 1 || k > E) fatal("moe route: top %d of %d experts", k, E);
    if (T < 0 || (int64_t)T * k > INT32_MAX) fatal("moe route: %d tokens x top %d", T, k);
    BACKEND_OP(be, moe, route, logits, T, E, k, renorm, topk_idx, topk_w, offsets, perm, slot, work);
}

void ops_moe_gather(backend *be, void *xs, const void *x, const int32_t *perm, int R, int H) {
    BACKEND_OP(be, moe, gather, xs, x, perm, R, H);
}

void ops_moe_gemm(backend *be, void *y, const void *x, const void *W, const int32_t *offsets, int E, int R, int N,
                  int K, int max_rows) {
    if (E < 1 || N < 1 || K < 1) fatal("moe gemm: %d experts of [%d, %d]", E, N, K);
    if (max_rows < 0 || max_rows > R) max_rows = R; // R bounds every expert's rows
    BACKEND_OP(be, moe, gemm, y, x, W, offsets, E, R, N, K, max_rows);
}

void ops_swiglu_packed(backend *be, void *out, const void *gu, int R, int I) {
    BACKEND_OP(be, moe, swiglu_packed, out, gu, R, I);
}

void ops_moe_combine(backend *be, void *y, const void *ys, const int32_t *slot, const int32_t *topk_idx,
                     const float *topk_w, int T, int k, int H) {
    if (k < 1) fatal("moe combine: top %d", k);
    BACKEND_OP(be, moe, combine, y, ys, slot, topk_idx, topk_w, T, k, H);
}

void ops_sigmoid_gate_add(backend *be, void *y, const void *s, const void *g, int T, int H) {
    BACKEND_OP(be, moe, sigmoid_gate_add, y, s, g, T, H);
}
