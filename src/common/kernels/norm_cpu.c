// norm_cpu.c: the RMSNorms of norm.h on the CPU, forward and backward: the fp32 reference, threaded
// with OpenMP, and norm_kernels_cpu, the CPU backend's table. Plain loops, each the formula in
// norm.h; the mean of squares is formed in double (rows are long: RMSNorm over H).
#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "common/core/check.h"
#include "common/kernels/cpu_kernel.h"
#include "common/kernels/norm.h"

// ----------------------------------------------------------------------------- RMSNorm

// The loops of a row (or span) are functions of their own, built for AVX-512 / AVX2 / the baseline
// (VEXP_CLONES): the bodies of OpenMP loops are outlined before GCC clones, so the clone must be a call.
VEXP_CLONES static void rmsnorm_row(float *y, const float *x, const float *w, int D, float eps) {
    double ss = 0; // double: the mean of squares over thousands of values
#pragma omp simd reduction(+ : ss)
    for (int i = 0; i < D; i++) ss += (double)x[i] * x[i];
    float inv = (float)(1.0 / sqrt(ss / D + eps));
#pragma omp simd
    for (int i = 0; i < D; i++) y[i] = x[i] * inv * w[i];
}

static void cpu_rmsnorm(backend *be, void *out_v, const void *in_v, const void *w_v, int R, int D, float eps) {
    float *out = out_v;
    const float *in = in_v, *w = w_v;
    (void)be;
#pragma omp parallel for if ((int64_t)R * D >= OPS_PAR_MIN)
    for (int r = 0; r < R; r++) rmsnorm_row(out + (size_t)r * D, in + (size_t)r * D, w, D, eps);
}

// y_i = x_i r w_i, r = 1/sqrt(mean(x^2) + eps). Differentiating r gives dr/dx_j = -x_j r^3 / D, so
//   dx_i = r w_i dy_i - x_i r^3 / D * sum_j w_j dy_j x_j,      dw_i += sum over rows of dy_i x_i r.
// Rows are split over threads; each thread sums its rows' dw into its own partial row (static
// schedule), and the partials are added in thread order afterwards: no races, and the same result
// for the same thread count. Each dx_i is written after its dy_i and x_i are read, so dx may alias dy.
// One row: dxr (written or added to), pdw (+=).
VEXP_CLONES static void rmsnorm_backward_row(float *dxr, float *pdw, const float *dyr, const float *xr, const float *w,
                                             int D, float eps, int accumulate) {
    double ss = 0, wdx = 0; // sum x^2 and sum w dy x
#pragma omp simd reduction(+ : ss, wdx)
    for (int i = 0; i < D; i++) {
        ss += (double)xr[i] * xr[i];
        wdx += (double)w[i] * dyr[i] * xr[i];
    }
    double inv = 1.0 / sqrt(ss / D + eps);
    float rr = (float)inv, coef = (float)(wdx * inv * inv * inv / D);
#pragma omp simd
    for (int i = 0; i < D; i++) {
        float g = rr * w[i] * dyr[i] - xr[i] * coef;
        pdw[i] += dyr[i] * xr[i] * rr;
        dxr[i] = accumulate ? dxr[i] + g : g;
    }
}

static void cpu_rmsnorm_backward(backend *be, void *dx_v, float *dw, const void *dy_v, const void *x_v, const void *w_v,
                                 int R, int D, float eps, int accumulate) {
    float *dx = dx_v;
    const float *dy = dy_v, *x = x_v, *w = w_v;
    (void)be;
    if (R <= 0 || D <= 0) return;
    int nt = omp_get_max_threads();
    float *partial = xcalloc((size_t)nt * D, sizeof(float)); // threads the region does not get stay 0
#pragma omp parallel num_threads(nt)
    {
        float *pdw = partial + (size_t)omp_get_thread_num() * D;
#pragma omp for schedule(static)
        for (int r = 0; r < R; r++)
            rmsnorm_backward_row(dx + (size_t)r * D, pdw, dy + (size_t)r * D, x + (size_t)r * D, w, D, eps, accumulate);
    }
    for (int i = 0; i < D; i++) {
        float s = 0;
        for (int t = 0; t < nt; t++) s += partial[(size_t)t * D + i];
        dw[i] += s;
    }
    free(partial);
}

// ----------------------------------------------------------------------------- the hybrid's norms

// The two RMSNorms of the hybrid target, one row at a time: y = x r * (zc ? 1 + w : w) * (z ? silu(z) : 1),
// r = 1/sqrt(mean(x^2) + eps), the mean formed in double (as cpu_rmsnorm). y may alias x.
static void norm_rows(float *out, const float *in, const float *w, const float *z, int R, int D, float eps, int zc) {
#pragma omp parallel for if ((int64_t)R * D >= OPS_PAR_MIN)
    for (int r = 0; r < R; r++) {
        const float *x = in + (size_t)r * D;
        const float *zr = z ? z + (size_t)r * D : NULL;
        float *y = out + (size_t)r * D;
        double ss = 0;
        for (int i = 0; i < D; i++) ss += (double)x[i] * x[i];
        float inv = (float)(1.0 / sqrt(ss / D + eps));
        float off = zc ? 1.0f : 0.0f; // the branches stay out of the loops: they vectorise
        if (zr) {
#pragma omp simd
            for (int i = 0; i < D; i++) y[i] = x[i] * inv * (off + w[i]) * siluf(zr[i]);
        } else {
#pragma omp simd
            for (int i = 0; i < D; i++) y[i] = x[i] * inv * (off + w[i]);
        }
    }
}

static void cpu_rmsnorm_zc(backend *be, void *out, const void *in, const void *w, int R, int D, float eps) {
    (void)be;
    norm_rows(out, in, w, NULL, R, D, eps, 1);
}

static void cpu_gated_rmsnorm(backend *be, void *out, const void *x, const void *z, const void *w, int R, int D,
                              float eps) {
    (void)be;
    norm_rows(out, x, w, z, R, D, eps, 0);
}

const struct norm_kernels norm_kernels_cpu = {NORM_OPS(OP_FILL, cpu_)};
