// ops_moe_cuda.cu: the CUDA kernels of the mixture-of-experts ops (see ops_moe.h and ops_moe_cuda.h).
//
// Written C-style, as ops_hybrid_cuda.cu: bf16 activations and weights, fp32 routing and every sum;
// all work on the backend's stream, nothing waits for it and nothing is read back to the host (the
// expert counts stay on the device: the grouped GEMM reads offsets there). int64 indices where a
// product of two sizes can pass 2^31; grid-stride loops.
//
// Routing, four steps on the stream:
//   memset    offsets = 0
//   topk      a warp per token: max, exp, sum, divide (the CPU's softmax), then k rounds of a warp
//             argmax over (p descending, id ascending), the winner marked taken; the counts by
//             atomicAdd into offsets[e + 1] (integers: the order of the adds does not matter)
//   scan      one warp: offsets = the prefix sums of the counts
//   scatter   a block per expert: the R (token, choice) rows in order, a block-wide prefix count of
//             the rows that chose it, so its rows are placed in token order (the stable sort by
//             (expert, token) of the CPU's counting sort)
// The grouped GEMM: a block per (64-row tile of one expert, 64-column tile), bf16 tensor cores
// (wmma 16x16x16, fp32 accumulation) over 32-wide slices of K staged in shared memory. The grid's x
// dimension enumerates the non-empty row tiles of all experts in expert order; it is sized from
// bounds (E * ceil(max_rows / 64) and ceil(R / 64) + E tiles, whichever is smaller), and each block
// finds its (expert, tile) from offsets on the device; blocks past the last tile exit at once.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include <cuda_bf16.h>
#include <mma.h>

#include "common/backend/backend_cuda.h"
#include "common/backend/check_cuda.h"
#include "common/kernels/ops_moe_cuda.h"

typedef __nv_bfloat16 bf16;
using namespace nvcuda;

#include "common/kernels/cuda_launch.cuh"
#include "common/kernels/cuda_reduce.cuh"

#define MOE_THREADS 256
// (stream_of, grid_for, ceil_div, GRID_STRIDE, bf: common/kernels/cuda_launch.cuh)

static __device__ __forceinline__ int warp_min_int(int v) {
    for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}

// inclusive prefix sum over the warp's lanes
static __device__ __forceinline__ int warp_scan_int(int v) {
    int lane = threadIdx.x % 32;
    for (int o = 1; o < 32; o <<= 1) {
        int u = __shfl_up_sync(FULL_MASK, v, o);
        if (lane >= o) v += u;
    }
    return v;
}

// ---------------------------------------------------------------------------- routing

// One warp per token; p [E] of each warp in shared memory, lane l owning experts l, l + 32, ...
// (only it reads and writes them: no barrier). Taken experts get p = -1 (every p is >= 0).
static __global__ void topk_kernel(const float *logits, int T, int E, int k, int renorm, int32_t *topk_idx,
                                   float *topk_w, int32_t *counts) {
    extern __shared__ float moe_p[];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    float *p = moe_p + (size_t)warp * E;
    for (int64_t t = (int64_t)blockIdx.x * warps + warp; t < T; t += (int64_t)gridDim.x * warps) {
        const float *l = logits + t * E;
        float m = -INFINITY, s = 0.0f;
        for (int e = lane; e < E; e += 32) m = fmaxf(m, l[e]);
        m = warp_max(m);
        for (int e = lane; e < E; e += 32) {
            p[e] = expf(l[e] - m);
            s += p[e];
        }
        s = warp_sum(s);
        for (int e = lane; e < E; e += 32) p[e] /= s;
        float sum = 0.0f; // lane 0: the chosen p in order j, as the CPU sums them
        for (int j = 0; j < k; j++) {
            float bp = -1.0f;
            int be_ = E; // lane's best: experts visited in ascending id, strict > keeps the lower on a tie
            for (int e = lane; e < E; e += 32)
                if (p[e] > bp) {
                    bp = p[e];
                    be_ = e;
                }
            for (int o = 16; o > 0; o >>= 1) {
                float op = __shfl_xor_sync(FULL_MASK, bp, o);
                int oe = __shfl_xor_sync(FULL_MASK, be_, o);
                if (op > bp || (op == bp && oe < be_)) {
                    bp = op;
                    be_ = oe;
                }
            }
            if (be_ % 32 == lane) p[be_] = -1.0f;
            if (lane == 0) {
                topk_idx[t * k + j] = be_;
                topk_w[t * k + j] = bp;
                sum += bp;
                atomicAdd(&counts[be_ + 1], 1);
            }
        }
        if (renorm && lane == 0)
            for (int j = 0; j < k; j++) topk_w[t * k + j] /= sum;
    }
}

