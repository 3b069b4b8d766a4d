// drafter_config.c: the drafter's config.json, read the way the z-lab `dflash` package reads it and
// written so that `dflash.DFlashDraftModel.from_pretrained` loads it.
//
// The package (dflash/model.py) builds the drafter from a transformers Qwen3Config plus DFlash keys,
// so a Qwen3 key has Qwen3Config's default when absent (transformers 5.x, configuration_qwen3.py),
// except the structural ones, which are required here (the class's values are Qwen3-8B's; issue 27):
//   vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, head_dim,
//   num_key_value_heads (null -> num_attention_heads), each within target_config.h's bounds;
//   hidden_act "silu", max_position_embeddings 32768, rms_norm_eps 1e-6, rope_theta 10000,
//   use_sliding_window false, sliding_window 4096, max_window_layers 28, layer_types null.
// DFlash keys are looked up as the package's _draft_value does: dflash_config.<key>, else the
// top-level <key>:
//   block_size        default 16 (when both spellings are present they must agree)
//   mask_token_id     required
//   target_layer_ids  default build_target_layer_ids(num_target_layers, num_hidden_layers)
//   num_target_layers needed only for that default; checks the ids when present
//
// Sliding layers, as the package builds them (Qwen3DFlashAttention.__init__ + Qwen3Config):
//   - layer_types absent: "sliding_attention" for i >= max_window_layers when the window is in use,
//     else all "full_attention" (Qwen3Config.__post_init__).
//   - The window is in use only when use_sliding_window is true: Qwen3Config sets sliding_window
//     to None otherwise, and the package's sliding layers then run causal with no window
//     (sliding_window = 0 here). A config that names a window with use_sliding_window false is
//     refused as ambiguous (the window it names would silently be dropped).
//   - is_causal: absent/null -> sliding layers causal, full layers bidirectional (sliding_causal 1).
//     false -> every layer bidirectional (sliding_causal 0). true -> every layer causal, which we
//     can express only when no layer is full (sliding_causal 1); with a full layer it is refused.
//   - The package's mask also applies the window between block slots (|k - j| < W); with
//     W >= block_size that never hides a slot, so W < block_size is refused.
// Refused because the package would apply them and the trainer does not: architectures other than
// those of a drafter kind (drafter_kind.c: DFlashDraftModel, DFlash2DraftModel), model_type other than the kind's (qwen3),
// attention_bias true, hidden_act other than silu, non-default RoPE types or a partial rotary
// factor, dflash_config.input_embedding_scale / output_multiplier != 1, final_logit_softcapping > 0.
// A JSON null counts as absent everywhere except num_key_value_heads (see above).
#include "student/model/drafter_config.h"
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
#include "student/model/drafter_kind.h"
#include "teacher/target_config.h"

// ---------------------------------------------------------------- typed field access

// dc_draft_value: the package's _draft_value: dflash_config[key], else root[key] (NULL: neither).
// *name gets the spelling found, for messages.
static const cJSON *dc_draft_value(const cJSON *root, const cJSON *dflash, const char *key, char *name, size_t n) {
    const cJSON *v = json_field(dflash, key);
    if (v) {
        snprintf(name, n, "dflash_config.%s", key);
        return v;
    }
    snprintf(name, n, "%s", key);
    return json_field(root, key);
}

// dc_draft_double: a number looked up like dc_draft_value; absent leaves *out unchanged.
static int dc_draft_double(const cJSON *root, const cJSON *dflash, const char *key, const char *src, double *out,
                           char *name, size_t n) {
    const cJSON *v = dc_draft_value(root, dflash, key, name, n);
    if (!v) return 0;
    if (!cJSON_IsNumber(v)) {
        char s[64];
        json_value_str(v, s, sizeof s);
        return error_set("%s: '%s' wants a number, got %s", src, name, s);
    }
    *out = v->valuedouble;
    return 0;
}

// ---------------------------------------------------------------- parse, part by part

