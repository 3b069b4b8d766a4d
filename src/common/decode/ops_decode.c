// ops_decode.c: dispatch of the decoding ops (ops_decode.h) to the CPU reference or the CUDA
// kernels, in the pattern of ops.c. Argument checks that hold on both backends live here.
#include "common/decode/ops_decode.h"

#include "common/core/check.h"
#include "common/decode/ops_decode_cpu.h"
#ifdef DFLASH_HAVE_CUDA
#include "common/decode/ops_decode_cuda.h"
#endif
#include "common/kernels/ops_dispatch.h"

void ops_kv_append(backend *be, void *k_cache, void *v_cache, const void *k, const void *v, const int32_t *pos,
                   int n, int max_len, int kvd) {
    DISPATCH(be, cuda_kv_append(be, k_cache, v_cache, k, v, pos, n, max_len, kvd),
             cpu_kv_append(k_cache, v_cache, k, v, pos, n, max_len, kvd));
}

size_t ops_attention_decode_work_bytes(const backend *be, int n, int nq, int max_len) {
    if (be->kind == BACKEND_CUDA) return 0;
    return (size_t)n * (size_t)nq * (size_t)max_len * sizeof(float);
}

static void decode_check(int nq, int nkv, int hd, int window) {
    if (nkv < 1 || nq % nkv) fatal("decode attention: %d query heads do not group over %d kv heads", nq, nkv);
    if (hd < 1) fatal("decode attention: head_dim %d", hd);
    if (window < 0) fatal("decode attention: window %d", window);
}

// ops_attention_decode_ext without a window or sinks, dispatched here so that the profile keeps
// this op's name.
void ops_attention_decode(backend *be, void *out, const void *q, const void *k_cache, const void *v_cache,
                          const int32_t *pos, int n, int nq, int nkv, int hd, int max_len, float scale, void *work) {
    decode_check(nq, nkv, hd, 0);
    DISPATCH(be, cuda_attention_decode(be, out, q, k_cache, v_cache, pos, n, nq, nkv, hd, max_len, scale, 0, NULL),
             cpu_attention_decode(out, q, k_cache, v_cache, pos, n, nq, nkv, hd, max_len, scale, 0, NULL, work));
}

void ops_attention_decode_ext(backend *be, void *out, const void *q, const void *k_cache, const void *v_cache,
                              const int32_t *pos, int n, int nq, int nkv, int hd, int max_len, float scale, int window,
                              const float *sinks, void *work) {
    decode_check(nq, nkv, hd, window);
    DISPATCH(be,
             cuda_attention_decode(be, out, q, k_cache, v_cache, pos, n, nq, nkv, hd, max_len, scale, window, sinks),
             cpu_attention_decode(out, q, k_cache, v_cache, pos, n, nq, nkv, hd, max_len, scale, window, sinks, work));
}

size_t ops_sample_work_bytes(const backend *be, int n, int V) {
#ifdef DFLASH_HAVE_CUDA
    if (be->kind == BACKEND_CUDA) return cuda_sample_work_bytes(n, V);
#endif
    (void)be;
    (void)n;
    return cpu_sample_scratch_bytes(V);
}

// CPU: u and ids are host memory (the CPU backend's device); the rows one after another (one
// scratch: a row's sort is the op's whole cost and V-sized).
void ops_sample(backend *be, int32_t *ids, const float *logits, int ld, int n, int V, float temperature, int top_k,
                float top_p, const double *u, void *work) {
    if (!(temperature > 0.0f)) fatal("sample: temperature %g (greedy decoding takes the argmax instead)", temperature);
    if (V < 1 || ld < V) fatal("sample: %d ids in rows of %d", V, ld);
    DISPATCH(be, cuda_sample(be, ids, logits, ld, n, V, temperature, top_k, top_p, u, work),
             for (int s = 0; s < n; s++) ids[s] = cpu_sample_row(logits + (size_t)s * ld, V, temperature, top_k,
                                                                 top_p, u[s], work));
}
