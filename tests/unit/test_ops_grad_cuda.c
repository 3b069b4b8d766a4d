// test_ops_grad_cuda.c: every training op of the student on CUDA
// against the CPU reference, forward and backward (skipped, exit 77, without a GPU). The companion of
// tests/unit/test_ops_cuda.c (the forward ops) and test_loss_cuda.c (the fused loss): the RMSNorm,
// RoPE and SwiGLU backward passes, the DFlash2 dynamic convolution (dynconv.h: out, dx, ddyn act;
// dbase f32 +=), the DFlash attention forward and backward (context + block keys,
// sliding windows, GQA), the fp32 <-> act conversions, and the optimizer kernels.
//
// Both sides get the same inputs, rounded to bf16 first (the CPU gets those values as fp32), so only
// the precision of the computation differs. Per op one line `op  max_err  tol  ok|FAIL`, max_err =
// max |cuda - cpu| / max |cpu| (relative to the output's scale). Tolerances:
//   act outputs (dx, dgate, dup, dq, dkb, dvb, attention out, f32 -> act)  1e-2: the GPU works in
//       fp32 and rounds the result to bf16 once (<= 2^-8 relative), as in test_ops_cuda.c
//   fp32 outputs from bf16 inputs (dw, dkc, dvc, lse, act -> f32 sums)     1e-3: the same fp32
//       formula in another summation order (~1e-6 seen on such sums); a wrong index, mask or
//       window errs by O(1)
//   optimizer (fp32 in, fp32 out)                                          1e-5 (AdamW, EMA: one
//       formula per element, FMA contraction at most), sum of squares 1e-9 (double sums)
// DFLASH_OPS_TRAIN_SELFTEST=1 without a GPU runs the same comparisons with a second CPU backend in the
// GPU's place (every error 0): it checks this harness on a machine without a GPU.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/backend.h"
#include "common/core/half.h"
#include "common/kernels/ops.h"
#include "student/train/optim.h"
#include "testing.h"
#include "testing_device.h"

#define TOL_ACT 1e-2
#define TOL_F32 1e-3
#define TOL_OPT 1e-5

static backend cpu, gpu;
static int act_bf16; // the "gpu" side computes in bf16 (a real GPU) or fp32 (the self-test)

// compare a device act buffer / f32 buffer with the CPU's result, then free the host copy
static void cmp_act(const char *name, const void *d, const float *ref, size_t n, double tol) {
    float *got = dev_down_act(&gpu, d, n, act_bf16);
    test_report(name, test_rel_err(got, ref, n), tol);
    free(got);
}
static void cmp_f32(const char *name, const void *d, const float *ref, size_t n, double tol) {
    float *got = dev_down_f32(&gpu, d, n);
    test_report(name, test_rel_err(got, ref, n), tol);
    free(got);
}

// ----------------------------------------------------------------------------- RMSNorm backward

static void rmsnorm_bwd_case(int R, int D, int accumulate) {
    size_t n = (size_t)R * D;
    float *x = test_rand_bf16(n, 3), *w = test_rand_bf16((size_t)D, 1.5f), *dy = test_rand_bf16(n, 1);
    float *dx = test_rand_bf16(n, 0.5f), *dw = test_rand_bf16((size_t)D, 2); // the starting values of += outputs
    void *g_x = dev_up_act(&gpu, x, n, act_bf16), *g_w = dev_up_act(&gpu, w, (size_t)D, act_bf16),
         *g_dy = dev_up_act(&gpu, dy, n, act_bf16), *g_dx = dev_up_act(&gpu, dx, n, act_bf16);
    void *g_dw = dev_up_raw(&gpu, dw, (size_t)D * 4);
    ops_rmsnorm_backward(&cpu, dx, dw, dy, x, w, R, D, 1e-6f, accumulate);
    ops_rmsnorm_backward(&gpu, g_dx, g_dw, g_dy, g_x, g_w, R, D, 1e-6f, accumulate);
    char name[96];
    snprintf(name, sizeof name, "rmsnorm_backward dx R=%d D=%d%s", R, D, accumulate ? " +=" : "");
    cmp_act(name, g_dx, dx, n, TOL_ACT);
    snprintf(name, sizeof name, "rmsnorm_backward dw R=%d D=%d (+=)", R, D);
    cmp_f32(name, g_dw, dw, (size_t)D, TOL_F32);
    backend_free(&gpu, g_x), backend_free(&gpu, g_w), backend_free(&gpu, g_dy), backend_free(&gpu, g_dx);
    backend_free(&gpu, g_dw);
    free(x), free(w), free(dy), free(dx), free(dw);
}

