// ops.h: the model ops of the target forward (and later the drafter), on either backend.
//
// Each op is written twice: ops_cpu.c (fp32, OpenMP; the reference) and ops_cuda.cu (bf16
// activations and weights, fp32 accumulation and softmax). ops.c dispatches on be->kind. Buffers
// are device memory of the backend (host memory on the CPU); "act" means the backend's activation
// dtype: F32 on the CPU, BF16 on CUDA (ops_act_dtype). Integer index arrays are int32 on the device.
// Shapes are given in comments as [rows, cols], row-major.
#pragma once
#include <stdint.h>

#include "common/backend/backend.h"
#include "common/core/tensor.h"

// ops_act_dtype: dtype of activations and weights on this backend (F32 cpu, BF16 cuda).
dtype ops_act_dtype(const backend *be);

// ops_embed: out[t,:] = table[ids[t],:].       out [T,H] act, table [V,H] act, ids [T] i32
void ops_embed(backend *be, void *out, const void *table, const int32_t *ids, int T, int H);

// ops_rmsnorm: out[r,:] = in[r,:] / sqrt(mean(in[r,:]^2) + eps) * w.  in/out [R,D] act (may alias), w [D] act
// Used for the layer norms (R = tokens, D = H) and the per-head q/k norms (R = tokens*heads, D = head_dim).
void ops_rmsnorm(backend *be, void *out, const void *in, const void *w, int R, int D, float eps);

// ops_rope: rotate x in place, Hugging Face "rotate_half" layout: for i < hd/2, the pair
// (x[i], x[i + hd/2]) turns by angle pos[t] * inv_freq[i].   x [T, nh, hd] act, pos [T] i32, inv_freq [hd/2] f32
void ops_rope(backend *be, void *x, const int32_t *pos, const float *inv_freq, int T, int nh, int hd);

// ops_attention_causal: causal attention inside each packed sequence (cu_seqlens [n_seq+1], i32,
// cu_seqlens[0] = 0, cu_seqlens[n_seq] = T), GQA (query head h uses kv head h / (nq/nkv)), softmax in
// fp32 with an online (running max) normalisation: memory O(T * heads * hd), never [T, T].
//   q, out [T, nq, hd] act; k, v [T, nkv, hd] act; scale usually hd^-0.5
// It is ops_attention_ext (ops_arch.h: sliding window, sinks) with window 0 and no sinks: the same kernels.
void ops_attention_causal(backend *be, void *out, const void *q, const void *k, const void *v,
                          const int32_t *cu_seqlens, int n_seq, int T, int nq, int nkv, int hd, float scale);

// ops_swiglu: out = silu(gate) * up, elementwise over n.      act
void ops_swiglu(backend *be, void *out, const void *gate, const void *up, int64_t n);

// ops_add: x += y, elementwise over n.                         act
void ops_add(backend *be, void *x, const void *y, int64_t n);

// ops_to_f32: dst[n] (f32, device) = src[n] (act, device).
void ops_to_f32(backend *be, float *dst, const void *src, int64_t n);

// Running top-k and log-sum-exp over vocabulary tiles (the lm_head never materialises [T, V]):
//   ops_topk_lse_init   m = -inf, s = 0, val = -inf, idx = -1
//   ops_topk_lse_update one fp32 logits tile [R, Vc] (row stride ld) covering vocab ids v0 .. v0+Vc-1
//   ops_topk_lse_finish lse = m + log(s)
// top-k is kept sorted descending; among equal values the lower vocabulary id comes first.
// k <= OPS_TOPK_MAX.  val [R,k] f32, idx [R,k] i32, m/s/lse [R] f32, logits [R, ld] f32
#define OPS_TOPK_MAX 256
void ops_topk_lse_init(backend *be, float *val, int32_t *idx, float *m, float *s, int R, int k);
void ops_topk_lse_update(backend *be, const float *logits, int ld, int v0, int R, int Vc, int k,
                         float *val, int32_t *idx, float *m, float *s);
void ops_topk_lse_finish(backend *be, float *lse, const float *m, const float *s, int R);

// ops_copy_2d: dst[r, 0:cols] = src[r, 0:cols] for r < rows, with row strides dst_ld/src_ld
// (elements of the act dtype). Places a layer's hidden states into its column block of features.
void ops_copy_2d(backend *be, void *dst, int64_t dst_ld, const void *src, int64_t src_ld, int64_t rows, int64_t cols);
