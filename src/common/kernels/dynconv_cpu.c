// dynconv_cpu.c: the grouped dynamic causal convolution of dynconv.h on the CPU, forward and
// backward: fp32, rows in parallel (OpenMP), dbase summed per channel in row order; and
// dynconv_kernels_cpu, the CPU backend's table.
#include <stdint.h>

#include "common/kernels/dynconv.h"

static void cpu_dynconv_forward(backend *be, void *out_v, const void *x_v, const void *dyn_v, int ld, const void *base_v,
                                int T, int B, int H, int K, int G) {
    float *out = out_v;
    const float *x = x_v, *dyn = dyn_v, *base = base_v;
    (void)be;
    int ng = H / G;
#pragma omp parallel for if ((int64_t)T * H * K > (1 << 16))
    for (int t = 0; t < T; t++) {
        int k = t % B;
        float *o_row = out + (int64_t)t * H;
        for (int h = 0; h < H; h++) o_row[h] = 0.0f;
        for (int o = 0; o < K && o <= k; o++) {
            const float *xr = x + (int64_t)(t - o) * H, *br = base + (int64_t)o * H, *dr = dyn + (int64_t)t * ld + o * ng;
            for (int h = 0; h < H; h++) o_row[h] += (br[h] + dr[h / G]) * xr[h];
        }
    }
}

static void cpu_dynconv_backward(backend *be, void *dx_v, void *ddyn_v, float *dbase, const void *dout_v,
                                 const void *x_v, const void *dyn_v, int ld, const void *base_v, int T, int B, int H,
                                 int K, int G) {
    float *dx = dx_v, *ddyn = ddyn_v;
    const float *dout = dout_v, *x = x_v, *dyn = dyn_v, *base = base_v;
    (void)be;
    int ng = H / G;
#pragma omp parallel for if ((int64_t)T * H * K > (1 << 16))
    for (int t = 0; t < T; t++) {
        int k = t % B;
        float *dxr = dx + (int64_t)t * H;
        for (int h = 0; h < H; h++) dxr[h] = 0.0f;
        for (int o = 0; o < K && k + o < B; o++) { // out[t+o] read x[t] at offset o
            const float *dor = dout + (int64_t)(t + o) * H, *br = base + (int64_t)o * H;
            const float *dr = dyn + (int64_t)(t + o) * ld + o * ng;
            for (int h = 0; h < H; h++) dxr[h] += (br[h] + dr[h / G]) * dor[h];
        }
        const float *dor = dout + (int64_t)t * H;
        for (int o = 0; o < K; o++)
            for (int g = 0; g < ng; g++) {
                float s = 0.0f;
                if (o <= k)
                    for (int c = 0; c < G; c++) s += dor[g * G + c] * x[(int64_t)(t - o) * H + g * G + c];
                ddyn[(int64_t)t * ld + o * ng + g] = s;
            }
    }
    // dbase[o, h] = sum_t dout[t, h] * x[t-o, h]: channels in parallel, each summing its rows in order
#pragma omp parallel for if ((int64_t)T * H * K > (1 << 16))
    for (int h = 0; h < H; h++)
        for (int o = 0; o < K; o++) {
            double s = 0.0;
            for (int t = 0; t < T; t++)
                if (t % B >= o) s += (double)dout[(int64_t)t * H + h] * x[(int64_t)(t - o) * H + h];
            dbase[(int64_t)o * H + h] += (float)s;
        }
}

const struct dynconv_kernels dynconv_kernels_cpu = {
    .forward = cpu_dynconv_forward,
    .backward = cpu_dynconv_backward,
};
