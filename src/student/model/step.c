// step.c: the anchor-chunked student step (see step.h): the batch, the context, the chunks, the
// loss, the statistics and every buffer; what differs between drafter kinds (their layers, their
// terms on the scored rows, what the decode walk follows) is called through d->cfg.kind
// (drafter_kind.h). Shapes in comments: S context tokens, C anchors per chunk, N = C*B block rows,
// R = C*(B-1) scored rows, H hidden, qd = nq*hd, kvd = nkv*hd, I intermediate, L layers.
#include "student/model/step.h"

#include <stdlib.h>
#include <string.h>

#include "common/core/check.h"
#include "common/core/error.h"
#include "common/core/half.h"
#include "common/kernels/ops.h"
#include "student/model/drafter_kind.h"
#include "student/model/drafter_layout.h"
#include "student/model/grad_buckets.h"
#include "student/model/metrics.h"
#include "student/model/step_work.h"

const int step_tree_budgets[STEP_TREE_BUDGETS] = {8, 32, 128};
#define STEP_TREE_TOPK 8 // student candidates per slot kept for the tree metric
_Static_assert(sizeof(((student_work *)0)->parts) == STEP_WORK_PARTS * sizeof(size_t), "student_work.parts: one per part");

// step_topk: the student's top-K kept per row: the tree metric's STEP_TREE_TOPK, or the kind's
// row_topk candidates when more (sorted, so the first STEP_TREE_TOPK are the tree's).
static int step_topk(const drafter_config *c) {
    int k = c->kind->row_topk ? c->kind->row_topk(c) : 0;
    return k > STEP_TREE_TOPK ? k : STEP_TREE_TOPK;
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
    w->n_layers = (int)L;
    w->topk = (int)K;
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
    w->kind = c->kind;
    if (c->kind->work_create) w->kind_work = c->kind->work_create(d, a, (int64_t)N, (int64_t)R); // the kind's own
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
    if (w.kind_work) w.kind->work_destroy(w.kind_work);
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
    w->h_label = xmalloc(R * sizeof(int32_t));
    w->h_t_idx = xmalloc(R * k * sizeof(int32_t));
    w->h_argmax = xmalloc(R * sizeof(int32_t));
    w->h_s_idx = xmalloc(R * K * sizeof(int32_t));
    w->h_greedy = xmalloc(R * sizeof(int32_t));
    w->h_choice = xmalloc(R * sizeof(int32_t));
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
    free(w->h_choice);
    if (w->kind_work) w->kind->work_destroy(w->kind_work);
    student_work_free_lists(w);
    free(w);
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
    step_linear(be, w->ctx_pre, w->features, d->fc, S, c->n_feat * H, H);           // [S, H]
    ops_rmsnorm(be, w->ctx, w->ctx_pre, d->hidden_norm, S, H, eps);
    for (int l = 0; l < (int)c->n_layers; l++) {
        const drafter_layer *L = &d->layers[l];
        step_linear(be, w->kc_pre[l], w->ctx, L->wk, S, H, kvd);                     // [S, kvd]
        ops_rmsnorm(be, w->kc[l], w->kc_pre[l], L->k_norm, S * nkv, hd, eps);
        ops_rope(be, w->kc[l], w->pos_ctx, d->inv_freq, S, nkv, hd);
        step_linear(be, w->vc[l], w->ctx, L->wv, S, H, kvd);
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
        step_linear_dw(be, drafter_grad(d, drafter_p_layer(l, DRAFTER_T_V)), w->ctx_scratch_a, w->ctx, S, H, kvd);
        step_linear_dx(be, w->dctx, w->ctx_scratch_a, L->wv, S, H, kvd, l > 0);
        // keys: Kc = rope(k_norm(ctx Wk^T))
        ops_f32_to_act(be, w->ctx_scratch_a, w->dkc[l], (int64_t)S * kvd);
        ops_rope_backward(be, w->ctx_scratch_a, w->pos_ctx, d->inv_freq, S, nkv, hd);
        ops_rmsnorm_backward(be, w->ctx_scratch_b, drafter_grad(d, drafter_p_layer(l, DRAFTER_T_K_NORM)), w->ctx_scratch_a, w->kc_pre[l], L->k_norm,
                             S * nkv, hd, eps, 0);
        step_linear_dw(be, drafter_grad(d, drafter_p_layer(l, DRAFTER_T_K)), w->ctx_scratch_b, w->ctx, S, H, kvd);
        step_linear_dx(be, w->dctx, w->ctx_scratch_b, L->wk, S, H, kvd, 1);
        if (hooks && grad_final(w, grad_bucket_context((int)c->n_layers, l))) return -1; // k_proj, v_proj, k_norm
    }
    ops_rmsnorm_backward(be, w->dctx_pre, drafter_grad(d, DRAFTER_P_HIDDEN_NORM), w->dctx, w->ctx_pre, d->hidden_norm, S, H, eps, 0);
    step_linear_dw(be, drafter_grad(d, DRAFTER_P_FC), w->dctx_pre, w->features, S, c->n_feat * H, H);
    return hooks ? grad_final(w, grad_bucket_front((int)c->n_layers)) : 0; // fc, hidden_norm
}