// One warp: offsets[1..E] (the counts) to their inclusive prefix sums; offsets[0] is 0.
static __global__ void scan_kernel(int32_t *offsets, int E) {
    int lane = threadIdx.x, carry = 0;
    for (int e0 = 1; e0 <= E; e0 += 32) {
        int e = e0 + lane;
        int v = warp_scan_int(e <= E ? offsets[e] : 0) + carry;
        if (e <= E) offsets[e] = v;
        carry = __shfl_sync(FULL_MASK, v, 31);
    }
}

// One block per expert (grid-stride): the rows r = t*k + j in order, 256 at a time; a row that chose
// the expert goes to offsets[e] + (the number of earlier rows that did).
static __global__ void scatter_kernel(const int32_t *topk_idx, const int32_t *offsets, int E, int R, int k,
                                      int32_t *perm, int32_t *slot) {
    __shared__ int warp_tot[MOE_THREADS / 32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int e = blockIdx.x; e < E; e += gridDim.x) {
        int base = offsets[e];
        for (int r0 = 0; r0 < R; r0 += MOE_THREADS) {
            int r = r0 + threadIdx.x;
            int f = r < R && topk_idx[r] == e;
            int incl = warp_scan_int(f);
            __syncthreads(); // warp_tot of the previous tile is read
            if (lane == 31) warp_tot[warp] = incl;
            __syncthreads();
            int before = 0, total = 0;
            for (int w = 0; w < MOE_THREADS / 32; w++) {
                before += w < warp ? warp_tot[w] : 0;
                total += warp_tot[w];
            }
            if (f) {
                int pos = base + before + incl - 1;
                perm[pos] = r / k;
                slot[r] = pos;
            }
            base += total;
        }
    }
}

extern "C" size_t cuda_moe_route_work_bytes(const backend *be, int T, int E, int k) {
    return 0; // the counts are accumulated in offsets itself
}

extern "C" void cuda_moe_route(backend *be, const float *logits, int T, int E, int k, int renorm, int32_t *topk_idx,
                               float *topk_w, int32_t *offsets, int32_t *perm, int32_t *slot, void *work) {
    cudaStream_t st = stream_of(be);
    cuda_check(cudaMemsetAsync(offsets, 0, (size_t)(E + 1) * sizeof(int32_t), st));
    if (T <= 0) return;
    int warps = 8;
    while (warps > 1 && (size_t)warps * E * sizeof(float) > 32 * 1024) warps /= 2;
    size_t smem = (size_t)warps * E * sizeof(float);
    if (smem > 48 * 1024) fatal("moe route on CUDA: %d experts exceed the shared memory of one warp's softmax", E);
    int64_t blocks = ((int64_t)T + warps - 1) / warps;
    topk_kernel<<<(unsigned)(blocks < (1 << 20) ? blocks : (1 << 20)), warps * 32, smem, st>>>(
        logits, T, E, k, renorm, topk_idx, topk_w, offsets);
    cuda_check_launch();
    scan_kernel<<<1, 32, 0, st>>>(offsets, E);
    cuda_check_launch();
    scatter_kernel<<<(unsigned)(E < 65535 ? E : 65535), MOE_THREADS, 0, st>>>(topk_idx, offsets, E, T * k, k, perm,
                                                                             slot);
    cuda_check_launch();
}

static __global__ void gather_kernel(bf16 *xs, const bf16 *x, const int32_t *perm, int R, int H) {
    GRID_STRIDE(i, (int64_t)R * H) xs[i] = x[(int64_t)perm[i / H] * H + i % H];
}

extern "C" void cuda_moe_gather(backend *be, void *xs, const void *x, const int32_t *perm, int R, int H) {
    if (R <= 0 || H <= 0) return;
    gather_kernel<<<grid_for_threads((int64_t)R * H, MOE_THREADS), MOE_THREADS, 0, stream_of(be)>>>((bf16 *)xs, (const bf16 *)x, perm,
                                                                                 R, H);
    cuda_check_launch();
}

// ---------------------------------------------------------------------------- grouped GEMM
//
// A block of 4 warps computes a 64 x 64 tile of y (warp (wm, wn) the 32 x 32 quarter at rows 32 wm,
// columns 32 wn: 2 x 2 fragments). Per 32-wide slice of K the block stages the x rows of its tile
// (As [row][k]) and the W rows of its columns (Bs [col][k], which is W^T column-major for wmma) in
// shared memory, zero past the expert's rows, past N and past K; then the accumulators go through
// shared memory (Cs) to the rows of the tile that exist. K % 8 == 0 stages 8 bf16 (16 bytes) a load.
#define MG_BM 64
#define MG_BN 64
#define MG_BK 32
#define MG_LDS (MG_BK + 8)  // bf16; 80 bytes a row: a multiple of 16 (wmma), rows off the same banks
#define MG_LDC (MG_BN + 4)  // floats
#define MG_THREADS 128

