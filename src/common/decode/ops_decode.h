// ops_decode.h: the ops of KV-cached decoding (teacher/target_decode.c) beyond ops.h: appending a
// step's keys and values to the cache, single-query attention over the cache, and sampling one
// token per row from full-vocabulary logits.
//
// Each op has a CPU twin (ops_decode_cpu.c, fp32, the reference) and a CUDA version
// (ops_decode_cuda.cu, bf16 cache and activations, fp32 softmax and sums), each backend's half one
// table, struct decode_kernels below (decode_kernels_cpu, decode_kernels_cuda); ops_decode.c checks
// the arguments and calls the backend's table (common/backend/backend_ops.h).
// "act" is ops_act_dtype(be). Buffers are device memory of the backend.
//
// The cache of one attention layer: [n_seq, max_len, nkv*hd] act, sequence s's position p at
// element (s * max_len + p) * nkv*hd. Row s of a step is sequence s; pos[s] (i32, device) is the
// position of its new token (the positions before it are cached).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "common/backend/backend.h"
#include "common/backend/backend_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

// ops_kv_append: k_cache[s, pos[s], :] = k[s, :] and v_cache[s, pos[s], :] = v[s, :] for s < n.
//   k, v [n, kvd] act; caches as above with max_len positions per sequence.
void ops_kv_append(backend *be, void *k_cache, void *v_cache, const void *k, const void *v, const int32_t *pos,
                   int n, int max_len, int kvd);

// ops_attention_decode: row s's query attends to cached positions 0 .. pos[s] of sequence s (no
// mask beyond that: causal by construction), GQA (query head h uses kv head h / (nq/nkv); nkv = 1
// allowed), any head_dim hd (independent of hidden / heads; CUDA: hd <= OPS_DECODE_HD_MAX), fp32
// scores and an exact softmax with a running max, as the CPU's causal attention.
//   out, q [n, nq, hd] act; caches as above [*, max_len, nkv*hd]; scale usually hd^-0.5
//   work: ops_attention_decode_work_bytes(be, n, nq, max_len) bytes of device memory (CPU: the
//   scores [n*nq, max_len] f32; CUDA: none, NULL allowed)
#define OPS_DECODE_HD_MAX 512
size_t ops_attention_decode_work_bytes(const backend *be, int n, int nq, int max_len);
// ops_attention_decode_head_dim_max: the largest head_dim the backend's decode attention runs (0:
// any; CUDA: OPS_DECODE_HD_MAX, a warp's registers), for a decoder to refuse a target at start.
int ops_attention_decode_head_dim_max(const backend *be);
void ops_attention_decode(backend *be, void *out, const void *q, const void *k_cache, const void *v_cache,
                          const int32_t *pos, int n, int nq, int nkv, int hd, int max_len, float scale, void *work);

// ops_attention_decode_ext: ops_attention_decode with a sliding window and sinks, as
// ops_attention_ext (common/kernels/attention.h): window > 0: row s attends to the positions
// max(0, pos[s] - window + 1) .. pos[s] only (the cache still holds every position); sinks: NULL or
// [nq] f32 (device), head h's logit joins each of its rows' softmax denominator. ops_attention_decode
// is this with window 0 and sinks NULL. Same work buffer (ops_attention_decode_work_bytes).
void ops_attention_decode_ext(backend *be, void *out, const void *q, const void *k_cache, const void *v_cache,
                              const int32_t *pos, int n, int nq, int nkv, int hd, int max_len, float scale, int window,
                              const float *sinks, void *work);

// ops_sample: one token per row of logits [n, ld] f32 (ids 0 .. V-1 of each row), drawn with
// u[s] (f64, device, in [0, 1): the row's uniform draw, made by the caller's Philox stream), by
// the rule of decode_sample.h (temperature > 0, top_k, top_p), in exact integer arithmetic:
//   order        ids by logit, largest first, then lowest id (a total order on the f32 bits)
//   mass[v]      floor(exp(z_v / T - max_z / T) * 2^40) (u64; the largest is 2^40), z / T and the
//                difference rounded as separate fp64 operations
//   top_k        0 < top_k < V: the first top_k ids of the order; K = their mass (else all ids)
//   top_p        0 < top_p < 1: the shortest prefix of those whose mass reaches ceil(top_p * K)
//   draw         U = floor(u * kept mass); the first id of the kept prefix where the running
//                mass exceeds U
// Every sum is an integer sum, so the token does not depend on the order of summation: the CUDA
// kernel (a threshold search over the order, no sort) and the CPU twin (a sort) choose the same id
// from the same logits and u, except where the two math libraries' exp differ in the last bit of
// a mass (one unit of 2^-40 of the top mass: a different token with probability ~2^-40).
//   ids [n] i32 out; work: ops_sample_work_bytes(be, n, V) bytes of device memory
size_t ops_sample_work_bytes(const backend *be, int n, int V);
void ops_sample(backend *be, int32_t *ids, const float *logits, int ld, int n, int V, float temperature, int top_k,
                float top_p, const double *u, void *work);

// decode_kernels: one backend's half of the ops above (its .ops->decode), the arguments as the
// ops_* functions' after their checks; attention_decode is ops_attention_decode_ext's, the
// work_bytes members answer ops_attention_decode_work_bytes and ops_sample_work_bytes.
struct decode_kernels {
    void (*kv_append)(backend *be, void *k_cache, void *v_cache, const void *k, const void *v, const int32_t *pos,
                      int n, int max_len, int kvd);
    size_t (*attention_decode_work_bytes)(const backend *be, int n, int nq, int max_len);
    void (*attention_decode)(backend *be, void *out, const void *q, const void *k_cache, const void *v_cache,
                             const int32_t *pos, int n, int nq, int nkv, int hd, int max_len, float scale, int window,
                             const float *sinks, void *work);
    size_t (*sample_work_bytes)(const backend *be, int n, int V);
    void (*sample)(backend *be, int32_t *ids, const float *logits, int ld, int n, int V, float temperature, int top_k,
                   float top_p, const double *u, void *work);
    // not an op: the largest head_dim attention_decode takes (0: any; last, after DECODE_OPS' members)
    int attention_head_dim_max;
};

// DECODE_OPS: the members above, once, in order; each backend fills its table from it in one
// line (OP_FILL, backend_ops.h); then attention_head_dim_max, by hand.
#define DECODE_OPS(X, p) X(p, kv_append) X(p, attention_decode_work_bytes) X(p, attention_decode) \
    X(p, sample_work_bytes) X(p, sample)
OPS_LISTED(struct decode_kernels, DECODE_OPS, 1);

#ifdef __cplusplus
}
#endif
