// step.c: the anchor-chunked student step (see step.h). Shapes in comments: S context tokens,
// C anchors per chunk, N = C*B block rows, R = C*(B-1) scored rows, H hidden, qd = nq*hd,
// kvd = nkv*hd, I intermediate, L layers.
#include "student/model/step.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/half.h"
#include "common/kernels/ops.h"
#include "common/kernels/ops_dynconv.h"
#include "common/kernels/ops_train.h"
#include "student/model/grad_buckets.h"
#include "student/model/metrics.h"
#include "student/loss/loss_selector.h"

const int step_tree_budgets[STEP_TREE_BUDGETS] = {8, 32, 128};
#define STEP_TREE_TOPK 8 // student candidates per slot kept for the tree metric

typedef struct { // what one layer's backward needs from its forward, for one chunk
    void *h_in, *h_mid;          // [N, H] residual stream before attention / before the MLP
    void *u, *u2;                // [N, H] normed inputs of attention / MLP
    void *q_pre, *q, *att;       // [N, qd]
    void *kb_pre, *kb, *vb;      // [N, kvd]
    float *lse;                  // [N, nq]
    void *gate, *up, *act;       // [N, I]
    // DFlash2 (layers[l].conv_base set; NULL otherwise), conv 0 around the attention, 1 the MLP:
    void *dyn[2];                // [N, 2*K*H/G] kernel_projection of u / u2
    void *cin[2];                // [N, H] prepare's output: the attention's / MLP's input
    void *pre[2];                // [N, H] the attention's o_proj / the MLP's down_proj output (finish's input)
} layer_saved;

struct student_work {
    student_plan plan;
    // the batch on the device
    void *features;              // [S, nf*H] act
    int32_t *pos_ctx;            // [S]
    // context and its per-layer keys/values
    void *ctx_pre, *ctx, *dctx, *dctx_pre; // [S, H]
    void **kc_pre, **kc, **vc;   // L x [S, kvd] act
    float **dkc, **dvc;          // L x [S, kvd] f32 accumulators
    void *ctx_scratch_a, *ctx_scratch_b;   // [S, kvd] act
    // one chunk
    int32_t *anchors, *seq_start;          // [C]
    int32_t *blk_tokens, *pos_blk;         // [N]
    layer_saved *saved;                    // [L]
    void *h_final, *x, *tmp_h;             // [N, H]
    void *xs, *dxs;                        // [R, H]
    void *dh, *du;                         // [N, H]
    void *dI_act, *dI_gate, *dI_up;        // [N, I]
    void *dq, *dq_pre, *datt;              // [N, qd]
    void *dkb, *dkb_pre, *dvb;             // [N, kvd]
    void *ddyn, *dconv;                    // DFlash2: [N, 2*K*H/G], [N, H] (NULL otherwise)
    // loss inputs and per-row outputs (device)
    int32_t *label, *t_idx;                // [R], [R, k]
    float *mask, *t_val, *t_lse;           // [R], [R, k], [R]
    uint8_t *in_seq;                       // [R]
    loss_rows rows;
    void *loss_ws;
    // DFlash2's selector (NULL otherwise): per-row results, its workspace
    float *sel_loss;                       // [R] its k-way CE
    uint8_t *sel_hit;                      // [R] the label is among the candidates
    int32_t *sel_choice;                   // [R] its greedy choice (prev = the slot before's choice)
    void *sel_ws;
    // host staging
    int32_t *h_label, *h_t_idx, *h_argmax, *h_s_idx, *h_greedy;
    float *h_sel_loss;                          // DFlash2's selector: sel_loss, sel_hit, sel_choice on the host
    int32_t *h_sel_choice;
    uint8_t *h_sel_hit;
    float *h_mask, *h_t_val, *h_t_lse, *h_w, *h_term[LOSS_ROW_TERMS], *h_s_logp, *h_conv;
    uint8_t *h_in_seq;
    int32_t *h_blk_tokens, *h_pos_blk, *h_pos_ctx, *h_anchor_start;
    int n_layers;
    size_t parts[STEP_WORK_PARTS]; // bytes carved per part (see step.h)
    step_grad_hook hook;           // NULL: none (student_work_set_grad_hook)
    void *hook_ctx;
};

// CONV_LD: the width of a DFlash2 conv module's kernel_projection output, 2*K*H/G.
#define CONV_LD(c) ((size_t)(2 * (c)->conv_kernel * ((c)->hidden / ((c)->conv_group > 0 ? (c)->conv_group : 1))))

// step_topk: the student's top-K kept per row: the tree metric's STEP_TREE_TOPK, or DFlash2's
// selector_top_k candidates when more (sorted, so the first STEP_TREE_TOPK are the tree's).
static int step_topk(const drafter_config *c) {
    return c->selector_top_k > STEP_TREE_TOPK ? (int)c->selector_top_k : STEP_TREE_TOPK;
}

// The loss plan a chunk of R scored rows runs with: row_chunk 0 means all of them, and the student's
// top-K (step_topk). The workspace is sized from the same function, so they cannot differ.
static loss_plan step_loss_plan(const drafter_config *c, const student_plan *p, int R) {
    loss_plan lp = p->loss;
    if (lp.row_chunk <= 0 || lp.row_chunk > R) lp.row_chunk = R;
    lp.topk_student = step_topk(c);
    return lp;
}

