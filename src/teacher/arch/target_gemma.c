// target_gemma.c: the Gemma targets (transformers' models/gemma3 and gemma4), tables gemma3
// (Gemma3ForCausalLM, and the text model of Gemma3ForConditionalGeneration) and gemma4 (Gemma 4 text
// as the dense 31B model is configured: Gemma4ForCausalLM, and the text model of
// Gemma4ForConditionalGeneration) (target_arch.h). The attention is target_dense.c's with Gemma's
// settings; the residual frame (target.c) does the rest from the config's flags.
//
// Both: norms before and after each sublayer, in fp32,
//   x += post_attention_layernorm(attn(input_layernorm(x)))
//   x += post_feedforward_layernorm(mlp(pre_feedforward_layernorm(x)))
//   attn: q_norm / k_norm per head before RoPE; sliding layers (layer_types, sliding_window keys)
//         with their own RoPE base (rope_local_base_freq or rope_parameters.sliding_attention)
//   mlp:  down(gelu_tanh(gate(x)) * up(x))
// The embedding is multiplied by sqrt(hidden_size) (rounded to the weights' dtype, as
// Gemma3TextScaledWordEmbedding does), the logits are soft-capped by final_logit_softcapping when
// it is set (the top-k and LSE are of the capped logits), and the embeddings are tied by default.
// Gemma 3: every RMSNorm is x * rsqrt(mean(x^2) + eps) * (1 + w); scale query_pre_attn_scalar^-0.5;
//   full layers with rope_theta and its scaling (linear).
// Gemma 4: RMSNorms x * rsqrt(...) * w (not zero-centred); scale 1; v normed per head without a
//   weight; x *= layer_scalar (a saved [1] tensor) after the layer; full layers with heads of their
//   own (per_layer_config, or global_head_dim / num_global_key_value_heads) and, with
//   attention_k_eq_v, no v_proj: v is k_proj's output (before k_norm); the full layers' RoPE is
//   "proportional" (RoPE over the whole head, the frequencies past partial_rotary_factor's share
//   zero). Refused in one line: per-layer input embeddings (hidden_size_per_layer_input, the small
//   models), KV sharing (num_kv_shared_layers), the MoE block (enable_moe_block), bidirectional
//   attention.
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/core/error.h"
#include "common/core/json_util.h"
#include "teacher/target.h"
#include "teacher/target_arch.h"

// gemma_parse_common: what both generations share: the sandwich norms, q/k norms, the embedding's
// scale, the GeGLU (hidden_activation gelu_pytorch_tanh) and final_logit_softcapping.
static int gemma_parse_common(target_config *c, const cJSON *root, const char *src) {
    c->sandwich_norms = 1;
    c->qk_norm = 1;
    c->embed_scale = sqrt((double)c->hidden);
    const char *act = "gelu_pytorch_tanh";
    if (json_get_string(root, "hidden_activation", "hidden_activation", src, &act)) return -1;
    if (strcmp(act, "gelu_pytorch_tanh") != 0)
        return error_set("%s: 'hidden_activation' is \"%s\": only gelu_pytorch_tanh is supported for %s", src, act,
                         c->arch_name);
    c->mlp_act = TARGET_ACT_GELU_TANH;
    if (json_field(root, "final_logit_softcapping")) {
        if (json_get_double(root, "final_logit_softcapping", "final_logit_softcapping", src, &c->final_softcap, NULL))
            return -1;
        if (!(c->final_softcap > 0) || !isfinite(c->final_softcap))
            return error_set("%s: 'final_logit_softcapping' must be a finite number > 0 or null, got %g", src,
                             c->final_softcap);
    }
    return 0;
}

// ---------------------------------------------------------------- Gemma 3

