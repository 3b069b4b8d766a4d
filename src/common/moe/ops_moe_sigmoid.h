// ops_moe_sigmoid.h: the router of DeepSeek-V3 / Kimi-K2 and GLM-4.5 (transformers'
// DeepseekV3TopkRouter, Glm4MoeTopkRouter: "noaux_tc", sigmoid scores with a score-correction bias
// and a limit on the expert groups), with the outputs of ops_moe_route so that the rest of the MoE
// block (ops_moe.h: gather, expert GEMMs, combine) serves it unchanged.
//
// As ops_moe.h: a CPU twin (ops_moe_sigmoid_cpu.c, fp32, the reference) and CUDA
// (ops_moe_sigmoid_cuda.cu: one warp per token; the grouping by expert is ops_moe_cuda.cu's,
// cuda_moe_group, with the counts' download the expert GEMMs wait for), each the sigmoid_route of
// its backend's MoE table (struct moe_kernels, ops_moe.h). ops_moe_sigmoid.c checks and calls it.
#pragma once
#include <stdint.h>

#include "common/backend/backend.h"

// ops_moe_sigmoid_route: per token t, in fp32, with G = n_group groups of E/G consecutive experts:
//   s[e] = sigmoid(logits[t, e]),  b[e] = s[e] + bias[e]            (the score for the choice)
//   group g's score = the sum of the two largest b[e] of its experts
//   the topk_group best groups are kept (ties: the lower group id); the experts of the others are
//   out (b = -inf, as transformers' masked_fill)
//   the k largest b (ties: the lower expert id) into topk_idx [T, k] i32, in descending b
//   topk_w [T, k] f32 = their s (not b), divided by (their sum + 1e-20) when renorm, times scale
//   (routed_scaling_factor)
// then offsets [E+1], perm [R], slot [R] (R = T*k) exactly as ops_moe_route makes them (ops_moe.h).
// A NaN b counts as -inf (it is never chosen over a number; its weight stays NaN).
//   logits [T, E] f32 (x @ router^T), bias [E] f32 (e_score_correction_bias); all device memory.
// Requires: E % n_group == 0, E / n_group >= 2 (a group's score takes its top two, as torch.topk(2)),
// 1 <= topk_group <= n_group, 1 <= k <= topk_group * E / n_group (fatal otherwise).
void ops_moe_sigmoid_route(backend *be, const float *logits, const float *bias, int T, int E, int k, int n_group,
                           int topk_group, int renorm, float scale, int32_t *topk_idx, float *topk_w,
                           int32_t *offsets, int32_t *perm, int32_t *slot);
