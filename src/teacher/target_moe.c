// target_moe.c: the mixture-of-experts MLP of the Qwen3-MoE and Qwen3.5/3.6-MoE targets (SPEC §2.2;
// transformers' Qwen3MoeSparseMoeBlock, Qwen3_5MoeSparseMoeBlock). The attention or hybrid mixer
// and the residual frame are the other files'; see target_arch.h.
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
#include <stdio.h>

#include "common/kernels/ops.h"
#include "common/kernels/ops_moe.h"
#include "teacher/target_arch.h"

void target_moe_layer_tensors(target_model *m, int64_t l, const char *prefix, target_tensor_list *list,
                              const st_dir *d) {
    const target_config *c = &m->cfg;
    target_layer *L = &m->layers[l];
    int64_t H = c->hidden, E = c->n_experts, Ie = c->moe_intermediate, Is = c->shared_intermediate;
    long long ll = (long long)l;
    target_tensor_add(list, &L->router, 0, 2, E, H, 0, "%slayers.%lld.mlp.gate.weight", prefix, ll);
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
    }
    if (Is > 0) { // the shared expert and its gate (Qwen3.5-MoE)
#define SHARED_FMT "%slayers.%lld.mlp.shared_expert.%s"
        target_tensor_add(list, &L->w_gate, 0, 2, Is, H, 0, SHARED_FMT, prefix, ll, "gate_proj.weight");
        target_tensor_add(list, &L->w_up, 0, 2, Is, H, 0, SHARED_FMT, prefix, ll, "up_proj.weight");
        target_tensor_add(list, &L->w_down, 0, 2, H, Is, 0, SHARED_FMT, prefix, ll, "down_proj.weight");
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

void target_moe_mlp(const target_model *m, int l, target_work *w, int T) {
    const target_config *c = &m->cfg;
    const target_layer *L = &m->layers[l];
    backend *be = m->be;
    dtype dt = ops_act_dtype(be);
    int H = (int)c->hidden, E = (int)c->n_experts, k = (int)c->n_experts_tok, Ie = (int)c->moe_intermediate;
    int R = T * k;
    // router in fp32 out: softmax, top-k, the rows grouped by expert
    backend_gemm(be, 0, 1, T, E, H, 1.0f, w->xn, H, L->router, H, 0.0f, w->router_logits, E, dt, DT_F32);
    ops_moe_route(be, w->router_logits, T, E, k, c->norm_topk_prob, w->topk_idx_e, w->topk_w_e, w->moe_offsets,
                  w->moe_perm, w->moe_slot, w->moe_route_work);
    ops_moe_gather(be, w->moe_xs, w->xn, w->moe_perm, R, H);
    ops_moe_gemm(be, w->moe_gu, w->moe_xs, L->exp_gate_up, w->moe_offsets, E, R, 2 * Ie, H, R);
    ops_swiglu_packed(be, w->moe_act, w->moe_gu, R, Ie);
    ops_moe_gemm(be, w->moe_ys, w->moe_act, L->exp_down, w->moe_offsets, E, R, H, Ie, R);
    if (c->shared_intermediate > 0) { // before the combine overwrites w->xn, the block's input
        target_swiglu_mlp(m, L->w_gate, L->w_up, L->w_down, (int)c->shared_intermediate, w, T, w->moe_shared);
        target_linear(be, w->moe_sgate, w->xn, L->shared_gate, T, H, 1);
    }
    ops_moe_combine(be, w->xn, w->moe_ys, w->moe_slot, w->topk_idx_e, w->topk_w_e, T, k, H);
    if (c->shared_intermediate > 0) ops_sigmoid_gate_add(be, w->xn, w->moe_shared, w->moe_sgate, T, H);
}