// ----------------------------------------------------------------------------- RoPE backward

static void rope_bwd_case(int T, int nh, int hd, int pos_offset) {
    int half = hd / 2;
    size_t n = (size_t)T * nh * hd;
    float *x = test_rand_bf16(n, 2), *inv = xmalloc((size_t)half * sizeof(float));
    for (int i = 0; i < half; i++) inv[i] = (float)pow(1e6, -2.0 * i / hd);
    int32_t *pos = xmalloc((size_t)T * sizeof(int32_t));
    for (int t = 0; t < T; t++) pos[t] = pos_offset + (t < T / 2 ? t : t - T / 2);
    void *g_x = dev_up_act(&gpu, x, n, act_bf16), *g_pos = dev_up_raw(&gpu, pos, (size_t)T * 4),
         *g_inv = dev_up_raw(&gpu, inv, (size_t)half * 4);
    ops_rope_backward(&cpu, x, pos, inv, T, nh, hd);
    ops_rope_backward(&gpu, g_x, g_pos, g_inv, T, nh, hd);
    char name[96];
    snprintf(name, sizeof name, "rope_backward T=%d nh=%d hd=%d pos>=%d", T, nh, hd, pos_offset);
    cmp_act(name, g_x, x, n, TOL_ACT);
    backend_free(&gpu, g_x), backend_free(&gpu, g_pos), backend_free(&gpu, g_inv);
    free(x), free(inv), free(pos);
}

// ----------------------------------------------------------------------------- SwiGLU backward, conversions

static void test_swiglu_bwd_conv(void) {
    int64_t n = 1000003;
    float *g = test_rand_bf16((size_t)n, 8), *u = test_rand_bf16((size_t)n, 2), *dout = test_rand_bf16((size_t)n, 1);
    float *dg = xmalloc((size_t)n * 4), *du = xmalloc((size_t)n * 4);
    void *g_g = dev_up_act(&gpu, g, (size_t)n, act_bf16), *g_u = dev_up_act(&gpu, u, (size_t)n, act_bf16),
         *g_do = dev_up_act(&gpu, dout, (size_t)n, act_bf16);
    void *g_dg = dev_alloc(&gpu, (size_t)n * 4), *g_du = dev_alloc(&gpu, (size_t)n * 4);
    ops_swiglu_backward(&cpu, dg, du, dout, g, u, n);
    ops_swiglu_backward(&gpu, g_dg, g_du, g_do, g_g, g_u, n);
    cmp_act("swiglu_backward dgate n=1000003", g_dg, dg, (size_t)n, TOL_ACT);
    cmp_act("swiglu_backward dup n=1000003", g_du, du, (size_t)n, TOL_ACT);

    // f32 -> act (one rounding) and acc += act
    float *src = xmalloc((size_t)n * 4), *acc = test_rand_bf16((size_t)n, 3);
    for (int64_t i = 0; i < n; i++) src[i] = 5 * (float)test_rand_pm1();
    void *g_src = dev_up_raw(&gpu, src, (size_t)n * 4), *g_acc = dev_up_raw(&gpu, acc, (size_t)n * 4);
    ops_f32_to_act(&cpu, dg, src, n);
    ops_f32_to_act(&gpu, g_dg, g_src, n);
    cmp_act("f32_to_act n=1000003", g_dg, dg, (size_t)n, TOL_ACT);
    ops_add_to_f32(&cpu, acc, dout, n);
    ops_add_to_f32(&gpu, g_acc, g_do, n);
    cmp_f32("add_to_f32 n=1000003", g_acc, acc, (size_t)n, TOL_F32);
    backend_free(&gpu, g_g), backend_free(&gpu, g_u), backend_free(&gpu, g_do), backend_free(&gpu, g_dg);
    backend_free(&gpu, g_du), backend_free(&gpu, g_src), backend_free(&gpu, g_acc);
    free(g), free(u), free(dout), free(dg), free(du), free(src), free(acc);
}

