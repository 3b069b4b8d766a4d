// grad_buckets.c: the gradient buckets of the students' all-reduce (see grad_buckets.h).
#include "student/model/grad_buckets.h"

#include <stdlib.h>
#include <string.h>

#include "common/core/check.h"
#include "common/core/error.h"
#include "student/model/drafter_kind.h"

int grad_buckets_plan(grad_buckets *gb, const drafter *d) {
    memset(gb, 0, sizeof *gb);
    int L = (int)d->cfg.n_layers, np = d->n_params, nb = 2 * L + 1;
    const drafter_param *p = d->params;
    int *bucket_of = xmalloc((size_t)np * sizeof(int));
    if (d->cfg.kind->grad_buckets(d, bucket_of)) { // where the kind's step finishes each parameter
        free(bucket_of);
        return -1;
    }
    for (int i = 1; i < np; i++)
        if (p[i].offset < p[i - 1].offset + p[i - 1].numel) {
            free(bucket_of);
            return error_set("gradient buckets: parameter %s overlaps the one before it", p[i].name);
        }
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
