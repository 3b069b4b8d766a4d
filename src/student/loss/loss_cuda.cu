// loss_cuda.cu: the fused lm_head loss on the GPU (see loss.h, loss.c and loss_cuda.h), and the loss
// table's CUDA instance, loss_kernels_cuda (its selector entry is loss_selector_cuda.cu's).
//
// The same algorithm as the CPU path in loss.c, per chunk of rows: GEMMs through backend_gemm
// (cuBLAS, bf16 inputs, fp32 accumulation and fp32 logits), then kernels for the per-row work.
//   ROWS   logits[rc, V] f32 = x W^T; scan; finish; weights; dlogits (bf16, in place);
//          dx[rc, H] bf16 = dlogits W
//   TILES  pass 1 per tile: logits_t = x W_t^T, scan; finish; weights;
//          pass 2 per tile: logits_t again, dlogits_t (bf16, in place), dx_acc f32 += dlogits_t W_t;
//          dx = bf16(dx_acc)
// Per-row kernels run one block per row (grid-stride over rows), threads over the tile. The
// student's top-K goes through ops' running top-k kernel (cuda_topk_lse_update: sorted, lowest id
// first on ties, exactly the CPU's order); the argmax is a block max over 64-bit (value, id) keys.
// After the scan, loss_finish_row and loss_anchor_weights (loss_cuda.h) run on the device: the very
// same double-precision code as the CPU path.
//
// dlogits are written as bf16 over the fp32 logits of the same row: bf16 element j occupies bytes
// [2j, 2j+2), i.e. lies inside fp32 element j/2 <= j. The kernel converts a row in segments of
// S = blockDim.x * DL_PER_THREAD elements: every thread reads its fp32 values of segment p, the
// block synchronises, then writes their bf16 values, which land in fp32 elements [pS/2, (p+1)S/2):
// already read (segments <= p), never ones a later segment still has to read. The GEMM then reads
// the bf16 matrix with a row stride of 2 * width elements.
//
// Nothing here waits for the GPU; everything runs on the backend's stream.
#include <math.h>
#include <stdint.h>

#include <cuda_bf16.h>

#include "common/backend/backend_cuda.h"
#include "common/backend/check_cuda.h"
#include "common/backend/profile.h"
#include "common/kernels/topk_lse_cuda.h"
#include "student/loss/loss_cuda.h"

extern "C" {
#include "common/kernels/ops.h" // OPS_TOPK_MAX
}

typedef __nv_bfloat16 bf16;

#include "common/kernels/cuda_reduce.cuh"
#define ROW_THREADS 256  // per-row kernels: one block per row
#define DL_PER_THREAD 4  // dlogits: fp32 values a thread holds per segment
#define ELEM_THREADS 256 // elementwise and per-row-thread kernels

static cudaStream_t stream_of(backend *be) { return (cudaStream_t)cuda_stream(be); }

static unsigned grid_for(int64_t units) { // blocks for a grid-stride loop, capped, never 0
    const int64_t cap = (int64_t)1 << 16;
    if (units < 1) return 1;
    return (unsigned)(units < cap ? units : cap);
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---------------------------------------------------------------------------- reductions



static __device__ unsigned long long warp_max_u64(unsigned long long v) {
    for (int o = 16; o > 0; o >>= 1) {
        unsigned long long u = __shfl_xor_sync(FULL_MASK, v, o);
        v = u > v ? u : v;
    }
    return v;
}

// The u64 twin of block_max in common/kernels/cuda_reduce.cuh (same contract).
static __device__ unsigned long long block_max_u64(unsigned long long v, unsigned long long *red) {
    int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
    v = warp_max_u64(v);
    __syncthreads();
    if (lane == 0) red[w] = v;
    __syncthreads();
    return warp_max_u64(lane < nw ? red[lane] : 0ull);
}

// arg_key: a 64-bit key ordered by value, then by lower id: the block max is the argmax with the
// lowest id on ties (the CPU's strict > over increasing ids). -0 counts as +0 (equal on the CPU);
// NaN gets 0 and never wins (the CPU's comparisons are false for NaN).
static __device__ unsigned long long arg_key(float x, int64_t id) {
    if (x != x) return 0ull;
    if (x == 0.0f) x = 0.0f;
    uint32_t u = __float_as_uint(x);
    uint32_t ord = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((unsigned long long)ord << 32) | (unsigned long long)(0xFFFFFFFFu - (uint32_t)id);
}

static __device__ float arg_key_val(unsigned long long key) {
    uint32_t ord = (uint32_t)(key >> 32);
    return __uint_as_float((ord & 0x80000000u) ? (ord & 0x7FFFFFFFu) : ~ord);
}

static __device__ int32_t arg_key_id(unsigned long long key) { return (int32_t)(0xFFFFFFFFu - (uint32_t)key); }

// ---------------------------------------------------------------------------- kernels

// init: the running statistics of rows 0..nr-1 of a chunk (the top-K list: cuda_topk_lse_init).
static __global__ void init_kernel(loss_work w, int nr, int k) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nr; i += (int64_t)gridDim.x * blockDim.x) {
        w.run_max[i] = -INFINITY;
        w.run_arg[i] = -1;
        w.tail_max[i] = -INFINITY;
        w.tail_sum[i] = 0;
        w.s_lab[i] = 0;
        for (int a = 0; a < k; a++) w.s_top[i * k + a] = -INFINITY;
    }
}

