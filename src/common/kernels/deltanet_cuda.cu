// deltanet_cuda.cu: the Gated DeltaNet ops of deltanet.h in CUDA: the causal conv1d + SiLU, the
// gates and the gated delta rule (a chunked kernel, and a batched-GEMM form for prefill), their
// launchers and deltanet_kernels_cuda, the CUDA backend's table.
//
// Written C-style: bf16 activations and weights, fp32 gates, state and every sum; all work on the
// backend's stream, nothing waits for it (but the delta rule's GEMM form, for the packed
// sequences' lengths: once per call, see below); int64 indices where a product of two sizes can
// pass 2^31; grid-stride loops. Each kernel computes the formula of its CPU twin (deltanet_cpu.c) in
// the same order where that is cheap, so the GPU test can hold it to bf16 tolerances.
#include <math.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_bf16.h>

#include "common/backend/backend_cuda.h"
#include "common/backend/check_cuda.h"
#include "common/kernels/deltanet.h"
#include "common/kernels/deltanet_cuda.h"

typedef __nv_bfloat16 bf16;

#include "common/kernels/cuda_launch.cuh"
#include "common/kernels/cuda_reduce.cuh"

#define HY_THREADS 256
// (stream_of, grid_for, ceil_div, GRID_STRIDE, bf: common/kernels/cuda_launch.cuh)
static __device__ __forceinline__ float silu_f(float x) { return x / (1.0f + expf(-x)); }

// ---------------------------------------------------------------------------- causal conv1d + SiLU

// the sequence holding token t: the last s with cu[s] <= t
static __device__ int seq_of(const int32_t *cu, int n_seq, int64_t t) {
    int lo = 0, hi = n_seq; // cu[lo] <= t < cu[hi]
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (cu[mid] <= t) lo = mid;
        else hi = mid;
    }
    return lo;
}

// One thread per (token, channel): the K taps in the CPU's order, inputs before the sequence start
// from the state (or 0).
static __global__ void conv_kernel(bf16 *out, const bf16 *x, const bf16 *w, const int32_t *cu, int n_seq, int T, int C,
                                   int K, const bf16 *state) {
    int S = K - 1;
    GRID_STRIDE(u, (int64_t)T * C) {
        int64_t t = u / C;
        int c = (int)(u % C), s = seq_of(cu, n_seq, t);
        int64_t start = cu[s], i = t - start;
        float acc = 0.0f;
        for (int j = 0; j < K; j++) {
            int64_t p = i - S + j;
            float xv = p >= 0 ? bf(x[(start + p) * C + c]) : (state ? bf(state[((int64_t)s * S + S + p) * C + c]) : 0.0f);
            acc += bf(w[(int64_t)c * K + j]) * xv;
        }
        out[u] = __float2bfloat16(silu_f(acc));
    }
}

// One thread per (sequence, channel), rows in increasing order (see cpu_conv1d_silu: in place is safe).
// Runs after conv_kernel on the stream, so every output read the old state.
static __global__ void conv_state_kernel(bf16 *state, const bf16 *x, const int32_t *cu, int n_seq, int C, int K) {
    int S = K - 1;
    GRID_STRIDE(u, (int64_t)n_seq * C) {
        int s = (int)(u / C), c = (int)(u % C);
        int64_t start = cu[s], L = cu[s + 1] - start;
        bf16 *st = state + (int64_t)s * S * C;
        for (int r = 0; r < S; r++) {
            int64_t p = L - S + r;
            st[(int64_t)r * C + c] = p >= 0 ? x[(start + p) * C + c] : st[(r + L) * C + c];
        }
    }
}

static void cuda_conv1d_silu(backend *be, void *out, const void *x, const void *w, const int32_t *cu_seqlens,
                             int n_seq, int T, int C, int K, void *state) {
    if (n_seq <= 0 || C <= 0) return;
    if (T > 0) {
        conv_kernel<<<grid_for_threads((int64_t)T * C, HY_THREADS), HY_THREADS, 0, stream_of(be)>>>(
            (bf16 *)out, (const bf16 *)x, (const bf16 *)w, cu_seqlens, n_seq, T, C, K, (const bf16 *)state);
        cuda_check_launch();
    }
    if (state && K > 1) {
        conv_state_kernel<<<grid_for_threads((int64_t)n_seq * C, HY_THREADS), HY_THREADS, 0, stream_of(be)>>>(
            (bf16 *)state, (const bf16 *)x, cu_seqlens, n_seq, C, K);
        cuda_check_launch();
    }
}

// ---------------------------------------------------------------------------- gates

static __global__ void gates_kernel(float *beta, float *g, const bf16 *b, const bf16 *a, const float *A_log,
                                    const float *dt_bias, int T, int Hv) {
    GRID_STRIDE(i, (int64_t)T * Hv) {
        int h = (int)(i % Hv);
        float u = bf(a[i]) + dt_bias[h];
        float sp = u > 20.0f ? u : log1pf(expf(u)); // torch's softplus (threshold 20)
        beta[i] = 1.0f / (1.0f + expf(-bf(b[i])));
        g[i] = -expf(A_log[h]) * sp;
    }
}

static void cuda_gdn_gates(backend *be, float *beta, float *g, const void *b, const void *a, const float *A_log,
                           const float *dt_bias, int T, int Hv) {
    if (T <= 0 || Hv <= 0) return;
    gates_kernel<<<grid_for_threads((int64_t)T * Hv, HY_THREADS), HY_THREADS, 0, stream_of(be)>>>(beta, g, (const bf16 *)b,
                                                                             (const bf16 *)a, A_log, dt_bias, T, Hv);
    cuda_check_launch();
}

