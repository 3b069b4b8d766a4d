// ops_moe_sigmoid_cpu.h: the CPU (fp32, OpenMP) twin of ops_moe_sigmoid_route (ops_moe_sigmoid.h);
// the reference. Same arguments without the backend.
#pragma once
#include <stdint.h>

void cpu_moe_sigmoid_route(const float *logits, const float *bias, int T, int E, int k, int n_group, int topk_group,
                           int renorm, float scale, int32_t *topk_idx, float *topk_w, int32_t *offsets,
                           int32_t *perm, int32_t *slot);
