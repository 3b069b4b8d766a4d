// loss_selector_cuda.cu: the chunk's candidate selector on the GPU, loss_selector_cuda (loss_cuda.h;
// the selector's entry of loss_kernels_cuda; see loss_selector.h; its CPU twin is loss_selector.c's
// loss_selector_cpu over selector.c). bf16 rows, codebooks, projection and lm_head; fp32 scores,
// softmax and gradients. R rows of k candidates, rank r, hidden H, C anchors of `slots` rows:
//   Z [R, r] f32 = X P^T                      backend_gemm (bf16 in, fp32 out), once per chunk
//   row kernel (one block per row):           scores s_c = u_c + sum_i pred[prev, i] Z[r, i] succ[c, i]
//       with prev teacher-forced, softmax, loss and hit; with gradients ds_c = scale w_r (p_c - [c = y]),
//       d succ[c] += ds_c pred[prev] * Z[r] and d pred[prev] += dq * Z[r] (atomicAdd: rows share
//       tokens), dq_i = sum_c ds_c succ[c, i], dZ[r, i] = dq_i pred[prev, i] (bf16), and the unary
//       part dx[r] += sum_c ds_c lm_head[c]
//   walk kernel (one block per anchor):       the greedy choices slot after slot, prev = the choice
//   dP [r, H] += dZ^T X, dX [R, H] += dZ P    backend_gemm (bf16 in, fp32 / bf16 accumulated out)
// The workspace holds Z, then dZ (loss_selector_workspace_bytes).
#include <math.h>
#include <stdint.h>
#include <cuda_bf16.h>

#include "common/backend/backend_cuda.h"
#include "common/backend/check_cuda.h"
#include "common/kernels/cuda_launch.cuh"
#include "common/kernels/cuda_reduce.cuh"
#include "student/loss/loss_cuda.h"
#include "student/loss/loss_selector.h"

typedef __nv_bfloat16 bf16;
#define SEL_THREADS 128 // a multiple of 32: each warp scores candidates, the block shares a row

// The teacher-forced predecessor of row r: the label of the last row before it inside the
// sequence in its anchor (the CPU walk's prev_tf), else the anchor's token.
static __device__ int32_t sel_prev_teacher(const selector_batch b, int64_t r) {
    int64_t i = r / b.slots, r0 = i * b.slots;
    for (int64_t q = r - 1; q >= r0; q--)
        if (b.in_seq[q]) return b.label[q];
    return b.first[i * b.first_ld];
}

// s[c] = u_c + <pred[prev] * z, succ[cand_c]> for the k candidates of row r, one warp per candidate
// (lanes over the rank); s in shared memory, complete after the caller's barrier.
static __device__ void sel_scores(const selector_batch b, int64_t r, int32_t prev, const float *z, float *s) {
    const bf16 *pred = (const bf16 *)b.pred, *succ = (const bf16 *)b.succ;
    const bf16 *pp = pred + (int64_t)prev * b.rank;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    for (int c = warp; c < b.k; c += nw) {
        const bf16 *sc = succ + (int64_t)b.cand[r * b.ld_cand + c] * b.rank;
        float a = 0.0f;
        for (int64_t i = lane; i < b.rank; i += 32) a += bf(pp[i]) * z[i] * bf(sc[i]);
        a = warp_sum(a);
        if (lane == 0) s[c] = b.u[r * b.ld_cand + c] + a;
    }
}