template <int VEC>
static __device__ __forceinline__ void mg_stage(bf16 (*S)[MG_LDS], const bf16 *src, int rows, int K, int k0) {
    if (VEC) {
        for (int u = threadIdx.x; u < MG_BM * MG_BK / 8; u += MG_THREADS) {
            int r = u / (MG_BK / 8), c = u % (MG_BK / 8) * 8;
            uint4 v = make_uint4(0, 0, 0, 0);
            if (r < rows && k0 + c < K) v = *(const uint4 *)(src + (int64_t)r * K + k0 + c);
            *(uint4 *)(S[r] + c) = v;
        }
    } else {
        for (int u = threadIdx.x; u < MG_BM * MG_BK; u += MG_THREADS) {
            int r = u / MG_BK, c = u % MG_BK;
            S[r][c] = r < rows && k0 + c < K ? src[(int64_t)r * K + k0 + c] : __float2bfloat16(0.0f);
        }
    }
}

template <int VEC>
static __global__ void __launch_bounds__(MG_THREADS)
    moe_gemm_kernel(bf16 *y, const bf16 *x, const bf16 *W, const int32_t *offsets, int E, int N, int K) {
    __shared__ __align__(128) bf16 As[MG_BM][MG_LDS];
    __shared__ __align__(128) bf16 Bs[MG_BN][MG_LDS];
    __shared__ __align__(128) float Cs[MG_BM][MG_LDC];
    __shared__ int s_e, s_tile;
    int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    // this block's row tile: the blockIdx.x-th non-empty tile counting expert by expert (warp 0)
    if (warp == 0) {
        int target = blockIdx.x, base = 0, fe = -1, ft = 0;
        for (int e0 = 0; e0 < E && fe < 0; e0 += 32) {
            int e = e0 + lane;
            int n = e < E ? offsets[e + 1] - offsets[e] : 0;
            int tiles = (n + MG_BM - 1) / MG_BM;
            int incl = warp_scan_int(tiles);
            int first = base + incl - tiles;
            int hit = warp_min_int(target >= first && target < base + incl ? lane : 32);
            int hit_first = __shfl_sync(FULL_MASK, first, hit < 32 ? hit : 0);
            if (hit < 32) {
                fe = e0 + hit;
                ft = target - hit_first;
            }
            base += __shfl_sync(FULL_MASK, incl, 31);
        }
        if (lane == 0) {
            s_e = fe;
            s_tile = ft;
        }
    }
    __syncthreads();
    int e = s_e;
    if (e < 0) return; // past the last tile (the grid is an upper bound)
    int r0 = offsets[e] + s_tile * MG_BM, rows = min(MG_BM, offsets[e + 1] - r0);
    int n0 = blockIdx.y * MG_BN, cols = min(MG_BN, N - n0);
    const bf16 *A = x + (int64_t)r0 * K, *B = W + ((int64_t)e * N + n0) * K;
    int wm = warp / 2, wn = warp % 2;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> c[2][2];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) wmma::fill_fragment(c[i][j], 0.0f);
    for (int k0 = 0; k0 < K; k0 += MG_BK) {
        mg_stage<VEC>(As, A, rows, K, k0);
        mg_stage<VEC>(Bs, B, cols, K, k0);
        __syncthreads();
        for (int kk = 0; kk < MG_BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> fb[2];
            for (int i = 0; i < 2; i++) wmma::load_matrix_sync(fa[i], &As[wm * 32 + 16 * i][kk], MG_LDS);
            for (int j = 0; j < 2; j++) wmma::load_matrix_sync(fb[j], &Bs[wn * 32 + 16 * j][kk], MG_LDS);
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < 2; j++) wmma::mma_sync(c[i][j], fa[i], fb[j], c[i][j]);
        }
        __syncthreads(); // the slice is consumed before the next one is staged
    }
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            wmma::store_matrix_sync(&Cs[wm * 32 + 16 * i][wn * 32 + 16 * j], c[i][j], MG_LDC, wmma::mem_row_major);
    __syncthreads();
    for (int u = tid; u < MG_BM * MG_BN; u += MG_THREADS) {
        int r = u / MG_BN, cc = u % MG_BN;
        if (r < rows && cc < cols) y[(int64_t)(r0 + r) * N + n0 + cc] = __float2bfloat16(Cs[r][cc]);
    }
}

