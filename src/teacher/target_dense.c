// target_dense.c: the dense attention of Qwen3 and Llama targets (transformers' models/qwen3,
// models/llama) and their tables, qwen3 and llama (target_arch.h). The residual frame, the SwiGLU
// MLP and the lm_head are target.c's.
//
// Per token (nq query heads, nkv kv heads, head_dim hd):
//   q = q_proj(x), k = k_proj(x), v = v_proj(x)     per head
//   Qwen3: q = q_norm(q), k = k_norm(k)             per-head RMSNorm of hd (c->qk_norm)
//   RoPE on q and k (rope_theta, llama3 scaling: m->inv_freq)
//   out = o_proj(causal GQA attention(q, k, v)), scale hd^-0.5
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/json_util.h"
#include "common/kernels/ops.h"
#include "teacher/target.h"
#include "teacher/target_arch.h"

// dense_parse: every layer is full attention (a layer_types list, when given, must say so for each
// of num_hidden_layers layers).
static int dense_parse(target_config *c, const cJSON *root, const char *src) {
    const cJSON *types = json_field(root, "layer_types");
    if (!types) return 0;
    char s[160];
    json_value_str(types, s, sizeof s);
    if (!cJSON_IsArray(types)) return error_set("%s: 'layer_types' wants a list, got %s", src, s);
    if (cJSON_GetArraySize(types) != c->n_layers) // one entry per layer, as for the hybrid
        return error_set("%s: 'layer_types' has %d entries for %lld layers ('num_hidden_layers')", src,
                         cJSON_GetArraySize(types), (long long)c->n_layers);
    int i = 0;
    for (const cJSON *t = types->child; t; t = t->next, i++)
        if (!cJSON_IsString(t) || strcmp(t->valuestring, "full_attention") != 0) {
            json_value_str(t, s, sizeof s);
            return error_set("%s: 'layer_types[%d]' is %s: only full_attention is supported", src, i, s);
        }
    return 0;
}

static int qwen3_parse(target_config *c, const cJSON *root, const char *src) {
    c->qk_norm = 1;
    return dense_parse(c, root, src);
}

static void dense_layer_tensors(target_model *m, int64_t l, const char *P, target_tensor_list *list) {
    const target_config *c = &m->cfg;
    target_layer *L = &m->layers[l];
    int64_t H = c->hidden, hd = c->head_dim, q_out = c->n_heads * hd, kv_out = c->n_kv_heads * hd;
    long long ll = (long long)l;
    target_tensor_add(list, &L->wq, 0, 2, q_out, H, 0, "%slayers.%lld.self_attn.%s", P, ll, "q_proj.weight");
    target_tensor_add(list, &L->wk, 0, 2, kv_out, H, 0, "%slayers.%lld.self_attn.%s", P, ll, "k_proj.weight");
    target_tensor_add(list, &L->wv, 0, 2, kv_out, H, 0, "%slayers.%lld.self_attn.%s", P, ll, "v_proj.weight");
    target_tensor_add(list, &L->wo, 0, 2, H, q_out, 0, "%slayers.%lld.self_attn.%s", P, ll, "o_proj.weight");
    if (c->qk_norm) {
        target_tensor_add(list, &L->q_norm, 0, 1, hd, 0, 0, "%slayers.%lld.self_attn.%s", P, ll, "q_norm.weight");
        target_tensor_add(list, &L->k_norm, 0, 1, hd, 0, 0, "%slayers.%lld.self_attn.%s", P, ll, "k_norm.weight");
    }
}

// q, k, v of layer l after the per-head norms (Qwen3) and RoPE: w->xn in.
static void dense_attn_project(const target_model *m, int l, target_work *w, int T) {
    const target_config *c = &m->cfg;
    const target_layer *L = &m->layers[l];
    backend *be = m->be;
    int H = (int)c->hidden, hd = (int)c->head_dim, nq = (int)c->n_heads, nkv = (int)c->n_kv_heads;
    target_linear(be, w->q, w->xn, L->wq, T, H, nq * hd);
    target_linear(be, w->k, w->xn, L->wk, T, H, nkv * hd);
    target_linear(be, w->v, w->xn, L->wv, T, H, nkv * hd);
    if (c->qk_norm) { // per-head RMSNorm before RoPE
        target_norm(m, w->q, w->q, L->q_norm, T * nq, hd);
        target_norm(m, w->k, w->k, L->k_norm, T * nkv, hd);
    }
    ops_rope(be, w->q, w->pos, m->inv_freq, T, nq, hd);
    ops_rope(be, w->k, w->pos, m->inv_freq, T, nkv, hd);
}

static void dense_attn_finish(const target_model *m, int l, target_work *w, int T) {
    const target_config *c = &m->cfg;
    target_linear(m->be, w->xn, w->att, m->layers[l].wo, T, (int)(c->n_heads * c->head_dim), (int)c->hidden);
}

static void dense_forward(const target_model *m, int l, target_work *w, int T, int n_seq, void *conv_state,
                          float *rec_state) {
    (void)conv_state, (void)rec_state;
    const target_config *c = &m->cfg;
    int hd = (int)c->head_dim;
    dense_attn_project(m, l, w, T);
    ops_attention_causal(m->be, w->att, w->q, w->k, w->v, w->cu_seqlens, n_seq, T, (int)c->n_heads, (int)c->n_kv_heads,
                         hd, 1.0f / sqrtf((float)hd));
    dense_attn_finish(m, l, w, T);
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

const target_mixer target_mixer_qwen3 = {
    .parse = qwen3_parse,
    .layer_tensors = dense_layer_tensors,
    .forward = dense_forward,
    .attn_project = dense_attn_project,
    .attn_finish = dense_attn_finish,
    .to_json = qwen3_to_json,
};

const target_mixer target_mixer_llama = {
    .parse = dense_parse,
    .layer_tensors = dense_layer_tensors,
    .forward = dense_forward,
    .attn_project = dense_attn_project,
    .attn_finish = dense_attn_finish,
    .to_json = llama_to_json,
};

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
