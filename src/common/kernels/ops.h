// ops.h: the model ops of the targets and the drafter, on either backend: every op family of this
// folder in one include, and the backend's activation dtype.
//
// Each family (norm.h, rope.h, attention.h, activation.h, elementwise.h, topk_lse.h, dynconv.h,
// deltanet.h) declares its ops_* calls and the table of kernels a backend fills for it: the CPU
// reference in <family>_cpu.c (fp32, OpenMP) and the CUDA kernels in <family>_cuda.cu (bf16
// activations and weights, fp32 accumulation and softmax). ops.c checks the arguments and calls
// the backend's table (be->ops, common/backend/backend_ops.h). Buffers are device memory of the
// backend (host memory on the CPU); "act" means the backend's activation dtype: F32 on the CPU,
// BF16 on CUDA (ops_act_dtype). Integer index arrays are int32 on the device. Shapes are given in
// comments as [rows, cols], row-major.
#pragma once
#include <stdint.h>

#include "common/backend/backend.h"
#include "common/core/tensor.h"
#include "common/kernels/activation.h"
#include "common/kernels/attention.h"
#include "common/kernels/deltanet.h"
#include "common/kernels/dynconv.h"
#include "common/kernels/elementwise.h"
#include "common/kernels/norm.h"
#include "common/kernels/rope.h"
#include "common/kernels/topk_lse.h"

#ifdef __cplusplus
extern "C" {
#endif

// ops_act_dtype: dtype of activations and weights on this backend (F32 cpu, BF16 cuda): its
// be->caps.act_dtype.
dtype ops_act_dtype(const backend *be);

#ifdef __cplusplus
}
#endif
