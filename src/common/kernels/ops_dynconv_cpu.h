// ops_dynconv_cpu.h: the CPU (fp32, OpenMP) twins of ops_dynconv.h; the reference. Same arguments
// without the backend; all act buffers are float.
#pragma once

void cpu_dynconv_forward(float *out, const float *x, const float *dyn, int ld, const float *base, int T, int B, int H,
                         int K, int G);
void cpu_dynconv_backward(float *dx, float *ddyn, float *dbase, const float *dout, const float *x, const float *dyn,
                          int ld, const float *base, int T, int B, int H, int K, int G);
