// ops_cuda.cu: the CUDA kernels of the model ops (see ops.h and ops_cuda.h).
//
// Written C-style (nvcc compiles .cu as C++); everything exported has C linkage through
// ops_cuda.h. Activations and weights are bf16 (__nv_bfloat16); every sum, the softmax, the LSE
// and the RoPE angles are fp32. All work goes on the backend's stream and nothing here waits for
// it. Kernels index with int64 where a product of two sizes can pass 2^31, and loop grid-stride
// so that no launch needs more blocks than the grid limits allow.
//
// The fp32 CPU twins in ops_cpu.c are the reference: each kernel computes the same formula in the
// same order where that is cheap (so the GPU test can use tight tolerances), and says so where it
// does not.
#include <math.h>
#include <stdint.h>

#include <cuda_bf16.h>

#include "common/backend/backend_cuda.h"
#include "common/backend/check_cuda.h"
#include "common/kernels/attn_tc.h"
#include "common/kernels/ops_cuda.h"

extern "C" {
#include "common/kernels/ops.h" // OPS_TOPK_MAX
}

typedef __nv_bfloat16 bf16;
typedef __nv_bfloat162 bf16x2;

#include "common/kernels/cuda_launch.cuh"
#include "common/kernels/cuda_reduce.cuh"

// (stream_of, grid_for, ceil_div, GRID_STRIDE, bf: common/kernels/cuda_launch.cuh)

// ---------------------------------------------------------------------------- reductions


// (warp_sum, warp_max, block_sum, block_max: common/kernels/cuda_reduce.cuh)

// ---------------------------------------------------------------------------- embed

// One block per token row (grid-stride over rows), threads over the H columns.
static __global__ void embed_kernel(bf16 *out, const bf16 *table, const int32_t *ids, int T, int H) {
    for (int64_t t = blockIdx.x; t < T; t += gridDim.x) {
        const bf16 *src = table + (int64_t)ids[t] * H;
        bf16 *dst = out + t * H;
        for (int i = threadIdx.x; i < H; i += blockDim.x) dst[i] = src[i];
    }
}

extern "C" void cuda_embed(backend *be, void *out, const void *table, const int32_t *ids, int T, int H) {
    if (T <= 0 || H <= 0) return;
    embed_kernel<<<grid_for(T), 256, 0, stream_of(be)>>>((bf16 *)out, (const bf16 *)table, ids, T, H);
    cuda_check_launch();
}

// ---------------------------------------------------------------------------- RMSNorm

// One warp per row: R is tokens (D = hidden, up to 8192) or tokens * heads (D = head_dim, R in the
// millions), so a warp keeps every lane busy for small D without a block-wide barrier per row.
// Grid-stride over rows. out may alias in: each lane reads x[i] before writing y[i] itself.
#define RMS_WARPS 8
static __global__ void rmsnorm_kernel(bf16 *out, const bf16 *in, const bf16 *w, int R, int D, float eps) {
    int lane = threadIdx.x % 32;
    for (int64_t r = (int64_t)blockIdx.x * RMS_WARPS + threadIdx.x / 32; r < R; r += (int64_t)gridDim.x * RMS_WARPS) {
        const bf16 *x = in + r * D;
        bf16 *y = out + r * D;
        float ss = 0.0f;
        for (int i = lane; i < D; i += 32) {
            float a = __bfloat162float(x[i]);
            ss += a * a;
        }
        ss = warp_sum(ss);
        // The CPU twin forms this in double; in fp32 the sum of D squares carries a relative error
        // of about D * 2^-24 at worst (far less in the tree order used here): far below bf16.
        float inv = 1.0f / sqrtf(ss / (float)D + eps);
        for (int i = lane; i < D; i += 32) y[i] = __float2bfloat16(__bfloat162float(x[i]) * inv * __bfloat162float(w[i]));
    }
}

extern "C" void cuda_rmsnorm(backend *be, void *out, const void *in, const void *w, int R, int D, float eps) {
    if (R <= 0 || D <= 0) return;
    rmsnorm_kernel<<<grid_for(ceil_div(R, RMS_WARPS)), RMS_WARPS * 32, 0, stream_of(be)>>>(
        (bf16 *)out, (const bf16 *)in, (const bf16 *)w, R, D, eps);
    cuda_check_launch();
}