extern "C" void cuda_moe_gemm(backend *be, void *y, const void *x, const void *W, const int32_t *offsets, int E,
                              int R, int N, int K, int max_rows) {
    if (R <= 0 || N <= 0 || E <= 0) return;
    if (max_rows <= 0 || max_rows > R) max_rows = R;
    int64_t by_rows = (int64_t)E * ((max_rows + MG_BM - 1) / MG_BM), by_total = (R + MG_BM - 1) / MG_BM + (int64_t)E;
    int64_t tiles = by_rows < by_total ? by_rows : by_total, col_tiles = (N + MG_BN - 1) / MG_BN;
    if (tiles > 0x7fffffff || col_tiles > 65535) fatal("moe gemm on CUDA: [%d, %d] x %d experts exceed the grid", R, N, E);
    dim3 grid((unsigned)tiles, (unsigned)col_tiles);
    // 16-byte staging needs K % 8 == 0 and 16-byte aligned bases (rows then stay aligned)
    int vec = K % 8 == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)W % 16 == 0;
    void (*kernel)(bf16 *, const bf16 *, const bf16 *, const int32_t *, int, int, int) =
        vec ? moe_gemm_kernel<1> : moe_gemm_kernel<0>;
    kernel<<<grid, MG_THREADS, 0, stream_of(be)>>>((bf16 *)y, (const bf16 *)x, (const bf16 *)W, offsets, E, N, K);
    cuda_check_launch();
}

// ---------------------------------------------------------------------------- elementwise

static __global__ void swiglu_packed_kernel(bf16 *out, const bf16 *gu, int R, int I) {
    GRID_STRIDE(u, (int64_t)R * I) {
        int64_t r = u / I, i = u % I;
        float g = bf(gu[r * 2 * I + i]), v = bf(gu[r * 2 * I + I + i]);
        out[u] = __float2bfloat16(g / (1.0f + expf(-g)) * v);
    }
}

extern "C" void cuda_swiglu_packed(backend *be, void *out, const void *gu, int R, int I) {
    if (R <= 0 || I <= 0) return;
    swiglu_packed_kernel<<<grid_for_threads((int64_t)R * I, MOE_THREADS), MOE_THREADS, 0, stream_of(be)>>>((bf16 *)out,
                                                                                        (const bf16 *)gu, R, I);
    cuda_check_launch();
}

// One thread per (token, column): the k terms in ascending expert id (the CPU's selection), fp32.
static __global__ void combine_kernel(bf16 *y, const bf16 *ys, const int32_t *slot, const int32_t *topk_idx,
                                      const float *topk_w, int T, int k, int H) {
    GRID_STRIDE(u, (int64_t)T * H) {
        int64_t t = u / H, h = u % H;
        const int32_t *idx = topk_idx + t * k;
        float acc = 0.0f;
        int last = -1;
        for (int step = 0; step < k; step++) {
            int jm = -1;
            for (int j = 0; j < k; j++)
                if (idx[j] > last && (jm < 0 || idx[j] < idx[jm])) jm = j;
            last = idx[jm];
            acc += topk_w[t * k + jm] * bf(ys[(int64_t)slot[t * k + jm] * H + h]);
        }
        y[u] = __float2bfloat16(acc);
    }
}

extern "C" void cuda_moe_combine(backend *be, void *y, const void *ys, const int32_t *slot, const int32_t *topk_idx,
                                 const float *topk_w, int T, int k, int H) {
    if (T <= 0 || H <= 0) return;
    combine_kernel<<<grid_for_threads((int64_t)T * H, MOE_THREADS), MOE_THREADS, 0, stream_of(be)>>>(
        (bf16 *)y, (const bf16 *)ys, slot, topk_idx, topk_w, T, k, H);
    cuda_check_launch();
}

static __global__ void sigmoid_gate_add_kernel(bf16 *y, const bf16 *s, const bf16 *g, int T, int H) {
    GRID_STRIDE(u, (int64_t)T * H) {
        float a = 1.0f / (1.0f + expf(-bf(g[u / H])));
        y[u] = __float2bfloat16(bf(y[u]) + a * bf(s[u]));
    }
}

extern "C" void cuda_sigmoid_gate_add(backend *be, void *y, const void *s, const void *g, int T, int H) {
    if (T <= 0 || H <= 0) return;
    sigmoid_gate_add_kernel<<<grid_for_threads((int64_t)T * H, MOE_THREADS), MOE_THREADS, 0, stream_of(be)>>>(
        (bf16 *)y, (const bf16 *)s, (const bf16 *)g, T, H);
    cuda_check_launch();
}
