// target_dense.c: the dense attention of Qwen3, Llama, Qwen2 and Mistral targets (transformers'
// models/qwen3, llama, qwen2, mistral) and their tables, qwen3, llama, qwen2 and mistral
// (target_arch.h); its parts serve the other families with this attention (Gemma 3 and 4, GLM-4.5,
// gpt-oss: target_dense_layer_tensors, target_dense_attn_project, ...). The residual frame, the SwiGLU MLP and the lm_head are target.c's.
//
// Per token (nq query heads, nkv kv heads, head_dim hd):
//   q = q_proj(x) (+ bq), k = k_proj(x) (+ bk), v = v_proj(x) (+ bv)   per head (biases: c->qkv_bias)
//   q = q_norm(q), k = k_norm(k)                    per-head RMSNorm of hd (c->qk_norm: Qwen3, Gemma 3)
//   RoPE on q and k, on the first rope_dim dims of a head (rope_theta, llama3 / linear / yarn
//   scaling: m->inv_freq; a sliding layer of Gemma 3: m->inv_freq_local)
//   out = o_proj(causal GQA attention(q, k, v)) (+ bo), scale target_attn_scale (hd^-0.5 unless the
//   family says), a sliding window where c->layer_window says, sinks where c->attn_sinks says
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/json_util.h"
#include "common/kernels/ops.h"
#include "teacher/target.h"
#include "teacher/target_arch.h"

int target_parse_layer_types(target_config *c, const cJSON *root, const char *src, int64_t window) {
    const cJSON *types = json_field(root, "layer_types");
    if (!types) return 0;
    char s[160];
    json_value_str(types, s, sizeof s);
    if (!cJSON_IsArray(types)) return error_set("%s: 'layer_types' wants a list, got %s", src, s);
    if (cJSON_GetArraySize(types) != c->n_layers) // one entry per layer, as for the hybrid
        return error_set("%s: 'layer_types' has %d entries for %lld layers ('num_hidden_layers')", src,
                         cJSON_GetArraySize(types), (long long)c->n_layers);
    int i = 0;
    for (const cJSON *t = types->child; t; t = t->next, i++) {
        int full = cJSON_IsString(t) && strcmp(t->valuestring, "full_attention") == 0;
        int sliding = cJSON_IsString(t) && strcmp(t->valuestring, "sliding_attention") == 0;
        if (full || (sliding && window > 0)) {
            c->layer_window[i] = sliding ? (int32_t)window : 0;
            continue;
        }
        json_value_str(t, s, sizeof s);
        return error_set("%s: 'layer_types[%d]' is %s: %s", src, i, s,
                         sliding ? "sliding_attention needs a 'sliding_window' (null or absent here)"
                                 : window > 0 ? "want full_attention or sliding_attention" : "only full_attention is supported");
    }
    return 0;
}

int target_parse_window(const cJSON *root, const char *src, int64_t *window) {
    *window = 0;
    const cJSON *w = json_field(root, "sliding_window");
    if (!w) return 0; // absent or null: no window
    if (json_get_int(root, "sliding_window", "sliding_window", src, window, NULL)) return -1;
    if (*window < 1 || *window > INT32_MAX)
        return error_set("%s: 'sliding_window' must be a positive number of tokens, got %lld", src, (long long)*window);
    return 0;
}

// dense_parse: every layer is full attention (a layer_types list, when given, must say so for each
// of num_hidden_layers layers).
static int dense_parse(target_config *c, const cJSON *root, const char *src) {
    return target_parse_layer_types(c, root, src, 0);
}

// Qwen2: q/k/v biases always; sliding layers only with use_sliding_window (the layers from
// max_window_layers on, or as layer_types says), as Qwen2Config.__post_init__ derives them.
static int qwen2_parse(target_config *c, const cJSON *root, const char *src) {
    c->qkv_bias = 1;
    int use = 0;
    if (json_get_bool(root, "use_sliding_window", src, &use, NULL)) return -1;
    int64_t window = 0, from = 28;
    if (use && target_parse_window(root, src, &window)) return -1;
    if (json_get_int(root, "max_window_layers", "max_window_layers", src, &from, NULL)) return -1;
    if (json_field(root, "layer_types")) return target_parse_layer_types(c, root, src, window);
    for (int64_t i = 0; i < c->n_layers; i++) c->layer_window[i] = window > 0 && i >= from ? (int32_t)window : 0;
    return 0;
}

