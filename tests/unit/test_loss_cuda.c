// test_loss_cuda.c: the fused loss on CUDA against the CPU path (skipped, exit 77, without a GPU).
//
// Both sides get the same inputs: x and the lm_head are rounded to bf16 (the CUDA activation dtype)
// and the CPU gets those exact values as fp32, so the logits agree to fp32 rounding (cuBLAS and
// OpenBLAS sum in different orders: ~1e-6 relative). Per case one line `case  max_err  ok|FAIL`.
// Tolerances:
//   w, CE, KL, CAP, top-K log-probs   1e-4 relative to max(|cpu|, 1) (CAP, w: max(|cpu|, 1e-3);
//                                     logits at the 1e3 scale: max(|cpu|, 100)):
//                                     the same double-precision row code on both sides, fed logits
//                                     that differ by ~1e-6 relative and tail sums accumulated in fp32
//                                     per thread on the GPU (double on the CPU)
//   argmax, top-K ids                 exact (random logits: no near-ties at 1e-6)
//   dx                                1e-2 relative to max |dx|: the GPU rounds dlogits to bf16
//                                     (2^-9 relative each) before the GEMM and dx to bf16 after it
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/backend.h"
#include "common/core/half.h"
#include "student/loss/loss.h"
#include "testing.h"
#include "testing_device.h"

static backend cpu, gpu;


static int gcd(int a, int b) { return b ? gcd(b, a % b) : a; }

static void *xalloc(size_t bytes) {
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) exit(1);
    return p;
}

typedef struct {
    float *w, *ce, *kl, *cap, *logp, *dx;
    int32_t *argmax, *idx;
    float *more[LOSS_ROW_TERMS]; // the row terms after CAP
} outs;

static int close_rel(double a, double b, double tol, double floor) { return fabs(a - b) <= tol * fmax(fabs(b), floor); }

