// drafter_dflash.c: the DFlash drafter kind (SPEC §3; drafter.kind "dflash"): exported as the z-lab
// dflash package's DFlashDraftModel on a qwen3 base, its tensors (fc and hidden_norm over the target
// features, Qwen3 decoder layers, a final norm: the trunk, drafter_layout.h), the gradient bucket
// each is final in, and its layer: the Qwen3 decoder layer over the block, its attention reading the
// context's keys and values (SPEC §5). The attention and MLP sublayers are exported
// (drafter_dflash.h) for kinds that build on them.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/core/error.h"
#include "common/core/tensor.h"
#include "common/kernels/ops.h"
#include "student/model/drafter.h"
#include "student/model/drafter_config.h"
#include "student/model/drafter_dflash.h"
#include "student/model/drafter_kind.h"
#include "student/model/drafter_layout.h"
#include "student/model/grad_buckets.h"
#include "student/model/step.h"
#include "student/model/step_work.h"

// The trunk layer's tensors, by their index in the layout (names as z-lab dflash exports them).
static const struct {
    const char *suffix;
    int is_norm;
} layer_tensors[DRAFTER_LAYER_TENSORS] = {
    [DRAFTER_T_INPUT_NORM] = {"input_layernorm.weight", 1},
    [DRAFTER_T_Q] = {"self_attn.q_proj.weight", 0},
    [DRAFTER_T_K] = {"self_attn.k_proj.weight", 0},
    [DRAFTER_T_V] = {"self_attn.v_proj.weight", 0},
    [DRAFTER_T_O] = {"self_attn.o_proj.weight", 0},
    [DRAFTER_T_Q_NORM] = {"self_attn.q_norm.weight", 1},
    [DRAFTER_T_K_NORM] = {"self_attn.k_norm.weight", 1},
    [DRAFTER_T_POST_NORM] = {"post_attention_layernorm.weight", 1},
    [DRAFTER_T_GATE] = {"mlp.gate_proj.weight", 0},
    [DRAFTER_T_UP] = {"mlp.up_proj.weight", 0},
    [DRAFTER_T_DOWN] = {"mlp.down_proj.weight", 0},
};

// layer_tensor_shape: the [out, in] shape of trunk tensor j (a norm: [n], ndim 1). Returns ndim.
static int layer_tensor_shape(const drafter_config *c, int j, int64_t shape[2]) {
    int64_t H = c->hidden, I = c->intermediate, hd = c->head_dim;
    int64_t qd = c->n_heads * hd, kvd = c->n_kv_heads * hd;
    switch (j) {
    case DRAFTER_T_Q: shape[0] = qd, shape[1] = H; return 2;
    case DRAFTER_T_K:
    case DRAFTER_T_V: shape[0] = kvd, shape[1] = H; return 2;
    case DRAFTER_T_O: shape[0] = H, shape[1] = qd; return 2;
    case DRAFTER_T_Q_NORM:
    case DRAFTER_T_K_NORM: shape[0] = hd; return 1;
    case DRAFTER_T_GATE:
    case DRAFTER_T_UP: shape[0] = I, shape[1] = H; return 2;
    case DRAFTER_T_DOWN: shape[0] = H, shape[1] = I; return 2;
    default: shape[0] = H; return 1; // input_layernorm, post_attention_layernorm
    }
}

// drafter_dflash_param_list: the trunk in the layout's order (drafter_layout.h): fc, hidden_norm,
// per layer the Qwen3 decoder layer's 11 tensors, the final norm.
int drafter_dflash_param_list(const drafter_config *c, drafter_param *list) {
    int64_t H = c->hidden;
    int n = 0;
    int64_t off = 0;
    char nm[96];
    drafter_param_push(list, &n, &off, "fc.weight", 2, (int64_t[]){H, (int64_t)c->n_feat * H}, 0, 0);
    drafter_param_push(list, &n, &off, "hidden_norm.weight", 1, (int64_t[]){H}, 1, 0);
    for (int64_t l = 0; l < c->n_layers; l++)
        for (int j = 0; j < DRAFTER_LAYER_TENSORS; j++) {
            int64_t shape[2];
            int ndim = layer_tensor_shape(c, j, shape);
            snprintf(nm, sizeof nm, "layers.%lld.%s", (long long)l, layer_tensors[j].suffix);
            drafter_param_push(list, &n, &off, nm, ndim, shape, layer_tensors[j].is_norm, 0);
        }
    drafter_param_push(list, &n, &off, "norm.weight", 1, (int64_t[]){H}, 1, 0);
    return n;
}