// dc_parse_identity: architectures (the drafter kind), model_type, and the package features we do
// not implement.
static int dc_parse_identity(drafter_config *c, const cJSON *root, const cJSON *dflash, const char *src) {
    char s[160];
    c->kind = drafter_kind_default();
    const cJSON *archs = json_field(root, "architectures");
    if (archs) {
        json_value_str(archs, s, sizeof s);
        const cJSON *a = cJSON_IsArray(archs) ? cJSON_GetArrayItem(archs, 0) : NULL;
        if (!a || !cJSON_IsString(a))
            return error_set("%s: 'architectures' wants a list of names, got %s", src, s);
        c->kind = cJSON_GetArraySize(archs) == 1 ? drafter_kind_by_architecture(a->valuestring) : NULL;
        if (!c->kind) {
            char archs_known[256], kinds_known[256];
            drafter_kind_list(1, 1, archs_known, sizeof archs_known);
            drafter_kind_list(0, 0, kinds_known, sizeof kinds_known);
            return error_set("%s: 'architectures' is %s: only [%s] is supported (one name, of a drafter kind: %s)",
                             src, s, archs_known, kinds_known);
        }
    }
    const char *model_type = c->kind->model_type;
    if (json_get_string(root, "model_type", "model_type", src, &model_type)) return -1;
    if (strcmp(model_type, c->kind->model_type) != 0)
        return error_set("%s: 'model_type' is \"%s\": the %s drafter is a %s model", src, model_type,
                         c->kind->architecture, c->kind->model_type);

    const char *act = "silu";
    if (json_get_string(root, "hidden_act", "hidden_act", src, &act)) return -1;
    if (strcmp(act, "silu") != 0) return error_set("%s: 'hidden_act' is \"%s\": only silu is supported", src, act);
    int bias = 0;
    if (json_get_bool(root, "attention_bias", src, &bias, NULL)) return -1;
    if (bias) return error_set("%s: 'attention_bias' is true: biases in q/k/v/o_proj are not supported", src);

    // Scalings the package applies around the drafter (dflash_generate, compute_logits).
    char name[64];
    double scale = 1.0, out_mult = 1.0, softcap = 0.0;
    if (dc_draft_double(root, dflash, "input_embedding_scale", src, &scale, name, sizeof name)) return -1;
    if (scale != 1.0) return error_set("%s: '%s' is %g: only 1 (no scaling) is supported", src, name, scale);
    if (dc_draft_double(root, dflash, "output_multiplier", src, &out_mult, name, sizeof name)) return -1;
    if (out_mult != 1.0) return error_set("%s: '%s' is %g: only 1 (no scaling) is supported", src, name, out_mult);
    if (dc_draft_double(root, dflash, "final_logit_softcapping", src, &softcap, name, sizeof name)) return -1;
    if (softcap > 0.0) return error_set("%s: '%s' is %g: logit soft-capping is not supported", src, name, softcap);
    return 0;
}

