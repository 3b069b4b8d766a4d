// ops_cpu.h: the CPU (fp32, OpenMP) twins of the ops in ops.h; the reference implementation.
// Same arguments as the ops_* functions without the backend; all act buffers are float.
#pragma once
#include <stdint.h>

void cpu_embed(float *out, const float *table, const int32_t *ids, int T, int H);
void cpu_rmsnorm(float *out, const float *in, const float *w, int R, int D, float eps);
void cpu_rope(float *x, const int32_t *pos, const float *inv_freq, int T, int nh, int hd);
// cpu_attention_causal: ops_attention_ext (ops_arch.h): window 0 = no window, sinks NULL = none.
void cpu_attention_causal(float *out, const float *q, const float *k, const float *v, const int32_t *cu_seqlens,
                          int n_seq, int T, int nq, int nkv, int hd, float scale, int window, const float *sinks);
// cpu_attend_row: one query against n consecutive keys/values with row stride `stride` (floats),
// exact fp32 softmax of the scaled scores; p[n] scratch. The decode's attention (one query at a time).
void cpu_attend_row(float *o, const float *q, const float *k, const float *v, int n, int64_t stride, int hd,
                    float scale, float *p);
// cpu_attend_group: g query rows q[g, hd] of one GQA group against the same n keys/values, outputs
// o[g, hd]; sinks: NULL or [g] logits that join each row's softmax denominator (gpt-oss's sinks);
// p: g scratch rows of ldp (>= n) floats.
void cpu_attend_group(float *o, const float *q, const float *k, const float *v, int g, int n, int64_t stride, int hd,
                      float scale, const float *sinks, float *p, int ldp);
// cpu_sgemm: C[m, n] (ldc) = alpha op(A) op(B) + beta C, row-major, fp32 (OpenBLAS; inside an
// OpenMP region it runs on the calling thread). op(A) = A^T when trans_a (A stored [k, m]), op(B) =
// B^T when trans_b (B stored [n, k]). m or n = 0: nothing; k = 0: C = beta C.
void cpu_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a, int lda, const float *b,
               int ldb, float beta, float *c, int ldc);
// cpu_softmax_range: one row s[n] of scores, softmax in place over its visible columns [j0, j1)
// (j0 < j1), 0 in the others; returns the log-sum-exp of the visible scores.
float cpu_softmax_range(float *s, int n, int j0, int j1);
// cpu_softmax_range_sink: the same with the logit sink in the denominator (and the maximum) but in no
// column (sink = -inf: cpu_softmax_range); returns the log-sum-exp of the visible scores and the sink.
float cpu_softmax_range_sink(float *s, int n, int j0, int j1, float sink);
void cpu_swiglu(float *out, const float *gate, const float *up, int64_t n);
void cpu_add(float *x, const float *y, int64_t n);
void cpu_copy_2d(float *dst, int64_t dst_ld, const float *src, int64_t src_ld, int64_t rows, int64_t cols);
void cpu_topk_lse_init(float *val, int32_t *idx, float *m, float *s, int R, int k);
void cpu_topk_lse_update(const float *logits, int ld, int v0, int R, int Vc, int k, float *val, int32_t *idx,
                         float *m, float *s);
void cpu_topk_lse_finish(float *lse, const float *m, const float *s, int R);
