// test_ops_arch_cuda.c: the architecture ops (activation.h, elementwise.h, attention.h:
// ops_attention_ext) and the decode attention with a window and sinks (ops_attention_decode_ext)
// on CUDA against the CPU reference (skipped, exit 77, without a GPU; runs in the emulator build).
//
// As test_ops_cuda.c: both sides get the same inputs, rounded to bf16 first (the CPU gets those exact
// values as fp32; the sinks and the soft-cap's logits are f32 on both sides), so only the precision
// of the computation differs. Per case one line `op  max_err  tol  ok|FAIL`, max_err = max |cuda -
// cpu| / max |cpu| (relative to the output's scale), and where an element-wise bound matters the
// count of values off by more than tol * max |cpu|, which must be 0. Tolerances:
//   bf16 outputs (attention_ext on every    1e-2: the GPU computes in fp32 and rounds the result to
//     path, decode_ext, bias_add, scale,       bf16 once (<= 2^-8 ~ 3.9e-3 relative to the element,
//     geglu_tanh, swiglu_clamped,              hence to the scale); its fp32 work differs from the
//     moe_bias_add)                            CPU's by ~1e-6 (the tensor-core path rounds P to bf16
//                                              for P V: ~2^-9 per term, averaged over the keys).
//                                              A wrong window edge, sink, head or expert errs by O(1).
//   moe_bias_add, rows of no expert         0: left alone, bit for bit
//   softcap (f32 in and out)                1e-6: tanhf of CUDA's libdevice and of glibc differ by
//                                              an ulp or two (~2.4e-7 relative), relative to the cap
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/backend.h"
#include "common/core/check.h"
#include "common/core/half.h"
#include "common/decode/ops_decode.h"
#include "common/kernels/ops.h"
#include "testing.h"
#include "testing_device.h"

#define TOL_BF16 1e-2
#define TOL_TANH 1e-6

static backend cpu, gpu;

static void report_both(const char *name, const float *got, const float *ref, size_t n, double tol) {
    test_report(name, test_rel_err(got, ref, n), tol);
    size_t bad = count_off(got, ref, n, tol);
    CHECK_MSG(bad == 0, "%s: %zu of %zu values off", name, bad, n);
}

// sinks of nq heads: some large enough to take most of a row's mass, some negligible
static float *make_sinks(int nq) {
    float *s = xmalloc((size_t)nq * sizeof(float));
    for (int h = 0; h < nq; h++) s[h] = h % 3 == 0 ? 3.0f : h % 3 == 1 ? (float)test_rand_pm1() : -20.0f;
    return s;
}

// ----------------------------------------------------------------------------- attention_ext

// DFLASH_CUDA_ATTN picks the path: tensor-core tiles ("tiled", "tiled-BQxBK") or the scalar kernel.
static const char *attn_path = "tiled";

static void attention_case(const int *lens, int n_seq, int nq, int nkv, int hd, int window, int with_sinks) {
    setenv("DFLASH_CUDA_ATTN", attn_path, 1);
    int32_t cu[16];
    cu[0] = 0;
    for (int s = 0; s < n_seq; s++) cu[s + 1] = cu[s] + lens[s];
    int T = cu[n_seq];
    size_t nqe = (size_t)T * nq * hd, nke = (size_t)T * nkv * hd;
    float *q = test_rand_bf16(nqe, 2), *k = test_rand_bf16(nke, 1), *v = test_rand_bf16(nke, 1);
    float *sinks = with_sinks ? make_sinks(nq) : NULL, *ref = xmalloc(nqe * sizeof(float));
    float scale = 1.0f / sqrtf((float)hd);
    ops_attention_ext(&cpu, ref, q, k, v, cu, n_seq, T, nq, nkv, hd, scale, window, sinks);
    void *d_q = dev_up_bf16(&gpu, q, nqe), *d_k = dev_up_bf16(&gpu, k, nke), *d_v = dev_up_bf16(&gpu, v, nke);
    void *d_cu = dev_up_raw(&gpu, cu, (size_t)(n_seq + 1) * sizeof(int32_t)), *d_out = dev_alloc(&gpu, nqe * 2);
    float *d_sinks = sinks ? dev_up_raw(&gpu, sinks, (size_t)nq * sizeof(float)) : NULL;
    ops_attention_ext(&gpu, d_out, d_q, d_k, d_v, d_cu, n_seq, T, nq, nkv, hd, scale, window, d_sinks);
    float *got = dev_down_bf16(&gpu, d_out, nqe);
    char name[128];
    snprintf(name, sizeof name, "attention_ext T=%d seqs=%d nq=%d nkv=%d hd=%d window=%d sinks=%d %s", T, n_seq, nq,
             nkv, hd, window, with_sinks, attn_path);
    report_both(name, got, ref, nqe, TOL_BF16);
    void *bufs[] = {d_q, d_k, d_v, d_cu, d_out, d_sinks};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (bufs[i]) backend_free(&gpu, bufs[i]);
    free(q);
    free(k);
    free(v);
    free(sinks);
    free(ref);
    free(got);
}