// Mistral: every layer under sliding_window when it is given (MistralConfig's default 4096 when
// the key is absent; null: none); a layer_types list is refused, as transformers warns it is
// ignored by this class (Ministral's).
static int mistral_parse(target_config *c, const cJSON *root, const char *src) {
    int64_t window = 4096;
    if (cJSON_GetObjectItemCaseSensitive(root, "sliding_window") && target_parse_window(root, src, &window)) return -1;
    if (json_field(root, "layer_types"))
        return error_set("%s: 'layer_types' is given: MistralForCausalLM ignores it (Ministral's alternating attention"
                         " is not supported)", src);
    for (int64_t i = 0; i < c->n_layers; i++) c->layer_window[i] = (int32_t)window;
    return 0;
}

static int qwen3_parse(target_config *c, const cJSON *root, const char *src) {
    c->qk_norm = 1;
    return dense_parse(c, root, src);
}

void target_dense_layer_tensors(target_model *m, int64_t l, const char *P, target_tensor_list *list) {
    const target_config *c = &m->cfg;
    target_layer *L = &m->layers[l];
    int64_t H = c->hidden, hd = target_layer_head_dim(c, l), q_out = c->n_heads * hd;
    int64_t kv_out = target_layer_kv_heads(c, l) * hd;
    int v_is_k = c->attn_k_eq_v && c->layer_window[l] == 0; // Gemma 4's full layers: no v_proj
    long long ll = (long long)l;
#define ATTN_FMT "%slayers.%lld.self_attn.%s"
    target_tensor_add(list, &L->wq, 0, 2, q_out, H, 0, ATTN_FMT, P, ll, "q_proj.weight");
    if (c->qkv_bias) target_tensor_add(list, &L->bq, 0, 1, q_out, 0, 0, ATTN_FMT, P, ll, "q_proj.bias");
    target_tensor_add(list, &L->wk, 0, 2, kv_out, H, 0, ATTN_FMT, P, ll, "k_proj.weight");
    if (c->qkv_bias) target_tensor_add(list, &L->bk, 0, 1, kv_out, 0, 0, ATTN_FMT, P, ll, "k_proj.bias");
    if (!v_is_k) target_tensor_add(list, &L->wv, 0, 2, kv_out, H, 0, ATTN_FMT, P, ll, "v_proj.weight");
    if (c->qkv_bias && !v_is_k) target_tensor_add(list, &L->bv, 0, 1, kv_out, 0, 0, ATTN_FMT, P, ll, "v_proj.bias");
    target_tensor_add(list, &L->wo, 0, 2, H, q_out, 0, ATTN_FMT, P, ll, "o_proj.weight");
    if (c->o_bias) target_tensor_add(list, &L->bo, 0, 1, H, 0, 0, ATTN_FMT, P, ll, "o_proj.bias");
    if (c->qk_norm) {
        target_tensor_add(list, &L->q_norm, 0, 1, hd, 0, 0, ATTN_FMT, P, ll, "q_norm.weight");
        target_tensor_add(list, &L->k_norm, 0, 1, hd, 0, 0, ATTN_FMT, P, ll, "k_norm.weight");
    }
    if (c->attn_sinks) target_tensor_add(list, (void **)&L->sinks, 1, 1, c->n_heads, 0, 0, ATTN_FMT, P, ll, "sinks");
#undef ATTN_FMT
}

// dense_linear_bias: y = x @ W^T (+ b when b is not NULL).
static void dense_linear_bias(backend *be, void *y, const void *x, const void *W, const void *b, int T, int in, int out) {
    target_linear(be, y, x, W, T, in, out);
    if (b) ops_bias_add(be, y, b, T, out);
}

