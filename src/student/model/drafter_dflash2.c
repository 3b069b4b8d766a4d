// drafter_dflash2.c: the DFlash2 drafter kind (SPEC §3.1; drafter.kind "dflash2"): exported as the
// dflash package's DFlash2DraftModel on a qwen3 base. Its tensors: DFlash's (drafter_dflash.h, in
// the same order, first in the flat buffer), then per layer the two GroupedDynamicCausalConv
// modules (attention_conv, mlp_conv: base_kernel [2, K, H] and kernel_projection [2*K*H/G, H]).
// Its config keys (dflash_config, else the root, as the package's _draft_value reads them):
// conv_kernel_size K (the package's default 2), conv_group_size G (16; channels per group, H % G == 0),
// selector_top_k k (16) and selector_rank r (256), each required in a config.json (the defaults
// serve the drafter.* keys only). Last in the flat buffer, the CandidateSelector's
// three tensors: candidate_selector.predecessor_codebook [V, r] and .successor_codebook [V, r]
// (stored without ".weight": the package's from_pretrained key_mapping adds it) and
// candidate_selector.hidden_projection.weight [r, H], all normal(0, 0.02) like the package's
// _init_weights of nn.Embedding / nn.Linear. Its layer: DFlash's (drafter_dflash.h) with the
// attention and the MLP each between a conv's prepare and finish; after the loss, the selector's
// k-way CE on the scored rows; the chain and the decode walk follow the selector's greedy choice.
// The convolutions' math is ops_dynconv_forward / _backward (common/kernels/dynconv.h), the selector's selector.h
// (on the backend: student/loss/loss_selector.h, the loss term loss_terms.h names).
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/arena.h"
#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/json_util.h"
#include "common/core/tensor.h"
#include "common/kernels/ops.h"
#include "student/loss/loss_selector.h"
#include "student/loss/loss_terms.h"
#include "student/model/drafter.h"
#include "student/model/drafter_config.h"
#include "student/model/drafter_dflash.h"
#include "student/model/drafter_kind.h"
#include "student/model/drafter_layout.h"
#include "student/model/grad_buckets.h"
#include "student/model/step.h"
#include "student/model/step_work.h"

static const char *const conv_names[2] = {"attention_conv", "mlp_conv"};

// dflash2_param_list: DFlash's tensors, then per layer l and conv s (attention_conv, mlp_conv):
// layers.l.<s>.base_kernel [2, K, H] (identity init) and layers.l.<s>.kernel_projection.weight
// [2*K*H/G, H]; then the selector's predecessor, successor codebooks [V, r] and hidden_projection [r, H].
static int dflash2_param_list(const drafter_config *c, drafter_param *list) {
    int n = drafter_dflash_param_list(c, list);
    // the offset after DFlash's tensors (a count-only call, list NULL, needs none)
    int64_t off = list ? list[n - 1].offset + (list[n - 1].numel + DRAFTER_ALIGN - 1) / DRAFTER_ALIGN * DRAFTER_ALIGN : 0;
    int64_t H = c->hidden, K = c->conv_kernel, G = c->conv_group > 0 ? c->conv_group : 1;
    char nm[96];
    for (int64_t l = 0; l < c->n_layers; l++)
        for (int s = 0; s < 2; s++) {
            snprintf(nm, sizeof nm, "layers.%lld.%s.base_kernel", (long long)l, conv_names[s]);
            drafter_param_push(list, &n, &off, nm, 3, (int64_t[]){2, K, H}, 0, 1);
            snprintf(nm, sizeof nm, "layers.%lld.%s.kernel_projection.weight", (long long)l, conv_names[s]);
            drafter_param_push(list, &n, &off, nm, 2, (int64_t[]){2 * K * (H / G), H}, 0, 0);
        }
    int64_t V = c->vocab, r = c->selector_rank;
    drafter_param_push(list, &n, &off, "candidate_selector.predecessor_codebook", 2, (int64_t[]){V, r}, 0, 0);
    drafter_param_push(list, &n, &off, "candidate_selector.successor_codebook", 2, (int64_t[]){V, r}, 0, 0);
    drafter_param_push(list, &n, &off, "candidate_selector.hidden_projection.weight", 2, (int64_t[]){r, H}, 0, 0);
    return n;
}

