// test_ops_moe_cuda.c: every mixture-of-experts op (ops_moe.h) on CUDA against the CPU reference
// (skipped, exit 77, without a GPU; runs in the emulator build).
//
// The block runs on the GPU as the teacher runs it (route, gather, gemm, swiglu_packed, gemm,
// combine, sigmoid_gate_add); each op's inputs are copied back and the CPU op runs on exactly those
// values (bf16 values as fp32), so only the computation of that one op differs. Router logits are
// fp32 multiples of 1/8 (distinct ones differ by >= 1/8, so no rounding reorders them; equal ones,
// frequent, must go to the lower id on both). Per op one line `op  max_err  tol  ok|FAIL`,
// max_err = max |cuda - cpu| / max |cpu|. Tolerances:
//   route indices, offsets, perm, slot     0: exact
//   route weights (fp32)                   (2E + 16) u absolute (u = 2^-24): both softmaxes are
//                                          within (E + 8) u (test_ops_moe.c), expf and vexpf differ
//                                          by an ulp or two, the sums run in different orders
//   gather                                 0: bf16 rows moved
//   gemm, swiglu_packed, combine,          1e-2: the GPU accumulates in fp32 (tensor cores: exact
//   sigmoid_gate_add (bf16 outputs)          bf16 products, fp32 sums in another order, ~1e-6) and
//                                          rounds to bf16 once (<= 2^-8 ~ 3.9e-3 relative to the
//                                          element); a wrong row, expert, tile or weight errs by O(1)
// Shapes: E = 5, 6, 7, 13, 64, 128, 300 (more experts than a warp scans at once); k = 1, 2, 3, 8;
// T = 37, 41, 53 and larger (more than 256 rows in the scatter); K and N odd, even, multiples of 8
// (16-byte aligned rows for cuBLAS) and odd multiples of 8; experts with no token (the first, the
// last); every token on one expert; max_rows exact and R (the GEMM does not use it on CUDA). The
// expert GEMM also on offsets the host uploaded (no route: the GEMM downloads the counts itself)
// and on a route's offsets buffer rewritten after the block's combine (the route's download no
// longer stands).
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/backend.h"
#include "common/core/check.h"
#include "common/core/half.h"
#include "common/moe/ops_moe.h"
#include "testing.h"
#include "testing_device.h"

#define U32 0x1p-24
#define TOL_BF16 1e-2

static backend cpu, gpu;

// the device copy of a bf16 result against the CPU's
static void report_bf16(const char *op, const char *shape, const void *d, const float *ref, size_t n, double tol) {
    float *got = dev_down_bf16(&gpu, d, n);
    char name[160];
    snprintf(name, sizeof name, "%s %s", op, shape);
    test_report(name, test_rel_err(got, ref, n), tol);
    free(got);
}

static int count_diff(const int32_t *a, const int32_t *b, size_t n) {
    int d = 0;
    for (size_t i = 0; i < n; i++) d += a[i] != b[i];
    return d;
}

enum { LOG_GRID, LOG_EMPTY, LOG_ONE };

// as test_ops_moe.c: multiples of 1/8 in [-5, 5]; experts 1, 4, 5 (mod 7) at -40; expert E/2 at +40
static float *make_logits(int T, int E, int mode) {
    float *l = xmalloc(((size_t)T * E + 1) * sizeof(float));
    for (int t = 0; t < T; t++)
        for (int e = 0; e < E; e++) {
            float v = (float)((int)(test_rand_u32() % 81) - 40) / 8.0f;
            if (mode == LOG_EMPTY && (e % 7 == 1 || e % 7 == 4 || e % 7 == 5)) v = -40.0f;
            if (mode == LOG_ONE && e == E / 2) v = 40.0f;
            l[(size_t)t * E + e] = v;
        }
    return l;
}