void target_dense_attn_project(const target_model *m, int l, target_work *w, int T) {
    const target_config *c = &m->cfg;
    const target_layer *L = &m->layers[l];
    backend *be = m->be;
    int H = (int)c->hidden, hd = (int)target_layer_head_dim(c, l), nq = (int)c->n_heads;
    int nkv = (int)target_layer_kv_heads(c, l);
    // the rotary dims: a sliding layer with a base of its own rotates its whole head (Gemma)
    int rot = c->layer_window[l] > 0 && c->rope_theta_local > 0 ? hd : (int)(c->rope_dim > 0 ? c->rope_dim : hd);
    dense_linear_bias(be, w->q, w->xn, L->wq, L->bq, T, H, nq * hd);
    dense_linear_bias(be, w->k, w->xn, L->wk, L->bk, T, H, nkv * hd);
    if (L->wv) dense_linear_bias(be, w->v, w->xn, L->wv, L->bv, T, H, nkv * hd);
    else ops_copy_2d(be, w->v, nkv * hd, w->k, nkv * hd, T, nkv * hd); // Gemma 4's k_eq_v: v = k_proj(x)
    if (c->qk_norm) { // per-head RMSNorm before RoPE
        target_norm(m, w->q, w->q, L->q_norm, T * nq, hd);
        target_norm(m, w->k, w->k, L->k_norm, T * nkv, hd);
    }
    if (c->v_norm) ops_rmsnorm(be, w->v, w->v, m->ones, T * nkv, hd, (float)c->rms_eps); // no weight (Gemma 4)
    const float *inv = target_layer_inv_freq(m, l);
    if (rot == hd) {
        ops_rope(be, w->q, w->pos, inv, T, nq, hd);
        ops_rope(be, w->k, w->pos, inv, T, nkv, hd);
    } else { // partial rotary (GLM-4.5): the first rot dims of each head
        ops_rope_partial(be, w->q, w->pos, inv, T, nq, hd, rot);
        ops_rope_partial(be, w->k, w->pos, inv, T, nkv, hd, rot);
    }
}

void target_dense_attn_finish(const target_model *m, int l, target_work *w, int T) {
    const target_config *c = &m->cfg;
    const target_layer *L = &m->layers[l];
    dense_linear_bias(m->be, w->xn, w->att, L->wo, L->bo, T, (int)(c->n_heads * target_layer_head_dim(c, l)),
                      (int)c->hidden);
}

void target_dense_forward(const target_model *m, int l, target_work *w, int T, int n_seq, void *conv_state,
                          float *rec_state) {
    (void)conv_state, (void)rec_state;
    target_dense_attn_project(m, l, w, T);
    target_attention(m, l, w, T, n_seq);
    target_dense_attn_finish(m, l, w, T);
}

