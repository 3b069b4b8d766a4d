// ops_moe_sigmoid.c: ops_moe_sigmoid_route (ops_moe_sigmoid.h): the checks that hold on both
// backends, then the backend's MoE table (moe_kernels, ops_moe.h), timed under the op's name.
#include "common/moe/ops_moe_sigmoid.h"

#include "common/backend/backend_ops.h"
#include "common/backend/profile.h"
#include "common/core/check.h"
#include "common/moe/ops_moe.h"

void ops_moe_sigmoid_route(backend *be, const float *logits, const float *bias, int T, int E, int k, int n_group,
                           int topk_group, int renorm, float scale, int32_t *topk_idx, float *topk_w,
                           int32_t *offsets, int32_t *perm, int32_t *slot) {
    if (E < 1 || n_group < 1 || E % n_group != 0 || E / n_group < 2)
        fatal("moe sigmoid route: %d experts in %d groups (want groups of at least 2 experts)", E, n_group);
    if (topk_group < 1 || topk_group > n_group) fatal("moe sigmoid route: top %d of %d groups", topk_group, n_group);
    if (k < 1 || k > topk_group * (E / n_group))
        fatal("moe sigmoid route: top %d of the %d experts of %d groups", k, topk_group * (E / n_group), topk_group);
    if (T < 0 || (int64_t)T * k > INT32_MAX) fatal("moe sigmoid route: %d tokens x top %d", T, k);
    BACKEND_OP(be, moe, sigmoid_route, logits, bias, T, E, k, n_group, topk_group, renorm, scale, topk_idx, topk_w,
               offsets, perm, slot);
}