// Carve every device buffer from a (possibly dry) arena; host staging only when not dry.
static void student_work_carve(student_work *w, arena *a, const drafter *d, const student_plan *p) {
    const drafter_config *c = &d->cfg;
    size_t e = dtype_size(ops_act_dtype(d->be));
    size_t S = (size_t)p->max_tokens, C = (size_t)p->chunk_anchors, B = (size_t)c->block_size;
    size_t N = C * B, R = C * (B - 1), H = (size_t)c->hidden, I = (size_t)c->intermediate;
    size_t qd = (size_t)(c->n_heads * c->head_dim), kvd = (size_t)(c->n_kv_heads * c->head_dim);
    size_t L = (size_t)c->n_layers, nf = (size_t)c->n_feat, k = (size_t)p->k, K = (size_t)step_topk(c);
    w->plan = *p;
    w->n_layers = (int)L;
    size_t start = a->used;
    w->features = arena_alloc(a, S * nf * H * e);
    w->pos_ctx = arena_alloc(a, S * sizeof(int32_t));
    size_t mark = a->used;
    w->parts[0] = mark - start;
    w->ctx_pre = arena_alloc(a, S * H * e);
    w->ctx = arena_alloc(a, S * H * e);
    w->dctx = arena_alloc(a, S * H * e);
    w->dctx_pre = arena_alloc(a, S * H * e);
    for (size_t l = 0; l < L; l++) {
        w->kc_pre[l] = arena_alloc(a, S * kvd * e);
        w->kc[l] = arena_alloc(a, S * kvd * e);
        w->vc[l] = arena_alloc(a, S * kvd * e);
        w->dkc[l] = arena_alloc(a, S * kvd * sizeof(float));
        w->dvc[l] = arena_alloc(a, S * kvd * sizeof(float));
    }
    w->ctx_scratch_a = arena_alloc(a, S * kvd * e);
    w->ctx_scratch_b = arena_alloc(a, S * kvd * e);
    w->parts[1] = a->used - mark;
    mark = a->used;
    w->anchors = arena_alloc(a, C * sizeof(int32_t));
    w->seq_start = arena_alloc(a, C * sizeof(int32_t));
    w->blk_tokens = arena_alloc(a, N * sizeof(int32_t));
    w->pos_blk = arena_alloc(a, N * sizeof(int32_t));
    for (size_t l = 0; l < L; l++) {
        layer_saved *s = &w->saved[l];
        s->h_in = arena_alloc(a, N * H * e);
        s->h_mid = arena_alloc(a, N * H * e);
        s->u = arena_alloc(a, N * H * e);
        s->u2 = arena_alloc(a, N * H * e);
        s->q_pre = arena_alloc(a, N * qd * e);
        s->q = arena_alloc(a, N * qd * e);
        s->att = arena_alloc(a, N * qd * e);
        s->kb_pre = arena_alloc(a, N * kvd * e);
        s->kb = arena_alloc(a, N * kvd * e);
        s->vb = arena_alloc(a, N * kvd * e);
        s->lse = arena_alloc(a, N * (size_t)c->n_heads * sizeof(float));
        s->gate = arena_alloc(a, N * I * e);
        s->up = arena_alloc(a, N * I * e);
        s->act = arena_alloc(a, N * I * e);
        for (int j = 0; j < 2 && c->conv_kernel > 0; j++) { // DFlash2 (the config says: the planner has no layers)
            s->dyn[j] = arena_alloc(a, N * CONV_LD(c) * e);
            s->cin[j] = arena_alloc(a, N * H * e);
            s->pre[j] = arena_alloc(a, N * H * e);
        }
    }
    w->h_final = arena_alloc(a, N * H * e);
    w->x = arena_alloc(a, N * H * e);
    w->tmp_h = arena_alloc(a, N * H * e);
    w->xs = arena_alloc(a, R * H * e);
    w->dxs = arena_alloc(a, R * H * e);
    w->dh = arena_alloc(a, N * H * e);
    w->du = arena_alloc(a, N * H * e);
    w->dI_act = arena_alloc(a, N * I * e);
    w->dI_gate = arena_alloc(a, N * I * e);
    w->dI_up = arena_alloc(a, N * I * e);
    w->dq = arena_alloc(a, N * qd * e);
    w->dq_pre = arena_alloc(a, N * qd * e);
    w->datt = arena_alloc(a, N * qd * e);
    w->dkb = arena_alloc(a, N * kvd * e);
    w->dkb_pre = arena_alloc(a, N * kvd * e);
    w->dvb = arena_alloc(a, N * kvd * e);
    if (c->conv_kernel > 0) {
        w->ddyn = arena_alloc(a, N * CONV_LD(c) * e);
        w->dconv = arena_alloc(a, N * H * e);
    }
    w->label = arena_alloc(a, R * sizeof(int32_t));
    w->t_idx = arena_alloc(a, R * k * sizeof(int32_t));
    w->mask = arena_alloc(a, R * sizeof(float));
    w->t_val = arena_alloc(a, R * k * sizeof(float));
    w->t_lse = arena_alloc(a, R * sizeof(float));
    w->in_seq = arena_alloc(a, R);
    w->rows.w = arena_alloc(a, R * sizeof(float));
    for (int t = 0; t < LOSS_ROW_TERMS; t++) w->rows.term[t] = arena_alloc(a, R * sizeof(float));
    w->rows.argmax = arena_alloc(a, R * sizeof(int32_t));
    w->rows.s_topk_idx = arena_alloc(a, R * K * sizeof(int32_t));
    w->rows.s_topk_logp = arena_alloc(a, R * K * sizeof(float));
    if (c->selector_rank > 0) {
        w->sel_loss = arena_alloc(a, R * sizeof(float));
        w->sel_hit = arena_alloc(a, R);
        w->sel_choice = arena_alloc(a, R * sizeof(int32_t));
        w->sel_ws = arena_alloc(a, loss_selector_workspace_bytes((int64_t)R, c->selector_rank, (int)c->selector_top_k));
    }
    w->parts[2] = a->used - mark;
    mark = a->used;
    loss_plan lp = step_loss_plan(c, p, (int)R);
    w->loss_ws = arena_alloc(a, loss_workspace_bytes(&lp, c->hidden, c->vocab, p->k));
    w->parts[3] = a->used - mark;
}

static void student_work_lists(student_work *w, int L) {
    w->kc_pre = xcalloc((size_t)L, sizeof(void *));
    w->kc = xcalloc((size_t)L, sizeof(void *));
    w->vc = xcalloc((size_t)L, sizeof(void *));
    w->dkc = xcalloc((size_t)L, sizeof(float *));
    w->dvc = xcalloc((size_t)L, sizeof(float *));
    w->saved = xcalloc((size_t)L, sizeof(layer_saved));
}

static void student_work_free_lists(student_work *w) {
    free(w->kc_pre);
    free(w->kc);
    free(w->vc);
    free(w->dkc);
    free(w->dvc);
    free(w->saved);
}

size_t student_work_bytes(const drafter *d, const student_plan *p) { return student_work_parts(d, p, NULL); }

size_t student_work_parts(const drafter *d, const student_plan *p, size_t parts[STEP_WORK_PARTS]) {
    student_work w;
    memset(&w, 0, sizeof w);
    student_work_lists(&w, (int)d->cfg.n_layers);
    arena a;
    arena_init_dry(&a, "student work (plan)");
    student_work_carve(&w, &a, d, p);
    student_work_free_lists(&w);
    if (parts) memcpy(parts, w.parts, sizeof w.parts);
    return a.used;
}

