// deltanet_cpu.c: the Gated DeltaNet ops of deltanet.h on the CPU: the fp32 reference, threaded
// with OpenMP, and deltanet_kernels_cpu, the CPU backend's table. Plain loops, except the gated
// delta rule, which runs in chunks of tokens with OpenBLAS products (the formulation a GPU runs,
// and the one transformers' torch_chunk_gated_delta_rule uses).
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "common/core/check.h"
#include "common/kernels/cpu_kernel.h"
#include "common/kernels/deltanet.h"

// tokens per chunk of the delta rule (transformers and the fla kernels use 64)
#define GDR_CHUNK 64

// ----------------------------------------------------------------------------- causal conv1d + SiLU

// Per sequence: the outputs first (reading the old state), then the new state. The new state row r is
// input L - (K-1) + r of state ++ sequence; when that is still in the old state (L < K-1) it is old
// row r + L >= r, so rows written in increasing r read only rows not yet overwritten.
static void cpu_conv1d_silu(backend *be, void *out_v, const void *x_v, const void *w_v, const int32_t *cu_seqlens,
                            int n_seq, int T, int C, int K, void *state_v) {
    float *out = out_v, *state = state_v;
    const float *x = x_v, *w = w_v;
    (void)be;
    int S = K - 1;
    // w transposed to [K, C]: a token's output row is K rows of x scaled channel by channel (vector work)
    float *wt = xmalloc((size_t)K * (size_t)C * sizeof(float));
    for (int c = 0; c < C; c++)
        for (int j = 0; j < K; j++) wt[(size_t)j * C + c] = w[(size_t)c * K + j];
#pragma omp parallel if ((int64_t)T * C * K >= OPS_PAR_MIN)
    for (int s = 0; s < n_seq; s++) {
        int start = cu_seqlens[s], L = cu_seqlens[s + 1] - start;
        float *st = state ? state + (size_t)s * S * C : NULL;
#pragma omp for
        for (int i = 0; i < L; i++) {
            float *restrict o = out + (size_t)(start + i) * C;
            for (int c = 0; c < C; c++) o[c] = 0.0f;
            for (int j = 0; j < K; j++) {
                int p = i - S + j; // input index inside the sequence; < 0: before its start (the state, or 0)
                const float *xr = p >= 0 ? x + (size_t)(start + p) * C : st ? st + (size_t)(S + p) * C : NULL;
                if (!xr) continue;
                const float *restrict wr = wt + (size_t)j * C;
                for (int c = 0; c < C; c++) o[c] += wr[c] * xr[c];
            }
#pragma omp simd
            for (int c = 0; c < C; c++) o[c] = siluf(o[c]);
        } // implicit barrier: every output of s read the old state
        if (st) {
#pragma omp for
            for (int c = 0; c < C; c++)
                for (int r = 0; r < S; r++) {
                    int p = L - S + r;
                    st[(size_t)r * C + c] = p >= 0 ? x[(size_t)(start + p) * C + c] : st[(size_t)(r + L) * C + c];
                }
        }
    }
    free(wt);
    (void)T;
}

// ----------------------------------------------------------------------------- gates

static void cpu_gdn_gates(backend *be, float *beta, float *g, const void *b_v, const void *a_v, const float *A_log,
                          const float *dt_bias, int T, int Hv) {
    const float *b = b_v, *a = a_v;
    (void)be;
#pragma omp parallel for if ((int64_t)T * Hv >= OPS_PAR_MIN)
    for (int64_t i = 0; i < (int64_t)T * Hv; i++) {
        int h = (int)(i % Hv);
        float u = a[i] + dt_bias[h];
        float sp = u > 20.0f ? u : log1pf(expf(u)); // torch's softplus (beta 1, threshold 20)
        beta[i] = sigmoidf(b[i]);
        g[i] = -expf(A_log[h]) * sp;
    }
}

