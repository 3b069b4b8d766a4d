// target_gemma4.c: Gemma 4 text targets as the dense 31B model is configured (transformers'
// models/gemma4: Gemma4ForCausalLM, and the text model of Gemma4ForConditionalGeneration), table
// gemma4 (target_arch.h). The attention is target_dense.c's with Gemma 4's settings; the residual
// frame (target.c) does the rest from the config's flags.
//
// Per layer (RMSNorms x * rsqrt(mean(x^2) + eps) * w in fp32: Gemma 4's are not zero-centred):
//   x += post_attention_layernorm(attn(input_layernorm(x)))
//   x += post_feedforward_layernorm(mlp(pre_feedforward_layernorm(x)))
//   x *= layer_scalar (a saved [1] tensor)
//   attn: q_norm / k_norm per head before RoPE, v normed per head without a weight, scale 1;
//         sliding layers (head_dim, num_key_value_heads, the sliding window, default RoPE with
//         their own base); full layers with heads of their own (per_layer_config, or
//         global_head_dim / num_global_key_value_heads) and, with attention_k_eq_v, no v_proj: v
//         is k_proj's output (before k_norm); the full layers' RoPE is "proportional" (RoPE over
//         the whole head, the frequencies past partial_rotary_factor's share zero)
//   mlp:  down(gelu_tanh(gate(x)) * up(x))
// The embedding is multiplied by sqrt(hidden_size), the logits soft-capped by
// final_logit_softcapping, the embeddings tied by default, as in Gemma 3 (target_gemma3.c).
// Refused in one line: per-layer input embeddings (hidden_size_per_layer_input, the small
// models), KV sharing (num_kv_shared_layers), the MoE block (enable_moe_block), bidirectional
// attention.
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/core/error.h"
#include "common/core/json_util.h"
#include "teacher/target.h"
#include "teacher/target_arch.h"

// gemma4_refuse: an integer key that must be 0 (or absent / null) for the dense text model.
static int gemma4_refuse(const cJSON *root, const char *src, const char *key, const char *what) {
    int64_t v = 0;
    if (json_get_int(root, key, key, src, &v, NULL)) return -1;
    if (v != 0) return error_set("%s: '%s' is %lld: %s are not supported", src, key, (long long)v, what);
    return 0;
}

// gemma4_layer_shape: head_dim hd and kv heads nkv of layer l, checked.
static int gemma4_layer_shape(target_config *c, int64_t l, int64_t hd, int64_t nkv, const char *src) {
    if (hd < 2 || hd % 2 || hd > TARGET_MAX_HEAD)
        return error_set("%s: layer %lld: head_dim %lld must be even, in [2, %d]", src, (long long)l, (long long)hd,
                         TARGET_MAX_HEAD);
    if (nkv < 1 || c->n_heads % nkv)
        return error_set("%s: layer %lld: %lld kv heads do not divide %lld query heads", src, (long long)l,
                         (long long)nkv, (long long)c->n_heads);
    c->layer_hd[l] = (int32_t)hd, c->layer_nkv[l] = (int32_t)nkv;
    return 0;
}

// gemma4_full_shapes: the full layers' head_dim and kv heads: per_layer_config {"l": {"head_dim",
// "num_key_value_heads"}} as transformers 5 saves it, else global_head_dim (default 512) and, with
// attention_k_eq_v, num_global_key_value_heads (Gemma4TextConfig.__post_init__).
static int gemma4_full_shapes(target_config *c, const cJSON *root, const char *src) {
    const cJSON *plc = json_field(root, "per_layer_config");
    if (plc) {
        if (!cJSON_IsObject(plc)) return error_set("%s: 'per_layer_config' wants an object of layer indices", src);
        for (const cJSON *e = plc->child; e; e = e->next) {
            char *end = NULL;
            long long l = strtoll(e->string, &end, 10);
            if (!end || *end || end == e->string || l < 0 || l >= c->n_layers || !cJSON_IsObject(e))
                return error_set("%s: 'per_layer_config' has an entry '%s': want a layer index in [0, %lld)", src,
                                 e->string, (long long)c->n_layers);
            char k1[64], k2[64];
            snprintf(k1, sizeof k1, "per_layer_config.%s.head_dim", e->string);
            snprintf(k2, sizeof k2, "per_layer_config.%s.num_key_value_heads", e->string);
            int64_t hd = c->head_dim, nkv = c->n_kv_heads;
            if (json_get_int(e, "head_dim", k1, src, &hd, NULL) || json_get_int(e, "num_key_value_heads", k2, src, &nkv, NULL))
                return -1;
            for (const cJSON *k = e->child; k; k = k->next)
                if (strcmp(k->string, "head_dim") && strcmp(k->string, "num_key_value_heads"))
                    return error_set("%s: 'per_layer_config.%s.%s': only head_dim and num_key_value_heads are supported",
                                     src, e->string, k->string);
            if (gemma4_layer_shape(c, l, hd, nkv, src)) return -1;
        }
        return 0;
    }
    int64_t hd = 512, nkv = c->n_kv_heads;
    if (json_get_int(root, "global_head_dim", "global_head_dim", src, &hd, NULL)) return -1;
    if (c->attn_k_eq_v && json_get_int(root, "num_global_key_value_heads", "num_global_key_value_heads", src, &nkv, NULL))
        return -1;
    for (int64_t l = 0; l < c->n_layers; l++)
        if (c->layer_window[l] == 0 && gemma4_layer_shape(c, l, hd, nkv, src)) return -1;
    return 0;
}

