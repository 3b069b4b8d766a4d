// target_config.c: read a Hugging Face config.json into target_config, write one back, and the
// two pieces of arithmetic that must match the Python side exactly: RoPE inverse frequencies
// (transformers' modeling_rope_utils) and the default feature layers (z-lab dflash).
//
// Field names and defaults follow transformers' Qwen3Config and LlamaConfig (checked against
// transformers 5.x; the legacy 4.x spellings are accepted too):
//   num_key_value_heads  null/absent -> num_attention_heads
//   head_dim             Qwen3: 128; Llama: hidden_size / num_attention_heads
//   max_position_embeddings  Qwen3: 32768; Llama: 2048
//   rms_norm_eps 1e-6, tie_word_embeddings false, hidden_act "silu", rope_theta 10000
//   RoPE: "rope_scaling" (4.x) or "rope_parameters" (5.x); a non-empty rope_scaling wins, as in
//   transformers' convert_rope_params_to_dict. rope_theta inside the dict wins over the top-level
//   one. The type is "rope_type", or the legacy "type", default "default".
// A JSON null counts as absent everywhere (transformers writes "sliding_window": null etc.).
#include "teacher/target_config.h"
#include "common/core/config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/json_util.h"
#include "common/data/safetensors.h"
#include "teacher/target_arch.h"
#include "teacher/target_quant.h"
#include "teacher/target_registry.h"

// ---------------------------------------------------------------- typed field access

// tc_required: a positive integer field that must be present.
static int tc_required(const cJSON *obj, const char *key, const char *src, int64_t *out) {
    int found = 0;
    if (json_get_int(obj, key, key, src, out, &found)) return -1;
    if (!found) return error_set("%s: missing '%s'", src, key);
    if (*out <= 0) return error_set("%s: '%s' must be positive, got %lld", src, key, (long long)*out);
    return 0;
}

// tc_bounded: a dimension over the build's bound (target_config.h) is refused, before any size is
// computed from it.
static int tc_bounded(int64_t v, const char *key, int64_t max, const char *src) {
    if (v > max) return error_set("%s: '%s' %lld is over the %lld this build supports", src, key, (long long)v, (long long)max);
    return 0;
}

// tc_refuse_true: a boolean feature we do not implement must be false (or absent).
static int tc_refuse_true(const cJSON *obj, const char *key, const char *src, const char *why) {
    int on = 0;
    if (json_get_bool(obj, key, src, &on, NULL)) return -1;
    if (on) return error_set("%s: '%s' is true: %s", src, key, why);
    return 0;
}


// ---------------------------------------------------------------- architecture

// tc_names: the registry's class names (model_types when types), ", "-separated, into s.
static void tc_names(char *s, size_t n, int types) {
    size_t used = 0;
    s[0] = 0;
    for (int i = 0; i < target_n_archs; i++)
        for (const target_arch_class *k = target_archs[i]->classes; k->class_name; k++)
            used += (size_t)snprintf(s + used, used < n ? n - used : 0, "%s%s", used ? ", " : "",
                                     types ? k->model_type : k->class_name);
}

// tc_parse_arch: "architectures" (a list of one supported name), else "model_type": the table
// (target_registry.h) that serves it.
static int tc_parse_arch(target_config *c, const cJSON *root, const char *src) {
    const char *name = NULL, *model_type = NULL;
    char list[1024];
    if (json_get_string(root, "model_type", "model_type", src, &model_type)) return -1;
    const cJSON *archs = json_field(root, "architectures");
    if (archs) {
        char s[160];
        json_value_str(archs, s, sizeof s);
        if (!cJSON_IsArray(archs) || cJSON_GetArraySize(archs) < 1)
            return error_set("%s: 'architectures' wants a list of names, got %s", src, s);
        if (cJSON_GetArraySize(archs) > 1)
            return error_set("%s: 'architectures' is %s: expected exactly one architecture", src, s);
        const cJSON *a = cJSON_GetArrayItem(archs, 0);
        if (!cJSON_IsString(a)) return error_set("%s: 'architectures' wants a list of names, got %s", src, s);
        name = a->valuestring;
    } else if (model_type) {
        for (int i = 0; i < target_n_archs; i++)
            for (const target_arch_class *k = target_archs[i]->classes; k->class_name; k++)
                if (strcmp(model_type, k->model_type) == 0) name = k->class_name;
        if (!name) {
            tc_names(list, sizeof list, 1);
            return error_set("%s: no 'architectures' and 'model_type' is \"%s\": supported are %s", src, model_type, list);
        }
    } else {
        return error_set("%s: missing 'architectures' (and 'model_type')", src);
    }
    for (int i = 0; i < target_n_archs; i++)
        for (const target_arch_class *k = target_archs[i]->classes; k->class_name; k++) {
            if (strcmp(name, k->class_name) != 0) continue;
            if (model_type && strcmp(model_type, k->model_type) != 0)
                return error_set("%s: 'model_type' is \"%s\" but 'architectures' is [\"%s\"] (expected model_type \"%s\")",
                                 src, model_type, name, k->model_type);
            c->table = target_archs[i];
            c->arch = (target_family)c->table->family;
            c->moe = c->table->moe;
            c->multimodal = k->multimodal;
            snprintf(c->arch_name, sizeof c->arch_name, "%s", name);
            return 0;
        }
    tc_names(list, sizeof list, 0);
    return error_set("%s: 'architectures' is [\"%s\"]: not supported (supported: %s)", src, name, list);
}