// ----------------------------------------------------------------------------- gated delta rule
//
// One chunk of n <= 64 tokens of one (sequence, value head), state S [dk, dv] at its start. With
// gam_i = g_0 + ... + g_i (inside the chunk) and u_i = d_i (the delta of token i), the recurrence
// S = e^g S; d = beta (v - S^T k); S += k d^T unrolls to
//   S_i = e^gam_i S + sum_{j<=i} e^(gam_i - gam_j) k_j u_j^T
//   u_i + sum_{j<i} beta_i e^(gam_i - gam_j) (k_i . k_j) u_j = beta_i (v_i - e^gam_i S^T k_i)
// i.e. (I + A) U = R with A strictly lower triangular: U by a unit lower triangular solve (cblas_strsm). Then
//   o_i = e^gam_i S^T q_i + sum_{j<=i} e^(gam_i - gam_j) (q_i . k_j) u_j
//   S' = e^gam_last S + sum_j e^(gam_last - gam_j) k_j u_j^T.
// Every exponent is <= 0 (g <= 0), so nothing overflows. transformers solves for U and for the
// decayed keys separately (W - Kc S, to batch chunks); solving the corrected right-hand side once is
// the same system, and is what the CUDA kernel does too (same order of operations, same results).

// the slice of one thread: Q, K [C, dk]; U, X [C, dv]; A, P [C, C]; gam, beta [C]; S [dk, dv]
static size_t gdr_slice_floats(int dk, int dv) {
    size_t c = GDR_CHUNK;
    return 2 * c * dk + 2 * c * dv + 2 * c * c + 2 * c + (size_t)dk * dv;
}

// The delta rule's scratch: one slice per thread of the backend (be->threads; the op never runs
// more threads than that).
static size_t cpu_gated_delta_rule_work_bytes(const backend *be, int T, int n_seq, int Hk, int Hv, int dk, int dv) {
    int threads = be->threads;
    (void)T, (void)n_seq, (void)Hk, (void)Hv;
    return (size_t)(threads > 0 ? threads : 1) * gdr_slice_floats(dk, dv) * sizeof(float);
}

// dst = src * rsqrt(sum(src^2) + 1e-6) * scale (transformers' l2norm, in fp32)
static void l2norm_row(float *dst, const float *src, int n, float scale) {
    float ss = 0;
    for (int i = 0; i < n; i++) ss += src[i] * src[i];
    float inv = 1.0f / sqrtf(ss + 1e-6f) * scale;
    for (int i = 0; i < n; i++) dst[i] = src[i] * inv;
}

static void gemm_rm(int trans_b, int m, int n, int k, const float *a, int lda, const float *b, int ldb, float beta,
                    float *c, int ldc) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a, lda, b, ldb, beta,
                c, ldc);
}

