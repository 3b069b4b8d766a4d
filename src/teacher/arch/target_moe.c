// target_moe.c: the mixture-of-experts MLP of the Qwen3-MoE and Qwen3.5/3.6-MoE targets (SPEC §2.2;
// transformers' Qwen3MoeSparseMoeBlock, Qwen3_5MoeSparseMoeBlock), and their tables qwen3_moe and
// qwen3_5_moe (target_arch.h): the Qwen3 attention (target_mixer_qwen3) or the Qwen3.5 hybrid mixer
// (target_mixer_qwen3_5) with this MLP. The residual frame and the SwiGLU of dense layers are
// target.c's.
//
// For T tokens, E experts, top k, expert width Ie (R = T*k routed rows):
//   p = softmax(x @ router^T) (fp32); the k largest, renormalised when norm_topk_prob (always for
//   Qwen3.5-MoE); the R rows sorted by expert; each expert one GEMM over its rows:
//   y[t] = sum_j w[t, j] * down_e(silu(gate_e(x_t)) * up_e(x_t)),  e = the j-th choice of t
//   Qwen3.5-MoE: y += sigmoid(x @ shared_expert_gate^T) * shared_expert(x)
// Every expert stays resident. Checkpoints hold the experts per expert (Qwen3-MoE as published:
// mlp.experts.{e}.{gate,up,down}_proj.weight) or fused (mlp.experts.gate_up_proj [E, 2Ie, H] with the
// gate rows first, mlp.experts.down_proj [E, H, Ie]); per-expert files are stacked at load into the
// fused buffers, so the forward sees one layout.
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>

#include "common/core/error.h"
#include "common/core/json_util.h"
#include "common/kernels/ops.h"
#include "common/moe/ops_moe.h"
#include "teacher/target.h"
#include "teacher/target_arch.h"

// ---------------------------------------------------------------- config

// moe_required: a positive integer under any of its names (the config class's key first, then the
// aliases of its attribute_map: Qwen3MoeConfig saves num_experts as num_local_experts); a missing
// key is an error naming it (a structural key never falls back to a published model's default),
// two names with different values are refused.
int target_moe_required(const cJSON *root, const char *src, const char *const *names, int64_t *out) {
    const char *seen = NULL;
    for (int i = 0; names[i]; i++) {
        int64_t v = 0;
        int found = 0;
        if (json_get_int(root, names[i], names[i], src, &v, &found)) return -1;
        if (!found) continue;
        if (v <= 0) return error_set("%s: '%s' must be positive, got %lld", src, names[i], (long long)v);
        if (seen && v != *out)
            return error_set("%s: '%s' is %lld but '%s' is %lld (the same setting)", src, seen, (long long)*out,
                             names[i], (long long)v);
        if (!seen) *out = v;
        seen = names[i];
    }
    if (!seen)
        return names[1] ? error_set("%s: missing '%s' (or '%s')", src, names[0], names[1])
                        : error_set("%s: missing '%s'", src, names[0]);
    return 0;
}

// moe_parse_experts: the keys both families share (Qwen3MoeConfig / Qwen3_5MoeTextConfig names):
// the expert count, the top-k and the width are structural: required, never the classes' 128/256, 8
// and 768/512.
static int moe_parse_experts(target_config *c, const cJSON *root, const char *src) {
    static const char *const experts[] = {"num_experts", "num_local_experts", NULL};
    static const char *const width[] = {"moe_intermediate_size", NULL};
    static const char *const topk[] = {"num_experts_per_tok", NULL};
    c->sparse_step = 1;
    if (target_moe_required(root, src, experts, &c->n_experts)) return -1;
    if (c->n_experts > TARGET_MAX_EXPERTS)
        return error_set("%s: 'num_experts' %lld is over the %d this build supports", src,
                         (long long)c->n_experts, TARGET_MAX_EXPERTS);
    if (target_moe_required(root, src, topk, &c->n_experts_tok)) return -1;
    if (target_moe_required(root, src, width, &c->moe_intermediate)) return -1;
    if (c->moe_intermediate > TARGET_MAX_WIDTH)
        return error_set("%s: 'moe_intermediate_size' %lld is over the %d this build supports", src,
                         (long long)c->moe_intermediate, TARGET_MAX_WIDTH);
    if (c->n_experts_tok > c->n_experts)
        return error_set("%s: 'num_experts_per_tok' %lld is more than 'num_experts' %lld", src,
                         (long long)c->n_experts_tok, (long long)c->n_experts);
    if (c->n_experts_tok > 64)
        return error_set("%s: 'num_experts_per_tok' %lld is over 64", src, (long long)c->n_experts_tok);
    return 0;
}