// ---------------------------------------------------------------------------- RoPE

// One thread per (token, frequency i < hd/2): the angle and its sine/cosine once, then the pair
// (x[i], x[i + hd/2]) of every head. The angle is formed exactly as the CPU twin (and transformers)
// do, (float)pos * inv_freq in fp32; sincosf is the precise version (no --use_fast_math), which
// reduces large arguments (positions in the thousands) correctly.
static __global__ void rope_kernel(bf16 *x, const int32_t *pos, const float *inv_freq, int T, int nh, int hd) {
    int half = hd / 2;
    int64_t n = (int64_t)T * half;
    for (int64_t u = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; u < n; u += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = u / half;
        int i = (int)(u % half);
        float angle = (float)pos[t] * inv_freq[i];
        float s, c;
        sincosf(angle, &s, &c);
        for (int h = 0; h < nh; h++) {
            bf16 *v = x + (t * nh + h) * hd;
            float a = __bfloat162float(v[i]), b = __bfloat162float(v[i + half]);
            v[i] = __float2bfloat16(a * c - b * s);
            v[i + half] = __float2bfloat16(b * c + a * s);
        }
    }
}

extern "C" void cuda_rope(backend *be, void *x, const int32_t *pos, const float *inv_freq, int T, int nh, int hd) {
    if (T <= 0 || nh <= 0 || hd < 2) return;
    if (hd % 2) fatal("rope: head_dim %d is odd", hd);
    int64_t n = (int64_t)T * (hd / 2);
    rope_kernel<<<grid_for(ceil_div(n, 256)), 256, 0, stream_of(be)>>>((bf16 *)x, pos, inv_freq, T, nh, hd);
    cuda_check_launch();
}

// ---------------------------------------------------------------------------- causal attention
//
// On tensor cores where the tiles fit (attn_tc.cu); the kernel below is the fallback
// (DFLASH_CUDA_ATTN=scalar, or head_dim too large for the device's shared memory) and the path the
// tiled one is tested against. Flash-attention style, fp32 online softmax. One block per (tile of ATT_BQ consecutive query rows
// of the packed batch, query head). ATT_WARPS warps; warp w owns the ATT_ROWS rows w*ATT_ROWS ...
// of the tile. The block walks the keys from the start of its first row's sequence to its last row
// in tiles of ATT_BK = 32, staged in shared memory (bf16); per row it keeps the running max m, the
// running sum l and the output accumulator in registers, so no [T, T] (or [BQ, T]) buffer exists.
//
// A tile of query rows may straddle sequence boundaries: each row finds its own sequence start by
// binary search in cu_seqlens (a device array) and masks keys outside [lo, t], lo = the start, or
// with a sliding window max(start, t - window + 1). Keys of an earlier sequence (or before the first
// row's window) are only loaded for the block's first rows, which need them anyway. A sink (gpt-oss,
// one logit per query head) joins each row's running max and sum at the end, and nothing else.
//
// Per key tile and row:  scores  lane j computes q . k_j (the whole dot product, q broadcast from
//                                 shared memory, K rows padded so the 32 lanes hit 32 banks);
//                        softmax max and sum over the 32 lanes (shuffles), rescale by exp(m - m');
//                        P V     lane owns the dim pairs (2p, 2p+1), p = lane + 32 i, and adds
//                                 p_j v_j[d] for the 32 keys (p_j broadcast by shuffle).
// head_dim: any even value up to 256 (Qwen3: 128).
#define ATT_BQ 32
#define ATT_WARPS 8
#define ATT_ROWS (ATT_BQ / ATT_WARPS)
#define ATT_BK 32
#define ATT_HD_MAX 256
#define ATT_PAIRS (ATT_HD_MAX / 64) // dim pairs per lane in P V

// the start of the sequence holding token t: the last s with cu[s] <= t (cu[0] = 0 <= t < cu[n] = T)
static __device__ int seq_start(const int32_t *cu, int n_seq, int t) {
    int lo = 0, hi = n_seq; // invariant: cu[lo] <= t < cu[hi]
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (cu[mid] <= t) lo = mid;
        else hi = mid;
    }
    return cu[lo];
}

