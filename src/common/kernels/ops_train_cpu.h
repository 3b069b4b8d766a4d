// ops_train_cpu.h: the CPU (fp32, OpenMP) twins of the training ops in ops_train.h; the reference.
// Same arguments as the ops_* functions without the backend; all act buffers are float.
#pragma once
#include <stdint.h>

void cpu_rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x, const float *w, int R, int D,
                          float eps, int accumulate);
void cpu_rope_backward(float *dx, const int32_t *pos, const float *inv_freq, int T, int nh, int hd);
void cpu_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, int64_t n);
void cpu_dflash_attn_forward(float *out, float *lse, const float *q, const float *kb, const float *vb, const float *kc,
                             const float *vc, const int32_t *anchors, const int32_t *seq_start, int C, int B, int nq,
                             int nkv, int hd, float scale, int window, int block_causal);
void cpu_dflash_attn_backward(float *dq, float *dkb, float *dvb, float *dkc, float *dvc, const float *dout,
                              const float *out, const float *lse, const float *q, const float *kb, const float *vb,
                              const float *kc, const float *vc, const int32_t *anchors, const int32_t *seq_start,
                              int C, int B, int nq, int nkv, int hd, float scale, int window, int block_causal);