static void test_attention_ext(void) {
    int a[] = {1, 7, 20}, b[] = {70, 1, 45}, c[] = {TEST_EMU_SIZE(600, 150)};
    const char *paths[] = {"tiled", "scalar", "tiled-64x32", "tiled-16x32"};
    int windows[] = {1, 3, 25};
    for (int p = 0; p < 4; p++) {
        attn_path = paths[p];
        for (int w = 0; w < 3; w++)
            for (int sk = 0; sk < 2; sk++) {
                attention_case(a, 3, 4, 1, 10, windows[w], sk); // GQA 4/1, odd head_dim / 2
                if (p >= 2) continue;                           // the forced tile shapes on the small case only
                attention_case(a, 3, 6, 3, 64, windows[w], sk);
            }
        attention_case(a, 3, 4, 2, 16, 0, 1); // sinks without a window
        if (p >= 2) continue;
        // windows inside long sequences: query tiles whose first rows' keys start before the window
        attention_case(b, 3, 8, 2, 64, 16, 1);
        attention_case(b, 3, 96, 1, 32, 5, 0); // a token's rows span tiles
        attention_case(c, 1, 8, 2, 128, 128, 1); // gpt-oss's window and head_dim
        attention_case(b, 3, 4, 2, 256, 40, 1);   // the largest head_dim
    }
    unsetenv("DFLASH_CUDA_ATTN");
}

// ----------------------------------------------------------------------------- decode_ext

static void decode_case(int nq, int nkv, int hd, int window, int with_sinks) {
    int n = 4, max_len = 40, kvd = nkv * hd;
    int32_t pos[4] = {0, 5, 30, 39};
    size_t nc = (size_t)n * max_len * kvd, nqv = (size_t)n * nq * hd;
    float *kc = test_rand_bf16(nc, 2), *vc = test_rand_bf16(nc, 2), *q = test_rand_bf16(nqv, 1.5f);
    float *sinks = with_sinks ? make_sinks(nq) : NULL, *ref = xmalloc(nqv * sizeof(float));
    float *scores = xmalloc(ops_attention_decode_work_bytes(&cpu, n, nq, max_len));
    float scale = 1.0f / sqrtf((float)hd);
    ops_attention_decode_ext(&cpu, ref, q, kc, vc, pos, n, nq, nkv, hd, max_len, scale, window, sinks, scores);
    void *d_kc = dev_up_bf16(&gpu, kc, nc), *d_vc = dev_up_bf16(&gpu, vc, nc), *d_q = dev_up_bf16(&gpu, q, nqv);
    void *d_out = dev_alloc(&gpu, nqv * 2), *d_pos = dev_up_raw(&gpu, pos, sizeof pos);
    float *d_sinks = sinks ? dev_up_raw(&gpu, sinks, (size_t)nq * sizeof(float)) : NULL;
    ops_attention_decode_ext(&gpu, d_out, d_q, d_kc, d_vc, d_pos, n, nq, nkv, hd, max_len, scale, window, d_sinks,
                             NULL);
    float *got = dev_down_bf16(&gpu, d_out, nqv);
    char name[128];
    snprintf(name, sizeof name, "attention_decode_ext nq=%d nkv=%d hd=%d window=%d sinks=%d", nq, nkv, hd, window,
             with_sinks);
    report_both(name, got, ref, nqv, TOL_BF16);
    void *bufs[] = {d_kc, d_vc, d_q, d_out, d_pos, d_sinks};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (bufs[i]) backend_free(&gpu, bufs[i]);
    free(kc);
    free(vc);
    free(q);
    free(sinks);
    free(ref);
    free(scores);
    free(got);
}

static void test_decode_ext(void) {
    int windows[] = {0, 1, 3, 50};
    for (int w = 0; w < 4; w++)
        for (int sk = 0; sk < 2; sk++) {
            if (windows[w] == 0 && !sk) continue; // ops_attention_decode: test_ops_decode_cuda.c
            decode_case(4, 1, 10, windows[w], sk);
            decode_case(6, 3, 64, windows[w], sk);
        }
    decode_case(8, 8, 256, 7, 1);
}

// ----------------------------------------------------------------------------- elementwise

static void test_bias_scale(void) {
    int64_t R = 301, N = 1031, n = R * N;
    float *y = test_rand_bf16((size_t)n, 4), *b = test_rand_bf16((size_t)N, 1), *ref = test_copy_floats(y, (size_t)n);
    void *d_y = dev_up_bf16(&gpu, y, (size_t)n), *d_b = dev_up_bf16(&gpu, b, (size_t)N);
    ops_bias_add(&cpu, ref, b, R, N);
    ops_bias_add(&gpu, d_y, d_b, R, N);
    float *got = dev_down_bf16(&gpu, d_y, (size_t)n);
    report_both("bias_add R=301 N=1031", got, ref, (size_t)n, TOL_BF16);
    free(got);
    float s = 55.5f; // sqrt(3072) in bf16 (Gemma's embedding scale as transformers rounds it)
    ops_scale(&cpu, ref, s, n);
    ops_scale(&gpu, d_y, s, n);
    got = dev_down_bf16(&gpu, d_y, (size_t)n);
    report_both("scale n=310331", got, ref, (size_t)n, TOL_BF16);
    backend_free(&gpu, d_y);
    backend_free(&gpu, d_b);
    free(y);
    free(b);
    free(ref);
    free(got);
}

