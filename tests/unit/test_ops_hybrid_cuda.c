// test_ops_hybrid_cuda.c: every hybrid-target op (norm.h, rope.h, activation.h, deltanet.h) on CUDA
// against the CPU reference (skipped, exit 77, without a GPU; runs in the emulator build).
//
// As test_ops_cuda.c: both sides get the same inputs, rounded to bf16 first (the CPU gets those exact
// values as fp32), so only the precision of the computation differs. Per op one line
// `op  max_err  tol  ok|FAIL`, max_err = max |cuda - cpu| / max |cpu|. Tolerances:
//   bf16 outputs (norms, rope, gate, conv,   1e-2: the GPU computes in fp32 and rounds the result to
//     delta rule output)                       bf16 once (<= 2^-8 ~ 3.9e-3 relative to the element);
//                                              the fp32 work before differs from the CPU's by ~1e-6
//                                              (~1e-5 for the delta rule, whose output the CPU test
//                                              bounds at 2e-5 against the exact recurrence). A wrong
//                                              index, mask, decay or state errs by O(1).
//   the conv state out                       0: bf16 inputs moved, not computed
//   fp32 gates from bf16 inputs              1e-5: expf/log1pf differ by an ulp or two between the
//                                              CUDA and glibc libraries, nothing else
//   the delta rule's fp32 state out          5e-5: both sides are within 2e-5 of the exact recurrence
//                                              (test_ops_hybrid.c), so within 4e-5 of each other
// The delta rule also runs with forced chunk and slice sizes (DFLASH_CUDA_GDR=CxW): the
// shared-memory fallbacks of small devices, and value columns split over blocks; and forced onto its
// batched-GEMM form (DFLASH_CUDA_GDR=gemm, gemm:G): prefill's path. The strided-batched GEMM under it
// is held to 1e-5 against a double loop (fp32 accumulation of O(1) terms).
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/backend.h"
#include "common/core/check.h"
#include "common/core/half.h"
#include "common/kernels/ops.h"
#ifdef DFLASH_HAVE_CUDA
#include "common/kernels/deltanet_cuda.h"
#endif
#include "testing.h"
#include "testing_device.h"

#define TOL_BF16 1e-2
#define TOL_GATES 1e-5
#define TOL_STATE 5e-5

static backend cpu, gpu;

#ifdef DFLASH_CUDA_EMU
// the emulator's launch counts so far (tests/emu/emu_sched.cpp)
void emu_launch_counts(long long *kernels, long long *library);
#endif
// the launches of gdr_case's first GPU call (0 outside the emulator)
static long long gdr_kernels, gdr_library;

// the device copy of a bf16 result against the CPU's, freed after
static void report_bf16(const char *op, const void *d, const float *ref, size_t n) {
    float *got = dev_down_bf16(&gpu, d, n);
    test_report(op, test_rel_err(got, ref, n), TOL_BF16);
    free(got);
}

// packed batch offsets from lengths
static int make_cu(int32_t *cu, const int *lens, int n_seq) {
    cu[0] = 0;
    for (int s = 0; s < n_seq; s++) cu[s + 1] = cu[s] + lens[s];
    return cu[n_seq];
}

// ----------------------------------------------------------------------------- norms

static void norm_case(int R, int D, int gated, int in_place) {
    size_t n = (size_t)R * D;
    float *x = test_rand_bf16(n, 3), *z = test_rand_bf16(n, 4), *w = test_rand_bf16((size_t)D, 0.8f),
          *ref = xmalloc(n * sizeof(float));
    void *d_x = dev_up_bf16(&gpu, x, n), *d_z = dev_up_bf16(&gpu, z, n), *d_w = dev_up_bf16(&gpu, w, (size_t)D);
    void *d_y = in_place ? d_x : dev_alloc(&gpu, n * 2);
    if (gated) {
        ops_gated_rmsnorm(&cpu, ref, x, z, w, R, D, 1e-6f);
        ops_gated_rmsnorm(&gpu, d_y, d_x, d_z, d_w, R, D, 1e-6f);
    } else {
        ops_rmsnorm_zc(&cpu, ref, x, w, R, D, 1e-6f);
        ops_rmsnorm_zc(&gpu, d_y, d_x, d_w, R, D, 1e-6f);
    }
    char name[96];
    snprintf(name, sizeof name, "%s R=%d D=%d%s", gated ? "gated_rmsnorm" : "rmsnorm_zc", R, D,
             in_place ? " in place" : "");
    report_bf16(name, d_y, ref, n);
    if (!in_place) backend_free(&gpu, d_y);
    backend_free(&gpu, d_x);
    backend_free(&gpu, d_z);
    backend_free(&gpu, d_w);
    free(x);
    free(z);
    free(w);
    free(ref);
}

