// elementwise_cpu.c: the elementwise ops and copies of elementwise.h on the CPU: fp32, threaded
// with OpenMP where the work pays for a team (OPS_PAR_MIN elements), and elementwise_kernels_cpu,
// the CPU backend's table. The act dtype is fp32 here, so the casts are copies (none in place).
#include <string.h>

#include "common/kernels/cpu_kernel.h"
#include "common/kernels/elementwise.h"

static void cpu_embed(backend *be, void *out_v, const void *table_v, const int32_t *ids, int T, int H) {
    float *out = out_v;
    const float *table = table_v;
    (void)be;
#pragma omp parallel for if ((int64_t)T * H >= OPS_PAR_MIN)
    for (int t = 0; t < T; t++) memcpy(out + (size_t)t * H, table + (size_t)ids[t] * H, (size_t)H * sizeof(float));
}

static void cpu_add(backend *be, void *x_v, const void *y_v, int64_t n) {
    float *x = x_v;
    const float *y = y_v;
    (void)be;
#pragma omp parallel for if (n >= OPS_PAR_MIN)
    for (int64_t i = 0; i < n; i++) x[i] += y[i];
}

// fp32 + fp32: ops_add
static void cpu_add_to_f32(backend *be, float *acc, const void *x, int64_t n) { cpu_add(be, acc, x, n); }

static void cpu_scale(backend *be, void *x_v, float s, int64_t n) {
    float *x = x_v;
    (void)be;
#pragma omp parallel for simd if (n >= OPS_PAR_MIN)
    for (int64_t i = 0; i < n; i++) x[i] *= s;
}

static void cpu_bias_add(backend *be, void *y_v, const void *b_v, int64_t R, int64_t N) {
    float *y = y_v;
    const float *b = b_v;
    (void)be;
#pragma omp parallel for if (R * N >= OPS_PAR_MIN)
    for (int64_t r = 0; r < R; r++) {
        float *yr = y + r * N;
#pragma omp simd
        for (int64_t c = 0; c < N; c++) yr[c] += b[c];
    }
}

static void cpu_moe_bias_add(backend *be, void *ys_v, const void *bias_v, const int32_t *offsets, int E, int64_t R,
                             int64_t N) {
    float *ys = ys_v;
    const float *bias = bias_v;
    (void)be;
    (void)R;
    for (int e = 0; e < E; e++) {
        const float *b = bias + (int64_t)e * N;
        int64_t r0 = offsets[e], r1 = offsets[e + 1];
#pragma omp parallel for if ((r1 - r0) * N >= OPS_PAR_MIN)
        for (int64_t r = r0; r < r1; r++) {
            float *y = ys + r * N;
#pragma omp simd
            for (int64_t c = 0; c < N; c++) y[c] += b[c];
        }
    }
}

// act is fp32: a copy, or nothing in place
static void cpu_to_f32(backend *be, float *dst, const void *src, int64_t n) {
    (void)be;
    if (dst != src) memmove(dst, src, (size_t)n * sizeof(float));
}

static void cpu_f32_to_act(backend *be, void *dst, const float *src, int64_t n) {
    (void)be;
    if (dst != src) memmove(dst, src, (size_t)n * sizeof(float));
}

static void cpu_copy_2d(backend *be, void *dst_v, int64_t dst_ld, const void *src_v, int64_t src_ld, int64_t rows,
                        int64_t cols) {
    float *dst = dst_v;
    const float *src = src_v;
    (void)be;
#pragma omp parallel for if (rows * cols >= OPS_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) memcpy(dst + r * dst_ld, src + r * src_ld, (size_t)cols * sizeof(float));
}

const struct elementwise_kernels elementwise_kernels_cpu = {ELEMENTWISE_OPS(OP_FILL, cpu_)};
