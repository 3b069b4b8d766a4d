// step_work.h: the step's buffers (student_work, carved by step.c's student_work_carve) as the
// step and a drafter kind's step hooks (drafter_kind.h) see them, and the GEMM shorthands they
// share. Shapes: S context tokens, C anchors per chunk, N = C*B block rows, R = C*(B-1) scored
// rows, H hidden, qd = nq*hd, kvd = nkv*hd, I intermediate, L layers. Device memory unless named
// h_* (host staging).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "common/backend/backend.h"
#include "common/kernels/ops.h"
#include "student/loss/loss.h"
#include "student/model/drafter.h"

// (not through step.h, which this header's user step.c implements: the module graph has no circle)
typedef struct student_work student_work;

typedef struct { // what one trunk layer's backward needs from its forward, for one chunk
    void *h_in, *h_mid;          // [N, H] residual stream before attention / before the MLP
    void *u, *u2;                // [N, H] normed inputs of attention / MLP
    void *q_pre, *q, *att;       // [N, qd]
    void *kb_pre, *kb, *vb;      // [N, kvd]
    float *lse;                  // [N, nq]
    void *gate, *up, *act;       // [N, I]
} layer_saved;

struct student_work {
    const loss_config *lc;       // the loss settings of the step or evaluation that runs
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
    void *h_final, *x, *tmp_h;             // [N, H]: a layer's output (the next one's input), the final norm's, scratch
    void *xs, *dxs;                        // [R, H]
    void *dh, *du;                         // [N, H]
    void *dI_act, *dI_gate, *dI_up;        // [N, I]
    void *dq, *dq_pre, *datt;              // [N, qd]
    void *dkb, *dkb_pre, *dvb;             // [N, kvd]
    // loss inputs and per-row outputs (device)
    int32_t *label, *t_idx;                // [R], [R, k]
    float *mask, *t_val, *t_lse;           // [R], [R, k], [R]
    uint8_t *in_seq;                       // [R]
    loss_rows rows;
    int topk;                              // the student's top-K per scored row (the row stride of rows.s_topk_*)
    void *loss_ws;
    const drafter_kind *kind;              // the drafter's kind (d->cfg.kind)
    void *kind_work;                       // the kind's own buffers (its work_create; NULL: none)
    // host staging
    int32_t *h_label, *h_t_idx, *h_argmax, *h_s_idx, *h_greedy;
    int32_t *h_choice;                     // [R] the token the chain / decode walk follows (the kind's decode_choice)
    float *h_mask, *h_t_val, *h_t_lse, *h_w, *h_term[LOSS_ROW_TERMS], *h_s_logp, *h_conv;
    uint8_t *h_in_seq;
    int32_t *h_blk_tokens, *h_pos_blk, *h_pos_ctx, *h_anchor_start;
    int n_layers;
    size_t parts[4];               // bytes carved per part (STEP_WORK_PARTS, step.h's student_work_parts)
    int (*hook)(void *ctx, int bucket); // a step_grad_hook (step.h); NULL: none (student_work_set_grad_hook)
    void *hook_ctx;
};

// y[T, O] = x[T, I] @ W[O, I]^T
static inline void step_linear(backend *be, void *y, const void *x, const void *W, int T, int in, int out) {
    dtype dt = ops_act_dtype(be);
    backend_gemm(be, 0, 1, T, out, in, 1.0f, x, in, W, in, 0.0f, y, out, dt, dt);
}
// dx[T, I] (= or +=) dy[T, O] @ W[O, I]
static inline void step_linear_dx(backend *be, void *dx, const void *dy, const void *W, int T, int in, int out,
                                  int accumulate) {
    dtype dt = ops_act_dtype(be);
    backend_gemm(be, 0, 0, T, in, out, 1.0f, dy, out, W, in, accumulate ? 1.0f : 0.0f, dx, in, dt, dt);
}
// dW[O, I] += dy[T, O]^T @ x[T, I]   (fp32 accumulator)
static inline void step_linear_dw(backend *be, float *dW, const void *dy, const void *x, int T, int in, int out) {
    dtype dt = ops_act_dtype(be);
    backend_gemm(be, 1, 0, out, in, T, 1.0f, dy, out, x, in, 1.0f, dW, in, dt, DT_F32);
}
static inline void step_copy_act(backend *be, void *dst, const void *src, int64_t n) { ops_copy_2d(be, dst, n, src, n, 1, n); }