static void test_norms(void) {
    norm_case(67, 1000, 0, 0);
    norm_case(2000, 20, 0, 1); // per-head q/k norm shape: many short rows
    norm_case(300, 128, 1, 1); // the gated norm per value head, in place as the mixer calls it
    norm_case(5, 72, 1, 0);
}

// ----------------------------------------------------------------------------- partial RoPE, gate

static void rope_case(int T, int nh, int hd, int rot) {
    int half = rot / 2;
    size_t n = (size_t)T * nh * hd;
    float *x = test_rand_bf16(n, 2), *ref = test_copy_floats(x, n),
          *inv = xmalloc((size_t)(half ? half : 1) * sizeof(float));
    for (int i = 0; i < half; i++) inv[i] = (float)pow(1e7, -2.0 * i / rot);
    int32_t *pos = xmalloc((size_t)T * sizeof(int32_t));
    for (int t = 0; t < T; t++) pos[t] = t < T / 2 ? t : 20000 + t; // small and large angles
    ops_rope_partial(&cpu, ref, pos, inv, T, nh, hd, rot);
    void *d_x = dev_up_bf16(&gpu, x, n), *d_pos = dev_up_raw(&gpu, pos, (size_t)T * 4),
         *d_inv = dev_up_raw(&gpu, inv, (size_t)(half ? half : 1) * 4);
    ops_rope_partial(&gpu, d_x, d_pos, d_inv, T, nh, hd, rot);
    char name[96];
    snprintf(name, sizeof name, "rope_partial T=%d nh=%d hd=%d rot=%d", T, nh, hd, rot);
    report_bf16(name, d_x, ref, n);
    backend_free(&gpu, d_x);
    backend_free(&gpu, d_pos);
    backend_free(&gpu, d_inv);
    free(x);
    free(ref);
    free(inv);
    free(pos);
}

static void test_rope_gate(void) {
    rope_case(50, 5, 256, 64); // Qwen3.6's gated attention: 64 of 256 dims
    rope_case(33, 3, 12, 4);
    rope_case(9, 2, 18, 18);
    int64_t n = 100003;
    float *x = test_rand_bf16((size_t)n, 3), *g = test_rand_bf16((size_t)n, 8), *ref = test_copy_floats(x, (size_t)n);
    ops_sigmoid_mul(&cpu, ref, g, n);
    void *d_x = dev_up_bf16(&gpu, x, (size_t)n), *d_g = dev_up_bf16(&gpu, g, (size_t)n);
    ops_sigmoid_mul(&gpu, d_x, d_g, n);
    report_bf16("sigmoid_mul n=100003", d_x, ref, (size_t)n);
    backend_free(&gpu, d_x);
    backend_free(&gpu, d_g);
    free(x);
    free(g);
    free(ref);
}

// ----------------------------------------------------------------------------- conv1d + SiLU

