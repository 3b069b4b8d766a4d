// target_gemma3.c: Gemma 3 text targets (transformers' models/gemma3: Gemma3ForCausalLM, and the
// text model of Gemma3ForConditionalGeneration), table gemma3 (target_arch.h). The attention is
// target_dense.c's with Gemma's settings; the residual frame (target.c) does the rest from the
// config's flags.
//
// Per layer (every RMSNorm is x * rsqrt(mean(x^2) + eps) * (1 + w), in fp32):
//   x += post_attention_layernorm(attn(input_layernorm(x)))
//   x += post_feedforward_layernorm(mlp(pre_feedforward_layernorm(x)))
//   attn: q_norm / k_norm per head before RoPE, scale query_pre_attn_scalar^-0.5, sliding layers
//         (layer_types, sliding_window keys) with their own RoPE base (rope_local_base_freq or
//         rope_parameters.sliding_attention), full layers with rope_theta and its scaling (linear)
//   mlp:  down(gelu_tanh(gate(x)) * up(x))
// The embedding is multiplied by sqrt(hidden_size) (rounded to the weights' dtype, as
// Gemma3TextScaledWordEmbedding does), the logits are soft-capped by final_logit_softcapping when
// it is set (the top-k and LSE are of the capped logits), and the embeddings are tied by default.
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "common/core/error.h"
#include "common/core/json_util.h"
#include "teacher/target.h"
#include "teacher/target_arch.h"

// gemma3_parse: Gemma3TextConfig's keys beyond the shared ones.
static int gemma3_parse(target_config *c, const cJSON *root, const char *src) {
    c->norm_zero_centred = 1;
    c->sandwich_norms = 1;
    c->qk_norm = 1;
    c->embed_scale = sqrt((double)c->hidden);
    const char *act = "gelu_pytorch_tanh";
    if (json_get_string(root, "hidden_activation", "hidden_activation", src, &act)) return -1;
    if (strcmp(act, "gelu_pytorch_tanh") != 0)
        return error_set("%s: 'hidden_activation' is \"%s\": only gelu_pytorch_tanh is supported for %s", src, act,
                         c->arch_name);
    c->mlp_act = TARGET_ACT_GELU_TANH;
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
    if (json_field(root, "final_logit_softcapping")) {
        if (json_get_double(root, "final_logit_softcapping", "final_logit_softcapping", src, &c->final_softcap, NULL))
            return -1;
        if (!(c->final_softcap > 0) || !isfinite(c->final_softcap))
            return error_set("%s: 'final_logit_softcapping' must be a finite number > 0 or null, got %g", src,
                             c->final_softcap);
    }
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

// make-target does not write Gemma 3 (no to_json): its fixtures are checkpoints saved by
// transformers (tests/reference/make_hf_fixtures.py).
static const target_mixer mixer_gemma3 = {
    .parse = gemma3_parse,
    .layer_tensors = target_dense_layer_tensors,
    .forward = target_dense_forward,
    .attn_project = target_dense_attn_project,
    .attn_finish = target_dense_attn_finish,
};

// Gemma3TextConfig: 4 kv heads, head_dim 256 (both required here), 131072 positions, rope_theta
// 1e6 and the sliding layers' 1e4, tied embeddings.
const target_arch target_arch_gemma3 = {
    .name = "gemma3",
    .family = ARCH_GEMMA3,
    .classes = {{"Gemma3ForCausalLM", "gemma3_text", 0}, {"Gemma3ForConditionalGeneration", "gemma3", 1}},
    .default_kv_heads = 4,
    .default_head_dim = 256,
    .default_max_positions = 131072,
    .default_rope_theta = 1e6,
    .default_rope_theta_local = 1e4,
    .default_tie = 1,
    .mixer = &mixer_gemma3,
    .mlp = &target_mlp_swiglu,
};
