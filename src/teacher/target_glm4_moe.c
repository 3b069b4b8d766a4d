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

// make-target does not write GLM-4.5 (no to_json): its fixtures are checkpoints saved by
// transformers (tests/reference/make_hf_fixtures.py).
static const target_mixer mixer_glm4_moe = {
    .parse = glm4_moe_parse,
    .layer_tensors = target_dense_layer_tensors,
    .forward = target_dense_forward,
    .attn_project = target_dense_attn_project,
    .attn_finish = target_dense_attn_finish,
};

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