static void conv_case(const int *lens, int n_seq, int C, int K) {
    int32_t cu[8];
    int T = make_cu(cu, lens, n_seq), S = K - 1;
    size_t n = (size_t)T * C, ns = (size_t)n_seq * S * C;
    float *x = test_rand_bf16(n, 2), *w = test_rand_bf16((size_t)C * K, 0.7f), *st = test_rand_bf16(ns, 2);
    float *ref = xmalloc(n * sizeof(float));
    void *d_x = dev_up_bf16(&gpu, x, n), *d_w = dev_up_bf16(&gpu, w, (size_t)C * K), *d_st = dev_up_bf16(&gpu, st, ns);
    void *d_cu = dev_up_raw(&gpu, cu, (size_t)(n_seq + 1) * 4), *d_out = dev_alloc(&gpu, n * 2);
    char name[96];
    ops_conv1d_silu(&cpu, ref, x, w, cu, n_seq, T, C, K, NULL);
    ops_conv1d_silu(&gpu, d_out, d_x, d_w, d_cu, n_seq, T, C, K, NULL);
    snprintf(name, sizeof name, "conv1d_silu T=%d C=%d K=%d", T, C, K);
    report_bf16(name, d_out, ref, n);
    ops_conv1d_silu(&cpu, ref, x, w, cu, n_seq, T, C, K, st);
    ops_conv1d_silu(&gpu, d_out, d_x, d_w, d_cu, n_seq, T, C, K, d_st);
    snprintf(name, sizeof name, "conv1d_silu T=%d C=%d K=%d state", T, C, K);
    report_bf16(name, d_out, ref, n);
    float *got = dev_down_bf16(&gpu, d_st, ns);
    snprintf(name, sizeof name, "conv1d_silu T=%d C=%d K=%d state out", T, C, K);
    test_report(name, test_rel_err(got, st, ns), 0);
    backend_free(&gpu, d_x);
    backend_free(&gpu, d_w);
    backend_free(&gpu, d_st);
    backend_free(&gpu, d_cu);
    backend_free(&gpu, d_out);
    free(x);
    free(w);
    free(st);
    free(ref);
    free(got);
}

static void test_conv(void) {
    int a[] = {1, 70, 131}, b[] = {0, 2, 5}; // b: an empty sequence, and ones shorter than the state
    conv_case(a, 3, 168, 4); // C = the qkv width of Hk=2 dk=12, Hv=6 dv=20
    conv_case(a, 3, 37, 3);
    conv_case(b, 3, 50, 4);
}

// ----------------------------------------------------------------------------- gates

static void test_gates(void) {
    int T = 202, Hv = 6;
    size_t n = (size_t)T * Hv;
    float *b = test_rand_bf16(n, 10), *a = test_rand_bf16(n, 30), *A_log = test_rand_vec((size_t)Hv, 2),
          *dt = test_rand_vec((size_t)Hv, 1);
    float *beta = xmalloc(n * 4), *g = xmalloc(n * 4);
    ops_gdn_gates(&cpu, beta, g, b, a, A_log, dt, T, Hv);
    void *d_b = dev_up_bf16(&gpu, b, n), *d_a = dev_up_bf16(&gpu, a, n),
         *d_al = dev_up_raw(&gpu, A_log, (size_t)Hv * 4), *d_dt = dev_up_raw(&gpu, dt, (size_t)Hv * 4);
    float *d_beta = dev_alloc(&gpu, n * 4), *d_g = dev_alloc(&gpu, n * 4);
    ops_gdn_gates(&gpu, d_beta, d_g, d_b, d_a, d_al, d_dt, T, Hv);
    float *gb = dev_down_f32(&gpu, d_beta, n), *gg = dev_down_f32(&gpu, d_g, n);
    test_report("gdn_gates beta T=202 Hv=6", test_rel_err(gb, beta, n), TOL_GATES);
    test_report("gdn_gates g T=202 Hv=6", test_rel_err(gg, g, n), TOL_GATES);
    backend_free(&gpu, d_b);
    backend_free(&gpu, d_a);
    backend_free(&gpu, d_al);
    backend_free(&gpu, d_dt);
    backend_free(&gpu, d_beta);
    backend_free(&gpu, d_g);
    free(b);
    free(a);
    free(A_log);
    free(dt);
    free(beta);
    free(g);
    free(gb);
    free(gg);
}

// ----------------------------------------------------------------------------- gated delta rule

