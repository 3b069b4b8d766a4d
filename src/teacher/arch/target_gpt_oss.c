// target_gpt_oss.c: gpt-oss targets (transformers' models/gpt_oss: GptOssForCausalLM, model_type
// gpt_oss; gpt-oss-20b and gpt-oss-120b), table gpt_oss (target_arch.h). The attention is
// target_dense.c's with gpt-oss's settings; the MLP (a mixture of experts with biases and a clamped
// SwiGLU) is this file's, on target_moe.c's buffers and the ops of ops_moe.h / attention.h. The
// residual frame (plain RMSNorm, pre-norm blocks, untied lm_head) is target.c's.
//
// Per layer (GptOssDecoderLayer):
//   attn: q/k/v/o_proj with biases (attention_bias, default true), RoPE on the whole head (YaRN:
//         rope_scaling / rope_parameters, read by target_config.c, whose attention factor scales
//         q.k by its square: target_attn_scale), scale head_dim^-0.5, a sliding window of
//         sliding_window keys (default 128) on the layers layer_types says are sliding_attention
//         (default: even layers sliding, odd layers full), and a learned sink logit per query head
//         (self_attn.sinks) in every row's softmax denominator (ops_attention_ext)
//   mlp:  logits = x @ router^T + router_bias (mlp.router.weight [E, H], .bias [E]); the k largest
//         logits, softmaxed over those k (the same weights as the full softmax's top k renormalised:
//         ops_moe_route with renorm); per chosen expert e
//           gu = x @ gate_up_proj[e] + gate_up_proj_bias[e]          [2I], gate/up INTERLEAVED
//           a  = (clamp(up, -limit, limit) + 1) * g * sigmoid(alpha g),  g = min(gate, limit)
//           y += w * (a @ down_proj[e] + down_proj_bias[e])
//         with alpha = swiglu_alpha (1.702), limit = swiglu_limit (7.0).
// The checkpoint transformers saves holds the experts as its parameters are shaped, [E, in, out]
// (gate_up_proj [E, H, 2I], down_proj [E, I, H]): they are transposed at load into ops_moe_gemm's
// [E, out, in] (target_tensor.transpose); gpt-oss as published stores them MXFP4-quantised
// (NAME_blocks / NAME_scales, already [E, out, in]), de-quantised at load (target_quant.h).
//
// The router's logits are fp32 on every backend, as the other MoE targets' (the route's softmax and
// top-k are fp32): the bias (stored in the activation dtype, as the checkpoint's bf16 holds it
// exactly) is broadcast to every row by ops_embed (row 0 of the [1, E] bias for each token:
// target_work.router_act, router_zero), widened to fp32 into the logits, and the router's GEMM adds
// x @ W^T onto it (beta 1, fp32 output): F.linear(x, W, b) with no rounding of the logits to bf16,
// which transformers' bf16 forward does (a router near-tie can then pick another expert there).
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/core/error.h"
#include "common/core/json_util.h"
#include "common/kernels/ops.h"
#include "common/moe/ops_moe.h"
#include "teacher/target.h"
#include "teacher/target_arch.h"

// GptOssConfig's defaults of swiglu_alpha and swiglu_limit (every published gpt-oss's values).
#define GPT_OSS_SWIGLU_ALPHA 1.702
#define GPT_OSS_SWIGLU_LIMIT 7.0

// ---------------------------------------------------------------- config

