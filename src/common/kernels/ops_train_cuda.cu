// ops_train_cuda.cu: CUDA kernels of the training ops (see ops_train.h and ops_train_cuda.h).
//
// Written C-style (nvcc compiles .cu as C++); everything exported has C linkage through
// ops_train_cuda.h. Activations are bf16 (__nv_bfloat16); weight gradients and the context K/V
// gradients are fp32; every sum, the softmax and the LSE are fp32. All work goes on the backend's
// stream and nothing here waits for it.
//
// These are straightforward kernels, one formula each, mirroring ops_train_cpu.c (the reference).
// The DFlash attention runs on tensor cores (attn_tc.cu) where it can; the scalar kernels
// here are its fallback (DFLASH_CUDA_ATTN=scalar, or a head_dim whose tiles do not fit the device's
// shared memory) and the yardstick the tiled ones are tested against. They work one warp per output row (query row x head for the forward and dq, block key
// row x kv head for dkb/dvb, context row x kv head for dkc/dvc), recomputes probabilities from the
// saved lse, and needs no atomics and no workspace. Faster tiled versions may replace them; the
// CPU twin and the GPU test stay the yardstick.
#include <math.h>
#include <stdint.h>

#include <cuda_bf16.h>

#include "common/backend/backend_cuda.h"
#include "common/backend/check_cuda.h"
#include "common/kernels/attn_tc.h"
#include "common/kernels/ops_train_cuda.h"

typedef __nv_bfloat16 bf16;

#include "common/kernels/cuda_launch.cuh"
#include "common/kernels/cuda_reduce.cuh"
#define EW_THREADS 256

// (stream_of, grid_for, ceil_div, GRID_STRIDE, bf: common/kernels/cuda_launch.cuh)

// ---------------------------------------------------------------------------- RMSNorm backward
//
// One warp per row (grid-stride), as the forward: the row sums sum x^2 and sum w dy x by warp
// shuffles, then dx_i = r w_i dy_i - x_i r^3/D sum_j w_j dy_j x_j. dw: each block sums its rows'
// dy x r into a shared-memory row (shared atomics, cheap) and adds it to dw once at the end, so dw
// sees gridDim.x * D global atomics, not R * D. Rows wider than the shared row fit (D > RMSB_SMEM_D)
// add straight to global memory.
#define RMSB_WARPS 8
#define RMSB_BLOCKS 256
#define RMSB_SMEM_D 12288 // 48 KiB of fp32
static __global__ void rmsnorm_backward_kernel(bf16 *dx, float *dw, const bf16 *dy, const bf16 *x, const bf16 *w,
                                               int R, int D, float eps, int accumulate, int shared_dw) {
    extern __shared__ float sdw[];
    int lane = threadIdx.x % 32;
    if (shared_dw) {
        for (int i = threadIdx.x; i < D; i += blockDim.x) sdw[i] = 0.0f;
        __syncthreads();
    }
    float *acc = shared_dw ? sdw : dw;
    for (int64_t r = (int64_t)blockIdx.x * RMSB_WARPS + threadIdx.x / 32; r < R; r += (int64_t)gridDim.x * RMSB_WARPS) {
        const bf16 *xr = x + r * D, *dyr = dy + r * D;
        bf16 *dxr = dx + r * D;
        float ss = 0.0f, wdx = 0.0f;
        for (int i = lane; i < D; i += 32) {
            float a = bf(xr[i]);
            ss += a * a;
            wdx += bf(w[i]) * bf(dyr[i]) * a;
        }
        ss = warp_sum(ss);
        wdx = warp_sum(wdx);
        float rr = 1.0f / sqrtf(ss / (float)D + eps), coef = wdx * rr * rr * rr / (float)D;
        for (int i = lane; i < D; i += 32) {
            float a = bf(xr[i]), d = bf(dyr[i]);
            float g = rr * bf(w[i]) * d - a * coef;
            atomicAdd(&acc[i], d * a * rr);
            dxr[i] = __float2bfloat16(accumulate ? bf(dxr[i]) + g : g);
        }
    }
    if (shared_dw) {
        __syncthreads();
        for (int i = threadIdx.x; i < D; i += blockDim.x) atomicAdd(&dw[i], sdw[i]);
    }
}

