// topk_lse_cuda.cu: the running top-k and log-sum-exp of topk_lse.h in CUDA: the kernels, their
// launchers (exported through topk_lse_cuda.h for the fused loss) and topk_lse_kernels_cuda, the
// CUDA backend's table. All fp32; on the backend's stream, nothing waits for it. The CPU twin
// (topk_lse_cpu.c) is the reference: the same order of the list, the same LSE up to fp32 sums.
#include <math.h>
#include <stdint.h>

#include <cuda_bf16.h>

#include "common/backend/backend_cuda.h"
#include "common/backend/check_cuda.h"
#include "common/core/check.h"
#include "common/kernels/topk_lse.h"
#include "common/kernels/topk_lse_cuda.h"

typedef __nv_bfloat16 bf16;

#include "common/kernels/cuda_launch.cuh"
#include "common/kernels/cuda_reduce.cuh"

// (stream_of, grid_for, ceil_div, GRID_STRIDE, bf: common/kernels/cuda_launch.cuh; warp_sum,
// warp_max, block_sum, block_max: common/kernels/cuda_reduce.cuh)

#define EW_THREADS 256

// ---------------------------------------------------------------------------- top-k and LSE
//
// The running state per row: m, s (LSE = m + log s) and the top-k list (val, idx), sorted by value
// descending, equal values by lower id first, unused slots (-inf, -1) last — cpu_topk_lse_update's
// order exactly.
//
// The update of one row is one block. That order is a total order on 64-bit keys:
//     key(x, id) = ordered(x) << 32 | (0xFFFFFFFF - (uint32)id)
// where ordered() maps floats to uint32 monotonically (-0 is made +0 first, because the CPU's
// comparisons treat them as equal), so a larger value, then a smaller id, gives a larger key; the
// unused slot (-inf, -1) gets the smallest key of any -inf (a real -inf logit displaces it, as on
// the CPU). NaN gets key 0, below everything, so it never enters (the CPU's comparisons are false
// for NaN). Ids are unique within a tile, so the tile's keys are distinct.
//
// 1. LSE: the tile's max and sum of exp(x - m') in fp32 (block reductions), merged into (m, s).
// 2. Top-k: only tile entries whose key beats the list's last key can enter. A radix select (8 bits
//    at a time, most significant first) over those keys finds the k-th largest (or takes them all
//    when there are at most k), usually within 3-4 passes over the tile; the chosen <= k keys are
//    compacted next to the k list keys in shared memory, bitonic-sorted descending, and the first k
//    decoded back into (val, idx).
#define TK_THREADS 256
#define TK_SORT (2 * OPS_TOPK_MAX) // list + candidates, a power of two

static __device__ uint64_t topk_key(float x, int32_t id) {
    if (x != x) return 0; // NaN
    if (x == 0.0f) x = 0.0f; // -0 -> +0
    uint32_t u = __float_as_uint(x);
    uint32_t ord = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((uint64_t)ord << 32) | (uint64_t)(0xFFFFFFFFu - (uint32_t)id);
}

static __device__ float topk_key_val(uint64_t key) {
    uint32_t ord = (uint32_t)(key >> 32);
    return __uint_as_float((ord & 0x80000000u) ? (ord & 0x7FFFFFFFu) : ~ord);
}

static __device__ int32_t topk_key_id(uint64_t key) { return (int32_t)(0xFFFFFFFFu - (uint32_t)key); }

