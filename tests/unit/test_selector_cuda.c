// test_selector_cuda.c: DFlash2's candidate selector over a chunk (loss_selector.h) on CUDA against
// the CPU reference (skipped, exit 77, without a CUDA device; runs in the emulator build). An odd
// shape: V 37, H 21, k 5 candidates in rows of 8 (the loss's student top-K stride), rank 7, block 5
// (4 slots), 5 anchors; candidates drawn from 12 of the 37 tokens, so rows share codebook rows (the
// CUDA gradients' atomics); labels among the candidates or not (misses), rows of weight 0 and rows
// outside the sequence (the last anchor's last two). The gradients start from random values
// (the op adds). Both sides get the same inputs, rounded to bf16 first (the CPU gets those values as
// fp32), so only the computation's precision differs. Errors max |cuda - cpu| / max |cpu|; tolerances:
//   per-row loss, d pred, d succ (fp32 from the same bf16 inputs)   1e-3: the same fp32 formula in
//       another summation order (Z by a GEMM, scores and softmax in fp32 where the CPU sums in
//       double; ~1e-6 seen); a wrong predecessor or candidate errs by O(1)
//   d proj (fp32 +=)                                                1e-2: dZ = dq * pred[prev] is
//       rounded to bf16 (2^-9 relative) for the GEMM dP += dZ^T X
//   dx (bf16 +=)                                                    1e-2: the bf16 result, rounded
//       after the unary part and after the GEMM (2 x 2^-9 relative)
//   hit, choice                                                     exact: a hit is an id match;
//       the greedy choice's score gaps here are >= 1e-3 (printed), far above the ~1e-6 the two
//       backends' scores differ by, so no argmax can flip
// A forward-only run (no gradients) gives the same loss, hit and choice.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/backend.h"
#include "common/core/half.h"
#include "student/loss/loss_selector.h"
#include "student/loss/selector.h"
#include "testing.h"
#include "testing_device.h"

#define V 37
#define H 21
#define K 5
#define LD 8
#define RK 7
#define NA 5
#define SL 4
#define R (NA * SL)
#define POOL 12
#define TOL_F32 1e-3
#define TOL_ACT 1e-2

static void cmp_f32(backend *gpu, const char *name, const void *d, const float *ref, size_t n, double tol) {
    float *got = dev_down_f32(gpu, d, n);
    test_report(name, test_rel_err(got, ref, n), tol);
    free(got);
}
static void cmp_bf16(backend *gpu, const char *name, const void *d, const float *ref, size_t n, double tol) {
    float *got = dev_down_bf16(gpu, d, n);
    test_report(name, test_rel_err(got, ref, n), tol);
    free(got);
}
// the per-row results of a device run equal the CPU's: loss within tol, hit and choice exactly
static void cmp_out(backend *gpu, const char *what, const selector_out *g, const selector_out *c) {
    char name[80];
    snprintf(name, sizeof name, "selector loss per row (%s)", what);
    cmp_f32(gpu, name, g->loss, c->loss, R, TOL_F32);
    uint8_t *hit = dev_down_raw(gpu, g->hit, R);
    int32_t *ch = dev_down_raw(gpu, g->choice, R * sizeof(int32_t));
    int hit_ok = 1, ch_ok = 1;
    for (int r = 0; r < R; r++) hit_ok &= hit[r] == c->hit[r], ch_ok &= ch[r] == c->choice[r];
    CHECK_MSG(hit_ok, "selector hits differ from the CPU's (%s)", what);
    CHECK_MSG(ch_ok, "selector greedy choices differ from the CPU's (%s)", what);
    free(hit);
    free(ch);
}

