// anchors.c: see anchors.h.
#include "student/train/anchors.h"

#include <stdlib.h>
#include <string.h>

#include "common/core/check.h"
#include "common/core/rng.h"

int anchors_valid(const uint8_t *loss_mask, const int32_t *cu_seqlens, int n_seq, int32_t *out) {
    int n = 0;
    for (int s = 0; s < n_seq; s++)
        for (int p = cu_seqlens[s]; p + 1 < cu_seqlens[s + 1]; p++)
            if (loss_mask[p] && loss_mask[p + 1]) out[n++] = p;
    return n;
}

static int anchors_cmp(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

int anchors_sample(const int32_t *valid, int n, int max_anchors, uint64_t seed, uint64_t batch_id, int32_t *out) {
    if (n <= max_anchors) {
        memcpy(out, valid, (size_t)n * sizeof(int32_t));
        return n;
    }
    // partial Fisher-Yates on a copy: the first max_anchors entries are a uniform sample
    int32_t *v = xmalloc((size_t)n * sizeof(int32_t));
    memcpy(v, valid, (size_t)n * sizeof(int32_t));
    rng r;
    rng_init(&r, seed, batch_id, 0xA0u);
    for (int i = 0; i < max_anchors; i++) {
        int j = i + (int)rng_below(&r, (uint64_t)(n - i));
        int32_t t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
    memcpy(out, v, (size_t)max_anchors * sizeof(int32_t));
    free(v);
    qsort(out, (size_t)max_anchors, sizeof(int32_t), anchors_cmp);
    return max_anchors;
}
