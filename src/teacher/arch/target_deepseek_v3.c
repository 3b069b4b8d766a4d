// target_deepseek_v3.c: DeepSeek-V3 / R1 / V3.1 and Kimi-K2 text targets (transformers'
// models/deepseek_v3: DeepseekV3ForCausalLM), table deepseek_v3 (target_arch.h): multi-head latent
// attention (MLA, below) and the sigmoid-routed MoE MLP of target_moe_sigmoid.c (shared with
// GLM-4.5). The residual frame and the dense SwiGLU are target.c's.
//
// MLA per token (nq heads; nope = qk_nope_head_dim, rope = qk_rope_head_dim, qk = nope + rope,
// vd = v_head_dim, latent ranks q_lora and kv_lora; the q_a / kv_a RMSNorms have eps 1e-6, the
// DeepseekV3RMSNorm default, whatever rms_norm_eps says):
//   q      = q_b_proj(q_a_layernorm(q_a_proj(x)))  (q_proj(x) when q_lora_rank is null)  [nq, qk]
//   [c | k_pe] = kv_a_proj_with_mqa(x)             [kv_lora + rope]: a latent and ONE rope key
//   [k_nope | v] = kv_b_proj(kv_a_layernorm(c))    per head [nope + vd]
//   RoPE on q's last rope dims of each head and on k_pe: rotate_half pairs (i, i + rope/2), or with
//   rope_interleave (the class's default, as published) the pairs (2i, 2i+1) turned by inv_freq[i].
//   transformers de-interleaves them into [evens | odds] first (apply_rotary_pos_emb_interleave),
//   the same permutation of q's and k's rope dims, so q.k is the same sum: the pairs are turned in
//   place here (one ops_rope_partial of 2 dims per pair)
//   k = [k_nope | k_pe] per head (k_pe the same for every head), q = [q_nope | q_pe]
//   causal attention with scale qk^-0.5 * mscale^2, mscale = 0.1 * mscale_all_dim * ln(factor) + 1
//   when the rope scaling is not default and has mscale_all_dim (DeepseekV3Attention's
//   yarn_apply_mscale; YaRN factor 40 with mscale_all_dim 1 as published: x 1.874); YaRN's own
//   cos/sin factor must be 1 (mscale == mscale_all_dim, as published; target_config_parse refuses
//   another with this partial RoPE)
//   out = o_proj(attention) over the vd dims of each head
// Layout for the shared attention (ops_attention_ext, the decoder's cache): head_dim = qk and
// n_kv_heads = nq (the cache holds the expanded k and v, [T, nq, qk] each: 128 x 192 x 2 values a
// token and layer for DeepSeek-V3; caching the latent [kv_lora + rope] instead, with the absorbed
// form of the attention, is future work); v is padded with zeros to qk dims per head and the first
// vd dims of each head's output go to o_proj.
//
// The mixer's scratch (target_work fields of the hybrid, which this architecture does not use):
//   qg    [T, q_lora]           q_a_proj's output, normed in place
//   qkv   [T, kv_lora + rope]   kv_a_proj_with_mqa's output (k_pe turned in place)
//   core  [T, kv_lora]          the normed latent
//   z     [T, nq (nope + vd)]   kv_b_proj's output
// and attn_finish gathers the heads' vd dims into q (free after the attention).
//
// The published checkpoints also hold the multi-token-prediction layer (num_nextn_predict_layers,
// model.layers.{num_hidden_layers}.*), which transformers ignores and the teacher never reads; their
// FP8 weights (weight_block_size [128, 128]) are de-quantised at load (target_quant.h).
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "common/core/error.h"
#include "common/core/json_util.h"
#include "common/kernels/ops.h"
#include "teacher/target.h"
#include "teacher/target_arch.h"

#define MLA_NORM_EPS 1e-6f // DeepseekV3RMSNorm(q_lora_rank) and (kv_lora_rank): the class's default eps