// Where DFlash2's own tensors sit in d->params (after the trunk, drafter_layout.h), in the order
// dflash2_param_list pushes them: per layer l, conv j (0 attention_conv, 1 mlp_conv) its base_kernel
// at dflash2_p_conv(l, j) and its kernel_projection right after; then the selector's tensor j (0
// predecessor, 1 successor codebook, 2 hidden_projection) at dflash2_p_sel(j).
static int dflash2_p_conv(const drafter_config *c, int l, int j) { return drafter_p_own((int)c->n_layers) + 4 * l + 2 * j; }
static int dflash2_p_sel(const drafter_config *c, int j) { return dflash2_p_conv(c, (int)c->n_layers, 0) + j; }

// dflash2_grad_buckets: DFlash's buckets for its tensors; a layer's conv tensors are final with the
// layer's block backward (they see only the block's slots, never the context); the selector's with
// the last layer's (bucket 0: its gradient is complete once the last chunk's loss has run).
static int dflash2_grad_buckets(const drafter *d, int *bucket_of) {
    const drafter_config *c = &d->cfg;
    int L = (int)c->n_layers;
    if (d->n_params != dflash2_p_sel(c, 3))
        return error_set("gradient buckets: %d parameters for %d DFlash2 layers is not the drafter's layout", d->n_params, L);
    drafter base = *d; // DFlash's view: its tensors only
    base.n_params = drafter_p_own(L);
    if (drafter_dflash_grad_buckets(&base, bucket_of)) return -1;
    for (int l = 0; l < L; l++)
        for (int j = 0; j < 4; j++) {
            int i = dflash2_p_conv(c, l, j / 2) + j % 2;
            if (!strstr(d->params[i].name, conv_names[j / 2]))
                return error_set("gradient buckets: %s is not in the DFlash2 drafter's order", d->params[i].name);
            bucket_of[i] = grad_bucket_block(L, l);
        }
    for (int j = 0; j < 3; j++) {
        int i = dflash2_p_sel(c, j);
        if (!strstr(d->params[i].name, "candidate_selector."))
            return error_set("gradient buckets: %s is not in the DFlash2 drafter's order", d->params[i].name);
        bucket_of[i] = grad_bucket_block(L, L - 1);
    }
    return 0;
}

static void dflash2_defaults(drafter_config *c) {
    c->conv_kernel = 2;
    c->conv_group = 16;
    c->selector_top_k = 16;
    c->selector_rank = 256;
}

// dflash2_config_parse: the four keys, dflash_config's spelling winning over the root's.
static int dflash2_config_parse(drafter_config *c, const cJSON *root, const cJSON *dflash, const char *src) {
    const char *keys[4] = {"conv_kernel_size", "conv_group_size", "selector_top_k", "selector_rank"};
    int64_t *vals[4] = {&c->conv_kernel, &c->conv_group, &c->selector_top_k, &c->selector_rank};
    for (int i = 0; i < 4; i++) {
        // required, like the Qwen3 structural keys (drafter_config.c): they shape the tensors and the
        // selector, so a config that lost one is refused rather than read with the package's default
        if (!json_field(root, keys[i]) && !json_field(dflash, keys[i]))
            return error_set("%s: missing 'dflash_config.%s' (a DFlash2DraftModel key: the drafter's shape; the "
                             "exports of this trainer write it)", src, keys[i]);
        if (json_get_positive(root, keys[i], src, vals[i])) return -1;
        if (dflash && json_get_positive(dflash, keys[i], src, vals[i])) return -1;
    }
    if (c->hidden % c->conv_group)
        return error_set("%s: 'conv_group_size' %lld does not divide hidden_size %lld", src, (long long)c->conv_group,
                         (long long)c->hidden);
    if (c->selector_top_k > OPS_TOPK_MAX) // the student's top-K rows (ops_topk_lse_update, the CUDA loss) keep at most this many
        return error_set("%s: 'selector_top_k' %lld is above %d, the most candidates the student's top-K keeps", src,
                         (long long)c->selector_top_k, OPS_TOPK_MAX);
    if (c->selector_top_k > c->vocab)
        return error_set("%s: 'selector_top_k' %lld is larger than vocab_size %lld", src, (long long)c->selector_top_k,
                         (long long)c->vocab);
    if (c->conv_kernel > c->block_size)
        return error_set("%s: 'conv_kernel_size' %lld is longer than the block (block_size %lld)", src,
                         (long long)c->conv_kernel, (long long)c->block_size);
    return 0;
}

