// ops_decode.c: the decoding ops (ops_decode.h): the argument checks that hold on both backends,
// then the backend's table (decode_kernels), each op timed under its ops_* name.
#include "common/decode/ops_decode.h"

#include "common/backend/backend_ops.h"
#include "common/backend/profile.h"
#include "common/core/check.h"

void ops_kv_append(backend *be, void *k_cache, void *v_cache, const void *k, const void *v, const int32_t *pos,
                   int n, int max_len, int kvd) {
    BACKEND_OP(be, decode, kv_append, k_cache, v_cache, k, v, pos, n, max_len, kvd);
}

int ops_attention_decode_head_dim_max(const backend *be) { return BACKEND_TABLE(be, decode)->attention_head_dim_max; }

size_t ops_attention_decode_work_bytes(const backend *be, int n, int nq, int max_len) {
    return BACKEND_TABLE(be, decode)->attention_decode_work_bytes(be, n, nq, max_len);
}

static void decode_check(int nq, int nkv, int hd, int window) {
    if (nkv < 1 || nq % nkv) fatal("decode attention: %d query heads do not group over %d kv heads", nq, nkv);
    if (hd < 1) fatal("decode attention: head_dim %d", hd);
    if (window < 0) fatal("decode attention: window %d", window);
}

// ops_attention_decode_ext without a window or sinks, called here so that the profile keeps this
// op's name.
void ops_attention_decode(backend *be, void *out, const void *q, const void *k_cache, const void *v_cache,
                          const int32_t *pos, int n, int nq, int nkv, int hd, int max_len, float scale, void *work) {
    decode_check(nq, nkv, hd, 0);
    BACKEND_OP(be, decode, attention_decode, out, q, k_cache, v_cache, pos, n, nq, nkv, hd, max_len, scale, 0, NULL,
               work);
}

void ops_attention_decode_ext(backend *be, void *out, const void *q, const void *k_cache, const void *v_cache,
                              const int32_t *pos, int n, int nq, int nkv, int hd, int max_len, float scale, int window,
                              const float *sinks, void *work) {
    decode_check(nq, nkv, hd, window);
    BACKEND_OP(be, decode, attention_decode, out, q, k_cache, v_cache, pos, n, nq, nkv, hd, max_len, scale, window,
               sinks, work);
}

size_t ops_sample_work_bytes(const backend *be, int n, int V) {
    return BACKEND_TABLE(be, decode)->sample_work_bytes(be, n, V);
}

void ops_sample(backend *be, int32_t *ids, const float *logits, int ld, int n, int V, float temperature, int top_k,
                float top_p, const double *u, void *work) {
    if (!(temperature > 0.0f)) fatal("sample: temperature %g (greedy decoding takes the argmax instead)", temperature);
    if (V < 1 || ld < V) fatal("sample: %d ids in rows of %d", V, ld);
    BACKEND_OP(be, decode, sample, ids, logits, ld, n, V, temperature, top_k, top_p, u, work);
}
