// ops_train.h: the ops the drafter's training needs beyond ops.h: backward passes and the DFlash
// attention with KV injection (SPEC §3), on either backend (ops_train_cpu.c: fp32 reference;
// ops_train_cuda.cu: bf16 activations, fp32 accumulation). "act" = ops_act_dtype(be); gradients of
// weights and of the context K/V are always fp32 accumulators (+=), activation gradients are act.
#pragma once
#include <stdint.h>

#include "common/backend/backend.h"

// ops_rmsnorm_backward: y = x * r * w with r = 1/sqrt(mean(x^2) + eps), per row of D.
//   dx [R,D] act: written (accumulate = 0) or added to (accumulate = 1)
//   dw [D] f32: += sum over rows of dy * x * r
void ops_rmsnorm_backward(backend *be, void *dx, float *dw, const void *dy, const void *x, const void *w, int R, int D,
                          float eps, int accumulate);

// ops_rope_backward: the transpose of ops_rope (rotation by -angle), in place on dx [T, nh, hd].
void ops_rope_backward(backend *be, void *dx, const int32_t *pos, const float *inv_freq, int T, int nh, int hd);

// ops_swiglu_backward: out = silu(g) * u  ->  dg = dout * u * silu'(g), du = dout * silu(g).  act [n]
void ops_swiglu_backward(backend *be, void *dgate, void *dup, const void *dout, const void *gate, const void *up, int64_t n);

// DFlash attention for C anchors of B slots each (SPEC §3). Queries come from the block only:
//   q [C*B, nq, hd]; block keys/values kb, vb [C*B, nkv, hd]; context keys/values kc, vc [S, nkv, hd]
//   (the whole packed batch, shared by all anchors); anchors[C] = a (index into the packed batch),
//   seq_start[C] = the packed index where a's sequence starts. All already normed and roped.
// Query slot k of anchor a sees
//   context c with seq_start <= c < a, and, when window > 0 (sliding layer), c >= a + k - (window - 1);
//   block slots j of its own anchor: all j (block_causal = 0) or j <= k (block_causal = 1).
// GQA: query head h uses kv head h / (nq / nkv). Softmax in fp32 with scale.
// forward: out [C*B, nq, hd] act, lse [C*B, nq] f32 (the row's log-sum-exp of scaled scores, kept
// for the backward). A query that sees nothing (impossible: it always sees its own slot) is 0.
void ops_dflash_attn_forward(backend *be, void *out, float *lse, const void *q, const void *kb, const void *vb,
                             const void *kc, const void *vc, const int32_t *anchors, const int32_t *seq_start,
                             int C, int B, int nq, int nkv, int hd, float scale, int window, int block_causal);
// backward: dq [C*B,nq,hd] act (written), dkb, dvb [C*B,nkv,hd] act (written),
// dkc, dvc [S,nkv,hd] f32 (+=: every chunk of anchors adds its share to the context's K/V gradients).
void ops_dflash_attn_backward(backend *be, void *dq, void *dkb, void *dvb, float *dkc, float *dvc, const void *dout,
                              const void *out, const float *lse, const void *q, const void *kb, const void *vb,
                              const void *kc, const void *vc, const int32_t *anchors, const int32_t *seq_start,
                              int C, int B, int nq, int nkv, int hd, float scale, int window, int block_causal);

// ops_f32_to_act: dst[n] = src[n] in the act dtype (an fp32 accumulator into an act buffer).
void ops_f32_to_act(backend *be, void *dst, const float *src, int64_t n);
// ops_add_to_f32: acc[n] += x[n] (x act).
void ops_add_to_f32(backend *be, float *acc, const void *x, int64_t n);