// scan: fold one fp32 tile (ids v0 .. v0+vt-1, row stride ld) into the running statistics of each
// row, as scan_tile in loss.c: gather the label's and the teacher's logits, the argmax, then hide
// the teacher's ids (-inf) and fold the tail's max and sum of exp.
static __global__ void __launch_bounds__(ROW_THREADS)
    scan_kernel(float *logits, int64_t ld, int64_t v0, int64_t vt, int nr, int64_t r0, loss_config cfg, loss_batch b,
                loss_work w) {
    __shared__ float red[32];
    __shared__ unsigned long long redk[32];
    const int tid = threadIdx.x, k = b.k;
    for (int64_t i = blockIdx.x; i < nr; i += gridDim.x) {
        float *s = logits + i * ld;
        const int64_t r = r0 + i;
        const int32_t *ti = b.t_idx + r * k;
        const int32_t y = loss_row_label(&cfg, &b, r);

        if (tid == 0 && y >= v0 && y < v0 + vt) w.s_lab[i] = s[y - v0];
        for (int a = tid; a < k; a += blockDim.x)
            if (ti[a] >= v0 && ti[a] < v0 + vt) w.s_top[i * k + a] = s[ti[a] - v0];

        unsigned long long best = 0;
        for (int64_t j = tid; j < vt; j += blockDim.x) {
            unsigned long long key = arg_key(s[j], v0 + j);
            best = key > best ? key : best;
        }
        best = block_max_u64(best, redk);
        if (tid == 0) {
            unsigned long long run = w.run_arg[i] >= 0 ? arg_key(w.run_max[i], w.run_arg[i]) : 0ull;
            if (best > run) {
                w.run_max[i] = arg_key_val(best);
                w.run_arg[i] = arg_key_id(best);
            }
        }
        __syncthreads(); // every read of the teacher's entries is done: hide them
        for (int a = tid; a < k; a += blockDim.x)
            if (ti[a] >= v0 && ti[a] < v0 + vt) s[ti[a] - v0] = -INFINITY;
        __syncthreads();

        float tmax = -INFINITY;
        for (int64_t j = tid; j < vt; j += blockDim.x) tmax = fmaxf(tmax, s[j]);
        tmax = block_max(tmax, red);
        const float old = w.tail_max[i];
        const float nm = fmaxf(tmax, old);
        if (nm != -INFINITY) { // block-uniform: nothing outside I so far otherwise
            float part = 0.0f;  // each term <= 1, at most vt / blockDim.x of them per thread
            for (int64_t j = tid; j < vt; j += blockDim.x) part += expf(s[j] - nm);
            float ts = block_sum(part, red); // its barriers order every read of `old` before the write
            if (tid == 0) {
                double sum = old == -INFINITY ? 0.0 : w.tail_sum[i] * exp((double)old - nm);
                w.tail_max[i] = nm;
                w.tail_sum[i] = sum + ts;
            }
        }
        __syncthreads(); // red / redk are reused by the next row
    }
}

// finish: one thread per row, the shared double-precision terms (loss_cuda.h).
static __global__ void finish_kernel(int nr, int64_t r0, int K, loss_config cfg, loss_batch b, loss_work w,
                                     loss_rows rows) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nr; i += (int64_t)gridDim.x * blockDim.x)
        loss_finish_row(&cfg, &b, K, r0 + i, i, &w, &rows);
}

// weights: one thread per anchor (its slots are consecutive rows).
static __global__ void weights_kernel(int n_anchors, int64_t r0, loss_config cfg, loss_batch b, loss_rows rows) {
    for (int64_t a = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; a < n_anchors;
         a += (int64_t)gridDim.x * blockDim.x)
        loss_anchor_weights(&cfg, &b, r0 + a * b.slots, &rows);
}

