// target_qwen3_5.c: the layers of the Qwen3.5 / Qwen3.6 hybrid targets (SPEC §2.1; transformers'
// models/qwen3_5): gated attention on full_attention layers, the Gated DeltaNet on linear_attention
// layers, and the table qwen3_5 (target_arch.h). The residual frame, the MLP and the lm_head are
// target.c's; the MoE variant (qwen3_5_moe) is target_moe.c's table, with this mixer.
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
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/json_util.h"
#include "common/kernels/ops.h"
#include "teacher/target.h"
#include "teacher/target_arch.h"

// qwen3_5_parse: the Qwen3.5 / Qwen3.6 keys (Qwen3_5TextConfig's names): the layer types, given as
// layer_types or derived from full_attention_interval (full when (i+1) % interval == 0, interval 4
// by default), and the Gated DeltaNet shape (required).
static int qwen3_5_parse(target_config *c, const cJSON *root, const char *src) {
    c->norm_zero_centred = 1;
    c->gated_attention = 1;
    c->qk_norm = 1;
    // the Gated DeltaNet's shape: structural, required (never Qwen3_5TextConfig's 16/32 x 128/128, 4)
    static const char *const keys[5] = {"linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                                        "linear_value_head_dim", "linear_conv_kernel_dim"};
    int64_t *vals[5] = {&c->lin_k_heads, &c->lin_v_heads, &c->lin_k_dim, &c->lin_v_dim, &c->lin_conv_kernel};
    for (int i = 0; i < 5; i++) {
        int found = 0;
        if (json_get_int(root, keys[i], keys[i], src, vals[i], &found)) return -1;
        if (!found) return error_set("%s: missing '%s' (a structural key of %s)", src, keys[i], c->arch_name);
        if (*vals[i] <= 0) return error_set("%s: '%s' must be positive, got %lld", src, keys[i], (long long)*vals[i]);
        if (*vals[i] > TARGET_MAX_HEAD)
            return error_set("%s: '%s' %lld is over the %d this build supports", src, keys[i], (long long)*vals[i],
                             TARGET_MAX_HEAD);
    }
    if (c->lin_v_heads % c->lin_k_heads != 0)
        return error_set("%s: 'linear_num_value_heads' %lld is not a multiple of 'linear_num_key_heads' %lld", src,
                         (long long)c->lin_v_heads, (long long)c->lin_k_heads);
    if (c->lin_conv_kernel > 64)
        return error_set("%s: 'linear_conv_kernel_dim' %lld is over 64", src, (long long)c->lin_conv_kernel);
    char s[160];
    const cJSON *types = json_field(root, "layer_types");
    if (types) {
        json_value_str(types, s, sizeof s);
        if (!cJSON_IsArray(types)) return error_set("%s: 'layer_types' wants a list, got %s", src, s);
        if (cJSON_GetArraySize(types) != c->n_layers)
            return error_set("%s: 'layer_types' has %d entries for %lld layers ('num_hidden_layers')", src,
                             cJSON_GetArraySize(types), (long long)c->n_layers);
        int i = 0;
        for (const cJSON *t = types->child; t; t = t->next, i++) {
            int lin = cJSON_IsString(t) && strcmp(t->valuestring, "linear_attention") == 0;
            int full = cJSON_IsString(t) && strcmp(t->valuestring, "full_attention") == 0;
            if (!lin && !full) {
                json_value_str(t, s, sizeof s);
                return error_set("%s: 'layer_types[%d]' is %s: want \"linear_attention\" or \"full_attention\"", src,
                                 i, s);
            }
            c->layer_linear[i] = (uint8_t)lin;
        }
        c->full_interval = 0;
    } else {
        c->full_interval = 4;
        if (json_get_int(root, "full_attention_interval", "full_attention_interval", src, &c->full_interval, NULL)) return -1;
        if (c->full_interval <= 0)
            return error_set("%s: 'full_attention_interval' must be positive, got %lld", src,
                             (long long)c->full_interval);
        for (int64_t i = 0; i < c->n_layers; i++) c->layer_linear[i] = (uint8_t)((i + 1) % c->full_interval != 0);
    }
    return 0;
}


static void qwen3_5_layer_tensors(target_model *m, int64_t l, const char *prefix, target_tensor_list *list) {
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

static void qwen3_5_work_carve(target_work *w, arena *a, const target_model *m, int max_tokens, int max_seqs) {
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

static void qwen3_5_attn_project(const target_model *m, int l, target_work *w, int T) {
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

static void qwen3_5_attn_finish(const target_model *m, int l, target_work *w, int T) {
    const target_config *c = &m->cfg;
    int qd = (int)(c->n_heads * c->head_dim);
    ops_sigmoid_mul(m->be, w->att, w->att_gate, (int64_t)T * qd);
    target_linear(m->be, w->xn, w->att, m->layers[l].wo, T, qd, (int)c->hidden);
}

// The gated attention of a full_attention layer: w->xn in, w->xn out.
static void qwen3_5_attention(const target_model *m, int l, target_work *w, int T, int n_seq) {
    const target_config *c = &m->cfg;
    int hd = (int)c->head_dim, nq = (int)c->n_heads, nkv = (int)c->n_kv_heads;
    qwen3_5_attn_project(m, l, w, T);
    ops_attention_causal(m->be, w->att, w->q, w->k, w->v, w->cu_seqlens, n_seq, T, nq, nkv, hd, 1.0f / sqrtf((float)hd));
    qwen3_5_attn_finish(m, l, w, T);
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
    ops_gated_delta_rule(be, w->core, w->qkv_conv, w->g, w->beta, w->cu_seqlens, w->cu_host, n_seq, T, Hk, Hv, dk, dv,
                         rec_state, w->gdn_work);
    ops_gated_rmsnorm(be, w->core, w->core, w->z, L->lin_norm, T * Hv, dv, (float)c->rms_eps);
    target_linear(be, w->xn, w->core, L->w_out, T, Hv * dv, H);
}

// The mixer of layer l: w->xn [T, H] in, out in w->xn; conv_state [n_seq, K-1, C] act and rec_state
// [n_seq, Hv, dk, dv] f32 are a linear layer's decoding state (target_mixer.forward).
static void qwen3_5_forward(const target_model *m, int l, target_work *w, int T, int n_seq, void *conv_state,
                            float *rec_state) {
    const target_layer *L = &m->layers[l];
    if (target_layer_is_linear(&m->cfg, l)) qwen3_5_deltanet(m, L, w, T, n_seq, conv_state, rec_state);
    else qwen3_5_attention(m, l, w, T, n_seq);
}

// qwen3_5_to_json: a Qwen3.5 config.json of table A's classes: the text-only class (keys at the
// top), or the multimodal wrapper (keys under text_config, plus a small vision_config: the
// wrapper's class builds its vision tower from it; the teacher never reads it).
static char *qwen3_5_to_json(const target_config *c, const target_arch *A) {
    cJSON *o = cJSON_CreateObject();
    cJSON *archs = cJSON_AddArrayToObject(o, "architectures");
    const target_arch_class *cls = target_arch_class_of(A, c->multimodal), *text_cls = target_arch_class_of(A, 0);
    cJSON_AddItemToArray(archs, cJSON_CreateString(cls->class_name));
    cJSON *t = o;
    if (c->multimodal) {
        cJSON_AddStringToObject(o, "model_type", cls->model_type);
        cJSON_AddBoolToObject(o, "tie_word_embeddings", c->tie_embeddings != 0);
        t = cJSON_AddObjectToObject(o, "text_config");
    }
    cJSON_AddStringToObject(t, "model_type", text_cls->model_type);
    cJSON_AddNumberToObject(t, "vocab_size", (double)c->vocab);
    cJSON_AddNumberToObject(t, "hidden_size", (double)c->hidden);
    A->mlp->to_json(t, c);
    cJSON_AddNumberToObject(t, "num_hidden_layers", (double)c->n_layers);
    cJSON_AddNumberToObject(t, "num_attention_heads", (double)c->n_heads);
    cJSON_AddNumberToObject(t, "num_key_value_heads", (double)c->n_kv_heads);
    cJSON_AddNumberToObject(t, "head_dim", (double)c->head_dim);
    cJSON_AddNumberToObject(t, "linear_num_key_heads", (double)c->lin_k_heads);
    cJSON_AddNumberToObject(t, "linear_num_value_heads", (double)c->lin_v_heads);
    cJSON_AddNumberToObject(t, "linear_key_head_dim", (double)c->lin_k_dim);
    cJSON_AddNumberToObject(t, "linear_value_head_dim", (double)c->lin_v_dim);
    cJSON_AddNumberToObject(t, "linear_conv_kernel_dim", (double)c->lin_conv_kernel);
    if (c->full_interval > 0) {
        cJSON_AddNumberToObject(t, "full_attention_interval", (double)c->full_interval);
    } else {
        cJSON *types = cJSON_AddArrayToObject(t, "layer_types");
        for (int64_t i = 0; i < c->n_layers; i++)
            cJSON_AddItemToArray(types, cJSON_CreateString(c->layer_linear[i] ? "linear_attention" : "full_attention"));
    }
    cJSON_AddStringToObject(t, "hidden_act", "silu");
    cJSON_AddNumberToObject(t, "max_position_embeddings", (double)c->max_positions);
    json_add_float_py(t, "rms_norm_eps", c->rms_eps);
    cJSON *r = cJSON_AddObjectToObject(t, "rope_parameters");
    cJSON_AddStringToObject(r, "rope_type", "default");
    json_add_float_py(r, "rope_theta", c->rope_theta);
    json_add_float_py(r, "partial_rotary_factor", c->partial_rotary);
    // Also under text_config for the wrapper (the same value): AutoModelForCausalLM loads the
    // wrapper's directory as Qwen3_5ForCausalLM from text_config alone, and would untie otherwise.
    cJSON_AddBoolToObject(t, "tie_word_embeddings", c->tie_embeddings != 0);
    cJSON_AddBoolToObject(t, "attention_bias", 0);
    json_add_float_py(t, "attention_dropout", 0.0);
    json_add_float_py(t, "initializer_range", 0.02);
    cJSON_AddBoolToObject(t, "use_cache", 1);
    if (c->multimodal) {
        cJSON *v = cJSON_AddObjectToObject(o, "vision_config");
        char vision[64];
        snprintf(vision, sizeof vision, "%s_vision", cls->model_type);
        cJSON_AddStringToObject(v, "model_type", vision);
        cJSON_AddNumberToObject(v, "depth", 1);
        cJSON_AddNumberToObject(v, "hidden_size", 32);
        cJSON_AddNumberToObject(v, "intermediate_size", 64);
        cJSON_AddNumberToObject(v, "num_heads", 2);
        cJSON_AddNumberToObject(v, "patch_size", 4);
        cJSON_AddNumberToObject(v, "spatial_merge_size", 2);
        cJSON_AddNumberToObject(v, "temporal_patch_size", 2);
        cJSON_AddNumberToObject(v, "out_hidden_size", (double)c->hidden);
        cJSON_AddNumberToObject(v, "num_position_embeddings", 64);
    }
    if (c->torch_dtype[0]) cJSON_AddStringToObject(o, "torch_dtype", c->torch_dtype);
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    if (!text) fatal("qwen3_5_to_json: out of memory");
    return text;
}

const target_mixer target_mixer_qwen3_5 = {
    .parse = qwen3_5_parse,
    .layer_tensors = qwen3_5_layer_tensors,
    .work_carve = qwen3_5_work_carve,
    .forward = qwen3_5_forward,
    .attn_project = qwen3_5_attn_project,
    .attn_finish = qwen3_5_attn_finish,
    .to_json = qwen3_5_to_json,
};

// Qwen3_5TextConfig: 4 kv heads, head_dim 256, 32768 positions, partial_rotary_factor 0.25. The
// vocabulary of 248320 rows has an unused row for the drafter's MASK, 248070 (<|audio_start|>, what
// the public z-lab drafters of the family use).
const target_arch target_arch_qwen3_5 = {
    .name = "qwen3_5",
    .family = ARCH_QWEN3_5,
    .classes = {{"Qwen3_5ForConditionalGeneration", "qwen3_5", 1}, {"Qwen3_5ForCausalLM", "qwen3_5_text", 0}},
    .default_kv_heads = 4,
    .default_head_dim = 256,
    .default_max_positions = 32768,
    .default_partial_rotary = 0.25,
    .mask_vocab = 248320,
    .mask_token = 248070,
    .mixer = &target_mixer_qwen3_5,
    .mlp = &target_mlp_swiglu,
};