extern "C" void cuda_rmsnorm_backward(backend *be, void *dx, float *dw, const void *dy, const void *x, const void *w,
                                      int R, int D, float eps, int accumulate) {
    if (R <= 0 || D <= 0) return;
    int shared_dw = D <= RMSB_SMEM_D;
    int64_t blocks = ceil_div(R, RMSB_WARPS);
    if (blocks > RMSB_BLOCKS) blocks = RMSB_BLOCKS;
    size_t smem = shared_dw ? (size_t)D * sizeof(float) : 0;
    rmsnorm_backward_kernel<<<(unsigned)blocks, RMSB_WARPS * 32, smem, stream_of(be)>>>(
        (bf16 *)dx, dw, (const bf16 *)dy, (const bf16 *)x, (const bf16 *)w, R, D, eps, accumulate, shared_dw);
    cuda_check_launch();
}

// ---------------------------------------------------------------------------- RoPE backward

// The transpose of the forward rotation: the same fp32 angle, turned the other way.
static __global__ void rope_backward_kernel(bf16 *x, const int32_t *pos, const float *inv_freq, int T, int nh, int hd) {
    int half = hd / 2;
    GRID_STRIDE(u, (int64_t)T * half) {
        int64_t t = u / half;
        int i = (int)(u % half);
        float angle = (float)pos[t] * inv_freq[i];
        float s, c;
        sincosf(angle, &s, &c);
        for (int h = 0; h < nh; h++) {
            bf16 *v = x + (t * nh + h) * hd;
            float a = bf(v[i]), b = bf(v[i + half]);
            v[i] = __float2bfloat16(a * c + b * s);
            v[i + half] = __float2bfloat16(b * c - a * s);
        }
    }
}

extern "C" void cuda_rope_backward(backend *be, void *dx, const int32_t *pos, const float *inv_freq, int T, int nh,
                                   int hd) {
    if (T <= 0 || nh <= 0 || hd < 2) return;
    if (hd % 2) fatal("rope backward: head_dim %d is odd", hd);
    int64_t n = (int64_t)T * (hd / 2);
    rope_backward_kernel<<<grid_for(ceil_div(n, EW_THREADS)), EW_THREADS, 0, stream_of(be)>>>((bf16 *)dx, pos, inv_freq,
                                                                                             T, nh, hd);
    cuda_check_launch();
}

// ---------------------------------------------------------------------------- SwiGLU backward

static __global__ void swiglu_backward_kernel(bf16 *dgate, bf16 *dup, const bf16 *dout, const bf16 *gate,
                                              const bf16 *up, int64_t n) {
    GRID_STRIDE(i, n) {
        float g = bf(gate[i]), u = bf(up[i]), d = bf(dout[i]);
        float sg = 1.0f / (1.0f + expf(-g));
        dgate[i] = __float2bfloat16(d * u * sg * (1.0f + g * (1.0f - sg)));
        dup[i] = __float2bfloat16(d * g * sg);
    }
}

extern "C" void cuda_swiglu_backward(backend *be, void *dgate, void *dup, const void *dout, const void *gate,
                                     const void *up, int64_t n) {
    if (n <= 0) return;
    swiglu_backward_kernel<<<grid_for(ceil_div(n, EW_THREADS)), EW_THREADS, 0, stream_of(be)>>>(
        (bf16 *)dgate, (bf16 *)dup, (const bf16 *)dout, (const bf16 *)gate, (const bf16 *)up, n);
    cuda_check_launch();
}

// ---------------------------------------------------------------------------- conversions

static __global__ void f32_to_act_kernel(bf16 *dst, const float *src, int64_t n) {
    GRID_STRIDE(i, n) dst[i] = __float2bfloat16(src[i]);
}

static __global__ void add_to_f32_kernel(float *acc, const bf16 *x, int64_t n) {
    GRID_STRIDE(i, n) acc[i] += bf(x[i]);
}