// dc_parse_shape: the Qwen3 sizes (required, bounded).
static int dc_parse_shape(drafter_config *c, const cJSON *root, const char *src) {
    // structural keys: required (never Qwen3Config's defaults, a published model's: issue 27 item 8),
    // each within the target's bounds (target_config.h) before any size is computed from it
    static const char *const keys[6] = {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                                        "num_attention_heads", "head_dim"};
    int64_t *vals[6] = {&c->vocab, &c->hidden, &c->intermediate, &c->n_layers, &c->n_heads, &c->head_dim};
    const int64_t max[6] = {TARGET_MAX_VOCAB, TARGET_MAX_HIDDEN, TARGET_MAX_WIDTH, DRAFTER_MAX_LAYERS, TARGET_MAX_HEAD,
                            TARGET_MAX_HEAD};
    for (int i = 0; i < 6; i++) {
        int found = 0;
        if (json_get_int(root, keys[i], keys[i], src, vals[i], &found)) return -1;
        if (!found) return error_set("%s: missing '%s' (a structural key)", src, keys[i]);
        if (*vals[i] <= 0) return error_set("%s: '%s' must be positive, got %lld", src, keys[i], (long long)*vals[i]);
        if (*vals[i] > max[i])
            return error_set("%s: '%s' is %lld: at most %lld %s supported", src, keys[i], (long long)*vals[i],
                             (long long)max[i], i == 3 ? "drafter layers are" : "is");
    }
    c->max_positions = 32768;
    if (json_get_positive(root, "max_position_embeddings", src, &c->max_positions)) return -1;

    // num_key_value_heads: required; null -> num_attention_heads.
    const cJSON *kv = cJSON_GetObjectItemCaseSensitive(root, "num_key_value_heads");
    if (!kv) return error_set("%s: missing 'num_key_value_heads' (a structural key: give it, or null for one per query head)", src);
    c->n_kv_heads = c->n_heads;
    if (!cJSON_IsNull(kv) && json_int_value(kv, "num_key_value_heads", src, &c->n_kv_heads)) return -1;
    if (c->n_kv_heads <= 0)
        return error_set("%s: 'num_key_value_heads' must be positive, got %lld", src, (long long)c->n_kv_heads);
    if (c->n_heads % c->n_kv_heads != 0)
        return error_set("%s: 'num_key_value_heads' %lld does not divide 'num_attention_heads' %lld", src,
                         (long long)c->n_kv_heads, (long long)c->n_heads);
    if (c->head_dim % 2 != 0)
        return error_set("%s: 'head_dim' must be even (RoPE rotates pairs), got %lld", src, (long long)c->head_dim);

    c->rms_eps = 1e-6;
    if (json_get_double(root, "rms_norm_eps", "rms_norm_eps", src, &c->rms_eps, NULL)) return -1;
    if (!(c->rms_eps > 0.0) || !(c->rms_eps < 1.0))
        return error_set("%s: 'rms_norm_eps' must be in (0, 1), got %g", src, c->rms_eps);
    return 0;
}

// dc_parse_rope: rope_theta from rope_scaling / rope_parameters / the top level (as target_config.c:
// a non-empty rope_scaling wins over rope_parameters, a theta inside the dict over the top-level
// one); only the default rope type, on the whole head.
static int dc_parse_rope(drafter_config *c, const cJSON *root, const char *src) {
    const cJSON *scaling = json_field(root, "rope_scaling");
    const cJSON *rope = NULL;
    const char *field = NULL;
    if (scaling && !(cJSON_IsObject(scaling) && scaling->child == NULL)) {
        rope = scaling;
        field = "rope_scaling";
    } else if (json_field(root, "rope_parameters")) {
        rope = json_field(root, "rope_parameters");
        field = "rope_parameters";
    }
    char s[160], name[96];
    if (rope && !cJSON_IsObject(rope)) {
        json_value_str(rope, s, sizeof s);
        return error_set("%s: '%s' wants an object, got %s", src, field, s);
    }
    c->rope_theta = 10000.0;
    if (json_get_double(root, "rope_theta", "rope_theta", src, &c->rope_theta, NULL)) return -1;
    double partial = 1.0;
    if (json_get_double(root, "partial_rotary_factor", "partial_rotary_factor", src, &partial, NULL)) return -1;
    if (rope) {
        snprintf(name, sizeof name, "%s.rope_theta", field);
        if (json_get_double(rope, "rope_theta", name, src, &c->rope_theta, NULL)) return -1;
        snprintf(name, sizeof name, "%s.partial_rotary_factor", field);
        if (json_get_double(rope, "partial_rotary_factor", name, src, &partial, NULL)) return -1;
        const char *type = "default";
        snprintf(name, sizeof name, "%s.type", field);
        if (json_get_string(rope, "type", name, src, &type)) return -1;
        snprintf(name, sizeof name, "%s.rope_type", field);
        if (json_get_string(rope, "rope_type", name, src, &type)) return -1;
        if (strcmp(type, "default") != 0)
            return error_set("%s: '%s.rope_type' is \"%s\": the drafter supports only the default RoPE", src, field,
                             type);
    }
    if (!(c->rope_theta > 1.0) || !isfinite(c->rope_theta))
        return error_set("%s: 'rope_theta' must be a finite number > 1, got %g", src, c->rope_theta);
    if (partial != 1.0)
        return error_set("%s: 'partial_rotary_factor' is %g: only 1.0 (RoPE on the whole head) is supported", src,
                         partial);
    return 0;
}