// ---------------------------------------------------------------- size

// Checked a * b and a + b on non-negative counts: -1 once anything overflowed (and stays -1).
static int64_t tc_mul(int64_t a, int64_t b) {
    int64_t r;
    return a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r) ? -1 : r;
}
static int64_t tc_add(int64_t a, int64_t b) {
    int64_t r;
    return a < 0 || b < 0 || __builtin_add_overflow(a, b, &r) ? -1 : r;
}

int64_t target_config_params(const target_config *c) {
    int64_t H = c->hidden, hd = c->head_dim;
    // attention: q (x2 with the gate), k, v, o and the per-head norms, at the widest layer's shape
    int64_t q, kv;
    target_attn_max(c, &q, &kv);
    int64_t attn = tc_mul(H, tc_add(tc_add(tc_mul(q, c->gated_attention ? 2 : 1), tc_mul(kv, 2)), q));
    attn = tc_add(attn, tc_mul(tc_add(tc_add(q, kv), H), 2)); // biases (q, k, v, o) and sinks, when present
    // Gated DeltaNet: qkv, z, a, b, the convolution and the output
    int64_t lk = tc_mul(c->lin_k_heads, c->lin_k_dim), lv = tc_mul(c->lin_v_heads, c->lin_v_dim);
    int64_t lin_c = tc_add(tc_mul(lk, 2), lv);
    int64_t lin = tc_add(tc_add(tc_mul(H, tc_add(tc_add(lin_c, lv), tc_mul(c->lin_v_heads, 2))), tc_mul(lin_c, c->lin_conv_kernel)),
                         tc_mul(lv, H));
    // MLPs: the dense SwiGLU, the experts and their router, the shared expert and its gate
    int64_t dense = tc_mul(tc_mul(H, c->intermediate), 3);
    // per expert: its three matrices, its router row and bias, its biases (gpt-oss: 2 Ie + H)
    int64_t experts = tc_mul(c->n_experts, tc_add(tc_add(tc_mul(tc_mul(H, c->moe_intermediate), 3), H),
                                                  tc_mul(tc_add(c->moe_intermediate, H), 2)));
    int64_t shared = tc_add(tc_mul(tc_mul(H, c->shared_intermediate), 3), H);
    // MLA (DeepSeek-V3): q_a, q_b, kv_a, kv_b, o and the two latent norms; the score-correction bias
    int64_t qk_out = tc_mul(c->n_heads, hd), kva = tc_add(c->kv_lora, c->rope_dim);
    int64_t mla = c->kv_lora == 0 ? 0 : tc_add(tc_add(tc_mul(c->q_lora, tc_add(tc_add(H, qk_out), 1)), tc_mul(kva, tc_add(H, 1))),
                                             tc_mul(c->n_heads, tc_add(tc_mul(c->kv_lora, tc_add(c->qk_nope, c->v_head)), tc_mul(c->v_head, H))));
    attn = tc_add(tc_add(attn, mla), c->n_experts);
    int64_t layer = tc_add(tc_add(tc_add(attn, lin), tc_add(dense, experts)), tc_add(shared, tc_mul(H, 2)));
    int64_t total = tc_add(tc_mul(layer, c->n_layers), tc_mul(tc_mul(c->vocab, H), 2));
    return tc_add(total, tc_add(H, tc_mul(hd, 2)));
}

int64_t target_config_mask_token(const target_config *c) {
    if (c->table && c->table->mask_vocab > 0 && c->vocab == c->table->mask_vocab) return c->table->mask_token;
    return c->vocab - 1;
}

// ---------------------------------------------------------------- RoPE