// The chunk's blocks through every layer: embed([tok[a], MASK, ..., MASK]), each layer by the kind
// (its input in saved[l].h_in, its output in h_final), the final norm into x.
static void chunk_forward(drafter *d, student_work *w, int C) {
    backend *be = d->be;
    const drafter_config *c = &d->cfg;
    int N = C * (int)c->block_size, H = (int)c->hidden;
    ops_embed(be, w->saved[0].h_in, d->embed, w->blk_tokens, N, H); // [N, H]
    if (d->embed_scale > 0) { // the target's scaled embedding (Gemma), the scale in the weights' dtype
        float s = d->embed_scale;
        if (ops_act_dtype(be) == DT_BF16) s = f32_from_bf16(bf16_from_f32(s));
        ops_scale(be, w->saved[0].h_in, s, (int64_t)N * H);
    }
    for (int l = 0; l < (int)c->n_layers; l++) {
        if (l > 0) step_copy_act(be, w->saved[l].h_in, w->h_final, (int64_t)N * H);
        c->kind->layer_forward(d, w, l, C);
    }
    ops_rmsnorm(be, w->x, w->h_final, d->norm, N, H, (float)c->rms_eps);
}

// du holds d(loss)/d(x) on entry (slot-0 rows zero); leaves the weight gradients and dkc/dvc.
// hooks: the last chunk of a step's last micro-batch: each layer's block parameters are final after it.
static int chunk_backward(drafter *d, student_work *w, int C, int hooks) {
    const drafter_config *c = &d->cfg;
    int N = C * (int)c->block_size, H = (int)c->hidden, L = (int)c->n_layers;
    // final norm: dx -> dh (the gradient of the last residual stream)
    ops_rmsnorm_backward(d->be, w->dh, drafter_grad(d, drafter_p_norm(L)), w->du, w->h_final, d->norm, N, H,
                         (float)c->rms_eps, 0);
    for (int l = L - 1; l >= 0; l--) {
        c->kind->layer_backward(d, w, l, C); // dh: d(layer l's output) -> d(its input)
        if (hooks && grad_final(w, grad_bucket_block(L, l))) return -1; // (with layer L-1: the final norm)
    }
    // the block input is the frozen embedding: the gradient stops here
    return 0;
}

void *student_work_features(student_work *w) { return w->features; }

// Upload the batch's features in the compute dtype and the context positions.
static void batch_upload(drafter *d, student_work *w, const student_batch *b) {
    backend *be = d->be;
    dtype act = ops_act_dtype(be);
    size_t e = dtype_size(act);
    int64_t n = (int64_t)b->S * b->features.shape[1], chunk = 1 << 20;
    if (b->features.device != DEVICE_CPU) { // on the device in the compute dtype: one copy (none when
        // batch_source uploaded them into w->features itself)
        if (b->features.data != w->features) backend_copy_to_device(be, w->features, b->features.data, (size_t)n * e);
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
    if (b->features.device != DEVICE_CPU && (!d->be->caps.device || b->features.dt != ops_act_dtype(d->be)))
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
// matches (NULL: not wanted): per anchor, the number of leading slots whose choice (the kind's
// decode_choice: the argmax, or the kind's own) is the target's greedy token (the chain acceptance
// less the bonus token).
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
    d->cfg.kind->decode_choice(d, w, C, w->h_choice, st); // what the chain follows; the kind's statistics
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
            if (w->h_in_seq[r]) n = j;
            am[j] = w->h_choice[r];
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

// One chunk of C anchors: its blocks' forward and the fused loss on the scored rows (dx NULL:
// forward only, no loss gradient).
static int chunk_forward_loss(drafter *d, const loss_config *lc, const student_plan *p, student_work *w,
                              const student_batch *b, const int32_t *anchors, int C, void *dx) {
    const drafter_config *c = &d->cfg;
    backend *be = d->be;
    int B = (int)c->block_size, H = (int)c->hidden;
    size_t e = dtype_size(ops_act_dtype(be));
    w->lc = lc;
    if (chunk_prepare(d, lc, w, b, anchors, C)) return -1;
    chunk_forward(d, w, C);
    // the scored rows: slots 1..B-1 of each anchor, contiguous per anchor
    ops_copy_2d(be, w->xs, (int64_t)(B - 1) * H, (char *)w->x + (size_t)H * e, (int64_t)B * H, C, (int64_t)(B - 1) * H);
    loss_batch lb = {.n = C * (B - 1), .slots = B - 1, .hidden = c->hidden, .vocab = c->vocab, .k = b->k, .x = w->xs,
                     .lm_head = d->lm_head, .label = w->label, .mask = w->mask, .in_seq = w->in_seq,
                     .t_idx = w->t_idx, .t_val = w->t_val, .t_lse = w->t_lse};
    loss_plan lp = step_loss_plan(c, p, p->chunk_anchors * (B - 1));
    loss_forward_backward(be, lc, &lp, w->loss_ws, &lb, &w->rows, dx);
    if (c->kind->rows) c->kind->rows(d, w, C, dx); // the kind's own terms on the scored rows
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
