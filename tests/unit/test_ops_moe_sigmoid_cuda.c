// test_ops_moe_sigmoid_cuda.c: the group-limited sigmoid router (ops_moe_sigmoid.h) on CUDA against
// the CPU reference (skipped, exit 77, without a GPU; runs in the emulator build), on the same fp32
// logits and biases, and the expert GEMM right after it (it takes its group sizes from the counts the
// route's grouping downloaded: cuda_moe_group).
//
// Inputs as test_ops_moe_sigmoid.c: logits multiples of 1/8 in [-5, 5], biases multiples of 1/32
// (ties frequent: the lower id must win on both), patterns random / one group raised / all equal /
// a NaN logit per token. Near-ties cannot reorder here as they could against a double reference:
// both sides compute the same fp32 sums from the same fp32 sigmoids, up to expf's last ulp on the
// device, so a token's choices may only differ where two b are within an ulp or two; the inputs
// make such gaps rare, and a token whose CPU gaps are that small (< 1e-6) is left out of the index
// comparison (counted and printed; the grouping is then compared on the GPU's own choices, through
// the CPU's grouping of them).
// Per check one line `op  max_err  tol  ok|FAIL`; u = 2^-24. Tolerances:
//   indices, offsets, perm, slot   0: exact
//   weights                        (2k + 16) u relative to the largest: both within (k + 8) u of
//                                  the exact weights, the device's expf differs by an ulp or two
//   expert gemm (bf16 out)         1e-2 (as test_ops_moe_cuda.c: fp32 sums, one bf16 rounding)
// Shapes: the fixtures' (6 experts in 3 groups), GLM-4.5's (160, one group), DeepSeek-V3's (256,
// 8 groups, top 4, k 8), Kimi-K2's (384: more experts than a warp scans at once, 12 per lane),
// groups more than a warp (64 groups of 2), T large enough for several blocks of 8 warps and a
// scatter of more than 256 rows, T = 0 (offsets all 0).
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/backend.h"
#include "common/core/check.h"
#include "common/moe/ops_moe.h"
#include "common/moe/ops_moe_sigmoid.h"
#include "testing.h"
#include "testing_device.h"

#define U32 0x1p-24
#define TOL_BF16 1e-2

static backend cpu, gpu;

enum { PAT_GRID, PAT_GROUP, PAT_FLAT, PAT_NAN };

static const char *pat_name(int p) {
    return p == PAT_GRID ? "" : p == PAT_GROUP ? " group-biased" : p == PAT_FLAT ? " flat" : " NaN logit";
}

static int count_diff(const int32_t *a, const int32_t *b, size_t n) {
    int d = 0;
    for (size_t i = 0; i < n; i++) d += a[i] != b[i];
    return d;
}

// same_src: experts a and b have the same logit and bias (their b are equal on every device)
static int same_src(const float *l, const float *bias, int a, int b) { return l[a] == l[b] && bias[a] == bias[b]; }

// near_tie: one of token t's decisions on the CPU (each choice against the next, the last against
// the best left, the kept groups' worst against the best dropped) was by less than 1e-6 between
// values from different inputs (an ulp of the device's expf could turn it); equal inputs tie
// exactly everywhere and are decided by the lower id on both
static int near_tie(const float *l, const float *bias, int E, int k, int G, int tg, const int32_t *idx) {
    int per = E / G, near = 0;
    float *b = xmalloc((size_t)E * sizeof(float)), *gs = xmalloc((size_t)G * sizeof(float));
    int *top = xmalloc((size_t)G * 2 * sizeof(int));
    char *kept = xcalloc((size_t)G, 1), *chosen = xcalloc((size_t)E, 1);
    for (int e = 0; e < E; e++) {
        float v = 1.0f / (1.0f + expf(-l[e])) + bias[e];
        b[e] = isnan(v) ? -INFINITY : v;
    }
    if (tg < G) {
        for (int g = 0; g < G; g++) {
            int i1 = -1, i2 = -1;
            for (int e = g * per; e < (g + 1) * per; e++) {
                if (i1 < 0 || b[e] > b[i1]) i2 = i1, i1 = e;
                else if (i2 < 0 || b[e] > b[i2]) i2 = e;
            }
            gs[g] = b[i1] + b[i2];
            top[2 * g] = i1, top[2 * g + 1] = i2;
        }
        for (int j = 0; j < k; j++) kept[idx[j] / per] = 1;
        for (int g = 0; g < G; g++)
            for (int h = 0; h < G; h++)
                if (kept[g] && !kept[h] && fabsf(gs[g] - gs[h]) < 1e-6f &&
                    !(same_src(l, bias, top[2 * g], top[2 * h]) && same_src(l, bias, top[2 * g + 1], top[2 * h + 1])))
                    near = 1;
        for (int e = 0; e < E; e++)
            if (!kept[e / per]) b[e] = -INFINITY;
    }
    for (int j = 0; j < k; j++) chosen[idx[j]] = 1;
    for (int j = 0; j < k; j++) // against the next choice and every expert left
        for (int e = 0; e < E; e++)
            if ((!chosen[e] || (j + 1 < k && e == idx[j + 1])) && e != idx[j] && fabsf(b[idx[j]] - b[e]) < 1e-6f &&
                !same_src(l, bias, idx[j], e) && isfinite(b[e]))
                near = 1;
    free(b);
    free(gs);
    free(top);
    free(kept);
    free(chosen);
    return near;
}