// drafter_dflash_bind: the trunk's pointers (fc, hidden_norm, layers[l].*, norm) by the layout.
void drafter_dflash_bind(drafter *d) {
    int L = (int)d->cfg.n_layers;
    d->fc = drafter_weight(d, DRAFTER_P_FC);
    d->hidden_norm = drafter_weight(d, DRAFTER_P_HIDDEN_NORM);
    for (int l = 0; l < L; l++) {
        drafter_layer *Ly = &d->layers[l];
        Ly->input_norm = drafter_weight(d, drafter_p_layer(l, DRAFTER_T_INPUT_NORM));
        Ly->wq = drafter_weight(d, drafter_p_layer(l, DRAFTER_T_Q));
        Ly->wk = drafter_weight(d, drafter_p_layer(l, DRAFTER_T_K));
        Ly->wv = drafter_weight(d, drafter_p_layer(l, DRAFTER_T_V));
        Ly->wo = drafter_weight(d, drafter_p_layer(l, DRAFTER_T_O));
        Ly->q_norm = drafter_weight(d, drafter_p_layer(l, DRAFTER_T_Q_NORM));
        Ly->k_norm = drafter_weight(d, drafter_p_layer(l, DRAFTER_T_K_NORM));
        Ly->post_norm = drafter_weight(d, drafter_p_layer(l, DRAFTER_T_POST_NORM));
        Ly->w_gate = drafter_weight(d, drafter_p_layer(l, DRAFTER_T_GATE));
        Ly->w_up = drafter_weight(d, drafter_p_layer(l, DRAFTER_T_UP));
        Ly->w_down = drafter_weight(d, drafter_p_layer(l, DRAFTER_T_DOWN));
    }
    d->norm = drafter_weight(d, drafter_p_norm(L));
}

static int name_ends(const char *name, const char *suffix) {
    size_t n = strlen(name), s = strlen(suffix);
    return n >= s && strcmp(name + n - s, suffix) == 0;
}

// drafter_dflash_grad_buckets: the bucket (grad_buckets.h) in which the step's backward finishes
// each trunk tensor: fc and hidden_norm last; per layer k_proj, v_proj and k_norm (the context keys
// and values also feed them) after context_backward has passed the layer, the layer's other tensors
// after the last chunk's backward has; the final norm with layer L-1's block. -1 when d's tensors
// are not in the layout (drafter_layout.h).
int drafter_dflash_grad_buckets(const drafter *d, int *bucket_of) {
    int L = (int)d->cfg.n_layers, np = d->n_params;
    const drafter_param *p = d->params;
    if (L < 1 || np != drafter_p_own(L) || !name_ends(p[DRAFTER_P_FC].name, "fc.weight") ||
        !name_ends(p[DRAFTER_P_HIDDEN_NORM].name, "hidden_norm.weight") || !name_ends(p[np - 1].name, "norm.weight"))
        return error_set("gradient buckets: %d parameters for %d layers is not the drafter's layout", np, L);
    for (int l = 0; l < L; l++)
        for (int j = 0; j < DRAFTER_LAYER_TENSORS; j++)
            if (!name_ends(p[drafter_p_layer(l, j)].name, layer_tensors[j].suffix))
                return error_set("gradient buckets: layer %d's parameters are not in the drafter's order", l);
    bucket_of[DRAFTER_P_FC] = bucket_of[DRAFTER_P_HIDDEN_NORM] = grad_bucket_front(L);
    for (int l = 0; l < L; l++)
        for (int j = 0; j < DRAFTER_LAYER_TENSORS; j++)
            bucket_of[drafter_p_layer(l, j)] = j == DRAFTER_T_K || j == DRAFTER_T_V || j == DRAFTER_T_K_NORM
                                                   ? grad_bucket_context(L, l)
                                                   : grad_bucket_block(L, l);
    bucket_of[drafter_p_norm(L)] = grad_bucket_block(L, L - 1); // the final norm: the first gradient the backward finishes
    return 0;
}

// ----------------------------------------------------------------------------- the layer's sublayers