// gemma3_parse: Gemma3TextConfig's keys beyond the shared ones.
static int gemma3_parse(target_config *c, const cJSON *root, const char *src) {
    c->norm_zero_centred = 1;
    if (gemma_parse_common(c, root, src)) return -1;
    double qpas = 256;
    if (json_get_double(root, "query_pre_attn_scalar", "query_pre_attn_scalar", src, &qpas, NULL)) return -1;
    if (!(qpas > 0) || !isfinite(qpas))
        return error_set("%s: 'query_pre_attn_scalar' must be a finite number > 0, got %g", src, qpas);
    c->attn_scale = 1.0 / sqrt(qpas);
    if (json_field(root, "attn_logit_softcapping"))
        return error_set("%s: 'attn_logit_softcapping' is set: attention soft-capping (Gemma 2) is not supported", src);
    int bidir = 0;
    if (json_get_bool(root, "use_bidirectional_attention", src, &bidir, NULL)) return -1;
    if (bidir) return error_set("%s: 'use_bidirectional_attention' is true: the target must be causal", src);
    // sliding_window: Gemma3TextConfig's default 4096 when absent; layer_types, else every
    // sliding_window_pattern-th layer (default 6) full, the others sliding
    int64_t window = 4096, pattern = 6;
    if (cJSON_GetObjectItemCaseSensitive(root, "sliding_window") && target_parse_window(root, src, &window)) return -1;
    if (json_field(root, "layer_types")) return target_parse_layer_types(c, root, src, window);
    if (json_get_int(root, "sliding_window_pattern", "sliding_window_pattern", src, &pattern, NULL)) return -1;
    if (pattern < 1) return error_set("%s: 'sliding_window_pattern' must be positive, got %lld", src, (long long)pattern);
    for (int64_t i = 0; i < c->n_layers; i++) c->layer_window[i] = (i + 1) % pattern ? (int32_t)window : 0;
    return 0;
}

// gemma3_to_json: Gemma3TextConfig (Gemma3ForCausalLM): the full layers' RoPE and the sliding
// layers' own base under rope_parameters, layer_types with sliding_window (the class's 4096 when no
// layer slides), query_pre_attn_scalar, final_logit_softcapping. A fresh config: scalar = head_dim,
// no soft-cap (as Gemma 3 is published), the sliding layers' base 1e4.
static char *gemma3_to_json(const target_config *c, const target_arch *A) {
    cJSON *o = target_json_begin(c, A);
    A->mlp->to_json(o, c);
    cJSON_AddNumberToObject(o, "head_dim", (double)c->head_dim);
    cJSON_AddStringToObject(o, "hidden_activation", "gelu_pytorch_tanh");
    double qpas = target_config_fresh(c) || !(c->attn_scale > 0) ? (double)c->head_dim
                                                                  : (double)llround(1.0 / (c->attn_scale * c->attn_scale));
    cJSON_AddNumberToObject(o, "query_pre_attn_scalar", qpas);
    cJSON *r = cJSON_AddObjectToObject(o, "rope_parameters");
    target_json_rope(cJSON_AddObjectToObject(r, "full_attention"), c, c->rope_theta);
    cJSON *loc = cJSON_AddObjectToObject(r, "sliding_attention");
    cJSON_AddStringToObject(loc, "rope_type", "default");
    json_add_float_py(loc, "rope_theta", c->rope_theta_local > 0 ? c->rope_theta_local : A->default_rope_theta_local);
    int64_t w = target_json_window(c);
    cJSON_AddNumberToObject(o, "sliding_window", (double)(w > 0 ? w : 4096));
    target_json_layer_types(o, c);
    if (c->final_softcap > 0) json_add_float_py(o, "final_logit_softcapping", c->final_softcap);
    else cJSON_AddNullToObject(o, "final_logit_softcapping");
    cJSON_AddNullToObject(o, "attn_logit_softcapping");
    cJSON_AddBoolToObject(o, "attention_bias", 0);
    cJSON_AddBoolToObject(o, "use_bidirectional_attention", 0);
    return target_json_end(o, c, "gemma3_to_json");
}

// make-target writes Gemma 3 from the teacher's tensor list (tools/tool_make_target.c); the
// fixtures against transformers are checkpoints saved by transformers (make_hf_fixtures.py).
static const target_mixer mixer_gemma3 = {.parse = gemma3_parse, TARGET_DENSE_PARTS, .to_json = gemma3_to_json};

// ---------------------------------------------------------------- Gemma 4

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
    if (gemma_parse_common(c, root, src)) return -1;
    c->v_norm = 1;
    c->layer_scalar = 1;
    c->attn_scale = 1.0;
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