// gpt_oss_parse: GptOssConfig's attention keys beyond the shared ones.
static int gpt_oss_parse(target_config *c, const cJSON *root, const char *src) {
    int bias = 1; // attention_bias: the class's default is true
    if (json_get_bool(root, "attention_bias", src, &bias, NULL)) return -1;
    c->qkv_bias = c->o_bias = bias;
    c->attn_sinks = 1;
    // rms_norm_eps: GptOssConfig's default is 1e-5 (the shared parse's 1e-6 is Qwen3's / Llama's)
    if (!json_field(root, "rms_norm_eps")) c->rms_eps = 1e-5;
    // hidden_act is not read by GptOssForCausalLM (the experts' clamped SwiGLU is fixed): any value
    c->mlp_act = TARGET_ACT_SILU;
    // Without rope_scaling / rope_parameters GptOssConfig uses YaRN (factor 32 over 4096 positions,
    // beta_fast 32, beta_slow 1, truncate false) where the shared parse would use plain RoPE: the
    // file must say which (every published gpt-oss does)
    const cJSON *scaling = json_field(root, "rope_scaling");
    int empty = scaling && cJSON_IsObject(scaling) && scaling->child == NULL;
    if ((!scaling || empty) && !json_field(root, "rope_parameters"))
        return error_set("%s: missing 'rope_scaling' (or 'rope_parameters'): GptOssConfig then uses YaRN (factor 32,"
                         " original_max_position_embeddings 4096, beta_fast 32, beta_slow 1, truncate false);"
                         " give it explicitly", src);
    // sliding_window: GptOssConfig's default 128 when absent (null: none, so no sliding layer);
    // layer_types, else the class's pattern: layer i sliding when (i + 1) % 2 != 0
    int64_t window = 128;
    if (cJSON_GetObjectItemCaseSensitive(root, "sliding_window") && target_parse_window(root, src, &window)) return -1;
    if (json_field(root, "layer_types")) return target_parse_layer_types(c, root, src, window);
    for (int64_t i = 0; i < c->n_layers; i++) {
        int sliding = (i + 1) % 2 != 0;
        if (sliding && window <= 0)
            return error_set("%s: layer %lld is sliding_attention (GptOssConfig's default layer_types) but"
                             " 'sliding_window' is null", src, (long long)i);
        c->layer_window[i] = sliding ? (int32_t)window : 0;
    }
    return 0;
}

// gpt_oss_swiglu_key: key (absent: the class's default) into *out: a finite number > 0.
static int gpt_oss_swiglu_key(const cJSON *root, const char *src, const char *key, double def, double *out) {
    *out = def;
    if (json_get_double(root, key, key, src, out, NULL)) return -1;
    if (!(*out > 0) || !isfinite(*out)) return error_set("%s: '%s' must be a finite number > 0, got %g", src, key, *out);
    return 0;
}

// gpt_oss_mlp_parse: the experts. num_local_experts (num_experts in the attribute_map),
// num_experts_per_tok and intermediate_size (each expert's width) are structural: required, never
// the class's 128, 4 and 2880. The published files also carry experts_per_token, which transformers
// does not read: when given it must agree.
static int gpt_oss_mlp_parse(target_config *c, const cJSON *root, const char *src) {
    static const char *const experts[] = {"num_local_experts", "num_experts", NULL};
    static const char *const topk[] = {"num_experts_per_tok", NULL};
    static const char *const width[] = {"intermediate_size", NULL};
    if (target_moe_required(root, src, experts, &c->n_experts)) return -1;
    if (c->n_experts > TARGET_MAX_EXPERTS)
        return error_set("%s: 'num_local_experts' %lld is over the %d this build supports", src,
                         (long long)c->n_experts, TARGET_MAX_EXPERTS);
    if (target_moe_required(root, src, topk, &c->n_experts_tok)) return -1;
    int64_t alias = 0;
    int found = 0;
    if (json_get_int(root, "experts_per_token", "experts_per_token", src, &alias, &found)) return -1;
    if (found && alias != c->n_experts_tok)
        return error_set("%s: 'experts_per_token' is %lld but 'num_experts_per_tok' is %lld (the same setting)", src,
                         (long long)alias, (long long)c->n_experts_tok);
    if (c->n_experts_tok > c->n_experts)
        return error_set("%s: 'num_experts_per_tok' %lld is more than 'num_local_experts' %lld", src,
                         (long long)c->n_experts_tok, (long long)c->n_experts);
    if (c->n_experts_tok > 64)
        return error_set("%s: 'num_experts_per_tok' %lld is over 64", src, (long long)c->n_experts_tok);
    if (target_moe_required(root, src, width, &c->moe_intermediate)) return -1;
    if (c->moe_intermediate > TARGET_MAX_WIDTH)
        return error_set("%s: 'intermediate_size' %lld is over the %d this build supports", src,
                         (long long)c->moe_intermediate, TARGET_MAX_WIDTH);
    if (gpt_oss_swiglu_key(root, src, "swiglu_alpha", GPT_OSS_SWIGLU_ALPHA, &c->swiglu_alpha) ||
        gpt_oss_swiglu_key(root, src, "swiglu_limit", GPT_OSS_SWIGLU_LIMIT, &c->swiglu_limit))
        return -1;
    c->shared_intermediate = 0;
    c->norm_topk_prob = 1; // softmax over the top k logits
    c->sparse_step = 1;
    for (int64_t i = 0; i < c->n_layers; i++) c->layer_sparse[i] = 1;
    return 0;
}

