// ops_hybrid_cpu.h: the CPU (fp32, OpenMP) twins of the ops in ops_hybrid.h; the reference.
// Same arguments as the ops_* functions without the backend; every act buffer is float.
#pragma once
#include <stddef.h>
#include <stdint.h>

void cpu_rmsnorm_zc(float *out, const float *in, const float *w, int R, int D, float eps);
void cpu_rope_partial(float *x, const int32_t *pos, const float *inv_freq, int T, int nh, int hd, int rot);
void cpu_sigmoid_mul(float *x, const float *g, int64_t n);
void cpu_conv1d_silu(float *out, const float *x, const float *w, const int32_t *cu_seqlens, int n_seq, int T, int C,
                     int K, float *state);
void cpu_gdn_gates(float *beta, float *g, const float *b, const float *a, const float *A_log, const float *dt_bias,
                   int T, int Hv);
// The delta rule's scratch: one slice per thread, `threads` slices (the backend's thread count; the
// op never runs more threads than that).
size_t cpu_gated_delta_rule_work_bytes(int threads, int dk, int dv);
void cpu_gated_delta_rule(float *out, const float *qkv, const float *g, const float *beta, const int32_t *cu_seqlens,
                          int n_seq, int T, int Hk, int Hv, int dk, int dv, float *state, float *work, int threads);
void cpu_gated_rmsnorm(float *out, const float *x, const float *z, const float *w, int R, int D, float eps);