// Qwen3-MoE: layer i is sparse unless i is in mlp_only_layers or
// (i+1) % decoder_sparse_step != 0; norm_topk_prob default false; no shared expert.
static int qwen3_moe_parse(target_config *c, const cJSON *root, const char *src) {
    c->shared_intermediate = 0;
    if (moe_parse_experts(c, root, src)) return -1;
    c->norm_topk_prob = 0;
    if (json_get_bool(root, "norm_topk_prob", src, &c->norm_topk_prob, NULL)) return -1;
    if (json_get_int(root, "decoder_sparse_step", "decoder_sparse_step", src, &c->sparse_step, NULL)) return -1;
    if (c->sparse_step <= 0)
        return error_set("%s: 'decoder_sparse_step' must be positive, got %lld", src, (long long)c->sparse_step);
    for (int64_t i = 0; i < c->n_layers; i++) c->layer_sparse[i] = (uint8_t)((i + 1) % c->sparse_step == 0);
    const cJSON *only = json_field(root, "mlp_only_layers");
    if (only) {
        char s[160];
        json_value_str(only, s, sizeof s);
        if (!cJSON_IsArray(only)) return error_set("%s: 'mlp_only_layers' wants a list of layer indices, got %s", src, s);
        int j = 0;
        for (const cJSON *v = only->child; v; v = v->next, j++) {
            double d = v->valuedouble;
            if (!cJSON_IsNumber(v) || d != floor(d) || d < 0 || d >= (double)c->n_layers) {
                json_value_str(v, s, sizeof s);
                return error_set("%s: 'mlp_only_layers[%d]' is %s: want a layer index in [0, %lld)", src, j, s,
                                 (long long)c->n_layers);
            }
            c->layer_sparse[(int64_t)d] = 0;
        }
    }
    return 0;
}

// Qwen3.5-MoE: every layer sparse, the top-k always renormalised, a
// shared expert of shared_expert_intermediate_size (required).
static int qwen3_5_moe_parse(target_config *c, const cJSON *root, const char *src) {
    static const char *const shared[] = {"shared_expert_intermediate_size", NULL};
    if (moe_parse_experts(c, root, src)) return -1;
    if (target_moe_required(root, src, shared, &c->shared_intermediate)) return -1;
    if (c->shared_intermediate > TARGET_MAX_WIDTH)
        return error_set("%s: 'shared_expert_intermediate_size' %lld is over the %d this build supports", src,
                         (long long)c->shared_intermediate, TARGET_MAX_WIDTH);
    c->norm_topk_prob = 1;
    for (int64_t i = 0; i < c->n_layers; i++) c->layer_sparse[i] = 1;
    return 0;
}

// ---------------------------------------------------------------- layers

// target_moe_expert_tensors (target_arch.h): fused, or per expert stacked into the fused buffers.
void target_moe_expert_tensors(target_model *m, int64_t l, const char *prefix, target_tensor_list *list,
                               const st_dir *d) {
    const target_config *c = &m->cfg;
    target_layer *L = &m->layers[l];
    int64_t H = c->hidden, E = c->n_experts, Ie = c->moe_intermediate;
    long long ll = (long long)l;
    char fused[200];
    snprintf(fused, sizeof fused, "%slayers.%lld.mlp.experts.gate_up_proj", prefix, ll);
    if (!d || safetensors_dir_find(d, fused)) {
        target_tensor_add(list, &L->exp_gate_up, 0, 3, E, 2 * Ie, H, "%s", fused);
        target_tensor_add(list, &L->exp_down, 0, 3, E, H, Ie, "%slayers.%lld.mlp.experts.down_proj", prefix, ll);
    } else { // per expert, stacked: gate rows then up rows of each expert
        int gu = target_tensor_add(list, &L->exp_gate_up, 0, 3, E, 2 * Ie, H, "%s (stacked)", fused);
        int dn = target_tensor_add(list, &L->exp_down, 0, 3, E, H, Ie, "%slayers.%lld.mlp.experts.down_proj (stacked)",
                                   prefix, ll);
        list->t[gu].alloc_only = list->t[dn].alloc_only = 1;
        for (int64_t e = 0; e < E; e++) {
#define EXPERT_FMT "%slayers.%lld.mlp.experts.%lld.%s"
            long long le = (long long)e;
            int g = target_tensor_add(list, NULL, 0, 2, Ie, H, 0, EXPERT_FMT, prefix, ll, le, "gate_proj.weight");
            target_tensor_part(list, g, gu, e * 2 * Ie * H);
            int u = target_tensor_add(list, NULL, 0, 2, Ie, H, 0, EXPERT_FMT, prefix, ll, le, "up_proj.weight");
            target_tensor_part(list, u, gu, (e * 2 + 1) * Ie * H);
            int w = target_tensor_add(list, NULL, 0, 2, H, Ie, 0, EXPERT_FMT, prefix, ll, le, "down_proj.weight");
            target_tensor_part(list, w, dn, e * H * Ie);
        }
#undef EXPERT_FMT
    }
}