// tc_parse_yarn: YaRN (transformers' _compute_yarn_parameters) from the rope object at field:
// factor (required), original_max_position_embeddings (required), beta_fast 32, beta_slow 1,
// truncate true, and the cos/sin factor: attention_factor, else from mscale / mscale_all_dim when
// both are given and non-zero, else 0.1 ln(factor) + 1 (1 for factor <= 1).
static int tc_parse_yarn(target_config *c, const cJSON *rope, const char *field, const char *src) {
    char name[128];
    int found = 0;
    snprintf(name, sizeof name, "%s.factor", field);
    if (json_get_double(rope, "factor", name, src, &c->rope_factor, &found)) return -1;
    if (!found) return error_set("%s: missing '%s' (required by rope type yarn)", src, name);
    if (!(c->rope_factor > 0.0) || !isfinite(c->rope_factor))
        return error_set("%s: '%s' must be a finite number > 0, got %g", src, name, c->rope_factor);
    snprintf(name, sizeof name, "%s.original_max_position_embeddings", field);
    found = 0;
    if (json_get_int(rope, "original_max_position_embeddings", name, src, &c->rope_original_max_positions, &found))
        return -1;
    if (!found) return error_set("%s: missing '%s' (required by rope type yarn)", src, name);
    if (c->rope_original_max_positions <= 0)
        return error_set("%s: '%s' must be positive, got %lld", src, name, (long long)c->rope_original_max_positions);
    c->rope_beta_fast = 32.0, c->rope_beta_slow = 1.0, c->rope_truncate = 1;
    snprintf(name, sizeof name, "%s.beta_fast", field);
    if (json_get_double(rope, "beta_fast", name, src, &c->rope_beta_fast, NULL)) return -1;
    snprintf(name, sizeof name, "%s.beta_slow", field);
    if (json_get_double(rope, "beta_slow", name, src, &c->rope_beta_slow, NULL)) return -1;
    if (c->rope_beta_fast == 0) c->rope_beta_fast = 32.0; // Python's `or`: 0 means the default
    if (c->rope_beta_slow == 0) c->rope_beta_slow = 1.0;
    if (!isfinite(c->rope_beta_fast) || !isfinite(c->rope_beta_slow) || c->rope_beta_fast < 0 || c->rope_beta_slow < 0)
        return error_set("%s: '%s.beta_fast' and 'beta_slow' must be finite and positive", src, field);
    snprintf(name, sizeof name, "%s.truncate", field);
    if (json_get_bool(rope, "truncate", src, &c->rope_truncate, NULL)) return -1;
    double mscale = 0, mscale_all = 0, af = 0;
    int have_af = 0;
    snprintf(name, sizeof name, "%s.mscale", field);
    if (json_get_double(rope, "mscale", name, src, &mscale, NULL)) return -1;
    snprintf(name, sizeof name, "%s.mscale_all_dim", field);
    if (json_get_double(rope, "mscale_all_dim", name, src, &mscale_all, NULL)) return -1;
    snprintf(name, sizeof name, "%s.attention_factor", field);
    if (json_get_double(rope, "attention_factor", name, src, &af, &have_af)) return -1;
    c->rope_mscale = mscale, c->rope_mscale_all_dim = mscale_all;
    if (!have_af) {
        double f = c->rope_factor;
        if (mscale != 0 && mscale_all != 0)
            af = (f <= 1 ? 1.0 : 0.1 * mscale * log(f) + 1.0) / (f <= 1 ? 1.0 : 0.1 * mscale_all * log(f) + 1.0);
        else af = f <= 1 ? 1.0 : 0.1 * log(f) + 1.0;
    }
    if (!(af > 0.0) || !isfinite(af)) return error_set("%s: '%s' must be a finite number > 0, got %g", src, name, af);
    c->rope_yarn = 1;
    c->rope_attention_factor = af;
    return 0;
}