// K rows in shared memory are padded to an odd number of 4-byte words (bf16 pairs), so that the 32
// lanes reading K[lane][p] for the same p hit 32 different banks.
static __host__ __device__ int att_k_stride(int hd) { return (hd / 2) | 1; }

static size_t att_smem_bytes(int hd) {
    int pairs = hd / 2;
    return (size_t)ATT_BK * att_k_stride(hd) * sizeof(bf16x2) // K tile
           + (size_t)ATT_BK * pairs * sizeof(bf16x2)          // V tile
           + (size_t)ATT_BQ * pairs * sizeof(float2);         // Q tile, fp32
}

static __global__ void __launch_bounds__(ATT_WARPS * 32)
    attention_kernel(bf16 *out, const bf16 *q, const bf16 *k, const bf16 *v, const int32_t *cu_seqlens,
                     int n_seq, int T, int nq, int nkv, int hd, float scale, int window, const float *sinks) {
    extern __shared__ float4 att_smem[]; // float4: 16-byte alignment for the carve-up below
    int pairs = hd / 2, kstride = att_k_stride(hd);
    bf16x2 *Ks = (bf16x2 *)att_smem;        // [ATT_BK][kstride]
    bf16x2 *Vs = Ks + ATT_BK * kstride;     // [ATT_BK][pairs]
    float2 *Qs = (float2 *)(Vs + ATT_BK * pairs); // [ATT_BQ][pairs]; offset is a multiple of 128 bytes

    int h = blockIdx.y, kh = h / (nq / nkv);
    int q0 = blockIdx.x * ATT_BQ;
    int q_last = min(q0 + ATT_BQ, T) - 1;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const bf16x2 *q2 = (const bf16x2 *)q, *k2 = (const bf16x2 *)k, *v2 = (const bf16x2 *)v;

    // the query tile of head h, in fp32 (exact: bf16 -> fp32); rows past T are zeros, never used
    for (int i = threadIdx.x; i < ATT_BQ * pairs; i += blockDim.x) {
        int r = i / pairs, p = i % pairs, t = q0 + r;
        Qs[i] = t < T ? __bfloat1622float2(q2[((int64_t)t * nq + h) * pairs + p]) : make_float2(0.0f, 0.0f);
    }

    // this warp's rows: token, first visible key, running max and sum, accumulator (all
    // warp-uniform except acc, which holds this lane's dim pairs)
    int row_t[ATT_ROWS], row_start[ATT_ROWS];
    float row_m[ATT_ROWS], row_l[ATT_ROWS];
    float2 acc[ATT_ROWS][ATT_PAIRS];
#pragma unroll
    for (int r = 0; r < ATT_ROWS; r++) {
        int t = q0 + warp * ATT_ROWS + r;
        row_t[r] = t;
        row_start[r] = t < T ? seq_start(cu_seqlens, n_seq, t) : 0;
        if (window > 0 && t - window + 1 > row_start[r]) row_start[r] = t - window + 1;
        row_m[r] = -INFINITY;
        row_l[r] = 0.0f;
#pragma unroll
        for (int i = 0; i < ATT_PAIRS; i++) acc[r][i] = make_float2(0.0f, 0.0f);
    }

    // keys: from the first row's first visible key (the smallest in the tile) to the last row
    int kv_lo = seq_start(cu_seqlens, n_seq, q0);
    if (window > 0 && q0 - window + 1 > kv_lo) kv_lo = q0 - window + 1;
    for (int kv0 = kv_lo; kv0 <= q_last; kv0 += ATT_BK) {
        __syncthreads(); // the previous tile is consumed (and, the first time, Qs is written)
        // stage K and V rows kv0 .. kv0+31 of kv head kh; rows past the last query are zeros, so
        // that p = 0 never meets a NaN/inf from memory we do not own
        for (int i = threadIdx.x; i < ATT_BK * pairs; i += blockDim.x) {
            int jj = i / pairs, p = i % pairs, j = kv0 + jj;
            bf16x2 kk = __float2bfloat162_rn(0.0f), vv = kk;
            if (j <= q_last) {
                int64_t off = ((int64_t)j * nkv + kh) * pairs + p;
                kk = k2[off];
                vv = v2[off];
            }
            Ks[jj * kstride + p] = kk;
            Vs[jj * pairs + p] = vv;
        }
        __syncthreads();

#pragma unroll
        for (int r = 0; r < ATT_ROWS; r++) {
            int t = row_t[r], start = row_start[r];
            // warp-uniform skips: a row past the batch, or no key of this tile in [start, t]
            if (t >= T || kv0 > t || kv0 + ATT_BK <= start) continue;
            int j = kv0 + lane;
            int visible = j >= start && j <= t;
            float sc = -INFINITY;
            if (visible) {
                const float2 *qr = Qs + (warp * ATT_ROWS + r) * pairs;
                const bf16x2 *kr = Ks + lane * kstride;
                float dot = 0.0f;
                for (int p = 0; p < pairs; p++) {
                    float2 kf = __bfloat1622float2(kr[p]), qf = qr[p];
                    dot += qf.x * kf.x + qf.y * kf.y;
                }
                sc = dot * scale;
            }
            // online softmax: the tile holds at least one visible key (kv0 <= t, kv0 + 32 > start)
            float m_new = fmaxf(row_m[r], warp_max(sc));
            float corr = expf(row_m[r] - m_new); // 0 on the first tile (m = -inf)
            float pj = visible ? expf(sc - m_new) : 0.0f;
            row_l[r] = row_l[r] * corr + warp_sum(pj);
            row_m[r] = m_new;
#pragma unroll
            for (int i = 0; i < ATT_PAIRS; i++) {
                acc[r][i].x *= corr;
                acc[r][i].y *= corr;
            }
            for (int jj = 0; jj < ATT_BK; jj++) {
                float pk = __shfl_sync(FULL_MASK, pj, jj);
                if (pk == 0.0f) continue; // warp-uniform: masked key (or one that underflowed)
                const bf16x2 *vr = Vs + jj * pairs;
#pragma unroll
                for (int i = 0; i < ATT_PAIRS; i++) {
                    int p = lane + 32 * i;
                    if (p < pairs) {
                        float2 vf = __bfloat1622float2(vr[p]);
                        acc[r][i].x += pk * vf.x;
                        acc[r][i].y += pk * vf.y;
                    }
                }
            }
        }
    }

    bf16x2 *o2 = (bf16x2 *)out;
    float sink = sinks ? sinks[h] : -INFINITY;
#pragma unroll
    for (int r = 0; r < ATT_ROWS; r++) {
        int t = row_t[r];
        if (t >= T) continue;
        float l = row_l[r], c = 1.0f; // l > 0: the row's own key t has p = exp(s_t - m) > 0 unless it underflows
        if (sink != -INFINITY) { // the sink joins the max and the sum: O and l rescaled to m' = max(m, sink)
            float mn = fmaxf(row_m[r], sink);
            c = expf(row_m[r] - mn);
            l = l * c + expf(sink - mn);
        }
#pragma unroll
        for (int i = 0; i < ATT_PAIRS; i++) {
            int p = lane + 32 * i;
            if (p < pairs)
                o2[((int64_t)t * nq + h) * pairs + p] =
                    __floats2bfloat162_rn(acc[r][i].x * c / l, acc[r][i].y * c / l);
        }
    }
}