// cu_host: unused (cu_seqlens is host memory here); the threads are the backend's.
static void cpu_gated_delta_rule(backend *be, void *out_v, const void *qkv_v, const float *g, const float *beta,
                                 const int32_t *cu_seqlens, const int32_t *cu_host, int n_seq, int T, int Hk, int Hv,
                                 int dk, int dv, float *state, void *work_v) {
    float *out = out_v, *work = work_v;
    const float *qkv = qkv_v;
    int threads = be->threads;
    (void)cu_host;
    if (n_seq <= 0 || Hv <= 0) return;
    if (Hk < 1 || Hv % Hk) fatal("gated delta rule: %d value heads do not group over %d key heads", Hv, Hk);
    int64_t ld = 2 * (int64_t)Hk * dk + (int64_t)Hv * dv; // qkv row
    int group = Hv / Hk, Cc = GDR_CHUNK, pairs = n_seq * Hv;
    float qscale = 1.0f / sqrtf((float)dk);
    if (threads < 1) threads = 1;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (pairs > 1 && (int64_t)T * Hv * dk * dv >= OPS_PAR_MIN)
    for (int u = 0; u < pairs; u++) {
        int s = u / Hv, h = u % Hv, kh = h / group;
        float *Q = work + (size_t)omp_get_thread_num() * gdr_slice_floats(dk, dv);
        float *K = Q + (size_t)Cc * dk, *U = K + (size_t)Cc * dk, *X = U + (size_t)Cc * dv;
        float *A = X + (size_t)Cc * dv, *P = A + (size_t)Cc * Cc, *gam = P + (size_t)Cc * Cc, *bet = gam + Cc;
        float *S = bet + Cc;
        float *st = state ? state + ((size_t)s * Hv + h) * dk * dv : NULL;
        if (st) memcpy(S, st, (size_t)dk * dv * sizeof(float));
        else memset(S, 0, (size_t)dk * dv * sizeof(float));
        for (int c0 = cu_seqlens[s]; c0 < cu_seqlens[s + 1]; c0 += Cc) {
            int n = cu_seqlens[s + 1] - c0 < Cc ? cu_seqlens[s + 1] - c0 : Cc;
            for (int i = 0; i < n; i++) {
                const float *row = qkv + (size_t)(c0 + i) * ld;
                l2norm_row(Q + (size_t)i * dk, row + (size_t)kh * dk, dk, qscale);
                l2norm_row(K + (size_t)i * dk, row + (size_t)(Hk + kh) * dk, dk, 1.0f);
                memcpy(U + (size_t)i * dv, row + 2 * (size_t)Hk * dk + (size_t)h * dv, (size_t)dv * sizeof(float));
                bet[i] = beta[(size_t)(c0 + i) * Hv + h];
                gam[i] = (i ? gam[i - 1] : 0.0f) + g[(size_t)(c0 + i) * Hv + h];
            }
            // A = K K^T, P = Q K^T [n, n], then the decays and masks
            gemm_rm(1, n, n, dk, K, dk, K, dk, 0.0f, A, Cc);
            gemm_rm(1, n, n, dk, Q, dk, K, dk, 0.0f, P, Cc);
            for (int i = 0; i < n; i++)
                for (int j = 0; j < n; j++) {
                    float e = j <= i ? expf(gam[i] - gam[j]) : 0.0f;
                    A[(size_t)i * Cc + j] *= j < i ? bet[i] * e : 0.0f;
                    P[(size_t)i * Cc + j] *= e;
                }
            // R = beta (V - e^gam K S), then (I + A) U = R by a triangular solve
            gemm_rm(0, n, dv, dk, K, dk, S, dv, 0.0f, X, dv);
            for (int i = 0; i < n; i++) {
                float e = expf(gam[i]);
                float *ui = U + (size_t)i * dv;
                const float *xi = X + (size_t)i * dv;
                for (int c = 0; c < dv; c++) ui[c] = bet[i] * (ui[c] - e * xi[c]);
            }
            // I + A is unit lower triangular (A is 0 on and above the diagonal): a triangular solve
            cblas_strsm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, n, dv, 1.0f, A, Cc, U, dv);
            // O = diag(e^gam) Q S + P U, into X, then out
            gemm_rm(0, n, dv, dk, Q, dk, S, dv, 0.0f, X, dv);
            for (int i = 0; i < n; i++) {
                float e = expf(gam[i]);
                for (int c = 0; c < dv; c++) X[(size_t)i * dv + c] *= e;
            }
            gemm_rm(0, n, dv, n, P, Cc, U, dv, 1.0f, X, dv);
            for (int i = 0; i < n; i++)
                memcpy(out + ((size_t)(c0 + i) * Hv + h) * dv, X + (size_t)i * dv, (size_t)dv * sizeof(float));
            // S = e^gam_last S + (diag(e^(gam_last - gam)) K)^T U
            float glast = gam[n - 1];
            for (int i = 0; i < n; i++) {
                float e = expf(glast - gam[i]);
                for (int d = 0; d < dk; d++) K[(size_t)i * dk + d] *= e;
            }
            float el = expf(glast);
            for (size_t e = 0; e < (size_t)dk * dv; e++) S[e] *= el;
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, dk, dv, n, 1.0f, K, dk, U, dv, 1.0f, S, dv);
        }
        if (st) memcpy(st, S, (size_t)dk * dv * sizeof(float));
    }
}

const struct deltanet_kernels deltanet_kernels_cpu = {DELTANET_OPS(OP_FILL, cpu_)};