student_work *student_work_create(drafter *d, const student_plan *p, arena *a) {
    student_work *w = xcalloc(1, sizeof *w);
    const drafter_config *c = &d->cfg;
    student_work_lists(w, (int)c->n_layers);
    student_work_carve(w, a, d, p);
    size_t S = (size_t)p->max_tokens, C = (size_t)p->chunk_anchors, B = (size_t)c->block_size;
    size_t R = C * (B - 1), k = (size_t)p->k, K = (size_t)step_topk(c);
    w->h_sel_loss = xcalloc(R, sizeof(float));
    w->h_sel_choice = xcalloc(R, sizeof(int32_t));
    w->h_sel_hit = xcalloc(R, 1);
    w->h_label = xmalloc(R * sizeof(int32_t));
    w->h_t_idx = xmalloc(R * k * sizeof(int32_t));
    w->h_argmax = xmalloc(R * sizeof(int32_t));
    w->h_s_idx = xmalloc(R * K * sizeof(int32_t));
    w->h_greedy = xmalloc(R * sizeof(int32_t));
    w->h_mask = xmalloc(R * sizeof(float));
    w->h_t_val = xmalloc(R * k * sizeof(float));
    w->h_t_lse = xmalloc(R * sizeof(float));
    w->h_w = xmalloc(R * sizeof(float));
    for (int t = 0; t < LOSS_ROW_TERMS; t++) w->h_term[t] = xmalloc(R * sizeof(float));
    w->h_s_logp = xmalloc(R * K * sizeof(float));
    w->h_in_seq = xmalloc(R);
    w->h_blk_tokens = xmalloc(C * B * sizeof(int32_t));
    w->h_pos_blk = xmalloc(C * B * sizeof(int32_t));
    w->h_pos_ctx = xmalloc(S * sizeof(int32_t));
    w->h_anchor_start = xmalloc(2 * C * sizeof(int32_t));
    // features are converted on the host in row blocks through this buffer
    w->h_conv = xmalloc((size_t)(1 << 20) * sizeof(float));
    return w;
}

void student_work_destroy(student_work *w) {
    if (!w) return;
    free(w->h_label); free(w->h_t_idx); free(w->h_argmax); free(w->h_s_idx); free(w->h_greedy);
    free(w->h_mask); free(w->h_t_val); free(w->h_t_lse); free(w->h_w);
    for (int t = 0; t < LOSS_ROW_TERMS; t++) free(w->h_term[t]);
    free(w->h_s_logp); free(w->h_in_seq); free(w->h_blk_tokens); free(w->h_pos_blk);
    free(w->h_pos_ctx); free(w->h_anchor_start); free(w->h_conv);
    free(w->h_sel_loss); free(w->h_sel_choice); free(w->h_sel_hit);
    student_work_free_lists(w);
    free(w);
}

// ----------------------------------------------------------------------------- GEMM shorthands

// y[T, O] = x[T, I] @ W[O, I]^T
static void linear(backend *be, void *y, const void *x, const void *W, int T, int in, int out) {
    dtype dt = ops_act_dtype(be);
    backend_gemm(be, 0, 1, T, out, in, 1.0f, x, in, W, in, 0.0f, y, out, dt, dt);
}
// dx[T, I] (= or +=) dy[T, O] @ W[O, I]
static void linear_dx(backend *be, void *dx, const void *dy, const void *W, int T, int in, int out, int accumulate) {
    dtype dt = ops_act_dtype(be);
    backend_gemm(be, 0, 0, T, in, out, 1.0f, dy, out, W, in, accumulate ? 1.0f : 0.0f, dx, in, dt, dt);
}
// dW[O, I] += dy[T, O]^T @ x[T, I]   (fp32 accumulator)
static void linear_dw(backend *be, float *dW, const void *dy, const void *x, int T, int in, int out) {
    dtype dt = ops_act_dtype(be);
    backend_gemm(be, 1, 0, out, in, T, 1.0f, dy, out, x, in, 1.0f, dW, in, dt, DT_F32);
}
static void copy_act(backend *be, void *dst, const void *src, int64_t n) { ops_copy_2d(be, dst, n, src, n, 1, n); }

// The fp32 gradient of parameter i (index in export order).
static float *grad_of(drafter *d, int i) { return d->grad + d->params[i].offset; }
#define P_FC 0
#define P_HIDDEN_NORM 1
#define P_LAYER(l, j) (2 + (l) * 11 + (j)) // j: 0 input_norm, 1 q, 2 k, 3 v, 4 o, 5 q_norm, 6 k_norm, 7 post_norm, 8 gate, 9 up, 10 down
#define P_NORM(d) (2 + (int)(d)->cfg.n_layers * 11)
// DFlash2's conv j (0 attention, 1 MLP) of layer l: its base_kernel; +1 its kernel_projection (drafter_dflash2.c)
#define P_CONV(d, l, j) (P_NORM(d) + 1 + 4 * (l) + 2 * (j))
// DFlash2's selector tensor j: 0 predecessor, 1 successor codebook, 2 hidden_projection (after the convs)
#define P_SEL(d, j) (P_CONV(d, (d)->cfg.n_layers, 0) + (j))

