// ops_moe_cuda.cu: the CUDA kernels of the mixture-of-experts ops (see ops_moe.h and ops_moe_cuda.h)
// and the CUDA backend's table of them (moe_kernels_cuda, with ops_moe_sigmoid_cuda.cu's router).
//
// Written C-style, as common/kernels' CUDA files: bf16 activations and weights, fp32 routing and every sum;
// all work on the backend's stream. int64 indices where a product of two sizes can pass 2^31;
// grid-stride loops.
//
// Routing, five steps on the stream:
//   memset    offsets = 0
//   topk      a warp per token: max, exp, sum, divide (the CPU's softmax), then k rounds of a warp
//             argmax over (p descending, id ascending), the winner marked taken; the counts by
//             atomicAdd into offsets[e + 1] (integers: the order of the adds does not matter)
//   scan      one warp: offsets = the prefix sums of the counts
//   download  offsets to pinned host memory, asynchronously (the backend's MoE state, below)
//   scatter   a block per expert: the R (token, choice) rows in order, a block-wide prefix count of
//             the rows that chose it, so its rows are placed in token order (the stable sort by
//             (expert, token) of the CPU's counting sort)
// The expert GEMMs: cuBLAS's grouped GEMM (cublasGemmGroupedBatchedEx, cuBLAS 12.5 and later), one
// group per expert with rows, each its exact rows: its pointer arrays written on the device from
// offsets by one small kernel, its sizes (host arrays, as the API takes them) from the downloaded
// counts. So the host waits once per MoE block for the routing (at the first expert GEMM), never
// per expert, and nothing else is read back.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include <cuda_bf16.h>

#include "common/backend/backend_cuda.h"
#include "common/backend/check_cuda.h"
#include "common/moe/ops_moe.h"
#include "common/moe/ops_moe_cuda.h"

#if CUBLAS_VER_MAJOR * 100 + CUBLAS_VER_MINOR < 1205
#error "the MoE expert GEMMs need cuBLAS 12.5 or later (cublasGemmGroupedBatchedEx): build with CUDA 12.5+"
#endif

typedef __nv_bfloat16 bf16;

#include "common/kernels/cuda_launch.cuh"
#include "common/kernels/cuda_reduce.cuh"

#define MOE_THREADS 256
// (stream_of, grid_for, ceil_div, GRID_STRIDE, bf: common/kernels/cuda_launch.cuh)

// inclusive prefix sum over the warp's lanes
static __device__ __forceinline__ int warp_scan_int(int v) {
    int lane = threadIdx.x % 32;
    for (int o = 1; o < 32; o <<= 1) {
        int u = __shfl_up_sync(FULL_MASK, v, o);
        if (lane >= o) v += u;
    }
    return v;
}

// ---------------------------------------------------------------------------- the backend's MoE state
//
// cuBLAS's grouped GEMM takes each group's sizes from host memory, so the expert counts come to the
// host once per MoE block: ops_moe_route downloads offsets into a pinned buffer after its scan
// (asynchronously, an event after it); the first expert GEMM waits for that event (by then the
// route's scatter and the gather queued after it run), the second finds the counts there. The
// download stands for that offsets buffer from the route to ops_moe_combine, which ends the block;
// a GEMM on any other offsets (or after the combine) downloads them itself, and waits at once.
#define MOE_HOST_ARRAYS 10 // m, n, k, lda (= ldb), ldc, group_size, transa, transb, alpha, beta

typedef struct {
    int cap;                 // experts the buffers hold
    int32_t *h_off;          // pinned [cap + 1]: the downloaded offsets
    const int32_t *src;      // the device offsets h_off holds (NULL: none)
    int src_E, pending;      // their expert count; 1 while the download is not waited for
    cudaEvent_t ready;       // recorded after the download
    void **d_ptrs;           // device [3 cap]: the grouped GEMM's A, B and C pointer arrays
    int *h_arrays;           // host [MOE_HOST_ARRAYS cap]: its per-group sizes and scalars
} moe_state;
static_assert(sizeof(cublasOperation_t) == sizeof(int) && sizeof(float) == sizeof(int),
              "the grouped GEMM's host arrays share one int block");

// moe_state_free: cuda_close's call (cuda_op_state_set); every use of the buffers is on the stream,
// which cuda_close has synchronised.
static void moe_state_free(backend *be, void *p) {
    moe_state *st = (moe_state *)p;
    cuda_check(cudaEventDestroy(st->ready));
    cuda_check(cudaFreeHost(st->h_off));
    cuda_check(cudaFree(st->d_ptrs));
    free(st->h_arrays);
    free(st);
}