static void dflash2_config_write(const drafter_config *c, cJSON *root, cJSON *dflash) {
    (void)root;
    cJSON_AddNumberToObject(dflash, "conv_kernel_size", (double)c->conv_kernel);
    cJSON_AddNumberToObject(dflash, "conv_group_size", (double)c->conv_group);
    cJSON_AddNumberToObject(dflash, "selector_top_k", (double)c->selector_top_k);
    cJSON_AddNumberToObject(dflash, "selector_rank", (double)c->selector_rank);
}

// ----------------------------------------------------------------------------- the step

// The step's buffers of a DFlash2 drafter (w->kind_work): per layer l and conv j, at [2 l + j]: the
// projections dyn [N, 2*K*H/G] of the conv's input, prepare's output cin [N, H] (the attention's /
// MLP's input) and finish's input pre [N, H] (o_proj's / down_proj's output); one gradient scratch
// of each width; the selector's per-row results and workspace, and their host copies.
typedef struct {
    void **dyn, **cin, **pre;  // [2 L] x
    void *ddyn, *dconv;        // [N, 2*K*H/G], [N, H]
    float *sel_loss;           // [R] the selector's k-way CE
    uint8_t *sel_hit;          // [R] the label is among the candidates
    int32_t *sel_choice;       // [R] its greedy choice (prev = the slot before's choice)
    void *sel_ws;
    float *h_sel_loss;         // host copies (not on a dry arena)
    uint8_t *h_sel_hit;
    int32_t *h_sel_choice;
} dflash2_work;

// CONV_LD: the width of a conv module's kernel_projection output, 2*K*H/G.
#define CONV_LD(c) ((size_t)(2 * (c)->conv_kernel * ((c)->hidden / ((c)->conv_group > 0 ? (c)->conv_group : 1))))

static void *dflash2_work_create(const drafter *d, arena *a, int64_t N, int64_t R) {
    const drafter_config *c = &d->cfg;
    size_t e = dtype_size(ops_act_dtype(d->be)), H = (size_t)c->hidden, L = (size_t)c->n_layers;
    dflash2_work *k = xcalloc(1, sizeof *k);
    k->dyn = xcalloc(2 * L, sizeof(void *));
    k->cin = xcalloc(2 * L, sizeof(void *));
    k->pre = xcalloc(2 * L, sizeof(void *));
    for (size_t i = 0; i < 2 * L; i++) {
        k->dyn[i] = arena_alloc(a, (size_t)N * CONV_LD(c) * e);
        k->cin[i] = arena_alloc(a, (size_t)N * H * e);
        k->pre[i] = arena_alloc(a, (size_t)N * H * e);
    }
    k->ddyn = arena_alloc(a, (size_t)N * CONV_LD(c) * e);
    k->dconv = arena_alloc(a, (size_t)N * H * e);
    k->sel_loss = arena_alloc(a, (size_t)R * sizeof(float));
    k->sel_hit = arena_alloc(a, (size_t)R);
    k->sel_choice = arena_alloc(a, (size_t)R * sizeof(int32_t));
    k->sel_ws = arena_alloc(a, loss_selector_workspace_bytes(R, c->selector_rank, (int)c->selector_top_k));
    if (!a->dry) {
        k->h_sel_loss = xcalloc((size_t)R, sizeof(float));
        k->h_sel_hit = xcalloc((size_t)R, 1);
        k->h_sel_choice = xcalloc((size_t)R, sizeof(int32_t));
    }
    return k;
}

