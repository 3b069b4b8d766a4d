// ops_decode_cuda.cu: the CUDA kernels of the decoding ops (see ops_decode.h) and the CUDA backend's
// table of them (decode_kernels_cuda).
//
// Written C-style, as common/kernels' CUDA files: bf16 cache and activations, fp32 scores, softmax and sums; all
// work on the backend's stream, nothing waits for it; int64 indices where a product of sizes can
// pass 2^31.
//   kv_append           one thread per element of the step's keys / values
//   attention_decode    one block per (row, query head), DEC_WARPS warps: warp w takes the cached
//                       positions w, w + DEC_WARPS, ... with an online softmax (each lane holds the
//                       query and the output for dims lane, lane + 32, ...); the warps' partial
//                       (max, sum, output) are combined through shared memory. A sliding window
//                       starts the walk at pos - window + 1; a sink joins the combined max and sum
//   sample              one block per row: the integer masses into work [n, V] u64, then each cut
//                       (top-k, top-p, the draw) is the largest 64-bit threshold of the order key
//                       whose prefix {key >= threshold} holds the wanted count or mass, found 8 bits
//                       at a time from the top (a shared histogram per digit: 8 passes over the row
//                       per cut); integer sums, so the same prefixes as the CPU twin's sort
#include <math.h>
#include <stdint.h>

#include <cuda_bf16.h>

#include "common/backend/backend_cuda.h"
#include "common/backend/check_cuda.h"
#include "common/core/check.h"
#include "common/decode/ops_decode.h"

typedef __nv_bfloat16 bf16;

#include "common/kernels/cuda_launch.cuh"
#include "common/kernels/cuda_reduce.cuh"

#define SAMPLE_RULE_FN static __host__ __device__ __forceinline__
#include "common/decode/sample_rule.h"

// ---------------------------------------------------------------------------- cache append

static __global__ void kv_append_kernel(bf16 *kc, bf16 *vc, const bf16 *k, const bf16 *v, const int32_t *pos, int n,
                                        int max_len, int kvd) {
    GRID_STRIDE(i, (int64_t)n * kvd) {
        int64_t s = i / kvd, c = i % kvd, at = (s * max_len + pos[s]) * kvd + c;
        kc[at] = k[i];
        vc[at] = v[i];
    }
}

static void cuda_kv_append(backend *be, void *k_cache, void *v_cache, const void *k, const void *v, const int32_t *pos,
                           int n, int max_len, int kvd) {
    if (n <= 0 || kvd <= 0) return;
    kv_append_kernel<<<grid_for_threads((int64_t)n * kvd, 256), 256, 0, stream_of(be)>>>(
        (bf16 *)k_cache, (bf16 *)v_cache, (const bf16 *)k, (const bf16 *)v, pos, n, max_len, kvd);
    cuda_check_launch();
}

// ---------------------------------------------------------------------------- decode attention

#define DEC_WARPS 8
#define DEC_DIMS (OPS_DECODE_HD_MAX / 32) // head dims per lane at most