// tc_parse_rope: rope_theta and llama3 / linear / yarn scaling from rope_scaling / rope_parameters /
// rope_theta, and the sliding layers' base where the family has one.
static int tc_parse_rope(target_config *c, const cJSON *root, const char *src) {
    const cJSON *scaling = json_field(root, "rope_scaling");
    const cJSON *params = json_field(root, "rope_parameters");
    const cJSON *rope = NULL;
    const char *field = NULL;
    char s[160];
    if (scaling && !(cJSON_IsObject(scaling) && scaling->child == NULL)) { // {} counts as absent
        rope = scaling;
        field = "rope_scaling";
    } else if (params) {
        rope = params;
        field = "rope_parameters";
    }
    if (rope && !cJSON_IsObject(rope)) {
        json_value_str(rope, s, sizeof s);
        return error_set("%s: '%s' wants an object, got %s", src, field, s);
    }
    // transformers 5 may nest the parameters per layer type: {"full_attention": {...}} and, for the
    // families with sliding layers of their own base (Gemma 3), {"sliding_attention": {...}}.
    const cJSON *local = NULL;
    const char *local_field = NULL;
    if (rope && json_field(rope, "full_attention") && cJSON_IsObject(json_field(rope, "full_attention"))) {
        int sliding_ok = c->table->default_rope_theta_local > 0;
        for (const cJSON *k = rope->child; k; k = k->next)
            if (strcmp(k->string, "full_attention") != 0 && !(sliding_ok && strcmp(k->string, "sliding_attention") == 0))
                return error_set("%s: '%s' has an entry for layer type '%s': only full_attention%s is supported",
                                 src, field, k->string, sliding_ok ? " and sliding_attention" : "");
        local = json_field(rope, "sliding_attention");
        local_field = strcmp(field, "rope_scaling") == 0 ? "rope_scaling.sliding_attention" : "rope_parameters.sliding_attention";
        rope = json_field(rope, "full_attention");
        field = strcmp(field, "rope_scaling") == 0 ? "rope_scaling.full_attention" : "rope_parameters.full_attention";
    }

    char name[96];
    c->rope_attention_factor = 1.0;
    c->rope_theta = c->table->default_rope_theta > 0 ? c->table->default_rope_theta : 10000.0;
    if (json_get_double(root, "rope_theta", "rope_theta", src, &c->rope_theta, NULL)) return -1;
    if (rope) {
        snprintf(name, sizeof name, "%s.rope_theta", field);
        if (json_get_double(rope, "rope_theta", name, src, &c->rope_theta, NULL)) return -1;
    }
    if (!(c->rope_theta > 1.0) || !isfinite(c->rope_theta))
        return error_set("%s: 'rope_theta' must be a finite number > 1, got %g", src, c->rope_theta);
    // the sliding layers' own base: rope_local_base_freq (the legacy key) or sliding_attention's
    // rope_theta, default rope (no scaling) on those layers
    c->rope_theta_local = c->table->default_rope_theta_local;
    if (c->rope_theta_local > 0) {
        if (json_get_double(root, "rope_local_base_freq", "rope_local_base_freq", src, &c->rope_theta_local, NULL))
            return -1;
        if (local && cJSON_IsObject(local)) {
            const char *lt = "default";
            snprintf(name, sizeof name, "%s.rope_theta", local_field);
            if (json_get_double(local, "rope_theta", name, src, &c->rope_theta_local, NULL)) return -1;
            snprintf(name, sizeof name, "%s.rope_type", local_field);
            if (json_get_string(local, "rope_type", name, src, &lt)) return -1;
            if (strcmp(lt, "default") != 0)
                return error_set("%s: '%s' is \"%s\": the sliding layers support the default RoPE only", src, name, lt);
        }
        if (!(c->rope_theta_local > 1.0) || !isfinite(c->rope_theta_local))
            return error_set("%s: the sliding layers' rope_theta must be a finite number > 1, got %g", src,
                             c->rope_theta_local);
    }

    // partial_rotary_factor: RoPE on the first int(head_dim * factor) dims of a head, for the
    // architectures whose config class has the key (Qwen3.5: its default is 0.25); the others rotate
    // the whole head.
    // The rotary part of a head: head_dim, or the dims the architecture's parse set (DeepSeek-V3's
    // MLA: qk_rope_head_dim of a qk head of qk_nope + qk_rope, transformers' head_dim there).
    int64_t rot_head = c->rope_dim > 0 ? c->rope_dim : c->head_dim;
    int hybrid = c->table->default_partial_rotary > 0;
    double partial = hybrid ? c->table->default_partial_rotary : 1.0;
    if (json_get_double(root, "partial_rotary_factor", "partial_rotary_factor", src, &partial, NULL)) return -1;
    if (rope) {
        snprintf(name, sizeof name, "%s.partial_rotary_factor", field);
        if (json_get_double(rope, "partial_rotary_factor", name, src, &partial, NULL)) return -1;
    }
    // Gemma 4's proportional RoPE rotates the whole head, with the frequencies past the factor's
    // share zero (target_rope_inv_freq): the factor is its, not a partial rotation
    const cJSON *rtype = rope ? json_field(rope, "rope_type") : NULL;
    if (rtype && cJSON_IsString(rtype) && strcmp(rtype->valuestring, "proportional") == 0) {
        if (!(partial > 0.0 && partial <= 1.0))
            return error_set("%s: '%s.partial_rotary_factor' must be in (0, 1], got %g", src, field, partial);
        c->rope_proportional = 1;
        c->rope_proportion = partial;
        partial = 1.0;
    }
    if (!hybrid && partial != 1.0)
        return error_set("%s: 'partial_rotary_factor' is %g: only 1.0 (RoPE on the whole head) is supported for %s",
                         src, partial, c->arch_name);
    c->partial_rotary = partial;
    c->rope_dim = (int64_t)((double)rot_head * partial); // Python's int(): truncation
    if (!(partial > 0.0 && partial <= 1.0) || c->rope_dim < 2 || c->rope_dim % 2 != 0)
        return error_set("%s: 'partial_rotary_factor' %g gives %lld rotary dims of head_dim %lld: need an even"
                         " number >= 2 (0 < factor <= 1)",
                         src, partial, (long long)c->rope_dim, (long long)rot_head);

    c->rope_llama3 = 0;
    c->rope_factor = 1.0;
    c->rope_low_freq_factor = 1.0;
    c->rope_high_freq_factor = 4.0;
    c->rope_original_max_positions = c->max_positions;
    if (!rope) return 0;

    const char *type = "default";
    const char *type_field = "rope_type";
    snprintf(name, sizeof name, "%s.type", field);
    if (json_get_string(rope, "type", name, src, &type)) return -1;
    if (json_field(rope, "type")) type_field = "type";
    snprintf(name, sizeof name, "%s.rope_type", field);
    if (json_get_string(rope, "rope_type", name, src, &type)) return -1;
    if (json_field(rope, "rope_type")) type_field = "rope_type";
    if (strcmp(type, "default") == 0) return 0;
    if (strcmp(type, "linear") == 0) { // inv_freq / factor (Gemma 3's global layers)
        int found = 0;
        snprintf(name, sizeof name, "%s.factor", field);
        if (json_get_double(rope, "factor", name, src, &c->rope_factor, &found)) return -1;
        if (!found) return error_set("%s: missing '%s' (required by rope type linear)", src, name);
        if (!(c->rope_factor >= 1.0) || !isfinite(c->rope_factor))
            return error_set("%s: '%s' must be a finite number >= 1, got %g", src, name, c->rope_factor);
        c->rope_linear = 1;
        return 0;
    }
    if (strcmp(type, "yarn") == 0) return tc_parse_yarn(c, rope, field, src);
    if (strcmp(type, "proportional") == 0) { // factor: default 1 (checked above: rope_proportional)
        snprintf(name, sizeof name, "%s.factor", field);
        if (json_get_double(rope, "factor", name, src, &c->rope_factor, NULL)) return -1;
        if (!(c->rope_factor > 0.0) || !isfinite(c->rope_factor))
            return error_set("%s: '%s' must be a finite number > 0, got %g", src, name, c->rope_factor);
        return 0;
    }
    if (strcmp(type, "llama3") != 0)
        return error_set("%s: '%s.%s' is \"%s\": supported RoPE types are default, linear, yarn, proportional and llama3", src,
                         field, type_field, type);

    c->rope_llama3 = 1;
    static const char *const keys[3] = {"factor", "low_freq_factor", "high_freq_factor"};
    double *vals[3] = {&c->rope_factor, &c->rope_low_freq_factor, &c->rope_high_freq_factor};
    for (int i = 0; i < 3; i++) {
        int found = 0;
        snprintf(name, sizeof name, "%s.%s", field, keys[i]);
        if (json_get_double(rope, keys[i], name, src, vals[i], &found)) return -1;
        if (!found) return error_set("%s: missing '%s' (required by rope type llama3)", src, name);
    }
    snprintf(name, sizeof name, "%s.original_max_position_embeddings", field);
    if (json_get_int(rope, "original_max_position_embeddings", name, src, &c->rope_original_max_positions, NULL))
        return -1;
    if (!(c->rope_factor >= 1.0))
        return error_set("%s: '%s.factor' must be >= 1, got %g", src, field, c->rope_factor);
    if (!(c->rope_low_freq_factor > 0.0) || !(c->rope_high_freq_factor > c->rope_low_freq_factor))
        return error_set("%s: '%s': need 0 < low_freq_factor < high_freq_factor, got %g and %g", src, field,
                         c->rope_low_freq_factor, c->rope_high_freq_factor);
    if (c->rope_original_max_positions <= 0)
        return error_set("%s: '%s' must be positive, got %lld", src, name, (long long)c->rope_original_max_positions);
    return 0;
}