// ---------------------------------------------------------------- config

// mla_dim: a positive dimension under key (required), at most max.
static int mla_dim(const cJSON *root, const char *src, const char *key, int64_t max, int64_t *out) {
    int found = 0;
    if (json_get_int(root, key, key, src, out, &found)) return -1;
    if (!found) return error_set("%s: missing '%s'", src, key);
    if (*out <= 0 || *out > max)
        return error_set("%s: '%s' must be in [1, %lld], got %lld", src, key, (long long)max, (long long)*out);
    return 0;
}

// mla_mscale: DeepseekV3Attention's softmax factor from the rope parameters (the object
// target_config_parse reads: a non-empty rope_scaling, else rope_parameters; the full_attention
// entry of a nested one): mscale^2 with mscale = 0.1 * mscale_all_dim * ln(factor) + 1 when the type
// is not default, mscale_all_dim is non-zero and factor > 1; else 1. The rope parse checks the rest.
static int mla_mscale(const cJSON *root, const char *src, double *scale) {
    const cJSON *scaling = json_field(root, "rope_scaling"), *rope = scaling;
    if (!scaling || (cJSON_IsObject(scaling) && !scaling->child)) rope = json_field(root, "rope_parameters");
    *scale = 1.0;
    if (!rope || !cJSON_IsObject(rope)) return 0;
    const cJSON *full = json_field(rope, "full_attention");
    if (full && cJSON_IsObject(full)) rope = full;
    const char *type = "default";
    if (json_get_string(rope, "type", "rope type", src, &type)) return -1;
    if (json_get_string(rope, "rope_type", "rope_type", src, &type)) return -1;
    if (strcmp(type, "default") == 0) return 0;
    double all = 0, factor = 1;
    if (json_get_double(rope, "mscale_all_dim", "mscale_all_dim", src, &all, NULL)) return -1;
    if (json_get_double(rope, "factor", "factor", src, &factor, NULL)) return -1;
    if (all != 0 && factor > 1) {
        double m = 0.1 * all * log(factor) + 1.0;
        *scale = m * m;
    }
    return 0;
}

// deepseek_v3_parse: DeepseekV3Config's attention keys. Every shape is required (the class's
// defaults are DeepSeek-V3's); q_lora_rank null is q_proj; rope_interleave defaults to true.
static int deepseek_v3_parse(target_config *c, const cJSON *root, const char *src) {
    if (!cJSON_GetObjectItemCaseSensitive(root, "q_lora_rank"))
        return error_set("%s: missing 'q_lora_rank' (a structural key: give it, or null for q_proj)", src);
    c->q_lora = 0;
    if (json_field(root, "q_lora_rank") && mla_dim(root, src, "q_lora_rank", TARGET_MAX_WIDTH, &c->q_lora)) return -1;
    int64_t rope = 0;
    if (mla_dim(root, src, "kv_lora_rank", TARGET_MAX_WIDTH, &c->kv_lora) ||
        mla_dim(root, src, "qk_nope_head_dim", TARGET_MAX_HEAD, &c->qk_nope) ||
        mla_dim(root, src, "qk_rope_head_dim", TARGET_MAX_HEAD, &rope) ||
        mla_dim(root, src, "v_head_dim", TARGET_MAX_HEAD, &c->v_head))
        return -1;
    if (rope % 2) return error_set("%s: 'qk_rope_head_dim' must be even (RoPE turns pairs), got %lld", src, (long long)rope);
    if (c->qk_nope + rope > TARGET_MAX_HEAD)
        return error_set("%s: 'qk_nope_head_dim' + 'qk_rope_head_dim' is %lld, over the %d this build supports", src,
                         (long long)(c->qk_nope + rope), TARGET_MAX_HEAD);
    if (c->v_head > c->qk_nope + rope) // v is padded to the qk head (a wider v would need q and k padded)
        return error_set("%s: 'v_head_dim' %lld is more than 'qk_nope_head_dim' + 'qk_rope_head_dim' = %lld: not supported",
                         src, (long long)c->v_head, (long long)(c->qk_nope + rope));
    if (c->n_kv_heads != c->n_heads) // the expanded k and v have one head per query head (repeat_kv would not fit)
        return error_set("%s: 'num_key_value_heads' %lld differs from 'num_attention_heads' %lld: MLA has one key per "
                         "query head", src, (long long)c->n_kv_heads, (long long)c->n_heads);
    c->head_dim = c->qk_nope + rope;
    c->rope_dim = rope; // the rope parse rotates these dims (transformers' head_dim is qk_rope_head_dim)
    c->rope_interleave = 1;
    if (json_get_bool(root, "rope_interleave", src, &c->rope_interleave, NULL)) return -1;
    int bias = 0; // q_a_proj, kv_a_proj_with_mqa and o_proj (not q_proj, q_b_proj, kv_b_proj)
    if (json_get_bool(root, "attention_bias", src, &bias, NULL)) return -1;
    c->qkv_bias = c->o_bias = bias;
    double mscale2 = 1.0;
    if (mla_mscale(root, src, &mscale2)) return -1;
    c->attn_scale = mscale2 / sqrt((double)c->head_dim);
    return target_parse_layer_types(c, root, src, 0); // every layer full attention
}

