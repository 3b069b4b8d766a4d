// drafter_dflash.c: the DFlash drafter kind (SPEC §3; drafter.kind "dflash"): exported as the z-lab
// dflash package's DFlashDraftModel on a qwen3 base, its tensors (fc and hidden_norm over the target
// features, Qwen3 decoder layers, a final norm), where each lands in the flat buffer, and the
// gradient bucket each is final in. The step (step.c) computes this kind's layers.
#include <stdio.h>
#include <string.h>

#include "common/core/error.h"
#include "common/core/tensor.h"
#include "common/kernels/ops.h"
#include "student/model/drafter.h"
#include "student/model/drafter_config.h"
#include "student/model/drafter_dflash.h"
#include "student/model/drafter_kind.h"
#include "student/model/grad_buckets.h"

// drafter_dflash_param_list: the trainable tensors in export order (z-lab dflash names): fc,
// hidden_norm, per layer the Qwen3 decoder layer (norms, q/k/v/o, q/k norms, SwiGLU MLP), the final norm.
int drafter_dflash_param_list(const drafter_config *c, drafter_param *list) {
    int64_t H = c->hidden, I = c->intermediate, hd = c->head_dim;
    int64_t qd = c->n_heads * hd, kvd = c->n_kv_heads * hd;
    int n = 0;
    int64_t off = 0;
    char nm[96];
#define P(name, is_norm, ...) drafter_param_push(list, &n, &off, name, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}, is_norm, 0)
    P("fc.weight", 0, H, (int64_t)c->n_feat * H);
    P("hidden_norm.weight", 1, H);
    for (int64_t l = 0; l < c->n_layers; l++) {
#define L(suffix, is_norm, ...)                                                  \
    do {                                                                         \
        snprintf(nm, sizeof nm, "layers.%lld.%s", (long long)l, suffix);         \
        P(nm, is_norm, __VA_ARGS__);                                             \
    } while (0)
        L("input_layernorm.weight", 1, H);
        L("self_attn.q_proj.weight", 0, qd, H);
        L("self_attn.k_proj.weight", 0, kvd, H);
        L("self_attn.v_proj.weight", 0, kvd, H);
        L("self_attn.o_proj.weight", 0, H, qd);
        L("self_attn.q_norm.weight", 1, hd);
        L("self_attn.k_norm.weight", 1, hd);
        L("post_attention_layernorm.weight", 1, H);
        L("mlp.gate_proj.weight", 0, I, H);
        L("mlp.up_proj.weight", 0, I, H);
        L("mlp.down_proj.weight", 0, H, I);
#undef L
    }
    P("norm.weight", 1, H);
#undef P
    return n;
}

// drafter_dflash_bind: the pointers in the order of drafter_dflash_param_list (11 tensors a
// layer, the final norm after the last layer; a kind extending it lists its tensors after that).
void drafter_dflash_bind(drafter *d) {
    size_t e = dtype_size(ops_act_dtype(d->be));
    char *base = d->compute;
#define AT(i) ((void *)(base + (size_t)d->params[i].offset * e))
    d->fc = AT(0);
    d->hidden_norm = AT(1);
    for (int64_t l = 0; l < d->cfg.n_layers; l++) {
        int i = 2 + (int)l * 11;
        drafter_layer *L = &d->layers[l];
        L->input_norm = AT(i + 0);
        L->wq = AT(i + 1);
        L->wk = AT(i + 2);
        L->wv = AT(i + 3);
        L->wo = AT(i + 4);
        L->q_norm = AT(i + 5);
        L->k_norm = AT(i + 6);
        L->post_norm = AT(i + 7);
        L->w_gate = AT(i + 8);
        L->w_up = AT(i + 9);
        L->w_down = AT(i + 10);
    }
    d->norm = AT(2 + (int)d->cfg.n_layers * 11);
#undef AT
}

static int name_ends(const char *name, const char *suffix) {
    size_t n = strlen(name), s = strlen(suffix);
    return n >= s && strcmp(name + n - s, suffix) == 0;
}

// drafter_dflash_grad_buckets: the bucket (grad_buckets.h) in which step.c's backward finishes each tensor
// of drafter_dflash_param_list: fc and hidden_norm last; per layer k_proj, v_proj and k_norm (index 2, 3, 6
// of the layer; the context keys and values also feed them) after context_backward has passed the
// layer, the layer's other tensors after the last chunk's backward has; the final norm with layer
// L-1's block. -1 when d's tensors are not in this layout (the order step.c's P_* indices assume).
int drafter_dflash_grad_buckets(const drafter *d, int *bucket_of) {
    int L = (int)d->cfg.n_layers, np = d->n_params;
    const drafter_param *p = d->params;
    if (L < 1 || np != 2 + 11 * L + 1 || !name_ends(p[0].name, "fc.weight") || !name_ends(p[1].name, "hidden_norm.weight") ||
        !name_ends(p[np - 1].name, "norm.weight"))
        return error_set("gradient buckets: %d parameters for %d layers is not the drafter's layout", np, L);
    for (int l = 0; l < L; l++)
        if (!name_ends(p[2 + 11 * l + 2].name, "k_proj.weight") || !name_ends(p[2 + 11 * l + 3].name, "v_proj.weight") ||
            !name_ends(p[2 + 11 * l + 6].name, "k_norm.weight"))
            return error_set("gradient buckets: layer %d's parameters are not in the drafter's order", l);
    bucket_of[0] = bucket_of[1] = grad_bucket_front(L);
    for (int l = 0; l < L; l++)
        for (int j = 0; j < 11; j++)
            bucket_of[2 + 11 * l + j] = j == 2 || j == 3 || j == 6 ? grad_bucket_context(L, l) : grad_bucket_block(L, l);
    bucket_of[np - 1] = grad_bucket_block(L, L - 1); // the final norm: the first gradient the backward finishes
    return 0;
}

const drafter_kind drafter_kind_dflash = {
    .name = "dflash",
    .architecture = "DFlashDraftModel",
    .model_type = "qwen3",
    .param_list = drafter_dflash_param_list,
    .bind = drafter_dflash_bind,
    .grad_buckets = drafter_dflash_grad_buckets,
};
