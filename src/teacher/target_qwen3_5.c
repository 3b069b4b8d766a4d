// target_qwen3_5.c: the layers of the Qwen3.5 / Qwen3.6 hybrid targets (SPEC §2.1; transformers'
// models/qwen3_5): gated attention on full_attention layers, the Gated DeltaNet on linear_attention
// layers. The residual frame, the MLP and the lm_head are target.c's; see target_arch.h.
//
// Gated attention, per token (nq query heads, nkv kv heads, head_dim hd, rope_dim r):
//   [query | gate] = q_proj(x) per head;  q = q_norm(query), k = k_norm(k_proj(x)) (zero-centred)
//   RoPE on the first r dims of q and k;  a = causal GQA attention(q, k, v_proj(x)), scale hd^-0.5
//   out = o_proj(a * sigmoid(gate))
// Gated DeltaNet (Hk key heads of dk, Hv value heads of dv, conv kernel K, C = 2*Hk*dk + Hv*dv):
//   qkv = silu(causal depthwise conv1d(in_proj_qkv(x)))   [T, C], the window restarting per sequence
//   beta = sigmoid(in_proj_b(x)); g = -exp(A_log) * softplus(in_proj_a(x) + dt_bias)   fp32
//   o = gated delta rule(q, k (L2-normed), v, g, beta)      fp32 state per sequence and value head
//   out = out_proj(norm.weight * rmsnorm(o) * silu(in_proj_z(x)))   per value head
#include <math.h>

#include "common/kernels/ops.h"
#include "common/kernels/ops_hybrid.h"
#include "teacher/target_arch.h"

void target_qwen3_5_layer_tensors(target_model *m, int64_t l, const char *prefix, target_tensor_list *list) {
    const target_config *c = &m->cfg;
    target_layer *L = &m->layers[l];
    int64_t H = c->hidden;
    if (target_layer_is_linear(c, l)) {
        int64_t Hk = c->lin_k_heads, Hv = c->lin_v_heads, dk = c->lin_k_dim, dv = c->lin_v_dim;
        int64_t C = 2 * Hk * dk + Hv * dv, K = c->lin_conv_kernel;
        
        long long ll = (long long)l;
        target_tensor_add(list, &L->w_qkv, 0, 2, C, H, 0, "%slayers.%lld.linear_attn.%s", prefix, ll, "in_proj_qkv.weight");
        target_tensor_add(list, &L->w_z, 0, 2, Hv * dv, H, 0, "%slayers.%lld.linear_attn.%s", prefix, ll, "in_proj_z.weight");
        target_tensor_add(list, &L->w_b, 0, 2, Hv, H, 0, "%slayers.%lld.linear_attn.%s", prefix, ll, "in_proj_b.weight");
        target_tensor_add(list, &L->w_a, 0, 2, Hv, H, 0, "%slayers.%lld.linear_attn.%s", prefix, ll, "in_proj_a.weight");
        target_tensor_add(list, &L->conv_w, 0, 3, C, 1, K, "%slayers.%lld.linear_attn.%s", prefix, ll, "conv1d.weight");
        target_tensor_add(list, (void **)&L->dt_bias, 1, 1, Hv, 0, 0, "%slayers.%lld.linear_attn.%s", prefix, ll, "dt_bias");
        target_tensor_add(list, (void **)&L->A_log, 1, 1, Hv, 0, 0, "%slayers.%lld.linear_attn.%s", prefix, ll, "A_log");
        target_tensor_add(list, &L->lin_norm, 0, 1, dv, 0, 0, "%slayers.%lld.linear_attn.%s", prefix, ll, "norm.weight");
        target_tensor_add(list, &L->w_out, 0, 2, H, Hv * dv, 0, "%slayers.%lld.linear_attn.%s", prefix, ll, "out_proj.weight");
    } else {
        int64_t hd = c->head_dim, q_out = c->n_heads * hd, kv_out = c->n_kv_heads * hd;
        
        long long ll = (long long)l;
        target_tensor_add(list, &L->wq, 0, 2, 2 * q_out, H, 0, "%slayers.%lld.self_attn.%s", prefix, ll, "q_proj.weight"); // [query | gate] per head
        target_tensor_add(list, &L->wk, 0, 2, kv_out, H, 0, "%slayers.%lld.self_attn.%s", prefix, ll, "k_proj.weight");
        target_tensor_add(list, &L->wv, 0, 2, kv_out, H, 0, "%slayers.%lld.self_attn.%s", prefix, ll, "v_proj.weight");
        target_tensor_add(list, &L->wo, 0, 2, H, q_out, 0, "%slayers.%lld.self_attn.%s", prefix, ll, "o_proj.weight");
        target_tensor_add(list, &L->q_norm, 0, 1, hd, 0, 0, "%slayers.%lld.self_attn.%s", prefix, ll, "q_norm.weight");
        target_tensor_add(list, &L->k_norm, 0, 1, hd, 0, 0, "%slayers.%lld.self_attn.%s", prefix, ll, "k_norm.weight");
    }
}

