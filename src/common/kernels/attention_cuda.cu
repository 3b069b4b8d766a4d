// attention_cuda.cu: the attentions of attention.h in CUDA: the target's causal attention and
// DFlash's block attention (forward and backward), their launchers and attention_kernels_cuda, the
// CUDA backend's table. Each runs on tensor cores (attn_tc.cu) where it can; the scalar kernels
// here are the fallback (DFLASH_CUDA_ATTN=scalar, or a head_dim whose tiles do not fit the
// device's shared memory) and the yardstick the tiled ones are tested against. Written C-style:
// bf16 activations, fp32 scores, softmax, LSE and accumulation (the DFlash attention's context K/V
// gradients are fp32 too); all work on the backend's stream, nothing waits for it. The CPU twins
// (attention_cpu.c) are the reference.
#include <math.h>
#include <stdint.h>

#include <cuda_bf16.h>

#include "common/backend/backend_cuda.h"
#include "common/backend/check_cuda.h"
#include "common/core/check.h"
#include "common/kernels/attention.h"
#include "common/kernels/attn_tc.h"

typedef __nv_bfloat16 bf16;

#include "common/kernels/cuda_launch.cuh"
#include "common/kernels/cuda_reduce.cuh"

// (stream_of, grid_for, ceil_div, GRID_STRIDE, bf: common/kernels/cuda_launch.cuh; warp_sum,
// warp_max, block_sum, block_max: common/kernels/cuda_reduce.cuh)

typedef __nv_bfloat162 bf16x2;

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

static void cuda_attention_causal(backend *be, void *out, const void *q, const void *k, const void *v,
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

// ---------------------------------------------------------------------------- DFlash attention
//
// The scalar kernels work one warp per output row (query row x head for the forward and dq, block
// key row x kv head for dkb/dvb, context row x kv head for dkc/dvc), recompute the probabilities
// from the saved lse, and need no atomics and no workspace.
//
// A warp owns one output row of head_dim values; lane l holds the dims l, l + 32, ... in registers
// (AT_PER_LANE of them, head_dim <= 256). Each score is a warp-wide dot product (shuffles). The
// visible keys of a query row follow SPEC §3 exactly as attention_cpu.c's tile_c0 / tile_nb do.
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

// One key row (kr, vr: a kv head's k and v in registers) against slot row r (= anchor * B + slot) of
// the query heads of its group: dk += scale dS q and dv += P dout, head by head (the dkb/dvb and
// dkc/dvc kernels' inner loop).
static __device__ __forceinline__ void dflash_bwd_kv_slot(float *dk, float *dv, const float *kr, const float *vr,
                                                          const bf16 *q, const bf16 *dout, const bf16 *out,
                                                          const float *lse, int64_t r, int nq, int kh, int group,
                                                          int hd, float scale, int lane) {
    for (int h = kh * group; h < (kh + 1) * group; h++) {
        int64_t rh = r * nq + h;
        const bf16 *qv = q + rh * hd, *dov = dout + rh * hd;
        float p = expf(dot_row(kr, qv, hd, lane) * scale - lse[rh]);
        float ds = p * (dot_row(vr, dov, hd, lane) - dot_mem(dov, out + rh * hd, hd, lane));
        axpy_row(dk, scale * ds, qv, hd, lane);
        axpy_row(dv, p, dov, hd, lane);
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
        for (int k = block_causal ? j : 0; k < B; k++)
            dflash_bwd_kv_slot(dk, dv, kr, vr, q, dout, out, lse, (int64_t)(ci * B + k), nq, kh, group, hd, scale,
                               lane);
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
            for (int k = 0; k <= kmax; k++)
                dflash_bwd_kv_slot(dk, dv, kr, vr, q, dout, out, lse, (int64_t)(ci * B + k), nq, kh, group, hd,
                                   scale, lane);
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

static void cuda_attention_dflash_forward(backend *be, void *out, float *lse, const void *q, const void *kb,
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

static void cuda_attention_dflash_backward(backend *be, void *dq, void *dkb, void *dvb, float *dkc, float *dvc,
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

extern "C" const struct attention_kernels attention_kernels_cuda = {ATTENTION_OPS(OP_FILL, cuda_attention_)};
