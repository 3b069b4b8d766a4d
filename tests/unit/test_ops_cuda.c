// test_ops_cuda.c: every model op on CUDA against the CPU reference (skipped, exit 77, without a GPU).
//
// Both sides get the same inputs: they are rounded to bf16 (the CUDA activation dtype) first and the
// CPU gets those exact values as fp32, so only the precision of the computation differs. Per op one
// line `op  max_err  tol  ok|FAIL`, max_err = max |cuda - cpu| / max |cpu| (relative to the output's
// scale). Tolerances:
//   copies (embed, to_f32, copy_2d)          0: bf16 values are moved, not computed
//   bf16 outputs (rmsnorm, rope, attention,  1e-2: the GPU computes in fp32 and rounds the result to
//     swiglu, add)                             bf16 once (8-bit significand, round to nearest: <= 2^-8
//                                              ~ 3.9e-3 relative to the element, hence to the scale);
//                                              the fp32 work before it differs from the CPU's by ~1e-6.
//                                              1e-2 leaves room for that, while a wrong index, mask or
//                                              rescale errs by O(1).
//   top-k values and ids from fp32 logits    0: both sides copy the same fp32 values, in the same
//                                              order (value desc, then id asc)
//   LSE from fp32 logits                     1e-5, against the exact LSE (double, in this test): the
//                                              GPU sums exp in fp32, ~Vc/256 terms per thread then a
//                                              tree, <= ~(Vc/256 + 8) 2^-24 relative in s (absolute
//                                              in lse: ~8e-6 for a 32000 tile at worst, typically far
//                                              less), measured relative to max(1, |lse|)
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/backend.h"
#include "common/core/half.h"
#include "common/kernels/ops.h"
#include "testing.h"
#include "testing_device.h"

#define TOL_BF16 1e-2
#define TOL_LSE 1e-5

static backend cpu, gpu;

// ----------------------------------------------------------------------------- copies

static void test_embed(void) {
    int V = 1000, H = 520, T = 777;
    float *table = test_rand_bf16((size_t)V * H, 1);
    int32_t *ids = xmalloc((size_t)T * sizeof(int32_t));
    for (int t = 0; t < T; t++) ids[t] = test_rand_below(V);
    ids[0] = V - 1;
    float *ref = xmalloc((size_t)T * H * sizeof(float));
    ops_embed(&cpu, ref, table, ids, T, H);
    void *d_table = dev_up_bf16(&gpu, table, (size_t)V * H), *d_ids = dev_up_raw(&gpu, ids, (size_t)T * sizeof(int32_t));
    void *d_out = dev_alloc(&gpu, (size_t)T * H * 2);
    ops_embed(&gpu, d_out, d_table, d_ids, T, H);
    float *got = dev_down_bf16(&gpu, d_out, (size_t)T * H);
    test_report("embed T=777 H=520", test_rel_err(got, ref, (size_t)T * H), 0);
    backend_free(&gpu, d_table);
    backend_free(&gpu, d_ids);
    backend_free(&gpu, d_out);
    free(table);
    free(ids);
    free(ref);
    free(got);
}

static void test_to_f32(void) {
    int64_t n = 1000003;
    float *x = test_rand_bf16((size_t)n, 100);
    void *d_x = dev_up_bf16(&gpu, x, (size_t)n);
    float *d_y = dev_alloc(&gpu, (size_t)n * sizeof(float));
    ops_to_f32(&gpu, d_y, d_x, n);
    float *got = dev_down_raw(&gpu, d_y, (size_t)n * sizeof(float));
    test_report("to_f32 n=1000003", test_rel_err(got, x, (size_t)n), 0);
    backend_free(&gpu, d_x);
    backend_free(&gpu, d_y);
    free(x);
    free(got);
}

