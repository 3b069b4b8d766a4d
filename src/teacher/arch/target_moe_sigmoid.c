// target_moe_sigmoid.c: the mixture-of-experts MLP of DeepSeek-V3 / Kimi-K2 and GLM-4.5 / 4.6
// (transformers' DeepseekV3MoE and Glm4MoeMoE, the same block), target_mlp_moe_sigmoid
// (target_arch.h), which the tables deepseek_v3 (target_deepseek_v3.c) and glm4_moe
// (target_glm4_moe.c) use. The residual frame and the SwiGLU of the dense layers are target.c's.
//
// Layers 0 .. first_k_dense_replace-1 are the dense SwiGLU of intermediate_size; the others, for T
// tokens, E = n_routed_experts experts of width Ie = moe_intermediate_size, top k:
//   logits = x @ gate^T in fp32 (transformers casts x and the router to fp32)
//   ops_moe_sigmoid_route: s = sigmoid(logits), the choice by s + e_score_correction_bias within the
//     topk_group best of n_group groups, the weights the chosen s (renormalised when
//     norm_topk_prob, with + 1e-20) times routed_scaling_factor, the rows grouped by expert
//   y = sum_j w[t, j] * down_e(silu(gate_e(x)) * up_e(x))       (ops_moe.h, as for Qwen3-MoE)
//   y += shared_experts(x): one SwiGLU of width n_shared_experts * Ie, added without a gate
// The experts are stored per expert (mlp.experts.{e}.{gate,up,down}_proj.weight: the published
// checkpoints, and transformers 5's save_pretrained) or fused (mlp.experts.gate_up_proj [E, 2Ie, H],
// down_proj [E, H, Ie]); per-expert tensors are stacked at load into the fused buffers.
// e_score_correction_bias is kept in fp32 on every backend (transformers keeps it in fp32:
// _keep_in_fp32_modules_strict).
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>

#include "common/core/error.h"
#include "common/core/json_util.h"
#include "common/kernels/ops.h"
#include "common/moe/ops_moe.h"
#include "common/moe/ops_moe_sigmoid.h"
#include "teacher/target.h"
#include "teacher/target_arch.h"

// ---------------------------------------------------------------- config

// sg_count: a count >= 0 under key (required: a missing key is an error naming it; def >= 0: the
// value when absent).
static int sg_count(const cJSON *root, const char *src, const char *key, int64_t def, int64_t *out) {
    int found = 0;
    *out = def;
    if (json_get_int(root, key, key, src, out, &found)) return -1;
    if (!found && def < 0) return error_set("%s: missing '%s'", src, key);
    if (*out < 0) return error_set("%s: '%s' must be >= 0, got %lld", src, key, (long long)*out);
    return 0;
}

// The keys of DeepseekV3Config / Glm4MoeConfig (the same names). Structural keys are required
// (never the class's defaults, a published model's: DeepSeek's 256 experts, 8 groups, top 4 groups,
// 3 dense layers, scale 2.5); GLM's n_group / topk_group default to 1 and its routed_scaling_factor
// to 1.0 (the class's, which are no limit and no scale), norm_topk_prob to true (both classes).
static int moe_sigmoid_parse(target_config *c, const cJSON *root, const char *src) {
    static const char *const experts[] = {"n_routed_experts", "num_local_experts", NULL};
    static const char *const topk[] = {"num_experts_per_tok", NULL};
    static const char *const width[] = {"moe_intermediate_size", NULL};
    int glm = c->arch == ARCH_GLM4_MOE;
    if (target_moe_required(root, src, experts, &c->n_experts)) return -1;
    if (c->n_experts > TARGET_MAX_EXPERTS)
        return error_set("%s: 'n_routed_experts' %lld is over the %d this build supports", src, (long long)c->n_experts,
                         TARGET_MAX_EXPERTS);
    if (target_moe_required(root, src, topk, &c->n_experts_tok)) return -1;
    if (target_moe_required(root, src, width, &c->moe_intermediate)) return -1;
    if (c->moe_intermediate > TARGET_MAX_WIDTH)
        return error_set("%s: 'moe_intermediate_size' %lld is over the %d this build supports", src,
                         (long long)c->moe_intermediate, TARGET_MAX_WIDTH);
    if (c->n_experts_tok > 64) return error_set("%s: 'num_experts_per_tok' %lld is over 64", src, (long long)c->n_experts_tok);
    int64_t shared = 0, dense = 0;
    if (sg_count(root, src, "n_shared_experts", -1, &shared)) return -1;
    if (shared > TARGET_MAX_WIDTH / c->moe_intermediate)
        return error_set("%s: 'n_shared_experts' %lld x 'moe_intermediate_size' %lld is over the %d this build supports",
                         src, (long long)shared, (long long)c->moe_intermediate, TARGET_MAX_WIDTH);
    c->shared_intermediate = shared * c->moe_intermediate;
    if (sg_count(root, src, "first_k_dense_replace", -1, &dense)) return -1;
    if (sg_count(root, src, "n_group", glm ? 1 : -1, &c->n_group)) return -1;
    if (sg_count(root, src, "topk_group", glm ? 1 : -1, &c->topk_group)) return -1;
    int64_t E = c->n_experts, G = c->n_group;
    if (G < 1 || E % G != 0 || E / G < 2)
        return error_set("%s: 'n_group' %lld must divide 'n_routed_experts' %lld into groups of at least 2 experts "
                         "(a group's score is its top two)", src, (long long)G, (long long)E);
    if (c->topk_group < 1 || c->topk_group > G)
        return error_set("%s: 'topk_group' %lld must be in [1, 'n_group' %lld]", src, (long long)c->topk_group, (long long)G);
    if (c->n_experts_tok > c->topk_group * (E / G))
        return error_set("%s: 'num_experts_per_tok' %lld is more than the %lld experts of 'topk_group' %lld groups", src,
                         (long long)c->n_experts_tok, (long long)(c->topk_group * (E / G)), (long long)c->topk_group);
    c->norm_topk_prob = 1;
    if (json_get_bool(root, "norm_topk_prob", src, &c->norm_topk_prob, NULL)) return -1;
    int found = 0;
    c->routed_scaling = 1.0;
    if (json_get_double(root, "routed_scaling_factor", "routed_scaling_factor", src, &c->routed_scaling, &found))
        return -1;
    if (!found && !glm) return error_set("%s: missing 'routed_scaling_factor'", src);
    if (!isfinite(c->routed_scaling) || !(c->routed_scaling > 0))
        return error_set("%s: 'routed_scaling_factor' must be a finite number > 0, got %g", src, c->routed_scaling);
    c->sparse_step = 1;
    for (int64_t i = 0; i < c->n_layers; i++) c->layer_sparse[i] = (uint8_t)(i >= dense);
    return 0;
}