// gemma4_to_json: Gemma4TextConfig (Gemma4ForCausalLM) as transformers 5 saves it: the full layers'
// shapes under per_layer_config, rope_parameters per layer type, layer_types (the last layer full:
// the class forces it), sliding_window (the class's 512 when no layer slides), and the features the
// teacher refuses switched off. A fresh config is the 31B's layout: the full layers' heads twice
// head_dim with half the kv heads (all of them when odd) and attention_k_eq_v, proportional RoPE on
// a quarter of their pairs, the sliding layers' base 1e4, final_logit_softcapping 30.
static char *gemma4_to_json(const target_config *c, const target_arch *A) {
    int fresh = target_config_fresh(c);
    cJSON *o = target_json_begin(c, A);
    A->mlp->to_json(o, c);
    cJSON_AddNumberToObject(o, "head_dim", (double)c->head_dim);
    cJSON_AddStringToObject(o, "hidden_activation", "gelu_pytorch_tanh");
    cJSON_AddBoolToObject(o, "attention_k_eq_v", fresh || c->attn_k_eq_v);
    cJSON *plc = cJSON_AddObjectToObject(o, "per_layer_config");
    cJSON *types = cJSON_AddArrayToObject(o, "layer_types");
    for (int64_t l = 0; l < c->n_layers; l++) {
        int full = c->layer_window[l] == 0 || l == c->n_layers - 1;
        cJSON_AddItemToArray(types, cJSON_CreateString(full ? "full_attention" : "sliding_attention"));
        int64_t hd = c->layer_hd[l], nkv = c->layer_nkv[l];
        if (fresh && full) hd = 2 * c->head_dim, nkv = c->n_kv_heads % 2 ? c->n_kv_heads : c->n_kv_heads / 2;
        if (hd <= 0) continue;
        char key[24];
        snprintf(key, sizeof key, "%lld", (long long)l);
        cJSON *e = cJSON_AddObjectToObject(plc, key);
        cJSON_AddNumberToObject(e, "head_dim", (double)hd);
        cJSON_AddNumberToObject(e, "num_key_value_heads", (double)(nkv > 0 ? nkv : c->n_kv_heads));
    }
    int64_t w = target_json_window(c);
    cJSON_AddNumberToObject(o, "sliding_window", (double)(w > 0 ? w : 512));
    cJSON *r = cJSON_AddObjectToObject(o, "rope_parameters");
    cJSON *full = cJSON_AddObjectToObject(r, "full_attention");
    if (fresh) {
        json_add_float_py(full, "rope_theta", c->rope_theta);
        cJSON_AddStringToObject(full, "rope_type", "proportional");
        json_add_float_py(full, "partial_rotary_factor", 0.25);
    } else {
        target_json_rope(full, c, c->rope_theta);
    }
    cJSON *loc = cJSON_AddObjectToObject(r, "sliding_attention");
    cJSON_AddStringToObject(loc, "rope_type", "default");
    json_add_float_py(loc, "rope_theta", c->rope_theta_local > 0 ? c->rope_theta_local : A->default_rope_theta_local);
    double cap = fresh ? 30.0 : c->final_softcap;
    if (cap > 0) json_add_float_py(o, "final_logit_softcapping", cap);
    else cJSON_AddNullToObject(o, "final_logit_softcapping");
    cJSON_AddBoolToObject(o, "attention_bias", 0);
    cJSON_AddNumberToObject(o, "hidden_size_per_layer_input", 0);
    cJSON_AddNumberToObject(o, "num_kv_shared_layers", 0);
    cJSON_AddBoolToObject(o, "enable_moe_block", 0);
    cJSON_AddBoolToObject(o, "use_double_wide_mlp", 0);
    cJSON_AddNullToObject(o, "use_bidirectional_attention");
    return target_json_end(o, c, "gemma4_to_json");
}

// make-target writes Gemma 4 from the teacher's tensor list (tools/tool_make_target.c); the
// fixtures against transformers are checkpoints saved by transformers (make_hf_fixtures.py).
static const target_mixer mixer_gemma4 = {.parse = gemma4_parse, TARGET_DENSE_PARTS, .to_json = gemma4_to_json};

// ---------------------------------------------------------------- tables

// The defaults Gemma3TextConfig and Gemma4TextConfig share: 4 kv heads, head_dim 256 (both required
// here), 131072 positions, rope_theta 1e6 and the sliding layers' 1e4, tied embeddings.
#define GEMMA_DEFAULTS                                                                                       \
    .default_kv_heads = 4, .default_head_dim = 256, .default_max_positions = 131072, .default_rope_theta = 1e6, \
    .default_rope_theta_local = 1e4, .default_tie = 1, .mlp = &target_mlp_swiglu

const target_arch target_arch_gemma3 = {
    .name = "gemma3",
    .family = ARCH_GEMMA3,
    .classes = {{"Gemma3ForCausalLM", "gemma3_text", 0}, {"Gemma3ForConditionalGeneration", "gemma3", 1}},
    GEMMA_DEFAULTS,
    .mixer = &mixer_gemma3,
};

// Gemma 4 also requires rope_parameters (gemma4_parse).
const target_arch target_arch_gemma4 = {
    .name = "gemma4",
    .family = ARCH_GEMMA4,
    .classes = {{"Gemma4ForCausalLM", "gemma4_text", 0}, {"Gemma4ForConditionalGeneration", "gemma4", 1}},
    GEMMA_DEFAULTS,
    .mixer = &mixer_gemma4,
};