// The block on the GPU, each op checked against the CPU op on the GPU's own inputs.
static void moe_case(int T, int E, int k, int H, int I, int renorm, int mode, int exact_max_rows) {
    int R = T * k;
    size_t nR = (size_t)R;
    char shape[128];
    snprintf(shape, sizeof shape, "T=%d E=%d k=%d H=%d I=%d%s%s%s", T, E, k, H, I, renorm ? "" : " no-renorm",
             mode == LOG_EMPTY ? " empty" : mode == LOG_ONE ? " one-expert" : "", exact_max_rows ? "" : " max_rows=R");

    // route
    float *logits = make_logits(T, E, mode);
    int32_t *idx = xmalloc(nR * 4 + 4), *off = xmalloc((size_t)(E + 1) * 4), *perm = xmalloc(nR * 4 + 4),
            *slot = xmalloc(nR * 4 + 4);
    float *w = xmalloc(nR * 4 + 4);
    ops_moe_route(&cpu, logits, T, E, k, renorm, idx, w, off, perm, slot, NULL);
    void *d_logits = dev_up_raw(&gpu, logits, (size_t)T * E * 4);
    int32_t *d_idx = dev_alloc(&gpu, nR * 4), *d_off = dev_alloc(&gpu, (size_t)(E + 1) * 4), *d_perm = dev_alloc(&gpu, nR * 4),
            *d_slot = dev_alloc(&gpu, nR * 4);
    float *d_w = dev_alloc(&gpu, nR * 4);
    size_t wb = ops_moe_route_work_bytes(&gpu, T, E, k);
    void *d_work = wb ? dev_alloc(&gpu, wb) : NULL;
    ops_moe_route(&gpu, d_logits, T, E, k, renorm, d_idx, d_w, d_off, d_perm, d_slot, d_work);
    int32_t *g_idx = dev_down_raw(&gpu, d_idx, nR * 4), *g_off = dev_down_raw(&gpu, d_off, (size_t)(E + 1) * 4),
            *g_perm = dev_down_raw(&gpu, d_perm, nR * 4), *g_slot = dev_down_raw(&gpu, d_slot, nR * 4);
    float *g_w = dev_down_raw(&gpu, d_w, nR * 4);
    int di = count_diff(g_idx, idx, nR), dof = count_diff(g_off, off, (size_t)E + 1), dp = count_diff(g_perm, perm, nR),
        ds = count_diff(g_slot, slot, nR);
    int ok = !di && !dof && !dp && !ds;
    printf("route %-58s %s (%d idx, %d offsets, %d perm, %d slot differ)\n", shape, ok ? "ok" : "FAIL", di, dof, dp, ds);
    fflush(stdout);
    CHECK_MSG(ok, "route %s: the GPU's indices or grouping differ", shape);
    double werr = 0;
    for (size_t i = 0; i < nR; i++) werr = fmax(werr, fabs((double)g_w[i] - w[i]));
    char name[160];
    snprintf(name, sizeof name, "route weights %s", shape);
    test_report(name, werr, (2 * E + 16) * U32);

    // gather
    float *x = test_rand_bf16((size_t)T * H, 1.0f);
    float *Wgu = test_rand_bf16((size_t)E * 2 * I * H, 1.0f / sqrtf((float)H));
    float *Wd = test_rand_bf16((size_t)E * H * I, 1.0f / sqrtf((float)I));
    void *d_x = dev_up_bf16(&gpu, x, (size_t)T * H), *d_Wgu = dev_up_bf16(&gpu, Wgu, (size_t)E * 2 * I * H),
         *d_Wd = dev_up_bf16(&gpu, Wd, (size_t)E * H * I);
    void *d_xs = dev_alloc(&gpu, nR * H * 2), *d_gu = dev_alloc(&gpu, nR * 2 * I * 2), *d_a = dev_alloc(&gpu, nR * I * 2),
         *d_ys = dev_alloc(&gpu, nR * H * 2), *d_y = dev_alloc(&gpu, (size_t)T * H * 2);
    float *ref_xs = xmalloc(nR * H * 4 + 4), *ref_gu = xmalloc(nR * 2 * I * 4 + 4), *ref_a = xmalloc(nR * I * 4 + 4),
          *ref_ys = xmalloc(nR * H * 4 + 4), *ref_y = xmalloc((size_t)T * H * 4 + 4);
    ops_moe_gather(&gpu, d_xs, d_x, d_perm, R, H);
    ops_moe_gather(&cpu, ref_xs, x, perm, R, H);
    report_bf16("moe_gather", shape, d_xs, ref_xs, nR * H, 0);

    // gate_up gemm, on the GPU's own gathered rows
    int max_rows = 0;
    for (int e = 0; e < E; e++) max_rows = off[e + 1] - off[e] > max_rows ? off[e + 1] - off[e] : max_rows;
    int mr = exact_max_rows ? max_rows : R;
    float *in = dev_down_bf16(&gpu, d_xs, nR * H);
    ops_moe_gemm(&gpu, d_gu, d_xs, d_Wgu, d_off, E, R, 2 * I, H, mr);
    ops_moe_gemm(&cpu, ref_gu, in, Wgu, off, E, R, 2 * I, H, mr);
    report_bf16("moe_gemm gate_up", shape, d_gu, ref_gu, nR * 2 * I, TOL_BF16);
    free(in);

    in = dev_down_bf16(&gpu, d_gu, nR * 2 * I);
    ops_swiglu_packed(&gpu, d_a, d_gu, R, I);
    ops_swiglu_packed(&cpu, ref_a, in, R, I);
    report_bf16("swiglu_packed", shape, d_a, ref_a, nR * I, TOL_BF16);
    free(in);

    in = dev_down_bf16(&gpu, d_a, nR * I);
    ops_moe_gemm(&gpu, d_ys, d_a, d_Wd, d_off, E, R, H, I, mr);
    ops_moe_gemm(&cpu, ref_ys, in, Wd, off, E, R, H, I, mr);
    report_bf16("moe_gemm down", shape, d_ys, ref_ys, nR * H, TOL_BF16);
    free(in);

    in = dev_down_bf16(&gpu, d_ys, nR * H);
    ops_moe_combine(&gpu, d_y, d_ys, d_slot, d_idx, d_w, T, k, H);
    ops_moe_combine(&cpu, ref_y, in, slot, idx, g_w, T, k, H);
    report_bf16("moe_combine", shape, d_y, ref_y, (size_t)T * H, TOL_BF16);
    free(in);

    // the shared expert's gate on the combined output
    float *s = test_rand_bf16((size_t)T * H, 2.0f), *g = test_rand_bf16((size_t)T, 6.0f);
    void *d_s = dev_up_bf16(&gpu, s, (size_t)T * H), *d_g = dev_up_bf16(&gpu, g, (size_t)T);
    in = dev_down_bf16(&gpu, d_y, (size_t)T * H);
    ops_sigmoid_gate_add(&gpu, d_y, d_s, d_g, T, H);
    ops_sigmoid_gate_add(&cpu, in, s, g, T, H);
    report_bf16("sigmoid_gate_add", shape, d_y, in, (size_t)T * H, TOL_BF16);
    free(in);

    void *dev[] = {d_logits, d_idx, d_off, d_perm, d_slot, d_w, d_work, d_x, d_Wgu, d_Wd,
                   d_xs, d_gu, d_a, d_ys, d_y, d_s, d_g};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
        if (dev[i]) backend_free(&gpu, dev[i]);
    void *host[] = {logits, idx, off, perm, slot, w, g_idx, g_off, g_perm, g_slot, g_w, x, Wgu, Wd,
                    ref_xs, ref_gu, ref_a, ref_ys, ref_y, s, g};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++) free(host[i]);
}