void drafter_dflash_attn_forward(drafter *d, student_work *w, int l, int C, const void *in, void *out) {
    backend *be = d->be;
    const drafter_config *c = &d->cfg;
    const drafter_layer *Ly = &d->layers[l];
    layer_saved *s = &w->saved[l];
    int B = (int)c->block_size, N = C * B, H = (int)c->hidden;
    int nq = (int)c->n_heads, nkv = (int)c->n_kv_heads, hd = (int)c->head_dim, qd = nq * hd, kvd = nkv * hd;
    float eps = (float)c->rms_eps, scale = 1.0f / sqrtf((float)hd);
    int window = c->layer_sliding[l] ? (int)c->sliding_window : 0;
    int causal = c->layer_sliding[l] ? c->sliding_causal : 0;
    step_linear(be, s->q_pre, in, Ly->wq, N, H, qd);
    ops_rmsnorm(be, s->q, s->q_pre, Ly->q_norm, N * nq, hd, eps);
    ops_rope(be, s->q, w->pos_blk, d->inv_freq, N, nq, hd);
    step_linear(be, s->kb_pre, in, Ly->wk, N, H, kvd);
    ops_rmsnorm(be, s->kb, s->kb_pre, Ly->k_norm, N * nkv, hd, eps);
    ops_rope(be, s->kb, w->pos_blk, d->inv_freq, N, nkv, hd);
    step_linear(be, s->vb, in, Ly->wv, N, H, kvd);
    ops_dflash_attn_forward(be, s->att, s->lse, s->q, s->kb, s->vb, w->kc[l], w->vc[l], w->anchors, w->seq_start, C, B, nq,
                            nkv, hd, scale, window, causal);
    step_linear(be, out, s->att, Ly->wo, N, qd, H);
}

void drafter_dflash_attn_backward(drafter *d, student_work *w, int l, int C, const void *in, const void *dout, void *din) {
    backend *be = d->be;
    const drafter_config *c = &d->cfg;
    const drafter_layer *Ly = &d->layers[l];
    const layer_saved *s = &w->saved[l];
    int B = (int)c->block_size, N = C * B, H = (int)c->hidden;
    int nq = (int)c->n_heads, nkv = (int)c->n_kv_heads, hd = (int)c->head_dim, qd = nq * hd, kvd = nkv * hd;
    float eps = (float)c->rms_eps, scale = 1.0f / sqrtf((float)hd);
    int window = c->layer_sliding[l] ? (int)c->sliding_window : 0;
    int causal = c->layer_sliding[l] ? c->sliding_causal : 0;
    step_linear_dx(be, w->datt, dout, Ly->wo, N, qd, H, 0);
    step_linear_dw(be, drafter_grad(d, drafter_p_layer(l, DRAFTER_T_O)), dout, s->att, N, qd, H);
    ops_dflash_attn_backward(be, w->dq, w->dkb, w->dvb, w->dkc[l], w->dvc[l], w->datt, s->att, s->lse, s->q, s->kb, s->vb,
                             w->kc[l], w->vc[l], w->anchors, w->seq_start, C, B, nq, nkv, hd, scale, window, causal);
    ops_rope_backward(be, w->dq, w->pos_blk, d->inv_freq, N, nq, hd);
    ops_rope_backward(be, w->dkb, w->pos_blk, d->inv_freq, N, nkv, hd);
    ops_rmsnorm_backward(be, w->dq_pre, drafter_grad(d, drafter_p_layer(l, DRAFTER_T_Q_NORM)), w->dq, s->q_pre, Ly->q_norm,
                         N * nq, hd, eps, 0);
    ops_rmsnorm_backward(be, w->dkb_pre, drafter_grad(d, drafter_p_layer(l, DRAFTER_T_K_NORM)), w->dkb, s->kb_pre,
                         Ly->k_norm, N * nkv, hd, eps, 0);
    step_linear_dx(be, din, w->dq_pre, Ly->wq, N, H, qd, 0);
    step_linear_dx(be, din, w->dkb_pre, Ly->wk, N, H, kvd, 1);
    step_linear_dx(be, din, w->dvb, Ly->wv, N, H, kvd, 1);
    step_linear_dw(be, drafter_grad(d, drafter_p_layer(l, DRAFTER_T_Q)), w->dq_pre, in, N, H, qd);
    step_linear_dw(be, drafter_grad(d, drafter_p_layer(l, DRAFTER_T_K)), w->dkb_pre, in, N, H, kvd);
    step_linear_dw(be, drafter_grad(d, drafter_p_layer(l, DRAFTER_T_V)), w->dvb, in, N, H, kvd);
}

void drafter_dflash_mlp_forward(drafter *d, student_work *w, int l, int C, const void *in, void *out) {
    backend *be = d->be;
    const drafter_config *c = &d->cfg;
    const drafter_layer *Ly = &d->layers[l];
    layer_saved *s = &w->saved[l];
    int N = C * (int)c->block_size, H = (int)c->hidden, I = (int)c->intermediate;
    step_linear(be, s->gate, in, Ly->w_gate, N, H, I);
    step_linear(be, s->up, in, Ly->w_up, N, H, I);
    ops_swiglu(be, s->act, s->gate, s->up, (int64_t)N * I);
    step_linear(be, out, s->act, Ly->w_down, N, I, H);
}