// one case: n = anchors * slots rows, V, k teacher ids, K student ids, huge = logits at 1e3..1e4
static void run_case(int anchors, int slots, int H, int V, int k, int K, int huge, loss_weighting weighting,
                     loss_mode mode, int row_chunk, int tile) {
    int n = anchors * slots;
    double amp = huge ? 20 : 0.5;
    float *x = xalloc((size_t)n * H * 4), *W = xalloc((size_t)V * H * 4);
    for (int64_t i = 0; i < (int64_t)n * H; i++) x[i] = f32_from_bf16(bf16_from_f32((float)(amp * test_rand_pm1())));
    for (int64_t i = 0; i < (int64_t)V * H; i++) W[i] = f32_from_bf16(bf16_from_f32((float)(amp * test_rand_pm1())));
    int32_t *label = xalloc((size_t)n * 4), *t_idx = xalloc((size_t)n * k * 4);
    float *mask = xalloc((size_t)n * 4), *t_val = xalloc((size_t)n * k * 4), *t_lse = xalloc((size_t)n * 4);
    uint8_t *in_seq = xalloc((size_t)n);
    for (int r = 0; r < n; r++) {
        // teacher: k distinct ids (a random start and a stride coprime to V), descending values
        int start = test_rand_below(V), stride = 1 + test_rand_below(V);
        while (gcd(stride, V) != 1) stride++;
        for (int a = 0; a < k; a++) {
            t_idx[r * k + a] = k == V ? a : (int32_t)(((int64_t)start + (int64_t)a * stride) % V);
            t_val[r * k + a] = (float)(5.0 - 0.3 * a);
        }
        t_lse[r] = 6.5f;
        label[r] = r % 2 ? t_idx[r * k + test_rand_below(k)] : test_rand_below(V);
        in_seq[r] = !(r % slots == slots - 1 && r / slots == anchors - 1);
        mask[r] = in_seq[r] && r % 5 != 3 ? 1.0f : 0.0f;
    }
    loss_config cfg = {.alpha = 0.15, .lambda = 0.1, .gamma = 7, .weighting = weighting};
    loss_plan plan = {.mode = mode, .row_chunk = row_chunk, .vocab_tile = tile, .topk_student = K};
    loss_batch b = {.n = n, .slots = slots, .hidden = H, .vocab = V, .k = k, .x = x, .lm_head = W, .label = label,
                    .mask = mask, .in_seq = in_seq, .t_idx = t_idx, .t_val = t_val, .t_lse = t_lse};

    // CPU reference: the fused ROWS path (itself checked against the naive loss in test_loss)
    outs ref = {xalloc(n * 4), xalloc(n * 4), xalloc(n * 4), xalloc(n * 4), xalloc((size_t)n * K * 4 + 4),
                xalloc((size_t)n * H * 4), xalloc(n * 4), xalloc((size_t)n * K * 4 + 4), {0}};
    loss_rows rr = {ref.w, {ref.ce, ref.kl, ref.cap}, ref.argmax, K ? ref.idx : NULL, K ? ref.logp : NULL};
    for (int t = LOSS_TERM_CAP + 1; t < LOSS_ROW_TERMS; t++) rr.term[t] = ref.more[t] = xalloc(n * 4);
    loss_plan cplan = {.mode = LOSS_MODE_ROWS, .row_chunk = n, .vocab_tile = 0, .topk_student = K};
    void *cws = xalloc(loss_workspace_bytes(&cplan, H, V, k) + 256);
    void *cws_al = (void *)(((uintptr_t)cws + 255) & ~(uintptr_t)255);
    loss_forward_backward(&cpu, &cfg, &cplan, cws_al, &b, &rr, ref.dx);

    // GPU
    loss_batch gb = b;
    gb.x = dev_up_bf16(&gpu, x, (size_t)n * H);
    gb.lm_head = dev_up_bf16(&gpu, W, (size_t)V * H);
    gb.label = dev_up_raw(&gpu, label, (size_t)n * 4), gb.mask = dev_up_raw(&gpu, mask, (size_t)n * 4);
    gb.in_seq = dev_up_raw(&gpu, in_seq, (size_t)n);
    gb.t_idx = dev_up_raw(&gpu, t_idx, (size_t)n * k * 4), gb.t_val = dev_up_raw(&gpu, t_val, (size_t)n * k * 4);
    gb.t_lse = dev_up_raw(&gpu, t_lse, (size_t)n * 4);
    loss_rows gr = {backend_alloc(&gpu, n * 4),
                    {backend_alloc(&gpu, n * 4), backend_alloc(&gpu, n * 4), backend_alloc(&gpu, n * 4)},
                    backend_alloc(&gpu, n * 4),
                    K ? backend_alloc(&gpu, (size_t)n * K * 4) : NULL,
                    K ? backend_alloc(&gpu, (size_t)n * K * 4) : NULL};
    for (int t = LOSS_TERM_CAP + 1; t < LOSS_ROW_TERMS; t++) gr.term[t] = backend_alloc(&gpu, n * 4);
    void *gdx = backend_alloc(&gpu, (size_t)n * H * 2);
    void *gws = backend_alloc(&gpu, loss_workspace_bytes(&plan, H, V, k));
    loss_forward_backward(&gpu, &cfg, &plan, gws, &gb, &gr, gdx);
    outs got = {xalloc(n * 4), xalloc(n * 4), xalloc(n * 4), xalloc(n * 4), xalloc((size_t)n * K * 4 + 4),
                xalloc((size_t)n * H * 4), xalloc(n * 4), xalloc((size_t)n * K * 4 + 4), {0}};
    backend_copy_to_host(&gpu, got.w, gr.w, n * 4);
    backend_copy_to_host(&gpu, got.ce, gr.term[LOSS_TERM_CE], n * 4);
    backend_copy_to_host(&gpu, got.kl, gr.term[LOSS_TERM_KL], n * 4);
    backend_copy_to_host(&gpu, got.cap, gr.term[LOSS_TERM_CAP], n * 4);
    for (int t = LOSS_TERM_CAP + 1; t < LOSS_ROW_TERMS; t++) {
        got.more[t] = xalloc(n * 4);
        backend_copy_to_host(&gpu, got.more[t], gr.term[t], n * 4);
    }
    backend_copy_to_host(&gpu, got.argmax, gr.argmax, n * 4);
    if (K) {
        backend_copy_to_host(&gpu, got.idx, gr.s_topk_idx, (size_t)n * K * 4);
        backend_copy_to_host(&gpu, got.logp, gr.s_topk_logp, (size_t)n * K * 4);
    }
    uint16_t *dxh = xalloc((size_t)n * H * 2);
    backend_copy_to_host(&gpu, dxh, gdx, (size_t)n * H * 2);
    for (int64_t i = 0; i < (int64_t)n * H; i++) got.dx[i] = f32_from_bf16(dxh[i]);

    // logit-valued outputs (CE, KL, log-probs) carry the logits' absolute rounding: ~1e-6 of their
    // scale, which is ~1e3 in the huge case
    const double fl = huge ? 100 : 1;
    int bad = 0;
    double dmax = 0, derr = 0;
    for (int r = 0; r < n; r++) {
        bad += !close_rel(got.w[r], ref.w[r], 1e-4, 1e-3) + !close_rel(got.ce[r], ref.ce[r], 1e-4, fl);
        bad += !close_rel(got.kl[r], ref.kl[r], 1e-4, fl) + !close_rel(got.cap[r], ref.cap[r], 1e-4, 1e-3);
        for (int t = LOSS_TERM_CAP + 1; t < LOSS_ROW_TERMS; t++) bad += !close_rel(got.more[t][r], ref.more[t][r], 1e-4, fl);
        bad += got.argmax[r] != ref.argmax[r];
        for (int c = 0; c < K; c++)
            bad += got.idx[r * K + c] != ref.idx[r * K + c] ||
                   !close_rel(got.logp[r * K + c], ref.logp[r * K + c], 1e-4, fl);
    }
    for (int64_t i = 0; i < (int64_t)n * H; i++) {
        dmax = fmax(dmax, fabs(ref.dx[i]));
        double e = fabs((double)got.dx[i] - ref.dx[i]);
        derr = e == e ? fmax(derr, e) : INFINITY;
    }
    derr /= dmax > 0 ? dmax : 1;
    int ok = bad == 0 && derr <= 1e-2;
    printf("n %4d V %6d H %4d k %3d K %2d %s %s %-5s chunk %4d tile %5d  rows off %d, dx %.2e  %s\n", n, V, H, k, K,
           huge ? "huge" : "    ", weighting ? "dpace" : "decay", mode ? "tiles" : "rows", row_chunk, tile, bad, derr,
           ok ? "ok" : "FAIL");
    CHECK(ok);

    backend_free(&gpu, (void *)gb.x), backend_free(&gpu, (void *)gb.lm_head), backend_free(&gpu, (void *)gb.label);
    backend_free(&gpu, (void *)gb.mask), backend_free(&gpu, (void *)gb.in_seq), backend_free(&gpu, (void *)gb.t_idx);
    backend_free(&gpu, (void *)gb.t_val), backend_free(&gpu, (void *)gb.t_lse);
    backend_free(&gpu, gr.w), backend_free(&gpu, gr.term[LOSS_TERM_CE]), backend_free(&gpu, gr.term[LOSS_TERM_KL]);
    for (int t = LOSS_TERM_CAP; t < LOSS_ROW_TERMS; t++) backend_free(&gpu, gr.term[t]);
    backend_free(&gpu, gr.argmax);
    if (K) backend_free(&gpu, gr.s_topk_idx), backend_free(&gpu, gr.s_topk_logp);
    backend_free(&gpu, gdx), backend_free(&gpu, gws);
    outs *o[2] = {&ref, &got};
    for (int j = 0; j < 2; j++)
        free(o[j]->w), free(o[j]->ce), free(o[j]->kl), free(o[j]->cap), free(o[j]->logp), free(o[j]->dx),
            free(o[j]->argmax), free(o[j]->idx);
    for (int j = 0; j < 2; j++)
        for (int t = LOSS_TERM_CAP + 1; t < LOSS_ROW_TERMS; t++) free(o[j]->more[t]);
    free(dxh), free(cws), free(x), free(W), free(label), free(t_idx), free(mask), free(t_val), free(t_lse);
    free(in_seq);
}