// dc_parse_dflash: block_size, mask_token_id, num_target_layers, target_layer_ids.
static int dc_parse_dflash(drafter_config *c, const cJSON *root, const cJSON *dflash, const char *src) {
    char name[64], s[160];
    // block_size: both spellings may be present (z-lab writes it at the top level, DFlash2 inside
    // dflash_config); the package takes dflash_config's, so a disagreement is refused.
    c->block_size = 16;
    int found = 0;
    if (json_get_int(root, "block_size", "block_size", src, &c->block_size, &found)) return -1;
    if (dflash) {
        int64_t inner = c->block_size;
        int inner_found = 0;
        if (json_get_int(dflash, "block_size", "block_size", src, &inner, &inner_found)) return -1;
        if (inner_found && found && inner != c->block_size)
            return error_set("%s: 'dflash_config.block_size' %lld and 'block_size' %lld disagree", src,
                             (long long)inner, (long long)c->block_size);
        c->block_size = inner;
    }
    if (c->block_size < 2)
        return error_set("%s: 'block_size' must be at least 2 (slot 0 is never scored), got %lld", src,
                         (long long)c->block_size);
    if (c->block_size > 1024) // drafter.block_size's bound (config.c)
        return error_set("%s: 'block_size' %lld is over 1024", src, (long long)c->block_size);

    const cJSON *v = dc_draft_value(root, dflash, "mask_token_id", name, sizeof name);
    if (!v) return error_set("%s: missing 'dflash_config.mask_token_id'", src);
    if (json_int_value(v, name, src, &c->mask_token_id)) return -1;
    if (c->mask_token_id < 0 || c->mask_token_id >= c->vocab)
        return error_set("%s: '%s' %lld is outside the vocabulary [0, %lld)", src, name, (long long)c->mask_token_id,
                         (long long)c->vocab);

    c->num_target_layers = 0;
    v = dc_draft_value(root, dflash, "num_target_layers", name, sizeof name);
    if (v && json_int_value(v, name, src, &c->num_target_layers)) return -1;
    if (v && c->num_target_layers <= 0)
        return error_set("%s: '%s' must be positive, got %lld", src, name, (long long)c->num_target_layers);

    v = dc_draft_value(root, dflash, "target_layer_ids", name, sizeof name);
    if (!v) {
        // The package's default: build_target_layer_ids(num_target_layers, num_hidden_layers).
        if (c->num_target_layers <= 0)
            return error_set("%s: missing 'dflash_config.target_layer_ids' (and no 'num_target_layers' to derive them)",
                             src);
        if (c->n_layers > DRAFTER_MAX_FEAT)
            return error_set("%s: %lld default target layers: at most %d features are supported", src,
                             (long long)c->n_layers, DRAFTER_MAX_FEAT);
        c->n_feat = (int)c->n_layers;
        if (target_default_layer_ids(c->num_target_layers, c->n_feat, c->target_layer_ids))
            return error_prefix("%s: no 'dflash_config.target_layer_ids'", src);
        return 0;
    }
    json_value_str(v, s, sizeof s);
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) < 1)
        return error_set("%s: '%s' wants a non-empty list of layer ids, got %s", src, name, s);
    if (cJSON_GetArraySize(v) > DRAFTER_MAX_FEAT)
        return error_set("%s: '%s' has %d ids: at most %d are supported", src, name, cJSON_GetArraySize(v),
                         DRAFTER_MAX_FEAT);
    c->n_feat = 0;
    for (const cJSON *e = v->child; e; e = e->next) {
        char item[80];
        snprintf(item, sizeof item, "%s[%d]", name, c->n_feat);
        int64_t id = 0;
        if (json_int_value(e, item, src, &id)) return -1;
        if (id < 0 || (c->num_target_layers > 0 && id >= c->num_target_layers))
            return error_set("%s: '%s' is %lld: outside the target's layers [0, %lld)", src, item, (long long)id,
                             (long long)c->num_target_layers);
        c->target_layer_ids[c->n_feat++] = id;
    }
    return 0;
}