// Both sides from the same bf16 qkv and fp32 gates (as the model makes them: mild decays, some
// strong, a few near-resets); once from S = 0, once from a random state (in and out). `plan`:
// DFLASH_CUDA_GDR for the GPU side ("" = the op's own choice).
static void gdr_case(const int *lens, int n_seq, int Hk, int Hv, int dk, int dv, const char *plan) {
    if (*plan) setenv("DFLASH_CUDA_GDR", plan, 1);
    else unsetenv("DFLASH_CUDA_GDR");
    int32_t cu[16];
    int T = make_cu(cu, lens, n_seq);
    size_t ld = 2 * (size_t)Hk * dk + (size_t)Hv * dv, nq = (size_t)T * ld, ng = (size_t)T * Hv;
    size_t no = (size_t)T * Hv * dv, ns = (size_t)n_seq * Hv * dk * dv;
    float *qkv = test_rand_bf16(nq, 1), *g = xmalloc(ng * 4), *beta = xmalloc(ng * 4);
    for (size_t i = 0; i < ng; i++) {
        float r = (float)test_rand_pm1();
        g[i] = i % 17 == 3 ? -30.0f : i % 7 == 1 ? -5.0f * (r + 1) / 2 : -0.3f * r * r;
        beta[i] = 0.5f + 0.49f * (float)test_rand_pm1();
    }
    float *st0 = test_rand_vec(ns, 0.5f), *st = test_copy_floats(st0, ns), *ref = xmalloc(no * 4);
    float *work = xmalloc(ops_gated_delta_rule_work_bytes(&cpu, T, n_seq, Hk, Hv, dk, dv));
    size_t wb = ops_gated_delta_rule_work_bytes(&gpu, T, n_seq, Hk, Hv, dk, dv);
    void *d_work = wb ? dev_alloc(&gpu, wb) : NULL;
    void *d_qkv = dev_up_bf16(&gpu, qkv, nq), *d_g = dev_up_raw(&gpu, g, ng * 4), *d_beta = dev_up_raw(&gpu, beta, ng * 4);
    void *d_cu = dev_up_raw(&gpu, cu, (size_t)(n_seq + 1) * 4), *d_out = dev_alloc(&gpu, no * 2);
    float *d_st = dev_up_raw(&gpu, st0, ns * 4);
    char name[128];

    ops_gated_delta_rule(&cpu, ref, qkv, g, beta, cu, NULL, n_seq, T, Hk, Hv, dk, dv, NULL, work);
    long long k0 = 0, l0 = 0, k1 = 0, l1 = 0;
#ifdef DFLASH_CUDA_EMU
    emu_launch_counts(&k0, &l0);
#endif
    ops_gated_delta_rule(&gpu, d_out, d_qkv, d_g, d_beta, d_cu, NULL, n_seq, T, Hk, Hv, dk, dv, NULL, d_work);
#ifdef DFLASH_CUDA_EMU
    emu_launch_counts(&k1, &l1);
#endif
    gdr_kernels = k1 - k0;
    gdr_library = l1 - l0;
    snprintf(name, sizeof name, "gated_delta_rule T=%d Hk=%d Hv=%d dk=%d dv=%d %s", T, Hk, Hv, dk, dv,
             *plan ? plan : "auto");
    report_bf16(name, d_out, ref, no);

    ops_gated_delta_rule(&cpu, ref, qkv, g, beta, cu, NULL, n_seq, T, Hk, Hv, dk, dv, st, work);
    ops_gated_delta_rule(&gpu, d_out, d_qkv, d_g, d_beta, d_cu, cu, n_seq, T, Hk, Hv, dk, dv, d_st, d_work);
    snprintf(name, sizeof name, "gated_delta_rule dk=%d dv=%d %s state in", dk, dv, *plan ? plan : "auto");
    report_bf16(name, d_out, ref, no);
    float *got = dev_down_f32(&gpu, d_st, ns);
    snprintf(name, sizeof name, "gated_delta_rule dk=%d dv=%d %s state out", dk, dv, *plan ? plan : "auto");
    test_report(name, test_rel_err(got, st, ns), TOL_STATE);

    if (d_work) backend_free(&gpu, d_work);
    backend_free(&gpu, d_qkv);
    backend_free(&gpu, d_g);
    backend_free(&gpu, d_beta);
    backend_free(&gpu, d_cu);
    backend_free(&gpu, d_out);
    backend_free(&gpu, d_st);
    free(qkv);
    free(g);
    free(beta);
    free(st0);
    free(st);
    free(ref);
    free(work);
    free(got);
    unsetenv("DFLASH_CUDA_GDR");
}