static void route_case(int T, int E, int k, int G, int tg, int renorm, float scale, int pat) {
    char shape[160];
    snprintf(shape, sizeof shape, "T=%d E=%d k=%d groups %d/%d%s scale %g%s", T, E, k, tg, G, renorm ? "" : " no-renorm",
             (double)scale, pat_name(pat));
    size_t R = (size_t)T * k;
    float *l = xmalloc(((size_t)T * E + 1) * sizeof(float)), *bias = xmalloc((size_t)E * sizeof(float));
    for (int e = 0; e < E; e++) {
        bias[e] = pat == PAT_FLAT ? 0.25f : (float)((int)(test_rand_u32() % 33) - 16) / 32.0f;
        if (pat == PAT_GROUP && e / (E / G) == G - 1) bias[e] += 4.0f;
    }
    for (int t = 0; t < T; t++)
        for (int e = 0; e < E; e++) {
            float v = pat == PAT_FLAT ? 0.75f : (float)((int)(test_rand_u32() % 81) - 40) / 8.0f;
            if (pat == PAT_NAN && e == t % E) v = NAN;
            l[(size_t)t * E + e] = v;
        }
    int32_t *idx = xmalloc(R * 4 + 4), *off = xmalloc((size_t)(E + 1) * 4), *perm = xmalloc(R * 4 + 4),
            *slot = xmalloc(R * 4 + 4);
    float *w = xmalloc(R * 4 + 4);
    ops_moe_sigmoid_route(&cpu, l, bias, T, E, k, G, tg, renorm, scale, idx, w, off, perm, slot);
    float *d_l = dev_up_raw(&gpu, l, (size_t)T * E * 4), *d_bias = dev_up_raw(&gpu, bias, (size_t)E * 4);
    int32_t *d_idx = dev_alloc(&gpu, R * 4), *d_off = dev_alloc(&gpu, (size_t)(E + 1) * 4), *d_perm = dev_alloc(&gpu, R * 4),
            *d_slot = dev_alloc(&gpu, R * 4);
    float *d_w = dev_alloc(&gpu, R * 4);
    ops_moe_sigmoid_route(&gpu, d_l, d_bias, T, E, k, G, tg, renorm, scale, d_idx, d_w, d_off, d_perm, d_slot);

    // the expert GEMM on the route's offsets (its counts: the route's download), bf16 rows of width K
    int K = 24, N = 17;
    float *x = test_rand_bf16(R * K, 1.0f), *W = test_rand_bf16((size_t)E * N * K, 0.3f);
    void *d_x = dev_up_bf16(&gpu, x, R * K), *d_W = dev_up_bf16(&gpu, W, (size_t)E * N * K), *d_y = dev_alloc(&gpu, R * N * 2);
    ops_moe_gemm(&gpu, d_y, d_x, d_W, d_off, E, (int)R, N, K, (int)R);

    int32_t *g_idx = dev_down_raw(&gpu, d_idx, R * 4), *g_off = dev_down_raw(&gpu, d_off, (size_t)(E + 1) * 4),
            *g_perm = dev_down_raw(&gpu, d_perm, R * 4), *g_slot = dev_down_raw(&gpu, d_slot, R * 4);
    float *g_w = dev_down_raw(&gpu, d_w, R * 4);
    int near = 0, di = 0;
    for (int t = 0; t < T; t++) {
        if (near_tie(l + (size_t)t * E, bias, E, k, G, tg, idx + (size_t)t * k)) {
            near++;
            continue;
        }
        di += count_diff(g_idx + (size_t)t * k, idx + (size_t)t * k, (size_t)k);
    }
    // the grouping of the GPU's own choices, by the CPU's grouping (a near-tie may differ above)
    int32_t *c_off = xmalloc((size_t)(E + 1) * 4), *c_perm = xmalloc(R * 4 + 4), *c_slot = xmalloc(R * 4 + 4);
    {
        int row = 0;
        for (int e = 0; e < E; e++) {
            c_off[e] = row;
            for (size_t r = 0; r < R; r++)
                if (g_idx[r] == e) {
                    c_perm[row] = (int32_t)(r / (size_t)k);
                    c_slot[r] = row++;
                }
        }
        c_off[E] = row;
    }
    int dof = count_diff(g_off, c_off, (size_t)E + 1), dp = count_diff(g_perm, c_perm, R), ds = count_diff(g_slot, c_slot, R);
    int ok = !di && !dof && !dp && !ds;
    printf("sigmoid route %-62s %s (%d idx, %d offsets, %d perm, %d slot differ; %d near-tie tokens)\n", shape,
           ok ? "ok" : "FAIL", di, dof, dp, ds, near);
    fflush(stdout);
    CHECK_MSG(ok, "sigmoid route %s: the GPU's indices or grouping differ", shape);
    CHECK_MSG(near * 10 <= T, "sigmoid route %s: %d of %d tokens near a tie (the inputs should make them rare)", shape,
              near, T);
    double werr = 0, wmax = 0;
    for (int t = 0; t < T; t++)
        if (!count_diff(g_idx + (size_t)t * k, idx + (size_t)t * k, (size_t)k))
            for (int j = 0; j < k; j++) {
                size_t i = (size_t)t * k + j;
                werr = fmax(werr, fabs((double)g_w[i] - w[i]));
                wmax = fmax(wmax, fabs((double)w[i]));
            }
    char name[200];
    snprintf(name, sizeof name, "sigmoid route weights %s", shape);
    test_report(name, wmax > 0 ? werr / wmax : werr, (2 * k + 16) * U32);
    if (R > 0) {
        float *ref = xmalloc(R * N * 4), *got = dev_down_bf16(&gpu, d_y, R * N);
        ops_moe_gemm(&cpu, ref, x, W, g_off, E, (int)R, N, K, (int)R);
        snprintf(name, sizeof name, "moe_gemm after the route %s", shape);
        test_report(name, test_rel_err(got, ref, R * N), TOL_BF16);
        free(ref);
        free(got);
    }
    void *dev[] = {d_l, d_bias, d_idx, d_off, d_perm, d_slot, d_w, d_x, d_W, d_y};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++) backend_free(&gpu, dev[i]);
    void *host[] = {l, bias, idx, off, perm, slot, w, x, W, g_idx, g_off, g_perm, g_slot, g_w, c_off, c_perm, c_slot};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++) free(host[i]);
}