// ---------------------------------------------------------------------------- gated delta rule
//
// One block per (value head, sequence, slice of W value columns): the columns of the state S [dk, dv]
// evolve independently (d_c = beta (v_c - S[:, c] . k), S[:, c] += k d_c, o_c = S[:, c] . q), so a
// block owns S[:, dv0 : dv0 + W] and the matching columns of v and out. The block walks its
// sequence in chunks of C tokens (64, fewer where shared memory is short), the algebra of
// cpu_gated_delta_rule (deltanet_cpu.c) step for step, everything in shared memory, fp32:
//
//   load   q, k rows L2-normalised (a warp per row; q scaled by dk^-0.5), v columns into U, the
//          cumulative gate gam and beta (thread 0: the CPU's sequential sum)
//   A      A_ij = beta_i e^(gam_i - gam_j) k_i . k_j (j < i);  R_ic = beta_i (v_ic - e^gam_i (K S)_ic)
//          into U;  o_ic = e^gam_i (Q S)_ic kept in registers (each thread the same elements later)
//   solve  (I + A) U = R by forward substitution, one thread per column (no barrier inside)
//   P      P_ij = e^(gam_i - gam_j) q_i . k_j (j <= i) over A;  the state decays e^(gam_last - gam_j)
//          over beta (no longer needed)
//   out    o_ic += (P U)_ic, to bf16;  S = e^gam_last S + (diag(decay) K)^T U
//
// Shared memory (floats): S dk*W, Q and K C*(dk|1) each, U C*W, A C*C, gam and beta C. dk = dv = 128,
// C = 64, W = 128: 177 KiB (fits sm_90's 227 KiB); smaller devices get narrower slices, then smaller
// chunks. Tensor cores are not used yet: the products are fp32 dot products over shared memory.
#define GDR_THREADS 256
#define GDR_WARPS (GDR_THREADS / 32)
#define GDR_CHUNK 64
#define GDR_W_MAX 128
#define GDR_OREG (GDR_CHUNK * GDR_W_MAX / GDR_THREADS) // output elements per thread

// Q and K rows padded to an odd number of floats: the products over rows (A, P) read K[j][d] for 32
// consecutive j at once, which then fall in 32 different banks.
static __host__ __device__ int gdr_kstride(int dk) { return dk | 1; }

static size_t gdr_smem_bytes(int C, int W, int dk) {
    return ((size_t)dk * W + 2 * (size_t)C * gdr_kstride(dk) + (size_t)C * W + (size_t)C * C + 2 * (size_t)C) *
           sizeof(float);
}

static __global__ void __launch_bounds__(GDR_THREADS)
    gdr_kernel(bf16 *out, const bf16 *qkv, const float *g, const float *beta, const int32_t *cu, int Hk, int Hv, int dk,
               int dv, int Wmax, int C, float *state) {
    extern __shared__ float gdr_smem[];
    int h = blockIdx.x, s = blockIdx.y, dv0 = blockIdx.z * Wmax;
    int W = min(Wmax, dv - dv0), kh = h / (Hv / Hk);
    int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    int64_t ld = 2 * (int64_t)Hk * dk + (int64_t)Hv * dv;
    int kst = gdr_kstride(dk);
    float *S = gdr_smem, *Q = S + (size_t)dk * W, *K = Q + (size_t)C * kst, *U = K + (size_t)C * kst;
    float *A = U + (size_t)C * W, *gam = A + (size_t)C * C, *bet = gam + C;
    float *st = state ? state + ((int64_t)s * Hv + h) * dk * dv + dv0 : NULL;
    float qscale = 1.0f / sqrtf((float)dk);

    for (int e = tid; e < dk * W; e += GDR_THREADS) S[e] = st ? st[(int64_t)(e / W) * dv + e % W] : 0.0f;
    int end = cu[s + 1];
    for (int c0 = cu[s]; c0 < end; c0 += C) {
        int n = min(C, end - c0);
        __syncthreads(); // the previous chunk is consumed (the first time: S is written)
        // load
        for (int r = warp; r < 2 * n; r += GDR_WARPS) {
            int is_k = r >= n, i = is_k ? r - n : r;
            const bf16 *src = qkv + (int64_t)(c0 + i) * ld + (int64_t)(is_k ? Hk + kh : kh) * dk;
            float *dst = (is_k ? K : Q) + (size_t)i * kst;
            float ss = 0.0f;
            for (int d = lane; d < dk; d += 32) {
                float v = bf(src[d]);
                dst[d] = v;
                ss += v * v;
            }
            float inv = 1.0f / sqrtf(warp_sum(ss) + 1e-6f) * (is_k ? 1.0f : qscale);
            for (int d = lane; d < dk; d += 32) dst[d] *= inv; // this lane's own elements
        }
        for (int e = tid; e < n * W; e += GDR_THREADS)
            U[e] = bf(qkv[(int64_t)(c0 + e / W) * ld + 2 * (int64_t)Hk * dk + (int64_t)h * dv + dv0 + e % W]);
        if (tid == 0) {
            float acc = 0.0f;
            for (int i = 0; i < n; i++) {
                acc += g[(int64_t)(c0 + i) * Hv + h];
                gam[i] = acc;
                bet[i] = beta[(int64_t)(c0 + i) * Hv + h];
            }
        }
        __syncthreads();
        // A, the right-hand side, the inter-chunk output
        for (int e = tid; e < n * n; e += GDR_THREADS) {
            int i = e / n, j = e % n;
            float a = 0.0f;
            if (j < i) {
                float dot = 0.0f;
                for (int d = 0; d < dk; d++) dot += K[(size_t)i * kst + d] * K[(size_t)j * kst + d];
                a = dot * (bet[i] * expf(gam[i] - gam[j]));
            }
            A[(size_t)i * C + j] = a;
        }
        float oreg[GDR_OREG];
#pragma unroll
        for (int r = 0; r < GDR_OREG; r++) {
            int e = tid + r * GDR_THREADS;
            oreg[r] = 0.0f;
            if (e < n * W) {
                int i = e / W, c = e % W;
                float ks = 0.0f, qs = 0.0f;
                for (int d = 0; d < dk; d++) {
                    float sv = S[(size_t)d * W + c];
                    ks += K[(size_t)i * kst + d] * sv;
                    qs += Q[(size_t)i * kst + d] * sv;
                }
                float eg = expf(gam[i]);
                U[e] = bet[i] * (U[e] - eg * ks);
                oreg[r] = qs * eg;
            }
        }
        __syncthreads();
        // (I + A) U = R, column by column
        for (int c = tid; c < W; c += GDR_THREADS)
            for (int i = 1; i < n; i++) {
                float acc = U[(size_t)i * W + c];
                for (int j = 0; j < i; j++) acc -= A[(size_t)i * C + j] * U[(size_t)j * W + c];
                U[(size_t)i * W + c] = acc;
            }
        __syncthreads();
        // P over A; the state's decays over beta
        float glast = gam[n - 1];
        for (int e = tid; e < n * n; e += GDR_THREADS) {
            int i = e / n, j = e % n;
            float p = 0.0f;
            if (j <= i) {
                float dot = 0.0f;
                for (int d = 0; d < dk; d++) dot += Q[(size_t)i * kst + d] * K[(size_t)j * kst + d];
                p = dot * expf(gam[i] - gam[j]);
            }
            A[(size_t)i * C + j] = p;
        }
        for (int j = tid; j < n; j += GDR_THREADS) bet[j] = expf(glast - gam[j]);
        __syncthreads();
        // out, and the state at the chunk's end
#pragma unroll
        for (int r = 0; r < GDR_OREG; r++) {
            int e = tid + r * GDR_THREADS;
            if (e < n * W) {
                int i = e / W, c = e % W;
                float acc = oreg[r];
                for (int j = 0; j <= i; j++) acc += A[(size_t)i * C + j] * U[(size_t)j * W + c];
                out[((int64_t)(c0 + i) * Hv + h) * dv + dv0 + c] = __float2bfloat16(acc);
            }
        }
        float el = expf(glast);
        for (int e = tid; e < dk * W; e += GDR_THREADS) {
            int d = e / W, c = e % W;
            float acc = 0.0f;
            for (int j = 0; j < n; j++) acc += K[(size_t)j * kst + d] * bet[j] * U[(size_t)j * W + c];
            S[e] = S[e] * el + acc;
        }
    }
    // each thread wrote (and first read) only its own elements e of S: no barrier needed
    if (st)
        for (int e = tid; e < dk * W; e += GDR_THREADS) st[(int64_t)(e / W) * dv + e % W] = S[e];
}