// dense_to_json: a config.json of table A's class (qwen3: Qwen3Config's sliding-window keys; else
// LlamaConfig's mlp_bias and pretraining_tp).
static char *dense_to_json(const target_config *c, const target_arch *A, int qwen3) {
    const target_arch_class *cls = &A->classes[0];
    cJSON *o = cJSON_CreateObject();
    cJSON *archs = cJSON_AddArrayToObject(o, "architectures");
    cJSON_AddItemToArray(archs, cJSON_CreateString(c->arch_name[0] ? c->arch_name : cls->class_name));
    cJSON_AddStringToObject(o, "model_type", cls->model_type);
    cJSON_AddNumberToObject(o, "vocab_size", (double)c->vocab);
    cJSON_AddNumberToObject(o, "hidden_size", (double)c->hidden);
    A->mlp->to_json(o, c);
    cJSON_AddNumberToObject(o, "num_hidden_layers", (double)c->n_layers);
    cJSON_AddNumberToObject(o, "num_attention_heads", (double)c->n_heads);
    cJSON_AddNumberToObject(o, "num_key_value_heads", (double)c->n_kv_heads);
    cJSON_AddNumberToObject(o, "head_dim", (double)c->head_dim);
    cJSON_AddStringToObject(o, "hidden_act", "silu");
    cJSON_AddNumberToObject(o, "max_position_embeddings", (double)c->max_positions);
    json_add_float_py(o, "rms_norm_eps", c->rms_eps);
    // The legacy spelling (rope_theta + rope_scaling) is read by transformers 4.x and 5.x alike.
    json_add_float_py(o, "rope_theta", c->rope_theta);
    if (c->rope_llama3) {
        cJSON *r = cJSON_AddObjectToObject(o, "rope_scaling");
        cJSON_AddStringToObject(r, "rope_type", "llama3");
        json_add_float_py(r, "factor", c->rope_factor);
        json_add_float_py(r, "low_freq_factor", c->rope_low_freq_factor);
        json_add_float_py(r, "high_freq_factor", c->rope_high_freq_factor);
        cJSON_AddNumberToObject(r, "original_max_position_embeddings", (double)c->rope_original_max_positions);
    } else {
        cJSON_AddNullToObject(o, "rope_scaling");
    }
    cJSON_AddBoolToObject(o, "tie_word_embeddings", c->tie_embeddings != 0);
    cJSON_AddBoolToObject(o, "attention_bias", 0);
    json_add_float_py(o, "attention_dropout", 0.0);
    if (qwen3) {
        cJSON_AddBoolToObject(o, "use_sliding_window", 0);
        cJSON_AddNullToObject(o, "sliding_window");
        cJSON_AddNumberToObject(o, "max_window_layers", (double)c->n_layers);
    } else {
        cJSON_AddBoolToObject(o, "mlp_bias", 0);
        cJSON_AddNumberToObject(o, "pretraining_tp", 1);
    }
    json_add_float_py(o, "initializer_range", 0.02);
    cJSON_AddBoolToObject(o, "use_cache", 1);
    if (c->torch_dtype[0]) cJSON_AddStringToObject(o, "torch_dtype", c->torch_dtype);
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    if (!text) fatal("dense_to_json: out of memory");
    // cJSON's allocation is plain malloc (the default hooks), so the caller's free() is right.
    return text;
}

static char *qwen3_to_json(const target_config *c, const target_arch *A) { return dense_to_json(c, A, 1); }
static char *llama_to_json(const target_config *c, const target_arch *A) { return dense_to_json(c, A, 0); }

// ---------------------------------------------------------------- config.json of the other families
// The shared keys of their to_json (target.h), in transformers 5's spelling (rope_parameters, dtype).

cJSON *target_json_begin(const target_config *c, const target_arch *A) {
    const target_arch_class *cls = target_arch_class_of(A, 0);
    cJSON *o = cJSON_CreateObject();
    cJSON *archs = cJSON_AddArrayToObject(o, "architectures");
    cJSON_AddItemToArray(archs, cJSON_CreateString(cls->class_name));
    cJSON_AddStringToObject(o, "model_type", cls->model_type);
    cJSON_AddNumberToObject(o, "vocab_size", (double)c->vocab);
    cJSON_AddNumberToObject(o, "hidden_size", (double)c->hidden);
    cJSON_AddNumberToObject(o, "num_hidden_layers", (double)c->n_layers);
    cJSON_AddNumberToObject(o, "num_attention_heads", (double)c->n_heads);
    cJSON_AddNumberToObject(o, "num_key_value_heads", (double)c->n_kv_heads);
    cJSON_AddNumberToObject(o, "max_position_embeddings", (double)c->max_positions);
    json_add_float_py(o, "rms_norm_eps", c->rms_eps);
    cJSON_AddBoolToObject(o, "tie_word_embeddings", c->tie_embeddings != 0);
    return o;
}

