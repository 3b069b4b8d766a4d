// ops_moe.h: the ops of a mixture-of-experts MLP (SPEC §2.2; transformers' Qwen3MoeSparseMoeBlock,
// Qwen3_5MoeSparseMoeBlock): routing, tokens grouped by expert, each expert one GEMM over its tokens,
// the weighted combine, and the shared expert's sigmoid gate.
//
// The block, for T tokens, E experts, top k, hidden H, expert width I (R = T*k routed rows):
//   logits = x @ router^T                  backend_gemm, fp32 out       [T, E] f32
//   ops_moe_route                          softmax (fp32), top-k, renormalise; rows sorted by expert
//   ops_moe_gather    xs = x[perm]         [R, H] act
//   ops_moe_gemm      gu = xs @ gate_up[e]^T per expert's rows   [R, 2I] act (gate | up)
//   ops_swiglu_packed a = silu(gate) * up  [R, I] act
//   ops_moe_gemm      ys = a @ down[e]^T   [R, H] act
//   ops_moe_combine   y[t] = sum_j w[t, j] ys[slot[t, j]]          [T, H] act
//   (Qwen3.5-MoE) y += sigmoid(x @ shared_gate^T) * shared_mlp(x): ops_sigmoid_gate_add
//
// Each op has a CPU twin (ops_moe_cpu.c, fp32, OpenMP + OpenBLAS per expert group, threads over
// experts) and CUDA (ops_moe_cuda.cu, bf16, fp32 accumulation; routing and grouping on the GPU, the
// expert GEMMs one cuBLAS grouped GEMM each, whose sizes come from the expert counts the route
// downloads: the host waits for them once per block, at the first expert GEMM), each backend's half
// one table, struct moe_kernels below (moe_kernels_cpu in ops_moe_cpu.c, moe_kernels_cuda in
// ops_moe_cuda.cu; with ops_moe_sigmoid.h's router). ops_moe.c checks the arguments and calls it.
// "act" is ops_act_dtype(be); every buffer is device memory of the backend.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "common/backend/backend.h"
#include "common/backend/backend_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

// ops_moe_route: per token t, p = softmax(logits[t, :]) in fp32; the k largest p (ties: the lower
// expert id first, as torch.topk on these sizes) into topk_idx [T, k] i32 (descending p) and
// topk_w [T, k] f32 (divided by their sum when renorm). Then the R = T*k (token, choice) rows are
// sorted by expert, stably (token order inside an expert):
//   offsets [E+1] i32   rows of expert e are offsets[e] .. offsets[e+1]-1 (offsets[E] = R)
//   perm [R] i32        the token of sorted row r
//   slot [T*k] i32      the sorted row of token t's j-th choice (slot[t*k + j])
// work: ops_moe_route_work_bytes(be, T, E, k) bytes of device scratch (may be 0).
size_t ops_moe_route_work_bytes(const backend *be, int T, int E, int k);
void ops_moe_route(backend *be, const float *logits, int T, int E, int k, int renorm, int32_t *topk_idx,
                   float *topk_w, int32_t *offsets, int32_t *perm, int32_t *slot, void *work);

// ops_moe_gather: xs[r, :] = x[perm[r], :] for r < R.        x [T, H] act, xs [R, H] act
void ops_moe_gather(backend *be, void *xs, const void *x, const int32_t *perm, int R, int H);

// ops_moe_gemm: the grouped GEMM. For each expert e and each row r in offsets[e] .. offsets[e+1]-1:
//   y[r, :] = x[r, :] @ W[e]^T          x [R, K] act, W [E, N, K] act (row-major per expert), y [R, N] act
// offsets [E+1] i32 on the device: ops_moe_route's, unchanged since, until the ops_moe_combine that
// ends the block (CUDA takes the expert counts from the copy the route downloaded; offsets no route
// wrote, or after that combine, are downloaded at the call, which then waits for the stream).
// max_rows: an upper bound on any expert's rows (R is always one; unused by the CPU and CUDA now).
void ops_moe_gemm(backend *be, void *y, const void *x, const void *W, const int32_t *offsets, int E, int R,
                  int N, int K, int max_rows);

// ops_swiglu_packed: out[r, i] = silu(gu[r, i]) * gu[r, I + i] for i < I.   gu [R, 2I] act, out [R, I] act
void ops_swiglu_packed(backend *be, void *out, const void *gu, int R, int I);

// ops_moe_combine: y[t, :] = sum_{j<k} topk_w[t, j] * ys[slot[t*k + j], :], the k terms added in
// ascending expert id (the order transformers' index_add_ over experts gives), fp32 sums.
//   ys [R, H] act, y [T, H] act, topk_idx [T, k] i32 (to order the terms), topk_w [T, k] f32
void ops_moe_combine(backend *be, void *y, const void *ys, const int32_t *slot, const int32_t *topk_idx,
                     const float *topk_w, int T, int k, int H);

// ops_sigmoid_gate_add: y[t, :] += sigmoid(g[t]) * s[t, :].   y, s [T, H] act, g [T] act (x @ shared_gate^T)
void ops_sigmoid_gate_add(backend *be, void *y, const void *s, const void *g, int T, int H);

// moe_kernels: one backend's half of the ops above and of ops_moe_sigmoid_route (ops_moe_sigmoid.h)
// (its .ops->moe), called with the ops' arguments once they are checked (gemm's max_rows at most R).
struct moe_kernels {
    size_t (*route_work_bytes)(const backend *be, int T, int E, int k);
    void (*route)(backend *be, const float *logits, int T, int E, int k, int renorm, int32_t *topk_idx, float *topk_w,
                  int32_t *offsets, int32_t *perm, int32_t *slot, void *work);
    void (*sigmoid_route)(backend *be, const float *logits, const float *bias, int T, int E, int k, int n_group,
                          int topk_group, int renorm, float scale, int32_t *topk_idx, float *topk_w, int32_t *offsets,
                          int32_t *perm, int32_t *slot);
    void (*gather)(backend *be, void *xs, const void *x, const int32_t *perm, int R, int H);
    void (*gemm)(backend *be, void *y, const void *x, const void *W, const int32_t *offsets, int E, int R, int N, int K,
                 int max_rows);
    void (*swiglu_packed)(backend *be, void *out, const void *gu, int R, int n_i); // n_i: I
    void (*combine)(backend *be, void *y, const void *ys, const int32_t *slot, const int32_t *topk_idx,
                    const float *topk_w, int T, int k, int H);
    void (*sigmoid_gate_add)(backend *be, void *y, const void *s, const void *g, int T, int H);
};

// MOE_OPS: the members above, once, in order; each backend fills its table from it in one
// line (OP_FILL, backend_ops.h).
#define MOE_OPS(X, p) X(p, route_work_bytes) X(p, route) X(p, sigmoid_route) X(p, gather) X(p, gemm) \
    X(p, swiglu_packed) X(p, combine) X(p, sigmoid_gate_add)
OPS_LISTED(struct moe_kernels, MOE_OPS, 0);

#ifdef __cplusplus
}
#endif