static __global__ void attention_decode_kernel(bf16 *out, const bf16 *q, const bf16 *kc, const bf16 *vc,
                                               const int32_t *pos, int nq, int nkv, int hd, int max_len, float scale,
                                               int window, const float *sinks) {
    extern __shared__ float part[]; // [DEC_WARPS][hd + 2]: each warp's output, then its max and sum
    int64_t row = blockIdx.x;       // s * nq + h
    int s = (int)(row / nq), h = (int)(row % nq), kh = h / (nq / nkv);
    int lane = threadIdx.x % 32, w = threadIdx.x / 32, kvd = nkv * hd;
    const bf16 *qr = q + row * hd;
    const bf16 *kb = kc + (int64_t)s * max_len * kvd + (int64_t)kh * hd;
    const bf16 *vb = vc + (int64_t)s * max_len * kvd + (int64_t)kh * hd;
    float qv[DEC_DIMS], acc[DEC_DIMS];
#pragma unroll
    for (int i = 0; i < DEC_DIMS; i++) {
        int d = lane + 32 * i;
        qv[i] = d < hd ? bf(qr[d]) : 0.0f;
        acc[i] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    int n = pos[s] + 1, j0 = window > 0 && n - window > 0 ? n - window : 0; // keys j0 .. pos[s]
    for (int j = j0 + w; j < n; j += DEC_WARPS) {
        const bf16 *kr = kb + (int64_t)j * kvd, *vr = vb + (int64_t)j * kvd;
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < DEC_DIMS; i++) {
            int d = lane + 32 * i;
            if (d < hd) dot += qv[i] * bf(kr[d]);
        }
        dot = warp_sum(dot) * scale;
        float mn = fmaxf(m, dot), c = expf(m - mn), p = expf(dot - mn);
        l = l * c + p;
#pragma unroll
        for (int i = 0; i < DEC_DIMS; i++) {
            int d = lane + 32 * i;
            if (d < hd) acc[i] = acc[i] * c + p * bf(vr[d]);
        }
        m = mn;
    }
    float *mine = part + w * (hd + 2);
#pragma unroll
    for (int i = 0; i < DEC_DIMS; i++) {
        int d = lane + 32 * i;
        if (d < hd) mine[d] = acc[i];
    }
    if (lane == 0) {
        mine[hd] = m;
        mine[hd + 1] = l;
    }
    __syncthreads();
    float sink = sinks ? sinks[h] : -INFINITY;
    float M = sink, L = 0.0f;
    for (int u = 0; u < DEC_WARPS; u++) M = fmaxf(M, part[u * (hd + 2) + hd]);
    if (sink != -INFINITY) L = expf(sink - M);
    for (int u = 0; u < DEC_WARPS; u++) {
        float mu = part[u * (hd + 2) + hd];
        if (mu > -INFINITY) L += part[u * (hd + 2) + hd + 1] * expf(mu - M);
    }
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float o = 0.0f;
        for (int u = 0; u < DEC_WARPS; u++) {
            float mu = part[u * (hd + 2) + hd];
            if (mu > -INFINITY) o += part[u * (hd + 2) + d] * expf(mu - M);
        }
        out[row * hd + d] = __float2bfloat16(o / L);
    }
}

// no work buffer (the scores stay in registers and shared memory)
static size_t cuda_attention_decode_work_bytes(const backend *be, int n, int nq, int max_len) {
    (void)be;
    (void)n;
    (void)nq;
    (void)max_len;
    return 0;
}