void drafter_dflash_mlp_backward(drafter *d, student_work *w, int l, int C, const void *in, const void *dout, void *din) {
    backend *be = d->be;
    const drafter_config *c = &d->cfg;
    const drafter_layer *Ly = &d->layers[l];
    const layer_saved *s = &w->saved[l];
    int N = C * (int)c->block_size, H = (int)c->hidden, I = (int)c->intermediate;
    step_linear_dx(be, w->dI_act, dout, Ly->w_down, N, I, H, 0);
    step_linear_dw(be, drafter_grad(d, drafter_p_layer(l, DRAFTER_T_DOWN)), dout, s->act, N, I, H);
    ops_swiglu_backward(be, w->dI_gate, w->dI_up, w->dI_act, s->gate, s->up, (int64_t)N * I);
    step_linear_dx(be, din, w->dI_gate, Ly->w_gate, N, H, I, 0);
    step_linear_dx(be, din, w->dI_up, Ly->w_up, N, H, I, 1);
    step_linear_dw(be, drafter_grad(d, drafter_p_layer(l, DRAFTER_T_GATE)), w->dI_gate, in, N, H, I);
    step_linear_dw(be, drafter_grad(d, drafter_p_layer(l, DRAFTER_T_UP)), w->dI_up, in, N, H, I);
}

// ----------------------------------------------------------------------------- the layer

// dflash_layer_forward: h_mid = h_in + attn(input_norm(h_in)); out = h_mid + mlp(post_norm(h_mid)).
static void dflash_layer_forward(drafter *d, student_work *w, int l, int C) {
    backend *be = d->be;
    const drafter_config *c = &d->cfg;
    const drafter_layer *Ly = &d->layers[l];
    layer_saved *s = &w->saved[l];
    int N = C * (int)c->block_size, H = (int)c->hidden;
    float eps = (float)c->rms_eps;
    ops_rmsnorm(be, s->u, s->h_in, Ly->input_norm, N, H, eps);
    drafter_dflash_attn_forward(d, w, l, C, s->u, w->tmp_h);
    step_copy_act(be, s->h_mid, s->h_in, (int64_t)N * H);
    ops_add(be, s->h_mid, w->tmp_h, (int64_t)N * H);
    ops_rmsnorm(be, s->u2, s->h_mid, Ly->post_norm, N, H, eps);
    drafter_dflash_mlp_forward(d, w, l, C, s->u2, w->tmp_h);
    step_copy_act(be, w->h_final, s->h_mid, (int64_t)N * H);
    ops_add(be, w->h_final, w->tmp_h, (int64_t)N * H);
}

static void dflash_layer_backward(drafter *d, student_work *w, int l, int C) {
    backend *be = d->be;
    const drafter_config *c = &d->cfg;
    const drafter_layer *Ly = &d->layers[l];
    const layer_saved *s = &w->saved[l];
    int N = C * (int)c->block_size, H = (int)c->hidden;
    float eps = (float)c->rms_eps;
    drafter_dflash_mlp_backward(d, w, l, C, s->u2, w->dh, w->du);
    ops_rmsnorm_backward(be, w->dh, drafter_grad(d, drafter_p_layer(l, DRAFTER_T_POST_NORM)), w->du, s->h_mid,
                         Ly->post_norm, N, H, eps, 1);
    drafter_dflash_attn_backward(d, w, l, C, s->u, w->dh, w->du);
    ops_rmsnorm_backward(be, w->dh, drafter_grad(d, drafter_p_layer(l, DRAFTER_T_INPUT_NORM)), w->du, s->h_in,
                         Ly->input_norm, N, H, eps, 1);
}

// dflash_decode_choice: the chain and the decode walk follow the logits' argmax.
static void dflash_decode_choice(const drafter *d, student_work *w, int C, int32_t *choice, step_stats *st) {
    int R = C * ((int)d->cfg.block_size - 1);
    memcpy(choice, w->h_argmax, (size_t)R * sizeof(int32_t));
}

const drafter_kind drafter_kind_dflash = {
    .name = "dflash",
    .architecture = "DFlashDraftModel",
    .model_type = "qwen3",
    .param_list = drafter_dflash_param_list,
    .bind = drafter_dflash_bind,
    .grad_buckets = drafter_dflash_grad_buckets,
    .layer_forward = dflash_layer_forward,
    .layer_backward = dflash_layer_backward,
    .decode_choice = dflash_decode_choice,
};