// The chunk C and slice width W of gdr_kernel: DFLASH_CUDA_GDR="CxW" forces them (tests); otherwise C = 64 and the
// widest W <= 128 (W = ceil(dv / slices)) that fits the device's shared memory, halving C when even
// W = 32 does not fit. Slices are also added (W down to 32) while the grid would leave SMs idle.
static void gdr_plan(int n_blocks, int dk, int dv, int *C_out, int *W_out) {
    int dev = 0, optin = 0, sms = 0;
    cuda_check(cudaGetDevice(&dev));
    cuda_check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    cuda_check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    const char *env = getenv("DFLASH_CUDA_GDR");
    int C = GDR_CHUNK, W = 0;
    if (env && *env) {
        if (sscanf(env, "%dx%d", &C, &W) != 2 || C < 1 || C > GDR_CHUNK || W < 1 || W > GDR_W_MAX)
            fatal("DFLASH_CUDA_GDR=%s: expected CxW, chunk C <= %d, slice width W <= %d", env, GDR_CHUNK, GDR_W_MAX);
        if (gdr_smem_bytes(C, W, dk) > (size_t)optin)
            fatal("DFLASH_CUDA_GDR=%s: %zu bytes of shared memory at dk %d, more than the device's %d", env,
                  gdr_smem_bytes(C, W, dk), dk, optin);
    } else {
        int slices = (dv + GDR_W_MAX - 1) / GDR_W_MAX;
        W = (dv + slices - 1) / slices;
        while (W > 32 && ((int64_t)n_blocks * slices < 2 * (int64_t)sms || gdr_smem_bytes(C, W, dk) > (size_t)optin)) {
            slices *= 2;
            W = (dv + slices - 1) / slices;
        }
        while (C > 1 && gdr_smem_bytes(C, W, dk) > (size_t)optin) C /= 2;
        if (gdr_smem_bytes(C, W, dk) > (size_t)optin)
            fatal("gated delta rule on CUDA: key head dim %d needs more shared memory than the device's %d bytes", dk,
                  optin);
    }
    *C_out = C;
    *W_out = W < dv ? W : dv;
}