int main(void) {
    test_rand_seed(77001); // the stream this test always drew
    int open_rc = test_open_devices(&cpu, &gpu);
    if (open_rc) return open_rc;
    printf("%s vs %s\n", gpu.name, cpu.name);
    for (int w = 0; w < 2; w++) {
        run_case(5, 3, 64, 307, 8, 4, 0, (loss_weighting)w, LOSS_MODE_ROWS, 6, 0);
        run_case(5, 3, 64, 307, 8, 4, 0, (loss_weighting)w, LOSS_MODE_TILES, 6, 1);
        run_case(5, 3, 64, 307, 8, 4, 0, (loss_weighting)w, LOSS_MODE_TILES, 15, 100);
        run_case(8, 15, 256, 5000, 32, 8, 0, (loss_weighting)w, LOSS_MODE_TILES, 30, 1024);
    }
    run_case(8, 15, 256, 5000, 32, 8, 0, LOSS_WEIGHT_DECAY, LOSS_MODE_ROWS, 60, 0);
    run_case(4, 7, 128, 2000, 1, 1, 0, LOSS_WEIGHT_DECAY, LOSS_MODE_TILES, 14, 333);
    run_case(2, 3, 64, 40, 40, 2, 0, LOSS_WEIGHT_DECAY, LOSS_MODE_TILES, 3, 16);   // k = V: p_r = 0
    run_case(4, 7, 128, 2000, 16, 8, 1, LOSS_WEIGHT_DPACE, LOSS_MODE_ROWS, 28, 0); // logits at the 1e4 scale
    run_case(4, 7, 128, 2000, 16, 8, 1, LOSS_WEIGHT_DPACE, LOSS_MODE_TILES, 14, 512);
    // a real vocabulary (emulated: 4 anchors and H 128, the vocabulary and its tiles unchanged)
    int anchors = TEST_EMU_SIZE(64, 4), H = TEST_EMU_SIZE(1024, 128);
    run_case(anchors, 15, H, 151936, 32, 8, 0, LOSS_WEIGHT_DECAY, LOSS_MODE_ROWS, anchors * 15 / 4, 0);
    run_case(anchors, 15, H, 151936, 32, 8, 0, LOSS_WEIGHT_DPACE, LOSS_MODE_TILES, anchors * 15 / 2, 16384);
    backend_close(&gpu);
    backend_close(&cpu);
    return test_finish("test_loss_cuda");
}