// no tokens: the offsets are all 0, nothing else runs
static void test_route_empty(void) {
    int E = 8;
    int32_t *d_off = dev_alloc(&gpu, (size_t)(E + 1) * 4), off[9];
    ops_moe_sigmoid_route(&gpu, NULL, NULL, 0, E, 2, 4, 2, 1, 2.5f, NULL, NULL, d_off, NULL, NULL);
    backend_copy_to_host(&gpu, off, d_off, sizeof off);
    int zero = 1;
    for (int e = 0; e <= E; e++) zero &= off[e] == 0;
    printf("sigmoid route T=0 (offsets all 0) %-44s %s\n", "", zero ? "ok" : "FAIL");
    CHECK(zero);
    backend_free(&gpu, d_off);
}

int main(void) {
    test_rand_seed(161803);
    int open_rc = test_open_devices(&cpu, &gpu);
    if (open_rc) return open_rc;
    printf("%s vs %s\n%-66s %10s %8s\n", gpu.name, cpu.name, "op", "max_err", "tol");
    test_route_empty();
    route_case(37, 6, 3, 3, 2, 1, 2.5f, PAT_GRID);    // the DeepSeek-V3 fixtures' router
    route_case(37, 6, 3, 1, 1, 1, 2.5f, PAT_GRID);    // GLM-4.5's single group
    route_case(41, 6, 3, 2, 1, 1, 1.0f, PAT_GROUP);   // k = the kept group's experts
    route_case(41, 12, 4, 6, 2, 0, 1.0f, PAT_GRID);   // no renorm
    route_case(29, 64, 8, 8, 4, 1, 2.5f, PAT_FLAT);   // every score equal
    route_case(31, 64, 6, 8, 3, 1, 2.5f, PAT_NAN);
    route_case(43, 128, 5, 64, 33, 1, 2.5f, PAT_GRID); // 64 groups of 2: more groups than lanes
    route_case(TEST_EMU_SIZE(300, 45), 160, 8, 1, 1, 1, 2.5f, PAT_GRID);     // GLM-4.5
    route_case(TEST_EMU_SIZE(1000, 45), 256, 8, 8, 4, 1, 2.5f, PAT_GRID);    // DeepSeek-V3
    route_case(TEST_EMU_SIZE(300, 40), 256, 8, 8, 4, 1, 2.5f, PAT_GROUP);
    route_case(TEST_EMU_SIZE(500, 40), 384, 8, 1, 1, 1, 2.827f, PAT_GRID);   // Kimi-K2
    backend_close(&gpu);
    backend_close(&cpu);
    return test_finish("test_ops_moe_sigmoid_cuda");
}
