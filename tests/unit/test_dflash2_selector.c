// test_dflash2_selector.c: the DFlash2 candidate selector as this trainer computes it (selector.h:
// selector_scores, selector_row_loss, selector_choose on fp32 host memory) against the dflash
// package's CandidateSelector with PyTorch autograd (tests/reference/make_dflash2_selector_fixture.py:
// vocab 37, hidden 21, top-k 5, rank 7, 2 anchors x 4 slots, selector_weight 1.3, two slots whose
// label is no candidate, one slot of weight 0). Checked:
//   - the candidates: our sorted top-5 of logits = x lm_head^T equal the fixture's (torch.topk);
//   - the teacher-forced scores s [2, 4, 5] (prev = the label of the slot before);
//   - the loss and the gradients of both codebooks, hidden_projection and x (x through P and
//     through the candidates' logits), accumulated over the slots as the step does;
//   - the greedy walk (prev = the chosen token) = the package's select(temperature 0), which
//     differs from the logits' argmax in at least one slot (so the test tells them apart);
//   - the rows of the codebooks' gradients of tokens never used are exactly 0.
// Tolerance: max |ours - ref| / max |ref| <= 1e-5 per tensor. The reference is float64 rounded to
// fp32; ours is fp32 inputs with double sums (scores) and fp32 accumulation of at most 8 rows' terms
// of O(10) (relative rounding ~1e-6); a wrong codebook row, factor or sign errs by O(1).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/data/safetensors.h"
#include "student/loss/selector.h"
#include "testing.h"

#define TOL 1e-5

enum { V = 37, H = 21, R = 7, K = 5, C = 2, S = 4, N = C * S };

static st_file fx;

static const void *get(const char *name, int64_t numel, dtype dt) {
    const st_entry *e = safetensors_find(&fx, name);
    if (!e || e->dt != dt || e->nbytes != (size_t)numel * 4) {
        fprintf(stderr, "fixture: tensor %s missing or not %lld 4-byte values\n", name, (long long)numel);
        exit(1);
    }
    return e->data;
}
#define GETF(n, c) ((const float *)get(n, c, DT_F32))
#define GETI(n, c) ((const int32_t *)get(n, c, DT_I32))

int main(void) {
    if (safetensors_open(&fx, test_src_path("tests/reference/data/dflash2_selector.safetensors"))) {
        fprintf(stderr, "%s\n", error_msg());
        return 1;
    }
    const float *x = GETF("x", N * H), *lm = GETF("lm_head", V * H), *wt = GETF("weight", N);
    selector_weights sw = {.vocab = V, .hidden = H, .rank = R, .k = K,
                           .pred = GETF("candidate_selector.predecessor_codebook", V * R),
                           .succ = GETF("candidate_selector.successor_codebook", V * R),
                           .proj = GETF("candidate_selector.hidden_projection.weight", R * H)};
    const int32_t *anchor = GETI("anchor", C), *label = GETI("label", N), *ref_cand = GETI("candidates", N * K);
    const int32_t *ref_greedy = GETI("greedy", N);
    static float logits[N * V], u[N * K], s[N * K], z[R], sc[K], gpred[V * R], gsucc[V * R], gproj[R * H], gx[N * H];
    static int32_t cand[N * K], greedy[N];
    // logits and the sorted top-k (ties: the lower id first, as the loss keeps them)
    for (int r = 0; r < N; r++) {
        for (int v = 0; v < V; v++) {
            double a = 0;
            for (int h = 0; h < H; h++) a += (double)x[r * H + h] * lm[v * H + h];
            logits[r * V + v] = (float)a;
        }
        for (int c = 0; c < K; c++) {
            int best = -1;
            for (int v = 0; v < V; v++) {
                int taken = 0;
                for (int e = 0; e < c; e++) taken |= cand[r * K + e] == v;
                if (!taken && (best < 0 || logits[r * V + v] > logits[r * V + best])) best = v;
            }
            cand[r * K + c] = best, u[r * K + c] = logits[r * V + best];
        }
    }
    CHECK_MSG(memcmp(cand, ref_cand, sizeof cand) == 0, "the top-%d candidates differ from torch.topk's", K);

    // teacher-forced scores, loss and gradients
    double loss = 0;
    int hits = 0;
    for (int i = 0; i < C; i++)
        for (int j = 0; j < S; j++) {
            int r = i * S + j, hit = 0;
            int32_t prev = j == 0 ? anchor[i] : label[r - 1];
            selector_scores(&sw, x + r * H, cand + r * K, u + r * K, prev, z, s + r * K);
            if (wt[r] > 0) {
                selector_grads g = {.pred = gpred, .succ = gsucc, .proj = gproj, .x = gx + r * H};
                loss += wt[r] * 1.3 * selector_row_loss(&sw, x + r * H, cand + r * K, u + r * K, prev, label[r], wt[r] * 1.3, lm, &g, z, sc, &hit);
                hits += hit;
            }
        }
    CHECK_MSG(hits == 5, "%d scored slots with the label among the candidates, the fixture has 5 (6 hits, one of weight 0)", hits);
    test_report("scores (teacher forced)", test_rel_err(s, GETF("scores", N * K), N * K), TOL);
    float lossf = (float)loss;
    test_report("loss", test_rel_err(&lossf, GETF("loss", 1), 1), TOL);
    test_report("d predecessor_codebook", test_rel_err(gpred, GETF("d_predecessor_codebook", V * R), V * R), TOL);
    test_report("d successor_codebook", test_rel_err(gsucc, GETF("d_successor_codebook", V * R), V * R), TOL);
    test_report("d hidden_projection", test_rel_err(gproj, GETF("d_hidden_projection", R * H), R * H), TOL);
    test_report("d x", test_rel_err(gx, GETF("d_x", N * H), N * H), TOL);
    int used[V] = {0}, stray = 0;
    for (int r = 0; r < N; r++) {
        used[label[r]] = 1;
        for (int c = 0; c < K; c++) used[cand[r * K + c]] = 1;
    }
    for (int i = 0; i < C; i++) used[anchor[i]] = 1;
    for (int v = 0; v < V; v++)
        for (int q = 0; q < R; q++) stray += !used[v] && (gpred[v * R + q] != 0 || gsucc[v * R + q] != 0);
    CHECK_MSG(stray == 0, "%d codebook gradient values in rows of tokens never used", stray);

    // the greedy walk: prev = the chosen token
    int differs = 0;
    for (int i = 0; i < C; i++) {
        int32_t prev = anchor[i];
        for (int j = 0; j < S; j++) {
            int r = i * S + j;
            selector_scores(&sw, x + r * H, cand + r * K, u + r * K, prev, z, sc);
            greedy[r] = prev = cand[r * K + selector_choose(sc, K)];
            differs += greedy[r] != cand[r * K]; // the logits' argmax
        }
    }
    CHECK_MSG(memcmp(greedy, ref_greedy, sizeof greedy) == 0, "the greedy walk differs from the package's select");
    CHECK_MSG(differs > 0, "the fixture's greedy walk equals the argmax everywhere: it cannot tell them apart");
    printf("  greedy walk = package's select; %d of %d slots differ from the logits' argmax\n", differs, N);
    safetensors_close(&fx);
    return test_finish("test_dflash2_selector");
}