// dlogits: overwrite each row's fp32 tile with bf16 d(w slot_loss)/ds packed at the start of the
// row (see the top of the file), as dlogits_tile in loss.c, from the terms' sum gr (loss_cuda.h):
// every entry first gets the tail form exp(s_j - tail_lse) (A q_r - gr.tail) (the teacher's entries,
// hidden at -inf, get 0), then one
// thread writes the few special entries (the teacher's ids, the label, the argmax) with their
// complete values, in order, so that coinciding ids are handled like on the CPU.
static __global__ void __launch_bounds__(ROW_THREADS)
    dlogits_kernel(float *logits, int64_t ld, int64_t v0, int64_t vt, int nr, int64_t r0, loss_config cfg,
                   loss_batch b, loss_work w, const float *wts) {
    const int tid = threadIdx.x, k = b.k;
    const int64_t seg = (int64_t)blockDim.x * DL_PER_THREAD;
    for (int64_t i = blockIdx.x; i < nr; i += gridDim.x) {
        float *s = logits + i * ld;
        bf16 *d = (bf16 *)s;
        const int64_t r = r0 + i;
        const double wr = wts[r];
        if (wr == 0) { // no gradient, and no exp over the row
            for (int64_t j = tid; j < vt; j += blockDim.x) d[j] = __float2bfloat16(0.0f);
            continue; // block-uniform
        }
        const int32_t *ti = b.t_idx + r * k;
        const float *tv = b.t_val + r * k;
        const int32_t y = loss_row_label(&cfg, &b, r), g = w.run_arg[i];
        const double lse = w.lse[i], tail_lse = w.tail_lse[i];
        const loss_row_grad gr = loss_row_grad_make(&cfg, &w, i, wr); // the terms' sum (loss_cuda.h)
        const double A = wr * gr.a;
        const int tail = tail_lse != -INFINITY;
        const float ct = tail ? (float)(A * exp(tail_lse - lse) - gr.tail) : 0.0f;
        const float tl = tail ? (float)tail_lse : 0.0f;

        for (int a = tid; a < k; a += blockDim.x)
            if (ti[a] >= v0 && ti[a] < v0 + vt) s[ti[a] - v0] = -INFINITY;
        __syncthreads();
        for (int64_t p0 = 0; p0 < vt; p0 += seg) {
            float v[DL_PER_THREAD];
#pragma unroll
            for (int e = 0; e < DL_PER_THREAD; e++) {
                int64_t j = p0 + (int64_t)e * blockDim.x + tid;
                v[e] = j < vt && tail ? ct * expf(s[j] - tl) : 0.0f;
            }
            __syncthreads(); // the whole segment is read before any of it is overwritten
#pragma unroll
            for (int e = 0; e < DL_PER_THREAD; e++) {
                int64_t j = p0 + (int64_t)e * blockDim.x + tid;
                if (j < vt) d[j] = __float2bfloat16(v[e]);
            }
        }
        __syncthreads(); // the tail form is everywhere: now the special entries
        if (tid == 0) {
            const float *st = w.s_top + i * k;
            int y_done = 0, g_done = 0;
            for (int a = 0; a < k; a++) {
                const int64_t id = ti[a];
                if (!(id >= v0 && id < v0 + vt)) continue;
                double val = A * exp((double)st[a] - lse) - gr.topk * exp((double)tv[a] - b.t_lse[r]);
                if (id == y) val += gr.label, y_done = 1;
                if (gr.at_argmax && id == g) val += gr.argmax, g_done = 1;
                d[id - v0] = __float2bfloat16((float)val);
            }
            // the label and the argmax outside I: their tail value plus their term
            if (!y_done && y >= v0 && y < v0 + vt) {
                double val = tail ? (double)ct * exp((double)w.s_lab[i] - tail_lse) : 0.0;
                d[y - v0] = __float2bfloat16((float)(val + gr.label));
            }
            if (!g_done && gr.at_argmax && g >= v0 && g < v0 + vt) {
                double val = tail ? (double)ct * exp((double)w.run_max[i] - tail_lse) : 0.0;
                d[g - v0] = __float2bfloat16((float)(val + gr.argmax));
            }
        }
        __syncthreads();
    }
}

static __global__ void f32_to_bf16_kernel(bf16 *dst, const float *src, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16(src[i]);
}

// ---------------------------------------------------------------------------- driver