// ----------------------------------------------------------------------------- DFlash attention

// S context tokens in n_seq sequences; C anchors drawn inside them (some at a sequence's first token:
// no context at all), B slots each.
// The CUDA attention has two paths, chosen by DFLASH_CUDA_ATTN (set here per case): the tensor-core
// kernels (attn_tc.cu; "tiled" picks the tile shape by head_dim, "tiled-BQxBK" forces one) and
// the scalar kernels of attention_cuda.cu ("scalar"). The tiled path rounds P and dS to bf16 before
// their products (as flash-attention does), so its fp32 dkc/dvc carry bf16-sized errors (<= 2^-8
// relative per term): they are held to TOL_ACT there, to TOL_F32 on the scalar path.
static const char *attn_path = "tiled";

static void dflash_case(int S, int n_seq, int C, int B, int nq, int nkv, int hd, int window, int causal) {
    if (!test_attn_path("dflash attention", attn_path, hd, 1)) return;
    double tol_ctx = strcmp(attn_path, "scalar") == 0 ? TOL_F32 : TOL_ACT;
    int32_t cu[9];
    for (int s = 0; s <= n_seq; s++) cu[s] = (int32_t)((int64_t)S * s / n_seq);
    int32_t *anchors = xmalloc((size_t)C * 4), *starts = xmalloc((size_t)C * 4);
    for (int i = 0; i < C; i++) {
        int s = test_rand_below(n_seq), len = cu[s + 1] - cu[s];
        int a = i == 0 ? cu[s] : cu[s] + test_rand_below(len); // anchor 0 sees no context
        anchors[i] = a, starts[i] = cu[s];
    }
    size_t N = (size_t)C * B, nqe = N * nq * hd, nkb = N * nkv * hd, nkc = (size_t)S * nkv * hd;
    float *q = test_rand_bf16(nqe, 2), *kb = test_rand_bf16(nkb, 1), *vb = test_rand_bf16(nkb, 1);
    float *kc = test_rand_bf16(nkc, 1), *vc = test_rand_bf16(nkc, 1), *dout = test_rand_bf16(nqe, 1);
    float scale = 1.0f / sqrtf((float)hd);
    // forward on both sides
    float *out = xmalloc(nqe * 4), *lse = xmalloc(N * nq * 4);
    ops_dflash_attn_forward(&cpu, out, lse, q, kb, vb, kc, vc, anchors, starts, C, B, nq, nkv, hd, scale, window, causal);
    void *g_q = dev_up_act(&gpu, q, nqe, act_bf16), *g_kb = dev_up_act(&gpu, kb, nkb, act_bf16),
         *g_vb = dev_up_act(&gpu, vb, nkb, act_bf16), *g_kc = dev_up_act(&gpu, kc, nkc, act_bf16);
    void *g_vc = dev_up_act(&gpu, vc, nkc, act_bf16), *g_dout = dev_up_act(&gpu, dout, nqe, act_bf16);
    void *g_a = dev_up_raw(&gpu, anchors, (size_t)C * 4), *g_s = dev_up_raw(&gpu, starts, (size_t)C * 4);
    void *g_out = dev_alloc(&gpu, nqe * 4), *g_lse = dev_alloc(&gpu, N * nq * 4);
    ops_dflash_attn_forward(&gpu, g_out, g_lse, g_q, g_kb, g_vb, g_kc, g_vc, g_a, g_s, C, B, nq, nkv, hd, scale, window,
                            causal);
    char cfg[96], name[160];
    snprintf(cfg, sizeof cfg, "S=%d C=%d B=%d nq=%d nkv=%d hd=%d%s%s %s", S, C, B, nq, nkv, hd, window ? " win" : "",
             causal ? " causal" : "", act_bf16 ? attn_path : "cpu");
    snprintf(name, sizeof name, "dflash_fwd out %s", cfg);
    cmp_act(name, g_out, out, nqe, TOL_ACT);
    snprintf(name, sizeof name, "dflash_fwd lse %s", cfg);
    cmp_f32(name, g_lse, lse, N * nq, TOL_F32);

    // backward from the same inputs: out rounded as the GPU keeps it, the CPU's lse on both sides
    float *out_r = xmalloc(nqe * 4);
    for (size_t i = 0; i < nqe; i++) out_r[i] = act_bf16 ? f32_from_bf16(bf16_from_f32(out[i])) : out[i];
    void *g_outr = dev_up_act(&gpu, out_r, nqe, act_bf16), *g_lser = dev_up_raw(&gpu, lse, N * nq * 4);
    float *dq = xmalloc(nqe * 4), *dkb = xmalloc(nkb * 4), *dvb = xmalloc(nkb * 4);
    float *dkc = test_rand_bf16(nkc, 0.1f), *dvc = test_rand_bf16(nkc, 0.1f); // += outputs start non-zero
    void *g_dq = dev_alloc(&gpu, nqe * 4), *g_dkb = dev_alloc(&gpu, nkb * 4), *g_dvb = dev_alloc(&gpu, nkb * 4);
    void *g_dkc = dev_up_raw(&gpu, dkc, nkc * 4), *g_dvc = dev_up_raw(&gpu, dvc, nkc * 4);
    ops_dflash_attn_backward(&cpu, dq, dkb, dvb, dkc, dvc, dout, out_r, lse, q, kb, vb, kc, vc, anchors, starts, C, B, nq,
                             nkv, hd, scale, window, causal);
    ops_dflash_attn_backward(&gpu, g_dq, g_dkb, g_dvb, g_dkc, g_dvc, g_dout, g_outr, g_lser, g_q, g_kb, g_vb, g_kc, g_vc,
                             g_a, g_s, C, B, nq, nkv, hd, scale, window, causal);
    snprintf(name, sizeof name, "dflash_bwd dq %s", cfg);
    cmp_act(name, g_dq, dq, nqe, TOL_ACT);
    snprintf(name, sizeof name, "dflash_bwd dkb %s", cfg);
    cmp_act(name, g_dkb, dkb, nkb, TOL_ACT);
    snprintf(name, sizeof name, "dflash_bwd dvb %s", cfg);
    cmp_act(name, g_dvb, dvb, nkb, TOL_ACT);
    snprintf(name, sizeof name, "dflash_bwd dkc (+=) %s", cfg);
    cmp_f32(name, g_dkc, dkc, nkc, tol_ctx);
    snprintf(name, sizeof name, "dflash_bwd dvc (+=) %s", cfg);
    cmp_f32(name, g_dvc, dvc, nkc, tol_ctx);

    void *bufs[] = {g_q, g_kb, g_vb, g_kc, g_vc, g_dout, g_a, g_s, g_out, g_lse, g_outr, g_lser, g_dq, g_dkb, g_dvb,
                    g_dkc, g_dvc};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) backend_free(&gpu, bufs[i]);
    free(anchors), free(starts), free(q), free(kb), free(vb), free(kc), free(vc), free(dout), free(out), free(lse);
    free(out_r), free(dq), free(dkb), free(dvb), free(dkc), free(dvc);
}