// a column block into a wider matrix; the elements around it must keep their values
static void test_copy_2d(void) {
    int64_t rows = 300, cols = 128, src_ld = 130, dst_ld = 5 * 128, off = 2 * 128;
    float *src = test_rand_bf16((size_t)(rows * src_ld), 1), *dst = test_rand_bf16((size_t)(rows * dst_ld), 1);
    void *d_src = dev_up_bf16(&gpu, src, (size_t)(rows * src_ld)), *d_dst = dev_up_bf16(&gpu, dst, (size_t)(rows * dst_ld));
    ops_copy_2d(&cpu, dst + off, dst_ld, src, src_ld, rows, cols);
    ops_copy_2d(&gpu, (uint16_t *)d_dst + off, dst_ld, d_src, src_ld, rows, cols);
    float *got = dev_down_bf16(&gpu, d_dst, (size_t)(rows * dst_ld));
    test_report("copy_2d 300x128 into ld 640", test_rel_err(got, dst, (size_t)(rows * dst_ld)), 0);
    backend_free(&gpu, d_src);
    backend_free(&gpu, d_dst);
    free(src);
    free(dst);
    free(got);
}

// ----------------------------------------------------------------------------- RMSNorm

static void rmsnorm_case(int R, int D, int in_place) {
    size_t n = (size_t)R * D;
    float *x = test_rand_bf16(n, 3), *w = test_rand_bf16((size_t)D, 1.5f), *ref = xmalloc(n * sizeof(float));
    ops_rmsnorm(&cpu, ref, x, w, R, D, 1e-6f);
    void *d_x = dev_up_bf16(&gpu, x, n), *d_w = dev_up_bf16(&gpu, w, (size_t)D);
    void *d_y = in_place ? d_x : dev_alloc(&gpu, n * 2);
    ops_rmsnorm(&gpu, d_y, d_x, d_w, R, D, 1e-6f);
    float *got = dev_down_bf16(&gpu, d_y, n);
    char name[96];
    snprintf(name, sizeof name, "rmsnorm R=%d D=%d%s", R, D, in_place ? " in place" : "");
    test_report(name, test_rel_err(got, ref, n), TOL_BF16);
    if (!in_place) backend_free(&gpu, d_y);
    backend_free(&gpu, d_x);
    backend_free(&gpu, d_w);
    free(x);
    free(w);
    free(ref);
    free(got);
}

static void test_rmsnorm(void) {
    rmsnorm_case(300, 4096, 0);
    rmsnorm_case(3, 8192, 0);
    rmsnorm_case(1000, 16, 1);
    // the per-head q/k norm: rows = tokens * heads, past 65535 blocks of one row each
    rmsnorm_case(600000, 128, 1);
}

// ----------------------------------------------------------------------------- RoPE

static void rope_case(int T, int nh, int hd, int pos_offset) {
    int half = hd / 2;
    size_t n = (size_t)T * nh * hd;
    float *x = test_rand_bf16(n, 2), *ref = xmalloc(n * sizeof(float));
    float *inv = xmalloc((size_t)half * sizeof(float));
    for (int i = 0; i < half; i++) inv[i] = (float)pow(1e6, -2.0 * i / hd);
    int32_t *pos = xmalloc((size_t)T * sizeof(int32_t));
    for (int t = 0; t < T; t++) pos[t] = pos_offset + (t < 2 * T / 3 ? t : t - 2 * T / 3); // two sequences
    memcpy(ref, x, n * sizeof(float));
    ops_rope(&cpu, ref, pos, inv, T, nh, hd);
    void *d_x = dev_up_bf16(&gpu, x, n), *d_pos = dev_up_raw(&gpu, pos, (size_t)T * sizeof(int32_t));
    void *d_inv = dev_up_raw(&gpu, inv, (size_t)half * sizeof(float));
    ops_rope(&gpu, d_x, d_pos, d_inv, T, nh, hd);
    float *got = dev_down_bf16(&gpu, d_x, n);
    char name[96];
    snprintf(name, sizeof name, "rope T=%d nh=%d hd=%d pos>=%d", T, nh, hd, pos_offset);
    test_report(name, test_rel_err(got, ref, n), TOL_BF16);
    backend_free(&gpu, d_x);
    backend_free(&gpu, d_pos);
    backend_free(&gpu, d_inv);
    free(x);
    free(ref);
    free(inv);
    free(pos);
    free(got);
}

