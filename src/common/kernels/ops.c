// ops.c: the ops_* calls of every op family of this folder (ops.h): the argument checks that hold
// on every backend, then the backend's kernel from its table (BACKEND_OP, backend_ops.h), timed
// under the op's name while profile.h collects. Which backend it is, nothing here asks.
#include "common/kernels/ops.h"

#include "common/backend/backend_ops.h"
#include "common/backend/profile.h"
#include "common/core/check.h"

dtype ops_act_dtype(const backend *be) { return be->caps.act_dtype; }

// ----------------------------------------------------------------------------- norm.h

void ops_rmsnorm(backend *be, void *out, const void *in, const void *w, int R, int D, float eps) {
    BACKEND_OP(be, norm, rmsnorm, out, in, w, R, D, eps);
}

void ops_rmsnorm_backward(backend *be, void *dx, float *dw, const void *dy, const void *x, const void *w, int R, int D,
                          float eps, int accumulate) {
    BACKEND_OP(be, norm, rmsnorm_backward, dx, dw, dy, x, w, R, D, eps, accumulate);
}

void ops_rmsnorm_zc(backend *be, void *out, const void *in, const void *w, int R, int D, float eps) {
    BACKEND_OP(be, norm, rmsnorm_zc, out, in, w, R, D, eps);
}

void ops_gated_rmsnorm(backend *be, void *out, const void *x, const void *z, const void *w, int R, int D, float eps) {
    BACKEND_OP(be, norm, gated_rmsnorm, out, x, z, w, R, D, eps);
}

// ----------------------------------------------------------------------------- rope.h

void ops_rope(backend *be, void *x, const int32_t *pos, const float *inv_freq, int T, int nh, int hd) {
    BACKEND_OP(be, rope, rope, x, pos, inv_freq, T, nh, hd);
}

void ops_rope_partial(backend *be, void *x, const int32_t *pos, const float *inv_freq, int T, int nh, int hd,
                      int rot) {
    if (rot < 0 || rot % 2 || rot > hd) fatal("partial rope: %d rotary dims of head_dim %d (even, <= head_dim)", rot, hd);
    BACKEND_OP(be, rope, rope_partial, x, pos, inv_freq, T, nh, hd, rot);
}

void ops_rope_backward(backend *be, void *dx, const int32_t *pos, const float *inv_freq, int T, int nh, int hd) {
    BACKEND_OP(be, rope, rope_backward, dx, pos, inv_freq, T, nh, hd);
}

// ----------------------------------------------------------------------------- attention.h

// ops_attention_ext without a window or sinks: the same kernels, called here so that the profile
// keeps this op's name.
void ops_attention_causal(backend *be, void *out, const void *q, const void *k, const void *v,
                          const int32_t *cu_seqlens, int n_seq, int T, int nq, int nkv, int hd, float scale) {
    if (nkv < 1 || nq % nkv) fatal("attention: %d query heads do not group over %d kv heads", nq, nkv);
    BACKEND_OP(be, attention, causal, out, q, k, v, cu_seqlens, n_seq, T, nq, nkv, hd, scale, 0, NULL);
}

void ops_attention_ext(backend *be, void *out, const void *q, const void *k, const void *v, const int32_t *cu_seqlens,
                       int n_seq, int T, int nq, int nkv, int hd, float scale, int window, const float *sinks) {
    if (nkv < 1 || nq % nkv) fatal("attention: %d query heads do not group over %d kv heads", nq, nkv);
    if (window < 0) fatal("attention: window %d", window);
    BACKEND_OP(be, attention, causal, out, q, k, v, cu_seqlens, n_seq, T, nq, nkv, hd, scale, window, sinks);
}

// Shapes both DFlash attention ops rely on: the heads group evenly and a block has at least one slot.
static void check_attn_shape(int C, int B, int nq, int nkv, int hd) {
    if (nkv < 1 || nq % nkv) fatal("dflash attention: %d query heads do not group over %d kv heads", nq, nkv);
    if (C < 0 || B < 1 || hd < 1) fatal("dflash attention: bad shape C %d, B %d, head_dim %d", C, B, hd);
}