// ---------------------------------------------------------------- parse

static int tc_parse_root(target_config *c, const cJSON *top, const char *top_src) {
    if (tc_parse_arch(c, top, top_src)) return -1;
    const target_arch *A = c->table;
    // The multimodal wrapper keeps the text model's keys under text_config (SPEC §2.1); messages name it.
    const cJSON *root = top;
    const char *src = top_src;
    char text_src[4200];
    if (c->multimodal) {
        root = json_field(top, "text_config");
        if (!root || !cJSON_IsObject(root))
            return error_set("%s: %s needs a 'text_config' object (the text model's keys)", top_src, c->arch_name);
        snprintf(text_src, sizeof text_src, "%s: text_config", top_src);
        src = text_src;
    }

    if (tc_required(root, "num_hidden_layers", src, &c->n_layers)) return -1;
    if (tc_required(root, "hidden_size", src, &c->hidden)) return -1;
    // an architecture without dense MLPs (Qwen3.5-MoE: every layer is sparse) has no intermediate_size
    if (!A->no_intermediate && tc_required(root, "intermediate_size", src, &c->intermediate)) return -1;
    if (tc_required(root, "num_attention_heads", src, &c->n_heads)) return -1;
    if (tc_required(root, "vocab_size", src, &c->vocab)) return -1;
    if (tc_bounded(c->n_layers, "num_hidden_layers", TARGET_MAX_LAYERS, src) ||
        tc_bounded(c->hidden, "hidden_size", TARGET_MAX_HIDDEN, src) ||
        tc_bounded(c->intermediate, "intermediate_size", TARGET_MAX_WIDTH, src) ||
        tc_bounded(c->n_heads, "num_attention_heads", TARGET_MAX_HEAD, src) ||
        tc_bounded(c->vocab, "vocab_size", TARGET_MAX_VOCAB, src))
        return -1;

    // A structural key is never defaulted to the config class's value (a published model's: Qwen3's
    // 32 kv heads and head_dim 128, Qwen3.5's 4 and 256): absent is an error naming it, for every
    // architecture whose class has such a default. A null num_key_value_heads is one per query head
    // (transformers' `is None` rule); Llama's absent keys follow its rules (kv heads = query heads,
    // head_dim = hidden / heads), not a default.
    const cJSON *kv = cJSON_GetObjectItemCaseSensitive(root, "num_key_value_heads");
    if (!kv && A->default_kv_heads > 0)
        return error_set("%s: missing 'num_key_value_heads' (a structural key: give it, or null for one per query head)",
                         src);
    c->n_kv_heads = c->n_heads;
    if (json_get_int(root, "num_key_value_heads", "num_key_value_heads", src, &c->n_kv_heads, NULL)) return -1;
    if (c->n_kv_heads <= 0)
        return error_set("%s: 'num_key_value_heads' must be positive, got %lld", src, (long long)c->n_kv_heads);
    if (c->n_heads % c->n_kv_heads != 0)
        return error_set("%s: 'num_key_value_heads' %lld does not divide 'num_attention_heads' %lld", src,
                         (long long)c->n_kv_heads, (long long)c->n_heads);

    int have_head_dim = 0;
    if (json_get_int(root, "head_dim", "head_dim", src, &c->head_dim, &have_head_dim)) return -1;
    if (!have_head_dim) {
        if (A->default_head_dim > 0)
            return error_set("%s: missing 'head_dim' (a structural key; %s has no hidden_size / heads rule)", src,
                             c->arch_name);
        if (c->hidden % c->n_heads != 0)
            return error_set("%s: 'hidden_size' %lld is not a multiple of 'num_attention_heads' %lld"
                             " (and there is no 'head_dim')",
                             src, (long long)c->hidden, (long long)c->n_heads);
        c->head_dim = c->hidden / c->n_heads;
    }
    if (c->head_dim <= 0 || c->head_dim % 2 != 0)
        return error_set("%s: 'head_dim' must be positive and even (RoPE rotates pairs), got %lld", src,
                         (long long)c->head_dim);
    if (tc_bounded(c->n_kv_heads, "num_key_value_heads", TARGET_MAX_HEAD, src) ||
        tc_bounded(c->head_dim, "head_dim", TARGET_MAX_HEAD, src))
        return -1;

    c->max_positions = A->default_max_positions;
    if (json_get_int(root, "max_position_embeddings", "max_position_embeddings", src, &c->max_positions, NULL)) return -1;
    if (c->max_positions <= 0)
        return error_set("%s: 'max_position_embeddings' must be positive, got %lld", src, (long long)c->max_positions);

    c->rms_eps = 1e-6;
    if (json_get_double(root, "rms_norm_eps", "rms_norm_eps", src, &c->rms_eps, NULL)) return -1;
    if (!(c->rms_eps > 0.0) || !(c->rms_eps < 1.0))
        return error_set("%s: 'rms_norm_eps' must be in (0, 1), got %g", src, c->rms_eps);

    // transformers ties on the loaded class's own config: the wrapper's top level for
    // Qwen3_5ForConditionalGeneration (text_config's value is not read), the text config otherwise.
    c->tie_embeddings = A->default_tie;
    if (json_get_bool(top, "tie_word_embeddings", top_src, &c->tie_embeddings, NULL)) return -1;

    // the architecture's own keys: its mixer's (layer types, windows, biases, the hybrid's shapes),
    // its MLP's (experts, the activation)
    if (A->mixer->parse && A->mixer->parse(c, root, src)) return -1;
    if (A->mlp->parse && A->mlp->parse(c, root, src)) return -1;
    // what no architecture's parse took is refused (each family says what it has)
    if (!c->mlp_act) {
        const char *act = "silu";
        if (json_get_string(root, "hidden_act", "hidden_act", src, &act)) return -1;
        if (strcmp(act, "silu") != 0)
            return error_set("%s: 'hidden_act' is \"%s\": only silu is supported for %s", src, act, c->arch_name);
        c->mlp_act = TARGET_ACT_SILU;
    }
    if (!c->qkv_bias && !c->o_bias &&
        tc_refuse_true(root, "attention_bias", src, "biases in q/k/v/o_proj are not supported for this architecture"))
        return -1;
    if (tc_refuse_true(root, "mlp_bias", src, "biases in gate/up/down_proj are not supported")) return -1;
    if (json_get_int(root, "num_nextn_predict_layers", "num_nextn_predict_layers", src, &c->mtp_layers, NULL)) return -1;
    if (c->mtp_layers < 0 || c->mtp_layers > TARGET_MAX_LAYERS)
        return error_set("%s: 'num_nextn_predict_layers' must be in [0, %d], got %lld", src, TARGET_MAX_LAYERS,
                         (long long)c->mtp_layers);
    int windowed = 0;
    for (int64_t i = 0; i < c->n_layers && i < TARGET_MAX_LAYERS; i++) windowed |= c->layer_window[i] > 0;
    if (!windowed && tc_refuse_true(root, "use_sliding_window", src,
                                    "sliding-window attention is not supported for this architecture"))
        return -1;
    if (tc_parse_rope(c, root, src)) return -1;
    if (c->rope_attention_factor != 1.0 && c->rope_dim < c->head_dim) // target_attn_scale: it scales all of q.k
        return error_set("%s: the rope scaling's attention factor is %g with RoPE on %lld of %lld head dims: only 1 is"
                         " supported with partial RoPE", src, c->rope_attention_factor, (long long)c->rope_dim,
                         (long long)c->head_dim);
    int64_t params = target_config_params(c);
    if (params < 0 || params > TARGET_MAX_PARAMS) {
        char n[48];
        if (params < 0) snprintf(n, sizeof n, "more than 2^63");
        else snprintf(n, sizeof n, "%lld", (long long)params);
        return error_set("%s: this shape gives %s parameters, over the %lld this build supports (hidden_size %lld,"
                         " %lld layers, vocab_size %lld%s)", src, n, (long long)TARGET_MAX_PARAMS, (long long)c->hidden,
                         (long long)c->n_layers, (long long)c->vocab, c->moe ? ", the experts" : "");
    }

    // "torch_dtype" (transformers 4.x) or "dtype" (5.x); informational.
    const char *dt = "";
    if (json_get_string(top, "torch_dtype", "torch_dtype", top_src, &dt)) return -1;
    if (json_get_string(top, "dtype", "dtype", top_src, &dt)) return -1;
    snprintf(c->torch_dtype, sizeof c->torch_dtype, "%s", dt);
    return target_quant_parse(&c->quant, top, top_src); // quantization_config (top level or text_config)
}