extern "C" void cuda_f32_to_act(backend *be, void *dst, const float *src, int64_t n) {
    if (n <= 0) return;
    f32_to_act_kernel<<<grid_for(ceil_div(n, EW_THREADS)), EW_THREADS, 0, stream_of(be)>>>((bf16 *)dst, src, n);
    cuda_check_launch();
}

extern "C" void cuda_add_to_f32(backend *be, float *acc, const void *x, int64_t n) {
    if (n <= 0) return;
    add_to_f32_kernel<<<grid_for(ceil_div(n, EW_THREADS)), EW_THREADS, 0, stream_of(be)>>>(acc, (const bf16 *)x, n);
    cuda_check_launch();
}

// ---------------------------------------------------------------------------- DFlash attention
//
// A warp owns one output row of head_dim values; lane l holds the dims l, l + 32, ... in registers
// (AT_PER_LANE of them, head_dim <= 256). Each score is a warp-wide dot product (shuffles). The
// visible keys of a query row follow SPEC §3 exactly as ops_train_cpu.c's seen_by does.
#define AT_WARPS 8
#define AT_HD_MAX 256
#define AT_PER_LANE (AT_HD_MAX / 32)

struct seen_keys {
    int c0, nctx, nb;
};

static __device__ seen_keys seen_by(int a, int start, int k, int B, int window, int block_causal) {
    seen_keys s;
    s.c0 = start;
    if (window > 0 && a + k - (window - 1) > s.c0) s.c0 = a + k - (window - 1);
    s.nctx = a > s.c0 ? a - s.c0 : 0;
    s.nb = block_causal ? k + 1 : B;
    return s;
}

// Row t of what the query sees: context rows first, then its block's slots.
static __device__ const bf16 *seen_row(const bf16 *ctx, const bf16 *blk, const seen_keys &s, int t, int row0, int nkv,
                                       int kh, int hd) {
    if (t < s.nctx) return ctx + ((int64_t)(s.c0 + t) * nkv + kh) * hd;
    return blk + ((int64_t)(row0 + t - s.nctx) * nkv + kh) * hd;
}

// Registers <- one bf16 row of hd values (lane's dims), 0 past hd.
static __device__ void load_row(float *r, const bf16 *src, int hd, int lane) {
#pragma unroll
    for (int u = 0; u < AT_PER_LANE; u++) {
        int i = lane + 32 * u;
        r[u] = i < hd ? bf(src[i]) : 0.0f;
    }
}

// The warp-wide dot product of a register row with a bf16 row in memory.
static __device__ float dot_row(const float *r, const bf16 *src, int hd, int lane) {
    float s = 0.0f;
#pragma unroll
    for (int u = 0; u < AT_PER_LANE; u++) {
        int i = lane + 32 * u;
        if (i < hd) s += r[u] * bf(src[i]);
    }
    return warp_sum(s);
}

// The warp-wide dot product of two bf16 rows in memory.
static __device__ float dot_mem(const bf16 *a, const bf16 *b, int hd, int lane) {
    float s = 0.0f;
    for (int i = lane; i < hd; i += 32) s += bf(a[i]) * bf(b[i]);
    return warp_sum(s);
}

// r += alpha * src (a bf16 row in memory)
static __device__ void axpy_row(float *r, float alpha, const bf16 *src, int hd, int lane) {
#pragma unroll
    for (int u = 0; u < AT_PER_LANE; u++) {
        int i = lane + 32 * u;
        if (i < hd) r[u] += alpha * bf(src[i]);
    }
}

static __device__ void store_row(bf16 *dst, const float *r, float mul, int hd, int lane) {
#pragma unroll
    for (int u = 0; u < AT_PER_LANE; u++) {
        int i = lane + 32 * u;
        if (i < hd) dst[i] = __float2bfloat16(r[u] * mul);
    }
}

// The warp's global index and the warp count of the grid, for grid-stride loops over rows.
#define WARP_ID ((int64_t)blockIdx.x * AT_WARPS + threadIdx.x / 32)
#define WARP_COUNT ((int64_t)gridDim.x * AT_WARPS)