extern "C" void cuda_attention_causal(backend *be, void *out, const void *q, const void *k, const void *v,
                                      const int32_t *cu_seqlens, int n_seq, int T, int nq, int nkv, int hd,
                                      float scale, int window, const float *sinks) {
    if (T <= 0 || nq <= 0) return;
    if (nkv < 1 || nq % nkv) fatal("attention: %d query heads do not group over %d kv heads", nq, nkv);
    if (attn_tc_causal(be, out, q, k, v, cu_seqlens, n_seq, T, nq, nkv, hd, scale, window, sinks))
        return; // tensor cores
    if (hd < 2 || hd > ATT_HD_MAX || hd % 2)
        fatal("attention on CUDA: head_dim %d unsupported (even values up to %d)", hd, ATT_HD_MAX);
    if (nq > 65535) fatal("attention on CUDA: %d query heads exceed the grid's y limit", nq);
    // the kernel reads and writes bf16 pairs: the buffers must be 4-byte aligned (arena and
    // backend_alloc memory is 256-byte aligned; hd is even, so every row is too)
    if (((uintptr_t)out | (uintptr_t)q | (uintptr_t)k | (uintptr_t)v) & 3u)
        fatal("attention on CUDA: q/k/v/out must be 4-byte aligned");
    size_t smem = att_smem_bytes(hd);
    if (smem > 48 * 1024) // beyond the default dynamic shared memory: opt in (hd > ~190)
        cuda_check(cudaFuncSetAttribute(attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((unsigned)ceil_div(T, ATT_BQ), (unsigned)nq);
    attention_kernel<<<grid, ATT_WARPS * 32, smem, stream_of(be)>>>((bf16 *)out, (const bf16 *)q, (const bf16 *)k,
                                                                    (const bf16 *)v, cu_seqlens, n_seq, T, nq,
                                                                    nkv, hd, scale, window, sinks);
    cuda_check_launch();
}

// ---------------------------------------------------------------------------- elementwise

#define EW_THREADS 256

// out may alias gate (target.c computes gate = silu(gate) * up in place): same index, read first.
static __global__ void swiglu_kernel(bf16 *out, const bf16 *gate, const bf16 *up, int64_t n) {
    GRID_STRIDE(i, n) {
        float g = __bfloat162float(gate[i]);
        out[i] = __float2bfloat16(g / (1.0f + expf(-g)) * __bfloat162float(up[i]));
    }
}

static __global__ void add_kernel(bf16 *x, const bf16 *y, int64_t n) {
    GRID_STRIDE(i, n) x[i] = __float2bfloat16(__bfloat162float(x[i]) + __bfloat162float(y[i]));
}

static __global__ void to_f32_kernel(float *dst, const bf16 *src, int64_t n) {
    GRID_STRIDE(i, n) dst[i] = __bfloat162float(src[i]);
}

extern "C" void cuda_swiglu(backend *be, void *out, const void *gate, const void *up, int64_t n) {
    if (n <= 0) return;
    swiglu_kernel<<<grid_for(ceil_div(n, EW_THREADS)), EW_THREADS, 0, stream_of(be)>>>((bf16 *)out, (const bf16 *)gate,
                                                                                      (const bf16 *)up, n);
    cuda_check_launch();
}

extern "C" void cuda_add(backend *be, void *x, const void *y, int64_t n) {
    if (n <= 0) return;
    add_kernel<<<grid_for(ceil_div(n, EW_THREADS)), EW_THREADS, 0, stream_of(be)>>>((bf16 *)x, (const bf16 *)y, n);
    cuda_check_launch();
}

extern "C" void cuda_to_f32(backend *be, float *dst, const void *src, int64_t n) {
    if (n <= 0) return;
    to_f32_kernel<<<grid_for(ceil_div(n, EW_THREADS)), EW_THREADS, 0, stream_of(be)>>>(dst, (const bf16 *)src, n);
    cuda_check_launch();
}

// A strided copy of bf16 rows: cudaMemcpy2DAsync takes pitches and the row width in bytes, each
// at most cudaDevAttrMaxPitch (2^31 - 1 bytes on every GPU so far). Contiguous rows (one row, or
// pitches equal to the width: a stage's activations [S, H]) go as one 1-D copy, which has no such
// limit; rows whose pitch passes it go one 1-D copy per row.
extern "C" void cuda_copy_2d(backend *be, void *dst, int64_t dst_ld, const void *src, int64_t src_ld, int64_t rows,
                             int64_t cols) {
    if (rows <= 0 || cols <= 0) return;
    size_t e = sizeof(bf16), dp = (size_t)dst_ld * e, sp = (size_t)src_ld * e, w = (size_t)cols * e;
    if (rows == 1 || (dp == w && sp == w)) {
        cuda_check(cudaMemcpyAsync(dst, src, w * (size_t)rows, cudaMemcpyDeviceToDevice, stream_of(be)));
        return;
    }
    const size_t pitch_max = 2147483647u;
    if (dp <= pitch_max && sp <= pitch_max) {
        cuda_check(cudaMemcpy2DAsync(dst, dp, src, sp, w, (size_t)rows, cudaMemcpyDeviceToDevice, stream_of(be)));
        return;
    }
    for (int64_t r = 0; r < rows; r++)
        cuda_check(cudaMemcpyAsync((char *)dst + (size_t)r * dp, (const char *)src + (size_t)r * sp, w,
                                   cudaMemcpyDeviceToDevice, stream_of(be)));
}

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
