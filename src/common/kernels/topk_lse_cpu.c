// topk_lse_cpu.c: the running top-k and log-sum-exp of topk_lse.h on the CPU (the reference; rows
// in parallel with OpenMP), and topk_lse_kernels_cpu, the CPU backend's table.
#include <math.h>
#include <string.h>

#include "common/kernels/cpu_kernel.h"
#include "common/kernels/topk_lse.h"

static void cpu_topk_lse_init(backend *be, float *val, int32_t *idx, float *m, float *s, int R, int k) {
    (void)be;
    for (int64_t i = 0; i < (int64_t)R * k; i++) {
        val[i] = -INFINITY;
        idx[i] = -1;
    }
    for (int r = 0; r < R; r++) {
        m[r] = -INFINITY;
        s[r] = 0;
    }
}

// a before b in the top-k order: larger value, then smaller id
static int topk_before(float va, int32_t ia, float vb, int32_t ib) {
    return va > vb || (va == vb && ia >= 0 && (ib < 0 || ia < ib));
}

VEXP_CLONES static float row_max(const float *x, int n) {
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (int j = 0; j < n; j++) m = x[j] > m ? x[j] : m;
    return m;
}

// sum of exp(x[j] - m) over n values, in fp32
VEXP_CLONES static float exp_sum(const float *x, int n, float m) {
    float part = 0;
#pragma omp simd reduction(+ : part)
    for (int j = 0; j < n; j++) part += vexpf(x[j] - m);
    return part;
}

static void cpu_topk_lse_update(backend *be, const float *logits, int ld, int v0, int R, int Vc, int k, float *val,
                                int32_t *idx, float *m, float *s) {
    (void)be;
#pragma omp parallel for if ((int64_t)R * Vc >= OPS_PAR_MIN)
    for (int r = 0; r < R; r++) {
        const float *x = logits + (size_t)r * ld;
        float *tv = val + (size_t)r * k;
        int32_t *ti = idx + (size_t)r * k;
        // LSE: rescale the running sum to the tile's maximum when it is larger
        float tmax = row_max(x, Vc);
        float nm = tmax > m[r] ? tmax : m[r];
        double sum = m[r] == -INFINITY ? 0.0 : (double)s[r] * exp((double)m[r] - nm);
        // Each term <= 1: fp32 partial sums over chunks of 256 (vectorised), accumulated in double.
        // One fp32 sum over a whole tile would err by up to ~Vc 2^-24 relative (1e-4 in lse for a
        // 32000-wide tile of tied logits, measured); per 256 it stays near 1e-6.
        // nm = -inf: every value so far is -inf, the sum stays 0 (lse = -inf), not expf(-inf - -inf) = NaN
        if (nm != -INFINITY) {
            for (int j0 = 0; j0 < Vc; j0 += 256) {
                int j1 = Vc - j0 < 256 ? Vc : j0 + 256;
                sum += exp_sum(x + j0, j1 - j0, nm);
            }
        }
        m[r] = nm;
        s[r] = (float)sum;
        // top-k: insertion into the sorted list (the tile is scanned once): its place by binary
        // search (the list is in topk_before order, unfilled slots last), the tail moved by one
        for (int j = 0; j < Vc; j++) {
            float xv = x[j];
            int32_t id = v0 + j;
            if (!topk_before(xv, id, tv[k - 1], ti[k - 1])) continue;
            int lo = 0, hi = k - 1; // the first slot it goes before is in [lo, hi]
            while (lo < hi) {
                int mid = (lo + hi) / 2;
                if (topk_before(xv, id, tv[mid], ti[mid])) hi = mid;
                else lo = mid + 1;
            }
            memmove(tv + lo + 1, tv + lo, (size_t)(k - 1 - lo) * sizeof(float));
            memmove(ti + lo + 1, ti + lo, (size_t)(k - 1 - lo) * sizeof(int32_t));
            tv[lo] = xv;
            ti[lo] = id;
        }
    }
}

static void cpu_topk_lse_finish(backend *be, float *lse, const float *m, const float *s, int R) {
    (void)be;
    for (int r = 0; r < R; r++) lse[r] = m[r] + logf(s[r]);
}

const struct topk_lse_kernels topk_lse_kernels_cpu = {TOPK_LSE_OPS(OP_FILL, cpu_topk_lse_)};