int main(void) {
    backend cpu, gpu;
    int rc = test_open_devices(&cpu, &gpu);
    if (rc) return rc;
    test_rand_seed(2028);
    float *x = test_rand_bf16((size_t)R * H, 1), *pred = test_rand_bf16((size_t)V * RK, 1),
          *succ = test_rand_bf16((size_t)V * RK, 1);
    float *proj = test_rand_bf16((size_t)RK * H, 0.5f), *lm = test_rand_bf16((size_t)V * H, 0.5f),
          *u = xmalloc(R * LD * sizeof(float));
    float *w = xmalloc(R * sizeof(float));
    int32_t cand[R * LD], label[R], first[NA * (SL + 1)];
    uint8_t in_seq[R];
    for (int r = 0; r < R; r++) {
        for (int c = 0; c < LD; c++) { // distinct ids from the pool, log-probs descending
            int id, dup;
            do {
                id = test_rand_below(POOL);
                dup = 0;
                for (int q = 0; q < c; q++) dup |= cand[r * LD + q] == id;
            } while (dup);
            cand[r * LD + c] = id;
            u[r * LD + c] = -1.0f - 0.3f * (float)c + 0.1f * (float)test_rand_pm1();
        }
        label[r] = r % 3 == 2 ? POOL + test_rand_below(V - POOL) : cand[r * LD + test_rand_below(K)]; // every third a miss
        in_seq[r] = !(r / SL == NA - 1 && r % SL >= SL - 2);
        w[r] = !in_seq[r] || r % 7 == 3 ? 0.0f : 0.5f + 0.5f * (float)test_rand_pm1();   // some scored rows of weight 0
    }
    for (int i = 0; i < NA * (SL + 1); i++) first[i] = i % (SL + 1) == 0 ? test_rand_below(POOL) : 36; // the anchors' tokens
    float *gp = test_rand_bf16((size_t)V * RK, 0.1f), *gs = test_rand_bf16((size_t)V * RK, 0.1f),
          *gq = test_rand_bf16((size_t)RK * H, 0.1f);
    float *dx = test_rand_bf16((size_t)R * H, 0.05f);

    // the CPU reference
    selector_batch cb = {.anchors = NA, .slots = SL, .vocab = V, .hidden = H, .rank = RK, .k = K, .ld_cand = LD, .x = x,
                         .cand = cand, .u = u, .label = label, .w = w, .in_seq = in_seq, .first = first,
                         .first_ld = SL + 1, .pred = pred, .succ = succ, .proj = proj, .lm_head = lm};
    float c_loss[R];
    uint8_t c_hit[R];
    int32_t c_choice[R];
    selector_out co = {.loss = c_loss, .hit = c_hit, .choice = c_choice};
    float *c_gp = test_copy_floats(gp, (size_t)V * RK), *c_gs = test_copy_floats(gs, (size_t)V * RK),
          *c_gq = test_copy_floats(gq, (size_t)RK * H);
    float *c_dx = test_copy_floats(dx, (size_t)R * H);
    loss_selector_grads cg = {.pred = c_gp, .succ = c_gs, .proj = c_gq, .dx = c_dx};
    size_t ws_bytes = loss_selector_workspace_bytes(R, RK, K);
    void *c_ws = xmalloc(ws_bytes);
    loss_selector_forward_backward(&cpu, &cb, 1.7, c_ws, &co, &cg);
    // the inputs exercise every case: hits, misses, weight-0 rows, choices other than the argmax,
    // and the smallest score gap of a choice (the margin the exact comparison relies on)
    int hits = 0, misses = 0, not_first = 0;
    double gap = INFINITY;
    float z[RK], s[K];
    selector_weights sw = {.vocab = V, .hidden = H, .rank = RK, .k = K, .pred = pred, .succ = succ, .proj = proj};
    for (int r = 0; r < R; r++) {
        if (in_seq[r] && w[r] > 0) hits += c_hit[r], misses += !c_hit[r];
        if (!in_seq[r]) continue;
        int32_t prev = r % SL == 0 ? first[r / SL * (SL + 1)] : c_choice[r - 1];
        selector_scores(&sw, x + (size_t)r * H, cand + r * LD, u + r * LD, prev, z, s);
        int best = selector_choose(s, K);
        not_first += best != 0;
        for (int c = 0; c < K; c++)
            if (c != best) gap = fmin(gap, (double)s[best] - s[c]);
    }
    printf("CPU reference: %d hits, %d misses, %d of %d choices not the top candidate, smallest choice gap %.3g\n",
           hits, misses, not_first, R - 2, gap);
    CHECK(hits > 3 && misses > 2 && not_first > 2 && gap >= 1e-3);

    // the same on the device, bf16 inputs (the values above), f32 gradients
    selector_batch gb = cb;
    gb.x = dev_up_bf16(&gpu, x, (size_t)R * H);
    gb.pred = dev_up_bf16(&gpu, pred, (size_t)V * RK);
    gb.succ = dev_up_bf16(&gpu, succ, (size_t)V * RK);
    gb.proj = dev_up_bf16(&gpu, proj, (size_t)RK * H);
    gb.lm_head = dev_up_bf16(&gpu, lm, (size_t)V * H);
    gb.cand = dev_up_raw(&gpu, cand, sizeof cand);
    gb.u = dev_up_raw(&gpu, u, R * LD * sizeof(float));
    gb.label = dev_up_raw(&gpu, label, sizeof label);
    gb.w = dev_up_raw(&gpu, w, R * sizeof(float));
    gb.in_seq = dev_up_raw(&gpu, in_seq, sizeof in_seq);
    gb.first = dev_up_raw(&gpu, first, sizeof first);
    selector_out go = {.loss = dev_alloc(&gpu, R * sizeof(float)), .hit = dev_alloc(&gpu, R),
                       .choice = dev_alloc(&gpu, R * sizeof(int32_t))};
    loss_selector_grads gg = {.pred = dev_up_raw(&gpu, gp, (size_t)V * RK * sizeof(float)),
                            .succ = dev_up_raw(&gpu, gs, (size_t)V * RK * sizeof(float)),
                            .proj = dev_up_raw(&gpu, gq, (size_t)RK * H * sizeof(float)),
                            .dx = dev_up_bf16(&gpu, dx, (size_t)R * H)};
    void *g_ws = dev_alloc(&gpu, ws_bytes);
    loss_selector_forward_backward(&gpu, &gb, 1.7, g_ws, &go, &gg);
    printf("%s vs %s\n", gpu.name, cpu.name);
    cmp_out(&gpu, "with gradients", &go, &co);
    cmp_f32(&gpu, "selector d predecessor_codebook (+=)", gg.pred, c_gp, (size_t)V * RK, TOL_F32);
    cmp_f32(&gpu, "selector d successor_codebook (+=)", gg.succ, c_gs, (size_t)V * RK, TOL_F32);
    cmp_f32(&gpu, "selector d hidden_projection (+=)", gg.proj, c_gq, (size_t)RK * H, TOL_ACT);
    cmp_bf16(&gpu, "selector dx (+=, bf16)", gg.dx, c_dx, (size_t)R * H, TOL_ACT);
    // the gradients moved: a test whose op added nothing would compare the starting values
    CHECK(test_rel_err(c_gp, gp, (size_t)V * RK) > 0.1 && test_rel_err(c_gq, gq, (size_t)RK * H) > 0.1 &&
          test_rel_err(c_dx, dx, (size_t)R * H) > 0.1);

    // forward only: the same per-row results
    backend_memset_zero(&gpu, go.loss, R * sizeof(float));
    backend_memset_zero(&gpu, go.choice, R * sizeof(int32_t));
    loss_selector_forward_backward(&gpu, &gb, 1.7, g_ws, &go, NULL);
    cmp_out(&gpu, "forward only", &go, &co);

    const void *dev[] = {gb.x, gb.pred, gb.succ, gb.proj, gb.lm_head, gb.cand, gb.u, gb.label, gb.w, gb.in_seq, gb.first,
                         go.loss, go.hit, go.choice, gg.pred, gg.succ, gg.proj, gg.dx, g_ws};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) backend_free(&gpu, (void *)dev[i]);
    backend_close(&gpu);
    backend_close(&cpu);
    free(x), free(pred), free(succ), free(proj), free(lm), free(u), free(w), free(gp), free(gs), free(gq), free(dx);
    free(c_gp), free(c_gs), free(c_gq), free(c_dx), free(c_ws);
    return test_finish("test_selector_cuda");
}