static void dflash_shapes(void) {
    dflash_case(70, 2, 5, 4, 4, 2, 16, 0, 0);      // two sequences, an anchor with no context
    dflash_case(200, 3, 12, 4, 4, 1, 32, 5, 1);    // sliding layer: window 5, causal block, MQA
    dflash_case(200, 2, 6, 6, 4, 2, 64, 8, 0);     // window, bidirectional block
    dflash_case(90, 1, 4, 6, 6, 3, 18, 0, 0);      // head_dim not a multiple of 8 (element loads)
    dflash_case(150, 2, 3, 70, 6, 2, 40, 0, 1);    // B 70: several block-key and query tiles, the last partial
    dflash_case(40, 1, 3, 1, 2, 1, 8, 3, 1);       // B 1, head_dim 8 (one 16-wide WMMA step, half padding), window 3
}

static void test_dflash(void) {
    const char *paths[] = {"tiled", "scalar"};
    for (int p = 0; p < (act_bf16 ? 2 : 1); p++) {
        attn_path = paths[p];
        dflash_shapes();
        if (p == 1 && TEST_EMULATED) continue; // the scalar kernels take minutes emulated at these sizes
        dflash_case(600, 1, 3, 16, 32, 8, 128, 0, 0);    // Qwen3-8B heads, B 16
        dflash_case(300, 1, 2, 32, 24, 4, 256, 0, 0);    // 27B-sized heads (hd 256), B 32
        // many anchors sharing context rows (dkc sums); 512 tokens and 24 anchors emulated
        dflash_case(TEST_EMU_SIZE(2048, 512), 1, TEST_EMU_SIZE(64, 24), 16, 8, 2, 64, 0, 0);
    }
    if (!act_bf16) return;
    const char *tiles[] = {"tiled-64x64", "tiled-64x32", "tiled-32x32", "tiled-32x16", "tiled-16x32"};
    for (int t = 0; t < 5; t++) { // each tile shape on the small cases
        attn_path = tiles[t];
        dflash_shapes();
    }
    unsetenv("DFLASH_CUDA_ATTN");
}

