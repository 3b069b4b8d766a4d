// ops_moe_sigmoid_cuda.cu: the CUDA kernel of ops_moe_sigmoid_route (see ops_moe_sigmoid.h),
// cuda_moe_sigmoid_route (ops_moe_cuda.h), the sigmoid_route of moe_kernels_cuda. fp32 throughout,
// on the backend's stream.
//
// One warp per token (grid-stride over tokens); the warp's b [E] and group scores [G] in shared
// memory, lane l owning experts l, l + 32, ... (and groups l, l + 32, ...):
//   b[e] = sigmoid(logit) + bias (NaN as -inf)
//   groups (when topk_group < G): lane g sums its group's two largest b; topk_group rounds of a
//   warp argmax over the group scores (ties: the lower id), each winner marked taken (NaN); then
//   the experts of the groups not taken get b = -inf
//   k rounds of a warp argmax over b (ties: the lower id), each winner marked taken (NaN); lane 0
//   writes the choice and its weight sigmoid(logit) (the CPU's order: renormalised by the sum in
//   choice order + 1e-20, then scaled)
// Then cuda_moe_group (ops_moe_cuda.cu) sorts the rows by expert exactly as cuda_moe_route does, and
// queues the expert counts' download the grouped GEMMs wait for.
#include <math.h>
#include <stdint.h>

#include <cuda_bf16.h>

#include "common/backend/backend_cuda.h"
#include "common/backend/check_cuda.h"
#include "common/moe/ops_moe_cuda.h"

#include "common/kernels/cuda_launch.cuh"
#include "common/kernels/cuda_reduce.cuh"

static __device__ __forceinline__ float sig(float x) { return 1.0f / (1.0f + expf(-x)); }

// The warp's argmax over v[0..n) of the lane's entries i = lane, lane + 32, ... that are not taken
// (NaN): the largest, ties to the lower index. Every lane returns it; n > 0 entries are never all
// taken here (the host checks k and topk_group), so the result is an index < n.
static __device__ int warp_argmax(const float *v, int n, int lane) {
    float bv = -INFINITY;
    int bi = n;
    for (int i = lane; i < n; i += 32) {
        float x = v[i];
        if (!isnan(x) && (bi == n || x > bv)) bv = x, bi = i;
    }
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(FULL_MASK, bv, o);
        int oi = __shfl_xor_sync(FULL_MASK, bi, o);
        if (oi != n && (bi == n || ov > bv || (ov == bv && oi < bi))) bv = ov, bi = oi;
    }
    return bi;
}

static __global__ void sigmoid_route_kernel(const float *logits, const float *bias, int T, int E, int k, int G, int tg,
                                            int renorm, float scale, int32_t *topk_idx, float *topk_w) {
    extern __shared__ float sg_mem[];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32, per = E / G;
    float *b = sg_mem + (size_t)warp * (E + G), *gs = b + E;
    for (int64_t t = (int64_t)blockIdx.x * warps + warp; t < T; t += (int64_t)gridDim.x * warps) {
        const float *l = logits + t * E;
        for (int e = lane; e < E; e += 32) {
            float v = sig(l[e]) + bias[e];
            b[e] = isnan(v) ? -INFINITY : v;
        }
        __syncwarp();
        if (tg < G) {
            for (int g = lane; g < G; g += 32) {
                float m1 = -INFINITY, m2 = -INFINITY;
                for (int e = g * per; e < (g + 1) * per; e++) {
                    float v = b[e];
                    if (v > m1) m2 = m1, m1 = v;
                    else if (v > m2) m2 = v;
                }
                float s = m1 + m2;
                gs[g] = isnan(s) ? -INFINITY : s;
            }
            __syncwarp();
            for (int j = 0; j < tg; j++) {
                int g = warp_argmax(gs, G, lane);
                __syncwarp(); // every lane has read gs before the mark
                if (lane == 0) gs[g] = NAN;
                __syncwarp();
            }
            for (int e = lane; e < E; e += 32)
                if (!isnan(gs[e / per])) b[e] = -INFINITY; // a group not kept
            __syncwarp();
        }
        float sum = 0.0f; // lane 0: the chosen s in order j, as the CPU sums them
        for (int j = 0; j < k; j++) {
            int e = warp_argmax(b, E, lane);
            __syncwarp();
            if (lane == 0) {
                b[e] = NAN;
                float w = sig(l[e]);
                topk_idx[t * k + j] = e;
                topk_w[t * k + j] = w;
                sum += w;
            }
            __syncwarp();
        }
        if (lane == 0) {
            float den = sum + 1e-20f;
            for (int j = 0; j < k; j++) {
                float w = topk_w[t * k + j];
                topk_w[t * k + j] = (renorm ? w / den : w) * scale;
            }
        }
        __syncwarp(); // b and gs are read by every lane before the next token's writes
    }
}

extern "C" void cuda_moe_sigmoid_route(backend *be, const float *logits, const float *bias, int T, int E, int k,
                                       int n_group, int topk_group, int renorm, float scale, int32_t *topk_idx,
                                       float *topk_w, int32_t *offsets, int32_t *perm, int32_t *slot) {
    if (T > 0) {
        size_t per_warp = ((size_t)E + (size_t)n_group) * sizeof(float);
        int warps = 8;
        while (warps > 1 && (size_t)warps * per_warp > 32 * 1024) warps /= 2;
        size_t smem = (size_t)warps * per_warp;
        if (smem > 48 * 1024)
            fatal("moe sigmoid route on CUDA: %d experts exceed the shared memory of one warp's scores", E);
        int64_t blocks = ((int64_t)T + warps - 1) / warps;
        sigmoid_route_kernel<<<(unsigned)(blocks < (1 << 20) ? blocks : (1 << 20)), warps * 32, smem, stream_of(be)>>>(
            logits, bias, T, E, k, n_group, topk_group, renorm, scale, topk_idx, topk_w);
        cuda_check_launch();
    }
    cuda_moe_group(be, topk_idx, T, E, k, offsets, perm, slot);
}
