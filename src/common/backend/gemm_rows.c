// gemm_rows.c: C = alpha A B^T + beta C for a few rows of A, without packing B (see gemm_rows.h).
//
// One kernel per instruction set, chosen at run time (the binary is built for plain x86-64): the
// functions carry target attributes, so the rest of the program needs no -m flags.
//   tile (mr rows of A) x (nr rows of B): mr*nr vector accumulators over k, one vector step of
//   A row i and B row j per FMA, the last partial step loaded under a mask (zeros add nothing),
//   then one lane reduction per output: c = alpha * sum + beta * c (C not read when beta is 0).
// The tile's shape only decides which accumulators live at once, never the arithmetic of one.
#include "common/backend/gemm_rows.h"

#include <immintrin.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

static int rows_isa = -2; // -2 = not chosen yet

static int isa_detect(void) {
    const char *e = getenv("DFLASH_GEMM_ROWS");
    if (e && strcmp(e, "0") == 0) return 0;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return 2;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 1;
    return 0;
}

int gemm_rows_isa(void) {
    if (rows_isa == -2) rows_isa = isa_detect();
    return rows_isa;
}

int gemm_rows_force_isa(int isa) {
    int prev = gemm_rows_isa();
    rows_isa = isa < 0 ? isa_detect() : isa;
    return prev;
}

// The four sums of four 8-lane vectors (lane j = sum of v[j]), each by the same tree: the pairs of
// adjacent lanes, then the pairs of pairs within each 128-bit half, then the two halves. A zero
// vector stands for an absent column, so a tile of 1-3 columns sums each of them as a tile of 4 does.
__attribute__((target("avx2,fma"), always_inline)) static inline __m128 sum4_256(const __m256 v[4]) {
    __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// 16-lane vectors: their two 8-lane halves added first, then as above.
__attribute__((target("avx512f,avx2,fma"), always_inline)) static inline __m128 sum4_512(const __m512 v[4]) {
    __m256 r[4];
    for (int j = 0; j < 4; j++) r[j] = _mm256_add_ps(_mm512_castps512_ps256(v[j]), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v[j]), 1)));
    return sum4_256(r);
}

// c[0..nr) = alpha * s + beta * c (c not read when beta is 0)
__attribute__((target("avx2,fma"), always_inline)) static inline void store_4(__m128 s, int nr, float alpha,
                                                                               float beta, float *c) {
    float o[4];
    _mm_storeu_ps(o, _mm_mul_ps(_mm_set1_ps(alpha), s));
    if (beta == 0.0f)
        for (int j = 0; j < nr; j++) c[j] = o[j];
    else
        for (int j = 0; j < nr; j++) c[j] = o[j] + beta * c[j];
}

// ---- AVX-512: 16 lanes, tiles up to 4 x 4 (16 accumulators + 4 B vectors + 1 A vector of 32 registers)

__attribute__((target("avx512f,avx2,fma"), always_inline)) static inline void tile_512(int mr, int nr, int k, float alpha,
                                                                               const float *a, int lda, const float *b,
                                                                               int ldb, float beta, float *c, int ldc) {
    __m512 acc[4][4], bv[4];
    _Pragma("GCC unroll 4")
    for (int i = 0; i < 4; i++)
        _Pragma("GCC unroll 4")
        for (int j = 0; j < 4; j++) acc[i][j] = _mm512_setzero_ps();
    int p = 0;
    for (; p + 16 <= k; p += 16) {
        _Pragma("GCC unroll 4")
        for (int j = 0; j < nr; j++) bv[j] = _mm512_loadu_ps(b + (size_t)j * ldb + p);
        _Pragma("GCC unroll 4")
        for (int i = 0; i < mr; i++) {
            __m512 av = _mm512_loadu_ps(a + (size_t)i * lda + p);
            _Pragma("GCC unroll 4")
            for (int j = 0; j < nr; j++) acc[i][j] = _mm512_fmadd_ps(av, bv[j], acc[i][j]);
        }
    }
    if (p < k) {
        __mmask16 mk = (__mmask16)((1u << (k - p)) - 1u);
        _Pragma("GCC unroll 4")
        for (int j = 0; j < nr; j++) bv[j] = _mm512_maskz_loadu_ps(mk, b + (size_t)j * ldb + p);
        _Pragma("GCC unroll 4")
        for (int i = 0; i < mr; i++) {
            __m512 av = _mm512_maskz_loadu_ps(mk, a + (size_t)i * lda + p);
            _Pragma("GCC unroll 4")
            for (int j = 0; j < nr; j++) acc[i][j] = _mm512_fmadd_ps(av, bv[j], acc[i][j]);
        }
    }
    _Pragma("GCC unroll 4")
    for (int i = 0; i < mr; i++) store_4(sum4_512(acc[i]), nr, alpha, beta, c + (size_t)i * ldc);
}

// columns [j0, j1) of C, every row of A
__attribute__((target("avx512f,avx2,fma"))) static void cols_512(int m, int j0, int j1, int k, float alpha, const float *a,
                                                         int lda, const float *b, int ldb, float beta, float *c,
                                                         int ldc) {
    for (int j = j0; j < j1; j += 4) {
        int nr = j1 - j < 4 ? j1 - j : 4;
        const float *bj = b + (size_t)j * ldb;
        for (int i = 0; i < m; i += 4) {
            int mr = m - i < 4 ? m - i : 4;
            const float *ai = a + (size_t)i * lda;
            float *cij = c + (size_t)i * ldc + j;
            if (nr == 4) { // constant shapes: the accumulators stay in registers
                switch (mr) {
                case 4: tile_512(4, 4, k, alpha, ai, lda, bj, ldb, beta, cij, ldc); break;
                case 3: tile_512(3, 4, k, alpha, ai, lda, bj, ldb, beta, cij, ldc); break;
                case 2: tile_512(2, 4, k, alpha, ai, lda, bj, ldb, beta, cij, ldc); break;
                default: tile_512(1, 4, k, alpha, ai, lda, bj, ldb, beta, cij, ldc); break;
                }
            } else {
                tile_512(mr, nr, k, alpha, ai, lda, bj, ldb, beta, cij, ldc);
            }
        }
    }
}

