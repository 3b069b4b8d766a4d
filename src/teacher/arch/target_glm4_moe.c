// target_glm4_moe.c: GLM-4.5 / GLM-4.6 / GLM-4.5-Air targets (transformers' models/glm4_moe:
// Glm4MoeForCausalLM), table glm4_moe (target_arch.h): target_dense.c's attention with GLM's
// settings and the sigmoid-routed MoE MLP of target_moe_sigmoid.c (shared with DeepSeek-V3).
//
// Per layer (plain RMSNorm, rms_norm_eps):
//   attn: q/k/v_proj with biases when attention_bias (o_proj never has one), per-head q_norm /
//         k_norm when use_qk_norm, RoPE (rotate_half) on the first int(head_dim *
//         partial_rotary_factor) dims of each head (the class's default 0.5), scale head_dim^-0.5,
//         GQA, causal, no window
//   mlp:  the dense SwiGLU (intermediate_size) on layers < first_k_dense_replace, else the MoE
//         (n_routed_experts of moe_intermediate_size, sigmoid routing within n_group / topk_group,
//         routed_scaling_factor, n_shared_experts shared experts added)
// The published checkpoints also hold the multi-token-prediction layer (num_nextn_predict_layers,
// model.layers.{num_hidden_layers}.*), which transformers ignores and the teacher never reads.
#include <cjson/cJSON.h>

#include "common/core/error.h"
#include "common/core/json_util.h"
#include "teacher/target.h"
#include "teacher/target_arch.h"

// glm4_moe_parse: Glm4MoeConfig's attention keys beyond the shared ones.
static int glm4_moe_parse(target_config *c, const cJSON *root, const char *src) {
    if (json_get_bool(root, "attention_bias", src, &c->qkv_bias, NULL)) return -1;
    if (json_get_bool(root, "use_qk_norm", src, &c->qk_norm, NULL)) return -1;
    return target_parse_layer_types(c, root, src, 0); // every layer full attention
}

// glm4_moe_to_json: Glm4MoeConfig as transformers 5 saves it: partial_rotary_factor (at the top and
// in rope_parameters), attention_bias, use_qk_norm, and the MoE keys (target_json_moe_sigmoid, one
// group). A fresh config is GLM-4.5's: q/k/v biases, no q/k norms, RoPE on half of each head.
static char *glm4_moe_to_json(const target_config *c, const target_arch *A) {
    int fresh = target_config_fresh(c);
    cJSON *o = target_json_begin(c, A);
    cJSON_AddNumberToObject(o, "intermediate_size", (double)c->intermediate); // the dense layers'
    cJSON_AddNumberToObject(o, "head_dim", (double)c->head_dim);
    cJSON_AddStringToObject(o, "hidden_act", "silu");
    cJSON_AddBoolToObject(o, "attention_bias", fresh || c->qkv_bias);
    cJSON_AddBoolToObject(o, "use_qk_norm", !fresh && c->qk_norm);
    double partial = fresh ? A->default_partial_rotary : c->partial_rotary;
    json_add_float_py(o, "partial_rotary_factor", partial);
    cJSON *r = cJSON_AddObjectToObject(o, "rope_parameters");
    target_json_rope(r, c, c->rope_theta);
    json_add_float_py(r, "partial_rotary_factor", partial);
    target_json_moe_sigmoid(o, c, 0);
    return target_json_end(o, c, "glm4_moe_to_json");
}

// make-target writes GLM-4.5 from the teacher's tensor list (tools/tool_make_target.c); the
// fixtures against transformers are checkpoints saved by transformers (make_hf_fixtures.py).
static const target_mixer mixer_glm4_moe = {.parse = glm4_moe_parse, TARGET_DENSE_PARTS, .to_json = glm4_moe_to_json};

// Glm4MoeConfig: 8 kv heads (required here), head_dim absent = hidden_size / heads, 131072
// positions, partial_rotary_factor 0.5, rope_theta 10000.
const target_arch target_arch_glm4_moe = {
    .name = "glm4_moe",
    .family = ARCH_GLM4_MOE,
    .moe = 1,
    .classes = {{"Glm4MoeForCausalLM", "glm4_moe", 0}},
    .default_kv_heads = 8,
    .default_max_positions = 131072,
    .default_partial_rotary = 0.5,
    .mixer = &mixer_glm4_moe,
    .mlp = &target_mlp_moe_sigmoid,
};
