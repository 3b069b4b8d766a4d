// ops_moe_sigmoid_cpu.c: the fp32 reference of ops_moe_sigmoid_route (ops_moe_sigmoid.h),
// cpu_moe_sigmoid_route (ops_moe_cpu.h, the sigmoid_route of moe_kernels_cpu), threaded over tokens
// with OpenMP; the grouping by expert is ops_moe_cpu.c's (cpu_moe_group).
#include <math.h>
#include <stdlib.h>

#include "common/core/check.h"
#include "common/moe/ops_moe_cpu.h"

#define OPS_PAR_MIN 16384 // as common/kernels/cpu_kernel.h: threads only past a few thousand elements

// top_n: the n largest of v[0..m) into idx (descending v; ties: the lower index first, as an element
// replaces a listed one only when strictly larger). vals: scratch [n].
static void top_n(const float *v, int m, int n, int32_t *idx, float *vals) {
    int have = 0;
    for (int e = 0; e < m; e++) {
        if (have == n && !(v[e] > vals[n - 1])) continue;
        int i = have < n ? have++ : n - 1; // the slot freed at the end, then moved up past smaller values
        while (i > 0 && v[e] > vals[i - 1]) {
            vals[i] = vals[i - 1];
            idx[i] = idx[i - 1];
            i--;
        }
        vals[i] = v[e];
        idx[i] = e;
    }
}

// Per token: s and b = s + bias (a NaN b as -inf), the groups' scores (top two b of each, the larger
// first in the sum), the topk_group best groups by top_n, the other groups' b to -inf, the k largest
// b by top_n, their s as weights (renormalised with the 1e-20 of transformers, scaled).
void cpu_moe_sigmoid_route(backend *be, const float *logits, const float *bias, int T, int E, int k, int n_group,
                           int topk_group, int renorm, float scale, int32_t *topk_idx, float *topk_w, int32_t *offsets,
                           int32_t *perm, int32_t *slot) {
    (void)be;
    int per = E / n_group;
#pragma omp parallel if ((int64_t)T * E >= OPS_PAR_MIN)
    {
        float *b = xmalloc((size_t)E * sizeof(float)), *gs = xmalloc((size_t)n_group * sizeof(float));
        float *vals = xmalloc((size_t)(k > n_group ? k : n_group) * sizeof(float));
        int32_t *gi = xmalloc((size_t)n_group * sizeof(int32_t));
        uint8_t *keep = xmalloc((size_t)n_group);
#pragma omp for
        for (int t = 0; t < T; t++) {
            const float *l = logits + (size_t)t * E;
            for (int e = 0; e < E; e++) {
                float v = 1.0f / (1.0f + expf(-l[e])) + bias[e];
                b[e] = isnan(v) ? -INFINITY : v;
            }
            if (topk_group < n_group) {
                for (int g = 0; g < n_group; g++) {
                    float m1 = -INFINITY, m2 = -INFINITY;
                    for (const float *p = b + (size_t)g * per, *end = p + per; p < end; p++) {
                        if (*p > m1) m2 = m1, m1 = *p;
                        else if (*p > m2) m2 = *p;
                    }
                    gs[g] = m1 + m2;
                }
                top_n(gs, n_group, topk_group, gi, vals);
                for (int g = 0; g < n_group; g++) keep[g] = 0;
                for (int j = 0; j < topk_group; j++) keep[gi[j]] = 1;
                for (int g = 0; g < n_group; g++)
                    if (!keep[g])
                        for (int e = g * per; e < (g + 1) * per; e++) b[e] = -INFINITY;
            }
            int32_t *idx = topk_idx + (size_t)t * k;
            float *w = topk_w + (size_t)t * k;
            top_n(b, E, k, idx, vals);
            float sum = 0.0f;
            for (int j = 0; j < k; j++) {
                w[j] = 1.0f / (1.0f + expf(-l[idx[j]]));
                sum += w[j];
            }
            float den = sum + 1e-20f;
            for (int j = 0; j < k; j++) w[j] = (renorm ? w[j] / den : w[j]) * scale;
        }
        free(b);
        free(gs);
        free(vals);
        free(gi);
        free(keep);
    }
    cpu_moe_group(topk_idx, T, E, k, offsets, perm, slot);
}