static void cuda_attention_decode(backend *be, void *out, const void *q, const void *k_cache, const void *v_cache,
                                  const int32_t *pos, int n, int nq, int nkv, int hd, int max_len, float scale,
                                  int window, const float *sinks, void *work) {
    (void)work;
    if (n <= 0 || nq <= 0) return;
    if (hd > OPS_DECODE_HD_MAX) fatal("decode attention on CUDA: head_dim %d > %d", hd, OPS_DECODE_HD_MAX);
    if ((int64_t)n * nq > 0x7fffffff) fatal("decode attention on CUDA: %d rows x %d heads exceed the grid", n, nq);
    size_t smem = (size_t)DEC_WARPS * (size_t)(hd + 2) * sizeof(float);
    if (smem > 48 * 1024)
        cuda_check(cudaFuncSetAttribute(attention_decode_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    attention_decode_kernel<<<(unsigned)((int64_t)n * nq), DEC_WARPS * 32, smem, stream_of(be)>>>(
        (bf16 *)out, (const bf16 *)q, (const bf16 *)k_cache, (const bf16 *)v_cache, pos, nq, nkv, hd, max_len, scale,
        window, sinks);
    cuda_check_launch();
}

// ---------------------------------------------------------------------------- sampling

#define SMP_THREADS 256

static __device__ __forceinline__ uint64_t block_sum_u64(uint64_t v, uint64_t *red) {
    int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    __syncthreads();
    if (lane == 0) red[w] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : 0;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

static __device__ __forceinline__ double block_max_f64(double v, double *red) {
    int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
    for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(FULL_MASK, v, o));
    __syncthreads();
    if (lane == 0) red[w] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : -INFINITY;
    for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}

// The count (mass NULL) or mass of the ids whose order key is >= th.
static __device__ uint64_t prefix_weight(const float *z, const uint64_t *mass, int V, uint64_t th, uint64_t *red) {
    uint64_t f = 0;
    for (int v = threadIdx.x; v < V; v += blockDim.x)
        if (sample_order_key(z[v], v) >= th) f += mass ? mass[v] : 1;
    return block_sum_u64(f, red);
}

// The largest threshold whose prefix {key >= threshold} holds at least want (count, or mass): the
// key of the prefix's last id. Found a digit of 8 bits at a time from the top: among the ids whose
// key agrees with the digits fixed so far, a histogram of the next digit (hist, shared [256]); the
// digit taken is the largest whose ids, with those of every higher key, still hold want. 8 passes
// over the row. (Every caller's want is at most the row's total, so some digit always qualifies.)
static __device__ uint64_t prefix_search(const float *z, const uint64_t *mass, int V, uint64_t want,
                                        unsigned long long *hist) {
    __shared__ uint64_t fixed_s, above_s;
    uint64_t fixed = 0, above = 0; // the digits taken; the weight of the ids whose key is above them
    for (int shift = 56; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
        __syncthreads();
        uint64_t hi = shift == 56 ? 0 : ~(uint64_t)0 << (shift + 8);
        for (int v = threadIdx.x; v < V; v += blockDim.x) {
            uint64_t key = sample_order_key(z[v], v);
            if ((key & hi) == fixed) atomicAdd(&hist[(key >> shift) & 255], (unsigned long long)(mass ? mass[v] : 1));
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            uint64_t acc = above;
            int d = 255;
            for (; d > 0; d--) {
                if (acc + hist[d] >= want) break;
                acc += hist[d];
            }
            fixed_s = fixed | (uint64_t)d << shift;
            above_s = acc;
        }
        __syncthreads();
        fixed = fixed_s;
        above = above_s;
    }
    return fixed;
}

static __global__ void sample_kernel(int32_t *ids, const float *logits, int ld, int V, float temperature, int top_k,
                                     float top_p, const double *u, uint64_t *work) {
    __shared__ uint64_t red[32];
    __shared__ unsigned long long hist[256];
    __shared__ double redd[32];
    int64_t r = blockIdx.x;
    const float *z = logits + r * ld;
    uint64_t *mass = work + r * V;
    double inv_t = 1.0 / (double)temperature, mx = -INFINITY;
    for (int v = threadIdx.x; v < V; v += blockDim.x) mx = fmax(mx, __dmul_rn((double)z[v], inv_t));
    mx = block_max_f64(mx, redd);
    for (int v = threadIdx.x; v < V; v += blockDim.x) mass[v] = sample_mass(__dmul_rn((double)z[v], inv_t), mx);
    __syncthreads();
    uint64_t th = 0; // the kept prefix: keys >= th
    if (top_k > 0 && top_k < V) th = prefix_search(z, NULL, V, (uint64_t)top_k, hist);
    if (top_p > 0.0f && top_p < 1.0f) {
        uint64_t tp = prefix_search(z, mass, V, sample_top_p_want(top_p, prefix_weight(z, mass, V, th, red)), hist);
        if (tp > th) th = tp;
    }
    uint64_t kept = prefix_weight(z, mass, V, th, red), pick;
    if (kept > 0) pick = prefix_search(z, mass, V, sample_offset(u[r], kept) + 1, hist);
    else pick = prefix_search(z, NULL, V, 1, hist); // no id has mass (NaN / inf logits): the first
    if (threadIdx.x == 0) ids[r] = (int32_t)(0xFFFFFFFFu - (uint32_t)pick);
}

static size_t cuda_sample_work_bytes(const backend *be, int n, int V) {
    (void)be;
    return (size_t)(n > 0 ? n : 1) * (size_t)(V > 0 ? V : 1) * 8;
}

static void cuda_sample(backend *be, int32_t *ids, const float *logits, int ld, int n, int V, float temperature,
                        int top_k, float top_p, const double *u, void *work) {
    if (n <= 0) return;
    sample_kernel<<<(unsigned)n, SMP_THREADS, 0, stream_of(be)>>>(ids, logits, ld, V, temperature, top_k, top_p, u,
                                                                  (uint64_t *)work);
    cuda_check_launch();
}

extern "C" const struct decode_kernels decode_kernels_cuda = {
    DECODE_OPS(OP_FILL, cuda_).attention_head_dim_max = OPS_DECODE_HD_MAX};
