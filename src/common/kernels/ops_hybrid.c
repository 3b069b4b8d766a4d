// ops_hybrid.c: dispatch of the hybrid-target ops (ops_hybrid.h) to the CPU reference or the CUDA
// kernels, in the pattern of ops.c. Argument checks that hold on both backends live here.
#include "common/kernels/ops_hybrid.h"

#include "common/core/check.h"
#include "common/kernels/ops_hybrid_cpu.h"
#ifdef DFLASH_HAVE_CUDA
#include "common/kernels/ops_hybrid_cuda.h"
#endif
#include "common/kernels/ops_dispatch.h"

void ops_rmsnorm_zc(backend *be, void *out, const void *in, const void *w, int R, int D, float eps) {
    DISPATCH(be, cuda_rmsnorm_zc(be, out, in, w, R, D, eps), cpu_rmsnorm_zc(out, in, w, R, D, eps));
}

void ops_rope_partial(backend *be, void *x, const int32_t *pos, const float *inv_freq, int T, int nh, int hd,
                      int rot) {
    if (rot < 0 || rot % 2 || rot > hd) fatal("partial rope: %d rotary dims of head_dim %d (even, <= head_dim)", rot, hd);
    DISPATCH(be, cuda_rope_partial(be, x, pos, inv_freq, T, nh, hd, rot),
             cpu_rope_partial(x, pos, inv_freq, T, nh, hd, rot));
}

void ops_sigmoid_mul(backend *be, void *x, const void *g, int64_t n) {
    DISPATCH(be, cuda_sigmoid_mul(be, x, g, n), cpu_sigmoid_mul(x, g, n));
}

void ops_conv1d_silu(backend *be, void *out, const void *x, const void *w, const int32_t *cu_seqlens, int n_seq,
                     int T, int C, int K, void *state) {
    if (K < 1) fatal("conv1d: kernel size %d", K);
    DISPATCH(be, cuda_conv1d_silu(be, out, x, w, cu_seqlens, n_seq, T, C, K, state),
             cpu_conv1d_silu(out, x, w, cu_seqlens, n_seq, T, C, K, state));
}

void ops_gdn_gates(backend *be, float *beta, float *g, const void *b, const void *a, const float *A_log,
                   const float *dt_bias, int T, int Hv) {
    DISPATCH(be, cuda_gdn_gates(be, beta, g, b, a, A_log, dt_bias, T, Hv),
             cpu_gdn_gates(beta, g, b, a, A_log, dt_bias, T, Hv));
}

size_t ops_gated_delta_rule_work_bytes(const backend *be, int T, int n_seq, int Hk, int Hv, int dk, int dv) {
#ifdef DFLASH_HAVE_CUDA
    if (be->kind == BACKEND_CUDA) return cuda_gated_delta_rule_work_bytes(be, T, n_seq, Hk, Hv, dk, dv);
#endif
    return cpu_gated_delta_rule_work_bytes(be->threads, dk, dv);
}

void ops_gated_delta_rule(backend *be, void *out, const void *qkv, const float *g, const float *beta,
                          const int32_t *cu_seqlens, const int32_t *cu_host, int n_seq, int T, int Hk, int Hv, int dk,
                          int dv, float *state, void *work) {
    if (Hk < 1 || Hv % Hk) fatal("gated delta rule: %d value heads do not group over %d key heads", Hv, Hk);
    if (dk < 1 || dv < 1) fatal("gated delta rule: head dims %d, %d", dk, dv);
    (void)cu_host; // (the CPU's cu_seqlens is host memory already)
    DISPATCH(be,
             cuda_gated_delta_rule(be, out, qkv, g, beta, cu_seqlens, cu_host, n_seq, T, Hk, Hv, dk, dv, state, work),
             cpu_gated_delta_rule(out, qkv, g, beta, cu_seqlens, n_seq, T, Hk, Hv, dk, dv, state, work, be->threads));
}

void ops_gated_rmsnorm(backend *be, void *out, const void *x, const void *z, const void *w, int R, int D, float eps) {
    DISPATCH(be, cuda_gated_rmsnorm(be, out, x, z, w, R, D, eps), cpu_gated_rmsnorm(out, x, z, w, R, D, eps));
}