void target_json_rope(cJSON *r, const target_config *c, double theta) {
    json_add_float_py(r, "rope_theta", theta);
    if (c->rope_llama3) {
        cJSON_AddStringToObject(r, "rope_type", "llama3");
        json_add_float_py(r, "factor", c->rope_factor);
        json_add_float_py(r, "low_freq_factor", c->rope_low_freq_factor);
        json_add_float_py(r, "high_freq_factor", c->rope_high_freq_factor);
        cJSON_AddNumberToObject(r, "original_max_position_embeddings", (double)c->rope_original_max_positions);
    } else if (c->rope_linear) {
        cJSON_AddStringToObject(r, "rope_type", "linear");
        json_add_float_py(r, "factor", c->rope_factor);
    } else if (c->rope_yarn) {
        cJSON_AddStringToObject(r, "rope_type", "yarn");
        json_add_float_py(r, "factor", c->rope_factor);
        cJSON_AddNumberToObject(r, "original_max_position_embeddings", (double)c->rope_original_max_positions);
        json_add_float_py(r, "beta_fast", c->rope_beta_fast);
        json_add_float_py(r, "beta_slow", c->rope_beta_slow);
        cJSON_AddBoolToObject(r, "truncate", c->rope_truncate != 0);
        double f = c->rope_factor, ms = c->rope_mscale, msa = c->rope_mscale_all_dim, af;
        if (ms != 0 && msa != 0) {
            json_add_float_py(r, "mscale", ms);
            json_add_float_py(r, "mscale_all_dim", msa);
            af = (f <= 1 ? 1.0 : 0.1 * ms * log(f) + 1.0) / (f <= 1 ? 1.0 : 0.1 * msa * log(f) + 1.0);
        } else {
            af = f <= 1 ? 1.0 : 0.1 * log(f) + 1.0;
        }
        // what target_config_parse derives unless the file says otherwise
        if (c->rope_attention_factor > 0 && c->rope_attention_factor != af)
            json_add_float_py(r, "attention_factor", c->rope_attention_factor);
    } else if (c->rope_proportional) {
        cJSON_AddStringToObject(r, "rope_type", "proportional");
        json_add_float_py(r, "partial_rotary_factor", c->rope_proportion);
        if (c->rope_factor != 1.0) json_add_float_py(r, "factor", c->rope_factor);
    } else {
        cJSON_AddStringToObject(r, "rope_type", "default");
    }
}

int64_t target_json_window(const target_config *c) {
    int64_t w = 0;
    for (int64_t i = 0; i < c->n_layers; i++)
        if (c->layer_window[i] > w) w = c->layer_window[i];
    return w;
}

void target_json_layer_types(cJSON *o, const target_config *c) {
    cJSON *types = cJSON_AddArrayToObject(o, "layer_types");
    for (int64_t i = 0; i < c->n_layers; i++)
        cJSON_AddItemToArray(types, cJSON_CreateString(c->layer_window[i] > 0 ? "sliding_attention" : "full_attention"));
}

char *target_json_end(cJSON *o, const target_config *c, const char *who) {
    json_add_float_py(o, "attention_dropout", 0.0);
    json_add_float_py(o, "initializer_range", 0.02);
    cJSON_AddBoolToObject(o, "use_cache", 1);
    if (c->torch_dtype[0]) cJSON_AddStringToObject(o, "dtype", c->torch_dtype);
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    if (!text) fatal("%s: out of memory", who);
    return text; // plain malloc (cJSON's default hooks): the caller's free() is right
}

// dense_common_to_json: the keys Qwen2Config and MistralConfig share; head_dim when it is not
// hidden_size / heads (both classes read it: getattr(config, "head_dim", ...)) or always.
static cJSON *dense_common_to_json(const target_config *c, const target_arch *A, int head_dim_always) {
    cJSON *o = target_json_begin(c, A);
    A->mlp->to_json(o, c);
    if (head_dim_always || c->head_dim * c->n_heads != c->hidden)
        cJSON_AddNumberToObject(o, "head_dim", (double)c->head_dim);
    cJSON_AddStringToObject(o, "hidden_act", "silu");
    target_json_rope(cJSON_AddObjectToObject(o, "rope_parameters"), c, c->rope_theta);
    return o;
}