void ops_dflash_attn_forward(backend *be, void *out, float *lse, const void *q, const void *kb, const void *vb,
                             const void *kc, const void *vc, const int32_t *anchors, const int32_t *seq_start,
                             int C, int B, int nq, int nkv, int hd, float scale, int window, int block_causal) {
    check_attn_shape(C, B, nq, nkv, hd);
    if (C == 0) return;
    BACKEND_OP(be, attention, dflash_forward, out, lse, q, kb, vb, kc, vc, anchors, seq_start, C, B, nq, nkv, hd,
               scale, window, block_causal);
}

void ops_dflash_attn_backward(backend *be, void *dq, void *dkb, void *dvb, float *dkc, float *dvc, const void *dout,
                              const void *out, const float *lse, const void *q, const void *kb, const void *vb,
                              const void *kc, const void *vc, const int32_t *anchors, const int32_t *seq_start,
                              int C, int B, int nq, int nkv, int hd, float scale, int window, int block_causal) {
    check_attn_shape(C, B, nq, nkv, hd);
    if (C == 0) return;
    BACKEND_OP(be, attention, dflash_backward, dq, dkb, dvb, dkc, dvc, dout, out, lse, q, kb, vb, kc, vc, anchors,
               seq_start, C, B, nq, nkv, hd, scale, window, block_causal);
}

// ----------------------------------------------------------------------------- activation.h

void ops_swiglu(backend *be, void *out, const void *gate, const void *up, int64_t n) {
    BACKEND_OP(be, activation, swiglu, out, gate, up, n);
}

void ops_swiglu_backward(backend *be, void *dgate, void *dup, const void *dout, const void *gate, const void *up,
                         int64_t n) {
    BACKEND_OP(be, activation, swiglu_backward, dgate, dup, dout, gate, up, n);
}

void ops_geglu_tanh(backend *be, void *out, const void *gate, const void *up, int64_t n) {
    BACKEND_OP(be, activation, geglu_tanh, out, gate, up, n);
}

void ops_swiglu_clamped(backend *be, void *out, const void *in, int64_t R, int64_t n_i, float alpha, float limit) {
    BACKEND_OP(be, activation, swiglu_clamped, out, in, R, n_i, alpha, limit);
}

void ops_sigmoid_mul(backend *be, void *x, const void *g, int64_t n) {
    BACKEND_OP(be, activation, sigmoid_mul, x, g, n);
}

void ops_softcap_f32(backend *be, float *x, int64_t ld, int64_t R, int64_t C, float cap) {
    if (!(cap > 0.0f)) fatal("softcap: cap %g", cap);
    if (ld < C) fatal("softcap: %lld columns in rows of %lld", (long long)C, (long long)ld);
    BACKEND_OP(be, activation, softcap_f32, x, ld, R, C, cap);
}

// ----------------------------------------------------------------------------- elementwise.h

void ops_embed(backend *be, void *out, const void *table, const int32_t *ids, int T, int H) {
    BACKEND_OP(be, elementwise, embed, out, table, ids, T, H);
}

void ops_add(backend *be, void *x, const void *y, int64_t n) { BACKEND_OP(be, elementwise, add, x, y, n); }

void ops_add_to_f32(backend *be, float *acc, const void *x, int64_t n) {
    BACKEND_OP(be, elementwise, add_to_f32, acc, x, n);
}

void ops_scale(backend *be, void *x, float s, int64_t n) { BACKEND_OP(be, elementwise, scale, x, s, n); }

void ops_bias_add(backend *be, void *y, const void *b, int64_t R, int64_t N) {
    BACKEND_OP(be, elementwise, bias_add, y, b, R, N);
}

void ops_moe_bias_add(backend *be, void *ys, const void *bias, const int32_t *offsets, int E, int64_t R, int64_t N) {
    if (E < 1) fatal("moe bias: %d experts", E);
    BACKEND_OP(be, elementwise, moe_bias_add, ys, bias, offsets, E, R, N);
}

void ops_to_f32(backend *be, float *dst, const void *src, int64_t n) {
    BACKEND_OP(be, elementwise, to_f32, dst, src, n);
}

void ops_f32_to_act(backend *be, void *dst, const float *src, int64_t n) {
    BACKEND_OP(be, elementwise, f32_to_act, dst, src, n);
}