// ---------------------------------------------------------------- layers

// The MLP tensors of layer l: the router and its bias, the experts and their biases. The experts'
// matrices are [E, out, in] on the device; a plain file tensor is transformers' [E, in, out].
static void gpt_oss_mlp_tensors(target_model *m, int64_t l, const char *P, target_tensor_list *list, const st_dir *d) {
    (void)d;
    const target_config *c = &m->cfg;
    target_layer *L = &m->layers[l];
    int64_t H = c->hidden, E = c->n_experts, Ie = c->moe_intermediate;
    long long ll = (long long)l;
#define MLP_FMT "%slayers.%lld.mlp.%s"
    target_tensor_add(list, &L->router, 0, 2, E, H, 0, MLP_FMT, P, ll, "router.weight");
    target_tensor_add(list, &L->router_bias, 0, 1, E, 0, 0, MLP_FMT, P, ll, "router.bias");
    int gu = target_tensor_add(list, &L->exp_gate_up, 0, 3, E, 2 * Ie, H, MLP_FMT, P, ll, "experts.gate_up_proj");
    target_tensor_add(list, &L->exp_gate_up_bias, 0, 2, E, 2 * Ie, 0, MLP_FMT, P, ll, "experts.gate_up_proj_bias");
    int dn = target_tensor_add(list, &L->exp_down, 0, 3, E, H, Ie, MLP_FMT, P, ll, "experts.down_proj");
    target_tensor_add(list, &L->exp_down_bias, 0, 2, E, H, 0, MLP_FMT, P, ll, "experts.down_proj_bias");
    list->t[gu].transpose = list->t[dn].transpose = 1;
#undef MLP_FMT
}

// gpt_oss_work_carve: the routed rows' buffers (target_moe.c) and the router bias's rows.
static void gpt_oss_work_carve(target_work *w, arena *a, const target_model *m, int max_tokens) {
    target_moe_work_carve(w, a, m, max_tokens);
    size_t e = dtype_size(ops_act_dtype(m->be));
    w->router_act = arena_alloc(a, (size_t)max_tokens * (size_t)m->cfg.n_experts * e);
    w->router_zero = arena_alloc(a, (size_t)max_tokens * sizeof(int32_t));
}

// The MLP of layer l: w->xn [T, H] in, out in w->xn.
static void gpt_oss_mlp_forward(const target_model *m, int l, target_work *w, int T) {
    const target_config *c = &m->cfg;
    const target_layer *L = &m->layers[l];
    backend *be = m->be;
    int H = (int)c->hidden, E = (int)c->n_experts, k = (int)c->n_experts_tok, Ie = (int)c->moe_intermediate;
    int R = T * k;
    // router logits in fp32: the bias on every row (row 0 of the [1, E] bias read for each token by
    // ops_embed, then to fp32), then += x @ W^T by the GEMM (beta 1: fp32 accumulation and output)
    dtype dt = ops_act_dtype(be);
    backend_memset_zero(be, w->router_zero, (size_t)T * sizeof(int32_t));
    ops_embed(be, w->router_act, L->router_bias, w->router_zero, T, E);
    ops_to_f32(be, w->router_logits, w->router_act, (int64_t)T * E);
    backend_gemm(be, 0, 1, T, E, H, 1.0f, w->xn, H, L->router, H, 1.0f, w->router_logits, E, dt, DT_F32);
    ops_moe_route(be, w->router_logits, T, E, k, 1, w->topk_idx_e, w->topk_w_e, w->moe_offsets, w->moe_perm,
                  w->moe_slot, w->moe_route_work);
    ops_moe_gather(be, w->moe_xs, w->xn, w->moe_perm, R, H);
    // gate_up: [R, 2Ie] with its bias, gate and up interleaved (column 2j gate, 2j+1 up)
    ops_moe_gemm(be, w->moe_gu, w->moe_xs, L->exp_gate_up, w->moe_offsets, E, R, 2 * Ie, H, R);
    ops_moe_bias_add(be, w->moe_gu, L->exp_gate_up_bias, w->moe_offsets, E, R, 2 * Ie);
    ops_swiglu_clamped(be, w->moe_act, w->moe_gu, R, Ie, (float)c->swiglu_alpha, (float)c->swiglu_limit);
    ops_moe_gemm(be, w->moe_ys, w->moe_act, L->exp_down, w->moe_offsets, E, R, H, Ie, R);
    ops_moe_bias_add(be, w->moe_ys, L->exp_down_bias, w->moe_offsets, E, R, H);
    ops_moe_combine(be, w->xn, w->moe_ys, w->moe_slot, w->topk_idx_e, w->topk_w_e, T, k, H);
}

