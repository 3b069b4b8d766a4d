// ops_hybrid.h: the ops of the Qwen3.5 / Qwen3.6 hybrid targets (SPEC §2.1) beyond ops.h: the
// zero-centred RMSNorm, partial RoPE and the sigmoid output gate of the gated attention, and the
// Gated DeltaNet mixer (causal depthwise conv + SiLU, the fp32 gates, the chunked gated delta rule,
// the gated output norm).
//
// As in ops.h: each op has a CPU twin (ops_hybrid_cpu.c, fp32, the reference) and a CUDA version
// (ops_hybrid_cuda.cu, bf16 activations, fp32 state, gates and accumulation); ops_hybrid.c
// dispatches. "act" is ops_act_dtype(be). Buffers are device memory of the backend. Packed batches
// are given by cu_seqlens [n_seq+1] (i32, device): cu_seqlens[0] = 0, cu_seqlens[n_seq] = T.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "common/backend/backend.h"

// ops_rmsnorm_zc: zero-centred RMSNorm, out[r,:] = in[r,:] * rsqrt(mean(in[r,:]^2) + eps) * (1 + w),
// computed in fp32 (transformers' Qwen3_5RMSNorm). in/out [R, D] act (may alias), w [D] act.
void ops_rmsnorm_zc(backend *be, void *out, const void *in, const void *w, int R, int D, float eps);

// ops_rope_partial: RoPE on the first rot dims of every head only (rot even, rot <= hd), rotate_half
// layout inside them: for i < rot/2 the pair (x[i], x[i + rot/2]) turns by pos[t] * inv_freq[i];
// dims rot..hd-1 are left as they are. rot = hd is ops_rope.
//   x [T, nh, hd] act (in place), pos [T] i32, inv_freq [rot/2] f32
void ops_rope_partial(backend *be, void *x, const int32_t *pos, const float *inv_freq, int T, int nh, int hd,
                      int rot);

// ops_sigmoid_mul: x[i] *= sigmoid(g[i]) for i < n (the gated attention's output gate).   act
void ops_sigmoid_mul(backend *be, void *x, const void *g, int64_t n);

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
//         chunks (ops_hybrid_cuda.cu); it grows with T and n_seq, so the size for the most of both
//         serves every smaller call.
size_t ops_gated_delta_rule_work_bytes(const backend *be, int T, int n_seq, int Hk, int Hv, int dk, int dv);
void ops_gated_delta_rule(backend *be, void *out, const void *qkv, const float *g, const float *beta,
                          const int32_t *cu_seqlens, const int32_t *cu_host, int n_seq, int T, int Hk, int Hv, int dk,
                          int dv, float *state, void *work);

// ops_gated_rmsnorm: the gated norm of the linear mixer (not zero-centred), per row of D:
//   out = w * (x * rsqrt(mean(x^2) + eps)) * silu(z)
//   x, z, out [R, D] act (out may alias x), w [D] act
void ops_gated_rmsnorm(backend *be, void *out, const void *x, const void *z, const void *w, int R, int D, float eps);