// The batched-GEMM form (DFLASH_CUDA_GDR=gemm, chunks of 64; gemm:G groups of G chunks) on shapes of
// its own: sequences ending inside a chunk and on its edge, several packed ones (empty, one token,
// exactly a chunk), head dims odd multiples of 16 and of nothing, one head, the state carried over
// groups of one and three chunks; "auto" picks it wherever sequences average a chunk (a, c above).
static void test_gated_delta_rule_gemm(void) {
    int a[] = {1, 70, 131}, b[] = {130, 0, 3}, c[] = {TEST_EMU_SIZE(2000, 200), 77};
    int d[] = {64, 1, 0, 129, 63, 128, 5}, e[] = {TEST_EMU_SIZE(1500, 300)};
    gdr_case(a, 3, 2, 6, 12, 20, "gemm");
    gdr_case(b, 3, 1, 2, 72, 100, "gemm");
    gdr_case(c, 2, 1, 3, 128, 128, "gemm");
    gdr_case(d, 7, 2, 4, 48, 80, "gemm");   // 7 packed sequences; dk 3 x 16, dv 5 x 16
    gdr_case(d, 7, 2, 4, 48, 80, "gemm:3"); // the state across groups of 3 chunks
    gdr_case(e, 1, 1, 1, 33, 47, "gemm");   // one head, odd dims
    gdr_case(e, 1, 1, 1, 33, 47, "gemm:1");
    gdr_case(a, 3, 1, 1, 96, 160, "gemm:1"); // dk 3 x 32, dv 5 x 32
    // 9 packed sequences, longest first in the carry: 3, 2 and 1 chunks, one shorter than a chunk, one
    // exactly a chunk, an empty one. gemm: one batch of 8 sequences in flight (steps of 8, 5, 4);
    // gemm:9: the steps of 5 and 4 sequences share a group; gemm:3: batches of 2, 3 and 3 sequences
    // (a batch's states stored and the next one's loaded in one pass), groups of one step
    int f[] = {150, 3, 190, 64, 100, 0, 177, 129, 40};
    gdr_case(f, 9, 1, 2, 24, 40, "gemm");
    gdr_case(f, 9, 1, 2, 24, 40, "gemm:9");
    gdr_case(f, 9, 1, 2, 24, 40, "gemm:3");
}

// The launches of the GEMM form: the carry walks chunk steps (the j-th chunk of every sequence at
// once), so 8 sequences of 3 chunks take launches per step, not per chunk: here at most 2 kernels
// per group and 1 per step (+ 2: the states in and out) and 2 cuBLAS calls per group and 3 per step,
// where the chunk-by-chunk carry took 1 kernel and 3 calls per chunk (24 chunks). Emulator only.
static void test_gated_delta_rule_launches(void) {
    if (!TEST_EMULATED) return;
    int h[] = {129, 192, 150, 170, 131, 190, 188, 140}; // 3 chunks each, none a multiple of 64
    gdr_case(h, 8, 1, 2, 16, 16, "gemm"); // one batch of 8, one group (24 chunks): 3 steps
    long long steps = 3, groups = 1;
    printf("gated_delta_rule launches, 8 sequences x 3 chunks: %lld kernels, %lld cuBLAS calls\n", gdr_kernels,
           gdr_library);
    CHECK(gdr_kernels >= steps && gdr_kernels <= 2 * groups + steps + 2);
    CHECK(gdr_library <= 2 * groups + 3 * steps);
    gdr_case(h, 8, 1, 2, 16, 16, "gemm:4"); // 2 batches of 4 (3 steps, 1 step a group each)
    steps = 2 * 3, groups = 2 * 3;
    printf("gated_delta_rule launches, 8 x 3 chunks, gemm:4: %lld kernels, %lld cuBLAS calls\n", gdr_kernels,
           gdr_library);
    CHECK(gdr_kernels >= steps && gdr_kernels <= 2 * groups + steps + 3);
    CHECK(gdr_library <= 2 * groups + 3 * steps);
}

static void test_gated_delta_rule(void) {
    int a[] = {1, 70, 131}, b[] = {130, 0, 3}, c[] = {TEST_EMU_SIZE(2000, 200), 77};
    gdr_case(a, 3, 2, 6, 12, 20, "");
    gdr_case(a, 3, 2, 6, 12, 20, "16x8");  // small chunks, value columns over 3 blocks (8, 8, 4)
    gdr_case(b, 3, 1, 2, 72, 100, "");     // an empty sequence; dims not powers of two
    gdr_case(b, 3, 1, 2, 72, 100, "32x48");
    gdr_case(c, 2, 1, 3, 128, 128, "");    // Qwen3.6's head dims (2000 tokens on a GPU)
    gdr_case(c, 2, 1, 3, 128, 128, "32x32"); // sm_120's choice (64x32 needs 105 KiB: sm_80/sm_90 only)
    gdr_case(b, 3, 1, 3, 128, 128, "");    // gdr_kernel at those dims: chunk 64, or 32 in sm_120's 99 KiB
    test_gated_delta_rule_gemm();
    test_gated_delta_rule_launches();
}