// dc_parse_attention: layer_types, the sliding window and is_causal (see the top of the file).
static int dc_parse_attention(drafter_config *c, const cJSON *root, const char *src) {
    char s[160];
    int use_window = 0;
    if (json_get_bool(root, "use_sliding_window", src, &use_window, NULL)) return -1;
    // sliding_window: absent -> 4096 (Qwen3Config), null -> None, then None unless use_sliding_window.
    const cJSON *sw = cJSON_GetObjectItemCaseSensitive(root, "sliding_window");
    int64_t window = 4096;
    if (sw && cJSON_IsNull(sw)) window = 0;
    else if (sw && json_int_value(sw, "sliding_window", src, &window)) return -1;
    if (sw && !cJSON_IsNull(sw) && window <= 0)
        return error_set("%s: 'sliding_window' must be positive or null, got %lld", src, (long long)window);
    int64_t effective = use_window ? window : 0;

    const cJSON *types = json_field(root, "layer_types");
    int any_sliding = 0, any_full = 0;
    if (types) {
        json_value_str(types, s, sizeof s);
        if (!cJSON_IsArray(types)) return error_set("%s: 'layer_types' wants a list, got %s", src, s);
        if (cJSON_GetArraySize(types) != c->n_layers)
            return error_set("%s: 'layer_types' has %d entries but 'num_hidden_layers' is %lld", src,
                             cJSON_GetArraySize(types), (long long)c->n_layers);
        int i = 0;
        for (const cJSON *t = types->child; t; t = t->next, i++) {
            if (cJSON_IsString(t) && strcmp(t->valuestring, "sliding_attention") == 0) {
                c->layer_sliding[i] = 1;
            } else if (cJSON_IsString(t) && strcmp(t->valuestring, "full_attention") == 0) {
                c->layer_sliding[i] = 0;
            } else {
                json_value_str(t, s, sizeof s);
                return error_set("%s: 'layer_types[%d]' is %s: expected \"full_attention\" or \"sliding_attention\"",
                                 src, i, s);
            }
        }
    } else {
        int64_t max_window_layers = 28;
        if (json_get_int(root, "max_window_layers", "max_window_layers", src, &max_window_layers, NULL)) return -1;
        for (int64_t i = 0; i < c->n_layers; i++) c->layer_sliding[i] = effective > 0 && i >= max_window_layers;
    }
    for (int64_t i = 0; i < c->n_layers; i++) {
        any_sliding |= c->layer_sliding[i];
        any_full |= !c->layer_sliding[i];
    }

    c->sliding_window = 0;
    if (any_sliding) {
        if (!use_window && sw && !cJSON_IsNull(sw))
            return error_set("%s: 'sliding_window' is %lld but 'use_sliding_window' is not true: transformers' Qwen3Config"
                             " then drops the window and the dflash package runs the sliding layers without one;"
                             " set use_sliding_window true, or sliding_window null for no window",
                             src, (long long)window);
        c->sliding_window = effective;
        if (c->sliding_window > 0 && c->sliding_window < c->block_size)
            return error_set("%s: 'sliding_window' %lld is smaller than the block size %lld: the dflash package's window"
                             " would then hide block slots too, which is not supported",
                             src, (long long)c->sliding_window, (long long)c->block_size);
    }

    // is_causal overrides the per-layer default for every layer (Qwen3DFlashAttention.__init__).
    int is_causal = 0, have_causal = 0;
    if (json_get_bool(root, "is_causal", src, &is_causal, &have_causal)) return -1;
    c->sliding_causal = 1;
    if (have_causal && !is_causal) c->sliding_causal = 0;
    if (have_causal && is_causal && any_full)
        return error_set("%s: 'is_causal' is true: the dflash package then makes the full_attention layers causal"
                         " too, which is not supported (full layers see their whole block)", src);
    return 0;
}

