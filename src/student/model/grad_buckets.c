// grad_buckets.c: the gradient buckets of the students' all-reduce (see grad_buckets.h).
#include "student/model/grad_buckets.h"

#include <stdlib.h>
#include <string.h>

#include "common/core/check.h"
#include "common/core/error.h"

// The layer parameters (index j within a layer, drafter.c's order) that context_backward finishes:
// k_proj (2), v_proj (3), k_norm (6). The others are final after the layer's chunk backward.
static int grad_is_context(int j) { return j == 2 || j == 3 || j == 6; }

static int name_ends(const char *name, const char *suffix) {
    size_t n = strlen(name), s = strlen(suffix);
    return n >= s && strcmp(name + n - s, suffix) == 0;
}

int grad_buckets_plan(grad_buckets *gb, const drafter *d) {
    memset(gb, 0, sizeof *gb);
    int L = (int)d->cfg.n_layers, np = d->n_params, nb = 2 * L + 1;
    const drafter_param *p = d->params;
    // the layout step.c's P_* indices assume: fc, hidden_norm, 11 per layer, norm, in offset order
    if (L < 1 || np != 2 + 11 * L + 1 || !name_ends(p[0].name, "fc.weight") || !name_ends(p[1].name, "hidden_norm.weight") ||
        !name_ends(p[np - 1].name, "norm.weight"))
        return error_set("gradient buckets: %d parameters for %d layers is not the drafter's layout", np, L);
    for (int l = 0; l < L; l++)
        if (!name_ends(p[2 + 11 * l + 2].name, "k_proj.weight") || !name_ends(p[2 + 11 * l + 3].name, "v_proj.weight") ||
            !name_ends(p[2 + 11 * l + 6].name, "k_norm.weight"))
            return error_set("gradient buckets: layer %d's parameters are not in the drafter's order", l);
    for (int i = 1; i < np; i++)
        if (p[i].offset < p[i - 1].offset + p[i - 1].numel)
            return error_set("gradient buckets: parameter %s overlaps the one before it", p[i].name);
    int *bucket_of = xmalloc((size_t)np * sizeof(int));
    bucket_of[0] = bucket_of[1] = grad_bucket_front(L);
    for (int l = 0; l < L; l++)
        for (int j = 0; j < 11; j++)
            bucket_of[2 + 11 * l + j] = grad_is_context(j) ? grad_bucket_context(L, l) : grad_bucket_block(L, l);
    bucket_of[np - 1] = grad_bucket_block(L, L - 1); // the final norm: the first gradient the backward finishes
    gb->n_buckets = nb;
    gb->first = xcalloc((size_t)nb + 1, sizeof(int));
    gb->ranges = xmalloc((size_t)np * sizeof(grad_range));
    int nr = 0;
    for (int b = 0; b < nb; b++) {
        gb->first[b] = nr;
        for (int i = 0; i < np; i++) {
            if (bucket_of[i] != b) continue;
            int64_t lo = p[i].offset, hi = i + 1 < np ? p[i + 1].offset : d->numel;
            if (nr > gb->first[b] && gb->ranges[nr - 1].offset + gb->ranges[nr - 1].count == lo)
                gb->ranges[nr - 1].count += hi - lo; // the next parameter of the same bucket: one range
            else
                gb->ranges[nr++] = (grad_range){lo, hi - lo};
        }
    }
    gb->first[nb] = nr;
    free(bucket_of);
    return 0;
}

void grad_buckets_free(grad_buckets *gb) {
    free(gb->first);
    free(gb->ranges);
    memset(gb, 0, sizeof *gb);
}

int grad_buckets_ready(grad_buckets *gb, int b, grad_issue_fn issue, void *ctx) {
    if (b >= gb->n_buckets) b = gb->n_buckets - 1;
    for (; gb->next <= b; gb->next++)
        if (issue(ctx, gb->ranges + gb->first[gb->next], gb->first[gb->next + 1] - gb->first[gb->next])) return -1;
    return 0;
}

int grad_buckets_finish(grad_buckets *gb, grad_issue_fn issue, void *ctx) {
    int rc = grad_buckets_ready(gb, gb->n_buckets - 1, issue, ctx);
    gb->next = 0;
    return rc;
}