// ---------------------------------------------------------------------------- gated delta rule, batched GEMMs
//
// The chunked form of cpu_gated_delta_rule with its products on cuBLAS (fp32 in, fp32 accumulation:
// the state recurrence compounds rounding over chunks, and the CPU test bounds it at 2e-5), as
// transformers' torch_chunk_gated_delta_rule splits it: everything that does not depend on the state
// is computed for many chunks at once, then the state is carried chunk by chunk. For one chunk of
// n <= C tokens of one value head, padded to C rows with zeros (beta 0, gate 0):
//
//   intra (batched over chunks x heads)
//     A = K K^T, P = Q K^T                       strided-batched GEMMs over [C, dk] x [dk, C]
//     (I + A~) [U0 | W] = [beta V | beta e^gam K]  A~ = strictly lower part of A times beta_i e^(gam_i - gam_j):
//                                                 gdr_solve_kernel (below), which also masks P (P~ =
//                                                 j <= i part times e^(gam_i - gam_j)), scales Q by e^gam
//                                                 and K by e^(gam_last - gam)
//   carry (per chunk step, batched over sequences x heads; S the head's state at the chunk's start)
//     [U ; -O1] = [U0 ; 0] - [W ; e^gam Q] S      GEMM 1 (U = U0 - W S is the solve of the CPU's
//                                                 corrected right-hand side, by linearity)
//     -O = -O1 - P~ U                             GEMM 2
//     S = e^gam_last S, out = O (bf16)            gdr_step_kernel
//     S += (e^(gam_last - gam) K)^T U             GEMM 3 (beta 1: the decayed state plus the update)
//
// Chunks of different sequences are independent, so the carry walks chunk steps, not chunks: step j
// is the j-th chunk of every sequence in flight at once, one gdr_step_kernel and 3 GEMMs batched over
// (sequences x heads) per step. The host plans it from the sequences' lengths (gdr_plan_carry): the
// non-empty sequences sorted longest first (ties: in order), cut into batches of at most `lanes`
// (each sequence in flight holds its state S [Hv, dk, dv] in the scratch: lane i of the batch at
// S + i Hv dk dv); within a batch the sequences still running at step j are then a prefix of its
// lanes, so every product of the step is one strided-batched call over a contiguous run of members.
// The chunk table lists the chunks batch by batch, step by step, lane by lane (built on the host,
// one upload); gdr_lanes_kernel loads a batch's states (or 0) before its first step and stores them
// after its last (a sequence that ends early keeps its S untouched until then). The intra part runs
// on groups of whole steps of one batch, G chunks at most (the scratch holds one group: G bounded by
// GDR_GROUP_BYTES, and lanes <= G so that a step always fits a group), each group's steps right after
// it. Launches per call: per batch 1 + 4 per group + 4 per step, plus 1 when the state is stored:
// O(steps x batches), where the chunk-by-chunk carry took 4 per chunk (tests/unit/test_ops_hybrid_cuda.c
// holds it to that, bench/RESULTS.md has the counts at the 27B layer shape).
//
// The lengths: from the caller's host copy (cu_host: the teacher's forward and decoder pass the
// batch's, which they upload), so the host never waits; without one the op downloads cu_seqlens
// (n_seq + 1 ints, one wait for the stream per call, none per chunk; none for one sequence, whose
// length is T). Decoding stays on gdr_kernel.
//
// The triangular solve is a kernel of its own rather than cublasStrsmBatched: that takes arrays of
// device pointers (one more kernel to fill them per group) and one matrix per member as it is
// stored, while the system here must first be masked and decayed (A~ from A, gam, beta) and its
// right-hand side formed from V and K: the kernel does those in the same pass, with A~ in shared
// memory, one thread per right-hand-side column.
#define GDR_GEMM_CHUNK 64
#define GDR_GROUP_BYTES ((size_t)128 << 20) // the intra scratch of one group of chunks
#define GDR_GROUP_MAX 64                    // chunks per group at most
#define GDR_SOLVE_THREADS 256

// one entry of the chunk table: first token, token count, sequence
typedef struct {
    int32_t start, n, seq;
} gdr_chunk;

// the scratch of one (chunk, head), in floats: WQ [2C, dk] (W rows, then Q rows), K [C, dk], A and
// P [C, C], Y [2C, dv] (U0 / U rows, then -O rows), e^gam_last
static size_t gdr_chunk_floats(int C, int dk, int dv) {
    return 3 * (size_t)C * dk + 2 * (size_t)C * C + 2 * (size_t)C * dv + 1;
}

static int64_t gdr_max_chunks(int T, int n_seq, int C) { return ((int64_t)T + (int64_t)n_seq * (C - 1)) / C; }

// chunks per group: as many as GDR_GROUP_BYTES of scratch hold, at most GDR_GROUP_MAX and the chunks
// there are; DFLASH_CUDA_GDR=gemm:G sets the most to G (tests: groups of a few chunks, batches of a
// few sequences). Read by both the work size and the op, so the two agree while the variable stays
// as it is. Fewer launches want a larger G (about 8 per step and batch of G sequences); 128 MiB holds
// 14 chunks of the 27B layer (48 value heads of 128 x 128: 9 MiB a chunk).
static int64_t gdr_group(int T, int n_seq, int Hv, int dk, int dv, int C) {
    int64_t nc = gdr_max_chunks(T, n_seq, C), most = GDR_GROUP_MAX;
    const char *env = getenv("DFLASH_CUDA_GDR");
    if (env && strncmp(env, "gemm:", 5) == 0 && (sscanf(env + 5, "%" SCNd64, &most) != 1 || most < 1))
        fatal("DFLASH_CUDA_GDR=%s: expected gemm:G, G >= 1 chunks per group", env);
    int64_t g = (int64_t)(GDR_GROUP_BYTES / (gdr_chunk_floats(C, dk, dv) * sizeof(float) * (size_t)(Hv > 0 ? Hv : 1)));
    if (g > most) g = most;
    if (g > nc) g = nc;
    return g < 1 ? 1 : g;
}

// sequences in flight at once: a group holds one chunk of each, and there are n_seq at most
static int64_t gdr_lanes(int64_t G, int n_seq) { return G < n_seq ? G : n_seq; }

typedef struct {
    gdr_chunk *chunks;  // [max chunks]: batch by batch, step by step, lane by lane
    float *S;           // [lanes, Hv, dk, dv]: the carried states of the batch's sequences
    float *WQ, *K, *A, *P, *Y, *el; // [G, Hv, ...] (see gdr_chunk_floats)
} gdr_work;

static size_t gdr_align(size_t b) { return (b + 255) & ~(size_t)255; }

