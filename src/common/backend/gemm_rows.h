// gemm_rows.h: the CPU product of a few rows with a weight matrix, C = alpha A B^T + beta C, without
// packing the weights (what the KV-cached decode does every step: R rows, one per sequence, times
// every linear layer and the lm_head).
//
// OpenBLAS copies B into panels for every call; with a few rows of A that copy costs as much as the
// arithmetic (1536 x 576 at 16 rows: 16 GFLOP/s where its large-M rate is 160). Here each output is
// one dot product of a row of A and a row of B read where they lie: register tiles of 4 rows of A
// by 4 rows of B (AVX-512) or 4 by 3 (AVX2 + FMA), the k loop in vector steps, the last partial
// step masked. Every element of C is computed by the same arithmetic whatever m and the tiling are
// (same lanes, same order, same reduction), so a row's result does not depend on which other rows
// share the call: a decode step of 1 sequence and of 32 give the same bits per sequence.
#pragma once

// GEMM_ROWS_MAX_M: the largest m gemm_rows takes (larger products go to OpenBLAS, whose packing is
// then worth it).
#define GEMM_ROWS_MAX_M 32

// gemm_rows: C[m, n] (ldc) = alpha * A[m, k] (lda) . B[n, k]^T (ldb) + beta * C, fp32 row-major,
// split over the OpenMP threads by columns of C (rows of B). Returns 1 when done, 0 when it does
// not apply (m > GEMM_ROWS_MAX_M, or no AVX2/AVX-512 on this CPU, or DFLASH_GEMM_ROWS=0): the
// caller then uses OpenBLAS.
int gemm_rows(int m, int n, int k, float alpha, const float *a, int lda, const float *b, int ldb, float beta,
              float *c, int ldc);

// gemm_rows_isa: which kernel gemm_rows uses: 2 = AVX-512, 1 = AVX2 + FMA, 0 = none (OpenBLAS).
// gemm_rows_force_isa: use the given one (tests check each against the other; 0 = off, -1 = back to
// the CPU's best); returns the previous choice. Not thread-safe: call it before any product.
int gemm_rows_isa(void);
int gemm_rows_force_isa(int isa);