// no tokens: the offsets are all 0 (the memset), nothing else runs
static void test_route_empty(void) {
    int E = 9;
    int32_t *d_off = dev_alloc(&gpu, (size_t)(E + 1) * 4), off[10];
    ops_moe_route(&gpu, NULL, 0, E, 2, 1, NULL, NULL, d_off, NULL, NULL, NULL);
    backend_copy_to_host(&gpu, off, d_off, sizeof off);
    int zero = 1;
    for (int e = 0; e <= E; e++) zero &= off[e] == 0;
    printf("route T=0 (offsets all 0) %-40s %s\n", "", zero ? "ok" : "FAIL");
    CHECK(zero);
    backend_free(&gpu, d_off);
}

// The expert GEMM on offsets no route wrote (uploaded by the host: the GEMM downloads the counts
// itself), and on a route's offsets buffer rewritten after the block's combine (the counts the route
// downloaded no longer stand): each against the CPU on the same offsets. E = 7 with the first and the
// last expert empty, a row count per expert that is no multiple of anything, K odd and a multiple of
// 8 (an odd multiple: 56), N odd.
static void gemm_offsets_case(int reuse_route_buffer) {
    enum { E = 7 };
    const int counts[E] = {0, 13, 1, 0, 29, 6, 0}, K = reuse_route_buffer ? 56 : 33, N = reuse_route_buffer ? 45 : 19;
    int32_t off[E + 1] = {0};
    for (int e = 0; e < E; e++) off[e + 1] = off[e] + counts[e];
    int R = off[E];
    char shape[96];
    snprintf(shape, sizeof shape, "E=%d R=%d N=%d K=%d %s", E, R, N, K,
             reuse_route_buffer ? "offsets rewritten after a combine" : "offsets uploaded");
    int32_t *d_off = dev_alloc(&gpu, sizeof off);
    if (reuse_route_buffer) { // a whole block on d_off first: the same R = 49 rows, 7 on every expert
        int T = 7, k = 7, H = 8;
        float *logits = make_logits(T, E, LOG_GRID), *hx = test_rand_bf16((size_t)T * H, 1.0f),
              *hW = test_rand_bf16((size_t)E * H * H, 0.3f);
        void *dl = dev_up_raw(&gpu, logits, (size_t)T * E * 4), *dx = dev_up_bf16(&gpu, hx, (size_t)T * H),
             *dW = dev_up_bf16(&gpu, hW, (size_t)E * H * H);
        int32_t *di = dev_alloc(&gpu, (size_t)T * k * 4), *dp = dev_alloc(&gpu, (size_t)T * k * 4),
                *ds = dev_alloc(&gpu, (size_t)T * k * 4);
        float *dw = dev_alloc(&gpu, (size_t)T * k * 4);
        void *dxs = dev_alloc(&gpu, (size_t)T * k * H * 2), *dys = dev_alloc(&gpu, (size_t)T * k * H * 2),
             *dy = dev_alloc(&gpu, (size_t)T * H * 2);
        ops_moe_route(&gpu, dl, T, E, k, 1, di, dw, d_off, dp, ds, NULL);
        ops_moe_gather(&gpu, dxs, dx, dp, T * k, H);
        ops_moe_gemm(&gpu, dys, dxs, dW, d_off, E, T * k, H, H, T * k);
        ops_moe_combine(&gpu, dy, dys, ds, di, dw, T, k, H);
        void *dev[] = {dl, dx, dW, di, dp, ds, dw, dxs, dys, dy};
        for (size_t i = 0; i < sizeof dev / sizeof *dev; i++) backend_free(&gpu, dev[i]);
        free(logits);
        free(hx);
        free(hW);
    }
    backend_copy_to_device(&gpu, d_off, off, sizeof off);
    float *x = test_rand_bf16((size_t)R * K, 1.0f), *W = test_rand_bf16((size_t)E * N * K, 1.0f / sqrtf((float)K));
    float *ref = xmalloc((size_t)R * N * 4);
    void *d_x = dev_up_bf16(&gpu, x, (size_t)R * K), *d_W = dev_up_bf16(&gpu, W, (size_t)E * N * K),
         *d_y = dev_alloc(&gpu, (size_t)R * N * 2);
    ops_moe_gemm(&gpu, d_y, d_x, d_W, d_off, E, R, N, K, R);
    ops_moe_gemm(&cpu, ref, x, W, off, E, R, N, K, R);
    report_bf16("moe_gemm", shape, d_y, ref, (size_t)R * N, TOL_BF16);
    backend_free(&gpu, d_off);
    backend_free(&gpu, d_x);
    backend_free(&gpu, d_W);
    backend_free(&gpu, d_y);
    free(x);
    free(W);
    free(ref);
}