// ----------------------------------------------------------------------------- optimizer

static void test_optim(void) {
    int64_t n = 1000003;
    float *w = xmalloc((size_t)n * 4), *g = xmalloc((size_t)n * 4), *m = xmalloc((size_t)n * 4), *v = xmalloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++)
        w[i] = (float)test_rand_pm1(), g[i] = 0.1f * (float)test_rand_pm1(), m[i] = 0.01f * (float)test_rand_pm1(),
        v[i] = 1e-4f * fabsf((float)test_rand_pm1());
    void *g_w = dev_up_raw(&gpu, w, (size_t)n * 4), *g_g = dev_up_raw(&gpu, g, (size_t)n * 4),
         *g_m = dev_up_raw(&gpu, m, (size_t)n * 4);
    void *g_v = dev_up_raw(&gpu, v, (size_t)n * 4);
    double s_cpu = optim_sum_squares(&cpu, g, n), s_gpu = optim_sum_squares(&gpu, g_g, n);
    test_report("optim_sum_squares n=1000003", fabs(s_gpu - s_cpu) / s_cpu, 1e-9);
    optim_adamw(&cpu, w, g, m, v, n, 3e-4f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.5f, 0.1f, 0.001f);
    optim_adamw(&gpu, g_w, g_g, g_m, g_v, n, 3e-4f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.5f, 0.1f, 0.001f);
    cmp_f32("optim_adamw w n=1000003", g_w, w, (size_t)n, TOL_OPT);
    cmp_f32("optim_adamw m", g_m, m, (size_t)n, TOL_OPT);
    cmp_f32("optim_adamw v", g_v, v, (size_t)n, TOL_OPT);
    float *ema = test_copy_floats(g, (size_t)n);
    void *g_ema = dev_up_raw(&gpu, ema, (size_t)n * 4);
    optim_ema_update(&cpu, ema, w, n, 0.99f);
    optim_ema_update(&gpu, g_ema, g_w, n, 0.99f);
    cmp_f32("optim_ema_update n=1000003", g_ema, ema, (size_t)n, TOL_OPT);
    backend_free(&gpu, g_w), backend_free(&gpu, g_g), backend_free(&gpu, g_m), backend_free(&gpu, g_v);
    backend_free(&gpu, g_ema);
    free(w), free(g), free(m), free(v), free(ema);
}

// ----------------------------------------------------------------------------- DFlash2 dynamic conv