// The MLP tensors of layer l: a dense layer's SwiGLU, or the router, the experts (fused [E, 2I, H] /
// [E, H, I] as in the files, or per expert stacked into those buffers when d holds them per expert;
// d NULL: fused) and the Qwen3.5-MoE shared expert and its gate.
static void moe_layer_tensors(target_model *m, int64_t l, const char *prefix, target_tensor_list *list,
                              const st_dir *d) {
    const target_config *c = &m->cfg;
    if (!target_layer_is_sparse(c, l)) {
        target_mlp_swiglu.layer_tensors(m, l, prefix, list, d);
        return;
    }
    target_layer *L = &m->layers[l];
    int64_t H = c->hidden, E = c->n_experts, Is = c->shared_intermediate;
    long long ll = (long long)l;
    target_tensor_add(list, &L->router, 0, 2, E, H, 0, "%slayers.%lld.mlp.gate.weight", prefix, ll);
    target_moe_expert_tensors(m, l, prefix, list, d);
    if (Is > 0) { // the shared expert and its gate (Qwen3.5-MoE)
        char shared[200];
        snprintf(shared, sizeof shared, "%slayers.%lld.mlp.shared_expert", prefix, ll);
        target_swiglu_tensors(m, l, Is, list, shared);
        target_tensor_add(list, &L->shared_gate, 0, 2, 1, H, 0, "%slayers.%lld.mlp.shared_expert_gate.weight", prefix, ll);
    }
}

void target_moe_work_carve(target_work *w, arena *a, const target_model *m, int max_tokens) {
    const target_config *c = &m->cfg;
    size_t e = dtype_size(ops_act_dtype(m->be)), T = (size_t)max_tokens, H = (size_t)c->hidden;
    size_t E = (size_t)c->n_experts, k = (size_t)c->n_experts_tok, Ie = (size_t)c->moe_intermediate, R = T * k;
    w->router_logits = arena_alloc(a, T * E * sizeof(float));
    w->topk_idx_e = arena_alloc(a, T * k * sizeof(int32_t));
    w->topk_w_e = arena_alloc(a, T * k * sizeof(float));
    w->moe_offsets = arena_alloc(a, (E + 1) * sizeof(int32_t));
    w->moe_perm = arena_alloc(a, R * sizeof(int32_t));
    w->moe_slot = arena_alloc(a, R * sizeof(int32_t));
    w->moe_route_work = arena_alloc(a, ops_moe_route_work_bytes(m->be, max_tokens, (int)E, (int)k));
    w->moe_xs = arena_alloc(a, R * H * e);
    w->moe_gu = arena_alloc(a, R * 2 * Ie * e);
    w->moe_act = arena_alloc(a, R * Ie * e);
    w->moe_ys = arena_alloc(a, R * H * e);
    if (c->shared_intermediate > 0) {
        w->moe_shared = arena_alloc(a, T * H * e);
        w->moe_sgate = arena_alloc(a, T * e);
    }
}

// target_moe_experts (target_arch.h): the routed rows through their experts, into w->moe_ys.
void target_moe_experts(const target_model *m, int l, target_work *w, int T) {
    const target_config *c = &m->cfg;
    const target_layer *L = &m->layers[l];
    backend *be = m->be;
    int H = (int)c->hidden, E = (int)c->n_experts, Ie = (int)c->moe_intermediate, R = T * (int)c->n_experts_tok;
    ops_moe_gather(be, w->moe_xs, w->xn, w->moe_perm, R, H);
    ops_moe_gemm(be, w->moe_gu, w->moe_xs, L->exp_gate_up, w->moe_offsets, E, R, 2 * Ie, H, R);
    ops_swiglu_packed(be, w->moe_act, w->moe_gu, R, Ie);
    ops_moe_gemm(be, w->moe_ys, w->moe_act, L->exp_down, w->moe_offsets, E, R, H, Ie, R);
}

