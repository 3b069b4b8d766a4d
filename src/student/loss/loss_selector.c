// loss_selector.c: the chunk's candidate selector (loss_selector.h): the shape checks both backends
// rely on, the dispatch through the backend's loss table (loss.h), and the CPU reference, its CPU
// entry loss_selector_cpu (row by row through selector.c, fp32 with double sums).
#include "student/loss/loss_selector.h"
#include "common/core/config.h"

#include "common/backend/backend_ops.h"
#include "common/backend/profile.h"
#include "common/core/check.h"
#include "student/loss/loss.h"
#include "student/loss/selector.h"

// The workspace, the same on both backends: Z [R, r] f32 and dZ [R, r] (act, sized as f32) for
// CUDA; the CPU uses its first r + k floats (one row's z and scores).
size_t loss_selector_workspace_bytes(int64_t R, int64_t rank, int k) {
    return (size_t)(2 * R * rank + k) * sizeof(float);
}

// The CPU reference: per anchor, its rows in order, the training term (teacher-forced prev) and
// the greedy choice (prev = the slot before's choice). z [r], s [k] scratch from the workspace.
void loss_selector_cpu(backend *be, const selector_batch *b, double scale, void *workspace, const selector_out *out,
                       const loss_selector_grads *og) {
    (void)be;
    float *ws = workspace;
    selector_weights sw = {.vocab = b->vocab, .hidden = b->hidden, .rank = b->rank, .k = b->k,
                           .pred = b->pred, .succ = b->succ, .proj = b->proj};
    float *z = ws, *s = ws + b->rank;
    const float *xs = b->x;
    for (int i = 0; i < b->anchors; i++) {
        int32_t prev_tf = b->first[(int64_t)i * b->first_ld], prev_ch = prev_tf; // teacher-forced / chosen
        for (int j = 1; j <= b->slots; j++) {
            int64_t r = (int64_t)i * b->slots + (j - 1);
            int hit = 0;
            const int32_t *cand = b->cand + r * b->ld_cand;
            const float *u = b->u + r * b->ld_cand, *x = xs + r * b->hidden;
            float wr = b->w[r];
            selector_grads g = {.pred = og ? og->pred : NULL, .succ = og ? og->succ : NULL,
                                .proj = og ? og->proj : NULL, .x = og ? (float *)og->dx + r * b->hidden : NULL};
            out->loss[r] = 0, out->hit[r] = 0, out->choice[r] = -1;
            if (!b->in_seq[r]) continue;
            if (wr > 0)
                out->loss[r] = (float)selector_row_loss(&sw, x, cand, u, prev_tf, b->label[r], scale * wr, b->lm_head,
                                                        og ? &g : NULL, z, s, &hit);
            out->hit[r] = (uint8_t)hit;
            selector_scores(&sw, x, cand, u, prev_ch, z, s);
            out->choice[r] = prev_ch = cand[selector_choose(s, sw.k)];
            prev_tf = b->label[r];
        }
    }
}

void loss_selector_forward_backward(backend *be, const selector_batch *b, double scale, void *workspace,
                                    const selector_out *out, const loss_selector_grads *g) {
    if (b->anchors < 0 || b->slots < 1 || b->k < 1 || b->ld_cand < b->k || b->rank < 1 || b->hidden < 1 ||
        b->k > b->vocab || b->first_ld < 1)
        fatal("selector: bad shape anchors %d, slots %d, k %d (row stride %d), V %lld, H %lld, rank %lld", b->anchors,
              b->slots, b->k, b->ld_cand, (long long)b->vocab, (long long)b->hidden, (long long)b->rank);
    if (b->anchors == 0) return;
    BACKEND_OP(be, loss, selector_forward_backward, b, scale, workspace, out, g);
}

// Settings: the keys of DFlash2's selector term (docs/config.md, Keys; src/settings.c lists every file's).
static const config_key loss_selector_keys[] = {
    {"loss.selector_weight", CFG_FLOAT, CONFIG_F(loss_selector_weight), "1", "DFlash2 (drafter.kind dflash2): weight of the candidate selector's k-way cross-entropy in the slot loss (the slot's weight applies)", NULL, 0, 100},
};
const config_key_set loss_selector_settings = CONFIG_KEY_SET(loss_selector_keys, NULL);