// ---- AVX2 + FMA: 8 lanes, tiles up to 4 x 3 (12 accumulators + 3 B vectors + 1 A vector of 16 registers)

__attribute__((target("avx2,fma"), always_inline)) static inline void tile_256(int mr, int nr, int k, float alpha,
                                                                                const float *a, int lda, const float *b,
                                                                                int ldb, float beta, float *c, int ldc) {
    __m256 acc[4][3], bv[3];
    _Pragma("GCC unroll 4")
    for (int i = 0; i < 4; i++)
        _Pragma("GCC unroll 4")
        for (int j = 0; j < 3; j++) acc[i][j] = _mm256_setzero_ps();
    int p = 0;
    for (; p + 8 <= k; p += 8) {
        _Pragma("GCC unroll 4")
        for (int j = 0; j < nr; j++) bv[j] = _mm256_loadu_ps(b + (size_t)j * ldb + p);
        _Pragma("GCC unroll 4")
        for (int i = 0; i < mr; i++) {
            __m256 av = _mm256_loadu_ps(a + (size_t)i * lda + p);
            _Pragma("GCC unroll 4")
            for (int j = 0; j < nr; j++) acc[i][j] = _mm256_fmadd_ps(av, bv[j], acc[i][j]);
        }
    }
    if (p < k) {
        int left = k - p;
        __m256i mk = _mm256_cmpgt_epi32(_mm256_set1_epi32(left), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        _Pragma("GCC unroll 4")
        for (int j = 0; j < nr; j++) bv[j] = _mm256_maskload_ps(b + (size_t)j * ldb + p, mk);
        _Pragma("GCC unroll 4")
        for (int i = 0; i < mr; i++) {
            __m256 av = _mm256_maskload_ps(a + (size_t)i * lda + p, mk);
            _Pragma("GCC unroll 4")
            for (int j = 0; j < nr; j++) acc[i][j] = _mm256_fmadd_ps(av, bv[j], acc[i][j]);
        }
    }
    _Pragma("GCC unroll 4")
    for (int i = 0; i < mr; i++) {
        __m256 four[4] = {acc[i][0], acc[i][1], acc[i][2], _mm256_setzero_ps()};
        store_4(sum4_256(four), nr, alpha, beta, c + (size_t)i * ldc);
    }
}

__attribute__((target("avx2,fma"))) static void cols_256(int m, int j0, int j1, int k, float alpha, const float *a,
                                                          int lda, const float *b, int ldb, float beta, float *c,
                                                          int ldc) {
    for (int j = j0; j < j1; j += 3) {
        int nr = j1 - j < 3 ? j1 - j : 3;
        const float *bj = b + (size_t)j * ldb;
        for (int i = 0; i < m; i += 4) {
            int mr = m - i < 4 ? m - i : 4;
            const float *ai = a + (size_t)i * lda;
            float *cij = c + (size_t)i * ldc + j;
            if (nr == 3) {
                switch (mr) {
                case 4: tile_256(4, 3, k, alpha, ai, lda, bj, ldb, beta, cij, ldc); break;
                case 3: tile_256(3, 3, k, alpha, ai, lda, bj, ldb, beta, cij, ldc); break;
                case 2: tile_256(2, 3, k, alpha, ai, lda, bj, ldb, beta, cij, ldc); break;
                default: tile_256(1, 3, k, alpha, ai, lda, bj, ldb, beta, cij, ldc); break;
                }
            } else {
                tile_256(mr, nr, k, alpha, ai, lda, bj, ldb, beta, cij, ldc);
            }
        }
    }
}

int gemm_rows(int m, int n, int k, float alpha, const float *a, int lda, const float *b, int ldb, float beta,
              float *c, int ldc) {
    int isa = gemm_rows_isa();
    if (isa == 0 || m > GEMM_ROWS_MAX_M || m <= 0 || n <= 0 || k <= 0) return 0;
    int nr = isa == 2 ? 4 : 3, blocks = (n + nr - 1) / nr;
    // threads only when each gets enough to do (a few hundred kFLOP), else the fork costs more
    double flops = 2.0 * m * (double)n * k;
    int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    if (nt > blocks) nt = blocks;
    if (flops < 4e5 * nt) nt = (int)(flops / 4e5) > 1 ? (int)(flops / 4e5) : 1;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int t = omp_get_thread_num(), T = omp_get_num_threads();
        int b0 = (int)((long long)blocks * t / T), b1 = (int)((long long)blocks * (t + 1) / T);
        int j0 = b0 * nr, j1 = b1 * nr < n ? b1 * nr : n;
        if (j0 < j1) {
            if (isa == 2)
                cols_512(m, j0, j1, k, alpha, a, lda, b, ldb, beta, c, ldc);
            else
                cols_256(m, j0, j1, k, alpha, a, lda, b, ldb, beta, c, ldc);
        }
    }
    return 1;
}