static void test_softcap(void) {
    int64_t R = 7, C = 5003, ld = 5120;
    float cap = 30.0f, *x = test_rand_vec((size_t)(R * ld), 200);
    x[0] = 1e4f;
    x[1] = -1e4f;
    float *ref = test_copy_floats(x, (size_t)(R * ld));
    float *d_x = dev_up_raw(&gpu, x, (size_t)(R * ld) * sizeof(float));
    ops_softcap_f32(&cpu, ref, ld, R, C, cap);
    ops_softcap_f32(&gpu, d_x, ld, R, C, cap);
    float *got = dev_down_f32(&gpu, d_x, (size_t)(R * ld));
    report_both("softcap_f32 R=7 C=5003 ld=5120", got, ref, (size_t)(R * ld), TOL_TANH);
    backend_free(&gpu, d_x);
    free(x);
    free(ref);
    free(got);
}

static void test_geglu_swiglu(void) {
    int64_t n = 200003;
    float *g = test_rand_bf16((size_t)n, 6), *u = test_rand_bf16((size_t)n, 2), *ref = xmalloc((size_t)n * sizeof(float));
    ops_geglu_tanh(&cpu, ref, g, u, n);
    void *d_g = dev_up_bf16(&gpu, g, (size_t)n), *d_u = dev_up_bf16(&gpu, u, (size_t)n);
    ops_geglu_tanh(&gpu, d_g, d_g, d_u, n); // in place, as a layer calls it
    float *got = dev_down_bf16(&gpu, d_g, (size_t)n);
    report_both("geglu_tanh n=200003 in place", got, ref, (size_t)n, TOL_BF16);
    backend_free(&gpu, d_g);
    backend_free(&gpu, d_u);
    free(g);
    free(u);
    free(ref);
    free(got);

    int64_t R = 257, I = 360; // gpt-oss: alpha 1.702, limit 7; |values| up to 10: past the limit both sides
    float *in = test_rand_bf16((size_t)(R * 2 * I), 10), *ref2 = xmalloc((size_t)(R * I) * sizeof(float));
    ops_swiglu_clamped(&cpu, ref2, in, R, I, 1.702f, 7.0f);
    void *d_in = dev_up_bf16(&gpu, in, (size_t)(R * 2 * I)), *d_out = dev_alloc(&gpu, (size_t)(R * I) * 2);
    ops_swiglu_clamped(&gpu, d_out, d_in, R, I, 1.702f, 7.0f);
    got = dev_down_bf16(&gpu, d_out, (size_t)(R * I));
    report_both("swiglu_clamped R=257 I=360", got, ref2, (size_t)(R * I), TOL_BF16);
    backend_free(&gpu, d_in);
    backend_free(&gpu, d_out);
    free(in);
    free(ref2);
    free(got);
}

// experts with no rows (first, middle, last two), and rows past offsets[E] that belong to none
static void test_moe_bias_add(void) {
    int E = 8;
    int64_t R = 1000, N = 333;
    int32_t off[9] = {0, 0, 120, 400, 400, 401, 900, 900, 900};
    float *ys = test_rand_bf16((size_t)(R * N), 4), *bias = test_rand_bf16((size_t)(E * N), 1);
    float *ref = test_copy_floats(ys, (size_t)(R * N));
    ops_moe_bias_add(&cpu, ref, bias, off, E, R, N);
    void *d_ys = dev_up_bf16(&gpu, ys, (size_t)(R * N)), *d_b = dev_up_bf16(&gpu, bias, (size_t)(E * N));
    void *d_off = dev_up_raw(&gpu, off, sizeof off);
    ops_moe_bias_add(&gpu, d_ys, d_b, d_off, E, R, N);
    float *got = dev_down_bf16(&gpu, d_ys, (size_t)(R * N));
    report_both("moe_bias_add E=8 R=1000 N=333", got, ref, (size_t)(R * N), TOL_BF16);
    CHECK_MSG(memcmp(got + 900 * N, ys + 900 * N, (size_t)(100 * N) * sizeof(float)) == 0,
              "moe_bias_add: rows past offsets[E] changed");
    backend_free(&gpu, d_ys);
    backend_free(&gpu, d_b);
    backend_free(&gpu, d_off);
    free(ys);
    free(bias);
    free(ref);
    free(got);
}

int main(void) {
    test_rand_seed(20250806);
    int rc = test_open_devices(&cpu, &gpu);
    if (rc) return rc;
    test_bias_scale();
    test_softcap();
    test_geglu_swiglu();
    test_moe_bias_add();
    test_decode_ext();
    test_attention_ext();
    backend_close(&gpu);
    backend_close(&cpu);
    return test_finish("test_ops_arch_cuda");
}