static void dflash2_work_destroy(void *kind_work) {
    dflash2_work *k = kind_work;
    if (!k) return;
    free(k->dyn);
    free(k->cin);
    free(k->pre);
    free(k->h_sel_loss);
    free(k->h_sel_hit);
    free(k->h_sel_choice);
    free(k);
}

// The convolutions (SPEC §3.1) of layer l, conv j (0 around the attention, 1 around the MLP), over
// the chunk's N = C * B rows. conv_prepare: dyn = u P^T; cin = conv(u, dyn[:, :K*H/G], base[0]).
static void conv_prepare(drafter *d, dflash2_work *k, int l, int j, const void *u, int C) {
    const drafter_config *c = &d->cfg;
    int B = (int)c->block_size, N = C * B, H = (int)c->hidden, ld = (int)CONV_LD(c), i = 2 * l + j;
    int p = dflash2_p_conv(c, l, j);
    step_linear(d->be, k->dyn[i], u, drafter_weight(d, p + 1), N, H, ld);
    ops_dynconv_forward(d->be, k->cin[i], u, k->dyn[i], ld, drafter_weight(d, p), N, B, H, (int)c->conv_kernel,
                        (int)c->conv_group);
}
// conv_finish: out = conv(pre, dyn[:, K*H/G:], base[1]).
static void conv_finish(drafter *d, const dflash2_work *k, int l, int j, void *out, int C) {
    const drafter_config *c = &d->cfg;
    int B = (int)c->block_size, H = (int)c->hidden, ld = (int)CONV_LD(c), K = (int)c->conv_kernel, i = 2 * l + j;
    size_t half = (size_t)ld / 2 * dtype_size(ops_act_dtype(d->be)), bk = (size_t)K * H * dtype_size(ops_act_dtype(d->be));
    ops_dynconv_forward(d->be, out, k->pre[i], (const char *)k->dyn[i] + half, ld,
                        (const char *)drafter_weight(d, dflash2_p_conv(c, l, j)) + bk, C * B, B, H, K, (int)c->conv_group);
}
// conv_finish_backward: from dout = d(finish's output): dpre (finish's input grad), k->ddyn's second
// half, base[1]'s gradient.
static void conv_finish_backward(drafter *d, dflash2_work *k, int l, int j, void *dpre, const void *dout, int C) {
    const drafter_config *c = &d->cfg;
    int B = (int)c->block_size, H = (int)c->hidden, ld = (int)CONV_LD(c), K = (int)c->conv_kernel, i = 2 * l + j;
    int p = dflash2_p_conv(c, l, j);
    size_t e = dtype_size(ops_act_dtype(d->be)), half = (size_t)ld / 2 * e, bk = (size_t)K * H * e;
    ops_dynconv_backward(d->be, dpre, (char *)k->ddyn + half, drafter_grad(d, p) + K * H, dout, k->pre[i],
                         (const char *)k->dyn[i] + half, ld, (const char *)drafter_weight(d, p) + bk, C * B, B, H, K,
                         (int)c->conv_group);
}
// conv_prepare_backward: from dcin = d(prepare's output) in k->dconv, with k->ddyn's second half
// already set: du = d(u) through both the conv and the projection; base[0]'s and P's gradients.
static void conv_prepare_backward(drafter *d, dflash2_work *k, int l, int j, void *du, const void *u, int C) {
    const drafter_config *c = &d->cfg;
    int B = (int)c->block_size, N = C * B, H = (int)c->hidden, ld = (int)CONV_LD(c), K = (int)c->conv_kernel, i = 2 * l + j;
    int p = dflash2_p_conv(c, l, j);
    ops_dynconv_backward(d->be, du, k->ddyn, drafter_grad(d, p), k->dconv, u, k->dyn[i], ld, drafter_weight(d, p), N, B, H,
                         K, (int)c->conv_group);
    step_linear_dx(d->be, du, k->ddyn, drafter_weight(d, p + 1), N, H, ld, 1);
    step_linear_dw(d->be, drafter_grad(d, p + 1), k->ddyn, u, N, H, ld);
}