// gemma4_parse: Gemma4TextConfig's keys beyond the shared ones.
static int gemma4_parse(target_config *c, const cJSON *root, const char *src) {
    c->sandwich_norms = 1;
    c->qk_norm = 1;
    c->v_norm = 1;
    c->layer_scalar = 1;
    c->attn_scale = 1.0;
    c->embed_scale = sqrt((double)c->hidden);
    const char *act = "gelu_pytorch_tanh";
    if (json_get_string(root, "hidden_activation", "hidden_activation", src, &act)) return -1;
    if (strcmp(act, "gelu_pytorch_tanh") != 0)
        return error_set("%s: 'hidden_activation' is \"%s\": only gelu_pytorch_tanh is supported for %s", src, act,
                         c->arch_name);
    c->mlp_act = TARGET_ACT_GELU_TANH;
    if (gemma4_refuse(root, src, "hidden_size_per_layer_input", "per-layer input embeddings (Gemma 4 E2B/E4B)") ||
        gemma4_refuse(root, src, "num_kv_shared_layers", "layers sharing the KV cache"))
        return -1;
    int moe = 0, kv_eq = 0;
    if (json_get_bool(root, "enable_moe_block", src, &moe, NULL)) return -1;
    if (moe) return error_set("%s: 'enable_moe_block' is true: the Gemma 4 MoE block is not supported", src);
    const char *bidir = NULL;
    if (json_get_string(root, "use_bidirectional_attention", "use_bidirectional_attention", src, &bidir)) return -1;
    if (bidir && strcmp(bidir, "vision") != 0) // "vision" concerns image tokens only
        return error_set("%s: 'use_bidirectional_attention' is \"%s\": the target must be causal", src, bidir);
    if (json_get_bool(root, "attention_k_eq_v", src, &kv_eq, NULL)) return -1;
    c->attn_k_eq_v = kv_eq;
    if (json_field(root, "final_logit_softcapping")) {
        if (json_get_double(root, "final_logit_softcapping", "final_logit_softcapping", src, &c->final_softcap, NULL))
            return -1;
        if (!(c->final_softcap > 0) || !isfinite(c->final_softcap))
            return error_set("%s: 'final_logit_softcapping' must be a finite number > 0 or null, got %g", src,
                             c->final_softcap);
    }
    if (!json_field(root, "rope_parameters"))
        return error_set("%s: missing 'rope_parameters' (Gemma 4's full and sliding layers each have their own)", src);
    // layer types: given, else every 6th layer full; the last layer is full whatever the list says
    // (Gemma4TextConfig forces it, with a warning)
    int64_t window = 512;
    if (cJSON_GetObjectItemCaseSensitive(root, "sliding_window") && target_parse_window(root, src, &window)) return -1;
    if (json_field(root, "layer_types")) {
        if (target_parse_layer_types(c, root, src, window)) return -1;
    } else {
        for (int64_t i = 0; i < c->n_layers; i++) c->layer_window[i] = (i + 1) % 6 ? (int32_t)window : 0;
    }
    c->layer_window[c->n_layers - 1] = 0;
    if (gemma4_full_shapes(c, root, src)) return -1;
    c->rope_dim = target_layer_head_dim(c, c->n_layers - 1); // the full layers' RoPE spans their whole head
    for (int64_t l = 0; l < c->n_layers; l++)
        if (c->layer_window[l] == 0 && target_layer_head_dim(c, l) != c->rope_dim)
            return error_set("%s: the full layers' head_dim differ (%lld and %lld): one size is supported", src,
                             (long long)target_layer_head_dim(c, l), (long long)c->rope_dim);
    return 0;
}

// make-target does not write Gemma 4 (no to_json): its fixtures are checkpoints saved by
// transformers (tests/reference/make_hf_fixtures.py).
static const target_mixer mixer_gemma4 = {
    .parse = gemma4_parse,
    .layer_tensors = target_dense_layer_tensors,
    .forward = target_dense_forward,
    .attn_project = target_dense_attn_project,
    .attn_finish = target_dense_attn_finish,
};

// Gemma4TextConfig: 4 kv heads, head_dim 256 (both required here), 131072 positions, rope_theta
// 1e6 and the sliding layers' 1e4 (rope_parameters required), tied embeddings.
const target_arch target_arch_gemma4 = {
    .name = "gemma4",
    .family = ARCH_GEMMA4,
    .classes = {{"Gemma4ForCausalLM", "gemma4_text", 0}, {"Gemma4ForConditionalGeneration", "gemma4", 1}},
    .default_kv_heads = 4,
    .default_head_dim = 256,
    .default_max_positions = 131072,
    .default_rope_theta = 1e6,
    .default_rope_theta_local = 1e4,
    .default_tie = 1,
    .mixer = &mixer_gemma4,
    .mlp = &target_mlp_swiglu,
};
