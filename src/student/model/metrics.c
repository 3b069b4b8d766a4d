// metrics.c: chain and tree acceptance lengths (see metrics.h).
#include "student/model/metrics.h"

#include <stdlib.h>

#include "common/core/check.h"

double metrics_tau_chain(const int32_t *argmax, const int32_t *greedy, int n) {
    int k = 1;
    while (k <= n && argmax[k] == greedy[k]) k++;
    return (double)k; // 1 (the anchor's own bonus token) + accepted slots
}

void metrics_decode_walk(const uint8_t *loss_mask, const int32_t *cu_seqlens, int n_seq, const int32_t *matches_at,
                         int64_t *tokens, int64_t *steps) {
    for (int s = 0; s < n_seq; s++)
        for (int64_t r0 = cu_seqlens[s], end = cu_seqlens[s + 1]; r0 < end;) {
            if (!loss_mask[r0]) {
                r0++;
                continue;
            }
            int64_t r1 = r0;
            while (r1 < end && loss_mask[r1]) r1++; // the region [r0, r1)
            for (int64_t p = r0; p < r1 - 1;) {
                int64_t m = matches_at[p], left = r1 - 1 - p; // tokens of the region still to come
                int64_t a = 1 + m < left ? 1 + m : left;
                *tokens += a;
                *steps += 1;
                p += a;
            }
            r0 = r1;
        }
}

typedef struct {
    int depth;     // 1..n (slot)
    int rank;      // candidate index at that slot
    int parent;    // node index, -1 = root
    double score;  // sum of log-probs along the path
} tree_node;

double metrics_tau_tree(const int32_t *topk_idx, const float *topk_logp, int K, const int32_t *greedy, int n, int budget) {
    if (n < 1 || K < 1 || budget < 1) return 1.0;
    // A frontier of at most budget*2 candidates (each pop pushes at most two); picked linearly:
    // budgets are small (tens of nodes).
    tree_node *nodes = xmalloc((size_t)budget * sizeof *nodes);
    tree_node *front = xmalloc((size_t)(2 * budget + 2) * sizeof *front);
    int *on_path = xmalloc((size_t)budget * sizeof(int)); // node lies on the greedy path
    int n_nodes = 0, n_front = 0, best_depth = 0;
    front[n_front++] = (tree_node){1, 0, -1, topk_logp[0]};
    while (n_nodes < budget && n_front > 0) {
        int b = 0;
        for (int i = 1; i < n_front; i++)
            if (front[i].score > front[b].score) b = i;
        tree_node t = front[b];
        front[b] = front[--n_front];
        int id = n_nodes++;
        nodes[id] = t;
        int token = topk_idx[(t.depth - 1) * K + t.rank];
        on_path[id] = token == greedy[t.depth] && (t.parent < 0 || on_path[t.parent]);
        if (on_path[id] && t.depth > best_depth) best_depth = t.depth;
        double base = t.parent < 0 ? 0.0 : nodes[t.parent].score;
        if (t.rank + 1 < K) // next sibling: same parent, next candidate
            front[n_front++] = (tree_node){t.depth, t.rank + 1, t.parent, base + topk_logp[(t.depth - 1) * K + t.rank + 1]};
        if (t.depth < n) // first child
            front[n_front++] = (tree_node){t.depth + 1, 0, id, t.score + topk_logp[t.depth * K]};
    }
    free(nodes);
    free(front);
    free(on_path);
    return 1.0 + best_depth;
}