static void test_rope(void) {
    rope_case(1200, 8, 128, 0);
    rope_case(300, 4, 64, 30000); // large angles: argument reduction on both sides
    rope_case(17, 3, 18, 5);
}

// ----------------------------------------------------------------------------- attention

// The causal attention has two CUDA paths, chosen by DFLASH_CUDA_ATTN: tensor-core tiles (attn_tc.cu;
// "tiled", or "tiled-BQxBK" to force a tile shape) and the CUDA-core kernel of attention_cuda.cu ("scalar").
static const char *attn_path = "tiled";

static void attention_case(const int *lens, int n_seq, int nq, int nkv, int hd) {
    if (!test_attn_path("attention", attn_path, hd, 0)) return;
    int32_t cu[16];
    cu[0] = 0;
    for (int s = 0; s < n_seq; s++) cu[s + 1] = cu[s] + lens[s];
    int T = cu[n_seq];
    size_t nqe = (size_t)T * nq * hd, nke = (size_t)T * nkv * hd;
    // q scaled by 2: with hd^-0.5 scaling the scores spread over a few units (peaked rows and flat rows)
    float *q = test_rand_bf16(nqe, 2), *k = test_rand_bf16(nke, 1), *v = test_rand_bf16(nke, 1);
    float *ref = xmalloc(nqe * sizeof(float));
    float scale = 1.0f / sqrtf((float)hd);
    ops_attention_causal(&cpu, ref, q, k, v, cu, n_seq, T, nq, nkv, hd, scale);
    void *d_q = dev_up_bf16(&gpu, q, nqe), *d_k = dev_up_bf16(&gpu, k, nke), *d_v = dev_up_bf16(&gpu, v, nke);
    void *d_cu = dev_up_raw(&gpu, cu, (size_t)(n_seq + 1) * sizeof(int32_t)), *d_out = dev_alloc(&gpu, nqe * 2);
    ops_attention_causal(&gpu, d_out, d_q, d_k, d_v, d_cu, n_seq, T, nq, nkv, hd, scale);
    float *got = dev_down_bf16(&gpu, d_out, nqe);
    char name[96];
    snprintf(name, sizeof name, "attention T=%d seqs=%d nq=%d nkv=%d hd=%d %s", T, n_seq, nq, nkv, hd, attn_path);
    test_report(name, test_rel_err(got, ref, nqe), TOL_BF16);
    backend_free(&gpu, d_q);
    backend_free(&gpu, d_k);
    backend_free(&gpu, d_v);
    backend_free(&gpu, d_cu);
    backend_free(&gpu, d_out);
    free(q);
    free(k);
    free(v);
    free(ref);
    free(got);
}

static void test_attention(void) {
    // a long sequence (many key tiles, query tiles straddling the boundaries), length-1 sequences
    int a[] = {1000, 1, 37, 250}, b[] = {5, 1, 70}, c[] = {130}, d[] = {33, 64}, e[] = {1};
    int f[] = {TEST_EMU_SIZE(2000, 300)}, g[] = {40, 3, 29}, h[] = {37, 50};
    const char *paths[] = {"tiled", "scalar", "tiled-64x64", "tiled-64x32", "tiled-32x32", "tiled-32x16", "tiled-16x32"};
    for (int p = 0; p < 7; p++) {
        attn_path = paths[p];
        attention_case(b, 3, 4, 1, 64);  // GQA 4/1
        attention_case(d, 2, 6, 3, 18);  // head_dim not a multiple of 4 or 32
        attention_case(e, 1, 4, 2, 128); // one token
        attention_case(g, 3, 96, 1, 32); // 96 heads on one kv head: a token's rows span tiles
        if (p >= 2) continue;            // the tile shapes on the small cases only
        attention_case(a, 4, 8, 2, 128); // Qwen3 head_dim, GQA 4
        attention_case(c, 1, 2, 2, 256); // the largest head_dim (shared memory past 48 KiB)
        attention_case(h, 2, 24, 4, 256); // Qwen3.6-27B's gated attention: 24 q / 4 kv heads x 256
        attention_case(b, 3, 4, 2, 72);   // head_dim a multiple of 8 but not of 16 (tiles pad to 80)
        attention_case(f, 1, 32, 8, 128); // Qwen3-8B heads, 2000 tokens (300 emulated)
    }
    unsetenv("DFLASH_CUDA_ATTN");
}