void ops_copy_2d(backend *be, void *dst, int64_t dst_ld, const void *src, int64_t src_ld, int64_t rows, int64_t cols) {
    BACKEND_OP(be, elementwise, copy_2d, dst, dst_ld, src, src_ld, rows, cols);
}

// ----------------------------------------------------------------------------- topk_lse.h

void ops_topk_lse_init(backend *be, float *val, int32_t *idx, float *m, float *s, int R, int k) {
    if (k < 1 || k > OPS_TOPK_MAX) fatal("top-k %d outside [1, %d]", k, OPS_TOPK_MAX);
    BACKEND_OP(be, topk_lse, init, val, idx, m, s, R, k);
}

void ops_topk_lse_update(backend *be, const float *logits, int ld, int v0, int R, int Vc, int k,
                         float *val, int32_t *idx, float *m, float *s) {
    BACKEND_OP(be, topk_lse, update, logits, ld, v0, R, Vc, k, val, idx, m, s);
}

void ops_topk_lse_finish(backend *be, float *lse, const float *m, const float *s, int R) {
    BACKEND_OP(be, topk_lse, finish, lse, m, s, R);
}

// ----------------------------------------------------------------------------- dynconv.h

// Shapes the convolution relies on: whole blocks, groups that divide H, a kernel inside the block,
// dyn rows wide enough for the K*H/G values a row reads.
static void check_dynconv_shape(int T, int B, int H, int K, int G, int ld) {
    if (B < 1 || T < 0 || T % B || G < 1 || H % G || K < 1 || K > B || ld < K * (H / G))
        fatal("dynamic conv: bad shape T %d, B %d, H %d, K %d, G %d, ld %d", T, B, H, K, G, ld);
}

void ops_dynconv_forward(backend *be, void *out, const void *x, const void *dyn, int ld, const void *base, int T, int B,
                         int H, int K, int G) {
    check_dynconv_shape(T, B, H, K, G, ld);
    BACKEND_OP(be, dynconv, forward, out, x, dyn, ld, base, T, B, H, K, G);
}

void ops_dynconv_backward(backend *be, void *dx, void *ddyn, float *dbase, const void *dout, const void *x,
                          const void *dyn, int ld, const void *base, int T, int B, int H, int K, int G) {
    check_dynconv_shape(T, B, H, K, G, ld);
    BACKEND_OP(be, dynconv, backward, dx, ddyn, dbase, dout, x, dyn, ld, base, T, B, H, K, G);
}

// ----------------------------------------------------------------------------- deltanet.h

void ops_conv1d_silu(backend *be, void *out, const void *x, const void *w, const int32_t *cu_seqlens, int n_seq,
                     int T, int C, int K, void *state) {
    if (K < 1) fatal("conv1d: kernel size %d", K);
    BACKEND_OP(be, deltanet, conv1d_silu, out, x, w, cu_seqlens, n_seq, T, C, K, state);
}

void ops_gdn_gates(backend *be, float *beta, float *g, const void *b, const void *a, const float *A_log,
                   const float *dt_bias, int T, int Hv) {
    BACKEND_OP(be, deltanet, gdn_gates, beta, g, b, a, A_log, dt_bias, T, Hv);
}

size_t ops_gated_delta_rule_work_bytes(const backend *be, int T, int n_seq, int Hk, int Hv, int dk, int dv) {
    return BACKEND_TABLE(be, deltanet)->gated_delta_rule_work_bytes(be, T, n_seq, Hk, Hv, dk, dv);
}

void ops_gated_delta_rule(backend *be, void *out, const void *qkv, const float *g, const float *beta,
                          const int32_t *cu_seqlens, const int32_t *cu_host, int n_seq, int T, int Hk, int Hv, int dk,
                          int dv, float *state, void *work) {
    if (Hk < 1 || Hv % Hk) fatal("gated delta rule: %d value heads do not group over %d key heads", Hv, Hk);
    if (dk < 1 || dv < 1) fatal("gated delta rule: head dims %d, %d", dk, dv);
    BACKEND_OP(be, deltanet, gated_delta_rule, out, qkv, g, beta, cu_seqlens, cu_host, n_seq, T, Hk, Hv, dk, dv, state,
               work);
}
