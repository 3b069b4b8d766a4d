// testing_moe.h: the naive router's result shared by the MoE op tests (test_ops_moe.c,
// test_ops_moe_sigmoid.c): route_ref, its expert-by-expert layout (offsets, perm, slot) from idx,
// its free, and count_diff of two id arrays.
#pragma once
#include <stdint.h>
#include <stdlib.h>

typedef struct {
    int32_t *idx, *offsets, *perm, *slot;
    double *w;
} route_ref;

// offsets, perm and slot of r from its idx ([T, k] experts per token): expert by expert, tokens in order
static inline void route_ref_layout(route_ref *r, int T, int E, int k) {
    int row = 0;
    for (int e = 0; e < E; e++) {
        r->offsets[e] = row;
        for (int t = 0; t < T; t++)
            for (int j = 0; j < k; j++)
                if (r->idx[t * k + j] == e) {
                    r->perm[row] = t;
                    r->slot[t * k + j] = row++;
                }
    }
    r->offsets[E] = row;
}

static inline void route_ref_free(route_ref *r) {
    free(r->idx);
    free(r->offsets);
    free(r->perm);
    free(r->slot);
    free(r->w);
}

static inline int count_diff(const int32_t *a, const int32_t *b, size_t n) {
    int d = 0;
    for (size_t i = 0; i < n; i++) d += a[i] != b[i];
    return d;
}