// dflash2_layer_forward: DFlash's layer with q/k/v reading prepare(u) and o_proj's output going
// through finish before the residual add; likewise gate/up and down_proj around the MLP.
static void dflash2_layer_forward(drafter *d, student_work *w, int l, int C) {
    backend *be = d->be;
    const drafter_config *c = &d->cfg;
    const drafter_layer *Ly = &d->layers[l];
    layer_saved *s = &w->saved[l];
    dflash2_work *k = w->kind_work;
    int N = C * (int)c->block_size, H = (int)c->hidden;
    float eps = (float)c->rms_eps;
    ops_rmsnorm(be, s->u, s->h_in, Ly->input_norm, N, H, eps);
    conv_prepare(d, k, l, 0, s->u, C);
    drafter_dflash_attn_forward(d, w, l, C, k->cin[2 * l], k->pre[2 * l]);
    conv_finish(d, k, l, 0, w->tmp_h, C);
    step_copy_act(be, s->h_mid, s->h_in, (int64_t)N * H);
    ops_add(be, s->h_mid, w->tmp_h, (int64_t)N * H);
    ops_rmsnorm(be, s->u2, s->h_mid, Ly->post_norm, N, H, eps);
    conv_prepare(d, k, l, 1, s->u2, C);
    drafter_dflash_mlp_forward(d, w, l, C, k->cin[2 * l + 1], k->pre[2 * l + 1]);
    conv_finish(d, k, l, 1, w->tmp_h, C);
    step_copy_act(be, w->h_final, s->h_mid, (int64_t)N * H);
    ops_add(be, w->h_final, w->tmp_h, (int64_t)N * H);
}

static void dflash2_layer_backward(drafter *d, student_work *w, int l, int C) {
    backend *be = d->be;
    const drafter_config *c = &d->cfg;
    const drafter_layer *Ly = &d->layers[l];
    const layer_saved *s = &w->saved[l];
    dflash2_work *k = w->kind_work;
    int N = C * (int)c->block_size, H = (int)c->hidden;
    float eps = (float)c->rms_eps;
    // MLP: h_out = h_mid + finish(down(...)), the MLP reading prepare(u2)
    conv_finish_backward(d, k, l, 1, w->tmp_h, w->dh, C);
    drafter_dflash_mlp_backward(d, w, l, C, k->cin[2 * l + 1], w->tmp_h, k->dconv);
    conv_prepare_backward(d, k, l, 1, w->du, s->u2, C);
    ops_rmsnorm_backward(be, w->dh, drafter_grad(d, drafter_p_layer(l, DRAFTER_T_POST_NORM)), w->du, s->h_mid,
                         Ly->post_norm, N, H, eps, 1);
    // attention: h_mid = h_in + finish(o_proj(attn(prepare(u))))
    conv_finish_backward(d, k, l, 0, w->tmp_h, w->dh, C);
    drafter_dflash_attn_backward(d, w, l, C, k->cin[2 * l], w->tmp_h, k->dconv);
    conv_prepare_backward(d, k, l, 0, w->du, s->u, C);
    ops_rmsnorm_backward(be, w->dh, drafter_grad(d, drafter_p_layer(l, DRAFTER_T_INPUT_NORM)), w->du, s->h_in,
                         Ly->input_norm, N, H, eps, 1);
}

// dflash2_row_topk: the selector's candidates are the loss's sorted student top-k.
static int dflash2_row_topk(const drafter_config *c) { return (int)c->selector_top_k; }