// Every size grows with T and n_seq, so a buffer sized for the most tokens and sequences (the memory
// plan) holds the layout of any smaller call.
static size_t gdr_work_layout(gdr_work *w, char *base, int T, int n_seq, int Hv, int dk, int dv) {
    int C = GDR_GEMM_CHUNK;
    int64_t G64 = gdr_group(T, n_seq, Hv, dk, dv, C);
    size_t G = (size_t)G64, gh = G * (size_t)Hv, off = 0;
    size_t sizes[8] = {(size_t)gdr_max_chunks(T, n_seq, C) * sizeof(gdr_chunk),
                       (size_t)gdr_lanes(G64, n_seq) * Hv * dk * dv * 4,
                       gh * 2 * C * dk * 4, gh * C * dk * 4, gh * C * C * 4, gh * C * C * 4, gh * 2 * C * dv * 4,
                       gh * 4};
    void **ptrs[8] = {(void **)&w->chunks, (void **)&w->S, (void **)&w->WQ, (void **)&w->K,
                      (void **)&w->A, (void **)&w->P, (void **)&w->Y, (void **)&w->el};
    for (int i = 0; i < 8; i++) {
        *ptrs[i] = base ? base + off : NULL;
        off += gdr_align(sizes[i]);
    }
    return off;
}

static size_t cuda_gated_delta_rule_work_bytes(const backend *be, int T, int n_seq, int Hk, int Hv, int dk,
                                               int dv) {
    (void)be;
    (void)Hk;
    if (T <= 0 || n_seq <= 0 || Hv <= 0) return 0;
    gdr_work w;
    return gdr_work_layout(&w, NULL, T, n_seq, Hv, dk, dv);
}

// One warp per (chunk j of the group, head h, row i): q and k of token start + i L2-normalised (q
// scaled by dk^-0.5, as gdr_kernel and the CPU), into the Q rows of WQ and into K; zeros past n.
static __global__ void gdr_load_kernel(float *WQ, float *K, const bf16 *qkv, const gdr_chunk *chunks, int64_t rows,
                                       int Hk, int Hv, int dk, int dv, int C) {
    int lane = threadIdx.x % 32;
    int64_t ld = 2 * (int64_t)Hk * dk + (int64_t)Hv * dv;
    float qscale = 1.0f / sqrtf((float)dk);
    for (int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; r < rows;
         r += (int64_t)gridDim.x * blockDim.x / 32) {
        int64_t b = r / C; // (chunk, head) = j Hv + h
        int i = (int)(r % C), h = (int)(b % Hv), kh = h / (Hv / Hk);
        gdr_chunk ch = chunks[b / Hv];
        float *q = WQ + (b * 2 * C + C + i) * dk, *k = K + (b * C + i) * dk;
        if (i >= ch.n) {
            for (int d = lane; d < dk; d += 32) q[d] = k[d] = 0.0f;
            continue;
        }
        const bf16 *src = qkv + (int64_t)(ch.start + i) * ld;
        float sq = 0.0f, sk = 0.0f;
        for (int d = lane; d < dk; d += 32) {
            float a = bf(src[(int64_t)kh * dk + d]), c = bf(src[(int64_t)(Hk + kh) * dk + d]);
            sq += a * a;
            sk += c * c;
        }
        float iq = 1.0f / sqrtf(warp_sum(sq) + 1e-6f) * qscale, ik = 1.0f / sqrtf(warp_sum(sk) + 1e-6f);
        for (int d = lane; d < dk; d += 32) {
            q[d] = bf(src[(int64_t)kh * dk + d]) * iq;
            k[d] = bf(src[(int64_t)(Hk + kh) * dk + d]) * ik;
        }
    }
}

// One block per (chunk j of the group, head h), after A = K K^T and P = Q K^T: the gates (thread 0:
// the CPU's sequential sum), A~ into shared memory, the right-hand side [beta v | beta e^gam k] into
// the U0 rows of Y and the W rows of WQ, then (I + A~) X = R by forward substitution, one thread per
// column; P~, Q e^gam, K e^(gam_last - gam), the -O rows of Y zeroed, e^gam_last. Shared memory:
// gdr_solve_smem_bytes (81 KiB at C = 64: past the default 48 KiB, within sm_80..sm_120's opt-in).
static size_t gdr_solve_smem_bytes(int C) {
    return ((size_t)C * C + 2 * (size_t)C + (size_t)C * GDR_SOLVE_THREADS) * sizeof(float);
}

