// ops_arch.c: dispatch of the architecture ops (ops_arch.h) to the CPU reference or the CUDA
// kernels, in the pattern of ops.c. Argument checks that hold on both backends live here.
#include "common/kernels/ops_arch.h"

#include "common/core/check.h"
#include "common/kernels/ops_arch_cpu.h"
#include "common/kernels/ops_cpu.h"
#ifdef DFLASH_HAVE_CUDA
#include "common/kernels/ops_arch_cuda.h"
#include "common/kernels/ops_cuda.h"
#endif
#include "common/kernels/ops_dispatch.h"

void ops_attention_ext(backend *be, void *out, const void *q, const void *k, const void *v, const int32_t *cu_seqlens,
                       int n_seq, int T, int nq, int nkv, int hd, float scale, int window, const float *sinks) {
    if (nkv < 1 || nq % nkv) fatal("attention: %d query heads do not group over %d kv heads", nq, nkv);
    if (window < 0) fatal("attention: window %d", window);
    DISPATCH(be, cuda_attention_causal(be, out, q, k, v, cu_seqlens, n_seq, T, nq, nkv, hd, scale, window, sinks),
             cpu_attention_causal(out, q, k, v, cu_seqlens, n_seq, T, nq, nkv, hd, scale, window, sinks));
}

void ops_bias_add(backend *be, void *y, const void *b, int64_t R, int64_t N) {
    DISPATCH(be, cuda_bias_add(be, y, b, R, N), cpu_bias_add(y, b, R, N));
}

void ops_scale(backend *be, void *x, float s, int64_t n) { DISPATCH(be, cuda_scale(be, x, s, n), cpu_scale(x, s, n)); }

void ops_softcap_f32(backend *be, float *x, int64_t ld, int64_t R, int64_t C, float cap) {
    if (!(cap > 0.0f)) fatal("softcap: cap %g", cap);
    if (ld < C) fatal("softcap: %lld columns in rows of %lld", (long long)C, (long long)ld);
    DISPATCH(be, cuda_softcap_f32(be, x, ld, R, C, cap), cpu_softcap_f32(x, ld, R, C, cap));
}

void ops_geglu_tanh(backend *be, void *out, const void *gate, const void *up, int64_t n) {
    DISPATCH(be, cuda_geglu_tanh(be, out, gate, up, n), cpu_geglu_tanh(out, gate, up, n));
}

void ops_swiglu_clamped(backend *be, void *out, const void *in, int64_t R, int64_t n_i, float alpha, float limit) {
    DISPATCH(be, cuda_swiglu_clamped(be, out, in, R, n_i, alpha, limit),
             cpu_swiglu_clamped(out, in, R, n_i, alpha, limit));
}

void ops_moe_bias_add(backend *be, void *ys, const void *bias, const int32_t *offsets, int E, int64_t R, int64_t N) {
    if (E < 1) fatal("moe bias: %d experts", E);
    DISPATCH(be, cuda_moe_bias_add(be, ys, bias, offsets, E, R, N), cpu_moe_bias_add(ys, bias, offsets, E, R, N));
}