// C blocks of B slots, H in groups of G, K taps, dyn a strided view (ld = 2*K*H/G, the finish half).
static void dynconv_case(int C, int B, int H, int K, int G) {
    int T = C * B, ng = H / G, ld = 2 * K * ng;
    size_t n = (size_t)T * H, nd = (size_t)T * ld, nb = (size_t)K * H;
    float *x = test_rand_bf16(n, 2), *dyn = test_rand_bf16(nd, 0.5f), *base = test_rand_bf16(nb, 1),
          *dout = test_rand_bf16(n, 1);
    float *out = xmalloc(n * sizeof(float)), *dx = xmalloc(n * sizeof(float)), *ddyn = test_rand_bf16(nd, 1),
          *dbase = test_rand_bf16(nb, 2);
    void *g_x = dev_up_act(&gpu, x, n, act_bf16), *g_dyn = dev_up_act(&gpu, dyn, nd, act_bf16),
         *g_base = dev_up_act(&gpu, base, nb, act_bf16), *g_do = dev_up_act(&gpu, dout, n, act_bf16);
    void *g_out = dev_up_act(&gpu, out, n, act_bf16), *g_dx = dev_up_act(&gpu, dx, n, act_bf16),
         *g_ddyn = dev_up_act(&gpu, ddyn, nd, act_bf16), *g_db = dev_up_raw(&gpu, dbase, nb * 4);
    size_t off = (size_t)K * ng, e = act_bf16 ? 2 : 4;
    ops_dynconv_forward(&cpu, out, x, dyn + off, ld, base, T, B, H, K, G);
    ops_dynconv_forward(&gpu, g_out, g_x, (char *)g_dyn + off * e, ld, g_base, T, B, H, K, G);
    ops_dynconv_backward(&cpu, dx, ddyn + off, dbase, dout, x, dyn + off, ld, base, T, B, H, K, G);
    ops_dynconv_backward(&gpu, g_dx, (char *)g_ddyn + off * e, g_db, g_do, g_x, (char *)g_dyn + off * e, ld, g_base, T,
                         B, H, K, G);
    char name[96];
    snprintf(name, sizeof name, "dynconv out C=%d B=%d H=%d K=%d G=%d", C, B, H, K, G);
    cmp_act(name, g_out, out, n, TOL_ACT);
    snprintf(name, sizeof name, "dynconv dx C=%d B=%d H=%d K=%d G=%d", C, B, H, K, G);
    cmp_act(name, g_dx, dx, n, TOL_ACT);
    snprintf(name, sizeof name, "dynconv ddyn (both halves) C=%d B=%d", C, B);
    cmp_act(name, g_ddyn, ddyn, nd, TOL_ACT); // the prepare half kept its starting values on both sides
    snprintf(name, sizeof name, "dynconv dbase (+=) C=%d B=%d", C, B);
    cmp_f32(name, g_db, dbase, nb, TOL_F32);
    backend_free(&gpu, g_x); backend_free(&gpu, g_dyn); backend_free(&gpu, g_base); backend_free(&gpu, g_do);
    backend_free(&gpu, g_out); backend_free(&gpu, g_dx); backend_free(&gpu, g_ddyn); backend_free(&gpu, g_db);
    free(x); free(dyn); free(base); free(dout); free(out); free(dx); free(ddyn); free(dbase);
}

int main(void) {
    test_rand_seed(77777);
    int selftest = getenv("DFLASH_OPS_TRAIN_SELFTEST") && atoi(getenv("DFLASH_OPS_TRAIN_SELFTEST"));
    if (backend_cuda_devices() == 0 && !selftest) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    const char *other = backend_cuda_devices() > 0 ? "cuda" : "cpu";
    if (backend_open(&cpu, "cpu", 0) != 0 || backend_open(&gpu, other, 0) != 0) {
        fprintf(stderr, "%s\n", error_msg());
        return 1;
    }
    act_bf16 = ops_act_dtype(&gpu) == DT_BF16;
    printf("%s vs %s%s\n%-52s %10s %8s\n", gpu.name, cpu.name, act_bf16 ? "" : " (self-test: CPU against CPU)", "op",
           "max_err", "tol");
    rmsnorm_bwd_case(300, 4096, 0);
    rmsnorm_bwd_case(1000, 128, 1);   // the per-head q/k norm shape
    rmsnorm_bwd_case(7, 20000, 1);    // D past the kernel's shared-memory dw row
    rope_bwd_case(1200, 8, 128, 0);
    rope_bwd_case(300, 4, 64, 30000);
    rope_bwd_case(17, 3, 18, 5);
    test_swiglu_bwd_conv();
    dynconv_case(5, 8, 64, 2, 16); // the published K 2, G 16 at block 8
    dynconv_case(3, 7, 60, 3, 4);  // odd block, H 60 in 15 groups, K 3
    test_dflash();
    test_optim();
    backend_close(&gpu);
    backend_close(&cpu);
    return test_finish("test_ops_grad_cuda");
}