// The MLP of layer l: w->xn [T, H] in, out in w->xn.
static void moe_forward(const target_model *m, int l, target_work *w, int T) {
    const target_config *c = &m->cfg;
    if (!target_layer_is_sparse(c, l)) {
        target_mlp_swiglu.forward(m, l, w, T);
        return;
    }
    const target_layer *L = &m->layers[l];
    backend *be = m->be;
    dtype dt = ops_act_dtype(be);
    int H = (int)c->hidden, E = (int)c->n_experts, k = (int)c->n_experts_tok;
    // router in fp32 out: softmax, top-k, the rows grouped by expert
    backend_gemm(be, 0, 1, T, E, H, 1.0f, w->xn, H, L->router, H, 0.0f, w->router_logits, E, dt, DT_F32);
    ops_moe_route(be, w->router_logits, T, E, k, c->norm_topk_prob, w->topk_idx_e, w->topk_w_e, w->moe_offsets,
                  w->moe_perm, w->moe_slot, w->moe_route_work);
    target_moe_experts(m, l, w, T);
    if (c->shared_intermediate > 0) { // before the combine overwrites w->xn, the block's input
        target_swiglu_mlp(m, L->w_gate, L->w_up, L->w_down, (int)c->shared_intermediate, w, T, w->moe_shared);
        target_linear(be, w->moe_sgate, w->xn, L->shared_gate, T, H, 1);
    }
    ops_moe_combine(be, w->xn, w->moe_ys, w->moe_slot, w->topk_idx_e, w->topk_w_e, T, k, H);
    if (c->shared_intermediate > 0) ops_sigmoid_gate_add(be, w->xn, w->moe_shared, w->moe_sgate, T, H);
}

// ---------------------------------------------------------------- config.json

static void moe_experts_to_json(cJSON *t, const target_config *c) {
    cJSON_AddNumberToObject(t, "num_experts", (double)c->n_experts);
    cJSON_AddNumberToObject(t, "num_experts_per_tok", (double)c->n_experts_tok);
    cJSON_AddNumberToObject(t, "moe_intermediate_size", (double)c->moe_intermediate);
}

// Qwen3-MoE: the sparse layers' pattern (the step and the dense layers it does not imply) and the
// dense layers' intermediate_size.
static void qwen3_moe_to_json(cJSON *t, const target_config *c) {
    moe_experts_to_json(t, c);
    cJSON_AddBoolToObject(t, "norm_topk_prob", c->norm_topk_prob != 0);
    cJSON_AddNumberToObject(t, "decoder_sparse_step", (double)c->sparse_step);
    cJSON *only = cJSON_AddArrayToObject(t, "mlp_only_layers");
    for (int64_t i = 0; i < c->n_layers; i++)
        if (!c->layer_sparse[i] && (i + 1) % c->sparse_step == 0) cJSON_AddItemToArray(only, cJSON_CreateNumber((double)i));
    cJSON_AddNumberToObject(t, "intermediate_size", (double)c->intermediate);
}

static void qwen3_5_moe_to_json(cJSON *t, const target_config *c) {
    moe_experts_to_json(t, c);
    cJSON_AddNumberToObject(t, "shared_expert_intermediate_size", (double)c->shared_intermediate);
}

// ---------------------------------------------------------------- tables

static const target_mlp moe_mlp_qwen3 = {
    .parse = qwen3_moe_parse,
    .layer_tensors = moe_layer_tensors,
    .work_carve = target_moe_work_carve,
    .forward = moe_forward,
    .to_json = qwen3_moe_to_json,
};

static const target_mlp moe_mlp_qwen3_5 = {
    .parse = qwen3_5_moe_parse,
    .layer_tensors = moe_layer_tensors,
    .work_carve = target_moe_work_carve,
    .forward = moe_forward,
    .to_json = qwen3_5_moe_to_json,
};

// Qwen3MoeConfig: 4 kv heads, head_dim = hidden_size / heads, 32768 positions.
const target_arch target_arch_qwen3_moe = {
    .name = "qwen3_moe",
    .family = ARCH_QWEN3,
    .moe = 1,
    .classes = {{"Qwen3MoeForCausalLM", "qwen3_moe", 0}},
    .default_kv_heads = 4,
    .default_max_positions = 32768,
    .mixer = &target_mixer_qwen3,
    .mlp = &moe_mlp_qwen3,
};

// Qwen3_5MoeTextConfig: 2 kv heads, head_dim 256, 32768 positions, partial_rotary_factor 0.25, no
// intermediate_size; the Qwen3.5 vocabulary's MASK row (target_qwen3_5.c).
const target_arch target_arch_qwen3_5_moe = {
    .name = "qwen3_5_moe",
    .family = ARCH_QWEN3_5,
    .moe = 1,
    .classes = {{"Qwen3_5MoeForConditionalGeneration", "qwen3_5_moe", 1}, {"Qwen3_5MoeForCausalLM", "qwen3_5_moe_text", 0}},
    .default_kv_heads = 2,
    .default_head_dim = 256,
    .default_max_positions = 32768,
    .default_partial_rotary = 0.25,
    .no_intermediate = 1,
    .mask_vocab = 248320,
    .mask_token = 248070,
    .mixer = &target_mixer_qwen3_5,
    .mlp = &moe_mlp_qwen3_5,
};