// DFlash2 conv forward (SPEC §3.1). conv_prepare: dyn = u P^T; cin = conv(u, dyn[:, :K*H/G], base[0]).
static void conv_prepare(drafter *d, layer_saved *s, int l, int j, const void *u, int C) {
    const drafter_config *c = &d->cfg;
    int B = (int)c->block_size, N = C * B, H = (int)c->hidden, ld = (int)CONV_LD(c);
    linear(d->be, s->dyn[j], u, d->layers[l].conv_proj[j], N, H, ld);
    ops_dynconv_forward(d->be, s->cin[j], u, s->dyn[j], ld, d->layers[l].conv_base[j], N, B, H, (int)c->conv_kernel,
                        (int)c->conv_group);
}
// conv_finish: out = conv(pre, dyn[:, K*H/G:], base[1]).
static void conv_finish(drafter *d, const layer_saved *s, int l, int j, void *out, int C) {
    const drafter_config *c = &d->cfg;
    int B = (int)c->block_size, H = (int)c->hidden, ld = (int)CONV_LD(c), K = (int)c->conv_kernel;
    size_t half = (size_t)ld / 2 * dtype_size(ops_act_dtype(d->be)), bk = (size_t)K * H * dtype_size(ops_act_dtype(d->be));
    ops_dynconv_forward(d->be, out, s->pre[j], (const char *)s->dyn[j] + half, ld,
                        (const char *)d->layers[l].conv_base[j] + bk, C * B, B, H, K, (int)c->conv_group);
}
// conv_finish_backward: from dout = d(finish's output): dpre (finish's input grad), w->ddyn's second
// half, base[1]'s gradient.
static void conv_finish_backward(drafter *d, student_work *w, const layer_saved *s, int l, int j, void *dpre,
                                 const void *dout, int C) {
    const drafter_config *c = &d->cfg;
    int B = (int)c->block_size, H = (int)c->hidden, ld = (int)CONV_LD(c), K = (int)c->conv_kernel;
    size_t e = dtype_size(ops_act_dtype(d->be)), half = (size_t)ld / 2 * e, bk = (size_t)K * H * e;
    ops_dynconv_backward(d->be, dpre, (char *)w->ddyn + half, grad_of(d, P_CONV(d, l, j)) + K * H, dout, s->pre[j],
                         (const char *)s->dyn[j] + half, ld, (const char *)d->layers[l].conv_base[j] + bk, C * B, B, H,
                         K, (int)c->conv_group);
}
// conv_prepare_backward: from dcin = d(prepare's output) in w->dconv, with w->ddyn's second half
// already set: du = d(u) through both the conv and the projection; base[0]'s and P's gradients.
static void conv_prepare_backward(drafter *d, student_work *w, const layer_saved *s, int l, int j, void *du,
                                  const void *u, int C) {
    const drafter_config *c = &d->cfg;
    int B = (int)c->block_size, N = C * B, H = (int)c->hidden, ld = (int)CONV_LD(c), K = (int)c->conv_kernel;
    ops_dynconv_backward(d->be, du, w->ddyn, grad_of(d, P_CONV(d, l, j)), w->dconv, u, s->dyn[j], ld,
                         d->layers[l].conv_base[j], N, B, H, K, (int)c->conv_group);
    linear_dx(d->be, du, w->ddyn, d->layers[l].conv_proj[j], N, H, ld, 1);
    linear_dw(d->be, grad_of(d, P_CONV(d, l, j) + 1), w->ddyn, u, N, H, ld);
}

void student_work_set_grad_hook(student_work *w, step_grad_hook hook, void *ctx) { w->hook = hook, w->hook_ctx = ctx; }

// Gradient bucket b is final: its backward is queued on the backend (grad_buckets.h). 0 or -1.
static int grad_final(student_work *w, int b) { return w->hook ? w->hook(w->hook_ctx, b) : 0; }

// ----------------------------------------------------------------------------- the step