// ---------------------------------------------------------------- layers

static void mla_layer_tensors(target_model *m, int64_t l, const char *P, target_tensor_list *list) {
    const target_config *c = &m->cfg;
    target_layer *L = &m->layers[l];
    int64_t H = c->hidden, nq = c->n_heads, qk = c->head_dim, rope = c->rope_dim, ql = c->q_lora, kl = c->kv_lora;
    int bias = c->o_bias;
    long long ll = (long long)l;
#define ATTN_FMT "%slayers.%lld.self_attn.%s"
    if (ql > 0) {
        target_tensor_add(list, &L->w_q_a, 0, 2, ql, H, 0, ATTN_FMT, P, ll, "q_a_proj.weight");
        if (bias) target_tensor_add(list, &L->bq, 0, 1, ql, 0, 0, ATTN_FMT, P, ll, "q_a_proj.bias");
        target_tensor_add(list, &L->q_a_norm, 0, 1, ql, 0, 0, ATTN_FMT, P, ll, "q_a_layernorm.weight");
        target_tensor_add(list, &L->w_q_b, 0, 2, nq * qk, ql, 0, ATTN_FMT, P, ll, "q_b_proj.weight");
    } else {
        target_tensor_add(list, &L->wq, 0, 2, nq * qk, H, 0, ATTN_FMT, P, ll, "q_proj.weight");
    }
    target_tensor_add(list, &L->w_kv_a, 0, 2, kl + rope, H, 0, ATTN_FMT, P, ll, "kv_a_proj_with_mqa.weight");
    if (bias) target_tensor_add(list, &L->bk, 0, 1, kl + rope, 0, 0, ATTN_FMT, P, ll, "kv_a_proj_with_mqa.bias");
    target_tensor_add(list, &L->kv_a_norm, 0, 1, kl, 0, 0, ATTN_FMT, P, ll, "kv_a_layernorm.weight");
    target_tensor_add(list, &L->w_kv_b, 0, 2, nq * (c->qk_nope + c->v_head), kl, 0, ATTN_FMT, P, ll, "kv_b_proj.weight");
    target_tensor_add(list, &L->wo, 0, 2, H, nq * c->v_head, 0, ATTN_FMT, P, ll, "o_proj.weight");
    if (bias) target_tensor_add(list, &L->bo, 0, 1, H, 0, 0, ATTN_FMT, P, ll, "o_proj.bias");
#undef ATTN_FMT
}