static int dc_parse_root(drafter_config *c, const cJSON *root, const char *src) {
    const cJSON *dflash = json_field(root, "dflash_config");
    if (dflash && !cJSON_IsObject(dflash)) {
        char s[160];
        json_value_str(dflash, s, sizeof s);
        return error_set("%s: 'dflash_config' wants an object, got %s", src, s);
    }
    if (dc_parse_identity(c, root, dflash, src)) return -1;
    if (dc_parse_shape(c, root, src)) return -1;
    if (dc_parse_rope(c, root, src)) return -1;
    if (dc_parse_dflash(c, root, dflash, src)) return -1;
    if (dc_parse_attention(c, root, src)) return -1;
    if (c->kind->defaults) c->kind->defaults(c);
    if (c->kind->config_parse && c->kind->config_parse(c, root, dflash, src)) return -1;
    // "torch_dtype" (transformers 4.x) or "dtype" (5.x); informational.
    const char *dt = "";
    if (json_get_string(root, "torch_dtype", "torch_dtype", src, &dt)) return -1;
    if (json_get_string(root, "dtype", "dtype", src, &dt)) return -1;
    snprintf(c->torch_dtype, sizeof c->torch_dtype, "%s", dt);
    return 0;
}

int drafter_config_parse(drafter_config *c, const char *json, const char *source) {
    memset(c, 0, sizeof *c);
    cJSON *root = json_parse_text(json, source);
    if (!root) return -1;
    int rc = cJSON_IsObject(root) ? dc_parse_root(c, root, source)
                                  : error_set("%s: config.json must be a JSON object", source);
    cJSON_Delete(root);
    if (rc) memset(c, 0, sizeof *c);
    return rc;
}

int drafter_config_load(drafter_config *c, const char *path) {
    char *buf = file_read_text(path, 16u << 20);
    if (!buf) return errno == EFBIG ? error_set("%s: larger than 16 MiB, not a config.json", path) : -1;
    int rc = drafter_config_parse(c, buf, path);
    free(buf);
    return rc;
}

// ---------------------------------------------------------------- write

char *drafter_config_to_json(const drafter_config *c) {
    int any_sliding = 0;
    for (int64_t i = 0; i < c->n_layers; i++) any_sliding |= c->layer_sliding[i];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "architectures"), cJSON_CreateString(c->kind->architecture));
    cJSON_AddStringToObject(o, "model_type", c->kind->model_type);
    cJSON_AddNumberToObject(o, "vocab_size", (double)c->vocab);
    cJSON_AddNumberToObject(o, "hidden_size", (double)c->hidden);
    cJSON_AddNumberToObject(o, "intermediate_size", (double)c->intermediate);
    cJSON_AddNumberToObject(o, "num_hidden_layers", (double)c->n_layers);
    cJSON_AddNumberToObject(o, "num_attention_heads", (double)c->n_heads);
    cJSON_AddNumberToObject(o, "num_key_value_heads", (double)c->n_kv_heads);
    cJSON_AddNumberToObject(o, "head_dim", (double)c->head_dim);
    cJSON_AddStringToObject(o, "hidden_act", "silu");
    cJSON_AddNumberToObject(o, "max_position_embeddings", (double)c->max_positions);
    json_add_float_py(o, "rms_norm_eps", c->rms_eps);
    // The legacy spelling, read by transformers 4.x and 5.x alike (5.x folds it into rope_parameters).
    json_add_float_py(o, "rope_theta", c->rope_theta);
    cJSON_AddNullToObject(o, "rope_scaling");
    cJSON_AddBoolToObject(o, "attention_bias", 0);
    json_add_float_py(o, "attention_dropout", 0.0);
    cJSON_AddBoolToObject(o, "tie_word_embeddings", 0);
    cJSON *types = cJSON_AddArrayToObject(o, "layer_types");
    for (int64_t i = 0; i < c->n_layers; i++)
        cJSON_AddItemToArray(types, cJSON_CreateString(c->layer_sliding[i] ? "sliding_attention" : "full_attention"));
    // Qwen3Config keeps sliding_window only with use_sliding_window true.
    int window = any_sliding && c->sliding_window > 0;
    cJSON_AddBoolToObject(o, "use_sliding_window", window);
    if (window) cJSON_AddNumberToObject(o, "sliding_window", (double)c->sliding_window);
    else cJSON_AddNullToObject(o, "sliding_window");
    cJSON_AddNumberToObject(o, "max_window_layers", (double)c->n_layers);
    // Only the non-default needs saying: absent is_causal = sliding layers causal, full ones not.
    if (!c->sliding_causal) cJSON_AddBoolToObject(o, "is_causal", 0);
    if (c->num_target_layers > 0) cJSON_AddNumberToObject(o, "num_target_layers", (double)c->num_target_layers);
    // z-lab's drafters carry block_size at the top level; the package reads dflash_config first.
    cJSON_AddNumberToObject(o, "block_size", (double)c->block_size);
    cJSON *d = cJSON_AddObjectToObject(o, "dflash_config");
    cJSON_AddNumberToObject(d, "block_size", (double)c->block_size);
    cJSON_AddNumberToObject(d, "mask_token_id", (double)c->mask_token_id);
    cJSON *ids = cJSON_AddArrayToObject(d, "target_layer_ids");
    for (int i = 0; i < c->n_feat; i++) cJSON_AddItemToArray(ids, cJSON_CreateNumber((double)c->target_layer_ids[i]));
    if (c->kind->config_write) c->kind->config_write(c, o, d);
    cJSON_AddStringToObject(o, "torch_dtype", c->torch_dtype[0] ? c->torch_dtype : "float32");
    cJSON_AddBoolToObject(o, "use_cache", 1);
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    if (!text) fatal("drafter_config_to_json: out of memory");
    return text; // cJSON allocates with plain malloc: the caller's free() is right
}

