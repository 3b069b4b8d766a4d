// attention.h: attention on either backend: the target's causal attention over packed sequences
// (with a sliding window and sinks where the architecture has them) and DFlash's block attention
// with KV injection (SPEC §3), forward and backward. The ops_* calls (dispatched in ops.c) and
// struct attention_kernels, the table each backend fills: attention_cpu.c's attention_kernels_cpu
// (fp32 GEMM tiles, the reference) and attention_cuda.cu's attention_kernels_cuda (tensor-core
// tiles in attn_tc.cu, scalar kernels beside them; bf16 activations, fp32 softmax). "act" is the
// backend's activation dtype (ops_act_dtype); buffers are the backend's memory.
#pragma once
#include <stdint.h>

#include "common/backend/backend.h"
#include "common/backend/backend_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

// ops_attention_causal: causal attention inside each packed sequence (cu_seqlens [n_seq+1], i32,
// cu_seqlens[0] = 0, cu_seqlens[n_seq] = T), GQA (query head h uses kv head h / (nq/nkv)), softmax in
// fp32 with an online (running max) normalisation: memory O(T * heads * hd), never [T, T].
//   q, out [T, nq, hd] act; k, v [T, nkv, hd] act; scale usually hd^-0.5
// It is ops_attention_ext (below: sliding window, sinks) with window 0 and no sinks: the same kernels.
void ops_attention_causal(backend *be, void *out, const void *q, const void *k, const void *v,
                          const int32_t *cu_seqlens, int n_seq, int T, int nq, int nkv, int hd, float scale);

// ops_attention_ext: ops_attention_causal (above) with
//   window > 0: a sliding window: query t of a sequence sees the keys j with t - window < j <= t
//               (window keys, itself included: transformers' sliding_window masks); 0: all j <= t
//   sinks:      NULL, or [nq] f32 (device): a learned logit per query head that joins each row's
//               softmax denominator and nothing else (gpt-oss): with m = max(max_j s_j, sink_h),
//               p_j = exp(s_j - m) / (sum_j exp(s_j - m) + exp(sink_h - m)); the row then sums to < 1
//   q, out [T, nq, hd] act; k, v [T, nkv, hd] act; cu_seqlens [n_seq + 1] i32; scale multiplies q.k
void ops_attention_ext(backend *be, void *out, const void *q, const void *k, const void *v, const int32_t *cu_seqlens,
                       int n_seq, int T, int nq, int nkv, int hd, float scale, int window, const float *sinks);

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

// The table: one member per kernel, the arguments of the ops_* calls (no checks: they make them).
// causal is ops_attention_ext's (ops_attention_causal passes window 0, sinks NULL).
struct attention_kernels {
    void (*causal)(backend *be, void *out, const void *q, const void *k, const void *v, const int32_t *cu_seqlens,
                   int n_seq, int T, int nq, int nkv, int hd, float scale, int window, const float *sinks);
    void (*dflash_forward)(backend *be, void *out, float *lse, const void *q, const void *kb, const void *vb,
                           const void *kc, const void *vc, const int32_t *anchors, const int32_t *seq_start, int C,
                           int B, int nq, int nkv, int hd, float scale, int window, int block_causal);
    void (*dflash_backward)(backend *be, void *dq, void *dkb, void *dvb, float *dkc, float *dvc, const void *dout,
                            const void *out, const float *lse, const void *q, const void *kb, const void *vb,
                            const void *kc, const void *vc, const int32_t *anchors, const int32_t *seq_start, int C,
                            int B, int nq, int nkv, int hd, float scale, int window, int block_causal);
};

// ATTENTION_OPS: the members above, once, in order; each backend fills its table from it in one
// line (OP_FILL, backend_ops.h).
#define ATTENTION_OPS(X, p) X(p, causal) X(p, dflash_forward) X(p, dflash_backward)
OPS_LISTED(struct attention_kernels, ATTENTION_OPS, 0);

#ifdef __cplusplus
}
#endif
