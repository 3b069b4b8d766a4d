// ops_moe_cpu.h: the CPU (fp32, OpenMP + OpenBLAS) twins of the ops in ops_moe.h; the reference.
// Same arguments as the ops_* functions without the backend; every act buffer is float.
#pragma once
#include <stddef.h>
#include <stdint.h>

void cpu_moe_route(const float *logits, int T, int E, int k, int renorm, int32_t *topk_idx, float *topk_w,
                   int32_t *offsets, int32_t *perm, int32_t *slot);
// cpu_moe_group: offsets, perm and slot (ops_moe_route's grouping) of the chosen experts topk_idx [T, k].
void cpu_moe_group(const int32_t *topk_idx, int T, int E, int k, int32_t *offsets, int32_t *perm, int32_t *slot);
void cpu_moe_gather(float *xs, const float *x, const int32_t *perm, int R, int H);
void cpu_moe_gemm(float *y, const float *x, const float *W, const int32_t *offsets, int E, int R, int N, int K);
void cpu_swiglu_packed(float *out, const float *gu, int R, int n_i); // n_i: I (complex.h, via cblas.h, defines I)
void cpu_moe_combine(float *y, const float *ys, const int32_t *slot, const int32_t *topk_idx, const float *topk_w,
                     int T, int k, int H);
void cpu_sigmoid_gate_add(float *y, const float *s, const float *g, int T, int H);
