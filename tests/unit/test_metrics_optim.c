// test_metrics_optim.c: the acceptance-length metrics on hand-built cases (chain, tree, the decode
// walk), the learning-rate schedule, and one AdamW update with clipping against the formulas
// written out here.
#include <math.h>
#include <string.h>

#include "common/backend/backend.h"
#include "student/model/metrics.h"
#include "student/train/optim.h"
#include "testing.h"

static void test_chain(void) {
    int32_t greedy[5] = {0, 10, 11, 12, 13}, am[5] = {0, 10, 11, 99, 13};
    CHECK_CLOSE(metrics_tau_chain(am, greedy, 4), 3.0, 0);  // slots 1, 2 accepted, 3 rejected
    am[1] = 5;
    CHECK_CLOSE(metrics_tau_chain(am, greedy, 4), 1.0, 0);  // first slot wrong: only the anchor's token
    int32_t all[4] = {0, 10, 11, 12};
    CHECK_CLOSE(metrics_tau_chain(all, greedy, 3), 4.0, 0); // everything inside the sequence accepted
    CHECK_CLOSE(metrics_tau_chain(all, greedy, 0), 1.0, 0); // no scorable slot
}

static void test_tree(void) {
    // 3 slots, K = 2 candidates each. The greedy path is (7, 8, 9): the second candidate at slot 1,
    // the first at slots 2 and 3.
    int32_t idx[3 * 2] = {5, 7, 8, 1, 9, 2};
    float lp[3 * 2] = {logf(0.6f), logf(0.4f), logf(0.9f), logf(0.1f), logf(0.8f), logf(0.2f)};
    int32_t greedy[4] = {0, 7, 8, 9};
    // Budget 1: only the best node, (5) at depth 1 - not on the greedy path.
    CHECK_CLOSE(metrics_tau_tree(idx, lp, 2, greedy, 3, 1), 1.0, 0);
    // Best-first order by path probability: (5) .6, (5,8) .54, (5,8,9) .432, (7) .4, (7,8) .36, (7,8,9) .288 ...
    // budget 4 reaches (7) at depth 1: tau 2; budget 5 adds (7,8): tau 3; budget 6 adds (7,8,9): tau 4.
    CHECK_CLOSE(metrics_tau_tree(idx, lp, 2, greedy, 3, 4), 2.0, 0);
    CHECK_CLOSE(metrics_tau_tree(idx, lp, 2, greedy, 3, 5), 3.0, 0);
    CHECK_CLOSE(metrics_tau_tree(idx, lp, 2, greedy, 3, 6), 4.0, 0);
    CHECK_CLOSE(metrics_tau_tree(idx, lp, 2, greedy, 3, 100), 4.0, 0);
    // A chain drafter (K = 1) gives the chain length.
    int32_t idx1[3] = {7, 8, 4};
    float lp1[3] = {0, 0, 0};
    CHECK_CLOSE(metrics_tau_tree(idx1, lp1, 1, greedy, 3, 100), 3.0, 0);
}