// ---------------------------------------------------------------- layers

// A dense layer's SwiGLU, or the router and its bias, the experts (fused as in the files, or per
// expert stacked into the fused buffers: d says which; d NULL, sizing only: fused) and the shared
// experts.
static void moe_sigmoid_layer_tensors(target_model *m, int64_t l, const char *prefix, target_tensor_list *list,
                                      const st_dir *d) {
    const target_config *c = &m->cfg;
    if (!target_layer_is_sparse(c, l)) {
        target_mlp_swiglu.layer_tensors(m, l, prefix, list, d);
        return;
    }
    target_layer *L = &m->layers[l];
    int64_t H = c->hidden, E = c->n_experts;
    long long ll = (long long)l;
    target_tensor_add(list, &L->router, 0, 2, E, H, 0, "%slayers.%lld.mlp.gate.weight", prefix, ll);
    target_tensor_add(list, (void **)&L->score_bias, 1, 1, E, 0, 0, "%slayers.%lld.mlp.gate.e_score_correction_bias",
                      prefix, ll);
    target_moe_expert_tensors(m, l, prefix, list, d); // fused, or per expert as published
    if (c->shared_intermediate > 0) {
        char shared[200];
        snprintf(shared, sizeof shared, "%slayers.%lld.mlp.shared_experts", prefix, ll);
        target_swiglu_tensors(m, l, c->shared_intermediate, list, shared);
    }
}

// The MLP of layer l: w->xn [T, H] in, out in w->xn.
static void moe_sigmoid_forward(const target_model *m, int l, target_work *w, int T) {
    const target_config *c = &m->cfg;
    if (!target_layer_is_sparse(c, l)) {
        target_mlp_swiglu.forward(m, l, w, T);
        return;
    }
    const target_layer *L = &m->layers[l];
    backend *be = m->be;
    dtype dt = ops_act_dtype(be);
    int H = (int)c->hidden, E = (int)c->n_experts, k = (int)c->n_experts_tok;
    backend_gemm(be, 0, 1, T, E, H, 1.0f, w->xn, H, L->router, H, 0.0f, w->router_logits, E, dt, DT_F32);
    ops_moe_sigmoid_route(be, w->router_logits, L->score_bias, T, E, k, (int)c->n_group, (int)c->topk_group,
                          c->norm_topk_prob, (float)c->routed_scaling, w->topk_idx_e, w->topk_w_e, w->moe_offsets,
                          w->moe_perm, w->moe_slot);
    if (c->shared_intermediate > 0) // before the combine overwrites w->xn, the block's input
        target_swiglu_mlp(m, L->w_gate, L->w_up, L->w_down, (int)c->shared_intermediate, w, T, w->moe_shared);
    target_moe_experts(m, l, w, T);
    ops_moe_combine(be, w->xn, w->moe_ys, w->moe_slot, w->topk_idx_e, w->topk_w_e, T, k, H);
    if (c->shared_intermediate > 0) ops_add(be, w->xn, w->moe_shared, (int64_t)T * H); // experts + shared, as transformers
}

// The MLP of glm4_moe and deepseek_v3 (their tables write its keys with target_json_moe_sigmoid).
const target_mlp target_mlp_moe_sigmoid = {
    .parse = moe_sigmoid_parse,
    .layer_tensors = moe_sigmoid_layer_tensors,
    .work_carve = target_moe_work_carve,
    .forward = moe_sigmoid_forward,
};