// A key given twice in obj or an object inside it (Python's json keeps the last one silently; a
// config.json that says two things is refused, naming the key). -1 with error_set.
static int tc_no_duplicates(const cJSON *obj, const char *prefix, const char *source) {
    const cJSON *dup = json_duplicate_key(obj);
    if (dup) return error_set("%s: key '%s%s' is given twice", source, prefix, dup->string);
    const cJSON *v;
    cJSON_ArrayForEach(v, obj) {
        if (!cJSON_IsObject(v)) continue;
        char inner[256];
        snprintf(inner, sizeof inner, "%s%s.", prefix, v->string);
        if (tc_no_duplicates(v, inner, source)) return -1;
    }
    return 0;
}

int target_config_parse(target_config *c, const char *json, const char *source) {
    memset(c, 0, sizeof *c);
    cJSON *root = json_parse_object(json, source, "config.json");
    if (!root) return -1;
    int rc = tc_no_duplicates(root, "", source) ? -1 : tc_parse_root(c, root, source);
    cJSON_Delete(root);
    if (rc) memset(c, 0, sizeof *c);
    return rc;
}

int target_config_load(target_config *c, const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *buf = file_read_text(path, 16u << 20);
    if (!buf) {
        int err = errno;
        if (err == EFBIG) return error_set("%s: larger than 16 MiB, not a config.json", path);
        if (err == EIO) return -1;
        return error_set("%s: %s (is '%s' a Hugging Face model directory?)", path, strerror(err), dir);
    }
    int rc = target_config_parse(c, buf, path);
    free(buf);
    return rc;
}

