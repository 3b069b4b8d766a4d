// ops_arch.h: the ops the target architectures beyond Qwen3 / Llama need (docs/teacher.md, issue 48):
// biases, the embedding scale, the final logit soft-cap, GeGLU, gpt-oss's clamped SwiGLU, per-expert
// biases, and attention with a sliding window and sinks (ops_attention_ext, also in KV-cached
// decoding: ops_attention_decode_ext in common/decode/ops_decode.h).
//
// As in ops.h: each op has a CPU twin (ops_arch_cpu.c, fp32, the reference) and a CUDA version
// (ops_arch_cuda.cu, bf16 activations, fp32 arithmetic); ops_arch.c dispatches. "act" is
// ops_act_dtype(be). Buffers are device memory of the backend. Shapes [rows, cols], row-major.
#pragma once
#include <stdint.h>

#include "common/backend/backend.h"

// ops_attention_ext: ops_attention_causal (ops.h) with
//   window > 0: a sliding window: query t of a sequence sees the keys j with t - window < j <= t
//               (window keys, itself included: transformers' sliding_window masks); 0: all j <= t
//   sinks:      NULL, or [nq] f32 (device): a learned logit per query head that joins each row's
//               softmax denominator and nothing else (gpt-oss): with m = max(max_j s_j, sink_h),
//               p_j = exp(s_j - m) / (sum_j exp(s_j - m) + exp(sink_h - m)); the row then sums to < 1
//   q, out [T, nq, hd] act; k, v [T, nkv, hd] act; cu_seqlens [n_seq + 1] i32; scale multiplies q.k
void ops_attention_ext(backend *be, void *out, const void *q, const void *k, const void *v, const int32_t *cu_seqlens,
                       int n_seq, int T, int nq, int nkv, int hd, float scale, int window, const float *sinks);

// ops_bias_add: y[r, :] += b[:] for r < R.                  y [R, N] act, b [N] act
void ops_bias_add(backend *be, void *y, const void *b, int64_t R, int64_t N);

// ops_scale: x[i] *= s for i < n.                            x [n] act
// (Gemma's embedding scale: s is sqrt(hidden) rounded to the act dtype by the caller, as transformers does)
void ops_scale(backend *be, void *x, float s, int64_t n);

// ops_softcap_f32: x[r, c] = cap * tanh(x[r, c] / cap) for r < R, c < C (row stride ld).   f32
// (the final logit soft-cap on an lm_head tile, before the top-k and the LSE)
void ops_softcap_f32(backend *be, float *x, int64_t ld, int64_t R, int64_t C, float cap);

// ops_geglu_tanh: out = gelu_tanh(gate) * up, elementwise over n (out may alias gate).   act
// gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (transformers' gelu_pytorch_tanh)
void ops_geglu_tanh(backend *be, void *out, const void *gate, const void *up, int64_t n);

// ops_swiglu_clamped: gpt-oss's expert activation on interleaved columns: in [R, 2I] act, column 2j
// the gate and 2j+1 the up of unit j; out [R, I] act (I = n_i: complex.h, via cblas.h, defines I):
//   g = min(gate, limit), u = clamp(up, -limit, limit), out = (u + 1) * g * sigmoid(alpha * g)
void ops_swiglu_clamped(backend *be, void *out, const void *in, int64_t R, int64_t n_i, float alpha, float limit);

// ops_moe_bias_add: ys[r, :] += bias[e, :] for the routed rows r of expert e, offsets[e] <= r <
// offsets[e + 1] (the rows grouped by expert, as ops_moe_route leaves them).
//   ys [R, N] act, bias [E, N] act, offsets [E + 1] i32 (device)
void ops_moe_bias_add(backend *be, void *ys, const void *bias, const int32_t *offsets, int E, int64_t R, int64_t N);