// ----------------------------------------------------------------------------- batched GEMM

#ifdef DFLASH_HAVE_CUDA
// cuda_gemm_batched_f32 (the delta rule's products; cublasGemmStridedBatchedEx, emulated or real)
// against a double loop: every transpose pair, leading dimensions past the row, a stride 0 operand
// (one matrix for every member), alpha and beta != 1, padding between members left as it was.
static void gemm_batched_case(int ta, int tb, int m, int n, int k, int batch, int bcast_b) {
    int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = n + 2;
    int64_t sa = (int64_t)(ta ? k : m) * lda + 5, sb = bcast_b ? 0 : (int64_t)(tb ? n : k) * ldb + 7;
    int64_t sc = (int64_t)m * ldc + 4;
    size_t na = (size_t)sa * batch, nb = bcast_b ? (size_t)(tb ? n : k) * ldb : (size_t)sb * batch;
    size_t nc = (size_t)sc * batch;
    float *A = test_rand_vec(na, 1), *B = test_rand_vec(nb, 1), *C = test_rand_vec(nc, 1);
    double *ref = xmalloc(nc * sizeof(double));
    float alpha = -0.75f, beta = 0.5f;
    for (size_t i = 0; i < nc; i++) ref[i] = C[i]; // padding and untouched elements stay
    for (int bi = 0; bi < batch; bi++)
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                double acc = 0;
                for (int l = 0; l < k; l++) {
                    double x = A[bi * sa + (ta ? (size_t)l * lda + i : (size_t)i * lda + l)];
                    double y = B[bi * sb + (tb ? (size_t)j * ldb + l : (size_t)l * ldb + j)];
                    acc += x * y;
                }
                size_t o = (size_t)(bi * sc) + (size_t)i * ldc + j;
                ref[o] = alpha * acc + beta * (double)C[o];
            }
    float *d_a = dev_up_raw(&gpu, A, na * 4), *d_b = dev_up_raw(&gpu, B, nb * 4), *d_c = dev_up_raw(&gpu, C, nc * 4);
    cuda_gemm_batched_f32(&gpu, ta, tb, m, n, k, alpha, d_a, lda, sa, d_b, ldb, sb, beta, d_c, ldc, sc, batch);
    float *got = dev_down_f32(&gpu, d_c, nc);
    char name[96];
    snprintf(name, sizeof name, "gemm_batched_f32 %c%c m=%d n=%d k=%d x%d%s", ta ? 'T' : 'N', tb ? 'T' : 'N', m, n,
             k, batch, bcast_b ? " B shared" : "");
    test_report(name, test_rel_err_d(got, ref, nc), 1e-5); // fp32 accumulation over k <= 70 terms of O(1)
    backend_free(&gpu, d_a);
    backend_free(&gpu, d_b);
    backend_free(&gpu, d_c);
    free(A);
    free(B);
    free(C);
    free(ref);
    free(got);
}

static void test_gemm_batched(void) {
    for (int t = 0; t < 4; t++) gemm_batched_case(t & 1, t >> 1, 13, 9, 70, 3, 0);
    gemm_batched_case(0, 0, 5, 17, 8, 4, 1);
    gemm_batched_case(1, 0, 16, 16, 1, 2, 0);
}
#endif

int main(void) {
    test_rand_seed(777001);
    int open_rc = test_open_devices(&cpu, &gpu);
    if (open_rc) return open_rc;
    printf("%s vs %s\n%-56s %10s %8s\n", gpu.name, cpu.name, "op", "max_err", "tol");
    test_norms();
    test_rope_gate();
    test_conv();
    test_gates();
    test_gated_delta_rule();
#ifdef DFLASH_HAVE_CUDA
    test_gemm_batched();
#endif
    backend_close(&gpu);
    backend_close(&cpu);
    return test_finish("test_ops_hybrid_cuda");
}