// ----------------------------------------------------------------------------- SwiGLU, add

static void test_swiglu_add(void) {
    int64_t n = 3000017;
    float *g = test_rand_bf16((size_t)n, 8), *u = test_rand_bf16((size_t)n, 2), *ref = xmalloc((size_t)n * sizeof(float));
    ops_swiglu(&cpu, ref, g, u, n);
    void *d_g = dev_up_bf16(&gpu, g, (size_t)n), *d_u = dev_up_bf16(&gpu, u, (size_t)n);
    ops_swiglu(&gpu, d_g, d_g, d_u, n); // in place, as the target forward calls it
    float *got = dev_down_bf16(&gpu, d_g, (size_t)n);
    test_report("swiglu n=3000017 in place", test_rel_err(got, ref, (size_t)n), TOL_BF16);
    free(got);

    // x += y with y small against x: the bf16 rounding of the sum is the whole difference
    float *x = test_rand_bf16((size_t)n, 4), *y = test_rand_bf16((size_t)n, 0.05f);
    void *d_x = dev_up_bf16(&gpu, x, (size_t)n), *d_y = dev_up_bf16(&gpu, y, (size_t)n);
    ops_add(&cpu, x, y, n);
    ops_add(&gpu, d_x, d_y, n);
    got = dev_down_bf16(&gpu, d_x, (size_t)n);
    test_report("add n=3000017", test_rel_err(got, x, (size_t)n), TOL_BF16);
    backend_free(&gpu, d_g);
    backend_free(&gpu, d_u);
    backend_free(&gpu, d_x);
    backend_free(&gpu, d_y);
    free(g);
    free(u);
    free(ref);
    free(x);
    free(y);
    free(got);
}

// ----------------------------------------------------------------------------- top-k and LSE

// Row kinds: generic logits, many exact ties, all equal, -inf and large values, all -inf.
static void fill_row(float *x, int V, int kind) {
    for (int j = 0; j < V; j++) {
        switch (kind) {
        case 0: x[j] = 6 * (float)test_rand_pm1(); break;
        case 1: x[j] = (float)test_rand_below(8) * 0.25f; break;
        case 2: x[j] = -0.5f; break;
        case 3: x[j] = j % 3 == 0 ? -INFINITY : (j % 1001 == 0 ? 3e4f : 1e4f * (float)test_rand_pm1()); break;
        case 4: x[j] = -INFINITY; break;
        default: x[j] = 20 * (float)test_rand_pm1(); break;
        }
    }
}

