// selector.c: the DFlash2 candidate selector's CPU reference (see selector.h). Shapes: H hidden,
// r rank, k candidates, V vocabulary; all fp32 host memory, sums in double.
#include "student/loss/selector.h"

#include <math.h>

void selector_scores(const selector_weights *sw, const float *x, const int32_t *cand, const float *u, int32_t prev,
                     float *z, float *s) {
    int64_t H = sw->hidden, r = sw->rank;
    for (int64_t i = 0; i < r; i++) { // z = P x
        double a = 0;
        for (int64_t h = 0; h < H; h++) a += (double)sw->proj[i * H + h] * x[h];
        z[i] = (float)a;
    }
    const float *pp = sw->pred + (int64_t)prev * r;
    for (int c = 0; c < sw->k; c++) {
        const float *sc = sw->succ + (int64_t)cand[c] * r;
        double a = u[c];
        for (int64_t i = 0; i < r; i++) a += (double)pp[i] * z[i] * sc[i];
        s[c] = (float)a;
    }
}

int selector_choose(const float *s, int k) {
    int best = 0;
    for (int c = 1; c < k; c++)
        if (s[c] > s[best]) best = c;
    return best;
}

double selector_row_loss(const selector_weights *sw, const float *x, const int32_t *cand, const float *u, int32_t prev,
                         int32_t y, double scale, const float *lm_head, const selector_grads *g, float *z, float *s,
                         int *hit) {
    int k = sw->k, iy = -1;
    for (int c = 0; c < k; c++)
        if (cand[c] == y) iy = c;
    *hit = iy >= 0;
    if (iy < 0) return 0.0;
    selector_scores(sw, x, cand, u, prev, z, s);
    double m = s[0], sum = 0;
    for (int c = 1; c < k; c++) m = s[c] > m ? s[c] : m;
    for (int c = 0; c < k; c++) sum += exp(s[c] - m);
    double lse = m + log(sum), loss = lse - s[iy];
    if (!g) return loss;
    int64_t H = sw->hidden, r = sw->rank;
    const float *pp = sw->pred + (int64_t)prev * r;
    // ds_c = scale (softmax_c - [c = y]), kept in s; with q = pred[prev] * z: d succ[c] = ds_c q
    for (int c = 0; c < k; c++) {
        s[c] = (float)(scale * (exp(s[c] - lse) - (c == iy)));
        if (g->succ) {
            float *gs = g->succ + (int64_t)cand[c] * r;
            for (int64_t i = 0; i < r; i++) gs[i] += s[c] * pp[i] * z[i];
        }
        if (g->x && lm_head) { // u_c = <lm_head[c], x>
            const float *lm = lm_head + (int64_t)cand[c] * H;
            for (int64_t h = 0; h < H; h++) g->x[h] += s[c] * lm[h];
        }
    }
    for (int64_t i = 0; i < r; i++) {
        double dq = 0; // d q_i = sum_c ds_c succ[c, i]
        for (int c = 0; c < k; c++) dq += (double)s[c] * sw->succ[(int64_t)cand[c] * r + i];
        double dz = dq * pp[i]; // d(P x)_i
        if (g->pred) g->pred[(int64_t)prev * r + i] += (float)(dq * z[i]);
        if (g->proj)
            for (int64_t h = 0; h < H; h++) g->proj[i * H + h] += (float)(dz * x[h]);
        if (g->x)
            for (int64_t h = 0; h < H; h++) g->x[h] += (float)(dz * sw->proj[i * H + h]);
    }
    return loss;
}
