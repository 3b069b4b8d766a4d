// dynconv_cpu.c: the grouped dynamic causal convolution of dynconv.h on the CPU, forward and
// backward: fp32, rows in parallel (OpenMP), dbase summed per channel in row order; and
// dynconv_kernels_cpu, the CPU backend's table.
#include <stdint.h>

#include "common/kernels/dynconv.h"

// row[h] = sum over the taps o < n, in order, of (base[o, h] + dyn_o[o * (H / G) + h / G]) * v_o[h], with
// v_o = v + o * v_step and dyn_o = dyn + o * dyn_step: one row of the convolution (forward: x back, the
// weights of the row itself) or of its transpose (dx: dout ahead, the weights of the rows ahead).
static void taps_row(float *row, const float *v, int64_t v_step, const float *dyn, int64_t dyn_step, const float *base,
                     int n, int H, int G) {
    int ng = H / G;
    for (int h = 0; h < H; h++) row[h] = 0.0f;
    for (int o = 0; o < n; o++) {
        const float *vr = v + o * v_step, *br = base + (int64_t)o * H, *dr = dyn + o * dyn_step + o * ng;
        for (int h = 0; h < H; h++) row[h] += (br[h] + dr[h / G]) * vr[h];
    }
}

static void cpu_dynconv_forward(backend *be, void *out_v, const void *x_v, const void *dyn_v, int ld, const void *base_v,
                                int T, int B, int H, int K, int G) {
    float *out = out_v;
    const float *x = x_v, *dyn = dyn_v, *base = base_v;
    (void)be;
#pragma omp parallel for if ((int64_t)T * H * K > (1 << 16))
    for (int t = 0; t < T; t++) { // taps o <= k: x[t - o], the weights of row t
        int k = t % B;
        taps_row(out + (int64_t)t * H, x + (int64_t)t * H, -(int64_t)H, dyn + (int64_t)t * ld, 0, base,
                 K < k + 1 ? K : k + 1, H, G);
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
        // dx: taps o with k + o < B (out[t + o] read x[t] at offset o): dout[t + o], the weights of row t + o
        taps_row(dx + (int64_t)t * H, dout + (int64_t)t * H, H, dyn + (int64_t)t * ld, ld, base,
                 K < B - k ? K : B - k, H, G);
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

const struct dynconv_kernels dynconv_kernels_cpu = {DYNCONV_OPS(OP_FILL, cpu_dynconv_)};