// moe_state_get: the backend's state with room for E experts (grown, after the stream has drained:
// a pending download or GEMM may still use the old buffers; once per model at most).
static moe_state *moe_state_get(backend *be, int E) {
    moe_state *st = (moe_state *)cuda_op_state(be, CUDA_OP_STATE_MOE);
    if (st && st->cap >= E) return st;
    if (!st) {
        st = (moe_state *)xcalloc(1, sizeof *st);
        cuda_check(cudaEventCreateWithFlags(&st->ready, cudaEventDisableTiming));
        cuda_op_state_set(be, CUDA_OP_STATE_MOE, st, moe_state_free);
    } else {
        cuda_check(cudaStreamSynchronize(stream_of(be)));
    }
    int cap = E > 64 ? E : 64;
    cuda_check(cudaFreeHost(st->h_off));
    cuda_check(cudaFree(st->d_ptrs));
    free(st->h_arrays);
    cuda_check(cudaHostAlloc((void **)&st->h_off, ((size_t)cap + 1) * sizeof(int32_t), cudaHostAllocDefault));
    cuda_check(cudaMalloc((void **)&st->d_ptrs, (size_t)3 * cap * sizeof(void *)));
    st->h_arrays = (int *)xmalloc((size_t)MOE_HOST_ARRAYS * cap * sizeof(int));
    st->cap = cap;
    st->src = NULL; // the downloaded counts went with the old buffer
    st->pending = 0;
    return st;
}