static __global__ void __launch_bounds__(TK_THREADS)
    topk_lse_update_kernel(const float *logits, int ld, int v0, int R, int Vc, int k, float *val, int32_t *idx,
                           float *m, float *s) {
    __shared__ float red[32];
    __shared__ unsigned hist[256];
    __shared__ unsigned long long keys[TK_SORT];
    __shared__ unsigned long long sel_prefix, sel_mask, sel_lo;
    __shared__ int sel_need, sel_done, n_cand;
    int tid = threadIdx.x;

    for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
        const float *x = logits + r * ld;
        float *tv = val + r * k;
        int32_t *ti = idx + r * k;

        // 1. LSE. nm = -inf means every value so far is -inf (or NaN): the sum stays 0, so that
        // lse = -inf + log 0 = -inf, instead of exp(-inf - -inf) = NaN.
        float lmax = -INFINITY;
        for (int j = tid; j < Vc; j += blockDim.x) lmax = fmaxf(lmax, x[j]); // fmaxf skips NaN, like the CPU's '>'
        float m_old = m[r], s_old = s[r];
        float nm = fmaxf(block_max(lmax, red), m_old);
        float part = 0.0f;
        if (nm != -INFINITY)
            for (int j = tid; j < Vc; j += blockDim.x) part += expf(x[j] - nm);
        float tsum = block_sum(part, red);
        if (tid == 0) {
            float sum = m_old == -INFINITY ? 0.0f : s_old * expf(m_old - nm);
            m[r] = nm;
            s[r] = nm == -INFINITY ? 0.0f : sum + tsum;
        }

        // 2. top-k: radix select over the keys that beat the list's last entry
        uint64_t thr = topk_key(tv[k - 1], ti[k - 1]);
        if (tid == 0) {
            sel_prefix = 0;
            sel_mask = 0;
            sel_lo = 0;
            sel_need = k;
            sel_done = 0;
            n_cand = 0;
        }
        for (int shift = 56; shift >= 0; shift -= 8) {
            for (int i = tid; i < 256; i += blockDim.x) hist[i] = 0;
            __syncthreads(); // hist zeroed; sel_* of the previous pass visible
            uint64_t prefix = sel_prefix, mask = sel_mask;
            for (int j = tid; j < Vc; j += blockDim.x) {
                uint64_t key = topk_key(x[j], v0 + j);
                if (key > thr && (key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
            }
            __syncthreads(); // hist complete
            if (tid == 0) {
                unsigned need = (unsigned)sel_need, above = 0;
                if (shift == 56) {
                    unsigned total = 0;
                    for (int b = 0; b < 256; b++) total += hist[b];
                    if (total <= need) sel_done = 1; // take every key > thr: sel_lo stays 0
                }
                if (!sel_done) {
                    int b = 255;
                    while (above + hist[b] < need) above += hist[b--]; // stops: the bins hold > need keys
                    need -= above; // keys still to take from bin b (the higher bins are all taken)
                    sel_prefix = prefix | ((uint64_t)b << shift);
                    sel_mask = mask | ((uint64_t)255u << shift);
                    sel_need = (int)need;
                    // the whole bin is taken: the threshold is the bin's lowest possible key; at the
                    // last digit the bin holds one key (keys are distinct), so this always ends
                    if (hist[b] == need || shift == 0) {
                        sel_lo = sel_prefix;
                        sel_done = 1;
                    }
                }
            }
            __syncthreads(); // sel_* visible; hist free for the next pass
            if (sel_done) break;
        }
        // candidates: the list's k keys, then the chosen tile keys (at most k), then zeros
        int n_sort = 2;
        while (n_sort < 2 * k) n_sort <<= 1;
        for (int i = tid; i < n_sort; i += blockDim.x) keys[i] = i < k ? topk_key(tv[i], ti[i]) : 0ull;
        __syncthreads();
        uint64_t lo = sel_lo;
        for (int j = tid; j < Vc; j += blockDim.x) {
            uint64_t key = topk_key(x[j], v0 + j);
            if (key > thr && key >= lo) {
                int p = atomicAdd(&n_cand, 1);
                if (p < k) keys[k + p] = key; // p < k always (distinct keys); the test guards shared memory
            }
        }
        __syncthreads();
        if (n_cand > 0) { // block-uniform; nothing entered otherwise
            // bitonic sort, descending: pair (a, a + stride) within runs of `size`, direction by run
            for (int size = 2; size <= n_sort; size <<= 1) {
                for (int stride = size / 2; stride > 0; stride >>= 1) {
                    for (int i = tid; i < n_sort / 2; i += blockDim.x) {
                        int a = 2 * i - (i & (stride - 1)), b = a + stride;
                        uint64_t ka = keys[a], kb = keys[b];
                        int descending = (a & size) == 0;
                        if (descending ? ka < kb : ka > kb) {
                            keys[a] = kb;
                            keys[b] = ka;
                        }
                    }
                    __syncthreads();
                }
            }
            for (int i = tid; i < k; i += blockDim.x) {
                tv[i] = topk_key_val(keys[i]);
                ti[i] = topk_key_id(keys[i]);
            }
        }
        __syncthreads(); // the shared state is reused by the next row of this block
    }
}

static __global__ void topk_lse_init_kernel(float *val, int32_t *idx, float *m, float *s, int R, int k) {
    GRID_STRIDE(i, (int64_t)R * k) {
        val[i] = -INFINITY;
        idx[i] = -1;
        if (i % k == 0) {
            m[i / k] = -INFINITY;
            s[i / k] = 0.0f;
        }
    }
}

static __global__ void topk_lse_finish_kernel(float *lse, const float *m, const float *s, int R) {
    GRID_STRIDE(i, R) lse[i] = m[i] + logf(s[i]);
}

extern "C" void cuda_topk_lse_init(backend *be, float *val, int32_t *idx, float *m, float *s, int R, int k) {
    if (R <= 0) return;
    if (k < 1 || k > OPS_TOPK_MAX) fatal("top-k %d outside [1, %d]", k, OPS_TOPK_MAX);
    topk_lse_init_kernel<<<grid_for(ceil_div((int64_t)R * k, EW_THREADS)), EW_THREADS, 0, stream_of(be)>>>(val, idx, m,
                                                                                                         s, R, k);
    cuda_check_launch();
}

extern "C" void cuda_topk_lse_update(backend *be, const float *logits, int ld, int v0, int R, int Vc, int k,
                                     float *val, int32_t *idx, float *m, float *s) {
    if (R <= 0 || Vc <= 0) return;
    if (k < 1 || k > OPS_TOPK_MAX) fatal("top-k %d outside [1, %d]", k, OPS_TOPK_MAX);
    topk_lse_update_kernel<<<grid_for(R), TK_THREADS, 0, stream_of(be)>>>(logits, ld, v0, R, Vc, k, val, idx, m, s);
    cuda_check_launch();
}

extern "C" void cuda_topk_lse_finish(backend *be, float *lse, const float *m, const float *s, int R) {
    if (R <= 0) return;
    topk_lse_finish_kernel<<<grid_for(ceil_div(R, EW_THREADS)), EW_THREADS, 0, stream_of(be)>>>(lse, m, s, R);
    cuda_check_launch();
}

extern "C" const struct topk_lse_kernels topk_lse_kernels_cuda = {TOPK_LSE_OPS(OP_FILL, cuda_topk_lse_)};