static void mla_work_carve(target_work *w, arena *a, const target_model *m, int max_tokens, int max_seqs) {
    (void)max_seqs;
    const target_config *c = &m->cfg;
    size_t e = dtype_size(ops_act_dtype(m->be)), T = (size_t)max_tokens;
    if (c->q_lora > 0) w->qg = arena_alloc(a, T * (size_t)c->q_lora * e);
    w->qkv = arena_alloc(a, T * (size_t)(c->kv_lora + c->rope_dim) * e);
    w->core = arena_alloc(a, T * (size_t)c->kv_lora * e);
    w->z = arena_alloc(a, T * (size_t)(c->n_heads * (c->qk_nope + c->v_head)) * e);
}

// y = x @ W^T (+ b when b is not NULL)
static void mla_linear(backend *be, void *y, const void *x, const void *W, const void *b, int T, int in, int out) {
    target_linear(be, y, x, W, T, in, out);
    if (b) ops_bias_add(be, y, b, T, out);
}

// RoPE on the rope_dim dims at x of nh heads a token, heads stride apart (x points at the first
// head's rotary dims): rotate_half pairs, or the interleaved pairs (2i, 2i+1) by inv_freq[i].
static void mla_rope(const target_model *m, int l, const target_work *w, void *x, int T, int nh, int stride) {
    const target_config *c = &m->cfg;
    const float *inv = target_layer_inv_freq(m, l);
    int rot = (int)c->rope_dim;
    if (!c->rope_interleave) {
        ops_rope_partial(m->be, x, w->pos, inv, T, nh, stride, rot);
        return;
    }
    size_t e = dtype_size(ops_act_dtype(m->be));
    for (int i = 0; i < rot / 2; i++) ops_rope_partial(m->be, (char *)x + (size_t)2 * i * e, w->pos, inv + i, T, nh, stride, 2);
}

static void mla_attn_project(const target_model *m, int l, target_work *w, int T) {
    const target_config *c = &m->cfg;
    const target_layer *L = &m->layers[l];
    backend *be = m->be;
    size_t e = dtype_size(ops_act_dtype(be));
    int H = (int)c->hidden, nq = (int)c->n_heads, qk = (int)c->head_dim, nope = (int)c->qk_nope, vd = (int)c->v_head;
    int rot = (int)c->rope_dim, ql = (int)c->q_lora, kl = (int)c->kv_lora, kva = kl + rot;
    int64_t rows = (int64_t)T * nq;
    if (ql > 0) {
        mla_linear(be, w->qg, w->xn, L->w_q_a, L->bq, T, H, ql);
        ops_rmsnorm(be, w->qg, w->qg, L->q_a_norm, T, ql, MLA_NORM_EPS);
        target_linear(be, w->q, w->qg, L->w_q_b, T, ql, nq * qk);
    } else {
        target_linear(be, w->q, w->xn, L->wq, T, H, nq * qk);
    }
    mla_linear(be, w->qkv, w->xn, L->w_kv_a, L->bk, T, H, kva);
    ops_copy_2d(be, w->core, kl, w->qkv, kva, T, kl);
    ops_rmsnorm(be, w->core, w->core, L->kv_a_norm, T, kl, MLA_NORM_EPS);
    target_linear(be, w->z, w->core, L->w_kv_b, T, kl, nq * (nope + vd));
    mla_rope(m, l, w, (char *)w->q + (size_t)nope * e, T, nq, qk);  // q_pe of every head
    mla_rope(m, l, w, (char *)w->qkv + (size_t)kl * e, T, 1, kva);  // the one k_pe
    // k = [k_nope | k_pe]: k_pe into head 0, whole heads doubled across the others, then k_nope over all
    int64_t ld = (int64_t)nq * qk;
    ops_copy_2d(be, (char *)w->k + (size_t)nope * e, ld, (char *)w->qkv + (size_t)kl * e, kva, T, rot);
    for (int n = 1; n < nq; n *= 2)
        ops_copy_2d(be, (char *)w->k + (size_t)n * qk * e, ld, w->k, ld, T, (int64_t)(n < nq - n ? n : nq - n) * qk);
    ops_copy_2d(be, w->k, qk, w->z, nope + vd, rows, nope);
    // v = [v | 0] per head
    if (vd < qk) backend_memset_zero(be, w->v, (size_t)rows * qk * e);
    ops_copy_2d(be, w->v, qk, (char *)w->z + (size_t)nope * e, nope + vd, rows, vd);
}