// loss_forward_backward on the CUDA backend (bf16 x, lm_head and dx; fp32 logits and statistics),
// after loss.c has checked the arguments.
static void loss_cuda_forward_backward(backend *be, const loss_config *cfg, const loss_plan *plan, void *workspace,
                                       const loss_batch *b, loss_rows *rows, void *dx) {
    const int64_t n = b->n, H = b->hidden, V = b->vocab;
    const int k = b->k, K = plan->topk_student;
    if (K > OPS_TOPK_MAX) fatal("loss: student top-K %d above %d on CUDA", K, OPS_TOPK_MAX);
    if (2 * V > INT32_MAX) fatal("loss: vocabulary %lld too large for the bf16 dlogits stride", (long long)V);
    cudaStream_t st = stream_of(be);
    const bf16 *x = (const bf16 *)b->x, *W = (const bf16 *)b->lm_head;
    bf16 *dxo = (bf16 *)dx;
    loss_work w;
    loss_work_carve(&w, workspace, plan, H, V, k);
    const int64_t width = w.width;
    const int acc = width < V; // several tiles: dx accumulates in fp32

    for (int64_t r0 = 0; r0 < n; r0 += plan->row_chunk) {
        const int nr = (int)(n - r0 < plan->row_chunk ? n - r0 : plan->row_chunk);
        const bf16 *xc = x + r0 * H;
        init_kernel<<<grid_for(ceil_div(nr, ELEM_THREADS)), ELEM_THREADS, 0, st>>>(w, nr, k);
        cuda_check_launch();
        if (K > 0) cuda_topk_lse_init(be, w.topk_val, w.topk_idx, w.tk_m, w.tk_s, nr, K);

        // pass 1: statistics over every tile (one tile of width V in mode ROWS)
        for (int64_t v0 = 0; v0 < V; v0 += width) {
            const int64_t vt = V - v0 < width ? V - v0 : width;
            backend_gemm(be, 0, 1, nr, (int)vt, (int)H, 1.0f, xc, (int)H, W + v0 * H, (int)H, 0.0f, w.logits, (int)vt,
                         DT_BF16, DT_F32);
            int prof = prof_begin(be); // profile.h: the loss's own kernels by name (its GEMMs as backend_gemm)
            if (K > 0) // before the scan, which hides the teacher's entries
                cuda_topk_lse_update(be, w.logits, (int)vt, (int)v0, nr, (int)vt, K, w.topk_val, w.topk_idx, w.tk_m,
                                     w.tk_s);
            scan_kernel<<<grid_for(nr), ROW_THREADS, 0, st>>>(w.logits, vt, v0, vt, nr, r0, *cfg, *b, w);
            cuda_check_launch();
            prof_end(be, prof, "loss scan (top-K, argmax, tail)", 0);
        }
        finish_kernel<<<grid_for(ceil_div(nr, ELEM_THREADS)), ELEM_THREADS, 0, st>>>(nr, r0, K, *cfg, *b, w, *rows);
        cuda_check_launch();
        const int n_anchors = nr / b->slots;
        weights_kernel<<<grid_for(ceil_div(n_anchors, ELEM_THREADS)), ELEM_THREADS, 0, st>>>(n_anchors, r0, *cfg, *b,
                                                                                              *rows);
        cuda_check_launch();
        if (!dxo) continue; // forward only: the per-row terms are all

        // pass 2: dlogits (bf16, in place) and dx
        for (int64_t v0 = 0; v0 < V; v0 += width) {
            const int64_t vt = V - v0 < width ? V - v0 : width;
            if (acc)
                backend_gemm(be, 0, 1, nr, (int)vt, (int)H, 1.0f, xc, (int)H, W + v0 * H, (int)H, 0.0f, w.logits,
                             (int)vt, DT_BF16, DT_F32);
            int prof = prof_begin(be);
            dlogits_kernel<<<grid_for(nr), ROW_THREADS, 0, st>>>(w.logits, vt, v0, vt, nr, r0, *cfg, *b, w, rows->w);
            cuda_check_launch();
            prof_end(be, prof, "loss dlogits", 0);
            if (acc)
                backend_gemm(be, 0, 0, nr, (int)H, (int)vt, 1.0f, w.logits, (int)(2 * vt), W + v0 * H, (int)H,
                             v0 == 0 ? 0.0f : 1.0f, w.dx_acc, (int)H, DT_BF16, DT_F32);
            else
                backend_gemm(be, 0, 0, nr, (int)H, (int)vt, 1.0f, w.logits, (int)(2 * vt), W + v0 * H, (int)H, 0.0f,
                             dxo + r0 * H, (int)H, DT_BF16, DT_BF16);
        }
        if (acc) {
            f32_to_bf16_kernel<<<grid_for(ceil_div((int64_t)nr * H, ELEM_THREADS)), ELEM_THREADS, 0, st>>>(
                dxo + r0 * H, w.dx_acc, (int64_t)nr * H);
            cuda_check_launch();
        }
    }
}

extern "C" const struct loss_kernels loss_kernels_cuda = {
    .forward_backward = loss_cuda_forward_backward,
    .selector_forward_backward = loss_selector_cuda,
};