// The whole vocabulary V in tiles of `tile`, the same fp32 logits on both sides.
static void topk_case(int R, int V, int tile, int k) {
    float *logits = xmalloc((size_t)R * V * sizeof(float));
    for (int r = 0; r < R; r++) fill_row(logits + (size_t)r * V, V, r % 6);
    size_t rk = (size_t)R * k;
    float *val = xmalloc(rk * 4), *m = xmalloc((size_t)R * 4), *s = xmalloc((size_t)R * 4);
    float *buf = xmalloc((size_t)R * tile * 4);
    int32_t *idx = xmalloc(rk * 4);
    float *d_val = dev_alloc(&gpu, rk * 4), *d_m = dev_alloc(&gpu, (size_t)R * 4), *d_s = dev_alloc(&gpu, (size_t)R * 4);
    float *d_lse = dev_alloc(&gpu, (size_t)R * 4), *d_buf = dev_alloc(&gpu, (size_t)R * tile * 4);
    int32_t *d_idx = dev_alloc(&gpu, rk * 4);
    ops_topk_lse_init(&cpu, val, idx, m, s, R, k);
    ops_topk_lse_init(&gpu, d_val, d_idx, d_m, d_s, R, k);
    for (int v0 = 0; v0 < V; v0 += tile) {
        int vc = V - v0 < tile ? V - v0 : tile;
        for (int r = 0; r < R; r++) memcpy(buf + (size_t)r * vc, logits + (size_t)r * V + v0, (size_t)vc * 4);
        ops_topk_lse_update(&cpu, buf, vc, v0, R, vc, k, val, idx, m, s);
        backend_copy_to_device(&gpu, d_buf, buf, (size_t)R * vc * 4); // syncs: buf is reused next tile
        ops_topk_lse_update(&gpu, d_buf, vc, v0, R, vc, k, d_val, d_idx, d_m, d_s);
    }
    ops_topk_lse_finish(&gpu, d_lse, d_m, d_s, R);
    float *g_val = dev_down_raw(&gpu, d_val, rk * 4), *g_lse = dev_down_raw(&gpu, d_lse, (size_t)R * 4);
    int32_t *g_idx = dev_down_raw(&gpu, d_idx, rk * 4);

    // ids: count of mismatches; values: max |diff| (both must be exactly 0); -inf == -inf counts as equal
    double id_err = 0, val_err = 0, lse_err = 0;
    for (size_t i = 0; i < rk; i++) {
        id_err += g_idx[i] != idx[i];
        if (g_val[i] != val[i]) val_err = fmax(val_err, isfinite(val[i]) ? fabs(g_val[i] - val[i]) : INFINITY);
    }
    // LSE against the exact value (double over the whole row), not against the CPU: the CPU twin
    // sums each tile in fp32 too, so the two could differ by the sum of both errors
    for (int r = 0; r < R; r++) {
        const float *x = logits + (size_t)r * V;
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < V; j++) mx = fmax(mx, x[j]);
        if (mx == -INFINITY) { // an all -inf row: lse -inf
            if (!(isinf(g_lse[r]) && g_lse[r] < 0)) lse_err = INFINITY;
            continue;
        }
        for (int j = 0; j < V; j++) sum += exp((double)x[j] - mx);
        double ref = mx + log(sum), d = fabs((double)g_lse[r] - ref) / fmax(1.0, fabs(ref));
        lse_err = d == d ? fmax(lse_err, d) : INFINITY;
    }
    char name[96];
    snprintf(name, sizeof name, "topk ids V=%d tile=%d k=%d", V, tile, k);
    test_report(name, id_err, 0);
    snprintf(name, sizeof name, "topk vals V=%d tile=%d k=%d", V, tile, k);
    test_report(name, val_err, 0);
    snprintf(name, sizeof name, "lse (vs exact) V=%d tile=%d k=%d", V, tile, k);
    test_report(name, lse_err, TOL_LSE);

    backend_free(&gpu, d_val);
    backend_free(&gpu, d_m);
    backend_free(&gpu, d_s);
    backend_free(&gpu, d_lse);
    backend_free(&gpu, d_buf);
    backend_free(&gpu, d_idx);
    free(logits);
    free(val);
    free(m);
    free(s);
    free(buf);
    free(idx);
    free(g_val);
    free(g_lse);
    free(g_idx);
}

static void test_topk_lse(void) {
    topk_case(12, 32000, 32000, 256); // one 32000-wide tile, the largest k
    topk_case(12, 32000, 32000, 1);
    topk_case(12, 100003, 32000, 64); // several tiles, the last partial
    topk_case(6, 307, 50, 8);
    topk_case(6, 307, 1, 32);         // tiles narrower than k
}

int main(void) {
    test_rand_seed(20240601);
    int open_rc = test_open_devices(&cpu, &gpu);
    if (open_rc) return open_rc;
    printf("%s vs %s\n%-40s %10s %8s\n", gpu.name, cpu.name, "op", "max_err", "tol");
    test_embed();
    test_to_f32();
    test_copy_2d();
    test_rmsnorm();
    test_rope();
    test_attention();
    test_swiglu_add();
    test_topk_lse();
    backend_close(&gpu);
    backend_close(&cpu);
    return test_finish("test_ops_cuda");
}
