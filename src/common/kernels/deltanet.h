// deltanet.h: the Gated DeltaNet mixer of the Qwen3.5 / Qwen3.6 hybrid targets (SPEC §2.1) on
// either backend: the causal depthwise conv + SiLU, the fp32 gates and the chunked gated delta rule
// (the gated output norm is norm.h's ops_gated_rmsnorm). The ops_* calls (dispatched in ops.c) and
// struct deltanet_kernels, the table each backend fills: deltanet_cpu.c's deltanet_kernels_cpu
// (fp32, the reference) and deltanet_cuda.cu's deltanet_kernels_cuda (bf16 activations, fp32
// state, gates and accumulation). "act" is the backend's activation dtype (ops_act_dtype); buffers
// are the backend's memory. Packed batches are given by cu_seqlens [n_seq+1] (i32, device):
// cu_seqlens[0] = 0, cu_seqlens[n_seq] = T.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "common/backend/backend.h"
#include "common/backend/backend_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

// ops_conv1d_silu: depthwise causal conv1d over time inside each packed sequence (no bias), then SiLU:
//   out[t, c] = silu( sum_{j<K} w[c, j] * x[t - (K-1) + j, c] )
// where an x before the start of t's sequence is read from state (when given) or is 0: the window
// restarts at every sequence start.
//   x, out [T, C] act (distinct), w [C, K] act (transformers' conv1d.weight [C, 1, K])
//   state: NULL, or [n_seq, K-1, C] act in/out: on entry the K-1 inputs before each sequence (oldest
//          first), on exit the last K-1 inputs of state ++ sequence (transformers' conv_state, for decoding).
void ops_conv1d_silu(backend *be, void *out, const void *x, const void *w, const int32_t *cu_seqlens, int n_seq,
                     int T, int C, int K, void *state);

// ops_gdn_gates: the delta rule's gates, in fp32:
//   beta[t, h] = sigmoid(b[t, h]);  g[t, h] = -exp(A_log[h]) * softplus(a[t, h] + dt_bias[h])
// softplus as torch: x > 20 ? x : log1p(exp(x)).
//   b, a [T, Hv] act; A_log, dt_bias [Hv] f32; beta, g [T, Hv] f32
void ops_gdn_gates(backend *be, float *beta, float *g, const void *b, const void *a, const float *A_log,
                   const float *dt_bias, int T, int Hv);

// ops_gated_delta_rule: the gated delta rule over a packed batch (SPEC §2.1).
//   qkv [T, 2*Hk*dk + Hv*dv] act: per token [q (Hk heads x dk) | k (Hk x dk) | v (Hv x dv)], the conv's
//       output. Here q and k are L2-normalised per head (x * rsqrt(sum(x^2) + 1e-6)) and q is scaled
//       by dk^-0.5; value head h reads key/query head h / (Hv/Hk) (Hv a multiple of Hk).
//   g, beta [T, Hv] f32 (from ops_gdn_gates); out [T, Hv, dv] act
//   Per sequence and value head, S [dk, dv] fp32: S = exp(g_t) S; d = beta_t (v_t - S^T k_t);
//   S += k_t d^T; o_t = S^T q_t. Computed in chunks of tokens (GEMM-shaped work).
//   state: NULL (every sequence starts at S = 0, the final state is dropped), or [n_seq, Hv, dk, dv]
//          f32 in/out: each sequence's initial state on entry, its final state on exit (decoding).
//   cu_host: a host copy of cu_seqlens, or NULL. The CUDA batched-GEMM form plans its chunk steps on
//            the host from the lengths: with cu_host it reads them there, without it downloads
//            cu_seqlens (one wait for the stream per call). The CPU backend ignores it.
//   work: ops_gated_delta_rule_work_bytes(...) bytes of device memory (scratch; the memory plan counts it;
//         NULL when that is 0). CPU: one slice per thread of the backend (be->threads); CUDA: the
//         batched-GEMM form's chunk table, the states of the sequences in flight and one group of
//         chunks (deltanet_cuda.cu); it grows with T and n_seq, so the size for the most of both
//         serves every smaller call.
size_t ops_gated_delta_rule_work_bytes(const backend *be, int T, int n_seq, int Hk, int Hv, int dk, int dv);
void ops_gated_delta_rule(backend *be, void *out, const void *qkv, const float *g, const float *beta,
                          const int32_t *cu_seqlens, const int32_t *cu_host, int n_seq, int T, int Hk, int Hv, int dk,
                          int dv, float *state, void *work);

// The table: one member per op above, same arguments (no checks: the ops_* calls make them).
struct deltanet_kernels {
    void (*conv1d_silu)(backend *be, void *out, const void *x, const void *w, const int32_t *cu_seqlens, int n_seq,
                        int T, int C, int K, void *state);
    void (*gdn_gates)(backend *be, float *beta, float *g, const void *b, const void *a, const float *A_log,
                      const float *dt_bias, int T, int Hv);
    size_t (*gated_delta_rule_work_bytes)(const backend *be, int T, int n_seq, int Hk, int Hv, int dk, int dv);
    void (*gated_delta_rule)(backend *be, void *out, const void *qkv, const float *g, const float *beta,
                             const int32_t *cu_seqlens, const int32_t *cu_host, int n_seq, int T, int Hk, int Hv,
                             int dk, int dv, float *state, void *work);
};

// DELTANET_OPS: the members above, once, in order; each backend fills its table from it in one
// line (OP_FILL, backend_ops.h).
#define DELTANET_OPS(X, p) X(p, conv1d_silu) X(p, gdn_gates) X(p, gated_delta_rule_work_bytes) \
    X(p, gated_delta_rule)
OPS_LISTED(struct deltanet_kernels, DELTANET_OPS, 0);

#ifdef __cplusplus
}
#endif