// Forward: one warp per (query row, head), online softmax over the visible keys (running max m,
// sum l, accumulator rescaled by exp(m_old - m_new)), then out = acc / l and lse = m + log l.
static __global__ void dflash_fwd_kernel(bf16 *out, float *lse, const bf16 *q, const bf16 *kb, const bf16 *vb,
                                         const bf16 *kc, const bf16 *vc, const int32_t *anchors,
                                         const int32_t *seq_start, int C, int B, int nq, int nkv, int hd, float scale,
                                         int window, int block_causal) {
    int lane = threadIdx.x % 32, group = nq / nkv;
    for (int64_t u = WARP_ID; u < (int64_t)C * B * nq; u += WARP_COUNT) {
        int r = (int)(u / nq), h = (int)(u % nq), ci = r / B, k = r % B, kh = h / group, row0 = ci * B;
        seen_keys s = seen_by(anchors[ci], seq_start[ci], k, B, window, block_causal);
        float qr[AT_PER_LANE], acc[AT_PER_LANE];
        load_row(qr, q + u * hd, hd, lane);
#pragma unroll
        for (int i = 0; i < AT_PER_LANE; i++) acc[i] = 0.0f;
        float m = -INFINITY, l = 0.0f;
        for (int t = 0; t < s.nctx + s.nb; t++) {
            float sc = dot_row(qr, seen_row(kc, kb, s, t, row0, nkv, kh, hd), hd, lane) * scale;
            float mn = fmaxf(m, sc), corr = expf(m - mn), p = expf(sc - mn); // first key: corr = exp(-inf) = 0
            l = l * corr + p;
#pragma unroll
            for (int i = 0; i < AT_PER_LANE; i++) acc[i] *= corr;
            axpy_row(acc, p, seen_row(vc, vb, s, t, row0, nkv, kh, hd), hd, lane);
            m = mn;
        }
        store_row(out + u * hd, acc, 1.0f / l, hd, lane);
        if (lane == 0) lse[u] = m + logf(l);
    }
}

// Backward, with P = exp(scale q.k - lse), dP = dout.v, D = dout.out, dS = P (dP - D).
// dq: one warp per (query row, head): dq = scale sum_keys dS k (written).
static __global__ void dflash_bwd_dq_kernel(bf16 *dq, const bf16 *dout, const bf16 *out, const float *lse,
                                            const bf16 *q, const bf16 *kb, const bf16 *vb, const bf16 *kc,
                                            const bf16 *vc, const int32_t *anchors, const int32_t *seq_start, int C,
                                            int B, int nq, int nkv, int hd, float scale, int window,
                                            int block_causal) {
    int lane = threadIdx.x % 32, group = nq / nkv;
    for (int64_t u = WARP_ID; u < (int64_t)C * B * nq; u += WARP_COUNT) {
        int r = (int)(u / nq), h = (int)(u % nq), ci = r / B, k = r % B, kh = h / group, row0 = ci * B;
        seen_keys s = seen_by(anchors[ci], seq_start[ci], k, B, window, block_causal);
        float qr[AT_PER_LANE], dor[AT_PER_LANE], acc[AT_PER_LANE];
        load_row(qr, q + u * hd, hd, lane);
        load_row(dor, dout + u * hd, hd, lane);
#pragma unroll
        for (int i = 0; i < AT_PER_LANE; i++) acc[i] = 0.0f;
        float D = dot_row(dor, out + u * hd, hd, lane), L = lse[u];
        for (int t = 0; t < s.nctx + s.nb; t++) {
            const bf16 *kv = seen_row(kc, kb, s, t, row0, nkv, kh, hd);
            float p = expf(dot_row(qr, kv, hd, lane) * scale - L);
            float ds = p * (dot_row(dor, seen_row(vc, vb, s, t, row0, nkv, kh, hd), hd, lane) - D);
            axpy_row(acc, scale * ds, kv, hd, lane);
        }
        store_row(dq + u * hd, acc, 1.0f, hd, lane);
    }
}