// moe_counts_download: offsets [E + 1] to the pinned h_off, asynchronously, behind what the stream
// holds; the event `ready` after it (cuda_moe_gemm waits for it).
static void moe_counts_download(backend *be, moe_state *st, const int32_t *offsets, int E) {
    cudaStream_t s = stream_of(be);
    cuda_check(cudaMemcpyAsync(st->h_off, offsets, ((size_t)E + 1) * sizeof(int32_t), cudaMemcpyDeviceToHost, s));
    cuda_check(cudaEventRecord(st->ready, s));
    st->src = offsets;
    st->src_E = E;
    st->pending = 1;
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

static size_t cuda_moe_route_work_bytes(const backend *be, int T, int E, int k) {
    return 0; // the counts are accumulated in offsets itself
}

// After the scan the counts are final: their download goes before the scatter, so that the host
// (waiting in the first expert GEMM) wakes while the scatter and the gather run.
static void cuda_moe_route(backend *be, const float *logits, int T, int E, int k, int renorm, int32_t *topk_idx,
                           float *topk_w, int32_t *offsets, int32_t *perm, int32_t *slot, void *work) {
    cudaStream_t st = stream_of(be);
    moe_state *ms = moe_state_get(be, E); // (grows before anything is queued: it drains the stream)
    cuda_check(cudaMemsetAsync(offsets, 0, (size_t)(E + 1) * sizeof(int32_t), st));
    if (T > 0) {
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
    }
    moe_counts_download(be, ms, offsets, E); // for the expert GEMMs
    if (T > 0) {
        scatter_kernel<<<(unsigned)(E < 65535 ? E : 65535), MOE_THREADS, 0, st>>>(topk_idx, offsets, E, T * k, k,
                                                                                 perm, slot);
        cuda_check_launch();
    }
}

// One thread per routed row: its expert's count (the atomicAdd of topk_kernel, for routes chosen by
// another kernel: cuda_moe_group).
static __global__ void count_kernel(const int32_t *topk_idx, int64_t R, int32_t *counts) {
    GRID_STRIDE(r, R) atomicAdd(&counts[topk_idx[r] + 1], 1);
}

// cuda_moe_route's grouping of a route chosen elsewhere (ops_moe_sigmoid_route): the counts, the
// scan, the download the expert GEMMs wait for, the scatter, as cuda_moe_route runs them.
extern "C" void cuda_moe_group(backend *be, const int32_t *topk_idx, int T, int E, int k, int32_t *offsets,
                               int32_t *perm, int32_t *slot) {
    cudaStream_t st = stream_of(be);
    moe_state *ms = moe_state_get(be, E); // (grows before anything is queued: it drains the stream)
    cuda_check(cudaMemsetAsync(offsets, 0, (size_t)(E + 1) * sizeof(int32_t), st));
    int64_t R = (int64_t)T * k;
    if (R > 0) {
        count_kernel<<<grid_for_threads(R, MOE_THREADS), MOE_THREADS, 0, st>>>(topk_idx, R, offsets);
        cuda_check_launch();
        scan_kernel<<<1, 32, 0, st>>>(offsets, E);
        cuda_check_launch();
    }
    moe_counts_download(be, ms, offsets, E); // for the expert GEMMs
    if (R > 0) {
        scatter_kernel<<<(unsigned)(E < 65535 ? E : 65535), MOE_THREADS, 0, st>>>(topk_idx, offsets, E, (int)R, k,
                                                                                 perm, slot);
        cuda_check_launch();
    }
}

static __global__ void gather_kernel(bf16 *xs, const bf16 *x, const int32_t *perm, int R, int H) {
    GRID_STRIDE(i, (int64_t)R * H) xs[i] = x[(int64_t)perm[i / H] * H + i % H];
}

static void cuda_moe_gather(backend *be, void *xs, const void *x, const int32_t *perm, int R, int H) {
    if (R <= 0 || H <= 0) return;
    gather_kernel<<<grid_for_threads((int64_t)R * H, MOE_THREADS), MOE_THREADS, 0, stream_of(be)>>>((bf16 *)xs, (const bf16 *)x, perm,
                                                                                 R, H);
    cuda_check_launch();
}

// ---------------------------------------------------------------------------- grouped GEMM
//
// One cublasGemmGroupedBatchedEx per call: a group per expert with rows, in ascending expert id.
// Row-major y_e [n_e, N] = x_e [n_e, K] W_e^T is, read column-major, C [N, n_e] = op(A) B with
// A = W_e ([K, N] column-major, lda K, transposed), B = x_e ([K, n_e], ldb K), C = y_e (ldc N):
// m = N, n = n_e, k = K. bf16 A, B and C, fp32 compute and scale (a combination the grouped API
// supports). Its sizes are host arrays; its A, B, C pointer arrays device arrays, written here by
// moe_ptrs_kernel from offsets on the device. Pointers: 16-byte aligned when K % 8 == 0 (the bases
// are cudaMalloc'd or arena rows of 256-byte multiples), 4-byte when K is even: the API's rule.

static __global__ void moe_ptrs_kernel(const int32_t *offsets, int E, const bf16 *W, const bf16 *x, bf16 *y, int N,
                                       int K, const void **A, const void **B, void **C) {
    int lane = threadIdx.x, carry = 0;
    for (int e0 = 0; e0 < E; e0 += 32) {
        int e = e0 + lane;
        int rows = e < E ? offsets[e + 1] - offsets[e] : 0;
        int f = rows > 0, incl = warp_scan_int(f);
        if (f) {
            int g = carry + incl - 1; // the group: experts with rows, in ascending id
            A[g] = W + (int64_t)e * N * K;
            B[g] = x + (int64_t)offsets[e] * K;
            C[g] = y + (int64_t)offsets[e] * N;
        }
        carry += __shfl_sync(FULL_MASK, incl, 31);
    }
}

static void cuda_moe_gemm(backend *be, void *y, const void *x, const void *W, const int32_t *offsets, int E, int R,
                          int N, int K, int max_rows) {
    (void)max_rows; // the groups have their exact row counts
    if (R <= 0 || N <= 0 || E <= 0) return;
    moe_state *st = moe_state_get(be, E);
    // the counts: those the route downloaded into st for this offsets buffer, else downloaded now
    if (st->src != offsets || st->src_E != E) moe_counts_download(be, st, offsets, E);
    const void **dA = (const void **)st->d_ptrs, **dB = dA + st->cap;
    void **dC = st->d_ptrs + 2 * (size_t)st->cap;
    moe_ptrs_kernel<<<1, 32, 0, stream_of(be)>>>(offsets, E, (const bf16 *)W, (const bf16 *)x, (bf16 *)y, N, K, dA,
                                                 dB, dC);
    cuda_check_launch();
    if (st->pending) { // once per route: the host waits here for the routing, not per expert
        cuda_check(cudaEventSynchronize(st->ready));
        st->pending = 0;
    }
    const int32_t *off = st->h_off;
    if (off[0] != 0 || off[E] != R)
        fatal("moe gemm on CUDA: the offsets span rows %d..%d, not the %d rows of the call", off[0], off[E], R);
    int cap = st->cap, G = 0;
    int *m = st->h_arrays, *n = m + cap, *k = n + cap, *lda = k + cap, *ldc = lda + cap, *size = ldc + cap;
    cublasOperation_t *ta = (cublasOperation_t *)(size + cap), *tb = ta + cap;
    float *alpha = (float *)(tb + cap), *beta = alpha + cap;
    for (int e = 0; e < E; e++) {
        int rows = off[e + 1] - off[e];
        if (rows < 0) fatal("moe gemm on CUDA: offsets decrease at expert %d (%d rows)", e, rows);
        if (rows == 0) continue;
        m[G] = N;
        n[G] = rows;
        k[G] = K;
        lda[G] = K; // ldb too
        ldc[G] = N;
        size[G] = 1;
        ta[G] = CUBLAS_OP_T;
        tb[G] = CUBLAS_OP_N;
        alpha[G] = 1.0f;
        beta[G] = 0.0f;
        G++;
    }
    if (G == 0) return;
    // an expert's rows of x or y spanning 2^31 elements or more (check_cuda.h): the 64-bit interface,
    // its sizes copied to 64-bit arrays
    int wide = 0;
    for (int g = 0; g < G; g++) wide |= cublas_gemm_needs_64(ta[g], tb[g], m[g], n[g], k[g], lda[g], lda[g], ldc[g]);
    if (!wide) {
        cublas_check(cublasGemmGroupedBatchedEx((cublasHandle_t)cuda_cublas(be), ta, tb, m, n, k, alpha, dA,
                                                CUDA_R_16BF, lda, dB, CUDA_R_16BF, lda, beta, dC, CUDA_R_16BF, ldc, G,
                                                size, CUBLAS_COMPUTE_32F));
        return;
    }
    int64_t *w = (int64_t *)malloc((size_t)G * 6 * sizeof(int64_t));
    if (!w) fatal("moe gemm on CUDA: out of host memory for %d groups' sizes", G);
    int64_t *m64 = w, *n64 = w + G, *k64 = w + 2 * G, *ld64 = w + 3 * G, *ldc64 = w + 4 * G, *size64 = w + 5 * G;
    for (int g = 0; g < G; g++)
        m64[g] = m[g], n64[g] = n[g], k64[g] = k[g], ld64[g] = lda[g], ldc64[g] = ldc[g], size64[g] = size[g];
    cublas_check(cublasGemmGroupedBatchedEx_64((cublasHandle_t)cuda_cublas(be), ta, tb, m64, n64, k64, alpha, dA,
                                               CUDA_R_16BF, ld64, dB, CUDA_R_16BF, ld64, beta, dC, CUDA_R_16BF, ldc64,
                                               G, size64, CUBLAS_COMPUTE_32F));
    free(w);
}

// ---------------------------------------------------------------------------- elementwise

static __global__ void swiglu_packed_kernel(bf16 *out, const bf16 *gu, int R, int I) {
    GRID_STRIDE(u, (int64_t)R * I) {
        int64_t r = u / I, i = u % I;
        float g = bf(gu[r * 2 * I + i]), v = bf(gu[r * 2 * I + I + i]);
        out[u] = __float2bfloat16(g / (1.0f + expf(-g)) * v);
    }
}

static void cuda_moe_swiglu_packed(backend *be, void *out, const void *gu, int R, int I) {
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

static void cuda_moe_combine(backend *be, void *y, const void *ys, const int32_t *slot, const int32_t *topk_idx,
                             const float *topk_w, int T, int k, int H) {
    moe_state *st = (moe_state *)cuda_op_state(be, CUDA_OP_STATE_MOE);
    if (st) st->src = NULL; // the block ends: its offsets buffer may be rewritten by anything now
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

static void cuda_moe_sigmoid_gate_add(backend *be, void *y, const void *s, const void *g, int T, int H) {
    if (T <= 0 || H <= 0) return;
    sigmoid_gate_add_kernel<<<grid_for_threads((int64_t)T * H, MOE_THREADS), MOE_THREADS, 0, stream_of(be)>>>(
        (bf16 *)y, (const bf16 *)s, (const bf16 *)g, T, H);
    cuda_check_launch();
}

extern "C" const struct moe_kernels moe_kernels_cuda = {MOE_OPS(OP_FILL, cuda_moe_)};
