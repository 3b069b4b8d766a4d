// optim_cuda.h: the CUDA kernels of optim.c (optim_cuda.cu). Plain C interface.
#pragma once
#include <stdint.h>

#include "common/backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif
double cuda_optim_sum_squares(backend *be, const float *g, int64_t n);
void cuda_optim_adamw(backend *be, float *w, const float *g, float *m, float *v, int64_t n, float lr, float b1, float b2,
                      float eps, float wd, float gscale, float bc1, float bc2);
void cuda_optim_ema_update(backend *be, float *ema, const float *w, int64_t n, float decay);
void cuda_optim_muon_momentum(backend *be, float *x, float *m, const float *g, int64_t n, float gscale, float mu, double *ss);
void cuda_optim_muon_normalise(backend *be, float *x, int64_t n, const double *ss);
void cuda_optim_axpby(backend *be, float *y, const float *x, int64_t n, float alpha, float beta);
void cuda_optim_muon_apply(backend *be, float *w, const float *o, int64_t n, float decay, float lr_scaled);
#ifdef __cplusplus
}
#endif