// dkb/dvb: one warp per (block key row, kv head), summing over the slots of its anchor that see it
// (all of them, or slots k >= j for a causal block) and the query heads of its group (written).
static __global__ void dflash_bwd_dkvb_kernel(bf16 *dkb, bf16 *dvb, const bf16 *dout, const bf16 *out,
                                              const float *lse, const bf16 *q, const bf16 *kb, const bf16 *vb, int C,
                                              int B, int nq, int nkv, int hd, float scale, int block_causal) {
    int lane = threadIdx.x % 32, group = nq / nkv;
    for (int64_t u = WARP_ID; u < (int64_t)C * B * nkv; u += WARP_COUNT) {
        int jr = (int)(u / nkv), kh = (int)(u % nkv), ci = jr / B, j = jr % B;
        float kr[AT_PER_LANE], vr[AT_PER_LANE], dk[AT_PER_LANE], dv[AT_PER_LANE];
        load_row(kr, kb + u * hd, hd, lane);
        load_row(vr, vb + u * hd, hd, lane);
#pragma unroll
        for (int i = 0; i < AT_PER_LANE; i++) dk[i] = dv[i] = 0.0f;
        for (int k = block_causal ? j : 0; k < B; k++) {
            for (int h = kh * group; h < (kh + 1) * group; h++) {
                int64_t rh = (int64_t)(ci * B + k) * nq + h;
                const bf16 *qv = q + rh * hd, *dov = dout + rh * hd;
                float p = expf(dot_row(kr, qv, hd, lane) * scale - lse[rh]);
                float ds = p * (dot_row(vr, dov, hd, lane) - dot_mem(dov, out + rh * hd, hd, lane));
                axpy_row(dk, scale * ds, qv, hd, lane);
                axpy_row(dv, p, dov, hd, lane);
            }
        }
        store_row(dkb + u * hd, dk, 1.0f, hd, lane);
        store_row(dvb + u * hd, dv, 1.0f, hd, lane);
    }
}

// dkc/dvc: one warp per (context row, kv head), summing over every (anchor, slot, head) that sees
// the row; the warp owns the row, so it adds its sum to the fp32 accumulators without atomics.
// Only rows before the last anchor can be seen: that bound is found here on the device (the
// anchors live there), by every warp, from the C anchors.
static __global__ void dflash_bwd_dkvc_kernel(float *dkc, float *dvc, const bf16 *dout, const bf16 *out,
                                              const float *lse, const bf16 *q, const bf16 *kc, const bf16 *vc,
                                              const int32_t *anchors, const int32_t *seq_start, int C, int B, int nq,
                                              int nkv, int hd, float scale, int window) {
    int lane = threadIdx.x % 32, group = nq / nkv;
    int s_seen = 0;
    for (int ci = lane; ci < C; ci += 32) s_seen = max(s_seen, anchors[ci]);
    for (int o = 16; o > 0; o >>= 1) s_seen = max(s_seen, __shfl_xor_sync(FULL_MASK, s_seen, o));
    for (int64_t u = WARP_ID; u < (int64_t)s_seen * nkv; u += WARP_COUNT) {
        int c = (int)(u / nkv), kh = (int)(u % nkv);
        float kr[AT_PER_LANE], vr[AT_PER_LANE], dk[AT_PER_LANE], dv[AT_PER_LANE];
        load_row(kr, kc + u * hd, hd, lane);
        load_row(vr, vc + u * hd, hd, lane);
#pragma unroll
        for (int i = 0; i < AT_PER_LANE; i++) dk[i] = dv[i] = 0.0f;
        for (int ci = 0; ci < C; ci++) {
            int a = anchors[ci];
            if (c < seq_start[ci] || c >= a) continue;
            int kmax = B - 1; // slots k with c >= a + k - (W - 1)
            if (window > 0) kmax = min(kmax, c - a + window - 1);
            for (int k = 0; k <= kmax; k++) {
                for (int h = kh * group; h < (kh + 1) * group; h++) {
                    int64_t rh = (int64_t)(ci * B + k) * nq + h;
                    const bf16 *qv = q + rh * hd, *dov = dout + rh * hd;
                    float p = expf(dot_row(kr, qv, hd, lane) * scale - lse[rh]);
                    float ds = p * (dot_row(vr, dov, hd, lane) - dot_mem(dov, out + rh * hd, hd, lane));
                    axpy_row(dk, scale * ds, qv, hd, lane);
                    axpy_row(dv, p, dov, hd, lane);
                }
            }
        }
#pragma unroll
        for (int v = 0; v < AT_PER_LANE; v++) {
            int i = lane + 32 * v;
            if (i < hd) {
                dkc[u * hd + i] += dk[v];
                dvc[u * hd + i] += dv[v];
            }
        }
    }
}