// qwen2_to_json: Qwen2Config (q/k/v biases are the class's, no key); the sliding layers as
// layer_types with use_sliding_window (transformers keeps sliding_window only then).
static char *qwen2_to_json(const target_config *c, const target_arch *A) {
    cJSON *o = dense_common_to_json(c, A, 0);
    int64_t w = target_json_window(c), first = c->n_layers;
    for (int64_t i = c->n_layers - 1; i >= 0; i--)
        if (c->layer_window[i] > 0) first = i;
    cJSON_AddBoolToObject(o, "use_sliding_window", w > 0);
    if (w > 0) cJSON_AddNumberToObject(o, "sliding_window", (double)w);
    else cJSON_AddNullToObject(o, "sliding_window");
    cJSON_AddNumberToObject(o, "max_window_layers", (double)first);
    target_json_layer_types(o, c);
    return target_json_end(o, c, "qwen2_to_json");
}

// mistral_to_json: MistralConfig: one sliding_window for every layer (null: none), no layer_types
// (the class ignores it); head_dim always, as the class saves it.
static char *mistral_to_json(const target_config *c, const target_arch *A) {
    cJSON *o = dense_common_to_json(c, A, 1);
    int64_t w = target_json_window(c);
    if (w > 0) cJSON_AddNumberToObject(o, "sliding_window", (double)w);
    else cJSON_AddNullToObject(o, "sliding_window");
    return target_json_end(o, c, "mistral_to_json");
}

const target_mixer target_mixer_qwen3 = {.parse = qwen3_parse, TARGET_DENSE_PARTS, .to_json = qwen3_to_json};
const target_mixer target_mixer_llama = {.parse = dense_parse, TARGET_DENSE_PARTS, .to_json = llama_to_json};
// make-target writes these from the teacher's tensor list (tools/tool_make_target.c); the fixtures
// against transformers are checkpoints saved by transformers (tests/reference/make_hf_fixtures.py)
static const target_mixer mixer_qwen2 = {.parse = qwen2_parse, TARGET_DENSE_PARTS, .to_json = qwen2_to_json};
static const target_mixer mixer_mistral = {.parse = mistral_parse, TARGET_DENSE_PARTS, .to_json = mistral_to_json};

// Qwen3Config: head_dim 128 whatever hidden_size is, 32 kv heads, 32768 positions.
const target_arch target_arch_qwen3 = {
    .name = "qwen3",
    .family = ARCH_QWEN3,
    .classes = {{"Qwen3ForCausalLM", "qwen3", 0}},
    .default_kv_heads = 32,
    .default_head_dim = 128,
    .default_max_positions = 32768,
    .mixer = &target_mixer_qwen3,
    .mlp = &target_mlp_swiglu,
};

// LlamaConfig: kv heads = query heads, head_dim = hidden_size / heads, 2048 positions.
const target_arch target_arch_llama = {
    .name = "llama",
    .family = ARCH_LLAMA,
    .classes = {{"LlamaForCausalLM", "llama", 0}},
    .default_max_positions = 2048,
    .mixer = &target_mixer_llama,
    .mlp = &target_mlp_swiglu,
};

// Qwen2Config: kv heads default 32 (required here), head_dim = hidden_size / heads, 32768 positions.
const target_arch target_arch_qwen2 = {
    .name = "qwen2",
    .family = ARCH_QWEN2,
    .classes = {{"Qwen2ForCausalLM", "qwen2", 0}},
    .default_kv_heads = 32,
    .default_max_positions = 32768,
    .mixer = &mixer_qwen2,
    .mlp = &target_mlp_swiglu,
};

// MistralConfig: kv heads default 8 (required here), head_dim null = hidden_size / heads, 131072
// positions; the text model of Mistral3ForConditionalGeneration (Mistral-Small 3.x) too.
const target_arch target_arch_mistral = {
    .name = "mistral",
    .family = ARCH_MISTRAL,
    .classes = {{"MistralForCausalLM", "mistral", 0}, {"Mistral3ForConditionalGeneration", "mistral3", 1}},
    .default_kv_heads = 8,
    .default_max_positions = 131072,
    .mixer = &mixer_mistral,
    .mlp = &target_mlp_swiglu,
};
