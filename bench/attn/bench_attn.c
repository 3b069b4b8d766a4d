// bench_attn.c: the DFlash attention of one drafter layer (forward, then backward) timed on a backend;
// on CUDA each path side by side in one run: the tensor-core tiles (attn_tc.cu) and the scalar
// kernels (attention_cuda.cu), chosen through DFLASH_CUDA_ATTN as the trainer would see it.
//
//   bench_attn [--device cpu|cuda] [--preset tiny|8b|27b] [--tokens S] [--anchors C] [--block B]
//              [--heads NQ] [--kv-heads NKV] [--head-dim D] [--window W] [--causal 0|1] [--repeat N]
//              [--paths tiled,scalar,...] [--json FILE]
//
// One sequence of S context tokens, C distinct random anchors in it, random bf16-valued inputs. The
// FLOPs are counted from the masks (every visible query-key pair: 4 hd for the forward's two
// products, 8 hd for the backward's four, the recomputed scores not counted), so TFLOP/s is the
// model-FLOP rate. Prints one line per path (up to 8: the DFLASH_CUDA_ATTN values, e.g. tiled,
// scalar, tiled-64x32), then for each path after the first its times as multiples of the first's
// and the largest difference between their outputs (relative to the output's scale). Presets: the drafters of
// bench/gpu_student.py (8b: 3072 tokens, 512 anchors of 16, 32/8 heads of 128; 27b: 1024 anchors of
// 32, 24/4 heads of 256) and a tiny one for the CPU.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/backend/backend.h"
#include "common/core/error.h"
#include "common/core/half.h"
#include "common/kernels/ops.h"

typedef struct {
    long tokens, anchors, block, heads, kv_heads, head_dim, window, causal;
} shape;

static const struct {
    const char *name;
    shape s;
} presets[] = {
    {"tiny", {300, 12, 8, 4, 2, 32, 0, 0}},
    {"8b", {3072, 512, 16, 32, 8, 128, 0, 0}},
    {"27b", {3072, 1024, 32, 24, 4, 256, 0, 0}},
};

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static double unif(void) { // [0, 1)
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

// n random values in [-amp, amp) on the device, in its activation dtype
static void *dev_rand(backend *be, size_t n, float amp) {
    int bf = ops_act_dtype(be) == DT_BF16;
    size_t esz = bf ? 2 : 4;
    void *h = malloc(n * esz), *d = backend_alloc(be, n * esz);
    if (!h || !d) {
        fprintf(stderr, "bench_attn: out of memory for %zu values\n", n);
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        float x = (float)((2 * unif() - 1) * amp);
        if (bf) ((uint16_t *)h)[i] = bf16_from_f32(x);
        else ((float *)h)[i] = f32_from_bf16(bf16_from_f32(x));
    }
    backend_copy_to_device(be, d, h, n * esz);
    free(h);
    return d;
}

static float *to_host_f32(backend *be, const void *d, size_t n) {
    int bf = ops_act_dtype(be) == DT_BF16;
    float *x = malloc(n * sizeof(float));
    if (bf) {
        uint16_t *h = malloc(n * 2);
        backend_copy_to_host(be, h, d, n * 2);
        for (size_t i = 0; i < n; i++) x[i] = f32_from_bf16(h[i]);
        free(h);
    } else {
        backend_copy_to_host(be, x, d, n * 4);
    }
    return x;
}

static double rel_diff(const float *a, const float *b, size_t n) {
    double e = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= e)) e = d; // NaN sticks
        if (fabs(b[i]) > s) s = fabs(b[i]);
    }
    return e / (s > 0 ? s : 1);
}

typedef struct {
    char path[16];
    double fwd_s, bwd_s;
    float *out, *dq;
} result;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void usage(FILE *f) {
    fprintf(f, "usage: bench_attn [--device cpu|cuda] [--preset tiny|8b|27b] [--tokens S] [--anchors C] [--block B]\n"
               "                  [--heads NQ] [--kv-heads NKV] [--head-dim D] [--window W] [--causal 0|1]\n"
               "                  [--repeat N] [--paths tiled,scalar] [--json FILE]\n");
}