// Settings: the keys of the drafter's kind and shape (docs/config.md, Keys; src/settings.c lists every file's).
static const config_key drafter_keys[] = {
    {"drafter.kind", CFG_STRING, CONFIG_F(drafter_kind), "dflash", "the kind of drafter trained: dflash or dflash2 (DFlash2DraftModel: grouped dynamic causal convolutions; with its candidate selector; src/student/model/drafter_kind.c lists them); a drafter.config file must be of this kind (--mode eval takes the kind of eval.drafter)", NULL, CONFIG_NOLIM},
    {"drafter.block_size", CFG_INT, CONFIG_F(block_size), "16", "block size B: slots per anchor (16 or 32 in the public drafters)", NULL, 2, 1024},
    {"drafter.layers", CFG_INT, CONFIG_F(drafter_layers), "1", "drafter decoder layers (the public drafters use 5)", NULL, 1, 64},
    {"drafter.intermediate", CFG_INT, CONFIG_F(drafter_intermediate), "0", "drafter MLP size; 0 = the target's", NULL, 0, 1e7},
    {"drafter.heads", CFG_INT, CONFIG_F(drafter_heads), "0", "drafter query heads; 0 = the target's", NULL, 0, 4096},
    {"drafter.kv_heads", CFG_INT, CONFIG_F(drafter_kv_heads), "0", "drafter key/value heads; 0 = the target's", NULL, 0, 4096},
    {"drafter.head_dim", CFG_INT, CONFIG_F(drafter_head_dim), "0", "drafter head dimension; 0 = the target's", NULL, 0, 1024},
    {"drafter.mask_token_id", CFG_INT, CONFIG_F(mask_token_id), "-1", "MASK token: an unused row of the target vocabulary; -1 = vocab_size - 1 (Qwen3: 151669)", NULL, -1, 1e9},
    {"drafter.sliding_window", CFG_INT, CONFIG_F(sliding_window), "0", "> 0: every layer but the last is a sliding-window layer with this window (the 27B drafter layout)", NULL, 0, 1e9},
    {"drafter.config", CFG_STRING, CONFIG_F(drafter_config_path), "", "a DFlash drafter config.json, or a directory holding one (a published drafter's, or run.dir/drafter of an earlier run): the drafter's shape (layers, heads, sizes, block size, MASK token, sliding window, target layer ids) comes from it instead of the drafter.* keys; its hidden size, vocabulary and num_target_layers must match the target's", NULL, CONFIG_NOLIM},
};
const config_key_set drafter_settings = CONFIG_KEY_SET(drafter_keys, NULL);