// ---------------------------------------------------------------- table

// gpt_oss_to_json: GptOssConfig as transformers 5 saves it: attention_bias (q/k/v/o; the sinks are
// the class's, no key), rope_parameters, layer_types with sliding_window (the class's 128 when no
// layer slides), the swiglu constants this build implements; the MLP's keys from A->mlp. A fresh
// config: biases on, YaRN as gpt-oss is published (4096 original positions, beta 32 / 1, truncate
// false) by the factor max_position_embeddings / 4096 (its 32 with 131072 positions; plain RoPE up
// to 4096).
static char *gpt_oss_to_json(const target_config *c, const target_arch *A) {
    int fresh = target_config_fresh(c);
    cJSON *o = target_json_begin(c, A);
    A->mlp->to_json(o, c);
    cJSON_AddNumberToObject(o, "head_dim", (double)c->head_dim);
    cJSON_AddStringToObject(o, "hidden_act", "silu");
    cJSON_AddBoolToObject(o, "attention_bias", fresh || c->qkv_bias);
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
        cJSON_AddBoolToObject(r, "truncate", 0);
    } else if (!fresh) {
        target_json_rope(r, c, c->rope_theta);
    }
    int64_t w = target_json_window(c);
    cJSON_AddNumberToObject(o, "sliding_window", (double)(w > 0 ? w : 128));
    target_json_layer_types(o, c);
    return target_json_end(o, c, "gpt_oss_to_json");
}

// gpt_oss_mlp_to_json: the experts (num_local_experts, num_experts_per_tok, intermediate_size: each
// expert's width) and the clamped SwiGLU's constants.
static void gpt_oss_mlp_to_json(cJSON *o, const target_config *c) {
    cJSON_AddNumberToObject(o, "num_local_experts", (double)c->n_experts);
    cJSON_AddNumberToObject(o, "num_experts_per_tok", (double)c->n_experts_tok);
    cJSON_AddNumberToObject(o, "intermediate_size", (double)c->moe_intermediate);
    json_add_float_py(o, "swiglu_alpha", c->swiglu_alpha > 0 ? c->swiglu_alpha : GPT_OSS_SWIGLU_ALPHA);
    json_add_float_py(o, "swiglu_limit", c->swiglu_limit > 0 ? c->swiglu_limit : GPT_OSS_SWIGLU_LIMIT);
}

// make-target writes gpt-oss from the teacher's tensor list (tools/tool_make_target.c); the
// fixtures against transformers are checkpoints saved by transformers (make_hf_fixtures.py).
static const target_mixer mixer_gpt_oss = {.parse = gpt_oss_parse, TARGET_DENSE_PARTS, .to_json = gpt_oss_to_json};

static const target_mlp mlp_gpt_oss = {
    .parse = gpt_oss_mlp_parse,
    .layer_tensors = gpt_oss_mlp_tensors,
    .work_carve = gpt_oss_work_carve,
    .forward = gpt_oss_mlp_forward,
    .to_json = gpt_oss_mlp_to_json,
};

// GptOssConfig: 8 kv heads, head_dim 64 (both required here), 131072 positions, rope_theta 150000,
// untied embeddings; every MLP sparse (intermediate_size is the experts' width, read above).
const target_arch target_arch_gpt_oss = {
    .name = "gpt_oss",
    .family = ARCH_GPT_OSS,
    .moe = 1,
    .classes = {{"GptOssForCausalLM", "gpt_oss", 0}},
    .default_kv_heads = 8,
    .default_head_dim = 64,
    .default_max_positions = 131072,
    .default_rope_theta = 150000.0,
    .no_intermediate = 1,
    .mixer = &mixer_gpt_oss,
    .mlp = &mlp_gpt_oss,
};
