// ops_moe_cpu.h: what the two files of the MoE family's CPU twins share: ops_moe_cpu.c (the twins of
// ops_moe.h and their table, moe_kernels_cpu) and ops_moe_sigmoid_cpu.c (the sigmoid router's).
#pragma once
#include <stdint.h>

#include "common/backend/backend.h"

// cpu_moe_group (ops_moe_cpu.c): offsets, perm and slot (ops_moe_route's grouping) of the chosen
// experts topk_idx [T, k].
void cpu_moe_group(const int32_t *topk_idx, int T, int E, int k, int32_t *offsets, int32_t *perm, int32_t *slot);

// cpu_moe_sigmoid_route (ops_moe_sigmoid_cpu.c): the fp32 reference of ops_moe_sigmoid_route
// (ops_moe_sigmoid.h), same arguments; the sigmoid_route of moe_kernels_cpu.
void cpu_moe_sigmoid_route(backend *be, const float *logits, const float *bias, int T, int E, int k, int n_group,
                           int topk_group, int renorm, float scale, int32_t *topk_idx, float *topk_w, int32_t *offsets,
                           int32_t *perm, int32_t *slot);