static void mla_attn_finish(const target_model *m, int l, target_work *w, int T) {
    const target_config *c = &m->cfg;
    const target_layer *L = &m->layers[l];
    int nq = (int)c->n_heads, qk = (int)c->head_dim, vd = (int)c->v_head;
    ops_copy_2d(m->be, w->q, vd, w->att, qk, (int64_t)T * nq, vd); // each head's vd dims, [T, nq * vd]
    mla_linear(m->be, w->xn, w->q, L->wo, L->bo, T, nq * vd, (int)c->hidden);
}

static void mla_forward(const target_model *m, int l, target_work *w, int T, int n_seq, void *conv_state,
                        float *rec_state) {
    (void)conv_state, (void)rec_state;
    mla_attn_project(m, l, w, T);
    target_attention(m, l, w, T, n_seq);
    mla_attn_finish(m, l, w, T);
}

// ---------------------------------------------------------------- config.json

void target_json_moe_sigmoid(cJSON *o, const target_config *c, int groups) {
    int64_t E = c->n_experts, k = c->n_experts_tok, Ie = c->moe_intermediate;
    int64_t G = c->n_group, TG = c->topk_group, shared = Ie > 0 ? c->shared_intermediate / Ie : 0, dense = 0;
    double scale = c->routed_scaling;
    int norm = c->norm_topk_prob;
    if (target_config_fresh(c)) {
        G = TG = 1, shared = 1, scale = 2.5, norm = 1, dense = c->n_layers > 1;
        for (int64_t g = 4; groups && g >= 2; g /= 2)
            if (E % g == 0 && E / g >= 2) {
                G = g, TG = k <= (g / 2) * (E / g) ? g / 2 : g;
                break;
            }
    } else {
        while (dense < c->n_layers && !c->layer_sparse[dense]) dense++;
    }
    cJSON_AddNumberToObject(o, "n_routed_experts", (double)E);
    cJSON_AddNumberToObject(o, "num_experts_per_tok", (double)k);
    cJSON_AddNumberToObject(o, "moe_intermediate_size", (double)Ie);
    cJSON_AddNumberToObject(o, "n_shared_experts", (double)shared);
    cJSON_AddNumberToObject(o, "first_k_dense_replace", (double)dense);
    cJSON_AddNumberToObject(o, "n_group", (double)G);
    cJSON_AddNumberToObject(o, "topk_group", (double)TG);
    cJSON_AddBoolToObject(o, "norm_topk_prob", norm != 0);
    json_add_float_py(o, "routed_scaling_factor", scale);
}