// dflash2_selector: the candidate selector on the chunk's scored rows (SPEC §3.1; loss_selector.h, on
// the backend): the selector's loss term. Per row r = slot j of anchor i, candidates = the loss's
// sorted student top-k (their log-probs as the unary term: a constant per row apart from the
// logits; the row stride is the step's student top-K, loss_rows). Training term (rows with weight
// w_r > 0): k-way CE with label y_r, prev = the label of slot j-1 (teacher forcing; the anchor's
// token for j = 1), its gradient times loss.selector_weight * w_r into the selector's tensors and
// (dx not NULL) the rows' dx. The greedy choice of every row in the sequence, prev = slot j-1's
// choice, into sel_choice for the chain / decode walk (dflash2_decode_choice reads the rows back).
static void dflash2_selector(drafter *d, student_work *w, int C, void *dx) {
    const drafter_config *c = &d->cfg;
    dflash2_work *k = w->kind_work;
    int B = (int)c->block_size;
    selector_batch sb = {.anchors = C, .slots = B - 1, .vocab = c->vocab, .hidden = c->hidden, .rank = c->selector_rank,
                         .k = (int)c->selector_top_k, .ld_cand = w->topk, .x = w->xs, .cand = w->rows.s_topk_idx,
                         .u = w->rows.s_topk_logp, .label = w->label, .w = w->rows.w, .in_seq = w->in_seq,
                         .first = w->blk_tokens, .first_ld = B, .pred = drafter_weight(d, dflash2_p_sel(c, 0)),
                         .succ = drafter_weight(d, dflash2_p_sel(c, 1)), .proj = drafter_weight(d, dflash2_p_sel(c, 2)),
                         .lm_head = d->lm_head};
    selector_out out = {.loss = k->sel_loss, .hit = k->sel_hit, .choice = k->sel_choice};
    loss_selector_grads g = {.pred = drafter_grad(d, dflash2_p_sel(c, 0)), .succ = drafter_grad(d, dflash2_p_sel(c, 1)),
                             .proj = drafter_grad(d, dflash2_p_sel(c, 2)), .dx = dx};
    loss_selector_forward_backward(d->be, &sb, loss_term_coef(LOSS_TERM_SEL, w->lc), k->sel_ws, &out, dx ? &g : NULL);
}

// dflash2_decode_choice: the chain and the decode walk follow the selector's greedy choice (SPEC
// §6); the selector's statistics over the scored slots (mask 1): its weighted k-way CE, the slots,
// the misses (labels that are no candidate).
static void dflash2_decode_choice(const drafter *d, student_work *w, int C, int32_t *choice, step_stats *st) {
    dflash2_work *k = w->kind_work;
    int R = C * ((int)d->cfg.block_size - 1);
    backend_copy_to_host(d->be, k->h_sel_loss, k->sel_loss, (size_t)R * sizeof(float));
    backend_copy_to_host(d->be, k->h_sel_hit, k->sel_hit, (size_t)R);
    backend_copy_to_host(d->be, k->h_sel_choice, k->sel_choice, (size_t)R * sizeof(int32_t));
    for (int r = 0; r < R; r++) {
        if (w->h_mask[r] > 0) {
            double wr = w->h_w[r];
            st->sum_w_term[LOSS_TERM_SEL] += wr * k->h_sel_loss[r];
            st->term_scored[LOSS_TERM_SEL]++;
            st->term_miss[LOSS_TERM_SEL] += !k->h_sel_hit[r];
        }
        choice[r] = k->h_sel_choice[r];
    }
}

const drafter_kind drafter_kind_dflash2 = {
    .name = "dflash2",
    .architecture = "DFlash2DraftModel",
    .model_type = "qwen3",
    .param_list = dflash2_param_list,
    .bind = drafter_dflash_bind, // its own tensors have no pointers in struct drafter: read by index (drafter_weight)
    .grad_buckets = dflash2_grad_buckets,
    .defaults = dflash2_defaults,
    .config_parse = dflash2_config_parse,
    .config_write = dflash2_config_write,
    .layer_forward = dflash2_layer_forward,
    .layer_backward = dflash2_layer_backward,
    .row_topk = dflash2_row_topk,
    .work_create = dflash2_work_create,
    .work_destroy = dflash2_work_destroy,
    .rows = dflash2_selector,
    .decode_choice = dflash2_decode_choice,
};