// Which sequence holds packed position p: s, e with cu[s] <= p < cu[s+1].
static int seq_of(const int32_t *cu, int n_seq, int p) {
    int lo = 0, hi = n_seq - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (cu[mid] <= p) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

static void context_forward(drafter *d, student_work *w, int S) {
    backend *be = d->be;
    const drafter_config *c = &d->cfg;
    int H = (int)c->hidden, nkv = (int)c->n_kv_heads, hd = (int)c->head_dim, kvd = nkv * hd;
    float eps = (float)c->rms_eps;
    linear(be, w->ctx_pre, w->features, d->fc, S, c->n_feat * H, H);           // [S, H]
    ops_rmsnorm(be, w->ctx, w->ctx_pre, d->hidden_norm, S, H, eps);
    for (int l = 0; l < (int)c->n_layers; l++) {
        const drafter_layer *L = &d->layers[l];
        linear(be, w->kc_pre[l], w->ctx, L->wk, S, H, kvd);                     // [S, kvd]
        ops_rmsnorm(be, w->kc[l], w->kc_pre[l], L->k_norm, S * nkv, hd, eps);
        ops_rope(be, w->kc[l], w->pos_ctx, d->inv_freq, S, nkv, hd);
        linear(be, w->vc[l], w->ctx, L->wv, S, H, kvd);
        backend_memset_zero(be, w->dkc[l], (size_t)S * kvd * sizeof(float));
        backend_memset_zero(be, w->dvc[l], (size_t)S * kvd * sizeof(float));
    }
}

// hooks: call the gradient hook as each bucket becomes final (the last micro-batch of a step).
static int context_backward(drafter *d, student_work *w, int S, int hooks) {
    backend *be = d->be;
    const drafter_config *c = &d->cfg;
    int H = (int)c->hidden, nkv = (int)c->n_kv_heads, hd = (int)c->head_dim, kvd = nkv * hd;
    float eps = (float)c->rms_eps;
    for (int l = 0; l < (int)c->n_layers; l++) {
        const drafter_layer *L = &d->layers[l];
        // values: Vc = ctx Wv^T
        ops_f32_to_act(be, w->ctx_scratch_a, w->dvc[l], (int64_t)S * kvd);
        linear_dw(be, grad_of(d, P_LAYER(l, 3)), w->ctx_scratch_a, w->ctx, S, H, kvd);
        linear_dx(be, w->dctx, w->ctx_scratch_a, L->wv, S, H, kvd, l > 0);
        // keys: Kc = rope(k_norm(ctx Wk^T))
        ops_f32_to_act(be, w->ctx_scratch_a, w->dkc[l], (int64_t)S * kvd);
        ops_rope_backward(be, w->ctx_scratch_a, w->pos_ctx, d->inv_freq, S, nkv, hd);
        ops_rmsnorm_backward(be, w->ctx_scratch_b, grad_of(d, P_LAYER(l, 6)), w->ctx_scratch_a, w->kc_pre[l], L->k_norm,
                             S * nkv, hd, eps, 0);
        linear_dw(be, grad_of(d, P_LAYER(l, 2)), w->ctx_scratch_b, w->ctx, S, H, kvd);
        linear_dx(be, w->dctx, w->ctx_scratch_b, L->wk, S, H, kvd, 1);
        if (hooks && grad_final(w, grad_bucket_context((int)c->n_layers, l))) return -1; // k_proj, v_proj, k_norm
    }
    ops_rmsnorm_backward(be, w->dctx_pre, grad_of(d, P_HIDDEN_NORM), w->dctx, w->ctx_pre, d->hidden_norm, S, H, eps, 0);
    linear_dw(be, grad_of(d, P_FC), w->dctx_pre, w->features, S, c->n_feat * H, H);
    return hooks ? grad_final(w, grad_bucket_front((int)c->n_layers)) : 0; // fc, hidden_norm
}

static void chunk_forward(drafter *d, student_work *w, int C) {
    backend *be = d->be;
    const drafter_config *c = &d->cfg;
    int B = (int)c->block_size, N = C * B, H = (int)c->hidden, I = (int)c->intermediate;
    int nq = (int)c->n_heads, nkv = (int)c->n_kv_heads, hd = (int)c->head_dim, qd = nq * hd, kvd = nkv * hd;
    float eps = (float)c->rms_eps, scale = 1.0f / sqrtf((float)hd);
    void *h = w->saved[0].h_in;
    ops_embed(be, h, d->embed, w->blk_tokens, N, H); // [N, H]: embed([tok[a], MASK, ..., MASK])
    for (int l = 0; l < (int)c->n_layers; l++) {
        const drafter_layer *L = &d->layers[l];
        layer_saved *s = &w->saved[l];
        if (l > 0) copy_act(be, s->h_in, h, (int64_t)N * H);
        int window = c->layer_sliding[l] ? (int)c->sliding_window : 0;
        int causal = c->layer_sliding[l] ? c->sliding_causal : 0;
        ops_rmsnorm(be, s->u, s->h_in, L->input_norm, N, H, eps);
        const void *ua = s->u; // the attention's input: u, or DFlash2's prepare(u)
        if (L->conv_base[0]) conv_prepare(d, s, l, 0, s->u, C), ua = s->cin[0];
        linear(be, s->q_pre, ua, L->wq, N, H, qd);
        ops_rmsnorm(be, s->q, s->q_pre, L->q_norm, N * nq, hd, eps);
        ops_rope(be, s->q, w->pos_blk, d->inv_freq, N, nq, hd);
        linear(be, s->kb_pre, ua, L->wk, N, H, kvd);
        ops_rmsnorm(be, s->kb, s->kb_pre, L->k_norm, N * nkv, hd, eps);
        ops_rope(be, s->kb, w->pos_blk, d->inv_freq, N, nkv, hd);
        linear(be, s->vb, ua, L->wv, N, H, kvd);
        ops_dflash_attn_forward(be, s->att, s->lse, s->q, s->kb, s->vb, w->kc[l], w->vc[l], w->anchors, w->seq_start, C, B,
                                nq, nkv, hd, scale, window, causal);
        copy_act(be, s->h_mid, s->h_in, (int64_t)N * H);
        linear(be, L->conv_base[0] ? s->pre[0] : w->tmp_h, s->att, L->wo, N, qd, H);
        if (L->conv_base[0]) conv_finish(d, s, l, 0, w->tmp_h, C);
        ops_add(be, s->h_mid, w->tmp_h, (int64_t)N * H);
        ops_rmsnorm(be, s->u2, s->h_mid, L->post_norm, N, H, eps);
        const void *um = s->u2; // the MLP's input: u2, or DFlash2's prepare(u2)
        if (L->conv_base[1]) conv_prepare(d, s, l, 1, s->u2, C), um = s->cin[1];
        linear(be, s->gate, um, L->w_gate, N, H, I);
        linear(be, s->up, um, L->w_up, N, H, I);
        ops_swiglu(be, s->act, s->gate, s->up, (int64_t)N * I);
        h = w->h_final; // the next layer's input is copied from here
        copy_act(be, h, s->h_mid, (int64_t)N * H);
        linear(be, L->conv_base[1] ? s->pre[1] : w->tmp_h, s->act, L->w_down, N, I, H);
        if (L->conv_base[1]) conv_finish(d, s, l, 1, w->tmp_h, C);
        ops_add(be, h, w->tmp_h, (int64_t)N * H);
    }
    ops_rmsnorm(be, w->x, w->h_final, d->norm, N, H, eps);
}

// dh holds d(loss)/d(x) on entry (slot-0 rows zero); leaves the weight gradients and dkc/dvc.
// hooks: the last chunk of a step's last micro-batch: each layer's block parameters are final after it.
static int chunk_backward(drafter *d, student_work *w, int C, int hooks) {
    backend *be = d->be;
    const drafter_config *c = &d->cfg;
    int B = (int)c->block_size, N = C * B, H = (int)c->hidden, I = (int)c->intermediate;
    int nq = (int)c->n_heads, nkv = (int)c->n_kv_heads, hd = (int)c->head_dim, qd = nq * hd, kvd = nkv * hd;
    float eps = (float)c->rms_eps, scale = 1.0f / sqrtf((float)hd);
    // final norm: dx -> dh (the gradient of the last residual stream); the input is in du
    ops_rmsnorm_backward(be, w->dh, grad_of(d, P_NORM(d)), w->du, w->h_final, d->norm, N, H, eps, 0);
    for (int l = (int)c->n_layers - 1; l >= 0; l--) {
        const drafter_layer *L = &d->layers[l];
        const layer_saved *s = &w->saved[l];
        int window = c->layer_sliding[l] ? (int)c->sliding_window : 0;
        int causal = c->layer_sliding[l] ? c->sliding_causal : 0;
        // MLP: h_out = h_mid + down(silu(gate(u2)) * up(u2))
        // (DFlash2: h_out = h_mid + finish(down(...)), the MLP reading prepare(u2))
        const void *d_down = w->dh, *um = s->u2;
        if (L->conv_base[1]) conv_finish_backward(d, w, s, l, 1, w->tmp_h, w->dh, C), d_down = w->tmp_h, um = s->cin[1];
        linear_dx(be, w->dI_act, d_down, L->w_down, N, I, H, 0);
        linear_dw(be, grad_of(d, P_LAYER(l, 10)), d_down, s->act, N, I, H);
        ops_swiglu_backward(be, w->dI_gate, w->dI_up, w->dI_act, s->gate, s->up, (int64_t)N * I);
        void *dum = L->conv_base[1] ? w->dconv : w->du; // d(the MLP's input)
        linear_dx(be, dum, w->dI_gate, L->w_gate, N, H, I, 0);
        linear_dx(be, dum, w->dI_up, L->w_up, N, H, I, 1);
        linear_dw(be, grad_of(d, P_LAYER(l, 8)), w->dI_gate, um, N, H, I);
        linear_dw(be, grad_of(d, P_LAYER(l, 9)), w->dI_up, um, N, H, I);
        if (L->conv_base[1]) conv_prepare_backward(d, w, s, l, 1, w->du, s->u2, C);
        ops_rmsnorm_backward(be, w->dh, grad_of(d, P_LAYER(l, 7)), w->du, s->h_mid, L->post_norm, N, H, eps, 1);
        // attention: h_mid = h_in + o_proj(attn(q, [Kc; kb], [Vc; vb]))
        const void *d_o = w->dh, *ua = s->u;
        if (L->conv_base[0]) conv_finish_backward(d, w, s, l, 0, w->tmp_h, w->dh, C), d_o = w->tmp_h, ua = s->cin[0];
        linear_dx(be, w->datt, d_o, L->wo, N, qd, H, 0);
        linear_dw(be, grad_of(d, P_LAYER(l, 4)), d_o, s->att, N, qd, H);
        ops_dflash_attn_backward(be, w->dq, w->dkb, w->dvb, w->dkc[l], w->dvc[l], w->datt, s->att, s->lse, s->q, s->kb,
                                 s->vb, w->kc[l], w->vc[l], w->anchors, w->seq_start, C, B, nq, nkv, hd, scale, window, causal);
        ops_rope_backward(be, w->dq, w->pos_blk, d->inv_freq, N, nq, hd);
        ops_rope_backward(be, w->dkb, w->pos_blk, d->inv_freq, N, nkv, hd);
        ops_rmsnorm_backward(be, w->dq_pre, grad_of(d, P_LAYER(l, 5)), w->dq, s->q_pre, L->q_norm, N * nq, hd, eps, 0);
        ops_rmsnorm_backward(be, w->dkb_pre, grad_of(d, P_LAYER(l, 6)), w->dkb, s->kb_pre, L->k_norm, N * nkv, hd, eps, 0);
        void *dua = L->conv_base[0] ? w->dconv : w->du; // d(the attention's input)
        linear_dx(be, dua, w->dq_pre, L->wq, N, H, qd, 0);
        linear_dx(be, dua, w->dkb_pre, L->wk, N, H, kvd, 1);
        linear_dx(be, dua, w->dvb, L->wv, N, H, kvd, 1);
        linear_dw(be, grad_of(d, P_LAYER(l, 1)), w->dq_pre, ua, N, H, qd);
        linear_dw(be, grad_of(d, P_LAYER(l, 2)), w->dkb_pre, ua, N, H, kvd);
        linear_dw(be, grad_of(d, P_LAYER(l, 3)), w->dvb, ua, N, H, kvd);
        if (L->conv_base[0]) conv_prepare_backward(d, w, s, l, 0, w->du, s->u, C);
        ops_rmsnorm_backward(be, w->dh, grad_of(d, P_LAYER(l, 0)), w->du, s->h_in, L->input_norm, N, H, eps, 1);
        if (hooks && grad_final(w, grad_bucket_block((int)c->n_layers, l))) return -1; // (with layer L-1: the final norm)
    }
    // the block input is the frozen embedding: the gradient stops here
    return 0;
}

// Upload the batch's features in the compute dtype and the context positions.
static void batch_upload(drafter *d, student_work *w, const student_batch *b) {
    backend *be = d->be;
    dtype act = ops_act_dtype(be);
    size_t e = dtype_size(act);
    int64_t n = (int64_t)b->S * b->features.shape[1], chunk = 1 << 20;
    if (b->features.device != DEVICE_CPU) { // received GPU to GPU (NCCL) in the compute dtype: one copy
        backend_copy_to_device(be, w->features, b->features.data, (size_t)n * e);
        n = 0;
    }
    void *conv = xmalloc((size_t)chunk * e);
    for (int64_t i = 0; i < n; i += chunk) {
        int64_t len = n - i < chunk ? n - i : chunk;
        convert_to_f32(w->h_conv, (const char *)b->features.data + (size_t)i * dtype_size(b->features.dt), b->features.dt, len);
        convert_from_f32(conv, act, w->h_conv, len);
        backend_copy_to_device(be, (char *)w->features + (size_t)i * e, conv, (size_t)len * e);
    }
    free(conv);
    for (int s = 0; s < b->n_seq; s++)
        for (int t = b->cu_seqlens[s]; t < b->cu_seqlens[s + 1]; t++) w->h_pos_ctx[t] = t - b->cu_seqlens[s];
    backend_copy_to_device(be, w->pos_ctx, w->h_pos_ctx, (size_t)b->S * sizeof(int32_t));
}

static int batch_check(const drafter *d, const student_plan *p, const student_batch *b) {
    const drafter_config *c = &d->cfg;
    if (b->S < 1 || b->S > p->max_tokens) return error_set("batch of %d tokens: the plan holds 1..%d", b->S, p->max_tokens);
    if (b->n_seq < 1 || b->n_seq > p->max_seqs) return error_set("batch of %d sequences: the plan holds 1..%d", b->n_seq, p->max_seqs);
    if (b->k != p->k) return error_set("batch carries top-%d teacher logits, the plan expects %d", b->k, p->k);
    if (b->features.ndim != 2 || b->features.shape[0] != b->S || b->features.shape[1] != (int64_t)c->n_feat * c->hidden)
        return error_set("batch features must be [%d, %lld] (tokens, n_feat * hidden)", b->S, (long long)(c->n_feat * c->hidden));
    if (b->features.dt != DT_F32 && b->features.dt != DT_BF16)
        return error_set("batch features have dtype %s (want F32 or BF16)", dtype_name(b->features.dt));
    if (b->features.device != DEVICE_CPU && (d->be->kind != BACKEND_CUDA || b->features.dt != ops_act_dtype(d->be)))
        return error_set("batch features in GPU memory must be in the compute dtype (%s) of a CUDA backend",
                         dtype_name(ops_act_dtype(d->be)));
    if (b->cu_seqlens[0] != 0 || b->cu_seqlens[b->n_seq] != b->S) return error_set("batch cu_seqlens must run from 0 to %d", b->S);
    for (int s = 0; s < b->n_seq; s++)
        if (b->cu_seqlens[s + 1] <= b->cu_seqlens[s]) return error_set("batch sequence %d is empty or its boundaries decrease", s);
    for (int t = 0; t < b->S; t++)
        if (b->tokens[t] < 0 || b->tokens[t] >= c->vocab)
            return error_set("batch token %d has id %d, outside the vocabulary [0, %lld)", t, b->tokens[t], (long long)c->vocab);
    return 0;
}

// Build the chunk's block inputs and the loss rows on the host, upload them. Returns 0 or -1.
static int chunk_prepare(drafter *d, const loss_config *lc, student_work *w, const student_batch *b, const int32_t *anchors,
                         int C) {
    const drafter_config *c = &d->cfg;
    backend *be = d->be;
    int B = (int)c->block_size, k = b->k, R = C * (B - 1);
    int32_t *starts = w->h_anchor_start, *ends = w->h_anchor_start + C;
    for (int i = 0; i < C; i++) {
        int a = anchors[i];
        if (a < 0 || a >= b->S) return error_set("anchor %d is outside the batch of %d tokens", a, b->S);
        int s = seq_of(b->cu_seqlens, b->n_seq, a);
        starts[i] = b->cu_seqlens[s];
        ends[i] = b->cu_seqlens[s + 1];
        if (a + 1 >= ends[i]) return error_set("anchor %d has no slot inside its sequence [%d, %d)", a, starts[i], ends[i]);
        for (int j = 0; j < B; j++) {
            w->h_blk_tokens[i * B + j] = j == 0 ? b->tokens[a] : (int32_t)c->mask_token_id;
            w->h_pos_blk[i * B + j] = a + j - starts[i];
        }
        for (int j = 1; j < B; j++) { // scored row r = slot j of anchor i
            int r = i * (B - 1) + (j - 1), pos = a + j, inside = pos < ends[i];
            int tpos = inside ? pos - 1 : ends[i] - 1; // the teacher's view of slot j: position a+j-1
            w->h_in_seq[r] = (uint8_t)inside;
            w->h_mask[r] = inside && b->loss_mask[pos] ? 1.0f : 0.0f;
            w->h_greedy[r] = b->topk_idx[(size_t)tpos * k];
            w->h_label[r] = lc->label_teacher ? w->h_greedy[r] : inside ? b->tokens[pos] : 0;
            memcpy(w->h_t_idx + (size_t)r * k, b->topk_idx + (size_t)tpos * k, (size_t)k * sizeof(int32_t));
            memcpy(w->h_t_val + (size_t)r * k, b->topk_val + (size_t)tpos * k, (size_t)k * sizeof(float));
            w->h_t_lse[r] = b->lse[tpos];
        }
    }
    backend_copy_to_device(be, w->anchors, anchors, (size_t)C * sizeof(int32_t));
    backend_copy_to_device(be, w->seq_start, starts, (size_t)C * sizeof(int32_t));
    backend_copy_to_device(be, w->blk_tokens, w->h_blk_tokens, (size_t)C * B * sizeof(int32_t));
    backend_copy_to_device(be, w->pos_blk, w->h_pos_blk, (size_t)C * B * sizeof(int32_t));
    backend_copy_to_device(be, w->label, w->h_label, (size_t)R * sizeof(int32_t));
    backend_copy_to_device(be, w->mask, w->h_mask, (size_t)R * sizeof(float));
    backend_copy_to_device(be, w->in_seq, w->h_in_seq, (size_t)R);
    backend_copy_to_device(be, w->t_idx, w->h_t_idx, (size_t)R * k * sizeof(int32_t));
    backend_copy_to_device(be, w->t_val, w->h_t_val, (size_t)R * k * sizeof(float));
    backend_copy_to_device(be, w->t_lse, w->h_t_lse, (size_t)R * sizeof(float));
    return 0;
}

// Per-chunk statistics from the loss rows (host).
// matches (NULL: not wanted): per anchor, the number of leading slots whose argmax is the target's
// greedy token (the chain acceptance less the bonus token).
static void chunk_stats(const drafter *d, student_work *w, int C, step_stats *st, int32_t *matches) {
    backend *be = d->be;
    int B = (int)d->cfg.block_size, R = C * (B - 1), K = STEP_TREE_TOPK, Kr = step_topk(&d->cfg);
    backend_copy_to_host(be, w->h_w, w->rows.w, (size_t)R * sizeof(float));
    for (int t = 0; t < LOSS_ROW_TERMS; t++)
        backend_copy_to_host(be, w->h_term[t], w->rows.term[t], (size_t)R * sizeof(float));
    backend_copy_to_host(be, w->h_argmax, w->rows.argmax, (size_t)R * sizeof(int32_t));
    backend_copy_to_host(be, w->h_s_idx, w->rows.s_topk_idx, (size_t)R * Kr * sizeof(int32_t));
    backend_copy_to_host(be, w->h_s_logp, w->rows.s_topk_logp, (size_t)R * Kr * sizeof(float));
    for (int r = 0; Kr > K && r < R; r++) { // the tree metric's K of each row's Kr (sorted): packed in place
        memmove(w->h_s_idx + (size_t)r * K, w->h_s_idx + (size_t)r * Kr, (size_t)K * sizeof(int32_t));
        memmove(w->h_s_logp + (size_t)r * K, w->h_s_logp + (size_t)r * Kr, (size_t)K * sizeof(float));
    }
    const int sel = d->sel_pred != NULL; // DFlash2: the chain follows the selector's choices (SPEC §6)
    if (sel) {
        backend_copy_to_host(be, w->h_sel_loss, w->sel_loss, (size_t)R * sizeof(float));
        backend_copy_to_host(be, w->h_sel_hit, w->sel_hit, (size_t)R);
        backend_copy_to_host(be, w->h_sel_choice, w->sel_choice, (size_t)R * sizeof(int32_t));
    }
    int32_t am[STEP_MAX_SLOTS + 1], gr[STEP_MAX_SLOTS + 1];
    for (int i = 0; i < C; i++) {
        int n = 0; // scorable slots: inside the sequence
        for (int j = 1; j < B; j++) {
            int r = i * (B - 1) + (j - 1);
            double wr = w->h_w[r];
            st->sum_w += wr;
            for (int t = 0; t < LOSS_ROW_TERMS; t++) st->sum_w_term[t] += wr * w->h_term[t][r];
            if (w->h_mask[r] > 0) {
                st->slot_scored[j]++;
                st->slot_correct[j] += w->h_argmax[r] == w->h_label[r];
            }
            if (sel && w->h_mask[r] > 0) {
                st->sum_w_term[LOSS_TERM_SEL] += wr * w->h_sel_loss[r];
                st->term_scored[LOSS_TERM_SEL]++;
                st->term_miss[LOSS_TERM_SEL] += !w->h_sel_hit[r];
            }
            if (w->h_in_seq[r]) n = j;
            am[j] = sel ? w->h_sel_choice[r] : w->h_argmax[r];
            gr[j] = w->h_greedy[r];
        }
        st->anchors++;
        double chain = metrics_tau_chain(am, gr, n);
        st->tau_chain_sum += chain;
        if (matches) matches[i] = (int32_t)chain - 1;
        const int32_t *ti = w->h_s_idx + (size_t)i * (B - 1) * K; // slot j's candidates in row j-1
        const float *tl = w->h_s_logp + (size_t)i * (B - 1) * K;
        for (int t = 0; t < STEP_TREE_BUDGETS; t++) st->tau_tree_sum[t] += metrics_tau_tree(ti, tl, K, gr, n, step_tree_budgets[t]);
    }
}

// The batch on the device and its context (both the step and the evaluation begin so).
static int step_begin(drafter *d, const student_plan *p, student_work *w, const student_batch *b) {
    int B = (int)d->cfg.block_size;
    if (B - 1 >= STEP_MAX_SLOTS) return error_set("block size %d is larger than %d", B, STEP_MAX_SLOTS);
    if (batch_check(d, p, b)) return -1;
    batch_upload(d, w, b);
    context_forward(d, w, b->S);
    return 0;
}

// DFlash2's candidate selector on the chunk's scored rows (SPEC §3.1; loss_selector.h, on the backend).
// Per row r = slot j of anchor i, candidates = the loss's sorted student top-k (their log-probs as
// the unary term: a constant per row apart from the logits). Training term (rows with weight
// w_r > 0): k-way CE with label y_r, prev = the label of slot j-1 (teacher forcing; the anchor's
// token for j = 1), its gradient times selector_weight * w_r into the selector's tensors and (dx
// not NULL) the rows' dx. The greedy choice of every row in the sequence, prev = slot j-1's choice,
// into sel_choice for the chain / decode walk (chunk_stats reads the per-row results back).
static void chunk_selector(drafter *d, const loss_config *lc, student_work *w, int C, void *dx) {
    const drafter_config *c = &d->cfg;
    int B = (int)c->block_size;
    selector_batch sb = {.anchors = C, .slots = B - 1, .vocab = c->vocab, .hidden = c->hidden, .rank = c->selector_rank,
                         .k = (int)c->selector_top_k, .ld_cand = step_topk(c), .x = w->xs, .cand = w->rows.s_topk_idx,
                         .u = w->rows.s_topk_logp, .label = w->label, .w = w->rows.w, .in_seq = w->in_seq,
                         .first = w->blk_tokens, .first_ld = B, .pred = d->sel_pred, .succ = d->sel_succ,
                         .proj = d->sel_proj, .lm_head = d->lm_head};
    selector_out out = {.loss = w->sel_loss, .hit = w->sel_hit, .choice = w->sel_choice};
    loss_selector_grads g = {.pred = grad_of(d, P_SEL(d, 0)), .succ = grad_of(d, P_SEL(d, 1)),
                             .proj = grad_of(d, P_SEL(d, 2)), .dx = dx};
    loss_selector_forward_backward(d->be, &sb, loss_term_coef(LOSS_TERM_SEL, lc), w->sel_ws, &out, dx ? &g : NULL);
}

// One chunk of C anchors: its blocks' forward and the fused loss on the scored rows (dx NULL:
// forward only, no loss gradient).
static int chunk_forward_loss(drafter *d, const loss_config *lc, const student_plan *p, student_work *w,
                              const student_batch *b, const int32_t *anchors, int C, void *dx) {
    const drafter_config *c = &d->cfg;
    backend *be = d->be;
    int B = (int)c->block_size, H = (int)c->hidden;
    size_t e = dtype_size(ops_act_dtype(be));
    if (chunk_prepare(d, lc, w, b, anchors, C)) return -1;
    chunk_forward(d, w, C);
    // the scored rows: slots 1..B-1 of each anchor, contiguous per anchor
    ops_copy_2d(be, w->xs, (int64_t)(B - 1) * H, (char *)w->x + (size_t)H * e, (int64_t)B * H, C, (int64_t)(B - 1) * H);
    loss_batch lb = {.n = C * (B - 1), .slots = B - 1, .hidden = c->hidden, .vocab = c->vocab, .k = b->k, .x = w->xs,
                     .lm_head = d->lm_head, .label = w->label, .mask = w->mask, .in_seq = w->in_seq,
                     .t_idx = w->t_idx, .t_val = w->t_val, .t_lse = w->t_lse};
    loss_plan lp = step_loss_plan(c, p, p->chunk_anchors * (B - 1));
    loss_forward_backward(be, lc, &lp, w->loss_ws, &lb, &w->rows, dx);
    if (d->sel_pred) chunk_selector(d, lc, w, C, dx);
    return 0;
}

int student_step(drafter *d, const loss_config *lc, const student_plan *p, student_work *w, const student_batch *b,
                 const int32_t *anchors, int n_anchors, step_stats *st) {
    backend *be = d->be;
    int B = (int)d->cfg.block_size, H = (int)d->cfg.hidden;
    size_t e = dtype_size(ops_act_dtype(be));
    if (step_begin(d, p, w, b)) return -1;
    for (int i0 = 0; i0 < n_anchors; i0 += p->chunk_anchors) {
        int C = n_anchors - i0 < p->chunk_anchors ? n_anchors - i0 : p->chunk_anchors;
        int N = C * B;
        if (chunk_forward_loss(d, lc, p, w, b, anchors + i0, C, w->dxs)) return -1;
        // dx of the block rows: 0 for slot 0 (never scored), the loss gradient elsewhere
        backend_memset_zero(be, w->du, (size_t)N * H * e);
        ops_copy_2d(be, (char *)w->du + (size_t)H * e, (int64_t)B * H, w->dxs, (int64_t)(B - 1) * H, C, (int64_t)(B - 1) * H);
        if (chunk_backward(d, w, C, w->hook && i0 + C >= n_anchors)) return -1;
        chunk_stats(d, w, C, st, NULL);
        st->block_tokens += N;
    }
    if (context_backward(d, w, b->S, w->hook != NULL)) return -1;
    backend_sync(be);
    st->ctx_tokens += b->S;
    return 0;
}

int student_eval(drafter *d, const loss_config *lc, const student_plan *p, student_work *w, const student_batch *b,
                 const int32_t *anchors, int n_anchors, step_stats *st, int32_t *matches) {
    int B = (int)d->cfg.block_size;
    if (step_begin(d, p, w, b)) return -1;
    for (int i0 = 0; i0 < n_anchors; i0 += p->chunk_anchors) {
        int C = n_anchors - i0 < p->chunk_anchors ? n_anchors - i0 : p->chunk_anchors;
        if (chunk_forward_loss(d, lc, p, w, b, anchors + i0, C, NULL)) return -1; // no dx: forward only
        chunk_stats(d, w, C, st, matches ? matches + i0 : NULL);
        st->block_tokens += C * B;
    }
    backend_sync(d->be);
    st->ctx_tokens += b->S;
    return 0;
}
