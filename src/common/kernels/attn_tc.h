// attn_tc.h: attention on tensor cores (attn_tc.cu): the DFlash attention (SPEC §3) and the
// target's causal attention, for attention_cuda.cu.
//
// Same arguments and results as cuda_attention_dflash_forward / _backward (attention_cuda.cu). Each call
// returns 1 when it ran (queued on the backend's stream) and 0 when this path does not apply: it was
// switched off (environment DFLASH_CUDA_ATTN=scalar) or no tile configuration fits the device's
// shared memory for this head_dim. The caller then runs the scalar kernels, which stay the
// reference the tiled ones are tested against (tests/unit/test_ops_grad_cuda.c runs both).
#pragma once
#include <stdint.h>

#include "common/backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

int dflash_tc_forward(backend *be, void *out, float *lse, const void *q, const void *kb, const void *vb,
                      const void *kc, const void *vc, const int32_t *anchors, const int32_t *seq_start, int C, int B,
                      int nq, int nkv, int hd, float scale, int window, int block_causal);
int dflash_tc_backward(backend *be, void *dq, void *dkb, void *dvb, float *dkc, float *dvc, const void *dout,
                       const void *out, const float *lse, const void *q, const void *kb, const void *vb,
                       const void *kc, const void *vc, const int32_t *anchors, const int32_t *seq_start, int C, int B,
                       int nq, int nkv, int hd, float scale, int window, int block_causal);

// The target's causal attention over packed sequences (cuda_attention_causal in attention_cuda.cu; same
// arguments, the sliding window and the sinks of ops_attention_ext included), forward only, on the
// same tiles.
int attn_tc_causal(backend *be, void *out, const void *q, const void *k, const void *v, const int32_t *cu_seqlens,
                   int n_seq, int T, int nq, int nkv, int hd, float scale, int window, const float *sinks);

// attn_tc_path_fits: 0 when `path`, a DFLASH_CUDA_ATTN value, forces a tile shape ("tiled-BQxBK") whose
// tiles at head_dim hd need more shared memory than the current device gives a block (the forward's;
// with backward, also dQ's and dK/dV's): the attention would refuse it. 1 otherwise ("tiled" and
// "scalar" always fit). For the tests, which force every shape: sm_120 holds fewer than sm_90.
int attn_tc_path_fits(const char *path, int hd, int backward);

#ifdef __cplusplus
}
#endif
