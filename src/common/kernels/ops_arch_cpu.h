// ops_arch_cpu.h: the CPU (fp32, OpenMP) twins of the ops in ops_arch.h; the reference.
// Same arguments as the ops_* functions without the backend; every act buffer is float.
// (ops_attention_ext's twin is cpu_attention_causal in ops_cpu.h: the one causal attention.)
#pragma once
#include <stdint.h>

void cpu_bias_add(float *y, const float *b, int64_t R, int64_t N);
void cpu_scale(float *x, float s, int64_t n);
void cpu_softcap_f32(float *x, int64_t ld, int64_t R, int64_t C, float cap);
void cpu_geglu_tanh(float *out, const float *gate, const float *up, int64_t n);
void cpu_swiglu_clamped(float *out, const float *in, int64_t R, int64_t n_i, float alpha, float limit);
void cpu_moe_bias_add(float *ys, const float *bias, const int32_t *offsets, int E, int64_t R, int64_t N);