// The decode walk: every step's acceptance written out by hand.
static void test_decode_walk(void) {
    // two sequences: [0, 16) and [16, 24). Regions (loss_mask 1): [2, 12) and [14, 15) in the
    // first (the second is one token: no step), [17, 20) and [21, 24) in the second.
    uint8_t mask[24] = {0};
    for (int p = 2; p < 12; p++) mask[p] = 1;
    mask[14] = 1;
    for (int p = 17; p < 20; p++) mask[p] = 1;
    for (int p = 21; p < 24; p++) mask[p] = 1;
    int32_t cu[3] = {0, 16, 24}, m[24];
    int64_t tok = 0, steps = 0;
    // an all-accepting drafter of block 4 (3 matches everywhere): [2, 12): 2 -> 6 -> 10 -> 11 (the
    // last step capped at the region's end: 1 token); [17, 20): 17 -> 19 (2); [21, 24): 21 -> 23
    for (int p = 0; p < 24; p++) m[p] = 3;
    metrics_decode_walk(mask, cu, 2, m, &tok, &steps);
    CHECK(tok == 4 + 4 + 1 + 2 + 2 && steps == 5);
    // a drafter that never matches: one token a step, every anchor of each region but its last
    for (int p = 0; p < 24; p++) m[p] = 0;
    tok = steps = 0;
    metrics_decode_walk(mask, cu, 2, m, &tok, &steps);
    CHECK(tok == 9 + 2 + 2 && steps == 9 + 2 + 2);
    // in between: the walk visits only some anchors, and only their matches count. [2, 12):
    // 2 (m 1) -> 4 (m 0) -> 5 (m 2) -> 8 (m 3: 4 capped at 3) -> 11; unvisited anchors hold 99
    for (int p = 0; p < 24; p++) m[p] = 99;
    m[2] = 1, m[4] = 0, m[5] = 2, m[8] = 3;
    m[17] = 0, m[18] = 0, m[21] = 1; // [17, 20): 17 -> 18 -> 19; [21, 24): 21 -> 23
    tok = steps = 0;
    metrics_decode_walk(mask, cu, 2, m, &tok, &steps);
    CHECK(tok == (2 + 1 + 3 + 3) + (1 + 1) + 2 && steps == 4 + 2 + 1);
    // a region running to the end of its sequence and one packed right after it stay apart
    uint8_t all[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    int32_t cu2[3] = {0, 3, 8}, m2[8] = {5, 5, 5, 5, 5, 5, 5, 5};
    tok = steps = 0;
    metrics_decode_walk(all, cu2, 2, m2, &tok, &steps);
    CHECK(tok == 2 + 4 && steps == 2); // [0, 3): 0 -> 2; [3, 8): 3 -> 7
}

static void test_schedule(void) {
    optim_config c;
    optim_config_default(&c);
    c.total_steps = 100; // warmup 4 steps
    CHECK_CLOSE(optim_lr(&c, 0), c.lr / 4, 1e-15);
    CHECK_CLOSE(optim_lr(&c, 3), c.lr, 1e-15);
    CHECK_CLOSE(optim_lr(&c, 4), c.lr, 1e-15);        // cosine starts at the peak
    CHECK_CLOSE(optim_lr(&c, 52), c.lr * 0.5, 1e-12); // half way through the 96 decay steps
    CHECK_CLOSE(optim_lr(&c, 100), 0.0, 1e-15);
    for (int s = 5; s < 100; s++) CHECK(optim_lr(&c, s) <= optim_lr(&c, s - 1));
}

static void test_adamw(void) {
    backend be;
    CHECK(backend_open(&be, "cpu", 0) == 0);
    optim_config c;
    optim_config_default(&c);
    c.total_steps = 1;
    c.warmup_frac = 0; // lr = peak at step 0... cosine at t = 0
    c.weight_decay = 0.1;
    c.clip = 1.0;
    c.ema_decay = 0.5;
    arena a;
    CHECK(arena_init(&a, "optim test", &be, optim_bytes(4, 1)) == 0);
    float w[4] = {1, -2, 0.5f, 0}, g[4] = {3, 4, 0, 0}; // un-normalised sums over a step with sum_w = 2
    float w0[4];
    memcpy(w0, w, sizeof w);
    optim o;
    optim_init(&o, &c, &be, 4, &a, w);
    double norm = optim_step(&o, w, g, 2.0);
    CHECK_CLOSE(norm, 2.5, 1e-12); // |(3, 4)| / 2
    // clipped gradient = (1.5, 2) * 1/(2.5 + 1e-6); after one step m^ = g, v^ = g^2, so the Adam
    // direction is sign(g) (up to eps); decoupled decay adds lr * wd * w.
    double lr = optim_lr(&c, 0);
    for (int i = 0; i < 4; i++) {
        double gi = (i == 0 ? 1.5 : i == 1 ? 2.0 : 0.0) / (2.5 + 1e-6);
        double step = gi == 0 ? 0 : gi / (fabs(gi) + 1e-8);
        double want = w0[i] - lr * (step + 0.1 * w0[i]);
        CHECK_CLOSE(w[i], want, 1e-6);
        CHECK_CLOSE(o.ema[i], 0.5 * w0[i] + 0.5 * w[i], 1e-6);
        CHECK(g[i] == 0); // zeroed for the next step
    }
    // A NaN (or inf) in the gradient: no update at all; the norm says so and the step count stays
    float w1[4], m1[4], v1[4], e1[4];
    memcpy(w1, w, sizeof w), memcpy(m1, o.m, sizeof m1), memcpy(v1, o.v, sizeof v1), memcpy(e1, o.ema, sizeof e1);
    int64_t steps = o.step;
    for (int bad = 0; bad < 2; bad++) {
        float g2[4] = {1, bad ? INFINITY : NAN, 0, 2};
        CHECK(!isfinite(optim_step(&o, w, g2, 2.0)));
        CHECK(o.step == steps);
        CHECK(memcmp(w, w1, sizeof w) == 0 && memcmp(o.m, m1, sizeof m1) == 0 && memcmp(o.v, v1, sizeof v1) == 0 &&
              memcmp(o.ema, e1, sizeof e1) == 0);
        CHECK(g2[0] == 0 && g2[3] == 0); // zeroed all the same
    }
    arena_free(&a);
    backend_close(&be);
}

int main(void) {
    test_chain();
    test_tree();
    test_decode_walk();
    test_schedule();
    test_adamw();
    return test_finish("test_metrics_optim");
}