static __global__ void __launch_bounds__(GDR_SOLVE_THREADS)
    gdr_solve_kernel(float *WQ, float *K, float *A, float *P, float *Y, float *el, const bf16 *qkv, const float *g,
                     const float *beta, const gdr_chunk *chunks, int Hk, int Hv, int dk, int dv, int C) {
    extern __shared__ float gdr_solve_smem[];
    float *At = gdr_solve_smem, *gam = At + (size_t)C * C, *bet = gam + C, *xs = bet + C;
    int64_t b = blockIdx.x;
    int h = (int)(b % Hv), tid = threadIdx.x;
    gdr_chunk ch = chunks[b / Hv];
    int n = ch.n;
    int64_t ld = 2 * (int64_t)Hk * dk + (int64_t)Hv * dv;
    float *wq = WQ + b * 2 * C * dk, *k = K + b * C * dk, *a = A + b * C * C, *p = P + b * C * C;
    float *y = Y + b * 2 * C * dv;
    if (tid == 0) {
        float acc = 0.0f;
        for (int i = 0; i < C; i++) {
            if (i < n) acc += g[(int64_t)(ch.start + i) * Hv + h];
            gam[i] = acc; // padded rows: gam_last
            bet[i] = i < n ? beta[(int64_t)(ch.start + i) * Hv + h] : 0.0f;
        }
    }
    __syncthreads();
    for (int e = tid; e < C * C; e += GDR_SOLVE_THREADS) {
        int i = e / C, j = e % C;
        At[e] = j < i && i < n ? a[e] * (bet[i] * expf(gam[i] - gam[j])) : 0.0f;
    }
    for (int e = tid; e < C * (dv + dk); e += GDR_SOLVE_THREADS) {
        int i = e / (dv + dk), c = e % (dv + dk);
        if (c < dv)
            y[(size_t)i * dv + c] =
                i < n ? bet[i] * bf(qkv[(int64_t)(ch.start + i) * ld + 2 * (int64_t)Hk * dk + (int64_t)h * dv + c])
                      : 0.0f;
        else
            wq[(size_t)i * dk + c - dv] = bet[i] * expf(gam[i]) * k[(size_t)i * dk + c - dv];
    }
    __syncthreads();
    // each thread its column in its own slice of shared memory (xs[i][tid]: no bank conflicts, no
    // barrier), A~ broadcast; rows past n are 0 and stay 0 (their A~ rows are 0)
    for (int c = tid; c < dv + dk; c += GDR_SOLVE_THREADS) {
        float *x = c < dv ? y + c : wq + (c - dv);
        size_t st = c < dv ? (size_t)dv : (size_t)dk;
        for (int i = 0; i < n; i++) xs[i * GDR_SOLVE_THREADS + tid] = x[i * st];
        for (int i = 1; i < n; i++) {
            float acc = xs[i * GDR_SOLVE_THREADS + tid];
            for (int j = 0; j < i; j++) acc -= At[i * C + j] * xs[j * GDR_SOLVE_THREADS + tid];
            xs[i * GDR_SOLVE_THREADS + tid] = acc;
        }
        for (int i = 1; i < n; i++) x[i * st] = xs[i * GDR_SOLVE_THREADS + tid];
    }
    float glast = gam[C - 1];
    for (int e = tid; e < C * C; e += GDR_SOLVE_THREADS) {
        int i = e / C, j = e % C;
        p[e] = j <= i && i < n ? p[e] * expf(gam[i] - gam[j]) : 0.0f;
    }
    for (int e = tid; e < C * dk; e += GDR_SOLVE_THREADS) {
        int i = e / dk;
        wq[(size_t)C * dk + e] *= expf(gam[i]);
        k[e] *= expf(glast - gam[i]);
    }
    for (int e = tid; e < C * dv; e += GDR_SOLVE_THREADS) y[(size_t)C * dv + e] = 0.0f;
    if (tid == 0) el[b] = expf(glast);
}

// Between two batches of sequences: the n_store lanes of the one before (its step-0 entries, lane by
// lane) store their S into the state; then the n_load lanes of the next start from theirs, or 0.
// Each element is stored and loaded by the same thread, and the two batches hold different sequences.
static __global__ void gdr_lanes_kernel(float *S, float *state, const gdr_chunk *store, int n_store,
                                        const gdr_chunk *load, int n_load, int Hv, int64_t sd) {
    int64_t hs = (int64_t)Hv * sd;
    GRID_STRIDE(e, (int64_t)(n_store > n_load ? n_store : n_load) * hs) {
        int64_t lane = e / hs, r = e % hs;
        if (lane < n_store) state[(int64_t)store[lane].seq * hs + r] = S[e];
        if (lane < n_load) S[e] = state ? state[(int64_t)load[lane].seq * hs + r] : 0.0f;
    }
}

// One chunk step of a lanes' prefix (tab: the step's a entries; Y and el from the step's first member),
// between GEMM 2 and GEMM 3: S = e^gam_last S per (lane, head), and the step's rows of out from -O.
static __global__ void gdr_step_kernel(float *S, const float *Y, const float *el, bf16 *out, const gdr_chunk *tab,
                                       int a, int Hv, int dk, int dv, int C) {
    int64_t sd = (int64_t)dk * dv, cd = (int64_t)C * dv;
    GRID_STRIDE(e, (int64_t)a * Hv * sd) S[e] *= el[e / sd];
    GRID_STRIDE(e, (int64_t)a * Hv * cd) {
        int64_t m = e / cd, r = e % cd, i = r / dv, c = r % dv; // member m = lane Hv + head
        gdr_chunk ch = tab[m / Hv];
        if (i < ch.n)
            out[((int64_t)(ch.start + i) * Hv + m % Hv) * dv + c] = __float2bfloat16(-Y[(m * 2 * C + C + i) * dv + c]);
    }
}