// ---------------------------------------------------------------- write

char *target_config_to_json(const target_config *c) {
    const target_arch *A = c->table; // a config built by hand (make-target): the table of its family
    for (int i = 0; !A && i < target_n_archs; i++)
        if ((int)c->arch == target_archs[i]->family && c->moe == target_archs[i]->moe) A = target_archs[i];
    if (!A) fatal("target_config_to_json: no architecture of family %d (moe %d)", (int)c->arch, c->moe);
    // cJSON's allocation is plain malloc (the default hooks), so the caller's free() is right.
    return A->mixer->to_json(c, A);
}

// ---------------------------------------------------------------- RoPE frequencies

// Every step is float32, in the order transformers evaluates it (modeling_rope_utils.py,
// _compute_default_rope_parameters / Qwen3RotaryEmbedding.compute_default_rope_parameters and
// _compute_llama3_parameters):
//   inv_freq = 1.0 / (base ** (arange(0, dim, 2).float() / dim))
// then for llama3, with the Python-float scalars rounded to float32 like torch does:
//   wavelen = 2*pi / inv_freq
//   inv_llama = where(wavelen > low_wl, inv_freq / factor, inv_freq)
//   smooth = (old_ctx / wavelen - low) / (high - low)
//   smoothed = (1 - smooth) * inv_llama / factor + smooth * inv_llama
//   inv_llama = where(!(wavelen < high_wl) & !(wavelen > low_wl), smoothed, inv_llama)
// (torch evaluates `scalar / tensor` as reciprocal(tensor) * scalar.)
void target_rope_inv_freq(const target_config *c, float *inv_freq) {
    // head_dim, or its rotary part (partial_rotary_factor); a config built by hand without rope_dim
    // (the drafter's) rotates the whole head
    int64_t dim = c->rope_dim > 0 ? c->rope_dim : c->head_dim;
    float base = (float)c->rope_theta;
    for (int64_t i = 0; i < dim / 2; i++) {
        float e = (float)(2 * i) / (float)dim;
        inv_freq[i] = 1.0f / powf(base, e);
    }
    if (c->rope_linear) {
        for (int64_t i = 0; i < dim / 2; i++) inv_freq[i] /= (float)c->rope_factor;
        return;
    }
    if (c->rope_proportional) { // _compute_proportional_rope_parameters: int(p * dim // 2) angles
        int64_t angles = (int64_t)floor(c->rope_proportion * (double)dim / 2.0);
        for (int64_t i = 0; i < dim / 2; i++) inv_freq[i] = i < angles ? inv_freq[i] / (float)c->rope_factor : 0.0f;
        return;
    }
    if (c->rope_yarn) { // _compute_yarn_parameters: a ramp between interpolated and extrapolated
        double base_d = c->rope_theta, omax = (double)c->rope_original_max_positions;
        double low = (double)dim * log(omax / (c->rope_beta_fast * 2 * M_PI)) / (2 * log(base_d));
        double high = (double)dim * log(omax / (c->rope_beta_slow * 2 * M_PI)) / (2 * log(base_d));
        if (c->rope_truncate) low = floor(low), high = ceil(high);
        if (low < 0) low = 0;
        if (high > (double)(dim - 1)) high = (double)(dim - 1);
        if (low == high) high += 0.001; // transformers: prevent a singularity
        float factor = (float)c->rope_factor;
        for (int64_t i = 0; i < dim / 2; i++) {
            float pos_freq = powf(base, (float)(2 * i) / (float)dim); // base ** (arange(0, dim, 2) / dim)
            float extra = 1.0f / pos_freq, inter = 1.0f / (factor * pos_freq);
            float ramp = ((float)i - (float)low) / (float)(high - low);
            ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
            float ext_factor = 1.0f - ramp;
            inv_freq[i] = inter * (1.0f - ext_factor) + extra * ext_factor;
        }
        return;
    }
    if (!c->rope_llama3) return;
    float factor = (float)c->rope_factor;
    double old_ctx = (double)c->rope_original_max_positions;
    float low_wl = (float)(old_ctx / c->rope_low_freq_factor);
    float high_wl = (float)(old_ctx / c->rope_high_freq_factor);
    float two_pi = (float)(2.0 * M_PI);
    float low = (float)c->rope_low_freq_factor;
    float span = (float)(c->rope_high_freq_factor - c->rope_low_freq_factor);
    for (int64_t i = 0; i < dim / 2; i++) {
        float f = inv_freq[i];
        float wavelen = (1.0f / f) * two_pi;
        float scaled = wavelen > low_wl ? f / factor : f;
        float smooth = ((1.0f / wavelen) * (float)old_ctx - low) / span;
        float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;
        int medium = !(wavelen < high_wl) && !(wavelen > low_wl);
        inv_freq[i] = medium ? smoothed : scaled;
    }
}