int main(void) {
    test_rand_seed(90210);
    int open_rc = test_open_devices(&cpu, &gpu);
    if (open_rc) return open_rc;
    printf("%s vs %s\n%-64s %10s %8s\n", gpu.name, cpu.name, "op", "max_err", "tol");
    test_route_empty();
    moe_case(37, 13, 3, 72, 40, 1, LOG_GRID, 1);   // K = 72, 40: multiples of 8 (16-byte staging)
    moe_case(37, 6, 1, 50, 21, 0, LOG_GRID, 0);    // K = 50, 21: scalar staging; N = 42, 50
    moe_case(37, 6, 2, 33, 17, 1, LOG_GRID, 1);
    moe_case(37, 13, 2, 48, 24, 1, LOG_EMPTY, 1);  // 6 of 13 experts without a token
    moe_case(150, 6, 1, 40, 24, 0, LOG_ONE, 1);    // 150 rows on expert 3: three 64-row tiles
    moe_case(150, 6, 1, 40, 24, 0, LOG_ONE, 0);
    moe_case(90, 300, 3, 24, 16, 1, LOG_GRID, 1);  // E > 256: the scan and the pointer arrays loop
    moe_case(41, 5, 3, 56, 40, 1, LOG_GRID, 1);    // E 5, k 3, T prime; H 56 and I 40: odd multiples of 8
    moe_case(53, 7, 3, 35, 19, 0, LOG_EMPTY, 1);   // E 7 (3 without a token), k 3; H, I odd
    gemm_offsets_case(0);
    gemm_offsets_case(1);
    moe_case(TEST_EMU_SIZE(300, 60), 64, 8, TEST_EMU_SIZE(256, 64), TEST_EMU_SIZE(160, 40), 1, LOG_GRID, 1);
    // Qwen3-30B-A3B's MoE layer (E 128, k 8, H 2048, I 768) on a GPU; its routing shape in the emulator
    moe_case(TEST_EMU_SIZE(1024, 40), 128, 8, TEST_EMU_SIZE(2048, 32), TEST_EMU_SIZE(768, 24), 1, LOG_GRID, 1);
    backend_close(&gpu);
    backend_close(&cpu);
    return test_finish("test_ops_moe_cuda");
}