void target_qwen3_5_work_carve(target_work *w, arena *a, const target_model *m, int max_tokens, int max_seqs) {
    const target_config *c = &m->cfg;
    const backend *be = m->be;
    size_t e = dtype_size(ops_act_dtype(be)), T = (size_t)max_tokens;
    size_t qd = (size_t)(c->n_heads * c->head_dim);
    int Hk = (int)c->lin_k_heads, Hv = (int)c->lin_v_heads, dk = (int)c->lin_k_dim, dv = (int)c->lin_v_dim;
    size_t C = (size_t)(2 * Hk * dk + Hv * dv), vd = (size_t)Hv * (size_t)dv;
    w->qg = arena_alloc(a, T * 2 * qd * e);
    w->att_gate = arena_alloc(a, T * qd * e);
    w->qkv = arena_alloc(a, T * C * e);
    w->qkv_conv = arena_alloc(a, T * C * e);
    w->z = arena_alloc(a, T * vd * e);
    w->core = arena_alloc(a, T * vd * e);
    w->lb = arena_alloc(a, T * (size_t)Hv * e);
    w->la = arena_alloc(a, T * (size_t)Hv * e);
    w->beta = arena_alloc(a, T * (size_t)Hv * sizeof(float));
    w->g = arena_alloc(a, T * (size_t)Hv * sizeof(float));
    w->gdn_work = arena_alloc(a, ops_gated_delta_rule_work_bytes(be, max_tokens, max_seqs, Hk, Hv, dk, dv));
}

void target_qwen3_5_attn_project(const target_model *m, int l, target_work *w, int T) {
    const target_config *c = &m->cfg;
    const target_layer *L = &m->layers[l];
    backend *be = m->be;
    int H = (int)c->hidden, hd = (int)c->head_dim, nq = (int)c->n_heads, nkv = (int)c->n_kv_heads;
    size_t e = dtype_size(ops_act_dtype(be));
    target_linear(be, w->qg, w->xn, L->wq, T, H, 2 * nq * hd);
    // split [query | gate] of every head: rows of hd out of rows of 2*hd
    ops_copy_2d(be, w->q, hd, w->qg, 2 * hd, (int64_t)T * nq, hd);
    ops_copy_2d(be, w->att_gate, hd, (char *)w->qg + (size_t)hd * e, 2 * hd, (int64_t)T * nq, hd);
    target_linear(be, w->k, w->xn, L->wk, T, H, nkv * hd);
    target_linear(be, w->v, w->xn, L->wv, T, H, nkv * hd);
    target_norm(m, w->q, w->q, L->q_norm, T * nq, hd);
    target_norm(m, w->k, w->k, L->k_norm, T * nkv, hd);
    ops_rope_partial(be, w->q, w->pos, m->inv_freq, T, nq, hd, (int)c->rope_dim);
    ops_rope_partial(be, w->k, w->pos, m->inv_freq, T, nkv, hd, (int)c->rope_dim);
}

void target_qwen3_5_attn_finish(const target_model *m, int l, target_work *w, int T) {
    const target_config *c = &m->cfg;
    int qd = (int)(c->n_heads * c->head_dim);
    ops_sigmoid_mul(m->be, w->att, w->att_gate, (int64_t)T * qd);
    target_linear(m->be, w->xn, w->att, m->layers[l].wo, T, qd, (int)c->hidden);
}

// The gated attention of a full_attention layer: w->xn in, w->xn out.
static void qwen3_5_attention(const target_model *m, int l, target_work *w, int T, int n_seq) {
    const target_config *c = &m->cfg;
    int hd = (int)c->head_dim, nq = (int)c->n_heads, nkv = (int)c->n_kv_heads;
    target_qwen3_5_attn_project(m, l, w, T);
    ops_attention_causal(m->be, w->att, w->q, w->k, w->v, w->cu_seqlens, n_seq, T, nq, nkv, hd, 1.0f / sqrtf((float)hd));
    target_qwen3_5_attn_finish(m, l, w, T);
}

// The Gated DeltaNet of a linear_attention layer: w->xn in, w->xn out.
static void qwen3_5_deltanet(const target_model *m, const target_layer *L, target_work *w, int T, int n_seq,
                             void *conv_state, float *rec_state) {
    const target_config *c = &m->cfg;
    backend *be = m->be;
    int H = (int)c->hidden, Hk = (int)c->lin_k_heads, Hv = (int)c->lin_v_heads, dk = (int)c->lin_k_dim;
    int dv = (int)c->lin_v_dim, K = (int)c->lin_conv_kernel, C = 2 * Hk * dk + Hv * dv;
    target_linear(be, w->qkv, w->xn, L->w_qkv, T, H, C);
    ops_conv1d_silu(be, w->qkv_conv, w->qkv, L->conv_w, w->cu_seqlens, n_seq, T, C, K, conv_state);
    target_linear(be, w->z, w->xn, L->w_z, T, H, Hv * dv);
    target_linear(be, w->lb, w->xn, L->w_b, T, H, Hv);
    target_linear(be, w->la, w->xn, L->w_a, T, H, Hv);
    ops_gdn_gates(be, w->beta, w->g, w->lb, w->la, L->A_log, L->dt_bias, T, Hv);
    ops_gated_delta_rule(be, w->core, w->qkv_conv, w->g, w->beta, w->cu_seqlens, n_seq, T, Hk, Hv, dk, dv, rec_state,
                         w->gdn_work);
    ops_gated_rmsnorm(be, w->core, w->core, w->z, L->lin_norm, T * Hv, dv, (float)c->rms_eps);
    target_linear(be, w->xn, w->core, L->w_out, T, Hv * dv, H);
}

void target_qwen3_5_mixer(const target_model *m, int l, target_work *w, int T, int n_seq, void *conv_state,
                          float *rec_state) {
    const target_layer *L = &m->layers[l];
    if (target_layer_is_linear(&m->cfg, l)) qwen3_5_deltanet(m, L, w, T, n_seq, conv_state, rec_state);
    else qwen3_5_attention(m, l, w, T, n_seq);
}