int main(int argc, char **argv) {
    const char *device = "auto", *paths_arg = NULL, *json = NULL;
    long repeat = 3;
    shape s = presets[0].s;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!v) {
            fprintf(stderr, "bench_attn: %s needs a value\n", a);
            return 2;
        }
        i++;
        char *end = NULL;
        long n = strtol(v, &end, 10);
        int numeric = end && *end == 0 && end != v;
        long *field = !strcmp(a, "--tokens") ? &s.tokens : !strcmp(a, "--anchors") ? &s.anchors
                    : !strcmp(a, "--block") ? &s.block : !strcmp(a, "--heads") ? &s.heads
                    : !strcmp(a, "--kv-heads") ? &s.kv_heads : !strcmp(a, "--head-dim") ? &s.head_dim
                    : !strcmp(a, "--window") ? &s.window : !strcmp(a, "--causal") ? &s.causal
                    : !strcmp(a, "--repeat") ? &repeat : NULL;
        if (field) {
            if (!numeric || n < 0) {
                fprintf(stderr, "bench_attn: %s %s: expected a non-negative integer\n", a, v);
                return 2;
            }
            *field = n;
        } else if (!strcmp(a, "--device")) {
            device = v;
        } else if (!strcmp(a, "--paths")) {
            paths_arg = v;
        } else if (!strcmp(a, "--json")) {
            json = v;
        } else if (!strcmp(a, "--preset")) {
            size_t k = 0;
            while (k < sizeof presets / sizeof presets[0] && strcmp(presets[k].name, v)) k++;
            if (k == sizeof presets / sizeof presets[0]) {
                fprintf(stderr, "bench_attn: --preset %s: expected tiny, 8b or 27b\n", v);
                return 2;
            }
            s = presets[k].s;
        } else {
            fprintf(stderr, "bench_attn: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (s.tokens < 2 || s.anchors < 1 || s.anchors > s.tokens - 1 || s.block < 1 || s.heads < 1 || s.kv_heads < 1 ||
        s.heads % s.kv_heads || s.head_dim < 1 || repeat < 1) {
        fprintf(stderr, "bench_attn: bad shape: need 1 <= anchors < tokens, heads a multiple of kv-heads, "
                        "block, head-dim and repeat >= 1\n");
        return 2;
    }
    backend be;
    if (backend_open(&be, device, 0) != 0) {
        fprintf(stderr, "bench_attn: %s\n", error_msg());
        return 1;
    }
    int cuda = strncmp(be.name, "cuda", 4) == 0;
    char paths[8][16];
    int np = 0;
    const char *list = paths_arg ? paths_arg : cuda ? "tiled,scalar" : "cpu";
    for (const char *p = list; *p && np < 8;) {
        size_t n = strcspn(p, ",");
        snprintf(paths[np++], sizeof paths[0], "%.*s", (int)n, p);
        p += n + (p[n] == ',');
    }

    int C = (int)s.anchors, B = (int)s.block, nq = (int)s.heads, nkv = (int)s.kv_heads, hd = (int)s.head_dim;
    int S = (int)s.tokens, W = (int)s.window, causal = (int)s.causal;
    // distinct anchors in [1, S): a partial Fisher-Yates shuffle
    int32_t *perm = malloc((size_t)S * 4), *anchors = malloc((size_t)C * 4), *starts = calloc((size_t)C, 4);
    for (int i = 0; i < S - 1; i++) perm[i] = i + 1;
    for (int i = 0; i < C; i++) {
        int j = i + (int)(unif() * (S - 1 - i));
        int32_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
        anchors[i] = perm[i];
    }
    // model FLOPs: visible (query row, key) pairs x 4 hd (forward) and x 8 hd (backward)
    double pairs = 0;
    for (int i = 0; i < C; i++)
        for (int k = 0; k < B; k++) {
            int lo = W > 0 && anchors[i] + k - (W - 1) > 0 ? anchors[i] + k - (W - 1) : 0;
            pairs += (double)(anchors[i] > lo ? anchors[i] - lo : 0) + (causal ? k + 1 : B);
        }
    pairs *= nq;
    double fwd_flops = pairs * 4 * hd, bwd_flops = pairs * 8 * hd;

    size_t N = (size_t)C * B, nqe = N * nq * hd, nkb = N * nkv * hd, nkc = (size_t)S * nkv * hd;
    void *q = dev_rand(&be, nqe, 2), *kb = dev_rand(&be, nkb, 1), *vb = dev_rand(&be, nkb, 1);
    void *kc = dev_rand(&be, nkc, 1), *vc = dev_rand(&be, nkc, 1), *dout = dev_rand(&be, nqe, 1);
    size_t esz = ops_act_dtype(&be) == DT_BF16 ? 2 : 4;
    void *out = backend_alloc(&be, nqe * esz), *dq = backend_alloc(&be, nqe * esz);
    void *dkb = backend_alloc(&be, nkb * esz), *dvb = backend_alloc(&be, nkb * esz);
    float *lse = backend_alloc(&be, N * nq * 4), *dkc = backend_alloc(&be, nkc * 4), *dvc = backend_alloc(&be, nkc * 4);
    int32_t *d_anchors = backend_alloc(&be, (size_t)C * 4), *d_starts = backend_alloc(&be, (size_t)C * 4);
    backend_copy_to_device(&be, d_anchors, anchors, (size_t)C * 4);
    backend_copy_to_device(&be, d_starts, starts, (size_t)C * 4);
    backend_memset_zero(&be, dkc, nkc * 4);
    backend_memset_zero(&be, dvc, nkc * 4);
    float scale = 1.0f / sqrtf((float)hd);
    printf("bench_attn on %s: %d tokens, %d anchors x %d slots, %d/%d heads x %d%s%s; %.3g GFLOP forward, %.3g "
           "backward\n",
           be.name, S, C, B, nq, nkv, hd, W ? ", window" : "", causal ? ", causal block" : "", fwd_flops / 1e9,
           bwd_flops / 1e9);

    result res[8];
    double *tf = malloc((size_t)repeat * sizeof(double)), *tb = malloc((size_t)repeat * sizeof(double));
    for (int p = 0; p < np; p++) {
        if (cuda) setenv("DFLASH_CUDA_ATTN", paths[p], 1);
        for (long r = -1; r < repeat; r++) { // r = -1: the warm-up
            backend_sync(&be);
            double t0 = now_s();
            ops_dflash_attn_forward(&be, out, lse, q, kb, vb, kc, vc, d_anchors, d_starts, C, B, nq, nkv, hd, scale,
                                    W, causal);
            backend_sync(&be);
            double t1 = now_s();
            ops_dflash_attn_backward(&be, dq, dkb, dvb, dkc, dvc, dout, out, lse, q, kb, vb, kc, vc, d_anchors,
                                     d_starts, C, B, nq, nkv, hd, scale, W, causal);
            backend_sync(&be);
            double t2 = now_s();
            if (r >= 0) tf[r] = t1 - t0, tb[r] = t2 - t1;
        }
        qsort(tf, (size_t)repeat, sizeof(double), cmp_double);
        qsort(tb, (size_t)repeat, sizeof(double), cmp_double);
        snprintf(res[p].path, sizeof res[p].path, "%s", paths[p]);
        res[p].fwd_s = tf[repeat / 2], res[p].bwd_s = tb[repeat / 2];
        res[p].out = to_host_f32(&be, out, nqe);
        res[p].dq = to_host_f32(&be, dq, nqe);
        printf("  %-12s forward %9.3f ms %8.2f TFLOP/s   backward %9.3f ms %8.2f TFLOP/s\n", res[p].path,
               1e3 * res[p].fwd_s, fwd_flops / res[p].fwd_s / 1e12, 1e3 * res[p].bwd_s, bwd_flops / res[p].bwd_s / 1e12);
        fflush(stdout);
    }
    for (int p = 1; p < np; p++)
        printf("  %s vs %s: %.2fx the forward time, %.2fx the backward time; outputs differ by %.2e (out), %.2e (dq)\n",
               res[p].path, res[0].path, res[p].fwd_s / res[0].fwd_s, res[p].bwd_s / res[0].bwd_s,
               rel_diff(res[0].out, res[p].out, nqe), rel_diff(res[0].dq, res[p].dq, nqe));
    if (json) {
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", json);
        FILE *f = fopen(tmp, "w");
        if (!f) {
            fprintf(stderr, "bench_attn: cannot write %s\n", tmp);
            return 1;
        }
        fprintf(f, "{\"device\": \"%s\", \"tokens\": %d, \"anchors\": %d, \"block\": %d, \"heads\": %d, \"kv_heads\": %d, "
                   "\"head_dim\": %d, \"window\": %d, \"causal\": %d, \"fwd_gflop\": %.4f, \"bwd_gflop\": %.4f, \"paths\": [",
                be.name, S, C, B, nq, nkv, hd, W, causal, fwd_flops / 1e9, bwd_flops / 1e9);
        for (int p = 0; p < np; p++)
            fprintf(f, "%s{\"path\": \"%s\", \"fwd_ms\": %.4f, \"bwd_ms\": %.4f, \"fwd_tflops\": %.3f, \"bwd_tflops\": %.3f}",
                    p ? ", " : "", res[p].path, 1e3 * res[p].fwd_s, 1e3 * res[p].bwd_s, fwd_flops / res[p].fwd_s / 1e12,
                    bwd_flops / res[p].bwd_s / 1e12);
        fprintf(f, "]}\n");
        if (fclose(f) != 0 || rename(tmp, json) != 0) {
            fprintf(stderr, "bench_attn: cannot write %s\n", json);
            remove(tmp);
            return 1;
        }
    }
    for (int p = 0; p < np; p++) free(res[p].out), free(res[p].dq);
    void *bufs[] = {q, kb, vb, kc, vc, dout, out, dq, dkb, dvb, lse, dkc, dvc, d_anchors, d_starts};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) backend_free(&be, bufs[i]);
    free(perm), free(anchors), free(starts), free(tf), free(tb);
    backend_close(&be);
    return 0;
}