// ---------------------------------------------------------------- default feature layers

// z-lab dflash model/utils.py build_target_layer_ids:
//   n == 1: [L // 2]; else int(round(1 + i * (L - 4) / (n - 1))) for i < n
// Python's round is half-to-even, as is rint() in the default rounding mode; the division is a
// double division in both languages, so the results agree bit for bit.
int target_default_layer_ids(int64_t n_layers, int n, int64_t *ids) {
    if (n < 1) return error_set("target layer ids: need at least one feature layer, got %d", n);
    if (n == 1) {
        ids[0] = n_layers / 2;
    } else {
        int64_t span = n_layers - 4;
        for (int i = 0; i < n; i++) ids[i] = (int64_t)rint(1.0 + (double)(i * span) / (double)(n - 1));
    }
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= n_layers)
            return error_set("target layer ids: the default rule gives layer %lld for a %lld-layer target"
                             " with %d features; set target.layer_ids explicitly",
                             (long long)ids[i], (long long)n_layers, n);
    return 0;
}

// ---------------------------------------------------------------- tensor names

void target_names_resolve(target_config *c, const st_dir *d) {
    if (c->multimodal && !safetensors_dir_find(d, "model.language_model.norm.weight") &&
        safetensors_dir_find(d, "language_model.model.norm.weight"))
        snprintf(c->tensor_prefix, sizeof c->tensor_prefix, "language_model.model.");
    if (!safetensors_dir_find(d, "lm_head.weight") && safetensors_dir_find(d, "language_model.lm_head.weight"))
        snprintf(c->head_name, sizeof c->head_name, "language_model.lm_head.weight");
}

// Settings: the keys of the target and the layers that feed the drafter (docs/config.md, Keys; src/settings.c lists every file's).
static const config_key target_keys[] = {
    {"target.path", CFG_STRING, CONFIG_F(target_path), "", "Hugging Face model directory of the target (config.json + safetensors)", NULL, CONFIG_NOLIM},
    {"target.layer_ids", CFG_INT_LIST, CONFIG_F(target_layer_ids), "", "target layers whose hidden states feed the drafter; empty = SPEC §2 default", NULL, 0, 1e6},
    {"target.n_features", CFG_INT, CONFIG_F(n_features), "5", "number of target layers feeding the drafter when target.layer_ids is empty", NULL, 1, 64},
};
const config_key_set target_settings = CONFIG_KEY_SET(target_keys, NULL);