static void check_head_dim(int hd) {
    if (hd > AT_HD_MAX) fatal("dflash attention: head_dim %d > %d is not supported on CUDA", hd, AT_HD_MAX);
}

// Blocks of AT_WARPS warps for `warps` rows, capped at AT_MAX_BLOCKS (several times what an H200
// keeps resident): the kernels stride over the rest.
#define AT_MAX_BLOCKS 4096
static unsigned warp_blocks(int64_t warps) {
    int64_t blocks = ceil_div(warps, AT_WARPS);
    return (unsigned)(blocks < 1 ? 1 : blocks < AT_MAX_BLOCKS ? blocks : AT_MAX_BLOCKS);
}

extern "C" void cuda_dflash_attn_forward(backend *be, void *out, float *lse, const void *q, const void *kb,
                                         const void *vb, const void *kc, const void *vc, const int32_t *anchors,
                                         const int32_t *seq_start, int C, int B, int nq, int nkv, int hd, float scale,
                                         int window, int block_causal) {
    if (C <= 0) return;
    if (dflash_tc_forward(be, out, lse, q, kb, vb, kc, vc, anchors, seq_start, C, B, nq, nkv, hd, scale, window,
                          block_causal))
        return;
    check_head_dim(hd);
    dflash_fwd_kernel<<<warp_blocks((int64_t)C * B * nq), AT_WARPS * 32, 0, stream_of(be)>>>(
        (bf16 *)out, lse, (const bf16 *)q, (const bf16 *)kb, (const bf16 *)vb, (const bf16 *)kc, (const bf16 *)vc,
        anchors, seq_start, C, B, nq, nkv, hd, scale, window, block_causal);
    cuda_check_launch();
}

extern "C" void cuda_dflash_attn_backward(backend *be, void *dq, void *dkb, void *dvb, float *dkc, float *dvc,
                                          const void *dout, const void *out, const float *lse, const void *q,
                                          const void *kb, const void *vb, const void *kc, const void *vc,
                                          const int32_t *anchors, const int32_t *seq_start, int C, int B, int nq,
                                          int nkv, int hd, float scale, int window, int block_causal) {
    if (C <= 0) return;
    if (dflash_tc_backward(be, dq, dkb, dvb, dkc, dvc, dout, out, lse, q, kb, vb, kc, vc, anchors, seq_start, C, B, nq,
                           nkv, hd, scale, window, block_causal))
        return;
    check_head_dim(hd);
    cudaStream_t st = stream_of(be);
    const bf16 *dout_ = (const bf16 *)dout, *out_ = (const bf16 *)out, *q_ = (const bf16 *)q;
    dflash_bwd_dq_kernel<<<warp_blocks((int64_t)C * B * nq), AT_WARPS * 32, 0, st>>>(
        (bf16 *)dq, dout_, out_, lse, q_, (const bf16 *)kb, (const bf16 *)vb, (const bf16 *)kc, (const bf16 *)vc,
        anchors, seq_start, C, B, nq, nkv, hd, scale, window, block_causal);
    cuda_check_launch();
    dflash_bwd_dkvb_kernel<<<warp_blocks((int64_t)C * B * nkv), AT_WARPS * 32, 0, st>>>(
        (bf16 *)dkb, (bf16 *)dvb, dout_, out_, lse, q_, (const bf16 *)kb, (const bf16 *)vb, C, B, nq, nkv, hd, scale,
        block_causal);
    cuda_check_launch();
    // The context length is not known on the host; the kernel bounds itself by the last anchor.
    dflash_bwd_dkvc_kernel<<<AT_MAX_BLOCKS, AT_WARPS * 32, 0, st>>>(dkc, dvc, dout_, out_, lse, q_, (const bf16 *)kc,
                                                          (const bf16 *)vc, anchors, seq_start, C, B, nq, nkv, hd,
                                                          scale, window);
    cuda_check_launch();
}