// One block per row: the training term (loss, hit) and, with gpred set, its gradients. Dynamic
// shared memory: s [k] scores, ds [k].
static __global__ void sel_row_kernel(const selector_batch b, const float *Z, float scale, float *loss, uint8_t *hit,
                                      float *gpred, float *gsucc, bf16 *dZ, bf16 *dx) {
    extern __shared__ float sh[];
    float *s = sh, *ds = sh + b.k;
    int64_t r = blockIdx.x, rk = b.rank;
    const int32_t *cand = b.cand + r * b.ld_cand;
    float wr = b.w[r];
    int iy = -1; // the label's candidate (the last match, as the CPU's)
    if (b.in_seq[r] && wr > 0)
        for (int c = 0; c < b.k; c++)
            if (cand[c] == b.label[r]) iy = c;
    if (iy < 0) { // no training term: nothing added (dZ's row is 0 for the GEMMs)
        if (threadIdx.x == 0) loss[r] = 0.0f, hit[r] = 0;
        if (gpred)
            for (int64_t i = threadIdx.x; i < rk; i += blockDim.x) dZ[r * rk + i] = __float2bfloat16(0.0f);
        return;
    }
    int32_t prev = sel_prev_teacher(b, r);
    const float *z = Z + r * rk;
    sel_scores(b, r, prev, z, s);
    __syncthreads();
    float m = s[0], sum = 0.0f;
    for (int c = 1; c < b.k; c++) m = fmaxf(m, s[c]);
    for (int c = 0; c < b.k; c++) sum += expf(s[c] - m);
    float lse = m + logf(sum);
    if (threadIdx.x == 0) loss[r] = lse - s[iy], hit[r] = 1;
    if (!gpred) return;
    for (int c = threadIdx.x; c < b.k; c += blockDim.x) ds[c] = scale * wr * (expf(s[c] - lse) - (c == iy ? 1.0f : 0.0f));
    __syncthreads();
    const bf16 *pp = (const bf16 *)b.pred + (int64_t)prev * rk, *succ = (const bf16 *)b.succ;
    for (int64_t i = threadIdx.x; i < rk; i += blockDim.x) {
        float p = bf(pp[i]), q = p * z[i], dq = 0.0f;
        for (int c = 0; c < b.k; c++) {
            int64_t id = cand[c];
            dq += ds[c] * bf(succ[id * rk + i]);
            atomicAdd(&gsucc[id * rk + i], ds[c] * q);
        }
        atomicAdd(&gpred[(int64_t)prev * rk + i], dq * z[i]);
        dZ[r * rk + i] = __float2bfloat16(dq * p);
    }
    const bf16 *lm = (const bf16 *)b.lm_head;
    for (int64_t h = threadIdx.x; h < b.hidden; h += blockDim.x) { // u_c = <lm_head[c], x>
        float a = 0.0f;
        for (int c = 0; c < b.k; c++) a += ds[c] * bf(lm[(int64_t)cand[c] * b.hidden + h]);
        dx[r * b.hidden + h] = __float2bfloat16(bf(dx[r * b.hidden + h]) + a);
    }
}

// One block per anchor: the greedy walk over its rows in order (prev = the slot before's choice).
// Dynamic shared memory: s [k].
static __global__ void sel_walk_kernel(const selector_batch b, const float *Z, int32_t *choice) {
    extern __shared__ float s[];
    __shared__ int32_t prev_sh;
    int64_t i = blockIdx.x;
    int32_t prev = b.first[i * b.first_ld];
    for (int j = 0; j < b.slots; j++) {
        int64_t r = i * b.slots + j;
        if (!b.in_seq[r]) { // the same for the whole block
            if (threadIdx.x == 0) choice[r] = -1;
            continue;
        }
        sel_scores(b, r, prev, Z + r * b.rank, s);
        __syncthreads();
        if (threadIdx.x == 0) { // the first maximum
            int best = 0;
            for (int c = 1; c < b.k; c++)
                if (s[c] > s[best]) best = c;
            prev_sh = choice[r] = b.cand[r * b.ld_cand + best];
        }
        __syncthreads();
        prev = prev_sh;
    }
}

extern "C" void loss_selector_cuda(backend *be, const selector_batch *b, double scale_in, void *workspace,
                                   const selector_out *out, const loss_selector_grads *g) {
    const float scale = (float)scale_in; // fp32 from here on
    int R = b->anchors * b->slots, rk = (int)b->rank, H = (int)b->hidden;
    cudaStream_t st = stream_of(be);
    float *Z = (float *)workspace;
    bf16 *dZ = (bf16 *)(Z + (int64_t)R * rk);
    size_t smem = 2 * (size_t)b->k * sizeof(float);
    backend_gemm(be, 0, 1, R, rk, H, 1.0f, b->x, H, b->proj, H, 0.0f, Z, rk, DT_BF16, DT_F32);
    sel_row_kernel<<<R, SEL_THREADS, smem, st>>>(*b, Z, scale, out->loss, out->hit, g ? g->pred : NULL,
                                                 g ? g->succ : NULL, dZ, g ? (bf16 *)g->dx : NULL);
    cuda_check_launch();
    sel_walk_kernel<<<b->anchors, SEL_THREADS, (size_t)b->k * sizeof(float), st>>>(*b, Z, out->choice);
    cuda_check_launch();
    if (!g) return;
    backend_gemm(be, 1, 0, rk, H, R, 1.0f, dZ, rk, b->x, H, 1.0f, g->proj, H, DT_BF16, DT_F32); // dP += dZ^T X
    backend_gemm(be, 0, 0, R, H, rk, 1.0f, dZ, rk, b->proj, H, 1.0f, g->dx, H, DT_BF16, DT_BF16); // dX += dZ P
}
