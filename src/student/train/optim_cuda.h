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
#ifdef __cplusplus
}
#endif