// deepseek_v3_to_json: DeepseekV3Config as transformers 5 saves it (head_dim is qk_rope_head_dim
// there, qk_head_dim the whole q/k head) and the MoE keys (target_json_moe_sigmoid, grouped). A
// fresh config takes the latent attention's dims from head_dim D (the q/k head, nope + rope) in
// DeepSeek-V3's proportions (D = 192 gives its 128 + 64, v 128, kv_lora_rank 512, q_lora_rank 1536):
// rope D/3 (rounded down to even, at least 2), nope and v the rest, kv_lora_rank 4 nope, q_lora_rank
// 12 nope; rope_interleave, no biases, YaRN as published (4096 original positions, beta 32 / 1,
// mscale = mscale_all_dim = 1: the softmax scale times (0.1 ln factor + 1)^2) by the factor
// max_position_embeddings / 4096 (its 40 with 163840 positions; plain RoPE up to 4096).
static char *deepseek_v3_to_json(const target_config *c, const target_arch *A) {
    int fresh = target_config_fresh(c);
    int64_t rope = c->rope_dim, nope = c->qk_nope, v = c->v_head, kv = c->kv_lora, q = c->q_lora;
    if (fresh) {
        rope = c->head_dim / 6 * 2;
        if (rope < 2) rope = 2;
        nope = c->head_dim - rope, v = nope, kv = 4 * nope, q = 12 * nope;
    }
    cJSON *o = target_json_begin(c, A);
    cJSON_AddNumberToObject(o, "intermediate_size", (double)c->intermediate); // the dense layers'
    cJSON_AddStringToObject(o, "hidden_act", "silu");
    cJSON_AddNumberToObject(o, "head_dim", (double)rope);
    cJSON_AddNumberToObject(o, "qk_head_dim", (double)(nope + rope));
    cJSON_AddNumberToObject(o, "qk_nope_head_dim", (double)nope);
    cJSON_AddNumberToObject(o, "qk_rope_head_dim", (double)rope);
    cJSON_AddNumberToObject(o, "v_head_dim", (double)v);
    cJSON_AddNumberToObject(o, "kv_lora_rank", (double)kv);
    if (q > 0) cJSON_AddNumberToObject(o, "q_lora_rank", (double)q);
    else cJSON_AddNullToObject(o, "q_lora_rank");
    cJSON_AddBoolToObject(o, "rope_interleave", fresh || c->rope_interleave);
    cJSON_AddBoolToObject(o, "attention_bias", !fresh && c->o_bias);
    cJSON *r = cJSON_AddObjectToObject(o, "rope_parameters");
    if (fresh) {
        json_add_float_py(r, "rope_theta", c->rope_theta);
        cJSON_AddStringToObject(r, "rope_type", c->max_positions > 4096 ? "yarn" : "default");
    }
    if (fresh && c->max_positions > 4096) {
        json_add_float_py(r, "factor", (double)c->max_positions / 4096.0);
        cJSON_AddNumberToObject(r, "original_max_position_embeddings", 4096);
        json_add_float_py(r, "beta_fast", 32.0);
        json_add_float_py(r, "beta_slow", 1.0);
        cJSON_AddBoolToObject(r, "truncate", 1);
        json_add_float_py(r, "mscale", 1.0);
        json_add_float_py(r, "mscale_all_dim", 1.0);
    } else if (!fresh) {
        target_json_rope(r, c, c->rope_theta);
    }
    target_json_moe_sigmoid(o, c, 1);
    return target_json_end(o, c, "deepseek_v3_to_json");
}

// make-target writes DeepSeek-V3 from the teacher's tensor list (tools/tool_make_target.c); the
// fixtures against transformers are checkpoints saved by transformers (make_hf_fixtures.py).
static const target_mixer mixer_mla = {
    .parse = deepseek_v3_parse,
    .layer_tensors = mla_layer_tensors,
    .work_carve = mla_work_carve,
    .forward = mla_forward,
    .attn_project = mla_attn_project,
    .attn_finish = mla_attn_finish,
    .to_json = deepseek_v3_to_json,
};

// DeepseekV3Config: num_key_value_heads 128 (required here, and equal to the heads), 4096 positions,
// rope_theta 10000; the MLA and MoE shapes required (their defaults are DeepSeek-V3's).
const target_arch target_arch_deepseek_v3 = {
    .name = "deepseek_v3",
    .family = ARCH_DEEPSEEK_V3,
    .moe = 1,
    .classes = {{"DeepseekV3ForCausalLM", "deepseek_v3", 0}},
    .default_kv_heads = 128,
    .default_max_positions = 4096,
    .mixer = &mixer_mla,
    .mlp = &target_mlp_moe_sigmoid,
};