// Row-major strided-batched fp32 GEMM, C_b = alpha op(A_b) op(B_b) + beta C_b (strides in floats): by
// the row/column-major duality of cuda_gemm (backend_cuda.cu), cuBLAS gets B first, then A.
extern "C" void cuda_gemm_batched_f32(backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha,
                                      const float *a, int lda, int64_t stride_a, const float *b, int ldb,
                                      int64_t stride_b, float beta, float *c, int ldc, int64_t stride_c, int batch) {
    if (m <= 0 || n <= 0 || batch <= 0) return;
    cublasOperation_t ta = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, tb = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (cublas_gemm_needs_64(ta, tb, n, m, k, ldb, lda, ldc)) // a member spans 2^31 elements (check_cuda.h)
        cublas_check(cublasGemmStridedBatchedEx_64((cublasHandle_t)cuda_cublas(be), ta, tb, n, m, k, &alpha, b,
                                                   CUDA_R_32F, ldb, (long long)stride_b, a, CUDA_R_32F, lda,
                                                   (long long)stride_a, &beta, c, CUDA_R_32F, ldc, (long long)stride_c,
                                                   batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    else
        cublas_check(cublasGemmStridedBatchedEx((cublasHandle_t)cuda_cublas(be), ta, tb, n, m, k, &alpha, b,
                                                CUDA_R_32F, ldb, (long long)stride_b, a, CUDA_R_32F, lda,
                                                (long long)stride_a, &beta, c, CUDA_R_32F, ldc, (long long)stride_c,
                                                batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// The carry's plan on the host: the non-empty sequences sorted longest first (ties in order), and
// the lanes of a batch [l0, l1) still running at step j (a prefix of them, by the sort).
typedef struct {
    int32_t start, len, seq;
} gdr_seq;

static int gdr_seq_cmp(const void *x, const void *y) {
    const gdr_seq *a = (const gdr_seq *)x, *b = (const gdr_seq *)y;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return (a->seq > b->seq) - (a->seq < b->seq);
}

static int gdr_active(const gdr_seq *sq, int l0, int l1, int64_t j, int C) {
    int a = 0;
    while (l0 + a < l1 && sq[l0 + a].len > j * C) a++;
    return a;
}

// The sequences' lengths from the caller's host copy cu_host, else from cu_seqlens (device; one
// wait for the stream; for one sequence: T), checked, non-empty ones sorted; returns how many.
static int gdr_sequences(gdr_seq *sq, cudaStream_t st, const int32_t *cu_dev, const int32_t *cu_host, int n_seq,
                         int T) {
    int32_t *cu = (int32_t *)xmalloc(((size_t)n_seq + 1) * sizeof(int32_t));
    if (cu_host) {
        memcpy(cu, cu_host, ((size_t)n_seq + 1) * sizeof(int32_t));
    } else if (n_seq == 1) {
        cu[0] = 0;
        cu[1] = T;
    } else {
        cuda_check(cudaMemcpyAsync(cu, cu_dev, ((size_t)n_seq + 1) * sizeof(int32_t), cudaMemcpyDeviceToHost, st));
        cuda_check(cudaStreamSynchronize(st));
    }
    if (cu[0] != 0 || cu[n_seq] != T)
        fatal("gated delta rule on CUDA: batch boundaries run from %d to %d, not from 0 to %d tokens", (int)cu[0],
              (int)cu[n_seq], T);
    int L = 0;
    for (int s = 0; s < n_seq; s++) {
        if (cu[s + 1] < cu[s])
            fatal("gated delta rule on CUDA: sequence %d's boundaries decrease (%d, then %d)", s, (int)cu[s],
                  (int)cu[s + 1]);
        if (cu[s + 1] > cu[s]) sq[L++] = {cu[s], cu[s + 1] - cu[s], s};
    }
    free(cu);
    qsort(sq, (size_t)L, sizeof *sq, gdr_seq_cmp);
    return L;
}

static void gdr_gemm_path(backend *be, bf16 *out, const bf16 *qkv, const float *g, const float *beta,
                          const int32_t *cu, const int32_t *cu_host, int n_seq, int T, int Hk, int Hv, int dk, int dv,
                          float *state, void *work) {
    int C = GDR_GEMM_CHUNK;
    cudaStream_t st = stream_of(be);
    if (!work) fatal("gated delta rule on CUDA: no work buffer (ops_gated_delta_rule_work_bytes)");
    gdr_work w;
    gdr_work_layout(&w, (char *)work, T, n_seq, Hv, dk, dv);
    int64_t G = gdr_group(T, n_seq, Hv, dk, dv, C), lanes = gdr_lanes(G, n_seq), sd = (int64_t)dk * dv;

    // the plan: batches of at most `lanes` sequences (balanced, longest first), the chunk table
    gdr_seq *sq = (gdr_seq *)xmalloc((size_t)n_seq * sizeof(gdr_seq));
    int L = gdr_sequences(sq, st, cu, cu_host, n_seq, T);
    int64_t nb = (L + lanes - 1) / lanes, total = 0;
    for (int i = 0; i < L; i++) total += (sq[i].len + C - 1) / C;
    if (total > gdr_max_chunks(T, n_seq, C))
        fatal("gated delta rule on CUDA: %" PRId64 " chunks overflow the table", total);
    gdr_chunk *tab = (gdr_chunk *)xmalloc((size_t)total * sizeof(gdr_chunk));
    int64_t *first = (int64_t *)xmalloc((size_t)(nb + 1) * sizeof(int64_t)), e = 0;
    for (int64_t b = 0; b < nb; b++) {
        int l0 = (int)(b * L / nb), l1 = (int)((b + 1) * L / nb);
        first[b] = e;
        for (int64_t j = 0; j * C < sq[l0].len; j++)
            for (int i = l0; i < l1 && sq[i].len > j * C; i++) {
                int32_t t = (int32_t)(j * C);
                tab[e++] = {sq[i].start + t, sq[i].len - t < C ? sq[i].len - t : C, sq[i].seq};
            }
    }
    first[nb] = e;
    // pageable host memory: the copy is staged before the call returns, so tab may go at once
    cuda_check(cudaMemcpyAsync(w.chunks, tab, (size_t)total * sizeof(gdr_chunk), cudaMemcpyHostToDevice, st));
    free(tab);

    size_t smem = gdr_solve_smem_bytes(C);
    if (smem > 48 * 1024)
        cuda_check(cudaFuncSetAttribute(gdr_solve_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int prev_n = 0; // the batch before: its lanes, whose states are still to be stored
    for (int64_t b = 0; b <= nb; b++) {
        int l0 = b < nb ? (int)(b * L / nb) : L, l1 = b < nb ? (int)((b + 1) * L / nb) : L, nl = l1 - l0;
        int n_store = state ? prev_n : 0;
        if (n_store > 0 || nl > 0) {
            int64_t n = (int64_t)(n_store > nl ? n_store : nl) * Hv * sd;
            gdr_lanes_kernel<<<grid_for_threads(n, HY_THREADS), HY_THREADS, 0, st>>>(
                w.S, state, b > 0 ? w.chunks + first[b - 1] : NULL, n_store, w.chunks + first[b < nb ? b : 0], nl, Hv,
                sd);
            cuda_check_launch();
        }
        prev_n = nl;
        if (b == nb) break;
        int64_t steps = ((int64_t)sq[l0].len + C - 1) / C, c0 = first[b];
        for (int64_t j = 0; j < steps;) {
            // a group: the steps from j on that fit G chunks (one always does: lanes <= G)
            int64_t gn = 0, j2 = j;
            for (; j2 < steps; j2++) {
                int a = gdr_active(sq, l0, l1, j2, C);
                if (gn + a > G) break;
                gn += a;
            }
            int64_t gh = gn * Hv, rows = gh * C;
            const gdr_chunk *gt = w.chunks + c0;
            gdr_load_kernel<<<grid_for_threads(rows * 32, HY_THREADS), HY_THREADS, 0, st>>>(w.WQ, w.K, qkv, gt, rows,
                                                                                            Hk, Hv, dk, dv, C);
            cuda_check_launch();
            // A = K K^T, P = Q K^T
            cuda_gemm_batched_f32(be, 0, 1, C, C, dk, 1.0f, w.K, dk, (int64_t)C * dk, w.K, dk, (int64_t)C * dk, 0.0f,
                                  w.A, C, (int64_t)C * C, (int)gh);
            cuda_gemm_batched_f32(be, 0, 1, C, C, dk, 1.0f, w.WQ + (size_t)C * dk, dk, 2 * (int64_t)C * dk, w.K, dk,
                                  (int64_t)C * dk, 0.0f, w.P, C, (int64_t)C * C, (int)gh);
            gdr_solve_kernel<<<(unsigned)gh, GDR_SOLVE_THREADS, smem, st>>>(w.WQ, w.K, w.A, w.P, w.Y, w.el, qkv, g,
                                                                             beta, gt, Hk, Hv, dk, dv, C);
            cuda_check_launch();
            // the group's steps: a lanes from entry o of the group on, members o Hv .. (o + a) Hv
            for (int64_t o = 0; j < j2; j++) {
                int a = gdr_active(sq, l0, l1, j, C), mb = a * Hv;
                size_t b0 = (size_t)o * Hv;
                float *wq = w.WQ + b0 * 2 * C * dk, *k = w.K + b0 * C * dk, *p = w.P + b0 * C * C;
                float *y = w.Y + b0 * 2 * C * dv;
                // [U ; -O1] = [U0 ; 0] - [W ; e^gam Q] S
                cuda_gemm_batched_f32(be, 0, 0, 2 * C, dv, dk, -1.0f, wq, dk, 2 * (int64_t)C * dk, w.S, dv, sd, 1.0f,
                                      y, dv, 2 * (int64_t)C * dv, mb);
                // -O = -O1 - P~ U
                cuda_gemm_batched_f32(be, 0, 0, C, dv, C, -1.0f, p, C, (int64_t)C * C, y, dv, 2 * (int64_t)C * dv,
                                      1.0f, y + (size_t)C * dv, dv, 2 * (int64_t)C * dv, mb);
                // S = e^gam_last S, out = O
                int64_t n = (int64_t)mb * (sd > (int64_t)C * dv ? sd : (int64_t)C * dv);
                gdr_step_kernel<<<grid_for_threads(n, HY_THREADS), HY_THREADS, 0, st>>>(w.S, y, w.el + b0, out, gt + o,
                                                                                      a, Hv, dk, dv, C);
                cuda_check_launch();
                // S += (e^(gam_last - gam) K)^T U
                cuda_gemm_batched_f32(be, 1, 0, dk, dv, C, 1.0f, k, dk, (int64_t)C * dk, y, dv, 2 * (int64_t)C * dv,
                                      1.0f, w.S, dv, sd, mb);
                o += a;
            }
            c0 += gn;
        }
    }
    free(first);
    free(sq);
}

// The batched-GEMM form for prefill (the sequences average at least a chunk), gdr_kernel for
// decoding and short verification blocks, where the GEMM form's steps would be products of a few rows
// (and its one wait for the lengths a wait per decoding step). DFLASH_CUDA_GDR=gemm (or gemm:G)
// forces the GEMM form, DFLASH_CUDA_GDR=CxW gdr_kernel with those sizes (tests).
static void cuda_gated_delta_rule(backend *be, void *out, const void *qkv, const float *g, const float *beta,
                                  const int32_t *cu_seqlens, const int32_t *cu_host, int n_seq, int T, int Hk,
                                  int Hv, int dk, int dv, float *state, void *work) {
    if (n_seq <= 0 || Hv <= 0) return;
    if (Hk < 1 || Hv % Hk) fatal("gated delta rule: %d value heads do not group over %d key heads", Hv, Hk);
    const char *env = getenv("DFLASH_CUDA_GDR");
    int gemm = env && *env ? strncmp(env, "gemm", 4) == 0 : (int64_t)T >= (int64_t)GDR_GEMM_CHUNK * n_seq;
    if (gemm) {
        if (T > 0)
            gdr_gemm_path(be, (bf16 *)out, (const bf16 *)qkv, g, beta, cu_seqlens, cu_host, n_seq, T, Hk, Hv, dk, dv,
                          state, work);
        return;
    }
    if (n_seq > 65535) fatal("gated delta rule on CUDA: %d sequences exceed the grid's y limit", n_seq);
    int C, W;
    gdr_plan(n_seq * Hv, dk, dv, &C, &W);
    size_t smem = gdr_smem_bytes(C, W, dk);
    if (smem > 48 * 1024)
        cuda_check(cudaFuncSetAttribute(gdr_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((unsigned)Hv, (unsigned)n_seq, (unsigned)((dv + W - 1) / W));
    gdr_kernel<<<grid, GDR_THREADS, smem, stream_of(be)>>>((bf16 *)out, (const bf16 *)qkv, g, beta, cu_seqlens, Hk, Hv,
                                                          dk, dv, W, C, state);
    cuda_check_launch();
}

extern "C" const struct deltanet_kernels deltanet_kernels_cuda = {DELTANET_OPS(OP_FILL, cuda_)};
